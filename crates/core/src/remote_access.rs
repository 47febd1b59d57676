//! The one [`Remote`] a process reads objects through, made the first
//! time an object is read (a mount of local files never makes one), with
//! the settings the command was given (`--cache-dir`, `--cache-size`,
//! `--remote-deadline`) or the defaults.

use std::sync::{Arc, OnceLock};

use retagfs_remote::{Remote, RemoteSettings};

static SETTINGS: OnceLock<RemoteSettings> = OnceLock::new();
static SHARED: OnceLock<Result<Arc<Remote>, String>> = OnceLock::new();

/// The settings the process's remote is made with; the first call wins.
pub fn set_remote_settings(settings: RemoteSettings) {
    let _ = SETTINGS.set(settings);
}

/// The process's remote, made now if it was not yet; the error says why it
/// cannot be (its cache folder cannot be made).
pub fn remote() -> anyhow::Result<Arc<Remote>> {
    SHARED
        .get_or_init(|| {
            let settings = SETTINGS.get_or_init(RemoteSettings::default);
            Remote::new(settings).map(Arc::new).map_err(|e| format!("{e:#}"))
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// [`remote`] for a read: the failure logged, EIO returned.
pub fn shared_remote() -> std::io::Result<Arc<Remote>> {
    remote().map_err(|why| {
        tracing::error!("cannot read objects: {why}");
        std::io::Error::from_raw_os_error(libc::EIO)
    })
}
