//! WAV: walk the RIFF chunks; tags come from an `id3 ` chunk and from
//! `LIST/INFO`, the audio is the `data` chunk.

use crate::error::{malformed, ProbeError, Result};
use crate::id3v2;
use crate::keys::{self, merge_missing, TagList};
use crate::probe::Probe;
use crate::source::{le_u32, Source};
use crate::Format;

pub fn probe(src: &Source<'_>) -> Result<Probe> {
    let mut probe = Probe::new(Format::Wav);
    let mut id3_tags = TagList::new();
    let mut info_tags = Vec::new();
    let mut data = None;
    let mut saw_fmt = false;
    let mut pos = 12u64;
    while pos + 8 <= src.size() {
        let h = src.read(pos, 8, "RIFF chunk header")?;
        let id = [h[0], h[1], h[2], h[3]];
        let len = u64::from(le_u32(&h[4..]));
        let body_at = pos + 8;
        match &id {
            b"fmt " => saw_fmt = true,
            b"data" => {
                // Writers that stream sometimes leave the size too large.
                let len = len.min(src.size() - body_at);
                data = Some((body_at, len));
            }
            b"LIST" if len >= 4 && src.read(body_at, 4, "LIST type")? == b"INFO" => {
                let body = src.read(body_at + 4, len - 4, "LIST/INFO chunk")?;
                info_tags = parse_info(&body);
            }
            b"id3 " | b"ID3 " => {
                let body = src.read(body_at, len, "id3 chunk")?;
                id3v2::read_tag_bytes(&body, &mut id3_tags, &mut probe.pictures);
            }
            _ => {}
        }
        pos = body_at + len + (len & 1);
    }
    if !saw_fmt {
        return malformed("no fmt chunk");
    }
    let (offset, len) = data.ok_or_else(|| ProbeError::Malformed("no data chunk".into()))?;
    probe.tags = id3_tags.finish();
    merge_missing(&mut probe.tags, info_tags);
    probe.audio_offset = offset;
    probe.audio_length = len;
    Ok(probe)
}

/// INFO sub-chunks: 4-byte id, size, NUL-terminated text.
fn parse_info(b: &[u8]) -> Vec<(String, String)> {
    let mut tags = TagList::new();
    let mut pos = 0usize;
    while pos + 8 <= b.len() {
        let id = String::from_utf8_lossy(&b[pos..pos + 4]).into_owned();
        let len = le_u32(&b[pos + 4..]) as usize;
        let Some(text) = (pos + 8).checked_add(len).and_then(|end| b.get(pos + 8..end)) else {
            break;
        };
        // IPRT is the older spelling of ITRK.
        let id = if id == "IPRT" { "ITRK".to_string() } else { id };
        if let Some(key) = keys::key_for_native(&id) {
            let text = text.split(|&c| c == 0).next().unwrap_or_default();
            tags.push(key, &decode_text(text));
        }
        pos += 8 + len + (len & 1);
    }
    tags.finish()
}

/// INFO text has no declared encoding: UTF-8 when valid, else Latin-1.
fn decode_text(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        Err(_) => b.iter().map(|&c| c as char).collect(),
    }
}
