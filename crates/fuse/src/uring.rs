//! Requests through FUSE over io_uring (Linux 6.14+, with the fuse module
//! parameter `enable_uring`). The kernel keeps one queue per CPU and
//! hands a request to the queue of the CPU its caller runs on; each of our
//! threads serves one queue and is pinned to that CPU, so the caller and
//! the thread answering it share a CPU and no wakeup crosses CPUs (walks
//! of a fresh mount measured 4x faster that way than with `/dev/fuse`,
//! where every request woke a thread on the other CPU).
//!
//! Each thread registers ring entries: a header buffer (the request's
//! `fuse_in_header`, its fixed per-operation struct, and the payload size)
//! and a payload buffer (names in, data and listings out). The answer goes
//! back in the same buffers with one COMMIT_AND_FETCH, which also waits
//! for the next request. Forgets and interrupts still come through
//! `/dev/fuse` (fuser's threads), as does everything if io_uring cannot be
//! set up.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType};
use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::server::{dir_entries, kind_of, Server, BLOCK_SIZE, TTL};

/// The largest request or answer payload: reads and readahead of 1 MiB
/// (the kernel's default page limit per request), and the mount's
/// max_write (nothing is written; it only sizes these buffers).
pub(crate) const PAYLOAD: usize = 1 << 20;

/// `struct fuse_uring_req_header`: 128 bytes for the in/out header, 128 for
/// the per-operation struct, 32 for `fuse_uring_ent_in_out`.
const HEADER: usize = 288;
const OP_IN: usize = 128;
const ENT_IN_OUT: usize = 256;

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// Ring entries per thread: one, so a request waits only for a busy
/// thread when every thread of its CPU is busy.
const ENTRIES_PER_THREAD: usize = 1;

/// How often an idle thread looks whether the mount has ended.
const IDLE_CHECK: Duration = Duration::from_secs(2);

// FUSE opcodes served here; every other one is answered ENOSYS, as fuser
// answers the operations the file system does not implement.
const LOOKUP: u32 = 1;
const GETATTR: u32 = 3;
const OPEN: u32 = 14;
const READ: u32 = 15;
const STATFS: u32 = 17;
const RELEASE: u32 = 18;
const FLUSH: u32 = 25;
const OPENDIR: u32 = 27;
const READDIR: u32 = 28;
const RELEASEDIR: u32 = 29;
const READDIRPLUS: u32 = 44;

type Ring = IoUring<squeue::Entry128, cqueue::Entry>;

/// Whether this process can make the rings (io_uring may be disabled by
/// `kernel.io_uring_disabled` or a seccomp filter): asked before telling
/// the kernel we speak io_uring, because once told, the kernel holds every
/// request until all queues are registered.
/// The queue count must be known exactly for the same reason.
pub(crate) fn usable() -> bool {
    possible_cpus().is_some() && Ring::builder().build(2).is_ok()
}

/// The ring threads of a mount.
pub(crate) struct Rings {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Rings {
    /// Starts `threads` threads in all (at least one per queue), each
    /// pinned to its queue's CPU.
    pub(crate) fn start(server: Arc<Server>, dev: Arc<OwnedFd>, threads: usize) -> io::Result<Rings> {
        let queues =
            possible_cpus().ok_or_else(|| io::Error::other("no /sys/devices/system/cpu/possible"))?;
        let per_queue = (threads / queues).max(1);
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::with_capacity(queues * per_queue);
        for qid in 0..queues {
            for n in 0..per_queue {
                let (server, dev, stop) = (server.clone(), dev.clone(), stop.clone());
                let handle = std::thread::Builder::new()
                    .name(format!("ring-{qid}.{n}"))
                    .spawn(move || serve_queue(&server, &dev, qid as u16, &stop))?;
                handles.push(handle);
            }
        }
        tracing::debug!("io_uring: {queues} queues, {per_queue} threads each");
        Ok(Rings {
            stop,
            threads: handles,
        })
    }

    /// Waits for the threads once the mount has ended.
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// The number of CPU queues the kernel makes: one per possible CPU (not
/// the CPUs this process may use: every queue must be served).
fn possible_cpus() -> Option<usize> {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| parse_cpu_list_end(&s))
}

/// One past the highest CPU of a kernel CPU list ("0-3,8-11" -> 12).
fn parse_cpu_list_end(list: &str) -> Option<usize> {
    let last = list.trim().rsplit(',').next()?;
    let end = last.rsplit('-').next()?;
    end.parse::<usize>().ok().map(|n| n + 1)
}

/// Runs the current thread on `cpu` only (best effort: a CPU that is not
/// online is simply not pinned to).
fn pin_to_cpu(cpu: usize) {
    // SAFETY: the set is a local, zeroed and filled with the libc macros.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The buffers of one ring entry. Boxed: the kernel keeps their addresses.
struct Entry {
    header: Box<[u8; HEADER]>,
    payload: Box<[u8]>,
    iov: Box<[libc::iovec; 2]>,
}

impl Entry {
    fn new() -> Entry {
        let mut header = Box::new([0u8; HEADER]);
        let mut payload = vec![0u8; PAYLOAD].into_boxed_slice();
        let iov = Box::new([
            libc::iovec {
                iov_base: header.as_mut_ptr().cast(),
                iov_len: HEADER,
            },
            libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: PAYLOAD,
            },
        ]);
        Entry { header, payload, iov }
    }

    fn u32_at(&self, at: usize) -> u32 {
        u32::from_ne_bytes(self.header[at..at + 4].try_into().unwrap())
    }

    fn u64_at(&self, at: usize) -> u64 {
        u64::from_ne_bytes(self.header[at..at + 8].try_into().unwrap())
    }
}

/// A REGISTER or COMMIT_AND_FETCH command for entry `index`.
fn command(
    dev: &OwnedFd,
    op: u32,
    qid: u16,
    commit_id: u64,
    entry: &Entry,
    index: usize,
) -> squeue::Entry128 {
    // struct fuse_uring_cmd_req: flags, commit_id, qid.
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    let mut sqe = opcode::UringCmd80::new(types::Fd(dev.as_raw_fd()), op)
        .cmd(cmd)
        .addr(Some(entry.iov.as_ptr() as u64))
        .build()
        .user_data(index as u64);
    set_sqe_len(&mut sqe, 2);
    sqe
}

/// Sets the SQE's `len` field (the number of iovecs: the kernel wants 2),
/// which the io-uring crate's builder for URING_CMD does not expose.
fn set_sqe_len(sqe: &mut squeue::Entry128, len: u32) {
    const LEN_OFFSET: usize = 24; // struct io_uring_sqe: opcode..addr, then len
                                  // SAFETY: Entry128 is #[repr(C)] and starts with the kernel's
                                  // io_uring_sqe, whose u32 `len` sits at byte 24 (checked by a test).
    unsafe {
        let base = (sqe as *mut squeue::Entry128).cast::<u8>();
        base.add(LEN_OFFSET).cast::<u32>().write_unaligned(len);
    }
}

/// Serves queue `qid` until the connection ends.
fn serve_queue(server: &Server, dev: &OwnedFd, qid: u16, stop: &AtomicBool) {
    pin_to_cpu(qid as usize);
    // Declared before the ring, so the ring (and the kernel's hold on the
    // buffers) goes first when the thread ends.
    let mut entries: Vec<Entry> = (0..ENTRIES_PER_THREAD).map(|_| Entry::new()).collect();
    let mut ring = match Ring::builder()
        .setup_single_issuer()
        .setup_coop_taskrun()
        .build(4)
    {
        Ok(ring) => ring,
        Err(e) => {
            tracing::error!("io_uring queue {qid}: cannot make a ring ({e}); requests through /dev/fuse");
            refuse_ring(dev, qid);
            return;
        }
    };
    for (i, entry) in entries.iter().enumerate() {
        let sqe = command(dev, CMD_REGISTER, qid, 0, entry, i);
        // SAFETY: the entry's buffers live in `entries`, which outlives
        // the ring.
        unsafe { ring.submission().push(&sqe) }.expect("a fresh ring has room");
    }
    let mut done: Vec<(usize, i32)> = Vec::with_capacity(ENTRIES_PER_THREAD);
    let timeout = types::Timespec::from(IDLE_CHECK);
    let args = types::SubmitArgs::new().timespec(&timeout);
    let mut live = entries.len();
    while live > 0 {
        match ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {}
            Err(e) => {
                tracing::error!("io_uring queue {qid}: {e}; the queue stops");
                return;
            }
        }
        done.clear();
        done.extend(ring.completion().map(|c| (c.user_data() as usize, c.result())));
        if done.is_empty() && stop.load(Ordering::Relaxed) {
            return;
        }
        for &(i, result) in &done {
            if result < 0 {
                live -= 1;
                let e = io::Error::from_raw_os_error(-result);
                match -result {
                    // The mount ended.
                    libc::ENOTCONN | libc::ECANCELED | libc::ECONNABORTED | libc::ENODEV => {}
                    _ => tracing::warn!("io_uring queue {qid}: {e}"),
                }
                continue;
            }
            let entry = &mut entries[i];
            let commit_id = answer_or_eio(server, entry);
            let sqe = command(dev, CMD_COMMIT_AND_FETCH, qid, commit_id, entry, i);
            // SAFETY: as for the registration above.
            unsafe { ring.submission().push(&sqe) }.expect("one command per entry fits");
        }
    }
}

/// Makes the kernel give up on io_uring for this connection (a refused
/// registration does that), so requests flow through `/dev/fuse` instead
/// of waiting for queues that will never register.
fn refuse_ring(dev: &OwnedFd, qid: u16) {
    let entry = Entry::new();
    let Ok(mut ring) = Ring::builder().build(2) else {
        tracing::error!("io_uring queue {qid}: cannot fall back either; the mount will not answer");
        return;
    };
    let mut sqe = command(dev, CMD_REGISTER, qid, 0, &entry, 0);
    set_sqe_len(&mut sqe, 0);
    // SAFETY: `entry` outlives the submission, which is waited for.
    unsafe {
        let _ = ring.submission().push(&sqe);
    }
    let _ = ring.submit_and_wait(1);
}

/// [`answer`], and EIO with a log line should it panic: a request left
/// unanswered would hang its caller.
fn answer_or_eio(server: &Server, entry: &mut Entry) -> u64 {
    let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| answer(server, entry)));
    answered.unwrap_or_else(|_| {
        tracing::error!(
            "io_uring: answering opcode {} panicked; answered EIO",
            entry.u32_at(4)
        );
        let (unique, commit_id) = (entry.u64_at(8), entry.u64_at(ENT_IN_OUT + 8));
        write_out_header(entry, unique, Err(Errno::EIO));
        commit_id
    })
}

/// Answers the request in `entry` in place: returns its commit id.
fn answer(server: &Server, entry: &mut Entry) -> u64 {
    let opcode = entry.u32_at(4);
    let unique = entry.u64_at(8);
    let nodeid = entry.u64_at(16);
    let commit_id = entry.u64_at(ENT_IN_OUT + 8);
    let in_size = (entry.u32_at(ENT_IN_OUT + 16) as usize).min(PAYLOAD);
    let op_in: [u8; OP_IN] = entry.header[OP_IN..2 * OP_IN].try_into().unwrap();
    let result = {
        let mut out = Out::new(&mut entry.payload);
        match opcode {
            LOOKUP => {
                let name = out.buf[..in_size].split(|&b| b == 0).next().unwrap_or_default();
                match server.lookup(nodeid, name) {
                    Ok(attr) => {
                        out.entry_out(&attr);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            GETATTR => server.getattr(nodeid).map(|attr| {
                out.u64(TTL.as_secs());
                out.u32(TTL.subsec_nanos());
                out.u32(0);
                out.attr(&attr);
            }),
            OPEN => server.open(nodeid, u32_in(&op_in, 0) as i32).map(|opened| {
                out.u64(opened.fh);
                out.u32(opened.flags.bits());
                out.u32(opened.backing.as_ref().map_or(0, |b| b.id()));
            }),
            READ => {
                let (fh, offset, size) = (u64_in(&op_in, 0), u64_in(&op_in, 8), u32_in(&op_in, 16));
                let want = (size as usize).min(PAYLOAD);
                server.read(fh, offset, &mut out.buf[..want]).map(|n| out.len = n)
            }
            RELEASE => {
                server.release(nodeid, u64_in(&op_in, 0));
                Ok(())
            }
            FLUSH | RELEASEDIR => Ok(()),
            OPENDIR => server.opendir(nodeid).map(|flags| {
                out.u64(0);
                out.u32(flags.bits());
                out.u32(0);
            }),
            READDIR | READDIRPLUS => {
                let (offset, size) = (u64_in(&op_in, 8), u32_in(&op_in, 16) as usize);
                out.listing(server, nodeid, offset, size.min(PAYLOAD), opcode == READDIRPLUS)
            }
            STATFS => {
                out.statfs(server.file_count());
                Ok(())
            }
            _ => Err(Errno::ENOSYS),
        }
        .map(|()| out.len)
    };
    write_out_header(entry, unique, result);
    commit_id
}

/// `struct fuse_out_header` (len, error, unique), then the payload size.
fn write_out_header(entry: &mut Entry, unique: u64, result: Result<usize, Errno>) {
    let (error, len) = match result {
        Ok(len) => (0i32, len),
        Err(e) => (-e.code(), 0),
    };
    entry.header[0..4].copy_from_slice(&(16 + len as u32).to_ne_bytes());
    entry.header[4..8].copy_from_slice(&error.to_ne_bytes());
    entry.header[8..16].copy_from_slice(&unique.to_ne_bytes());
    entry.header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&(len as u32).to_ne_bytes());
}

fn u32_in(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_in(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

/// An answer being written into a payload buffer, in the kernel's layout.
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
    fn entry_out(&mut self, a: &FileAttr) {
        self.u64(a.ino.0);
        self.u64(0); // generation
        self.u64(TTL.as_secs());
        self.u64(TTL.as_secs());
        self.u32(TTL.subsec_nanos());
        self.u32(TTL.subsec_nanos());
        self.attr(a);
    }

    /// `struct fuse_statfs_out`: no blocks (nothing can be written), the
    /// file count, the preferred I/O size and the name length limit.
    fn statfs(&mut self, files: u64) {
        for v in [0, 0, 0, files, 0] {
            self.u64(v);
        }
        self.u32(BLOCK_SIZE);
        self.u32(retagfs_core::tree::NAME_MAX as u32);
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
        let tree = server.lib.tree();
        dir_entries(&tree, ino, offset, |child, node, next, name| {
            let attr = match (plus, node) {
                (true, Some(node)) => Some(server.attr(&tree, child, node)),
                (true, None) => return false,
                (false, _) => None,
            };
            let fixed = if plus { ENTRY_OUT + DIRENT } else { DIRENT };
            let record = (fixed + name.len()).next_multiple_of(8);
            if self.len + record > size {
                return true;
            }
            let start = self.len;
            if let Some(attr) = &attr {
                self.entry_out(attr);
            }
            let dtype = match kind_of(node) {
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
        })
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
    use fuser::INodeNo;

    #[test]
    fn sqe_len_is_where_the_kernel_reads_it() {
        assert_eq!(std::mem::size_of::<squeue::Entry128>(), 128);
        let mut sqe = opcode::UringCmd80::new(types::Fd(3), 2).build();
        set_sqe_len(&mut sqe, 2);
        // SAFETY: Entry128 is 128 plain bytes (checked above).
        let bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        assert_eq!(bytes[0], 46, "IORING_OP_URING_CMD");
        assert_eq!(u32::from_ne_bytes(bytes[4..8].try_into().unwrap()), 3, "fd");
        assert_eq!(u32::from_ne_bytes(bytes[24..28].try_into().unwrap()), 2, "len");
        assert_eq!(u32::from_ne_bytes(bytes[8..12].try_into().unwrap()), 2, "cmd_op");
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list_end("0-1\n"), Some(2));
        assert_eq!(parse_cpu_list_end("0"), Some(1));
        assert_eq!(parse_cpu_list_end("0-3,8-11"), Some(12));
        assert_eq!(parse_cpu_list_end(""), None);
    }

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
        out.entry_out(&attr(FileType::RegularFile));
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
}
