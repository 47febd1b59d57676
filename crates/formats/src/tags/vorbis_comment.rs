//! Vorbis comments (FLAC VORBIS_COMMENT block, Ogg Vorbis and Opus comment
//! packets): parse into canonical tags and pictures, and encode from them.

use base64::Engine;
use retagfs_store::ScannedPicture;

use crate::error::{malformed, Result};
use crate::source::le_u32;
use crate::tags::keys::{self, TagList};
use crate::tags::picture::parse_flac_picture;
use crate::tags::text::lossy;

/// Tags and pictures found in a comment list.
pub struct Comments {
    /// The vendor string: the encoder that wrote the file.
    pub vendor: String,
    pub tags: Vec<(String, String)>,
    pub pictures: Vec<ScannedPicture>,
}

/// Parses a comment list (vendor string, count, `KEY=value` entries); `b`
/// starts at the vendor length. Trailing bytes (Vorbis framing bit, Opus
/// padding) are ignored.
pub fn parse(b: &[u8]) -> Result<Comments> {
    let mut pos = 0usize;
    let field = |pos: &mut usize, what: &str| -> Result<&[u8]> {
        let len = b
            .get(*pos..*pos + 4)
            .map(le_u32)
            .ok_or_else(|| crate::ProbeError::Malformed(format!("{what} length cut off")))?
            as usize;
        let start = *pos + 4;
        match start.checked_add(len) {
            Some(end) if end <= b.len() => {
                *pos = end;
                Ok(&b[start..end])
            }
            _ => malformed(format!(
                "{what} of {len} bytes runs past the end of the comment block"
            )),
        }
    };
    let vendor = lossy(field(&mut pos, "vendor string")?).into_owned();
    let count = b
        .get(pos..pos + 4)
        .map(le_u32)
        .ok_or_else(|| crate::ProbeError::Malformed("comment count cut off".into()))?;
    pos += 4;
    let mut tags = TagList::new();
    let mut pictures = Vec::new();
    for _ in 0..count {
        let entry = field(&mut pos, "comment")?;
        let Some(eq) = entry.iter().position(|&c| c == b'=') else {
            continue;
        };
        let (name, value) = (&entry[..eq], &entry[eq + 1..]);
        // A picture's base64 (hundreds of kilobytes) is decoded from the
        // bytes, never checked as text.
        if name.eq_ignore_ascii_case(b"metadata_block_picture") {
            pictures.extend(decode_picture(value));
        } else if name.eq_ignore_ascii_case(b"coverart") || name.eq_ignore_ascii_case(b"coverartmime") {
            // Legacy unofficial art fields: not tags.
        } else {
            tags.push_native(&lossy(name), &lossy(value));
        }
    }
    Ok(Comments {
        vendor,
        tags: tags.finish(),
        pictures,
    })
}

fn decode_picture(b64: &[u8]) -> Option<ScannedPicture> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim_ascii())
        .ok()?;
    parse_flac_picture(&bytes).ok()
}

/// Vorbis field name under which a canonical key is written.
pub fn field_name(key: &str) -> String {
    match keys::mapping(key) {
        Some(m) => m.vorbis.to_string(),
        None => key.to_ascii_uppercase(),
    }
}

/// Vendor string written into synthesized comment blocks of tracks whose
/// own is not known (a file without comments, a store scanned before
/// version 9).
pub const VENDOR: &str = concat!("retagfs ", env!("CARGO_PKG_VERSION"));

/// Longest original vendor string served: encoders write a few dozen
/// bytes; a longer one (a hostile store row) gives way to [`VENDOR`].
const MAX_VENDOR_LEN: usize = 1024;

/// The vendor string served for a track's stored one: the original
/// encoder's name (mediainfo shows it as the writing library), or ours.
pub fn served_vendor(stored: Option<&str>) -> &str {
    match stored {
        Some(v) if !v.is_empty() && v.len() <= MAX_VENDOR_LEN => v,
        _ => VENDOR,
    }
}

/// Length of [`encode`]'s output for these tags, without building it.
pub fn encoded_len(vendor: &str, tags: &[(String, String)]) -> u64 {
    let entries: u64 = tags
        .iter()
        .map(|(k, v)| 4 + field_name(k).len() as u64 + 1 + v.len() as u64)
        .sum();
    4 + vendor.len() as u64 + 4 + entries
}

/// Encodes a comment list (no framing bit).
pub fn encode(vendor: &str, tags: &[(String, String)], out: &mut Vec<u8>) {
    out.extend_from_slice(&(vendor.len() as u32).to_le_bytes());
    out.extend_from_slice(vendor.as_bytes());
    out.extend_from_slice(&(tags.len() as u32).to_le_bytes());
    for (k, v) in tags {
        let name = field_name(k);
        out.extend_from_slice(&((name.len() + 1 + v.len()) as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_parse_round_trip() {
        let tags = vec![
            ("albumartist".to_string(), "Ä B".to_string()),
            ("artist".to_string(), "One".to_string()),
            ("artist".to_string(), "Two".to_string()),
            ("my key".to_string(), "v=w".to_string()),
        ];
        let mut out = Vec::new();
        encode("libFLAC 1.4.2", &tags, &mut out);
        assert_eq!(out.len() as u64, encoded_len("libFLAC 1.4.2", &tags));
        let parsed = parse(&out).unwrap();
        assert_eq!(parsed.tags, tags);
        assert_eq!(parsed.vendor, "libFLAC 1.4.2");
    }

    /// A comment list of raw entries.
    fn comment_list(entries: &[&[u8]]) -> Vec<u8> {
        let mut out = 0u32.to_le_bytes().to_vec();
        out.extend((entries.len() as u32).to_le_bytes());
        for e in entries {
            out.extend((e.len() as u32).to_le_bytes());
            out.extend_from_slice(e);
        }
        out
    }

    #[test]
    fn pictures_legacy_art_and_bytes_that_are_not_utf8() {
        let image = b"\x89PNG\r\n\x1a\n not really".to_vec();
        let mut block = 3u32.to_be_bytes().to_vec();
        block.extend(9u32.to_be_bytes());
        block.extend(b"image/png");
        block.extend(0u32.to_be_bytes());
        block.extend([0u8; 16]);
        block.extend((image.len() as u32).to_be_bytes());
        block.extend(&image);
        let b64 = base64::engine::general_purpose::STANDARD.encode(&block);
        let picture = format!("metadata_block_picture= {b64}\n");
        let parsed = parse(&comment_list(&[
            picture.as_bytes(),
            b"COVERART=aGVsbG8=",
            b"TITLE=Caf\xe9",
            b"no separator",
        ]))
        .unwrap();
        assert_eq!(parsed.tags, [("title".to_string(), "Caf\u{fffd}".to_string())]);
        assert_eq!(parsed.pictures.len(), 1);
        assert_eq!(parsed.pictures[0].art.data, image);
        assert_eq!(parsed.pictures[0].picture_type, 3);
    }

    #[test]
    fn an_unknown_empty_or_overlong_vendor_is_served_as_ours() {
        assert_eq!(served_vendor(Some("Lavf60.3.100")), "Lavf60.3.100");
        assert_eq!(served_vendor(None), VENDOR);
        assert_eq!(served_vendor(Some("")), VENDOR);
        assert_eq!(served_vendor(Some(&"x".repeat(5000))), VENDOR);
    }

    #[test]
    fn lying_lengths_are_errors_not_panics() {
        let mut out = Vec::new();
        encode(VENDOR, &[("a".into(), "b".into())], &mut out);
        let n = out.len();
        out[n - 7] = 0xff;
        assert!(parse(&out).is_err());
        assert!(parse(&[1, 2]).is_err());
    }
}
