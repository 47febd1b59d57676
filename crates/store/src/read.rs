//! Opening, migrating and querying the store.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rusqlite::types::{Value, ValueRef};
use rusqlite::{params, params_from_iter, Connection, OpenFlags, OptionalExtension, Transaction};
use sha2::{Digest, Sha256};

use crate::change_times::EditedTracks;
use crate::model::{
    ArtLink, BackingPart, Fingerprint, Format, NewArt, PartKind, ScannedTrack, Stamps, SynthesisRows,
    TrackBundle, TrackRow,
};
use crate::path_table::{KnownStamps, PathTable};
use crate::scanned_dirs::{DirStamp, ScannedDir, ScannedDirs};

/// Schema version this binary writes, kept in `PRAGMA user_version`.
pub const SCHEMA_VERSION: i64 = 9;

/// The current schema: what a new store is made from.
const SCHEMA: &str = include_str!("schema.sql");

/// Migrations, index i upgrades a store from version i to i + 1 (the first
/// made version 1 from nothing; a new store is made from [`SCHEMA`]).
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/001_first_schema.sql"),
    include_str!("migrations/002_synthesis_structure.sql"),
    include_str!("migrations/003_scanned_folders.sql"),
    include_str!("migrations/004_scanned_tags_hash.sql"),
    include_str!("migrations/005_blake3_fingerprints.sql"),
    include_str!("migrations/006_new_tracks_log_once.sql"),
    include_str!("migrations/007_art_meta_index.sql"),
    include_str!("migrations/008_rowid_tags_and_flac_blocks.sql"),
    include_str!("migrations/009_change_times_and_vendor.sql"),
];

/// `passthrough` of tracks that schema version 2 found without the
/// structure it needs (written by `migrations/002_synthesis_structure.sql`).
const REPROBE: &str = "scanned before retagfs synthesized this format: run `retagfs scan` again";

/// How long a writer waits for another writer before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Statement journals are kept in memory whatever their size
/// ([`configure_sqlite`]; SQLite's "-1").
const STATEMENT_JOURNAL_ALWAYS_IN_MEMORY: std::os::raw::c_int = -1;

/// Process-wide SQLite settings; false if SQLite refused them (it was in
/// use already), which costs only speed.
///
/// A write statement inside a transaction keeps a statement journal (the
/// pages it changed, to undo it alone if it fails); the change-log
/// triggers make every write statement need one. SQLite moves a journal
/// of more than 64 KiB to a temporary file, and every later statement of
/// that transaction then journals through the file: a first scan of
/// 20,000 tracks, some with 76 kB of lyrics, wrote 1.8 GB to `/var/tmp`
/// that way. Kept in memory, that scan took a quarter less time. Always
/// in memory, not up to a size: with a limit of 512 KiB or more, the
/// bundled SQLite (3.54) failed every statement whose journal grew past
/// it with "database or disk is full" (a migration rebuilding a large
/// table did; a test below writes such a statement). A journal holds the
/// pages one statement changes, which retagfs keeps few.
///
/// SQLite also counts the memory it allocates, under a process-wide lock
/// taken at every allocation and free; nothing here reads the count.
///
/// # Safety
///
/// No SQLite function may run on another thread meanwhile (SQLite's
/// configuration is not thread-safe): call it first thing in `main`.
pub unsafe fn configure_sqlite() -> bool {
    use rusqlite::ffi;
    // SAFETY: the caller guarantees that no other thread uses SQLite; each
    // option takes one int, as passed.
    let settings = unsafe {
        [
            ffi::sqlite3_config(
                ffi::SQLITE_CONFIG_STMTJRNL_SPILL,
                STATEMENT_JOURNAL_ALWAYS_IN_MEMORY,
            ),
            ffi::sqlite3_config(ffi::SQLITE_CONFIG_MEMSTATUS, 0 as std::os::raw::c_int),
        ]
    };
    settings.iter().all(|&rc| rc == ffi::SQLITE_OK)
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Open { path: String, source: rusqlite::Error },
    #[error(
        "{path}: the store has schema version {found}, newer than this retagfs understands \
         ({SCHEMA_VERSION}); upgrade retagfs or use the binary that wrote it"
    )]
    TooNew { path: String, found: i64 },
    #[error("{path} is not a retagfs store (run `retagfs scan` to create one)")]
    NotAStore { path: String },
    #[error(
        "no track matches {0:?} (give a track id, the backing file's path or the file in a mounted view)"
    )]
    NoSuchTrack(String),
    #[error("no art with sha256 {0}")]
    NoSuchArt(String),
    #[error("track {track_id} links art {sha256} that the art table does not have")]
    MissingArt { track_id: i64, sha256: String },
    #[error("{path}: {source}")]
    Lock { path: String, source: std::io::Error },
    #[error(
        "{path} belongs to a store that is gone, and SQLite would read the new store through it, \
         but it cannot be removed ({source}): remove it, then scan again"
    )]
    Orphaned { path: String, source: std::io::Error },
    #[error(
        "the store holds a track with the largest id there is (9223372036854775807), so new \
         tracks cannot be numbered: give that track a smaller id"
    )]
    IdsUsedUp,
    /// SQLite's own error, said once: rusqlite's source (the code's text)
    /// repeats it in an error's chain.
    #[error("{0}")]
    Sql(rusqlite::Error),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError::Sql(e)
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// A connection to a store.
pub struct Store {
    conn: Connection,
    /// The schema version the store had when this connection opened it:
    /// what its queries are written for ([`Store::schema_version_now`]
    /// tells whether another process migrated it since).
    opened_version: i64,
    /// Held by a store opened for a scan ([`Store::open_for_scan`]).
    /// Declared after the connection so that it is let go after the
    /// connection closed: a mount waiting for the scan to end then finds
    /// the store whole.
    scan_lock: Option<ScanLock>,
}

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
        let path = Self::path(db);
        let lock_err = |source| StoreError::Lock {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(lock_err)?;
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

/// The path of a file SQLite or a scan keeps beside the store at `db`
/// (`suffix` is `-wal`, `-shm`, `-journal` or `-scan.lock`).
pub fn beside(db: &Path, suffix: &str) -> PathBuf {
    let mut path = db.as_os_str().to_os_string();
    path.push(suffix);
    PathBuf::from(path)
}

/// Removes the `-wal`, `-shm` and `-journal` at the path of a store that
/// is not there ([`Store::open_for_scan`]).
fn remove_orphaned_companions(db: &Path) -> Result<()> {
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

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Free space under which a failing store is said to be out of room.
const LOW_ROOM: u64 = 64 << 20;

/// A line for the user when `error` comes from SQLite failing for a reason
/// it words poorly: a store whose file system is full (a `-shm` file it
/// cannot grow is a plain "disk I/O error", even to a reader, which reads
/// like a failing disk), or whose folder cannot be written (a reader of a
/// WAL database must create `-shm` and `-wal` beside it: "unable to open
/// database file").
pub fn storage_hint(error: &(dyn std::error::Error + 'static), db: &Path) -> Option<String> {
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

/// What [`storage_hint`] needs to know of the file system of a folder.
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

/// Backing paths to values, hashed fast: a re-scan looks up every file of
/// the library in one (paths come from the user's own disk, not from an
/// adversary choosing hash collisions).
pub type PathMap<V> = HashMap<String, V, foldhash::fast::RandomState>;

impl Store {
    /// Opens (creating if needed) a store for reading and writing and brings
    /// its schema up to date.
    pub fn open(path: &Path) -> Result<Store> {
        let open_err = |source| StoreError::Open {
            path: path.display().to_string(),
            source,
        };
        let conn = Connection::open(path).map_err(open_err)?;
        let mut store = Store {
            conn,
            opened_version: SCHEMA_VERSION,
            scan_lock: None,
        };
        store.configure().map_err(open_err)?;
        store.migrate(path)?;
        store.opened_version = store.schema_version_now()?;
        Ok(store)
    }

    /// Opens (creating if needed) a store for a scan: takes its scan lock
    /// first ([`ScanLock::acquire`]; `waiting` is called if another scan
    /// holds it), so that a mount finding the store replaced by this one
    /// waits for the scan to end. The lock is held until the store is
    /// dropped.
    ///
    /// A store made anew does not inherit the `-wal`, `-shm` or `-journal`
    /// of a store that was at its path (removed while a mount or another
    /// program had it open): SQLite pairs those with any database of that
    /// name, and would read the new store through them ("disk I/O error").
    pub fn open_for_scan(path: &Path, waiting: impl FnOnce()) -> Result<Store> {
        let lock = ScanLock::acquire(path, waiting)?;
        if matches!(std::fs::symlink_metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
            remove_orphaned_companions(path)?;
        }
        let mut store = Store::open(path)?;
        store.scan_lock = Some(lock);
        Ok(store)
    }

    /// Opens an existing store read-only (the mount's connections).
    pub fn open_read_only(path: &Path) -> Result<Store> {
        let open_err = |source| StoreError::Open {
            path: path.display().to_string(),
            source,
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        // A mount holds one reader per serving thread: keep each one's page
        // cache small (the kernel caches the database file anyway).
        conn.pragma_update(None, "cache_size", -512).map_err(open_err)?;
        let mut store = Store {
            conn,
            opened_version: 0,
            scan_lock: None,
        };
        store.opened_version = store.check_version(path)?;
        Ok(store)
    }

    fn configure(&self) -> rusqlite::Result<()> {
        self.conn.busy_timeout(BUSY_TIMEOUT)?;
        self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        self.use_wal()?;
        self.conn.pragma_update(None, "foreign_keys", "ON")?;
        // Room for the tag inserts of every row count besides the rest.
        self.conn
            .set_prepared_statement_cache_capacity(16 + TAG_ROWS_PER_INSERT);
        Ok(())
    }

    /// Switches the database to WAL mode (kept in the file: only its first
    /// opener changes anything). Two processes opening a new store at once
    /// get SQLITE_BUSY here without SQLite waiting on the busy timeout, so
    /// wait here instead.
    fn use_wal(&self) -> rusqlite::Result<()> {
        let deadline = Instant::now() + BUSY_TIMEOUT;
        loop {
            match self.conn.pragma_update(None, "journal_mode", "WAL") {
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.code == rusqlite::ErrorCode::DatabaseBusy && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                other => return other,
            }
        }
    }

    /// The schema version and whether the file holds any table, read in
    /// one statement: one snapshot of the file. (Read apart, another opener
    /// could commit the first migration between them, and a new store
    /// would look like someone else's database: version 0 with tables.)
    fn version_and_tables(&self) -> rusqlite::Result<(i64, bool)> {
        self.conn.query_row(
            "SELECT (SELECT user_version FROM pragma_user_version), \
                    (SELECT count(*) FROM sqlite_master) > 0",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    fn check_version(&self, path: &Path) -> Result<i64> {
        let (version, has_tables) = self.version_and_tables().map_err(|source| match source {
            rusqlite::Error::SqliteFailure(e, _) if e.code == rusqlite::ErrorCode::NotADatabase => {
                StoreError::NotAStore {
                    path: path.display().to_string(),
                }
            }
            source => StoreError::Open {
                path: path.display().to_string(),
                source,
            },
        })?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: path.display().to_string(),
                found: version,
            });
        }
        if version == 0 && has_tables {
            return Err(StoreError::NotAStore {
                path: path.display().to_string(),
            });
        }
        Ok(version)
    }

    /// Brings the schema up to date. Foreign keys are off meanwhile, as
    /// SQLite's own procedure for rebuilding a table has it
    /// (<https://sqlite.org/lang_altertable.html>): with them on, dropping
    /// the old table first deletes its rows one by one. Each migration
    /// keeps the keys valid on its own.
    fn migrate(&self, path: &Path) -> Result<()> {
        self.conn.pragma_update(None, "foreign_keys", "OFF")?;
        let migrated = self.migrate_steps(path);
        self.conn.pragma_update(None, "foreign_keys", "ON")?;
        migrated
    }

    fn migrate_steps(&self, path: &Path) -> Result<()> {
        let mut version = self.check_version(path)?;
        while version < SCHEMA_VERSION {
            // The write lock up front (a deferred transaction would fail at
            // once against another opener migrating the same new store),
            // then the version again: that opener may have done it.
            let tx = Transaction::new_unchecked(&self.conn, rusqlite::TransactionBehavior::Immediate)?;
            version = self.check_version(path)?;
            if version >= SCHEMA_VERSION {
                break;
            }
            if version == 0 {
                tx.execute_batch(SCHEMA)?;
                version = SCHEMA_VERSION;
            } else {
                tx.execute_batch(MIGRATIONS[version as usize])?;
                version += 1;
            }
            tx.pragma_update(None, "user_version", version)?;
            tx.commit()?;
        }
        Ok(())
    }

    /// Reads the database through a memory map (on) or `pread` (off, the
    /// default). Mapped reads skip a system call and a copy per page, but
    /// every page touched counts in the process's resident memory: a scan
    /// maps while it loads what the last scan left, not while it writes.
    pub fn read_mapped(&self, on: bool) -> Result<()> {
        let size: i64 = if on { 1 << 30 } else { 0 };
        self.conn.pragma_update(None, "mmap_size", size)?;
        Ok(())
    }

    /// Takes the store's scan lock ([`ScanLock::acquire`]); None for an
    /// in-memory store, which has none, and for a store opened for a scan,
    /// which holds it already.
    pub fn lock_for_scan(&self, waiting: impl FnOnce()) -> Result<Option<ScanLock>> {
        if self.scan_lock.is_some() {
            return Ok(None);
        }
        match self.conn.path().filter(|p| !p.is_empty()) {
            Some(db) => ScanLock::acquire(Path::new(db), waiting).map(Some),
            None => Ok(None),
        }
    }

    /// The schema version the store had when it was opened (after
    /// migrating it, for a store opened to write).
    pub fn schema_version(&self) -> i64 {
        self.opened_version
    }

    /// The schema version the store has now: another process (a newer
    /// retagfs's scan) may have migrated it since it was opened.
    pub fn schema_version_now(&self) -> Result<i64> {
        Ok(self.conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
    }

    /// The columns [`track_from_row`] reads, as this store has them: a
    /// store mounted as it is, from before version 9, has no change times.
    fn track_columns(&self) -> &'static str {
        if self.opened_version >= 9 {
            TRACK_COLUMNS
        } else {
            TRACK_COLUMNS_BEFORE_V9
        }
    }

    /// Raw connection, for callers that need a transaction of their own.
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Starts a write transaction that takes the write lock at once, so a
    /// concurrent writer waits on the busy timeout instead of failing later.
    /// Its foreign keys are checked at commit: the scanner writes a new
    /// track's rows before the track ([`write_scanned`]). (Setting the
    /// pragma makes SQLite prepare the connection's statements again at
    /// their next use, once per transaction.)
    pub fn write(&mut self) -> Result<Transaction<'_>> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute_batch("PRAGMA defer_foreign_keys = ON")?;
        Ok(tx)
    }

    // ---- reads -------------------------------------------------------

    /// Whether the store holds any track: a look at the first row, where
    /// `track_count` reads every page of the table (a mount of 100,000
    /// tracks from a cold disk made 2,000 scattered reads to count them).
    pub fn has_tracks(&self) -> Result<bool> {
        Ok(self
            .conn
            .query_row("SELECT EXISTS (SELECT 1 FROM tracks)", [], |r| r.get(0))?)
    }

    pub fn track_count(&self) -> Result<u64> {
        let n: i64 = self
            .conn
            .query_row("SELECT count(*) FROM tracks", [], |r| r.get(0))?;
        Ok(n as u64)
    }

    /// The newest change-log sequence number (0 for an empty log).
    pub fn last_change_seq(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("SELECT coalesce(max(seq), 0) FROM changes", [], |r| r.get(0))?)
    }

    /// The oldest change-log entry still kept, if any.
    pub fn first_change_seq(&self) -> Result<Option<i64>> {
        Ok(self
            .conn
            .query_row("SELECT min(seq) FROM changes", [], |r| r.get(0))?)
    }

    /// The tracks named by change-log entries after `seq`.
    pub fn tracks_changed_since(&self, seq: i64) -> Result<Vec<i64>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT DISTINCT track_id FROM changes WHERE seq > ?1")?;
        let rows = stmt.query_map([seq], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// SQLite's `data_version`: changes when another connection commits.
    pub fn data_version(&self) -> Result<i64> {
        Ok(self.conn.pragma_query_value(None, "data_version", |r| r.get(0))?)
    }

    /// Runs `f` inside one read transaction, so everything it reads comes
    /// from the same committed state.
    pub fn read_snapshot<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        let snapshot = ReadTransaction::begin(&self.conn)?;
        let out = f(self)?;
        snapshot.end()?;
        Ok(out)
    }

    /// The distinct formats of the tracks in the store.
    pub fn formats(&self) -> Result<Vec<Format>> {
        let mut stmt = self.conn.prepare("SELECT DISTINCT format FROM tracks")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows
            .collect::<rusqlite::Result<Vec<_>>>()?
            .iter()
            .filter_map(|f| f.parse().ok())
            .collect())
    }

    /// Every track, ordered by id.
    pub fn tracks(&self) -> Result<Vec<TrackRow>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM tracks ORDER BY id",
            self.track_columns()
        ))?;
        let rows = stmt.query_map([], track_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub fn track(&self, id: i64) -> Result<Option<TrackRow>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM tracks WHERE id = ?1",
            self.track_columns()
        ))?;
        Ok(stmt.query_row([id], track_from_row).optional()?)
    }

    /// Resolves a user's track reference: a numeric id or a backing path.
    pub fn resolve_track(&self, reference: &str) -> Result<TrackRow> {
        if let Ok(id) = reference.parse::<i64>() {
            if let Some(t) = self.track(id)? {
                return Ok(t);
            }
        }
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM tracks WHERE backing_path = ?1",
            self.track_columns()
        ))?;
        // A path as the store has it (an export's) needs no resolving
        // (which reads every symlink along it).
        if let Some(t) = stmt.query_row([reference], track_from_row).optional()? {
            return Ok(t);
        }
        let Ok(path) = std::fs::canonicalize(crate::text_to_path(reference)) else {
            return Err(StoreError::NoSuchTrack(reference.to_string()));
        };
        stmt.query_row([crate::path_to_text(&path)], track_from_row)
            .optional()?
            .ok_or_else(|| StoreError::NoSuchTrack(reference.to_string()))
    }

    /// The tracks whose backing files are under folder `dir` (an absolute
    /// path, as the scan stores them), in id order.
    pub fn tracks_under(&self, dir: &str) -> Result<Vec<TrackRow>> {
        let dir = dir.trim_end_matches('/');
        // The paths under `dir/` sort between `dir/` and `dir0` ('0'
        // follows '/'), a range the unique index on the path answers.
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM tracks WHERE backing_path > ?1 AND backing_path < ?2 ORDER BY id",
            self.track_columns()
        ))?;
        let rows = stmt.query_map([format!("{dir}/"), format!("{dir}0")], track_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Stat stamps of every track by backing path, for re-scan skipping.
    pub fn known_stamps(&self) -> Result<KnownStamps> {
        let mut stmt = self.conn.prepare(&format!(
            // A track the migration to version 2 left without structure,
            // or to version 9 without its vendor string, reports impossible
            // stamps, so the next scan probes it again.
            "SELECT backing_path, id, file_size, \
                 CASE WHEN passthrough = '{REPROBE}' \
                      OR (vendor IS NULL AND format IN ('flac', 'vorbis', 'opus')) \
                 THEN -1 ELSE mtime_ns END, ctime_ns FROM tracks"
        ))?;
        let count = usize::try_from(self.track_count()?).unwrap_or(0);
        // Paths of a music library run about 100 bytes; the buffer grows
        // past that if it must.
        let mut known = PathTable::with_capacity(count, count * 100);
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let stamps = Stamps {
                size: r.get::<_, i64>(2)? as u64,
                mtime_ns: r.get(3)?,
                ctime_ns: r.get(4)?,
            };
            let id = r.get(1)?;
            // A path garbled by a tool matches no file: its track is gone,
            // and found moved if its file is seen.
            known.push(&text_ref(r, 0, id)?, (id, stamps));
        }
        Ok(KnownStamps(known))
    }

    /// What the last scan saw in each folder, by path. Rows that cannot
    /// be read as such are left out (their folders are listed again).
    pub fn scanned_dirs(&self) -> Result<ScannedDirs> {
        let mut stmt = self.conn.prepare(
            "SELECT path, device, inode, mtime_ns, ctime_ns, scanned_ns, skipped, entries FROM scanned_dirs",
        )?;
        let mut out = ScannedDirs::default();
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let row = (|| -> rusqlite::Result<_> {
                let dir = ScannedDir {
                    stamp: DirStamp {
                        device: r.get::<_, i64>(1)? as u64,
                        inode: r.get::<_, i64>(2)? as u64,
                        mtime_ns: r.get(3)?,
                        ctime_ns: r.get(4)?,
                    },
                    scanned_ns: r.get(5)?,
                    skipped_by_name: r.get::<_, i64>(6)?.max(0) as u64,
                    entries: Cow::Borrowed(r.get_ref(7)?.as_blob()?),
                };
                Ok((r.get_ref(0)?.as_str()?, dir))
            })();
            if let Ok((path, dir)) = row {
                out.push(path, &dir);
            }
        }
        Ok(out)
    }

    /// Content fingerprints of the given tracks (those that have one).
    pub fn fingerprints(&self, ids: &[i64]) -> Result<Vec<(i64, Fingerprint)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT coalesce(fingerprint, legacy_fingerprint), fingerprint IS NULL FROM tracks \
             WHERE id = ?1 AND coalesce(fingerprint, legacy_fingerprint) IS NOT NULL",
        )?;
        let mut out = Vec::new();
        for &id in ids {
            let row: Option<(Vec<u8>, bool)> =
                stmt.query_row([id], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
            let Some((bytes, legacy)) = row else { continue };
            let Ok(bytes) = <[u8; 32]>::try_from(bytes) else {
                continue;
            };
            out.push((
                id,
                if legacy {
                    Fingerprint::Sha256(bytes)
                } else {
                    Fingerprint::Blake3(bytes)
                },
            ));
        }
        Ok(out)
    }

    /// Whether any track still has only the sha256 fingerprint of a store
    /// from before version 5.
    pub fn has_legacy_fingerprints(&self) -> Result<bool> {
        Ok(self.conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM tracks WHERE legacy_fingerprint IS NOT NULL)",
            [],
            |r| r.get(0),
        )?)
    }

    /// Stat stamps of every recorded failure, so unchanged broken files are
    /// not probed again.
    pub fn failure_stamps(&self) -> Result<PathMap<Stamps>> {
        let mut stmt = self
            .conn
            .prepare("SELECT path, file_size, mtime_ns, ctime_ns FROM scan_failures")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                Stamps {
                    size: r.get::<_, i64>(1)? as u64,
                    mtime_ns: r.get(2)?,
                    ctime_ns: r.get(3)?,
                },
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Recorded scan failures: (path, reason).
    pub fn failures(&self) -> Result<Vec<(String, String)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT path, reason FROM scan_failures ORDER BY path")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every track with what its served path and size come from, in id
    /// order: one pass over five queries ordered by track id, merged as
    /// they go (no map of every track's tags is ever built). A picture
    /// link whose art row is missing is left out here; serving the track
    /// reports it ([`Store::art_links`]). Call inside
    /// [`Store::read_snapshot`] for one consistent state.
    pub fn for_each_track(&self, mut f: impl FnMut(TrackBundle)) -> Result<()> {
        let mut tracks = self.conn.prepare(&format!(
            "SELECT {} FROM tracks ORDER BY id",
            self.track_columns()
        ))?;
        let mut tags = self
            .conn
            .prepare("SELECT track_id, key, value FROM tags ORDER BY track_id, key, position")?;
        let mut art = match self.conn.prepare(&every_art_link_query(true)) {
            Ok(statement) => statement,
            // A store whose index a tool dropped loads as before version 7.
            Err(_) => self.conn.prepare(&every_art_link_query(false))?,
        };
        let mut blocks = self.conn.prepare(
            "SELECT track_id, block_type, length(data) FROM flac_blocks ORDER BY track_id, position",
        )?;
        let mut parts = self.conn.prepare(
            "SELECT track_id, kind, offset, length FROM backing_parts ORDER BY track_id, position",
        )?;
        let mut tags = ByTrack::new(&mut tags, tag_after_track_id)?;
        let mut art = ByTrack::new(&mut art, |r, _| art_link_from_row(r, 1))?;
        let mut blocks = ByTrack::new(&mut blocks, |r, _| Ok((r.get(1)?, r.get::<_, i64>(2)? as u64)))?;
        let mut parts = ByTrack::new(&mut parts, part_after_track_id)?;
        let mut rows = tracks.query([])?;
        while let Some(r) = rows.next()? {
            let id: i64 = r.get(0)?;
            // Each query is passed over this track's rows whatever fails.
            let bundle = (
                track_from_row(r),
                tags.take(id)?,
                art.take(id)?,
                blocks.take(id)?,
                parts.take(id)?,
            );
            match bundle {
                (Ok(track), Ok(tags), Ok(art), Ok(flac_block_lens), Ok(parts)) => f(TrackBundle {
                    track,
                    tags,
                    art,
                    flac_block_lens,
                    parts,
                }),
                (track, tags, art, blocks, parts) => {
                    let e = track
                        .err()
                        .or(tags.err())
                        .or(art.err())
                        .or(blocks.err())
                        .or(parts.err());
                    if let Some(e) = e {
                        left_out(id, &e);
                    }
                }
            }
        }
        Ok(())
    }

    /// One track as [`Store::for_each_track`] gives it (its links to art
    /// the art table lacks left out); None if it is gone, or left out
    /// because its rows do not decode.
    pub fn track_bundle(&self, id: i64) -> Result<Option<TrackBundle>> {
        let read = || -> Result<Option<TrackBundle>> {
            let Some(track) = self.track(id)? else {
                return Ok(None);
            };
            let art = self
                .conn
                .prepare_cached(&format!(
                    "SELECT {ART_LINK_COLUMNS} FROM track_art l JOIN art a ON a.sha256 = l.art_sha256 \
                     WHERE l.track_id = +?1 ORDER BY l.position"
                ))?
                .query_map([id], |r| art_link_from_row(r, 1))?
                .collect::<rusqlite::Result<_>>()?;
            Ok(Some(TrackBundle {
                track,
                tags: self.tags(id)?,
                art,
                flac_block_lens: self.flac_block_lengths(id)?,
                parts: self.backing_parts(id)?,
            }))
        };
        match read() {
            Err(StoreError::Sql(e)) if does_not_decode(&e) => {
                left_out(id, &e);
                Ok(None)
            }
            other => other,
        }
    }

    /// What synthesizing a track reads besides its row. Call inside
    /// [`Store::read_snapshot`], with the row, for one consistent state.
    pub fn synthesis_rows(&self, track: &TrackRow) -> Result<SynthesisRows> {
        Ok(SynthesisRows {
            tags: self.tags(track.id)?,
            art: self.art_links(track.id)?,
            flac_blocks: match track.format {
                Format::Flac => self.flac_blocks(track.id)?,
                _ => Vec::new(),
            },
            parts: self.backing_parts(track.id)?,
        })
    }

    /// The tracks with ids in `ids` (those that exist), in id order, each
    /// with its [`SynthesisRows`] if `synthesis`, read with one statement
    /// per table for the whole range instead of one per track: what
    /// preparing the files of an album (scanned together, so neighbouring
    /// ids) reads. A track whose rows fail to read (they do not decode, a
    /// link to missing art) gets the error, the others are read all the
    /// same. Call inside [`Store::read_snapshot`].
    pub fn tracks_for_serving(
        &self,
        ids: RangeInclusive<i64>,
        synthesis: bool,
        mut f: impl FnMut(i64, Result<(TrackRow, Option<SynthesisRows>)>),
    ) -> Result<()> {
        let range = [*ids.start(), *ids.end()];
        let mut tracks = self.conn.prepare_cached(&format!(
            "SELECT {} FROM tracks WHERE id BETWEEN +?1 AND +?2 ORDER BY id",
            self.track_columns()
        ))?;
        let mut rows = tracks.query(range)?;
        if !synthesis {
            while let Some(r) = rows.next()? {
                let id: i64 = r.get(0)?;
                f(id, track_from_row(r).map(|t| (t, None)).map_err(StoreError::from));
            }
            return Ok(());
        }
        let mut tags = self.conn.prepare_cached(
            "SELECT track_id, key, value FROM tags WHERE track_id BETWEEN +?1 AND +?2 \
             ORDER BY track_id, key, position",
        )?;
        // A link whose art row is missing reads as the hash it names: an
        // error for its track.
        let mut art = self.conn.prepare_cached(&format!(
            "SELECT {ART_LINK_COLUMNS}, l.art_sha256 FROM track_art l LEFT JOIN art a ON a.sha256 = l.art_sha256 \
             WHERE l.track_id BETWEEN +?1 AND +?2 ORDER BY l.track_id, l.position"
        ))?;
        let mut blocks = self.conn.prepare_cached(
            "SELECT track_id, block_type, data FROM flac_blocks WHERE track_id BETWEEN +?1 AND +?2 \
             ORDER BY track_id, position",
        )?;
        let mut parts = self.conn.prepare_cached(
            "SELECT track_id, kind, offset, length FROM backing_parts WHERE track_id BETWEEN +?1 AND +?2 \
             ORDER BY track_id, position",
        )?;
        let mut tags = ByTrack::with_params(&mut tags, range, tag_after_track_id)?;
        let mut art = ByTrack::with_params(&mut art, range, |r, _| match r.get::<_, Option<i64>>(1)? {
            Some(_) => art_link_from_row(r, 1).map(Ok),
            None => r.get(10).map(Err),
        })?;
        let mut blocks = ByTrack::with_params(&mut blocks, range, |r, _| Ok((r.get(1)?, r.get(2)?)))?;
        let mut parts = ByTrack::with_params(&mut parts, range, part_after_track_id)?;
        while let Some(r) = rows.next()? {
            let id: i64 = r.get(0)?;
            // Each query is passed over this track's rows whatever fails.
            let found = (
                track_from_row(r),
                tags.take(id)?,
                art.take(id)?,
                blocks.take(id)?,
                parts.take(id)?,
            );
            f(id, serving(id, found).map(|(track, rows)| (track, Some(rows))));
        }
        Ok(())
    }

    // A track's rows are selected with `track_id = +?1`: SQLite (built
    // with STAT4) re-prepares `= ?1 ... ORDER BY` the rest of the index,
    // or `max()` over it, at every run (a third of the mount's time opening
    // new files went there); the unary plus keeps the index and drops the
    // re-prepare. The store's contract tests count re-prepares.

    /// Tags of one track: (key, value) ordered by key, then position.
    pub fn tags(&self, track_id: i64) -> Result<Vec<(String, String)>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT key, value FROM tags WHERE track_id = +?1 ORDER BY key, position")?;
        let rows = stmt.query_map([track_id], |r| Ok((text(r, 0, track_id)?, text(r, 1, track_id)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Pictures of one track, in order, without their bytes. A link whose
    /// art row is missing (a tool that deleted art with foreign keys off) is
    /// an error, not a picture silently left out.
    pub fn art_links(&self, track_id: i64) -> Result<Vec<ArtLink>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {ART_LINK_COLUMNS}, l.art_sha256 FROM track_art l LEFT JOIN art a ON a.sha256 = l.art_sha256 \
             WHERE l.track_id = +?1 ORDER BY l.position"
        ))?;
        let mut rows = stmt.query([track_id])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            if r.get::<_, Option<i64>>(1)?.is_none() {
                let sha256 = r.get(10)?;
                return Err(StoreError::MissingArt { track_id, sha256 });
            }
            out.push(art_link_from_row(r, 1)?);
        }
        Ok(out)
    }

    /// FLAC structural blocks of one track, in order.
    pub fn flac_blocks(&self, track_id: i64) -> Result<Vec<(u8, Vec<u8>)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT block_type, data FROM flac_blocks WHERE track_id = +?1 ORDER BY position",
        )?;
        let rows = stmt.query_map([track_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The backing parts of a track, in file order.
    pub fn backing_parts(&self, track_id: i64) -> Result<Vec<BackingPart>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT track_id, kind, offset, length FROM backing_parts WHERE track_id = +?1 ORDER BY position",
        )?;
        let rows = stmt.query_map([track_id], |r| part_from_row(r).map(|(_, p)| p))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// (type, body length) of one track's FLAC blocks.
    pub fn flac_block_lengths(&self, track_id: i64) -> Result<Vec<(u8, u64)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT block_type, length(data) FROM flac_blocks WHERE track_id = +?1 ORDER BY position",
        )?;
        let rows = stmt.query_map([track_id], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Reads up to `buf.len()` bytes of an art image starting at `offset`,
    /// straight from the database page cache (the image is never loaded
    /// whole). Returns the number of bytes read.
    pub fn read_art(&self, art_rowid: i64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let blob = self
            .conn
            .blob_open(rusqlite::MAIN_DB, "art", "data", art_rowid, true)?;
        let len = blob.len() as u64;
        if offset >= len {
            return Ok(0);
        }
        let n = buf.len().min((len - offset) as usize);
        blob.read_at_exact(&mut buf[..n], offset as usize)?;
        Ok(n)
    }

    /// The bytes and mime type of an art image.
    pub fn art_data(&self, sha256: &str) -> Result<(String, Vec<u8>)> {
        self.conn
            .query_row("SELECT mime, data FROM art WHERE sha256 = ?1", [sha256], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?
            .ok_or_else(|| StoreError::NoSuchArt(sha256.to_string()))
    }
}

/// Column `i` of a row of track `track_id`, a text value, as a `String`.
/// Tag values (lyrics of tens of kB among them) are most of what a mount
/// reads, and checking them as UTF-8 one byte at a time took a fifth of a
/// mount's time for such a library: checked with SIMD instead. SQLite
/// keeps whatever bytes a tool wrote: a value that is not UTF-8 is read
/// with U+FFFD in place of its bad bytes, and logged, so that the track is
/// served and the rest of the store still loads.
fn text(r: &rusqlite::Row<'_>, i: usize, track_id: i64) -> rusqlite::Result<String> {
    text_ref(r, i, track_id).map(Cow::into_owned)
}

/// [`text`] borrowed from the row when it is UTF-8.
fn text_ref<'r>(r: &'r rusqlite::Row<'_>, i: usize, track_id: i64) -> rusqlite::Result<Cow<'r, str>> {
    let bytes = match r.get_ref(i)? {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => bytes,
        _ => return r.get(i).map(Cow::Owned),
    };
    if let Ok(text) = simdutf8::basic::from_utf8(bytes) {
        return Ok(Cow::Borrowed(text));
    }
    tracing::warn!(
        "track {track_id}: its {} in the store is not UTF-8: read with U+FFFD in place of the bytes that are not",
        r.as_ref().column_name(i).unwrap_or("text")
    );
    Ok(String::from_utf8_lossy(bytes))
}

/// Whether a value read did not decode: a row a tool wrote past the
/// schema's checks (an unknown format or part kind, a number where text
/// belongs), which affects its track alone.
fn does_not_decode(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
    )
}

/// The rows [`Store::tracks_for_serving`] read for track `id`, or the
/// first error among them.
#[allow(clippy::type_complexity)]
fn serving(
    id: i64,
    found: (
        rusqlite::Result<TrackRow>,
        rusqlite::Result<Vec<(String, String)>>,
        rusqlite::Result<Vec<std::result::Result<ArtLink, String>>>,
        rusqlite::Result<Vec<(u8, Vec<u8>)>>,
        rusqlite::Result<Vec<BackingPart>>,
    ),
) -> Result<(TrackRow, SynthesisRows)> {
    let (track, tags, art, flac_blocks, parts) = found;
    let art = art?
        .into_iter()
        .collect::<std::result::Result<_, _>>()
        .map_err(|sha256| StoreError::MissingArt { track_id: id, sha256 })?;
    Ok((
        track?,
        SynthesisRows {
            tags: tags?,
            art,
            flac_blocks: flac_blocks?,
            parts: parts?,
        },
    ))
}

/// A tag of a row whose first column is its track's id: (key, value).
fn tag_after_track_id(r: &rusqlite::Row<'_>, id: i64) -> rusqlite::Result<(String, String)> {
    Ok((text(r, 1, id)?, text(r, 2, id)?))
}

/// A backing part of a row of `backing_parts` read whole.
fn part_after_track_id(r: &rusqlite::Row<'_>, _: i64) -> rusqlite::Result<BackingPart> {
    part_from_row(r).map(|(_, p)| p)
}

/// A track whose rows do not decode is left out of the view, and said so.
fn left_out(id: i64, e: &rusqlite::Error) {
    tracing::warn!("track {id}: its rows in the store do not decode ({e}): left out of the view");
}

/// A read transaction through cached `BEGIN` and `COMMIT` statements
/// (rusqlite's transactions parse theirs anew each time: 3-4% of resolving
/// a track when a file is opened). Rolled back on drop if not ended.
struct ReadTransaction<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> ReadTransaction<'c> {
    fn begin(conn: &'c Connection) -> Result<Self> {
        conn.prepare_cached("BEGIN")?.execute([])?;
        Ok(ReadTransaction { conn, open: true })
    }

    fn end(mut self) -> Result<()> {
        self.open = false;
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }
}

impl Drop for ReadTransaction<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self
                .conn
                .prepare_cached("ROLLBACK")
                .and_then(|mut s| s.execute([]));
        }
    }
}

/// The rows of a table that holds several rows per track, read in track
/// id order (its first column) beside `tracks`, a track at a time;
/// `decode` reads a row's other columns.
struct ByTrack<'s, T> {
    rows: rusqlite::Rows<'s>,
    decode: fn(&rusqlite::Row<'_>, i64) -> rusqlite::Result<T>,
    next: Option<(i64, rusqlite::Result<T>)>,
}

impl<'s, T> ByTrack<'s, T> {
    fn new(
        stmt: &'s mut rusqlite::Statement<'_>,
        decode: fn(&rusqlite::Row<'_>, i64) -> rusqlite::Result<T>,
    ) -> Result<Self> {
        Self::with_params(stmt, [], decode)
    }

    fn with_params(
        stmt: &'s mut rusqlite::Statement<'_>,
        params: impl rusqlite::Params,
        decode: fn(&rusqlite::Row<'_>, i64) -> rusqlite::Result<T>,
    ) -> Result<Self> {
        let mut by_track = ByTrack {
            rows: stmt.query(params)?,
            decode,
            next: None,
        };
        by_track.advance()?;
        Ok(by_track)
    }

    fn advance(&mut self) -> Result<()> {
        self.next = match self.rows.next()? {
            Some(r) => {
                let id = r.get(0)?;
                Some((id, (self.decode)(r, id)))
            }
            None => None,
        };
        Ok(())
    }

    /// The rows of track `id`, or the first of them that did not decode
    /// (the rest are passed over all the same); rows of lower ids (a track
    /// deleted with foreign keys off) are passed over.
    fn take(&mut self, id: i64) -> Result<rusqlite::Result<Vec<T>>> {
        let mut out = Ok(Vec::new());
        while let Some((track_id, _)) = &self.next {
            if *track_id > id {
                break;
            }
            let (track_id, value) = self.next.take().expect("checked above");
            if track_id == id {
                if let Ok(values) = &mut out {
                    match value {
                        Ok(v) => values.push(v),
                        Err(e) => out = Err(e),
                    }
                }
            }
            self.advance()?;
        }
        Ok(out)
    }
}

const TRACK_COLUMNS: &str = "id, backing_path, format, audio_offset, audio_length, \
                             file_size, mtime_ns, ctime_ns, content_version, passthrough, changed_at, vendor";
const TRACK_COLUMNS_BEFORE_V9: &str = "id, backing_path, format, audio_offset, audio_length, \
                             file_size, mtime_ns, ctime_ns, content_version, passthrough, 0, NULL";

fn track_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TrackRow> {
    let id = r.get(0)?;
    let format = text(r, 2, id)?;
    let format = format
        .parse::<Format>()
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, e.into()))?;
    Ok(TrackRow {
        id,
        backing_path: text(r, 1, id)?,
        format,
        audio_offset: r.get::<_, i64>(3)? as u64,
        audio_length: r.get::<_, i64>(4)? as u64,
        stamps: Stamps {
            size: r.get::<_, i64>(5)? as u64,
            mtime_ns: r.get(6)?,
            ctime_ns: r.get(7)?,
        },
        content_version: r.get(8)?,
        passthrough: match r.get_ref(9)? {
            ValueRef::Null => None,
            _ => Some(text(r, 9, id)?),
        },
        changed_at: r.get(10)?,
        vendor: match r.get_ref(11)? {
            ValueRef::Null => None,
            _ => Some(text(r, 11, id)?),
        },
    })
}

fn part_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, BackingPart)> {
    let kind: String = r.get(1)?;
    let kind = PartKind::parse(&kind).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            1,
            rusqlite::types::Type::Text,
            format!("unknown part kind {kind:?}").into(),
        )
    })?;
    let offset: i64 = r.get(2)?;
    let length: i64 = r.get(3)?;
    Ok((r.get(0)?, BackingPart::new(kind, offset as u64, length as u64)))
}

const ART_LINK_COLUMNS: &str = "l.track_id, a.rowid, a.sha256, a.mime, a.width, a.height, \
     a.depth, length(a.data), l.picture_type, l.description";

/// Every track's picture links, for [`Store::for_each_track`]: with
/// `indexed`, read from the `art_meta` index alone, never the art rows,
/// which lie one to a page between the pictures' bytes (migrations/007_art_meta_index.sql).
/// Unasked, SQLite would look the rows up through the table's unique index
/// on `sha256`.
fn every_art_link_query(indexed: bool) -> String {
    let index = if indexed { "INDEXED BY art_meta" } else { "" };
    format!(
        "SELECT {ART_LINK_COLUMNS} FROM track_art l JOIN art a {index} \
         ON a.sha256 = l.art_sha256 ORDER BY l.track_id, l.position"
    )
}

/// An [`ArtLink`] from the [`ART_LINK_COLUMNS`] after the first (the
/// track id, column `base - 1`).
fn art_link_from_row(r: &rusqlite::Row<'_>, base: usize) -> rusqlite::Result<ArtLink> {
    let track_id = r.get(base - 1)?;
    Ok(ArtLink {
        art_rowid: r.get(base)?,
        sha256: text(r, base + 1, track_id)?,
        mime: text(r, base + 2, track_id)?,
        width: r.get(base + 3)?,
        height: r.get(base + 4)?,
        depth: r.get(base + 5)?,
        data_len: r.get::<_, i64>(base + 6)? as u64,
        picture_type: r.get(base + 7)?,
        description: text(r, base + 8, track_id)?,
    })
}

// ---- writes (inside a transaction) -----------------------------------

/// Inserts an image unless one with the same content exists; returns its sha256.
pub fn insert_art(tx: &Transaction<'_>, art: &NewArt) -> Result<String> {
    let sha = hex::encode(art.sha256());
    insert_art_as(tx, art, &sha)?;
    Ok(sha)
}

/// Stores an image under its sha256 (`sha`, hex) unless it is there
/// already: an album's tracks share a cover, and binding its bytes copies
/// them even when the insert is ignored.
fn insert_art_as(tx: &Transaction<'_>, art: &NewArt, sha: &str) -> Result<()> {
    if art_exists(tx, sha)? {
        return Ok(());
    }
    tx.prepare_cached(
        "INSERT OR IGNORE INTO art (sha256, mime, width, height, depth, data) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![sha, art.mime, art.width, art.height, art.depth, art.data])?;
    Ok(())
}

fn art_exists(tx: &Transaction<'_>, sha: &str) -> Result<bool> {
    Ok(tx
        .prepare_cached("SELECT 1 FROM art WHERE sha256 = ?1")?
        .exists([sha])?)
}

/// Writes what a probe found. With `existing` the row keeps its id (and so
/// its inode); its tags, art and FLAC blocks are replaced by the file's.
pub fn write_scanned(tx: &Transaction<'_>, t: &ScannedTrack, existing: Option<i64>) -> Result<i64> {
    let read = scanned_tags_sha256(t);
    let id = match existing {
        Some(id) => {
            let last_read: Option<Vec<u8>> = tx
                .prepare_cached("SELECT scanned_tags FROM tracks WHERE id = ?1")?
                .query_row([id], |r| r.get(0))?;
            let mut edited = EditedTracks::new();
            edited.note(tx, id)?;
            update_scanned(tx, id, t, &read)?;
            // The file's own tags as last read: its stamps changed for
            // another reason (chmod, touch, a copy), and the store's tags,
            // edits included, stay. Rows from before version 4 (NULL) stay
            // too: losing edits cannot be undone, missing another tagger's
            // change is mended by its next save.
            if last_read.is_some_and(|h| h != read) {
                for table in ["tags", "track_art"] {
                    tx.execute(&format!("DELETE FROM {table} WHERE track_id = ?1"), [id])?;
                }
                insert_file_tags(tx, id, t, StoreArt::Yes)?;
            }
            edited.settle(tx)?;
            id
        }
        None => insert_track(tx, t, &read, StoreArt::Yes)?,
    };
    forget_failure_of(tx, t)?;
    Ok(id)
}

/// Adds a track for a file new to the store, as [`write_scanned`] does,
/// but holds back the pictures the store does not have yet: `held`
/// stores them when the caller has written the rest of its batch.
pub fn add_scanned(tx: &Transaction<'_>, t: &mut ScannedTrack, held: &mut HeldPictures) -> Result<i64> {
    held.take_from(tx, t)?;
    let id = insert_track(tx, t, &scanned_tags_sha256(t), StoreArt::Held)?;
    forget_failure_of(tx, t)?;
    Ok(id)
}

fn forget_failure_of(tx: &Transaction<'_>, t: &ScannedTrack) -> Result<()> {
    tx.prepare_cached("DELETE FROM scan_failures WHERE path = ?1")?
        .execute([&t.backing_path])?;
    Ok(())
}

/// Whether a track's rows store its pictures, or only link to them (the
/// bytes held by a [`HeldPictures`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum StoreArt {
    Yes,
    Held,
}

/// Pictures of new tracks, held back so that a scan's batch stores them
/// after its rows. Written as they came, each picture's pages would lie
/// between the pages the rows before and after it grew the tables by, and
/// a cold mount reads the tables page by page: for 20,000 tracks with
/// 2,000 covers, 2,350 disk requests, against 770 with the pictures of
/// each batch together (docs/benchmarks.md).
#[derive(Default)]
pub struct HeldPictures {
    pictures: Vec<(String, NewArt)>,
    shas: std::collections::HashSet<[u8; 32]>,
    bytes: usize,
}

impl HeldPictures {
    /// Takes the bytes of the track's pictures out of it: those the store
    /// lacks are kept (once each), the rest freed.
    fn take_from(&mut self, tx: &Transaction<'_>, t: &mut ScannedTrack) -> Result<()> {
        for pic in &mut t.pictures {
            let data = std::mem::take(&mut pic.art.data);
            if self.shas.contains(&pic.sha256) {
                continue;
            }
            let sha = hex::encode(pic.sha256);
            if !art_exists(tx, &sha)? {
                self.shas.insert(pic.sha256);
                self.bytes += data.len();
                self.pictures.push((
                    sha,
                    NewArt {
                        data,
                        ..pic.art.clone()
                    },
                ));
            }
        }
        Ok(())
    }

    /// Bytes of the pictures held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Stores the pictures held, in the order they came.
    pub fn store(&mut self, tx: &Transaction<'_>) -> Result<()> {
        for (sha, art) in self.pictures.drain(..) {
            insert_art_as(tx, &art, &sha)?;
        }
        self.shas.clear();
        self.bytes = 0;
        Ok(())
    }
}

/// Adds a track for a file new to the store. Its own rows go in first,
/// then the track row: their change-log triggers find no track and log
/// nothing (schema version 6), and the track's `added` entry stands for
/// them. Logged row by row, a first scan of 20,000 small FLACs took 0.86
/// s where it now takes 0.65.
fn insert_track(
    tx: &Transaction<'_>,
    t: &ScannedTrack,
    scanned_tags: &[u8; 32],
    art: StoreArt,
) -> Result<i64> {
    let last: Option<i64> = tx
        .prepare_cached("SELECT max(id) FROM tracks")?
        .query_row([], |r| r.get(0))?;
    // The id SQLite would give the row. A store whose last id is the
    // largest there is (written by hand) takes no new tracks.
    let id = last.unwrap_or(0).checked_add(1).ok_or(StoreError::IdsUsedUp)?;
    insert_structure(tx, id, t)?;
    insert_file_tags(tx, id, t, art)?;
    let columns = [Value::from(id), Value::from(t.backing_path.clone())];
    tx.prepare_cached(
        "INSERT INTO tracks (id, backing_path, format, audio_offset, audio_length, \
         file_size, mtime_ns, ctime_ns, fingerprint, scanned_at, passthrough, scanned_tags, vendor) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?
    .execute(params_from_iter(
        columns.into_iter().chain(probed_columns(t, scanned_tags)),
    ))?;
    Ok(id)
}

/// What a probe sets in a track's row: `format` to `scanned_tags`, in the
/// order the statements above and below name them.
fn probed_columns(t: &ScannedTrack, scanned_tags: &[u8; 32]) -> [Value; 11] {
    [
        Value::from(t.format.as_str().to_string()),
        Value::from(t.audio_offset as i64),
        Value::from(t.audio_length as i64),
        Value::from(t.stamps.size as i64),
        Value::from(t.stamps.mtime_ns),
        Value::from(t.stamps.ctime_ns),
        Value::from(t.fingerprint.map(|f| f.to_vec())),
        Value::from(now_secs()),
        Value::from(t.passthrough.clone()),
        Value::from(scanned_tags.to_vec()),
        // "" for a file without comments: NULL is a row to probe again.
        Value::from(t.vendor.clone().unwrap_or_default()),
    ]
}

/// The tags and pictures read from the file, for a track that has none.
fn insert_file_tags(tx: &Transaction<'_>, id: i64, t: &ScannedTrack, art: StoreArt) -> Result<()> {
    insert_tags_of_tagless(tx, id, &t.tags)?;
    for (position, pic) in t.pictures.iter().enumerate() {
        let sha = hex::encode(pic.sha256);
        if art == StoreArt::Yes {
            insert_art_as(tx, &pic.art, &sha)?;
        }
        tx.prepare_cached(
            "INSERT INTO track_art (track_id, position, art_sha256, picture_type, description) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![
            id,
            position as i64,
            sha,
            pic.picture_type,
            pic.description
        ])?;
    }
    Ok(())
}

/// `tracks.scanned_tags`: sha256 over the tags and pictures read from the
/// file, in file order: per tag `t`, key, NUL, value, NUL; per picture `p`,
/// its type as one byte, description, NUL, the image's sha256 (32 bytes).
pub fn scanned_tags_sha256(t: &ScannedTrack) -> [u8; 32] {
    let mut h = Sha256::new();
    for (key, value) in &t.tags {
        for part in [b"t", key.as_bytes(), b"\0", value.as_bytes(), b"\0"] {
            h.update(part);
        }
    }
    for p in &t.pictures {
        h.update(b"p");
        h.update([p.picture_type]);
        h.update(p.description.as_bytes());
        h.update(b"\0");
        h.update(p.sha256);
    }
    h.finalize().into()
}

/// Writes what the scanner learned about an existing track's file (not
/// its tags or art): its columns, FLAC blocks and backing parts.
fn update_scanned(tx: &Transaction<'_>, id: i64, t: &ScannedTrack, scanned_tags: &[u8; 32]) -> Result<()> {
    tx.prepare_cached(
        "UPDATE tracks SET format = ?2, audio_offset = ?3, audio_length = ?4, \
         file_size = ?5, mtime_ns = ?6, ctime_ns = ?7, fingerprint = ?8, legacy_fingerprint = NULL, \
         scanned_at = ?9, passthrough = ?10, scanned_tags = ?11, vendor = ?12 WHERE id = ?1",
    )?
    .execute(params_from_iter(
        std::iter::once(Value::from(id)).chain(probed_columns(t, scanned_tags)),
    ))?;
    for table in ["flac_blocks", "backing_parts"] {
        tx.execute(&format!("DELETE FROM {table} WHERE track_id = ?1"), [id])?;
    }
    insert_structure(tx, id, t)
}

/// The FLAC blocks and backing parts of a scanned file.
fn insert_structure(tx: &Transaction<'_>, id: i64, t: &ScannedTrack) -> Result<()> {
    for (position, (block_type, data)) in t.flac_blocks.iter().enumerate() {
        tx.prepare_cached(
            "INSERT INTO flac_blocks (track_id, position, block_type, data) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![id, position as i64, block_type, data])?;
    }
    for (position, part) in t.parts.iter().enumerate() {
        tx.prepare_cached(
            "INSERT INTO backing_parts (track_id, position, kind, offset, length) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![
            id,
            position as i64,
            part.kind.as_str(),
            part.offset as i64,
            part.length as i64
        ])?;
    }
    Ok(())
}

/// Inserts the tags of a track that has none, in the given order. The
/// positions are counted here: with a subquery on the bound key (as in
/// [`insert_tags`]) SQLite re-prepares the statement at every row.
///
/// The rows go in key order, up to [`TAG_ROWS_PER_INSERT`] per statement.
/// Before schema version 8, `tags` kept whole rows in its key's b-tree
/// (WITHOUT ROWID), and each statement found its first row's place from
/// the root, reading the whole of every row it compared with, long ones
/// (embedded lyrics) from their overflow pages: a first scan of 20,000
/// tracks, 1,200 of them with 76 kB of lyrics, took 2.8-3.0 s row by row,
/// 2.0-2.2 s this way.
fn insert_tags_of_tagless(tx: &Transaction<'_>, id: i64, tags: &[(String, String)]) -> Result<()> {
    let mut positions: HashMap<&str, i64> = HashMap::new();
    let mut rows: Vec<(&str, i64, &str)> = tags
        .iter()
        .map(|(key, value)| {
            let position = positions.entry(key.as_str()).or_insert(0);
            *position += 1;
            (key.as_str(), *position - 1, value.as_str())
        })
        .collect();
    rows.sort_unstable();
    for chunk in rows.chunks(TAG_ROWS_PER_INSERT) {
        let mut stmt = tx.prepare_cached(&INSERT_TAG_ROWS[chunk.len() - 1])?;
        let mut args: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(1 + 3 * chunk.len());
        args.push(&id);
        for (key, position, value) in chunk {
            args.extend([key as &dyn rusqlite::ToSql, position, value]);
        }
        stmt.execute(args.as_slice())?;
    }
    Ok(())
}

/// Tag rows one INSERT takes: one statement (and bound parameters: three a
/// row) cached for each count up to this.
const TAG_ROWS_PER_INSERT: usize = 32;

/// At index n - 1, the INSERT of n tag rows of the track bound as `?1`:
/// made once, not at each track's insert.
static INSERT_TAG_ROWS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    let row = |i: usize| format!("(?1, ?{}, ?{}, ?{})", 3 * i + 2, 3 * i + 3, 3 * i + 4);
    (1..=TAG_ROWS_PER_INSERT)
        .map(|rows| {
            let values: Vec<String> = (0..rows).map(row).collect();
            format!(
                "INSERT INTO tags (track_id, key, position, value) VALUES {}",
                values.join(", ")
            )
        })
        .collect()
});

/// Appends values in the given order, each after the key's existing values.
fn insert_tags(tx: &Transaction<'_>, id: i64, tags: &[(String, String)]) -> Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO tags (track_id, key, position, value) VALUES (?1, ?2, \
         coalesce((SELECT max(position) + 1 FROM tags WHERE track_id = +?1 AND key = +?2), 0), ?3)",
    )?;
    for (key, value) in tags {
        stmt.execute(params![id, key, value])?;
    }
    Ok(())
}

/// Points a track at a new backing path (its file moved), updating what
/// the scanner knows of the file (its tags there may differ, and with them
/// where the audio starts) but keeping the track's id, tags and art.
pub fn move_track(tx: &Transaction<'_>, id: i64, t: &ScannedTrack) -> Result<()> {
    tx.prepare_cached("UPDATE tracks SET backing_path = ?2 WHERE id = ?1")?
        .execute(params![id, t.backing_path])?;
    update_scanned(tx, id, t, &scanned_tags_sha256(t))
}

/// (id, backing path) of the tracks with this content fingerprint.
pub fn tracks_with_fingerprint(
    tx: &Transaction<'_>,
    fingerprint: &Fingerprint,
) -> Result<Vec<(i64, String)>> {
    let (sql, bytes) = match fingerprint {
        Fingerprint::Blake3(f) => ("SELECT id, backing_path FROM tracks WHERE fingerprint = ?1", f),
        Fingerprint::Sha256(f) => (
            "SELECT id, backing_path FROM tracks WHERE legacy_fingerprint = ?1",
            f,
        ),
    };
    let mut stmt = tx.prepare_cached(sql)?;
    let rows = stmt.query_map([&bytes[..]], |r| {
        let id = r.get(0)?;
        Ok((id, text(r, 1, id)?))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Records a file the scanner could not probe.
pub fn record_failure(tx: &Transaction<'_>, path: &str, stamps: Stamps, reason: &str) -> Result<()> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO scan_failures (path, reason, file_size, mtime_ns, ctime_ns, failed_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        path,
        reason,
        stamps.size as i64,
        stamps.mtime_ns,
        stamps.ctime_ns,
        now_secs()
    ])?;
    Ok(())
}

/// Removes a track (its tags, art links and blocks go with it).
pub fn remove_track(tx: &Transaction<'_>, id: i64) -> Result<()> {
    tx.prepare_cached("DELETE FROM tracks WHERE id = ?1")?
        .execute([id])?;
    Ok(())
}

/// Forgets a recorded failure (its file is gone).
pub fn remove_failure(tx: &Transaction<'_>, path: &str) -> Result<()> {
    tx.prepare_cached("DELETE FROM scan_failures WHERE path = ?1")?
        .execute([path])?;
    Ok(())
}

/// Replaces every value of `key` with `values` (none removes the key).
pub fn set_tag(tx: &Transaction<'_>, id: i64, key: &str, values: &[String]) -> Result<()> {
    tx.prepare_cached("DELETE FROM tags WHERE track_id = ?1 AND key = ?2")?
        .execute(params![id, key])?;
    add_tag(tx, id, key, values)
}

/// Drops all but the newest `keep` change-log entries.
pub fn trim_change_log(tx: &Transaction<'_>, keep: i64) -> Result<()> {
    tx.execute(
        "DELETE FROM changes WHERE seq <= (SELECT max(seq) FROM changes) - ?1",
        [keep],
    )?;
    Ok(())
}

/// Appends values to `key`.
pub fn add_tag(tx: &Transaction<'_>, id: i64, key: &str, values: &[String]) -> Result<()> {
    let pairs: Vec<(String, String)> = values.iter().map(|v| (key.to_string(), v.clone())).collect();
    insert_tags(tx, id, &pairs)
}

/// Links an image to a track as the picture of `picture_type`, replacing a
/// picture of that type if the track had one.
pub fn set_art(tx: &Transaction<'_>, id: i64, art: &NewArt, picture_type: u8) -> Result<String> {
    let sha = insert_art(tx, art)?;
    link_art(tx, id, &sha, picture_type)?;
    Ok(sha)
}

/// Links stored art (by its sha256, as [`insert_art`] returns it) to a
/// track as the picture of `picture_type`, replacing a picture of that type
/// if the track had one: one image set on many tracks is stored and hashed
/// once.
pub fn link_art(tx: &Transaction<'_>, id: i64, sha: &str, picture_type: u8) -> Result<()> {
    let existing: Option<i64> = tx
        .prepare_cached(
            "SELECT position FROM track_art WHERE track_id = +?1 AND picture_type = +?2 \
             ORDER BY position LIMIT 1",
        )?
        .query_row(params![id, picture_type], |r| r.get(0))
        .optional()?;
    match existing {
        Some(position) => {
            tx.prepare_cached("UPDATE track_art SET art_sha256 = ?3 WHERE track_id = ?1 AND position = ?2")?
                .execute(params![id, position, sha])?;
        }
        None => {
            tx.prepare_cached(
                "INSERT INTO track_art (track_id, position, art_sha256, picture_type) VALUES \
                 (?1, coalesce((SELECT max(position) + 1 FROM track_art WHERE track_id = +?1), 0), ?2, ?3)",
            )?
            .execute(params![id, sha, picture_type])?;
        }
    }
    Ok(())
}

/// Unlinks the pictures of `picture_type` (all pictures with `None`) from a
/// track; returns how many were removed. Art rows no track uses are deleted.
pub fn remove_art(tx: &Transaction<'_>, id: i64, picture_type: Option<u8>) -> Result<usize> {
    let n = match picture_type {
        Some(t) => tx.execute(
            "DELETE FROM track_art WHERE track_id = ?1 AND picture_type = ?2",
            params![id, t],
        )?,
        None => tx.execute("DELETE FROM track_art WHERE track_id = ?1", [id])?,
    };
    delete_orphan_art(tx)?;
    Ok(n)
}

/// Deletes art rows that no track links to.
pub fn delete_orphan_art(tx: &Transaction<'_>) -> Result<usize> {
    Ok(tx.execute(
        "DELETE FROM art WHERE NOT EXISTS (SELECT 1 FROM track_art l WHERE l.art_sha256 = art.sha256)",
        [],
    )?)
}

/// Records what a scan saw in the folder at `path`.
pub fn save_scanned_dir(tx: &Transaction, path: &str, dir: &ScannedDir<'_>) -> Result<()> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO scanned_dirs \
         (path, device, inode, mtime_ns, ctime_ns, scanned_ns, skipped, entries) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        path,
        dir.stamp.device as i64,
        dir.stamp.inode as i64,
        dir.stamp.mtime_ns,
        dir.stamp.ctime_ns,
        dir.scanned_ns,
        dir.skipped_by_name as i64,
        &dir.entries[..]
    ])?;
    Ok(())
}

/// Forgets the folder at `path`: the next scan lists it again.
pub fn forget_scanned_dir(tx: &Transaction, path: &str) -> Result<()> {
    tx.prepare_cached("DELETE FROM scanned_dirs WHERE path = ?1")?
        .execute([path])?;
    Ok(())
}

/// Forgets the folder at `root` and every folder below it: the next scan
/// lists them again.
pub fn forget_scanned_dirs_under(tx: &Transaction, root: &str) -> Result<()> {
    let root = root.trim_end_matches('/');
    // Paths below `root` sort between `root/` and `root0` ('0' follows '/').
    tx.prepare_cached(
        "DELETE FROM scanned_dirs WHERE path = ?1 OR (path >= ?1 || '/' AND path < ?1 || '0')",
    )?
    .execute([root])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_reads_picture_links_from_the_index_alone() {
        let dir = tempfile::tempdir().unwrap();
        let db = Store::open(&dir.path().join("s.db")).unwrap();
        let plan: Vec<String> = db
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {}", every_art_link_query(true)))
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert!(
            plan.iter().any(|step| step.contains("COVERING INDEX art_meta")),
            "{plan:?}"
        );
    }
}
