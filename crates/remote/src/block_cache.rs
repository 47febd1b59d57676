//! A persistent, bounded cache of remote bytes on local disk, in blocks
//! keyed by object, version and block number: a block is only ever served
//! for the version it was filled from, survives remounts, and the least
//! recently used blocks go first when the cache is full.
//!
//! Each version of an object is one sparse file: a record of the blocks it
//! holds, each with a check value of its bytes, then the bytes at their own
//! offsets (so that a stream read back from the cache is one file read in
//! order, as fast as a local file). A block whose bytes do not match its
//! check value (a write cut by a crash, a block another process evicted
//! meanwhile) is a miss, so several processes (a scan, mounts) may share a
//! folder without locks: each keeps its own account of it.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use crate::block_buffer::BlockBuffer;
use crate::{ObjectUrl, ObjectVersion};

/// Bytes per block: the start of a file that players and indexers read
/// first is one block.
pub const BLOCK: u64 = 128 * 1024;

/// How stale a record's time may get before a read sets it again: the
/// order of use between processes is kept to this precision.
const TOUCH_AFTER: Duration = Duration::from_secs(600);

/// The start of every object's file, then the object's size.
const RECORD_MAGIC: &[u8; 8] = b"rtgfsbl2";
const RECORD_HEADER: u64 = 16;
/// A block's entry in a record: its [`hash_of`]; all zeros for a block
/// not held.
const ENTRY: u64 = 16;

/// The largest object S3 holds: a record naming a larger size is not one.
const MAX_OBJECT: u64 = 5 << 40;

/// Object files kept open between reads; past it, they are all closed.
const OPEN_OBJECTS: usize = 64;

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
    open: Mutex<HashMap<String, Arc<CachedObject>>>,
}

/// One version's file, open.
struct CachedObject {
    file: File,
    /// The object's size.
    size: u64,
    /// Where block 0's bytes start: after the record, on a page boundary.
    data_offset: u64,
}

/// The blocks this process knows of, by object and block, in order of
/// last use.
#[derive(Default)]
struct Index {
    blocks: HashMap<(String, u64), (u64, u64)>,
    by_use: BTreeMap<u64, (String, u64)>,
    /// Blocks held per object: its files go with its last block.
    per_object: HashMap<String, usize>,
    bytes: u64,
    clock: u64,
}

impl Index {
    fn touch(&mut self, name: &str, block: u64, len: u64) {
        self.clock += 1;
        let key = (name.to_string(), block);
        match self.blocks.insert(key.clone(), (self.clock, len)) {
            Some((used, old_len)) => {
                self.by_use.remove(&used);
                self.bytes -= old_len;
            }
            None => *self.per_object.entry(name.to_string()).or_default() += 1,
        }
        self.by_use.insert(self.clock, key);
        self.bytes += len;
    }

    /// Forgets a block; true when it was its object's last.
    fn forget(&mut self, name: &str, block: u64) -> bool {
        let Some((used, len)) = self.blocks.remove(&(name.to_string(), block)) else {
            return false;
        };
        self.by_use.remove(&used);
        self.bytes -= len;
        let left = self.per_object.get_mut(name).map(|n| {
            *n -= 1;
            *n
        });
        if left == Some(0) {
            self.per_object.remove(name);
            return true;
        }
        false
    }

    fn least_recent(&self) -> Option<(String, u64)> {
        self.by_use.values().next().cloned()
    }
}

impl BlockCache {
    /// A cache in `dir` holding at most `capacity` bytes of blocks. The
    /// folder is made now; what it holds is looked at on first use.
    pub fn open(dir: &Path, capacity: u64) -> io::Result<BlockCache> {
        fs::create_dir_all(dir.join("objects")).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot make the cache folder {}: {e}", dir.display()),
            )
        })?;
        // The layout of earlier versions (a file per block) is not read.
        let _ = fs::remove_dir_all(dir.join("blocks"));
        Ok(BlockCache {
            dir: dir.to_path_buf(),
            capacity,
            index: Mutex::new(None),
            open: Mutex::new(HashMap::new()),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Block `block` of `version` of `url`, when cached whole.
    pub fn get(&self, url: &ObjectUrl, version: &ObjectVersion, block: u64) -> Option<BlockBuffer> {
        let name = object_name(url, version);
        let object = self.object(&name, version, false)?;
        let found = object.block(version, block);
        // A read needs no account of the whole folder: only a write, which
        // may have to evict, loads it.
        if let Some(index) = self.index.lock().as_mut() {
            match &found {
                Some(bytes) => index.touch(&name, block, bytes.len() as u64),
                None => {
                    index.forget(&name, block);
                }
            }
        }
        if found.is_some() {
            object.touch();
        }
        found
    }

    /// Asks the kernel to start reading blocks `blocks` of a version from
    /// disk now, all at once, when the cache holds that version: a stream
    /// read back from the cache then waits on the disk once per run.
    pub fn will_need(&self, url: &ObjectUrl, version: &ObjectVersion, blocks: std::ops::Range<u64>) {
        let name = object_name(url, version);
        if let Some(object) = self.object(&name, version, false) {
            let start = blocks.start * BLOCK;
            let len = (blocks.end * BLOCK).min(version.size).saturating_sub(start);
            // SAFETY: posix_fadvise reads no memory; the descriptor is open.
            unsafe {
                libc::posix_fadvise(
                    object.file.as_raw_fd(),
                    (object.data_offset + start) as libc::off_t,
                    len as libc::off_t,
                    libc::POSIX_FADV_WILLNEED,
                );
            }
        }
    }

    /// Keeps a whole block; failures to write are logged, never returned
    /// (the bytes were served anyway).
    pub fn put(&self, url: &ObjectUrl, version: &ObjectVersion, block: u64, bytes: &[u8]) {
        if bytes.len() as u64 != block_len(version, block) || bytes.len() as u64 > self.capacity {
            return;
        }
        let name = object_name(url, version);
        let written = self
            .object(&name, version, true)
            .ok_or_else(|| io::Error::other("cannot open its files"))
            .and_then(|object| object.keep(block, bytes));
        if let Err(e) = written {
            tracing::warn!("cannot write to the cache folder {}: {e}", self.dir.display());
            return;
        }
        let mut index = self.index.lock();
        let index = self.loaded(&mut index);
        index.touch(&name, block, bytes.len() as u64);
        while index.bytes > self.capacity {
            let Some((oldest, oldest_block)) = index.least_recent() else {
                break;
            };
            self.evict(&oldest, oldest_block, index.forget(&oldest, oldest_block));
        }
    }

    /// The files of an object's version, open (made when `create`).
    fn object(&self, name: &str, version: &ObjectVersion, create: bool) -> Option<Arc<CachedObject>> {
        if let Some(object) = self.open.lock().get(name) {
            return Some(object.clone());
        }
        let path = self.path_of(name);
        if create {
            fs::create_dir_all(path.parent()?).ok()?;
        }
        let object = Arc::new(CachedObject::open(&path, create.then_some(version.size))?);
        let mut open = self.open.lock();
        if open.len() >= OPEN_OBJECTS {
            open.clear();
        }
        open.insert(name.to_string(), object.clone());
        Some(object)
    }

    /// Drops a block: its bytes' space is given back, and its object's
    /// files go with its last block.
    fn evict(&self, name: &str, block: u64, last: bool) {
        let path = self.path_of(name);
        if last {
            self.open.lock().remove(name);
            let _ = fs::remove_file(&path);
            return;
        }
        if let Some(object) = self.open.lock().get(name).cloned() {
            object.drop_block(block);
        } else if let Some(object) = CachedObject::open(&path, None) {
            object.drop_block(block);
        }
    }

    /// An object's file.
    fn path_of(&self, name: &str) -> PathBuf {
        self.dir
            .join("objects")
            .join(&name[..2])
            .join(format!("{name}.blocks"))
    }

    /// The index, read from the folder the first time: objects ordered by
    /// when they were last used, their blocks in order.
    fn loaded<'a>(&self, index: &'a mut Option<Index>) -> &'a mut Index {
        index.get_or_insert_with(|| {
            // (last used, object, its blocks and their lengths)
            type Found = (SystemTime, String, Vec<(u64, u64)>);
            let mut found: Vec<Found> = Vec::new();
            for sub in fs::read_dir(self.dir.join("objects"))
                .into_iter()
                .flatten()
                .flatten()
            {
                for entry in fs::read_dir(sub.path()).into_iter().flatten().flatten() {
                    let path = entry.path();
                    if path.extension().is_none_or(|e| e != "blocks") {
                        continue;
                    }
                    let Some(name) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
                        continue;
                    };
                    let when = entry
                        .metadata()
                        .and_then(|m| m.modified())
                        .unwrap_or(SystemTime::UNIX_EPOCH);
                    found.push((when, name, recorded_blocks(&path)));
                }
            }
            found.sort();
            let mut index = Index::default();
            for (_, name, blocks) in found {
                for (block, len) in blocks {
                    index.touch(&name, block, len);
                }
            }
            index
        })
    }
}

impl CachedObject {
    /// The file at `path`; made (or its record started afresh, if it is no
    /// record of an object of that size) when `create` gives the object's
    /// size.
    fn open(path: &Path, create: Option<u64>) -> Option<CachedObject> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create.is_some())
            .open(path)
            .ok()?;
        let mut header = [0; RECORD_HEADER as usize];
        if create.is_some_and(|size| size > MAX_OBJECT) {
            return None;
        }
        let size = match (file.read_exact_at(&mut header, 0), create) {
            (Ok(()), _) if &header[..8] == RECORD_MAGIC => {
                let size = u64::from_le_bytes(header[8..].try_into().expect("8 bytes"));
                if size > MAX_OBJECT || create.is_some_and(|want| want != size) {
                    return None;
                }
                size
            }
            (_, Some(size)) => {
                let mut header = RECORD_MAGIC.to_vec();
                header.extend_from_slice(&size.to_le_bytes());
                file.set_len(0).ok()?;
                file.write_all_at(&header, 0).ok()?;
                size
            }
            (_, None) => return None,
        };
        Some(CachedObject {
            file,
            size,
            data_offset: data_offset(size),
        })
    }

    /// A block's bytes, when its record says it is held and they match.
    fn block(&self, version: &ObjectVersion, block: u64) -> Option<BlockBuffer> {
        let mut entry = [0; ENTRY as usize];
        self.file.read_exact_at(&mut entry, entry_offset(block)).ok()?;
        if entry == [0; ENTRY as usize] {
            return None;
        }
        let mut bytes = BlockBuffer::for_overwrite(block_len(version, block) as usize);
        self.file
            .read_exact_at(bytes.as_mut_slice(), self.data_offset + block * BLOCK)
            .ok()?;
        (hash_of(&bytes) == entry).then_some(bytes)
    }

    /// Writes a block's bytes, then its entry: an entry whose bytes a
    /// crash cut does not match them.
    fn keep(&self, block: u64, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, self.data_offset + block * BLOCK)?;
        self.file.write_all_at(&hash_of(bytes), entry_offset(block))
    }

    /// Clears a block's entry and gives its space back to the file system
    /// (where it can punch holes; elsewhere the space stays until the
    /// object's last block goes).
    fn drop_block(&self, block: u64) {
        let _ = self.file.write_all_at(&[0; ENTRY as usize], entry_offset(block));
        // SAFETY: fallocate reads no memory; the descriptor is open.
        unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                (self.data_offset + block * BLOCK) as libc::off_t,
                BLOCK as libc::off_t,
            );
        }
    }

    /// Sets the file's time to now when older than [`TOUCH_AFTER`], so
    /// that the next process to load the folder's account sees the object
    /// as recently used, without a write per read.
    fn touch(&self) {
        let stale = self
            .file
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        if stale.is_none_or(|age| age > TOUCH_AFTER) {
            let _ = self.file.set_modified(SystemTime::now());
        }
    }
}

/// Where block 0's bytes start in the file of an object of `size` bytes.
fn data_offset(size: u64) -> u64 {
    (RECORD_HEADER + size.div_ceil(BLOCK) * ENTRY).next_multiple_of(4096)
}

/// The blocks an object's file says it holds, with their lengths.
fn recorded_blocks(path: &Path) -> Vec<(u64, u64)> {
    let Some(object) = CachedObject::open(path, None) else {
        return Vec::new();
    };
    let version = ObjectVersion {
        etag: String::new(),
        size: object.size,
        mtime_ns: 0,
    };
    let mut record = vec![0; (object.size.div_ceil(BLOCK) * ENTRY) as usize];
    if object.file.read_exact_at(&mut record, RECORD_HEADER).is_err() {
        return Vec::new();
    }
    record
        .chunks_exact(ENTRY as usize)
        .enumerate()
        .filter(|(_, entry)| entry.iter().any(|&b| b != 0))
        .map(|(block, _)| (block as u64, block_len(&version, block as u64)))
        .collect()
}

fn entry_offset(block: u64) -> u64 {
    RECORD_HEADER + block * ENTRY
}

/// A block's check value: XXH3, fast enough to check every block read
/// back (the cache guards against cut writes, not against an attacker who
/// can write to it).
fn hash_of(bytes: &[u8]) -> [u8; ENTRY as usize] {
    xxhash_rust::xxh3::xxh3_128(bytes).to_le_bytes()
}

/// Bytes in block `block` of a version: `BLOCK`, less for the last.
pub(crate) fn block_len(version: &ObjectVersion, block: u64) -> u64 {
    version.size.saturating_sub(block * BLOCK).min(BLOCK)
}

/// A file name for a version of an object that no other object or version
/// shares.
fn object_name(url: &ObjectUrl, version: &ObjectVersion) -> String {
    let mut hasher = blake3::Hasher::new();
    for part in [url.bucket.as_bytes(), url.key.as_bytes(), version.etag.as_bytes()] {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.update(&version.size.to_le_bytes());
    hex::encode(&hasher.finalize().as_bytes()[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

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
        assert_eq!(cache.get(&url, &v1, 1).as_deref(), Some(&vec![7; 10][..]));
        assert!(cache.get(&url, &v1, 0).is_none());
        assert!(cache.get(&url, &version("\"2\"", BLOCK + 10), 1).is_none());
        assert!(cache.get(&url, &version("\"1\"", BLOCK + 11), 1).is_none());
        // A block of the wrong length is never kept.
        cache.put(&url, &v1, 0, &[1; 10]);
        assert!(cache.get(&url, &v1, 0).is_none());
    }

    #[test]
    fn a_block_whose_bytes_do_not_match_its_record_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let url = ObjectUrl::parse("s3://music/a.flac").unwrap();
        let v = version("\"1\"", 2 * BLOCK);
        let cache = BlockCache::open(dir.path(), 1 << 30).unwrap();
        cache.put(&url, &v, 0, &[1; BLOCK as usize]);
        cache.put(&url, &v, 1, &[2; BLOCK as usize]);
        // A write a crash cut short: the bytes of block 1 half written.
        let file = cache.path_of(&object_name(&url, &v));
        File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .write_all_at(&[9; 100], data_offset(v.size) + BLOCK + 5)
            .unwrap();
        let reopened = BlockCache::open(dir.path(), 1 << 30).unwrap();
        assert_eq!(
            reopened.get(&url, &v, 0).as_deref(),
            Some(&vec![1; BLOCK as usize][..])
        );
        assert!(reopened.get(&url, &v, 1).is_none());
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
            // The evicted block's space went back to the file system.
            let file = cache.path_of(&object_name(&url, &v));
            assert!(fs::metadata(file).unwrap().blocks() * 512 <= 3 * BLOCK + data_offset(v.size));
        }
        let reopened = BlockCache::open(dir.path(), 3 * BLOCK).unwrap();
        assert!(reopened.get(&url, &v, 3).is_some());
        assert!(reopened.get(&url, &v, 2).is_some());
    }

    #[test]
    fn an_object_whose_last_block_goes_leaves_no_files() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlockCache::open(dir.path(), BLOCK).unwrap();
        let a = ObjectUrl::parse("s3://music/a.flac").unwrap();
        let b = ObjectUrl::parse("s3://music/b.flac").unwrap();
        let v = version("\"1\"", BLOCK);
        cache.put(&a, &v, 0, &[1; BLOCK as usize]);
        cache.put(&b, &v, 0, &[2; BLOCK as usize]);
        assert!(!cache.path_of(&object_name(&a, &v)).exists());
        assert_eq!(
            cache.get(&b, &v, 0).as_deref(),
            Some(&vec![2; BLOCK as usize][..])
        );
    }
}
