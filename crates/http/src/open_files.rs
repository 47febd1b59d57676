//! Files opened for recent requests, by inode and version: a player's many
//! range requests for one track open and resolve it once. An entry is used
//! only for the version the tree names now, and is let go after a few
//! seconds, so that the backing files of tracks no longer played are
//! closed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use retagfs_core::OpenFile;

/// Files held at most.
const HELD: usize = 256;
/// How long an opened file is kept after its last use.
const KEPT: Duration = Duration::from_secs(10);

/// An inode and the version of its file.
type Version = (u64, i64);

#[derive(Default)]
pub(crate) struct OpenFiles {
    /// Each file held, with its last use.
    files: Mutex<HashMap<Version, (Arc<OpenFile>, Instant)>>,
}

impl OpenFiles {
    /// The file opened for this inode and version, if one is held.
    pub(crate) fn get(&self, ino: u64, version: i64) -> Option<Arc<OpenFile>> {
        let mut files = self.files.lock();
        let now = Instant::now();
        files.retain(|_, (_, used)| now.duration_since(*used) < KEPT);
        let (file, used) = files.get_mut(&(ino, version))?;
        *used = now;
        Some(file.clone())
    }

    /// Holds a file opened for this inode and version, letting go of the
    /// least recently used one when full.
    pub(crate) fn put(&self, ino: u64, version: i64, file: Arc<OpenFile>) {
        let mut files = self.files.lock();
        if files.len() >= HELD {
            if let Some(oldest) = files.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| *k) {
                files.remove(&oldest);
            }
        }
        files.insert((ino, version), (file, Instant::now()));
    }
}
