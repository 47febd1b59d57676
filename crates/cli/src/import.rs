//! `retagfs import`: bulk tag edits from JSON in the shape `export`
//! prints, checked as a whole and applied in one transaction.

use std::io::Read;

use anyhow::Context;
use retagfs_core::import::{self, ImportError};
use retagfs_store as store;

use crate::args::ImportArgs;
use crate::UsageError;

pub fn run(a: ImportArgs) -> anyhow::Result<()> {
    let text = read_input(&a.file)?;
    let mut db = crate::open_existing(&a.db)?;
    // One read transaction: every entry is checked against one state of
    // the store (and no lock is taken and dropped per query).
    let changes = db
        .read_snapshot(|s| Ok(import::plan(s, &text)))
        .map_err(anyhow::Error::from)?;
    let changes = changes.map_err(|e| match e {
        ImportError::Invalid { .. } => anyhow::Error::new(UsageError(e.to_string())),
        ImportError::Store(e) => e.into(),
    })?;
    for c in &changes {
        println!(
            "track {} ({}): {}: {} -> {}",
            c.track.id,
            c.track.backing_path,
            c.key,
            serde_json::to_string(&c.old)?,
            serde_json::to_string(&c.new)?
        );
    }
    let tracks: std::collections::BTreeSet<i64> = changes.iter().map(|c| c.track.id).collect();
    if a.dry_run {
        eprintln!(
            "dry run: {} change(s) on {} track(s), nothing written",
            changes.len(),
            tracks.len()
        );
        return Ok(());
    }
    let tx = db.write()?;
    let mut edited = crate::edit_transaction::EditTransaction::begin(&tx)?;
    for c in &changes {
        edited.note(&tx, c.track.id)?;
        store::set_tag(&tx, c.track.id, &c.key, &c.new)?;
    }
    edited.finish(&tx)?;
    tx.commit().context("committing the import")?;
    eprintln!("import: {} change(s) on {} track(s)", changes.len(), tracks.len());
    Ok(())
}

fn read_input(file: &std::path::Path) -> anyhow::Result<String> {
    let mut text = String::new();
    if file.as_os_str() == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading standard input")?;
    } else {
        text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    }
    Ok(text)
}
