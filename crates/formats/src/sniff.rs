//! Format detection by content (magic bytes), never by file name.

use crate::error::{ProbeError, Result};
use crate::source::Source;
use crate::tags::id3v2_read;
use crate::{mp3, ogg, Format};

/// The format of a file, or `None` if it is not one retagfs serves.
pub fn sniff(src: &Source<'_>) -> Result<Option<Format>> {
    let head = src.read_upto(0, 64)?;
    if head.starts_with(b"fLaC") {
        return Ok(Some(Format::Flac));
    }
    if head.starts_with(b"ID3") {
        // A tag in front says nothing; what follows it decides.
        let after = id3v2_read::skip_tags(src)?;
        let next = src.read_upto(after, 4)?;
        if next == b"fLaC" {
            return Ok(Some(Format::Flac));
        }
        return Ok(Some(Format::Mp3));
    }
    if head.starts_with(b"OggS") {
        return match ogg::first_packet_kind(src)? {
            Some(f) => Ok(Some(f)),
            None => Err(ProbeError::Unsupported(
                "Ogg stream that is neither Vorbis nor Opus".into(),
            )),
        };
    }
    if head.len() >= 12 && &head[8..12] == b"WAVE" {
        return match &head[..4] {
            b"RIFF" | b"RF64" | b"BW64" => Ok(Some(Format::Wav)),
            _ => Ok(None),
        };
    }
    if head.len() >= 8 && &head[4..8] == b"ftyp" {
        return Ok(Some(Format::Mp4));
    }
    if head.len() >= 4 && mp3::frame_header(&head[..4]).is_some() {
        return Ok(Some(Format::Mp3));
    }
    Ok(None)
}

/// Why `src` is not a file of `format`, if it is not: store rows that
/// name another format than the file's would synthesize garbage.
pub fn format_mismatch(src: &Source<'_>, format: Format) -> Option<String> {
    match sniff(src) {
        Ok(Some(f)) if f == format => None,
        Ok(Some(f)) => Some(format!("the store says {format} but the file is {f}")),
        Ok(None) => Some(format!(
            "the store says {format} but the file is not audio retagfs knows"
        )),
        Err(e) => Some(format!(
            "the store says {format} but the file does not read as such: {e}"
        )),
    }
}
