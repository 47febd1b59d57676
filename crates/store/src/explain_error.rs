//! A line that explains a store error SQLite words poorly.

use std::path::Path;

use crate::error::StoreError;

/// Free space under which a failing store is said to be out of room.
const LOW_ROOM: u64 = 64 << 20;

/// A line for the user when `error` comes from SQLite failing for a reason
/// it words poorly: a store whose file system is full (a `-shm` file it
/// cannot grow is a plain "disk I/O error", even to a reader, which reads
/// like a failing disk), or whose folder cannot be written (a reader of a
/// WAL database must create `-shm` and `-wal` beside it: "unable to open
/// database file").
pub fn explain_store_error(error: &(dyn std::error::Error + 'static), db: &Path) -> Option<String> {
    let code = std::iter::successors(Some(error), |e| e.source()).find_map(|e| {
        let sql = match e.downcast_ref::<StoreError>() {
            Some(StoreError::Sql(e)) => Some(e),
            _ => e.downcast_ref::<rusqlite::Error>(),
        };
        sql.and_then(|e| e.sqlite_error_code())
    })?;
    let dir = db
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let fs = FileSystem::of(dir)?;
    use rusqlite::ErrorCode::{CannotOpen, DiskFull, ReadOnly, SystemIoFailure};
    match code {
        CannotOpen | ReadOnly if fs.read_only || !fs.writable => Some(format!(
            "the folder holding {} cannot be written{}: SQLite must create the store's -wal and -shm \
             files beside it, even to read it; make the folder writable for this user, or copy the store \
             to one that is",
            db.display(),
            if fs.read_only {
                " (a read-only file system)"
            } else {
                ""
            }
        )),
        DiskFull | SystemIoFailure if fs.free < LOW_ROOM => Some(format!(
            "the file system holding {} has {} KiB free: SQLite needs room beside the store \
             (its -wal and -shm files) even to read it; free some space and try again",
            db.display(),
            fs.free / 1024
        )),
        _ => None,
    }
}

/// What [`explain_store_error`] needs to know of the file system of a folder.
struct FileSystem {
    /// Bytes an unprivileged writer may still use.
    free: u64,
    read_only: bool,
    /// Whether this process may create files in the folder.
    writable: bool,
}

impl FileSystem {
    fn of(dir: &Path) -> Option<FileSystem> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: a valid NUL-terminated path and a zeroed statvfs to fill.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
            return None;
        }
        // SAFETY: a valid NUL-terminated path.
        let writable = unsafe { libc::access(path.as_ptr(), libc::W_OK) } == 0;
        Some(FileSystem {
            free: st.f_bavail as u64 * st.f_frsize as u64,
            read_only: st.f_flag & libc::ST_RDONLY != 0,
            writable,
        })
    }
}
