//! `retagfs backup --db DB FILE`: a consistent copy of the store, taken
//! while it is mounted and edited, that every command opens as it opens
//! the original (docs/usage.md, "Backing up the store").

use crate::args::BackupArgs;

pub fn run(a: BackupArgs) -> anyhow::Result<()> {
    // Read-only, as the copy is opened after: a backup never migrates the
    // store it keeps (one taken before an upgrade must stay as it was).
    crate::check_exists(&a.db)?;
    let store = retagfs_store::Store::open_read_only(&a.db)?;
    store.back_up_to(&a.file)?;
    let copy = retagfs_store::Store::open_read_only(&a.file)?;
    let size = std::fs::metadata(&a.file)?.len();
    eprintln!(
        "retagfs: backed up {} ({} tracks, {:.1} MiB) to {}",
        a.db.display(),
        copy.track_count()?,
        size as f64 / (1 << 20) as f64,
        a.file.display()
    );
    Ok(())
}
