//! The directory of each rendered folder path a build has met: the tracks
//! of a folder find it with one look-up, each place of a track placed
//! several times too. The paths are kept in one buffer: a string each,
//! freed when the build ends, would leave holes among the pages of the
//! tree built meanwhile (about 2 MiB of them at 100k tracks in five views).

use std::hash::BuildHasher;
use std::ops::Range;

use hashbrown::HashTable;

#[derive(Default)]
pub(super) struct FolderPaths {
    texts: String,
    /// (path in `texts`, its directory).
    table: HashTable<(Range<usize>, u64)>,
    hasher: foldhash::fast::RandomState,
}

impl FolderPaths {
    pub(super) fn get(&self, path: &str) -> Option<u64> {
        let texts = &self.texts;
        let same = |(held, _): &(Range<usize>, u64)| texts[held.clone()] == *path;
        self.table
            .find(self.hasher.hash_one(path), same)
            .map(|(_, dir)| *dir)
    }

    /// Notes the directory of `path`, not noted before.
    pub(super) fn insert(&mut self, path: &str, dir: u64) {
        let start = self.texts.len();
        self.texts.push_str(path);
        let (texts, hasher) = (&self.texts, &self.hasher);
        let rehash = |(held, _): &(Range<usize>, u64)| hasher.hash_one(&texts[held.clone()]);
        self.table
            .insert_unique(hasher.hash_one(path), (start..texts.len(), dir), rehash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_find_their_directories() {
        let mut paths = FolderPaths::default();
        for n in 0..1000u64 {
            paths.insert(&format!("Artists/A{n}/Album"), n);
        }
        assert_eq!(paths.get("Artists/A7/Album"), Some(7));
        assert_eq!(paths.get("Artists/A999/Album"), Some(999));
        assert_eq!(paths.get("Artists/A7"), None);
        assert_eq!(paths.get(""), None);
    }
}
