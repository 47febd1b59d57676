//! Change times: every version of a track's served file an indexer can see
//! is at least a second after the previous one, and never before it
//! (docs/store.md, "Change times").

mod common;

use common::{store_of_version, track};
use retagfs_store::{self as store, EditedTracks, Stamps, Store};

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn served_secs(db: &Store, id: i64) -> i64 {
    db.track(id)
        .unwrap()
        .unwrap()
        .served_mtime_ns()
        .div_euclid(1_000_000_000)
}

fn new_track(db: &mut Store, path: &str) -> i64 {
    let tx = db.write().unwrap();
    let id = store::write_scanned(&tx, &track(path), None).unwrap();
    tx.commit().unwrap();
    id
}

#[test]
fn a_scanned_vendor_string_is_kept_and_none_is_told_from_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let mut with = track("/m/a.flac");
    with.vendor = Some("reference libFLAC 1.4.2 20221022".into());
    let tx = db.write().unwrap();
    let a = store::write_scanned(&tx, &with, None).unwrap();
    let b = store::write_scanned(&tx, &track("/m/b.flac"), None).unwrap();
    tx.commit().unwrap();
    let vendor = |id| db.track(id).unwrap().unwrap().vendor;
    assert_eq!(vendor(a).as_deref(), Some("reference libFLAC 1.4.2 20221022"));
    assert_eq!(
        vendor(b).as_deref(),
        Some(""),
        "a file without comments: known, none"
    );
    let known = db.known_stamps().unwrap();
    assert_eq!(
        known.stamps(known.find("/m/b.flac").unwrap()).mtime_ns,
        1,
        "not probed again"
    );
}

/// `retagfs tag set` as the command makes it: several keys, one transaction.
fn tag_set(db: &mut Store, id: i64, pairs: &[(&str, &str)]) {
    let tx = db.write().unwrap();
    let mut edited = EditedTracks::new();
    edited.note(&tx, id).unwrap();
    for (k, v) in pairs {
        store::set_tag(&tx, id, k, &[v.to_string()]).unwrap();
    }
    edited.settle(&tx).unwrap();
    tx.commit().unwrap();
}

#[test]
fn a_scanned_track_serves_its_backing_files_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let id = new_track(&mut db, "/m/a.flac");
    let t = db.track(id).unwrap().unwrap();
    assert_eq!(t.changed_at, 0);
    assert_eq!(t.served_mtime_ns(), t.stamps.mtime_ns);
}

#[test]
fn a_raw_sql_edit_moves_the_time_to_now_then_a_second_past_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let id = new_track(&mut db, "/m/a.flac");
    let before = now_secs();
    let edit = "UPDATE tags SET value = value || 'x' WHERE track_id = ?1 AND key = 'title'";
    db.conn().execute(edit, [id]).unwrap();
    let first = served_secs(&db, id);
    assert!(first >= before && first <= now_secs(), "{first} is now");
    db.conn().execute(edit, [id]).unwrap();
    assert!(
        served_secs(&db, id) > first,
        "a second edit within the second moves on"
    );
}

#[test]
fn an_edit_of_many_rows_moves_the_time_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let id = new_track(&mut db, "/m/a.flac");
    let before = now_secs();
    tag_set(
        &mut db,
        id,
        &[
            ("title", "X"),
            ("genre", "Jazz"),
            ("album", "Y"),
            ("date", "1999"),
        ],
    );
    let t = served_secs(&db, id);
    assert!(
        t >= before && t <= now_secs(),
        "{t}: eight rows changed, one version made"
    );
}

#[test]
fn edits_in_a_burst_are_each_a_second_after_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let id = new_track(&mut db, "/m/a.flac");
    let mut last = served_secs(&db, id);
    for n in 0..5 {
        tag_set(&mut db, id, &[("title", &format!("T{n}"))]);
        let t = served_secs(&db, id);
        assert!(t > last, "edit {n}: {t} after {last}");
        last = t;
    }
    // A transaction that changes nothing makes no new version.
    tag_set(&mut db, id, &[]);
    assert_eq!(served_secs(&db, id), last);
}

#[test]
fn a_backing_file_touched_to_an_older_date_still_moves_its_time_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Store::open(&dir.path().join("s.db")).unwrap();
    let mut t = track("/m/a.flac");
    t.stamps = Stamps {
        size: 100,
        mtime_ns: 2_000_000_000_000_000_000,
        ctime_ns: 2_000_000_000_000_000_000,
    };
    let tx = db.write().unwrap();
    let id = store::write_scanned(&tx, &t, None).unwrap();
    tx.commit().unwrap();
    let first = served_secs(&db, id);
    t.stamps.mtime_ns = 1_000_000_000;
    let tx = db.write().unwrap();
    store::write_scanned(&tx, &t, Some(id)).unwrap();
    tx.commit().unwrap();
    assert_eq!(served_secs(&db, id), first + 1);
}

#[test]
fn a_version_8_store_is_migrated_with_no_change_times() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    store_of_version(&path, 8)
        .execute_batch(
            "INSERT INTO tracks (id, backing_path, format, audio_offset, audio_length, file_size, \
             mtime_ns, ctime_ns, scanned_at) VALUES (1, '/m/a.flac', 'flac', 0, 10, 10, 1, 1, 1); \
             INSERT INTO tags (track_id, key, position, value) VALUES (1, 'title', 0, 'T');",
        )
        .unwrap();
    let id = 1;
    let old = Store::open_read_only(&path).unwrap();
    assert_eq!(old.schema_version(), 8);
    let as_mounted = old.track(id).unwrap().unwrap();
    assert_eq!(
        as_mounted.changed_at, 0,
        "a mount of a version 8 store reads no change times"
    );
    drop(old);
    let db = Store::open(&path).unwrap();
    assert_eq!(db.schema_version(), store::SCHEMA_VERSION);
    assert_eq!(db.track(id).unwrap().unwrap().changed_at, 0);
    db.conn()
        .execute("DELETE FROM tags WHERE track_id = ?1 AND key = 'title'", [id])
        .unwrap();
    assert!(db.track(id).unwrap().unwrap().changed_at >= now_secs() - 1);
}
