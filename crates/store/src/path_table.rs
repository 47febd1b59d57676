//! Rows found by path, with every path in one buffer: a string per row was
//! a tenth of a re-scan (made, hashed into a map, freed). Holds the stamps
//! of every track and the record of every scanned folder.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use crate::model::Stamps;

/// Values found by path.
pub struct PathTable<T> {
    /// All paths, one after the other.
    paths: String,
    /// Where each row's path ends in `paths` (it starts where the previous
    /// one ends), and its value.
    rows: Vec<(usize, T)>,
    /// Row indices, hashed by path.
    by_path: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

impl<T> PathTable<T> {
    /// Room for `rows` rows whose paths take `path_bytes` in all.
    pub(crate) fn with_capacity(rows: usize, path_bytes: usize) -> PathTable<T> {
        PathTable {
            paths: String::with_capacity(path_bytes),
            rows: Vec::with_capacity(rows),
            by_path: HashTable::with_capacity(rows),
            hasher: Default::default(),
        }
    }

    /// Adds a row (paths are unique where these come from).
    pub(crate) fn push(&mut self, path: &str, value: T) {
        let index = u32::try_from(self.rows.len()).expect("fewer than 4 billion rows");
        self.paths.push_str(path);
        self.rows.push((self.paths.len(), value));
        let hash = self.hasher.hash_one(path);
        let (rows, paths, hasher) = (&self.rows, &self.paths, &self.hasher);
        self.by_path.insert_unique(hash, index, |&i| {
            hasher.hash_one(path_of(rows, paths, i as usize))
        });
    }

    /// The row index of `path`.
    pub fn find(&self, path: &str) -> Option<usize> {
        let hash = self.hasher.hash_one(path);
        self.by_path
            .find(hash, |&i| path_of(&self.rows, &self.paths, i as usize) == path)
            .map(|&i| i as usize)
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn path(&self, row: usize) -> &str {
        path_of(&self.rows, &self.paths, row)
    }

    pub fn value(&self, row: usize) -> &T {
        &self.rows[row].1
    }
}

fn path_of<'a, T>(rows: &[(usize, T)], paths: &'a str, row: usize) -> &'a str {
    let start = row.checked_sub(1).map_or(0, |previous| rows[previous].0);
    &paths[start..rows[row].0]
}

/// Every track's id and stamps, found by backing path, for a re-scan to
/// skip unchanged files.
pub struct KnownStamps(pub(crate) PathTable<(i64, Stamps)>);

impl KnownStamps {
    /// The row index of the track at `path`.
    pub fn find(&self, path: &str) -> Option<usize> {
        self.0.find(path)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn path(&self, row: usize) -> &str {
        self.0.path(row)
    }

    pub fn id(&self, row: usize) -> i64 {
        self.0.value(row).0
    }

    pub fn stamps(&self, row: usize) -> Stamps {
        self.0.value(row).1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_path_exactly() {
        let paths: Vec<String> = (0..5000).map(|i| format!("/music/{}/{i}.flac", i % 37)).collect();
        let mut table = PathTable::with_capacity(0, 0);
        for (i, p) in paths.iter().enumerate() {
            table.push(p, i * 3);
        }
        assert_eq!(table.len(), paths.len());
        for (i, p) in paths.iter().enumerate() {
            let row = table.find(p).unwrap();
            assert_eq!((table.path(row), *table.value(row)), (p.as_str(), i * 3));
        }
        for missing in [
            "",
            "/music",
            "/music/0/0.flac/",
            "/music/0/37.flacx",
            "/music/1/0.flac",
        ] {
            assert_eq!(table.find(missing), None, "{missing}");
        }
    }
}
