//! APEv2 (and APEv1) tags at the end of a file, and Lyrics3v2 blocks.

use retagfs_store::ScannedPicture;

use crate::error::{malformed, Result};
use crate::source::{le_u32, Source};
use crate::tags::keys::TagList;
use crate::tags::picture::picture;
use crate::tags::text::lossy;

const FOOTER_LEN: u64 = 32;

/// An APE tag ending at `end`: its start offset, tags and pictures.
pub struct ApeTag {
    pub start: u64,
    pub tags: Vec<(String, String)>,
    pub pictures: Vec<ScannedPicture>,
}

/// Reads the APE tag whose footer ends at `end`, if there is one after
/// `floor` (where the leading tag ends).
pub fn read_before(src: &Source<'_>, floor: u64, end: u64) -> Result<Option<ApeTag>> {
    if end < floor + FOOTER_LEN {
        return Ok(None);
    }
    let footer = src.read(end - FOOTER_LEN, FOOTER_LEN, "APE footer")?;
    if &footer[..8] != b"APETAGEX" {
        return Ok(None);
    }
    let size = u64::from(le_u32(&footer[12..]));
    let count = le_u32(&footer[16..]);
    let flags = le_u32(&footer[20..]);
    let header = if flags & (1 << 31) != 0 { FOOTER_LEN } else { 0 };
    if size < FOOTER_LEN || size + header > end - floor {
        return malformed(format!("APE tag size {size} does not fit before offset {end}"));
    }
    let start = end - size - header;
    let items = src.read(end - size, size - FOOTER_LEN, "APE tag items")?;
    let (tags, pictures) = parse_items(&items, count);
    Ok(Some(ApeTag {
        start,
        tags,
        pictures,
    }))
}

fn parse_items(b: &[u8], count: u32) -> (Vec<(String, String)>, Vec<ScannedPicture>) {
    let mut tags = TagList::new();
    let mut pictures = Vec::new();
    let mut pos = 0usize;
    for _ in 0..count {
        if pos + 8 > b.len() {
            break;
        }
        let len = le_u32(&b[pos..]) as usize;
        let flags = le_u32(&b[pos + 4..]);
        let key_start = pos + 8;
        let Some(key_len) = b[key_start..].iter().position(|&c| c == 0) else {
            break;
        };
        let value_start = key_start + key_len + 1;
        let Some(value) = value_start.checked_add(len).and_then(|e| b.get(value_start..e)) else {
            break;
        };
        let key = String::from_utf8_lossy(&b[key_start..key_start + key_len]);
        match (flags >> 1) & 3 {
            0 => {
                for v in lossy(value).split('\0') {
                    tags.push_native(&key, v);
                }
            }
            1 if key.to_ascii_lowercase().starts_with("cover art") => {
                // Binary cover: a file name, NUL, then the image.
                if let Some(nul) = value.iter().position(|&c| c == 0) {
                    let picture_type = if key.to_ascii_lowercase().contains("back") {
                        4
                    } else {
                        3
                    };
                    pictures.push(picture(
                        value[nul + 1..].to_vec(),
                        "",
                        picture_type,
                        String::new(),
                        (0, 0, 0),
                    ));
                }
            }
            _ => {}
        }
        pos = value_start + len;
    }
    (tags.finish(), pictures)
}

/// Start of a Lyrics3v2 block ending at `end` (before an ID3v1 tag), if
/// there is one after `floor`.
pub fn lyrics3_before(src: &Source<'_>, floor: u64, end: u64) -> Result<Option<u64>> {
    if end < floor + 15 {
        return Ok(None);
    }
    let tail = src.read(end - 15, 15, "Lyrics3 footer")?;
    if &tail[6..] != b"LYRICS200" {
        return Ok(None);
    }
    let size: u64 = match std::str::from_utf8(&tail[..6]).ok().and_then(|s| s.parse().ok()) {
        Some(n) => n,
        None => return Ok(None),
    };
    let Some(start) = (end - 15).checked_sub(size).filter(|&start| start >= floor) else {
        return Ok(None);
    };
    let begin = src.read(start, 11, "Lyrics3 header")?;
    Ok((begin == b"LYRICSBEGIN").then_some(start))
}
