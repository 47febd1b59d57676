//! Requests read from `/dev/fuse`. Each thread reads and answers on a
//! descriptor of its own (`FUSE_DEV_IOC_CLONE`): handing an open or a read
//! to another thread cost more than the work itself (docs/benchmarks-log.md,
//! "Requests through `/dev/fuse`: our own threads, polling"). With FUSE over
//! io_uring these threads see only forgets.
//!
//! Through `/dev/fuse` the kernel wakes a sleeping thread for every
//! request, and that thread's CPU is usually another than the caller's
//! (unlike io_uring's per-CPU queues). Waking a sleeping CPU is slow,
//! slowest in a virtual machine, where it is a trip through the host: a
//! walk, a `stat` of every file or an indexer's first pass spent most of
//! its time in those wakeups. So after each request one thread at a time
//! keeps asking for the next, without sleeping, for a short while
//! ([`Windows`]): during a burst of requests the next is taken as soon as
//! it is queued, and an idle mount costs nothing.
//!
//! How long to poll is learned per kind of request just answered, by the
//! rule of the kernel's own idle polling (haltpoll): when the next request
//! came within [`POLL_MAX`], a longer window would have caught it, so the
//! window grows; when it came later, the poll was wasted, so it shrinks.
//! A client's pauses follow what it was answered: after an open its read
//! comes at once, after a close a tagger parses the file for longer than
//! any window, so polling after closes dies out and after opens stays.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::kernel_abi::in_header;
use crate::protocol::{self, expects_answer, out_header, u32_in, u64_in, Request, OP_IN, OUT_HEADER};
use crate::server::Server;
use crate::uring::PAYLOAD;

/// The longest a thread keeps asking for the next request after the last,
/// and the window every kind of request starts with. Walks and indexers
/// send their next request within tens of microseconds; a longer window
/// mostly spins while a client works, spending the daemon's CPU for no
/// gain in time (docs/benchmarks-log.md, "a poll window learned per kind of
/// request").
const POLL_MAX: Duration = Duration::from_micros(100);

/// The window a grown one starts from; one shrunk below it is none.
const POLL_START: Duration = Duration::from_micros(20);

/// Poll windows are kept per opcode below this; the rare higher ones
/// (CUSE's) share the last.
const KINDS: usize = 64;

/// `struct fuse_in_header`'s size.
const IN_HEADER: usize = in_header::SIZE;

/// A read of `/dev/fuse` must have room for the largest write the kernel
/// may send (the mount's max_write) and its headers, or it fails.
const REQUEST_BUFFER: usize = PAYLOAD + 4096;

/// `FUSE_DEV_IOC_CLONE`: `_IOR(229, 0, u32)`.
const DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;

/// The threads reading `/dev/fuse`.
pub(crate) struct Readers {
    threads: Vec<JoinHandle<io::Result<()>>>,
}

/// The descriptor the polling thread asks on (non-blocking), whether a
/// thread is asking, and how long to ask.
struct Poller {
    dev: OwnedFd,
    busy: AtomicBool,
    windows: Windows,
}

/// Poll windows per opcode of the request answered before the poll, and
/// the poll that gave up last, waiting to learn when the next request came.
struct Windows {
    micros: [AtomicU32; KINDS],
    /// `(microseconds since `epoch` the poll started) << 8 | kind`, 0 when
    /// no poll gave up since the last request.
    gave_up: AtomicU64,
    epoch: Instant,
}

impl Windows {
    fn new() -> Windows {
        Windows {
            micros: std::array::from_fn(|_| AtomicU32::new(POLL_MAX.as_micros() as u32)),
            gave_up: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn kind(opcode: u32) -> usize {
        (opcode as usize).min(KINDS - 1)
    }

    /// How long to poll after answering `opcode`.
    fn window(&self, opcode: u32) -> Duration {
        Duration::from_micros(self.micros[Self::kind(opcode)].load(Ordering::Relaxed).into())
    }

    /// A poll after `opcode`, started at `started`, found nothing.
    fn gave_up(&self, opcode: u32, started: Instant) {
        // +1: a poll started at the epoch still reads as one pending.
        let micros = started.duration_since(self.epoch).as_micros() as u64 + 1;
        self.gave_up
            .store(micros << 8 | Self::kind(opcode) as u64, Ordering::Relaxed);
    }

    /// A request came to a sleeping thread: adapts the window of the poll
    /// that gave up before it, by how long after that poll's start it came.
    fn request_came(&self) {
        let pending = self.gave_up.swap(0, Ordering::Relaxed);
        if pending == 0 {
            return;
        }
        let (started, kind) = (pending >> 8, (pending & 0xff) as usize);
        let now = self.epoch.elapsed().as_micros() as u64 + 1;
        let idle = Duration::from_micros(now.saturating_sub(started));
        let window = &self.micros[kind];
        let old = Duration::from_micros(window.load(Ordering::Relaxed).into());
        window.store(adapted(old, idle).as_micros() as u32, Ordering::Relaxed);
    }
}

/// The next window after one of `window` that gave up, the next request
/// having come `idle` after the poll started.
fn adapted(window: Duration, idle: Duration) -> Duration {
    if idle <= POLL_MAX {
        (window * 2).clamp(POLL_START, POLL_MAX)
    } else if window / 2 < POLL_START {
        Duration::ZERO
    } else {
        window / 2
    }
}

impl Readers {
    /// Starts `threads` threads reading requests from the connection of
    /// `dev`; with `poll`, one at a time polls after a request.
    pub(crate) fn start(
        server: Arc<Server>,
        dev: &OwnedFd,
        threads: usize,
        poll: bool,
    ) -> io::Result<Readers> {
        let poller = if poll {
            match clone_dev(dev, true) {
                Ok(dev) => Some(Arc::new(Poller {
                    dev,
                    busy: AtomicBool::new(false),
                    windows: Windows::new(),
                })),
                Err(e) => {
                    tracing::debug!(
                        "/dev/fuse: no descriptor to poll on ({e}); threads sleep between requests"
                    );
                    None
                }
            }
        } else {
            None
        };
        let mut handles = Vec::with_capacity(threads);
        for n in 0..threads.max(1) {
            // A descriptor of its own, or a shared one where the kernel
            // cannot clone (the answers then still find their request).
            let own = clone_dev(dev, false).or_else(|_| dev.try_clone())?;
            let (server, poller) = (server.clone(), poller.clone());
            let handle = std::thread::Builder::new()
                .name(format!("fuse-{n}"))
                .spawn(move || serve(&server, &own, poller.as_deref()))?;
            handles.push(handle);
        }
        Ok(Readers { threads: handles })
    }

    /// Waits until the connection has ended (unmounted, or aborted when a
    /// detached mount's last open file was closed): the first error a
    /// thread met, if any.
    pub(crate) fn join(self) -> io::Result<()> {
        let mut result = Ok(());
        for t in self.threads {
            let ended = t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a /dev/fuse thread panicked")));
            if result.is_ok() {
                result = ended;
            }
        }
        result
    }
}

/// A new descriptor on the connection of `dev`, with a queue of requests
/// being answered of its own.
fn clone_dev(dev: &OwnedFd, nonblocking: bool) -> io::Result<OwnedFd> {
    let flags = if nonblocking { libc::O_NONBLOCK } else { 0 };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(flags)
        .open("/dev/fuse")?;
    let source = dev.as_raw_fd() as u32;
    // SAFETY: the ioctl reads one u32 from a live local.
    if unsafe { libc::ioctl(file.as_raw_fd(), DEV_IOC_CLONE, &source as *const u32) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file.into())
}

/// Reads and answers requests until the connection ends.
fn serve(server: &Server, own: &OwnedFd, poller: Option<&Poller>) -> io::Result<()> {
    let mut request = vec![0u8; REQUEST_BUFFER];
    let mut answer = vec![0u8; OUT_HEADER + PAYLOAD];
    // The opcode answered last; the first thread polls as after a lookup.
    let mut answered = protocol::LOOKUP;
    loop {
        let next = match poller.map(|p| (p, p.poll(answered, &mut request))) {
            Some((p, Ok(Some(len)))) => Ok((p.dev.as_fd(), len)),
            Some((_, Err(e))) => Err(e),
            _ => read_blocking(own, &mut request).map(|len| {
                if let Some(p) = poller {
                    p.windows.request_came();
                }
                (own.as_fd(), len)
            }),
        };
        match next {
            Ok((dev, len)) => {
                answered = answer_request(server, dev, &request[..len], &mut answer);
            }
            Err(e) if ended(&e) => return Ok(()),
            Err(e) => {
                tracing::error!("reading /dev/fuse: {e}; this thread stops");
                return Err(e);
            }
        }
    }
}

impl Poller {
    /// A request read within the window learned for what follows
    /// `answered`, or `None` when none came (or another thread is polling).
    fn poll(&self, answered: u32, buf: &mut [u8]) -> io::Result<Option<usize>> {
        if self.busy.swap(true, Ordering::Acquire) {
            return Ok(None);
        }
        let started = Instant::now();
        let until = started + self.windows.window(answered);
        let result = loop {
            match read(&self.dev, buf) {
                Ok(len) => break Ok(Some(len)),
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                    if Instant::now() >= until {
                        self.windows.gave_up(answered, started);
                        break Ok(None);
                    }
                    // Lets the caller run should it share this CPU.
                    std::thread::yield_now();
                }
                Err(e) if retry(&e) => {}
                Err(e) => break Err(e),
            }
        };
        self.busy.store(false, Ordering::Release);
        result
    }
}

fn read_blocking(dev: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match read(dev, buf) {
            Err(e) if retry(&e) || e.raw_os_error() == Some(libc::EAGAIN) => {}
            other => return other,
        }
    }
}

fn read(dev: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is writable for its length.
    let n = unsafe { libc::read(dev.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// A read to try again: interrupted by a signal, or the request it would
/// have returned was interrupted first (ENOENT).
fn retry(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINTR | libc::ENOENT))
}

/// The connection is gone: unmounted, or aborted when a detached mount's
/// last open file was closed.
fn ended(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ECONNABORTED))
}

/// Answers one request on the descriptor it was read from (the kernel
/// looks for it among that descriptor's requests); its opcode.
fn answer_request(server: &Server, dev: BorrowedFd, request: &[u8], answer: &mut [u8]) -> u32 {
    let Some((unique, opcode, parsed)) = parse(request) else {
        tracing::error!(
            "/dev/fuse: a request of {} bytes, too short; not answered",
            request.len()
        );
        return 0;
    };
    if !expects_answer(opcode) {
        return opcode;
    }
    let (header, body) = answer.split_at_mut(OUT_HEADER);
    let (op_in, name) = parsed;
    let req = Request {
        opcode,
        nodeid: u64_in(request, in_header::NODEID),
        op_in: &op_in,
        name,
    };
    let result = protocol::answer(server, &req, body);
    header.copy_from_slice(&out_header(unique, result));
    let len = OUT_HEADER + result.unwrap_or(0);
    // SAFETY: `answer` is readable for `len` bytes.
    let n = unsafe { libc::write(dev.as_raw_fd(), answer.as_ptr().cast(), len) };
    if n < 0 {
        let e = io::Error::last_os_error();
        // ENOENT: the caller gave up (interrupted); the end of the
        // connection is seen by the next read.
        if !matches!(e.raw_os_error(), Some(libc::ENOENT)) && !ended(&e) {
            tracing::warn!("/dev/fuse: answering opcode {opcode}: {e}");
        }
    }
    opcode
}

/// A request's id, opcode, per-operation struct (zero-padded) and what
/// follows the header (a lookup's name).
type Parsed<'a> = (u64, u32, ([u8; OP_IN], &'a [u8]));

fn parse(request: &[u8]) -> Option<Parsed<'_>> {
    if request.len() < IN_HEADER {
        return None;
    }
    let body = &request[IN_HEADER..];
    let mut op_in = [0u8; OP_IN];
    let n = body.len().min(OP_IN);
    op_in[..n].copy_from_slice(&body[..n]);
    Some((
        u64_in(request, in_header::UNIQUE),
        u32_in(request, in_header::OPCODE),
        (op_in, body),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{LOOKUP, READ};

    fn header(opcode: u32, unique: u64, nodeid: u64, body: &[u8]) -> Vec<u8> {
        let mut r = vec![0u8; IN_HEADER];
        r[0..4].copy_from_slice(&((IN_HEADER + body.len()) as u32).to_ne_bytes());
        r[4..8].copy_from_slice(&opcode.to_ne_bytes());
        r[8..16].copy_from_slice(&unique.to_ne_bytes());
        r[16..24].copy_from_slice(&nodeid.to_ne_bytes());
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn a_lookup_brings_its_name_after_the_header() {
        let request = header(LOOKUP, 5, 1, b"Artist\0");
        let (unique, opcode, (op_in, name)) = parse(&request).unwrap();
        assert_eq!((unique, opcode), (5, LOOKUP));
        assert_eq!(name, b"Artist\0");
        assert_eq!(&op_in[..7], b"Artist\0");
        assert!(op_in[7..].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_read_brings_its_struct_padded() {
        // struct fuse_read_in: fh, offset, size, ...
        let mut read_in = [0u8; 40];
        read_in[0..8].copy_from_slice(&9u64.to_ne_bytes());
        read_in[8..16].copy_from_slice(&4096u64.to_ne_bytes());
        read_in[16..20].copy_from_slice(&131_072u32.to_ne_bytes());
        let request = header(READ, 6, 3, &read_in);
        let (_, opcode, (op_in, _)) = parse(&request).unwrap();
        assert_eq!(opcode, READ);
        assert_eq!(u64_in(&op_in, 0), 9);
        assert_eq!(u64_in(&op_in, 8), 4096);
        assert_eq!(u32_in(&op_in, 16), 131_072);
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn a_window_grows_when_the_next_request_came_soon_after_it() {
        assert_eq!(adapted(Duration::ZERO, us(30)), POLL_START);
        assert_eq!(adapted(us(20), us(35)), us(40));
        assert_eq!(adapted(us(80), us(90)), POLL_MAX);
        assert_eq!(adapted(POLL_MAX, POLL_MAX), POLL_MAX);
    }

    #[test]
    fn a_window_shrinks_to_none_when_the_next_request_came_late() {
        let late = POLL_MAX + us(1);
        assert_eq!(adapted(POLL_MAX, late), POLL_MAX / 2);
        assert_eq!(adapted(POLL_MAX / 2, late), POLL_MAX / 4);
        assert_eq!(adapted(POLL_MAX / 4, late), Duration::ZERO);
        assert_eq!(adapted(Duration::ZERO, late), Duration::ZERO);
    }

    #[test]
    fn each_kind_of_request_learns_its_own_window() {
        use crate::protocol::{OPEN, RELEASE};
        let windows = Windows::new();
        std::thread::sleep(Duration::from_millis(2));
        // After every close the client paused a millisecond: no polling.
        for _ in 0..3 {
            windows.gave_up(RELEASE, Instant::now() - Duration::from_millis(1));
            windows.request_came();
        }
        assert_eq!(windows.window(RELEASE), Duration::ZERO);
        assert_eq!(windows.window(OPEN), POLL_MAX);
        // A request with no poll given up before it changes nothing.
        windows.request_came();
        assert_eq!(windows.window(RELEASE), Duration::ZERO);
        // After a close the next request came at once: polling again.
        windows.gave_up(RELEASE, Instant::now());
        windows.request_came();
        assert_eq!(windows.window(RELEASE), POLL_START);
    }

    #[test]
    fn opcodes_beyond_the_table_share_its_last_window() {
        let windows = Windows::new();
        std::thread::sleep(Duration::from_millis(2));
        windows.gave_up(4096, Instant::now() - Duration::from_millis(1));
        windows.request_came();
        assert_eq!(windows.window(4096), POLL_MAX / 2);
        assert_eq!(windows.window(KINDS as u32 - 1), POLL_MAX / 2);
    }

    #[test]
    fn a_short_request_is_refused() {
        assert!(parse(&[0u8; IN_HEADER - 1]).is_none());
    }

    #[test]
    fn the_clone_ioctl_number_is_the_kernels() {
        // _IOR(229, 0, u32): read direction (2) << 30 | size 4 << 16 | type << 8 | nr.
        assert_eq!(DEV_IOC_CLONE, (2 << 30) | (4 << 16) | (229 << 8));
    }
}
