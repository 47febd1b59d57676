//! Backing paths as text. The store keeps paths as text (SQLite `TEXT`,
//! strings in `export`), but a Linux file name is any bytes but `/` and
//! NUL: names copied from an old Windows share, a ZIP or a CD rip are often
//! Latin-1. Each byte that is not part of valid UTF-8 is kept as a
//! character of Unicode's private use plane 16, U+10FF00 + the byte, so
//! that every path has one text and the text gives the path back. A name
//! holding such a character itself has its bytes kept alike. Every
//! character from U+100000 up is encoded starting with byte F4: a path
//! without that byte is its own text.

use std::borrow::Cow;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// Where the characters standing for bytes start.
const BYTE_BASE: u32 = 0x10FF00;

/// The first byte of the UTF-8 encoding of every character from
/// [`BYTE_BASE`] up (and of others of plane 16, which are left alone).
const PLANE_16_LEAD: u8 = 0xF4;

/// The text the store keeps for `path` (borrowed when the path is UTF-8
/// with no character in the range used for bytes).
pub fn path_to_text(path: &Path) -> Cow<'_, str> {
    bytes_to_text(path.as_os_str().as_bytes())
}

/// [`path_to_text`] of a path, or of a name, given as bytes.
pub fn bytes_to_text(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        if !bytes.contains(&PLANE_16_LEAD) {
            return Cow::Borrowed(text);
        }
    }
    let mut text = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if u32::from(c) >= BYTE_BASE {
                let mut buf = [0; 4];
                c.encode_utf8(&mut buf)
                    .bytes()
                    .for_each(|b| text.push(byte_char(b)));
            } else {
                text.push(c);
            }
        }
        chunk.invalid().iter().for_each(|&b| text.push(byte_char(b)));
    }
    Cow::Owned(text)
}

/// The path `text` stands for ([`path_to_text`] backwards).
pub fn text_to_path(text: &str) -> Cow<'_, Path> {
    if !text.as_bytes().contains(&PLANE_16_LEAD) {
        return Cow::Borrowed(Path::new(text));
    }
    let mut bytes = Vec::with_capacity(text.len());
    for c in text.chars() {
        match u32::from(c).checked_sub(BYTE_BASE) {
            Some(byte) => bytes.push(byte as u8),
            None => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    Cow::Owned(OsString::from_vec(bytes).into())
}

/// `text` as a person reads it: each character standing for a byte shown
/// as the Latin-1 character of that byte (most such names are Latin-1 or
/// Windows-1252), so that `Caf\xe9.mp3` reads `Café.mp3`. For names served
/// in a view and for messages, never to find the file again.
pub fn text_for_display(text: &str) -> Cow<'_, str> {
    if !text.as_bytes().contains(&PLANE_16_LEAD) {
        return Cow::Borrowed(text);
    }
    let shown = text
        .chars()
        .map(|c| match u32::from(c).checked_sub(BYTE_BASE) {
            Some(byte) => char::from(byte as u8),
            None => c,
        })
        .collect();
    Cow::Owned(shown)
}

fn byte_char(b: u8) -> char {
    char::from_u32(BYTE_BASE + u32::from(b)).expect("U+10FF00..U+10FFFF are characters")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::ffi::OsStr;

    #[test]
    fn utf8_paths_are_their_own_text() {
        let path = Path::new("/music/Björk/Homogenic/01 Hunter.flac");
        assert!(matches!(path_to_text(path), Cow::Borrowed(_)));
        assert_eq!(path_to_text(path), "/music/Björk/Homogenic/01 Hunter.flac");
        assert_eq!(text_to_path(&path_to_text(path)), path);
    }

    #[test]
    fn a_latin1_name_is_kept_byte_for_byte_and_shown_as_latin1() {
        let path = Path::new(OsStr::from_bytes(b"/music/Caf\xe9/\xc9t\xe9.mp3"));
        let text = path_to_text(path);
        assert_eq!(text.chars().filter(|&c| u32::from(c) >= BYTE_BASE).count(), 3);
        assert_eq!(text_to_path(&text), path);
        assert_eq!(text_for_display(&text), "/music/Café/Été.mp3");
    }

    #[test]
    fn a_name_holding_a_character_of_the_byte_range_keeps_it() {
        let path = Path::new("/music/odd \u{10FF41} name.flac");
        let text = path_to_text(path);
        assert_ne!(text, "/music/odd \u{10FF41} name.flac");
        assert_eq!(text_to_path(&text), path);
    }

    proptest! {
        #[test]
        fn every_path_comes_back_from_its_text(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let path = Path::new(OsStr::from_bytes(&bytes));
            let text = path_to_text(path);
            let back = text_to_path(&text);
            prop_assert_eq!(back.as_os_str().as_bytes(), &bytes[..]);
        }

        #[test]
        fn paths_with_plane_16_characters_come_back(s in "[a-z/\u{10FF00}-\u{10FFFF}\u{10000}-\u{10010}]{0,16}") {
            let path = Path::new(&s);
            let text = path_to_text(path);
            let back = text_to_path(&text);
            prop_assert_eq!(back, path);
        }
    }
}
