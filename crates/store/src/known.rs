//! The stat stamps of every track, looked up by backing path, for a
//! re-scan to skip unchanged files. The paths sit in one buffer: a string
//! per row was a tenth of a re-scan (made, hashed into a map, freed).

use std::hash::BuildHasher;

use hashbrown::HashTable;

use crate::model::Stamps;

/// Every track's id and stamps, found by backing path.
pub struct KnownStamps {
    /// All backing paths, one after the other.
    paths: String,
    rows: Vec<Row>,
    /// Row indices, hashed by path.
    by_path: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

struct Row {
    /// Where the path ends in `paths` (it starts where the previous ends).
    path_end: usize,
    id: i64,
    stamps: Stamps,
}

impl KnownStamps {
    /// Room for `rows` tracks whose paths take `path_bytes` in all.
    pub(crate) fn with_capacity(rows: usize, path_bytes: usize) -> KnownStamps {
        KnownStamps {
            paths: String::with_capacity(path_bytes),
            rows: Vec::with_capacity(rows),
            by_path: HashTable::with_capacity(rows),
            hasher: Default::default(),
        }
    }

    /// Adds a track (backing paths are unique in the store).
    pub(crate) fn push(&mut self, path: &str, id: i64, stamps: Stamps) {
        let index = u32::try_from(self.rows.len()).expect("fewer than 4 billion tracks");
        self.paths.push_str(path);
        self.rows.push(Row {
            path_end: self.paths.len(),
            id,
            stamps,
        });
        let hash = self.hasher.hash_one(path);
        let (rows, paths, hasher) = (&self.rows, &self.paths, &self.hasher);
        self.by_path.insert_unique(hash, index, |&i| {
            hasher.hash_one(path_of(rows, paths, i as usize))
        });
    }

    /// The row index of the track at `path`.
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

    pub fn id(&self, row: usize) -> i64 {
        self.rows[row].id
    }

    pub fn stamps(&self, row: usize) -> Stamps {
        self.rows[row].stamps
    }
}

fn path_of<'a>(rows: &[Row], paths: &'a str, row: usize) -> &'a str {
    let start = row.checked_sub(1).map_or(0, |previous| rows[previous].path_end);
    &paths[start..rows[row].path_end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamps(n: i64) -> Stamps {
        Stamps {
            size: n as u64,
            mtime_ns: n,
            ctime_ns: n,
        }
    }

    #[test]
    fn finds_every_path_exactly() {
        let paths: Vec<String> = (0..5000).map(|i| format!("/music/{}/{i}.flac", i % 37)).collect();
        let mut known = KnownStamps::with_capacity(0, 0);
        for (i, p) in paths.iter().enumerate() {
            known.push(p, i as i64 + 1, stamps(i as i64));
        }
        assert_eq!(known.len(), paths.len());
        for (i, p) in paths.iter().enumerate() {
            let row = known.find(p).unwrap();
            assert_eq!((known.path(row), known.id(row)), (p.as_str(), i as i64 + 1));
            assert_eq!(known.stamps(row), stamps(i as i64));
        }
        for missing in [
            "",
            "/music",
            "/music/0/0.flac/",
            "/music/0/37.flacx",
            "/music/1/0.flac",
        ] {
            assert_eq!(known.find(missing), None, "{missing}");
        }
    }
}
