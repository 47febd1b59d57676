//! The tree's nodes by inode, kept in one array found through an index of
//! their places in it. A hash table of whole nodes doubles as it grows and
//! sits up to half empty at 72 bytes a slot; an index of (inode, place)
//! pairs takes 16 bytes a slot. This one holds the place alone (4 bytes):
//! a node knows its inode ([`Node::ino`]).

use hashbrown::HashTable;

use super::Node;

// A node a file and a folder: a larger node costs every mount (an entry
// of a variant larger than a file's, or one that takes its spare bytes,
// grows them all).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Node>() <= 72);

#[derive(Debug, Clone, Default)]
pub(super) struct Nodes {
    slots: Vec<Option<Node>>,
    /// Slots of removed nodes, taken again first.
    free: Vec<u32>,
    index: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

impl Nodes {
    fn hash(&self, ino: u64) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one(ino)
    }

    /// The slot of node `ino`.
    fn slot(&self, ino: u64) -> Option<usize> {
        let slots = &self.slots;
        let holds = |slot: &u32| {
            slots[*slot as usize]
                .as_ref()
                .is_some_and(|node| node.ino() == ino)
        };
        self.index.find(self.hash(ino), holds).map(|slot| *slot as usize)
    }

    /// The slot of node `ino`: the same while the node lives.
    pub(super) fn slot_of(&self, ino: u64) -> Option<u32> {
        self.slot(ino).map(|slot| slot as u32)
    }

    /// The inode of the node in `slot`.
    pub(super) fn ino_at(&self, slot: u32) -> Option<u64> {
        self.slots.get(slot as usize)?.as_ref().map(Node::ino)
    }

    pub(super) fn get(&self, ino: &u64) -> Option<&Node> {
        let slot = self.slot(*ino)?;
        self.slots[slot].as_ref()
    }

    pub(super) fn get_mut(&mut self, ino: &u64) -> Option<&mut Node> {
        let slot = self.slot(*ino)?;
        self.slots[slot].as_mut()
    }

    pub(super) fn contains_key(&self, ino: &u64) -> bool {
        self.slot(*ino).is_some()
    }

    pub(super) fn insert(&mut self, ino: u64, node: Node) {
        debug_assert_eq!(node.ino(), ino, "a node is found by its own inode");
        if let Some(old) = self.get_mut(&ino) {
            *old = node;
            return;
        }
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(node);
                slot
            }
            None => {
                self.slots.push(Some(node));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 nodes")
            }
        };
        let (slots, hasher) = (&self.slots, &self.hasher);
        let rehash = |slot: &u32| {
            use std::hash::BuildHasher;
            hasher.hash_one(slots[*slot as usize].as_ref().map_or(0, Node::ino))
        };
        self.index.insert_unique(self.hash(ino), slot, rehash);
    }

    pub(super) fn remove(&mut self, ino: &u64) -> Option<Node> {
        let hash = self.hash(*ino);
        let slots = &self.slots;
        let holds = |slot: &u32| {
            slots[*slot as usize]
                .as_ref()
                .is_some_and(|node| node.ino() == *ino)
        };
        let (slot, _) = self.index.find_entry(hash, holds).ok()?.remove();
        self.free.push(slot);
        self.slots[slot as usize].take()
    }

    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    /// The slots of the array, taken or free.
    #[cfg(test)]
    pub(super) fn slots(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &Node)> {
        (self.slots.iter()).filter_map(|slot| slot.as_ref().map(|node| (node.ino(), node)))
    }
}

impl std::ops::Index<&u64> for Nodes {
    type Output = Node;

    fn index(&self, ino: &u64) -> &Node {
        self.get(ino).expect("a node of the tree")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tree::{Entry, Name};

    fn node(ino: u64, parent: u64) -> Node {
        Node {
            parent,
            name: Name::from("n"),
            entry: Entry::Playlist { index: 0, ino },
        }
    }

    #[test]
    fn nodes_are_found_replaced_removed_and_their_slots_taken_again() {
        let mut nodes = Nodes::default();
        for ino in 1..=1000u64 {
            nodes.insert(ino << 20, node(ino << 20, ino));
        }
        assert_eq!(nodes.len(), 1000);
        assert_eq!(nodes.get(&(7 << 20)).map(|n| n.parent), Some(7));
        nodes.insert(7 << 20, node(7 << 20, 70));
        assert_eq!((nodes.len(), nodes[&(7 << 20)].parent), (1000, 70));
        for ino in (1..=1000u64).filter(|ino| ino % 2 == 0) {
            assert_eq!(nodes.remove(&(ino << 20)).map(|n| n.parent), Some(ino));
        }
        assert!(nodes.remove(&(2 << 20)).is_none() && !nodes.contains_key(&(2 << 20)));
        assert_eq!(nodes.len(), 500);
        nodes.insert(5, node(5, 5));
        assert_eq!(nodes.slots(), 1000, "a free slot taken again");
        assert_eq!(nodes.iter().count(), 501);
        assert!(nodes
            .iter()
            .all(|(ino, n)| nodes.get(&ino).is_some_and(|m| m.parent == n.parent)));
    }
}
