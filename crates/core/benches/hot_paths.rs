//! Criterion benches of the in-process hot paths: probe per format, path
//! template render, layout build (synthesis from store rows) per format,
//! `View::read` per format and read size (4 KiB to 1 MiB), and the
//! store's lookup of a track's tags (what an open reads) among tracks with
//! long values and without.
//!
//! Inputs are 30-second files made with the real encoders (sox, flac,
//! lame, ffmpeg, oggenc, opusenc: `make deps` installs them), each with a
//! 100 kB cover added in the store, so layouts carry art like a real
//! library's. Ogg and Opus reads are measured twice: with the cover (the
//! header outgrows the file's header pages, so audio pages are renumbered
//! at read time) and with tags alone (the header fits, the audio pages are
//! copied as they are). Run with `cargo bench -p retagfs-core` (or `make
//! bench`).

use std::path::{Path, PathBuf};
use std::process::Command;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use retagfs_core::scan::{scan, ScanOptions};
use retagfs_core::view::tree::file_ino;
use retagfs_core::{Fallbacks, Mode, Template, TrackFields, View, ViewConfig, DEFAULT_TEMPLATE};
use retagfs_formats::{probe, synthesize, Source, SynthesisInput};
use retagfs_store::{self as store, Format, NewArt, ScannedTrack, Stamps, Store, TrackRow};

const SECONDS: &str = "30";
const READ_SIZES: [usize; 4] = [4 << 10, 64 << 10, 256 << 10, 1 << 20];

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (install the encoders: make deps)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One file per format, made from the same 30 s of pink noise.
fn make_library(dir: &Path) -> Vec<PathBuf> {
    let wav = dir.join("source.wav");
    run(Command::new("sox")
        .args(["-n", "-r", "44100", "-c", "2", "-b", "16"])
        .arg(&wav)
        .args(["synth", SECONDS, "pinknoise", "gain", "-12"]));
    let lib = dir.join("library");
    std::fs::create_dir(&lib).unwrap();
    let out = |name: &str| lib.join(name);
    run(Command::new("flac")
        .args(["-s", "-f", "-T", "TITLE=Bench FLAC", "-o"])
        .arg(out("a.flac"))
        .arg(&wav));
    run(Command::new("lame")
        .args(["--quiet", "-b", "320", "--tt", "Bench MP3"])
        .arg(&wav)
        .arg(out("a.mp3")));
    run(Command::new("ffmpeg")
        .args(["-v", "error", "-y", "-i"])
        .arg(&wav)
        .args([
            "-c:a",
            "aac",
            "-b:a",
            "256k",
            "-metadata",
            "title=Bench M4A",
            "-movflags",
            "+faststart",
        ])
        .arg(out("a.m4a")));
    run(Command::new("oggenc")
        .args(["-Q", "-q", "8", "-t", "Bench Vorbis", "-o"])
        .arg(out("a.ogg"))
        .arg(&wav));
    run(Command::new("opusenc")
        .args(["--quiet", "--bitrate", "256", "--title", "Bench Opus"])
        .arg(&wav)
        .arg(out("a.opus")));
    run(Command::new("ffmpeg")
        .args(["-v", "error", "-y", "-i"])
        .arg(&wav)
        .args(["-c:a", "pcm_s16le", "-metadata", "title=Bench WAV"])
        .arg(out("a.wav")));
    ["flac", "mp3", "m4a", "ogg", "opus", "wav"]
        .iter()
        .map(|e| out(&format!("a.{e}")))
        .collect()
}

fn view() -> ViewConfig {
    ViewConfig {
        template: Template::parse(DEFAULT_TEMPLATE).unwrap(),
        fallbacks: Fallbacks::standard(),
        mode: Mode::Synthesis,
        synthesis: Default::default(),
        windows_names: false,
        views: Vec::new(),
        cover_name: None,
        playlists: Vec::new(),
    }
}

/// Scans the library into `store`, adds tags to every track and, if
/// `cover`, a 100 kB cover.
fn scanned(dir: &Path, lib: &Path, store: &str, cover: bool) -> (PathBuf, Vec<TrackRow>) {
    let db_path = dir.join(store);
    let mut db = Store::open(&db_path).unwrap();
    let opts = ScanOptions::new(vec![lib.to_path_buf()], 2);
    scan(&mut db, &opts, &|_| {}).unwrap();
    let mut tracks = Vec::new();
    for path in std::fs::read_dir(lib).unwrap() {
        let path = path.unwrap().path();
        tracks.push(db.resolve_track(path.to_str().unwrap()).unwrap());
    }
    tracks.sort_by(|a, b| a.backing_path.cmp(&b.backing_path));
    let art = NewArt {
        mime: "image/jpeg".into(),
        width: 500,
        height: 500,
        depth: 24,
        data: (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect(),
    };
    let tx = db.write().unwrap();
    for t in &tracks {
        for (k, v) in [
            ("artist", "Bench Artist"),
            ("album", "Bench Album"),
            ("tracknumber", "1"),
            ("date", "2024"),
        ] {
            store::set_tag(&tx, t.id, k, &[v.into()]).unwrap();
        }
        if cover {
            store::set_art(&tx, t.id, &art, 3).unwrap();
        }
    }
    tx.commit().unwrap();
    let tracks = tracks.iter().map(|t| db.track(t.id).unwrap().unwrap()).collect();
    (db_path, tracks)
}

fn ext(t: &TrackRow) -> String {
    Path::new(&t.backing_path)
        .extension()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let files = make_library(dir.path());
    let (db_path, tracks) = scanned(dir.path(), &dir.path().join("library"), "store.db", true);

    let mut g = c.benchmark_group("probe");
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let name = f.extension().unwrap().to_string_lossy().into_owned();
        g.bench_function(&name, |b| {
            b.iter(|| probe(&Source::new(&bytes, bytes.len() as u64)).unwrap())
        });
    }
    g.finish();

    let db = Store::open_read_only(&db_path).unwrap();
    let config = view();
    let mut g = c.benchmark_group("template render");
    let t = &tracks[0];
    let tags = db.tags(t.id).unwrap();
    g.bench_function("default template", |b| {
        b.iter(|| {
            config
                .template
                .render(&TrackFields::new(t, &tags), &config.fallbacks)
        })
    });
    g.finish();

    let mut g = c.benchmark_group("layout build");
    for t in &tracks {
        let (tags, art, blocks, parts) = (
            db.tags(t.id).unwrap(),
            db.art_links(t.id).unwrap(),
            db.flac_blocks(t.id).unwrap(),
            db.backing_parts(t.id).unwrap(),
        );
        let backing = std::fs::File::open(&t.backing_path).unwrap();
        let input = SynthesisInput {
            track: t,
            tags: &tags,
            art: &art,
            flac_blocks: &blocks,
            parts: &parts,
            options: config.synthesis,
            backing: Some(&backing),
        };
        g.bench_function(ext(t), |b| b.iter(|| synthesize(&input).unwrap()));
    }
    g.finish();

    read_group(c, "read", &db_path, &tracks);
    let ogg_only = |t: &TrackRow| ["ogg", "opus"].contains(&ext(t).as_str());
    let (tags_db, tags_tracks) = scanned(dir.path(), &dir.path().join("library"), "tags.db", false);
    let tags_tracks: Vec<TrackRow> = tags_tracks.into_iter().filter(ogg_only).collect();
    read_group(c, "read, header fits", &tags_db, &tags_tracks);
    tags_lookup_group(c, dir.path());
}

/// Tracks in each lookup store, and how many of them carry long lyrics.
const LOOKUP_TRACKS: i64 = 3000;
const LYRICS_EVERY: i64 = 3;
const LYRICS_BYTES: usize = 76_000;

/// A store of [`LOOKUP_TRACKS`] tracks with a dozen short tags each, and
/// with `lyrics` on every [`LYRICS_EVERY`]th if asked: the ids.
fn lookup_store(path: &Path, lyrics: bool) -> Vec<i64> {
    let mut db = Store::open(path).unwrap();
    let tx = db.write().unwrap();
    let mut ids = Vec::new();
    for n in 0..LOOKUP_TRACKS {
        let mut tags: Vec<(String, String)> = ["title", "artist", "album", "albumartist", "genre", "date"]
            .iter()
            .map(|k| (k.to_string(), format!("{k} of track {n}")))
            .collect();
        tags.push(("tracknumber".into(), (n % 12 + 1).to_string()));
        if lyrics && n % LYRICS_EVERY == 0 {
            tags.push((
                "lyrics".into(),
                format!("line {n} of a long song\n").repeat(LYRICS_BYTES / 24),
            ));
        }
        let track = ScannedTrack {
            backing_path: format!("/library/{n}.flac"),
            format: Format::Flac,
            audio_offset: 42,
            audio_length: 1000,
            stamps: Stamps {
                size: 1042,
                mtime_ns: 1,
                ctime_ns: 1,
            },
            fingerprint: None,
            tags,
            pictures: vec![],
            flac_blocks: vec![(0, vec![0; 34])],
            parts: vec![],
            passthrough: None,
            vendor: None,
            duration_ms: None,
        };
        ids.push(store::write_scanned(&tx, &track, None).unwrap());
    }
    tx.commit().unwrap();
    ids
}

/// The tags of one track after another, in an order unlike the store's.
fn tags_lookup_group(c: &mut Criterion, dir: &Path) {
    let mut g = c.benchmark_group("tags of a track");
    for (name, lyrics) in [("short values", false), ("a third with 76 kB lyrics", true)] {
        let path = dir.join(format!("lookup-{lyrics}.db"));
        let mut ids = lookup_store(&path, lyrics);
        // A fixed shuffle: each id once, far from the one before.
        ids.sort_by_key(|id| (id * 7919) % LOOKUP_TRACKS);
        let db = Store::open_read_only(&path).unwrap();
        let mut next = ids.iter().cycle();
        g.bench_function(name, |b| b.iter(|| db.tags(*next.next().unwrap()).unwrap()));
    }
    g.finish();
}

/// `View::read` of each track at each size: sequential reads through the
/// whole file, wrapping around.
fn read_group(c: &mut Criterion, name: &str, db_path: &Path, tracks: &[TrackRow]) {
    let lib = View::load(db_path, view()).unwrap();
    let mut g = c.benchmark_group(name);
    for t in tracks {
        let file = lib.open(file_ino(t.id)).unwrap();
        let len = file.layout.len();
        let mut buf = Vec::new();
        for size in READ_SIZES {
            g.throughput(Throughput::Bytes(size as u64));
            let mut offset = 0u64;
            g.bench_with_input(BenchmarkId::new(ext(t), size), &size, |b, &size| {
                b.iter(|| {
                    let n = lib.read(&file, offset, size, &mut buf).unwrap().len() as u64;
                    offset = if offset + n >= len { 0 } else { offset + n };
                })
            });
        }
    }
    g.finish();
}

criterion_group!(hot_paths, benches);
criterion_main!(hot_paths);
