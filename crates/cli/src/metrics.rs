//! `--metrics` of `mount` and `serve`.

use crate::args::MetricsArgs;

impl MetricsArgs {
    /// Starts counting and serving the metrics when asked to: before the
    /// view loads, so that its gauges are set.
    pub fn start(&self) -> anyhow::Result<()> {
        let Some(listen) = self.metrics else {
            return Ok(());
        };
        if !listen.ip().is_loopback() {
            tracing::warn!(
                "--metrics {listen}: every machine that can reach it may read how the view is used; \
                 use 127.0.0.1:PORT unless monitoring runs on another machine"
            );
        }
        retagfs_http::spawn_metrics(listen)?;
        retagfs_metrics::enable();
        Ok(())
    }
}
