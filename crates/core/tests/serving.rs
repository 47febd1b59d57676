//! Scan the committed fixtures into a store and serve them in-process (no
//! FUSE): the served FLAC carries the store's tags and art in front of the
//! backing file's audio bytes, every format is byte-identical in
//! structure-only mode, a backing file changed since its scan is EIO, and
//! synthesized files read the same at any offset. Damage a scan can see is
//! refused; damage it cannot see in Ogg audio pages is served as it is.

mod common;

use std::path::Path;

use retagfs_core::scan::scan;
use retagfs_core::view::tree::{file_ino, Entry};
use retagfs_core::{Mode, View};
use retagfs_formats::{probe, ReadAt, Source};
use retagfs_store::{self as store, Format, Store};

use common::{fixtures, opts, read_all, retitle, scanned, tagged_flac, view};

#[test]
fn served_flac_has_store_tags_and_original_audio() {
    let (dir, db_path, mut db) = scanned();
    let track = tagged_flac(&db, dir.path());
    retitle(&mut db, track.id, "Retitled");

    let lib = View::load(&db_path, view(Mode::Synthesis)).unwrap();
    let ino = file_ino(track.id);
    let size = match &lib.tree().get(ino).unwrap().entry {
        Entry::File(f) => f.size,
        _ => panic!("not a track's file"),
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
