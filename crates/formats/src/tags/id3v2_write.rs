//! A fresh ID3v2 tag (v2.4 UTF-8 or v2.3 UTF-16) built from the store's
//! tags and art, for MP3 files and the `id3 ` chunk of WAV files.
//!
//! Frames are encoded with the `id3` crate. Pictures are not loaded: each
//! APIC frame is encoded with empty image data, its size field is patched,
//! and the image bytes stream from the store as an art segment.

use std::collections::BTreeMap;

use id3::frame::{Comment, Content, ExtendedText, Lyrics, Picture, PictureType, UniqueFileIdentifier};
use id3::{Frame, Tag, TagLike, Version};
use retagfs_store::ArtLink;

use crate::layout::Layout;
use crate::tags::keys;

/// Which ID3v2 version is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Id3Version {
    /// ID3v2.3 with UTF-16 text, for players that cannot read v2.4.
    V23,
    /// ID3v2.4 with UTF-8 text.
    #[default]
    V24,
}

impl Id3Version {
    fn crate_version(self) -> Version {
        match self {
            Id3Version::V23 => Version::Id3v23,
            Id3Version::V24 => Version::Id3v24,
        }
    }
}

/// Largest tag size the 28-bit syncsafe header field can carry.
const MAX_TAG_LEN: u64 = (1 << 28) - 1;
/// The ID3v2 header, as the reader knows it.
const HEADER_LEN: usize = super::id3v2_read::HEADER_LEN as usize;

/// Appends a complete ID3v2 tag to `layout`; returns its length. Nothing
/// is appended when there is nothing to say (a tag needs a frame).
pub fn push_tag(layout: &mut Layout, tags: &[(String, String)], art: &[ArtLink], version: Id3Version) -> u64 {
    let frames = encode_frames(&text_frames(tags, version), version);
    let mut pictures = Vec::new();
    let mut size = frames.len() as u64;
    for link in art {
        let prefix = picture_frame_prefix(link, version);
        let frame_len = (prefix.len() - HEADER_LEN) as u64 + link.data_len;
        // A picture the header fields cannot describe is left out.
        if frame_len > MAX_TAG_LEN || size + prefix.len() as u64 + link.data_len > MAX_TAG_LEN {
            continue;
        }
        size += prefix.len() as u64 + link.data_len;
        pictures.push((prefix, link));
    }
    if size == 0 {
        return 0;
    }
    let mut padding = padding_after(HEADER_LEN as u64 + size);
    if size + padding > MAX_TAG_LEN {
        padding = 0;
    }
    size += padding;
    layout.push_bytes(b"ID3");
    layout.push_bytes(&[version_byte(version), 0, 0]);
    layout.push_bytes(&syncsafe(size as u32));
    layout.push_bytes(&frames);
    for (mut prefix, link) in pictures {
        let frame_len = (prefix.len() - HEADER_LEN) as u64 + link.data_len;
        let field = match version {
            Id3Version::V24 => syncsafe(frame_len as u32),
            Id3Version::V23 => (frame_len as u32).to_be_bytes(),
        };
        prefix[4..8].copy_from_slice(&field);
        layout.push_bytes(&prefix);
        layout.push_art(link.art_rowid, link.data_len);
    }
    layout.push_bytes(&PADDING[..padding as usize]);
    HEADER_LEN as u64 + size
}

/// Zero bytes after the last frame, as taggers leave them: readers that
/// check a frame's size against what follows it (exiftool warns "Invalid
/// ID3 frame size" otherwise) find the tag's end where they look for it.
/// The whole tag comes out of even length, as a RIFF chunk must be.
const PADDING: [u8; 1025] = [0; 1025];

fn padding_after(tag_len: u64) -> u64 {
    1024 + tag_len % 2
}

fn version_byte(version: Id3Version) -> u8 {
    match version {
        Id3Version::V23 => 3,
        Id3Version::V24 => 4,
    }
}

fn syncsafe(n: u32) -> [u8; 4] {
    [
        (n >> 21) as u8 & 0x7f,
        (n >> 14) as u8 & 0x7f,
        (n >> 7) as u8 & 0x7f,
        n as u8 & 0x7f,
    ]
}

/// The frames of `frames`, encoded, without the tag header.
fn encode_frames(frames: &[Frame], version: Id3Version) -> Vec<u8> {
    let mut tag = Tag::new();
    for f in frames {
        tag.add_frame(f.clone());
    }
    let mut out = Vec::new();
    // Encoding into memory fails only on frames `validate` rejects, and
    // every frame built here is of a kind it accepts.
    if let Err(e) = id3::Encoder::new()
        .version(version.crate_version())
        .encode(&tag, &mut out)
    {
        tracing::warn!("ID3 frames could not be encoded: {e}");
        return Vec::new();
    }
    out.split_off(HEADER_LEN)
}

/// An APIC frame with empty image data: header, encoding, MIME type,
/// picture type and description. Its size field still needs the image length.
fn picture_frame_prefix(link: &ArtLink, version: Id3Version) -> Vec<u8> {
    let frame = Frame::with_content(
        "APIC",
        Content::Picture(Picture {
            mime_type: link.mime.clone(),
            // Encoded as its byte value, whatever the variant.
            picture_type: PictureType::Undefined(link.picture_type),
            description: link.description.replace('\0', ""),
            data: Vec::new(),
        }),
    );
    encode_frames(&[frame], version)
}

/// The tag's text-like frames, one per key, values joined per version.
fn text_frames(tags: &[(String, String)], version: Id3Version) -> Vec<Frame> {
    let mut grouped: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut order = Vec::new();
    for (key, value) in tags {
        let value = value.replace('\0', "");
        if value.is_empty() {
            continue;
        }
        let values = grouped.entry(key.as_str()).or_default();
        if values.is_empty() {
            order.push(key.as_str());
        }
        values.push(value);
    }
    let first = |k: &str| grouped.get(k).and_then(|v| v.first()).map(String::as_str);
    let mut frames = Vec::new();
    for key in order {
        // v2.4 separates values with NUL. v2.3 has no separator; NUL is used
        // there too (mutagen and others split on it): a reader that does not
        // split shows the first value rather than a merged "A/B".
        let joined = grouped[key].join("\0");
        match key {
            "tracknumber" | "discnumber" => {
                let (id, total_key) = if key == "tracknumber" {
                    ("TRCK", "totaltracks")
                } else {
                    ("TPOS", "totaldiscs")
                };
                let n = &grouped[key][0];
                let text = first(total_key).map_or(n.clone(), |t| format!("{n}/{t}"));
                frames.push(Frame::text(id, text));
            }
            "totaltracks" if first("tracknumber").is_some() => {}
            "totaldiscs" if first("discnumber").is_some() => {}
            "date" if version == Id3Version::V23 => frames.extend(v23_date_frames(&grouped[key][0])),
            "originaldate" if version == Id3Version::V23 => {
                frames.push(Frame::text("TORY", year_of(&grouped[key][0])));
            }
            "comment" => frames.push(comment(String::new(), joined)),
            "lyrics" => frames.push(Frame::with_content(
                "USLT",
                Content::Lyrics(Lyrics {
                    lang: "eng".into(),
                    description: String::new(),
                    text: joined,
                }),
            )),
            _ => frames.push(native_frame(key, joined)),
        }
    }
    if version == Id3Version::V23 {
        for f in &mut frames {
            if let Some(raw) = v23_raw_multi_value(f) {
                *f = raw;
            }
        }
    }
    frames
}

/// The `id3` crate writes v2.3 text values joined with '/'; a multi-valued
/// text or TXXX frame is therefore encoded here (UTF-16 with BOM, values
/// separated by NUL) and handed to the crate as raw content.
fn v23_raw_multi_value(frame: &Frame) -> Option<Frame> {
    let utf16 = |s: &str, out: &mut Vec<u8>| {
        out.extend_from_slice(&[0xff, 0xfe]);
        out.extend(s.encode_utf16().flat_map(u16::to_le_bytes));
    };
    let mut data = vec![1u8];
    match frame.content() {
        Content::Text(t) if t.contains('\0') => utf16(t, &mut data),
        Content::ExtendedText(t) if t.value.contains('\0') => {
            utf16(&t.description, &mut data);
            data.extend_from_slice(&[0, 0]);
            utf16(&t.value, &mut data);
        }
        _ => return None,
    }
    Some(Frame::with_content(
        frame.id(),
        Content::Unknown(id3::frame::Unknown {
            data,
            version: Version::Id3v23,
        }),
    ))
}

/// The frame for a key without special handling: its table entry (a text
/// frame, `TXXX:desc` or the MusicBrainz UFID), `comment:desc` as a COMM
/// frame, anything else as `TXXX:key`.
fn native_frame(key: &str, value: String) -> Frame {
    if let Some(desc) = key.strip_prefix("comment:") {
        return comment(desc.to_string(), value);
    }
    match keys::mapping(key).and_then(|m| m.id3) {
        Some("UFID:http://musicbrainz.org") => Frame::with_content(
            "UFID",
            Content::UniqueFileIdentifier(UniqueFileIdentifier {
                owner_identifier: "http://musicbrainz.org".into(),
                identifier: value.into_bytes(),
            }),
        ),
        Some(native) => match native.strip_prefix("TXXX:") {
            Some(desc) => extended(desc, value),
            None => Frame::text(native, value),
        },
        None => extended(key, value),
    }
}

fn extended(description: &str, value: String) -> Frame {
    Frame::with_content(
        "TXXX",
        Content::ExtendedText(ExtendedText {
            description: description.to_string(),
            value,
        }),
    )
}

fn comment(description: String, text: String) -> Frame {
    Frame::with_content(
        "COMM",
        Content::Comment(Comment {
            lang: "eng".into(),
            description,
            text,
        }),
    )
}

fn year_of(date: &str) -> String {
    date.chars().take(4).collect()
}

/// ID3v2.3 has no TDRC: the year goes to TYER, day and month to TDAT.
fn v23_date_frames(date: &str) -> Vec<Frame> {
    let mut frames = vec![Frame::text("TYER", year_of(date))];
    let b = date.as_bytes();
    if b.len() >= 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b[5..7].iter().chain(&b[8..10]).all(u8::is_ascii_digit)
    {
        frames.push(Frame::text("TDAT", format!("{}{}", &date[8..10], &date[5..7])));
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tags::id3v2_read::read_tag_bytes;
    use crate::tags::keys::TagList;

    fn tags(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn round_trip(t: &[(String, String)], version: Id3Version) -> Vec<(String, String)> {
        let mut layout = Layout::default();
        let len = push_tag(&mut layout, t, &[], version);
        assert_eq!(len, layout.len());
        let bytes = layout.generated_bytes().to_vec();
        let mut list = TagList::new();
        read_tag_bytes(&bytes, &mut list, &mut Vec::new());
        list.finish()
    }

    #[test]
    fn v24_round_trips_through_the_reader() {
        let t = tags(&[
            ("title", "Ünïcödé"),
            ("artist", "A"),
            ("artist", "B"),
            ("tracknumber", "3"),
            ("totaltracks", "12"),
            ("date", "2001-02-03"),
            ("comment", "c"),
            ("musicbrainz_recordingid", "rid"),
            ("musicbrainz_albumid", "aid"),
            ("my custom", "x"),
        ]);
        let mut got = round_trip(&t, Id3Version::V24);
        let mut want = t.clone();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn v23_writes_year_and_keeps_values_apart() {
        let t = tags(&[
            ("title", "T"),
            ("date", "2001-02-03"),
            ("artist", "A"),
            ("artist", "B"),
        ]);
        let got = round_trip(&t, Id3Version::V23);
        // The id3 crate's v2.3 reader stops at the NUL: a reader that does
        // not split sees the first value, not a merged "A/B".
        assert!(got.contains(&("artist".into(), "A".into())));
        assert!(got.contains(&("date".into(), "2001".into())));
    }
}
