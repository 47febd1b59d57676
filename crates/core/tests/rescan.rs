//! Re-scans that take unchanged folders from the store's record of the
//! last scan (`scanned_dirs`) still find every change: files edited in
//! place, added, removed, and a record that was damaged.
//!
//! A folder is recorded only once its ctime is older than the scan by a
//! clock tick (a second where the file system keeps whole seconds), so
//! each library here is left to settle for a little over a second first.

mod common;

use std::path::Path;
use std::time::Duration;

use retagfs_core::scan::{scan, ScanOptions, ScanSummary};
use retagfs_store::Store;

use common::fixtures;

/// Three folders of fixtures (one with a file that fails, a name skipped
/// by extension and a file that is not audio), left to settle.
fn library() -> tempfile::TempDir {
    let dir = fresh_library();
    std::thread::sleep(Duration::from_millis(1100));
    dir
}

/// The same, scanned as soon as it is made.
fn fresh_library() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (folder, files) in [
        ("a", &["tagged.flac", "tagged.mp3"][..]),
        ("b/inner", &["tagged.ogg", "tagged.opus", "truncated.flac"]),
        ("c", &["tagged.wav", "tagged.m4a", "cover.png"]),
    ] {
        let to = dir.path().join(folder);
        std::fs::create_dir_all(&to).unwrap();
        for f in files {
            std::fs::copy(fixtures().join(f), to.join(f)).unwrap();
        }
    }
    std::fs::write(dir.path().join("c/not-audio.bin"), b"plain bytes, not audio").unwrap();
    dir
}

fn rescan(db: &mut Store, root: &Path, prune: bool, full: bool) -> ScanSummary {
    let opts = ScanOptions {
        prune,
        full,
        ..ScanOptions::new(vec![root.to_path_buf()], 2)
    };
    scan(db, &opts, &|_| {}).unwrap()
}

fn counts(s: &ScanSummary) -> [u64; 8] {
    [
        s.added,
        s.updated,
        s.moved,
        s.unchanged,
        s.removed,
        s.missing,
        s.failed,
        s.skipped,
    ]
}

fn recorded(db: &Store) -> i64 {
    db.conn()
        .query_row("SELECT count(*) FROM scanned_dirs", [], |r| r.get(0))
        .unwrap()
}

/// Deletes the track row of `backing_path` by hand, as a tool might.
fn delete_track_row(db: &Store, backing_path: &str) {
    let deleted = db
        .conn()
        .execute("DELETE FROM tracks WHERE backing_path = ?1", [backing_path])
        .unwrap();
    assert_eq!(deleted, 1);
}

/// A store holding the library, scanned twice so that the second scan
/// took every folder from the record.
fn scanned(lib: &Path) -> (tempfile::TempDir, Store) {
    let (store_dir, db) = scanned_once(lib);
    // The root, a, b, b/inner and c.
    assert_eq!(recorded(&db), 5);
    (store_dir, db)
}

fn scanned_once(lib: &Path) -> (tempfile::TempDir, Store) {
    let store_dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&store_dir.path().join("store.db")).unwrap();
    let first = rescan(&mut db, lib, false, false);
    assert_eq!(counts(&first), [6, 0, 0, 0, 0, 0, 1, 2], "{first:?}");
    (store_dir, db)
}

#[test]
fn an_unchanged_library_reads_the_same_from_the_record() {
    let lib = library();
    let (_store, mut db) = scanned(lib.path());
    let listed = rescan(&mut db, lib.path(), false, true);
    let from_record = rescan(&mut db, lib.path(), false, false);
    assert_eq!(counts(&listed), [0, 0, 0, 6, 0, 0, 1, 2], "{listed:?}");
    assert_eq!(counts(&from_record), counts(&listed), "{from_record:?}");
    assert_eq!(recorded(&db), 5);
}

#[test]
fn edits_in_place_additions_and_removals_are_all_found() {
    let lib = library();
    let root = lib.path();
    let (_store, mut db) = scanned(root);

    // Rewritten in place: its folder does not change, the file's stamps do.
    let flac = root.join("a/tagged.flac");
    std::fs::write(&flac, std::fs::read(&flac).unwrap()).unwrap();
    let s = rescan(&mut db, root, false, false);
    assert_eq!(counts(&s), [0, 1, 0, 5, 0, 0, 1, 2], "{s:?}");

    std::fs::copy(fixtures().join("untagged.flac"), root.join("b/inner/new.flac")).unwrap();
    let s = rescan(&mut db, root, false, false);
    assert_eq!(counts(&s), [1, 0, 0, 6, 0, 0, 1, 2], "{s:?}");

    // A removed file is reported by every scan until one prunes it.
    std::fs::remove_file(root.join("c/tagged.wav")).unwrap();
    for _ in 0..2 {
        let s = rescan(&mut db, root, false, false);
        assert_eq!(counts(&s), [0, 0, 0, 6, 0, 1, 1, 2], "{s:?}");
    }
    std::thread::sleep(Duration::from_millis(1100));
    let s = rescan(&mut db, root, false, false);
    assert_eq!(s.missing, 1, "{s:?}");
    let s = rescan(&mut db, root, true, false);
    assert_eq!(counts(&s), [0, 0, 0, 6, 1, 0, 1, 2], "{s:?}");
    assert_eq!(db.track_count().unwrap(), 6);
    let s = rescan(&mut db, root, false, false);
    assert_eq!(counts(&s), [0, 0, 0, 6, 0, 0, 1, 2], "{s:?}");

    // A removed folder, after its parent settled.
    std::fs::remove_dir_all(root.join("b")).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let s = rescan(&mut db, root, true, false);
    assert_eq!(counts(&s), [0, 0, 0, 3, 3, 0, 0, 2], "{s:?}");
    assert_eq!(recorded(&db), 3);
    let s = rescan(&mut db, root, false, false);
    assert_eq!(counts(&s), [0, 0, 0, 3, 0, 0, 0, 2], "{s:?}");
}

#[test]
fn a_damaged_record_is_listed_again_and_full_rebuilds_it() {
    let lib = library();
    let root = lib.path();
    let (_store, mut db) = scanned(root);
    let a = format!("{}/a", root.canonicalize().unwrap().display());
    // Entries that do not decode: the folder is listed.
    db.conn()
        .execute("UPDATE scanned_dirs SET entries = x'09ff' WHERE path = ?1", [&a])
        .unwrap();
    let s = rescan(&mut db, root, false, false);
    assert_eq!(counts(&s), [0, 0, 0, 6, 0, 0, 1, 2], "{s:?}");
    // A record that lies (a file left out) is believed until --full.
    db.conn()
        .execute("UPDATE scanned_dirs SET entries = x'' WHERE path = ?1", [&a])
        .unwrap();
    let believed = rescan(&mut db, root, false, false);
    assert_eq!(believed.unchanged, 4, "{believed:?}");
    let s = rescan(&mut db, root, false, true);
    assert_eq!(counts(&s), [0, 0, 0, 6, 0, 0, 1, 2], "{s:?}");
    let s = rescan(&mut db, root, false, false);
    assert_eq!(counts(&s), [0, 0, 0, 6, 0, 0, 1, 2], "{s:?}");
}

#[test]
fn a_scan_that_follows_symlinks_forgets_the_record() {
    let lib = library();
    let (_store, mut db) = scanned(lib.path());
    let opts = ScanOptions {
        follow_symlinks: true,
        ..ScanOptions::new(vec![lib.path().to_path_buf()], 2)
    };
    let s = scan(&mut db, &opts, &|_| {}).unwrap();
    assert_eq!(s.unchanged, 6);
    assert_eq!(recorded(&db), 0);
    let s = rescan(&mut db, lib.path(), false, false);
    assert_eq!(counts(&s), [0, 0, 0, 6, 0, 0, 1, 2], "{s:?}");
    assert_eq!(recorded(&db), 5);
}

#[test]
fn folders_too_new_to_trust_are_listed_and_every_change_is_found() {
    let lib = fresh_library();
    let root = lib.path();
    let (_store, mut db) = scanned_once(root);
    let scanned_at = |db: &Store| -> i64 {
        db.conn()
            .query_row("SELECT min(scanned_ns) FROM scanned_dirs", [], |r| r.get(0))
            .unwrap()
    };
    let first = scanned_at(&db);
    // At once: every folder changed too recently for its times to be
    // trusted, so each is listed (and found as recorded), and recorded
    // again as seen by this scan.
    let s = rescan(&mut db, root, false, false);
    assert_eq!(counts(&s), [0, 0, 0, 6, 0, 0, 1, 2], "{s:?}");
    assert!(scanned_at(&db) > first);
    // Changes made right after a scan.
    let untagged = std::fs::read(fixtures().join("untagged.flac")).unwrap();
    std::fs::write(root.join("a/tagged.flac"), &untagged).unwrap();
    std::fs::write(root.join("c/new.flac"), &untagged).unwrap();
    let s = rescan(&mut db, root, false, false);
    assert_eq!(counts(&s), [1, 1, 0, 5, 0, 0, 1, 2], "{s:?}");
    std::thread::sleep(Duration::from_millis(150));
    let s = rescan(&mut db, root, false, false);
    assert_eq!(counts(&s), [0, 0, 0, 7, 0, 0, 1, 2], "{s:?}");
    assert_eq!(recorded(&db), 5);
    std::fs::remove_file(root.join("b/inner/tagged.ogg")).unwrap();
    let s = rescan(&mut db, root, false, false);
    assert_eq!(counts(&s), [0, 0, 0, 6, 0, 1, 1, 2], "{s:?}");
}

#[test]
fn record_rows_that_lie_or_do_not_decode_are_listed_again() {
    let lib = library();
    let root = lib.path().canonicalize().unwrap();
    let (_store, mut db) = scanned(&root);
    let conn = db.conn();
    let a = format!("{}/a", root.display());
    // A subfolder that does not exist, added to a's entries.
    let changed = conn
        .execute(
            "UPDATE scanned_dirs SET entries = CAST(entries || x'0067686f737400' AS BLOB) WHERE path = ?1",
            [&a],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let ghosts = |db: &Store| -> i64 {
        db.conn()
            .query_row(
                "SELECT count(*) FROM scanned_dirs WHERE instr(entries, 'ghost') > 0",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    assert_eq!(ghosts(&db), 1);
    // Text where a number or the blob belongs, a count below zero, a
    // relative path.
    conn.execute(
        "UPDATE scanned_dirs SET entries = CAST(entries AS TEXT) WHERE path = ?1",
        [format!("{}/b", root.display())],
    )
    .unwrap();
    conn.execute(
        "UPDATE scanned_dirs SET device = 'not a number' WHERE path = ?1",
        [format!("{}/c", root.display())],
    )
    .unwrap();
    conn.execute_batch("PRAGMA ignore_check_constraints = ON")
        .unwrap();
    conn.execute(
        "UPDATE scanned_dirs SET skipped = -5 WHERE path = ?1",
        [format!("{}/b/inner", root.display())],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO scanned_dirs VALUES ('relative/x', 1, 2, 3, 4, 5, 6, x'01')",
        [],
    )
    .unwrap();
    conn.execute_batch("PRAGMA ignore_check_constraints = OFF")
        .unwrap();
    for _ in 0..3 {
        let s = rescan(&mut db, &root, false, false);
        assert_eq!(counts(&s), [0, 0, 0, 6, 0, 0, 1, 2], "{s:?}");
    }
    assert_eq!(ghosts(&db), 0);
}

#[test]
fn a_scan_waits_for_another_scan_of_the_same_store() {
    let lib = library();
    let store_dir = tempfile::tempdir().unwrap();
    let db_path = store_dir.path().join("store.db");
    let holder = Store::open(&db_path).unwrap();
    let held = holder.lock_for_scan(|| {}).unwrap();
    let root = lib.path().to_path_buf();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scan_done = done.clone();
    let scanning = std::thread::spawn(move || {
        let mut db = Store::open(&db_path).unwrap();
        let s = rescan(&mut db, &root, false, false);
        scan_done.store(true, std::sync::atomic::Ordering::SeqCst);
        s
    });
    // The library scans in a few tens of milliseconds when nothing holds
    // the lock.
    std::thread::sleep(Duration::from_millis(300));
    assert!(!done.load(std::sync::atomic::Ordering::SeqCst));
    drop(held);
    let s = scanning.join().unwrap();
    assert_eq!(counts(&s), [6, 0, 0, 0, 0, 0, 1, 2], "{s:?}");
}

#[test]
fn a_track_row_deleted_by_hand_comes_back_with_full() {
    let lib = library();
    let root = lib.path().canonicalize().unwrap();
    let (_store, mut db) = scanned(&root);
    delete_track_row(&db, &format!("{}/a/tagged.flac", root.display()));
    // `tracks` is the scanner's alone (docs/store.md): a scan that takes
    // every folder from the record does not read it; --full does.
    let s = rescan(&mut db, &root, false, true);
    assert_eq!(counts(&s), [1, 0, 0, 5, 0, 0, 1, 2], "{s:?}");
    let s = rescan(&mut db, &root, false, false);
    assert_eq!(counts(&s), [0, 0, 0, 6, 0, 0, 1, 2], "{s:?}");
}

/// A folder and a file whose names are not UTF-8 are taken from the record
/// like any other: a track row deleted by hand under them is not noticed
/// by a scan from the record (which would list the folder, and find the
/// file, if its recorded name did not lead back to it), and --full finds it.
#[test]
fn folders_whose_names_are_not_utf8_are_taken_from_the_record() {
    use std::os::unix::ffi::OsStrExt;
    let lib = fresh_library();
    let folder = lib.path().join(std::ffi::OsStr::from_bytes(b"Caf\xe9"));
    std::fs::create_dir(&folder).unwrap();
    let file = folder.join(std::ffi::OsStr::from_bytes(b"\xc9t\xe9.flac"));
    std::fs::copy(fixtures().join("tagged.flac"), &file).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let root = lib.path().canonicalize().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&store_dir.path().join("store.db")).unwrap();
    let first = rescan(&mut db, &root, false, false);
    assert_eq!(counts(&first), [7, 0, 0, 0, 0, 0, 1, 2], "{first:?}");
    assert_eq!(recorded(&db), 6);
    let path = root.join(file.strip_prefix(lib.path()).unwrap());
    delete_track_row(&db, &retagfs_store::path_to_text(&path));
    let s = rescan(&mut db, &root, false, false);
    assert_eq!(counts(&s), [0, 0, 0, 7, 0, 0, 1, 2], "{s:?}");
    let s = rescan(&mut db, &root, false, true);
    assert_eq!(counts(&s), [1, 0, 0, 6, 0, 0, 1, 2], "{s:?}");
}
