//! Tracks whose backing file is an object in an S3-compatible store
//! (`backing_path` `s3://BUCKET/KEY`), and the version of the object the
//! scan read (docs/store.md, "Remote backing files").

use rusqlite::{params, OptionalExtension, Transaction};

use crate::error::Result;
use crate::open::Store;
use crate::read::text;

/// A remote track as a re-scan compares it with a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteTrack {
    pub id: i64,
    pub backing_path: String,
    pub size: u64,
    pub mtime_ns: i64,
    /// None for a row another tool wrote without one, or not probed since
    /// version 13 (no duration): probed again.
    pub etag: Option<String>,
}

/// Where remote backing paths sort: between these two strings.
const REMOTE_PATHS: (&str, &str) = ("s3://", "s3:/0");

impl Store {
    /// Every remote track, by backing path.
    pub fn remote_tracks(&self) -> Result<Vec<RemoteTrack>> {
        if self.schema_version() < 10 {
            return Ok(Vec::new());
        }
        let mut stmt = self.conn().prepare_cached(
            "SELECT t.id, t.backing_path, t.file_size, t.mtime_ns,
                    CASE WHEN t.duration_ms IS NULL THEN NULL ELSE o.etag END
               FROM tracks t LEFT JOIN remote_objects o ON o.track_id = t.id
              WHERE t.backing_path >= ?1 AND t.backing_path < ?2
              ORDER BY t.backing_path",
        )?;
        let rows = stmt.query_map([REMOTE_PATHS.0, REMOTE_PATHS.1], |r| {
            let id = r.get(0)?;
            Ok(RemoteTrack {
                id,
                backing_path: text(r, 1, id)?,
                size: r.get::<_, i64>(2)?.max(0) as u64,
                mtime_ns: r.get(3)?,
                etag: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Whether any track's backing file is an object (a look at one row
    /// of the path index).
    pub fn has_remote_tracks(&self) -> Result<bool> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT 1 FROM tracks WHERE backing_path >= ?1 AND backing_path < ?2 LIMIT 1")?;
        Ok(stmt.exists([REMOTE_PATHS.0, REMOTE_PATHS.1])?)
    }

    /// The version (ETag) of a remote track's object that the scan read.
    pub fn remote_etag(&self, track_id: i64) -> Result<Option<String>> {
        if self.schema_version() < 10 {
            return Ok(None);
        }
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT etag FROM remote_objects WHERE track_id = ?1")?;
        Ok(stmt.query_row([track_id], |r| r.get(0)).optional()?)
    }
}

/// Records the version of a remote track's object that the scan read.
pub fn set_remote_version(tx: &Transaction<'_>, track_id: i64, etag: &str) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO remote_objects (track_id, etag) VALUES (?1, ?2) \
         ON CONFLICT (track_id) DO UPDATE SET etag = excluded.etag WHERE etag <> excluded.etag",
    )?
    .execute(params![track_id, etag])?;
    Ok(())
}
