//! Probing: what a backing file holds, from bounded reads.

use retagfs_store::{ArtLink, BackingPart, ScannedPicture, Stamps, TrackRow};

use crate::error::{ProbeError, Result};
use crate::source::Source;
use crate::synth::{synthesize, SynthesisInput};
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
    /// The vendor string of a FLAC, Vorbis or Opus file's comments.
    pub vendor: Option<String>,
    /// How long the track plays, in milliseconds, from what its headers
    /// say (for playlists' `#EXTINF`); None when they do not say, or say
    /// something absurd.
    pub duration_ms: Option<u64>,
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
            vendor: None,
            duration_ms: None,
        }
    }
}

/// Detects the format by content and probes the file.
pub fn probe(src: &Source<'_>) -> Result<Probe> {
    if src.size() == 0 {
        return Err(ProbeError::Empty);
    }
    let format = sniff(src)?.ok_or(ProbeError::UnknownFormat)?;
    let probe = match format {
        Format::Flac => flac::probe(src)?,
        Format::Mp3 => mp3::probe(src)?,
        Format::Mp4 => mp4::probe(src)?,
        Format::Vorbis | Format::Opus => ogg::probe(src, format)?,
        Format::Wav => wav::probe(src)?,
    };
    debug_assert!(probe.audio_offset + probe.audio_length <= src.size());
    let mut probe = probe;
    if probe.passthrough.is_none() {
        // What a mount will do with this file, done once now: a structure
        // the probe accepted but synthesis cannot rebuild (a damaged atom
        // deep in `moov`, ...) is served byte-identical, with the reason.
        let track = probe.track_row(src.size());
        let input = SynthesisInput {
            track: &track,
            tags: &probe.tags,
            art: &probe.art_links(),
            flac_blocks: &probe.flac_blocks,
            parts: &probe.parts,
            options: Default::default(),
            backing: Some(src.reader()),
        };
        if let Err(why) = synthesize(&input) {
            probe.passthrough = Some(format!("its structure cannot be rebuilt: {why}"));
        }
    }
    Ok(probe)
}

impl Probe {
    /// The store row a scan would write for this probe (id 1, no stamps but
    /// the size).
    pub fn track_row(&self, size: u64) -> TrackRow {
        TrackRow {
            id: 1,
            backing_path: String::new(),
            format: self.format,
            audio_offset: self.audio_offset,
            audio_length: self.audio_length,
            stamps: Stamps {
                size,
                mtime_ns: 0,
                ctime_ns: 0,
            },
            content_version: 1,
            passthrough: self.passthrough.clone(),
            changed_at: 0,
            vendor: self.vendor.clone(),
            remote_etag: None,
            added_at: 0,
            duration_ms: self.duration_ms,
        }
    }

    /// The pictures as art links; the art row id is the picture's index.
    pub fn art_links(&self) -> Vec<ArtLink> {
        self.pictures
            .iter()
            .enumerate()
            .map(|(i, pic)| ArtLink {
                art_rowid: i as i64,
                sha256: String::new(),
                mime: pic.art.mime.clone(),
                width: pic.art.width,
                height: pic.art.height,
                depth: pic.art.depth,
                data_len: pic.art.data.len() as u64,
                picture_type: pic.picture_type,
                description: pic.description.clone(),
            })
            .collect()
    }
}
