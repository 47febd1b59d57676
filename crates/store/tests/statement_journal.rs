//! Statement journals stay in memory once [`configure_sqlite`] has run: a
//! transaction writing tracks with long tag values opens no temporary file,
//! and a statement that changes megabytes of pages changed before in its
//! transaction succeeds.
//! A test binary of its own, as SQLite's configuration must come before
//! SQLite is used in the process.

mod common;

use std::path::Path;

use retagfs_store::{self as store, configure_sqlite, ScannedTrack, Store};

/// A track with 200 kB of lyrics: writing it journals more than SQLite's
/// default 64 KiB.
fn track_with_lyrics(i: usize) -> ScannedTrack {
    let lyrics = format!("line {i} of a song that goes on\n").repeat(200_000 / 32);
    let mut track = common::track(&format!("/m/{i}.flac"));
    track.tags = vec![("title".into(), format!("Song {i}")), ("lyrics".into(), lyrics)];
    track
}

/// Descriptors of this process open on files in `dir` (a temporary file
/// SQLite made there is unnamed but still shows its folder).
fn open_files_in(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

#[test]
fn long_tag_values_are_journaled_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite_tmp = dir.path().join("sqlite-tmp");
    std::fs::create_dir(&sqlite_tmp).unwrap();
    // Read by SQLite when it starts, on the first open below.
    std::env::set_var("SQLITE_TMPDIR", &sqlite_tmp);
    // SAFETY: the only test of this binary, and SQLite is not in use yet.
    assert!(unsafe { configure_sqlite() });

    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let tx = db.write().unwrap();
    for i in 0..40 {
        store::write_scanned(&tx, &track_with_lyrics(i), None).unwrap();
    }
    // A journal moved to a file stays open until the transaction ends.
    assert_eq!(
        open_files_in(&sqlite_tmp),
        0,
        "a statement journal went to a temporary file"
    );
    tx.commit().unwrap();
    assert_eq!(db.tags(1).unwrap().len(), 2);

    // Every lyrics row rewritten twice in one transaction: the second
    // statement journals the pages the first changed, 8 MB of them. With
    // journals spilled to a file past 512 KiB or more, the bundled SQLite
    // failed it with "database or disk is full".
    let tx = db.write().unwrap();
    for round in ["first", "second"] {
        tx.execute(
            "UPDATE tags SET value = ?1 || value WHERE key = 'lyrics'",
            [round],
        )
        .unwrap();
    }
    tx.commit().unwrap();
    assert!(db.tags(1).unwrap()[0].1.starts_with("secondfirst"));
}
