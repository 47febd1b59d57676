//! The store's errors.

use crate::open::SCHEMA_VERSION;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Open { path: String, source: rusqlite::Error },
    #[error(
        "{path}: the store has schema version {found}, newer than this retagfs understands \
         ({SCHEMA_VERSION}); upgrade retagfs or use the binary that wrote it"
    )]
    TooNew { path: String, found: i64 },
    #[error("{path} is not a retagfs store (run `retagfs scan` to create one)")]
    NotAStore { path: String },
    #[error(
        "no track matches {0:?} (give a track id, the backing file's path or the file in a mounted view)"
    )]
    NoSuchTrack(String),
    #[error("no art with sha256 {0}")]
    NoSuchArt(String),
    #[error("track {track_id} links art {sha256} that the art table does not have")]
    MissingArt { track_id: i64, sha256: String },
    #[error("{path}: {source}")]
    Lock { path: String, source: std::io::Error },
    #[error(
        "{path} belongs to a store that is gone, and SQLite would read the new store through it, \
         but it cannot be removed ({source}): remove it, then scan again"
    )]
    Orphaned { path: String, source: std::io::Error },
    #[error(
        "the store holds a track with the largest id there is (9223372036854775807), so new \
         tracks cannot be numbered: give that track a smaller id"
    )]
    IdsUsedUp,
    #[error("cannot undo: {0}; nothing was changed")]
    Undo(String),
    #[error("cannot back up the store: {0}")]
    Backup(String),
    #[error("cannot compact the store: {0}")]
    Vacuum(String),
    /// SQLite's own error, said once: rusqlite's source (the code's text)
    /// repeats it in an error's chain.
    #[error("{0}")]
    Sql(rusqlite::Error),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError::Sql(e)
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;
