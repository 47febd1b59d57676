//! The retagfs store: a SQLite database that is the source of truth for
//! metadata (tags, art) and records what the scanner learned about each
//! backing file (format, audio byte range, stat stamps).
//!
//! The schema is a public, versioned contract (see `docs/store.md`); this
//! crate owns its migrations and the typed queries the rest of retagfs uses.
//! Reads are methods of [`Store`]; writes are functions over a transaction
//! from [`Store::write`], so a caller can batch many in one commit.

mod change_times;
mod model;
mod path_table;
mod path_text;
mod read;
mod scanned_dirs;

pub use change_times::EditedTracks;
pub use model::{
    ArtLink, BackingPart, Fingerprint, Format, NewArt, PartKind, ScannedPicture, ScannedTrack, Stamps,
    SynthesisRows, TrackBundle, TrackRow,
};
pub use path_table::{KnownStamps, PathTable};
pub use path_text::{bytes_to_text, path_to_text, text_for_display, text_to_path};
pub use read::{
    add_scanned, add_tag, beside, configure_sqlite, delete_orphan_art, forget_scanned_dir,
    forget_scanned_dirs_under, insert_art, link_art, move_track, record_failure, remove_art, remove_failure,
    remove_track, save_scanned_dir, set_art, set_tag, storage_hint, tracks_with_fingerprint, trim_change_log,
    write_scanned, HeldPictures, PathMap, Result, ScanLock, Store, StoreError, SCHEMA_VERSION,
};
pub use rusqlite::Transaction;
pub use scanned_dirs::{DirEntry, DirStamp, Entries, EntryKind, InvalidRecord, ScannedDir, ScannedDirs};
