//! The retagfs store: a SQLite database that is the source of truth for
//! metadata (tags, art) and records what the scanner learned about each
//! backing file (format, audio byte range, stat stamps).
//!
//! The schema is a public, versioned contract (see `docs/store.md`); this
//! crate owns its migrations and the typed queries the rest of retagfs uses.
//! Reads are methods of [`Store`]; writes are functions over a transaction
//! from [`Store::write`], so a caller can batch many in one commit.

mod art_rows;
mod backup;
mod change_times;
mod edit;
mod edit_journal;
mod error;
mod explain_error;
mod model;
mod open;
mod path_table;
mod path_text;
mod read;
mod remote_objects;
mod scan_lock;
mod scan_write;
mod scanned_dirs;
mod sqlite_config;
mod vacuum;

pub use art_rows::{delete_orphan_art, insert_art};
pub use change_times::EditedTracks;
pub use edit::{add_tag, link_art, remove_art, set_art, set_tag};
pub use edit_journal::{undo_last_edit, EditJournal, LoggedEdit, EDITS_KEPT};
pub use error::{Result, StoreError};
pub use explain_error::explain_store_error;
pub use model::{
    ArtLink, BackingPart, Fingerprint, Format, NewArt, PartKind, ScannedPicture, ScannedTrack, Stamps,
    SynthesisRows, TrackBundle, TrackRow,
};
pub use open::{Store, SCHEMA_VERSION};
pub use path_table::{KnownStamps, PathTable};
pub use path_text::{bytes_to_text, path_to_text, text_for_display, text_to_path};
pub use read::{tags_of, PathMap};
pub use remote_objects::{set_remote_version, RemoteTrack};
pub use rusqlite::Transaction;
pub use scan_lock::{beside, ScanLock};
pub use scan_write::{
    add_scanned, forget_scanned_dir, forget_scanned_dirs_under, move_track, record_failure, remove_failure,
    remove_track, save_scanned_dir, tracks_with_fingerprint, trim_change_log, write_scanned, HeldPictures,
};
pub use scanned_dirs::{DirEntry, DirStamp, Entries, EntryKind, InvalidRecord, ScannedDir, ScannedDirs};
pub use sqlite_config::configure_sqlite;
pub use vacuum::Compacted;
