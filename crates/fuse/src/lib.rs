//! The FUSE side of retagfs: requests from the kernel answered from
//! `retagfs-core`. It holds no business logic: names, attributes and bytes
//! all come from [`View`]. fuser mounts and answers the kernel's init
//! ([`handshake`]); requests then arrive through `/dev/fuse` ([`dev_fuse`])
//! or, where the kernel offers it, through io_uring ([`uring`]), and both
//! answer them the same way ([`protocol`], [`server`]).

use std::ffi::OsStr;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{Config, INodeNo, MountOption, Session, SessionACL};
use retagfs_core::view::tree::Invalidations;
use retagfs_core::view::watch::Watcher;
use retagfs_core::View;

use handshake::Handshake;
use server::Server;

mod backing;
mod dev_fuse;
mod handshake;
mod kernel_abi;
pub mod mounted;
mod open_inodes;
mod protocol;
mod read_ahead;
mod server;
mod uring;

/// Owner, group and permission bits of every served file and directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ownership {
    pub uid: u32,
    pub gid: u32,
    pub file_mode: u16,
    pub dir_mode: u16,
}

impl Ownership {
    /// The mounting user's, read-only for everyone.
    pub fn of_current_user() -> Ownership {
        // SAFETY: getuid/getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Ownership {
            uid,
            gid,
            file_mode: 0o444,
            dir_mode: 0o555,
        }
    }
}

/// Mount settings beyond the library itself.
pub struct MountConfig {
    /// Threads answering requests (opens and reads block on the backing
    /// files, so a slow disk wants more of them).
    pub threads: usize,
    /// Let other users see the mount (needs `user_allow_other` for non-root).
    pub allow_other: bool,
    /// Let the kernel read byte-identical files straight from the backing
    /// file (FUSE passthrough; needs CAP_SYS_ADMIN and Linux 6.9+).
    pub kernel_passthrough: bool,
    /// Take requests through io_uring when the kernel offers it (Linux
    /// 6.14+ with the fuse module parameter `enable_uring`).
    pub io_uring: bool,
    pub ownership: Ownership,
}

/// Mounts the library and serves it until the file system is unmounted
/// (by `unmount` from another thread, or `fusermount3 -u` / `umount`).
pub struct Mount {
    session: Session<Handshake>,
    readers: dev_fuse::Readers,
    mountpoint: PathBuf,
    rings: Option<uring::Rings>,
    watcher: Watcher,
}

/// Unmounts a running [`Mount`] from another thread (signal handler).
pub struct Unmounter {
    session: fuser::SessionUnmounter,
    mountpoint: PathBuf,
}

/// How [`Unmounter::unmount`] left the mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmounted {
    /// Gone: [`Mount::run`] returns.
    Done,
    /// Files were open: the mount left the file system tree, and the
    /// daemon serves the open files until the last is closed, when
    /// [`Mount::run`] returns.
    Detached,
}

impl Unmounter {
    /// Unmounts; when files are still open (the kernel says EBUSY),
    /// detaches the mount instead, as `umount -l` does. Without that, a
    /// service manager's stop would leave the daemon serving forever.
    pub fn unmount(&mut self) -> io::Result<Unmounted> {
        match self.session.unmount() {
            Ok(()) => Ok(Unmounted::Done),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                self.detach()?;
                Ok(Unmounted::Detached)
            }
            Err(e) => Err(e),
        }
    }

    /// Detaches the mount (`MNT_DETACH`) whether or not files are open.
    /// Only root gets here with EBUSY: for other users fuser unmounts
    /// through `fusermount3 -u -z`, which detaches already.
    pub fn detach(&self) -> io::Result<()> {
        let path = std::ffi::CString::new(self.mountpoint.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `path` is a valid NUL-terminated string for the call.
        if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl Mount {
    pub fn new(lib: Arc<View>, mountpoint: &Path, config: &MountConfig) -> io::Result<Mount> {
        let mut options = Config::default();
        options.mount_options = vec![
            MountOption::RO,
            MountOption::FSName(mounted::source_for(lib.db_path())),
            MountOption::Subtype("retagfs".into()),
            MountOption::DefaultPermissions,
            MountOption::NoDev,
            MountOption::NoSuid,
        ];
        if config.allow_other {
            options.acl = SessionACL::All;
        }
        let server = Arc::new(Server::new(
            lib.clone(),
            config.kernel_passthrough,
            config.io_uring,
            config.ownership,
        ));
        // Mounting includes the kernel's init: what it agreed to is known.
        let session = Session::new(Handshake(server.clone()), mountpoint, &options)?;
        read_ahead::widen(mountpoint, uring::PAYLOAD);
        let dev = Arc::new(session.as_fd().try_clone_to_owned()?);
        let _ = server.dev.set(dev.clone());
        let uring = server.uring.load(Ordering::Relaxed);
        // With io_uring, only forgets come through /dev/fuse: no polling.
        let readers = dev_fuse::Readers::start(server.clone(), &dev, config.threads.max(2), !uring)?;
        let rings = if uring {
            Some(uring::Rings::start(server, dev, config.threads)?)
        } else {
            None
        };
        let notifier = session.notifier();
        let db = lib.db_path().to_path_buf();
        let watcher = Watcher::spawn(lib, &db, move |r| forget(&notifier, &r.invalidations))
            .map_err(|e| io::Error::other(format!("watching the store: {e:#}")))?;
        Ok(Mount {
            session,
            readers,
            mountpoint: mountpoint.to_path_buf(),
            rings,
            watcher,
        })
    }

    pub fn unmounter(&mut self) -> Unmounter {
        Unmounter {
            session: self.session.unmount_callable(),
            mountpoint: self.mountpoint.clone(),
        }
    }

    /// Serves requests until unmounted.
    pub fn run(self) -> io::Result<()> {
        let result = self.readers.join();
        if let Some(rings) = self.rings {
            rings.stop();
        }
        self.watcher.stop();
        drop(self.session);
        result
    }
}

/// Tells the kernel to forget stale entries and inodes, and the cached
/// listings of the directories whose entries changed. An entry or inode the
/// kernel never looked up is not an error.
fn forget(notifier: &fuser::Notifier, inv: &Invalidations) {
    let mut dirs = std::collections::BTreeSet::new();
    for (parent, name) in &inv.entries {
        let _ = notifier.inval_entry(INodeNo(*parent), OsStr::new(name));
        dirs.insert(*parent);
    }
    for &ino in inv.inodes.iter().chain(&dirs) {
        let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retagfs_core::view::tree::ROOT_INO;

    #[test]
    fn root_inode_matches_fuse_root() {
        assert_eq!(ROOT_INO, INodeNo::ROOT.0);
    }
}
