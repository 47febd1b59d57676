//! `retagfs scan`.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

use retagfs_core::scan::objects::{scan_objects, ObjectScanOptions, OBJECT_JOBS};
use retagfs_core::scan::{open_store, scan, Progress, ScanOptions, ScanSummary, Threads};
use retagfs_remote::{is_remote_path, ObjectUrl};

use crate::args::ScanArgs;

/// Failures listed by name at the end of a scan (the rest are counted).
const LISTED_FAILURES: usize = 20;

pub fn run(a: ScanArgs) -> anyhow::Result<()> {
    let (objects, folders) = split_roots(&a.dirs)?;
    let mut store = open_store(&a.db)?;
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::hidden()
    };
    let on_progress = |p: Progress| match p {
        Progress::Walking(n) => bar.set_message(format!("walking: {n} files found")),
        Progress::Listing(n) => bar.set_message(format!("listing: {n} objects found")),
        Progress::Probing(total) => {
            // The walk is over and its lists merged: what it freed goes
            // back to the system now rather than over the next second,
            // while probing (peak RSS of a first scan of 100k files).
            crate::release_free_memory();
            bar.set_length(total);
            bar.set_style(
                ProgressStyle::with_template("{bar:40} {pos}/{len} files  {per_sec}  ETA {eta}  {msg}")
                    .expect("valid template"),
            );
            bar.set_message("");
        }
        Progress::Probed => bar.inc(1),
    };
    let mut summary = ScanSummary::default();
    if !folders.is_empty() {
        let threads = a
            .jobs
            .map_or_else(|| Threads::default_for(&folders), Threads::same);
        let walk = threads.walk;
        let on_disk = if walk.on_disk > walk.start {
            format!(" ({} once it waits on the disk)", walk.on_disk)
        } else {
            String::new()
        };
        tracing::info!(
            "walking on {} threads{on_disk}, probing on {}",
            walk.start,
            threads.probe
        );
        let opts = ScanOptions {
            roots: folders,
            follow_symlinks: a.follow_symlinks,
            threads,
            prune: a.prune,
            full: a.full,
        };
        summary = scan(&mut store, &opts, &on_progress)?;
    }
    if !objects.is_empty() {
        a.remote.apply();
        let remote = retagfs_core::remote()?;
        let opts = ObjectScanOptions {
            roots: objects,
            prune: a.prune,
            jobs: a.jobs.unwrap_or(OBJECT_JOBS),
        };
        bar.reset();
        bar.set_style(ProgressStyle::default_spinner());
        let of_objects = scan_objects(&mut store, &remote, &opts, &on_progress)?;
        summary.add(of_objects);
    }
    bar.finish_and_clear();
    report(&summary, a.json);
    Ok(())
}

/// The roots given, as buckets and local folders; a malformed `s3://`
/// root is a usage error.
fn split_roots(roots: &[PathBuf]) -> anyhow::Result<(Vec<ObjectUrl>, Vec<PathBuf>)> {
    let (mut objects, mut folders) = (Vec::new(), Vec::new());
    for root in roots {
        let text = root.to_string_lossy();
        if is_remote_path(&text) {
            objects.push(ObjectUrl::parse(&text).map_err(|why| anyhow::anyhow!("{why}"))?);
        } else {
            folders.push(root.clone());
        }
    }
    Ok((objects, folders))
}

fn report(s: &ScanSummary, json: bool) {
    if json {
        let failures: Vec<_> = s
            .failures
            .iter()
            .map(|(path, reason)| serde_json::json!({"path": path, "reason": reason}))
            .collect();
        let out = serde_json::json!({
            "added": s.added, "updated": s.updated, "moved": s.moved, "unchanged": s.unchanged,
            "removed": s.removed, "missing": s.missing, "unreadable": s.unreadable,
            "failed": s.failed, "skipped": s.skipped,
            "elapsed_s": s.elapsed.as_secs_f64(), "failures": failures,
        });
        println!("{out}");
    }
    for (path, reason) in s.failures.iter().take(LISTED_FAILURES) {
        // As a person reads it (bytes of a name that are not UTF-8 as
        // Latin-1); `--json` has the store's text.
        eprintln!("failed: {}: {reason}", retagfs_store::text_for_display(path));
    }
    if s.failures.len() > LISTED_FAILURES {
        eprintln!(
            "... and {} more failures: run the scan again with --json to list every one",
            s.failures.len() - LISTED_FAILURES
        );
    }
    if s.unreadable > 0 {
        eprintln!(
            "{} tracks kept as they are: their file, or a folder above it, could not be read (see above)",
            s.unreadable
        );
    }
    if s.missing > 0 {
        eprintln!(
            "{} tracks have no backing file any more; run the scan with --prune to remove them",
            s.missing
        );
    }
    eprintln!(
        "scan: {} added, {} updated, {} moved, {} unchanged, {} removed, {} failed, {} skipped (not audio) in {:.2} s",
        s.added,
        s.updated,
        s.moved,
        s.unchanged,
        s.removed,
        s.failed,
        s.skipped,
        s.elapsed.as_secs_f64()
    );
}
