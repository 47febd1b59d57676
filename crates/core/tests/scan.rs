//! Scanning the committed fixtures into a store, and scanning again: what
//! each scan counts, the files it fails with a reason or skips, names that
//! are not UTF-8, and the art it stores.

mod common;

use retagfs_core::scan::{scan, ScanOptions};
use retagfs_core::view::tree::file_ino;
use retagfs_core::{Mode, Template, View, ViewConfig};
use retagfs_store::{self as store, Store};

use common::{fixtures, library, opts, path_of, read_all, view};

#[test]
fn scan_counts_rescan_and_prune() {
    let dir = library();
    let db_path = dir.path().join("store.db");
    let mut db = Store::open(&db_path).unwrap();
    let s = scan(&mut db, &opts(dir.path(), false), &|_| {}).unwrap();
    assert_eq!((s.added, s.failed), (8, 1), "{s:?}");
    assert!(s.failures[0].0.ends_with("truncated.flac"));
    assert_eq!(db.failures().unwrap().len(), 1);

    let again = scan(&mut db, &opts(dir.path(), false), &|_| {}).unwrap();
    assert_eq!(
        (again.added, again.updated, again.unchanged, again.failed),
        (0, 0, 8, 1),
        "{again:?}"
    );
    // A re-scan names the file it counts as failed, with the reason the
    // scan that probed it gave: from the folders' record, and when every
    // folder is listed.
    assert_eq!(again.failures, s.failures);
    let listed = ScanOptions {
        full: true,
        ..opts(dir.path(), false)
    };
    let listed = scan(&mut db, &listed, &|_| {}).unwrap();
    assert_eq!((listed.unchanged, listed.failures), (8, s.failures.clone()));

    std::fs::remove_file(dir.path().join("tagged.ogg")).unwrap();
    let kept = scan(&mut db, &opts(dir.path(), false), &|_| {}).unwrap();
    assert_eq!((kept.missing, kept.removed), (1, 0));
    let pruned = scan(&mut db, &opts(dir.path(), true), &|_| {}).unwrap();
    assert_eq!(pruned.removed, 1);
    assert_eq!(db.track_count().unwrap(), 7);
}

/// Names that are not UTF-8 (Latin-1 ones, as copied from an old Windows
/// share) are scanned and served like any other, and re-scans find them
/// unchanged (`rescan.rs` takes such a folder from the record).
#[test]
fn names_that_are_not_utf8_are_scanned_served_and_found_again() {
    use std::os::unix::ffi::OsStrExt;
    let dir = library();
    let folder = dir.path().join(std::ffi::OsStr::from_bytes(b"Caf\xe9"));
    std::fs::create_dir(&folder).unwrap();
    let file = folder.join(std::ffi::OsStr::from_bytes(b"\xc9t\xe9.flac"));
    std::fs::copy(fixtures().join("tagged.flac"), &file).unwrap();
    let db_path = dir.path().join("store.db");
    let mut db = Store::open(&db_path).unwrap();
    let s = scan(&mut db, &opts(dir.path(), false), &|_| {}).unwrap();
    assert_eq!((s.added, s.failed), (9, 1), "{s:?}");
    let track = db
        .resolve_track(&store::path_to_text(&file.canonicalize().unwrap()))
        .unwrap();
    for full in [false, true] {
        let again = ScanOptions {
            full,
            ..opts(dir.path(), false)
        };
        let again = scan(&mut db, &again, &|_| {}).unwrap();
        assert_eq!(
            (again.unchanged, again.added, again.failed),
            (9, 0, 1),
            "{again:?}"
        );
    }

    let config = ViewConfig {
        template: Template::parse("${filename}").unwrap(),
        ..view(Mode::Synthesis)
    };
    let lib = View::load(&db_path, config).unwrap();
    assert_eq!(path_of(&lib, track.id).unwrap(), "Été.flac");
    let original = std::fs::read(&file).unwrap();
    let served = read_all(&lib, file_ino(track.id));
    assert!(served.ends_with(&original[track.audio_offset as usize..]));
}

#[test]
fn empty_files_and_unserved_audio_are_reported_other_files_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("empty.mp3"), b"").unwrap();
    std::fs::write(root.join("song.aiff"), b"FORM\0\0\0\x04AIFF").unwrap();
    std::fs::write(root.join("random.bin"), b"not audio at all").unwrap();
    std::fs::write(root.join("empty.dat"), b"").unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&store_dir.path().join("store.db")).unwrap();
    let s = scan(&mut db, &opts(&root, false), &|_| {}).unwrap();
    let mut failures = s.failures.clone();
    failures.sort();
    let names: Vec<(&str, &str)> = failures
        .iter()
        .map(|(p, why)| (p.rsplit('/').next().unwrap(), why.as_str()))
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(names[0], ("empty.mp3", "empty file (0 bytes)"));
    assert_eq!(names[1].0, "song.aiff");
    assert!(
        names[1].1.starts_with("unsupported audio format (.aiff)"),
        "{}",
        names[1].1
    );
    assert_eq!((s.added, s.skipped), (0, 2), "{s:?}");
}

/// Pictures found by the scan are stored under the sha256 of their bytes
/// (hashed once, in the probe), once however many files embed them.
#[test]
fn scanned_art_is_addressed_by_the_sha256_of_its_bytes() {
    use sha2::{Digest, Sha256};
    let dir = library();
    for copy in ["a.flac", "b.flac"] {
        std::fs::copy(dir.path().join("tagged.flac"), dir.path().join(copy)).unwrap();
    }
    let mut db = Store::open(&dir.path().join("store.db")).unwrap();
    scan(&mut db, &opts(dir.path(), false), &|_| {}).unwrap();
    let art: Vec<(String, Vec<u8>)> = db
        .conn()
        .prepare("SELECT sha256, data FROM art")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(!art.is_empty());
    for (sha, data) in &art {
        let hex: String = Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(sha, &hex);
    }
    let flac_art: i64 = db
        .conn()
        .query_row(
            "SELECT count(DISTINCT art_sha256) FROM track_art JOIN tracks ON tracks.id = track_id \
             WHERE backing_path GLOB '*/[ab].flac' OR backing_path GLOB '*/tagged.flac'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(flac_art, 1, "three copies of one cover, one art row");
}
