//! The layouts of recently opened files, so that opening a file again
//! needs neither the store nor synthesis.

use super::*;

/// Recently opened tracks by (track, content version): their row and the
/// layout of the served file. Opening the same file again, or many readers
/// of one file, need neither the store nor synthesis. A refresh evicts the
/// tracks it saw change (a move changes the row, not the version). Bounded
/// by the bytes the layouts hold.
#[derive(Default)]
pub(super) struct OpenCache {
    entries: Mutex<CachedTracks>,
}

/// Track id -> (row, layout), and the bytes they hold.
#[derive(Default)]
pub(super) struct CachedTracks(HashMap<i64, (TrackRow, Arc<Layout>)>, usize);

/// Memory the open cache may hold (generated headers, MP4 `moov`s).
pub(super) const OPEN_CACHE_BYTES: usize = 16 << 20;
/// Tracks the open cache may hold: room for the files warmed ahead of a
/// walk many times over, not for every file of a library. Holding every
/// small file an indexer opened doubled the daemon's memory and sped
/// nothing up: each is opened once (docs/benchmarks.md, memory).
pub(super) const OPEN_CACHE_TRACKS: usize = 4096;

pub(super) fn cached_bytes(track: &TrackRow, layout: &Layout) -> usize {
    layout.heap_bytes() + track.backing_path.len() + 256
}

impl OpenCache {
    pub(super) fn get(&self, track_id: i64, version: i64) -> Option<(TrackRow, Arc<Layout>)> {
        let entries = self.entries.lock();
        match entries.0.get(&track_id) {
            Some((track, layout)) if track.content_version == version => {
                Some((track.clone(), layout.clone()))
            }
            _ => None,
        }
    }

    pub(super) fn put(&self, track: &TrackRow, layout: Arc<Layout>) {
        let mut entries = self.entries.lock();
        let size = cached_bytes(track, &layout);
        if entries.1 + size > OPEN_CACHE_BYTES || entries.0.len() >= OPEN_CACHE_TRACKS {
            // Simple and bounded: start over rather than track recency.
            entries.0.clear();
            entries.1 = 0;
        }
        if let Some((t, l)) = entries.0.insert(track.id, (track.clone(), layout)) {
            entries.1 = entries.1.saturating_sub(cached_bytes(&t, &l));
        }
        entries.1 += size;
    }

    pub(super) fn evict(&self, track_ids: impl IntoIterator<Item = i64>) {
        let mut entries = self.entries.lock();
        for id in track_ids {
            if let Some((t, l)) = entries.0.remove(&id) {
                entries.1 = entries.1.saturating_sub(cached_bytes(&t, &l));
            }
        }
    }

    pub(super) fn clear(&self) {
        let mut entries = self.entries.lock();
        entries.0.clear();
        entries.1 = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retagfs_store::Stamps;

    #[test]
    fn the_open_cache_holds_a_bounded_number_of_small_files() {
        let cache = OpenCache::default();
        let layout = Arc::new(Layout::passthrough(1000));
        for id in 0..(OPEN_CACHE_TRACKS as i64 + 10) {
            let track = TrackRow {
                id,
                backing_path: format!("/m/{id}.flac"),
                audio_length: 1000,
                stamps: Stamps {
                    size: 1000,
                    mtime_ns: 0,
                    ctime_ns: 0,
                },
                content_version: 1,
                ..crate::view::no_track()
            };
            cache.put(&track, layout.clone());
            assert!(cache.get(id, 1).is_some(), "the file just put is held");
        }
        let held = cache.entries.lock().0.len();
        assert!(held <= OPEN_CACHE_TRACKS, "{held} files held");
    }
}
