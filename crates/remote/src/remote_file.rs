//! One version of one object, read like a file: blocks come from memory,
//! the disk cache or ranged GETs. A reader going forward has the blocks
//! after it loaded in the background, [`MAX_RUN`] at a time (one GET for
//! those not in the disk cache), so that it finds them in memory.

use std::collections::{HashSet, VecDeque};
use std::io;
use std::ops::Range;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::block_buffer::BlockBuffer;
use crate::block_cache::block_len;
use crate::{ObjectUrl, ObjectVersion, Remote, BLOCK};

/// The most blocks one GET fetches (2 MiB), and how many a forward reader
/// has loaded ahead of it at least.
const MAX_RUN: u64 = 16;
/// Runs a forward reader has loaded or loading ahead of it, at least: the
/// GETs of a cold stream overlap, as do the disk reads of a cached one.
const RUNS_AHEAD: u64 = 2;
/// Blocks kept in memory per open object: the one being read and the runs
/// loaded ahead, with room to spare.
const MEMORY_BLOCKS: usize = ((RUNS_AHEAD + 2) * MAX_RUN) as usize;

pub struct RemoteFile {
    inner: Arc<Inner>,
}

struct Inner {
    remote: Arc<Remote>,
    url: ObjectUrl,
    version: ObjectVersion,
    blocks: Mutex<Blocks>,
    arrived: Condvar,
}

#[derive(Default)]
struct Blocks {
    memory: VecDeque<(u64, Arc<BlockBuffer>)>,
    /// Blocks being loaded now.
    pending: HashSet<u64>,
    /// The block after the last one read: a read there is a reader going
    /// forward.
    next: u64,
    /// The end of the blocks a forward reader had loaded ahead.
    ahead_until: u64,
    /// Where the reads going forward began.
    stream_from: u64,
}

impl Blocks {
    fn get(&self, block: u64) -> Option<Arc<BlockBuffer>> {
        self.memory
            .iter()
            .find(|(b, _)| *b == block)
            .map(|(_, bytes)| bytes.clone())
    }

    fn held(&self, block: u64) -> bool {
        self.pending.contains(&block) || self.memory.iter().any(|(b, _)| *b == block)
    }

    /// Keeps a block in memory; when full, drops the first block behind
    /// the reader, else the oldest.
    fn keep(&mut self, block: u64, bytes: Arc<BlockBuffer>) {
        if self.get(block).is_none() {
            if self.memory.len() == MEMORY_BLOCKS {
                let behind = self.memory.iter().position(|(b, _)| *b + 1 < self.next);
                self.memory.remove(behind.unwrap_or(0));
            }
            self.memory.push_back((block, bytes));
        }
    }

    /// Whether a read of `block` goes on from the last ones: the kernel
    /// sends a stream's reads several at once, and they come out of order
    /// within a run.
    fn is_forward(&self, block: u64) -> bool {
        self.next > 0 && block + MAX_RUN >= self.next && block <= self.next + 1
    }

    /// Notes a read that ended before block `end`: a stream's reads move
    /// `next` forward only, a read elsewhere moves it there.
    fn read_until(&mut self, end: u64) {
        if end > self.next || end + MAX_RUN < self.next {
            self.next = end;
        }
    }

    /// The blocks from `first` (skipping those already here or being
    /// loaded, then at most `run`, up to the next one held and the
    /// object's end) marked as being loaded.
    fn claim(&mut self, first: u64, run: u64, blocks_in_object: u64) -> Range<u64> {
        let mut start = first;
        while start < blocks_in_object && self.held(start) {
            start += 1;
        }
        let mut end = start;
        while end < start + run && end < blocks_in_object && !self.held(end) {
            self.pending.insert(end);
            end += 1;
        }
        start..end
    }
}

impl RemoteFile {
    pub fn new(remote: Arc<Remote>, url: ObjectUrl, version: ObjectVersion) -> RemoteFile {
        RemoteFile {
            inner: Arc::new(Inner {
                remote,
                url,
                version,
                blocks: Mutex::new(Blocks::default()),
                arrived: Condvar::new(),
            }),
        }
    }

    pub fn url(&self) -> &ObjectUrl {
        &self.inner.url
    }

    pub fn version(&self) -> &ObjectVersion {
        &self.inner.version
    }

    /// Fills `buf` from `offset`: all of it, or an error (EIO past the
    /// object's end, or whatever the remote failed with).
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&end| end <= self.inner.version.size)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the object's end"))?;
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            let block = at / BLOCK;
            let bytes = self.inner.block(block)?;
            let from = (at - block * BLOCK) as usize;
            let n = (bytes.len() - from).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&bytes[from..from + n]);
            done += n;
        }
        self.inner.blocks.lock().read_until(end.div_ceil(BLOCK));
        Ok(())
    }
}

impl Inner {
    fn blocks_in_object(&self) -> u64 {
        self.version.size.div_ceil(BLOCK)
    }

    /// One block, loading it when needed; a reader going forward has the
    /// blocks after it loaded in the background.
    fn block(self: &Arc<Self>, block: u64) -> io::Result<Arc<BlockBuffer>> {
        let mut blocks = self.blocks.lock();
        let forward = blocks.is_forward(block);
        if !forward {
            // A seek: what was loaded ahead of the last reads is not.
            blocks.ahead_until = block + 1;
            blocks.stream_from = block;
        }
        // Past a file's first blocks: a player, not an indexer reading the
        // start of every file (which the scan's cache answers, and which
        // must cost no GET).
        let streaming = forward && block >= blocks.stream_from + 2;
        let give_up = std::time::Instant::now() + self.remote.deadline() + std::time::Duration::from_secs(1);
        while blocks.pending.contains(&block) {
            if self.arrived.wait_until(&mut blocks, give_up).timed_out() {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
        }
        if let Some(bytes) = blocks.get(block) {
            if forward {
                retagfs_metrics::count(|m| m.read_ahead_hits.inc());
            }
            if streaming {
                self.read_ahead(&mut blocks, block);
            }
            return Ok(bytes);
        }
        // A reader going on loads a whole run (one GET if the remote has
        // to answer); any other read (a file's start, a seek) its block.
        let run = if forward {
            retagfs_metrics::count(|m| m.read_ahead_misses.inc());
            MAX_RUN
        } else {
            1
        };
        let claimed = blocks.claim(block, run, self.blocks_in_object());
        drop(blocks);
        self.load_for_reader(claimed, forward, streaming)
    }

    /// Starts loading the next runs, each on its own, until [`RUNS_AHEAD`]
    /// runs' blocks past `reading` are loaded or loading.
    fn read_ahead(self: &Arc<Self>, blocks: &mut Blocks, reading: u64) {
        let window_end = (reading + 1 + RUNS_AHEAD * MAX_RUN).min(self.blocks_in_object());
        blocks.ahead_until = blocks.ahead_until.max(reading + 1);
        while blocks.ahead_until < window_end {
            let ahead = blocks.claim(blocks.ahead_until, MAX_RUN, self.blocks_in_object());
            blocks.ahead_until = ahead.end;
            if ahead.is_empty() {
                return;
            }
            let me = self.clone();
            self.remote.spawn_blocking(move || me.load(ahead));
        }
    }

    /// Loads the blocks `claimed` (marked as being loaded) for a reader
    /// waiting for the first. From the disk cache when it has it, the rest
    /// of the run and the runs after it then loaded in the background if
    /// `streaming` (else given up). Otherwise in one GET, the runs after
    /// it fetched meanwhile if the reader goes `forward`.
    fn load_for_reader(
        self: &Arc<Self>,
        claimed: Range<u64>,
        forward: bool,
        streaming: bool,
    ) -> io::Result<Arc<BlockBuffer>> {
        let first = claimed.start;
        if let Some(bytes) = self.cached(first) {
            self.arrived(first..first + 1, std::slice::from_ref(&bytes));
            let rest = first + 1..claimed.end;
            if !streaming {
                self.abandon(rest);
            } else if !rest.is_empty() {
                let me = self.clone();
                self.remote.spawn_blocking(move || me.load(rest));
                self.read_ahead(&mut self.blocks.lock(), first);
            }
            return Ok(bytes);
        }
        if forward {
            self.read_ahead(&mut self.blocks.lock(), first);
        }
        // Taken from what this GET fetched: the memory may have dropped it
        // already for blocks loaded ahead meanwhile.
        Ok(self.fetch(claimed)?[0].clone())
    }

    /// Loads the blocks `claimed` (marked as being loaded): those in the
    /// disk cache from it, each stretch of the others in one GET. A failure
    /// is logged by the remote; the blocks it leaves are no longer pending,
    /// so a reader waiting for one fetches it itself.
    fn load(&self, claimed: Range<u64>) {
        if let Some(cache) = self.remote.cache() {
            // The runs after this one too: the disk reads ahead in large
            // requests, as it does for a local file read in order.
            let hinted = claimed.start..claimed.end + RUNS_AHEAD * MAX_RUN;
            cache.will_need(&self.url, &self.version, hinted);
        }
        let mut missing: Option<u64> = None;
        for b in claimed.clone() {
            match self.cached(b) {
                Some(bytes) => {
                    if let Some(from) = missing.take() {
                        if self.fetch(from..b).is_err() {
                            return self.abandon(b..claimed.end);
                        }
                    }
                    self.arrived(b..b + 1, &[bytes]);
                }
                None => {
                    missing.get_or_insert(b);
                }
            }
        }
        if let Some(from) = missing {
            let _ = self.fetch(from..claimed.end);
        }
    }

    fn cached(&self, block: u64) -> Option<Arc<BlockBuffer>> {
        let cache = self.remote.cache()?;
        cache.get(&self.url, &self.version, block).map(Arc::new)
    }

    /// Keeps blocks `run` (in order, as `bytes`), no longer pending, and
    /// wakes whoever waits for them.
    fn arrived(&self, run: Range<u64>, bytes: &[Arc<BlockBuffer>]) {
        let mut blocks = self.blocks.lock();
        for (b, block) in run.zip(bytes) {
            blocks.pending.remove(&b);
            blocks.keep(b, block.clone());
        }
        self.arrived.notify_all();
    }

    /// Gives up loading blocks `run`: whoever waits for one loads it.
    fn abandon(&self, run: Range<u64>) {
        let mut blocks = self.blocks.lock();
        for b in run {
            blocks.pending.remove(&b);
        }
        self.arrived.notify_all();
    }

    /// Fetches blocks `run` (marked as being loaded) in one GET, keeps
    /// them in memory and in the disk cache, and returns them.
    fn fetch(&self, run: Range<u64>) -> io::Result<Vec<Arc<BlockBuffer>>> {
        let start = run.start * BLOCK;
        let end = (run.end * BLOCK).min(self.version.size);
        let bytes = match self.remote.fetch(&self.url, &self.version, start..end) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.abandon(run);
                return Err(e);
            }
        };
        let mut fetched = Vec::with_capacity((run.end - run.start) as usize);
        for b in run.clone() {
            let from = ((b - run.start) * BLOCK) as usize;
            let len = block_len(&self.version, b) as usize;
            fetched.push(Arc::new(BlockBuffer::copy_of(&bytes[from..from + len])));
        }
        self.arrived(run.clone(), &fetched);
        // After the reader was woken: it need not wait for the disk.
        if let Some(cache) = self.remote.cache() {
            for (b, block) in run.zip(&fetched) {
                cache.put(&self.url, &self.version, b, block);
            }
        }
        Ok(fetched)
    }
}
