//! ID3v1 / ID3v1.1 tags: the last 128 bytes of a file (and the 227-byte
//! enhanced `TAG+` block before them).

use crate::tags::genres;
use crate::tags::keys::TagList;

pub const LEN: u64 = 128;
pub const ENHANCED_LEN: u64 = 227;

/// Whether these 128 bytes are an ID3v1 tag.
pub fn is_tag(b: &[u8]) -> bool {
    b.len() == LEN as usize && b.starts_with(b"TAG")
}

/// Parses a 128-byte ID3v1 tag (Latin-1 text).
pub fn parse(b: &[u8]) -> Vec<(String, String)> {
    let text = |r: std::ops::Range<usize>| -> String {
        let field = &b[r];
        let end = field.iter().position(|&c| c == 0).unwrap_or(field.len());
        field[..end]
            .iter()
            .map(|&c| c as char)
            .collect::<String>()
            .trim()
            .to_string()
    };
    let mut tags = TagList::new();
    tags.push("title", &text(3..33));
    tags.push("artist", &text(33..63));
    tags.push("album", &text(63..93));
    tags.push("date", &text(93..97));
    // ID3v1.1: a zero byte before the last comment byte makes it a track number.
    if b[125] == 0 && b[126] != 0 {
        tags.push("comment", &text(97..125));
        tags.push("tracknumber", &b[126].to_string());
    } else {
        tags.push("comment", &text(97..127));
    }
    if let Some(g) = genres::by_index(b[127] as usize) {
        tags.push("genre", g);
    }
    tags.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v1_1() {
        let mut b = vec![0u8; 128];
        b[..3].copy_from_slice(b"TAG");
        b[3..8].copy_from_slice(b"Title");
        b[33..34].copy_from_slice(b"A");
        b[93..97].copy_from_slice(b"1999");
        b[126] = 7;
        b[127] = 17;
        let t = parse(&b);
        assert!(t.contains(&("title".into(), "Title".into())));
        assert!(t.contains(&("tracknumber".into(), "7".into())));
        assert!(t.contains(&("genre".into(), "Rock".into())));
        assert!(t.contains(&("date".into(), "1999".into())));
    }
}
