//! Requests read from `/dev/fuse` by fuser's session threads, each with
//! its own cloned descriptor: handing an open or a read to another thread
//! cost more than the work itself (measured: 200 opens of small files
//! 35 ms with a hand-off, 16 ms without). With FUSE over io_uring these
//! threads see only the init and forgets.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{
    FileHandle, Filesystem, Generation, INodeNo, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, Request,
};

use crate::server::{dir_entries, kind_of, Server, BLOCK_SIZE, TTL};
use crate::uring;

/// fuser's view of the [`Server`].
pub(crate) struct DevFuse(pub(crate) Arc<Server>);

thread_local! {
    /// Per-thread read buffer, reused so a read allocates nothing.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Filesystem for DevFuse {
    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> io::Result<()> {
        let server = &self.0;
        // Listings carry attributes; a kernel without it falls back to READDIR.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DO_READDIRPLUS);
        // Attributes fetched again are compared with the cached ones, so a
        // directory whose mtime moved (its listing changed) is listed anew.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_AUTO_INVAL_DATA);
        // File handles outlive the kernel's inode cache (an NFS export of the
        // mount): inode numbers are stable, and lookups of "." and ".."
        // find any inode again.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_EXPORT_SUPPORT);
        // Directories need no open: one round trip less per directory walked.
        let no_opendir = config
            .add_capabilities(fuser::InitFlags::FUSE_NO_OPENDIR_SUPPORT)
            .is_ok();
        server.no_opendir.store(no_opendir, Ordering::Relaxed);
        if server.passthrough.load(Ordering::Relaxed) {
            // Depth 2: backing files may sit on a stacked file system
            // (overlayfs) themselves.
            let on = config
                .add_capabilities(fuser::InitFlags::FUSE_PASSTHROUGH)
                .is_ok()
                && config.set_max_stack_depth(2).is_ok();
            server.passthrough.store(on, Ordering::Relaxed);
        }
        // Nothing is written: writes need no 16 MiB buffers, and each
        // io_uring entry's buffer is as large as the largest request.
        let _ = config.set_max_write(uring::PAYLOAD as u32);
        if server.uring.load(Ordering::Relaxed) {
            let on = uring::usable()
                && config
                    .add_capabilities(fuser::InitFlags::FUSE_OVER_IO_URING)
                    .is_ok();
            server.uring.store(on, Ordering::Relaxed);
        }
        tracing::info!(
            "kernel passthrough for byte-identical files: {}; requests through io_uring: {}",
            on_off(server.passthrough.load(Ordering::Relaxed)),
            on_off(server.uring.load(Ordering::Relaxed)),
        );
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.0.lookup(parent.0, name.as_bytes()) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.0.getattr(ino.0) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let opened = match self.0.open(ino.0, flags.0) {
            Ok(opened) => opened,
            Err(e) => {
                reply.error(e);
                return;
            }
        };
        let fh = FileHandle(opened.fh);
        match &opened.backing {
            Some(backing) => {
                // SAFETY: the id is registered on this session and stays
                // so while the handle is open (the server holds it); the
                // wrapper is unwrapped again below so it never closes it.
                let id = unsafe { reply.wrap_backing(backing.id()) };
                reply.opened_passthrough(fh, opened.flags, &id);
                id.into_raw();
            }
            None => reply.opened(fh, opened.flags),
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
        READ_BUF.with_borrow_mut(|buf| {
            if buf.len() < size as usize {
                buf.resize(size as usize, 0);
            }
            match self.0.read(fh.0, offset, &mut buf[..size as usize]) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(e),
            }
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
        self.0.release(ino.0, fh.0);
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
        // Nothing is ever buffered for writing (and opens answer
        // FOPEN_NOFLUSH, so the kernel does not ask).
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.0.opendir(ino.0) {
            Ok(flags) => reply.opened(FileHandle(0), flags),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let tree = self.0.lib.tree();
        let result = dir_entries(&tree, ino.0, offset, |child, node, next, name| {
            reply.add(INodeNo(child), next, kind_of(node), name)
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
        let tree = self.0.lib.tree();
        let result = dir_entries(&tree, ino.0, offset, |child, node, next, name| match node {
            Some(node) => reply.add(
                INodeNo(child),
                next,
                name,
                &TTL,
                &self.0.attr(&tree, child, node),
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
        reply.statfs(
            0,
            0,
            0,
            self.0.file_count(),
            0,
            BLOCK_SIZE,
            retagfs_core::tree::NAME_MAX as u32,
            BLOCK_SIZE,
        );
    }
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}
