//! The scan's directory walk: every candidate file under the roots with its
//! stamps. Several threads share one queue of directories (a re-scan is
//! mostly directory reads and stats, which the kernel answers in
//! parallel), and files are stat'ed relative to their open directory
//! rather than by full path.

use std::collections::HashSet;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use retagfs_store::Stamps;

/// What the walk found.
#[derive(Default)]
pub struct Walked {
    /// Candidate files (by name) and their stamps.
    pub files: Vec<(String, Stamps)>,
    /// Files skipped by name (not audio, macOS `._` resource forks).
    pub skipped: u64,
    /// (path, reason) of files that cannot be scanned.
    pub failures: Vec<(String, String)>,
}

/// A directory to read, with the (device, inode) of it and its ancestors
/// when symlinks are followed (to detect loops).
struct Dir {
    path: PathBuf,
    ancestors: Vec<(u64, u64)>,
}

/// Directories waiting to be read, and how many workers are reading one.
struct Queue {
    dirs: Vec<Dir>,
    busy: usize,
}

struct Shared<'a> {
    queue: Mutex<Queue>,
    wake: Condvar,
    found: AtomicU64,
    follow: bool,
    wanted: &'a (dyn Fn(&str) -> bool + Sync),
}

/// Walks `roots` on `threads` threads; `wanted(file name)` says whether a
/// file is a candidate; `progress(files found)` is called on the calling
/// thread now and then.
pub fn walk(
    roots: &[PathBuf],
    follow: bool,
    threads: usize,
    wanted: &(dyn Fn(&str) -> bool + Sync),
    progress: &dyn Fn(u64),
) -> Walked {
    let dirs = roots
        .iter()
        .rev()
        .map(|r| Dir {
            path: r.clone(),
            ancestors: if follow {
                identity(r).into_iter().collect()
            } else {
                Vec::new()
            },
        })
        .collect();
    let shared = Shared {
        queue: Mutex::new(Queue { dirs, busy: 0 }),
        wake: Condvar::new(),
        found: AtomicU64::new(0),
        follow,
        wanted,
    };
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
    let parts: Vec<Walked> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                let done = done_tx.clone();
                let shared = &shared;
                s.spawn(move || {
                    let out = worker(shared);
                    drop(done);
                    out
                })
            })
            .collect();
        drop(done_tx);
        // Nothing is ever sent: the channel disconnects once every worker
        // is done.
        while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
            done_rx.recv_timeout(Duration::from_millis(100))
        {
            progress(shared.found.load(Ordering::Relaxed));
        }
        workers
            .into_iter()
            .map(|w| w.join().expect("walk worker panicked"))
            .collect()
    });
    let mut out = Walked::default();
    let mut seen = HashSet::new();
    for part in parts {
        out.skipped += part.skipped;
        out.failures.extend(part.failures);
        // Overlapping roots, or a symlink to a file also in the library.
        out.files
            .extend(part.files.into_iter().filter(|(p, _)| seen.insert(p.clone())));
    }
    progress(out.files.len() as u64);
    out
}

fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn worker(shared: &Shared<'_>) -> Walked {
    let mut out = Walked::default();
    while let Some(dir) = next_dir(shared) {
        let subdirs = read_dir(shared, &dir, &mut out);
        let mut queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.dirs.extend(subdirs);
        queue.busy -= 1;
        shared.wake.notify_all();
    }
    out
}

/// The next directory to read; None when the queue is empty and nobody
/// is reading a directory that could add more.
fn next_dir(shared: &Shared<'_>) -> Option<Dir> {
    let mut queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(dir) = queue.dirs.pop() {
            queue.busy += 1;
            return Some(dir);
        }
        if queue.busy == 0 {
            return None;
        }
        queue = shared.wake.wait(queue).unwrap_or_else(|e| e.into_inner());
    }
}

/// Reads one directory: candidate files go to `out`, subdirectories are
/// returned.
fn read_dir(shared: &Shared<'_>, dir: &Dir, out: &mut Walked) -> Vec<Dir> {
    let mut subdirs = Vec::new();
    let entries = match std::fs::read_dir(&dir.path) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!("skipping {}: {e}", dir.path.display());
            return subdirs;
        }
    };
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("skipping an entry of {}: {e}", dir.path.display());
                continue;
            }
        };
        let Ok(mut kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        // Relative to the open directory; a followed symlink needs the path.
        let mut meta: Option<std::io::Result<Metadata>> = None;
        if kind.is_symlink() {
            if !shared.follow {
                continue;
            }
            let m = std::fs::metadata(&path);
            match &m {
                Ok(m) => kind = m.file_type(),
                Err(e) => {
                    tracing::warn!("skipping {}: broken symlink: {e}", path.display());
                    continue;
                }
            }
            meta = Some(m);
        }
        if kind.is_dir() {
            if let Some(sub) = subdir(shared, dir, path, meta) {
                subdirs.push(sub);
            }
        } else if kind.is_file() {
            file(shared, path, meta.unwrap_or_else(|| entry.metadata()), out);
        }
    }
    subdirs
}

fn subdir(
    shared: &Shared<'_>,
    parent: &Dir,
    path: PathBuf,
    meta: Option<std::io::Result<Metadata>>,
) -> Option<Dir> {
    if !shared.follow {
        return Some(Dir {
            path,
            ancestors: Vec::new(),
        });
    }
    let id = match meta.unwrap_or_else(|| std::fs::symlink_metadata(&path)) {
        Ok(m) => (m.dev(), m.ino()),
        Err(e) => {
            tracing::warn!("skipping {}: {e}", path.display());
            return None;
        }
    };
    if parent.ancestors.contains(&id) {
        tracing::warn!("skipping {}: symlink loop", path.display());
        return None;
    }
    let mut ancestors = parent.ancestors.clone();
    ancestors.push(id);
    Some(Dir { path, ancestors })
}

fn file(shared: &Shared<'_>, path: PathBuf, meta: std::io::Result<Metadata>, out: &mut Walked) {
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    if !(shared.wanted)(&name) {
        out.skipped += 1;
        return;
    }
    let path = match path.into_os_string().into_string() {
        Ok(p) => p,
        Err(raw) => {
            let shown = Path::new(&raw).display().to_string();
            out.failures
                .push((shown, "file name is not valid UTF-8; rename it to scan it".into()));
            return;
        }
    };
    match meta {
        Ok(meta) => {
            out.files.push((path, crate::stamps(&meta)));
            shared.found.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => out.failures.push((path, format!("cannot stat: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    fn names(w: &Walked, root: &Path) -> Vec<String> {
        let mut v: Vec<String> = w
            .files
            .iter()
            .map(|(p, _)| p.strip_prefix(&*root.to_string_lossy()).unwrap().to_string())
            .collect();
        v.sort();
        v
    }

    fn run(roots: &[PathBuf], follow: bool) -> Walked {
        let wanted = |name: &str| !name.ends_with(".txt");
        walk(roots, follow, 3, &wanted, &|_| {})
    }

    #[test]
    fn finds_nested_files_with_stamps_and_skips_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["a/b/c", "a/d", "e"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in ["a/b/c/1.flac", "a/d/2.mp3", "e/3.ogg", "top.wav", "e/notes.txt"] {
            std::fs::write(root.join(f), f.as_bytes()).unwrap();
        }
        let w = run(std::slice::from_ref(&root), false);
        assert_eq!(
            names(&w, &root),
            ["/a/b/c/1.flac", "/a/d/2.mp3", "/e/3.ogg", "/top.wav"]
        );
        assert_eq!(w.skipped, 1);
        let (_, stamps) = w.files.iter().find(|(p, _)| p.ends_with("2.mp3")).unwrap();
        assert_eq!(stamps.size, "a/d/2.mp3".len() as u64);
        // Overlapping roots list each file once.
        let w = run(&[root.clone(), root.join("a")], false);
        assert_eq!(w.files.len(), 4);
    }

    #[test]
    fn symlinks_are_followed_only_when_asked_and_loops_end() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("x.flac"), b"x").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/y.flac"), b"y").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("linked")).unwrap();
        std::os::unix::fs::symlink(&root, root.join("sub/loop")).unwrap();
        std::os::unix::fs::symlink(root.join("gone"), root.join("broken.flac")).unwrap();
        assert_eq!(
            names(&run(std::slice::from_ref(&root), false), &root),
            ["/sub/y.flac"]
        );
        let followed = run(std::slice::from_ref(&root), true);
        assert_eq!(names(&followed, &root), ["/linked/x.flac", "/sub/y.flac"]);
    }

    #[test]
    fn a_name_that_is_not_utf8_is_a_failure_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let name = std::ffi::OsStr::from_bytes(b"bad\xff.flac");
        std::fs::write(root.join(name), b"x").unwrap();
        let w = run(std::slice::from_ref(&root), false);
        assert!(w.files.is_empty());
        assert_eq!(w.failures.len(), 1);
        assert!(w.failures[0].0.contains("bad") && w.failures[0].1.contains("UTF-8"));
    }
}
