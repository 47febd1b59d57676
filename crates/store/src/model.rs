//! Plain data types that cross the store boundary.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, LazyLock, OnceLock};

use sha2::{Digest, Sha256};

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
    /// Why the file is served byte-identical in synthesis mode, if it is.
    pub passthrough: Option<String>,
    /// When what the track serves last changed in the store, in seconds
    /// since the epoch (0: not since it was scanned; docs/store.md,
    /// "Change times").
    pub changed_at: i64,
    /// The vendor string of a FLAC, Vorbis or Opus file's comments, as
    /// scanned ("" for none; None if not scanned since version 9).
    pub vendor: Option<String>,
    /// For a track whose backing file is an object (`s3://`), the ETag of
    /// the version the scan read.
    pub remote_etag: Option<String>,
    /// When the track entered the store, in seconds since the epoch (for a
    /// store before version 11, when it was last probed).
    pub added_at: i64,
    /// How long it plays, in milliseconds; None when unknown (the file
    /// does not say, or it was not probed since version 13).
    pub duration_ms: Option<u64>,
}

impl TrackRow {
    /// The mtime (and ctime) of the track's served file: the later of its
    /// backing file's mtime and its last change in the store, so that an
    /// indexer that goes by mtimes reads an edited file again.
    pub fn served_mtime_ns(&self) -> i64 {
        self.stamps
            .mtime_ns
            .max(self.changed_at.saturating_mul(1_000_000_000))
    }
}

/// A track with everything its served path and size are computed from
/// ([`crate::Store::for_each_track`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackBundle {
    pub track: TrackRow,
    /// (key, value), ordered by key, then position.
    pub tags: Vec<(String, String)>,
    /// Pictures, in order, without their bytes.
    pub art: Vec<ArtLink>,
    /// (type, body length) of its FLAC blocks, in order.
    pub flac_block_lens: Vec<(u8, u64)>,
    pub parts: Vec<BackingPart>,
}

/// What synthesizing a track's served file reads from the store besides
/// its row ([`crate::Store::synthesis_rows`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthesisRows {
    /// (key, value), ordered by key, then position.
    pub tags: Vec<(String, String)>,
    /// Pictures, in order, without their bytes.
    pub art: Vec<ArtLink>,
    /// (type, body) of its FLAC blocks, in order.
    pub flac_blocks: Vec<(u8, Vec<u8>)>,
    pub parts: Vec<BackingPart>,
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

impl NewArt {
    /// The sha256 of the image: its address in the `art` table.
    pub fn sha256(&self) -> [u8; 32] {
        image_sha256(&self.data)
    }
}

/// Images whose sha256 is remembered, at most (about 100 bytes each).
const REMEMBERED_IMAGES: usize = 16384;

/// The sha256 of `data`, remembered by the BLAKE3 hash of the same bytes,
/// which costs a third as much. An album's cover is embedded in each of
/// its tracks, so a scan meets the same bytes again and again, and hashing
/// each with sha256 was a large part of a first scan's CPU time. Probes
/// that meet a new image at once wait for the first one's sha256 rather
/// than each computing it.
fn image_sha256(data: &[u8]) -> [u8; 32] {
    type Seen = HashMap<[u8; 32], Arc<OnceLock<[u8; 32]>>>;
    static SEEN: LazyLock<Mutex<Seen>> = LazyLock::new(Mutex::default);
    let key: [u8; 32] = blake3::hash(data).into();
    let sha256 = {
        let mut seen = SEEN.lock();
        if seen.len() >= REMEMBERED_IMAGES && !seen.contains_key(&key) {
            seen.clear();
        }
        Arc::clone(seen.entry(key).or_default())
    };
    *sha256.get_or_init(|| Sha256::digest(data).into())
}

/// A picture found in a backing file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedPicture {
    pub art: NewArt,
    /// `art.sha256()`, computed once where the picture is read (an image
    /// of hundreds of kilobytes is hashed in the probe's thread, not again
    /// by the single writer).
    pub sha256: [u8; 32],
    pub picture_type: u8,
    pub description: String,
}

/// A track's content fingerprint: the audio's length and its first and
/// last 64 KiB, hashed (docs/store.md gives the exact input).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fingerprint {
    /// BLAKE3, as this version writes it (`tracks.fingerprint`).
    Blake3([u8; 32]),
    /// sha256, as stores before version 5 wrote it
    /// (`tracks.legacy_fingerprint`).
    Sha256([u8; 32]),
}

/// Everything a probe learned about one backing file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedTrack {
    pub backing_path: String,
    pub format: Format,
    pub audio_offset: u64,
    pub audio_length: u64,
    pub stamps: Stamps,
    /// The BLAKE3 [`Fingerprint`].
    pub fingerprint: Option<[u8; 32]>,
    /// (canonical key, value) in file order; a key may repeat.
    pub tags: Vec<(String, String)>,
    pub pictures: Vec<ScannedPicture>,
    /// FLAC structural blocks kept verbatim: (block type, body).
    pub flac_blocks: Vec<(u8, Vec<u8>)>,
    /// Ranges of the file that synthesis reuses or replaces (MP4, Ogg, WAV).
    pub parts: Vec<BackingPart>,
    /// Why the file will be served byte-identical, if it will.
    pub passthrough: Option<String>,
    /// The vendor string of a FLAC, Vorbis or Opus file's comments.
    pub vendor: Option<String>,
    /// How long it plays, in milliseconds, when the file says.
    pub duration_ms: Option<u64>,
}

/// What a [`BackingPart`] is; its meaning depends on the format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PartKind {
    /// WAV: a chunk kept as is (header and body, without the pad byte).
    Chunk,
    /// WAV: the `data` chunk's body (where the audio goes among the chunks).
    Data,
    /// Ogg: the first page (identification header), kept as is.
    Page,
    /// Ogg: a piece of a header packet kept as is (the Vorbis setup header),
    /// one per page it spans.
    Packet,
    /// MP4: a top-level atom kept as is.
    Atom,
    /// MP4: the `moov` atom, rebuilt around a new `ilst`.
    Moov,
    /// MP4: the `ilst` atom inside `moov/udta/meta` that is replaced.
    Ilst,
    /// MP4: where an `ilst` goes in a `udta` that has no `meta` (length 0).
    IlstInNewMeta,
    /// MP4: where an `ilst` goes in a `moov` that has no `udta` (length 0).
    IlstInNewUdta,
}

const PART_KINDS: [(PartKind, &str); 9] = [
    (PartKind::Chunk, "chunk"),
    (PartKind::Data, "data"),
    (PartKind::Page, "page"),
    (PartKind::Packet, "packet"),
    (PartKind::Atom, "atom"),
    (PartKind::Moov, "moov"),
    (PartKind::Ilst, "ilst"),
    (PartKind::IlstInNewMeta, "ilst_in_new_meta"),
    (PartKind::IlstInNewUdta, "ilst_in_new_udta"),
];

impl PartKind {
    pub fn as_str(self) -> &'static str {
        PART_KINDS.iter().find(|(k, _)| *k == self).map_or("", |(_, s)| s)
    }

    pub fn parse(s: &str) -> Option<PartKind> {
        PART_KINDS.iter().find(|(_, n)| *n == s).map(|(k, _)| *k)
    }
}

/// A byte range of a backing file with a role in synthesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackingPart {
    pub kind: PartKind,
    pub offset: u64,
    pub length: u64,
}

impl BackingPart {
    pub fn new(kind: PartKind, offset: u64, length: u64) -> BackingPart {
        BackingPart { kind, offset, length }
    }

    pub fn end(&self) -> u64 {
        self.offset + self.length
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn art(data: Vec<u8>) -> NewArt {
        NewArt {
            mime: "image/jpeg".into(),
            width: 1,
            height: 1,
            depth: 24,
            data,
        }
    }

    #[test]
    fn an_image_met_again_has_the_sha256_of_its_own_bytes() {
        let a = art((0..100_000).map(|i| (i % 251) as u8).collect());
        let mut b = a.clone();
        // Same length, same start and end, one byte apart in the middle.
        b.data[50_000] ^= 1;
        for image in [&a, &b, &a, &b] {
            let expected: [u8; 32] = Sha256::digest(&image.data).into();
            assert_eq!(image.sha256(), expected);
        }
        assert_ne!(a.sha256(), b.sha256());
    }
}
