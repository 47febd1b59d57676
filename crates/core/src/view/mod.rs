//! The mounted view of a store: the tree rendered from it, and opening a
//! file (resolving its layout) for reads.

mod backing;
mod connection_pool;
mod cover_file;
mod found_tracks;
mod open_cache;
pub mod playlists;
pub mod read_ahead;
mod refresh;
mod render;
pub mod search;
pub mod served_file;
pub mod template;
pub mod tree;
mod view_metrics;
pub mod views;
pub mod watch;

use backing::{open_backing, BackingFile, Sources};
use connection_pool::ConnectionPool;
pub(crate) use connection_pool::{file_id, FileId};
use open_cache::OpenCache;
pub use refresh::Refresh;
pub use render::{load_tree, Mode, TrackFields, ViewConfig};
use render::{load_view, references_never_valued};

use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use retagfs_formats::{
    format_mismatch, synthesize, synthesized_len, Layout, ReadAt, SegmentSource, Source, SynthesisInput,
    SynthesisOptions,
};
use retagfs_store::{text_for_display, text_to_path, Store, SynthesisRows, TrackBundle, TrackRow};

use crate::failure_log::failure_to_log;
use crate::fs_kind::{self, FsKind};
use crate::query::{Query, QueryTrack};
use crate::view::read_ahead::{will_need, FirstRead, ReadAhead};
use crate::view::search::{SearchError, Searches};
use crate::view::template::{Fallbacks, Fields, Template, DEFAULT_TEMPLATE};
use crate::view::tree::{file_ino, FileEntry, Invalidations, NameExtension, Placement, Tree, TreeBuilder};

/// The mounted view of a store.
pub struct View {
    config: ViewConfig,
    tree: RwLock<Tree>,
    pool: ConnectionPool,
    /// Tracks whose byte-identical serving was already logged.
    passthrough_logged: Mutex<HashSet<i64>>,
    opened: OpenCache,
    /// Directories whose files were resolved ahead ([`View::warm_ahead`]).
    warmed: Mutex<HashSet<u64>>,
    /// Tracks whose start [`View::prefetch_after`] read ahead.
    prefetched: Mutex<HashSet<i64>>,
    /// The change-log position the tree reflects; held while refreshing,
    /// so refreshes run one at a time.
    seen_seq: Mutex<i64>,
    read_ahead: Mutex<ReadAheadMode>,
    /// The newer schema version last warned about ([`View::note_newer_schema`]).
    newer_schema_noted: Mutex<Option<i64>>,
    searches: Searches,
    playlists: playlists::Playlists,
}

/// An open file: the layout resolved at open time and the backing file.
pub struct OpenFile {
    pub track: TrackRow,
    pub layout: Arc<Layout>,
    /// What clients see of it, as of the version opened.
    pub served: served_file::ServedFile,
    backing: BackingFile,
    read_ahead: Option<ReadAhead>,
    first_read: Option<FirstRead>,
    /// Served bytes read through this handle so far.
    bytes_read: AtomicU64,
    /// Whether [`OpenFile::read_through`] said so already.
    read_through: AtomicBool,
    /// The store's generation when opened: pictures are read from the
    /// store, which must still be the file this one was resolved from.
    store_generation: u64,
}

/// When backing bytes are read ahead of a sequential reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadAheadMode {
    /// Chunks for backing files on network file systems and FUSE; for
    /// local ones, the kernel's own read-ahead of the backing file, and the
    /// start of a folder's next files once one is read through.
    #[default]
    Auto,
    /// Chunks for every backing file.
    Always,
    /// None of ours: each read goes to the backing file as the kernel asks.
    Never,
}

/// The row of a file that serves no track's bytes (a cover, a playlist).
fn no_track() -> TrackRow {
    TrackRow {
        id: 0,
        backing_path: String::new(),
        format: retagfs_store::Format::Flac,
        audio_offset: 0,
        audio_length: 0,
        stamps: retagfs_store::Stamps {
            size: 0,
            mtime_ns: 0,
            ctime_ns: 0,
        },
        content_version: 0,
        passthrough: None,
        changed_at: 0,
        vendor: None,
        remote_etag: None,
        added_at: 0,
        duration_ms: None,
    }
}

impl OpenFile {
    /// A file whose every byte comes from the store (a cover, a playlist),
    /// standing for `track`.
    fn from_store(
        track: TrackRow,
        layout: Arc<Layout>,
        served: served_file::ServedFile,
        store_generation: u64,
    ) -> OpenFile {
        OpenFile {
            track,
            layout,
            served,
            backing: BackingFile::Store,
            read_ahead: None,
            first_read: None,
            bytes_read: AtomicU64::new(0),
            read_through: AtomicBool::new(false),
            store_generation,
        }
    }

    /// Whether the backing file is still as the scan saw it: a file kept
    /// open serves the version it opened, but a new request for it should
    /// be refused as a new open would be.
    pub fn backing_unchanged(&self) -> bool {
        match self.backing.local() {
            Some(file) => file
                .metadata()
                .is_ok_and(|m| backing::same_file_as_scanned(&self.track, &crate::stamps(&m))),
            // Every read of an object asks for the version the scan read.
            None => true,
        }
    }

    /// The backing file, when the served file is that file byte for byte
    /// (structure-only mode, or a track served byte-identical): the kernel
    /// can then read it directly (FUSE passthrough).
    pub fn whole_backing_file(&self) -> Option<&File> {
        self.layout
            .is_whole_backing(self.track.stamps.size)
            .then_some(self.backing.local()?.as_ref())
    }

    /// Notes a read of `n` bytes at `offset` through this handle; true
    /// once, when a read reaches the end of a file this handle read mostly
    /// whole (a player or a copy going on to the next file; a tagger reads
    /// only a file's start), and read-ahead is on: then is the time for
    /// [`View::prefetch_after`].
    pub fn read_through(&self, offset: u64, n: usize) -> bool {
        let len = self.layout.len();
        let total = self.bytes_read.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        let reading_ahead = self.first_read.is_some() || self.read_ahead.is_some();
        reading_ahead
            && offset + n as u64 >= len
            && total.saturating_mul(2) >= len
            && !self.read_through.swap(true, Ordering::Relaxed)
    }
}

/// Files resolved ahead after an open in their directory.
const WARM_SIBLINGS: usize = 64;
/// Directories remembered as warmed (then the memory starts over).
const WARMED_DIRS_KEPT: usize = 4096;

/// Files whose start is read ahead when a client reads a file through.
const PREFETCH_FILES: usize = 4;
/// Served bytes of each read ahead: the start of a file, as the first
/// requests of a reader need it.
const PREFETCH_BYTES: u64 = 1 << 20;
/// Tracks remembered as read ahead (then the memory starts over).
const PREFETCHED_KEPT: usize = 4096;

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

impl View {
    /// Loads the store and renders the tree.
    pub fn load(db: &Path, config: ViewConfig) -> anyhow::Result<View> {
        let started = std::time::Instant::now();
        // Before the open: a file moved to the path after it is then seen
        // as a replacement by the watcher, not taken for the one loaded.
        let served = file_id(db);
        let store = Store::open_read_only(db)?;
        // A misspelt field silently folds the tree where it stands. (The
        // default template names fields many libraries lack in places.)
        let check_fields = config.template.source() != DEFAULT_TEMPLATE;
        let mut valued = 0;
        let loaded = store.read_snapshot(|s| {
            let noting = check_fields.then_some(&mut valued);
            Ok((load_view(s, &config, noting, true)?, s.last_change_seq()?))
        });
        let (
            render::Loaded {
                tree,
                tracks,
                playlist_tracks,
            },
            seq,
        ) = loaded.context("reading the store")?;
        tracing::info!(
            "loaded {tracks} tracks and built the tree in {:.1} ms",
            started.elapsed().as_secs_f64() * 1000.0
        );
        if store.has_remote_tracks().unwrap_or(false) {
            // Made now (no request: the remote may be down) so that the
            // first read does not wait for its threads and HTTP client.
            if let Err(why) = crate::remote() {
                tracing::warn!("objects cannot be read: {why:#}");
            }
        }
        if check_fields {
            for reference in references_never_valued(&config.template, valued) {
                tracing::warn!(
                    "no track has a value for {reference} in the template: check its spelling \
                     against a track's tags (`retagfs tag get FILE`)"
                );
            }
        }
        let playlists = playlists::Playlists::new(config.playlists.len());
        let view = View {
            config,
            tree: RwLock::new(tree),
            pool: ConnectionPool::new(db, served, store),
            passthrough_logged: Mutex::default(),
            opened: OpenCache::default(),
            warmed: Mutex::default(),
            prefetched: Mutex::default(),
            seen_seq: Mutex::new(seq),
            read_ahead: Mutex::default(),
            newer_schema_noted: Mutex::default(),
            searches: Searches::new(true),
            playlists,
        };
        view.make_playlists(playlist_tracks);
        view.note_metrics();
        Ok(view)
    }

    /// The store file served (its device and inode, taken just before it
    /// was opened).
    pub(crate) fn served_file(&self) -> Option<FileId> {
        self.pool.served()
    }

    /// The searches of `MNT/.search` ([`crate::view::search`]).
    pub fn searches(&self) -> &Searches {
        &self.searches
    }

    /// The search a folder name in `.search` stands for, made if it is not
    /// live: its tracks found in the store, placed as in the tree.
    pub fn open_search(&self, name: &str) -> Result<Arc<Tree>, SearchError> {
        let matching = |query: &Query| {
            let ids = self
                .pool
                .with(|store| {
                    query
                        .matching_ids(store)
                        .map_err(|e| io::Error::other(e.to_string()))
                })
                .map_err(anyhow::Error::from)?;
            Ok(ids)
        };
        // No refresh meanwhile: the search is made of one state of the
        // store and of the tree, and follows the refreshes after it.
        let _refreshes = self.seen_seq.lock();
        let tree = self.tree();
        self.searches
            .open(name, matching, |id| search::placement_in(&tree, id))
    }

    /// When files opened from now on read their backing bytes ahead.
    pub fn set_read_ahead(&self, mode: ReadAheadMode) {
        *self.read_ahead.lock() = mode;
    }

    fn read_ahead_mode(&self) -> ReadAheadMode {
        *self.read_ahead.lock()
    }

    /// The store this library serves.
    pub fn db_path(&self) -> &Path {
        &self.pool.db
    }

    pub fn config(&self) -> &ViewConfig {
        &self.config
    }

    pub fn tree(&self) -> RwLockReadGuard<'_, Tree> {
        self.tree.read()
    }

    /// Opens a file for reading. Errors carry the errno to return: ENOENT
    /// for a track that is gone, EIO for a backing file that changed since
    /// the scan or store rows that cannot describe a file (each logged).
    pub fn open(&self, ino: u64) -> io::Result<OpenFile> {
        // Before resolving: a store replaced meanwhile then fails this
        // file's picture reads instead of serving another store's.
        let store_generation = self.pool.generation();
        use crate::view::tree::Entry;
        enum Opening {
            Track(FileEntry),
            Cover(crate::view::tree::FolderCover),
            Playlist(usize),
        }
        // What the node is, with the tree's lock let go before opening it.
        let opening = match self.tree().get(ino).map(|n| &n.entry) {
            Some(Entry::File(f)) => Opening::Track(f.clone()),
            Some(Entry::Cover { cover, .. }) => Opening::Cover(*cover),
            Some(Entry::Playlist { index, .. }) => Opening::Playlist(*index),
            Some(Entry::Dir { .. }) => return Err(io::Error::from_raw_os_error(libc::EISDIR)),
            None => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
        };
        let entry = match opening {
            Opening::Track(file) => file,
            Opening::Cover(cover) => return Ok(self.open_cover(&cover, store_generation)),
            Opening::Playlist(index) => return self.open_playlist(index, store_generation),
        };
        let (track, backing, layout) = self.open_resolved(entry.track_id, entry.content_version, Log::Yes)?;
        self.log_passthrough(&track);
        if layout.len() != entry.size {
            // The store changed after the tree was built: serve the new
            // version and make the tree's size agree with it.
            if let Some(crate::view::tree::Entry::File(f)) =
                self.tree.write().get_mut(ino).map(|n| &mut n.entry)
            {
                f.size = layout.len();
                f.content_version = track.content_version;
            }
        }
        let mode = self.read_ahead_mode();
        let read_ahead = match mode {
            ReadAheadMode::Always => true,
            ReadAheadMode::Never => false,
            ReadAheadMode::Auto => backing
                .local()
                .is_some_and(|f| fs_kind::of_file(f) == FsKind::Network),
        };
        // An object reads ahead on its own (large ranged GETs, several in
        // flight) and has no page cache to look at.
        let (first_read, read_ahead) = match backing.local() {
            Some(file) => (
                (!read_ahead && mode != ReadAheadMode::Never).then(|| FirstRead::new(track.stamps.size)),
                read_ahead.then(|| ReadAhead::new(file.clone(), track.stamps.size)),
            ),
            None => (None, None),
        };
        let served = served_file::ServedFile {
            size: layout.len(),
            mtime_ns: track.served_mtime_ns(),
            version: track.content_version,
            ..served_file::ServedFile::of_track(&entry)
        };
        Ok(OpenFile {
            track,
            layout,
            served,
            backing,
            read_ahead,
            first_read,
            bytes_read: AtomicU64::new(0),
            read_through: AtomicBool::new(false),
            store_generation,
        })
    }

    /// Whether the files of `ino`'s directory are yet to be warmed
    /// ([`View::warm_ahead`]): true once per directory until the
    /// cache is cleared, so that repeated opens cost a set lookup, not a
    /// wake-up of the thread that warms.
    pub fn claim_warming(&self, ino: u64) -> bool {
        let Some(dir) = self.tree().get(ino).map(|n| n.parent) else {
            return false;
        };
        let mut warmed = self.warmed.lock();
        if warmed.len() >= WARMED_DIRS_KEPT {
            warmed.clear();
        }
        warmed.insert(dir)
    }

    /// Resolves the other files of `ino`'s directory, and those of the
    /// directory a walk of the tree comes to next, into the open cache, so
    /// that the opens that usually follow (a player's album, a tagger's
    /// folder, an indexer's walk) need neither the store nor synthesis.
    /// Neighbouring track ids are read from the store as one range. Meant
    /// to run in the background from an open, when
    /// [`View::claim_warming`] says so. Failures are left for the files'
    /// own opens.
    pub fn warm_ahead(&self, ino: u64) {
        let files = {
            let tree = self.tree();
            let mut files = tree.files_after(ino, WARM_SIBLINGS);
            files.extend(tree.files_of_next_dir(ino, WARM_SIBLINGS));
            files
        };
        let mut ids: Vec<i64> = (files.into_iter())
            .filter(|f| self.opened.get(f.track_id, f.content_version).is_none())
            .map(|f| f.track_id)
            .collect();
        ids.sort_unstable();
        let synthesis = self.config.mode == Mode::Synthesis;
        for run in neighbouring(&ids) {
            let _ = self.pool.with(|store| {
                store
                    .read_snapshot(|s| {
                        s.tracks_for_serving(run, synthesis, |id, found| {
                            if let (Ok((track, rows)), Ok(_)) = (found, ids.binary_search(&id)) {
                                // Preparing an object's file reads its
                                // start: a GET for a file nobody opened.
                                if !retagfs_remote::is_remote_path(&track.backing_path) {
                                    let _ = self.prepare(track, rows, Log::No);
                                }
                            }
                        })
                    })
                    .map_err(io::Error::other)
            });
        }
    }

    /// Whether the next files of a file read through should be read ahead
    /// ([`View::prefetch_after`]): when it came from the disk, or was
    /// itself read ahead (a client going through cold files). Files that
    /// were in the page cache anyway say the next ones likely are too, and
    /// reading them ahead would only cost (a tenth of the time of reading
    /// 200 cached files through a fresh mount).
    pub fn reads_ahead_after(&self, file: &OpenFile) -> bool {
        let found_cached = file.first_read.as_ref().is_some_and(FirstRead::found_cached);
        !found_cached || self.prefetched.lock().contains(&file.track.id)
    }

    /// Starts reading the first bytes of the next files of the track's
    /// directory into the kernel's page cache, once a client has read it
    /// through ([`OpenFile::read_through`]): a player's next track, a
    /// copy's next file. On a cold disk the next files' reads are then in
    /// flight while the client still works on this one, as a direct reader
    /// of the backing files cannot have them. Meant for the background;
    /// failures are left for the files' own opens.
    pub fn prefetch_after(&self, track_id: i64) {
        let next = self.tree().next_files(file_ino(track_id), PREFETCH_FILES);
        for f in next {
            if let Ok((_, backing, layout)) = self.open_resolved(f.track_id, f.content_version, Log::No) {
                let Some(file) = backing.local() else { continue };
                if let Some(span) = layout.backing_span(0, PREFETCH_BYTES) {
                    will_need(file, span.start, span.end);
                }
                let mut prefetched = self.prefetched.lock();
                if prefetched.len() >= PREFETCHED_KEPT {
                    prefetched.clear();
                }
                prefetched.insert(f.track_id);
            }
        }
    }

    /// [`View::resolve`], from the open cache when it holds this version.
    fn open_resolved(
        &self,
        track_id: i64,
        version: i64,
        log: Log,
    ) -> io::Result<(TrackRow, BackingFile, Arc<Layout>)> {
        match self.opened.get(track_id, version) {
            Some((track, layout)) => {
                retagfs_metrics::count(|m| m.open_cache_hits.inc());
                let backing = open_backing(&track, log)?;
                Ok((track, backing, layout))
            }
            None => {
                retagfs_metrics::count(|m| m.open_cache_misses.inc());
                self.pool.with(|store| self.resolve(store, track_id, log))
            }
        }
    }

    /// The track's row, its backing file (checked against the scan's stamps)
    /// and the layout of the served file.
    fn resolve(
        &self,
        store: &Store,
        track_id: i64,
        log: Log,
    ) -> io::Result<(TrackRow, BackingFile, Arc<Layout>)> {
        let synthesis = self.config.mode == Mode::Synthesis;
        // The row and what synthesis needs, from one committed state.
        let found = store
            .read_snapshot(|s| {
                let Some(track) = s.track(track_id)? else {
                    return Ok(None);
                };
                let rows = synthesis.then(|| s.synthesis_rows(&track)).transpose()?;
                Ok(Some((track, rows)))
            })
            .map_err(|e| failed(track_id, log, "reading the store", &e))?;
        let (track, rows) = found.ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        self.prepare(track, rows, log)
    }

    /// The backing file and the layout of a track read from the store
    /// (with its [`SynthesisRows`] in synthesis mode), the layout kept in
    /// the open cache.
    fn prepare(
        &self,
        track: TrackRow,
        rows: Option<SynthesisRows>,
        log: Log,
    ) -> io::Result<(TrackRow, BackingFile, Arc<Layout>)> {
        let backing = open_backing(&track, log)?;
        if rows.is_some() {
            // Rows another tool wrote may name another format than the
            // file's (structure-only serves the bytes and does not care).
            let src = Source::new(&backing as &dyn ReadAt, track.stamps.size);
            if let Some(why) = format_mismatch(&src, track.format) {
                return Err(failed(track.id, log, &track.backing_path, &why));
            }
        }
        let layout = match rows {
            None => Layout::passthrough(track.stamps.size),
            Some(rows) => synthesize(&SynthesisInput {
                track: &track,
                tags: &rows.tags,
                art: &rows.art,
                flac_blocks: &rows.flac_blocks,
                parts: &rows.parts,
                options: self.config.synthesis,
                backing: Some(&backing),
            })
            .map_err(|e| failed(track.id, log, &track.backing_path, &e))?,
        };
        let layout = Arc::new(layout);
        self.opened.put(&track, layout.clone());
        Ok((track, backing, layout))
    }

    /// A track served byte-identical in synthesis mode is logged once, with
    /// the reason.
    fn log_passthrough(&self, track: &TrackRow) {
        let Some(why) = &track.passthrough else {
            return;
        };
        if self.config.mode == Mode::Synthesis && self.passthrough_logged.lock().insert(track.id) {
            tracing::warn!("{}: served byte-identical: {why}", track.backing_path);
        }
    }

    /// Reads served bytes of an open file into `buf`, which only grows
    /// (zeroing a buffer per read cost more than a tenth of a cold read):
    /// returns the part read.
    pub fn read<'b>(
        &self,
        file: &OpenFile,
        offset: u64,
        size: usize,
        buf: &'b mut Vec<u8>,
    ) -> io::Result<&'b [u8]> {
        let want = size.min(file.layout.len().saturating_sub(offset) as usize);
        if buf.len() < want {
            buf.resize(want, 0);
        }
        let n = self.read_into(file, offset, &mut buf[..want])?;
        Ok(&buf[..n])
    }

    /// Reads served bytes of an open file at `offset` into `out` (fewer
    /// at the end of the file): returns how many.
    pub fn read_into(&self, file: &OpenFile, offset: u64, out: &mut [u8]) -> io::Result<usize> {
        let want = out.len().min(file.layout.len().saturating_sub(offset) as usize);
        let out = &mut out[..want];
        if let Some(first) = &file.first_read {
            if let Some(backing) = file.backing.local() {
                first.before_read(backing, || file.layout.backing_span(offset, want as u64));
            }
        }
        let src = Sources { lib: self, file };
        if let Err(e) = file.layout.read_at(offset, out, &src) {
            // A file cut short since the scan fails its reads: say that,
            // which tells what to do.
            file.backing.check_stamps(&file.track, Log::Yes)?;
            if let Some(more) = logged(file.track.id, "read", Log::Yes) {
                tracing::warn!("{}: read at {offset} failed: {e}{more}", file.track.backing_path);
            }
            return Err(eio());
        }
        // Checked after reading: bytes read from a file rewritten meanwhile
        // are never returned. (A file replaced by rename keeps serving the
        // old inode, which is still consistent.)
        file.backing.check_stamps(&file.track, Log::Yes)?;
        Ok(want)
    }
}

/// Whether a failure is logged: not while warming files nobody opened yet
/// (their own open logs it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Log {
    Yes,
    No,
}

/// EIO, logged when asked to (see [`logged`]), for track `id`
/// failing at `what`.
fn failed(id: i64, log: Log, what: &str, e: &dyn std::fmt::Display) -> io::Error {
    if let Some(more) = logged(id, "prepare", log) {
        tracing::error!("track {id}: {what}: {e}{more}");
    }
    eio()
}

/// Whether to log a failure of kind `kind` of track `id`: asked to, and
/// not logged within the last minute (the suffix says how many were left
/// out).
fn logged(id: i64, kind: &'static str, log: Log) -> Option<String> {
    (log == Log::Yes).then(|| failure_to_log(id, kind)).flatten()
}

/// Runs of sorted track ids close enough together to be read as one
/// range (the files of an album were scanned together): each range holds
/// at most [`RANGE_SLACK`] ids not asked for between two that are.
fn neighbouring(ids: &[i64]) -> impl Iterator<Item = std::ops::RangeInclusive<i64>> + '_ {
    ids.chunk_by(|a, b| b - a <= RANGE_SLACK + 1)
        .map(|run| run[0]..=run[run.len() - 1])
}

/// Ids not asked for that a range read of tracks may pass over between
/// two asked for.
const RANGE_SLACK: i64 = 8;

#[cfg(test)]
mod tests {
    use super::connection_pool::RECHECK;
    use super::render::{load_placements, RENDER_BATCH};
    use super::*;
    use retagfs_store::{Format, ScannedTrack, Stamps};

    fn same_song(n: usize) -> ScannedTrack {
        ScannedTrack {
            backing_path: format!("/m/{n}.flac"),
            format: Format::Flac,
            audio_offset: 42,
            audio_length: 100,
            stamps: Stamps {
                size: 142,
                mtime_ns: 1,
                ctime_ns: 1,
            },
            fingerprint: None,
            tags: vec![
                ("artist".into(), "A".into()),
                ("album".into(), "B".into()),
                ("title".into(), "Song".into()),
            ],
            pictures: vec![],
            flac_blocks: vec![(0, vec![0; 34])],
            parts: vec![],
            passthrough: None,
            vendor: None,
            duration_ms: None,
        }
    }

    /// A view of `template` with the standard fallbacks.
    fn view_of(template: &str, mode: Mode) -> ViewConfig {
        ViewConfig {
            template: Template::parse(template).unwrap(),
            fallbacks: Fallbacks::standard(),
            mode,
            synthesis: SynthesisOptions::default(),
            windows_names: false,
            views: Vec::new(),
            cover_name: None,
            playlists: Vec::new(),
        }
    }

    #[test]
    fn the_disc_field_is_the_disc_number_when_the_album_has_several() {
        let track = TrackRow {
            id: 1,
            backing_path: "/m/a.flac".into(),
            content_version: 1,
            ..no_track()
        };
        let disc = |tags: &[(&str, &str)]| {
            let tags: Vec<(String, String)> =
                tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            TrackFields::new(&track, &tags).get("disc")
        };
        assert_eq!(disc(&[("discnumber", "1/2")]).as_deref(), Some("1"));
        assert_eq!(disc(&[("discnumber", "2/2")]).as_deref(), Some("2"));
        assert_eq!(disc(&[("discnumber", "1/1")]), None);
        assert_eq!(disc(&[("discnumber", "1")]), None);
        assert_eq!(
            disc(&[("discnumber", "1"), ("totaldiscs", "2")]).as_deref(),
            Some("1")
        );
        assert_eq!(disc(&[("discnumber", "2")]).as_deref(), Some("2"));
    }

    /// A store of `count` tracks at `path`.
    fn store_of(path: &Path, count: usize) -> Store {
        let mut store = Store::open(path).unwrap();
        let tx = store.write().unwrap();
        for n in 0..count {
            retagfs_store::write_scanned(&tx, &same_song(n), None).unwrap();
        }
        tx.commit().unwrap();
        store
    }

    /// While the store's path names a file other than the one served (a
    /// store a scan is still writing), a thread needing a connection waits
    /// for one of the pool's rather than reading that file against the
    /// old file's tree; once the new file is loaded, it is served.
    #[test]
    fn no_connection_is_opened_to_a_store_not_yet_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        drop(store_of(&db, 3));
        let pool = Arc::new(ConnectionPool::new(
            &db,
            file_id(&db),
            Store::open_read_only(&db).unwrap(),
        ));
        // The pool's one connection is in use.
        let (in_use, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let busy = {
            let (pool, in_use) = (pool.clone(), in_use.0);
            let release = release.1;
            std::thread::spawn(move || {
                pool.with(|_| {
                    in_use.send(()).unwrap();
                    release.recv().unwrap();
                    Ok(())
                })
            })
        };
        in_use.1.recv().unwrap();
        let other = dir.path().join("other.db");
        drop(store_of(&other, 5));
        std::fs::rename(&other, &db).unwrap();
        let counting = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.with(|s| Ok(s.track_count().unwrap())))
        };
        std::thread::sleep(RECHECK * 2);
        release.0.send(()).unwrap();
        busy.join().unwrap().unwrap();
        assert_eq!(counting.join().unwrap().unwrap(), 3);

        pool.replace(|s| Ok(s.track_count()?), |n| n).unwrap();
        assert_eq!(pool.with(|s| Ok(s.track_count().unwrap())).unwrap(), 5);
        assert_eq!(pool.served(), file_id(&db));
    }

    /// A file at the store's path that cannot be loaded leaves the old
    /// store served, its connections open.
    #[test]
    fn a_store_that_fails_to_load_leaves_the_old_one_served() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        drop(store_of(&db, 3));
        let served = file_id(&db);
        let pool = ConnectionPool::new(&db, served, Store::open_read_only(&db).unwrap());
        let other = dir.path().join("other.db");
        std::fs::write(&other, b"not a store").unwrap();
        std::fs::rename(&other, &db).unwrap();
        assert!(pool.replace(|s| Ok(s.track_count()?), |n| n).is_err());
        assert_eq!(pool.served(), served);
        assert_eq!(pool.with(|s| Ok(s.track_count().unwrap())).unwrap(), 3);
    }

    #[test]
    fn a_tree_loaded_in_batches_is_the_tree_of_every_track_placed_in_id_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        // Several batches' worth of tracks with one name: the " (n)"
        // suffixes show the order the files were placed in.
        let count = RENDER_BATCH * 4 + 3;
        let tx = store.write().unwrap();
        let ids: Vec<i64> = (0..count)
            .map(|n| retagfs_store::write_scanned(&tx, &same_song(n), None).unwrap())
            .collect();
        tx.commit().unwrap();
        let config = view_of(DEFAULT_TEMPLATE, Mode::Synthesis);

        let (tree, tracks) = store.read_snapshot(|s| load_tree(s, &config)).unwrap();

        assert_eq!(tracks, count);
        let one_by_one: Vec<Placement> = ids
            .iter()
            .flat_map(|&id| load_placements(&store, &config, id).unwrap().unwrap())
            .collect();
        let diff = tree.diff(&Tree::build(one_by_one));
        assert!(
            diff == Invalidations::default(),
            "{} names and {} files differ",
            diff.entries.len(),
            diff.inodes.len()
        );
        let name = |id: i64| tree.path(file_ino(id)).unwrap();
        assert_eq!(name(ids[0]), "A/B/Song.flac");
        assert_eq!(name(ids[count - 1]), format!("A/B/Song ({count}).flac"));
    }

    #[test]
    fn mp4_files_keep_the_extensions_players_go_by() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        let tx = store.write().unwrap();
        let id_of = |n: usize, name: &str, format: Format| {
            let track = ScannedTrack {
                backing_path: format!("/m/{name}"),
                format,
                tags: vec![("title".into(), format!("T{n}"))],
                ..same_song(n)
            };
            retagfs_store::write_scanned(&tx, &track, None).unwrap()
        };
        let ids = [
            id_of(1, "book.M4B", Format::Mp4),
            id_of(2, "song.m4a", Format::Mp4),
            id_of(3, "a flac.m4b", Format::Flac),
            id_of(4, "m4b/video.mp4", Format::Mp4),
            id_of(5, "clip.M4V", Format::Mp4),
            id_of(6, "m4b", Format::Mp4),
        ];
        tx.commit().unwrap();
        let config = view_of("$title", Mode::StructureOnly);
        let (tree, _) = store.read_snapshot(|s| load_tree(s, &config)).unwrap();
        let names: Vec<String> = ids.iter().map(|&id| tree.path(file_ino(id)).unwrap()).collect();
        assert_eq!(
            names,
            ["T1.m4b", "T2.m4a", "T3.flac", "T4.mp4", "T5.m4v", "T6.m4a"]
        );
    }

    #[test]
    fn template_fields_no_track_has_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        let tx = store.write().unwrap();
        for n in 0..RENDER_BATCH * 2 {
            retagfs_store::write_scanned(&tx, &same_song(n), None).unwrap();
        }
        tx.commit().unwrap();
        let never_valued = |template: &str| {
            let config = view_of(template, Mode::Synthesis);
            let mut valued = 0;
            store
                .read_snapshot(|s| load_view(s, &config, Some(&mut valued), false))
                .unwrap();
            references_never_valued(&config.template, valued)
        };
        assert!(never_valued("${albumartist|artist}/$album/$title").is_empty());
        assert_eq!(never_valued(DEFAULT_TEMPLATE), ["${tracknumber}"]);
        assert_eq!(
            never_valued("${albumartist|artist}/$albun/[$disc-][$genre ]${titel|filename}/$format"),
            ["${albun}", "${genre}"]
        );
    }
}
