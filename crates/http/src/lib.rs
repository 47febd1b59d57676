//! The retagfs view served over HTTP: GET and HEAD of every file and
//! folder, byte-identical to what the FUSE mount serves, with ranges,
//! per-version validators, and listings for browsers, scripts and players;
//! WebDAV (PROPFIND) for file managers; HTTP Basic against an htpasswd
//! file, and HTTPS.
//! It stands on the view alone ([`retagfs_core::View`]), and follows the
//! store live as a mount does.

mod auth;
mod conditional;
mod file_response;
mod listing;
mod metrics_endpoint;
mod one_request;
mod open_files;
mod progress;
mod request_path;
mod route;
mod server;
mod tls;
mod webdav;
mod webdav_fs;

pub use file_response::{asked_ranges, Asked};
pub use metrics_endpoint::spawn_metrics;
pub use one_request::answer;
pub use request_path::{resolve, PathError};
pub use server::{serve, spawn, HttpOptions};
pub use tls::TlsFiles;
