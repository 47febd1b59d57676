//! Compacting the store in place while it is mounted and edited.
//!
//! SQLite's `VACUUM` rebuilds the file in one write transaction: writers
//! wait on the busy timeout meanwhile, readers (mounts) go on reading the
//! last commit through the WAL, and what they read after is the same rows.
//! Nothing is swapped, so no reader reloads and no waiting writer can
//! write into a file that was replaced. A mount does hold pictures by row
//! id (an open file reads its picture's bytes by it); the bundled SQLite
//! keeps the row ids of a table with indexes, as `art` has, and each
//! picture's row id is checked after.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::{Result, Store, StoreError};

/// The store's size before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    pub before_bytes: u64,
    pub after_bytes: u64,
    /// Whether the WAL was folded into the store and emptied after (a
    /// reader still on an older commit can hold it back; the next
    /// checkpoint then does it).
    pub wal_emptied: bool,
}

impl Store {
    /// Compacts the store. The caller holds the scan lock: a scan's long
    /// transactions would hold the compaction back, or wait past their
    /// busy timeout.
    pub fn vacuum(&self) -> Result<Compacted> {
        let db = self
            .conn
            .path()
            .filter(|p| !p.is_empty())
            .map(Path::new)
            .ok_or_else(|| StoreError::Vacuum("an in-memory store has no file to compact".into()))?
            .to_path_buf();
        let before_bytes = size_with_wal(&db);
        let before = picture_rows(self)?;
        self.conn.execute_batch("VACUUM")?;
        let after = picture_rows(self)?;
        // A picture added or removed meanwhile is no concern: only one
        // that is in both with another row id.
        if let Some(sha) = before
            .iter()
            .find(|(sha, id)| after.get(*sha).is_some_and(|a| a != *id))
        {
            return Err(StoreError::Vacuum(format!(
                "SQLite gave picture {} another row id while compacting: restart the mounts of this store \
                 so that they read pictures by their new ids",
                sha.0
            )));
        }
        let wal_emptied = self.empty_wal()?;
        Ok(Compacted {
            before_bytes,
            after_bytes: size_with_wal(&db),
            wal_emptied,
        })
    }

    /// Folds the WAL (which holds the whole rebuilt store now) into the
    /// store and truncates it; false when readers or checkpoints of other
    /// processes (a writer's automatic one) held it back for
    /// [`CHECKPOINT_PATIENCE`].
    fn empty_wal(&self) -> Result<bool> {
        let give_up = Instant::now() + CHECKPOINT_PATIENCE;
        loop {
            let busy: i64 = self
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
            if busy == 0 {
                return Ok(true);
            }
            if Instant::now() > give_up {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// How long compaction tries to empty the WAL after it.
const CHECKPOINT_PATIENCE: Duration = Duration::from_secs(10);

/// Each picture's row id, by its hash.
fn picture_rows(store: &Store) -> Result<HashMap<String, i64>> {
    let mut stmt = store.conn.prepare("SELECT sha256, rowid FROM art")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The store's bytes on disk, its WAL's included.
fn size_with_wal(db: &Path) -> u64 {
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    size(db) + size(&crate::beside(db, "-wal"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{insert_art, NewArt};

    fn picture(n: u8) -> NewArt {
        NewArt {
            mime: "image/png".into(),
            width: 1,
            height: 1,
            depth: 24,
            data: vec![n; 50_000],
        }
    }

    #[test]
    fn compacting_frees_space_and_keeps_each_pictures_row_id() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("store.db");
        let mut store = Store::open(&db).unwrap();
        let tx = store.write().unwrap();
        let shas: Vec<String> = (0..40).map(|n| insert_art(&tx, &picture(n)).unwrap()).collect();
        tx.commit().unwrap();
        // Gaps before the pictures kept: a renumbering would show.
        let tx = store.write().unwrap();
        for sha in &shas[..30] {
            tx.execute("DELETE FROM art WHERE sha256 = ?1", [sha]).unwrap();
        }
        tx.commit().unwrap();
        let before = picture_rows(&store).unwrap();
        let compacted = store.vacuum().unwrap();
        assert_eq!(picture_rows(&store).unwrap(), before);
        assert!(compacted.wal_emptied);
        assert!(
            compacted.after_bytes < compacted.before_bytes / 2,
            "{compacted:?}"
        );
    }
}
