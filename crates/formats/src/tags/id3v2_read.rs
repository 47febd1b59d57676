//! ID3v2 tags (v2.2, v2.3, v2.4) at the start of a file: find their extent
//! and read them into canonical tags with the `id3` crate.

use id3::frame::Content;
use id3::TagLike;
use retagfs_store::ScannedPicture;

use crate::error::Result;
use crate::source::Source;
use crate::tags::genres;
use crate::tags::keys::{self, TagList};
use crate::tags::picture::picture;

/// Size of an ID3v2 header (and footer).
pub(crate) const HEADER_LEN: u64 = 10;

/// Total size of the ID3v2 tag whose 10-byte header is `h`, or `None` if
/// `h` is not a tag header.
fn tag_len(h: &[u8]) -> Option<u64> {
    if h.len() < 10 || &h[..3] != b"ID3" || h[3] == 0xff || h[4] == 0xff {
        return None;
    }
    if h[6..10].iter().any(|b| b & 0x80 != 0) {
        return None;
    }
    let size = h[6..10]
        .iter()
        .fold(0u64, |acc, &b| (acc << 7) | u64::from(b & 0x7f));
    let footer = if h[3] == 4 && h[5] & 0x10 != 0 {
        HEADER_LEN
    } else {
        0
    };
    Some(HEADER_LEN + size + footer)
}

/// Offsets (start, len) of the ID3v2 tags in a row at the start of the file.
fn tag_spans(src: &Source<'_>) -> Result<Vec<(u64, u64)>> {
    let mut spans = Vec::new();
    let mut pos = 0u64;
    while let Some(len) = tag_len(&src.read_upto(pos, HEADER_LEN)?) {
        if pos + len > src.size() {
            return Err(crate::ProbeError::Truncated(format!(
                "ID3v2 tag at offset {pos} claims {len} bytes, past the end of the file"
            )));
        }
        spans.push((pos, len));
        pos += len;
    }
    Ok(spans)
}

/// Offset just past the ID3v2 tags at the start of the file (0 if none).
pub fn skip_tags(src: &Source<'_>) -> Result<u64> {
    Ok(tag_spans(src)?.last().map_or(0, |(s, l)| s + l))
}

/// Reads the ID3v2 tags at the start of the file; returns the offset past
/// them. Frames the `id3` crate cannot parse are skipped, not fatal.
pub fn read_leading(src: &Source<'_>, tags: &mut TagList, pictures: &mut Vec<ScannedPicture>) -> Result<u64> {
    let spans = tag_spans(src)?;
    for &(start, len) in &spans {
        let bytes = src.read(start, len, "ID3v2 tag")?;
        read_tag_bytes(&bytes, tags, pictures);
    }
    Ok(spans.last().map_or(0, |(s, l)| s + l))
}

/// Parses one complete ID3v2 tag (header included) into canonical tags.
pub fn read_tag_bytes(bytes: &[u8], tags: &mut TagList, pictures: &mut Vec<ScannedPicture>) {
    let parsed = id3::partial_tag_ok(id3::Tag::read_from2(std::io::Cursor::new(bytes)));
    let Ok(tag) = parsed else {
        return;
    };
    let has_tdrc = tag.get("TDRC").is_some();
    // The id3 crate splits ID3v2.3 text on '/', but in v2.3 a slash is just
    // a character ("AC/DC"): only v2.4 has a value separator (NUL).
    let v23 = tag.version() != id3::Version::Id3v24;
    for frame in tag.frames() {
        add_frame(frame, has_tdrc, v23, tags, pictures);
    }
}

fn add_frame(
    frame: &id3::Frame,
    has_tdrc: bool,
    v23: bool,
    tags: &mut TagList,
    pictures: &mut Vec<ScannedPicture>,
) {
    let id = frame.id();
    match frame.content() {
        Content::Text(text) => {
            let key = match id {
                "TYER" if !has_tdrc => "date",
                "TORY" => "originaldate",
                _ => match keys::key_for_native(id) {
                    Some(k) => k,
                    None => return,
                },
            };
            let joined;
            let text = if v23 {
                joined = text.replace('\0', "/");
                &joined
            } else {
                text
            };
            for value in split_values(text) {
                if key == "genre" {
                    tags.push(key, &genres::resolve_id3(value));
                } else {
                    tags.push(key, value);
                }
            }
        }
        Content::ExtendedText(t) => {
            let native = format!("TXXX:{}", t.description);
            let key = keys::TABLE
                .iter()
                .find(|m| m.id3.is_some_and(|n| n.eq_ignore_ascii_case(&native)))
                .map(|m| m.key.to_string())
                .or_else(|| keys::canonical_key(&t.description));
            if let Some(key) = key {
                for value in split_values(&t.value) {
                    tags.push(&key, value);
                }
            }
        }
        Content::Comment(c) => {
            let key = match c.description.as_str() {
                "" | "ID3v1 Comment" => "comment".to_string(),
                d => format!("comment:{}", d.to_lowercase()),
            };
            if keys::canonical_key(&key).is_some() {
                tags.push(&key, &c.text);
            }
        }
        Content::Lyrics(l) => tags.push("lyrics", &l.text),
        Content::UniqueFileIdentifier(u) if u.owner_identifier == "http://musicbrainz.org" => {
            tags.push("musicbrainz_recordingid", &String::from_utf8_lossy(&u.identifier));
        }
        Content::Picture(p) => pictures.push(picture(
            p.data.clone(),
            &p.mime_type,
            u8::from(p.picture_type),
            p.description.clone(),
            (0, 0, 0),
        )),
        _ => {}
    }
}

/// ID3v2.4 separates multiple values with NUL.
fn split_values(text: &str) -> impl Iterator<Item = &str> {
    text.split('\0').filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use id3::TagLike;

    fn tag_bytes(version: id3::Version, build: impl FnOnce(&mut id3::Tag)) -> Vec<u8> {
        let mut tag = id3::Tag::new();
        build(&mut tag);
        let mut out = Vec::new();
        tag.write_to(&mut out, version).unwrap();
        out
    }

    #[test]
    fn reads_standard_and_custom_frames() {
        let bytes = tag_bytes(id3::Version::Id3v24, |t| {
            t.set_title("T");
            t.set_artist("A1\0A2");
            t.set_text("TRCK", "3/12");
            t.set_genre("(17)");
            t.add_frame(id3::frame::ExtendedText {
                description: "MusicBrainz Album Id".into(),
                value: "abc".into(),
            });
            t.add_frame(id3::frame::ExtendedText {
                description: "Custom Thing".into(),
                value: "x".into(),
            });
        });
        let mut tags = TagList::new();
        let mut pics = Vec::new();
        read_tag_bytes(&bytes, &mut tags, &mut pics);
        let tags = tags.finish();
        let get = |k: &str| -> Vec<&str> {
            tags.iter()
                .filter(|(tk, _)| tk == k)
                .map(|(_, v)| v.as_str())
                .collect()
        };
        assert_eq!(get("title"), ["T"]);
        assert_eq!(get("artist"), ["A1", "A2"]);
        assert_eq!(get("tracknumber"), ["3"]);
        assert_eq!(get("totaltracks"), ["12"]);
        assert_eq!(get("genre"), ["Rock"]);
        assert_eq!(get("musicbrainz_albumid"), ["abc"]);
        assert_eq!(get("custom thing"), ["x"]);
    }

    #[test]
    fn tag_len_reads_syncsafe_size() {
        assert_eq!(tag_len(b"ID3\x04\x00\x00\x00\x00\x02\x01"), Some(10 + 257));
        assert_eq!(tag_len(b"ID3\x04\x00\x10\x00\x00\x00\x01"), Some(10 + 1 + 10));
        assert_eq!(tag_len(b"ID3\x04\x00\x00\x80\x00\x00\x00"), None);
        assert_eq!(tag_len(b"XYZ\x04\x00\x00\x00\x00\x00\x00"), None);
    }
}
