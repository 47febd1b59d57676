//! `retagfs-faultfs`: a test tool, not part of retagfs. It mounts a
//! directory read-only through FUSE and, as told by a control file, makes it
//! behave like failing or slow storage, so that tests and benchmarks can put
//! a retagfs library on it:
//!
//! * `mode=ok` — a plain read-only view;
//! * `mode=eio` — every read fails with EIO (a failing disk);
//! * `mode=short` — every read returns half of what was asked (a short read);
//! * `mode=gone` — every name is ENOENT and every read EIO (an unplugged
//!   disk, a stale network mount);
//! * `delay_ms=N` — each read waits N ms first (network storage);
//! * `meta_delay_ms=N` — each lookup, getattr, listing and open waits N ms
//!   first (a network file system's round trip for metadata).
//!
//! The control file is read again whenever it changes; a missing file means
//! `mode=ok delay_ms=0 meta_delay_ms=0`. Every read reaches this process (direct I/O, no
//! cache timeouts), so a change applies to the next request.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, Request,
};

#[derive(Parser)]
#[command(about = "A read-only FUSE view of SOURCE that injects faults and latency (a test tool)")]
struct Args {
    /// The directory to serve.
    source: PathBuf,
    /// An empty directory to mount on.
    mountpoint: PathBuf,
    /// File holding e.g. `mode=eio delay_ms=3`, read again when it changes.
    #[arg(long)]
    control: PathBuf,
}

#[derive(Clone, Copy, PartialEq, Eq, Default)]
enum Mode {
    #[default]
    Ok,
    Eio,
    Short,
    Gone,
}

#[derive(Clone, Copy, Default)]
struct Faults {
    mode: Mode,
    delay: Duration,
    meta_delay: Duration,
}

impl Faults {
    fn parse(text: &str) -> Faults {
        let mut f = Faults::default();
        for (key, value) in text.split_whitespace().filter_map(|w| w.split_once('=')) {
            match (key, value) {
                ("mode", "eio") => f.mode = Mode::Eio,
                ("mode", "short") => f.mode = Mode::Short,
                ("mode", "gone") => f.mode = Mode::Gone,
                ("mode", _) => f.mode = Mode::Ok,
                ("delay_ms", ms) => f.delay = Duration::from_millis(ms.parse().unwrap_or(0)),
                ("meta_delay_ms", ms) => f.meta_delay = Duration::from_millis(ms.parse().unwrap_or(0)),
                _ => {}
            }
        }
        f
    }
}

struct FaultFs {
    control: PathBuf,
    /// The control file's mtime when last read, and what it said.
    faults: Mutex<(Option<SystemTime>, Faults)>,
    /// Inode numbers handed out, both ways; 1 is the source directory.
    inodes: Mutex<(HashMap<u64, PathBuf>, HashMap<PathBuf, u64>)>,
    handles: Mutex<HashMap<u64, File>>,
    next_handle: Mutex<u64>,
}

const NO_CACHE: Duration = Duration::ZERO;

impl FaultFs {
    fn faults(&self) -> Faults {
        let mtime = std::fs::metadata(&self.control).and_then(|m| m.modified()).ok();
        let mut cached = self.faults.lock();
        if cached.0 != mtime {
            let text = std::fs::read_to_string(&self.control).unwrap_or_default();
            *cached = (mtime, Faults::parse(&text));
        }
        cached.1
    }

    /// Waits as a metadata request over the network would; false when the
    /// storage is gone.
    fn reachable(&self) -> bool {
        let faults = self.faults();
        std::thread::sleep(faults.meta_delay);
        faults.mode != Mode::Gone
    }

    fn path(&self, ino: u64) -> Option<PathBuf> {
        self.inodes.lock().0.get(&ino).cloned()
    }

    fn ino(&self, path: &Path) -> u64 {
        let mut maps = self.inodes.lock();
        if let Some(&ino) = maps.1.get(path) {
            return ino;
        }
        let ino = maps.0.len() as u64 + 1;
        maps.0.insert(ino, path.to_path_buf());
        maps.1.insert(path.to_path_buf(), ino);
        ino
    }

    fn attr(&self, path: &Path) -> Result<FileAttr, Errno> {
        let m =
            std::fs::metadata(path).map_err(|e| Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let time = |s: i64, ns: i64| UNIX_EPOCH + Duration::new(s.max(0) as u64, ns as u32);
        let mtime = time(m.mtime(), m.mtime_nsec());
        Ok(FileAttr {
            ino: INodeNo(self.ino(path)),
            size: m.len(),
            blocks: m.blocks(),
            atime: time(m.atime(), m.atime_nsec()),
            mtime,
            ctime: time(m.ctime(), m.ctime_nsec()),
            crtime: mtime,
            kind: if m.is_dir() {
                FileType::Directory
            } else {
                FileType::RegularFile
            },
            perm: (m.mode() & 0o555) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: 0,
            flags: 0,
            blksize: 4096,
        })
    }
}

impl Filesystem for FaultFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = match self.path(parent.0) {
            Some(dir) if self.reachable() => self.attr(&dir.join(name)),
            _ => Err(Errno::ENOENT),
        };
        match found {
            Ok(attr) => reply.entry(&NO_CACHE, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.path(ino.0) {
            Some(_) if !self.reachable() => reply.error(Errno::ENOENT),
            Some(path) => match self.attr(&path) {
                Ok(attr) => reply.attr(&NO_CACHE, &attr),
                Err(e) => reply.error(e),
            },
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let Some(dir) = self.path(ino.0).filter(|_| self.reachable()) else {
            reply.error(Errno::ENOENT);
            return;
        };
        let mut names: Vec<_> = match std::fs::read_dir(&dir) {
            Ok(entries) => entries.filter_map(|e| e.ok()).map(|e| e.file_name()).collect(),
            Err(_) => {
                reply.error(Errno::EIO);
                return;
            }
        };
        names.sort();
        for (i, name) in names.iter().enumerate().skip(offset as usize) {
            let path = dir.join(name);
            let kind = if path.is_dir() {
                FileType::Directory
            } else {
                FileType::RegularFile
            };
            if reply.add(INodeNo(self.ino(&path)), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let file = match self.path(ino.0) {
            Some(path) if self.reachable() => File::open(path),
            _ => {
                reply.error(Errno::ENOENT);
                return;
            }
        };
        match file {
            Ok(file) => {
                let mut next = self.next_handle.lock();
                *next += 1;
                self.handles.lock().insert(*next, file);
                reply.opened(FileHandle(*next), FopenFlags::FOPEN_DIRECT_IO);
            }
            Err(e) => reply.error(Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))),
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
        let faults = self.faults();
        std::thread::sleep(faults.delay);
        let size = match faults.mode {
            Mode::Eio | Mode::Gone => {
                reply.error(Errno::EIO);
                return;
            }
            Mode::Short => (size / 2).max(1),
            Mode::Ok => size,
        };
        let handles = self.handles.lock();
        let Some(file) = handles.get(&fh.0) else {
            reply.error(Errno::EBADF);
            return;
        };
        let mut buf = vec![0u8; size as usize];
        match file.read_at(&mut buf, offset) {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.handles.lock().remove(&fh.0);
        reply.ok();
    }
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let source = args.source.canonicalize()?;
    let fs = FaultFs {
        control: args.control,
        faults: Mutex::default(),
        inodes: Mutex::new((HashMap::from([(1, source.clone())]), HashMap::from([(source, 1)]))),
        handles: Mutex::default(),
        next_handle: Mutex::new(0),
    };
    let mut config = Config::default();
    config.mount_options = vec![MountOption::RO, MountOption::FSName("faultfs".into())];
    // Network storage answers many requests at once.
    config.n_threads = Some(16);
    fuser::mount(fs, &args.mountpoint, &config)
}
