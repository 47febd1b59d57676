//! Store rows that satisfy SQL (or bypass its checks, as another tool may)
//! but lie about the file: the lying track fails alone with EIO, every
//! other track is served exactly as before, nothing panics.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use retagfs_core::scan::{scan, ScanOptions};
use retagfs_core::view::tree::file_ino;
use retagfs_core::{Mode, View, ViewConfig};
use retagfs_formats::{probe, ReadAt, Source};
use retagfs_store::{Format, Store};

use common::view;

/// The committed fixtures scanned into a fresh store, left closed.
fn scanned() -> (tempfile::TempDir, PathBuf) {
    let (dir, db_path, _db) = common::scanned();
    (dir, db_path)
}

fn config() -> ViewConfig {
    view(Mode::Synthesis)
}

fn load(db_path: &Path) -> View {
    View::load(db_path, config()).unwrap()
}

/// Every served file, whole, by track id (or the error reading it). Each
/// open warms its siblings, as the mount does, so a lying row is also met
/// ahead of its own open.
fn serve_all(lib: &View, ids: &[i64]) -> HashMap<i64, std::io::Result<Vec<u8>>> {
    let mut buf = Vec::new();
    ids.iter()
        .map(|&id| {
            let opened = lib.open(file_ino(id));
            if lib.claim_warming(file_ino(id)) {
                lib.warm_ahead(file_ino(id));
            }
            let whole = opened.and_then(|file| {
                let mut out = Vec::new();
                while let got @ [_, ..] = lib.read(&file, out.len() as u64, 1 << 16, &mut buf)? {
                    out.extend_from_slice(got);
                }
                Ok(out)
            });
            (id, whole)
        })
        .collect()
}

/// Applies `sql` (with `?1` = the id of a track of `format`) as a tool that
/// bypasses the schema's checks would, then serves every track.
/// Returns the target's result; asserts every other track is unchanged.
fn after_lie(format: Format, sql: &str) -> std::io::Result<Vec<u8>> {
    let (_dir, db_path) = scanned();
    let db = Store::open(&db_path).unwrap();
    let tracks = db.tracks().unwrap();
    let ids: Vec<i64> = tracks.iter().map(|t| t.id).collect();
    let target = tracks.iter().find(|t| t.format == format).unwrap().id;
    let before = serve_all(&load(&db_path), &ids);
    db.conn()
        .execute_batch("PRAGMA ignore_check_constraints = ON; PRAGMA foreign_keys = OFF;")
        .unwrap();
    for statement in sql.split(';').filter(|s| !s.trim().is_empty()) {
        db.conn().execute(statement, [target]).unwrap();
    }
    let lib = load(&db_path);
    let mut after = serve_all(&lib, &ids);
    for id in ids.iter().filter(|&&id| id != target) {
        assert_eq!(
            after[id].as_ref().ok(),
            before[id].as_ref().ok(),
            "track {id} changed because of a lie about track {target}"
        );
    }
    after.remove(&target).unwrap()
}

fn assert_eio(result: std::io::Result<Vec<u8>>, what: &str) {
    match result {
        Ok(bytes) => panic!("{what}: served {} bytes instead of failing", bytes.len()),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "{what}: {e}"),
    }
}

/// A served file that our own probe reads back with `key` = `value`.
fn assert_carries(result: std::io::Result<Vec<u8>>, key: &str, value: &str) {
    let bytes = result.expect("served");
    let probed = probe(&Source::new(&bytes as &dyn ReadAt, bytes.len() as u64)).expect("probes back");
    assert!(
        probed.tags.iter().any(|(k, v)| k == key && v == value),
        "{key} not carried"
    );
}

#[test]
fn audio_range_past_the_end_of_the_file() {
    for format in Format::ALL {
        let lie = "UPDATE tracks SET audio_length = audio_length + 100000 WHERE id = ?1";
        assert_eio(after_lie(format, lie), &format!("{format:?} audio past the end"));
    }
}

#[test]
fn backing_part_past_the_end_of_the_file() {
    for format in [Format::Vorbis, Format::Mp4, Format::Wav] {
        let lie = "UPDATE backing_parts SET offset = offset + 10000000 WHERE track_id = ?1";
        assert_eio(after_lie(format, lie), &format!("{format:?} part past the end"));
    }
}

#[test]
fn art_link_without_its_art_row() {
    let lie = "INSERT INTO track_art (track_id, position, art_sha256, picture_type, description) \
               VALUES (?1, 9, '0000000000000000000000000000000000000000000000000000000000000000', 3, '')";
    assert_eio(after_lie(Format::Flac, lie), "missing art row");
}

/// The index a mount reads pictures' details from (schema version 7),
/// dropped by a tool: the store loads and serves the same bytes.
#[test]
fn a_store_without_its_picture_index_serves_the_same_files() {
    let (_dir, db_path) = scanned();
    let ids: Vec<i64> = {
        let db = Store::open(&db_path).unwrap();
        let mut stmt = db.conn().prepare("SELECT id FROM tracks ORDER BY id").unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let before = serve_all(&load(&db_path), &ids);
    Store::open(&db_path)
        .unwrap()
        .conn()
        .execute_batch("DROP INDEX art_meta")
        .unwrap();
    let after = serve_all(&load(&db_path), &ids);
    for id in &ids {
        assert_eq!(
            before[id].as_ref().unwrap(),
            after[id].as_ref().unwrap(),
            "track {id}"
        );
    }
}

#[test]
fn format_that_does_not_match_the_file() {
    for (format, claimed) in [
        (Format::Flac, "mp3"),
        (Format::Mp3, "flac"),
        (Format::Wav, "vorbis"),
        (Format::Mp4, "wav"),
    ] {
        let lie = format!("UPDATE tracks SET format = '{claimed}' WHERE id = ?1");
        assert_eio(
            after_lie(format, &lie),
            &format!("{format:?} claimed to be {claimed}"),
        );
    }
}

#[test]
fn ten_megabyte_tag_value_is_served() {
    for format in Format::ALL {
        let lie = "INSERT OR REPLACE INTO tags (track_id, key, position, value) \
                   VALUES (?1, 'comment', 0, printf('%.*c', 10000000, 'x'))";
        assert_carries(after_lie(format, lie), "comment", &"x".repeat(10_000_000));
    }
}

#[test]
fn keys_with_control_or_non_ascii_characters() {
    for format in Format::ALL {
        for key in ["bad\u{1}key", "del\u{7f}key", "ключ", "a=b"] {
            let lie =
                format!("INSERT INTO tags (track_id, key, position, value) VALUES (?1, '{key}', 0, 'v')");
            // Either left out of the served tags or the file fails alone:
            // never a panic, never a tag block a reader cannot parse.
            if let Ok(bytes) = after_lie(format, &lie) {
                probe(&Source::new(&bytes as &dyn ReadAt, bytes.len() as u64)).unwrap_or_else(|e| {
                    panic!("{format:?} with key {key:?}: served file does not probe: {e}")
                });
            }
        }
    }
}

/// SQLite keeps any bytes as text, or a blob where text belongs: such a
/// tag value is served with U+FFFD in place of its bad bytes (the store
/// still loads, the track is served), and a key so written is passed over
/// or fails the file alone.
#[test]
fn tag_values_and_keys_that_are_not_utf8() {
    for format in Format::ALL {
        for value in ["CAST(x'41ff42' AS TEXT)", "x'41ff42'"] {
            let lie = format!(
                "INSERT INTO tags (track_id, key, position, value) VALUES (?1, 'comment', 99, {value})"
            );
            assert_carries(after_lie(format, &lie), "comment", "A\u{fffd}B");
        }
        let lie = "INSERT INTO tags (track_id, key, position, value) \
                   VALUES (?1, CAST(x'6bff' AS TEXT), 0, 'v')";
        if let Ok(bytes) = after_lie(format, lie) {
            probe(&Source::new(&bytes as &dyn ReadAt, bytes.len() as u64))
                .unwrap_or_else(|e| panic!("{format:?} with a key that is not UTF-8: does not probe: {e}"));
        }
    }
}

/// Scanner columns a tool garbled: the track fails alone (its backing
/// path not UTF-8: no such file) or is left out of the view (a format or
/// part kind this retagfs does not know), and the store still loads.
#[test]
fn scanner_rows_that_do_not_decode() {
    let garbled_path = "UPDATE tracks SET backing_path = CAST(x'2f41ff2e666c6163' AS TEXT) WHERE id = ?1";
    for format in Format::ALL {
        let err = after_lie(format, garbled_path).expect_err("served a file that is not there");
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{format:?}: {err}");
        let err = after_lie(format, "UPDATE tracks SET format = 'aiff' WHERE id = ?1").expect_err("served");
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{format:?}: {err}");
    }
    for format in [Format::Vorbis, Format::Mp4, Format::Wav] {
        let lie = "UPDATE backing_parts SET kind = 'riddle' WHERE track_id = ?1";
        let err = after_lie(format, lie).expect_err("served");
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{format:?}: {err}");
    }
}

/// Such a row written while the view is up: the refresh leaves that track
/// out and goes on, and later edits still show.
#[test]
fn a_refresh_passes_over_a_track_whose_rows_do_not_decode() {
    let (_dir, db_path) = scanned();
    let lib = load(&db_path);
    let db = Store::open(&db_path).unwrap();
    let tracks = db.tracks().unwrap();
    let (bad, good) = (tracks[0].id, tracks[1].id);
    db.conn()
        .execute_batch("PRAGMA ignore_check_constraints = ON")
        .unwrap();
    db.conn()
        .execute("UPDATE tracks SET format = 'aiff' WHERE id = ?1", [bad])
        .unwrap();
    lib.refresh().expect("the refresh goes on");
    match lib.open(file_ino(bad)) {
        Ok(_) => panic!("a track whose format does not decode is served"),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}"),
    }
    db.conn()
        .execute(
            "INSERT INTO tags (track_id, key, position, value) VALUES (?1, 'comment', 50, 'Fresh')",
            [good],
        )
        .unwrap();
    lib.refresh().expect("refreshed");
    let mut served = serve_all(&lib, &[good]);
    assert_carries(served.remove(&good).unwrap(), "comment", "Fresh");
}

/// A backing path a tool garbled into bytes that are not UTF-8: a full
/// scan finds the file and moves the track back to it (it used to fail).
#[test]
fn a_full_scan_mends_a_garbled_backing_path() {
    let (dir, db_path) = scanned();
    let mut db = Store::open(&db_path).unwrap();
    let target = db.tracks().unwrap()[0].clone();
    db.conn()
        .execute_batch("PRAGMA ignore_check_constraints = ON")
        .unwrap();
    db.conn()
        .execute(
            "UPDATE tracks SET backing_path = CAST(x'2f41ff2e666c6163' AS TEXT) WHERE id = ?1",
            [target.id],
        )
        .unwrap();
    let mut options = ScanOptions::new(vec![dir.path().to_path_buf()], 2);
    options.full = true;
    let summary = scan(&mut db, &options, &|_| {}).unwrap();
    assert_eq!((summary.moved, summary.added), (1, 0));
    assert_eq!(
        db.track(target.id).unwrap().unwrap().backing_path,
        target.backing_path
    );
}

#[test]
fn store_from_a_newer_retagfs_is_refused_with_a_reason() {
    let (_dir, db_path) = scanned();
    Store::open(&db_path)
        .unwrap()
        .conn()
        .execute_batch("PRAGMA user_version = 99")
        .unwrap();
    let err = View::load(&db_path, config()).err().expect("refused");
    assert!(format!("{err:#}").contains("99"), "{err:#}");
}
