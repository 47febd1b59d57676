//! The kernel's read-ahead on the mount. It gives a FUSE mount 128 KiB, so
//! a stream read through the daemon (a file whose tags changed, a remote
//! object) costs a round trip per 128 KiB. Raised to the largest request
//! the mount takes, each round trip carries up to 1 MiB. Only the mount's
//! own setting changes, and it goes with the mount.

use std::path::Path;

use crate::mounted::device_at;

/// Sets the read-ahead of the mount at `mountpoint` to `bytes` where this
/// user may (root; others keep the kernel's).
pub(crate) fn widen(mountpoint: &Path, bytes: usize) {
    let Some(device) = device_at(mountpoint) else {
        return;
    };
    let setting = format!("/sys/class/bdi/{device}/read_ahead_kb");
    match std::fs::write(&setting, (bytes / 1024).to_string()) {
        Ok(()) => tracing::debug!("read-ahead of the mount: {} KiB ({setting})", bytes / 1024),
        Err(e) => tracing::debug!("read-ahead of the mount left to the kernel: {setting}: {e}"),
    }
}
