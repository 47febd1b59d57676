//! The single writer: it takes the workers' results and writes them in
//! batched transactions.

use super::*;

/// Results written per transaction, at most (and those that came with
/// the last).
pub(super) const BATCH: usize = 512;
/// How long the writer gathers results before it commits what it has.
pub(super) const GATHER: Duration = Duration::from_millis(50);
/// Probes the files on `jobs` threads while this one writes the results;
/// `sha256` as for [`worker`].
pub(super) fn probe_and_write<'a>(
    db: &mut Store,
    jobs: usize,
    sha256: bool,
    todo: Vec<Job<'a>>,
    results: &mut Results<'_>,
    progress: &dyn Fn(Progress),
) -> anyhow::Result<()> {
    let (res_tx, res_rx) = bounded::<Vec<Outcome<'a>>>(jobs);
    let todo = Jobs {
        todo: &todo,
        next: AtomicUsize::new(0),
    };
    std::thread::scope(|s| {
        let bytes_per_send = RESULT_BYTES_UNSENT / jobs.max(1);
        for _ in 0..jobs.max(1) {
            let (todo, results) = (&todo, res_tx.clone());
            s.spawn(move || worker(todo, results, sha256, bytes_per_send));
        }
        drop(res_tx);
        write_results(db, res_rx, results, progress)
    })
}

/// What the writer updates besides the store.
pub(super) struct Results<'a> {
    /// Tracks whose files are gone: a new file with one's fingerprint is
    /// that track, moved.
    pub(super) moved_from: &'a mut MoveCandidates,
    pub(super) moved: &'a mut HashSet<i64>,
    /// What each file of the walk turned out to be.
    pub(super) kinds: &'a mut [Option<EntryKind>],
    pub(super) summary: &'a mut ScanSummary,
}

/// The single writer: applies results in batched transactions. Each
/// result is written as it comes (while the probes go on), and the
/// transaction is committed once it has a batch, holds
/// [`HELD_PICTURE_BYTES`] of new pictures, or has gathered for a while:
/// each commit rewrites the pages it touched into the WAL, and results
/// come a few at a time. New pictures are stored at the batch's end
/// ([`store::HeldPictures`]); held rows instead would leave the probes
/// waiting on the writer's burst (docs/benchmarks-log.md, "Stores with
/// covers").
pub(super) fn write_results(
    db: &mut Store,
    results: Receiver<Vec<Outcome<'_>>>,
    out: &mut Results<'_>,
    progress: &dyn Fn(Progress),
) -> anyhow::Result<()> {
    write_in_batches(db, results, progress, |tx, outcome, held| {
        write_outcome(tx, outcome, held, out)
    })
}

/// Writes what the probes send with `write`, in batched transactions as
/// [`write_results`] says; each result counts as one file probed.
pub(super) fn write_in_batches<T>(
    db: &mut Store,
    results: Receiver<Vec<T>>,
    progress: &dyn Fn(Progress),
    mut write: impl FnMut(&store::Transaction<'_>, T, &mut store::HeldPictures) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut held = store::HeldPictures::default();
    while let Ok(first) = results.recv() {
        let tx = db.write()?;
        let deadline = Instant::now() + GATHER;
        let mut next = Some(first);
        let mut written = 0;
        while let Some(outcomes) = next.take() {
            for outcome in outcomes {
                progress(Progress::Probed);
                write(&tx, outcome, &mut held)?;
                written += 1;
            }
            if written < BATCH && held.bytes() < HELD_PICTURE_BYTES {
                next = results.recv_deadline(deadline).ok();
            }
        }
        held.store(&tx)?;
        tx.commit()?;
    }
    Ok(())
}

/// Bytes of new pictures a batch holds at most before it stores them.
pub(super) const HELD_PICTURE_BYTES: usize = 4 << 20;

/// Writes one probe's result; the pictures of a new track go to `held`.
pub(super) fn write_outcome(
    tx: &store::Transaction<'_>,
    outcome: Outcome<'_>,
    held: &mut store::HeldPictures,
    out: &mut Results<'_>,
) -> anyhow::Result<()> {
    let Results {
        moved_from,
        moved,
        kinds,
        summary,
    } = out;
    match outcome {
        Outcome::Scanned(job, mut probed) => {
            kinds[job.index] = Some(EntryKind::Track);
            let was_moved = match job.existing {
                None => moved_from.take(tx, probed.fingerprints(), job.path)?,
                Some(_) => None,
            };
            let track = &mut probed.track;
            if let Some((id, old)) = was_moved {
                if !under_roots(&old, &moved_from.roots) {
                    // Its folder's record (from a scan of that
                    // root) no longer tells the truth: a file
                    // there is no longer a track.
                    if let Some((folder, _)) = old.rsplit_once('/') {
                        store::forget_scanned_dir(tx, folder)?;
                    }
                }
                store::move_track(tx, id, track)?;
                moved.insert(id);
                summary.moved += 1;
            } else {
                match job.existing {
                    Some(id) => {
                        store::write_scanned(tx, track, Some(id))?;
                        summary.updated += 1;
                    }
                    None => {
                        store::add_scanned(tx, track, held)?;
                        summary.added += 1;
                    }
                }
            }
        }
        Outcome::Failed(job, ProbeError::UnknownFormat | ProbeError::Empty)
            if !extension_in(job.path, AUDIO) && !extension_in(job.path, UNSERVED_AUDIO) =>
        {
            kinds[job.index] = Some(EntryKind::NotAudio);
            summary.skipped += 1;
        }
        Outcome::Failed(job, err) => {
            let reason = match err {
                // Audio the user will look for in the mount: say why it is not there.
                ProbeError::UnknownFormat if extension_in(job.path, UNSERVED_AUDIO) => {
                    format!(
                        "unsupported audio format (.{}): retagfs serves FLAC, MP3, MP4/M4A, \
                         Ogg Vorbis, Ogg Opus and WAV",
                        extension(job.path)
                    )
                }
                err => err.to_string(),
            };
            // A track that was fine before keeps its row (and its
            // edited tags); its changed stamps keep it from being served.
            tracing::info!("{}: {reason}", job.path);
            store::record_failure(tx, job.path, job.stamps, &reason)?;
            kinds[job.index] = Some(EntryKind::Failure);
            summary.failed += 1;
            summary.failures.push((job.path.to_string(), reason));
        }
    }
    Ok(())
}
