//! Scans of roots in object stores (`s3://BUCKET/PREFIX`): list the
//! objects, hold them against the store by key, size and ETag (an
//! unchanged object costs no GET), probe the others from a head and a
//! tail window fetched by ranged GETs, many objects at once, and write
//! what changed as a local scan does, moved objects keeping their tracks.
//! A listing that fails fails the scan before anything is written.

use std::cell::RefCell;
use std::sync::Arc;

use retagfs_remote::{ListedObject, ObjectUrl, Remote, BLOCK};

use super::*;

/// Objects probed at once when not told: each probe mostly waits on round
/// trips.
pub const OBJECT_JOBS: usize = 32;

/// The bytes fetched at the start of an object before probing it: the
/// tags, and the first block of the audio after them, which a fresh
/// mount's first read needs (the kernel reads 128 KiB ahead of any read).
const HEAD_WINDOW: u64 = 2 * BLOCK;
/// The bytes fetched at its end (trailing tags, the fingerprint's end).
const TAIL_WINDOW: u64 = BLOCK;
/// The least a probe's read outside the windows fetches.
const EXTRA_WINDOW: u64 = 64 * 1024;

pub struct ObjectScanOptions {
    pub roots: Vec<ObjectUrl>,
    pub prune: bool,
    pub jobs: usize,
}

/// An object to probe.
struct ObjectJob {
    object: ListedObject,
    existing: Option<i64>,
}

pub fn scan_objects(
    db: &mut Store,
    remote: &Arc<Remote>,
    opts: &ObjectScanOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> anyhow::Result<ScanSummary> {
    let _one_scan_at_a_time = db.lock_for_scan(say_waiting)?;
    let started = Instant::now();
    let listed = list_roots(remote, &opts.roots, progress)?;
    let known: Vec<store::RemoteTrack> = (db.remote_tracks()?.into_iter())
        .filter(|t| opts.roots.iter().any(|r| r.holds(&t.backing_path)))
        .collect();
    let known_failures: PathMap<Stamps> = (db.failure_stamps()?.into_iter())
        .filter(|(path, _)| opts.roots.iter().any(|r| r.holds(path)))
        .collect();
    let reasons: HashMap<String, String> = db.failures()?.into_iter().collect();

    let mut summary = ScanSummary::default();
    let by_path: HashMap<&str, &store::RemoteTrack> =
        known.iter().map(|t| (t.backing_path.as_str(), t)).collect();
    let mut seen = HashSet::new();
    let mut todo = Vec::new();
    let mut listed_paths = HashSet::new();
    for object in listed {
        let path = object.url.to_string();
        listed_paths.insert(path.clone());
        if extension_in(&path, NOT_AUDIO) {
            summary.skipped += 1;
            continue;
        }
        let known = by_path.get(path.as_str());
        if let Some(track) = known {
            seen.insert(track.id);
            if track.size == object.version.size && track.etag.as_deref() == Some(&object.version.etag) {
                summary.unchanged += 1;
                continue;
            }
        } else if let Some(failed) = known_failures.get(&path) {
            if failed.size == object.version.size && failed.mtime_ns == object.version.mtime_ns {
                summary.failed += 1;
                let reason = reasons.get(&path).cloned().unwrap_or_default();
                summary.failures.push((path, reason));
                continue;
            }
        }
        todo.push(ObjectJob {
            existing: known.map(|t| t.id),
            object,
        });
    }
    let gone: Vec<&store::RemoteTrack> = known.iter().filter(|t| !seen.contains(&t.id)).collect();
    let mut moved_from = MoveCandidates::default();
    let gone_ids: Vec<i64> = gone.iter().map(|t| t.id).collect();
    let gone_paths: HashMap<i64, &str> = gone.iter().map(|t| (t.id, t.backing_path.as_str())).collect();
    for (id, fingerprint) in db.fingerprints(&gone_ids)? {
        (moved_from.gone.entry(fingerprint).or_default()).push(id, gone_paths[&id].to_string());
    }

    progress(Progress::Probing(todo.len() as u64));
    let mut moved = HashSet::new();
    probe_and_write_objects(
        db,
        remote,
        opts.jobs,
        todo,
        &mut moved_from,
        &mut moved,
        &mut summary,
        progress,
    )?;

    let tx = db.write()?;
    for track in gone.iter().filter(|t| !moved.contains(&t.id)) {
        if opts.prune {
            store::remove_track(&tx, track.id)?;
            summary.removed += 1;
        } else {
            summary.missing += 1;
        }
    }
    for path in known_failures.keys().filter(|p| !listed_paths.contains(*p)) {
        store::remove_failure(&tx, path)?;
    }
    tx.commit()?;
    summary.failures.sort_unstable();
    summary.elapsed = started.elapsed();
    Ok(summary)
}

/// Every object under the roots; any listing that fails fails them all.
fn list_roots(
    remote: &Arc<Remote>,
    roots: &[ObjectUrl],
    progress: &(dyn Fn(Progress) + Sync),
) -> anyhow::Result<Vec<ListedObject>> {
    let found = Arc::new(AtomicUsize::new(0));
    let mut all = Vec::new();
    for root in roots {
        let counter = found.clone();
        let objects = std::thread::scope(|s| {
            let listing = s.spawn(|| {
                remote.list(
                    root,
                    Arc::new(move |n| {
                        counter.fetch_add(n, Ordering::Relaxed);
                    }),
                )
            });
            while !listing.is_finished() {
                progress(Progress::Listing(found.load(Ordering::Relaxed) as u64));
                std::thread::sleep(Duration::from_millis(100));
            }
            listing.join().expect("a listing does not panic")
        })
        .with_context(|| format!("nothing was changed in the store: {root} could not be listed whole"))?;
        all.extend(objects);
    }
    progress(Progress::Listing(all.len() as u64));
    all.sort_by(|a, b| a.url.cmp(&b.url));
    all.dedup_by(|a, b| a.url == b.url);
    Ok(all)
}

enum ObjectOutcome {
    Scanned(ObjectJob, Box<Probed>),
    Failed(ObjectJob, ProbeError),
}

#[allow(clippy::too_many_arguments)]
fn probe_and_write_objects(
    db: &mut Store,
    remote: &Arc<Remote>,
    jobs: usize,
    todo: Vec<ObjectJob>,
    moved_from: &mut MoveCandidates,
    moved: &mut HashSet<i64>,
    summary: &mut ScanSummary,
    progress: &(dyn Fn(Progress) + Sync),
) -> anyhow::Result<()> {
    let (job_tx, job_rx) = bounded::<ObjectJob>(jobs * 2);
    let (out_tx, out_rx) = bounded::<Vec<ObjectOutcome>>(jobs * 2);
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            let (jobs, out) = (job_rx.clone(), out_tx.clone());
            s.spawn(move || {
                let mut buf = Vec::new();
                for job in jobs {
                    let outcome = match probe_object(remote, &job.object, &mut buf) {
                        Ok(probed) => ObjectOutcome::Scanned(job, Box::new(probed)),
                        Err(e) => ObjectOutcome::Failed(job, e),
                    };
                    if out.send(vec![outcome]).is_err() {
                        break;
                    }
                }
            });
        }
        drop((job_rx, out_tx));
        s.spawn(move || {
            for job in todo {
                if job_tx.send(job).is_err() {
                    break;
                }
            }
        });
        write_in_batches(db, out_rx, progress, |tx, outcome, held| {
            write_object_outcome(tx, outcome, held, moved_from, moved, summary)
        })
    })
}

fn write_object_outcome(
    tx: &store::Transaction<'_>,
    outcome: ObjectOutcome,
    held: &mut store::HeldPictures,
    moved_from: &mut MoveCandidates,
    moved: &mut HashSet<i64>,
    summary: &mut ScanSummary,
) -> anyhow::Result<()> {
    match outcome {
        ObjectOutcome::Scanned(job, mut probed) => {
            let path = job.object.url.to_string();
            let was_moved = match job.existing {
                None => moved_from.take(tx, probed.fingerprints(), &path)?,
                Some(_) => None,
            };
            let track = &mut probed.track;
            let id = if let Some((id, _)) = was_moved {
                store::move_track(tx, id, track)?;
                moved.insert(id);
                summary.moved += 1;
                id
            } else if let Some(id) = job.existing {
                summary.updated += 1;
                store::write_scanned(tx, track, Some(id))?
            } else {
                summary.added += 1;
                store::add_scanned(tx, track, held)?
            };
            store::set_remote_version(tx, id, &job.object.version.etag)?;
            store::remove_failure(tx, &path)?;
        }
        ObjectOutcome::Failed(job, ProbeError::UnknownFormat | ProbeError::Empty)
            if !extension_in(&job.object.url.key, AUDIO)
                && !extension_in(&job.object.url.key, UNSERVED_AUDIO) =>
        {
            summary.skipped += 1;
        }
        ObjectOutcome::Failed(job, err) => {
            let path = job.object.url.to_string();
            let reason = err.to_string();
            tracing::info!("{path}: {reason}");
            store::record_failure(tx, &path, object_stamps(&job.object), &reason)?;
            summary.failed += 1;
            summary.failures.push((path, reason));
        }
    }
    Ok(())
}

/// An object's version as the stamps a track records: its size, and its
/// modification time as both times.
fn object_stamps(object: &ListedObject) -> Stamps {
    Stamps {
        size: object.version.size,
        mtime_ns: object.version.mtime_ns,
        ctime_ns: object.version.mtime_ns,
    }
}

/// Probes one object from its two end windows (and a ranged GET for any
/// read outside them), then keeps its first block, and the one its audio
/// starts in, in the disk cache: what players and indexers read first.
fn probe_object(
    remote: &Arc<Remote>,
    object: &ListedObject,
    buf: &mut Vec<u8>,
) -> Result<Probed, ProbeError> {
    let size = object.version.size;
    if size == 0 {
        return Err(ProbeError::Empty);
    }
    let src_object = FetchedObject::open(remote, object)?;
    let src = Source::new(&src_object as &dyn ReadAt, size);
    let p = probe(&src)?;
    let fingerprints = fingerprints(&src, p.audio_offset, p.audio_length, false, buf)?;
    src_object.keep_in_cache(p.audio_offset);
    let track = scanned_track(
        object.url.to_string(),
        object_stamps(object),
        p,
        fingerprints.blake3,
    );
    Ok(Probed { track, sha256: None })
}

/// The parts of an object fetched for a probe.
struct FetchedObject<'a> {
    remote: &'a Remote,
    object: &'a ListedObject,
    /// (offset, bytes), in the order fetched.
    windows: RefCell<Vec<(u64, Vec<u8>)>>,
}

impl<'a> FetchedObject<'a> {
    /// Fetches the object's ends: the whole object in one GET when short.
    fn open(remote: &'a Remote, object: &'a ListedObject) -> std::io::Result<FetchedObject<'a>> {
        let fetched = FetchedObject {
            remote,
            object,
            windows: RefCell::new(Vec::new()),
        };
        let size = object.version.size;
        if size <= HEAD_WINDOW + TAIL_WINDOW {
            fetched.fetch(0..size)?;
        } else {
            fetched.fetch(0..HEAD_WINDOW)?;
            fetched.fetch(size - TAIL_WINDOW..size)?;
        }
        Ok(fetched)
    }

    fn fetch(&self, range: std::ops::Range<u64>) -> std::io::Result<()> {
        let bytes = self
            .remote
            .fetch(&self.object.url, &self.object.version, range.clone())?;
        self.windows.borrow_mut().push((range.start, bytes));
        Ok(())
    }

    /// Copies `buf.len()` bytes at `offset` when one window holds them all.
    fn copy_from_windows(&self, buf: &mut [u8], offset: u64) -> bool {
        let windows = self.windows.borrow();
        let found = windows
            .iter()
            .find(|(at, bytes)| offset >= *at && offset + buf.len() as u64 <= at + bytes.len() as u64);
        match found {
            Some((at, bytes)) => {
                let from = (offset - at) as usize;
                buf.copy_from_slice(&bytes[from..from + buf.len()]);
                true
            }
            None => false,
        }
    }

    /// Puts what a fresh mount's first read of the file needs into the
    /// disk cache: the first block (an open checks the format there) and
    /// the blocks holding the audio's first 128 KiB (the kernel reads that
    /// far ahead of the first read). A block the windows do not hold whole
    /// (audio behind large pictures) is fetched for it.
    fn keep_in_cache(&self, audio_offset: u64) {
        let Some(cache) = self.remote.cache() else { return };
        let size = self.object.version.size;
        let audio_blocks =
            audio_offset / BLOCK..=((audio_offset + BLOCK).min(size).saturating_sub(1) / BLOCK);
        let mut blocks: Vec<u64> = std::iter::once(0).chain(audio_blocks).collect();
        blocks.dedup();
        for block in blocks {
            let start = block * BLOCK;
            let mut bytes = vec![0; (size - start.min(size)).min(BLOCK) as usize];
            if bytes.is_empty() {
                continue;
            }
            if !self.copy_from_windows(&mut bytes, start) {
                if self.fetch(start..start + bytes.len() as u64).is_err() {
                    continue;
                }
                self.copy_from_windows(&mut bytes, start);
            }
            cache.put(&self.object.url, &self.object.version, block, &bytes);
        }
    }
}

impl ReadAt for FetchedObject<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let size = self.object.version.size;
        let n = buf.len().min(size.saturating_sub(offset) as usize);
        let buf = &mut buf[..n];
        if n == 0 || self.copy_from_windows(buf, offset) {
            return Ok(n);
        }
        let end = (offset + (n as u64).max(EXTRA_WINDOW)).min(size);
        self.fetch(offset..end)?;
        self.copy_from_windows(buf, offset);
        Ok(n)
    }
}
