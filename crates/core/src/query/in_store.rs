//! A query's tracks in a store: the candidates SQL picks (see
//! [`super::prefilter`]), each tested whole.

use retagfs_store::{Store, TrackBundle};

use super::prefilter::Prefilter;
use super::{Query, QueryTrack};

impl Query {
    /// Calls `f` with each track of `store` that matches, in id order. Call
    /// inside [`Store::read_snapshot`] for one state of the store.
    pub fn for_each_match(&self, store: &Store, mut f: impl FnMut(TrackBundle)) -> retagfs_store::Result<()> {
        let Some(prefilter) = Prefilter::of(&self.alternatives) else {
            return store.for_each_track(|b| {
                if self.matches(&QueryTrack::of(&b)) {
                    f(b)
                }
            });
        };
        for id in prefilter.candidates(store.conn())? {
            if let Some(b) = store.track_bundle(id)? {
                if self.matches(&QueryTrack::of(&b)) {
                    f(b)
                }
            }
        }
        Ok(())
    }

    /// The ids of the tracks of `store` that match, in order.
    pub fn matching_ids(&self, store: &Store) -> retagfs_store::Result<Vec<i64>> {
        let mut ids = Vec::new();
        store.read_snapshot(|s| self.for_each_match(s, |b| ids.push(b.track.id)))?;
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use retagfs_store::Store;

    use crate::query::{Query, QueryTrack};

    const KEYS: &[&str] = &[
        "artist",
        "albumartist",
        "album",
        "title",
        "genre",
        "date",
        "year",
        "tracknumber",
    ];
    const VALUES: &[&str] = &[
        "Beyoncé",
        "beyonce",
        "Sigur Rós",
        "Jazz",
        "jazz soul",
        "",
        "1999",
        "2001-05-02",
        "3/12",
        "7",
        "ÀB",
    ];
    const QUERIES: &[&str] = &[
        "",
        "beyonce",
        "ros jazz",
        "genre:jazz",
        "genre:=Jazz",
        "genre:=",
        "genre::^j",
        "year:1999..2001",
        "year:2001",
        "year:..1999",
        "tracknumber:3..7",
        "-genre:jazz",
        "^artist:beyonce album:ab",
        "genre:soul , artist:sigur",
        "artist:beyonce , -title:b",
        "format:flac genre:jazz",
        "added:2000-01..",
        "path:music , year:2001",
        "\"sigur ros\"",
    ];

    /// A store holding tracks with these (key index, value index) tags.
    fn store_of(tracks: &[Vec<(usize, usize)>]) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        for (n, tags) in tracks.iter().enumerate() {
            store
                .conn()
                .execute(
                    "INSERT INTO tracks (backing_path, format, audio_offset, audio_length, file_size, \
                     mtime_ns, ctime_ns, scanned_at) VALUES (?1, 'flac', 0, 0, 0, 0, 0, 0)",
                    [format!("/music/{n}.flac")],
                )
                .unwrap();
            let id = store.conn().last_insert_rowid();
            for (position, &(k, v)) in tags.iter().enumerate() {
                store
                    .conn()
                    .execute(
                        "INSERT INTO tags (track_id, key, position, value) VALUES (?1, ?2, ?3, ?4)",
                        rusqlite::params![id, KEYS[k], position as i64, VALUES[v]],
                    )
                    .unwrap();
            }
        }
        (dir, store)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// The tracks picked through SQL are exactly those every track's
        /// whole test keeps.
        #[test]
        fn matches_in_a_store_are_those_of_the_whole_test(
            tracks in prop::collection::vec(
                prop::collection::vec((0..KEYS.len(), 0..VALUES.len()), 0..6), 1..12)
        ) {
            let (_dir, store) = store_of(&tracks);
            for text in QUERIES {
                let query = Query::parse(text, 1_790_000_000).unwrap();
                let mut expected = Vec::new();
                store.for_each_track(|b| if query.matches(&QueryTrack::of(&b)) { expected.push(b.track.id) }).unwrap();
                prop_assert_eq!(query.matching_ids(&store).unwrap(), expected, "{}", text);
            }
        }
    }
}
