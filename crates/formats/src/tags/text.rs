//! Text read from files.

use std::borrow::Cow;

/// `bytes` as text, with U+FFFD in place of what is not UTF-8. Checked
/// with SIMD first: the standard library's lossy decoding goes byte by
/// byte, and tag values run to tens of kilobytes (embedded lyrics).
pub(crate) fn lossy(bytes: &[u8]) -> Cow<'_, str> {
    match simdutf8::basic::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_borrowed_and_bad_bytes_are_replaced() {
        assert!(matches!(
            lossy("ünïcödé ♪".as_bytes()),
            Cow::Borrowed("ünïcödé ♪")
        ));
        assert_eq!(lossy(b"Caf\xe9 \xff!"), "Caf\u{fffd} \u{fffd}!");
    }
}
