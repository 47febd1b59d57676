//! The tracks a playlist's query matched, cut to what the playlist writes
//! (duration, title, artist) and sorts by as soon as they are read, their
//! texts in one buffer. A load finds every playlist's tracks while the
//! tree grows: whole rows and tags kept meanwhile, each in allocations of
//! its own, would leave holes among the tree's once freed.

use std::ops::Range;

use retagfs_store::TrackBundle;

use crate::view::playlists::PlaylistSpec;

#[derive(Debug, Default)]
pub(super) struct FoundTracks {
    tracks: Vec<FoundTrack>,
    /// The values of the playlist's sort keys, each track's one after
    /// another; None for `path`, known once the track's place is.
    values: Vec<Option<Range<usize>>>,
    texts: String,
}

#[derive(Debug)]
pub(super) struct FoundTrack {
    pub id: i64,
    pub duration_ms: Option<u64>,
    title: Option<Range<usize>>,
    artist: Option<Range<usize>>,
}

impl FoundTracks {
    /// Adds track `b`, which `spec`'s query matched.
    pub(super) fn push(&mut self, spec: &PlaylistSpec, b: &TrackBundle) {
        let tag = |key: &str| b.tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        let title = tag("title").map(|title| self.keep(title));
        let artist = tag("artist")
            .or_else(|| tag("albumartist"))
            .map(|artist| self.keep(artist));
        self.tracks.push(FoundTrack {
            id: b.track.id,
            duration_ms: b.track.duration_ms,
            title,
            artist,
        });
        for key in &spec.sort {
            let value = match key.field.as_str() {
                "added" => Some(self.keep(&b.track.added_at.to_string())),
                "duration" => Some(self.keep(&b.track.duration_ms.unwrap_or(0).to_string())),
                "path" => None,
                field => Some(self.keep(tag(field).unwrap_or_default())),
            };
            self.values.push(value);
        }
    }

    /// Adds the tracks of `other`, found for the same playlist.
    pub(super) fn append(&mut self, other: FoundTracks) {
        let base = self.texts.len();
        let moved = |r: Range<usize>| r.start + base..r.end + base;
        self.texts.push_str(&other.texts);
        self.tracks.extend(other.tracks.into_iter().map(|t| FoundTrack {
            title: t.title.map(moved),
            artist: t.artist.map(moved),
            ..t
        }));
        (self.values).extend(other.values.into_iter().map(|v| v.map(moved)));
    }

    fn keep(&mut self, text: &str) -> Range<usize> {
        let start = self.texts.len();
        self.texts.push_str(text);
        start..self.texts.len()
    }

    pub(super) fn tracks(&self) -> &[FoundTrack] {
        &self.tracks
    }

    pub(super) fn title(&self, track: &FoundTrack) -> Option<&str> {
        track.title.clone().map(|r| &self.texts[r])
    }

    pub(super) fn artist(&self, track: &FoundTrack) -> Option<&str> {
        track.artist.clone().map(|r| &self.texts[r])
    }

    /// The values of the `keys` sort keys of the track at `index` (None
    /// for `path`).
    pub(super) fn values(&self, index: usize, keys: usize) -> impl Iterator<Item = Option<&str>> {
        (self.values[index * keys..(index + 1) * keys].iter()).map(|v| v.clone().map(|r| &self.texts[r]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::Query;
    use crate::view::no_track;
    use crate::view::playlists::SortKey;
    use std::sync::Arc;

    fn bundle(id: i64, tags: &[(&str, &str)]) -> TrackBundle {
        TrackBundle {
            track: retagfs_store::TrackRow { id, ..no_track() },
            tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            art: Vec::new(),
            flac_block_lens: Vec::new(),
            parts: Vec::new(),
        }
    }

    #[test]
    fn appended_tracks_keep_their_texts_and_values() {
        let spec = PlaylistSpec {
            name: "p".into(),
            query: Arc::new(Query::parse("title:One", 0).unwrap()),
            sort: ["Album", "path"]
                .iter()
                .map(|k| SortKey::parse(k).unwrap())
                .collect(),
        };
        let mut all = FoundTracks::default();
        all.push(&spec, &bundle(1, &[("title", "One"), ("album", "Zed")]));
        let mut batch = FoundTracks::default();
        batch.push(&spec, &bundle(2, &[("albumartist", "AA"), ("album", "10")]));
        all.append(batch);
        let [one, two] = all.tracks() else {
            panic!("two tracks")
        };
        assert_eq!((all.title(one), all.artist(one)), (Some("One"), None));
        assert_eq!((all.title(two), all.artist(two)), (None, Some("AA")));
        assert_eq!(all.values(0, 2).collect::<Vec<_>>(), [Some("Zed"), None]);
        assert_eq!(all.values(1, 2).collect::<Vec<_>>(), [Some("10"), None]);
    }
}
