//! The places of files besides their first (which their nodes hold), those
//! twins of their folders do not give them ([`super::shared_entries`]).
//! A file mostly has one such place at most (a flat view names it its own
//! way): that one is kept apart, with no list of its own, and only the
//! places after it in a list.

use super::*;

/// A place: (folder, name).
type Place = (u64, Name);

#[derive(Debug, Clone, Default)]
pub(super) struct OtherPlaces {
    second: HashMap<u64, Place>,
    more: HashMap<u64, ThinVec<Place>>,
}

impl OtherPlaces {
    /// Adds a place of file `ino`, after those it has.
    pub(super) fn push(&mut self, ino: u64, place: Place) {
        match self.second.entry(ino) {
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(place);
            }
            std::collections::hash_map::Entry::Occupied(_) => self.more.entry(ino).or_default().push(place),
        }
    }

    /// File `ino`'s places, in the order they were added.
    pub(super) fn of(&self, ino: u64) -> impl Iterator<Item = &Place> {
        (self.second.get(&ino).into_iter()).chain(self.more.get(&ino).into_iter().flatten())
    }

    /// Whether file `ino` has a place kept here.
    pub(super) fn any(&self, ino: u64) -> bool {
        self.second.contains_key(&ino)
    }

    pub(super) fn remove(&mut self, ino: u64) {
        self.second.remove(&ino);
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

    #[test]
    fn places_come_back_in_the_order_they_were_added() {
        let mut places = OtherPlaces::default();
        for (folder, name) in [(10, "a"), (11, "b"), (12, "c")] {
            places.push(7, (folder, Name::from(name)));
        }
        places.push(8, (10, Name::from("d")));
        let of = |places: &OtherPlaces, ino| {
            places
                .of(ino)
                .map(|(f, n)| (*f, n.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            of(&places, 7),
            [(10, "a".into()), (11, "b".into()), (12, "c".into())]
        );
        assert_eq!(of(&places, 8), [(10, "d".into())]);
        places.remove(7);
        assert!(!places.any(7) && of(&places, 7).is_empty());
        assert!(places.any(8));
    }
}
