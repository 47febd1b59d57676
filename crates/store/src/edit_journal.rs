//! The journal of edits made through retagfs (`tag`, `art`, `import`):
//! the tags and pictures every track had before each edit transaction, so
//! that `retagfs undo` puts the last one back, and an undo is itself an
//! edit that can be undone (docs/store.md, "The edit journal").

use std::collections::HashSet;

use rusqlite::{params, OptionalExtension, Transaction};

use crate::error::{Result, StoreError};
use crate::open::Store;

/// Edits the journal keeps; older ones are forgotten (and can no longer be
/// undone).
pub const EDITS_KEPT: i64 = 50;

/// The journal entry of the edit transaction being made.
pub struct EditJournal {
    id: i64,
    noted: HashSet<i64>,
}

/// An edit as the journal lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedEdit {
    pub id: i64,
    pub at: i64,
    pub command: String,
    pub tracks: i64,
    /// The edit this one reverted.
    pub undoes: Option<i64>,
    pub first_seq: i64,
    pub last_seq: i64,
}

impl EditJournal {
    /// Starts the entry of an edit made by `command`, in the transaction
    /// that makes it.
    pub fn begin(tx: &Transaction<'_>, command: &str) -> Result<EditJournal> {
        tx.execute(
            "INSERT INTO edits (at, command, first_seq) \
             VALUES (CAST(strftime('%s', 'now') AS INTEGER), ?1, \
                     (SELECT coalesce(max(seq), 0) + 1 FROM changes))",
            [command],
        )?;
        Ok(EditJournal {
            id: tx.last_insert_rowid(),
            noted: HashSet::new(),
        })
    }

    /// Keeps a track's tags and pictures as they are, once per edit; call
    /// before changing them.
    pub fn note(&mut self, tx: &Transaction<'_>, track_id: i64) -> Result<()> {
        if !self.noted.insert(track_id) {
            return Ok(());
        }
        let id = self.id;
        tx.prepare_cached("INSERT INTO edit_tracks (edit_id, track_id) VALUES (?1, ?2)")?
            .execute(params![id, track_id])?;
        tx.prepare_cached(
            "INSERT INTO edit_tags (edit_id, track_id, key, position, value) \
             SELECT ?1, track_id, key, position, value FROM tags WHERE track_id = ?2",
        )?
        .execute(params![id, track_id])?;
        tx.prepare_cached(
            "INSERT INTO edit_art (edit_id, track_id, position, art_sha256, picture_type, description) \
             SELECT ?1, track_id, position, art_sha256, picture_type, description FROM track_art \
             WHERE track_id = ?2",
        )?
        .execute(params![id, track_id])?;
        Ok(())
    }

    /// Closes the entry (`undoes`: the edit an undo reverted) and forgets
    /// edits beyond the last [`EDITS_KEPT`]. Returns the entry's id.
    pub fn finish(self, tx: &Transaction<'_>, undoes: Option<i64>) -> Result<i64> {
        tx.execute(
            "UPDATE edits SET tracks = ?2, undoes = ?3, \
                              last_seq = (SELECT coalesce(max(seq), 0) FROM changes) WHERE id = ?1",
            params![self.id, self.noted.len() as i64, undoes],
        )?;
        tx.execute("DELETE FROM edits WHERE id <= ?1", [self.id - EDITS_KEPT])?;
        Ok(self.id)
    }
}

/// Reverts the last edit in the journal, as an edit of its own logged as
/// `undo #N: COMMAND`: every track it touched gets back the tags and
/// pictures it had before. Fails, changing nothing, when one of those
/// tracks or pictures is gone. `before_change` is told each track before
/// it changes. Returns the edit undone.
pub fn undo_last_edit(
    tx: &Transaction<'_>,
    mut before_change: impl FnMut(i64) -> Result<()>,
) -> Result<LoggedEdit> {
    let Some(last) = last_edit(tx)? else {
        return Err(StoreError::Undo("the journal holds no edit".into()));
    };
    let tracks: Vec<i64> = tx
        .prepare("SELECT track_id FROM edit_tracks WHERE edit_id = ?1 ORDER BY track_id")?
        .query_map([last.id], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut journal = EditJournal::begin(tx, &format!("undo #{}: {}", last.id, last.command))?;
    for &track in &tracks {
        let exists = tx
            .prepare_cached("SELECT 1 FROM tracks WHERE id = ?1")?
            .exists([track])?;
        if !exists {
            return Err(StoreError::Undo(format!(
                "track {track}, which edit #{} changed, is no longer in the store (a scan removed it)",
                last.id
            )));
        }
        before_change(track)?;
        journal.note(tx, track)?;
        restore(tx, last.id, track)?;
    }
    journal.finish(tx, Some(last.id))?;
    Ok(last)
}

/// Puts back the tags and pictures track `track` had before edit `edit`.
fn restore(tx: &Transaction<'_>, edit: i64, track: i64) -> Result<()> {
    tx.prepare_cached("DELETE FROM tags WHERE track_id = ?1")?
        .execute([track])?;
    tx.prepare_cached(
        "INSERT INTO tags (track_id, key, position, value) \
         SELECT track_id, key, position, value FROM edit_tags WHERE edit_id = ?1 AND track_id = ?2 \
         ORDER BY key, position",
    )?
    .execute(params![edit, track])?;
    let missing: Option<String> = tx
        .prepare_cached(
            "SELECT e.art_sha256 FROM edit_art e WHERE e.edit_id = ?1 AND e.track_id = ?2 \
             AND NOT EXISTS (SELECT 1 FROM art WHERE sha256 = e.art_sha256) LIMIT 1",
        )?
        .query_row(params![edit, track], |r| r.get(0))
        .optional()?;
    if let Some(sha) = missing {
        return Err(StoreError::Undo(format!(
            "the picture {sha} that track {track} had is no longer in the store"
        )));
    }
    tx.prepare_cached("DELETE FROM track_art WHERE track_id = ?1")?
        .execute([track])?;
    tx.prepare_cached(
        "INSERT INTO track_art (track_id, position, art_sha256, picture_type, description) \
         SELECT track_id, position, art_sha256, picture_type, description FROM edit_art \
         WHERE edit_id = ?1 AND track_id = ?2 ORDER BY position",
    )?
    .execute(params![edit, track])?;
    Ok(())
}

fn last_edit(conn: &rusqlite::Connection) -> Result<Option<LoggedEdit>> {
    Ok(conn
        .prepare(&format!(
            "SELECT {EDIT_COLUMNS} FROM edits ORDER BY id DESC LIMIT 1"
        ))?
        .query_row([], edit_from_row)
        .optional()?)
}

const EDIT_COLUMNS: &str = "id, at, command, tracks, undoes, first_seq, last_seq";

fn edit_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<LoggedEdit> {
    Ok(LoggedEdit {
        id: r.get(0)?,
        at: r.get(1)?,
        command: r.get(2)?,
        tracks: r.get(3)?,
        undoes: r.get(4)?,
        first_seq: r.get(5)?,
        last_seq: r.get(6)?,
    })
}

impl Store {
    /// The edits the journal holds, newest first.
    pub fn logged_edits(&self) -> Result<Vec<LoggedEdit>> {
        if self.schema_version() < 12 {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn()
            .prepare(&format!("SELECT {EDIT_COLUMNS} FROM edits ORDER BY id DESC"))?;
        let rows = stmt.query_map([], edit_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Changes of tags and pictures since the oldest edit the journal
    /// holds that no logged edit made (raw SQL, other tools, re-scans of
    /// changed files): (changes, tracks). The journal cannot undo them.
    pub fn unlogged_changes(&self) -> Result<(i64, i64)> {
        if self.schema_version() < 12 {
            return Ok((0, 0));
        }
        Ok(self.conn().query_row(
            "SELECT count(*), count(DISTINCT track_id) FROM changes c \
             WHERE kind IN ('tags', 'art') AND seq >= (SELECT coalesce(min(first_seq), 0) FROM edits) \
             AND NOT EXISTS (SELECT 1 FROM edits e WHERE c.seq BETWEEN e.first_seq AND e.last_seq)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?)
    }
}
