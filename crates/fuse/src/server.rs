//! The answers to kernel requests, as plain values, which
//! [`crate::protocol`] encodes for both ways requests arrive (`/dev/fuse`
//! and FUSE over io_uring). Names, attributes and bytes all come from [`View`].

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, FopenFlags, INodeNo};
use retagfs_core::view::search::{is_search_ino, SearchError, SEARCH_DIR_INO, SEARCH_DIR_NAME, SEARCH_TTL};
use retagfs_core::view::tree::{Entry, ListingError, Node, Tree, ROOT_INO};
use retagfs_core::{OpenFile, View};

use crate::backing::Backing;
use crate::open_inodes::OpenInodes;
use crate::Ownership;

/// How long the kernel may cache entries and attributes. Long, because a
/// refresh tells the kernel what to forget as soon as the store changes.
pub(crate) const TTL: Duration = Duration::from_secs(60);
/// Preferred I/O size reported in `stat` for files.
pub(crate) const BLOCK_SIZE: u32 = 128 * 1024;
/// The same for folders. glibc sizes a listing's buffer by it (32 KiB at
/// least), and the kernel allocates and maps pages of that size for every
/// READDIRPLUS it sends: a first `find` over 20k tracks (two requests per
/// folder) spent a fifth of its listing time on them at 128 KiB.
const DIR_BLOCK_SIZE: u32 = 32 * 1024;

/// The state of a mount shared by every thread answering requests.
pub(crate) struct Server {
    pub(crate) lib: Arc<View>,
    /// Open files; the `Arc` lets a read go on while the handle's entry is
    /// looked up or released by another thread.
    handles: Mutex<HashMap<u64, Handle>>,
    open_inodes: OpenInodes,
    /// Whether the kernel reads whole-backing files itself (FUSE
    /// passthrough): asked for at init, turned off at the first refusal.
    pub(crate) passthrough: AtomicBool,
    /// The kernel sends no opendir/releasedir (listings are cached anyway).
    pub(crate) no_opendir: AtomicBool,
    /// The kernel agreed to send requests through io_uring.
    pub(crate) uring: AtomicBool,
    next_handle: AtomicU64,
    ownership: Ownership,
    mounted_at: SystemTime,
    /// The session's `/dev/fuse`, set once mounted: backing files are
    /// registered on it.
    pub(crate) dev: OnceLock<Arc<OwnedFd>>,
    warmer: Warmer,
}

/// Prepares the files likely opened next on a thread of its own: a thread
/// answering requests never waits for it (with io_uring, its queue entry
/// would take new requests it could not answer). Its disk reads keep the
/// normal I/O class: a client opening one of these files waits for the very
/// pages they fetch, and an idle-class request waits behind every other.
struct Warmer {
    queue: Option<SyncSender<Job>>,
}

enum Job {
    /// Resolve the files likely opened after this one ([`View::warm_ahead`]).
    Warm(u64),
    /// Read the start of the files after this track ([`View::prefetch_after`]).
    Prefetch(i64),
}

/// Jobs waiting; more are dropped (their files are prepared by their own
/// opens).
const WARM_QUEUE: usize = 64;

impl Warmer {
    fn start(lib: Arc<View>) -> Warmer {
        let (queue, jobs) = mpsc::sync_channel::<Job>(WARM_QUEUE);
        let started = std::thread::Builder::new().name("warm".into()).spawn(move || {
            for job in jobs {
                match job {
                    Job::Warm(ino) => lib.warm_ahead(ino),
                    Job::Prefetch(track_id) => lib.prefetch_after(track_id),
                }
            }
        });
        match started {
            Ok(_) => Warmer { queue: Some(queue) },
            Err(e) => {
                tracing::warn!("cannot start the thread that prepares files before they are opened: {e}");
                Warmer { queue: None }
            }
        }
    }

    /// Queues a job, never waiting.
    fn queue(&self, job: Job) {
        if let Some(queue) = &self.queue {
            let _ = queue.try_send(job);
        }
    }
}

/// An open file handle.
struct Handle {
    file: Arc<OpenFile>,
    /// The kernel reads the backing file itself.
    passthrough: bool,
}

/// The answer to an open.
pub(crate) struct Opened {
    pub(crate) fh: u64,
    pub(crate) flags: FopenFlags,
    /// Set when the kernel reads this handle from the backing file itself.
    pub(crate) backing: Option<Arc<Backing>>,
}

pub(crate) fn errno_of(e: &io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn time_of(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH
    }
}

impl Server {
    /// `passthrough` and `uring` are what to ask the kernel for at init;
    /// they then say what it agreed to.
    pub(crate) fn new(lib: Arc<View>, passthrough: bool, uring: bool, ownership: Ownership) -> Server {
        Server {
            warmer: Warmer::start(lib.clone()),
            lib,
            handles: Mutex::default(),
            open_inodes: OpenInodes::default(),
            passthrough: AtomicBool::new(passthrough),
            no_opendir: AtomicBool::new(false),
            uring: AtomicBool::new(uring),
            next_handle: AtomicU64::new(1),
            ownership,
            mounted_at: SystemTime::now(),
            dev: OnceLock::new(),
        }
    }

    pub(crate) fn attr(&self, tree: &Tree, ino: u64, node: &Node) -> FileAttr {
        match &node.entry {
            Entry::Dir { .. } => self.dir_attr(ino, tree.listing_changed_at(ino)),
            Entry::File(f) => FileAttr {
                // One file in each folder of each view that shows it.
                nlink: tree.link_count(ino).max(1) as u32,
                ..self.attr_of(
                    ino,
                    FileType::RegularFile,
                    f.size,
                    self.ownership.file_mode,
                    time_of(f.mtime_ns),
                )
            },
            // A cover or a playlist: what clients see of it.
            other => {
                let served = self.lib.served_file_of(other);
                let (size, mtime) = served.map_or((0, self.mounted_at), |s| (s.size, time_of(s.mtime_ns)));
                self.attr_of(ino, FileType::RegularFile, size, self.ownership.file_mode, mtime)
            }
        }
    }

    /// A folder's attributes; its mtime is when its entries last changed.
    fn dir_attr(&self, ino: u64, changed: Option<SystemTime>) -> FileAttr {
        let mtime = changed.unwrap_or(self.mounted_at);
        self.attr_of(ino, FileType::Directory, 0, self.ownership.dir_mode, mtime)
    }

    fn attr_of(&self, ino: u64, kind: FileType, size: u64, perm: u16, mtime: SystemTime) -> FileAttr {
        let own = &self.ownership;
        let nlink = if kind == FileType::Directory { 2 } else { 1 };
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: mtime,
            mtime,
            ctime: mtime,
            crtime: mtime,
            kind,
            perm,
            nlink,
            uid: own.uid,
            gid: own.gid,
            rdev: 0,
            flags: 0,
            blksize: match kind {
                FileType::Directory => DIR_BLOCK_SIZE,
                _ => BLOCK_SIZE,
            },
        }
    }

    /// The attributes of `name` in directory `parent`. The kernel asks for
    /// "." and ".." (of any inode) only to turn a file handle whose inode it
    /// no longer caches back into a file: an NFS export of the mount.
    pub(crate) fn lookup(&self, parent: u64, name: &[u8]) -> Result<FileAttr, Errno> {
        if parent == ROOT_INO && name == SEARCH_DIR_NAME.as_bytes() && self.lib.searches().enabled() {
            return Ok(self.dir_attr(SEARCH_DIR_INO, None));
        }
        if parent == SEARCH_DIR_INO {
            return self.lookup_search(name);
        }
        let tree = self.tree_of(parent).ok_or(Errno::ENOENT)?;
        let ino = match name {
            b"." => Some(parent),
            b".." => tree.get(parent).map(|node| node.parent),
            _ => std::str::from_utf8(name).ok().and_then(|n| tree.child(parent, n)),
        };
        ino.and_then(|ino| tree.get(ino).map(|node| self.attr(&tree, ino, node)))
            .ok_or(Errno::ENOENT)
    }

    pub(crate) fn getattr(&self, ino: u64) -> Result<FileAttr, Errno> {
        if ino == SEARCH_DIR_INO {
            return Ok(self.dir_attr(ino, None));
        }
        let tree = self.tree_of(ino).ok_or(Errno::ENOENT)?;
        tree.get(ino)
            .map(|node| self.attr(&tree, ino, node))
            .ok_or(Errno::ENOENT)
    }

    /// Opens a file for reading (`flags` as given to open(2)); the files
    /// likely opened after it are prepared in the background.
    pub(crate) fn open(&self, ino: u64, flags: i32) -> Result<Opened, Errno> {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(Errno::EROFS);
        }
        // Queued first: the next files are prepared on the other core while
        // this one is.
        if self.lib.claim_warming(ino) {
            self.warmer.queue(Job::Warm(ino));
        }
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        let file = self.lib.open(ino).map_err(|e| errno_of(&e))?;
        // Nothing is ever written, so there is nothing to flush.
        let flags = FopenFlags::FOPEN_NOFLUSH;
        if let Some(backing) = self.open_passthrough(ino, &file) {
            self.keep_handle(fh, file, true);
            return Ok(Opened {
                fh,
                flags: flags | FopenFlags::FOPEN_PASSTHROUGH,
                backing: Some(backing),
            });
        }
        let flags = flags | self.open_inodes.opened(ino, file.served.version);
        self.keep_handle(fh, file, false);
        Ok(Opened {
            fh,
            flags,
            backing: None,
        })
    }

    fn keep_handle(&self, fh: u64, file: OpenFile, passthrough: bool) {
        let handle = Handle {
            file: Arc::new(file),
            passthrough,
        };
        self.handles.lock().insert(fh, handle);
        retagfs_metrics::count(|m| m.open_files.inc());
    }

    /// A backing file registered with the kernel when it can read this
    /// file itself. The first refusal (no CAP_SYS_ADMIN, a backing file
    /// system that cannot be stacked on) turns passthrough off for the mount.
    fn open_passthrough(&self, ino: u64, file: &OpenFile) -> Option<Arc<Backing>> {
        if !self.passthrough.load(Ordering::Relaxed) {
            return None;
        }
        let backing = file.whole_backing_file()?;
        let dev = self.dev.get()?;
        match self
            .open_inodes
            .open_passthrough(ino, || Backing::register(dev, backing))
        {
            Ok(id) => id,
            Err(e) => {
                if self.passthrough.swap(false, Ordering::Relaxed) {
                    tracing::warn!(
                        "kernel passthrough refused ({e}): {} and other files are read through the daemon",
                        file.track.backing_path
                    );
                }
                None
            }
        }
    }

    /// Reads up to `out.len()` served bytes at `offset` of handle `fh`:
    /// the number of bytes read.
    pub(crate) fn read(&self, fh: u64, offset: u64, out: &mut [u8]) -> Result<usize, Errno> {
        let file = self
            .handles
            .lock()
            .get(&fh)
            .map(|h| h.file.clone())
            .ok_or(Errno::EBADF)?;
        let n = self.lib.read_into(&file, offset, out).map_err(|e| errno_of(&e))?;
        if file.read_through(offset, n) && self.lib.reads_ahead_after(&file) {
            self.warmer.queue(Job::Prefetch(file.track.id));
        }
        Ok(n)
    }

    pub(crate) fn release(&self, ino: u64, fh: u64) {
        let handle = self.handles.lock().remove(&fh);
        if handle.is_some() {
            retagfs_metrics::count(|m| m.open_files.dec());
        }
        match handle {
            Some(h) if h.passthrough => self.open_inodes.released_passthrough(ino),
            Some(h) => self.open_inodes.released(ino, h.file.served.version),
            None => {}
        }
    }

    /// Flags for an open directory; ENOSYS when the kernel was told it
    /// need not open directories (it then stops asking).
    pub(crate) fn opendir(&self, ino: u64) -> Result<FopenFlags, Errno> {
        if self.no_opendir.load(Ordering::Relaxed) {
            return Err(Errno::ENOSYS);
        }
        if ino == SEARCH_DIR_INO {
            return Ok(FopenFlags::empty());
        }
        let tree = self.tree_of(ino).ok_or(Errno::ENOENT)?;
        match tree.get(ino).map(|n| &n.entry) {
            // A search's listings change without the kernel being told.
            Some(Entry::Dir { .. }) if is_search_ino(ino) => Ok(FopenFlags::empty()),
            // The kernel keeps listings until a refresh invalidates the
            // directory's inode.
            Some(Entry::Dir { .. }) => Ok(FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE),
            Some(_) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    /// The tree an inode is in: the view's, or a search's (None: a search
    /// no longer kept, or `.search` itself, which has no tree).
    pub(crate) fn tree_of(&self, ino: u64) -> Option<TreeOf<'_>> {
        if is_search_ino(ino) {
            return self.lib.searches().tree_of(ino).map(TreeOf::Search);
        }
        Some(TreeOf::View(self.lib.tree()))
    }

    /// How long the kernel may keep what it learns of an inode (or of an
    /// entry in a folder).
    pub(crate) fn ttl_of(&self, ino: u64) -> Duration {
        if is_search_ino(ino) {
            SEARCH_TTL
        } else {
            TTL
        }
    }

    /// A search folder in `.search`, made when it is not kept.
    fn lookup_search(&self, name: &[u8]) -> Result<FileAttr, Errno> {
        match name {
            b"." => return Ok(self.dir_attr(SEARCH_DIR_INO, None)),
            b".." => return self.getattr(ROOT_INO),
            _ => {}
        }
        let name = std::str::from_utf8(name).map_err(|_| Errno::ENOENT)?;
        match self.lib.open_search(name) {
            Ok(tree) => {
                let root = tree.root();
                let node = tree.get(root).ok_or(Errno::EIO)?;
                Ok(self.attr(&tree, root, node))
            }
            Err(SearchError::Off) => Err(Errno::ENOENT),
            Err(e) => {
                tracing::warn!("{SEARCH_DIR_NAME}/{name}: {e}");
                Err(match e {
                    SearchError::Query(..) => Errno::EINVAL,
                    _ => Errno::EIO,
                })
            }
        }
    }

    /// The number of files served, for statfs.
    pub(crate) fn file_count(&self) -> u64 {
        self.lib.tree().file_count() as u64
    }
}

/// The view's tree (read-locked) or a search's.
pub(crate) enum TreeOf<'a> {
    View(parking_lot::RwLockReadGuard<'a, Tree>),
    Search(Arc<Tree>),
}

impl std::ops::Deref for TreeOf<'_> {
    type Target = Tree;

    fn deref(&self) -> &Tree {
        match self {
            TreeOf::View(tree) => tree,
            TreeOf::Search(tree) => tree,
        }
    }
}

/// Calls `add(child ino, child node, next offset, name)` for the entries
/// of directory `ino` after `offset` ([`Tree::listing`]), until it
/// returns true (reply buffer full).
pub(crate) fn dir_entries(
    tree: &Tree,
    ino: u64,
    offset: u64,
    mut add: impl FnMut(u64, Option<&Node>, u64, &str) -> bool,
) -> Result<(), Errno> {
    let entries = tree.listing(ino, offset).map_err(|e| match e {
        ListingError::NotFound => Errno::ENOENT,
        ListingError::NotADirectory => Errno::ENOTDIR,
    })?;
    for (child, name, cookie) in entries {
        if add(child, tree.get(child), cookie, name) {
            break;
        }
    }
    Ok(())
}

/// The kind of a directory entry's node (a vanished node lists as a
/// directory, as before: the lookup that follows answers ENOENT).
pub(crate) fn kind_of(node: Option<&Node>) -> FileType {
    match node.map(|n| &n.entry) {
        Some(Entry::File(_) | Entry::Cover { .. } | Entry::Playlist { .. }) => FileType::RegularFile,
        _ => FileType::Directory,
    }
}
