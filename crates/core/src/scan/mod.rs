//! The scan pipeline: walk the roots, probe changed files in parallel with
//! bounded reads, write results through one writer in batched transactions.

mod walk;

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use crossbeam_channel::{bounded, Receiver, Sender};
use retagfs_formats::{probe, ProbeError, ReadAt, Source};
use retagfs_store::{
    self as store, path_to_text, text_to_path, DirEntry, EntryKind, Fingerprint, KnownStamps, PathMap,
    ScannedDir, ScannedDirs, ScannedPicture, ScannedTrack, Stamps, Store,
};

use crate::fs_kind::{self, FsKind};
pub use crate::scan::walk::WalkThreads;
use crate::scan::walk::{DirCache, Walked};
use sha2::{Digest, Sha256};

/// Results written per transaction, at most (and those that came with
/// the last).
const BATCH: usize = 512;
/// How long the writer gathers results before it commits what it has.
const GATHER: Duration = Duration::from_millis(50);
/// Bytes at each end of the audio that make up the content fingerprint.
const FINGERPRINT_SPAN: u64 = 64 * 1024;

/// File extensions that are never audio: skipped without a probe.
const NOT_AUDIO: &[&str] = &[
    "jpg", "jpeg", "png", "gif", "bmp", "webp", "tif", "tiff", "txt", "nfo", "cue", "log", "m3u", "m3u8",
    "pls", "pdf", "sfv", "md5", "ffp", "accurip", "json", "xml", "html", "htm", "url", "ini", "db", "lrc",
    "doc", "docx", "rtf", "zip", "rar", "7z", "torrent",
];
/// Extensions of the formats retagfs serves: such a file that fails to
/// probe is a failure, anything else that is not audio is skipped.
const AUDIO: &[&str] = &[
    "flac", "mp3", "m4a", "m4b", "mp4", "aac", "alac", "ogg", "oga", "opus", "wav", "wave",
];

/// Extensions of audio formats retagfs does not serve: such a file is
/// reported (the user will miss it in the mount), not silently skipped.
const UNSERVED_AUDIO: &[&str] = &[
    "aif", "aiff", "aifc", "wma", "ape", "wv", "mpc", "tta", "dsf", "dff", "ac3", "dts", "amr", "au", "ra",
    "mka", "spx", "caf",
];

pub struct ScanOptions {
    pub roots: Vec<PathBuf>,
    pub follow_symlinks: bool,
    pub threads: Threads,
    pub prune: bool,
    /// List every folder again instead of taking unchanged ones from the
    /// last scan's record.
    pub full: bool,
}

impl ScanOptions {
    /// A plain scan of `roots` walking and probing on `jobs` threads each:
    /// no symlinks followed, nothing pruned, unchanged folders taken from
    /// the last scan's record.
    pub fn new(roots: Vec<PathBuf>, jobs: usize) -> ScanOptions {
        ScanOptions {
            roots,
            follow_symlinks: false,
            threads: Threads::same(jobs),
            prune: false,
            full: false,
        }
    }
}

/// The threads a scan reads folders on, and those it probes files on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Threads {
    pub walk: WalkThreads,
    pub probe: usize,
}

/// Threads that walk and probe when a root is on network storage (or
/// FUSE): each spends its time waiting on round trips, not on the CPU
/// (docs/benchmarks.md: 8x faster than two threads at 1 ms a request).
pub const NETWORK_JOBS: usize = 16;

/// The fewest threads that probe files on local storage. A first scan
/// reads each file's head and end, which are seldom in the page cache, and
/// a disk answers several reads at once: 20,000 generated tracks scanned
/// from a cold cache in 2.9-3.9 s against 4.8-5.1 s on one thread per
/// core (two cores), for 3% more time when every file is cached
/// (docs/benchmarks.md).
pub const LOCAL_PROBE_JOBS: usize = 8;

impl Threads {
    /// `jobs` threads for each (`--jobs`).
    pub fn same(jobs: usize) -> Threads {
        Threads {
            walk: WalkThreads::fixed(jobs),
            probe: jobs,
        }
    }

    /// The threads a scan of `roots` works on when not told: on network
    /// storage [`NETWORK_JOBS`] for each; else one per core for the walk,
    /// whose `statx` calls an unchanged library answers from memory (more
    /// threads than cores made a re-scan a fifth slower), growing to
    /// [`NETWORK_JOBS`] once it waits on the disk, and at least
    /// [`LOCAL_PROBE_JOBS`] for probes.
    pub fn default_for(roots: &[PathBuf]) -> Threads {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        if roots.iter().any(|r| fs_kind::of_path(r) == FsKind::Network) {
            Threads::same(cores.max(NETWORK_JOBS))
        } else {
            Threads {
                walk: WalkThreads {
                    start: cores,
                    on_disk: cores.max(NETWORK_JOBS),
                },
                probe: cores.max(LOCAL_PROBE_JOBS),
            }
        }
    }
}

/// What a scan did.
#[derive(Debug, Default, Clone)]
pub struct ScanSummary {
    pub added: u64,
    pub updated: u64,
    pub moved: u64,
    pub unchanged: u64,
    pub removed: u64,
    /// Rows whose backing file is gone, kept because `--prune` was not given.
    pub missing: u64,
    /// Rows kept as they are because their file, or a folder above it,
    /// could not be read.
    pub unreadable: u64,
    pub failed: u64,
    /// Files that are not audio (by content and name).
    pub skipped: u64,
    pub elapsed: Duration,
    /// (path, reason) of every file counted in `failed`, by path: those
    /// that failed in this scan, and those unchanged since a scan that
    /// refused them (with the reason recorded then).
    pub failures: Vec<(String, String)>,
}

/// Progress reports for a progress bar.
pub enum Progress {
    /// The walk found this many files so far.
    Walking(u64),
    /// Probing starts: this many files need it.
    Probing(u64),
    /// One more file probed.
    Probed,
}

#[derive(Clone, Copy)]
struct Job<'a> {
    /// Borrowed from the walk's files, which outlive the probing.
    path: &'a str,
    stamps: Stamps,
    existing: Option<i64>,
    /// Its index in the walk's files.
    index: usize,
}

enum Outcome<'a> {
    Scanned(Job<'a>, Box<Probed>),
    Failed(Job<'a>, ProbeError),
}

impl Outcome<'_> {
    /// About how much memory the result holds: its pictures, tag values
    /// and FLAC blocks.
    fn held_bytes(&self) -> usize {
        let Outcome::Scanned(_, probed) = self else {
            return 0;
        };
        let t = &probed.track;
        t.pictures.iter().map(|p| p.art.data.len()).sum::<usize>()
            + t.tags.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
            + t.flac_blocks.iter().map(|(_, data)| data.len()).sum::<usize>()
    }
}

/// A file probed: what goes to the store, and the sha256 fingerprint that
/// a store before version 5 would hold of it (computed only while a track
/// known by one may be this file, moved).
struct Probed {
    track: ScannedTrack,
    sha256: Option<[u8; 32]>,
}

impl Probed {
    /// The file's fingerprints, the store's own first.
    fn fingerprints(&self) -> impl Iterator<Item = Fingerprint> + Clone + '_ {
        let blake3 = self.track.fingerprint.map(Fingerprint::Blake3);
        blake3.into_iter().chain(self.sha256.map(Fingerprint::Sha256))
    }
}

fn extension(path: &str) -> String {
    Path::new(path)
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default()
}

/// Whether the path's extension is one of `list`, in any case (compared
/// without allocating: this runs for every file of every re-scan).
fn extension_in(path: &str, list: &[&str]) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && list.iter().any(|l| l.eq_ignore_ascii_case(ext)))
}

/// Canonical, existing directories, or an error that says what to do.
fn check_roots(roots: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    roots
        .iter()
        .map(|r| {
            let c = std::fs::canonicalize(r).with_context(|| {
                format!(
                    "library directory {} does not exist or cannot be read",
                    r.display()
                )
            })?;
            if !c.is_dir() {
                bail!(
                    "{} is not a directory: give the folder that holds your music",
                    r.display()
                );
            }
            Ok(c)
        })
        .collect()
}

/// Probes one file and computes its content fingerprint (and with
/// `sha256`, the one of stores before version 5), reading through `buf`.
fn probe_file(job: &Job<'_>, sha256: bool, buf: &mut Vec<u8>) -> Result<Probed, ProbeError> {
    let file = Windowed::new(File::open(text_to_path(job.path))?);
    let src = Source::new(&file as &dyn ReadAt, job.stamps.size);
    let p = probe(&src)?;
    let fingerprints = fingerprints(&src, p.audio_offset, p.audio_length, sha256, buf)?;
    let track = ScannedTrack {
        backing_path: job.path.to_string(),
        format: p.format,
        audio_offset: p.audio_offset,
        audio_length: p.audio_length,
        stamps: job.stamps,
        fingerprint: Some(fingerprints.blake3),
        tags: p.tags,
        pictures: dedup_pictures(p.pictures),
        flac_blocks: p.flac_blocks,
        parts: p.parts,
        passthrough: p.passthrough,
        vendor: p.vendor,
    };
    Ok(Probed {
        track,
        sha256: fingerprints.sha256,
    })
}

/// A file read through a window: a small read fetches `WINDOW` bytes from
/// its offset, and later reads inside them are answered from memory. A
/// probe reads a file's headers a few bytes at a time (a FLAC's block
/// headers are 4 bytes each) and small files' start and end twice (checks,
/// then the fingerprint): on storage without a page cache (FUSE remotes)
/// each read is a round trip.
struct Windowed {
    file: File,
    window: std::cell::RefCell<Window>,
}

#[derive(Default)]
struct Window {
    /// Where the bytes start in the file.
    at: u64,
    /// How many of `bytes` were read.
    filled: usize,
    /// `WINDOW` long once used: kept from file to file by each thread, so
    /// that no file pays for zeroing a fresh buffer.
    bytes: Vec<u8>,
}

/// Bytes fetched for a small read.
const WINDOW: usize = 64 * 1024;

thread_local! {
    static SPARE_WINDOW: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Windowed {
    fn new(file: File) -> Windowed {
        // A probe reads a file's start and end: the kernel's read-ahead,
        // up to megabytes on a fast disk, would read much of the rest.
        // SAFETY: a hint on a descriptor this file owns.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        let window = Window {
            bytes: SPARE_WINDOW.take(),
            ..Window::default()
        };
        Windowed {
            file,
            window: std::cell::RefCell::new(window),
        }
    }
}

impl Drop for Windowed {
    fn drop(&mut self) {
        SPARE_WINDOW.set(std::mem::take(&mut self.window.get_mut().bytes));
    }
}

impl ReadAt for Windowed {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let mut w = self.window.borrow_mut();
        let inside = offset >= w.at && offset + buf.len() as u64 <= w.at + w.filled as u64;
        if !inside {
            if buf.len() > WINDOW / 4 {
                return ReadAt::read_at(&self.file, buf, offset);
            }
            w.bytes.resize(WINDOW, 0);
            w.filled = ReadAt::read_at(&self.file, &mut w.bytes, offset)?;
            w.at = offset;
        }
        let from = (offset - w.at) as usize;
        let n = buf.len().min(w.filled.saturating_sub(from));
        buf[..n].copy_from_slice(&w.bytes[from..from + n]);
        Ok(n)
    }
}

/// A file may carry the same image twice (in two tag containers).
fn dedup_pictures(pictures: Vec<ScannedPicture>) -> Vec<ScannedPicture> {
    let mut seen = HashSet::new();
    pictures
        .into_iter()
        .filter(|p| seen.insert((p.picture_type, p.sha256)))
        .collect()
}

struct Fingerprints {
    blake3: [u8; 32],
    sha256: Option<[u8; 32]>,
}

/// The fingerprints of the audio at `offset`, `len` bytes long: BLAKE3
/// over its length (8 bytes, little-endian), its first 64 KiB and the rest
/// of its last 64 KiB (so the whole audio once when it is shorter than 128
/// KiB); with `sha256`, also the sha256 of stores before version 5 (its
/// length, first 64 KiB and last 64 KiB, overlapping in short audio).
/// `buf` is kept from file to file: a fresh zeroed buffer per file cost as
/// much as the hashing.
fn fingerprints(
    src: &Source<'_>,
    offset: u64,
    len: u64,
    sha256: bool,
    buf: &mut Vec<u8>,
) -> Result<Fingerprints, ProbeError> {
    buf.resize(FINGERPRINT_SPAN as usize, 0);
    let span = FINGERPRINT_SPAN.min(len);
    let mut blake3 = blake3::Hasher::new();
    blake3.update(&len.to_le_bytes());
    let mut legacy = sha256.then(|| Sha256::new_with_prefix(len.to_le_bytes()));
    let head = read_span(src, offset, span, buf)?;
    blake3.update(head);
    if let Some(h) = &mut legacy {
        h.update(head);
    }
    let tail_at = offset + len - span;
    // How much of the tail the head already holds.
    let in_head = (offset + span).saturating_sub(tail_at).min(span);
    match &mut legacy {
        Some(h) => {
            let tail = read_span(src, tail_at, span, buf)?;
            h.update(tail);
            blake3.update(tail.get(in_head as usize..).unwrap_or_default());
        }
        None if in_head < span => {
            blake3.update(read_span(src, tail_at + in_head, span - in_head, buf)?);
        }
        None => {}
    }
    Ok(Fingerprints {
        blake3: blake3.finalize().into(),
        sha256: legacy.map(|h| h.finalize().into()),
    })
}

/// `len` bytes at `offset` (fewer at the end of the file), read into `buf`.
fn read_span<'b>(src: &Source<'_>, offset: u64, len: u64, buf: &'b mut [u8]) -> Result<&'b [u8], ProbeError> {
    let n = src.read_upto_into(offset, &mut buf[..len as usize])?;
    Ok(&buf[..n])
}

/// Probes jobs until there are none left to take; `sha256`: whether new
/// files need the fingerprint of stores before version 5 too.
fn worker<'a>(jobs: &Jobs<'_, 'a>, results: Sender<Vec<Outcome<'a>>>, sha256: bool, bytes_per_send: usize) {
    let mut buf = Vec::new();
    let (mut batch, mut held) = (Vec::new(), 0);
    while let Some(job) = jobs.take() {
        let outcome = match probe_file(&job, sha256 && job.existing.is_none(), &mut buf) {
            Ok(probed) => Outcome::Scanned(job, Box::new(probed)),
            Err(e) => Outcome::Failed(job, e),
        };
        held += outcome.held_bytes();
        batch.push(outcome);
        // Sent a few at a time while the writer is busy: a send to a full
        // channel parks this thread and every receive wakes one. (With
        // this and [`Jobs`], a first scan of 20,000 small files spends
        // 0.15 s in the kernel, where it spent 0.35.)
        let full = batch.len() >= RESULTS_PER_SEND || held >= bytes_per_send;
        if full || results.is_empty() {
            held = 0;
            if results.send(std::mem::take(&mut batch)).is_err() {
                return;
            }
        }
    }
    if !batch.is_empty() {
        let _ = results.send(batch);
    }
}

/// Results a probing thread holds before it sends them, at most...
const RESULTS_PER_SEND: usize = 16;
/// ... and the bytes of tags and pictures all probing threads together
/// may hold in unsent results, shared out between them (large covers go
/// one at a time), so that more threads do not hold more: with 8 threads
/// holding 1 MiB each, a first scan of 20,000 tracks with covers peaked at
/// 37-42 MiB, with this bound at 32-39.
const RESULT_BYTES_UNSENT: usize = 2 << 20;

/// The files to probe, taken in order by the probing threads: an index
/// to bump rather than a channel to feed (whose every job woke a
/// thread when the probes waited on the writer).
struct Jobs<'j, 'a> {
    todo: &'j [Job<'a>],
    next: AtomicUsize,
}

impl<'a> Jobs<'_, 'a> {
    fn take(&self) -> Option<Job<'a>> {
        self.todo.get(self.next.fetch_add(1, Ordering::Relaxed)).copied()
    }
}

/// Tracks whose file is gone, by fingerprint. Several with one
/// fingerprint (the same recording twice) go each to the new file whose
/// path ends most like its old one.
#[derive(Default)]
struct MoveCandidates {
    /// Gone tracks under the roots scanned.
    gone: HashMap<Fingerprint, Candidates>,
    /// Gone tracks outside the roots, looked up by fingerprint the first
    /// time a new file has it (once per fingerprint: a library of many
    /// copies of one recording, moved, must not stat every copy again for
    /// each new file).
    gone_elsewhere: HashMap<Fingerprint, Candidates>,
    roots: Vec<PathBuf>,
    /// Whether the store holds tracks outside the roots, which a new file
    /// may be one of, moved.
    elsewhere: bool,
}

impl MoveCandidates {
    fn add(&mut self, db: &Store, known: &KnownStamps, rows: &[usize]) -> anyhow::Result<()> {
        let paths: HashMap<i64, &str> = rows.iter().map(|&row| (known.id(row), known.path(row))).collect();
        let ids: Vec<i64> = paths.keys().copied().collect();
        for (id, fingerprint) in db.fingerprints(&ids)? {
            let path = paths[&id].to_string();
            self.gone.entry(fingerprint).or_default().push(id, path);
        }
        Ok(())
    }

    /// Whether a new file may be a gone track that has only the sha256
    /// fingerprint of a store from before version 5: only then is a new
    /// file's sha256 computed too.
    fn may_want_sha256(&self, db: &Store) -> anyhow::Result<bool> {
        let gone = self.gone.keys().any(|f| matches!(f, Fingerprint::Sha256(_)));
        Ok(gone || (self.elsewhere && db.has_legacy_fingerprints()?))
    }

    /// The track (id and old path) that a new file at `path` with these
    /// fingerprints is: one gone under the roots first, else one gone
    /// elsewhere. Among the tracks of all its fingerprints (a store from
    /// before version 5 may know one recording by both), the one whose
    /// old path ends most like `path`.
    fn take(
        &mut self,
        tx: &store::Transaction<'_>,
        fingerprints: impl Iterator<Item = Fingerprint> + Clone,
        path: &str,
    ) -> anyhow::Result<Option<(i64, String)>> {
        if let Some(found) = take_best(&mut self.gone, fingerprints.clone(), path) {
            return Ok(Some(found));
        }
        if !self.elsewhere {
            return Ok(None);
        }
        for fingerprint in fingerprints.clone() {
            if let std::collections::hash_map::Entry::Vacant(e) = self.gone_elsewhere.entry(fingerprint) {
                let mut found = Candidates::default();
                for (id, old) in store::tracks_with_fingerprint(tx, &fingerprint)? {
                    if !under_roots(&old, &self.roots) && file_is_gone(&old) {
                        found.push(id, old);
                    }
                }
                e.insert(found);
            }
        }
        Ok(take_best(&mut self.gone_elsewhere, fingerprints, path))
    }
}

/// Takes the track, among those of `fingerprints` in `gone`, whose old
/// path ends most like `path`.
fn take_best(
    gone: &mut HashMap<Fingerprint, Candidates>,
    fingerprints: impl Iterator<Item = Fingerprint>,
    path: &str,
) -> Option<(i64, String)> {
    let best = fingerprints
        .filter_map(|f| {
            let (index, likeness) = gone.get_mut(&f)?.best(path)?;
            Some((f, index, likeness))
        })
        .max_by_key(|&(_, _, likeness)| likeness)?;
    gone.get_mut(&best.0)?.tracks[best.1].take()
}

/// Gone tracks of one fingerprint, indexed by the last two components of
/// their paths (a library moved whole keeps them) and by file name, so
/// that each new file finds its own among thousands of copies without
/// comparing with each.
#[derive(Default)]
struct Candidates {
    /// (id, old path), None once taken.
    tracks: Vec<Option<(i64, String)>>,
    by_tail: HashMap<String, Vec<usize>>,
    by_name: HashMap<String, Vec<usize>>,
    /// Tracks before this one are all taken.
    next_left: usize,
}

impl Candidates {
    fn push(&mut self, id: i64, path: String) {
        let i = self.tracks.len();
        self.by_tail.entry(tail(&path).to_string()).or_default().push(i);
        self.by_name
            .entry(file_name(&path).to_string())
            .or_default()
            .push(i);
        self.tracks.push(Some((id, path)));
    }

    /// The track whose old path ends most like `path` (not taken yet),
    /// with how alike: one whose last two components match (ending more
    /// like it than any other), else one of the same file name, else any.
    fn best(&mut self, path: &str) -> Option<(usize, Likeness)> {
        let tracks = &self.tracks;
        // The last one not taken yet (taken ones are dropped from the end
        // as they come up: each at most once).
        let left = |indexes: &mut Vec<usize>| {
            while indexes.last().is_some_and(|&i| tracks[i].is_none()) {
                indexes.pop();
            }
            indexes.last().copied()
        };
        let ending = |i: usize| tracks[i].as_ref().map_or(0, |(_, old)| same_ending(old, path));
        let same_tail = self.by_tail.get_mut(tail(path)).and_then(|same_tail| {
            left(same_tail)?;
            same_tail
                .iter()
                .copied()
                .filter(|&i| tracks[i].is_some())
                .max_by_key(|&i| ending(i))
        });
        if let Some(i) = same_tail {
            return Some((i, Likeness::SameTail(ending(i))));
        }
        if let Some(i) = self.by_name.get_mut(file_name(path)).and_then(left) {
            return Some((i, Likeness::SameName));
        }
        while self.next_left < tracks.len() && tracks[self.next_left].is_none() {
            self.next_left += 1;
        }
        (self.next_left < tracks.len()).then_some((self.next_left, Likeness::Any))
    }
}

/// How much a gone track's old path is like a new file's, least first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Likeness {
    Any,
    SameName,
    /// The last two components match, and this many at the end.
    SameTail(usize),
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The last two components of a path.
fn tail(path: &str) -> &str {
    let mut slashes = path.rmatch_indices('/').map(|(i, _)| i);
    match (slashes.next(), slashes.next()) {
        (Some(_), Some(i)) => &path[i + 1..],
        _ => path,
    }
}

/// How many trailing path components `a` and `b` share.
fn same_ending(a: &str, b: &str) -> usize {
    a.rsplit('/')
        .zip(b.rsplit('/'))
        .take_while(|(x, y)| x == y)
        .count()
}

fn file_is_gone(path: &str) -> bool {
    std::fs::symlink_metadata(text_to_path(path)).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// Whether `path` is `prefix` or lies below it.
fn at_or_under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix.trim_end_matches('/'))
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Whether `path` is one of the (canonical) roots or under one: compared
/// as text, which is many times cheaper than by path components.
fn under_roots(path: &str, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| at_or_under(path, &path_to_text(r)))
}

/// Change-log entries a scan keeps; a mount further behind rebuilds.
const CHANGE_LOG_KEEP: i64 = 1_000_000;

/// Opens (creating if needed) the store at `db` for [`scan`], holding its
/// scan lock from before the file is made ([`Store::open_for_scan`]).
pub fn open_store(db: &Path) -> anyhow::Result<Store> {
    Ok(Store::open_for_scan(db, say_waiting)?)
}

fn say_waiting() {
    tracing::warn!("another scan of this store is running: waiting for it to finish");
}

/// Scans `opts.roots` into the store.
pub fn scan(
    db: &mut Store,
    opts: &ScanOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> anyhow::Result<ScanSummary> {
    let roots = check_roots(&opts.roots)?;
    let _one_scan_at_a_time = db.lock_for_scan(say_waiting)?;
    // The scan starts once it has the store to itself.
    let started = Instant::now();
    let started_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let mut summary = ScanSummary::default();
    let wanted = |name: &str| !name.starts_with("._") && !extension_in(name, NOT_AUDIO);
    // Folders are recorded for one root walked without following symlinks
    // (every folder reached once, by one path).
    let devices = match roots.as_slice() {
        [root] if !opts.follow_symlinks => trusted_devices(root),
        _ => Vec::new(),
    };
    db.read_mapped(true)?;
    let previous = if devices.is_empty() {
        ScannedDirs::default()
    } else {
        db.scanned_dirs()?
    };
    tracing::debug!(
        "read {} recorded folders at {:?}",
        previous.len(),
        started.elapsed()
    );
    let nothing = ScannedDirs::default();
    let cache = (!devices.is_empty()).then(|| DirCache {
        previous: if opts.full { &nothing } else { &previous },
        devices: &devices,
    });
    // The store's stamps are read while the walk runs, unless the record
    // of folders may well show that nothing changed.
    let expect_unchanged = cache.as_ref().is_some_and(|c| !c.previous.is_empty());
    let (mut walked, known) = std::thread::scope(|s| {
        let walk = s.spawn(|| {
            let on_progress = |n| progress(Progress::Walking(n));
            crate::scan::walk::walk(
                &roots,
                opts.follow_symlinks,
                opts.threads.walk,
                &wanted,
                &on_progress,
                cache.as_ref(),
            )
        });
        let known = (!expect_unchanged).then(|| load_known(db));
        (walk.join().expect("walk panicked"), known)
    });
    tracing::debug!(
        "walked {} files on {} threads at {:?}",
        walked.files.len(),
        walked.threads,
        started.elapsed()
    );
    if let Some(link) = &walked.a_link_not_followed {
        // A library of albums linked in from elsewhere would otherwise
        // scan as empty with no word why.
        let links = match walked.links_not_followed {
            1 => "a symbolic link".to_string(),
            n => format!("{n} symbolic links, such as"),
        };
        tracing::warn!(
            "not following {links} {}: scan with --follow-symlinks to include what they point to",
            link.display()
        );
    }
    if expect_unchanged && nothing_changed(&walked) {
        let mut summary = finish_unchanged(db, &walked, &previous, started_ns)?;
        summary.elapsed = started.elapsed();
        return Ok(summary);
    }
    let (known, mut known_failures) = match known {
        Some(known) => known?,
        None => load_known(db)?,
    };
    db.read_mapped(false)?;
    tracing::debug!("read stamps from the store at {:?}", started.elapsed());
    add_reused_files(&mut walked, &previous);
    summary.skipped += walked.skipped + walked.reused.skipped_by_name;
    summary.failed += walked.failures.len() as u64;
    summary.failures.extend(walked.failures.iter().cloned());

    let Compared {
        todo,
        mut kinds,
        seen,
    } = compare(&walked, &known, &mut known_failures, &mut summary);
    let unchanged_failures: HashSet<&str> = walked
        .files
        .iter()
        .zip(&kinds)
        .filter(|(_, kind)| **kind == Some(EntryKind::Failure))
        .map(|((path, _), _)| path.as_str())
        .collect();
    name_unchanged_failures(db, &unchanged_failures, &mut summary)?;
    let missing_rows: Vec<usize> = (0..known.len())
        .filter(|&row| !seen[row] && under_roots(known.path(row), &roots))
        .filter(|&row| {
            // Not taken for gone: a folder that failed to list (a network
            // share's hiccup, a permission) would otherwise lose its tracks
            // and their edits to --prune.
            let kept = walked.unreadable.iter().any(|u| at_or_under(known.path(row), u));
            summary.unreadable += u64::from(kept);
            !kept
        })
        .collect();
    let mut missing: Vec<i64> = missing_rows.iter().map(|&row| known.id(row)).collect();
    missing.sort_unstable();
    let mut moved_from = MoveCandidates {
        roots: roots.clone(),
        // A library moved or mounted elsewhere and scanned at its new path:
        // its files are new here, and their tracks, outside the roots
        // scanned, have lost their files. Looked up by the fingerprint of
        // each new file (the store may hold other libraries, whose files
        // are not stat'ed for it).
        elsewhere: (0..known.len()).any(|row| !under_roots(known.path(row), &roots)),
        ..MoveCandidates::default()
    };
    moved_from.add(db, &known, &missing_rows)?;
    let gone_failures: Vec<String> = known_failures
        .into_keys()
        .filter(|p| under_roots(p, &roots))
        .collect();
    progress(Progress::Probing(todo.len() as u64));
    tracing::debug!("{} files to probe at {:?}", todo.len(), started.elapsed());

    let mut moved = HashSet::new();
    let mut results = Results {
        moved_from: &mut moved_from,
        moved: &mut moved,
        kinds: &mut kinds,
        summary: &mut summary,
    };
    let sha256 = results.moved_from.may_want_sha256(db)?;
    probe_and_write(db, opts.threads.probe, sha256, todo, &mut results, progress)?;

    tracing::debug!("probed and written at {:?}", started.elapsed());
    let still_missing: HashSet<i64> = missing.into_iter().filter(|id| !moved.contains(id)).collect();
    let tx = db.write()?;
    for path in &gone_failures {
        store::remove_failure(&tx, path)?;
    }
    if opts.prune {
        for &id in &still_missing {
            store::remove_track(&tx, id)?;
        }
        store::delete_orphan_art(&tx)?;
        summary.removed = still_missing.len() as u64;
    } else {
        summary.missing = still_missing.len() as u64;
    }
    if cache.is_some() {
        // Folders holding (at any depth) a track kept without its file are
        // listed again next time, so that it is reported again.
        let kept: Vec<&str> = (0..known.len())
            .filter(|&row| !opts.prune && still_missing.contains(&known.id(row)))
            .map(|row| known.path(row))
            .collect();
        let folders = Folders {
            walked: &walked,
            kinds: &kinds,
            previous: &previous,
            roots: &roots,
            scan_started_ns: started_ns,
        };
        folders.record(&tx, &ancestors(&kept))?;
    } else {
        // Files found through symlinks or several roots at once are not in
        // the record: below these roots it would no longer tell the whole
        // story.
        for root in &roots {
            store::forget_scanned_dirs_under(&tx, &path_to_text(root))?;
        }
    }
    store::trim_change_log(&tx, CHANGE_LOG_KEEP)?;
    tx.commit()?;
    summary.failures.sort_unstable();
    summary.elapsed = started.elapsed();
    Ok(summary)
}

/// Ends a scan that found every folder as recorded and every file
/// unchanged: nothing to probe, no track to read.
fn finish_unchanged(
    db: &mut Store,
    walked: &Walked,
    previous: &ScannedDirs,
    started_ns: i64,
) -> anyhow::Result<ScanSummary> {
    db.read_mapped(false)?;
    // Folders listed and found as recorded keep their entries under their
    // new times (those taken from the record had theirs).
    let listed = if walked.dirs_listed > 0 {
        &walked.dirs[..]
    } else {
        &[]
    };
    let relisted: Vec<(&str, ScannedDir<'_>)> = listed
        .iter()
        .filter_map(|dir| {
            let previous = previous.get(&dir.path)?;
            let stale = !previous.settled() || previous.stamp != dir.stamp;
            stale.then(|| (dir.path.as_str(), previous.seen_again(dir.stamp, started_ns)))
        })
        .collect();
    let log_full = db.first_change_seq()?.is_some_and(|first| {
        db.last_change_seq()
            .is_ok_and(|last| last - first >= CHANGE_LOG_KEEP)
    });
    // Nothing to write: no write transaction either.
    if !relisted.is_empty() || log_full {
        let tx = db.write()?;
        for (path, found) in &relisted {
            store::save_scanned_dir(&tx, path, found)?;
        }
        store::trim_change_log(&tx, CHANGE_LOG_KEEP)?;
        tx.commit()?;
    }
    let mut summary = ScanSummary {
        unchanged: walked.reused.tracks,
        failed: walked.reused.failures,
        skipped: walked.reused.not_audio + walked.reused.skipped_by_name,
        ..ScanSummary::default()
    };
    if walked.reused.failures > 0 {
        let recorded = recorded_failures(walked, previous);
        let paths = recorded.iter().map(String::as_str).collect();
        name_unchanged_failures(db, &paths, &mut summary)?;
        summary.failures.sort_unstable();
    }
    Ok(summary)
}

/// The files of folders taken from the record that a scan refused before.
fn recorded_failures(walked: &Walked, previous: &ScannedDirs) -> Vec<String> {
    let mut out = Vec::new();
    for dir in walked.dirs.iter().filter(|d| d.from_record) {
        let Some(recorded) = previous.get(&dir.path) else {
            continue;
        };
        let Some(entries) = recorded.entries() else {
            continue;
        };
        out.extend(
            entries
                .iter()
                .filter(|e| e.kind == EntryKind::Failure)
                .filter_map(|e| e.name.to_str().ok())
                .map(|name| format!("{}/{name}", dir.path)),
        );
    }
    out
}

/// Lists, with the reasons recorded when they were probed, the failures a
/// scan counted without probing them again (their files are unchanged):
/// a re-scan names every file it counts as failed, as the first scan did.
fn name_unchanged_failures(
    db: &Store,
    paths: &HashSet<&str>,
    summary: &mut ScanSummary,
) -> anyhow::Result<()> {
    if paths.is_empty() {
        return Ok(());
    }
    let recorded = db.failures()?.into_iter();
    summary
        .failures
        .extend(recorded.filter(|(path, _)| paths.contains(path.as_str())));
    Ok(())
}

/// The walk's files held against the store.
struct Compared<'a> {
    /// Files to probe.
    todo: Vec<Job<'a>>,
    /// What each file of the walk is, where already known.
    kinds: Vec<Option<EntryKind>>,
    /// Which tracks' files were found.
    seen: Vec<bool>,
}

/// Holds every file found against the track (or recorded failure) at its
/// path: unchanged ones are counted, the others are to be probed.
fn compare<'a>(
    walked: &'a Walked,
    known: &KnownStamps,
    known_failures: &mut PathMap<Stamps>,
    summary: &mut ScanSummary,
) -> Compared<'a> {
    let mut out = Compared {
        // Sized at once: a first scan probes every file, and a vector grown
        // by doubling leaves its earlier copies to the allocator (peak RSS).
        todo: Vec::with_capacity(walked.files.len()),
        kinds: vec![None; walked.files.len()],
        seen: vec![false; known.len()],
    };
    for (index, (path, stamps)) in walked.files.iter().enumerate() {
        let stamps = *stamps;
        let failure = (!known_failures.is_empty())
            .then(|| known_failures.remove(path))
            .flatten();
        let existing = match known.find(path) {
            Some(row) => {
                out.seen[row] = true;
                if known.stamps(row) == stamps {
                    summary.unchanged += 1;
                    out.kinds[index] = Some(EntryKind::Track);
                    continue;
                }
                Some(known.id(row))
            }
            None if failure == Some(stamps) => {
                summary.failed += 1;
                out.kinds[index] = Some(EntryKind::Failure);
                continue;
            }
            None => None,
        };
        out.todo.push(Job {
            path,
            stamps,
            existing,
            index,
        });
    }
    out
}

/// Probes the files on `jobs` threads while this one writes the results;
/// `sha256` as for [`worker`].
fn probe_and_write<'a>(
    db: &mut Store,
    jobs: usize,
    sha256: bool,
    todo: Vec<Job<'a>>,
    results: &mut Results<'_>,
    progress: &dyn Fn(Progress),
) -> anyhow::Result<()> {
    let (res_tx, res_rx) = bounded::<Vec<Outcome<'a>>>(jobs);
    let todo = Jobs {
        todo: &todo,
        next: AtomicUsize::new(0),
    };
    std::thread::scope(|s| {
        let bytes_per_send = RESULT_BYTES_UNSENT / jobs.max(1);
        for _ in 0..jobs.max(1) {
            let (todo, results) = (&todo, res_tx.clone());
            s.spawn(move || worker(todo, results, sha256, bytes_per_send));
        }
        drop(res_tx);
        write_results(db, res_rx, results, progress)
    })
}

/// The store's stamps of every track and recorded failure.
fn load_known(db: &Store) -> store::Result<(KnownStamps, PathMap<Stamps>)> {
    Ok((db.known_stamps()?, db.failure_stamps()?))
}

/// Devices whose folders may be recorded and taken from the record: the
/// root's, if it is on local storage ([`FsKind::Local`]: elsewhere a
/// folder's times need not change with its entries).
fn trusted_devices(root: &Path) -> Vec<u64> {
    if fs_kind::of_path(root) != FsKind::Local {
        return Vec::new();
    }
    crate::scan::walk::identity(root)
        .map(|(device, _)| vec![device])
        .unwrap_or_default()
}

/// Whether the walk took every folder from the record and found every
/// file as it was.
fn nothing_changed(walked: &Walked) -> bool {
    walked.files.is_empty()
        && walked.failures.is_empty()
        && walked.unreadable.is_empty()
        && (walked.dirs_listed == 0 || walked.dirs.iter().all(|d| d.from_record))
}

/// Adds the files and subfolders of folders taken from the record to
/// what the walk found, as if they had been listed.
fn add_reused_files(walked: &mut Walked, previous: &ScannedDirs) {
    let walked_dirs: HashSet<String> = walked.dirs.iter().map(|d| d.path.clone()).collect();
    for dir in walked.dirs.iter_mut().filter(|d| d.from_record) {
        let Some(recorded) = previous.get(&dir.path) else {
            continue;
        };
        let entries = recorded.entries();
        let start = walked.files.len();
        for entry in entries.into_iter().flatten() {
            let Ok(name) = entry.name.to_str() else {
                dir.recordable = false;
                continue;
            };
            if entry.kind == EntryKind::Dir {
                // A recorded subfolder the walk could not read (the record
                // lies, or it went away during the walk): list this folder
                // next time rather than record it again.
                if !walked_dirs.contains(&format!("{}/{name}", dir.path)) {
                    dir.recordable = false;
                }
                dir.subdirs.push(name.to_string());
            } else {
                walked.files.push((format!("{}/{name}", dir.path), entry.stamps));
            }
        }
        dir.files = start..walked.files.len();
        dir.skipped_by_name = recorded.skipped_by_name;
    }
}

/// Every folder above the given paths (each path's parent, its parent ...).
fn ancestors<'a>(paths: &[&'a str]) -> HashSet<&'a str> {
    let mut out = HashSet::new();
    for path in paths {
        let mut rest = *path;
        while let Some((parent, _)) = rest.rsplit_once('/') {
            if parent.is_empty() || !out.insert(parent) {
                break;
            }
            rest = parent;
        }
    }
    out
}

/// What a scan found in each folder, to record for the next one.
struct Folders<'a> {
    walked: &'a Walked,
    kinds: &'a [Option<EntryKind>],
    previous: &'a ScannedDirs,
    roots: &'a [PathBuf],
    scan_started_ns: i64,
}

impl Folders<'_> {
    /// Records every folder walked whose entries are all known, except
    /// those in `relist`; forgets the others and those no longer found.
    fn record(&self, tx: &store::Transaction, relist: &HashSet<&str>) -> anyhow::Result<()> {
        let mut walked = HashSet::new();
        for dir in &self.walked.dirs {
            walked.insert(dir.path.as_str());
            let found = (dir.recordable && !relist.contains(dir.path.as_str()))
                .then(|| self.found_in(dir))
                .flatten();
            let previous = self.previous.get(&dir.path);
            match found {
                Some(found) if outdated(previous.as_ref(), &found) => {
                    store::save_scanned_dir(tx, &dir.path, &found)?
                }
                Some(_) => {}
                None if previous.is_some() => store::forget_scanned_dir(tx, &dir.path)?,
                None => {}
            }
        }
        for path in self.previous.paths() {
            let walkable = under_roots(path, self.roots);
            if walkable && !walked.contains(path) {
                store::forget_scanned_dir(tx, path)?;
            }
        }
        Ok(())
    }

    /// The folder as this scan left it, if every file in it has a kind.
    fn found_in(&self, dir: &crate::scan::walk::WalkedDir) -> Option<ScannedDir<'static>> {
        let no_stamps = Stamps {
            size: 0,
            mtime_ns: 0,
            ctime_ns: 0,
        };
        let mut names = Vec::new();
        let mut entries = Vec::new();
        for sub in &dir.subdirs {
            names.push((CString::new(sub.as_str()).ok()?, EntryKind::Dir, no_stamps));
        }
        for index in dir.files.clone() {
            let (path, stamps) = &self.walked.files[index];
            let name = path.get(dir.path.len() + 1..)?;
            names.push((CString::new(name).ok()?, self.kinds[index]?, *stamps));
        }
        for (name, kind, stamps) in &names {
            entries.push(DirEntry {
                name,
                kind: *kind,
                stamps: *stamps,
            });
        }
        Some(ScannedDir::new(
            dir.stamp,
            self.scan_started_ns,
            dir.skipped_by_name,
            entries,
        ))
    }
}

/// Whether a folder's record must be written again to say what this scan
/// found: it has none, another stamp or other entries, or one written too
/// soon after the folder changed to be trusted.
fn outdated(previous: Option<&ScannedDir<'_>>, found: &ScannedDir<'_>) -> bool {
    previous.is_none_or(|p| {
        !p.settled()
            || p.stamp != found.stamp
            || p.skipped_by_name != found.skipped_by_name
            || p.entries() != found.entries()
    })
}

/// What the writer updates besides the store.
struct Results<'a> {
    /// Tracks whose files are gone: a new file with one's fingerprint is
    /// that track, moved.
    moved_from: &'a mut MoveCandidates,
    moved: &'a mut HashSet<i64>,
    /// What each file of the walk turned out to be.
    kinds: &'a mut [Option<EntryKind>],
    summary: &'a mut ScanSummary,
}

/// The single writer: applies results in batched transactions. Each
/// result is written as it comes (while the probes go on), and the
/// transaction is committed once it has a batch, holds
/// [`HELD_PICTURE_BYTES`] of new pictures, or has gathered for a while:
/// each commit rewrites the pages it touched into the WAL, and results
/// come a few at a time. New pictures are stored at the batch's end
/// ([`store::HeldPictures`]); held rows instead would leave the probes
/// waiting on the writer's burst (a first scan of 20,000 tracks with 2,000
/// covers took 15% longer).
fn write_results(
    db: &mut Store,
    results: Receiver<Vec<Outcome<'_>>>,
    out: &mut Results<'_>,
    progress: &dyn Fn(Progress),
) -> anyhow::Result<()> {
    let mut held = store::HeldPictures::default();
    while let Ok(first) = results.recv() {
        let tx = db.write()?;
        let deadline = Instant::now() + GATHER;
        let mut next = Some(first);
        let mut written = 0;
        while let Some(outcomes) = next.take() {
            for outcome in outcomes {
                progress(Progress::Probed);
                write_outcome(&tx, outcome, &mut held, out)?;
                written += 1;
            }
            if written < BATCH && held.bytes() < HELD_PICTURE_BYTES {
                next = results.recv_deadline(deadline).ok();
            }
        }
        held.store(&tx)?;
        tx.commit()?;
    }
    Ok(())
}

/// Bytes of new pictures a batch holds at most before it stores them.
const HELD_PICTURE_BYTES: usize = 4 << 20;

/// Writes one probe's result; the pictures of a new track go to `held`.
fn write_outcome(
    tx: &store::Transaction<'_>,
    outcome: Outcome<'_>,
    held: &mut store::HeldPictures,
    out: &mut Results<'_>,
) -> anyhow::Result<()> {
    let Results {
        moved_from,
        moved,
        kinds,
        summary,
    } = out;
    match outcome {
        Outcome::Scanned(job, mut probed) => {
            kinds[job.index] = Some(EntryKind::Track);
            let was_moved = match job.existing {
                None => moved_from.take(tx, probed.fingerprints(), job.path)?,
                Some(_) => None,
            };
            let track = &mut probed.track;
            if let Some((id, old)) = was_moved {
                if !under_roots(&old, &moved_from.roots) {
                    // Its folder's record (from a scan of that
                    // root) no longer tells the truth: a file
                    // there is no longer a track.
                    if let Some((folder, _)) = old.rsplit_once('/') {
                        store::forget_scanned_dir(tx, folder)?;
                    }
                }
                store::move_track(tx, id, track)?;
                moved.insert(id);
                summary.moved += 1;
            } else {
                match job.existing {
                    Some(id) => {
                        store::write_scanned(tx, track, Some(id))?;
                        summary.updated += 1;
                    }
                    None => {
                        store::add_scanned(tx, track, held)?;
                        summary.added += 1;
                    }
                }
            }
        }
        Outcome::Failed(job, ProbeError::UnknownFormat | ProbeError::Empty)
            if !extension_in(job.path, AUDIO) && !extension_in(job.path, UNSERVED_AUDIO) =>
        {
            kinds[job.index] = Some(EntryKind::NotAudio);
            summary.skipped += 1;
        }
        Outcome::Failed(job, err) => {
            let reason = match err {
                // Audio the user will look for in the mount: say why it is not there.
                ProbeError::UnknownFormat if extension_in(job.path, UNSERVED_AUDIO) => {
                    format!(
                        "unsupported audio format (.{}): retagfs serves FLAC, MP3, MP4/M4A, \
                         Ogg Vorbis, Ogg Opus and WAV",
                        extension(job.path)
                    )
                }
                err => err.to_string(),
            };
            // A track that was fine before keeps its row (and its
            // edited tags); its changed stamps keep it from being served.
            tracing::info!("{}: {reason}", job.path);
            store::record_failure(tx, job.path, job.stamps, &reason)?;
            kinds[job.index] = Some(EntryKind::Failure);
            summary.failed += 1;
            summary.failures.push((job.path.to_string(), reason));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_windowed_file_reads_the_same_bytes_as_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let windowed = Windowed::new(File::open(&path).unwrap());
        let src = Source::new(&windowed as &dyn ReadAt, data.len() as u64);
        // Small reads inside one window, across its end, before it, large
        // reads (past it), and reads at the end of the file.
        let reads = [
            (0, 4),
            (4, 30),
            (60_000, 10_000),
            (65_530, 20),
            (10, 100),
            (1_000, 70_000),
            (199_990, 10),
            (190_000, 10_000),
            (131_000, 16_384),
        ];
        for (at, len) in reads {
            let got = src.read(at, len, "test").unwrap();
            assert_eq!(
                got,
                &data[at as usize..(at + len) as usize],
                "{len} bytes at {at}"
            );
        }
        assert!(src.read(199_995, 10, "test").is_err(), "past the end");
        drop(windowed);
        // The next file on this thread reuses the buffer and sees only its own bytes.
        let short = dir.path().join("g");
        std::fs::write(&short, b"tiny").unwrap();
        let windowed = Windowed::new(File::open(&short).unwrap());
        let src = Source::new(&windowed as &dyn ReadAt, 4);
        assert_eq!(src.read_upto(0, 100).unwrap(), b"tiny");
        assert_eq!(src.read(1, 3, "test").unwrap(), b"iny");
    }

    #[test]
    fn ancestors_are_every_folder_above() {
        let mut got: Vec<&str> = ancestors(&["/m/a/b/x.flac", "/m/a/y.flac", "/n/z.flac"])
            .into_iter()
            .collect();
        got.sort();
        assert_eq!(got, ["/m", "/m/a", "/m/a/b", "/n"]);
    }
}
