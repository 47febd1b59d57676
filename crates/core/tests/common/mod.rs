//! Helpers the integration tests of retagfs-core share: the committed
//! fixtures copied into a library, scanned into a store and served.

// Each test binary (one per file in tests/) uses a part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use retagfs_core::scan::{scan, ScanOptions};
use retagfs_core::view::tree::file_ino;
use retagfs_core::{Fallbacks, Mode, Template, View, ViewConfig, DEFAULT_TEMPLATE};
use retagfs_store::{self as store, Store};

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

/// A copy of the fixtures in a temp dir (tests may change files).
pub fn library() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_fixtures(dir.path());
    dir
}

/// Copies the fixtures into `folder`, made if missing.
pub fn copy_fixtures(folder: &Path) {
    std::fs::create_dir_all(folder).unwrap();
    for e in std::fs::read_dir(fixtures()).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, folder.join(p.file_name().unwrap())).unwrap();
    }
}

pub fn opts(root: &Path, prune: bool) -> ScanOptions {
    ScanOptions {
        prune,
        ..ScanOptions::new(vec![root.to_path_buf()], 2)
    }
}

pub fn view(mode: Mode) -> ViewConfig {
    ViewConfig {
        template: Template::parse(DEFAULT_TEMPLATE).unwrap(),
        fallbacks: Fallbacks::standard(),
        mode,
        synthesis: Default::default(),
        windows_names: false,
        views: Vec::new(),
        cover_name: None,
        playlists: Vec::new(),
    }
}

/// The fixtures scanned into a fresh store: (library dir, store path, store).
pub fn scanned() -> (tempfile::TempDir, PathBuf, Store) {
    let dir = library();
    let db_path = dir.path().join("store.db");
    let mut db = Store::open(&db_path).unwrap();
    scan(&mut db, &opts(dir.path(), false), &|_| {}).unwrap();
    (dir, db_path, db)
}

/// Sets a track's title in a transaction of its own.
pub fn retitle(db: &mut Store, id: i64, title: &str) {
    let tx = db.write().unwrap();
    store::set_tag(&tx, id, "title", &[title.into()]).unwrap();
    tx.commit().unwrap();
}

/// The row of the fixture FLAC in a store of the library in `dir`.
pub fn tagged_flac(db: &Store, dir: &Path) -> store::TrackRow {
    db.resolve_track(dir.join("tagged.flac").to_str().unwrap())
        .unwrap()
}

pub fn read_all(lib: &View, ino: u64) -> Vec<u8> {
    let file = lib.open(ino).unwrap();
    let mut out = Vec::new();
    let mut buf = Vec::new();
    // Odd read sizes straddle segment boundaries.
    let mut offset = 0;
    loop {
        let got = lib.read(&file, offset, 1000, &mut buf).unwrap();
        if got.is_empty() {
            break;
        }
        offset += got.len() as u64;
        out.extend_from_slice(got);
    }
    out
}

pub fn path_of(lib: &View, track_id: i64) -> Option<String> {
    lib.tree().path(file_ino(track_id))
}
