//! `retagfs vacuum --db DB`: the store compacted in place while it is
//! mounted and edited ([`retagfs_store::Store::vacuum`]).

use std::time::{Duration, Instant};

use anyhow::bail;
use retagfs_store::ScanLock;

use crate::args::VacuumArgs;

pub fn run(a: VacuumArgs) -> anyhow::Result<()> {
    crate::check_exists(&a.db)?;
    // The lock first: a scan may replace the file it would open.
    let mut scan_lock = ScanLock::acquire_within(&a.db, Duration::ZERO)?;
    if scan_lock.is_none() {
        eprintln!(
            "retagfs: a scan of {} is running: waiting up to {}s for it to end",
            a.db.display(),
            a.wait
        );
        scan_lock = ScanLock::acquire_within(&a.db, Duration::from_secs(a.wait))?;
    }
    let Some(_scan_lock) = scan_lock else {
        bail!(
            "a scan of {} is still running after {}s: run `retagfs vacuum` again when it ends, or give --wait SECONDS",
            a.db.display(),
            a.wait
        );
    };
    let store = crate::open_existing(&a.db)?;
    let started = Instant::now();
    let compacted = store.vacuum()?;
    let seconds = started.elapsed().as_secs_f64();
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "before_bytes": compacted.before_bytes,
                "after_bytes": compacted.after_bytes,
                "seconds": seconds,
                "wal_emptied": compacted.wal_emptied,
            })
        );
    }
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    eprintln!(
        "retagfs: compacted {}: {:.1} MiB before, {:.1} MiB after, in {seconds:.1}s",
        a.db.display(),
        mib(compacted.before_bytes),
        mib(compacted.after_bytes),
    );
    if !compacted.wal_emptied {
        eprintln!(
            "retagfs: a reader held the write-ahead log; it is folded into the store at a later checkpoint"
        );
    }
    Ok(())
}
