//! The scan's directory walk: every candidate file under the roots with its
//! stamps. Several threads share one queue of directories (a re-scan is
//! mostly directory reads and stats, which the kernel answers in
//! parallel), and files are stat'ed relative to their open directory
//! rather than by full path. With the store's record of the last scan's
//! folders, a folder whose device, inode, mtime and ctime are unchanged
//! (and were not too recent to trust when recorded) is not listed: its
//! entries come from the record and only its files are stat'ed.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use parking_lot::{Condvar, Mutex};
use rustix::fs::{self, AtFlags, OFlags, StatxFlags};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use retagfs_store::{
    bytes_to_text, path_to_text, text_to_path, DirEntry, DirStamp, EntryKind, ScannedDir, ScannedDirs, Stamps,
};

/// What the walk found.
#[derive(Default)]
pub struct Walked {
    /// Candidate files (by name) and their stamps.
    pub files: Vec<(String, Stamps)>,
    /// Files skipped by name (not audio, macOS `._` resource forks).
    pub skipped: u64,
    /// (path, reason) of files that cannot be scanned.
    pub failures: Vec<(String, String)>,
    /// Folders walked, when walking with a [`DirCache`].
    pub dirs: Vec<WalkedDir>,
    /// How many of `dirs` were listed (the others were taken from the
    /// record whole): none, and a re-scan need not look through `dirs`.
    pub dirs_listed: usize,
    /// Folders and files that are there but could not be read (each one
    /// logged; a folder whose listing broke off counts whole): what the
    /// store holds at or below them is kept as it is, not taken for gone.
    pub unreadable: Vec<String>,
    /// What the folders found as recorded hold, by kind.
    pub reused: Reused,
    /// Threads the walk ran on (more than it started on if it waited on
    /// the disk).
    pub threads: usize,
    /// Symbolic links in the folders listed, not followed (the walk was
    /// not told to), and one of them.
    pub links_not_followed: u64,
    pub a_link_not_followed: Option<PathBuf>,
}

/// Counts of the entries of folders found as recorded.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reused {
    pub tracks: u64,
    pub failures: u64,
    pub not_audio: u64,
    pub skipped_by_name: u64,
}

impl Reused {
    fn add(&mut self, other: Reused) {
        self.tracks += other.tracks;
        self.failures += other.failures;
        self.not_audio += other.not_audio;
        self.skipped_by_name += other.skipped_by_name;
    }
}

/// The store's record of the last scan's folders, for the walk to take
/// entries from instead of listing folders again.
pub struct DirCache<'a> {
    /// The last scan's folders by path (empty to list every folder but
    /// still record what was found).
    pub previous: &'a ScannedDirs,
    /// Devices whose folders may be taken from `previous` and recorded:
    /// local file systems, where adding, removing or renaming an entry
    /// always changes its folder's ctime.
    pub devices: &'a [u64],
}

/// A folder the walk went through.
#[derive(Debug)]
pub struct WalkedDir {
    /// The folder's path as the store keeps paths, without a trailing slash.
    pub path: String,
    pub stamp: DirStamp,
    /// Its entries are as recorded (taken from the record, or listed and
    /// found the same): its files are not in [`Walked::files`] and
    /// `subdirs` is empty.
    pub from_record: bool,
    /// Whether what was found may be recorded for the next scan: on a
    /// trusted device, listed without errors.
    pub recordable: bool,
    /// Names of its subfolders (listed folders only).
    pub subdirs: Vec<String>,
    /// Its candidate files, a range of [`Walked::files`] (listed folders only).
    pub files: Range<usize>,
    /// Files skipped by name.
    pub skipped_by_name: u64,
}

/// A directory to read, with the (device, inode) of it and its ancestors
/// when symlinks are followed (to detect loops).
struct Dir {
    path: PathBuf,
    ancestors: Vec<(u64, u64)>,
}

/// Directories given away to idle workers, and how many workers have
/// directories of their own to read.
struct Queue {
    dirs: Vec<Dir>,
    busy: usize,
}

/// The threads a walk reads folders on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkThreads {
    /// Threads it starts on.
    pub start: usize,
    /// Threads it grows to once they wait on the disk (no more than
    /// `start`: it never grows).
    pub on_disk: usize,
}

impl WalkThreads {
    /// `n` threads, whatever the disk does.
    pub fn fixed(n: usize) -> WalkThreads {
        WalkThreads { start: n, on_disk: n }
    }
}

/// Bytes read from the disk (in 512-byte units) by the walk's threads
/// together past which it starts the rest of its threads: a few dozen
/// folder or inode blocks not in the cache. A walk of an unchanged,
/// cached library reads none.
const DISK_BOUND: u64 = 256;

/// Folders a thread reads between looks at what it read from the disk.
const DIRS_PER_LOOK: usize = 16;

struct Shared<'a> {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Threads not started yet, started once the walk waits on the disk.
    reserve: AtomicUsize,
    /// What the walk's threads read from the disk so far, as they looked.
    disk_read: AtomicU64,
    /// Reads the calling thread's count of bytes read from the disk.
    thread_disk_reads: fn() -> u64,
    /// What each thread found, as it ends.
    parts: Mutex<Vec<Walked>>,
    /// Workers waiting for directories (read without the lock, to decide
    /// whether to share).
    idle: AtomicUsize,
    found: AtomicU64,
    follow: bool,
    wanted: &'a (dyn Fn(&str) -> bool + Sync),
    cache: Option<&'a DirCache<'a>>,
}

/// Walks `roots` on `threads` threads; `wanted(file name)` says whether a
/// file is a candidate; `progress(files found)` is called on the calling
/// thread now and then. `cache` (used only for one root walked without
/// following symlinks, where every folder is reached once) records the
/// folders walked and reuses unchanged ones.
///
/// A walk starts on `threads.start` threads (one per core by default: a
/// cached library's `statx` calls are answered from memory) and grows to
/// `threads.on_disk` once its threads read from the disk: then each waits
/// on a read most of the time, and the disk answers several at once
/// (docs/benchmarks-log.md, "A walk that grows once it reads from the
/// disk").
pub fn walk(
    roots: &[PathBuf],
    follow: bool,
    threads: WalkThreads,
    wanted: &(dyn Fn(&str) -> bool + Sync),
    progress: &dyn Fn(u64),
    cache: Option<&DirCache<'_>>,
) -> Walked {
    walk_counting(roots, follow, threads, wanted, progress, cache, thread_disk_reads)
}

/// [`walk`], reading what each thread read from the disk with
/// `thread_disk_reads`.
fn walk_counting(
    roots: &[PathBuf],
    follow: bool,
    threads: WalkThreads,
    wanted: &(dyn Fn(&str) -> bool + Sync),
    progress: &dyn Fn(u64),
    cache: Option<&DirCache<'_>>,
    thread_disk_reads: fn() -> u64,
) -> Walked {
    // Overlapping roots, or a symlink to a file also in the library, can
    // find a file twice.
    let may_repeat = follow || roots.len() > 1;
    let cache = cache.filter(|_| !may_repeat);
    let dirs = roots
        .iter()
        .rev()
        .map(|r| Dir {
            path: r.clone(),
            ancestors: if follow {
                identity(r).into_iter().collect()
            } else {
                Vec::new()
            },
        })
        .collect();
    let start = threads.start.max(1);
    let shared = Shared {
        queue: Mutex::new(Queue { dirs, busy: start }),
        idle: AtomicUsize::new(0),
        wake: Condvar::new(),
        reserve: AtomicUsize::new(threads.on_disk.saturating_sub(start)),
        disk_read: AtomicU64::new(0),
        thread_disk_reads,
        parts: Mutex::new(Vec::new()),
        found: AtomicU64::new(0),
        follow,
        wanted,
        cache,
    };
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
    std::thread::scope(|s| {
        for _ in 0..start {
            start_worker(s, &shared, done_tx.clone()).expect("cannot start a thread to walk folders");
        }
        drop(done_tx);
        // Nothing is ever sent: the channel disconnects once every worker
        // (those started later too) is done.
        while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
            done_rx.recv_timeout(Duration::from_millis(100))
        {
            progress(shared.found.load(Ordering::Relaxed));
        }
    });
    let parts = shared.parts.into_inner();
    let mut out = Walked {
        threads: parts.len(),
        ..Walked::default()
    };
    // One allocation each: the parts' vectors are freed right after.
    out.files.reserve_exact(parts.iter().map(|p| p.files.len()).sum());
    out.dirs.reserve_exact(parts.iter().map(|p| p.dirs.len()).sum());
    let mut seen = HashSet::new();
    for part in parts {
        out.skipped += part.skipped;
        out.links_not_followed += part.links_not_followed;
        out.a_link_not_followed = out.a_link_not_followed.or(part.a_link_not_followed);
        out.failures.extend(part.failures);
        out.unreadable.extend(part.unreadable);
        out.reused.add(part.reused);
        out.dirs_listed += part.dirs_listed;
        let base = out.files.len();
        out.dirs.extend(part.dirs.into_iter().map(|mut d| {
            d.files = d.files.start + base..d.files.end + base;
            d
        }));
        if may_repeat {
            out.files
                .extend(part.files.into_iter().filter(|(p, _)| seen.insert(p.clone())));
        } else {
            out.files.extend(part.files);
        }
    }
    let reused = out.reused;
    progress(out.files.len() as u64 + reused.tracks + reused.failures + reused.not_audio);
    out
}

/// The (device, inode) of `path`, symlinks followed, with the device
/// numbered as everywhere in the walk.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    let m = fs::statx(fs::CWD, path, AtFlags::empty(), StatxFlags::INO).ok()?;
    Some((device(&m), m.stx_ino))
}

/// Starts a worker on `s`; it holds `done` until it ends. Err when the
/// system has no thread to give (a container's limit on tasks).
fn start_worker<'scope, 'a>(
    s: &'scope std::thread::Scope<'scope, '_>,
    shared: &'scope Shared<'a>,
    done: crossbeam_channel::Sender<()>,
) -> io::Result<()> {
    std::thread::Builder::new().spawn_scoped(s, move || {
        let out = worker(s, shared, &done);
        shared.parts.lock().push(out);
    })?;
    Ok(())
}

/// Each worker reads its own stack of directories depth-first and gives
/// half of it away only when another worker is idle: the shared queue's
/// lock is taken a few times per walk, not twice per directory. Now and
/// then it looks at what it read from the disk, and starts the reserve
/// of workers once the walk has read enough.
fn worker<'scope>(
    s: &'scope std::thread::Scope<'scope, '_>,
    shared: &'scope Shared<'_>,
    done: &crossbeam_channel::Sender<()>,
) -> Walked {
    let mut out = Walked::default();
    let mut mine: Vec<Dir> = Vec::new();
    let (mut dirs_read, mut disk_read) = (0, (shared.thread_disk_reads)());
    loop {
        let dir = match mine.pop() {
            Some(dir) => dir,
            None => match next_dir(shared) {
                Some(dir) => dir,
                None => return out,
            },
        };
        mine.extend(read_dir(shared, &dir, &mut out));
        dirs_read += 1;
        if dirs_read % DIRS_PER_LOOK == 0 && shared.reserve.load(Ordering::Relaxed) > 0 {
            let now = (shared.thread_disk_reads)();
            let read = now.saturating_sub(disk_read);
            let walk_read = shared.disk_read.fetch_add(read, Ordering::Relaxed) + read;
            disk_read = now;
            if walk_read >= DISK_BOUND {
                start_reserve(s, shared, done);
            }
        }
        if mine.len() > 1 && shared.idle.load(Ordering::Relaxed) > 0 {
            let mut queue = shared.queue.lock();
            queue.dirs.extend(mine.drain(..mine.len() / 2));
            shared.wake.notify_all();
        }
    }
}

/// Starts the workers held in reserve (once: the first to see the walk
/// wait on the disk takes them all). They count as busy from now, as the
/// calling worker is: the walk cannot end before they start. Those the
/// system cannot start are done without: the walk goes on on the others.
fn start_reserve<'scope>(
    s: &'scope std::thread::Scope<'scope, '_>,
    shared: &'scope Shared<'_>,
    done: &crossbeam_channel::Sender<()>,
) {
    let n = shared.reserve.swap(0, Ordering::Relaxed);
    if n == 0 {
        return;
    }
    shared.queue.lock().busy += n;
    for started in 0..n {
        if let Err(e) = start_worker(s, shared, done.clone()) {
            tracing::info!("the walk goes on without {} more threads: {e}", n - started);
            shared.queue.lock().busy -= n - started;
            return;
        }
    }
}

/// What the calling thread read from the disk so far, in 512-byte units
/// (`ru_inblock`: reads from a block device it waited on; none for
/// network file systems, which scan on many threads from the start).
fn thread_disk_reads() -> u64 {
    // SAFETY: getrusage fills the struct it is given, zeroed here.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
        return 0;
    }
    usage.ru_inblock as u64
}

/// A directory from the shared queue once this worker's own are read; None
/// when the queue is empty and no worker has directories that could add
/// more.
fn next_dir(shared: &Shared<'_>) -> Option<Dir> {
    let mut queue = shared.queue.lock();
    if let Some(dir) = queue.dirs.pop() {
        return Some(dir);
    }
    queue.busy -= 1;
    shared.idle.fetch_add(1, Ordering::Relaxed);
    let found = loop {
        if let Some(dir) = queue.dirs.pop() {
            queue.busy += 1;
            break Some(dir);
        }
        if queue.busy == 0 {
            // Wake the others to see that the walk is over.
            shared.wake.notify_all();
            break None;
        }
        shared.wake.wait(&mut queue);
    };
    shared.idle.fetch_sub(1, Ordering::Relaxed);
    found
}

/// Reads one directory: candidate files go to `out`, subdirectories are
/// returned. With a cache, an unchanged folder is taken from it instead
/// (opened only if it holds files); any other is listed and recorded.
fn read_dir(shared: &Shared<'_>, dir: &Dir, out: &mut Walked) -> Vec<Dir> {
    let text = path_to_text(&dir.path);
    let path = text.trim_end_matches('/');
    let (Some(cache), false) = (shared.cache, path.is_empty()) else {
        return list_dir(shared, dir, out, None, None);
    };
    let recorded = cache.previous.get(path);
    // A folder that will be opened (to stat its files, or to list it) is
    // opened first and stamped through its descriptor: one path lookup
    // instead of two. One that fails to open is stamped by path, and
    // fails again where it is read, saying why.
    let holds_files = recorded.as_ref().is_none_or(|r| r.holds_files());
    let opened = holds_files.then(|| open_dir(&dir.path).ok()).flatten();
    // Taken before the folder is read: a change while it is read makes
    // the next scan read it again.
    let stamped = match &opened {
        Some(fd) => dir_stamp_of(fd.as_fd()),
        None => dir_stamp(&dir.path),
    };
    let stamp = match stamped {
        Ok(stamp) => stamp,
        Err(e) => {
            unreadable(out, &dir.path, &e);
            return Vec::new();
        }
    };
    let trusted = cache.devices.contains(&stamp.device);
    let previous = recorded.filter(|_| trusted);
    let unchanged = previous.as_ref().filter(|p| p.stamp == stamp && p.settled());
    let mut record = WalkedDir {
        path: path.to_string(),
        stamp,
        from_record: false,
        recordable: trusted,
        subdirs: Vec::new(),
        files: 0..0,
        skipped_by_name: 0,
    };
    if let Some(subdirs) = unchanged.and_then(|previous| reuse(shared, dir, opened.as_ref(), previous, out)) {
        record.from_record = true;
        out.dirs.push(record);
        return subdirs;
    }
    out.dirs_listed += 1;
    let subdirs = list_dir(shared, dir, out, opened, Some(&mut record));
    // A folder listed because its times changed (or were too recent to
    // trust) may still hold just what was recorded.
    let same = previous.filter(|_| record.recordable).and_then(|previous| {
        let listed = &out.files[record.files.clone()];
        holds_as_recorded(&previous, &record, listed)
    });
    if let Some(counts) = same {
        out.files.truncate(record.files.start);
        record.files = 0..0;
        record.subdirs.clear();
        record.from_record = true;
        out.reused.add(counts);
    }
    out.dirs.push(record);
    subdirs
}

/// Whether a listed folder holds just what its record says: the same
/// subfolders, the same files with the same stamps, as many skipped by
/// name. The counts by kind when it does.
fn holds_as_recorded(
    previous: &ScannedDir<'_>,
    listed: &WalkedDir,
    files: &[(String, Stamps)],
) -> Option<Reused> {
    let entries = previous.entries()?;
    let recorded: HashMap<&[u8], &DirEntry<'_>> = entries.iter().map(|e| (e.name.to_bytes(), e)).collect();
    let all_listed = listed.subdirs.len() + files.len();
    let one_each = recorded.len() == entries.len();
    if previous.skipped_by_name != listed.skipped_by_name || !one_each || entries.len() != all_listed {
        return None;
    }
    if !listed.subdirs.iter().all(|name| {
        recorded
            .get(name.as_bytes())
            .is_some_and(|e| e.kind == EntryKind::Dir)
    }) {
        return None;
    }
    let mut counts = Reused {
        skipped_by_name: listed.skipped_by_name,
        ..Reused::default()
    };
    for (path, stamps) in files {
        let name = path.get(listed.path.len() + 1..)?;
        let entry = recorded.get(name.as_bytes())?;
        if entry.stamps != *stamps {
            return None;
        }
        match entry.kind {
            EntryKind::Dir => return None,
            EntryKind::Track => counts.tracks += 1,
            EntryKind::Failure => counts.failures += 1,
            EntryKind::NotAudio => counts.not_audio += 1,
        }
    }
    Some(counts)
}

fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    Ok(fs::openat(fs::CWD, path, flags, fs::Mode::empty())?)
}

/// A folder's identity and change times.
fn dir_stamp(path: &Path) -> io::Result<DirStamp> {
    stamp_of_dir(fs::statx(fs::CWD, path, AtFlags::STATX_DONT_SYNC, DIR_STAMP)?)
}

/// [`dir_stamp`] of an open folder.
fn dir_stamp_of(fd: BorrowedFd<'_>) -> io::Result<DirStamp> {
    let flags = AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC;
    stamp_of_dir(fs::statx(fd, c"", flags, DIR_STAMP)?)
}

const DIR_STAMP: StatxFlags = StatxFlags::TYPE
    .union(StatxFlags::INO)
    .union(StatxFlags::MTIME)
    .union(StatxFlags::CTIME);

fn stamp_of_dir(m: fs::Statx) -> io::Result<DirStamp> {
    if fs::FileType::from_raw_mode(m.stx_mode.into()) != fs::FileType::Directory {
        return Err(io::Error::from(io::ErrorKind::NotADirectory));
    }
    Ok(DirStamp {
        device: device(&m),
        inode: m.stx_ino,
        mtime_ns: nanos(m.stx_mtime),
        ctime_ns: nanos(m.stx_ctime),
    })
}

/// Takes an unchanged folder's entries from the last scan, stat'ing its
/// files relative to `opened` (an edit in place changes no folder; a
/// folder of folders is not opened). None, and nothing counted, when a
/// file's stamps differ, the folder could not be opened or the record
/// cannot be read: the folder is then listed.
fn reuse(
    shared: &Shared<'_>,
    dir: &Dir,
    opened: Option<&OwnedFd>,
    previous: &ScannedDir<'_>,
    out: &mut Walked,
) -> Option<Vec<Dir>> {
    let mut counts = Reused {
        skipped_by_name: previous.skipped_by_name,
        ..Reused::default()
    };
    let mut subdirs = Vec::new();
    for entry in previous.entry_iter() {
        let entry = entry.ok()?;
        let name = name_on_disk(entry.name)?;
        let count = match entry.kind {
            EntryKind::Dir => {
                subdirs.push(Dir {
                    path: dir.path.join(OsStr::from_bytes(name.to_bytes())),
                    ancestors: Vec::new(),
                });
                continue;
            }
            EntryKind::Track => &mut counts.tracks,
            EntryKind::Failure => &mut counts.failures,
            EntryKind::NotAudio => &mut counts.not_audio,
        };
        let m = stat_at(opened?.as_fd(), &name, false).ok()?;
        let regular = fs::FileType::from_raw_mode(m.stx_mode.into()) == fs::FileType::RegularFile;
        if !regular || stamps_of(&m) != entry.stamps {
            return None;
        }
        *count += 1;
    }
    let files = counts.tracks + counts.failures + counts.not_audio;
    shared.found.fetch_add(files, Ordering::Relaxed);
    out.reused.add(counts);
    Some(subdirs)
}

/// The name on disk of an entry of a folder's record, which keeps names as
/// the store keeps paths ([`path_to_text`]).
fn name_on_disk(recorded: &CStr) -> Option<Cow<'_, CStr>> {
    match text_to_path(recorded.to_str().ok()?) {
        Cow::Borrowed(_) => Some(Cow::Borrowed(recorded)),
        Cow::Owned(name) => CString::new(name.into_os_string().into_vec())
            .ok()
            .map(Cow::Owned),
    }
}

/// Lists a folder (`opened`, or opened here): candidate files go to `out`,
/// subdirectories are returned, and `record` (if any) learns its entries. Entries are stat'ed
/// relative to the open folder, asking only for the stamps.
fn list_dir(
    shared: &Shared<'_>,
    dir: &Dir,
    out: &mut Walked,
    opened: Option<OwnedFd>,
    mut record: Option<&mut WalkedDir>,
) -> Vec<Dir> {
    let mut subdirs = Vec::new();
    let opened = opened
        .map_or_else(|| open_dir(&dir.path), Ok)
        .and_then(|fd| Ok(fs::Dir::new(fd)?));
    let mut entries = match opened {
        Ok(d) => d,
        Err(e) => {
            unreadable(out, &dir.path, &e);
            // Not recorded as an empty folder: the next scan lists it again.
            if let Some(record) = record {
                record.recordable = false;
            }
            return subdirs;
        }
    };
    let (files_before, skipped_before, failures_before) = (out.files.len(), out.skipped, out.failures.len());
    // Once per folder: each file's path starts with it.
    let dir_text = path_to_text(&dir.path);
    let mut clean = true;
    while let Some(entry) = entries.read() {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                // The listing is incomplete: nothing below is known gone.
                let e = io::Error::from(e);
                tracing::warn!("skipping an entry of {}: {e}", dir.path.display());
                out.unreadable.push(dir_text.to_string());
                clean = false;
                continue;
            }
        };
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let Ok(fd) = entries.fd() else { continue };
        let mut kind = entry.file_type();
        let mut meta = None;
        // Some file systems do not say an entry's type while listing.
        if kind == fs::FileType::Unknown || kind == fs::FileType::Symlink {
            let follow = kind == fs::FileType::Symlink;
            if follow && !shared.follow {
                out.links_not_followed += 1;
                if out.a_link_not_followed.is_none() {
                    out.a_link_not_followed = Some(dir.path.join(OsStr::from_bytes(name.to_bytes())));
                }
                continue;
            }
            let m = stat_at(fd, name, follow);
            match &m {
                Ok(m) => kind = fs::FileType::from_raw_mode(m.stx_mode.into()),
                Err(e) => {
                    unreadable(out, &dir.path.join(OsStr::from_bytes(name.to_bytes())), e);
                    clean = false;
                    continue;
                }
            }
            meta = Some(m);
        }
        if kind == fs::FileType::Directory {
            let path = dir.path.join(OsStr::from_bytes(name.to_bytes()));
            if let Some(record) = &mut record {
                record.subdirs.push(bytes_to_text(name.to_bytes()).into_owned());
            }
            if let Some(sub) = subdir(shared, dir, path, out, || {
                meta.unwrap_or_else(|| stat_at(fd, name, false))
            }) {
                subdirs.push(sub);
            }
        } else if kind == fs::FileType::RegularFile {
            file(
                shared,
                dir_text.trim_end_matches('/'),
                name,
                || meta.unwrap_or_else(|| stat_at(fd, name, false)),
                out,
            );
        }
    }
    if let Some(record) = record {
        record.files = files_before..out.files.len();
        record.skipped_by_name = out.skipped - skipped_before;
        record.recordable &= clean && out.failures.len() == failures_before;
    }
    subdirs
}

/// The stamps (and type and identity) of `name` in the open directory.
fn stat_at(dir: BorrowedFd<'_>, name: &CStr, follow: bool) -> io::Result<fs::Statx> {
    let flags = if follow {
        AtFlags::STATX_DONT_SYNC
    } else {
        AtFlags::SYMLINK_NOFOLLOW | AtFlags::STATX_DONT_SYNC
    };
    let mask = StatxFlags::TYPE | StatxFlags::SIZE | StatxFlags::MTIME | StatxFlags::CTIME | StatxFlags::INO;
    Ok(fs::statx(dir, name, flags, mask)?)
}

fn subdir(
    shared: &Shared<'_>,
    parent: &Dir,
    path: PathBuf,
    out: &mut Walked,
    meta: impl FnOnce() -> io::Result<fs::Statx>,
) -> Option<Dir> {
    if !shared.follow {
        return Some(Dir {
            path,
            ancestors: Vec::new(),
        });
    }
    let id = match meta() {
        Ok(m) => (device(&m), m.stx_ino),
        Err(e) => {
            unreadable(out, &path, &e);
            return None;
        }
    };
    if parent.ancestors.contains(&id) {
        tracing::warn!("skipping {}: symlink loop", path.display());
        return None;
    }
    let mut ancestors = parent.ancestors.clone();
    ancestors.push(id);
    Some(Dir { path, ancestors })
}

fn device(m: &fs::Statx) -> u64 {
    libc::makedev(m.stx_dev_major, m.stx_dev_minor)
}

/// A candidate file `name` of the folder at `dir_path` (as text, without
/// a trailing slash).
fn file(
    shared: &Shared<'_>,
    dir_path: &str,
    name: &CStr,
    meta: impl FnOnce() -> io::Result<fs::Statx>,
    out: &mut Walked,
) {
    let name = bytes_to_text(name.to_bytes());
    if !(shared.wanted)(&name) {
        out.skipped += 1;
        return;
    }
    // Built by hand: `format!` here was a measurable share of a re-scan.
    let mut path = String::with_capacity(dir_path.len() + 1 + name.len());
    path.push_str(dir_path);
    path.push('/');
    path.push_str(&name);
    match meta() {
        Ok(m) => {
            out.files.push((path, stamps_of(&m)));
            shared.found.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            if !is_gone(&e) {
                out.unreadable.push(path.clone());
            }
            out.failures.push((path, format!("cannot stat: {e}")));
        }
    }
}

/// Logs a folder or file that cannot be read and, unless it is simply gone
/// (removed while the walk went by), keeps what the store holds there.
fn unreadable(out: &mut Walked, path: &Path, e: &io::Error) {
    tracing::warn!("skipping {}: {e}", path.display());
    if !is_gone(e) {
        out.unreadable.push(path_to_text(path).into_owned());
    }
}

fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

fn stamps_of(m: &fs::Statx) -> Stamps {
    Stamps {
        size: m.stx_size,
        mtime_ns: nanos(m.stx_mtime),
        ctime_ns: nanos(m.stx_ctime),
    }
}

fn nanos(t: fs::StatxTimestamp) -> i64 {
    t.tv_sec * 1_000_000_000 + i64::from(t.tv_nsec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    fn names(w: &Walked, root: &Path) -> Vec<String> {
        let mut v: Vec<String> = w
            .files
            .iter()
            .map(|(p, _)| p.strip_prefix(&*root.to_string_lossy()).unwrap().to_string())
            .collect();
        v.sort();
        v
    }

    fn run(roots: &[PathBuf], follow: bool) -> Walked {
        let wanted = |name: &str| !name.ends_with(".txt");
        walk(roots, follow, WalkThreads::fixed(3), &wanted, &|_| {}, None)
    }

    #[test]
    fn finds_nested_files_with_stamps_and_skips_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["a/b/c", "a/d", "e"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in ["a/b/c/1.flac", "a/d/2.mp3", "e/3.ogg", "top.wav", "e/notes.txt"] {
            std::fs::write(root.join(f), f.as_bytes()).unwrap();
        }
        let w = run(std::slice::from_ref(&root), false);
        assert_eq!(
            names(&w, &root),
            ["/a/b/c/1.flac", "/a/d/2.mp3", "/e/3.ogg", "/top.wav"]
        );
        assert_eq!(w.skipped, 1);
        let (_, stamps) = w.files.iter().find(|(p, _)| p.ends_with("2.mp3")).unwrap();
        assert_eq!(stamps.size, "a/d/2.mp3".len() as u64);
        // Overlapping roots list each file once.
        let w = run(&[root.clone(), root.join("a")], false);
        assert_eq!(w.files.len(), 4);
    }

    #[test]
    fn a_walk_that_reads_from_the_disk_goes_on_on_more_threads() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for a in 0..8 {
            for b in 0..8 {
                let folder = root.join(format!("{a}/{b}"));
                std::fs::create_dir_all(&folder).unwrap();
                std::fs::write(folder.join("x.flac"), b"x").unwrap();
            }
        }
        fn cached() -> u64 {
            0
        }
        fn cold() -> u64 {
            static READ: AtomicU64 = AtomicU64::new(0);
            READ.fetch_add(DISK_BOUND, Ordering::Relaxed)
        }
        let roots = std::slice::from_ref(&root);
        let wanted = |_: &str| true;
        let walk_with =
            |threads, disk_reads| walk_counting(roots, false, threads, &wanted, &|_| {}, None, disk_reads);
        let growing = WalkThreads { start: 1, on_disk: 4 };
        let (warm, disk) = (walk_with(growing, cached), walk_with(growing, cold));
        assert_eq!((warm.threads, disk.threads), (1, 4));
        assert_eq!(names(&warm, &root), names(&disk, &root));
        assert_eq!(disk.files.len(), 64);
        // A walk told its threads keeps them.
        let w = walk_with(WalkThreads::fixed(2), cold);
        assert_eq!(w.threads, 2);
    }

    #[test]
    fn symlinks_are_followed_only_when_asked_and_loops_end() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("x.flac"), b"x").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/y.flac"), b"y").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("linked")).unwrap();
        std::os::unix::fs::symlink(&root, root.join("sub/loop")).unwrap();
        std::os::unix::fs::symlink(root.join("gone"), root.join("broken.flac")).unwrap();
        let not_followed = run(std::slice::from_ref(&root), false);
        assert_eq!(names(&not_followed, &root), ["/sub/y.flac"]);
        assert_eq!(not_followed.links_not_followed, 3);
        assert!(not_followed.a_link_not_followed.is_some_and(|l| l.is_symlink()));
        let followed = run(std::slice::from_ref(&root), true);
        assert_eq!(names(&followed, &root), ["/linked/x.flac", "/sub/y.flac"]);
    }

    #[test]
    fn names_that_are_not_utf8_are_found_by_their_text() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let folder = root.join(std::ffi::OsStr::from_bytes(b"Caf\xe9"));
        std::fs::create_dir(&folder).unwrap();
        let file = folder.join(std::ffi::OsStr::from_bytes(b"bad\xff.flac"));
        std::fs::write(&file, b"x").unwrap();
        let w = run(std::slice::from_ref(&root), false);
        assert!(w.failures.is_empty(), "{:?}", w.failures);
        assert_eq!(w.files.len(), 1);
        assert_eq!(text_to_path(&w.files[0].0), file);
    }
}
