//! `retagfs serve`.

use std::sync::Arc;

use retagfs_core::view::watch::Watcher;
use retagfs_core::{Mode, View};
use retagfs_http::HttpOptions;

use crate::args::ServeArgs;

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let mode: Mode = a.mode.into();
    let config = a.view.config(mode)?;
    crate::check_has_tracks(&a.db)?;
    warn_if_exposed(a.listen);
    let view = Arc::new(View::load(&a.db, config)?);
    crate::release_free_memory();
    let watcher = Watcher::spawn(view.clone(), &a.db, |_| {})?;
    let mut options = HttpOptions::new(a.listen);
    options.max_connections = a.max_connections;
    options.header_timeout = std::time::Duration::from_secs(a.header_timeout.max(1));
    let served = retagfs_http::serve(view, options);
    watcher.stop();
    served
}

/// Says what a listener beyond loopback exposes.
pub fn warn_if_exposed(listen: std::net::SocketAddr) {
    if !listen.ip().is_loopback() {
        tracing::warn!(
            "listening on {listen}: every machine that can reach it may read every file of the view \
             (no authentication yet); use --listen 127.0.0.1:PORT to keep it on this machine"
        );
    }
}
