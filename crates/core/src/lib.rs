//! The core of retagfs: the scan pipeline, path templates, the virtual tree
//! and the library that resolves and reads served files. Everything the
//! FUSE adapter does is a call into this crate, testable without a mount.

mod failure_log;
pub mod fs_kind;
pub mod import;
pub mod query;
mod remote_access;
pub mod scan;
pub mod view;

use std::os::unix::fs::MetadataExt;

pub use remote_access::{remote, set_remote_settings, shared_remote};
pub use retagfs_store::Stamps;
pub use view::template::{Fallbacks, Template, TemplateError, DEFAULT_TEMPLATE};
pub use view::{load_tree, Mode, OpenFile, ReadAheadMode, Refresh, TrackFields, View, ViewConfig};

/// The stat stamps that tell whether a file changed.
pub fn stamps(meta: &std::fs::Metadata) -> Stamps {
    Stamps {
        size: meta.len(),
        mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
    }
}
