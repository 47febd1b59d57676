//! Follows the store while mounted: inotify on the database and its WAL
//! wakes the watcher the moment a writer touches them, `PRAGMA
//! data_version` tells whether a transaction was committed, and a slow poll
//! covers file systems where inotify says nothing (network mounts).

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use inotify::{Inotify, WatchMask};
use retagfs_store::Store;

use crate::library::{Library, Refresh};

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
        lib: Arc<Library>,
        db: &Path,
        on_refresh: impl Fn(&Refresh) + Send + 'static,
    ) -> anyhow::Result<Watcher> {
        let store = Store::open_read_only(db)?;
        let inotify = watch_db_files(db)
            .inspect_err(|e| tracing::warn!("inotify unavailable ({e}); polling the store every {POLL:?}"))
            .ok();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("retagfs-watch".into())
            .spawn(move || run(&lib, &store, inotify, &flag, &on_refresh))?;
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
/// checkpoints into the main file) in place, and may recreate the WAL.
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
    let name = db.file_name().unwrap_or_default().to_os_string();
    let mut wal = name.clone();
    wal.push("-wal");
    Ok((inotify, vec![PathBuf::from(name), PathBuf::from(wal)]))
}

fn run(
    lib: &Library,
    store: &Store,
    mut inotify: Option<(Inotify, Vec<PathBuf>)>,
    stop: &AtomicBool,
    on_refresh: &dyn Fn(&Refresh),
) {
    let mut buf = [0u8; 4096];
    let mut version = store.data_version().unwrap_or(0);
    while !stop.load(Ordering::Relaxed) {
        if let Some((ino, names)) = inotify.as_mut() {
            wait_for_db_event(ino, names, &mut buf);
        } else {
            std::thread::sleep(POLL);
        }
        // A write that is not committed yet leaves data_version alone.
        match store.data_version() {
            Ok(v) if v == version => continue,
            Ok(v) => version = v,
            Err(e) => {
                tracing::warn!("checking the store for changes: {e}");
                continue;
            }
        }
        let started = Instant::now();
        match lib.refresh() {
            Ok(r) if r.tracks > 0 => {
                tracing::info!(
                    "refresh: {} track(s) changed{} in {:.2} ms",
                    r.tracks,
                    if r.rebuilt {
                        " (change log truncated: full rebuild)"
                    } else {
                        ""
                    },
                    started.elapsed().as_secs_f64() * 1000.0
                );
                on_refresh(&r);
            }
            Ok(_) => {}
            Err(e) => tracing::error!("refresh failed: {e:#}"),
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
