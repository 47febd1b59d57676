//! The scan pipeline: walk the roots, probe changed files in parallel with
//! bounded reads, write results through one writer in batched transactions.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use crossbeam_channel::{bounded, Receiver, Sender};
use retagfs_formats::{probe, ProbeError, ReadAt, Source};
use retagfs_store::{self as store, ScannedPicture, ScannedTrack, Stamps, Store};
use sha2::{Digest, Sha256};

/// Results written per transaction.
const BATCH: usize = 512;
/// Bytes at each end of the audio that make up the content fingerprint.
const FINGERPRINT_SPAN: u64 = 64 * 1024;

/// File extensions that are never audio: skipped without a probe.
const NOT_AUDIO: &[&str] = &[
    "jpg", "jpeg", "png", "gif", "bmp", "webp", "tif", "tiff", "txt", "nfo", "cue", "log", "m3u", "m3u8",
    "pls", "pdf", "sfv", "md5", "ffp", "accurip", "json", "xml", "html", "htm", "url", "ini", "db", "lrc",
    "doc", "docx", "rtf", "zip", "rar", "7z", "torrent",
];
/// Extensions of the formats retagfs serves: such a file that fails to
/// probe is a failure, anything else that is not audio is skipped.
const AUDIO: &[&str] = &[
    "flac", "mp3", "m4a", "m4b", "mp4", "aac", "alac", "ogg", "oga", "opus", "wav", "wave",
];

/// Extensions of audio formats retagfs does not serve: such a file is
/// reported (the user will miss it in the mount), not silently skipped.
const UNSERVED_AUDIO: &[&str] = &[
    "aif", "aiff", "aifc", "wma", "ape", "wv", "mpc", "tta", "dsf", "dff", "ac3", "dts", "amr", "au", "ra",
    "mka", "spx", "caf",
];

pub struct ScanOptions {
    pub roots: Vec<PathBuf>,
    pub follow_symlinks: bool,
    pub jobs: usize,
    pub prune: bool,
}

/// What a scan did.
#[derive(Debug, Default, Clone)]
pub struct ScanSummary {
    pub added: u64,
    pub updated: u64,
    pub moved: u64,
    pub unchanged: u64,
    pub removed: u64,
    /// Rows whose backing file is gone, kept because `--prune` was not given.
    pub missing: u64,
    pub failed: u64,
    /// Files that are not audio (by content and name).
    pub skipped: u64,
    pub elapsed: Duration,
    /// (path, reason) of files that failed in this scan.
    pub failures: Vec<(String, String)>,
}

/// Progress reports for a progress bar.
pub enum Progress {
    /// The walk found this many files so far.
    Walking(u64),
    /// Probing starts: this many files need it.
    Probing(u64),
    /// One more file probed.
    Probed,
}

struct Job {
    path: String,
    stamps: Stamps,
    existing: Option<i64>,
}

enum Outcome {
    Scanned(Job, Box<ScannedTrack>),
    Failed(Job, ProbeError),
}

fn extension(path: &str) -> String {
    Path::new(path)
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default()
}

/// Whether the path's extension is one of `list`, in any case (compared
/// without allocating: this runs for every file of every re-scan).
fn extension_in(path: &str, list: &[&str]) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && list.iter().any(|l| l.eq_ignore_ascii_case(ext)))
}

/// Canonical, existing directories, or an error that says what to do.
fn check_roots(roots: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    roots
        .iter()
        .map(|r| {
            let c = std::fs::canonicalize(r).with_context(|| {
                format!(
                    "library directory {} does not exist or cannot be read",
                    r.display()
                )
            })?;
            if !c.is_dir() {
                bail!(
                    "{} is not a directory: give the folder that holds your music",
                    r.display()
                );
            }
            Ok(c)
        })
        .collect()
}

/// Probes one file and computes its content fingerprint.
fn probe_file(job: &Job) -> Result<ScannedTrack, ProbeError> {
    let file = File::open(&job.path)?;
    let src = Source::new(&file as &dyn ReadAt, job.stamps.size);
    let p = probe(&src)?;
    let fingerprint = fingerprint(&src, p.audio_offset, p.audio_length)?;
    Ok(ScannedTrack {
        backing_path: job.path.clone(),
        format: p.format,
        audio_offset: p.audio_offset,
        audio_length: p.audio_length,
        stamps: job.stamps,
        fingerprint: Some(fingerprint),
        tags: p.tags,
        pictures: dedup_pictures(p.pictures),
        flac_blocks: p.flac_blocks,
        parts: p.parts,
        passthrough: p.passthrough,
    })
}

/// A file may carry the same image twice (in two tag containers).
fn dedup_pictures(pictures: Vec<ScannedPicture>) -> Vec<ScannedPicture> {
    let mut seen = HashSet::new();
    pictures
        .into_iter()
        .filter(|p| seen.insert((p.picture_type, p.art.data.clone())))
        .collect()
}

fn fingerprint(src: &Source<'_>, offset: u64, len: u64) -> Result<[u8; 32], ProbeError> {
    let mut h = Sha256::new();
    h.update(len.to_le_bytes());
    let span = FINGERPRINT_SPAN.min(len);
    hash_range(&mut h, src, offset, span)?;
    hash_range(&mut h, src, offset + len - span, span)?;
    Ok(h.finalize().into())
}

/// Hashes `len` bytes at `offset` (fewer at the end of the file) through
/// a buffer on the stack: a fresh zeroed heap buffer per file cost as much
/// as the hashing (the allocator zeroes large blocks by unmapping them).
fn hash_range(h: &mut Sha256, src: &Source<'_>, offset: u64, len: u64) -> Result<(), ProbeError> {
    let mut chunk = [0u8; FINGERPRINT_SPAN as usize];
    let want = len.min(chunk.len() as u64) as usize;
    let n = src.read_upto_into(offset, &mut chunk[..want])?;
    h.update(&chunk[..n]);
    Ok(())
}

fn worker(jobs: Receiver<Job>, results: Sender<Outcome>) {
    for job in jobs {
        let outcome = match probe_file(&job) {
            Ok(t) => Outcome::Scanned(job, Box::new(t)),
            Err(e) => Outcome::Failed(job, e),
        };
        if results.send(outcome).is_err() {
            return;
        }
    }
}

/// Whether `path` is under one of the (canonical, UTF-8) roots: compared
/// as strings, which is many times cheaper than by path components.
fn under_roots(path: &str, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| {
        let r = r.to_string_lossy();
        let r = r.trim_end_matches('/');
        path.strip_prefix(r).is_some_and(|rest| rest.starts_with('/'))
    })
}

/// Scans `opts.roots` into the store.
/// Change-log entries a scan keeps; a mount further behind rebuilds.
const CHANGE_LOG_KEEP: i64 = 1_000_000;

pub fn scan(
    db: &mut Store,
    opts: &ScanOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> anyhow::Result<ScanSummary> {
    let started = Instant::now();
    let roots = check_roots(&opts.roots)?;
    let mut summary = ScanSummary::default();
    let wanted = |name: &str| !name.starts_with("._") && !extension_in(name, NOT_AUDIO);
    // The store's stamps are read while the walk runs.
    let (walked, known) = std::thread::scope(|s| {
        let walk = s.spawn(|| {
            crate::walk::walk(&roots, opts.follow_symlinks, opts.jobs, &wanted, &|n| {
                progress(Progress::Walking(n))
            })
        });
        let known = db
            .known_stamps()
            .and_then(|known| Ok((known, db.failure_stamps()?)));
        tracing::debug!("read stamps from the store at {:?}", started.elapsed());
        (walk.join().expect("walk panicked"), known)
    });
    let (known, mut known_failures) = known?;
    tracing::debug!("walked {} files at {:?}", walked.files.len(), started.elapsed());
    summary.skipped += walked.skipped;
    summary.failed += walked.failures.len() as u64;
    summary.failures.extend(walked.failures);

    // Each file found marks its row seen: the rows left unseen are gone.
    let mut seen = vec![false; known.len()];
    let mut todo = Vec::new();
    for (path, stamps) in walked.files {
        let failure = (!known_failures.is_empty())
            .then(|| known_failures.remove(&path))
            .flatten();
        match known.find(&path) {
            Some(row) => {
                seen[row] = true;
                if known.stamps(row) == stamps {
                    summary.unchanged += 1;
                } else {
                    todo.push(Job {
                        path,
                        stamps,
                        existing: Some(known.id(row)),
                    });
                }
            }
            None if failure == Some(stamps) => summary.failed += 1,
            None => todo.push(Job {
                path,
                stamps,
                existing: None,
            }),
        }
    }
    let mut missing: Vec<i64> = (0..known.len())
        .filter(|&row| !seen[row] && under_roots(known.path(row), &roots))
        .map(|row| known.id(row))
        .collect();
    missing.sort_unstable();
    let mut moved_from = db.fingerprints(&missing)?;
    let gone_failures: Vec<String> = known_failures
        .into_keys()
        .filter(|p| under_roots(p, &roots))
        .collect();
    progress(Progress::Probing(todo.len() as u64));
    tracing::debug!("{} files to probe at {:?}", todo.len(), started.elapsed());

    let mut moved = HashSet::new();
    let (job_tx, job_rx) = bounded::<Job>(opts.jobs * 4);
    let (res_tx, res_rx) = bounded::<Outcome>(opts.jobs * 4);
    let write_result = std::thread::scope(|s| -> anyhow::Result<()> {
        for _ in 0..opts.jobs.max(1) {
            let (jobs, results) = (job_rx.clone(), res_tx.clone());
            s.spawn(move || worker(jobs, results));
        }
        drop((job_rx, res_tx));
        s.spawn(move || {
            for job in todo {
                if job_tx.send(job).is_err() {
                    return;
                }
            }
        });
        write_results(db, res_rx, &mut moved_from, &mut moved, &mut summary, progress)
    });
    write_result?;

    tracing::debug!("probed and written at {:?}", started.elapsed());
    let still_missing: Vec<i64> = missing.into_iter().filter(|id| !moved.contains(id)).collect();
    let tx = db.write()?;
    for path in &gone_failures {
        store::remove_failure(&tx, path)?;
    }
    if opts.prune {
        for &id in &still_missing {
            store::remove_track(&tx, id)?;
        }
        store::delete_orphan_art(&tx)?;
        summary.removed = still_missing.len() as u64;
    } else {
        summary.missing = still_missing.len() as u64;
    }
    store::trim_change_log(&tx, CHANGE_LOG_KEEP)?;
    tx.commit()?;
    summary.elapsed = started.elapsed();
    Ok(summary)
}

/// The single writer: applies results in batched transactions.
fn write_results(
    db: &mut Store,
    results: Receiver<Outcome>,
    moved_from: &mut HashMap<[u8; 32], i64>,
    moved: &mut HashSet<i64>,
    summary: &mut ScanSummary,
    progress: &dyn Fn(Progress),
) -> anyhow::Result<()> {
    let mut batch = Vec::with_capacity(BATCH);
    let mut done = false;
    while !done {
        match results.recv() {
            Ok(o) => batch.push(o),
            Err(_) => done = true,
        }
        // Drain what is ready without waiting, up to a batch.
        while batch.len() < BATCH {
            match results.try_recv() {
                Ok(o) => batch.push(o),
                Err(_) => break,
            }
        }
        if batch.is_empty() {
            continue;
        }
        let tx = db.write()?;
        for outcome in batch.drain(..) {
            progress(Progress::Probed);
            match outcome {
                Outcome::Scanned(job, track) => {
                    let was_moved = job
                        .existing
                        .is_none()
                        .then(|| track.fingerprint.and_then(|fp| moved_from.remove(&fp)))
                        .flatten();
                    if let Some(id) = was_moved {
                        store::move_track(&tx, id, &track)?;
                        moved.insert(id);
                        summary.moved += 1;
                    } else {
                        store::write_scanned(&tx, &track, job.existing)?;
                        if job.existing.is_some() {
                            summary.updated += 1;
                        } else {
                            summary.added += 1;
                        }
                    }
                }
                Outcome::Failed(job, ProbeError::UnknownFormat | ProbeError::Empty)
                    if !extension_in(&job.path, AUDIO) && !extension_in(&job.path, UNSERVED_AUDIO) =>
                {
                    summary.skipped += 1;
                }
                Outcome::Failed(job, err) => {
                    let reason = match err {
                        // Audio the user will look for in the mount: say why it is not there.
                        ProbeError::UnknownFormat if extension_in(&job.path, UNSERVED_AUDIO) => {
                            format!(
                                "unsupported audio format (.{}): retagfs serves FLAC, MP3, MP4/M4A, \
                                 Ogg Vorbis, Ogg Opus and WAV",
                                extension(&job.path)
                            )
                        }
                        err => err.to_string(),
                    };
                    // A track that was fine before keeps its row (and its
                    // edited tags); its changed stamps keep it from being served.
                    tracing::info!("{}: {reason}", job.path);
                    store::record_failure(&tx, &job.path, job.stamps, &reason)?;
                    summary.failed += 1;
                    summary.failures.push((job.path, reason));
                }
            }
        }
        tx.commit()?;
    }
    Ok(())
}
