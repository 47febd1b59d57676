//! Pictures in the store: content-addressed rows written once.

use rusqlite::{params, Transaction};

use crate::error::Result;
use crate::model::NewArt;

/// Inserts an image unless one with the same content exists; returns its sha256.
pub fn insert_art(tx: &Transaction<'_>, art: &NewArt) -> Result<String> {
    let sha = hex::encode(art.sha256());
    insert_art_as(tx, art, &sha)?;
    Ok(sha)
}

/// Stores an image under its sha256 (`sha`, hex) unless it is there
/// already: an album's tracks share a cover, and binding its bytes copies
/// them even when the insert is ignored.
pub(crate) fn insert_art_as(tx: &Transaction<'_>, art: &NewArt, sha: &str) -> Result<()> {
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

pub(crate) fn art_exists(tx: &Transaction<'_>, sha: &str) -> Result<bool> {
    Ok(tx
        .prepare_cached("SELECT 1 FROM art WHERE sha256 = ?1")?
        .exists([sha])?)
}

/// Deletes art rows that no track links to and the edit journal does not
/// hold (an undo may link them again).
pub fn delete_orphan_art(tx: &Transaction<'_>) -> Result<usize> {
    Ok(tx.execute(
        "DELETE FROM art WHERE NOT EXISTS (SELECT 1 FROM track_art l WHERE l.art_sha256 = art.sha256) \
         AND NOT EXISTS (SELECT 1 FROM edit_art e WHERE e.art_sha256 = art.sha256)",
        [],
    )?)
}
