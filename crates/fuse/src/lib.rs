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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

use open_inodes::OpenInodes;

mod open_inodes;

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
    handles: Mutex<HashMap<u64, Handle>>,
    open_inodes: OpenInodes,
    /// Whether the kernel reads whole-backing files itself (FUSE
    /// passthrough): asked for at init, turned off at the first refusal.
    passthrough: AtomicBool,
    /// The kernel sends no opendir/releasedir (listings are cached anyway).
    no_opendir: bool,
    next_handle: AtomicU64,
    ownership: Ownership,
    mounted_at: SystemTime,
}

/// Owner, group and permission bits of every served file and directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ownership {
    pub uid: u32,
    pub gid: u32,
    pub file_mode: u16,
    pub dir_mode: u16,
}

impl Ownership {
    /// The mounting user's, read-only for everyone.
    pub fn of_current_user() -> Ownership {
        // SAFETY: getuid/getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Ownership {
            uid,
            gid,
            file_mode: 0o444,
            dir_mode: 0o555,
        }
    }
}

/// Mount settings beyond the library itself.
pub struct MountConfig {
    /// Threads answering requests (opens and reads block on the backing
    /// files, so a slow disk wants more of them).
    pub threads: usize,
    /// Let other users see the mount (needs `user_allow_other` for non-root).
    pub allow_other: bool,
    /// Let the kernel read byte-identical files straight from the backing
    /// file (FUSE passthrough; needs CAP_SYS_ADMIN and Linux 6.9+).
    pub kernel_passthrough: bool,
    pub ownership: Ownership,
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
    pub fn new(lib: Arc<Library>, passthrough: bool, ownership: Ownership) -> RetagFs {
        RetagFs {
            lib,
            handles: Mutex::default(),
            open_inodes: OpenInodes::default(),
            passthrough: AtomicBool::new(passthrough),
            no_opendir: false,
            next_handle: AtomicU64::new(1),
            ownership,
            mounted_at: SystemTime::now(),
        }
    }

    fn attr(&self, tree: &Tree, ino: u64, node: &Node) -> FileAttr {
        let own = &self.ownership;
        let (kind, size, perm, nlink, mtime) = match &node.entry {
            Entry::Dir { .. } => {
                let changed = tree.listing_changed_at(ino).unwrap_or(self.mounted_at);
                (FileType::Directory, 0, own.dir_mode, 2, changed)
            }
            Entry::File(f) => (
                FileType::RegularFile,
                f.size,
                own.file_mode,
                1,
                time_of(f.mtime_ns),
            ),
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
            uid: own.uid,
            gid: own.gid,
            rdev: 0,
            flags: 0,
            blksize: BLOCK_SIZE,
        }
    }
}

/// An open file handle.
struct Handle {
    file: Arc<OpenFile>,
    /// The kernel reads the backing file itself.
    passthrough: bool,
}

impl RetagFs {
    fn keep_handle(&self, fh: u64, file: OpenFile, passthrough: bool) {
        let handle = Handle {
            file: Arc::new(file),
            passthrough,
        };
        self.handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fh, handle);
    }

    /// A backing id when the kernel can read this file from its backing
    /// file. The first refusal (no CAP_SYS_ADMIN, a backing file system
    /// that cannot be stacked on) turns passthrough off for the mount.
    fn open_passthrough(
        &self,
        ino: u64,
        file: &OpenFile,
        reply: &ReplyOpen,
    ) -> Option<Arc<fuser::BackingId>> {
        if !self.passthrough.load(Ordering::Relaxed) {
            return None;
        }
        let backing = file.whole_backing_file()?;
        match self
            .open_inodes
            .open_passthrough(ino, || reply.open_backing(backing))
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
        // Attributes fetched again are compared with the cached ones, so a
        // directory whose mtime moved (its listing changed) is listed anew.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_AUTO_INVAL_DATA);
        // Directories need no open: one round trip less per directory walked.
        self.no_opendir = config
            .add_capabilities(fuser::InitFlags::FUSE_NO_OPENDIR_SUPPORT)
            .is_ok();
        if self.passthrough.load(Ordering::Relaxed) {
            // Depth 2: backing files may sit on a stacked file system
            // (overlayfs) themselves.
            let on = config
                .add_capabilities(fuser::InitFlags::FUSE_PASSTHROUGH)
                .is_ok()
                && config.set_max_stack_depth(2).is_ok();
            self.passthrough.store(on, Ordering::Relaxed);
        }
        tracing::info!(
            "kernel passthrough for byte-identical files: {}",
            if self.passthrough.load(Ordering::Relaxed) {
                "on"
            } else {
                "off"
            }
        );
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let tree = self.lib.tree();
        let found = name
            .to_str()
            .and_then(|n| tree.child(parent.0, n))
            .and_then(|ino| tree.get(ino).map(|node| self.attr(&tree, ino, node)));
        match found {
            Some(attr) => reply.entry(&TTL, &attr, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let tree = self.lib.tree();
        match tree.get(ino.0) {
            Some(node) => reply.attr(&TTL, &self.attr(&tree, ino.0, node)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            reply.error(Errno::EROFS);
            return;
        }
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        let file = match self.lib.open(ino.0) {
            Ok(file) => file,
            Err(e) => {
                reply.error(errno_of(&e));
                return;
            }
        };
        // Nothing is ever written, so there is nothing to flush.
        let flags = FopenFlags::FOPEN_NOFLUSH;
        if let Some(id) = self.open_passthrough(ino.0, &file, &reply) {
            self.keep_handle(fh, file, true);
            reply.opened_passthrough(FileHandle(fh), flags, &id);
            return;
        }
        let flags = flags | self.open_inodes.opened(ino.0, file.track.content_version);
        self.keep_handle(fh, file, false);
        reply.opened(FileHandle(fh), flags);
        // The reply is out: while the client reads, this thread prepares
        // the files it will likely open next.
        self.lib.warm_siblings(ino.0);
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
            .map(|h| h.file.clone());
        let Some(file) = file else {
            reply.error(Errno::EBADF);
            return;
        };
        READ_BUF.with_borrow_mut(|buf| match self.lib.read(&file, offset, size as usize, buf) {
            Ok(data) => reply.data(data),
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
        let handle = self
            .handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh.0);
        match handle {
            Some(h) if h.passthrough => self.open_inodes.released_passthrough(ino.0),
            Some(h) => self.open_inodes.released(ino.0, h.file.track.content_version),
            None => {}
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
        if self.no_opendir {
            // The kernel then stops asking, and caches listings as below.
            reply.error(Errno::ENOSYS);
            return;
        }
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
                &self.attr(&tree, child, node),
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
        let fs = RetagFs::new(lib.clone(), config.kernel_passthrough, config.ownership);
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

#[cfg(test)]
mod tests {
    use super::*;
    use retagfs_core::tree::ROOT_INO;

    #[test]
    fn root_inode_matches_fuse_root() {
        assert_eq!(ROOT_INO, INodeNo::ROOT.0);
    }
}
