//! Requests through FUSE over io_uring (Linux 6.14+, with the fuse module
//! parameter `enable_uring`). The kernel keeps one queue per CPU and
//! hands a request to the queue of the CPU its caller runs on; each of our
//! threads serves one queue and is pinned to that CPU, so the caller and
//! the thread answering it share a CPU and no wakeup crosses CPUs (through
//! `/dev/fuse` every request woke a thread on another CPU; docs/benchmarks.md
//! has both side by side).
//!
//! Each thread registers ring entries: a header buffer (the request's
//! `fuse_in_header`, its fixed per-operation struct, and the payload size)
//! and a payload buffer (names in, data and listings out). The answer goes
//! back in the same buffers with one COMMIT_AND_FETCH, which also waits
//! for the next request. Forgets and interrupts still come through
//! `/dev/fuse` ([`crate::dev_fuse`]), as does everything if io_uring
//! cannot be set up.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fuser::Errno;
use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::protocol::{self, out_header, Request, NAME_MAX_IN, OP_IN, OUT_HEADER};
use crate::server::Server;

/// The largest request or answer payload: reads and readahead of 1 MiB
/// (the kernel's default page limit per request), and the mount's
/// max_write (nothing is written; it only sizes these buffers).
pub(crate) const PAYLOAD: usize = 1 << 20;

/// `struct fuse_uring_req_header`: 128 bytes for the in/out header, 128 for
/// the per-operation struct, 32 for `fuse_uring_ent_in_out`.
const HEADER: usize = 288;
const ENT_IN_OUT: usize = 256;

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// Ring entries per thread: one, so a request waits only for a busy
/// thread when every thread of its CPU is busy.
const ENTRIES_PER_THREAD: usize = 1;

/// How often an idle thread looks whether the mount has ended.
const IDLE_CHECK: Duration = Duration::from_secs(2);

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
            let commit_id = answer(server, entry);
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

/// Answers the request in `entry` in place: returns its commit id.
fn answer(server: &Server, entry: &mut Entry) -> u64 {
    let unique = entry.u64_at(8);
    let commit_id = entry.u64_at(ENT_IN_OUT + 8);
    let in_size = (entry.u32_at(ENT_IN_OUT + 16) as usize).min(NAME_MAX_IN + 1);
    let op_in: [u8; OP_IN] = entry.header[OP_IN..2 * OP_IN].try_into().unwrap();
    // The name comes in the buffer the answer goes to.
    let mut name = [0u8; NAME_MAX_IN + 1];
    name[..in_size].copy_from_slice(&entry.payload[..in_size]);
    let request = Request {
        opcode: entry.u32_at(4),
        nodeid: entry.u64_at(16),
        op_in: &op_in,
        name: &name[..in_size],
    };
    let result = protocol::answer(server, &request, &mut entry.payload);
    write_out_header(entry, unique, result);
    commit_id
}

/// `struct fuse_out_header`, then the payload size.
fn write_out_header(entry: &mut Entry, unique: u64, result: Result<usize, Errno>) {
    entry.header[..OUT_HEADER].copy_from_slice(&out_header(unique, result));
    let len = result.unwrap_or(0) as u32;
    entry.header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&len.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
