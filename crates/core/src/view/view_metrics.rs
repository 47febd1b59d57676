//! The view's state for `--metrics`: set after it loads and after each
//! refresh, so that a scrape reads gauges and takes no lock of the view.

use super::View;

impl View {
    /// Sets the gauges of what the view shows now.
    pub(super) fn note_metrics(&self) {
        retagfs_metrics::count(|m| {
            m.view_tracks.set(self.tree().file_count() as i64);
            m.store_change.set(*self.seen_seq.lock());
            m.store_generation.set(self.pool.generation() as i64);
        });
    }
}
