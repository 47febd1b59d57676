//! How each open inode is served to the kernel: through its page cache
//! (never holding pages of two versions of a file), with direct I/O, or by
//! kernel passthrough to the backing file.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

use fuser::FopenFlags;

use crate::backing::Backing;

/// Open handles per inode, and the version each closed inode's page cache
/// may hold.
#[derive(Default)]
pub(crate) struct OpenInodes {
    inodes: Mutex<Inodes>,
}

#[derive(Default)]
struct Inodes {
    /// Inodes with handles open.
    open: HashMap<u64, InodeState>,
    /// Closed inodes: the version whose pages the kernel's cache may hold
    /// (16 bytes each, where an open inode's state takes 80: a media
    /// server opens every file of the library once).
    closed: HashMap<u64, i64>,
}

#[derive(Default)]
struct InodeState {
    /// Handles served by the daemon, per content version.
    open: HashMap<i64, usize>,
    /// The version whose pages the kernel's cache may hold.
    cached: Option<i64>,
    /// Handles the kernel reads from the backing file itself. The kernel
    /// wants one backing file per inode while any of them is open, and no
    /// handle served through the page cache beside them.
    passthrough: Option<(Arc<Backing>, usize)>,
}

impl InodeState {
    fn is_unused(&self) -> bool {
        self.open.is_empty() && self.passthrough.is_none()
    }
}

/// Closed inodes remembered; then the memory starts over, and the next
/// open of each drops whatever pages the kernel kept (a re-read, never a
/// stale page).
const CLOSED_KEPT: usize = 1 << 18;

impl OpenInodes {
    fn with<T>(&self, ino: u64, f: impl FnOnce(&mut InodeState) -> T) -> T {
        let mut inodes = self.inodes.lock();
        let Inodes { open, closed } = &mut *inodes;
        let state = open.entry(ino).or_insert_with(|| InodeState {
            cached: closed.remove(&ino),
            ..InodeState::default()
        });
        let out = f(state);
        if state.is_unused() {
            if let Some(version) = state.cached {
                if closed.len() >= CLOSED_KEPT {
                    closed.clear();
                }
                closed.insert(ino, version);
            }
            open.remove(&ino);
        }
        out
    }

    /// Flags for a handle served by the daemon. A handle opened while
    /// handles of another version (or passthrough handles) are open
    /// bypasses the cache (direct I/O); otherwise the cache is kept only
    /// when it holds this very version.
    pub(crate) fn opened(&self, ino: u64, version: i64) -> FopenFlags {
        self.with(ino, |state| {
            let others_open = state.open.iter().any(|(&v, &n)| v != version && n > 0);
            *state.open.entry(version).or_default() += 1;
            if others_open || state.passthrough.is_some() {
                return FopenFlags::FOPEN_DIRECT_IO;
            }
            let keep = state.cached == Some(version);
            state.cached = Some(version);
            if keep {
                FopenFlags::FOPEN_KEEP_CACHE
            } else {
                FopenFlags::empty()
            }
        })
    }

    pub(crate) fn released(&self, ino: u64, version: i64) {
        self.with(ino, |state| {
            if let Some(n) = state.open.get_mut(&version) {
                *n = n.saturating_sub(1);
            }
            state.open.retain(|_, n| *n > 0);
        })
    }

    /// The backing id for a passthrough handle of `ino`: the one already
    /// registered for the inode, or a new one from `register`. None when
    /// handles served through the page cache are open (the kernel would
    /// refuse the mix); the caller then serves this handle itself.
    pub(crate) fn open_passthrough(
        &self,
        ino: u64,
        register: impl FnOnce() -> std::io::Result<Backing>,
    ) -> std::io::Result<Option<Arc<Backing>>> {
        self.with(ino, |state| {
            if !state.open.is_empty() {
                return Ok(None);
            }
            let id = match &mut state.passthrough {
                Some((id, count)) => {
                    *count += 1;
                    id.clone()
                }
                None => {
                    let id = Arc::new(register()?);
                    state.passthrough = Some((id.clone(), 1));
                    id
                }
            };
            Ok(Some(id))
        })
    }

    /// A passthrough handle closed; the last one unregisters the backing
    /// file from the kernel.
    pub(crate) fn released_passthrough(&self, ino: u64) {
        self.with(ino, |state| {
            if let Some((_, count)) = &mut state.passthrough {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    state.passthrough = None;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_cache_never_mixes_versions() {
        let c = OpenInodes::default();
        // First open: the cache may hold anything, so it is dropped.
        assert_eq!(c.opened(5, 1), FopenFlags::empty());
        // Same version again: keep it.
        assert_eq!(c.opened(5, 1), FopenFlags::FOPEN_KEEP_CACHE);
        // A new version while version 1 is still open: bypass the cache.
        assert_eq!(c.opened(5, 2), FopenFlags::FOPEN_DIRECT_IO);
        c.released(5, 1);
        c.released(5, 1);
        // Version 1 closed; the cache may still hold its pages: drop them.
        assert_eq!(c.opened(5, 2), FopenFlags::empty());
        assert_eq!(c.opened(5, 2), FopenFlags::FOPEN_KEEP_CACHE);
    }

    #[test]
    fn closed_inodes_keep_only_their_cached_version() {
        let c = OpenInodes::default();
        c.opened(7, 1);
        c.released(7, 1);
        let inodes = c.inodes.lock();
        assert!(inodes.open.is_empty());
        assert_eq!(inodes.closed[&7], 1);
        drop(inodes);
        assert_eq!(c.opened(7, 1), FopenFlags::FOPEN_KEEP_CACHE);
    }

    #[test]
    fn closed_inodes_remembered_are_bounded_and_forgotten_ones_drop_their_pages() {
        let c = OpenInodes::default();
        for ino in 0..=CLOSED_KEPT as u64 {
            c.opened(ino, 1);
            c.released(ino, 1);
        }
        assert_eq!(c.inodes.lock().closed.len(), 1, "started over");
        assert_eq!(c.opened(0, 1), FopenFlags::empty());
        assert_eq!(c.opened(CLOSED_KEPT as u64, 1), FopenFlags::FOPEN_KEEP_CACHE);
    }

    #[test]
    fn passthrough_is_refused_beside_cached_handles() {
        let c = OpenInodes::default();
        c.opened(9, 1);
        let got = c
            .open_passthrough(9, || panic!("no backing id may be registered"))
            .unwrap();
        assert!(got.is_none());
    }
}
