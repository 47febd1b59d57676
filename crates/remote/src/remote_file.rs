//! One version of one object, read like a file: blocks come from memory,
//! the disk cache or ranged GETs. A reader going forward gets runs of
//! [`MAX_RUN`] blocks in one GET, and the next run fetched in the
//! background while it reads this one.

use std::collections::{HashSet, VecDeque};
use std::io;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::block_cache::block_len;
use crate::{ObjectUrl, ObjectVersion, Remote, BLOCK};

/// The most blocks one GET fetches (2 MiB).
const MAX_RUN: u64 = 16;
/// Blocks kept in memory per open object: the run being read and the one
/// fetched ahead, with room to spare.
const MEMORY_BLOCKS: usize = 3 * MAX_RUN as usize;

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
    memory: VecDeque<(u64, Arc<Vec<u8>>)>,
    /// Blocks a GET is fetching now.
    pending: HashSet<u64>,
    /// The block after the last one read: a miss there is a reader going
    /// forward.
    next: u64,
}

impl Blocks {
    fn get(&self, block: u64) -> Option<Arc<Vec<u8>>> {
        self.memory
            .iter()
            .find(|(b, _)| *b == block)
            .map(|(_, bytes)| bytes.clone())
    }

    fn keep(&mut self, block: u64, bytes: Arc<Vec<u8>>) {
        if self.get(block).is_none() {
            if self.memory.len() == MEMORY_BLOCKS {
                self.memory.pop_front();
            }
            self.memory.push_back((block, bytes));
        }
    }

    /// The blocks from `first` (at most `run`, before any already here or
    /// being fetched, and before the object's end) marked as being fetched.
    fn claim(&mut self, first: u64, run: u64, blocks_in_object: u64) -> std::ops::Range<u64> {
        let mut end = first;
        while end < first + run
            && end < blocks_in_object
            && !self.pending.contains(&end)
            && self.get(end).is_none()
        {
            self.pending.insert(end);
            end += 1;
        }
        first..end
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
        let mut blocks = self.inner.blocks.lock();
        blocks.next = end.div_ceil(BLOCK);
        Ok(())
    }
}

impl Inner {
    fn blocks_in_object(&self) -> u64 {
        self.version.size.div_ceil(BLOCK)
    }

    /// One block, fetching it (and the run after it) when needed.
    fn block(self: &Arc<Self>, block: u64) -> io::Result<Arc<Vec<u8>>> {
        let mut blocks = self.blocks.lock();
        let give_up = std::time::Instant::now() + self.remote.deadline() + std::time::Duration::from_secs(1);
        while blocks.pending.contains(&block) {
            if self.arrived.wait_until(&mut blocks, give_up).timed_out() {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
        }
        if let Some(bytes) = blocks.get(block) {
            return Ok(bytes);
        }
        if let Some(bytes) = self
            .remote
            .cache()
            .and_then(|c| c.get(&self.url, &self.version, block))
        {
            let bytes = Arc::new(bytes);
            blocks.keep(block, bytes.clone());
            return Ok(bytes);
        }
        // A reader going on from where it stopped reads on: the largest
        // GETs at once, and the next run in flight meanwhile. Any other
        // read (a file's start, a seek) gets its block only.
        let forward = block + 1 >= blocks.next && block <= blocks.next + 1 && blocks.next > 0;
        let run = if forward { MAX_RUN } else { 1 };
        let claimed = blocks.claim(block, run, self.blocks_in_object());
        let ahead = if forward {
            blocks.claim(claimed.end, run, self.blocks_in_object())
        } else {
            claimed.end..claimed.end
        };
        drop(blocks);
        if !ahead.is_empty() {
            let me = self.clone();
            self.remote.spawn_blocking(move || {
                let _ = me.fetch(ahead);
            });
        }
        // Taken from what this GET fetched: the memory may have dropped it
        // already for blocks fetched ahead meanwhile.
        let first = claimed.start;
        let fetched = self.fetch(claimed)?;
        Ok(fetched[(block - first) as usize].clone())
    }

    /// Fetches blocks `run` (claimed as pending) in one GET, keeps them,
    /// wakes whoever waits for them, and returns them.
    fn fetch(&self, run: std::ops::Range<u64>) -> io::Result<Vec<Arc<Vec<u8>>>> {
        let start = run.start * BLOCK;
        let end = (run.end * BLOCK).min(self.version.size);
        let fetched = self.remote.fetch(&self.url, &self.version, start..end);
        let mut blocks = self.blocks.lock();
        for b in run.clone() {
            blocks.pending.remove(&b);
        }
        let outcome = fetched.map(|bytes| {
            let mut kept = Vec::with_capacity((run.end - run.start) as usize);
            for b in run {
                let from = ((b - run_start(start)) * BLOCK) as usize;
                let len = block_len(&self.version, b) as usize;
                let block = Arc::new(bytes[from..from + len].to_vec());
                if let Some(cache) = self.remote.cache() {
                    cache.put(&self.url, &self.version, b, &block);
                }
                blocks.keep(b, block.clone());
                kept.push(block);
            }
            kept
        });
        self.arrived.notify_all();
        outcome
    }
}

/// The block a byte offset that starts a run is in.
fn run_start(start: u64) -> u64 {
    start / BLOCK
}
