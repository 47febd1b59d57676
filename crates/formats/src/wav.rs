//! WAV: walk the RIFF chunks; tags come from an `id3 ` chunk and from
//! `LIST/INFO`, the audio is the `data` chunk. Served: the RIFF header with
//! the new size, the original non-tag chunks, a fresh `id3 ` chunk just
//! before `data`, then the original `data` bytes.
//!
//! No `LIST/INFO` is served. ffmpeg (and so Jellyfin, Emby and ffprobe)
//! drops a WAV's `id3 ` chunk as soon as the file has any INFO field, and
//! MPD (through libsndfile) as soon as INFO has a title, artist, album,
//! date, genre or track: one INFO value per field would then hide album
//! artists, composers, MusicBrainz ids and every value after a first.
//! minidlna, which reads INFO alone, shows such files by their names.
//! Every chunk written is of even length: minidlna's chunk walk ignores
//! RIFF pad bytes, and lost its place (and the duration) after an odd one.

use retagfs_store::{ArtLink, BackingPart, PartKind};

use crate::duration::millis;
use crate::error::{malformed, ProbeError, Result, SynthesisError};
use crate::layout::Layout;
use crate::probe::Probe;
use crate::source::{le_u32, Source};
use crate::tags::id3v2_read;
use crate::tags::id3v2_write::{self, Id3Version};
use crate::tags::keys::{self, merge_missing, TagList};
use crate::Format;

/// The RIFF size field counts everything after its own 8 bytes.
const MAX_RIFF_LEN: u64 = u32::MAX as u64 + 8;

pub fn probe(src: &Source<'_>) -> Result<Probe> {
    let mut probe = Probe::new(Format::Wav);
    if src.read(0, 4, "RIFF header")? != b"RIFF" {
        // RF64/BW64 keep their sizes in a ds64 chunk: served as they are.
        probe.passthrough = Some("RF64 (over-4-GiB) WAV".into());
        probe.audio_length = src.size();
        return Ok(probe);
    }
    let mut id3_tags = TagList::new();
    let mut info_tags = Vec::new();
    let mut saw_data = false;
    let mut saw_fmt = false;
    let mut bytes_per_second = 0;
    let mut pos = 12u64;
    while pos + 8 <= src.size() {
        let h = src.read(pos, 8, "RIFF chunk header")?;
        let id = [h[0], h[1], h[2], h[3]];
        let len = u64::from(le_u32(&h[4..]));
        let body_at = pos + 8;
        let mut kept = true;
        match &id {
            b"fmt " if !saw_fmt => {
                saw_fmt = true;
                bytes_per_second = audio_bytes_per_second(&src.read_upto(body_at, FMT_RATES_LEN.min(len))?);
            }
            b"data" if !saw_data => {
                // Writers that stream sometimes leave the size too large.
                let len = len.min(src.size() - body_at);
                probe.parts.push(BackingPart::new(PartKind::Data, body_at, len));
                probe.audio_offset = body_at;
                probe.audio_length = len;
                saw_data = true;
                kept = false;
            }
            b"LIST" if len >= 4 && src.read(body_at, 4, "LIST type")? == b"INFO" => {
                let body = src.read(body_at + 4, len - 4, "LIST/INFO chunk")?;
                info_tags = parse_info(&body);
                kept = false;
            }
            b"id3 " | b"ID3 " => {
                let body = src.read(body_at, len, "id3 chunk")?;
                id3v2_read::read_tag_bytes(&body, &mut id3_tags, &mut probe.pictures);
                kept = false;
            }
            _ => {}
        }
        if kept {
            if body_at + len > src.size() {
                return Err(ProbeError::Truncated(format!(
                    "chunk {:?} at offset {pos} runs past the end of the file",
                    String::from_utf8_lossy(&id)
                )));
            }
            probe.parts.push(BackingPart::new(PartKind::Chunk, pos, 8 + len));
        }
        pos = body_at + len + (len & 1);
    }
    if !saw_fmt {
        return malformed("no fmt chunk");
    }
    if !saw_data {
        return malformed("no data chunk");
    }
    probe.tags = id3_tags.finish();
    merge_missing(&mut probe.tags, info_tags);
    probe.duration_ms = millis(probe.audio_length, bytes_per_second);
    Ok(probe)
}

/// The bytes of a `fmt ` chunk's body up to its rates: format tag,
/// channels, sample rate, byte rate, block align.
const FMT_RATES_LEN: u64 = 14;

/// How many bytes of the `data` chunk play in a second, from the start of
/// a `fmt ` chunk's body: its byte rate, or block align times sample rate
/// where a writer left the byte rate 0; 0 when the chunk does not say.
fn audio_bytes_per_second(fmt: &[u8]) -> u64 {
    let Some(fmt) = fmt.get(..FMT_RATES_LEN as usize) else {
        return 0;
    };
    let sample_rate = u64::from(le_u32(&fmt[4..]));
    let byte_rate = u64::from(le_u32(&fmt[8..]));
    let block_align = u64::from(u16::from_le_bytes([fmt[12], fmt[13]]));
    match byte_rate {
        0 => block_align * sample_rate,
        known => known,
    }
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

/// The served file: see the module comment. A result the RIFF size field
/// cannot describe is served as the original file.
pub fn synthesize(
    parts: &[BackingPart],
    tags: &[(String, String)],
    art: &[ArtLink],
    id3_version: Id3Version,
    file_size: u64,
) -> std::result::Result<Layout, SynthesisError> {
    if !parts.iter().any(|p| p.kind == PartKind::Data) {
        return Err("the store has no data chunk for this WAV track".into());
    }
    let mut body = Layout::default();
    body.push_bytes(b"WAVE");
    for part in parts {
        match part.kind {
            PartKind::Chunk => body.push_backing(part.offset, part.length),
            PartKind::Data => {
                push_id3_chunk(&mut body, tags, art, id3_version);
                body.push_bytes(b"data");
                body.push_bytes(&(part.length as u32).to_le_bytes());
                body.push_backing(part.offset, part.length);
            }
            _ => {
                return Err(SynthesisError::Rows(format!(
                    "unexpected {} part in a WAV track",
                    part.kind.as_str()
                )))
            }
        }
        if part.length & 1 == 1 {
            body.push_bytes(&[0]);
        }
    }
    if body.len() + 8 > MAX_RIFF_LEN {
        return Ok(Layout::passthrough(file_size));
    }
    let mut layout = Layout::default();
    layout.push_bytes(b"RIFF");
    layout.push_bytes(&(body.len() as u32).to_le_bytes());
    layout.append(body);
    Ok(layout)
}

fn push_id3_chunk(layout: &mut Layout, tags: &[(String, String)], art: &[ArtLink], version: Id3Version) {
    let mut tag = Layout::default();
    let len = id3v2_write::push_tag(&mut tag, tags, art, version);
    if len == 0 {
        return;
    }
    layout.push_bytes(b"id3 ");
    layout.push_bytes(&(len as u32).to_le_bytes());
    layout.append(tag);
    if len & 1 == 1 {
        layout.push_bytes(&[0]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &[u8] = include_bytes!("../../../tests/fixtures/tagged.wav");

    /// The fixture with its `fmt ` chunk's rates changed by `edit`.
    fn with_fmt(edit: impl FnOnce(&mut [u8])) -> Vec<u8> {
        let mut file = FIXTURE.to_vec();
        let body_at = file.windows(4).position(|w| w == b"fmt ").unwrap() + 8;
        edit(&mut file[body_at..body_at + FMT_RATES_LEN as usize]);
        file
    }

    fn duration_ms(file: &[u8]) -> Option<u64> {
        let file = file.to_vec();
        probe(&Source::new(&file, file.len() as u64)).unwrap().duration_ms
    }

    #[test]
    fn duration_is_the_data_length_over_the_byte_rate() {
        // 22.05 kHz mono 16-bit: 44 100 bytes of data; ffprobe says 1.000000 s.
        assert_eq!(duration_ms(FIXTURE), Some(1000));
        crate::duration::assert_near_ffprobe(duration_ms(FIXTURE), 1.0);
    }

    #[test]
    fn a_zero_byte_rate_falls_back_to_block_align_times_sample_rate() {
        let no_byte_rate = with_fmt(|fmt| fmt[8..12].fill(0));
        assert_eq!(duration_ms(&no_byte_rate), Some(1000));
        let no_rates = with_fmt(|fmt| {
            fmt[8..12].fill(0);
            fmt[4..8].fill(0);
        });
        assert_eq!(duration_ms(&no_rates), None);
        let no_align = with_fmt(|fmt| {
            fmt[8..12].fill(0);
            fmt[12..14].fill(0);
        });
        assert_eq!(duration_ms(&no_align), None);
    }

    #[test]
    fn tags_go_in_one_id3_chunk_of_even_length_and_no_info() {
        let parts = [
            BackingPart::new(PartKind::Chunk, 12, 24),
            BackingPart::new(PartKind::Data, 44, 101),
        ];
        for title in ["T", "Tt", "Ttt"] {
            let tags = vec![
                ("title".to_string(), title.to_string()),
                ("genre".into(), "Jazz".into()),
            ];
            let layout = synthesize(&parts, &tags, &[], Id3Version::V24, 145).unwrap();
            let bytes = layout.generated_bytes();
            assert!(!bytes.windows(4).any(|w| w == b"LIST"), "no INFO chunk");
            let at = bytes.windows(4).position(|w| w == b"id3 ").unwrap();
            let len = le_u32(&bytes[at + 4..]);
            assert_eq!(len % 2, 0, "{title}: id3 chunk of {len} bytes");
            assert_eq!(&bytes[at + 8 + len as usize..][..4], b"data");
        }
    }
}
