//! Backing files registered with the kernel for FUSE passthrough: the
//! kernel then reads them itself, and the daemon sees no reads at all.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

/// `FUSE_DEV_IOC_BACKING_CLOSE`: `_IOW(229, 2, u32)`.
const BACKING_CLOSE: libc::c_ulong = 0x4004_e502;

/// A backing file the kernel knows by id; unregistered when dropped.
#[derive(Debug)]
pub(crate) struct Backing {
    id: u32,
    dev: Arc<OwnedFd>,
}

impl Backing {
    /// Registers `file` on the connection of `dev` (needs CAP_SYS_ADMIN).
    pub(crate) fn register(dev: &Arc<OwnedFd>, file: &File) -> io::Result<Backing> {
        let id = fuser::BackingId::create_raw(dev.as_fd(), file)?;
        Ok(Backing { id, dev: dev.clone() })
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        // SAFETY: the ioctl reads one u32 from a live local; a connection
        // already gone answers with an error, which changes nothing here.
        unsafe {
            libc::ioctl(self.dev.as_raw_fd(), BACKING_CLOSE, &self.id as *const u32);
        }
    }
}
