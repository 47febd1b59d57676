//! The one [`Remote`] a process reads objects through: set up by the
//! command from its flags (`--cache-dir`, `--cache-size`,
//! `--remote-deadline`), or with the defaults the first time a remote
//! track is read.

use std::sync::{Arc, OnceLock};

use retagfs_remote::{Remote, RemoteSettings};

static SHARED: OnceLock<Result<Arc<Remote>, String>> = OnceLock::new();

/// Sets up the process's remote with `settings`; an error when it cannot
/// be (the cache folder cannot be made), or when it was set up already.
pub fn configure_remote(settings: &RemoteSettings) -> anyhow::Result<Arc<Remote>> {
    let mut made = None;
    let shared = SHARED.get_or_init(|| {
        made = Some(());
        Remote::new(settings).map(Arc::new).map_err(|e| e.to_string())
    });
    if made.is_none() {
        anyhow::bail!("the remote was set up before its settings were given");
    }
    shared.clone().map_err(anyhow::Error::msg)
}

/// The process's remote, set up with the defaults if no command did.
pub fn shared_remote() -> std::io::Result<Arc<Remote>> {
    SHARED
        .get_or_init(|| {
            Remote::new(&RemoteSettings::default())
                .map(Arc::new)
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|why| {
            tracing::error!("cannot read remote objects: {why}");
            std::io::Error::from_raw_os_error(libc::EIO)
        })
}
