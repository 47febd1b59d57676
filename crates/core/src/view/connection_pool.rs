//! The read-only store connections the serving threads share.

use super::*;

/// A file's device and inode number.
pub(crate) type FileId = (u64, u64);

pub(crate) fn file_id(path: &Path) -> Option<FileId> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Read-only store connections shared by the serving threads, all to the
/// file the tree was loaded from.
pub(super) struct ConnectionPool {
    pub(super) db: PathBuf,
    idle: Mutex<Vec<Store>>,
    /// Signalled when a connection goes back to `idle`.
    returned: Condvar,
    /// The file the connections are to (None if it was gone as it was
    /// opened). A connection is added only while the path names it: when
    /// the path names another file (a store moved over this one, or one a
    /// scan is still writing, which the watcher loads once the scan ends)
    /// a thread waits for one of the pool's instead of reading that file
    /// against this file's tree.
    served: Mutex<Option<FileId>>,
    /// Held shared while a connection is in use, exclusively while the
    /// store is replaced ([`ConnectionPool::replace`]): no work on the old
    /// file overlaps the switch.
    gate: RwLock<()>,
    /// How many times the file at the store's path was replaced.
    generation: AtomicU64,
}

/// A connection in use, given back when dropped (also if its user
/// panicked: threads may be waiting for it).
pub(super) struct Lent<'a> {
    pool: &'a ConnectionPool,
    conn: Option<Store>,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.idle.lock().push(conn);
            self.pool.returned.notify_one();
        }
    }
}

/// How long a thread waiting for a connection sleeps before it looks at
/// the store's path again.
pub(super) const RECHECK: Duration = Duration::from_millis(100);

impl ConnectionPool {
    pub(super) fn new(db: &Path, served: Option<FileId>, store: Store) -> ConnectionPool {
        ConnectionPool {
            db: db.to_path_buf(),
            idle: Mutex::new(vec![store]),
            returned: Condvar::new(),
            served: Mutex::new(served),
            gate: RwLock::new(()),
            generation: AtomicU64::new(0),
        }
    }

    /// Runs `f` on a connection. Not to be called holding the tree's lock:
    /// a replacement holds this side's gate while it swaps the tree.
    pub(super) fn with<T>(&self, f: impl FnOnce(&Store) -> io::Result<T>) -> io::Result<T> {
        let _in_use = self.gate.read();
        let lent = Lent {
            pool: self,
            conn: Some(self.take()?),
        };
        f(lent.conn.as_ref().expect("lent until dropped"))
    }

    /// An idle connection, else a new one while the path names the served
    /// file, else the next connection given back.
    pub(super) fn take(&self) -> io::Result<Store> {
        let mut idle = self.idle.lock();
        loop {
            if let Some(conn) = idle.pop() {
                return Ok(conn);
            }
            drop(idle);
            if let Some(conn) = self.open_served()? {
                return Ok(conn);
            }
            idle = self.idle.lock();
            if idle.is_empty() {
                self.returned.wait_for(&mut idle, RECHECK);
            }
        }
    }

    /// A new connection to the served file; None when the path names
    /// another file (looked at before and after the open).
    pub(super) fn open_served(&self) -> io::Result<Option<Store>> {
        let served = self.served();
        let names_served = || served.is_none() || file_id(&self.db) == served;
        if !names_served() {
            return Ok(None);
        }
        let store = Store::open_read_only(&self.db).map_err(|e| {
            let hint = retagfs_store::explain_store_error(&e, &self.db)
                .map(|h| format!("; {h}"))
                .unwrap_or_default();
            tracing::error!("cannot open store {}: {e}{hint}", self.db.display());
            io::Error::from_raw_os_error(libc::EIO)
        })?;
        Ok(names_served().then_some(store))
    }

    pub(super) fn served(&self) -> Option<FileId> {
        *self.served.lock()
    }

    /// Serves the file now at the store's path: `load` reads it while the
    /// old one is still served, then, with no connection in use, the old
    /// connections are closed and `switch` takes what `load` made. If the
    /// file cannot be opened or loaded, the old one stays served.
    /// `switch` must leave nothing of the old store to serve (the tree, the
    /// open cache): the generation moves on after it, so that a file
    /// opened meanwhile from what the old store left has the old one.
    pub(super) fn replace<L, T>(
        &self,
        load: impl FnOnce(&Store) -> anyhow::Result<L>,
        switch: impl FnOnce(L) -> T,
    ) -> anyhow::Result<T> {
        let file = file_id(&self.db);
        let store = Store::open_read_only(&self.db)?;
        if file_id(&self.db) != file {
            anyhow::bail!("the file at the store's path changed while it was opened");
        }
        let loaded = load(&store)?;
        let _switching = self.gate.write();
        self.idle.lock().clear();
        let out = switch(loaded);
        *self.served.lock() = file;
        self.generation.fetch_add(1, Ordering::Relaxed);
        self.idle.lock().push(store);
        self.returned.notify_all();
        Ok(out)
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }
}
