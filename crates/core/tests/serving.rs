//! Scan the committed fixtures into a store and serve them in-process (no
//! FUSE): the served FLAC carries the store's tags and art in front of the
//! backing file's audio bytes, and every format is byte-identical in
//! structure-only mode.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use retagfs_core::scan::{scan, ScanOptions};
use retagfs_core::view::tree::{file_ino, Entry};
use retagfs_core::view::watch::Watcher;
use retagfs_core::{Fallbacks, Mode, Template, View, ViewConfig, DEFAULT_TEMPLATE};
use retagfs_formats::{probe, ReadAt, Source};
use retagfs_store::{self as store, Format, Store};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

/// A copy of the fixtures in a temp dir (tests may change files).
fn library() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_fixtures(dir.path());
    dir
}

/// Copies the fixtures into `folder`, made if missing.
fn copy_fixtures(folder: &Path) {
    std::fs::create_dir_all(folder).unwrap();
    for e in std::fs::read_dir(fixtures()).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, folder.join(p.file_name().unwrap())).unwrap();
    }
}

fn opts(root: &Path, prune: bool) -> ScanOptions {
    ScanOptions {
        prune,
        ..ScanOptions::new(vec![root.to_path_buf()], 2)
    }
}

fn view(mode: Mode) -> ViewConfig {
    ViewConfig {
        template: Template::parse(DEFAULT_TEMPLATE).unwrap(),
        fallbacks: Fallbacks::standard(),
        mode,
        synthesis: Default::default(),
        windows_names: false,
    }
}

/// The fixtures scanned into a fresh store: (library dir, store path, store).
fn scanned() -> (tempfile::TempDir, PathBuf, Store) {
    let dir = library();
    let db_path = dir.path().join("store.db");
    let mut db = Store::open(&db_path).unwrap();
    scan(&mut db, &opts(dir.path(), false), &|_| {}).unwrap();
    (dir, db_path, db)
}

/// Sets a track's title in a transaction of its own.
fn retitle(db: &mut Store, id: i64, title: &str) {
    let tx = db.write().unwrap();
    store::set_tag(&tx, id, "title", &[title.into()]).unwrap();
    tx.commit().unwrap();
}

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

/// The row of the fixture FLAC in a store of the library in `dir`.
fn tagged_flac(db: &Store, dir: &Path) -> store::TrackRow {
    db.resolve_track(dir.join("tagged.flac").to_str().unwrap())
        .unwrap()
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

fn read_all(lib: &View, ino: u64) -> Vec<u8> {
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

#[test]
fn served_flac_has_store_tags_and_original_audio() {
    let (dir, db_path, mut db) = scanned();
    let track = tagged_flac(&db, dir.path());
    retitle(&mut db, track.id, "Retitled");

    let lib = View::load(&db_path, view(Mode::Synthesis)).unwrap();
    let ino = file_ino(track.id);
    let size = match &lib.tree().get(ino).unwrap().entry {
        Entry::File(f) => f.size,
        Entry::Dir { .. } => panic!("not a file"),
    };
    let served = read_all(&lib, ino);
    assert_eq!(served.len() as u64, size, "stat size equals bytes served");

    let p = probe(&Source::new(&served as &dyn ReadAt, served.len() as u64)).unwrap();
    assert_eq!(p.format, Format::Flac);
    let mut want = db.tags(track.id).unwrap();
    let mut got = p.tags.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    assert!(got.contains(&("title".into(), "Retitled".into())));
    assert_eq!(p.pictures.len(), 1);
    assert_eq!(
        p.pictures[0].art.data,
        std::fs::read(fixtures().join("cover.png")).unwrap()
    );

    let backing = std::fs::read(&track.backing_path).unwrap();
    let audio = &backing[track.audio_offset as usize..];
    assert_eq!(
        &served[p.audio_offset as usize..],
        audio,
        "audio bytes are the backing file's"
    );
}

#[test]
fn structure_only_serves_every_format_byte_identical() {
    let (_dir, db_path, db) = scanned();
    let lib = View::load(&db_path, view(Mode::StructureOnly)).unwrap();
    let tracks = db.tracks().unwrap();
    assert_eq!(tracks.len(), 8);
    for t in tracks {
        assert_eq!(
            read_all(&lib, file_ino(t.id)),
            std::fs::read(&t.backing_path).unwrap(),
            "{}",
            t.backing_path
        );
    }
}

#[test]
fn changed_backing_file_is_eio_not_stale_bytes() {
    let (dir, db_path, db) = scanned();
    let track = tagged_flac(&db, dir.path());
    let lib = View::load(&db_path, view(Mode::Synthesis)).unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&track.backing_path)
        .unwrap()
        .set_len(1000)
        .unwrap();
    let err = lib.open(file_ino(track.id)).err().expect("open must fail");
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    std::fs::remove_file(&track.backing_path).unwrap();
    let err = lib.open(file_ino(track.id)).err().expect("open must fail");
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
}

/// The Ogg page checksum (CRC-32, polynomial 0x04c11db7, not reflected),
/// written here independently of the one retagfs serves with.
fn ogg_crc(page: &[u8]) -> u32 {
    let mut crc = 0u32;
    for &b in page {
        crc ^= u32::from(b) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04c1_1db7
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The pages of a served Ogg file whose checksum does not hold; the page
/// sequence numbers must count up from 0 without a gap.
fn bad_ogg_pages(file: &[u8], name: &str) -> Vec<u32> {
    let (mut at, mut seq, mut bad) = (0usize, 0u32, Vec::new());
    while at < file.len() {
        let h = &file[at..];
        assert_eq!(&h[..4], b"OggS", "{name}: no page at {at}");
        let segments = h[26] as usize;
        let len = 27 + segments + h[27..27 + segments].iter().map(|&l| l as usize).sum::<usize>();
        let mut page = h[..len].to_vec();
        let stored = u32::from_le_bytes(page[22..26].try_into().unwrap());
        page[22..26].fill(0);
        if ogg_crc(&page) != stored {
            bad.push(seq);
        }
        assert_eq!(
            u32::from_le_bytes(page[18..22].try_into().unwrap()),
            seq,
            "{name}: page at {at}"
        );
        (at, seq) = (at + len, seq + 1);
    }
    bad
}

/// Start of each page of an Ogg file.
fn ogg_page_starts(file: &[u8]) -> Vec<usize> {
    let mut starts = vec![0];
    loop {
        let at = *starts.last().unwrap();
        let segments = file[at + 26] as usize;
        let next = at
            + 27
            + segments
            + file[at + 27..at + 27 + segments]
                .iter()
                .map(|&l| l as usize)
                .sum::<usize>();
        if next >= file.len() {
            return starts;
        }
        starts.push(next);
    }
}

fn probe_bytes(bytes: &[u8]) -> Result<retagfs_formats::Probe, retagfs_formats::ProbeError> {
    let bytes = bytes.to_vec();
    probe(&Source::new(&bytes as &dyn ReadAt, bytes.len() as u64))
}

/// Damage that a scan can see is refused with a reason.
#[test]
fn damaged_files_are_refused_with_a_reason() {
    let flac = std::fs::read(fixtures().join("tagged.flac")).unwrap();
    let cut = flac[..flac.len() - 100].to_vec();
    let err = probe_bytes(&cut).expect_err("a FLAC cut inside a frame is refused");
    assert!(err.to_string().contains("ends inside a FLAC frame"), "{err}");
    let mut with_id3v1 = flac.clone();
    with_id3v1.extend_from_slice(b"TAG");
    with_id3v1.resize(flac.len() + 128, b' ');
    probe_bytes(&with_id3v1).expect("a trailing ID3v1 tag is not damage");

    let ogg = std::fs::read(fixtures().join("tagged.ogg")).unwrap();
    let err = probe_bytes(&ogg[..ogg.len() - 100]).expect_err("an Ogg cut inside a page is refused");
    assert!(err.to_string().contains("runs past the end"), "{err}");
    let mut ogg = ogg;
    let comment_page = ogg_page_starts(&ogg)[1];
    ogg[comment_page + 40] ^= 0x20;
    let err = probe_bytes(&ogg).expect_err("a damaged header page is refused");
    assert!(err.to_string().contains("fails its checksum"), "{err}");
}

/// The tagged Ogg fixture and where its one audio page starts.
fn ogg_fixture() -> (Vec<u8>, usize) {
    let fixture = std::fs::read(fixtures().join("tagged.ogg")).unwrap();
    let last = *ogg_page_starts(&fixture).last().unwrap();
    (fixture, last)
}

/// A copy of the fixture's audio page (from `last`) with another sequence
/// number and flags, its checksum made right.
fn fixture_audio_page(fixture: &[u8], last: usize, seq: u32, flags: u8) -> Vec<u8> {
    let mut page = fixture[last..].to_vec();
    page[5] = flags;
    number_ogg_page(&mut page, seq);
    page
}

/// Gives an Ogg page the sequence number `seq` and a checksum that holds.
fn number_ogg_page(page: &mut [u8], seq: u32) {
    page[18..22].copy_from_slice(&seq.to_le_bytes());
    page[22..26].fill(0);
    let sum = ogg_crc(page);
    page[22..26].copy_from_slice(&sum.to_le_bytes());
}

/// Scans `bytes` as the file `name` in `dir` (the only file there), gives
/// its track a comment over one page long (so every Ogg audio page gets a
/// new number) and reads the served file whole.
fn served_with_a_long_comment(dir: &Path, name: &str, bytes: &[u8]) -> (View, i64, Vec<u8>) {
    std::fs::write(dir.join(name), bytes).unwrap();
    let db_path = dir.join("store.db");
    let mut db = Store::open(&db_path).unwrap();
    let summary = scan(&mut db, &opts(dir, false), &|_| {}).unwrap();
    assert_eq!((summary.added, summary.failed), (1, 0));
    let track_id = db.tracks().unwrap()[0].id;
    let tx = db.write().unwrap();
    store::set_tag(&tx, track_id, "comment", &["x".repeat(70_000)]).unwrap();
    tx.commit().unwrap();
    let lib = View::load(&db_path, view(Mode::Synthesis)).unwrap();
    let served = read_all(&lib, file_ino(track_id));
    (lib, track_id, served)
}

/// Damage inside the audio is served as it is: a page whose checksum was
/// wrong is still wrong after renumbering (a decoder skips it, as it does
/// in the backing file), every other page is right.
#[test]
fn a_damaged_ogg_audio_page_stays_damaged() {
    let dir = tempfile::tempdir().unwrap();
    // The fixture has one audio page; put a damaged copy of it before it
    // (a damaged last page makes the file be served byte-identical).
    let (fixture, last) = ogg_fixture();
    let with_seq = |seq: u32, flags: u8| fixture_audio_page(&fixture, last, seq, flags);
    let mut damaged = with_seq(2, 0);
    let end = damaged.len() - 10;
    damaged[end] ^= 0x01;
    let ogg = [&fixture[..last], &damaged, &with_seq(3, fixture[last + 5])].concat();
    let (lib, track_id, served) = served_with_a_long_comment(dir.path(), "damaged.ogg", &ogg);
    let starts = ogg_page_starts(&served);
    assert_eq!(
        bad_ogg_pages(&served, "damaged.ogg"),
        vec![starts.len() as u32 - 2]
    );
    // A read that starts inside the damaged page (after reads further on)
    // finds the page.
    let file = lib.open(file_ino(track_id)).unwrap();
    let inside = starts[starts.len() - 2] + 100;
    let mut buf = Vec::new();
    let got = lib.read(&file, inside as u64, 4096, &mut buf).unwrap();
    assert_eq!(got, &served[inside..]);
}

/// Damage that breaks the chain of Ogg pages (a zeroed block inside a long
/// file, where a scan does not look) is served as it is, the pages around
/// it renumbered: a decoder skips the same bytes it would skip in the
/// backing file.
#[test]
fn damage_between_ogg_pages_is_served_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let (fixture, last) = ogg_fixture();
    let audio_page = |seq: u32, flags: u8| fixture_audio_page(&fixture, last, seq, flags);
    let count = 400;
    let page_len = fixture.len() - last;
    let mut audio: Vec<u8> = (0..count)
        .flat_map(|i| audio_page(2 + i, if i + 1 == count { fixture[last + 5] } else { 0 }))
        .collect();
    // From the middle of one page over the headers of the next three.
    let damage = 200 * page_len + 600;
    audio[damage..damage + 3 * page_len].fill(0);
    let ogg = [&fixture[..last], &audio[..]].concat();
    let (lib, track_id, served) = served_with_a_long_comment(dir.path(), "long.ogg", &ogg);
    let served_audio = &served[served.len() - audio.len()..];
    let seq = |page: &[u8]| u32::from_le_bytes(page[18..22].try_into().unwrap());
    let delta = seq(served_audio) - seq(&audio);
    assert!(delta > 0);
    // Each page with its header intact and followed by another renumbered
    // (its checksum as right or wrong as it was), each other byte as it is:
    // the page the damage starts in is neither followed nor whole.
    let mut expected = audio.clone();
    let followed: Vec<bool> = (1..=count as usize)
        .map(|next| next == count as usize || audio[next * page_len..].starts_with(b"OggS"))
        .collect();
    let pages = expected.chunks_mut(page_len).zip(followed);
    for (page, _) in pages.filter(|(p, followed)| *followed && p.starts_with(b"OggS")) {
        let stored = u32::from_le_bytes(page[22..26].try_into().unwrap());
        page[22..26].fill(0);
        let wrong_by = stored ^ ogg_crc(page);
        let renumbered = seq(page) + delta;
        page[18..22].copy_from_slice(&renumbered.to_le_bytes());
        let sum = ogg_crc(page) ^ wrong_by;
        page[22..26].copy_from_slice(&sum.to_le_bytes());
    }
    assert!(
        served_audio == expected,
        "served audio differs from the expected bytes"
    );
    // A read that starts inside the damage, on a fresh handle.
    let file = lib.open(file_ino(track_id)).unwrap();
    let inside = served.len() - audio.len() + damage + page_len;
    let mut buf = Vec::new();
    let got = lib.read(&file, inside as u64, 5000, &mut buf).unwrap();
    assert_eq!(got, &served[inside..inside + 5000]);
}

/// A long Ogg file chaining a second stream of the same serial number
/// (two files encoded with one fixed serial, then concatenated): the scan
/// looks at the start and end of a long file and cannot tell. A header
/// that fits the original header pages leaves every audio page as it is,
/// so the second stream is served whole; a header that needs more pages
/// renumbers every later page, the second stream's with the first's (its
/// decoders start at its first page whatever its number), the same for a
/// read that walks into it and for one far into it that searches.
#[test]
fn a_chain_of_two_streams_with_one_serial_number() {
    let dir = tempfile::tempdir().unwrap();
    let (fixture, last) = ogg_fixture();
    // Each link longer than the distance past which a read looks for its
    // page near it rather than walk to it (2 MiB).
    let count = (5 << 20) / 2 / (fixture.len() - last) as u32;
    let link: Vec<u8> = (0..count)
        .flat_map(|i| {
            let flags = if i + 1 == count { fixture[last + 5] } else { 0 };
            fixture_audio_page(&fixture, last, 2 + i, flags)
        })
        .collect();
    let link = [&fixture[..last], &link[..]].concat();
    let ogg = [&link[..], &link[..]].concat();
    std::fs::write(dir.path().join("chain.ogg"), &ogg).unwrap();
    let db_path = dir.path().join("store.db");
    let mut db = Store::open(&db_path).unwrap();
    let summary = scan(&mut db, &opts(dir.path(), false), &|_| {}).unwrap();
    assert_eq!((summary.added, summary.failed), (1, 0));
    let track = &db.tracks().unwrap()[0];
    assert_eq!(track.passthrough, None, "the scan cannot see the chain");

    let lib = View::load(&db_path, view(Mode::Synthesis)).unwrap();
    let served = read_all(&lib, file_ino(track.id));
    assert_eq!(served[served.len() - (ogg.len() - last)..], ogg[last..]);
    let probed = probe_bytes(&served).unwrap();
    assert!(probed
        .tags
        .iter()
        .any(|(k, v)| k == "title" && v == "Vorbis Song"));
    drop(lib);

    let tx = db.write().unwrap();
    store::set_tag(&tx, track.id, "comment", &["x".repeat(70_000)]).unwrap();
    tx.commit().unwrap();
    let lib = View::load(&db_path, view(Mode::Synthesis)).unwrap();
    let served = read_all(&lib, file_ino(track.id));
    let served_audio = &served[served.len() - (ogg.len() - last)..];
    let seq = |page: &[u8]| u32::from_le_bytes(page[18..22].try_into().unwrap());
    let delta = seq(served_audio) - seq(&ogg[last..]);
    assert!(delta > 0);
    let mut expected = ogg[last..].to_vec();
    let starts = ogg_page_starts(&expected);
    for (i, &at) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(expected.len());
        let page = &mut expected[at..end];
        number_ogg_page(page, seq(page) + delta);
    }
    assert!(
        served_audio == expected,
        "served pages differ from the renumbered ones"
    );
    // A read far into the second stream, before any other: it finds its
    // page by checksum, not by walking the pages before it.
    drop(lib);
    let lib = View::load(&db_path, view(Mode::Synthesis)).unwrap();
    let file = lib.open(file_ino(track.id)).unwrap();
    let far = served.len() - link.len() / 2;
    let mut buf = Vec::new();
    let got = lib.read(&file, far as u64, 5000, &mut buf).unwrap();
    assert_eq!(got, &served[far..far + 5000]);
}

/// Every synthesized file, with new tags and a 100 kB picture, reads the
/// same at any offset as sequentially, and our own probe reads the store's
/// tags and pictures back from it.
#[test]
fn synthesized_files_are_consistent_at_any_offset_and_probe_back() {
    let (_dir, db_path, mut db) = scanned();
    let image: Vec<u8> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let art = store::NewArt {
        mime: "image/jpeg".into(),
        width: 0,
        height: 0,
        depth: 0,
        data: image.clone(),
    };
    let tracks = db.tracks().unwrap();
    let tx = db.write().unwrap();
    for t in &tracks {
        store::set_tag(&tx, t.id, "title", &["Ünïcødé ☃".into()]).unwrap();
        store::set_art(&tx, t.id, &art, 4).unwrap();
    }
    tx.commit().unwrap();

    let lib = View::load(&db_path, view(Mode::Synthesis)).unwrap();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for t in &tracks {
        let whole = read_all(&lib, file_ino(t.id));
        let file = lib.open(file_ino(t.id)).unwrap();
        let mut buf = Vec::new();
        for _ in 0..200 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let offset = seed % (whole.len() as u64 + 10);
            let size = (seed >> 40) as usize % 70_000;
            let got = lib.read(&file, offset, size, &mut buf).unwrap();
            let start = (offset as usize).min(whole.len());
            let end = (start + size).min(whole.len());
            assert_eq!(got, &whole[start..end], "{} at {offset}+{size}", t.backing_path);
        }
        // Small reads everywhere: some start and end inside a page header.
        for offset in (0..whole.len()).step_by(97) {
            let got = lib.read(&file, offset as u64, 7, &mut buf).unwrap();
            let end = (offset + 7).min(whole.len());
            assert_eq!(got, &whole[offset..end], "{} at {offset}+7", t.backing_path);
        }

        if matches!(t.format, Format::Vorbis | Format::Opus) {
            assert_eq!(bad_ogg_pages(&whole, &t.backing_path), Vec::<u32>::new());
        }
        let probed = probe(&Source::new(&whole as &dyn ReadAt, whole.len() as u64))
            .unwrap_or_else(|e| panic!("{}: served file does not probe: {e}", t.backing_path));
        let mut want = db.tags(t.id).unwrap();
        let mut got = probed.tags.clone();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{}", t.backing_path);
        assert!(
            // MP4 `covr` has no picture types: every image reads as a front cover.
            probed
                .pictures
                .iter()
                .any(|p| p.art.data == image && (p.picture_type == 4 || t.format == Format::Mp4)),
            "{}: picture missing",
            t.backing_path
        );
    }
}

fn path_of(lib: &View, track_id: i64) -> Option<String> {
    lib.tree().path(file_ino(track_id))
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
