//! A consistent copy of the store taken while it is mounted and edited
//! (SQLite's backup API, in one step: one read transaction, so the copy is
//! the store as of one commit, and writers go on meanwhile in WAL mode).

use std::path::Path;

use rusqlite::backup::{Backup, StepResult};
use rusqlite::Connection;

use crate::{Result, Store, StoreError};

impl Store {
    /// Copies the store to `to`, a file that must not exist yet: written
    /// beside it first and renamed, so a copy cut short leaves no store
    /// that looks whole.
    pub fn back_up_to(&self, to: &Path) -> Result<()> {
        if to.exists() {
            return Err(StoreError::Backup(format!(
                "{} exists: remove it, or name another file",
                to.display()
            )));
        }
        let mut partial = to.as_os_str().to_owned();
        partial.push(".partial");
        let partial = std::path::PathBuf::from(partial);
        let copied = (|| -> Result<()> {
            // Closed before the rename: its journal is folded in by then.
            let mut copy = Connection::open(&partial)?;
            let step = Backup::new(&self.conn, &mut copy)?.step(-1)?;
            match step {
                StepResult::Done => Ok(()),
                other => Err(StoreError::Backup(format!(
                    "SQLite stopped the copy ({other:?}): try again"
                ))),
            }
        })();
        let renamed = copied.and_then(|()| {
            std::fs::rename(&partial, to)
                .map_err(|e| StoreError::Backup(format!("cannot write {}: {e}", to.display())))
        });
        if renamed.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        renamed
    }
}
