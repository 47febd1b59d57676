//! Thin adapter from FUSE kernel requests to `retagfs-core`. It holds no
//! business logic: names, attributes and bytes all come from [`Library`].
//! Requests are answered on the session's threads, each with its own
//! cloned `/dev/fuse` descriptor: handing an open or a read to another
//! thread cost more than the work itself (measured: 200 opens of small
//! files 35 ms with a hand-off, 16 ms without).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    MountOption, OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, Request, Session, SessionACL,
};
use retagfs_core::tree::{Entry, Invalidations, Node, Tree};
use retagfs_core::watch::Watcher;
use retagfs_core::{Library, OpenFile};

/// How long the kernel may cache entries and attributes. Long, because a
/// refresh tells the kernel what to forget as soon as the store changes.
const TTL: Duration = Duration::from_secs(60);
/// Preferred I/O size reported in `stat`.
const BLOCK_SIZE: u32 = 128 * 1024;

/// The file system served to the kernel.
pub struct RetagFs {
    lib: Arc<Library>,
    /// Open files; the `Arc` lets a read go on while the handle's entry is
    /// looked up or released by another thread.
    handles: Mutex<HashMap<u64, Arc<OpenFile>>>,
    page_cache: PageCache,
    next_handle: AtomicU64,
    uid: u32,
    gid: u32,
    mounted_at: SystemTime,
}

/// Mount settings beyond the library itself.
pub struct MountConfig {
    /// Threads answering requests (opens and reads block on the backing
    /// files, so a slow disk wants more of them).
    pub threads: usize,
    /// Let other users see the mount (needs `user_allow_other` for non-root).
    pub allow_other: bool,
}

fn errno_of(e: &io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn time_of(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH
    }
}

impl RetagFs {
    pub fn new(lib: Arc<Library>) -> RetagFs {
        // SAFETY: getuid/getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        RetagFs {
            lib,
            handles: Mutex::default(),
            page_cache: PageCache::default(),
            next_handle: AtomicU64::new(1),
            uid,
            gid,
            mounted_at: SystemTime::now(),
        }
    }

    fn attr(&self, ino: u64, node: &Node) -> FileAttr {
        let (kind, size, perm, nlink, mtime) = match &node.entry {
            Entry::Dir { .. } => (FileType::Directory, 0, 0o555, 2, self.mounted_at),
            Entry::File(f) => (FileType::RegularFile, f.size, 0o444, 1, time_of(f.mtime_ns)),
        };
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
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            flags: 0,
            blksize: BLOCK_SIZE,
        }
    }
}

thread_local! {
    /// Per-thread read buffer, reused so a read allocates nothing.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Calls `add(child ino, child node, next offset, name)` for the entries
/// of directory `ino` from `offset` on ("." and ".." first), until it
/// returns true (reply buffer full).
fn dir_entries(
    tree: &Tree,
    ino: u64,
    offset: u64,
    mut add: impl FnMut(u64, Option<&Node>, u64, &str) -> bool,
) -> Result<(), Errno> {
    let node = tree.get(ino).ok_or(Errno::ENOENT)?;
    let Entry::Dir { children } = &node.entry else {
        return Err(Errno::ENOTDIR);
    };
    let dots = [(ino, "."), (node.parent, "..")];
    let entries = dots
        .into_iter()
        .chain(children.iter().map(|(name, &child)| (child, name.as_str())));
    for (i, (child, name)) in entries.enumerate().skip(offset as usize) {
        if add(child, tree.get(child), (i + 1) as u64, name) {
            break;
        }
    }
    Ok(())
}

impl Filesystem for RetagFs {
    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> io::Result<()> {
        // Listings carry attributes; a kernel without it falls back to READDIR.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DO_READDIRPLUS);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let tree = self.lib.tree();
        let found = name
            .to_str()
            .and_then(|n| tree.child(parent.0, n))
            .and_then(|ino| tree.get(ino).map(|node| self.attr(ino, node)));
        match found {
            Some(attr) => reply.entry(&TTL, &attr, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.lib.tree().get(ino.0) {
            Some(node) => reply.attr(&TTL, &self.attr(ino.0, node)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            reply.error(Errno::EROFS);
            return;
        }
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        match self.lib.open(ino.0) {
            Ok(file) => {
                // Nothing is ever written, so there is nothing to flush.
                let flags =
                    self.page_cache.opened(ino.0, file.track.content_version) | FopenFlags::FOPEN_NOFLUSH;
                self.handles
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(fh, Arc::new(file));
                reply.opened(FileHandle(fh), flags);
            }
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let file = self
            .handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fh.0)
            .cloned();
        let Some(file) = file else {
            reply.error(Errno::EBADF);
            return;
        };
        READ_BUF.with_borrow_mut(|buf| match self.lib.read(&file, offset, size as usize, buf) {
            Ok(()) => reply.data(buf),
            Err(e) => reply.error(errno_of(&e)),
        });
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let file = self
            .handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh.0);
        if let Some(file) = file {
            self.page_cache.released(ino.0, file.track.content_version);
        }
        reply.ok();
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing is ever buffered for writing.
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.lib.tree().get(ino.0).map(|n| &n.entry) {
            // The kernel keeps listings until a refresh invalidates the
            // directory's inode.
            Some(Entry::Dir { .. }) => reply.opened(
                FileHandle(0),
                FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Some(_) => reply.error(Errno::ENOTDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let tree = self.lib.tree();
        let result = dir_entries(&tree, ino.0, offset, |child, node, next, name| {
            let kind = match node.map(|n| &n.entry) {
                Some(Entry::File(_)) => FileType::RegularFile,
                _ => FileType::Directory,
            };
            reply.add(INodeNo(child), next, kind, name)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// Entries with their attributes: `ls -l`, `find -printf %s` and media
    /// scanners need no lookup per file.
    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let tree = self.lib.tree();
        let result = dir_entries(&tree, ino.0, offset, |child, node, next, name| match node {
            Some(node) => reply.add(
                INodeNo(child),
                next,
                name,
                &TTL,
                &self.attr(child, node),
                Generation(0),
            ),
            None => false,
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let files = self.lib.tree().file_count() as u64;
        reply.statfs(
            0,
            0,
            0,
            files,
            0,
            BLOCK_SIZE,
            retagfs_core::tree::NAME_MAX as u32,
            BLOCK_SIZE,
        );
    }
}

/// Mounts the library and serves it until the file system is unmounted
/// (by `unmount` from another thread, or `fusermount3 -u` / `umount`).
pub struct Mount {
    session: Session<RetagFs>,
    watcher: Watcher,
}

/// Unmounts a running [`Mount`] from another thread (signal handler).
pub struct Unmounter(fuser::SessionUnmounter);

impl Unmounter {
    pub fn unmount(&mut self) -> io::Result<()> {
        self.0.unmount()
    }
}

impl Mount {
    pub fn new(lib: Arc<Library>, mountpoint: &Path, config: &MountConfig) -> io::Result<Mount> {
        let mut options = Config::default();
        options.mount_options = vec![
            MountOption::RO,
            MountOption::FSName("retagfs".into()),
            MountOption::Subtype("retagfs".into()),
            MountOption::DefaultPermissions,
            MountOption::NoDev,
            MountOption::NoSuid,
        ];
        if config.allow_other {
            options.acl = SessionACL::All;
        }
        options.n_threads = Some(config.threads.max(2));
        options.clone_fd = true;
        let fs = RetagFs::new(lib.clone());
        let session = Session::new(fs, mountpoint, &options)?;
        let notifier = session.notifier();
        let db = lib.db_path().to_path_buf();
        let watcher = Watcher::spawn(lib, &db, move |r| forget(&notifier, &r.invalidations))
            .map_err(|e| io::Error::other(format!("watching the store: {e:#}")))?;
        Ok(Mount { session, watcher })
    }

    pub fn unmounter(&mut self) -> Unmounter {
        Unmounter(self.session.unmount_callable())
    }

    /// Serves requests until unmounted.
    pub fn run(self) -> io::Result<()> {
        let result = self.session.run();
        self.watcher.stop();
        result
    }
}

/// Tells the kernel to forget stale entries and inodes, and the cached
/// listings of the directories whose entries changed. An entry or inode the
/// kernel never looked up is not an error.
fn forget(notifier: &fuser::Notifier, inv: &Invalidations) {
    let mut dirs = std::collections::BTreeSet::new();
    for (parent, name) in &inv.entries {
        let _ = notifier.inval_entry(INodeNo(*parent), OsStr::new(name));
        dirs.insert(*parent);
    }
    for &ino in inv.inodes.iter().chain(&dirs) {
        let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
    }
}

/// Which version of each file the kernel's page cache may hold, so that no
/// reader ever gets pages of two versions: a handle opened while handles of
/// another version are open bypasses the cache (direct I/O); otherwise the
/// cache is kept only when it holds this very version.
#[derive(Default)]
struct PageCache {
    inodes: Mutex<HashMap<u64, CacheState>>,
}

#[derive(Default)]
struct CacheState {
    /// Open handles per content version.
    open: HashMap<i64, usize>,
    /// The version whose pages the cache may hold.
    cached: Option<i64>,
}

impl PageCache {
    fn opened(&self, ino: u64, version: i64) -> FopenFlags {
        let mut inodes = self.inodes.lock().unwrap_or_else(|e| e.into_inner());
        let state = inodes.entry(ino).or_default();
        let others_open = state.open.iter().any(|(&v, &n)| v != version && n > 0);
        *state.open.entry(version).or_default() += 1;
        if others_open {
            return FopenFlags::FOPEN_DIRECT_IO;
        }
        let keep = state.cached == Some(version);
        state.cached = Some(version);
        if keep {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        }
    }

    fn released(&self, ino: u64, version: i64) {
        let mut inodes = self.inodes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(state) = inodes.get_mut(&ino) {
            if let Some(n) = state.open.get_mut(&version) {
                *n = n.saturating_sub(1);
            }
            state.open.retain(|_, n| *n > 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retagfs_core::tree::ROOT_INO;

    #[test]
    fn page_cache_never_mixes_versions() {
        let c = PageCache::default();
        // First open: the cache may hold anything, so it is dropped.
        assert_eq!(c.opened(5, 1), FopenFlags::empty());
        // Same version again: keep it.
        assert_eq!(c.opened(5, 1), FopenFlags::FOPEN_KEEP_CACHE);
        // A new version while version 1 is still open: bypass the cache.
        assert_eq!(c.opened(5, 2), FopenFlags::FOPEN_DIRECT_IO);
        c.released(5, 1);
        c.released(5, 1);
        // Version 1 closed; the cache may still hold its pages: drop them.
        assert_eq!(c.opened(5, 2), FopenFlags::empty());
        assert_eq!(c.opened(5, 2), FopenFlags::FOPEN_KEEP_CACHE);
    }

    #[test]
    fn root_inode_matches_fuse_root() {
        assert_eq!(ROOT_INO, INodeNo::ROOT.0);
    }
}
