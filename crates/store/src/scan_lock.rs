//! The scan lock: one scan of a store at a time.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Result, StoreError};

/// A store's scan lock (an exclusive `flock` on `<db>-scan.lock`), held
/// until dropped and let go by the kernel if the process dies. Scans of
/// one store run one after the other: two at once could each record what
/// it saw of a file the other one wrote last. A mount that finds its store
/// replaced by one a scan is still writing keeps serving the old one until
/// the lock is let go.
pub struct ScanLock {
    _file: std::fs::File,
}

impl ScanLock {
    /// The lock file of the store at `db`.
    pub fn path(db: &Path) -> PathBuf {
        beside(db, "-scan.lock")
    }

    /// Takes the lock of the store at `db`, waiting while another scan
    /// holds it (`waiting` is called first if it must wait).
    pub fn acquire(db: &Path, waiting: impl FnOnce()) -> Result<ScanLock> {
        let (file, lock_err) = lock_file(db)?;
        // A mount looking whether a scan runs ([`ScanLock::held`]) holds
        // the lock for an instant: not worth a message.
        for _ in 0..LOCK_TRIES {
            match file.try_lock() {
                Ok(()) => return Ok(ScanLock { _file: file }),
                Err(std::fs::TryLockError::WouldBlock) => std::thread::sleep(LOCK_RETRY),
                Err(std::fs::TryLockError::Error(e)) => return Err(lock_err(e)),
            }
        }
        waiting();
        file.lock().map_err(lock_err)?;
        Ok(ScanLock { _file: file })
    }

    /// Takes the lock of the store at `db`, waiting at most `patience`
    /// while another scan holds it: None when it still does then.
    pub fn acquire_within(db: &Path, patience: Duration) -> Result<Option<ScanLock>> {
        let (file, lock_err) = lock_file(db)?;
        let give_up = std::time::Instant::now() + patience;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Some(ScanLock { _file: file })),
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < give_up => {
                    std::thread::sleep(LOCK_RETRY)
                }
                Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
                Err(std::fs::TryLockError::Error(e)) => return Err(lock_err(e)),
            }
        }
    }

    /// Whether a scan of the store at `db` holds its lock now (false when
    /// no scan ever made the lock file). Takes the lock shared for an
    /// instant, and never creates the file.
    pub fn held(db: &Path) -> std::io::Result<bool> {
        let file = match std::fs::File::open(Self::path(db)) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(false),
            Err(std::fs::TryLockError::WouldBlock) => Ok(true),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

/// The lock file of the store at `db`, open (made if missing), and how to
/// say a failure to lock it.
fn lock_file(db: &Path) -> Result<(std::fs::File, impl Fn(std::io::Error) -> StoreError)> {
    let path = ScanLock::path(db);
    let lock_err = move |source| StoreError::Lock {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(ScanLock::path(db))
        .map_err(&lock_err)?;
    Ok((file, lock_err))
}

/// The path of a file SQLite or a scan keeps beside the store at `db`
/// (`suffix` is `-wal`, `-shm`, `-journal` or `-scan.lock`).
pub fn beside(db: &Path, suffix: &str) -> PathBuf {
    let mut path = db.as_os_str().to_os_string();
    path.push(suffix);
    PathBuf::from(path)
}

/// Removes the `-wal`, `-shm` and `-journal` at the path of a store that
/// is not there ([`Store::open_for_scan`]).
pub(crate) fn remove_orphaned_companions(db: &Path) -> Result<()> {
    for suffix in ["-wal", "-shm", "-journal"] {
        let path = beside(db, suffix);
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::warn!(
                "removed {}: it belonged to a store that is gone, and SQLite would read the new store through it",
                path.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(StoreError::Orphaned {
                    path: path.display().to_string(),
                    source,
                })
            }
        }
    }
    Ok(())
}

/// How often [`ScanLock::acquire`] tries before it says it waits, and how
/// long it sleeps between tries.
const LOCK_TRIES: u32 = 5;
const LOCK_RETRY: Duration = Duration::from_millis(5);
