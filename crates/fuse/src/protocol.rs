//! The FUSE wire format of the requests retagfs answers, shared by both
//! ways they arrive (reads of `/dev/fuse`, [`crate::dev_fuse`], and FUSE
//! over io_uring, [`crate::uring`]): a request's per-operation struct and
//! name in, the answer's bytes out, in the kernel's layout.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType};

use crate::kernel_abi::{open_in, out_header, read_in, release_in};
use crate::server::{dir_entries, kind_of, Server, BLOCK_SIZE};
use retagfs_core::view::search::SEARCH_DIR_INO;
use retagfs_core::view::tree::ROOT_INO;

// FUSE opcodes served; every other one is answered ENOSYS (the kernel then
// stops sending most of them).
pub(crate) const LOOKUP: u32 = 1;
pub(crate) const FORGET: u32 = 2;
pub(crate) const GETATTR: u32 = 3;
pub(crate) const OPEN: u32 = 14;
pub(crate) const READ: u32 = 15;
pub(crate) const STATFS: u32 = 17;
pub(crate) const RELEASE: u32 = 18;
pub(crate) const FLUSH: u32 = 25;
pub(crate) const OPENDIR: u32 = 27;
pub(crate) const READDIR: u32 = 28;
pub(crate) const RELEASEDIR: u32 = 29;
pub(crate) const INTERRUPT: u32 = 36;
pub(crate) const DESTROY: u32 = 38;
pub(crate) const BATCH_FORGET: u32 = 42;
pub(crate) const READDIRPLUS: u32 = 44;

/// Room for the largest per-operation struct the kernel sends
/// (`struct fuse_uring_req_header` reserves this much for it).
pub(crate) const OP_IN: usize = 128;
/// The longest name the kernel sends in a lookup (`FUSE_NAME_MAX`).
pub(crate) const NAME_MAX_IN: usize = 1024;

/// One request, wherever it was read from.
pub(crate) struct Request<'a> {
    pub(crate) opcode: u32,
    pub(crate) nodeid: u64,
    /// The per-operation struct (`fuse_read_in`, ...), zero-padded.
    pub(crate) op_in: &'a [u8; OP_IN],
    /// What follows it: the name of a lookup (NUL-terminated).
    pub(crate) name: &'a [u8],
}

/// Whether the kernel takes an answer to `opcode`: forgets are notices.
pub(crate) fn expects_answer(opcode: u32) -> bool {
    !matches!(opcode, FORGET | BATCH_FORGET)
}

/// Writes the answer to `req` at the start of `out` (at least as long as
/// the largest read): its length, or the error to answer. A panic while
/// answering is answered EIO, with a log line: a request left unanswered
/// would hang its caller.
pub(crate) fn answer(server: &Server, req: &Request, out: &mut [u8]) -> Result<usize, Errno> {
    let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| answer_in(server, req, out)));
    let answered = answered.unwrap_or_else(|_| {
        tracing::error!("answering opcode {} panicked; answered EIO", req.opcode);
        Err(Errno::EIO)
    });
    count(req.opcode, &answered);
    answered
}

/// Counts a request for `--metrics`: its kind, its error, the bytes a
/// read answered.
fn count(opcode: u32, answered: &Result<usize, Errno>) {
    retagfs_metrics::count(|m| {
        m.fuse_request(request_kind(opcode));
        match answered {
            Ok(n) if opcode == READ => {
                m.fuse_read_bytes.inc_by(*n as u64);
            }
            Ok(_) => {}
            Err(e) => m.fuse_error(e.code()),
        }
    });
}

/// The index in [`retagfs_metrics::FUSE_REQUEST_KINDS`] of `opcode`'s kind.
fn request_kind(opcode: u32) -> usize {
    match opcode {
        LOOKUP => 0,
        GETATTR => 1,
        OPEN => 2,
        READ => 3,
        RELEASE => 4,
        OPENDIR => 5,
        READDIR => 6,
        READDIRPLUS => 7,
        RELEASEDIR => 8,
        STATFS => 9,
        _ => 10,
    }
}

fn answer_in(server: &Server, req: &Request, out: &mut [u8]) -> Result<usize, Errno> {
    let op_in = req.op_in;
    let nodeid = req.nodeid;
    let mut out = Out::new(out);
    match req.opcode {
        LOOKUP => {
            let name = req.name.split(|&b| b == 0).next().unwrap_or_default();
            let attr = server.lookup(nodeid, name)?;
            // An entry of a search, or a search itself, lives as briefly.
            let ttl = server.ttl_of(nodeid).min(server.ttl_of(attr.ino.0));
            out.entry_out(&attr, ttl);
        }
        GETATTR => {
            let attr = server.getattr(nodeid)?;
            let ttl = server.ttl_of(nodeid);
            out.u64(ttl.as_secs());
            out.u32(ttl.subsec_nanos());
            out.u32(0);
            out.attr(&attr);
        }
        OPEN => {
            let opened = server.open(nodeid, u32_in(op_in, open_in::FLAGS) as i32)?;
            out.u64(opened.fh);
            out.u32(opened.flags.bits());
            out.u32(opened.backing.as_ref().map_or(0, |b| b.id()));
        }
        READ => {
            let (fh, offset, size) = (
                u64_in(op_in, read_in::FH),
                u64_in(op_in, read_in::OFFSET),
                u32_in(op_in, read_in::SIZE),
            );
            let want = (size as usize).min(out.buf.len());
            out.len = server.read(fh, offset, &mut out.buf[..want])?;
        }
        RELEASE => server.release(nodeid, u64_in(op_in, release_in::FH)),
        FLUSH | RELEASEDIR | DESTROY => {}
        OPENDIR => {
            let flags = server.opendir(nodeid)?;
            out.u64(0);
            out.u32(flags.bits());
            out.u32(0);
        }
        READDIR | READDIRPLUS => {
            let (offset, size) = (
                u64_in(op_in, read_in::OFFSET),
                u32_in(op_in, read_in::SIZE) as usize,
            );
            let size = size.min(out.buf.len());
            out.listing(server, nodeid, offset, size, req.opcode == READDIRPLUS)?;
        }
        STATFS => out.statfs(server.file_count()),
        // Requests are not cancelled; the kernel waits them out. It sends
        // no more interrupts once this answer reaches the descriptor that
        // read the interrupted request (elsewhere it finds no request).
        INTERRUPT => return Err(Errno::ENOSYS),
        _ => return Err(Errno::ENOSYS),
    }
    Ok(out.len)
}

/// `struct fuse_out_header`: the answer's whole length (header included),
/// the negated errno, the request's id.
pub(crate) fn out_header(unique: u64, result: Result<usize, Errno>) -> [u8; OUT_HEADER] {
    let (error, len) = match result {
        Ok(len) => (0i32, len),
        Err(e) => (-e.code(), 0),
    };
    let mut h = [0u8; OUT_HEADER];
    put(
        &mut h,
        out_header::LEN,
        &((OUT_HEADER + len) as u32).to_ne_bytes(),
    );
    put(&mut h, out_header::ERROR, &error.to_ne_bytes());
    put(&mut h, out_header::UNIQUE, &unique.to_ne_bytes());
    h
}

fn put(buf: &mut [u8], at: usize, field: &[u8]) {
    buf[at..at + field.len()].copy_from_slice(field);
}

/// `struct fuse_out_header`'s size.
pub(crate) const OUT_HEADER: usize = out_header::SIZE;

pub(crate) fn u32_in(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

pub(crate) fn u64_in(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

/// An answer being written into a buffer, in the kernel's layout.
struct Out<'a> {
    buf: &'a mut [u8],
    len: usize,
}

/// `struct fuse_entry_out` (40 bytes and a 88-byte `fuse_attr`).
const ENTRY_OUT: usize = 128;
/// `struct fuse_dirent` before the name.
const DIRENT: usize = 24;

impl<'a> Out<'a> {
    fn new(buf: &'a mut [u8]) -> Out<'a> {
        Out { buf, len: 0 }
    }

    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_ne_bytes());
    }

    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_ne_bytes());
    }

    /// `struct fuse_attr`.
    fn attr(&mut self, a: &FileAttr) {
        let times = [a.atime, a.mtime, a.ctime].map(unix_time);
        let kind = match a.kind {
            FileType::Directory => libc::S_IFDIR,
            _ => libc::S_IFREG,
        };
        self.u64(a.ino.0);
        self.u64(a.size);
        self.u64(a.blocks);
        for (secs, _) in times {
            self.u64(secs);
        }
        for (_, nanos) in times {
            self.u32(nanos);
        }
        self.u32(kind | u32::from(a.perm));
        self.u32(a.nlink);
        self.u32(a.uid);
        self.u32(a.gid);
        self.u32(a.rdev);
        self.u32(a.blksize);
        self.u32(0);
    }

    /// `struct fuse_entry_out`.
    fn entry_out(&mut self, a: &FileAttr, ttl: Duration) {
        self.u64(a.ino.0);
        self.u64(0); // generation
        self.u64(ttl.as_secs());
        self.u64(ttl.as_secs());
        self.u32(ttl.subsec_nanos());
        self.u32(ttl.subsec_nanos());
        self.attr(a);
    }

    /// `struct fuse_statfs_out`: no blocks (nothing can be written), the
    /// file count, the preferred I/O size and the name length limit.
    fn statfs(&mut self, files: u64) {
        for v in [0, 0, 0, files, 0] {
            self.u64(v);
        }
        self.u32(BLOCK_SIZE);
        self.u32(retagfs_core::view::tree::NAME_MAX as u32);
        self.u32(BLOCK_SIZE);
        for _ in 0..7 {
            self.u32(0);
        }
    }

    /// Directory entries from `offset` on, as many as fit in `size` bytes
    /// (`struct fuse_direntplus` with attributes, else `fuse_dirent`).
    fn listing(
        &mut self,
        server: &Server,
        ino: u64,
        offset: u64,
        size: usize,
        plus: bool,
    ) -> Result<(), Errno> {
        let ttl = server.ttl_of(ino);
        if ino == SEARCH_DIR_INO {
            // Searches are made by lookups and never listed.
            let dots = [(SEARCH_DIR_INO, ".", 1), (ROOT_INO, "..", 2)];
            for (child, name, next) in dots.into_iter().skip(offset.min(2) as usize) {
                let attr = if plus { Some(server.getattr(child)?) } else { None };
                if self.dirent(child, attr.as_ref(), next, name, FileType::Directory, size, ttl) {
                    break;
                }
            }
            return Ok(());
        }
        let tree = server.tree_of(ino).ok_or(Errno::ENOENT)?;
        dir_entries(&tree, ino, offset, |child, node, next, name| {
            let attr = match (plus, node) {
                (true, Some(node)) => Some(server.attr(&tree, child, node)),
                (true, None) => return false,
                (false, _) => None,
            };
            self.dirent(child, attr.as_ref(), next, name, kind_of(node), size, ttl)
        })
    }

    /// One entry of a listing, with its attributes for READDIRPLUS: true
    /// when it does not fit in `size` bytes.
    #[allow(clippy::too_many_arguments)]
    fn dirent(
        &mut self,
        child: u64,
        attr: Option<&FileAttr>,
        next: u64,
        name: &str,
        kind: FileType,
        size: usize,
        ttl: Duration,
    ) -> bool {
        let fixed = if attr.is_some() {
            ENTRY_OUT + DIRENT
        } else {
            DIRENT
        };
        let record = (fixed + name.len()).next_multiple_of(8);
        if self.len + record > size {
            return true;
        }
        let start = self.len;
        if let Some(attr) = attr {
            self.entry_out(attr, ttl);
        }
        let dtype = match kind {
            FileType::RegularFile => libc::DT_REG,
            _ => libc::DT_DIR,
        };
        self.u64(child);
        self.u64(next);
        self.u32(name.len() as u32);
        self.u32(u32::from(dtype));
        self.bytes(name.as_bytes());
        self.buf[self.len..start + record].fill(0);
        self.len = start + record;
        false
    }
}

/// Seconds and nanoseconds since the epoch (0 for earlier times).
fn unix_time(t: SystemTime) -> (u64, u32) {
    t.duration_since(UNIX_EPOCH)
        .map_or((0, 0), |d| (d.as_secs(), d.subsec_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::TTL;
    use fuser::INodeNo;

    fn attr(kind: FileType) -> FileAttr {
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 5);
        FileAttr {
            ino: INodeNo(42),
            size: 1000,
            blocks: 2,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind,
            perm: 0o444,
            nlink: 1,
            uid: 7,
            gid: 8,
            rdev: 0,
            flags: 0,
            blksize: BLOCK_SIZE,
        }
    }

    #[test]
    fn entry_out_has_the_kernel_layout() {
        let mut buf = [0u8; 256];
        let mut out = Out::new(&mut buf);
        out.entry_out(&attr(FileType::RegularFile), TTL);
        assert_eq!(out.len, ENTRY_OUT);
        assert_eq!(u64_in(&buf, 0), 42, "nodeid");
        assert_eq!(u64_in(&buf, 16), TTL.as_secs(), "entry_valid");
        let a = 40; // fuse_attr
        assert_eq!(u64_in(&buf, a), 42);
        assert_eq!(u64_in(&buf, a + 8), 1000);
        assert_eq!(u64_in(&buf, a + 32), 1_700_000_000, "mtime");
        assert_eq!(u32_in(&buf, a + 52), 5, "mtimensec");
        assert_eq!(u32_in(&buf, a + 60), libc::S_IFREG | 0o444, "mode");
        assert_eq!(u32_in(&buf, a + 68), 7, "uid");
        assert_eq!(u32_in(&buf, a + 80), BLOCK_SIZE, "blksize");
    }

    #[test]
    fn statfs_out_is_80_bytes() {
        let mut buf = [0u8; 128];
        let mut out = Out::new(&mut buf);
        out.statfs(20_000);
        assert_eq!(out.len, 80);
        assert_eq!(u64_in(&buf, 24), 20_000);
    }

    #[test]
    fn out_header_counts_itself_and_negates_the_errno() {
        let ok = out_header(7, Ok(100));
        assert_eq!(u32_in(&ok, 0), 116);
        assert_eq!(u32_in(&ok, 4), 0);
        assert_eq!(u64_in(&ok, 8), 7);
        let err = out_header(9, Err(Errno::ENOENT));
        assert_eq!(u32_in(&err, 0), 16);
        assert_eq!(u32_in(&err, 4) as i32, -libc::ENOENT);
        assert_eq!(u64_in(&err, 8), 9);
    }

    #[test]
    fn only_forgets_get_no_answer() {
        for op in [FORGET, BATCH_FORGET] {
            assert!(!expects_answer(op), "{op}");
        }
        for op in [
            LOOKUP,
            GETATTR,
            OPEN,
            READ,
            RELEASE,
            READDIRPLUS,
            DESTROY,
            INTERRUPT,
            39,
        ] {
            assert!(expects_answer(op), "{op}");
        }
    }
}
