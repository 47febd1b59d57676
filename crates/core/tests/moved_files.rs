//! Files moved, one at a time or with their whole library, are found again
//! by their content fingerprint (BLAKE3, or the sha256 one of a store from
//! before version 5): each keeps its track row and its edited tags, even
//! when another tool rewrote the file's header on the way.

mod common;

use std::path::Path;

use retagfs_core::scan::scan;
use retagfs_core::view::tree::file_ino;
use retagfs_core::{Mode, View};
use retagfs_formats::{probe, ReadAt, Source};
use retagfs_store::Store;

use common::{copy_fixtures, fixtures, library, opts, read_all, retitle, scanned, tagged_flac, view};

/// The track of the file at `path` is track `id`, title edit and all.
fn assert_is_edited_track(db: &Store, path: &Path, id: i64) {
    let track = db.resolve_track(path.to_str().unwrap()).unwrap();
    assert_eq!(track.id, id);
    assert!(db.tags(id).unwrap().contains(&("title".into(), "Edited".into())));
}

/// A whole library moved (a disk mounted elsewhere) and scanned at its new
/// path: its tracks move with their edits instead of being added again
/// beside rows whose files are gone.
#[test]
fn a_library_scanned_at_a_new_path_moves_its_tracks() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old");
    copy_fixtures(&old);
    let mut db = Store::open(&dir.path().join("store.db")).unwrap();
    let first = scan(&mut db, &opts(&old, false), &|_| {}).unwrap();
    let flac = db
        .resolve_track(old.join("tagged.flac").to_str().unwrap())
        .unwrap();
    retitle(&mut db, flac.id, "Edited");
    let new = dir.path().join("new");
    std::fs::rename(&old, &new).unwrap();
    let s = scan(&mut db, &opts(&new, false), &|_| {}).unwrap();
    assert_eq!((s.moved, s.added), (first.added, 0), "{s:?}");
    assert_eq!(db.tracks().unwrap().len() as u64, first.added);
    assert_is_edited_track(&db, &new.join("tagged.flac"), flac.id);

    // And back: the record of what the first scan saw at the old path no
    // longer says its files are tracks (they moved away meanwhile).
    std::fs::rename(&new, &old).unwrap();
    let s = scan(&mut db, &opts(&old, false), &|_| {}).unwrap();
    assert_eq!((s.moved, s.added, s.unchanged), (first.added, 0, 0), "{s:?}");
    let back = db
        .resolve_track(old.join("tagged.flac").to_str().unwrap())
        .unwrap();
    assert_eq!(back.id, flac.id);
}

/// Many copies of one recording (one fingerprint), moved: each goes back
/// to the track whose old path ends like its new one.
#[test]
fn copies_of_one_recording_moved_keep_their_own_tracks() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old");
    for album in 0..30 {
        let folder = old.join(format!("Album {album}"));
        std::fs::create_dir_all(&folder).unwrap();
        for n in 0..3 {
            std::fs::copy(fixtures().join("tagged.flac"), folder.join(format!("{n}.flac"))).unwrap();
        }
    }
    let mut db = Store::open(&dir.path().join("store.db")).unwrap();
    scan(&mut db, &opts(&old, false), &|_| {}).unwrap();
    let before: Vec<(i64, String)> = db
        .tracks()
        .unwrap()
        .into_iter()
        .map(|t| (t.id, t.backing_path))
        .collect();
    let new = dir.path().join("new");
    std::fs::rename(&old, &new).unwrap();
    let s = scan(&mut db, &opts(&new, false), &|_| {}).unwrap();
    assert_eq!((s.moved, s.added), (90, 0), "{s:?}");
    let (old_prefix, new_prefix) = (old.to_str().unwrap(), new.to_str().unwrap());
    for (id, path) in before {
        let now = db.track(id).unwrap().unwrap().backing_path;
        assert_eq!(now, path.replacen(old_prefix, new_prefix, 1));
    }
}

/// The content fingerprint of a store from before version 5: sha256 over
/// the audio's length (8 bytes, little-endian) and its first and last 64
/// KiB. Computed here apart from the scanner.
fn sha256_fingerprint(file: &Path, offset: u64, len: u64) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(file).unwrap();
    let audio = &bytes[offset as usize..(offset + len) as usize];
    let span = audio.len().min(64 * 1024);
    let mut h = Sha256::new();
    h.update(len.to_le_bytes());
    h.update(&audio[..span]);
    h.update(&audio[audio.len() - span..]);
    h.finalize().to_vec()
}

/// Gives every track the fingerprint a store of version 4 had, where the
/// version 5 migration keeps it.
fn fingerprint_as_before_version_5(db: &Store) {
    for t in db.tracks().unwrap() {
        let fp = sha256_fingerprint(Path::new(&t.backing_path), t.audio_offset, t.audio_length);
        db.conn()
            .execute(
                "UPDATE tracks SET fingerprint = NULL, legacy_fingerprint = ?2 WHERE id = ?1",
                (t.id, fp),
            )
            .unwrap();
    }
}

/// Tracks scanned before fingerprints were BLAKE3 are still found moved,
/// within the library and with the whole library, and have the new
/// fingerprint once probed again.
#[test]
fn tracks_fingerprinted_before_version_5_are_found_moved() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old");
    copy_fixtures(&old);
    let mut db = Store::open(&dir.path().join("store.db")).unwrap();
    let first = scan(&mut db, &opts(&old, false), &|_| {}).unwrap();
    let flac = tagged_flac(&db, &old);
    retitle(&mut db, flac.id, "Edited");
    fingerprint_as_before_version_5(&db);

    std::fs::create_dir(old.join("sub")).unwrap();
    std::fs::rename(old.join("tagged.flac"), old.join("sub/moved.flac")).unwrap();
    let s = scan(&mut db, &opts(&old, false), &|_| {}).unwrap();
    assert_eq!((s.moved, s.added, s.missing), (1, 0, 0), "{s:?}");
    let moved = db
        .resolve_track(old.join("sub/moved.flac").to_str().unwrap())
        .unwrap();
    assert_eq!(moved.id, flac.id);

    let new = dir.path().join("new");
    std::fs::rename(&old, &new).unwrap();
    let s = scan(&mut db, &opts(&new, false), &|_| {}).unwrap();
    assert_eq!((s.moved, s.added), (first.added, 0), "{s:?}");
    assert_is_edited_track(&db, &new.join("sub/moved.flac"), flac.id);
    let legacy: i64 = db
        .conn()
        .query_row(
            "SELECT count(*) FROM tracks WHERE legacy_fingerprint IS NOT NULL OR fingerprint IS NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(legacy, 0);
}

#[test]
fn moved_file_keeps_its_row_and_edited_tags() {
    let dir = library();
    let mut db = Store::open(&dir.path().join("store.db")).unwrap();
    scan(&mut db, &opts(dir.path(), false), &|_| {}).unwrap();
    let before = tagged_flac(&db, dir.path());
    retitle(&mut db, before.id, "Edited");
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::rename(dir.path().join("tagged.flac"), dir.path().join("sub/moved.flac")).unwrap();
    let s = scan(&mut db, &opts(dir.path(), true), &|_| {}).unwrap();
    assert_eq!((s.moved, s.added, s.removed), (1, 0, 0), "{s:?}");
    let after = db
        .resolve_track(dir.path().join("sub/moved.flac").to_str().unwrap())
        .unwrap();
    assert_eq!(after.id, before.id);
    assert_eq!(
        db.tags(after.id)
            .unwrap()
            .iter()
            .find(|(k, _)| k == "title")
            .unwrap()
            .1,
        "Edited"
    );
}

/// A moved file whose container changed around the same audio (another
/// tagger rewrote it on the way) keeps its row, with the new structure.
#[test]
fn moved_file_with_a_new_header_is_served_from_its_new_structure() {
    let (dir, db_path, db) = scanned();
    let old = dir.path().join("tagged.wav");
    let before = db.resolve_track(old.to_str().unwrap()).unwrap();
    let bytes = std::fs::read(&old).unwrap();
    // A 100-byte chunk right after "WAVE": every later offset moves.
    let mut moved = bytes[..12].to_vec();
    moved.extend_from_slice(b"junk\x64\0\0\0");
    moved.extend_from_slice(&[0; 100]);
    moved.extend_from_slice(&bytes[12..]);
    let riff = (moved.len() - 8) as u32;
    moved[4..8].copy_from_slice(&riff.to_le_bytes());
    std::fs::remove_file(&old).unwrap();
    let new = dir.path().join("renamed.wav");
    std::fs::write(&new, &moved).unwrap();
    drop(db);

    let mut db = Store::open(&db_path).unwrap();
    let s = scan(&mut db, &opts(dir.path(), true), &|_| {}).unwrap();
    assert_eq!(s.moved, 1, "{s:?}");
    let after = db.resolve_track(new.to_str().unwrap()).unwrap();
    assert_eq!(after.id, before.id);
    assert_eq!(after.audio_offset, before.audio_offset + 108);
    let fresh = probe(&Source::new(&moved as &dyn ReadAt, moved.len() as u64)).unwrap();
    assert_eq!(db.backing_parts(after.id).unwrap(), fresh.parts);

    let lib = View::load(&db_path, view(Mode::Synthesis)).unwrap();
    let served = read_all(&lib, file_ino(after.id));
    let data_at = before.audio_offset as usize;
    let audio = &bytes[data_at..data_at + before.audio_length as usize];
    assert!(served.ends_with(audio));
}
