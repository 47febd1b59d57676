//! The store's contract: triggers version and log every edit, CHECK
//! constraints reject malformed rows, newer stores are refused.

mod common;

use common::{store_of_version, track};
use retagfs_store::{
    self as store, BackingPart, DirStamp, Fingerprint, Format, NewArt, PartKind, ScanLock, ScannedDir,
    ScannedTrack, Store, StoreError,
};

/// A picture's row (its bytes need not be an image).
fn tiny_png() -> NewArt {
    tiny_png_of(3)
}

/// Another picture for each `first` byte.
fn tiny_png_of(first: u8) -> NewArt {
    NewArt {
        mime: "image/png".into(),
        width: 1,
        height: 1,
        depth: 24,
        data: vec![first, 2, 3],
    }
}

fn changes(db: &Store) -> i64 {
    db.conn()
        .query_row("SELECT count(*) FROM changes", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn edits_bump_version_and_append_to_the_change_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    assert!(!db.has_tracks().unwrap());
    let tx = db.write().unwrap();
    let id = store::write_scanned(&tx, &track("/m/a.flac"), None).unwrap();
    tx.commit().unwrap();
    assert!(db.has_tracks().unwrap());
    assert_eq!(db.tags(id).unwrap()[0], ("artist".to_string(), "A".to_string()));
    let v0 = db.track(id).unwrap().unwrap().content_version;
    let c0 = changes(&db);

    // A raw SQL edit, as an external tool would make it.
    db.conn()
        .execute(
            "UPDATE tags SET value = 'New' WHERE track_id = ?1 AND key = 'title'",
            [id],
        )
        .unwrap();
    assert!(db.track(id).unwrap().unwrap().content_version > v0);
    assert_eq!(changes(&db), c0 + 1);

    let tx = db.write().unwrap();
    let art = tiny_png();
    let sha = store::set_art(&tx, id, &art, 3).unwrap();
    // Same bytes for another type: deduplicated by content.
    assert_eq!(store::set_art(&tx, id, &art, 4).unwrap(), sha);
    tx.commit().unwrap();
    let n: i64 = db
        .conn()
        .query_row("SELECT count(*) FROM art", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(db.art_links(id).unwrap().len(), 2);
    let mut buf = [0u8; 2];
    assert_eq!(
        db.read_art(db.art_links(id).unwrap()[0].art_rowid, 1, &mut buf)
            .unwrap(),
        2
    );
    assert_eq!(buf, [2, 3]);
}

/// The change log's kinds for one track, oldest first.
fn logged(db: &Store, id: i64) -> Vec<String> {
    let mut stmt = db
        .conn()
        .prepare("SELECT kind FROM changes WHERE track_id = ?1 ORDER BY seq")
        .unwrap();
    stmt.query_map([id], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

#[test]
fn a_new_track_logs_that_it_was_added_and_its_later_edits() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let art = tiny_png();
    let mut file = track("/m/a.flac");
    file.pictures = vec![store::ScannedPicture {
        sha256: art.sha256(),
        art,
        picture_type: 3,
        description: String::new(),
    }];
    let tx = db.write().unwrap();
    let first = store::write_scanned(&tx, &track("/m/0.flac"), None).unwrap();
    let id = store::write_scanned(&tx, &file, None).unwrap();
    tx.commit().unwrap();
    assert_eq!(id, first + 1, "numbered as SQLite would");
    // Its tags and picture came with it: one entry says so.
    assert_eq!(db.tags(id).unwrap().len(), 3);
    assert_eq!(db.art_links(id).unwrap().len(), 1);
    assert_eq!(logged(&db, id), ["added"]);
    assert_eq!(db.track(id).unwrap().unwrap().content_version, 1);

    let tx = db.write().unwrap();
    store::add_tag(&tx, id, "genre", &["Jazz".into()]).unwrap();
    tx.commit().unwrap();
    // As an external tool would write them, through SQL.
    db.conn()
        .execute_batch(&format!(
            "INSERT INTO tags (track_id, key, position, value) VALUES ({id}, 'mood', 0, 'calm');
             INSERT INTO track_art (track_id, position, art_sha256, picture_type)
                 SELECT {id}, 1, sha256, 4 FROM art;"
        ))
        .unwrap();
    assert_eq!(logged(&db, id), ["added", "tags", "tags", "art"]);
    assert_eq!(db.track(id).unwrap().unwrap().content_version, 4);
    // A tag row without its track is still refused.
    let orphan = db.conn().execute(
        "INSERT INTO tags (track_id, key, position, value) VALUES (?1, 'title', 0, 'x')",
        [id + 100],
    );
    assert!(orphan.is_err());
}

#[test]
fn a_store_whose_last_track_id_is_the_largest_takes_no_new_track() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    db.conn()
        .execute(
            "INSERT INTO tracks (id, backing_path, format, audio_offset, audio_length, file_size,
                                 mtime_ns, ctime_ns, scanned_at)
             VALUES (?1, '/m/last.flac', 'flac', 0, 0, 0, 1, 1, 0)",
            [i64::MAX],
        )
        .unwrap();
    let tx = db.write().unwrap();
    let err = store::write_scanned(&tx, &track("/m/a.flac"), None).unwrap_err();
    assert!(matches!(err, StoreError::IdsUsedUp), "{err}");
    assert!(err.to_string().contains("largest id"), "{err}");
    drop(tx);
    assert_eq!(db.track_count().unwrap(), 1, "nothing written");
}

#[test]
fn check_constraints_reject_malformed_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let tx = db.write().unwrap();
    let id = store::write_scanned(&tx, &track("/m/a.flac"), None).unwrap();
    tx.commit().unwrap();
    let bad = [
        "INSERT INTO tags VALUES (?1, 'Title', 0, 'x')",
        "INSERT INTO tags VALUES (?1, 'a=b', 0, 'x')",
        "INSERT INTO tags VALUES (?1, '', 0, 'x')",
        "INSERT INTO tags VALUES (?1, 'x' || char(10), 0, 'x')",
        "INSERT INTO track_art VALUES (?1, 5, 'nope', 3, '')",
        "UPDATE tracks SET audio_length = 1000 WHERE id = ?1",
        "UPDATE tracks SET format = 'aiff' WHERE id = ?1",
    ];
    for sql in bad {
        assert!(db.conn().execute(sql, [id]).is_err(), "accepted: {sql}");
    }
}

#[test]
fn newer_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    Store::open(&path)
        .unwrap()
        .conn()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    match Store::open(&path) {
        Err(e @ StoreError::TooNew { .. }) => assert!(e.to_string().contains("upgrade retagfs")),
        other => panic!("expected TooNew, got {:?}", other.err()),
    }
}

#[test]
fn foreign_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("CREATE TABLE x (y)", [])
        .unwrap();
    assert!(matches!(Store::open(&path), Err(StoreError::NotAStore { .. })));
}

#[test]
fn backing_parts_and_passthrough_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let mut t = track("/m/a.wav");
    t.format = Format::Wav;
    t.flac_blocks.clear();
    t.parts = vec![
        BackingPart::new(PartKind::Chunk, 12, 24),
        BackingPart::new(PartKind::Data, 44, 56),
    ];
    t.passthrough = Some("why".into());
    let tx = db.write().unwrap();
    let id = store::write_scanned(&tx, &t, None).unwrap();
    tx.commit().unwrap();
    assert_eq!(db.backing_parts(id).unwrap(), t.parts);
    let mut bundles = Vec::new();
    db.for_each_track(|b| bundles.push(b)).unwrap();
    assert_eq!(bundles.iter().find(|b| b.track.id == id).unwrap().parts, t.parts);
    assert_eq!(db.track(id).unwrap().unwrap().passthrough.as_deref(), Some("why"));
}

#[test]
fn version_1_store_is_migrated_and_its_unstructured_tracks_pass_through() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(include_str!("../src/migrations/001_first_schema.sql"))
            .unwrap();
        conn.execute_batch(
            "PRAGMA user_version = 1;
             INSERT INTO tracks (backing_path, format, audio_offset, audio_length, file_size,
                                 mtime_ns, ctime_ns, scanned_at)
             VALUES ('/m/a.wav', 'wav', 44, 56, 100, 1, 1, 0), ('/m/b.mp3', 'mp3', 0, 100, 100, 1, 1, 0);",
        )
        .unwrap();
    }
    let db = Store::open(&path).unwrap();
    let tracks = db.tracks().unwrap();
    let reason = |p: &str| {
        tracks
            .iter()
            .find(|t| t.backing_path == p)
            .unwrap()
            .passthrough
            .clone()
    };
    assert!(reason("/m/a.wav").unwrap().contains("retagfs scan"));
    assert_eq!(reason("/m/b.mp3"), None);
    // The next scan sees the structureless track as changed; every track
    // from before version 13 too (it has no duration), until it has one.
    let known = db.known_stamps().unwrap();
    let mtime = |known: &retagfs_store::KnownStamps, p: &str| known.stamps(known.find(p).unwrap()).mtime_ns;
    assert_eq!(mtime(&known, "/m/a.wav"), -1);
    assert_eq!(mtime(&known, "/m/b.mp3"), -1);
    db.conn()
        .execute("UPDATE tracks SET duration_ms = 1000", [])
        .unwrap();
    let known = db.known_stamps().unwrap();
    assert_eq!(mtime(&known, "/m/a.wav"), -1);
    assert_eq!(mtime(&known, "/m/b.mp3"), 1);
}

/// A store of version 4 keeps its sha256 fingerprints as legacy ones,
/// until a track is probed again and gets the BLAKE3 one.
#[test]
fn version_4_fingerprints_are_kept_as_legacy_until_probed_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    {
        let conn = store_of_version(&path, 4);
        conn.execute_batch(
            "INSERT INTO tracks (backing_path, format, audio_offset, audio_length, file_size,
                                 mtime_ns, ctime_ns, scanned_at, fingerprint)
             VALUES ('/m/a.flac', 'flac', 10, 90, 100, 1, 1, 0, zeroblob(32)),
                    ('/m/b.flac', 'flac', 10, 90, 100, 1, 1, 0, NULL);",
        )
        .unwrap();
    }
    let mut db = Store::open(&path).unwrap();
    let id = |db: &Store, p: &str| db.resolve_track(p).unwrap().id;
    let (a, b) = (id(&db, "/m/a.flac"), id(&db, "/m/b.flac"));
    assert_eq!(
        db.fingerprints(&[a, b]).unwrap(),
        [(a, Fingerprint::Sha256([0; 32]))]
    );
    assert!(db.has_legacy_fingerprints().unwrap());
    // The migration is no edit: nothing to refresh.
    assert_eq!(db.last_change_seq().unwrap(), 2);

    let mut file = track("/m/a.flac");
    file.fingerprint = Some([7; 32]);
    let tx = db.write().unwrap();
    store::write_scanned(&tx, &file, Some(a)).unwrap();
    tx.commit().unwrap();
    assert_eq!(
        db.fingerprints(&[a]).unwrap(),
        [(a, Fingerprint::Blake3([7; 32]))]
    );
    assert!(!db.has_legacy_fingerprints().unwrap());
    let tx = db.write().unwrap();
    assert_eq!(
        store::tracks_with_fingerprint(&tx, &Fingerprint::Blake3([7; 32])).unwrap(),
        [(a, "/m/a.flac".to_string())]
    );
    assert!(store::tracks_with_fingerprint(&tx, &Fingerprint::Sha256([0; 32]))
        .unwrap()
        .is_empty());
}

/// A store of version 7 keeps its tags and FLAC blocks, long ones
/// included, in rowid tables with the same keys and triggers; rows of
/// tracks that are gone (written with foreign keys off) are dropped.
#[test]
fn version_7_tags_and_flac_blocks_move_to_rowid_tables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let lyrics = "la ".repeat(30_000);
    {
        let conn = store_of_version(&path, 7);
        conn.execute_batch(
            "PRAGMA foreign_keys = OFF;
             INSERT INTO tracks (id, backing_path, format, audio_offset, audio_length, file_size,
                                 mtime_ns, ctime_ns, scanned_at)
             VALUES (1, '/m/a.flac', 'flac', 10, 90, 100, 1, 1, 0);
             INSERT INTO flac_blocks VALUES (1, 0, 0, x'0102'), (1, 1, 3, zeroblob(5000)), (9, 0, 0, x'03');
             INSERT INTO tags VALUES (1, 'title', 0, 'T'), (9, 'title', 0, 'Gone');",
        )
        .unwrap();
        conn.execute("INSERT INTO tags VALUES (1, 'lyrics', 0, ?1)", [&lyrics])
            .unwrap();
    }
    let before: (i64, i64) = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT (SELECT content_version FROM tracks WHERE id = 1), (SELECT count(*) FROM changes)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let mut db = Store::open(&path).unwrap();
    assert_eq!(
        db.tags(1).unwrap(),
        [
            ("lyrics".to_string(), lyrics.clone()),
            ("title".into(), "T".into())
        ]
    );
    assert_eq!(db.flac_blocks(1).unwrap(), [(0, vec![1, 2]), (3, vec![0; 5000])]);
    let count = |sql: &str| -> i64 { db.conn().query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT count(*) FROM tags"), 2);
    assert_eq!(count("SELECT count(*) FROM flac_blocks"), 2);
    assert_eq!(
        count("SELECT count(*) FROM sqlite_master WHERE sql LIKE '%WITHOUT ROWID%' AND name IN ('tags', 'flac_blocks')"),
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'tags'"),
        3
    );
    // The migration is no edit: nothing to refresh.
    let seq = db.last_change_seq().unwrap();
    assert_eq!(
        (
            count("SELECT content_version FROM tracks WHERE id = 1"),
            count("SELECT count(*) FROM changes")
        ),
        before
    );
    // The key still holds, and edits are still logged.
    assert!(db
        .conn()
        .execute("INSERT INTO tags VALUES (1, 'title', 0, 'Again')", [])
        .is_err());
    let tx = db.write().unwrap();
    store::set_tag(&tx, 1, "title", &["New".to_string()]).unwrap();
    tx.commit().unwrap();
    assert!(db.last_change_seq().unwrap() > seq);
    assert_eq!(db.tags(1).unwrap()[1], ("title".into(), "New".into()));
}

#[test]
fn scanned_values_of_a_key_keep_their_order_on_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let positions = |db: &Store, id: i64| -> Vec<(String, i64, String)> {
        let mut stmt = db
            .conn()
            .prepare("SELECT key, position, value FROM tags WHERE track_id = ?1 ORDER BY key, position")
            .unwrap();
        stmt.query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let expected = vec![
        ("artist".to_string(), 0, "A".to_string()),
        ("artist".to_string(), 1, "B".to_string()),
        ("title".to_string(), 0, "T".to_string()),
    ];
    let tx = db.write().unwrap();
    let id = store::write_scanned(&tx, &track("/m/a.flac"), None).unwrap();
    tx.commit().unwrap();
    assert_eq!(positions(&db, id), expected);

    // A re-scan replaces the tags: the positions start over.
    let tx = db.write().unwrap();
    store::write_scanned(&tx, &track("/m/a.flac"), Some(id)).unwrap();
    tx.commit().unwrap();
    assert_eq!(positions(&db, id), expected);
}

/// A file's tags are written several statements' worth at a time, in key
/// order: every value comes back, each key's values in the file's order.
#[test]
fn many_scanned_values_come_back_in_the_files_order_of_each_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let mut t = track("/m/a.flac");
    // 100 values of five keys, interleaved as a file may hold them, and
    // one long enough to spill onto overflow pages.
    t.tags = (0..100)
        .map(|i| (format!("key{}", 4 - i % 5), format!("value {i}")))
        .chain([("lyrics".to_string(), "la ".repeat(30_000))])
        .collect();
    let tx = db.write().unwrap();
    let id = store::write_scanned(&tx, &t, None).unwrap();
    tx.commit().unwrap();

    let mut expected = t.tags.clone();
    // Ordered by key; a stable sort keeps each key's values in file order.
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(db.tags(id).unwrap(), expected);
}

#[test]
fn scanned_folders_round_trip_and_are_forgotten_below_a_root_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let stamp = DirStamp {
        device: u64::MAX - 1,
        inode: 42,
        mtime_ns: -7,
        ctime_ns: 1_700_000_000_000_000_001,
    };
    let paths = ["/m", "/m/a", "/m/a/b", "/m/%_", "/m-x", "/m0", "/ma", "/n/m"];
    let tx = db.write().unwrap();
    for (i, p) in paths.iter().enumerate() {
        store::save_scanned_dir(&tx, p, &ScannedDir::new(stamp, i as i64, i as u64, [])).unwrap();
    }
    tx.commit().unwrap();
    let all = db.scanned_dirs().unwrap();
    assert_eq!(all.len(), paths.len());
    let b = all.get("/m/a/b").unwrap();
    assert_eq!((b.stamp, b.scanned_ns, b.skipped_by_name), (stamp, 2, 2));

    let tx = db.write().unwrap();
    store::forget_scanned_dirs_under(&tx, "/m/").unwrap();
    tx.commit().unwrap();
    let left = db.scanned_dirs().unwrap();
    let mut left: Vec<&str> = left.paths().collect();
    left.sort();
    assert_eq!(left, ["/m-x", "/m0", "/ma", "/n/m"]);
}

#[test]
fn one_scan_lock_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let first = Store::open(&path).unwrap();
    let held = first.lock_for_scan(|| panic!("nothing holds it yet")).unwrap();
    assert!(held.is_some());
    let (waiting_tx, waiting_rx) = std::sync::mpsc::channel();
    let (got_tx, got_rx) = std::sync::mpsc::channel();
    let second = std::thread::spawn(move || {
        let other = Store::open(&path).unwrap();
        let lock = other.lock_for_scan(|| waiting_tx.send(()).unwrap()).unwrap();
        got_tx.send(()).unwrap();
        lock.is_some()
    });
    waiting_rx.recv().unwrap();
    assert!(got_rx.try_recv().is_err(), "taken while held");
    drop(held);
    got_rx.recv().unwrap();
    assert!(second.join().unwrap());
    assert!(dir.path().join("s.db-scan.lock").exists());
}

#[test]
fn a_store_opened_for_a_scan_holds_its_lock_until_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    assert!(!ScanLock::held(&path).unwrap(), "no scan ever ran");
    let scanning = Store::open_for_scan(&path, || panic!("nothing holds it yet")).unwrap();
    assert!(ScanLock::held(&path).unwrap());
    // Its own scan does not wait for it.
    assert!(scanning
        .lock_for_scan(|| panic!("held by this store"))
        .unwrap()
        .is_none());
    let other = Store::open(&path).unwrap();
    let (waiting_tx, waiting_rx) = std::sync::mpsc::channel();
    let second = std::thread::spawn(move || {
        let lock = other.lock_for_scan(|| waiting_tx.send(()).unwrap()).unwrap();
        lock.is_some()
    });
    waiting_rx.recv().unwrap();
    drop(scanning);
    assert!(second.join().unwrap());
    assert!(!ScanLock::held(&path).unwrap());
}

#[test]
fn a_new_store_opened_by_several_at_once_is_made_once() {
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
        let openers: Vec<_> = (0..4)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    Store::open(&path).map(|db| db.track_count().unwrap())
                })
            })
            .collect();
        for opener in openers {
            assert_eq!(opener.join().unwrap().unwrap(), 0);
        }
    }
}

/// A WAV track at `path` with no tags and one data part.
fn bare_wav(path: &str) -> store::ScannedTrack {
    let mut bare = track(path);
    bare.format = Format::Wav;
    bare.tags.clear();
    bare.flac_blocks.clear();
    bare.parts = vec![BackingPart::new(PartKind::Data, 44, 56)];
    bare
}

#[test]
fn every_track_comes_with_its_own_rows_in_id_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let bare = bare_wav("/m/b.wav");
    let tx = db.write().unwrap();
    let a = store::write_scanned(&tx, &track("/m/a.flac"), None).unwrap();
    let gone = store::write_scanned(&tx, &track("/m/gone.flac"), None).unwrap();
    let b = store::write_scanned(&tx, &bare, None).unwrap();
    tx.commit().unwrap();
    // A tool deleting a track with foreign keys off leaves its rows behind.
    db.conn()
        .execute_batch(&format!(
            "PRAGMA foreign_keys = OFF; DELETE FROM tracks WHERE id = {gone};"
        ))
        .unwrap();

    let mut bundles = Vec::new();
    db.read_snapshot(|s| s.for_each_track(|t| bundles.push(t)))
        .unwrap();

    let ids: Vec<i64> = bundles.iter().map(|t| t.track.id).collect();
    assert_eq!(ids, [a, b]);
    assert_eq!(bundles[0].tags, db.tags(a).unwrap());
    assert_eq!(bundles[0].flac_block_lens, [(0, 34)]);
    assert!(bundles[0].parts.is_empty());
    assert!(bundles[1].tags.is_empty() && bundles[1].flac_block_lens.is_empty());
    assert_eq!(bundles[1].parts, bare.parts);
}

/// The range read that prepares an album's files gives each track what
/// the per-track reads give it, errors included, and no other track.
#[test]
fn tracks_read_as_a_range_come_with_what_each_is_read_with_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let bare = bare_wav("/m/b.wav");
    let art = tiny_png();
    let sha: String = art.sha256().iter().map(|b| format!("{b:02x}")).collect();
    let tx = db.write().unwrap();
    let a = store::write_scanned(&tx, &track("/m/a.flac"), None).unwrap();
    store::set_art(&tx, a, &art, 3).unwrap();
    let gone = store::write_scanned(&tx, &track("/m/gone.flac"), None).unwrap();
    let b = store::write_scanned(&tx, &bare, None).unwrap();
    let lost = store::write_scanned(&tx, &track("/m/lost.flac"), None).unwrap();
    store::set_art(&tx, lost, &tiny_png_of(9), 3).unwrap();
    let d = store::write_scanned(&tx, &track("/m/d.flac"), None).unwrap();
    tx.commit().unwrap();
    // A tool deleting rows with foreign keys off leaves a gone track's rows
    // behind, and a link to art that is no more.
    db.conn()
        .execute_batch(&format!(
            "PRAGMA foreign_keys = OFF; DELETE FROM tracks WHERE id = {gone}; \
             DELETE FROM art WHERE sha256 IN (SELECT art_sha256 FROM track_art WHERE track_id = {lost});"
        ))
        .unwrap();

    let read = |ids: std::ops::RangeInclusive<i64>, synthesis| {
        let mut found = Vec::new();
        db.read_snapshot(|s| s.tracks_for_serving(ids, synthesis, |id, rows| found.push((id, rows))))
            .unwrap();
        found
    };
    let found = read(a..=d, true);
    let ids: Vec<i64> = found.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [a, b, lost, d]);
    for (id, rows) in &found {
        let row = db.track(*id).unwrap().unwrap();
        if *id == lost {
            assert!(matches!(rows, Err(StoreError::MissingArt { track_id, .. }) if *track_id == lost));
            assert!(matches!(
                db.synthesis_rows(&row),
                Err(StoreError::MissingArt { .. })
            ));
            continue;
        }
        let (track, rows) = rows.as_ref().unwrap();
        assert_eq!(*track, row);
        assert_eq!(rows.as_ref().unwrap(), &db.synthesis_rows(&row).unwrap());
    }
    let (_, rows) = found[0].1.as_ref().unwrap();
    let rows = rows.as_ref().unwrap();
    assert_eq!((rows.art.len(), rows.art[0].sha256.as_str()), (1, sha.as_str()));
    assert_eq!(rows.flac_blocks, [(0, vec![0; 34])]);

    // Without synthesis only the rows are read: no art to miss.
    let found = read(b..=d, false);
    assert_eq!(found.len(), 3);
    assert!(found.iter().all(|(_, rows)| matches!(rows, Ok((_, None)))));
    let ids: Vec<i64> = read(b..=b, true).iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [b]);
}

/// A re-scan of a file whose stamps changed keeps the store's tags (edits
/// included) while the file's own tags read the same as last time (a
/// chmod, a touch), and takes the file's once they changed. Rows scanned
/// before version 4 keep theirs.
#[test]
fn a_rescan_keeps_store_edits_unless_the_files_own_tags_changed() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let title = |db: &Store, id: i64| -> Vec<String> {
        db.tags(id)
            .unwrap()
            .into_iter()
            .filter(|(k, _)| k == "title")
            .map(|(_, v)| v)
            .collect()
    };
    let edit = |db: &mut Store, id: i64, value: &str| {
        let tx = db.write().unwrap();
        store::set_tag(&tx, id, "title", &[value.into()]).unwrap();
        tx.commit().unwrap();
    };
    let rescan = |db: &mut Store, t: &ScannedTrack, id: i64| {
        let tx = db.write().unwrap();
        store::write_scanned(&tx, t, Some(id)).unwrap();
        tx.commit().unwrap();
    };
    let mut file = track("/m/a.flac");
    let tx = db.write().unwrap();
    let id = store::write_scanned(&tx, &file, None).unwrap();
    tx.commit().unwrap();
    edit(&mut db, id, "Edited");

    file.stamps.ctime_ns = 2;
    rescan(&mut db, &file, id);
    assert_eq!(title(&db, id), ["Edited"]);
    let known = db.known_stamps().unwrap();
    assert_eq!(known.stamps(known.find("/m/a.flac").unwrap()).ctime_ns, 2);

    file.stamps.mtime_ns = 3;
    file.tags = vec![("title".into(), "From The File".into())];
    rescan(&mut db, &file, id);
    assert_eq!(title(&db, id), ["From The File"]);

    edit(&mut db, id, "Edited Again");
    db.conn()
        .execute("UPDATE tracks SET scanned_tags = NULL", [])
        .unwrap();
    file.stamps.mtime_ns = 4;
    file.tags = vec![("title".into(), "Changed Before Version 4".into())];
    rescan(&mut db, &file, id);
    assert_eq!(title(&db, id), ["Edited Again"]);
}

#[test]
fn tracks_under_a_folder_are_those_below_it_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let tx = db.write().unwrap();
    for path in [
        "/m/a/1.flac",
        "/m/a/b/2.flac",
        "/m/ab/3.flac",
        "/m/a.flac",
        "/m/a0/4.flac",
        "/n/5.flac",
    ] {
        store::write_scanned(&tx, &track(path), None).unwrap();
    }
    tx.commit().unwrap();
    let under = |d: &str| -> Vec<String> {
        db.tracks_under(d)
            .unwrap()
            .into_iter()
            .map(|t| t.backing_path)
            .collect()
    };
    assert_eq!(under("/m/a"), ["/m/a/1.flac", "/m/a/b/2.flac"]);
    assert_eq!(under("/m/a/"), ["/m/a/1.flac", "/m/a/b/2.flac"]);
    assert_eq!(under("/m").len(), 5);
    assert_eq!(under("/").len(), 6);
    assert!(under("/m/a/1.flac").is_empty());
}

/// Times the cached statements of `conn` were re-prepared by SQLite.
fn reprepared(conn: &rusqlite::Connection) -> i32 {
    reprepare_counts(conn, false)
}

/// The connection's statements' re-prepare counts, summed; `reset` zeroes them.
fn reprepare_counts(conn: &rusqlite::Connection, reset: bool) -> i32 {
    use rusqlite::ffi;
    let mut total = 0;
    // SAFETY: the statements are only read, on the connection's thread,
    // while `conn` is borrowed.
    unsafe {
        let db = conn.handle();
        let mut stmt = ffi::sqlite3_next_stmt(db, std::ptr::null_mut());
        while !stmt.is_null() {
            total += ffi::sqlite3_stmt_status(stmt, ffi::SQLITE_STMTSTATUS_REPREPARE, i32::from(reset));
            stmt = ffi::sqlite3_next_stmt(db, stmt);
        }
    }
    total
}

#[test]
fn a_tracks_rows_are_read_and_edited_without_re_preparing_statements() {
    // SQLite built with STAT4 re-prepares, at every run, a statement that
    // compares a bound value with an indexed column and orders by the rest
    // of that index (the mount's open path did, for a third of its time).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let mut db = Store::open(&path).unwrap();
    let mut t = track("/m/a.flac");
    t.parts = vec![BackingPart::new(PartKind::Data, 10, 90)];
    let art = tiny_png();
    let tx = db.write().unwrap();
    let ids: Vec<i64> = (0..4)
        .map(|i| {
            if i == 1 {
                reprepare_counts(&tx, true);
            }
            t.backing_path = format!("/m/{i}.flac");
            let id = store::write_scanned(&tx, &t, None).unwrap();
            store::set_art(&tx, id, &art, 3).unwrap();
            id
        })
        .collect();
    assert_eq!(reprepared(&tx), 0, "scanned tracks");
    tx.commit().unwrap();

    let reader = Store::open_read_only(&path).unwrap();
    for _ in 0..3 {
        for &id in &ids {
            reader
                .read_snapshot(|s| {
                    s.track(id)?;
                    s.tags(id)?;
                    s.art_links(id)?;
                    s.flac_blocks(id)?;
                    s.flac_block_lengths(id)?;
                    s.backing_parts(id)?;
                    s.tracks_changed_since(s.first_change_seq()?.unwrap_or(0))?;
                    s.tracks_for_serving(ids[0]..=ids[3], true, |_, rows| assert!(rows.is_ok()))?;
                    s.last_change_seq()
                })
                .unwrap();
        }
    }
    assert_eq!(reprepared(reader.conn()), 0, "reads");

    let sha: String = art.sha256().iter().map(|b| format!("{b:02x}")).collect();
    let tx = db.write().unwrap();
    for (i, &id) in ids.iter().enumerate() {
        if i == 1 {
            // A write transaction prepares statements once again at their
            // first use ([`Store::write`] sets a pragma); never after.
            reprepare_counts(&tx, true);
        }
        store::set_tag(&tx, id, "genre", &["Jazz".into(), "Blues".into()]).unwrap();
        store::add_tag(&tx, id, "artist", &["C".into()]).unwrap();
        store::link_art(&tx, id, &sha, 4).unwrap();
        store::link_art(&tx, id, &sha, 4).unwrap();
    }
    assert_eq!(reprepared(&tx), 0, "edits");
    tx.commit().unwrap();
}

#[test]
fn a_track_is_named_by_id_by_its_path_or_by_a_path_that_resolves_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().canonicalize().unwrap().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("a.flac"), b"x").unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let tx = db.write().unwrap();
    let stored = real.join("a.flac").to_str().unwrap().to_string();
    let id = store::write_scanned(&tx, &track(&stored), None).unwrap();
    // A track whose file is gone is still named by its stored path.
    let gone = store::write_scanned(&tx, &track("/gone/b.flac"), None).unwrap();
    tx.commit().unwrap();

    assert_eq!(db.resolve_track(&id.to_string()).unwrap().id, id);
    assert_eq!(db.resolve_track(&stored).unwrap().id, id);
    let through_link = dir.path().join("link/a.flac");
    assert_eq!(db.resolve_track(through_link.to_str().unwrap()).unwrap().id, id);
    assert_eq!(db.resolve_track("/gone/b.flac").unwrap().id, gone);
    assert!(matches!(
        db.resolve_track("/nowhere/c.flac"),
        Err(StoreError::NoSuchTrack(_))
    ));
}

/// A track at `path` with 2 kB of lyrics, embedding a 20 kB picture of
/// its own, every byte but the first `0xA5`.
fn track_with_own_picture(path: &str, n: u8) -> ScannedTrack {
    let mut t = track(path);
    t.tags.push(("lyrics".into(), "la ".repeat(700)));
    let mut data = vec![0xA5; 20_000];
    data[0] = n;
    let art = NewArt { data, ..tiny_png() };
    t.pictures = vec![store::ScannedPicture {
        sha256: art.sha256(),
        art,
        picture_type: 3,
        description: String::new(),
    }];
    t
}

/// Runs of pages in the store file that hold pictures: their bytes
/// (mostly `0xA5`) or their rows (with their MIME type), with the WAL
/// checkpointed into the file.
fn picture_page_runs(db: Store, path: &std::path::Path) -> usize {
    drop(db);
    let file = std::fs::read(path).unwrap();
    let is_picture = |page: &[u8]| {
        page.iter().filter(|&&b| b == 0xA5).count() > page.len() / 2
            || page.windows(9).any(|w| w == b"image/png")
    };
    let pages: Vec<bool> = file.chunks(4096).map(is_picture).collect();
    pages.windows(2).filter(|w| w[1] && !w[0]).count()
}

#[test]
fn pictures_held_back_lie_together_after_the_rows_of_their_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (held_path, inline_path) = (dir.path().join("held.db"), dir.path().join("inline.db"));
    let mut held_db = Store::open(&held_path).unwrap();
    let mut inline_db = Store::open(&inline_path).unwrap();
    let (tx, inline_tx) = (held_db.write().unwrap(), inline_db.write().unwrap());
    let mut held = store::HeldPictures::default();
    for n in 0..100u8 {
        let path = format!("/m/{n}.flac");
        let mut t = track_with_own_picture(&path, n);
        store::write_scanned(&inline_tx, &t, None).unwrap();
        store::add_scanned(&tx, &mut t, &mut held).unwrap();
        assert!(t.pictures[0].art.data.is_empty(), "its bytes are held");
        // The second track of an album: the same picture, held once.
        let mut again = track_with_own_picture(&format!("{path}.2"), n);
        store::add_scanned(&tx, &mut again, &mut held).unwrap();
    }
    assert_eq!(held.bytes(), 100 * 20_000);
    held.store(&tx).unwrap();
    assert_eq!(held.bytes(), 0);
    tx.commit().unwrap();
    inline_tx.commit().unwrap();

    for id in [1, 2, 199, 200] {
        let link = &held_db.art_links(id).unwrap()[0];
        let (_, data) = held_db.art_data(&link.sha256).unwrap();
        assert_eq!(
            data,
            track_with_own_picture("/", ((id - 1) / 2) as u8).pictures[0]
                .art
                .data
        );
    }
    let count = |db: &Store, sql| db.conn().query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
    assert_eq!(count(&held_db, "SELECT count(*) FROM art"), 100);
    assert_eq!(count(&held_db, "SELECT count(*) FROM track_art"), 200);
    assert_eq!(count(&held_db, "SELECT count(*) FROM tags"), 800);

    // Stored as they come, each picture lies between the pages the rows
    // around it grew the tables by (102 runs when this was written).
    // Held, they lie in one run, besides the first pages of the picture
    // table and its indexes, made with the schema.
    let inline_runs = picture_page_runs(inline_db, &inline_path);
    assert!(inline_runs >= 50, "{inline_runs} runs");
    let held_runs = picture_page_runs(held_db, &held_path);
    assert!(held_runs <= 4, "{held_runs} runs");

    // A picture the store has is not held again.
    let mut db = Store::open(&held_path).unwrap();
    let tx = db.write().unwrap();
    let mut t = track_with_own_picture("/m/new.flac", 7);
    store::add_scanned(&tx, &mut t, &mut held).unwrap();
    assert_eq!(held.bytes(), 0);
    tx.commit().unwrap();
}

#[test]
fn version_9_tracks_keep_ids_tags_and_versions_and_may_name_objects() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    {
        let conn = store_of_version(&path, 9);
        conn.execute_batch(
            "INSERT INTO tracks (id, backing_path, format, audio_offset, audio_length, file_size,
                                 mtime_ns, ctime_ns, scanned_at, vendor)
             VALUES (7, '/m/a.flac', 'flac', 10, 90, 100, 1, 1, 0, 'v');
             INSERT INTO tags VALUES (7, 'title', 0, 'T');",
        )
        .unwrap();
    }
    let mut db = Store::open(&path).unwrap();
    let count = |db: &Store, sql: &str| -> i64 { db.conn().query_row(sql, [], |r| r.get(0)).unwrap() };
    let version = count(&db, "SELECT content_version FROM tracks WHERE id = 7");
    assert_eq!(db.tags(7).unwrap(), [("title".to_string(), "T".to_string())]);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'tracks'"
        ),
        5
    );
    // Edits still re-version the track, through the other tables' triggers.
    let tx = db.write().unwrap();
    store::set_tag(&tx, 7, "title", &["New".to_string()]).unwrap();
    tx.commit().unwrap();
    assert!(count(&db, "SELECT content_version FROM tracks WHERE id = 7") > version);
    // Objects may be backing files now; nothing else may.
    let insert = "INSERT INTO tracks (backing_path, format, audio_offset, audio_length, file_size,
                                      mtime_ns, ctime_ns, scanned_at) VALUES (?1, 'mp3', 0, 1, 1, 1, 1, 0)";
    db.conn().execute(insert, ["s3://music/a b/ü.mp3"]).unwrap();
    assert!(db.conn().execute(insert, ["http://x/a.mp3"]).is_err());
    assert!(db.conn().execute(insert, ["m/a.mp3"]).is_err());
    let id = db.conn().last_insert_rowid();
    db.conn()
        .execute("INSERT INTO remote_objects VALUES (?1, '\"abc\"')", [id])
        .unwrap();
    assert!(db
        .conn()
        .execute("INSERT INTO remote_objects VALUES (?1, '')", [7])
        .is_err());
    db.conn()
        .execute("DELETE FROM tracks WHERE id = ?1", [id])
        .unwrap();
    assert_eq!(count(&db, "SELECT count(*) FROM remote_objects"), 0);
}

#[test]
fn a_new_object_version_re_versions_its_track() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let tx = db.write().unwrap();
    let id = store::write_scanned(&tx, &track("s3://music/a.flac"), None).unwrap();
    store::set_remote_version(&tx, id, "\"1\"").unwrap();
    tx.commit().unwrap();
    let version = |db: &Store| db.track(id).unwrap().unwrap().content_version;
    let before = version(&db);
    assert_eq!(
        db.track(id).unwrap().unwrap().remote_etag.as_deref(),
        Some("\"1\"")
    );
    let tx = db.write().unwrap();
    store::set_remote_version(&tx, id, "\"1\"").unwrap();
    tx.commit().unwrap();
    assert_eq!(version(&db), before, "the same version changes nothing");
    let tx = db.write().unwrap();
    store::set_remote_version(&tx, id, "\"2\"").unwrap();
    tx.commit().unwrap();
    assert!(version(&db) > before);
    assert_eq!(db.remote_etag(id).unwrap().as_deref(), Some("\"2\""));
}

#[test]
fn a_track_keeps_the_time_it_entered_the_store_and_older_ones_get_their_scan_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    {
        let conn = store_of_version(&path, 10);
        conn.execute_batch(
            "INSERT INTO tracks (id, backing_path, format, audio_offset, audio_length, file_size,
                                 mtime_ns, ctime_ns, scanned_at)
             VALUES (1, '/m/a.flac', 'flac', 10, 90, 100, 1, 1, 1234567)",
        )
        .unwrap();
    }
    let mut db = Store::open(&path).unwrap();
    assert_eq!(db.track(1).unwrap().unwrap().added_at, 1234567);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let tx = db.write().unwrap();
    let id = store::write_scanned(&tx, &track("/m/b.flac"), None).unwrap();
    tx.commit().unwrap();
    let added = db.track(id).unwrap().unwrap().added_at;
    assert!((now - 5..=now + 5).contains(&added), "{added} vs {now}");
    let tx = db.write().unwrap();
    store::move_track(&tx, id, &track("/m/moved.flac")).unwrap();
    tx.commit().unwrap();
    assert_eq!(db.track(id).unwrap().unwrap().added_at, added);
}
