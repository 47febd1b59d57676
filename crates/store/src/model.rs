//! Plain data types that cross the store boundary.

use std::fmt;
use std::str::FromStr;

/// Container format of a backing file, as stored in `tracks.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    Flac,
    Mp3,
    Mp4,
    Vorbis,
    Opus,
    Wav,
}

impl Format {
    pub const ALL: [Format; 6] = [
        Format::Flac,
        Format::Mp3,
        Format::Mp4,
        Format::Vorbis,
        Format::Opus,
        Format::Wav,
    ];

    /// The name used in the store and in `export` JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Flac => "flac",
            Format::Mp3 => "mp3",
            Format::Mp4 => "mp4",
            Format::Vorbis => "vorbis",
            Format::Opus => "opus",
            Format::Wav => "wav",
        }
    }

    /// File extension used for this format in the mounted tree.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Flac => "flac",
            Format::Mp3 => "mp3",
            Format::Mp4 => "m4a",
            Format::Vorbis => "ogg",
            Format::Opus => "opus",
            Format::Wav => "wav",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Format::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| format!("unknown format {s:?}"))
    }
}

/// The stat stamps that decide whether a file changed since it was scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamps {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

/// A row of `tracks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackRow {
    pub id: i64,
    pub backing_path: String,
    pub format: Format,
    pub audio_offset: u64,
    pub audio_length: u64,
    pub stamps: Stamps,
    pub content_version: i64,
}

/// An image to store, addressed by the sha256 of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewArt {
    pub mime: String,
    pub width: u32,
    pub height: u32,
    pub depth: u32,
    pub data: Vec<u8>,
}

/// A picture found in a backing file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedPicture {
    pub art: NewArt,
    pub picture_type: u8,
    pub description: String,
}

/// Everything a probe learned about one backing file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedTrack {
    pub backing_path: String,
    pub format: Format,
    pub audio_offset: u64,
    pub audio_length: u64,
    pub stamps: Stamps,
    pub fingerprint: Option<[u8; 32]>,
    /// (canonical key, value) in file order; a key may repeat.
    pub tags: Vec<(String, String)>,
    pub pictures: Vec<ScannedPicture>,
    /// FLAC structural blocks kept verbatim: (block type, body).
    pub flac_blocks: Vec<(u8, Vec<u8>)>,
}

/// A picture linked to a track, without its bytes (those are streamed from
/// the `art` table by rowid when served).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtLink {
    pub art_rowid: i64,
    pub sha256: String,
    pub mime: String,
    pub width: u32,
    pub height: u32,
    pub depth: u32,
    pub data_len: u64,
    pub picture_type: u8,
    pub description: String,
}
