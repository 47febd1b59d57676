//! A served view following its store while loaded: edits, removals and a
//! truncated change log reach the tree on refresh, an open handle keeps
//! the version it opened, and the watcher loads a store replaced or
//! scanned anew while served.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use retagfs_core::scan::scan;
use retagfs_core::view::tree::{file_ino, Entry};
use retagfs_core::view::watch::Watcher;
use retagfs_core::{Mode, View};
use retagfs_store::{self as store, Store};

use common::{opts, path_of, read_all, retitle, scanned, tagged_flac, view};

/// Scans the library in `dir` again into a store beside it, gives the
/// track of `backing` that title there if one is given, and moves that
/// store over `db_path`, as a store rebuilt elsewhere is put in place.
/// The track's id in the new store comes back (scans probe in parallel:
/// ids need not be the old store's).
fn move_rebuilt_store_over(dir: &Path, db_path: &Path, backing: &str, title: Option<&str>) -> i64 {
    let other = dir.join("other.db");
    let mut rebuilt = Store::open(&other).unwrap();
    scan(&mut rebuilt, &opts(dir, false), &|_| {}).unwrap();
    let id = rebuilt.resolve_track(backing).unwrap().id;
    if let Some(title) = title {
        retitle(&mut rebuilt, id, title);
    }
    drop(rebuilt);
    std::fs::rename(&other, db_path).unwrap();
    id
}

/// That the fixture FLAC (track `id`) is served under `title`.
fn assert_fixture_title(lib: &View, id: i64, title: &str) {
    let want = format!("Fixture Band/Fixture Album/03 {title}.flac");
    assert_eq!(path_of(lib, id).unwrap(), want);
}

/// Follows the store with a watcher that runs `also` at each refresh,
/// then says whether that refresh rebuilt the tree.
fn watch(
    lib: &Arc<View>,
    db_path: &Path,
    also: impl Fn(&retagfs_core::Refresh) + Send + 'static,
) -> (Watcher, std::sync::mpsc::Receiver<bool>) {
    let (refreshed, refreshes) = std::sync::mpsc::channel();
    let watcher = Watcher::spawn(lib.clone(), db_path, move |r| {
        also(r);
        let _ = refreshed.send(r.rebuilt);
    })
    .unwrap();
    (watcher, refreshes)
}

/// Edits reach the tree through the change log, one track at a time; a
/// truncated log falls back to a rebuild that agrees with a fresh load.
#[test]
fn refresh_follows_edits_removals_and_a_truncated_log() {
    let (dir, db_path, mut db) = scanned();
    let lib = View::load(&db_path, view(Mode::Synthesis)).unwrap();
    assert_eq!(lib.refresh().unwrap().tracks, 0);

    let flac = tagged_flac(&db, dir.path());
    let before = path_of(&lib, flac.id).unwrap();
    retitle(&mut db, flac.id, "Live");
    let r = lib.refresh().unwrap();
    assert_eq!((r.tracks, r.rebuilt), (1, false));
    let after = path_of(&lib, flac.id).unwrap();
    assert_eq!(after, "Fixture Band/Fixture Album/03 Live.flac");
    let album = lib.tree().get(file_ino(flac.id)).unwrap().parent;
    assert!(
        r.invalidations
            .entries
            .contains(&(album, "03 Fixture Song.flac".into())),
        "{r:?}"
    );
    assert!(r.invalidations.inodes.contains(&file_ino(flac.id)));
    assert_ne!(before, after);

    // A size change shows in the tree without reopening.
    let size_before = match &lib.tree().get(file_ino(flac.id)).unwrap().entry {
        Entry::File(f) => f.size,
        _ => unreachable!(),
    };
    let tx = db.write().unwrap();
    store::set_tag(&tx, flac.id, "comment", &["x".repeat(1000)]).unwrap();
    tx.commit().unwrap();
    lib.refresh().unwrap();
    match &lib.tree().get(file_ino(flac.id)).unwrap().entry {
        Entry::File(f) => assert!(f.size > size_before + 1000),
        _ => unreachable!(),
    }

    // Removing the only track of a directory removes the directory too.
    let mp3 = db
        .resolve_track(dir.path().join("tagged.mp3").to_str().unwrap())
        .unwrap();
    let tx = db.write().unwrap();
    store::remove_track(&tx, mp3.id).unwrap();
    tx.commit().unwrap();
    lib.refresh().unwrap();
    assert!(path_of(&lib, mp3.id).is_none());
    assert!(!lib
        .tree()
        .file_paths()
        .iter()
        .any(|p| p.starts_with("MP3 Artist")));

    // The log truncated past what the library saw: a full rebuild.
    db.conn().execute("DELETE FROM changes", []).unwrap();
    retitle(&mut db, flac.id, "Rebuilt");
    db.conn().execute("DELETE FROM changes", []).unwrap();
    let tx = db.write().unwrap();
    store::set_tag(&tx, flac.id, "album", &["New Album".into()]).unwrap();
    tx.commit().unwrap();
    let r = lib.refresh().unwrap();
    assert!(r.rebuilt);
    let fresh = View::load(&db_path, view(Mode::Synthesis)).unwrap();
    assert_eq!(lib.tree().file_paths(), fresh.tree().file_paths());
    assert_eq!(
        path_of(&lib, flac.id).unwrap(),
        "Fixture Band/New Album/03 Rebuilt.flac"
    );
}

/// A file opened before a retag keeps serving the version it opened.
#[test]
fn open_handle_keeps_its_version_across_a_retag() {
    let (dir, db_path, mut db) = scanned();
    let lib = View::load(&db_path, view(Mode::Synthesis)).unwrap();
    let t = db
        .resolve_track(dir.path().join("tagged.ogg").to_str().unwrap())
        .unwrap();
    let old = read_all(&lib, file_ino(t.id));
    let file = lib.open(file_ino(t.id)).unwrap();
    let mut first = lib.read(&file, 0, 3000, &mut Vec::new()).unwrap().to_vec();
    retitle(&mut db, t.id, "A much longer title than before");
    lib.refresh().unwrap();
    first.extend_from_slice(lib.read(&file, 3000, old.len(), &mut Vec::new()).unwrap());
    assert_eq!(first, old);
    assert_ne!(read_all(&lib, file_ino(t.id)), old);
}

/// A store rebuilt elsewhere and moved over the served one is loaded by
/// the watcher, not read through the old store's WAL (which SQLite pairs
/// with any database of that name). A file opened before still serves its
/// own header and audio, but its picture, read from the store, fails rather
/// than coming from the other store.
#[test]
fn a_replaced_store_is_reloaded_and_older_handles_do_not_read_its_pictures() {
    let (dir, db_path, mut db) = scanned();
    let lib = Arc::new(View::load(&db_path, view(Mode::Synthesis)).unwrap());
    let flac = tagged_flac(&db, dir.path());
    // An edit the old store's WAL still holds (the library's connections
    // keep it from being checkpointed away).
    retitle(&mut db, flac.id, "Old Store Edit");
    lib.refresh().unwrap();
    let (refreshed, refreshes) = std::sync::mpsc::channel();
    let watcher = Watcher::spawn(lib.clone(), &db_path, move |r| {
        let _ = refreshed.send((r.rebuilt, r.invalidations.entries.len()));
    })
    .unwrap();
    let before = read_all(&lib, file_ino(flac.id));
    let opened_before = lib.open(file_ino(flac.id)).unwrap();

    drop(db);
    let id = move_rebuilt_store_over(
        dir.path(),
        &db_path,
        &flac.backing_path,
        Some("From The New Store"),
    );

    let (rebuilt, forgotten) = refreshes.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(rebuilt && forgotten > 0);
    watcher.stop();
    let fresh = View::load(&db_path, view(Mode::Synthesis)).unwrap();
    assert_eq!(fresh.tree().file_count(), lib.tree().file_count());
    assert_eq!(lib.tree().file_paths(), fresh.tree().file_paths());
    assert_fixture_title(&lib, id, "From The New Store");
    assert_eq!(read_all(&lib, file_ino(id)), read_all(&fresh, file_ino(id)));

    // The old handle: its first bytes (the header before the picture) as
    // before, the whole file not.
    let head = lib.read(&opened_before, 0, 64, &mut Vec::new()).unwrap().to_vec();
    assert_eq!(head, before[..64]);
    let whole = lib
        .read(&opened_before, 0, before.len(), &mut Vec::new())
        .map(|_| ());
    assert_eq!(whole.unwrap_err().raw_os_error(), Some(libc::EIO));
}

/// An edit committed while the watcher starts, or while it loads a store
/// moved over the served one, is followed: the watcher catches up once
/// after it opens its connection (under load, a test's edit once landed
/// between the load and the watcher's first look and never showed).
#[test]
fn edits_made_as_the_watcher_starts_or_reloads_are_followed() {
    let (dir, db_path, mut db) = scanned();
    let lib = Arc::new(View::load(&db_path, view(Mode::Synthesis)).unwrap());
    let flac = tagged_flac(&db, dir.path());
    // Committed after the load, before the watcher exists.
    retitle(&mut db, flac.id, "Before The Watcher");
    drop(db);

    // The first rebuild is the replaced store's load: the callback edits
    // the new store before the watcher can read its version.
    let (edit_path, backing) = (db_path.clone(), flac.backing_path.clone());
    let edited = std::sync::atomic::AtomicBool::new(false);
    let (watcher, refreshes) = watch(&lib, &db_path, move |r| {
        if r.rebuilt && !edited.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let mut db = Store::open(&edit_path).unwrap();
            let id = db.resolve_track(&backing).unwrap().id;
            retitle(&mut db, id, "During The Reload");
        }
    });
    assert_eq!(refreshes.recv_timeout(Duration::from_secs(10)), Ok(false));
    assert_fixture_title(&lib, flac.id, "Before The Watcher");

    let id = move_rebuilt_store_over(dir.path(), &db_path, &flac.backing_path, None);
    assert_eq!(refreshes.recv_timeout(Duration::from_secs(10)), Ok(true));
    assert_eq!(refreshes.recv_timeout(Duration::from_secs(10)), Ok(false));
    watcher.stop();
    assert_fixture_title(&lib, id, "During The Reload");
}

/// A store moved over the served one after the library loaded it but
/// before its watcher started is loaded too: the watcher compares the path
/// with the file the library read, not with what the path names when the
/// watcher starts.
#[test]
fn a_store_replaced_before_its_watcher_starts_is_loaded() {
    let (dir, db_path, db) = scanned();
    let lib = Arc::new(View::load(&db_path, view(Mode::Synthesis)).unwrap());
    let flac = tagged_flac(&db, dir.path());
    drop(db);
    let id = move_rebuilt_store_over(
        dir.path(),
        &db_path,
        &flac.backing_path,
        Some("From The New Store"),
    );

    let (watcher, refreshes) = watch(&lib, &db_path, |_| {});
    assert_eq!(refreshes.recv_timeout(Duration::from_secs(10)), Ok(true));
    watcher.stop();
    assert_fixture_title(&lib, id, "From The New Store");
}

/// A store removed and scanned anew while served is loaded once its scan
/// ends, not as it grows: a media server reading the view meanwhile sees
/// the old store's files, then the new store's.
#[test]
fn a_store_scanned_anew_is_loaded_when_its_scan_ends() {
    let (dir, db_path, mut db) = scanned();
    let flac = tagged_flac(&db, dir.path());
    retitle(&mut db, flac.id, "Old Store Edit");
    drop(db);
    let lib = Arc::new(View::load(&db_path, view(Mode::Synthesis)).unwrap());
    let old_paths = lib.tree().file_paths();
    let (watcher, refreshes) = watch(&lib, &db_path, |_| {});

    std::fs::remove_file(&db_path).unwrap();
    let mut anew = retagfs_core::scan::open_store(&db_path).unwrap();
    scan(&mut anew, &opts(dir.path(), false), &|_| {}).unwrap();
    let id = tagged_flac(&anew, dir.path()).id;
    retitle(&mut anew, id, "From The New Store");
    // Each commit woke the watcher, and it looks at least once a second.
    assert!(refreshes.recv_timeout(Duration::from_millis(1500)).is_err());
    assert_eq!(lib.tree().file_paths(), old_paths);
    assert_fixture_title(&lib, flac.id, "Old Store Edit");

    drop(anew);
    assert_eq!(refreshes.recv_timeout(Duration::from_secs(10)), Ok(true));
    watcher.stop();
    assert_fixture_title(&lib, id, "From The New Store");
}
