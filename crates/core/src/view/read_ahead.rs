//! Read-ahead for slow (network) backing storage. The kernel asks for a
//! served file in pieces of at most a megabyte and waits for each; on
//! storage where every read pays milliseconds of latency that caps a stream
//! at piece / latency. Once an open file is read sequentially, its backing
//! bytes are fetched in chunks ahead of the reader, several at once on a
//! small shared pool, so the latencies overlap. Memory is bounded by a
//! global budget; past it, reads go straight to the backing file.

use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Bytes fetched per backing read.
const CHUNK: u64 = 1 << 20;
/// Chunks fetched ahead of a sequential reader.
const DEPTH: u64 = 6;
/// Threads fetching chunks, shared by every open file.
const FETCHERS: usize = 6;
/// Most bytes held in chunks at once, over every open file.
const BUDGET: usize = 96 << 20;

static BUFFERED: AtomicUsize = AtomicUsize::new(0);

/// Read-ahead on local storage: the kernel's own, but for a file's first
/// read. The daemon reads a served file's backing bytes in order, as the
/// kernel asks for them, so the backing file's read-ahead sees a
/// sequential reader and reads ahead of it in large folios and large disk
/// requests. A first read, though, gathers a served file's head from
/// several places of the backing file (an MP4's `ftyp`, then its `mdat`
/// past the old `moov`; a FLAC's kept blocks, then its frames), each of
/// which the kernel takes for a small random read and waits for alone: so
/// that read is asked for at once (`POSIX_FADV_WILLNEED`), in one disk
/// request. Later reads get no hints: hints read into 4 KiB pages, in
/// smaller disk requests, the call waits while it queues them, and the
/// kernel's read-ahead starts over at the end of each hinted range
/// (measured in docs/benchmarks.md). A file found wholly in the page
/// cache at its first read gets no hint: a client reading cached files
/// gains nothing from having the next ones read ahead either.
pub struct FirstRead {
    /// The backing file's size.
    size: u64,
    /// Whether the file was wholly in the page cache at its first read.
    found_cached: OnceLock<bool>,
}

impl FirstRead {
    /// For a backing file of `size` bytes.
    pub fn new(size: u64) -> FirstRead {
        FirstRead {
            size,
            found_cached: OnceLock::new(),
        }
    }

    /// Before each read, with the backing bytes it spans (None: none):
    /// the first read that touches the backing file asks the kernel for
    /// them unless the file is cached. The span is computed for that read
    /// only; later ones cost a load.
    pub fn before_read(&self, file: &File, span: impl FnOnce() -> Option<Range<u64>>) {
        if self.found_cached.get().is_some() {
            return;
        }
        let Some(Range { start, end }) = span() else {
            return;
        };
        self.found_cached.get_or_init(|| {
            let cached = cached_to_the_end(file, start, self.size);
            if !cached {
                will_need(file, start, end);
            }
            cached
        });
    }

    /// Whether the file was wholly in the page cache when first read (false
    /// before that).
    pub fn found_cached(&self) -> bool {
        self.found_cached.get().copied().unwrap_or(false)
    }
}

/// Whether every page of `file` (`size` bytes) from `from` on is in the
/// page cache; where that cannot be told, the answer is no.
fn cached_to_the_end(file: &File, from: u64, size: u64) -> bool {
    let first = from / page_size() * page_size();
    // A length of 0 means to the end of the file.
    cached_pages(file, first, 0)
        .is_some_and(|cached| cached >= size.saturating_sub(first).div_ceil(page_size()))
}

fn page_size() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    // SAFETY: sysconf takes an integer and returns one.
    *PAGE.get_or_init(|| u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096))
}

/// How many pages of `len` bytes of `file` at `off` (0: to the end) are in
/// the page cache. `cachestat` (Linux 6.5+) reads nothing and starts no
/// read-ahead, unlike a probing read; None where it is missing.
fn cached_pages(file: &File, off: u64, len: u64) -> Option<u64> {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Counts {
        cached: u64,
        dirty: u64,
        writeback: u64,
        evicted: u64,
        recently_evicted: u64,
    }
    // The same number on every architecture (new system calls have shared
    // one table since 424); not yet in the libc crate for all of them.
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range { off, len };
    let mut counts = Counts::default();
    // SAFETY: both structs are the kernel's layout and outlive the call;
    // the fd is open for its duration.
    let done = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const Range,
            &mut counts as *mut Counts,
            0u32,
        )
    };
    (done == 0).then_some(counts.cached)
}

/// Asks the kernel to start reading `from..to` of `file` into its page
/// cache (`POSIX_FADV_WILLNEED`); returns once the reads are queued.
pub fn will_need(file: &File, from: u64, to: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: advice only; the fd is open for the call's duration.
    unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            from as libc::off_t,
            to.saturating_sub(from) as libc::off_t,
            libc::POSIX_FADV_WILLNEED,
        );
    }
}

/// One chunk of backing bytes, being fetched or fetched.
struct Chunk {
    data: Mutex<Option<io::Result<Vec<u8>>>>,
    ready: Condvar,
}

impl Chunk {
    /// Waits until the chunk is fetched.
    fn wait(&self) -> parking_lot::MutexGuard<'_, Option<io::Result<Vec<u8>>>> {
        let mut data = self.data.lock();
        while data.is_none() {
            self.ready.wait(&mut data);
        }
        data
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        BUFFERED.fetch_sub(CHUNK as usize, Ordering::Relaxed);
    }
}

/// The read-ahead state of one open file.
pub struct ReadAhead {
    file: Arc<File>,
    size: u64,
    state: Mutex<State>,
}

struct State {
    /// Where the last read ended.
    next: u64,
    chunks: BTreeMap<u64, Arc<Chunk>>,
}

type Job = Box<dyn FnOnce() + Send>;

fn pool() -> &'static crossbeam_channel::Sender<Job> {
    static POOL: OnceLock<crossbeam_channel::Sender<Job>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        for i in 0..FETCHERS {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("retagfs-fetch-{i}"))
                .spawn(move || rx.iter().for_each(|job| job()));
            if let Err(e) = spawned {
                tracing::warn!("read-ahead thread: {e}");
            }
        }
        tx
    })
}

impl ReadAhead {
    pub fn new(file: Arc<File>, size: u64) -> ReadAhead {
        ReadAhead {
            file,
            size,
            state: Mutex::new(State {
                next: u64::MAX,
                chunks: BTreeMap::new(),
            }),
        }
    }

    /// Reads backing bytes at `offset`: from chunks when the reader is
    /// sequential (near where its last read ended), else directly.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset + buf.len() as u64;
        let wanted: Vec<Arc<Chunk>> = {
            let mut state = self.state.lock();
            let sequential = state.next != u64::MAX && offset.abs_diff(state.next) <= CHUNK;
            state.next = end;
            if !sequential || end > self.size {
                state.chunks.clear();
                drop(state);
                return self.file.read_exact_at(buf, offset);
            }
            let (first, last) = (offset / CHUNK, (end.max(offset + 1) - 1) / CHUNK);
            state.chunks.retain(|&i, _| i >= first);
            let mut wanted = Vec::new();
            for i in first..=last + DEPTH {
                if i * CHUNK >= self.size {
                    break;
                }
                let chunk = match state.chunks.get(&i) {
                    Some(c) => {
                        if i <= last {
                            retagfs_metrics::count(|m| m.read_ahead_hits.inc());
                        }
                        c.clone()
                    }
                    None if i <= last || BUFFERED.load(Ordering::Relaxed) < BUDGET => {
                        if i <= last {
                            retagfs_metrics::count(|m| m.read_ahead_misses.inc());
                        }
                        let c = self.fetch(i);
                        state.chunks.insert(i, c.clone());
                        c
                    }
                    None => break,
                };
                if i <= last {
                    wanted.push(chunk);
                }
            }
            wanted
        };
        let mut at = offset;
        for chunk in wanted {
            let data = chunk.wait();
            let Some(Ok(bytes)) = data.as_ref() else {
                let e = match data.as_ref() {
                    Some(Err(e)) => io::Error::new(e.kind(), e.to_string()),
                    _ => io::Error::other("read-ahead chunk missing"),
                };
                drop(data);
                // A failed fetch is not kept: the next read tries again.
                self.state.lock().chunks.clear();
                return Err(e);
            };
            let chunk_start = at / CHUNK * CHUNK;
            let from = (at - chunk_start) as usize;
            let n = (bytes.len() - from).min((end - at) as usize);
            let done = (at - offset) as usize;
            buf[done..done + n].copy_from_slice(&bytes[from..from + n]);
            at += n as u64;
        }
        if at != end {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        Ok(())
    }

    /// Starts fetching chunk `i` on the pool.
    fn fetch(&self, i: u64) -> Arc<Chunk> {
        BUFFERED.fetch_add(CHUNK as usize, Ordering::Relaxed);
        let chunk = Arc::new(Chunk {
            data: Mutex::new(None),
            ready: Condvar::new(),
        });
        let (file, target) = (self.file.clone(), chunk.clone());
        let len = CHUNK.min(self.size - i * CHUNK) as usize;
        let job: Job = Box::new(move || {
            let mut bytes = vec![0u8; len];
            let result = file.read_exact_at(&mut bytes, i * CHUNK).map(|()| bytes);
            *target.data.lock() = Some(result);
            target.ready.notify_all();
        });
        if let Err(crossbeam_channel::SendError(job)) = pool().send(job) {
            job();
        }
        chunk
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_of(len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
        let data: Vec<u8> = (0..len as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 9) as u8)
            .collect();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, &data).unwrap();
        (f, data)
    }

    #[test]
    fn sequential_random_and_straddling_reads_return_the_file_bytes() {
        let len = 5 * CHUNK as usize + 12_345;
        let (f, data) = file_of(len);
        let ahead = ReadAhead::new(Arc::new(File::open(f.path()).unwrap()), len as u64);
        let mut seed = 7u64;
        let mut offset = 0u64;
        for step in 0..400 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let size = (seed % 300_000) as usize + 1;
            // Mostly sequential (a player), sometimes a seek.
            if step % 17 == 0 {
                offset = seed % len as u64;
            }
            let size = size.min(len - offset as usize);
            let mut buf = vec![0u8; size];
            ahead.read_exact_at(&mut buf, offset).unwrap();
            assert_eq!(
                buf,
                &data[offset as usize..offset as usize + size],
                "{size} at {offset}"
            );
            offset = (offset + size as u64) % len as u64;
        }
    }

    #[test]
    fn a_file_just_written_is_cached_to_its_end_and_no_further() {
        let len = 3 * 4096 + 100;
        let (f, _) = file_of(len);
        let file = File::open(f.path()).unwrap();
        // Just written, so in the page cache (where cachestat exists).
        let cachestat_works = cached_to_the_end(&file, 0, len as u64);
        if cachestat_works {
            assert!(cached_to_the_end(&file, 5000, len as u64));
            // Pages past the end of the file are in no cache.
            assert!(!cached_to_the_end(&file, 0, len as u64 + 3 * 4096));
        } else {
            eprintln!(
                "SKIPPED LOUDLY: no cachestat on this kernel (Linux 6.5+): every file counts as uncached"
            );
        }
        // Cached or not, the first read says what it saw.
        let first = FirstRead::new(len as u64);
        assert!(!first.found_cached());
        first.before_read(&file, || Some(0..4096));
        assert_eq!(first.found_cached(), cachestat_works);
    }

    #[test]
    fn only_a_first_read_asks_the_kernel_for_its_bytes() {
        use std::os::fd::AsRawFd;
        let page = page_size();
        let len = 64 * page;
        let (f, _) = file_of(len as usize);
        f.as_file().sync_all().unwrap();
        let file = File::open(f.path()).unwrap();
        // SAFETY: advice only, on an open descriptor.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if cached_pages(&file, 0, 0) != Some(0) {
            eprintln!(
                "SKIPPED LOUDLY: cannot empty a file's page cache here (no cachestat, or a temp dir on tmpfs)"
            );
            return;
        }
        let first = FirstRead::new(len);
        first.before_read(&file, || Some(8 * page..16 * page));
        assert!(!first.found_cached());
        assert_eq!(
            cached_pages(&file, 8 * page, 8 * page),
            Some(8),
            "the first read is asked for"
        );
        first.before_read(&file, || Some(40 * page..48 * page));
        assert_eq!(
            cached_pages(&file, 40 * page, 8 * page),
            Some(0),
            "later reads are left to the kernel"
        );
    }

    #[test]
    fn a_file_shorter_than_its_size_is_an_error() {
        let (f, _) = file_of(2 * CHUNK as usize);
        let ahead = ReadAhead::new(Arc::new(File::open(f.path()).unwrap()), 3 * CHUNK);
        let mut buf = vec![0u8; 4096];
        ahead.read_exact_at(&mut buf, 0).unwrap();
        let mut at = 4096;
        let failed = loop {
            let mut buf = vec![0u8; 1 << 16];
            match ahead.read_exact_at(&mut buf, at) {
                Ok(()) => at += 1 << 16,
                Err(_) => break at,
            }
            assert!(at < 3 * CHUNK, "reads past the end must fail");
        };
        assert!(failed >= CHUNK, "the bytes that exist are served first");
    }
}
