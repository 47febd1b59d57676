//! Edits of a track's tags and pictures (`retagfs tag`, `art`, `import`).

use rusqlite::{params, OptionalExtension, Transaction};

use crate::art_rows::{delete_orphan_art, insert_art};
use crate::error::Result;
use crate::model::NewArt;
use crate::scan_write::insert_tags;

/// Replaces every value of `key` with `values` (none removes the key).
pub fn set_tag(tx: &Transaction<'_>, id: i64, key: &str, values: &[String]) -> Result<()> {
    tx.prepare_cached("DELETE FROM tags WHERE track_id = ?1 AND key = ?2")?
        .execute(params![id, key])?;
    add_tag(tx, id, key, values)
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
