//! Text as queries compare it: case and accents folded, so that
//! `beyonce` finds "Beyoncé" and `SIGUR` finds "Sigur Rós".

use unicode_normalization::char::is_combining_mark;
use unicode_normalization::UnicodeNormalization;

/// `text` decomposed (NFKD), without its combining marks, in lower case.
pub fn fold(text: &str) -> String {
    text.nfkd()
        .filter(|c| !is_combining_mark(*c))
        .flat_map(char::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::fold;

    #[test]
    fn case_and_accents_fold_away() {
        assert_eq!(fold("Beyoncé"), "beyonce");
        assert_eq!(fold("SIGUR RÓS"), "sigur ros");
        assert_eq!(fold("Ｆｕｌｌ"), "full");
        assert_eq!(fold("Straße"), "straße");
    }
}
