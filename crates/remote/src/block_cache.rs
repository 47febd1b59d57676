//! A persistent, bounded cache of remote bytes on local disk, in blocks
//! keyed by object, version and block number: a block is only ever served
//! for the version it was filled from, survives remounts, and the least
//! recently used blocks go first when the cache is full.
//!
//! Each block is a file, written under a temporary name and renamed, so a
//! crash leaves whole blocks or none; one whose length is not the block's
//! is dropped when read. Several processes (a scan, mounts) may share a
//! folder: each keeps its own account of it, and a block another one
//! evicted is a miss.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use parking_lot::Mutex;

use crate::{ObjectUrl, ObjectVersion};

/// Bytes per block: the start of a file that players and indexers read
/// first is one block.
pub const BLOCK: u64 = 128 * 1024;

/// A block file being written for longer than this was left by a process
/// that stopped.
const STALE_WRITE: std::time::Duration = std::time::Duration::from_secs(3600);

/// `$XDG_CACHE_HOME/retagfs/objects`, else `~/.cache/retagfs/objects`.
pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/cache"));
    base.join("retagfs").join("objects")
}

pub struct BlockCache {
    dir: PathBuf,
    capacity: u64,
    index: Mutex<Option<Index>>,
}

/// The blocks this process knows of, by name, in order of last use.
#[derive(Default)]
struct Index {
    blocks: HashMap<String, (u64, u64)>,
    by_use: BTreeMap<u64, String>,
    bytes: u64,
    clock: u64,
}

impl Index {
    fn touch(&mut self, name: &str, len: u64) {
        self.clock += 1;
        if let Some((used, old_len)) = self.blocks.insert(name.to_string(), (self.clock, len)) {
            self.by_use.remove(&used);
            self.bytes -= old_len;
        }
        self.by_use.insert(self.clock, name.to_string());
        self.bytes += len;
    }

    fn forget(&mut self, name: &str) {
        if let Some((used, len)) = self.blocks.remove(name) {
            self.by_use.remove(&used);
            self.bytes -= len;
        }
    }

    fn least_recent(&self) -> Option<String> {
        self.by_use.values().next().cloned()
    }
}

impl BlockCache {
    /// A cache in `dir` holding at most `capacity` bytes of blocks. The
    /// folder is made now; what it holds is looked at on first use.
    pub fn open(dir: &Path, capacity: u64) -> io::Result<BlockCache> {
        fs::create_dir_all(dir.join("blocks")).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot make the cache folder {}: {e}", dir.display()),
            )
        })?;
        Ok(BlockCache {
            dir: dir.to_path_buf(),
            capacity,
            index: Mutex::new(None),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Block `block` of `version` of `url`, when cached whole.
    pub fn get(&self, url: &ObjectUrl, version: &ObjectVersion, block: u64) -> Option<Vec<u8>> {
        let name = block_name(url, version, block);
        let path = self.path_of(&name);
        let bytes = read_and_touch(&path);
        // A read needs no account of the whole folder (walking it costs a
        // stat per block): only a write, which may have to evict, loads it.
        let mut index = self.index.lock();
        let Some(index) = index.as_mut() else {
            return bytes.filter(|b| b.len() as u64 == block_len(version, block));
        };
        match bytes {
            Some(bytes) if bytes.len() as u64 == block_len(version, block) => {
                index.touch(&name, bytes.len() as u64);
                Some(bytes)
            }
            Some(_) => {
                let _ = fs::remove_file(&path);
                index.forget(&name);
                None
            }
            None => {
                index.forget(&name);
                None
            }
        }
    }

    /// Keeps a whole block; failures to write are logged, never returned
    /// (the bytes were served anyway).
    pub fn put(&self, url: &ObjectUrl, version: &ObjectVersion, block: u64, bytes: &[u8]) {
        if bytes.len() as u64 != block_len(version, block) || bytes.len() as u64 > self.capacity {
            return;
        }
        let name = block_name(url, version, block);
        if let Err(e) = self.write(&name, bytes) {
            tracing::warn!("cannot write to the cache folder {}: {e}", self.dir.display());
            return;
        }
        let mut index = self.index.lock();
        let index = self.loaded(&mut index);
        index.touch(&name, bytes.len() as u64);
        while index.bytes > self.capacity {
            let Some(oldest) = index.least_recent() else { break };
            let _ = fs::remove_file(self.path_of(&oldest));
            index.forget(&oldest);
        }
    }

    fn write(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let path = self.path_of(name);
        let folder = path.parent().expect("a block's path has a folder");
        fs::create_dir_all(folder)?;
        let mut tmp = tempfile_in(folder)?;
        tmp.1.write_all(bytes)?;
        fs::rename(&tmp.0, &path).inspect_err(|_| {
            let _ = fs::remove_file(&tmp.0);
        })
    }

    fn path_of(&self, name: &str) -> PathBuf {
        self.dir.join("blocks").join(&name[..2]).join(name)
    }

    /// The index, read from the folder the first time: blocks ordered by
    /// when they were written.
    fn loaded<'a>(&self, index: &'a mut Option<Index>) -> &'a mut Index {
        index.get_or_insert_with(|| {
            let mut found: Vec<(SystemTime, String, u64)> = Vec::new();
            for sub in fs::read_dir(self.dir.join("blocks"))
                .into_iter()
                .flatten()
                .flatten()
            {
                for entry in fs::read_dir(sub.path()).into_iter().flatten().flatten() {
                    let Ok(meta) = entry.metadata() else { continue };
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if name.starts_with('.') {
                        // A write under way, here or in another process;
                        // one this old never finished.
                        let stale = meta.modified().ok().and_then(|t| t.elapsed().ok());
                        if stale.is_some_and(|age| age > STALE_WRITE) {
                            let _ = fs::remove_file(entry.path());
                        }
                        continue;
                    }
                    let when = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    found.push((when, name, meta.len()));
                }
            }
            found.sort();
            let mut index = Index::default();
            for (_, name, len) in found {
                index.touch(&name, len);
            }
            index
        })
    }
}

/// A block file's bytes; its time is set to now, so that the next
/// process to load the folder's account sees it as recently used.
fn read_and_touch(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut file = fs::File::open(path).ok()?;
    let mut bytes = Vec::with_capacity(BLOCK as usize);
    file.read_to_end(&mut bytes).ok()?;
    let _ = file.set_modified(SystemTime::now());
    Some(bytes)
}

/// Bytes in block `block` of a version: `BLOCK`, less for the last.
pub(crate) fn block_len(version: &ObjectVersion, block: u64) -> u64 {
    version.size.saturating_sub(block * BLOCK).min(BLOCK)
}

/// A file name for a block that no other object, version or block shares.
fn block_name(url: &ObjectUrl, version: &ObjectVersion, block: u64) -> String {
    let mut hasher = blake3::Hasher::new();
    for part in [url.bucket.as_bytes(), url.key.as_bytes(), version.etag.as_bytes()] {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.update(&version.size.to_le_bytes());
    let hash = hasher.finalize();
    format!("{}-{block}", hex::encode(&hash.as_bytes()[..16]))
}

/// A new hidden file in `folder`, for a block being written.
fn tempfile_in(folder: &Path) -> io::Result<(PathBuf, fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = folder.join(format!(".{}-{n}", std::process::id()));
    let file = fs::OpenOptions::new().write(true).create_new(true).open(&path)?;
    Ok((path, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(etag: &str, size: u64) -> ObjectVersion {
        ObjectVersion {
            etag: etag.into(),
            size,
            mtime_ns: 0,
        }
    }

    #[test]
    fn a_block_is_served_only_for_the_version_it_was_filled_from() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlockCache::open(dir.path(), 1 << 30).unwrap();
        let url = ObjectUrl::parse("s3://music/a.flac").unwrap();
        let v1 = version("\"1\"", BLOCK + 10);
        cache.put(&url, &v1, 1, &[7; 10]);
        assert_eq!(cache.get(&url, &v1, 1), Some(vec![7; 10]));
        assert_eq!(cache.get(&url, &version("\"2\"", BLOCK + 10), 1), None);
        assert_eq!(cache.get(&url, &version("\"1\"", BLOCK + 11), 1), None);
        // A block of the wrong length is never kept.
        cache.put(&url, &v1, 0, &[1; 10]);
        assert_eq!(cache.get(&url, &v1, 0), None);
    }

    #[test]
    fn a_block_another_writer_is_writing_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlockCache::open(dir.path(), 1 << 30).unwrap();
        let url = ObjectUrl::parse("s3://music/a.flac").unwrap();
        let v = version("\"1\"", BLOCK);
        // Another process's write under way, in the folder of a block.
        let name = block_name(&url, &v, 0);
        let folder = dir.path().join("blocks").join(&name[..2]);
        fs::create_dir_all(&folder).unwrap();
        fs::write(folder.join(".999999-0"), b"half").unwrap();
        // This process's first write reads the folder's account.
        cache.put(&url, &v, 0, &[1; BLOCK as usize]);
        assert!(folder.join(".999999-0").exists(), "a write under way was removed");
        assert!(cache.get(&url, &v, 0).is_some());
    }

    #[test]
    fn the_least_recently_used_blocks_go_first_and_the_cache_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let url = ObjectUrl::parse("s3://music/a.flac").unwrap();
        let v = version("\"1\"", 4 * BLOCK);
        let block = vec![1; BLOCK as usize];
        {
            let cache = BlockCache::open(dir.path(), 3 * BLOCK).unwrap();
            for b in 0..3 {
                cache.put(&url, &v, b, &block);
            }
            assert!(cache.get(&url, &v, 0).is_some());
            cache.put(&url, &v, 3, &block);
            assert!(
                cache.get(&url, &v, 1).is_none(),
                "block 1 was the least recently used"
            );
            assert!(cache.get(&url, &v, 0).is_some());
        }
        let reopened = BlockCache::open(dir.path(), 3 * BLOCK).unwrap();
        assert!(reopened.get(&url, &v, 3).is_some());
        assert!(reopened.get(&url, &v, 2).is_some());
    }
}
