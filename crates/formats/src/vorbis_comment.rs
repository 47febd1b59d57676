//! Vorbis comments (FLAC VORBIS_COMMENT block, Ogg Vorbis and Opus comment
//! packets): parse into canonical tags and pictures, and encode from them.

use base64::Engine;
use retagfs_store::ScannedPicture;

use crate::error::{malformed, Result};
use crate::keys::{self, TagList};
use crate::picture::parse_flac_picture;
use crate::source::le_u32;

/// Tags and pictures found in a comment list.
pub struct Comments {
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
    field(&mut pos, "vendor string")?;
    let count = b
        .get(pos..pos + 4)
        .map(le_u32)
        .ok_or_else(|| crate::ProbeError::Malformed("comment count cut off".into()))?;
    pos += 4;
    let mut tags = TagList::new();
    let mut pictures = Vec::new();
    for _ in 0..count {
        let entry = field(&mut pos, "comment")?;
        let entry = String::from_utf8_lossy(entry);
        let Some((name, value)) = entry.split_once('=') else {
            continue;
        };
        match name.to_ascii_lowercase().as_str() {
            "metadata_block_picture" => {
                if let Some(p) = decode_picture(value) {
                    pictures.push(p);
                }
            }
            // Legacy unofficial art fields: not tags.
            "coverart" | "coverartmime" => {}
            _ => tags.push_native(name, value),
        }
    }
    Ok(Comments {
        tags: tags.finish(),
        pictures,
    })
}

fn decode_picture(b64: &str) -> Option<ScannedPicture> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim().as_bytes())
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

/// Vendor string written into synthesized comment blocks.
pub const VENDOR: &str = concat!("retagfs ", env!("CARGO_PKG_VERSION"));

/// Length of [`encode`]'s output for these tags, without building it.
pub fn encoded_len(tags: &[(String, String)]) -> u64 {
    let entries: u64 = tags
        .iter()
        .map(|(k, v)| 4 + field_name(k).len() as u64 + 1 + v.len() as u64)
        .sum();
    4 + VENDOR.len() as u64 + 4 + entries
}

/// Encodes a comment list (no framing bit).
pub fn encode(tags: &[(String, String)], out: &mut Vec<u8>) {
    out.extend_from_slice(&(VENDOR.len() as u32).to_le_bytes());
    out.extend_from_slice(VENDOR.as_bytes());
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
        encode(&tags, &mut out);
        assert_eq!(out.len() as u64, encoded_len(&tags));
        assert_eq!(parse(&out).unwrap().tags, tags);
    }

    #[test]
    fn lying_lengths_are_errors_not_panics() {
        let mut out = Vec::new();
        encode(&[("a".into(), "b".into())], &mut out);
        let n = out.len();
        out[n - 7] = 0xff;
        assert!(parse(&out).is_err());
        assert!(parse(&[1, 2]).is_err());
    }
}
