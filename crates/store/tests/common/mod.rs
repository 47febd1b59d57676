//! What the store's test binaries share.

use retagfs_store::{Format, ScannedTrack, Stamps};

/// A FLAC track at `path` as a scan would write it, with two artists.
pub fn track(path: &str) -> ScannedTrack {
    ScannedTrack {
        backing_path: path.into(),
        format: Format::Flac,
        audio_offset: 10,
        audio_length: 90,
        stamps: Stamps {
            size: 100,
            mtime_ns: 1,
            ctime_ns: 1,
        },
        fingerprint: None,
        tags: vec![
            ("title".into(), "T".into()),
            ("artist".into(), "A".into()),
            ("artist".into(), "B".into()),
        ],
        pictures: vec![],
        flac_blocks: vec![(0, vec![0; 34])],
        parts: vec![],
        passthrough: None,
    }
}
