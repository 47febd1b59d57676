//! Album covers as files: each folder of tracks holds `cover.jpg` or
//! `cover.png` (the base name is the mount's), the picture most of its
//! tracks carry as their front cover, served from the store. Kodi,
//! Jellyfin, minidlna and many players look for exactly this file.
//!
//! A cover is a node of the tree like any file, so listings, lookups and
//! HTTP find it with no case of their own; it is kept in step with its
//! folder's tracks whenever they change ([`Tree::sync_cover`]). Folders
//! that show the same picture of the same date (an album's folder in each
//! view) show one node, one file to the kernel, as a track is.

use retagfs_store::ArtLink;

use super::*;

/// A picture served as a folder's cover: its row in the store's `art`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CoverArt {
    pub art_rowid: i64,
    pub len: u32,
    pub png: bool,
}

impl CoverArt {
    /// A track's cover: its front cover, else its first picture, when a
    /// JPEG or PNG (what the file's name can say).
    pub fn of_track(art: &[ArtLink]) -> Option<CoverArt> {
        const FRONT_COVER: u8 = 3;
        let picture = art
            .iter()
            .find(|a| a.picture_type == FRONT_COVER)
            .or_else(|| art.first())?;
        let png = match picture.mime.as_str() {
            "image/jpeg" | "image/jpg" => false,
            "image/png" => true,
            _ => return None,
        };
        Some(CoverArt {
            art_rowid: picture.art_rowid,
            len: u32::try_from(picture.data_len).ok()?,
            png,
        })
    }

    pub fn content_type(&self) -> &'static str {
        if self.png {
            "image/png"
        } else {
            "image/jpeg"
        }
    }
}

/// A folder's cover: the picture, and the last time one of the folder's
/// tracks that carry it changed (its mtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FolderCover {
    pub art: CoverArt,
    pub mtime_ns: i64,
}

/// Folders of more files than this get no cover: they are not an album
/// (a flat view of every track), and choosing one would cost a pass over
/// all of them at every change.
const MOST_FILES_OF_A_COVERED_FOLDER: usize = 500;

impl Tree {
    /// Folders get covers named `base.jpg` or `base.png` from now on.
    pub(super) fn set_cover_name(&mut self, base: Option<Arc<str>>) {
        self.cover_names = base.as_ref().map(|base| {
            [
                Name::from(format!("{base}.jpg")),
                Name::from(format!("{base}.png")),
            ]
        });
    }

    /// The name of a cover of `art`'s kind, shared by every such cover.
    fn cover_file_name(&self, art: &CoverArt) -> Option<Name> {
        let [jpg, png] = self.cover_names.as_ref()?;
        Some(if art.png { png.clone() } else { jpg.clone() })
    }

    /// Gives every folder its cover (after a build): chosen by a thread a
    /// core (each folder's files are looked up), then added.
    pub(super) fn sync_all_covers(&mut self) {
        if self.cover_names.is_none() {
            return;
        }
        let dirs: Vec<u64> = (self.nodes.iter())
            .filter(|(_, n)| n.is_dir())
            .map(|(ino, _)| ino)
            .collect();
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        let share = dirs.len().div_ceil(workers).max(1);
        let tree = &*self;
        let chosen: Vec<(u64, FolderCover)> = std::thread::scope(|s| {
            let choosing: Vec<_> = (dirs.chunks(share))
                .map(|dirs| {
                    s.spawn(move || {
                        (dirs.iter())
                            .filter_map(|&dir| Some((dir, tree.most_common_cover(dir)?)))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            (choosing.into_iter())
                .flat_map(|c| c.join().expect("choosing covers panicked"))
                .collect()
        });
        let mut ignored = Invalidations::default();
        for (dir, cover) in chosen {
            // Nothing to forget yet: the kernel has seen none of it.
            self.add_cover(dir, cover, &mut ignored);
            ignored.entries.clear();
        }
    }

    /// Makes folder `dir`'s cover the picture most of its files carry
    /// (the first such in listing order on a tie), or none, telling `out`
    /// what the kernel must forget.
    pub(super) fn sync_cover(&mut self, dir: u64, out: &mut Invalidations) {
        if self.cover_names.is_none() {
            return;
        }
        let wanted = self.most_common_cover(dir);
        let current = self.cover_of(dir);
        if let Some((ino, name, cover)) = &current {
            if wanted == Some(*cover) {
                return;
            }
            self.remove_cover(dir, *ino);
            out.entries.push((dir, name.to_string()));
            out.inodes.push(*ino);
        }
        if let Some(cover) = wanted {
            self.add_cover(dir, cover, out);
        }
    }

    /// Adds `cover` to folder `dir`, unless an entry of the library holds
    /// its name.
    fn add_cover(&mut self, dir: u64, cover: FolderCover, out: &mut Invalidations) {
        let Some(name) = self.cover_file_name(&cover.art) else {
            return;
        };
        if self.child(dir, &name).is_some() {
            // A folder or a file of the library holds the name.
            return;
        }
        if !self.nodes.get(&dir).is_some_and(Node::is_dir) {
            return;
        }
        out.entries.push((dir, name.to_string()));
        let ino = self.cover_node(dir, cover, name);
        if let Some(Entry::Dir { cover: held, .. }) = self.nodes.get_mut(&dir).map(|n| &mut n.entry) {
            *held = NonZeroU64::new(ino);
        }
    }

    /// The node of `cover`, made (in folder `dir`) if no folder shows it
    /// yet, counting one more folder that does.
    fn cover_node(&mut self, dir: u64, cover: FolderCover, name: Name) -> u64 {
        let mut ino = cover_ino(&cover);
        loop {
            match self.nodes.get_mut(&ino).map(|n| &mut n.entry) {
                Some(Entry::Cover {
                    cover: held, folders, ..
                }) if *held == cover => {
                    *folders += 1;
                    return ino;
                }
                // Another node took the inode (unlikely): the next one.
                Some(_) => ino = ((ino + 1) & (DIR_BIT - 1)) | DIR_BIT,
                None => break,
            }
        }
        let node = Node {
            parent: dir,
            name,
            entry: Entry::Cover {
                cover,
                ino,
                folders: 1,
            },
        };
        self.nodes.insert(ino, node);
        self.cover_count += 1;
        ino
    }

    /// Removes folder `dir`'s cover, node `ino` (gone with the last folder
    /// that shows it).
    fn remove_cover(&mut self, dir: u64, ino: u64) {
        if let Some(Entry::Dir { cover, .. }) = self.nodes.get_mut(&dir).map(|n| &mut n.entry) {
            *cover = None;
        }
        let last = match self.nodes.get_mut(&ino).map(|n| &mut n.entry) {
            Some(Entry::Cover { folders, .. }) => {
                *folders = folders.saturating_sub(1);
                *folders == 0
            }
            _ => false,
        };
        if last && self.nodes.remove(&ino).is_some() {
            self.cover_count -= 1;
        }
    }

    /// The entries of folder `dir` the kernel must forget when `self` is
    /// replaced by `new`: its cover's, if it changed (a cover shown by
    /// several folders has one place of its own only).
    pub(super) fn diff_folder_cover(&self, new: &Tree, dir: u64, out: &mut Invalidations) {
        let (old_cover, new_cover) = (self.cover_of(dir), new.cover_of(dir));
        if old_cover.as_ref().map(|c| c.0) == new_cover.as_ref().map(|c| c.0) {
            return;
        }
        for (_, name, _) in old_cover.into_iter().chain(new_cover) {
            out.entries.push((dir, name.to_string()));
        }
    }

    /// The cover node of `dir`: (inode, name, cover).
    fn cover_of(&self, dir: u64) -> Option<(u64, Name, FolderCover)> {
        let Entry::Dir { cover: Some(ino), .. } = &self.nodes.get(&dir)?.entry else {
            return None;
        };
        let node = self.nodes.get(&ino.get())?;
        match node.entry {
            Entry::Cover { cover, .. } => Some((ino.get(), node.name.clone(), cover)),
            _ => None,
        }
    }

    /// Removes folder `dir`'s cover, if it has one, pushing its entry to
    /// `removed` (its folder is going).
    pub(super) fn drop_cover(&mut self, dir: u64, removed: &mut Vec<(u64, String)>) {
        if let Some((ino, name, _)) = self.cover_of(dir) {
            self.remove_cover(dir, ino);
            removed.push((dir, name.to_string()));
        }
    }

    fn most_common_cover(&self, dir: u64) -> Option<FolderCover> {
        let Some(Entry::Dir { children, .. }) = self.nodes.get(&dir).map(|n| &n.entry) else {
            return None;
        };
        if children.len() > MOST_FILES_OF_A_COVERED_FOLDER {
            return None;
        }
        // Per picture, in the order first seen: (picture, tracks, latest
        // mtime). A folder mostly has one or two: a list beats a map.
        let mut counts: Vec<(CoverArt, usize, i64)> = Vec::new();
        for ino in children.values() {
            if let Some(Entry::File(f)) = self.nodes.get(ino).map(|n| &n.entry) {
                if let Some(art) = f.cover {
                    match counts.iter_mut().find(|(seen, _, _)| *seen == art) {
                        Some((_, count, mtime)) => {
                            *count += 1;
                            *mtime = (*mtime).max(f.mtime_ns);
                        }
                        None => counts.push((art, 1, f.mtime_ns)),
                    }
                }
            }
        }
        // Most tracks first, then the first listed.
        let most = counts.iter().map(|(_, count, _)| *count).max()?;
        (counts.into_iter())
            .find(|(_, count, _)| *count == most)
            .map(|(art, _, mtime_ns)| FolderCover { art, mtime_ns })
    }
}

/// The inode of a cover: from the picture and its date, so the same
/// across remounts, and the same for every folder that shows it.
fn cover_ino(cover: &FolderCover) -> u64 {
    let mut sha = Sha256::new();
    sha.update(cover.art.art_rowid.to_le_bytes());
    sha.update(cover.art.len.to_le_bytes());
    sha.update([u8::from(cover.art.png)]);
    sha.update(cover.mtime_ns.to_le_bytes());
    let digest = sha.finalize();
    (u64::from_le_bytes(digest[..8].try_into().expect("8 bytes")) & (DIR_BIT - 1)) | DIR_BIT
}

#[cfg(test)]
mod tests {
    use super::*;

    fn art(rowid: i64) -> CoverArt {
        CoverArt {
            art_rowid: rowid,
            len: 100 + rowid as u32,
            png: rowid % 2 == 0,
        }
    }

    fn placed(id: i64, path: &str, cover: Option<i64>) -> Placement {
        let mut placed = crate::view::tree::tests::place(id, path);
        placed.file.mtime_ns = id;
        placed.file.cover = cover.map(art);
        placed
    }

    fn tree_of(placements: Vec<Placement>) -> Tree {
        let mut builder = TreeBuilder::default().with_covers(Some("cover".into()));
        for p in placements {
            builder.add(p);
        }
        builder.finish()
    }

    fn cover_in(tree: &Tree, path: &[&str]) -> Option<(String, FolderCover)> {
        let mut dir = tree.root();
        for name in path {
            dir = tree.child(dir, name)?;
        }
        ["cover.jpg", "cover.png"]
            .iter()
            .find_map(|name| match tree.get(tree.child(dir, name)?)?.entry {
                Entry::Cover { cover, .. } => Some((name.to_string(), cover)),
                _ => None,
            })
    }

    #[test]
    fn a_folder_takes_the_picture_most_of_its_tracks_carry() {
        let tree = tree_of(vec![
            placed(1, "A/X/1", Some(3)),
            placed(2, "A/X/2", Some(4)),
            placed(3, "A/X/3", Some(4)),
            placed(4, "A/Y/1", None),
            placed(5, "B/1", Some(3)),
        ]);
        let (name, cover) = cover_in(&tree, &["A", "X"]).unwrap();
        assert_eq!((name.as_str(), cover.art), ("cover.png", art(4)));
        assert_eq!(cover.mtime_ns, 3, "the latest of the tracks carrying it");
        assert!(
            cover_in(&tree, &["A", "Y"]).is_none(),
            "no track carries a picture"
        );
        assert!(cover_in(&tree, &["A"]).is_none(), "no track in it");
        assert_eq!(cover_in(&tree, &["B"]).unwrap().0, "cover.jpg");
        assert_eq!(tree.file_count(), 5);
        assert_eq!(tree.cover_count(), 2);
    }

    #[test]
    fn a_retag_moves_the_cover_and_the_last_track_takes_its_folder_with_it() {
        let mut tree = tree_of(vec![
            placed(1, "A/1", Some(3)),
            placed(2, "A/2", Some(3)),
            placed(3, "B/1", Some(5)),
        ]);
        let mut out = Invalidations::default();
        // Track 1 to B: A keeps its cover, B's is now a tie, the first listed wins.
        tree.replace(file_ino(1), vec![placed(1, "B/0", Some(3))], &mut out);
        assert_eq!(cover_in(&tree, &["A"]).unwrap().1.art, art(3));
        assert_eq!(cover_in(&tree, &["B"]).unwrap().1.art, art(3));
        assert!(out.entries.iter().any(|(_, name)| name == "cover.jpg"), "{out:?}");
        // A's last track leaves: A goes, its cover with it.
        let mut out = Invalidations::default();
        tree.replace(file_ino(2), vec![placed(2, "B/2", Some(5))], &mut out);
        assert!(tree.child(tree.root(), "A").is_none());
        assert_eq!(cover_in(&tree, &["B"]).unwrap().1.art, art(5));
        assert_eq!(tree.cover_count(), 1);
        // Every track gone: nothing left.
        for id in 1..=3 {
            tree.replace(file_ino(id), Vec::new(), &mut Invalidations::default());
        }
        assert_eq!(
            (tree.file_count(), tree.cover_count(), tree.dir_count()),
            (0, 0, 1)
        );
    }

    #[test]
    fn folders_showing_the_same_picture_show_one_file_until_one_changes() {
        let cover_ino = |tree: &Tree, path: &[&str]| {
            let dir = path
                .iter()
                .fold(tree.root(), |dir, name| tree.child(dir, name).unwrap());
            tree.child(dir, "cover.jpg").unwrap()
        };
        let mut tree = tree_of(vec![
            placed(1, "Albums/X/1", Some(3)),
            placed(1, "Genres/Jazz/X/1", Some(3)),
            placed(2, "Albums/X/2", Some(3)),
            placed(2, "Genres/Jazz/X/2", Some(3)),
        ]);
        let shared = cover_ino(&tree, &["Albums", "X"]);
        assert_eq!(cover_ino(&tree, &["Genres", "Jazz", "X"]), shared);
        assert_eq!((tree.cover_count(), tree.link_count(shared)), (1, 2));
        // Track 2 leaves Jazz with another picture: Jazz/X's cover is now
        // track 1's alone (an older date), Albums/X keeps the shared one.
        let before = tree.clone();
        let mut out = Invalidations::default();
        let places = vec![
            placed(2, "Albums/X/2", Some(3)),
            placed(2, "Genres/Soul/X/2", Some(3)),
        ];
        tree.replace(file_ino(2), places, &mut out);
        assert_eq!(cover_ino(&tree, &["Albums", "X"]), shared);
        let jazz = cover_ino(&tree, &["Genres", "Jazz", "X"]);
        assert_ne!(jazz, shared);
        assert_eq!(cover_in(&tree, &["Genres", "Jazz", "X"]).unwrap().1.mtime_ns, 1);
        assert_eq!(
            cover_ino(&tree, &["Genres", "Soul", "X"]),
            shared,
            "the same picture of the same date"
        );
        assert_eq!((tree.cover_count(), tree.link_count(shared)), (2, 2));
        let jazz_dir = ["Genres", "Jazz", "X"]
            .iter()
            .fold(tree.root(), |d, n| tree.child(d, n).unwrap());
        assert!(out.entries.contains(&(jazz_dir, "cover.jpg".into())), "{out:?}");
        // A reload to this tree: the kernel forgets Jazz/X's cover too.
        let reload = before.diff(&tree);
        assert!(
            reload.entries.contains(&(jazz_dir, "cover.jpg".into())),
            "{reload:?}"
        );
        // Every track gone: no cover left.
        for id in 1..=2 {
            tree.replace(file_ino(id), Vec::new(), &mut Invalidations::default());
        }
        assert_eq!(tree.cover_count(), 0);
    }

    #[test]
    fn a_name_a_folder_holds_gets_no_cover_and_a_folder_there_keeps_its_name() {
        let tree = tree_of(vec![
            placed(1, "A/cover.jpg/1", Some(3)),
            placed(2, "A/2", Some(3)),
        ]);
        let a = tree.child(tree.root(), "A").unwrap();
        let held = tree.child(a, "cover.jpg").unwrap();
        assert!(tree.get(held).unwrap().is_dir());
        assert!(cover_in(&tree, &["A", "cover.jpg"]).is_some());
    }

    #[test]
    fn a_tree_without_a_cover_name_has_no_covers() {
        let mut builder = TreeBuilder::default();
        builder.add(placed(1, "A/1", Some(3)));
        let tree = builder.finish();
        assert_eq!(tree.cover_count(), 0);
    }
}
