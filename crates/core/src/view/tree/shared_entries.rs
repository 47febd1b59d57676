//! Folders that hold the same entries share one map of them: an album's
//! folder is in each view that shows the album (`Artists/A/Album`,
//! `Albums/Album`, `Genres/Jazz/Album`...), the same files under the same
//! names. A change to one of them copies the map first
//! ([`Arc::make_mut`]), so that folder alone changes.
//!
//! A build shares them as it goes, never making the copies: a file's
//! places after its first follow that first place. A folder that held what
//! the first place's folder held before the file came takes the map that
//! folder has with it, and the file's name there.
//!
//! Folders that followed one another are twins once the tree is built, and
//! a file's place in a twin, under the name it has in its first place, is
//! not kept: [`Tree::places`] finds it (a folder that stopped following
//! still holds the files it had, and one that holds a file under another
//! name keeps that place). So views alike cost a folder each, not a place
//! per file.

use super::*;

/// A folder's entries.
pub(super) type Entries = Arc<BTreeMap<Name, u64>>;

/// Folders of more entries than this stop sharing them in a build: a
/// shared map is copied at each file its first folder takes, which a
/// large one (a flat view alike in two views) would make quadratic. Past
/// this, each folder copies the map once and grows its own.
const MOST_SHARED_ENTRIES: usize = 500;

/// A file's first place in a build, which its other places may follow.
pub(super) struct FirstPlace {
    /// Its folder.
    pub(super) dir: u64,
    stem: String,
    /// Its folder's entries before the file came.
    before: Before,
    /// Its folder's entries with the file.
    after: Entries,
}

/// What a first place's folder held before its file came, when another
/// folder may hold the same: nothing, or a map other folders share (held
/// here, so that no other map can take its address meanwhile).
enum Before {
    Nothing,
    Shared(Entries),
}

impl Tree {
    fn entries_of(&self, dir: u64) -> Option<&Entries> {
        match &self.nodes.get(&dir)?.entry {
            Entry::Dir { children, .. } => Some(children),
            _ => None,
        }
    }

    /// Places a file in folder `dir`, its first place in a build: what its
    /// next places may follow, if the folder held nothing or a map other
    /// folders share.
    pub(super) fn place_first(&mut self, dir: u64, stem: String, file: FileEntry) -> Option<FirstPlace> {
        let before = match self.entries_of(dir) {
            Some(entries) if entries.is_empty() => Some(Before::Nothing),
            Some(entries) if Arc::strong_count(entries) > 1 && entries.len() < MOST_SHARED_ENTRIES => {
                Some(Before::Shared(entries.clone()))
            }
            _ => None,
        };
        self.insert_file(dir, &stem, file)?;
        Some(FirstPlace {
            dir,
            stem,
            before: before?,
            after: self.entries_of(dir)?.clone(),
        })
    }

    /// Places `first`'s file in folder `dir` as in its first place's, if
    /// `dir` held what that folder held before the file came and the file
    /// has the same name here: whether it did (the place is not kept: the
    /// builder makes `dir` a twin of the first place's folder).
    pub(super) fn place_alike(&mut self, dir: u64, stem: &str, first: &FirstPlace) -> bool {
        let Some(entries) = self.entries_of(dir) else {
            return false;
        };
        let alike = match &first.before {
            Before::Nothing => entries.is_empty(),
            Before::Shared(before) => Arc::ptr_eq(entries, before),
        };
        if !alike || first.stem != stem {
            return false;
        }
        if let Some(Entry::Dir { children, .. }) = self.nodes.get_mut(&dir).map(|n| &mut n.entry) {
            *children = first.after.clone();
        }
        true
    }

    /// Makes each group of folders that followed one another twins: a
    /// ring of them, each folder pointing at the next.
    pub(super) fn set_twins(&mut self, followed: Followed) {
        for group in followed.groups() {
            let next = group.iter().skip(1).chain(group.first());
            for (folder, next) in group.iter().zip(next) {
                if let Some(Entry::Dir { next_twin, .. }) = self.nodes.get_mut(folder).map(|n| &mut n.entry) {
                    *next_twin = NonZeroU64::new(*next);
                }
            }
        }
    }

    fn next_twin(&self, folder: u64) -> Option<u64> {
        match self.nodes.get(&folder)?.entry {
            Entry::Dir { next_twin, .. } => next_twin.map(NonZeroU64::get),
            _ => None,
        }
    }

    /// The twins of `folder`, itself not among them.
    pub(super) fn twins_of(&self, folder: u64) -> impl Iterator<Item = u64> + '_ {
        let mut at = folder;
        std::iter::from_fn(move || {
            at = self.next_twin(at).filter(|&next| next != folder)?;
            Some(at)
        })
    }

    /// Takes folder `dir`, about to go, out of its ring of twins.
    pub(super) fn leave_twins(&mut self, dir: u64) {
        let Some(next) = self.next_twin(dir) else {
            return;
        };
        let before = self.twins_of(dir).last();
        if let Some(Entry::Dir { next_twin, .. }) =
            before.and_then(|b| self.nodes.get_mut(&b)).map(|n| &mut n.entry)
        {
            // A ring of two leaves one folder with no twin.
            *next_twin = NonZeroU64::new(next).filter(|next| Some(next.get()) != before);
        }
        if let Some(Entry::Dir { next_twin, .. }) = self.nodes.get_mut(&dir).map(|n| &mut n.entry) {
            *next_twin = None;
        }
    }
}

/// Folders joined when one followed another's first place: a forest of
/// each folder's parent in its group, the root standing for the group.
#[derive(Default)]
pub(super) struct Followed {
    parent: HashMap<u64, u64>,
}

impl Followed {
    /// The root of `folder`'s group, each folder on the way pointed at it.
    fn root(&mut self, folder: u64) -> u64 {
        let mut root = folder;
        while let Some(&up) = self.parent.get(&root).filter(|&&up| up != root) {
            root = up;
        }
        let mut at = folder;
        while at != root {
            at = self.parent.insert(at, root).unwrap_or(root);
        }
        root
    }

    /// Puts `follower`, which followed a first place in `first`, in
    /// `first`'s group.
    pub(super) fn join(&mut self, first: u64, follower: u64) {
        let (a, b) = (self.root(first), self.root(follower));
        if a != b {
            self.parent.insert(a, a);
            self.parent.insert(b, a);
        }
    }

    /// The groups, each in inode order.
    fn groups(mut self) -> Vec<Vec<u64>> {
        let folders: Vec<u64> = self.parent.keys().copied().collect();
        let mut groups: HashMap<u64, Vec<u64>> = HashMap::default();
        for folder in folders {
            let root = self.root(folder);
            groups.entry(root).or_default().push(folder);
        }
        (groups.into_values())
            .map(|mut group| {
                group.sort_unstable();
                group
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tree::tests::place;

    fn entries(tree: &Tree, path: &[&str]) -> Entries {
        let dir = path
            .iter()
            .fold(tree.root(), |dir, name| tree.child(dir, name).expect("a folder"));
        tree.entries_of(dir).expect("a folder").clone()
    }

    #[test]
    fn alike_folders_share_their_entries_until_one_changes() {
        let mut tree = Tree::build(vec![
            place(1, "Albums/Blue/01 a"),
            place(1, "Genres/Jazz/Blue/01 a"),
            place(1, "Genres/Soul/Blue/01 a"),
            place(2, "Albums/Blue/02 b"),
            place(2, "Genres/Jazz/Blue/02 b"),
            place(2, "Genres/Soul/Blue/02 b"),
            place(3, "Albums/Red/01 c"),
            place(3, "Flat/c"),
        ]);
        let albums = ["Albums", "Blue"];
        let (jazz, soul) = (["Genres", "Jazz", "Blue"], ["Genres", "Soul", "Blue"]);
        assert!(Arc::ptr_eq(&entries(&tree, &albums), &entries(&tree, &jazz)));
        assert!(Arc::ptr_eq(&entries(&tree, &albums), &entries(&tree, &soul)));
        assert!(!Arc::ptr_eq(
            &entries(&tree, &albums),
            &entries(&tree, &["Albums", "Red"])
        ));
        assert_eq!(tree.link_count(file_ino(2)), 3);
        // Track 2 leaves soul: that folder alone loses it.
        let mut out = Invalidations::default();
        let places = vec![place(2, "Albums/Blue/02 b"), place(2, "Genres/Jazz/Blue/02 b")];
        tree.replace(file_ino(2), places, &mut out);
        assert_eq!(entries(&tree, &albums).len(), 2);
        assert_eq!(entries(&tree, &soul).len(), 1);
        assert_eq!(
            tree.file_paths(),
            [
                "Albums/Blue/01 a.flac",
                "Albums/Blue/02 b.flac",
                "Albums/Red/01 c.flac",
                "Flat/c.flac",
                "Genres/Jazz/Blue/01 a.flac",
                "Genres/Jazz/Blue/02 b.flac",
                "Genres/Soul/Blue/01 a.flac"
            ]
        );
    }

    #[test]
    fn large_folders_stop_sharing_and_stay_alike() {
        let placements = (1..=MOST_SHARED_ENTRIES as i64 + 10)
            .flat_map(|id| [place(id, &format!("A/{id}")), place(id, &format!("B/{id}"))])
            .collect();
        let tree = Tree::build(placements);
        let (a, b) = (entries(&tree, &["A"]), entries(&tree, &["B"]));
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(a, b);
        assert_eq!(a.len(), MOST_SHARED_ENTRIES + 10);
    }

    /// A file's places as (folder path, name), in order.
    fn places_by_path(tree: &Tree, ino: u64) -> Vec<(Option<String>, String)> {
        let places = tree.places(ino).into_iter();
        let mut places: Vec<_> = places
            .map(|(parent, name)| (tree.path(parent), name.to_string()))
            .collect();
        places.sort();
        places
    }

    proptest::proptest! {
        /// A build, following first places, makes the tree that placing
        /// each track one by one makes.
        #[test]
        fn a_build_is_the_tree_of_its_places_one_by_one(
            tracks in proptest::collection::vec(
                proptest::collection::vec(("[ab]{1}", "[ab]{0,1}", "[xy ]{0,2}"), 1..4),
                1..30,
            )
        ) {
            let placements: Vec<Placement> = (tracks.iter().enumerate())
                .flat_map(|(i, places)| {
                    let id = i as i64 + 1;
                    places.iter().map(move |(top, mid, stem)| place(id, &format!("{top}/{mid}/{stem}")))
                })
                .collect();
            let built = Tree::build(placements.clone());
            let mut one_by_one = Tree::new();
            let mut by_track: Vec<Vec<Placement>> = Vec::new();
            for p in placements {
                match by_track.last_mut() {
                    Some(last) if last[0].file.track_id == p.file.track_id => last.push(p),
                    _ => by_track.push(vec![p]),
                }
            }
            for places in by_track {
                for p in places {
                    one_by_one.place(p);
                }
            }
            proptest::prop_assert_eq!(built.file_paths(), one_by_one.file_paths());
            for ino in (1..=tracks.len() as i64).map(file_ino) {
                proptest::prop_assert_eq!(places_by_path(&built, ino), places_by_path(&one_by_one, ino));
                proptest::prop_assert_eq!(built.path_of_place(ino, None), one_by_one.path_of_place(ino, None));
                proptest::prop_assert_eq!(built.link_count(ino), one_by_one.link_count(ino));
            }
        }
    }

    /// Where the folders' maps hold a file: (folder path, name), in order.
    fn entries_holding(tree: &Tree, ino: u64) -> Vec<(Option<String>, String)> {
        let mut held: Vec<_> = (tree.nodes.iter())
            .filter_map(|(folder, node)| match &node.entry {
                Entry::Dir { children, .. } => Some((folder, children)),
                _ => None,
            })
            .flat_map(|(folder, children)| {
                (children.iter())
                    .filter(|(_, held)| **held == ino)
                    .map(move |(name, _)| (tree.path(folder), name.to_string()))
            })
            .collect();
        held.sort();
        held
    }

    /// Placements of track `id` at `places` (top, folder, stem each).
    fn placements(id: i64, places: &[(String, String, String)]) -> Vec<Placement> {
        (places.iter())
            .map(|(top, mid, stem)| place(id, &format!("{top}/{mid}/{stem}")))
            .collect()
    }

    fn places_strategy() -> impl proptest::strategy::Strategy<Value = Vec<(String, String, String)>> {
        proptest::collection::vec(("[ab]{1}", "[ab]{0,1}", "[xy ]{0,2}"), 0..4)
    }

    proptest::proptest! {
        /// After any refreshes of a built tree, a file's places are where
        /// the folders hold it, twins or not, and its link count is theirs.
        #[test]
        fn refreshes_keep_every_place_of_a_file_found(
            tracks in proptest::collection::vec(places_strategy(), 1..20),
            changes in proptest::collection::vec((1..24i64, places_strategy()), 1..12),
        ) {
            let built = (tracks.iter().enumerate())
                .flat_map(|(i, places)| placements(i as i64 + 1, places))
                .collect();
            let mut tree = Tree::build(built);
            for (id, places) in changes {
                tree.replace(file_ino(id), placements(id, &places), &mut Invalidations::default());
                for ino in (1..24).map(file_ino) {
                    let held = entries_holding(&tree, ino);
                    proptest::prop_assert_eq!(places_by_path(&tree, ino), held.clone());
                    proptest::prop_assert_eq!(tree.link_count(ino), held.len());
                }
            }
        }
    }

    #[test]
    fn a_folder_that_differs_is_placed_in_on_its_own() {
        // Jazz holds a track Albums/Blue does not: the next ones go in alone.
        let tree = Tree::build(vec![
            place(1, "Genres/Jazz/Blue/00 intro"),
            place(2, "Albums/Blue/01 a"),
            place(2, "Genres/Jazz/Blue/01 a"),
        ]);
        let jazz = entries(&tree, &["Genres", "Jazz", "Blue"]);
        assert_eq!(jazz.len(), 2);
        assert_eq!(entries(&tree, &["Albums", "Blue"]).len(), 1);
    }
}
