//! Backing files that live in S3-compatible object stores.
//!
//! A remote track's backing path is `s3://BUCKET/KEY` ([`ObjectUrl`]); the
//! store records the object's version ([`ObjectVersion`]) when the scan
//! saw it. [`Remote`] lists buckets and reads byte ranges of one version,
//! within a deadline, through a bounded disk cache ([`BlockCache`]);
//! [`RemoteFile`] is one object read like a file, with read-ahead for
//! sequential readers. Every wait happens on the remote's own threads, so
//! a caller never waits longer than the deadline it was given.
//!
//! Endpoint, region and credentials come from the standard AWS variables
//! and files, never from the command line ([`connection`]).

mod block_buffer;
mod block_cache;
mod connection;
mod health;
mod object_url;
mod object_version;
mod remote;
mod remote_file;

pub use block_buffer::BlockBuffer;
pub use block_cache::{default_cache_dir, BlockCache, BLOCK};
pub use object_url::{is_remote_path, ObjectUrl};
pub use object_version::{ListedObject, ObjectVersion};
pub use remote::{Remote, RemoteSettings};
pub use remote_file::RemoteFile;
