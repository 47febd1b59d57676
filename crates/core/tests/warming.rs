//! Warming ahead of opens: the other files of a directory and those of the
//! directory a walk reaches next are prepared before they are opened, and
//! each directory is claimed for warming once.

mod common;

use retagfs_core::view::tree::file_ino;
use retagfs_core::{Mode, Template, View, ViewConfig};
use retagfs_store as store;

use common::{scanned, view};

/// Warming the files likely opened next takes in the other files of the
/// directory and those of the directory a walk comes to next, and their
/// opens then need nothing from the store; a directory further on is not
/// taken in.
#[test]
fn warming_prepares_the_directory_and_the_next_one() {
    let (_dir, db_path, mut db) = scanned();
    let config = ViewConfig {
        template: Template::parse("$format/$filename").unwrap(),
        ..view(Mode::Synthesis)
    };
    let lib = View::load(&db_path, config).unwrap();
    let ino = |path: &str| {
        let tree = lib.tree();
        let (dir, name) = path.split_once('/').unwrap();
        let dir = tree.child(retagfs_core::view::tree::ROOT_INO, dir).unwrap();
        tree.child(dir, name).unwrap()
    };
    let (first, sibling) = (ino("flac/tagged.flac"), ino("flac/untagged.flac"));
    // Listed in this order: flac, mp3, mp4, ...
    let next = ino("mp3/tagged.mp3");
    let further = ino("mp4/tagged.m4a");
    lib.warm_ahead(first);

    let tracks = db.tracks().unwrap();
    let tx = db.write().unwrap();
    for t in tracks {
        store::remove_track(&tx, t.id).unwrap();
    }
    tx.commit().unwrap();
    for warmed in [sibling, next] {
        assert!(lib.open(warmed).is_ok(), "{:?}", lib.tree().path(warmed));
    }
    let gone = lib.open(further).err().and_then(|e| e.raw_os_error());
    assert_eq!(
        gone,
        Some(libc::ENOENT),
        "not warmed: read from the store, where it is gone"
    );
}

#[test]
fn a_directory_is_claimed_for_warming_once() {
    let (_dir, db_path, db) = scanned();
    let lib = View::load(&db_path, view(Mode::Synthesis)).unwrap();
    let mut by_dir: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    for t in db.tracks().unwrap() {
        let ino = file_ino(t.id);
        let parent = lib.tree().get(ino).unwrap().parent;
        by_dir.entry(parent).or_default().push(ino);
    }
    let shared = by_dir
        .values()
        .find(|files| files.len() >= 2)
        .expect("a directory of two files");
    assert!(lib.claim_warming(shared[0]));
    assert!(!lib.claim_warming(shared[1]), "the directory was claimed already");
    assert!(!lib.claim_warming(shared[0]));
    if let Some(other) = by_dir.values().find(|files| !files.contains(&shared[0])) {
        assert!(
            lib.claim_warming(other[0]),
            "another directory is claimed on its own"
        );
    }
    // Warming resolves the siblings: their opens then need no store.
    lib.warm_ahead(shared[0]);
    assert!(lib.open(shared[1]).is_ok());
    assert!(!lib.claim_warming(u64::MAX), "an unknown inode is never claimed");
}
