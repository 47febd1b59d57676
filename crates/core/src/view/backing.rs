//! The backing files: opened for a track, checked against what the scan
//! saw, and read with the store's pictures as a synthesized file's sources.

use super::*;
use retagfs_remote::{is_remote_path, ObjectUrl, ObjectVersion, RemoteFile};

/// A track's backing file: a local file, or the version of an object the
/// scan read (every read of it asks for that version).
pub(crate) enum BackingFile {
    Local(Arc<File>),
    Remote(RemoteFile),
    /// None: every byte of the served file comes from the store (a
    /// folder's cover).
    Store,
}

impl BackingFile {
    /// The local file, for what only a local file has (the page cache,
    /// FUSE passthrough).
    pub(super) fn local(&self) -> Option<&Arc<File>> {
        match self {
            BackingFile::Local(file) => Some(file),
            BackingFile::Remote(_) | BackingFile::Store => None,
        }
    }

    pub(super) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match self {
            BackingFile::Local(file) => file.read_exact_at(buf, offset),
            BackingFile::Remote(object) => object.read_exact_at(buf, offset),
            BackingFile::Store => Err(no_backing_file()),
        }
    }

    /// EIO (and a log line) when a local file's size or mtime no longer
    /// match the scan. An object's version is checked by every read.
    pub(super) fn check_stamps(&self, track: &TrackRow, log: Log) -> io::Result<()> {
        match self {
            BackingFile::Local(file) => check_stamps(track, file, log),
            BackingFile::Remote(_) | BackingFile::Store => Ok(()),
        }
    }
}

impl ReadAt for BackingFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        match self {
            BackingFile::Local(file) => FileExt::read_at(file.as_ref(), buf, offset),
            BackingFile::Remote(object) => {
                let n = buf
                    .len()
                    .min(object.version().size.saturating_sub(offset) as usize);
                object.read_exact_at(&mut buf[..n], offset)?;
                Ok(n)
            }
            BackingFile::Store => Err(no_backing_file()),
        }
    }
}

fn no_backing_file() -> io::Error {
    io::Error::other("a file served from the store alone has no backing file")
}

/// Opens a track's backing file; a file that changed since the scan is
/// EIO (its offsets are stale), a vanished one ENOENT. An object is not
/// looked at until it is read.
pub(super) fn open_backing(track: &TrackRow, log: Log) -> io::Result<BackingFile> {
    if is_remote_path(&track.backing_path) {
        return open_object(track, log);
    }
    open_local(track, log).map(|file| BackingFile::Local(Arc::new(file)))
}

fn open_object(track: &TrackRow, log: Log) -> io::Result<BackingFile> {
    let url =
        ObjectUrl::parse(&track.backing_path).map_err(|why| failed(track.id, log, "backing path", &why))?;
    let Some(etag) = track.remote_etag.clone() else {
        return Err(failed(
            track.id,
            log,
            &track.backing_path,
            &"the store records no version of this object; run `retagfs scan` again",
        ));
    };
    let version = ObjectVersion {
        etag,
        size: track.stamps.size,
        mtime_ns: track.stamps.mtime_ns,
    };
    Ok(BackingFile::Remote(RemoteFile::new(
        crate::shared_remote()?,
        url,
        version,
    )))
}

fn open_local(track: &TrackRow, log: Log) -> io::Result<File> {
    let backing = File::open(text_to_path(&track.backing_path)).map_err(|e| match e.raw_os_error() {
        // Out of descriptors: the client sees why (it holds too many files
        // open), not an I/O error, and the log gets one line, not one per
        // refused open.
        Some(code @ (libc::EMFILE | libc::ENFILE)) => {
            static LOGGED: std::sync::Once = std::sync::Once::new();
            LOGGED.call_once(|| {
                tracing::warn!(
                    "out of file descriptors ({e}): clients hold too many files open; \
                     refusing further opens until they close some (logged once)"
                )
            });
            io::Error::from_raw_os_error(code)
        }
        code => {
            if let Some(more) = logged(track.id, "open", log) {
                tracing::warn!("{}: cannot open backing file: {e}{more}", track.backing_path);
            }
            io::Error::from_raw_os_error(if code == Some(libc::ENOENT) {
                libc::ENOENT
            } else {
                libc::EIO
            })
        }
    })?;
    check_stamps(track, &backing, log)?;
    Ok(backing)
}

/// EIO (and a log line) when the open backing file's size or mtime no
/// longer match the scan: its offsets are stale.
/// Whether a backing file's stamps are still those the scan saw.
pub(super) fn same_file_as_scanned(track: &TrackRow, now: &retagfs_store::Stamps) -> bool {
    now.size == track.stamps.size && now.mtime_ns == track.stamps.mtime_ns
}

pub(super) fn check_stamps(track: &TrackRow, backing: &File, log: Log) -> io::Result<()> {
    let meta = backing.metadata().map_err(|_| eio())?;
    let now = crate::stamps(&meta);
    if !same_file_as_scanned(track, &now) {
        if let Some(more) = logged(track.id, "changed", log) {
            tracing::warn!(
                "{}: backing file changed since it was scanned (size {} -> {}); run `retagfs scan` again{more}",
                track.backing_path,
                track.stamps.size,
                now.size
            );
        }
        return Err(eio());
    }
    Ok(())
}

pub(super) struct Sources<'a> {
    pub(super) lib: &'a View,
    pub(super) file: &'a OpenFile,
}

impl SegmentSource for Sources<'_> {
    fn read_backing(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        match &self.file.read_ahead {
            Some(ahead) => ahead.read_exact_at(buf, offset),
            None => self.file.backing.read_exact_at(buf, offset),
        }
    }

    fn read_art(&self, rowid: i64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let n = self.lib.pool.with(|store| {
            // Checked while the connection is in use: the store cannot be
            // replaced between the check and the read. The caller logs the
            // failure, once, as a failed read.
            if self.file.store_generation != self.lib.pool.generation() {
                return Err(io::Error::other(
                    "the store was replaced while this file was open: its picture cannot be read; open it again",
                ));
            }
            store
                .read_art(rowid, offset, buf)
                .map_err(|e| io::Error::other(e.to_string()))
        })?;
        if n != buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "art row is shorter than its link says",
            ));
        }
        Ok(())
    }
}
