//! The scan pipeline: walk the roots, probe changed files in parallel with
//! bounded reads, write results through one writer in batched transactions.

mod folder_records;
mod moves;
pub mod objects;
mod probe;
mod walk;
mod writer;

use folder_records::*;
use moves::*;
use probe::*;
use writer::*;

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
/// (docs/benchmarks.md, the "slow" scan rows).
pub const NETWORK_JOBS: usize = 16;

/// The fewest threads that probe files on local storage. A first scan
/// reads each file's head and end, which are seldom in the page cache, and
/// a disk answers several reads at once: a first scan from a cold cache is
/// much faster this way than on one thread per core, for little more time
/// when every file is cached (docs/benchmarks-log.md, "Scans and mounts
/// from a cold disk").
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

impl ScanSummary {
    /// Adds the counts of another scan of the same run (its roots of
    /// another kind).
    pub fn add(&mut self, other: ScanSummary) {
        self.added += other.added;
        self.updated += other.updated;
        self.moved += other.moved;
        self.unchanged += other.unchanged;
        self.removed += other.removed;
        self.missing += other.missing;
        self.unreadable += other.unreadable;
        self.failed += other.failed;
        self.skipped += other.skipped;
        self.elapsed += other.elapsed;
        self.failures.extend(other.failures);
        self.failures.sort_unstable();
    }
}

/// Progress reports for a progress bar.
pub enum Progress {
    /// The walk found this many files so far.
    Walking(u64),
    /// The listing of buckets found this many objects so far.
    Listing(u64),
    /// Probing starts: this many files need it.
    Probing(u64),
    /// One more file probed.
    Probed,
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

thread_local! {
    static SPARE_WINDOW: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
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

/// Scans `opts.roots` into the store, in phases: read the record of
/// folders, walk the roots, hold what was found against the store, probe
/// and write what changed, then record what is gone and the folders seen.
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

    let (devices, previous) = read_folder_record(db, &roots, opts)?;
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
    let (mut walked, known) = walk_roots(db, &roots, opts, cache.as_ref(), expect_unchanged, progress);
    tracing::debug!(
        "walked {} files on {} threads at {:?}",
        walked.files.len(),
        walked.threads,
        started.elapsed()
    );
    say_links_not_followed(&walked);
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
    let mut summary = ScanSummary::default();
    summary.skipped += walked.skipped + walked.reused.skipped_by_name;
    summary.failed += walked.failures.len() as u64;
    summary.failures.extend(walked.failures.iter().cloned());
    let Compared {
        todo,
        mut kinds,
        seen,
    } = compare(&walked, &known, &mut known_failures, &mut summary);
    name_failures_found_unchanged(db, &walked, &kinds, &mut summary)?;
    let missing_rows = tracks_without_files(&known, &seen, &walked, &roots, &mut summary);
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

    let still_missing: HashSet<i64> = missing_rows
        .iter()
        .map(|&row| known.id(row))
        .filter(|id| !moved.contains(id))
        .collect();
    let folders = cache.is_some().then_some(Folders {
        walked: &walked,
        kinds: &kinds,
        previous: &previous,
        roots: &roots,
        scan_started_ns: started_ns,
    });
    let gone = Gone {
        failures: &gone_failures,
        tracks: &still_missing,
        known: &known,
    };
    record_what_is_gone(db, opts, &roots, &gone, folders.as_ref(), &mut summary)?;
    summary.failures.sort_unstable();
    summary.elapsed = started.elapsed();
    Ok(summary)
}

/// The devices whose folders this scan may take from the record, and the
/// record: only for one root walked without following symlinks (every
/// folder reached once, by one path).
fn read_folder_record(
    db: &Store,
    roots: &[PathBuf],
    opts: &ScanOptions,
) -> anyhow::Result<(Vec<u64>, ScannedDirs)> {
    let devices = match roots {
        [root] if !opts.follow_symlinks => trusted_devices(root),
        _ => Vec::new(),
    };
    db.read_mapped(true)?;
    let previous = if devices.is_empty() {
        ScannedDirs::default()
    } else {
        db.scanned_dirs()?
    };
    Ok((devices, previous))
}

/// What the store knows of tracks and failures, by path.
type Known = (KnownStamps, PathMap<Stamps>);

/// Walks the roots; meanwhile reads the store's stamps on this thread,
/// unless `expect_unchanged` (then they may not be needed at all).
fn walk_roots(
    db: &Store,
    roots: &[PathBuf],
    opts: &ScanOptions,
    cache: Option<&DirCache<'_>>,
    expect_unchanged: bool,
    progress: &(dyn Fn(Progress) + Sync),
) -> (Walked, Option<store::Result<Known>>) {
    let wanted = |name: &str| !name.starts_with("._") && !extension_in(name, NOT_AUDIO);
    std::thread::scope(|s| {
        let walk = s.spawn(|| {
            let on_progress = |n| progress(Progress::Walking(n));
            walk::walk(
                roots,
                opts.follow_symlinks,
                opts.threads.walk,
                &wanted,
                &on_progress,
                cache,
            )
        });
        let known = (!expect_unchanged).then(|| load_known(db));
        (walk.join().expect("walk panicked"), known)
    })
}

/// Says which symbolic links the walk did not follow: a library of albums
/// linked in from elsewhere would otherwise scan as empty with no word why.
fn say_links_not_followed(walked: &Walked) {
    if let Some(link) = &walked.a_link_not_followed {
        let links = match walked.links_not_followed {
            1 => "a symbolic link".to_string(),
            n => format!("{n} symbolic links, such as"),
        };
        tracing::warn!(
            "not following {links} {}: scan with --follow-symlinks to include what they point to",
            link.display()
        );
    }
}

/// Names the failures found unchanged (not probed again), with the
/// reasons recorded.
fn name_failures_found_unchanged(
    db: &Store,
    walked: &Walked,
    kinds: &[Option<EntryKind>],
    summary: &mut ScanSummary,
) -> anyhow::Result<()> {
    let unchanged_failures: HashSet<&str> = walked
        .files
        .iter()
        .zip(kinds)
        .filter(|(_, kind)| **kind == Some(EntryKind::Failure))
        .map(|((path, _), _)| path.as_str())
        .collect();
    name_unchanged_failures(db, &unchanged_failures, summary)
}

/// The rows of tracks under the roots whose files the walk did not find.
/// Not taken for gone: tracks under a folder that failed to list (a
/// network share's hiccup, a permission), which would otherwise lose
/// their tracks and their edits to --prune; they are counted apart.
fn tracks_without_files(
    known: &KnownStamps,
    seen: &[bool],
    walked: &Walked,
    roots: &[PathBuf],
    summary: &mut ScanSummary,
) -> Vec<usize> {
    (0..known.len())
        .filter(|&row| !seen[row] && under_roots(known.path(row), roots))
        .filter(|&row| {
            let kept = walked.unreadable.iter().any(|u| at_or_under(known.path(row), u));
            summary.unreadable += u64::from(kept);
            !kept
        })
        .collect()
}

/// What a scan found gone: recorded failures whose files are gone, and
/// tracks whose files are gone and did not move.
struct Gone<'a> {
    failures: &'a [String],
    tracks: &'a HashSet<i64>,
    known: &'a KnownStamps,
}

/// The scan's last transaction: forgets failures whose files are gone,
/// removes (with --prune) or counts tracks whose files are gone, records
/// the folders seen (or forgets the record below the roots), trims the
/// change log.
fn record_what_is_gone(
    db: &mut Store,
    opts: &ScanOptions,
    roots: &[PathBuf],
    gone: &Gone<'_>,
    folders: Option<&Folders<'_>>,
    summary: &mut ScanSummary,
) -> anyhow::Result<()> {
    let tx = db.write()?;
    for path in gone.failures {
        store::remove_failure(&tx, path)?;
    }
    if opts.prune {
        for &id in gone.tracks {
            store::remove_track(&tx, id)?;
        }
        store::delete_orphan_art(&tx)?;
        summary.removed = gone.tracks.len() as u64;
    } else {
        summary.missing = gone.tracks.len() as u64;
    }
    match folders {
        Some(folders) => {
            // Folders holding (at any depth) a track kept without its file
            // are listed again next time, so that it is reported again.
            let kept: Vec<&str> = (0..gone.known.len())
                .filter(|&row| !opts.prune && gone.tracks.contains(&gone.known.id(row)))
                .map(|row| gone.known.path(row))
                .collect();
            folders.record(&tx, &ancestors(&kept))?;
        }
        None => {
            // Files found through symlinks or several roots at once are not
            // in the record: below these roots it would no longer tell the
            // whole story.
            for root in roots {
                store::forget_scanned_dirs_under(&tx, &path_to_text(root))?;
            }
        }
    }
    store::trim_change_log(&tx, CHANGE_LOG_KEEP)?;
    tx.commit()?;
    Ok(())
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

/// The store's stamps of every track and recorded failure.
fn load_known(db: &Store) -> store::Result<(KnownStamps, PathMap<Stamps>)> {
    Ok((db.known_stamps()?, db.failure_stamps()?))
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
