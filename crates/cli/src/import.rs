//! `retagfs import`: bulk tag edits from JSON in the shape `export`
//! prints, checked as a whole and applied in one transaction.

use std::collections::BTreeMap;
use std::io::Read;

use anyhow::Context;
use serde::Deserialize;
use serde_json::value::RawValue;

use retagfs_store::{self as store, Store, TrackRow};

use crate::args::ImportArgs;
use crate::UsageError;

/// One entry: a track and the keys to replace. Other fields of `export`
/// (`path`, `format`, `art`) are accepted and ignored.
#[derive(Deserialize)]
struct Entry {
    id: Option<i64>,
    backing_path: Option<String>,
    #[serde(default)]
    tags: BTreeMap<String, serde_json::Value>,
}

/// A key's new values: one string, a list of strings, or null (remove).
fn values(key: &str, v: serde_json::Value) -> Result<Vec<String>, String> {
    use serde_json::Value;
    let wrong = || format!("tags.{key}: expected a string, a list of strings or null");
    match v {
        Value::Null => Ok(Vec::new()),
        Value::String(s) => Ok(vec![s]),
        Value::Array(items) => items
            .into_iter()
            .map(|i| match i {
                Value::String(s) => Ok(s),
                _ => Err(wrong()),
            })
            .collect(),
        _ => Err(wrong()),
    }
}

/// A key whose values change on a track.
struct Change {
    track: TrackRow,
    key: String,
    old: Vec<String>,
    new: Vec<String>,
}

pub fn run(a: ImportArgs) -> anyhow::Result<()> {
    let text = read_input(&a.file)?;
    let mut db = crate::open_existing(&a.db)?;
    let changes = plan(&db, &text)?;
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
    for c in &changes {
        store::set_tag(&tx, c.track.id, &c.key, &c.new)?;
    }
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

/// Every change the input asks for, or the first problem with it (its line
/// and reason): nothing is applied unless all of it is valid.
fn plan(db: &Store, text: &str) -> anyhow::Result<Vec<Change>> {
    let entries: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| {
        UsageError(format!(
            "line {}: {e} (expected a JSON array like `export` prints)",
            e.line()
        ))
    })?;
    let mut changes = Vec::new();
    for raw in entries {
        let line = line_of(text, raw.get());
        let bad = |why: String| UsageError(format!("line {line}: {why}"));
        let entry: Entry = serde_json::from_str(raw.get()).map_err(|e| bad(e.to_string()))?;
        let track = match (entry.id, &entry.backing_path) {
            (Some(id), _) => db
                .track(id)?
                .ok_or_else(|| bad(format!("no track with id {id}")))?,
            (None, Some(p)) => db
                .resolve_track(p)
                .map_err(|_| bad(format!("no track with backing_path {p:?}")))?,
            (None, None) => return Err(bad("an entry needs an `id` or a `backing_path`".into()).into()),
        };
        let current = db.tags(track.id)?;
        for (raw_key, values_json) in entry.tags {
            let key = crate::edit::key(&raw_key).map_err(|e| bad(e.0))?;
            let new = values(&raw_key, values_json).map_err(bad)?;
            let old: Vec<String> = current
                .iter()
                .filter(|(k, _)| *k == key)
                .map(|(_, v)| v.clone())
                .collect();
            if old != new {
                changes.push(Change {
                    track: track.clone(),
                    key,
                    old,
                    new,
                });
            }
        }
    }
    Ok(changes)
}

/// The 1-based line of `part`, a slice of `text`.
fn line_of(text: &str, part: &str) -> usize {
    let offset = (part.as_ptr() as usize)
        .saturating_sub(text.as_ptr() as usize)
        .min(text.len());
    text[..offset].matches('\n').count() + 1
}
