//! The kernel's init, answered through fuser while it mounts: what the
//! mount asks the kernel for. Every request after it is read by our own
//! threads ([`crate::dev_fuse`], [`crate::uring`]), never by fuser's.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{Filesystem, Request};

use crate::server::Server;
use crate::uring;

/// fuser's view of the [`Server`]: only the init.
pub(crate) struct Handshake(pub(crate) Arc<Server>);

impl Filesystem for Handshake {
    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> io::Result<()> {
        let server = &self.0;
        // Listings carry attributes; a kernel without it falls back to READDIR.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DO_READDIRPLUS);
        // Attributes fetched again are compared with the cached ones, so a
        // directory whose mtime moved (its listing changed) is listed anew.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_AUTO_INVAL_DATA);
        // File handles outlive the kernel's inode cache (an NFS export of the
        // mount): inode numbers are stable, and lookups of "." and ".."
        // find any inode again.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_EXPORT_SUPPORT);
        // Directories need no open: one round trip less per directory walked.
        let no_opendir = config
            .add_capabilities(fuser::InitFlags::FUSE_NO_OPENDIR_SUPPORT)
            .is_ok();
        server.no_opendir.store(no_opendir, Ordering::Relaxed);
        if server.passthrough.load(Ordering::Relaxed) {
            // Depth 2: backing files may sit on a stacked file system
            // (overlayfs) themselves.
            let on = config
                .add_capabilities(fuser::InitFlags::FUSE_PASSTHROUGH)
                .is_ok()
                && config.set_max_stack_depth(2).is_ok();
            server.passthrough.store(on, Ordering::Relaxed);
        }
        // Nothing is written: writes need no 16 MiB buffers, and each
        // io_uring entry's buffer is as large as the largest request.
        let _ = config.set_max_write(uring::PAYLOAD as u32);
        if server.uring.load(Ordering::Relaxed) {
            let on = uring::usable()
                && config
                    .add_capabilities(fuser::InitFlags::FUSE_OVER_IO_URING)
                    .is_ok();
            server.uring.store(on, Ordering::Relaxed);
        }
        tracing::info!(
            "kernel passthrough for byte-identical files: {}; requests through io_uring: {}",
            on_off(server.passthrough.load(Ordering::Relaxed)),
            on_off(server.uring.load(Ordering::Relaxed)),
        );
        Ok(())
    }
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}
