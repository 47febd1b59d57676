//! Opening a store: creating or migrating its schema, the connection's
//! settings, and the transactions everything else reads and writes in.

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, Transaction};

use crate::error::{Result, StoreError};
use crate::scan_lock::{remove_orphaned_companions, ScanLock};
use crate::scan_write::TAG_ROWS_PER_INSERT;

/// Schema version this binary writes, kept in `PRAGMA user_version`.
pub const SCHEMA_VERSION: i64 = 13;

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
    include_str!("migrations/010_remote_objects.sql"),
    include_str!("migrations/011_added_at.sql"),
    include_str!("migrations/012_edit_journal.sql"),
    include_str!("migrations/013_durations.sql"),
];

/// `passthrough` of tracks that schema version 2 found without the
/// structure it needs (written by `migrations/002_synthesis_structure.sql`).
pub(crate) const REPROBE: &str = "scanned before retagfs synthesized this format: run `retagfs scan` again";

/// How long a writer waits for another writer before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to a store.
pub struct Store {
    pub(crate) conn: Connection,
    /// The schema version the store had when this connection opened it:
    /// what its queries are written for ([`Store::schema_version_now`]
    /// tells whether another process migrated it since).
    pub(crate) opened_version: i64,
    /// Held by a store opened for a scan ([`Store::open_for_scan`]).
    /// Declared after the connection so that it is let go after the
    /// connection closed: a mount waiting for the scan to end then finds
    /// the store whole.
    pub(crate) scan_lock: Option<ScanLock>,
}

impl Store {
    /// Opens (creating if needed) a store for reading and writing and brings
    /// its schema up to date.
    pub fn open(path: &Path) -> Result<Store> {
        let open_err = |source| StoreError::Open {
            path: path.display().to_string(),
            source,
        };
        let conn = Connection::open(path).map_err(open_err)?;
        // Opened to write, a store is brought to this binary's version.
        let store = Store {
            conn,
            opened_version: SCHEMA_VERSION,
            scan_lock: None,
        };
        store.configure().map_err(open_err)?;
        store.migrate(path)?;
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

    /// SQLite's `PRAGMA quick_check`: "ok", or the first problems found.
    pub fn quick_check(&self) -> Result<String> {
        Ok(self.conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?)
    }

    /// Every folder a scan into the store walked, sorted.
    pub fn scanned_folder_paths(&self) -> Result<Vec<String>> {
        let mut statement = self.conn.prepare("SELECT path FROM scanned_dirs ORDER BY path")?;
        let rows = statement.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Raw connection, for callers that need a transaction of their own.
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Starts a write transaction that takes the write lock at once, so a
    /// concurrent writer waits on the busy timeout instead of failing later.
    /// Its foreign keys are checked at commit: the scanner writes a new
    /// track's rows before the track ([`crate::write_scanned`]). (Setting the
    /// pragma makes SQLite prepare the connection's statements again at
    /// their next use, once per transaction.)
    pub fn write(&mut self) -> Result<Transaction<'_>> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute_batch("PRAGMA defer_foreign_keys = ON")?;
        Ok(tx)
    }
}
