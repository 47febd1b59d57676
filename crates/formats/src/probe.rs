//! Probing: what a backing file holds, from bounded reads.

use retagfs_store::{BackingPart, ScannedPicture};

use crate::error::{ProbeError, Result};
use crate::source::Source;
use crate::{flac, mp3, mp4, ogg, sniff, wav, Format};

/// What a probe found in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub format: Format,
    /// The byte range of the audio: served untouched.
    pub audio_offset: u64,
    pub audio_length: u64,
    /// (canonical key, value) in file order.
    pub tags: Vec<(String, String)>,
    pub pictures: Vec<ScannedPicture>,
    /// FLAC structural blocks kept verbatim (type, body).
    pub flac_blocks: Vec<(u8, Vec<u8>)>,
    /// Ranges synthesis reuses or replaces (MP4, Ogg, WAV).
    pub parts: Vec<BackingPart>,
    /// Why the file must be served byte-identical, if it must.
    pub passthrough: Option<String>,
}

impl Probe {
    pub(crate) fn new(format: Format) -> Probe {
        Probe {
            format,
            audio_offset: 0,
            audio_length: 0,
            tags: Vec::new(),
            pictures: Vec::new(),
            flac_blocks: Vec::new(),
            parts: Vec::new(),
            passthrough: None,
        }
    }
}

/// Detects the format by content and probes the file.
pub fn probe(src: &Source<'_>) -> Result<Probe> {
    let format = sniff(src)?.ok_or(ProbeError::UnknownFormat)?;
    let probe = match format {
        Format::Flac => flac::probe(src)?,
        Format::Mp3 => mp3::probe(src)?,
        Format::Mp4 => mp4::probe(src)?,
        Format::Vorbis | Format::Opus => ogg::probe(src, format)?,
        Format::Wav => wav::probe(src)?,
    };
    debug_assert!(probe.audio_offset + probe.audio_length <= src.size());
    Ok(probe)
}
