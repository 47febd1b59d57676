//! The view's state for `--metrics`: set after it loads and after each
//! refresh, so that a scrape reads gauges and takes no lock of the view.

use super::View;

impl View {
    /// Sets the gauges of what the view shows now.
    pub(super) fn note_metrics(&self) {
        let metrics = retagfs_metrics::metrics();
        metrics.view_tracks.set(self.tree().file_count() as i64);
        metrics.store_change.set(*self.seen_seq.lock());
        metrics.store_generation.set(self.pool.generation() as i64);
    }
}
