//! Synthesis: the layout of the file served for a track's stored tags and art.

use retagfs_store::{ArtLink, BackingPart, TrackRow};

use crate::error::SynthesisError;
use crate::layout::Layout;
use crate::source::ReadAt;
use crate::tags::id3v2_write::Id3Version;
use crate::tags::vorbis_comment::served_vendor;
use crate::{flac, mp3, mp4, ogg, wav, Format};

/// Choices of the mount that change the served bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SynthesisOptions {
    /// ID3v2 version of MP3 tags and WAV `id3 ` chunks.
    pub id3_version: Id3Version,
}

/// Everything synthesis needs about one track.
pub struct SynthesisInput<'a> {
    pub track: &'a TrackRow,
    pub tags: &'a [(String, String)],
    pub art: &'a [ArtLink],
    /// FLAC structural blocks (type, body), empty for other formats.
    pub flac_blocks: &'a [(u8, Vec<u8>)],
    /// Ranges of the backing file with a role in synthesis (MP4, Ogg, WAV).
    pub parts: &'a [BackingPart],
    pub options: SynthesisOptions,
    /// The backing file, read when the layout needs its bytes (MP4 `moov`).
    pub backing: Option<&'a dyn ReadAt>,
}

/// (block type, body length) of a stored FLAC block.
pub type FlacBlockLen = (u8, u64);

/// The layout of the served file. An error means the stored rows cannot
/// describe a valid file (the caller reports it and serves EIO).
pub fn synthesize(input: &SynthesisInput<'_>) -> Result<Layout, SynthesisError> {
    let mut layout = synthesize_format(input)?;
    layout.shrink_to_fit();
    Ok(layout)
}

fn synthesize_format(input: &SynthesisInput<'_>) -> Result<Layout, SynthesisError> {
    let t = input.track;
    if t.passthrough.is_some() {
        return Ok(Layout::passthrough(t.stamps.size));
    }
    check_ranges(t, input.parts)?;
    match t.format {
        Format::Flac => flac::synthesize(
            input.flac_blocks,
            served_vendor(t.vendor.as_deref()),
            input.tags,
            input.art,
            t.audio_offset,
            t.audio_length,
        ),
        Format::Mp3 => Ok(mp3::synthesize(
            input.tags,
            input.art,
            input.options.id3_version,
            t.audio_offset,
            t.audio_length,
        )),
        Format::Wav => wav::synthesize(
            input.parts,
            input.tags,
            input.art,
            input.options.id3_version,
            t.stamps.size,
        ),
        Format::Vorbis | Format::Opus => ogg::synthesize(
            t.format,
            input.parts,
            served_vendor(t.vendor.as_deref()),
            input.tags,
            input.art,
            t.audio_offset,
            t.audio_length,
        ),
        Format::Mp4 => {
            let backing = input.backing.ok_or("MP4 synthesis needs the backing file")?;
            mp4::synthesis::synthesize(
                input.parts,
                input.tags,
                input.art,
                backing,
                t.stamps.size,
                t.audio_offset,
            )
        }
    }
}

/// Every byte range the rows name must lie inside the backing file (its
/// size is checked against the file before this is called).
fn check_ranges(t: &TrackRow, parts: &[BackingPart]) -> Result<(), SynthesisError> {
    let size = t.stamps.size;
    if t.audio_offset
        .checked_add(t.audio_length)
        .is_none_or(|end| end > size)
    {
        return Err(SynthesisError::Rows(format!(
            "the store's audio range {}+{} runs past the end of the {size}-byte file",
            t.audio_offset, t.audio_length
        )));
    }
    match parts
        .iter()
        .find(|p| p.offset.checked_add(p.length).is_none_or(|end| end > size))
    {
        Some(p) => Err(SynthesisError::Rows(format!(
            "the store's {:?} part {}+{} runs past the end of the {size}-byte file",
            p.kind, p.offset, p.length
        ))),
        None => Ok(()),
    }
}

/// The served size, computed without reading the backing file (used for
/// `stat` of every file); equals `synthesize(..).len()`. Rows that cannot
/// describe a file give the backing size (opening it then fails).
pub fn synthesized_len(
    track: &TrackRow,
    tags: &[(String, String)],
    art: &[ArtLink],
    flac_block_lens: &[FlacBlockLen],
    parts: &[BackingPart],
    options: SynthesisOptions,
) -> u64 {
    if track.passthrough.is_some() {
        return track.stamps.size;
    }
    match track.format {
        Format::Flac => flac::synthesized_len(
            flac_block_lens,
            served_vendor(track.vendor.as_deref()),
            tags,
            art,
            track.audio_length,
        ),
        Format::Mp4 => mp4::synthesis::synthesized_len(parts, tags, art).unwrap_or(track.stamps.size),
        _ => synthesize(&SynthesisInput {
            track,
            tags,
            art,
            flac_blocks: &[],
            parts,
            options,
            backing: None,
        })
        .map_or(track.stamps.size, |l| l.len()),
    }
}
