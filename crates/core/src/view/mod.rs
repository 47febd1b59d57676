//! The mounted library: the tree rendered from the store, and opening a
//! file (resolving its layout) for reads.

pub mod read_ahead;
pub mod template;
pub mod tree;
pub mod watch;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockReadGuard};
use std::time::Duration;

use anyhow::Context;
use retagfs_formats::{
    format_mismatch, synthesize, synthesized_len, Layout, ReadAt, SegmentSource, Source, SynthesisInput,
    SynthesisOptions,
};
use retagfs_store::{text_for_display, text_to_path, Store, SynthesisRows, TrackBundle, TrackRow};

use crate::failure_log::failure_to_log;
use crate::fs_kind::{self, FsKind};
use crate::view::read_ahead::{will_need, FirstRead, ReadAhead};
use crate::view::template::{Fallbacks, Fields, Template, DEFAULT_TEMPLATE};
use crate::view::tree::{file_ino, FileEntry, Invalidations, NameExtension, Placement, Tree, TreeBuilder};

/// How files are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Fresh metadata from the store in front of the original audio.
    Synthesis,
    /// The backing file's bytes, unchanged, under the template's paths.
    StructureOnly,
}

/// How the tree is laid out and files are served.
#[derive(Debug, Clone)]
pub struct ViewConfig {
    pub template: Template,
    pub fallbacks: Fallbacks,
    pub mode: Mode,
    pub synthesis: SynthesisOptions,
    /// Names Windows accepts ([`crate::view::tree::windows_safe`]), for a view
    /// shared over SMB.
    pub windows_names: bool,
}

/// A track's tags as template fields, plus computed fields:
/// `filename` (backing file name without extension), `format`, and `disc`
/// (the disc number when the album has several discs, else nothing).
pub struct TrackFields<'a> {
    track: &'a TrackRow,
    tags: &'a [(String, String)],
}

impl<'a> TrackFields<'a> {
    pub fn new(track: &'a TrackRow, tags: &'a [(String, String)]) -> Self {
        TrackFields { track, tags }
    }

    fn tag(&self, key: &str) -> Option<String> {
        let values: Vec<&str> = self
            .tags
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect();
        (!values.is_empty()).then(|| values.join(", "))
    }
}

fn leading_number(v: &str) -> Option<u32> {
    let digits: String = v.trim().chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

impl Fields for TrackFields<'_> {
    fn get(&self, field: &str) -> Option<String> {
        match field {
            // Bytes of the name that are not UTF-8 read as Latin-1.
            "filename" => Path::new(&*text_for_display(&self.track.backing_path))
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned()),
            "format" => Some(self.track.format.as_str().to_string()),
            "disc" => {
                let disc = self.tag("discnumber")?;
                // "1/2" (disc 1 of 2, as ID3 writes it) says both.
                let (number, of) = disc.split_once('/').unwrap_or((&disc, ""));
                let total = self
                    .tag("totaldiscs")
                    .and_then(|t| leading_number(&t))
                    .or_else(|| leading_number(of));
                let several = total.is_some_and(|t| t > 1) || leading_number(number).is_some_and(|d| d > 1);
                several.then(|| number.trim().to_string())
            }
            _ => self.tag(field),
        }
    }
}

/// Tracks handed to a rendering thread at a time.
const RENDER_BATCH: usize = 256;

/// Reads every track and builds the tree at once (inside
/// [`Store::read_snapshot`] for one consistent state): this thread reads
/// the store, one thread per core renders batches of tracks, and one more
/// grows the tree batch by batch in track id order. Returns the tree and
/// the number of tracks.
pub fn load_tree(store: &Store, config: &ViewConfig) -> retagfs_store::Result<(Tree, usize)> {
    load_tree_noting(store, config, None)
}

/// [`load_tree`], noting in `valued`, if given, which of the template's
/// fields ([`Template::fields`], the first 64) had a value in some track.
fn load_tree_noting(
    store: &Store,
    config: &ViewConfig,
    valued: Option<&mut u64>,
) -> retagfs_store::Result<(Tree, usize)> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (batches_tx, batches_rx) = crossbeam_channel::bounded::<(usize, Vec<TrackBundle>)>(workers * 2);
    let (placed_tx, placed_rx) = crossbeam_channel::unbounded::<(usize, Vec<Placement>, u64)>();
    let names = config.template.fields();
    let noting = valued.is_some();
    std::thread::scope(|s| {
        for _ in 0..workers {
            let (batches, placed, names) = (batches_rx.clone(), placed_tx.clone(), &names);
            s.spawn(move || {
                for (n, batch) in batches {
                    let mut valued = 0;
                    let placements = batch
                        .iter()
                        .map(|b| {
                            let fields = TrackFields::new(&b.track, &b.tags);
                            if !noting {
                                return placement(config, b, &fields);
                            }
                            let fields = NotingFields::new(fields, names);
                            let p = placement(config, b, &fields);
                            valued |= fields.valued.get();
                            p
                        })
                        .collect();
                    if placed.send((n, placements, valued)).is_err() {
                        return;
                    }
                }
            });
        }
        drop((batches_rx, placed_tx));
        let builder = s.spawn(move || {
            let mut tree = TreeBuilder::default();
            let mut valued = 0;
            // Batches rendered ahead of one still being rendered wait here.
            let mut early = BTreeMap::new();
            let mut next = 0;
            for (n, placements, batch_valued) in placed_rx {
                valued |= batch_valued;
                early.insert(n, placements);
                while let Some(placements) = early.remove(&next) {
                    placements.into_iter().for_each(|p| tree.add(p));
                    next += 1;
                }
            }
            (tree.finish(), valued)
        });
        let (mut count, mut sent) = (0, 0);
        let mut batch = Vec::with_capacity(RENDER_BATCH);
        let read = store.for_each_track(|bundle| {
            count += 1;
            batch.push(bundle);
            if batch.len() == RENDER_BATCH {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(RENDER_BATCH));
                let _ = batches_tx.send((sent, full));
                sent += 1;
            }
        });
        if !batch.is_empty() {
            let _ = batches_tx.send((sent, batch));
        }
        drop(batches_tx);
        let (tree, tree_valued) = builder.join().expect("building the tree panicked");
        if let Some(valued) = valued {
            *valued = tree_valued;
        }
        read.map(|()| (tree, count))
    })
}

/// A track's fields, noting which of `names` had a value (bit i for
/// `names[i]`).
struct NotingFields<'a> {
    fields: TrackFields<'a>,
    names: &'a [&'a str],
    valued: std::cell::Cell<u64>,
}

impl<'a> NotingFields<'a> {
    fn new(fields: TrackFields<'a>, names: &'a [&'a str]) -> Self {
        NotingFields {
            fields,
            names,
            valued: std::cell::Cell::new(0),
        }
    }
}

impl Fields for NotingFields<'_> {
    fn get(&self, field: &str) -> Option<String> {
        let value = self.fields.get(field);
        if value.as_deref().is_some_and(|v| !v.trim().is_empty()) {
            if let Some(bit) = self.names.iter().position(|n| *n == field).filter(|&i| i < 64) {
                self.valued.set(self.valued.get() | 1 << bit);
            }
        }
        value
    }
}

/// The template's field references (`${albumartist|artist}`) that no track
/// had a value for, given the fields that had one (`valued`, as
/// [`load_tree_noting`] notes them). Computed fields are left out: `disc`
/// is empty wherever no album has several discs.
fn references_never_valued(template: &Template, valued: u64) -> Vec<String> {
    let names = template.fields();
    let had_value = |name: &str| {
        let bit = names.iter().position(|n| *n == name);
        bit.is_none_or(|i| i >= 64 || valued & (1 << i) != 0)
    };
    let mut out: Vec<String> = template
        .chains()
        .into_iter()
        .filter(|chain| !chain.iter().any(|f| COMPUTED_FIELDS.contains(&f.as_str())))
        .filter(|chain| !chain.iter().any(|f| had_value(f)))
        .map(|chain| format!("${{{}}}", chain.join("|")))
        .collect();
    out.dedup();
    out
}

/// Fields [`TrackFields`] computes rather than reads from the tags.
const COMPUTED_FIELDS: [&str; 3] = ["filename", "format", "disc"];

/// Where a track goes in the tree and its served size.
fn placement(config: &ViewConfig, b: &TrackBundle, fields: &dyn Fields) -> Placement {
    let t = &b.track;
    let size = match config.mode {
        Mode::StructureOnly => t.stamps.size,
        Mode::Synthesis => {
            synthesized_len(t, &b.tags, &b.art, &b.flac_block_lens, &b.parts, config.synthesis)
        }
    };
    let mut path = config.template.render(fields, &config.fallbacks);
    if config.windows_names {
        path = crate::view::tree::windows_safe(&path);
    }
    Placement {
        path,
        file: FileEntry {
            track_id: t.id,
            format: t.format,
            name_extension: NameExtension::of(t.format, &t.backing_path),
            size,
            mtime_ns: t.served_mtime_ns(),
            content_version: t.content_version,
        },
    }
}

/// One track's placement read from the store, `None` once it is gone.
fn load_placement(store: &Store, config: &ViewConfig, id: i64) -> retagfs_store::Result<Option<Placement>> {
    Ok(store
        .track_bundle(id)?
        .map(|b| placement(config, &b, &TrackFields::new(&b.track, &b.tags))))
}

/// Changed tracks beyond which a refresh reloads everything in bulk.
const REBUILD_ABOVE: usize = 5000;

/// What a refresh found in the store's change log.
enum Pending {
    Nothing,
    /// The log was truncated past what the tree reflects (or too many
    /// tracks changed): this tree of this many tracks, up to this log
    /// position.
    Rebuild(Box<Tree>, usize, i64),
    /// These tracks changed (None: removed), up to this log position.
    Tracks(Vec<(i64, Option<Placement>)>, i64),
    /// A newer retagfs migrated the store to this schema version, which
    /// this one cannot read: the view stays as it is.
    NewerSchema(i64),
    /// The store was migrated to this version, which this retagfs knows,
    /// since its connections opened it: they load it again.
    Migrated(i64),
}

/// The outcome of one refresh.
#[derive(Debug, Default)]
pub struct Refresh {
    /// Tracks re-rendered (every track for a rebuild).
    pub tracks: usize,
    /// Whether the tree was rebuilt (change log truncated past its
    /// position, or too many tracks changed to load one by one).
    pub rebuilt: bool,
    /// What the kernel must forget.
    pub invalidations: Invalidations,
}

/// A file's device and inode number.
pub(crate) type FileId = (u64, u64);

pub(crate) fn file_id(path: &Path) -> Option<FileId> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Read-only store connections shared by the serving threads, all to the
/// file the tree was loaded from.
struct ConnectionPool {
    db: PathBuf,
    idle: Mutex<Vec<Store>>,
    /// Signalled when a connection goes back to `idle`.
    returned: Condvar,
    /// The file the connections are to (None if it was gone as it was
    /// opened). A connection is added only while the path names it: when
    /// the path names another file (a store moved over this one, or one a
    /// scan is still writing, which the watcher loads once the scan ends)
    /// a thread waits for one of the pool's instead of reading that file
    /// against this file's tree.
    served: Mutex<Option<FileId>>,
    /// Held shared while a connection is in use, exclusively while the
    /// store is replaced ([`ConnectionPool::replace`]): no work on the old
    /// file overlaps the switch.
    gate: RwLock<()>,
    /// How many times the file at the store's path was replaced.
    generation: AtomicU64,
}

/// A connection in use, given back when dropped (also if its user
/// panicked: threads may be waiting for it).
struct Lent<'a> {
    pool: &'a ConnectionPool,
    conn: Option<Store>,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(conn);
            self.pool.returned.notify_one();
        }
    }
}

/// How long a thread waiting for a connection sleeps before it looks at
/// the store's path again.
const RECHECK: Duration = Duration::from_millis(100);

impl ConnectionPool {
    fn new(db: &Path, served: Option<FileId>, store: Store) -> ConnectionPool {
        ConnectionPool {
            db: db.to_path_buf(),
            idle: Mutex::new(vec![store]),
            returned: Condvar::new(),
            served: Mutex::new(served),
            gate: RwLock::new(()),
            generation: AtomicU64::new(0),
        }
    }

    /// Runs `f` on a connection. Not to be called holding the tree's lock:
    /// a replacement holds this side's gate while it swaps the tree.
    fn with<T>(&self, f: impl FnOnce(&Store) -> io::Result<T>) -> io::Result<T> {
        let _in_use = self.gate.read().unwrap_or_else(|e| e.into_inner());
        let lent = Lent {
            pool: self,
            conn: Some(self.take()?),
        };
        f(lent.conn.as_ref().expect("lent until dropped"))
    }

    /// An idle connection, else a new one while the path names the served
    /// file, else the next connection given back.
    fn take(&self) -> io::Result<Store> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(conn) = idle.pop() {
                return Ok(conn);
            }
            drop(idle);
            if let Some(conn) = self.open_served()? {
                return Ok(conn);
            }
            idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            if idle.is_empty() {
                idle = match self.returned.wait_timeout(idle, RECHECK) {
                    Ok((idle, _)) => idle,
                    Err(e) => e.into_inner().0,
                };
            }
        }
    }

    /// A new connection to the served file; None when the path names
    /// another file (looked at before and after the open).
    fn open_served(&self) -> io::Result<Option<Store>> {
        let served = self.served();
        let names_served = || served.is_none() || file_id(&self.db) == served;
        if !names_served() {
            return Ok(None);
        }
        let store = Store::open_read_only(&self.db).map_err(|e| {
            let hint = retagfs_store::explain_store_error(&e, &self.db)
                .map(|h| format!("; {h}"))
                .unwrap_or_default();
            tracing::error!("cannot open store {}: {e}{hint}", self.db.display());
            io::Error::from_raw_os_error(libc::EIO)
        })?;
        Ok(names_served().then_some(store))
    }

    fn served(&self) -> Option<FileId> {
        *self.served.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves the file now at the store's path: `load` reads it while the
    /// old one is still served, then, with no connection in use, the old
    /// connections are closed and `switch` takes what `load` made. If the
    /// file cannot be opened or loaded, the old one stays served.
    /// `switch` must leave nothing of the old store to serve (the tree, the
    /// open cache): the generation moves on after it, so that a file
    /// opened meanwhile from what the old store left has the old one.
    fn replace<L, T>(
        &self,
        load: impl FnOnce(&Store) -> anyhow::Result<L>,
        switch: impl FnOnce(L) -> T,
    ) -> anyhow::Result<T> {
        let file = file_id(&self.db);
        let store = Store::open_read_only(&self.db)?;
        if file_id(&self.db) != file {
            anyhow::bail!("the file at the store's path changed while it was opened");
        }
        let loaded = load(&store)?;
        let _switching = self.gate.write().unwrap_or_else(|e| e.into_inner());
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let out = switch(loaded);
        *self.served.lock().unwrap_or_else(|e| e.into_inner()) = file;
        self.generation.fetch_add(1, Ordering::Relaxed);
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(store);
        self.returned.notify_all();
        Ok(out)
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }
}

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
}

/// An open file: the layout resolved at open time and the backing file.
pub struct OpenFile {
    pub track: TrackRow,
    pub layout: Arc<Layout>,
    backing: Arc<File>,
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

impl OpenFile {
    /// The backing file, when the served file is that file byte for byte
    /// (structure-only mode, or a track served byte-identical): the kernel
    /// can then read it directly (FUSE passthrough).
    pub fn whole_backing_file(&self) -> Option<&File> {
        self.layout
            .is_whole_backing(self.track.stamps.size)
            .then_some(self.backing.as_ref())
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

/// Recently opened tracks by (track, content version): their row and the
/// layout of the served file. Opening the same file again, or many readers
/// of one file, need neither the store nor synthesis. A refresh evicts the
/// tracks it saw change (a move changes the row, not the version). Bounded
/// by the bytes the layouts hold.
#[derive(Default)]
struct OpenCache {
    entries: Mutex<CachedTracks>,
}

/// Track id -> (row, layout), and the bytes they hold.
#[derive(Default)]
struct CachedTracks(HashMap<i64, (TrackRow, Arc<Layout>)>, usize);

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

/// Memory the open cache may hold (generated headers, MP4 `moov`s).
const OPEN_CACHE_BYTES: usize = 16 << 20;
/// Tracks the open cache may hold: room for the files warmed ahead of a
/// walk many times over, not for every file of a library. Holding every
/// small file an indexer opened doubled the daemon's memory (20,000 tiny
/// FLACs: 15 -> 32 MiB) and sped nothing up: each is opened once.
const OPEN_CACHE_TRACKS: usize = 4096;

fn cached_bytes(track: &TrackRow, layout: &Layout) -> usize {
    layout.heap_bytes() + track.backing_path.len() + 256
}

impl OpenCache {
    fn get(&self, track_id: i64, version: i64) -> Option<(TrackRow, Arc<Layout>)> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match entries.0.get(&track_id) {
            Some((track, layout)) if track.content_version == version => {
                Some((track.clone(), layout.clone()))
            }
            _ => None,
        }
    }

    fn put(&self, track: &TrackRow, layout: Arc<Layout>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let size = cached_bytes(track, &layout);
        if entries.1 + size > OPEN_CACHE_BYTES || entries.0.len() >= OPEN_CACHE_TRACKS {
            // Simple and bounded: start over rather than track recency.
            entries.0.clear();
            entries.1 = 0;
        }
        if let Some((t, l)) = entries.0.insert(track.id, (track.clone(), layout)) {
            entries.1 = entries.1.saturating_sub(cached_bytes(&t, &l));
        }
        entries.1 += size;
    }

    fn evict(&self, track_ids: impl IntoIterator<Item = i64>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        for id in track_ids {
            if let Some((t, l)) = entries.0.remove(&id) {
                entries.1 = entries.1.saturating_sub(cached_bytes(&t, &l));
            }
        }
    }

    fn clear(&self) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.0.clear();
        entries.1 = 0;
    }
}

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
        let ((tree, tracks), seq) = store
            .read_snapshot(|s| {
                let noting = check_fields.then_some(&mut valued);
                Ok((load_tree_noting(s, &config, noting)?, s.last_change_seq()?))
            })
            .context("reading the store")?;
        tracing::info!(
            "loaded {tracks} tracks and built the tree in {:.1} ms",
            started.elapsed().as_secs_f64() * 1000.0
        );
        if check_fields {
            for reference in references_never_valued(&config.template, valued) {
                tracing::warn!(
                    "no track has a value for {reference} in the template: check its spelling \
                     against a track's tags (`retagfs tag get FILE`)"
                );
            }
        }
        Ok(View {
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
        })
    }

    /// The store file served (its device and inode, taken just before it
    /// was opened).
    pub(crate) fn served_file(&self) -> Option<FileId> {
        self.pool.served()
    }

    /// Brings the tree up to date with the store: only the tracks the
    /// change log names since the last refresh are re-rendered, unless the
    /// log was truncated past that point (then everything is).
    pub fn refresh(&self) -> anyhow::Result<Refresh> {
        let mut seen = self.seen_seq.lock().unwrap_or_else(|e| e.into_inner());
        let since = *seen;
        let pending = self
            .pool
            .with(|store| {
                store
                    .read_snapshot(|s| {
                        let version = s.schema_version_now()?;
                        if version > retagfs_store::SCHEMA_VERSION {
                            return Ok(Pending::NewerSchema(version));
                        }
                        if version != s.schema_version() {
                            return Ok(Pending::Migrated(version));
                        }
                        let last = s.last_change_seq()?;
                        if last <= since {
                            return Ok(Pending::Nothing);
                        }
                        if s.first_change_seq()?.is_some_and(|first| first > since + 1) {
                            let (tree, tracks) = load_tree(s, &self.config)?;
                            return Ok(Pending::Rebuild(Box::new(tree), tracks, last));
                        }
                        let ids = s.tracks_changed_since(since)?;
                        // Many tracks load faster in bulk than one by one.
                        if ids.len() > REBUILD_ABOVE {
                            let (tree, tracks) = load_tree(s, &self.config)?;
                            return Ok(Pending::Rebuild(Box::new(tree), tracks, last));
                        }
                        let mut changed = Vec::new();
                        for id in ids {
                            changed.push((id, load_placement(s, &self.config, id)?));
                        }
                        Ok(Pending::Tracks(changed, last))
                    })
                    .map_err(|e| io::Error::other(e.to_string()))
            })
            .context("reading the store's change log")?;
        let mut out = Refresh::default();
        match pending {
            Pending::Nothing => {}
            Pending::NewerSchema(version) => self.note_newer_schema(version),
            Pending::Migrated(version) => {
                drop(seen);
                tracing::info!("the store was migrated to schema version {version}: loading it again");
                return self.reload();
            }
            Pending::Rebuild(new, tracks, last) => {
                out = self.replace_tree(*new, tracks);
                *seen = last;
            }
            Pending::Tracks(changed, last) => {
                let mut tree = self.tree.write().unwrap_or_else(|e| e.into_inner());
                out.tracks = changed.len();
                for (id, placement) in &changed {
                    tree.replace(file_ino(*id), placement.clone(), &mut out.invalidations);
                }
                tree.note_listing_changes(&out.invalidations, None);
                // After the tree: an open that read the store before this
                // refresh and caches the old row is then caught by the
                // tree's newer version.
                self.opened.evict(changed.iter().map(|(id, _)| *id));
                *seen = last;
            }
        }
        Ok(out)
    }

    /// Says, once per schema version, that a newer retagfs migrated the
    /// store and that this mount no longer follows it.
    fn note_newer_schema(&self, version: i64) {
        let mut noted = self.newer_schema_noted.lock().unwrap_or_else(|e| e.into_inner());
        if *noted != Some(version) {
            *noted = Some(version);
            tracing::warn!(
                "a newer retagfs migrated the store {} to schema version {version} (this one \
                 reads up to {}): the mount keeps serving the view it has and no longer follows \
                 edits; restart it with the newer retagfs",
                self.pool.db.display(),
                retagfs_store::SCHEMA_VERSION
            );
        }
    }

    /// Loads the store again from its path, after the file there was
    /// replaced (a store rebuilt elsewhere and moved into place, or removed
    /// and scanned anew): the tree is built from the new one, then the
    /// connections to the old file are closed; if the new file cannot be
    /// loaded, the old one stays served. Files already open keep serving
    /// what they opened, but fail their pictures' reads (EIO). The old
    /// store's `-wal` and `-shm` must be gone from their paths first, or
    /// SQLite reads the new store through them ([`crate::view::watch`] sees to
    /// it).
    pub fn reload(&self) -> anyhow::Result<Refresh> {
        let mut seen = self.seen_seq.lock().unwrap_or_else(|e| e.into_inner());
        self.pool.replace(
            |store| {
                store
                    .read_snapshot(|s| {
                        let (tree, tracks) = load_tree(s, &self.config)?;
                        Ok((tree, tracks, s.last_change_seq()?))
                    })
                    .context("reading the store")
            },
            |(tree, tracks, last)| {
                *seen = last;
                self.replace_tree(tree, tracks)
            },
        )
    }

    /// Serves `new` instead of the current tree; what the kernel must
    /// forget comes back.
    fn replace_tree(&self, mut new: Tree, tracks: usize) -> Refresh {
        let mut tree = self.tree.write().unwrap_or_else(|e| e.into_inner());
        let invalidations = tree.diff(&new);
        new.note_listing_changes(&invalidations, Some(&tree));
        *tree = new;
        self.opened.clear();
        self.warmed.lock().unwrap_or_else(|e| e.into_inner()).clear();
        Refresh {
            tracks,
            rebuilt: true,
            invalidations,
        }
    }

    /// When files opened from now on read their backing bytes ahead.
    pub fn set_read_ahead(&self, mode: ReadAheadMode) {
        *self.read_ahead.lock().unwrap_or_else(|e| e.into_inner()) = mode;
    }

    fn read_ahead_mode(&self) -> ReadAheadMode {
        *self.read_ahead.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The store this library serves.
    pub fn db_path(&self) -> &Path {
        &self.pool.db
    }

    pub fn config(&self) -> &ViewConfig {
        &self.config
    }

    pub fn tree(&self) -> RwLockReadGuard<'_, Tree> {
        self.tree.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a file for reading. Errors carry the errno to return: ENOENT
    /// for a track that is gone, EIO for a backing file that changed since
    /// the scan or store rows that cannot describe a file (each logged).
    pub fn open(&self, ino: u64) -> io::Result<OpenFile> {
        // Before resolving: a store replaced meanwhile then fails this
        // file's picture reads instead of serving another store's.
        let store_generation = self.pool.generation();
        let entry = match self.tree().get(ino).map(|n| &n.entry) {
            Some(crate::view::tree::Entry::File(f)) => f.clone(),
            Some(_) => return Err(io::Error::from_raw_os_error(libc::EISDIR)),
            None => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
        };
        let (track, backing, layout) = self.open_resolved(entry.track_id, entry.content_version, Log::Yes)?;
        self.log_passthrough(&track);
        if layout.len() != entry.size {
            // The store changed after the tree was built: serve the new
            // version and make the tree's size agree with it.
            if let Some(crate::view::tree::Entry::File(f)) = self
                .tree
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .get_mut(ino)
                .map(|n| &mut n.entry)
            {
                f.size = layout.len();
                f.content_version = track.content_version;
            }
        }
        let mode = self.read_ahead_mode();
        let read_ahead = match mode {
            ReadAheadMode::Always => true,
            ReadAheadMode::Never => false,
            ReadAheadMode::Auto => fs_kind::of_file(&backing) == FsKind::Network,
        };
        let backing = Arc::new(backing);
        let first_read =
            (!read_ahead && mode != ReadAheadMode::Never).then(|| FirstRead::new(track.stamps.size));
        let read_ahead = read_ahead.then(|| ReadAhead::new(backing.clone(), track.stamps.size));
        Ok(OpenFile {
            track,
            layout,
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
        let mut warmed = self.warmed.lock().unwrap_or_else(|e| e.into_inner());
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
                                let _ = self.prepare(track, rows, Log::No);
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
        !found_cached
            || self
                .prefetched
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&file.track.id)
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
            if let Ok((_, file, layout)) = self.open_resolved(f.track_id, f.content_version, Log::No) {
                if let Some(span) = layout.backing_span(0, PREFETCH_BYTES) {
                    will_need(&file, span.start, span.end);
                }
                let mut prefetched = self.prefetched.lock().unwrap_or_else(|e| e.into_inner());
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
    ) -> io::Result<(TrackRow, File, Arc<Layout>)> {
        match self.opened.get(track_id, version) {
            Some((track, layout)) => {
                let backing = open_backing(&track, log)?;
                Ok((track, backing, layout))
            }
            None => self.pool.with(|store| self.resolve(store, track_id, log)),
        }
    }

    /// The track's row, its backing file (checked against the scan's stamps)
    /// and the layout of the served file.
    fn resolve(&self, store: &Store, track_id: i64, log: Log) -> io::Result<(TrackRow, File, Arc<Layout>)> {
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
    ) -> io::Result<(TrackRow, File, Arc<Layout>)> {
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
        if self.config.mode == Mode::Synthesis
            && self
                .passthrough_logged
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(track.id)
        {
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
            first.before_read(&file.backing, || file.layout.backing_span(offset, want as u64));
        }
        let src = Sources { lib: self, file };
        if let Err(e) = file.layout.read_at(offset, out, &src) {
            // A file cut short since the scan fails its reads: say that,
            // which tells what to do.
            check_stamps(&file.track, &file.backing, Log::Yes)?;
            if let Some(more) = logged(file.track.id, "read", Log::Yes) {
                tracing::warn!("{}: read at {offset} failed: {e}{more}", file.track.backing_path);
            }
            return Err(eio());
        }
        // Checked after reading: bytes read from a file rewritten meanwhile
        // are never returned. (A file replaced by rename keeps serving the
        // old inode, which is still consistent.)
        check_stamps(&file.track, &file.backing, Log::Yes)?;
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

/// Opens a track's backing file; a file that changed since the scan is
/// EIO (its offsets are stale), a vanished one ENOENT.
fn open_backing(track: &TrackRow, log: Log) -> io::Result<File> {
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
fn check_stamps(track: &TrackRow, backing: &File, log: Log) -> io::Result<()> {
    let meta = backing.metadata().map_err(|_| eio())?;
    let now = crate::stamps(&meta);
    if now.size != track.stamps.size || now.mtime_ns != track.stamps.mtime_ns {
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

struct Sources<'a> {
    lib: &'a View,
    file: &'a OpenFile,
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

#[cfg(test)]
mod tests {
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
        }
    }

    #[test]
    fn the_disc_field_is_the_disc_number_when_the_album_has_several() {
        let track = TrackRow {
            id: 1,
            backing_path: "/m/a.flac".into(),
            format: Format::Flac,
            audio_offset: 0,
            audio_length: 0,
            stamps: Stamps {
                size: 0,
                mtime_ns: 0,
                ctime_ns: 0,
            },
            content_version: 1,
            passthrough: None,
            changed_at: 0,
            vendor: None,
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

    #[test]
    fn the_open_cache_holds_a_bounded_number_of_small_files() {
        let cache = OpenCache::default();
        let layout = Arc::new(Layout::passthrough(1000));
        for id in 0..(OPEN_CACHE_TRACKS as i64 + 10) {
            let track = TrackRow {
                id,
                backing_path: format!("/m/{id}.flac"),
                format: Format::Flac,
                audio_offset: 0,
                audio_length: 1000,
                stamps: Stamps {
                    size: 1000,
                    mtime_ns: 0,
                    ctime_ns: 0,
                },
                content_version: 1,
                passthrough: None,
                changed_at: 0,
                vendor: None,
            };
            cache.put(&track, layout.clone());
            assert!(cache.get(id, 1).is_some(), "the file just put is held");
        }
        let held = cache.entries.lock().unwrap().0.len();
        assert!(held <= OPEN_CACHE_TRACKS, "{held} files held");
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
            .map(|&id| load_placement(&store, &config, id).unwrap().unwrap())
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
                .read_snapshot(|s| load_tree_noting(s, &config, Some(&mut valued)))
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
