//! What the store's test binaries share (each uses a part of it).
#![allow(dead_code)]

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
        vendor: None,
        duration_ms: None,
    }
}

/// A new store at `path` made by the schema scripts up to `version`, as
/// that version of retagfs made it.
pub fn store_of_version(path: &std::path::Path, version: usize) -> rusqlite::Connection {
    const SCRIPTS: [&str; 12] = [
        include_str!("../../src/migrations/001_first_schema.sql"),
        include_str!("../../src/migrations/002_synthesis_structure.sql"),
        include_str!("../../src/migrations/003_scanned_folders.sql"),
        include_str!("../../src/migrations/004_scanned_tags_hash.sql"),
        include_str!("../../src/migrations/005_blake3_fingerprints.sql"),
        include_str!("../../src/migrations/006_new_tracks_log_once.sql"),
        include_str!("../../src/migrations/007_art_meta_index.sql"),
        include_str!("../../src/migrations/008_rowid_tags_and_flac_blocks.sql"),
        include_str!("../../src/migrations/009_change_times_and_vendor.sql"),
        include_str!("../../src/migrations/010_remote_objects.sql"),
        include_str!("../../src/migrations/011_added_at.sql"),
        include_str!("../../src/migrations/012_edit_journal.sql"),
    ];
    let conn = rusqlite::Connection::open(path).unwrap();
    for script in &SCRIPTS[..version] {
        conn.execute_batch(script).unwrap();
    }
    conn.pragma_update(None, "user_version", version as i64).unwrap();
    conn
}
