//! The virtual tree: directories and files rendered from the template,
//! with sanitized, unique names and inode numbers that are stable across
//! remounts (files: from the track id; directories: from a hash of the path).

use std::collections::{btree_map, BTreeMap};
use std::num::NonZeroU64;
use std::ops::Bound;
use std::sync::Arc;

/// Maps keyed by inode numbers (looked up on every request) and the like:
/// hashed fast.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::time::SystemTime;

use retagfs_store::Format;
use sha2::{Digest, Sha256};
use thin_vec::ThinVec;

mod covers;
mod folder_paths;
mod nodes;
mod other_places;
mod shared_entries;
pub use covers::{CoverArt, FolderCover};
use nodes::Nodes;

/// A name in the tree: one pointer, its text held once however many
/// folders' maps and places of a file hold it.
pub type Name = arcstr::ArcStr;

pub const ROOT_INO: u64 = 1;
/// File inodes are `FILE_INO_BASE + track id`.
const FILE_INO_BASE: u64 = 1;
/// Directory inodes have this bit set (track ids never reach it).
const DIR_BIT: u64 = 1 << 62;
/// The inodes of the searches' folders ([`crate::view::search`]) start
/// here, above every file inode (a track id past it is not served).
pub const SEARCH_INO_BASE: u64 = 1 << 61;
/// A 64-bit hash of a rendered path, kept in memory only (a collision is
/// astronomically rare and would only make a refresh keep a stale name).
fn path_hash(path: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::default().hash_one(path)
}

/// The hash of a file's rendered paths so far, `hash` the first's alone,
/// with the next path's: in order (a file's places are in its views'
/// order).
fn with_next_path(hash: u64, next: u64) -> u64 {
    hash.rotate_left(5) ^ next
}

/// A rendered path as its folder's path (unsanitized) and the file's
/// sanitized stem. The stem is what follows the last `/`, empty if
/// nothing usable (the file is then named after its track): a file whose
/// title is missing stays in its album's folder, not named after it one
/// level up.
fn split_path(path: &str) -> (&str, String) {
    let (folder, name) = path.rsplit_once('/').unwrap_or(("", path));
    (folder, sanitize_component(name).unwrap_or_default())
}

/// A rendered folder path as sanitized directory components.
fn folder_components(folder: &str) -> Vec<String> {
    folder.split('/').filter_map(sanitize_component).collect()
}

/// Longest file name Linux file systems accept, in bytes.
pub const NAME_MAX: usize = 255;

/// Directories without files [`Tree::files_of_next_dir`] passes over.
const DIRS_PASSED: usize = 64;

/// A file in the tree: one track.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    pub track_id: i64,
    pub format: Format,
    pub name_extension: NameExtension,
    pub size: u64,
    pub mtime_ns: i64,
    pub content_version: i64,
    /// The picture the track offers its folder as a cover.
    pub cover: Option<CoverArt>,
}

impl FileEntry {
    /// The extension of the served file's name.
    pub fn extension(&self) -> &'static str {
        match self.name_extension {
            NameExtension::OfFormat => self.format.extension(),
            NameExtension::M4b => "m4b",
            NameExtension::M4v => "m4v",
            NameExtension::Mp4 => "mp4",
        }
    }
}

/// The extension a served file's name ends with: its format's, or for an
/// MP4 file one of its backing file's name that players go by rather than
/// `.m4a`: audiobook players `.m4b` (resume position, chapters, their
/// shelf), video players `.m4v` and `.mp4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameExtension {
    OfFormat,
    M4b,
    M4v,
    Mp4,
}

impl NameExtension {
    pub fn of(format: Format, backing_path: &str) -> NameExtension {
        let ext = backing_path.rsplit_once('.').map_or("", |(_, ext)| ext);
        match format {
            Format::Mp4 if ext.eq_ignore_ascii_case("m4b") => NameExtension::M4b,
            Format::Mp4 if ext.eq_ignore_ascii_case("m4v") => NameExtension::M4v,
            Format::Mp4 if ext.eq_ignore_ascii_case("mp4") => NameExtension::Mp4,
            _ => NameExtension::OfFormat,
        }
    }
}

#[derive(Debug, Clone)]
pub enum Entry {
    /// A folder: its entries keyed by the very name each holds (one copy
    /// per name), shared by folders that hold the same entries (an album's
    /// folder in several views) until one of them changes; its cover, if
    /// it has one, beside them ([`covers`]), so that a cover of its own
    /// does not keep a folder's entries from being shared.
    Dir {
        /// Its inode (a file's is its track's, [`file_ino`]).
        ino: u64,
        children: Arc<BTreeMap<Name, u64>>,
        /// (Inodes are never 0: an entry this size leaves a file's the
        /// largest, which keeps every node at 72 bytes.)
        cover: Option<NonZeroU64>,
        /// The next of the folders that shared their entries with this one
        /// while the tree was built, in a ring ([`shared_entries`]): a file
        /// one of them holds under the name it has in another is in both,
        /// without a place of its own kept for each.
        next_twin: Option<NonZeroU64>,
    },
    File(FileEntry),
    /// A folder's cover ([`covers`]), shown by `folders` folders.
    Cover {
        cover: FolderCover,
        ino: u64,
        folders: u32,
    },
    /// A playlist of the configuration, by its place in it
    /// ([`crate::view::playlists`]).
    Playlist {
        index: usize,
        ino: u64,
    },
}

#[derive(Debug, Clone)]
pub struct Node {
    pub parent: u64,
    pub name: Name,
    pub entry: Entry,
}

impl Entry {
    fn empty_dir(ino: u64) -> Entry {
        Entry::Dir {
            ino,
            children: Arc::default(),
            cover: None,
            next_twin: None,
        }
    }
}

impl Node {
    /// Its inode: the tree's nodes are found by it.
    fn ino(&self) -> u64 {
        match &self.entry {
            Entry::File(f) => file_ino(f.track_id),
            Entry::Dir { ino, .. } | Entry::Cover { ino, .. } | Entry::Playlist { ino, .. } => *ino,
        }
    }

    fn is_dir(&self) -> bool {
        matches!(self.entry, Entry::Dir { .. })
    }
}

/// A track placed in the tree: its rendered (unsanitized) path without
/// extension, and its file attributes.
#[derive(Debug, Clone)]
pub struct Placement {
    pub path: String,
    pub file: FileEntry,
}

#[derive(Debug, Clone)]
pub struct Tree {
    nodes: Nodes,
    dir_count: usize,
    /// The next " (n)" to try per directory and name: many tracks with the
    /// same name must not make each insertion probe every suffix again.
    /// A name's entry goes when the entry holding that name does, so a
    /// mount that refreshes for months keeps no more than its tree.
    next_suffix: HashMap<u64, HashMap<String, u32>>,
    /// A hash of the path each file's template rendered, so a refresh can
    /// tell a moved file from one whose contents changed (a hash: the
    /// paths themselves would cost ~100 bytes per track).
    rendered: HashMap<u64, u64>,
    /// The other places of a file placed more than once (several views):
    /// (parent, name) of each; its node holds the first. A place in a twin
    /// of one of these folders, under the same name, is not kept
    /// ([`Tree::places`]).
    links: other_places::OtherPlaces,
    /// When a live refresh last changed a directory's entries. Served as
    /// the directory's mtime: the kernel drops a cached listing whose
    /// directory mtime changed (which closes the race of a listing read
    /// just before a refresh and cached just after its invalidation), and
    /// media servers rescan only the directories that changed.
    listing_changed: HashMap<u64, SystemTime>,
    /// The root's inode ([`ROOT_INO`] but for a search's tree).
    root: u64,
    /// The next inode of a directory of a search's tree (None: the main
    /// tree's directories are numbered by a hash of their path, stable
    /// across remounts).
    next_dir_ino: Option<u64>,
    /// The names of folders' covers (`cover.jpg`, `cover.png`), shared by
    /// them all; None: no covers.
    cover_names: Option<[Name; 2]>,
    /// Covers in the tree.
    cover_count: usize,
    /// The playlists' inodes, in the configuration's order.
    playlist_inos: Vec<u64>,
}

/// A tree built from placements given one by one in track id order (a
/// track placed several times, its placements one after the other), each
/// file placed as it comes, so that the tree grows while the store is
/// still being read. (A folder that needs a name a file took earlier gets
/// ` (dir)` after it, as in a refresh.)
#[derive(Default)]
pub struct TreeBuilder {
    tree: Tree,
    /// The directory of each rendered folder path met so far.
    dirs: folder_paths::FolderPaths,
    /// The file being placed and the hash of its paths so far (its places
    /// come one after another): noted in the tree once it is complete.
    rendering: Option<(u64, u64)>,
    /// The first place of the file being placed, which its other places
    /// follow where they can ([`shared_entries`]).
    first_place: Option<shared_entries::FirstPlace>,
    /// The folders that followed first places, by the folders they
    /// followed: twins once the tree is built.
    followed: shared_entries::Followed,
    /// The names of folders made so far: an album's folder in each view
    /// holds one copy of its name.
    folder_names: std::collections::HashSet<Name, foldhash::fast::RandomState>,
}

impl TreeBuilder {
    /// Folders of the tree built get covers named `base.jpg` or `base.png`
    /// ([`covers`]); None: no covers.
    pub fn with_covers(mut self, base: Option<Arc<str>>) -> TreeBuilder {
        self.tree.set_cover_name(base);
        self
    }

    /// Adds the next track; its id must be above every track added before.
    pub fn add(&mut self, p: Placement) {
        if !servable(&p) {
            return;
        }
        let (folder, stem) = split_path(&p.path);
        let (ino, hash) = (file_ino(p.file.track_id), path_hash(&p.path));
        let next_file = !matches!(self.rendering, Some((same, _)) if same == ino);
        self.rendering = match self.rendering {
            Some((same, so_far)) if same == ino => Some((ino, with_next_path(so_far, hash))),
            other => {
                self.note_rendering(other);
                Some((ino, hash))
            }
        };
        if next_file {
            // Before the next file is placed: a first place kept longer
            // would keep its folder's map from being grown in place.
            self.first_place = None;
        }
        let dir = match self.dirs.get(folder) {
            Some(dir) => dir,
            None => {
                let names = &mut self.folder_names;
                let named = &mut |name: String| match names.get(name.as_str()) {
                    Some(same) => same.clone(),
                    None => {
                        let name = Name::from(name);
                        names.insert(name.clone());
                        name
                    }
                };
                let dir = (self.tree).ensure_dirs_named(&folder_components(folder), &mut Vec::new(), named);
                self.dirs.insert(folder, dir);
                dir
            }
        };
        match &self.first_place {
            None if next_file => self.first_place = self.tree.place_first(dir, stem, p.file),
            Some(first) if self.tree.place_alike(dir, &stem, first) => self.followed.join(first.dir, dir),
            _ => {
                self.tree.insert_file(dir, &stem, p.file);
            }
        }
    }

    /// Notes in the tree the hash of a file's rendered paths.
    fn note_rendering(&mut self, rendered: Option<(u64, u64)>) {
        if let Some((ino, hash)) = rendered {
            self.tree.rendered.insert(ino, hash);
        }
    }

    pub fn finish(mut self) -> Tree {
        let last = self.rendering.take();
        self.note_rendering(last);
        self.tree.set_twins(self.followed);
        self.tree.sync_all_covers();
        // Places are only added one by one after this, by refreshes.
        self.tree.links.shrink();
        self.tree
    }
}

/// What the kernel must forget after the tree changed: directory entries
/// (parent, name) and inodes whose attributes and cached pages are stale.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Invalidations {
    pub entries: Vec<(u64, String)>,
    pub inodes: Vec<u64>,
}

/// A directory's entries from a position: (inode, name, listing cookie).
pub type Listing<'a> = Box<dyn Iterator<Item = (u64, &'a str, u64)> + 'a>;

/// A folder's entries in name order with its cover among them.
struct WithCover<'a, I: Iterator<Item = (&'a str, u64)>> {
    entries: std::iter::Peekable<I>,
    cover: Option<(&'a str, u64)>,
}

impl<'a, I: Iterator<Item = (&'a str, u64)>> Iterator for WithCover<'a, I> {
    type Item = (&'a str, u64);

    fn next(&mut self) -> Option<(&'a str, u64)> {
        match (self.entries.peek(), self.cover) {
            (Some((name, _)), Some((cover, _))) if cover < *name => self.cover.take(),
            (None, Some(_)) => self.cover.take(),
            _ => self.entries.next(),
        }
    }
}

/// Why a directory cannot be listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListingError {
    NotFound,
    NotADirectory,
}

/// Where a directory listing resumes after an entry (the offset the kernel
/// hands back): 1 after ".", 2 after "..", else the entry's own cookie. A
/// cookie names an entry rather than counting entries, so a listing of a
/// large directory resumes with a seek instead of a count from the start,
/// and entries added or removed meanwhile shift no other entry. Files'
/// cookies are their inode + 2 (file inodes start at 2); directories'
/// inodes (the high bit set) are their own.
fn listing_cookie(ino: u64) -> u64 {
    if ino & DIR_BIT != 0 {
        ino
    } else {
        ino + 2
    }
}

/// The entry a [`listing_cookie`] above 2 names.
fn ino_of_listing_cookie(cookie: u64) -> u64 {
    if cookie & DIR_BIT != 0 {
        cookie
    } else {
        cookie - 2
    }
}

pub fn file_ino(track_id: i64) -> u64 {
    FILE_INO_BASE + track_id as u64
}

/// The track a file inode serves ([`file_ino`] undone); `None` for the
/// root and directory inodes.
pub fn track_of_file_ino(ino: u64) -> Option<i64> {
    (ino > FILE_INO_BASE && ino < SEARCH_INO_BASE).then(|| (ino - FILE_INO_BASE) as i64)
}

/// [`servable_track_id`], with a log line for a track that is not.
fn servable(p: &Placement) -> bool {
    let ok = servable_track_id(p.file.track_id);
    if !ok {
        tracing::warn!("track {} is not served: its id is out of range", p.file.track_id);
    }
    ok
}

/// Whether a track can be a file of the tree: its inode stays below the
/// searches' (a store row of another tool may hold any id).
pub fn servable_track_id(id: i64) -> bool {
    id > 0 && (id as u64) < SEARCH_INO_BASE - FILE_INO_BASE
}

/// Makes each component of a rendered path a name Windows accepts, for a
/// view shared over SMB: `< > : " \ | ? *` become `_`, trailing dots and
/// spaces go, and a device name (`CON`, `nul.live`, `COM1`) gets a `_`
/// after it.
pub fn windows_safe(path: &str) -> String {
    path.split('/')
        .map(windows_safe_component)
        .collect::<Vec<_>>()
        .join("/")
}

fn windows_safe_component(raw: &str) -> String {
    let mapped: String = raw
        .chars()
        .map(|c| if "<>:\"\\|?*".contains(c) { '_' } else { c })
        .collect();
    let mut name = mapped.trim_end_matches(['.', ' ']).to_string();
    let base_len = name.find('.').unwrap_or(name.len());
    if is_windows_device(name[..base_len].trim_end()) {
        name.insert(base_len, '_');
    }
    name
}

fn is_windows_device(base: &str) -> bool {
    match base.to_ascii_uppercase().as_bytes() {
        b"CON" | b"PRN" | b"AUX" | b"NUL" => true,
        [b'C', b'O', b'M', d] | [b'L', b'P', b'T', d] => (b'1'..=b'9').contains(d),
        _ => false,
    }
}

/// Cleans one path component: control characters become spaces, `/` and
/// NUL cannot appear, a leading dot (hidden file) becomes `_`, surrounding
/// whitespace goes. `None` for a component that is empty, `.` or `..`.
pub fn sanitize_component(raw: &str) -> Option<String> {
    let trimmed = raw.trim();
    let clean = |c: char| !c.is_control() && c != '/';
    // Most components need nothing but their copy.
    if !trimmed.starts_with('.') && trimmed.chars().all(clean) {
        return (!trimmed.is_empty()).then(|| trimmed.to_string());
    }
    let cleaned: String = raw
        .chars()
        .filter(|&c| c != '\0')
        .map(|c| {
            if c.is_control() {
                ' '
            } else if c == '/' {
                '_'
            } else {
                c
            }
        })
        .collect();
    let trimmed = cleaned.trim();
    if trimmed.is_empty() || trimmed == "." || trimmed == ".." {
        return None;
    }
    let mut s = trimmed.to_string();
    if s.starts_with('.') {
        s.replace_range(0..1, "_");
    }
    Some(s)
}

/// Truncates to at most `max` bytes on a UTF-8 character boundary.
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `stem` + `suffix` + `.ext`, with the stem cut so the whole fits NAME_MAX.
fn file_name(stem: &str, suffix: &str, ext: &str) -> String {
    let room = NAME_MAX - ext.len() - 1 - suffix.len();
    format!("{}{suffix}.{ext}", truncate_utf8(stem, room).trim_end())
}

impl Default for Tree {
    fn default() -> Self {
        Self::new()
    }
}

impl Tree {
    pub fn new() -> Tree {
        Tree::rooted(ROOT_INO, ROOT_INO, None)
    }

    /// An empty tree whose root is inode `root` (its `..` is `parent`),
    /// its directories numbered from `first_dir_ino` on.
    pub fn with_root(root: u64, parent: u64, first_dir_ino: u64) -> Tree {
        Tree::rooted(root, parent, Some(first_dir_ino))
    }

    fn rooted(root: u64, parent: u64, next_dir_ino: Option<u64>) -> Tree {
        let mut nodes = Nodes::default();
        nodes.insert(
            root,
            Node {
                parent,
                name: Name::new(),
                entry: Entry::empty_dir(root),
            },
        );
        Tree {
            nodes,
            dir_count: 1,
            next_suffix: HashMap::default(),
            rendered: HashMap::default(),
            links: other_places::OtherPlaces::default(),
            listing_changed: HashMap::default(),
            root,
            next_dir_ino,
            cover_names: None,
            cover_count: 0,
            playlist_inos: Vec::new(),
        }
    }

    pub fn root(&self) -> u64 {
        self.root
    }

    /// When a refresh last changed this directory's entries, if one did.
    pub fn listing_changed_at(&self, dir: u64) -> Option<SystemTime> {
        self.listing_changed.get(&dir).copied()
    }

    /// Records that the directories holding `changes.entries` changed now.
    /// `before` (on a rebuild) is the tree this one replaces: its times for
    /// directories that still exist are kept.
    pub fn note_listing_changes(&mut self, changes: &Invalidations, before: Option<&Tree>) {
        if let Some(old) = before {
            self.listing_changed.extend(
                old.listing_changed
                    .iter()
                    .filter(|(ino, _)| self.nodes.contains_key(ino)),
            );
        }
        let now = SystemTime::now();
        for (parent, _) in &changes.entries {
            if self.nodes.contains_key(parent) {
                self.listing_changed.insert(*parent, now);
            }
        }
        self.listing_changed.retain(|ino, _| self.nodes.contains_key(ino));
    }

    /// Builds the tree, as [`crate::load_tree`] does from the store.
    /// Placements are applied in track id order, so name collisions are
    /// resolved the same way on every mount.
    #[cfg(test)]
    pub(crate) fn build(mut placements: Vec<Placement>) -> Tree {
        placements.sort_by_key(|p| p.file.track_id);
        let mut builder = TreeBuilder::default();
        for p in placements {
            builder.add(p);
        }
        builder.finish()
    }

    /// Places a track (once more, if it is placed already), creating its
    /// directories as needed. Returns (parent, name) of every entry that
    /// is new.
    pub fn place(&mut self, p: Placement) -> Vec<(u64, String)> {
        if !servable(&p) {
            return Vec::new();
        }
        let (folder, stem) = split_path(&p.path);
        let ino = file_ino(p.file.track_id);
        self.note_rendered(ino, &p.path);
        let mut added = Vec::new();
        let dir = self.ensure_dirs(&folder_components(folder), &mut added);
        if let Some(name) = self.insert_file(dir, &stem, p.file) {
            added.push((dir, name.to_string()));
        }
        added
    }

    /// Notes a path a file was placed at: a hash of all of them, in order.
    fn note_rendered(&mut self, ino: u64, path: &str) {
        let hash = path_hash(path);
        self.rendered
            .entry(ino)
            .and_modify(|h| *h = with_next_path(*h, hash))
            .or_insert(hash);
    }

    /// Applies a track's new placements (none once it is gone): in place
    /// when its rendered paths are unchanged (names and inode kept), else
    /// removed and placed again.
    pub fn replace(&mut self, ino: u64, placements: Vec<Placement>, out: &mut Invalidations) {
        let existed = self.nodes.contains_key(&ino);
        let folders_before: Vec<u64> = self.places(ino).iter().map(|(parent, _)| *parent).collect();
        let rendered = placements
            .iter()
            .map(|p| path_hash(&p.path))
            .reduce(with_next_path);
        match placements.first() {
            Some(p) if rendered.is_some() && self.rendered.get(&ino) == rendered.as_ref() => {
                let file = p.file.clone();
                if let Some(Entry::File(f)) = self.nodes.get_mut(&ino).map(|n| &mut n.entry) {
                    *f = file;
                }
            }
            _ => {
                out.entries.extend(self.remove_file(ino));
                for p in placements {
                    out.entries.extend(self.place(p));
                }
            }
        }
        if existed {
            out.inodes.push(ino);
        }
        if self.cover_names.is_some() {
            let folders_after = self.places(ino).into_iter().map(|(parent, _)| parent);
            let mut folders: Vec<u64> = folders_before.into_iter().chain(folders_after).collect();
            folders.sort_unstable();
            folders.dedup();
            for folder in folders {
                self.sync_cover(folder, out);
            }
        }
    }

    /// How many places a file or a cover is in (0 for anything else).
    pub fn link_count(&self, ino: u64) -> usize {
        match self.nodes.get(&ino) {
            Some(Node {
                entry: Entry::Cover { folders, .. },
                ..
            }) => *folders as usize,
            Some(node) if matches!(node.entry, Entry::File(_)) => {
                let alone = !self.links.any(&self.nodes, ino)
                    && self.twins_holding(node.parent, &node.name, ino).next().is_none();
                if alone {
                    1
                } else {
                    self.places(ino).len()
                }
            }
            _ => 0,
        }
    }

    /// Every (parent, name) a node is at: one for a directory, one or more
    /// for a file: its places kept, each followed by the twins of its
    /// folder that hold the file under the same name.
    fn places(&self, ino: u64) -> Vec<(u64, &Name)> {
        let Some(node) = self.nodes.get(&ino) else {
            return Vec::new();
        };
        let kept = std::iter::once((node.parent, &node.name)).chain(self.links.of(&self.nodes, ino));
        let mut places: Vec<(u64, &Name)> = Vec::new();
        for (parent, name) in kept {
            for folder in std::iter::once(parent).chain(self.twins_holding(parent, name, ino)) {
                if !places.iter().any(|(held, same)| *held == folder && *same == name) {
                    places.push((folder, name));
                }
            }
        }
        places
    }

    /// The twins of `folder` (not itself) that hold `ino` as `name`.
    fn twins_holding<'a>(&'a self, folder: u64, name: &'a str, ino: u64) -> impl Iterator<Item = u64> + 'a {
        self.twins_of(folder)
            .filter(move |&twin| self.child(twin, name) == Some(ino))
    }

    /// Whether node `ino` is in both trees at the same places.
    fn same_places(&self, other: &Tree, ino: u64) -> bool {
        match (self.nodes.get(&ino), other.nodes.get(&ino)) {
            (Some(a), Some(b)) => {
                a.parent == b.parent
                    && a.name == b.name
                    && self.sorted_places(ino) == other.sorted_places(ino)
            }
            _ => false,
        }
    }

    /// A node's places in (parent, name) order.
    fn sorted_places(&self, ino: u64) -> Vec<(u64, &str)> {
        let mut places: Vec<(u64, &str)> = (self.places(ino).into_iter())
            .map(|(parent, name)| (parent, name.as_str()))
            .collect();
        places.sort_unstable();
        places
    }

    /// The name a node has in directory `dir`, if it is there.
    fn name_in(&self, dir: u64, ino: u64) -> Option<&Name> {
        let node = self.nodes.get(&ino)?;
        if node.parent == dir {
            return Some(&node.name);
        }
        (self.places(ino).into_iter()).find_map(|(parent, name)| (parent == dir).then_some(name))
    }

    /// What the kernel must forget when `self` is replaced by `new`.
    pub fn diff(&self, new: &Tree) -> Invalidations {
        let mut out = Invalidations::default();
        let entries = |tree: &Tree, ino: u64| -> Vec<(u64, String)> {
            let places = tree.places(ino).into_iter();
            places.map(|(parent, name)| (parent, name.to_string())).collect()
        };
        for (ino, old) in self.nodes.iter() {
            self.diff_folder_cover(new, ino, &mut out);
            let same_places = self.same_places(new, ino);
            match new.nodes.get(&ino) {
                Some(n) if same_places => match (&old.entry, &n.entry) {
                    (Entry::File(a), Entry::File(b)) if a != b => out.inodes.push(ino),
                    (Entry::Cover { cover: a, .. }, Entry::Cover { cover: b, .. }) if a != b => {
                        out.inodes.push(ino)
                    }
                    _ => {}
                },
                other => {
                    if ino != self.root {
                        out.entries.extend(entries(self, ino));
                    }
                    if other.is_some() {
                        out.inodes.push(ino);
                    }
                }
            }
        }
        for (ino, _) in new.nodes.iter() {
            let same = self.same_places(new, ino);
            if !same && ino != self.root {
                out.entries.extend(entries(new, ino));
            }
        }
        out
    }

    /// Removes a file, from every place it is in, and the directories it
    /// leaves empty. Returns (parent, name) of every entry that went away.
    pub fn remove_file(&mut self, ino: u64) -> Vec<(u64, String)> {
        let mut removed = Vec::new();
        if !matches!(self.nodes.get(&ino).map(|n| &n.entry), Some(Entry::File(_))) {
            return removed;
        }
        let places: Vec<(u64, Name)> = (self.places(ino).into_iter())
            .map(|(parent, name)| (parent, name.clone()))
            .collect();
        self.links.remove(&self.nodes, ino);
        self.nodes.remove(&ino);
        self.rendered.remove(&ino);
        for (parent, name) in places {
            self.unlink(parent, name, &mut removed);
        }
        removed
    }

    /// Removes entry `name` of directory `parent`, then each directory that
    /// leaves empty, pushing (parent, name) of each entry removed.
    fn unlink(&mut self, mut parent: u64, mut name: Name, removed: &mut Vec<(u64, String)>) {
        loop {
            let parent_empty = match self.nodes.get_mut(&parent).map(|n| &mut n.entry) {
                Some(Entry::Dir { children, .. }) => {
                    Arc::make_mut(children).remove(&name);
                    children.is_empty()
                }
                _ => false,
            };
            // A folder left with its cover alone is empty: the cover goes.
            if parent_empty {
                self.drop_cover(parent, removed);
            }
            self.forget_suffix(parent, &name);
            removed.push((parent, name.to_string()));
            if !parent_empty || parent == self.root {
                return;
            }
            self.leave_twins(parent);
            let Some(dir) = self.nodes.remove(&parent) else {
                return;
            };
            self.dir_count -= 1;
            (parent, name) = (dir.parent, dir.name);
        }
    }

    /// The directory for these components, created as needed; new entries
    /// are pushed to `added`.
    fn ensure_dirs(&mut self, comps: &[String], added: &mut Vec<(u64, String)>) -> u64 {
        self.ensure_dirs_named(comps, added, &mut Name::from)
    }

    /// [`Tree::ensure_dirs`], each new directory's name made by `named`.
    fn ensure_dirs_named(
        &mut self,
        comps: &[String],
        added: &mut Vec<(u64, String)>,
        named: &mut dyn FnMut(String) -> Name,
    ) -> u64 {
        let mut dir = self.root;
        let mut path = String::new();
        for comp in comps {
            let mut name = truncate_utf8(comp, NAME_MAX).trim_end().to_string();
            // A file placed earlier (by a refresh) may hold the name.
            while matches!(
                self.child(dir, &name).map(|i| &self.nodes[&i].entry),
                Some(Entry::File(_) | Entry::Cover { .. } | Entry::Playlist { .. })
            ) {
                name = format!("{} (dir)", truncate_utf8(&name, NAME_MAX - 6));
            }
            path.push('/');
            path.push_str(&name);
            dir = match self.child(dir, &name) {
                Some(ino) => ino,
                _ => {
                    added.push((dir, name.clone()));
                    let ino = self.free_dir_ino(&path);
                    self.add_child(dir, named(name), ino, Entry::empty_dir(ino));
                    self.dir_count += 1;
                    ino
                }
            };
        }
        dir
    }

    /// A directory inode from its path, probing on the (unlikely) collision.
    fn free_dir_ino(&mut self, path: &str) -> u64 {
        if let Some(next) = &mut self.next_dir_ino {
            *next += 1;
            return *next - 1;
        }
        let digest = Sha256::digest(path.as_bytes());
        let mut ino = (u64::from_le_bytes(digest[..8].try_into().unwrap()) & (DIR_BIT - 1)) | DIR_BIT;
        while self.nodes.contains_key(&ino) {
            ino = ((ino + 1) & (DIR_BIT - 1)) | DIR_BIT;
        }
        ino
    }

    fn add_child(&mut self, parent: u64, name: impl Into<Name>, ino: u64, entry: Entry) {
        let name: Name = name.into();
        if let Some(Entry::Dir { children, .. }) = self.nodes.get_mut(&parent).map(|n| &mut n.entry) {
            Arc::make_mut(children).insert(name.clone(), ino);
        }
        self.nodes.insert(ino, Node { parent, name, entry });
    }

    /// Adds a file under `dir`, suffixing ` (2)`, ` (3)`... on a name clash:
    /// the name of its new place. A file already in the tree gets one more
    /// place (none more in a directory it is in already: None).
    pub fn insert_file(&mut self, dir: u64, stem: &str, file: FileEntry) -> Option<Name> {
        let ino = file_ino(file.track_id);
        let numbered;
        let stem = if stem.is_empty() {
            numbered = format!("track {}", file.track_id);
            &numbered
        } else {
            stem
        };
        let ext = file.extension();
        let name = file_name(stem, "", ext);
        let (placed, name) = match self.nodes.get(&ino) {
            None => (false, Name::from(name)),
            Some(node) => {
                let places = self.places(ino);
                // (A twin that took the file while the tree is built holds
                // it as it is named in its first place.)
                if places.iter().any(|(parent, _)| *parent == dir) || self.child(dir, &node.name) == Some(ino)
                {
                    return None;
                }
                // Views mostly name a track alike in each folder it is in:
                // its places share one copy of the name.
                let alike = places.iter().find(|(_, held)| ***held == *name);
                (
                    true,
                    alike.map_or_else(|| Name::from(name), |(_, held)| (*held).clone()),
                )
            }
        };
        // Mostly the name is free: one search of the folder finds and takes it.
        let taken = match self.nodes.get_mut(&dir).map(|n| &mut n.entry) {
            Some(Entry::Dir { children, .. }) => match Arc::make_mut(children).entry(name.clone()) {
                btree_map::Entry::Vacant(slot) => {
                    slot.insert(ino);
                    false
                }
                btree_map::Entry::Occupied(_) => true,
            },
            _ => false,
        };
        let name = if taken {
            let name: Name = self.suffixed_file_name(dir, stem, ext, &name).into();
            if let Some(Entry::Dir { children, .. }) = self.nodes.get_mut(&dir).map(|n| &mut n.entry) {
                Arc::make_mut(children).insert(name.clone(), ino);
            }
            name
        } else {
            name
        };
        if placed {
            self.links.push(&self.nodes, ino, (dir, name.clone()));
        } else {
            let entry = Entry::File(file);
            let node = Node {
                parent: dir,
                name: name.clone(),
                entry,
            };
            self.nodes.insert(ino, node);
        }
        Some(name)
    }

    /// The first ` (n)` suffixed name of a file of `stem` that no entry of
    /// `dir` has, `taken` being its name unsuffixed.
    fn suffixed_file_name(&mut self, dir: u64, stem: &str, ext: &str, taken: &str) -> String {
        let next = self.next_suffix.get(&dir).and_then(|names| names.get(taken));
        let mut n = next.copied().unwrap_or(2);
        let name = loop {
            let name = file_name(stem, &format!(" ({n})"), ext);
            n += 1;
            if self.child(dir, &name).is_none() {
                break name;
            }
        };
        self.next_suffix
            .entry(dir)
            .or_default()
            .insert(taken.to_string(), n);
        name
    }

    /// Drops the suffix count of a name that left `dir`: the next file of
    /// that name takes it as it is.
    fn forget_suffix(&mut self, dir: u64, name: &str) {
        if let Some(names) = self.next_suffix.get_mut(&dir) {
            names.remove(name);
            if names.is_empty() {
                self.next_suffix.remove(&dir);
            }
        }
    }

    pub fn get(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(&ino)
    }

    pub fn get_mut(&mut self, ino: u64) -> Option<&mut Node> {
        self.nodes.get_mut(&ino)
    }

    /// The entries of directory `dir` after position `offset` ("." and
    /// ".." first), each as (inode, name, its [`listing_cookie`]). An
    /// offset naming an entry no longer in the directory (a refresh moved
    /// it between two replies) lists nothing more: its position is gone,
    /// and the refresh made the kernel list the directory anew.
    pub fn listing(&self, dir: u64, offset: u64) -> Result<Listing<'_>, ListingError> {
        let node = self.nodes.get(&dir).ok_or(ListingError::NotFound)?;
        let Entry::Dir { children, cover, .. } = &node.entry else {
            return Err(ListingError::NotADirectory);
        };
        let from = match offset {
            0..=2 => Some(Bound::Unbounded),
            cookie => {
                let last = ino_of_listing_cookie(cookie);
                self.name_in(dir, last)
                    .filter(|name| self.child(dir, name) == Some(last))
                    .map(|name| Bound::Excluded(&**name))
            }
        };
        let cover = cover.and_then(|ino| Some((&*self.nodes.get(&ino.get())?.name, ino.get())));
        let entries = from.map(|from| WithCover {
            entries: (children.range::<str, _>((from, Bound::Unbounded)))
                .map(|(name, &ino)| (&**name, ino))
                .peekable(),
            cover: cover.filter(|(name, _)| match from {
                Bound::Excluded(last) => *name > last,
                _ => true,
            }),
        });
        let dots = [(dir, ".", 1), (node.parent, "..", 2)];
        Ok(Box::new(dots.into_iter().skip(offset.min(2) as usize).chain(
            (entries.into_iter().flatten()).map(|(name, child)| (child, name, listing_cookie(child))),
        )))
    }

    pub fn child(&self, dir: u64, name: &str) -> Option<u64> {
        match &self.nodes.get(&dir)?.entry {
            Entry::Dir { children, cover, .. } => (children.get(name).copied()).or_else(|| {
                (cover.map(NonZeroU64::get))
                    .filter(|ino| self.nodes.get(ino).is_some_and(|c| &*c.name == name))
            }),
            _ => None,
        }
    }

    /// The path of a node relative to the root.
    pub fn path(&self, ino: u64) -> Option<String> {
        Some(self.components(ino)?.join("/"))
    }

    /// The names on the way from the root to a node.
    fn components(&self, mut ino: u64) -> Option<Vec<&str>> {
        let mut parts = Vec::new();
        while ino != self.root {
            let node = self.nodes.get(&ino)?;
            parts.push(&*node.name);
            ino = node.parent;
        }
        parts.reverse();
        Some(parts)
    }

    /// Files of tracks (covers and playlists not counted).
    pub fn file_count(&self) -> usize {
        self.nodes.len() - self.dir_count - self.cover_count - self.playlist_inos.len()
    }

    /// Adds the playlists `names` (each `NAME.m3u8`) in folder `folder` at
    /// the root (after a build).
    pub fn add_playlists(&mut self, folder: &str, names: &[String]) {
        if names.is_empty() {
            return;
        }
        let dir = self.ensure_dirs(&[folder.to_string()], &mut Vec::new());
        for (index, name) in names.iter().enumerate() {
            let name = format!("{name}.m3u8");
            if self.child(dir, &name).is_some() {
                tracing::warn!("playlist {name:?}: a file of the view holds its name in {folder}/");
                continue;
            }
            let ino = self.free_dir_ino(&format!("/{folder}/{name}\0playlist"));
            self.add_child(dir, name, ino, Entry::Playlist { index, ino });
            self.playlist_inos.push(ino);
        }
    }

    /// The inode of playlist `index`.
    pub fn playlist_ino(&self, index: usize) -> Option<u64> {
        self.playlist_inos.iter().copied().find(
            |ino| matches!(self.nodes.get(ino).map(|n| &n.entry), Some(Entry::Playlist { index: i, .. }) if *i == index),
        )
    }

    /// The path (from the root) of node `ino`'s first place in the root's
    /// folder `top` (None: its first place wherever it is).
    pub fn path_of_place(&self, ino: u64, top: Option<&str>) -> Option<String> {
        self.places(ino).into_iter().find_map(|(parent, name)| {
            let mut parts = self.components(parent)?;
            if top.is_some_and(|top| parts.first() != Some(&top)) {
                return None;
            }
            parts.push(name.as_str());
            Some(parts.join("/"))
        })
    }

    pub fn cover_count(&self) -> usize {
        self.cover_count
    }

    pub fn dir_count(&self) -> usize {
        self.dir_count
    }

    /// Up to `max` other files of `ino`'s directory, in listing order
    /// starting after `ino` (and wrapping around): the files a reader of
    /// `ino` is likely to open next.
    pub fn files_after(&self, ino: u64, max: usize) -> Vec<FileEntry> {
        self.siblings_after(ino, max, true)
    }

    /// Up to `max` files listed after `ino` in its directory, without
    /// wrapping around to the first ones.
    pub fn next_files(&self, ino: u64, max: usize) -> Vec<FileEntry> {
        self.siblings_after(ino, max, false)
    }

    fn siblings_after(&self, ino: u64, max: usize, wrap: bool) -> Vec<FileEntry> {
        let Some(node) = self.nodes.get(&ino) else {
            return Vec::new();
        };
        let Some(Entry::Dir { children, .. }) = self.nodes.get(&node.parent).map(|n| &n.entry) else {
            return Vec::new();
        };
        use std::ops::Bound::{Excluded, Unbounded};
        let name = &*node.name;
        let after = children.range::<str, _>((Excluded(name), Unbounded));
        let before = children
            .range::<str, _>((Unbounded, Excluded(name)))
            .take(if wrap { usize::MAX } else { 0 });
        after
            .chain(before)
            .filter_map(|(_, child)| match &self.nodes.get(child)?.entry {
                Entry::File(f) => Some(f.clone()),
                _ => None,
            })
            .take(max)
            .collect()
    }

    /// Up to `max` files of the first directory that holds any after the
    /// directory of file `ino` in a depth-first walk of the tree in listing
    /// order (its subdirectories first, then the directories after it): the
    /// files a walker of the tree (an indexer, a copy, a player going on to
    /// the next album) opens next. At most [`DIRS_PASSED`] directories
    /// without files are passed over looking for them.
    pub fn files_of_next_dir(&self, ino: u64, max: usize) -> Vec<FileEntry> {
        let mut dir = self.nodes.get(&ino).map(|n| n.parent);
        for _ in 0..DIRS_PASSED {
            dir = dir.and_then(|d| self.first_subdir(d).or_else(|| self.next_dir(d)));
            let Some(Entry::Dir { children, .. }) = dir.and_then(|d| self.nodes.get(&d)).map(|n| &n.entry)
            else {
                break;
            };
            let files: Vec<FileEntry> = (children.values())
                .filter_map(|child| match &self.nodes.get(child)?.entry {
                    Entry::File(f) => Some(f.clone()),
                    _ => None,
                })
                .take(max)
                .collect();
            if !files.is_empty() {
                return files;
            }
        }
        Vec::new()
    }

    /// The first subdirectory of `dir` in listing order.
    fn first_subdir(&self, dir: u64) -> Option<u64> {
        let Entry::Dir { children, .. } = &self.nodes.get(&dir)?.entry else {
            return None;
        };
        (children.values().copied()).find(|child| self.nodes.get(child).is_some_and(Node::is_dir))
    }

    /// The directory listed after `dir` in its parent, or else after its
    /// parent in the grandparent, and so on up to the root.
    fn next_dir(&self, mut dir: u64) -> Option<u64> {
        while dir != self.root {
            let node = self.nodes.get(&dir)?;
            let Entry::Dir { children, .. } = &self.nodes.get(&node.parent)?.entry else {
                return None;
            };
            let after = children.range::<str, _>((Bound::Excluded(&*node.name), Bound::Unbounded));
            if let Some((_, &next)) = after
                .into_iter()
                .find(|(_, c)| self.nodes.get(c).is_some_and(Node::is_dir))
            {
                return Some(next);
            }
            dir = node.parent;
        }
        None
    }

    /// Every file's relative path, sorted.
    pub fn file_paths(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.file_count());
        self.walk(self.root, &mut String::new(), &mut out);
        out
    }

    fn walk(&self, dir: u64, prefix: &mut String, out: &mut Vec<String>) {
        let Some(Entry::Dir { children, .. }) = self.nodes.get(&dir).map(|n| &n.entry) else {
            return;
        };
        for (name, &ino) in children.iter() {
            let len = prefix.len();
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(name);
            match self.nodes[&ino].entry {
                Entry::Dir { .. } => self.walk(ino, prefix, out),
                Entry::File(_) => out.push(prefix.clone()),
                Entry::Cover { .. } | Entry::Playlist { .. } => {}
            }
            prefix.truncate(len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(super) fn place(id: i64, path: &str) -> Placement {
        Placement {
            path: path.to_string(),
            file: FileEntry {
                track_id: id,
                format: Format::Flac,
                name_extension: NameExtension::OfFormat,
                size: 1,
                mtime_ns: 0,
                content_version: 1,
                cover: None,
            },
        }
    }

    #[test]
    fn file_inodes_name_their_track() {
        assert_eq!(track_of_file_ino(file_ino(7)), Some(7));
        assert_eq!(track_of_file_ino(ROOT_INO), None);
        assert_eq!(track_of_file_ino(DIR_BIT | 7), None);
    }

    #[test]
    fn files_after_follow_the_listing_wrap_around_and_skip_directories() {
        let t = Tree::build(vec![
            place(1, "A/a"),
            place(2, "A/b"),
            place(3, "A/c"),
            place(4, "A/sub/d"),
            place(5, "B/e"),
        ]);
        let ids = |v: Vec<FileEntry>| v.iter().map(|f| f.track_id).collect::<Vec<_>>();
        assert_eq!(ids(t.files_after(file_ino(2), 10)), [3, 1]);
        assert_eq!(ids(t.files_after(file_ino(1), 1)), [2]);
        assert_eq!(ids(t.next_files(file_ino(2), 10)), [3]);
        assert!(t.next_files(file_ino(3), 10).is_empty());
        assert!(t.files_after(file_ino(5), 10).is_empty());
        assert!(t.files_after(999, 10).is_empty());
    }

    #[test]
    fn the_next_directory_is_the_one_a_depth_first_walk_reaches_next() {
        let t = Tree::build(vec![
            place(1, "A/one/a"),
            place(2, "A/one/b"),
            place(3, "A/one/deeper/c"),
            place(4, "A/two/d"),
            place(5, "A/two/e"),
            place(6, "B/x/y/z/f"),
            place(7, "C/g"),
        ]);
        let ids = |v: Vec<FileEntry>| v.iter().map(|f| f.track_id).collect::<Vec<_>>();
        // Subdirectories first, then the next one beside, then up.
        assert_eq!(ids(t.files_of_next_dir(file_ino(1), 10)), [3]);
        assert_eq!(ids(t.files_of_next_dir(file_ino(3), 10)), [4, 5]);
        assert_eq!(ids(t.files_of_next_dir(file_ino(4), 1)), [6]);
        // Directories without files are passed over.
        assert_eq!(ids(t.files_of_next_dir(file_ino(6), 10)), [7]);
        assert!(t.files_of_next_dir(file_ino(7), 10).is_empty(), "the walk ends");
        assert!(t.files_of_next_dir(999, 10).is_empty());
    }

    #[test]
    fn a_refresh_dates_only_the_directories_it_changed() {
        let mut t = Tree::build(vec![place(1, "A/x"), place(2, "B/y"), place(3, "B/z")]);
        let (a, b) = (t.child(ROOT_INO, "A").unwrap(), t.child(ROOT_INO, "B").unwrap());
        assert_eq!(t.listing_changed_at(b), None);
        let mut out = Invalidations::default();
        t.replace(file_ino(2), vec![place(2, "B/w")], &mut out);
        t.note_listing_changes(&out, None);
        assert!(t.listing_changed_at(b).is_some());
        assert_eq!(t.listing_changed_at(a), None);
        assert_eq!(t.listing_changed_at(ROOT_INO), None);

        // A rebuild keeps the times of directories that still exist.
        let mut rebuilt = Tree::build(vec![place(1, "A/x"), place(2, "B/w"), place(3, "C/z")]);
        let out = t.diff(&rebuilt);
        rebuilt.note_listing_changes(&out, Some(&t));
        assert!(rebuilt.listing_changed_at(b).is_some());
        assert!(
            rebuilt.listing_changed_at(ROOT_INO).is_some(),
            "C was added to the root"
        );
        assert_eq!(rebuilt.listing_changed_at(a), None);
    }

    #[test]
    fn collisions_get_deterministic_suffixes() {
        let t = Tree::build(vec![place(3, "A/x"), place(1, "A/x"), place(2, "A/x")]);
        let a = t.child(ROOT_INO, "A").unwrap();
        assert_eq!(t.child(a, "x.flac"), Some(file_ino(1)));
        assert_eq!(t.child(a, "x (2).flac"), Some(file_ino(2)));
        assert_eq!(t.child(a, "x (3).flac"), Some(file_ino(3)));
    }

    #[test]
    fn many_equal_names_and_a_real_suffix_title_stay_unique() {
        let mut places: Vec<Placement> = (1..=3000).map(|id| place(id, "A/x")).collect();
        places.push(place(5000, "A/x (7)"));
        let t = Tree::build(places);
        let a = t.child(ROOT_INO, "A").unwrap();
        assert_eq!(t.child(a, "x (2).flac"), Some(file_ino(2)));
        assert_eq!(t.child(a, "x (3000).flac"), Some(file_ino(3000)));
        // Inserted in track-id order: the title "x (7)" came last.
        assert_eq!(t.child(a, "x (7).flac"), Some(file_ino(7)));
        assert_eq!(t.child(a, "x (7) (2).flac"), Some(file_ino(5000)));
        assert_eq!(t.file_paths().len(), 3001);
    }

    #[test]
    fn months_of_refreshes_keep_no_suffix_memory_for_names_gone() {
        let mut t = Tree::build(vec![place(1, "A/x")]);
        let mut out = Invalidations::default();
        // Two tracks of one name moved together from folder to folder, as
        // an album renamed again and again.
        for i in 0..1000 {
            for id in [2, 3] {
                t.replace(file_ino(id), vec![place(id, &format!("D{i}/x"))], &mut out);
            }
        }
        let last = t.child(ROOT_INO, "D999").unwrap();
        assert_eq!(t.child(last, "x (2).flac"), Some(file_ino(3)));
        let remembered: usize = t.next_suffix.values().map(|names| names.len()).sum();
        assert_eq!(remembered, 1, "only D999's x.flac still clashes");
        // Nodes removed on the way left their slots to the next ones: the
        // array holds what is live and what the busiest moment needed.
        assert_eq!(t.nodes.len(), 6, "root, A, x.flac, D999, its two files");
        assert!(t.nodes.slots() <= 8, "{} slots", t.nodes.slots());

        // The name freed, the next file of that name takes it as it is.
        t.replace(file_ino(2), vec![], &mut out);
        assert!(t.next_suffix.is_empty());
        t.replace(file_ino(4), vec![place(4, "D999/x")], &mut out);
        assert_eq!(t.child(last, "x.flac"), Some(file_ino(4)));
    }

    /// A folder of `n` files and one subfolder.
    fn folder_of(n: i64) -> Tree {
        let mut places: Vec<Placement> = (1..=n)
            .map(|id| place(id, &format!("A/{:03} song", (id * 37) % 101)))
            .collect();
        places.push(place(n + 1, "A/sub/x"));
        Tree::build(places)
    }

    /// The names listed after `offset`, at most `room` of them, and the
    /// offset to resume from.
    fn page(t: &Tree, dir: u64, offset: u64, room: usize) -> (Vec<String>, u64) {
        let mut next = offset;
        let names = t
            .listing(dir, offset)
            .unwrap()
            .take(room)
            .map(|(_, name, cookie)| {
                next = cookie;
                name.to_string()
            })
            .collect();
        (names, next)
    }

    #[test]
    fn a_listing_read_in_pages_of_any_size_names_every_entry_once() {
        let t = folder_of(60);
        let dir = t.child(ROOT_INO, "A").unwrap();
        let (whole, _) = page(&t, dir, 0, usize::MAX);
        assert_eq!(whole.len(), 2 + 61);
        assert_eq!(&whole[..2], [".", ".."]);
        for room in 1..=7 {
            let (mut listed, mut offset) = (Vec::new(), 0);
            loop {
                let (names, next) = page(&t, dir, offset, room);
                if names.is_empty() {
                    break;
                }
                listed.extend(names);
                offset = next;
            }
            assert_eq!(listed, whole, "pages of {room}");
        }
        assert_eq!(t.listing(file_ino(1), 0).err(), Some(ListingError::NotADirectory));
        assert_eq!(t.listing(12345, 0).err(), Some(ListingError::NotFound));
    }

    #[test]
    fn an_entry_removed_between_pages_shifts_no_other() {
        let mut t = folder_of(30);
        let dir = t.child(ROOT_INO, "A").unwrap();
        let (whole, _) = page(&t, dir, 0, usize::MAX);
        let (first, offset) = page(&t, dir, 0, 10);
        // A refresh removes an entry already listed.
        let gone = t.child(dir, &first[5]).unwrap();
        t.replace(gone, vec![], &mut Invalidations::default());
        let (rest, _) = page(&t, dir, offset, usize::MAX);
        assert_eq!([first, rest].concat(), whole);
        // Resuming after an entry that is gone ends the listing.
        assert!(page(&t, dir, listing_cookie(gone), usize::MAX).0.is_empty());
        assert_eq!(file_ino(1), 2, "file cookies start above the dots' 1 and 2");
    }

    #[test]
    fn hostile_components_are_cleaned() {
        let t = Tree::build(vec![
            place(1, "../../etc/passwd"),
            place(2, "./.hidden/\u{7}x\ny"),
        ]);
        assert_eq!(
            t.file_paths(),
            vec!["_hidden/x y.flac".to_string(), "etc/passwd.flac".to_string()]
        );
    }

    #[test]
    fn names_are_made_safe_for_windows_when_asked() {
        assert_eq!(
            windows_safe(r#"AC\DC: Live?/What "is" <this>|*/CON/nul.live/Com1 /LPT10/Dots.../con /"#),
            "AC_DC_ Live_/What _is_ _this___/CON_/nul_.live/Com1_/LPT10/Dots/con_/"
        );
        assert_eq!(
            windows_safe("Abbey Road/Come Together"),
            "Abbey Road/Come Together"
        );
        assert_eq!(windows_safe("aaé/COMé/Sigur Rós."), "aaé/COMé/Sigur Rós");
    }

    #[test]
    fn a_file_whose_name_renders_empty_stays_in_its_folder() {
        let t = Tree::build(vec![
            place(1, "Artist/Album/ "),
            place(2, "Artist/Album/.."),
            place(3, ""),
        ]);
        assert_eq!(
            t.file_paths(),
            [
                "Artist/Album/track 1.flac",
                "Artist/Album/track 2.flac",
                "track 3.flac"
            ]
        );
    }

    #[test]
    fn inodes_are_stable_across_builds() {
        let a = Tree::build(vec![place(1, "A/B/x"), place(2, "C/y")]);
        let b = Tree::build(vec![place(2, "C/y"), place(1, "A/B/x")]);
        let ino = |t: &Tree, p: &str| p.split('/').try_fold(ROOT_INO, |d, n| t.child(d, n));
        for p in ["A", "A/B", "C", "A/B/x.flac"] {
            assert_eq!(ino(&a, p), ino(&b, p));
        }
    }

    #[test]
    fn long_names_are_capped_with_extension_kept() {
        let long = "é".repeat(200);
        let t = Tree::build(vec![
            place(1, &format!("{long}/{long}")),
            place(2, &format!("{long}/{long}")),
        ]);
        for p in t.file_paths() {
            for comp in p.split('/') {
                assert!(comp.len() <= NAME_MAX, "{} bytes", comp.len());
            }
            assert!(p.ends_with(".flac"));
        }
        assert_eq!(t.file_count(), 2);
    }

    #[test]
    fn components_are_cleaned_and_plain_ones_kept_as_they_are() {
        let clean = |raw: &str| sanitize_component(raw);
        assert_eq!(clean("  Abbey Road  ").as_deref(), Some("Abbey Road"));
        assert_eq!(clean("Sigur Rós – ( )").as_deref(), Some("Sigur Rós – ( )"));
        assert_eq!(clean("\tA\u{1}B\n").as_deref(), Some("A B"));
        assert_eq!(clean("\u{1}Live").as_deref(), Some("Live"));
        assert_eq!(clean(".hidden").as_deref(), Some("_hidden"));
        assert_eq!(clean(" \u{0}.x").as_deref(), Some("_x"));
        for gone in ["", "   ", ".", "..", " .. ", "\u{1}\u{0}"] {
            assert_eq!(clean(gone), None, "{gone:?}");
        }
    }

    proptest! {
        #[test]
        fn every_track_gets_a_unique_valid_path(paths in proptest::collection::vec(".{0,300}", 1..20)) {
            let placements: Vec<Placement> = paths.iter().enumerate().map(|(i, p)| place(i as i64 + 1, p)).collect();
            let t = Tree::build(placements);
            let files = t.file_paths();
            prop_assert_eq!(files.len(), paths.len());
            for f in &files {
                for comp in f.split('/') {
                    prop_assert!(!comp.is_empty() && comp != "." && comp != ".." && comp.len() <= NAME_MAX);
                    prop_assert!(!comp.chars().any(|c| c.is_control()));
                }
            }
        }
    }

    #[test]
    fn a_track_placed_in_several_folders_is_one_file_in_each() {
        let t = Tree::build(vec![
            place(1, "Genres/Jazz/a"),
            place(1, "Genres/Soul/a"),
            place(1, "Genres/Jazz/a"),
            place(2, "Genres/Jazz/b"),
        ]);
        let ino = file_ino(1);
        assert_eq!(t.link_count(ino), 2, "once per folder");
        assert_eq!(t.file_count(), 2);
        let genres = t.child(ROOT_INO, "Genres").unwrap();
        let (jazz, soul) = (t.child(genres, "Jazz").unwrap(), t.child(genres, "Soul").unwrap());
        assert_eq!(
            (t.child(jazz, "a.flac"), t.child(soul, "a.flac")),
            (Some(ino), Some(ino))
        );
        let listed = |dir, offset| -> Vec<(String, u64)> {
            let entries = t.listing(dir, offset).unwrap();
            entries
                .map(|(_, name, cookie)| (name.to_string(), cookie))
                .collect()
        };
        let cookie_of = |dir, name: &str| listed(dir, 0).into_iter().find(|(n, _)| n == name).unwrap().1;
        let names = |entries: Vec<(String, u64)>| entries.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(names(listed(jazz, cookie_of(jazz, "a.flac"))), ["b.flac"]);
        assert!(
            listed(soul, cookie_of(soul, "a.flac")).is_empty(),
            "resumed in the second place"
        );
    }

    #[test]
    fn a_file_in_several_places_leaves_each_and_the_folders_it_empties() {
        let mut t = Tree::build(vec![
            place(1, "G/Jazz/a"),
            place(1, "G/Soul/a"),
            place(2, "G/Jazz/b"),
        ]);
        let g = t.child(ROOT_INO, "G").unwrap();
        let mut out = Invalidations::default();
        t.replace(
            file_ino(1),
            vec![place(1, "G/Jazz/a"), place(1, "G/Funk/a")],
            &mut out,
        );
        assert_eq!(
            t.file_paths(),
            ["G/Funk/a.flac", "G/Jazz/a.flac", "G/Jazz/b.flac"]
        );
        assert!(out.entries.contains(&(g, "Soul".to_string())), "{out:?}");
        assert!(out.entries.contains(&(g, "Funk".to_string())), "{out:?}");
        t.replace(file_ino(1), vec![], &mut out);
        assert_eq!(t.file_paths(), ["G/Jazz/b.flac"]);
        assert_eq!((t.link_count(file_ino(1)), t.dir_count()), (0, 3));
    }

    #[test]
    fn the_same_places_keep_their_names_and_a_diff_sees_a_place_change() {
        let a = Tree::build(vec![place(1, "X/a"), place(1, "Y/a")]);
        let mut b = a.clone();
        let mut out = Invalidations::default();
        b.replace(file_ino(1), vec![place(1, "X/a"), place(1, "Y/a")], &mut out);
        assert!(out.entries.is_empty(), "{out:?}");
        let c = Tree::build(vec![place(1, "X/a"), place(1, "Z/a")]);
        let diff = a.diff(&c);
        let y = a.child(ROOT_INO, "Y").unwrap();
        assert!(diff.entries.contains(&(y, "a.flac".to_string())), "{diff:?}");
        assert!(diff.inodes.contains(&file_ino(1)));
        assert!(a.diff(&a.clone()).entries.is_empty());
    }
}
