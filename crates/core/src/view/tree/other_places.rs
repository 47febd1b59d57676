//! The places of files besides their first (which their nodes hold), those
//! twins of their folders do not give them ([`super::shared_entries`]).
//! A file mostly has one such place at most (a flat view names it its own
//! way): that one is kept apart, with no list of its own, and only the
//! places after it in a list.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::nodes::Nodes;
use super::*;

/// A place: (folder, name).
type Place = (u64, Name);

#[derive(Debug, Clone, Default)]
pub(super) struct OtherPlaces {
    /// (the file's slot among the nodes, its folder's slot, its name
    /// there): a file's second place, in 16 bytes rather than the 24 of
    /// an inode and a place.
    second: HashTable<(u32, u32, Name)>,
    more: HashMap<u64, ThinVec<Place>>,
    hasher: foldhash::fast::RandomState,
}

impl OtherPlaces {
    fn second_of(&self, nodes: &Nodes, ino: u64) -> Option<&(u32, u32, Name)> {
        let slot = nodes.slot_of(ino)?;
        self.second
            .find(self.hasher.hash_one(slot), |(held, _, _)| *held == slot)
    }

    /// Adds a place of file `ino` (a node of `nodes`), after those it has.
    pub(super) fn push(&mut self, nodes: &Nodes, ino: u64, (folder, name): Place) {
        if self.second_of(nodes, ino).is_some() {
            self.more.entry(ino).or_default().push((folder, name));
            return;
        }
        let (Some(slot), Some(folder_slot)) = (nodes.slot_of(ino), nodes.slot_of(folder)) else {
            return;
        };
        let hasher = &self.hasher;
        let rehash = |(slot, _, _): &(u32, u32, Name)| hasher.hash_one(*slot);
        self.second
            .insert_unique(hasher.hash_one(slot), (slot, folder_slot, name), rehash);
    }

    /// File `ino`'s places, in the order they were added.
    pub(super) fn of<'a>(&'a self, nodes: &'a Nodes, ino: u64) -> impl Iterator<Item = (u64, &'a Name)> + 'a {
        let second = (self.second_of(nodes, ino).into_iter())
            .filter_map(|(_, folder, name)| Some((nodes.ino_at(*folder)?, name)));
        second.chain(
            self.more
                .get(&ino)
                .into_iter()
                .flatten()
                .map(|(folder, name)| (*folder, name)),
        )
    }

    /// Whether file `ino` has a place kept here.
    pub(super) fn any(&self, nodes: &Nodes, ino: u64) -> bool {
        self.second_of(nodes, ino).is_some()
    }

    /// Forgets file `ino`'s places (before its node goes).
    pub(super) fn remove(&mut self, nodes: &Nodes, ino: u64) {
        if let Some(slot) = nodes.slot_of(ino) {
            let found = self
                .second
                .find_entry(self.hasher.hash_one(slot), |(held, _, _)| *held == slot);
            if let Ok(entry) = found {
                entry.remove();
            }
        }
        self.more.remove(&ino);
    }

    /// Lets the lists go of the room they grew (after a build: places are
    /// added one by one after it).
    pub(super) fn shrink(&mut self) {
        for places in self.more.values_mut() {
            places.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tree::tests::place;

    #[test]
    fn places_come_back_in_the_order_they_were_added() {
        let mut nodes = Nodes::default();
        let folder = |ino: u64| Node {
            parent: ROOT_INO,
            name: Name::from("f"),
            entry: Entry::empty_dir(ino),
        };
        let file = |id: i64| Node {
            parent: ROOT_INO,
            name: Name::from("x"),
            entry: Entry::File(place(id, "x").file),
        };
        for ino in [10, 11, 12] {
            nodes.insert(ino, folder(ino));
        }
        nodes.insert(file_ino(7), file(7));
        nodes.insert(file_ino(8), file(8));
        let mut places = OtherPlaces::default();
        for (folder, name) in [(10, "a"), (11, "b"), (12, "c")] {
            places.push(&nodes, file_ino(7), (folder, Name::from(name)));
        }
        places.push(&nodes, file_ino(8), (10, Name::from("d")));
        let of = |places: &OtherPlaces, ino| {
            (places.of(&nodes, ino))
                .map(|(f, n)| (f, n.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            of(&places, file_ino(7)),
            [(10, "a".into()), (11, "b".into()), (12, "c".into())]
        );
        assert_eq!(of(&places, file_ino(8)), [(10, "d".into())]);
        places.remove(&nodes, file_ino(7));
        assert!(!places.any(&nodes, file_ino(7)) && of(&places, file_ino(7)).is_empty());
        assert!(places.any(&nodes, file_ino(8)));
    }
}
