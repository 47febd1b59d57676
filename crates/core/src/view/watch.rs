//! Follows the store while mounted: inotify on the database and its WAL
//! wakes the watcher the moment a writer touches them, `PRAGMA
//! data_version` tells whether a transaction was committed, and a slow poll
//! covers file systems where inotify says nothing (network mounts). A store
//! replaced at its path (rebuilt elsewhere and moved into place, or removed
//! and scanned anew) is loaded anew, once the scan writing it (if any) has
//! ended: until then the old one is served.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use inotify::{Inotify, WatchMask};
use retagfs_store::{beside, ScanLock, Store};

use crate::view::tree::Invalidations;
use crate::view::{file_id, FileId, Refresh, View};

/// How long the watcher sleeps when nothing wakes it.
const POLL: Duration = Duration::from_secs(1);

/// The watcher thread; dropping the handle does not stop it, `stop` does.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    _thread: JoinHandle<()>,
}

impl Watcher {
    /// Starts watching `db`; `on_refresh` runs after every refresh that
    /// changed something (it tells the kernel what to forget).
    pub fn spawn(
        lib: Arc<View>,
        db: &Path,
        on_refresh: impl Fn(&Refresh) + Send + 'static,
    ) -> anyhow::Result<Watcher> {
        let db_path = db.to_path_buf();
        let inotify = watch_db_files(db)
            .inspect_err(|e| tracing::warn!("inotify unavailable ({e}); polling the store every {POLL:?}"))
            .ok();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("retagfs-watch".into())
            .spawn(move || run(&lib, &db_path, inotify, &flag, &on_refresh))?;
        Ok(Watcher {
            stop,
            _thread: thread,
        })
    }

    /// Asks the thread to end; it does within one poll interval, without
    /// making the caller (an unmount) wait for it.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Watches the directory holding the database: SQLite writes the WAL (and
/// checkpoints into the main file) in place, and may recreate the WAL. The
/// scan lock's file is closed when a scan ends.
fn watch_db_files(db: &Path) -> std::io::Result<(Inotify, Vec<PathBuf>)> {
    let inotify = Inotify::init()?;
    let dir = db
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    inotify.watches().add(
        dir,
        WatchMask::MODIFY | WatchMask::CLOSE_WRITE | WatchMask::CREATE | WatchMask::MOVED_TO,
    )?;
    let name = Path::new(db.file_name().unwrap_or_default());
    let names = vec![name.to_path_buf(), beside(name, "-wal"), ScanLock::path(name)];
    Ok((inotify, names))
}

fn run(
    lib: &View,
    db: &Path,
    mut inotify: Option<(Inotify, Vec<PathBuf>)>,
    stop: &AtomicBool,
    on_refresh: &dyn Fn(&Refresh),
) {
    let mut buf = [0u8; 4096];
    // The file the library loaded, as it was named before it was opened: a
    // store replaced since is then loaded below like any other.
    let Some(loaded) = lib.served_file() else {
        tracing::error!(
            "the store {} was gone as it was loaded: not following it",
            db.display()
        );
        return;
    };
    let mut served = StoreFile::at(db, loaded);
    let mut watching: Option<Watching> = None;
    let mut open_failed = false;
    while !stop.load(Ordering::Relaxed) {
        match served.check(db) {
            StoreChange::None => {}
            StoreChange::Removed => {
                wait(&mut inotify, &mut buf);
                continue;
            }
            StoreChange::Replaced(identity) => {
                if served.scan_running(db, identity) {
                    wait(&mut inotify, &mut buf);
                    continue;
                }
                // Closed before the new file is opened: SQLite shares what
                // a connection knows of a file's -wal and -shm with every
                // later connection to the same file in this process.
                watching = None;
                if !served.load(lib, db, identity, on_refresh) {
                    wait(&mut inotify, &mut buf);
                    continue;
                }
            }
        }
        match watching.as_mut() {
            Some(w) => {
                if w.committed_since() {
                    refresh(lib, on_refresh);
                }
            }
            None => {
                watching = Watching::open(db, &mut open_failed);
                // What was committed before the connection read its first
                // version (since the library loaded the store) is caught
                // up once: no later version change would show it.
                refresh(lib, on_refresh);
            }
        }
        wait(&mut inotify, &mut buf);
    }
}

/// The watcher's connection to the served store and the data version it
/// last read (which changes with every commit by another connection).
struct Watching {
    store: Store,
    version: i64,
}

impl Watching {
    /// `failed` says whether the last try failed (a failure is logged
    /// once until a try succeeds).
    fn open(db: &Path, failed: &mut bool) -> Option<Watching> {
        let opened = Store::open_read_only(db).and_then(|store| {
            let version = store.data_version()?;
            Ok(Watching { store, version })
        });
        if let Err(e) = &opened {
            if !std::mem::replace(failed, true) {
                tracing::warn!(
                    "watching the store {}: {e}; refreshing at every wake until it opens",
                    db.display()
                );
            }
        } else {
            *failed = false;
        }
        opened.ok()
    }

    /// Whether a transaction was committed since the last look (a write
    /// that is not committed yet leaves the version alone).
    fn committed_since(&mut self) -> bool {
        match self.store.data_version() {
            Ok(v) => v != std::mem::replace(&mut self.version, v),
            Err(e) => {
                tracing::warn!("checking the store for changes: {e}");
                false
            }
        }
    }
}

/// Blocks until the store is written (or the poll interval passes).
fn wait(inotify: &mut Option<(Inotify, Vec<PathBuf>)>, buf: &mut [u8]) {
    match inotify.as_mut() {
        Some((ino, names)) => wait_for_db_event(ino, names, buf),
        None => std::thread::sleep(POLL),
    }
}

/// Brings the library up to date with what the store committed.
fn refresh(lib: &View, on_refresh: &dyn Fn(&Refresh)) {
    let started = Instant::now();
    match lib.refresh() {
        Ok(r) if r.tracks > 0 => {
            let took = started.elapsed();
            retagfs_metrics::count(|m| {
                m.refreshes.inc();
                m.refresh_seconds.observe(took.as_secs_f64());
            });
            // Logged once the kernel has been told: what reads the log may
            // then read the view and find the change.
            on_refresh(&r);
            tracing::info!(
                "refresh: {} track(s) changed{} in {:.2} ms",
                r.tracks,
                if r.rebuilt {
                    " (change log truncated: full rebuild)"
                } else {
                    ""
                },
                took.as_secs_f64() * 1000.0
            );
            remake_playlists(lib, &r, on_refresh);
        }
        Ok(_) => {}
        Err(e) => tracing::error!("refresh failed: {e:#}"),
    }
    lib.note_metrics();
}

/// Makes again the playlists a refresh touched, after its tracks are
/// served (a playlist runs its query, which a retag need not wait for),
/// and tells the kernel which changed.
fn remake_playlists(lib: &View, refresh: &Refresh, on_refresh: &dyn Fn(&Refresh)) {
    let inodes = lib.remake_playlists(refresh);
    if !inodes.is_empty() {
        on_refresh(&Refresh {
            invalidations: Invalidations {
                entries: Vec::new(),
                inodes,
            },
            ..Refresh::default()
        });
    }
}

/// Which file the store's path names, to notice it being replaced: the
/// connections would otherwise keep the old file open, and its WAL with
/// it, and follow it forever.
struct StoreFile {
    /// The file the library's connections are to.
    served: FileId,
    /// Whether the path named another file (or none) at the last look.
    away: bool,
    /// The `-wal` and `-shm` files beside the served file, as last seen
    /// while the path named it: the connections keep them open (SQLite
    /// deletes them only when the last connection that can write closes).
    companions: Vec<(PathBuf, Option<FileId>)>,
    /// A new file that could not be loaded as a store yet: said once,
    /// tried again at every wake.
    refused: Option<FileId>,
    /// A new file that a scan is still writing: said once.
    scanning: Option<FileId>,
}

enum StoreChange {
    None,
    /// Nothing at the path (said once): what the served file holds is
    /// still served.
    Removed,
    /// Another file at the path.
    Replaced(FileId),
}

impl StoreFile {
    fn at(db: &Path, served: FileId) -> StoreFile {
        StoreFile {
            served,
            away: false,
            companions: Self::companions(db),
            refused: None,
            scanning: None,
        }
    }

    fn companions(db: &Path) -> Vec<(PathBuf, Option<FileId>)> {
        ["-wal", "-shm"]
            .into_iter()
            .map(|suffix| {
                let path = beside(db, suffix);
                let id = file_id(&path);
                (path, id)
            })
            .collect()
    }

    fn check(&mut self, db: &Path) -> StoreChange {
        match file_id(db) {
            Some(now) if now == self.served => {
                if std::mem::take(&mut self.away) {
                    tracing::warn!("the store {} is back", db.display());
                }
                // A writer may have made them since the last look.
                self.companions = Self::companions(db);
                StoreChange::None
            }
            None => {
                if !std::mem::replace(&mut self.away, true) {
                    tracing::warn!(
                        "the store {} was removed: serving what it held until a store appears at that path",
                        db.display()
                    );
                }
                StoreChange::Removed
            }
            Some(other) => {
                self.away = true;
                StoreChange::Replaced(other)
            }
        }
    }

    /// Removes the served file's `-wal` and `-shm` still at their paths
    /// once another file took its place: SQLite pairs these files with a
    /// database by name, so the new store would be read (and, by a writer,
    /// checkpointed) through the old one's WAL. They are the very files
    /// this mount's connections hold, no use to the new store.
    fn remove_stale_companions(&mut self) {
        for (path, old) in &mut self.companions {
            if old.is_some() && file_id(path) == *old {
                match std::fs::remove_file(&*path) {
                    Ok(()) => tracing::warn!(
                        "removed {}: it belonged to the store that was replaced, and SQLite would have read the new one through it",
                        path.display()
                    ),
                    Err(e) => tracing::error!(
                        "{} belongs to the store that was replaced, and cannot be removed: {e}",
                        path.display()
                    ),
                }
            }
            *old = None;
        }
    }

    /// Whether a scan holds the lock of the store at `db`, which is file
    /// `id` (a store removed and scanned anew): the old store is served
    /// until the scan ends, rather than the new one growing with it.
    fn scan_running(&mut self, db: &Path, id: FileId) -> bool {
        let held = ScanLock::held(db);
        let first_look = self.scanning != Some(id);
        match &held {
            Ok(true) if first_look => tracing::warn!(
                "the store {} was replaced by one a scan is writing: serving the old one until the scan ends",
                db.display()
            ),
            Err(e) if first_look => tracing::warn!(
                "the store {} was replaced; whether a scan is still writing it is unknown ({e}): loading it",
                db.display()
            ),
            _ => {}
        }
        self.scanning = Some(id);
        held.unwrap_or(false)
    }

    /// Serves the store now at `db` (file `id`); false when it cannot be
    /// loaded yet (the old one is still served then).
    fn load(&mut self, lib: &View, db: &Path, id: FileId, on_refresh: &dyn Fn(&Refresh)) -> bool {
        let started = Instant::now();
        self.remove_stale_companions();
        match lib.reload() {
            Ok(r) => {
                let took = started.elapsed();
                // After the kernel is told, as for a refresh.
                on_refresh(&r);
                tracing::warn!(
                    "the store {} was replaced: loaded the new one ({} tracks) in {:.1} ms",
                    db.display(),
                    r.tracks,
                    took.as_secs_f64() * 1000.0
                );
                *self = StoreFile::at(db, id);
                remake_playlists(lib, &r, on_refresh);
                lib.note_metrics();
                true
            }
            Err(e) => {
                if self.refused != Some(id) {
                    tracing::warn!(
                        "the store {} was replaced by a file that is not (yet) a store: {e:#}; trying again",
                        db.display()
                    );
                    self.refused = Some(id);
                }
                false
            }
        }
    }
}

/// Blocks until the database or its WAL is written, or the poll interval
/// passes.
fn wait_for_db_event(inotify: &mut Inotify, names: &[PathBuf], buf: &mut [u8]) {
    let deadline = Instant::now() + POLL;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let mut fds = libc::pollfd {
            fd: inotify.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut fds, 1, left.as_millis().max(1) as i32) };
        if n <= 0 {
            return;
        }
        match inotify.read_events(buf) {
            Ok(events) => {
                let ours = events
                    .filter_map(|e| e.name)
                    .any(|n| names.iter().any(|want| want.as_os_str() == n));
                if ours {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}
