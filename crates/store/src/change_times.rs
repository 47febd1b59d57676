//! The change times of the tracks one write transaction edits.
//!
//! The store's triggers move a track's `changed_at` at every row they see
//! change (migrations/009_change_times_and_vendor.sql): one second past the served file's previous time
//! at least, so that each version an indexer can see is a second after the
//! last. A transaction that changes many rows of one track (a `tag set` of
//! three keys, a re-scan of a retagged file) would push the time a second
//! per row into the future; retagfs's own writes note each track's time
//! before they change it and settle it once, before they commit.

use std::collections::HashMap;

use rusqlite::{params, OptionalExtension, Transaction};

use crate::error::Result;

/// A track's times as a transaction found them before its first change.
#[derive(Clone, Copy)]
struct Before {
    /// The served file's time, in whole seconds.
    served: i64,
    changed_at: i64,
}

/// Tracks edited in one transaction, by id ([`EditedTracks::note`] each
/// before changing it, [`EditedTracks::settle`] before committing).
#[derive(Default)]
pub struct EditedTracks {
    before: HashMap<i64, Before>,
}

impl EditedTracks {
    pub fn new() -> EditedTracks {
        EditedTracks::default()
    }

    /// Remembers a track's times, once per transaction; call before
    /// changing any of its rows.
    pub fn note(&mut self, tx: &Transaction<'_>, id: i64) -> Result<()> {
        if self.before.contains_key(&id) {
            return Ok(());
        }
        let found = tx
            .prepare_cached(
                "SELECT max(mtime_ns / 1000000000, changed_at), changed_at FROM tracks WHERE id = ?1",
            )?
            .query_row([id], |r| {
                Ok(Before {
                    served: r.get(0)?,
                    changed_at: r.get(1)?,
                })
            })
            .optional()?;
        if let Some(before) = found {
            self.before.insert(id, before);
        }
        Ok(())
    }

    /// Gives every noted track that changed the time one version after the
    /// one it had: now, or a second past its previous time if that is
    /// later.
    pub fn settle(&self, tx: &Transaction<'_>) -> Result<()> {
        let mut settle = tx.prepare_cached(
            "UPDATE tracks SET changed_at = max(CAST(strftime('%s', 'now') AS INTEGER), ?2 + 1) \
             WHERE id = ?1 AND changed_at <> ?3",
        )?;
        for (id, before) in &self.before {
            settle.execute(params![id, before.served, before.changed_at])?;
        }
        Ok(())
    }
}
