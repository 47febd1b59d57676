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

/// Whether `fold(value)` holds `folded_needle` (itself folded). ASCII
/// text, most tags, is compared in place: folding it only lowers its case.
pub fn contains_folded(value: &str, folded_needle: &str) -> bool {
    if !value.is_ascii() {
        return fold(value).contains(folded_needle);
    }
    let needle = folded_needle.as_bytes();
    // A needle that is not ASCII matches no window here: the windows'
    // lowered bytes are all ASCII.
    needle.is_empty()
        || value
            .as_bytes()
            .windows(needle.len())
            .any(|w| w.iter().zip(needle).all(|(a, b)| a.to_ascii_lowercase() == *b))
}

#[cfg(test)]
mod tests {
    use super::{contains_folded, fold};

    #[test]
    fn case_and_accents_fold_away() {
        assert_eq!(fold("Beyoncé"), "beyonce");
        assert_eq!(fold("SIGUR RÓS"), "sigur ros");
        assert_eq!(fold("Ｆｕｌｌ"), "full");
        assert_eq!(fold("Straße"), "straße");
    }

    #[test]
    fn ascii_values_are_searched_as_folding_would() {
        for (value, needle) in [
            ("Sigur Ros", "ros"),
            ("ABBA", "bb"),
            ("ABBA", ""),
            ("ab", "abc"),
            ("Cafe", "café"),
            ("Café", "cafe"),
            ("x", "x"),
        ] {
            assert_eq!(
                contains_folded(value, &fold(needle)),
                fold(value).contains(&fold(needle)),
                "{value:?} {needle:?}"
            );
        }
    }
}
