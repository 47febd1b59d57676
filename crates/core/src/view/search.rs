//! Search by path: `MNT/.search/<QUERY>/` is a folder of the tracks that
//! match QUERY (docs/query.md), laid out as they are in the view, made when
//! a lookup names it and following the store's edits. `.search` is never
//! listed; a `/` in a query is written `%2F` (and a `%` before `2F` or
//! `25`, `%25`).
//!
//! Each search is a [`Tree`] of its own whose files are the view's files
//! (the same inodes), its folders numbered in a range of its own. At most
//! [`MAX_SEARCHES`] searches holding [`MAX_SEARCH_FILES`] files live at
//! once; the least recently used go first.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::tree::{file_ino, Entry, Invalidations, Placement, Tree, SEARCH_INO_BASE};
use crate::query::{Query, QueryError};

/// The folder searches are made in, at the view's root.
pub const SEARCH_DIR_NAME: &str = ".search";
/// Its inode: the first of the searches' range.
pub const SEARCH_DIR_INO: u64 = SEARCH_INO_BASE;
/// A search's inodes: `SEARCH_INO_BASE + (id << ID_SHIFT) + n`.
const ID_SHIFT: u32 = 36;
/// The end of the searches' inodes (directory inodes start there).
const SEARCH_INO_END: u64 = 1 << 62;
/// How long the kernel may cache what it learns of searches: a search is
/// dropped without telling it, and its results change with every edit.
pub const SEARCH_TTL: std::time::Duration = std::time::Duration::from_secs(1);
/// Searches kept at once.
pub const MAX_SEARCHES: usize = 32;
/// Files all searches hold together, at most: a search matching more holds
/// the first this many (by track id).
pub const MAX_SEARCH_FILES: usize = 200_000;

/// Whether an inode is `.search` or in a search.
pub fn is_search_ino(ino: u64) -> bool {
    (SEARCH_INO_BASE..SEARCH_INO_END).contains(&ino)
}

/// The query a search folder's name stands for: `%2F` is `/`, `%25` is `%`.
pub fn query_of_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at + 1..at + 3);
        match escape {
            Some(e) if e.eq_ignore_ascii_case("2f") => out.push('/'),
            Some("25") => out.push('%'),
            _ => {
                out.push('%');
                rest = &rest[at + 1..];
                continue;
            }
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    out
}

/// The searches of one view.
pub struct Searches {
    enabled: std::sync::atomic::AtomicBool,
    live: Mutex<Live>,
}

#[derive(Default)]
struct Live {
    by_id: HashMap<u64, Search>,
    next_id: u64,
    clock: u64,
}

struct Search {
    name: String,
    query: Arc<Query>,
    tree: Arc<Tree>,
    used: u64,
}

impl Live {
    fn files(&self) -> usize {
        self.by_id.values().map(|s| s.tree.file_count()).sum()
    }

    /// Drops the least recently used searches (never `keep`) until the
    /// bounds hold.
    fn evict(&mut self, keep: u64) {
        while self.by_id.len() > MAX_SEARCHES || self.files() > MAX_SEARCH_FILES {
            let oldest = self
                .by_id
                .iter()
                .filter(|(id, _)| **id != keep)
                .min_by_key(|(_, s)| s.used)
                .map(|(id, _)| *id);
            let Some(oldest) = oldest else { break };
            self.by_id.remove(&oldest);
        }
    }
}

impl Searches {
    pub fn new(enabled: bool) -> Searches {
        Searches {
            enabled: enabled.into(),
            live: Mutex::new(Live {
                next_id: 1,
                ..Live::default()
            }),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Turns searches on or off (`--no-search`); off drops them all.
    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, std::sync::atomic::Ordering::Relaxed);
        if !enabled {
            self.clear();
        }
    }

    /// The tree of the search an inode is in (not `.search` itself).
    pub fn tree_of(&self, ino: u64) -> Option<Arc<Tree>> {
        if !is_search_ino(ino) || ino == SEARCH_DIR_INO {
            return None;
        }
        let id = (ino - SEARCH_INO_BASE) >> ID_SHIFT;
        let mut live = self.live.lock();
        live.clock += 1;
        let clock = live.clock;
        let search = live.by_id.get_mut(&id)?;
        search.used = clock;
        Some(search.tree.clone())
    }

    /// The search a folder name in `.search` stands for: the live one of
    /// that name, or a new one of the tracks `matching` finds for its
    /// query, placed where `placed` says (in the view's tree).
    pub fn open(
        &self,
        name: &str,
        matching: impl FnOnce(&Query) -> anyhow::Result<Vec<i64>>,
        placed: impl Fn(i64) -> Option<Placement>,
    ) -> Result<Arc<Tree>, SearchError> {
        if !self.enabled() {
            return Err(SearchError::Off);
        }
        {
            let mut live = self.live.lock();
            live.clock += 1;
            let clock = live.clock;
            if let Some(search) = live.by_id.values_mut().find(|s| s.name == name) {
                search.used = clock;
                return Ok(search.tree.clone());
            }
        }
        let text = query_of_name(name);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let query = Query::parse(&text, now).map_err(|e| SearchError::Query(text.clone(), e))?;
        let mut ids = matching(&query).map_err(SearchError::Store)?;
        if ids.len() > MAX_SEARCH_FILES {
            tracing::warn!(
                "search {text:?}: {} tracks match; the first {MAX_SEARCH_FILES} are shown",
                ids.len()
            );
            ids.truncate(MAX_SEARCH_FILES);
        }
        let mut live = self.live.lock();
        if SEARCH_INO_BASE + ((live.next_id + 1) << ID_SHIFT) >= SEARCH_INO_END {
            // Ids ran out (tens of millions of searches): numbered anew.
            live.by_id.clear();
            live.next_id = 1;
        }
        let id = live.next_id;
        live.next_id += 1;
        let root = SEARCH_INO_BASE + (id << ID_SHIFT);
        let mut tree = Tree::with_root(root, SEARCH_DIR_INO, root + 1);
        for placement in ids.into_iter().filter_map(placed) {
            tree.place(placement);
        }
        let tree = Arc::new(tree);
        live.clock += 1;
        let used = live.clock;
        live.by_id.insert(
            id,
            Search {
                name: name.to_string(),
                query: Arc::new(query),
                tree: tree.clone(),
                used,
            },
        );
        live.evict(id);
        Ok(tree)
    }

    /// The queries of the live searches, to test changed tracks against.
    pub fn queries(&self) -> Vec<(u64, Arc<Query>)> {
        let live = self.live.lock();
        live.by_id.iter().map(|(id, s)| (*id, s.query.clone())).collect()
    }

    /// Follows changed tracks: `changed` holds each changed track with the
    /// searches (of [`Searches::queries`]) it now matches; `placed` says
    /// where a track is in the view's tree.
    pub fn follow(&self, changed: &[(i64, Vec<u64>)], placed: impl Fn(i64) -> Option<Placement>) {
        let mut live = self.live.lock();
        for (id, search) in live.by_id.iter_mut() {
            let tree = Arc::make_mut(&mut search.tree);
            // The kernel is not told: what it caches of a search lives
            // [`SEARCH_TTL`]. Folders whose entries changed get a new
            // mtime, which makes it list them again.
            let mut changes = Invalidations::default();
            for (track, matched) in changed {
                let placement = matched.contains(id).then(|| placed(*track)).flatten();
                tree.replace(file_ino(*track), placement.into_iter().collect(), &mut changes);
            }
            tree.note_listing_changes(&changes, None);
        }
    }

    /// Drops every search (the view was built anew).
    pub fn clear(&self) {
        self.live.lock().by_id.clear();
    }
}

/// Why a search folder cannot be made.
#[derive(Debug)]
pub enum SearchError {
    /// The mount was told `--no-search`.
    Off,
    /// The folder's name is no query: the query and why.
    Query(String, QueryError),
    Store(anyhow::Error),
}

impl std::fmt::Display for SearchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SearchError::Off => write!(f, "searches are off (--no-search)"),
            SearchError::Query(text, e) => write!(f, "invalid query {text:?}: {e}"),
            SearchError::Store(e) => write!(f, "reading the store: {e:#}"),
        }
    }
}

/// Where a track is in `tree` (the view's), as a placement for a search's
/// tree: the same folders and the same (unique) name.
pub fn placement_in(tree: &Tree, track_id: i64) -> Option<Placement> {
    let ino = file_ino(track_id);
    let Entry::File(file) = &tree.get(ino)?.entry else {
        return None;
    };
    let path = tree.path(ino)?;
    let stem = path.strip_suffix(file.extension())?.strip_suffix('.')?;
    Some(Placement {
        path: stem.to_string(),
        file: file.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slash_is_written_as_percent_2f() {
        assert_eq!(query_of_name("path::^Rock%2FJazz"), "path::^Rock/Jazz");
        assert_eq!(query_of_name("a%2fb %25 c%20d%"), "a/b % c%20d%");
        assert_eq!(query_of_name("100%"), "100%");
    }

    fn placed(id: i64) -> Option<Placement> {
        Some(Placement {
            path: format!("Artist {}/Song {id}", id % 3),
            file: crate::view::tree::FileEntry {
                track_id: id,
                format: retagfs_store::Format::Flac,
                name_extension: crate::view::tree::NameExtension::OfFormat,
                size: 100,
                mtime_ns: 0,
                content_version: 1,
                cover: None,
            },
        })
    }

    #[test]
    fn searches_are_bounded_and_the_least_recently_used_go_first() {
        let searches = Searches::new(true);
        let first = searches.open("title:a", |_| Ok(vec![1, 2, 3]), placed).unwrap();
        assert_eq!(first.file_count(), 3);
        for n in 0..MAX_SEARCHES * 2 {
            searches
                .open(&format!("title:{n}"), |_| Ok(vec![4]), placed)
                .unwrap();
            // Kept in use: never the one dropped.
            assert!(searches.tree_of(first.root()).is_some());
        }
        assert_eq!(searches.live.lock().by_id.len(), MAX_SEARCHES);
        let made = |q: &Query| -> anyhow::Result<Vec<i64>> { panic!("{q:?} made again") };
        searches.open("title:a", made, placed).unwrap();
        assert!(searches.open("title::(", |_| Ok(vec![]), placed).is_err());
    }

    #[test]
    fn a_search_follows_the_tracks_that_changed() {
        let searches = Searches::new(true);
        let tree = searches.open("genre:jazz", |_| Ok(vec![1, 2]), placed).unwrap();
        let id = (tree.root() - SEARCH_INO_BASE) >> ID_SHIFT;
        searches.follow(&[(2, vec![]), (5, vec![id])], placed);
        let tree = searches.tree_of(tree.root()).unwrap();
        let mut paths = tree.file_paths();
        paths.sort();
        assert_eq!(paths, ["Artist 1/Song 1.flac", "Artist 2/Song 5.flac"]);
    }

    #[test]
    fn search_inodes_stay_between_files_and_directories() {
        assert!(!is_search_ino(file_ino(1_000_000)));
        assert!(is_search_ino(SEARCH_DIR_INO));
        assert!(is_search_ino(SEARCH_INO_BASE + (5 << ID_SHIFT) + 3));
        assert!(!is_search_ino(1 << 62));
    }
}
