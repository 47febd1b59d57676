//! `retagfs serve`.

use std::sync::Arc;

use retagfs_core::view::watch::Watcher;
use retagfs_core::{Mode, View};
use retagfs_http::{HttpOptions, TlsFiles};

use crate::args::ServeArgs;

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let mode: Mode = a.mode.into();
    a.remote.apply();
    let config = a.view.config(mode)?;
    crate::check_has_tracks(&a.db)?;
    let mut options = HttpOptions::new(a.listen);
    options.max_connections = a.max_connections;
    options.header_timeout = std::time::Duration::from_secs(a.header_timeout.max(1));
    options.auth_file = a.auth_file;
    options.tls = a
        .tls_cert
        .zip(a.tls_key)
        .map(|(cert, key)| TlsFiles { cert, key });
    warn_if_exposed(&options);
    a.metrics.start()?;
    let view = Arc::new(View::load(&a.db, config)?);
    crate::release_free_memory();
    let watcher = Watcher::spawn(view.clone(), &a.db, |_| {})?;
    let served = retagfs_http::serve(view, options);
    watcher.stop();
    served
}

/// Says what a listener beyond loopback exposes.
pub fn warn_if_exposed(options: &HttpOptions) {
    let listen = options.listen;
    if listen.ip().is_loopback() {
        return;
    }
    if options.auth_file.is_none() {
        tracing::warn!(
            "listening on {listen} without --auth-file: every machine that can reach it may read every \
             file of the view; use --listen 127.0.0.1:PORT to keep it on this machine, or --auth-file"
        );
    } else if options.tls.is_none() {
        tracing::warn!(
            "listening on {listen} with passwords over plain HTTP: they cross the network readable by \
             anyone on the way (and Windows refuses to send them); give --tls-cert and --tls-key, or put \
             a TLS reverse proxy in front"
        );
    }
}
