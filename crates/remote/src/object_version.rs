//! Which version of an object the scan read: what every later read asks
//! for (`If-Match`) and what the disk cache is keyed by.

use crate::ObjectUrl;

/// An object's version as its listing showed it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectVersion {
    /// The entity tag, as the server sent it (quotes included).
    pub etag: String,
    pub size: u64,
    /// Last modification, in nanoseconds since the epoch (0: not given).
    pub mtime_ns: i64,
}

/// An object found by a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    pub url: ObjectUrl,
    pub version: ObjectVersion,
}
