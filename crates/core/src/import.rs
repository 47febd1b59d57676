//! Bulk tag edits from JSON in the shape `retagfs export` prints: every
//! entry is checked (its line and reason on the first problem) before
//! anything is applied.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;

use retagfs_formats::tags::keys;
use retagfs_store::{Store, StoreError, TrackRow};

/// One entry: a track and the keys to replace. Other fields of `export`
/// (`path`, `format`, `duration`, `art`) are accepted and ignored.
#[derive(Deserialize)]
struct Entry {
    id: Option<i64>,
    backing_path: Option<String>,
    #[serde(default)]
    tags: BTreeMap<String, serde_json::Value>,
}

/// A key whose values change on a track.
#[derive(Debug)]
pub struct Change {
    pub track: TrackRow,
    pub key: String,
    pub old: Vec<String>,
    pub new: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The input is wrong (the caller's mistake): nothing was applied.
    #[error("line {line}: {why}")]
    Invalid { line: usize, why: String },
    #[error(transparent)]
    Store(#[from] StoreError),
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

/// Every change the input asks for, or the first problem with it: nothing
/// is applied unless all of it is valid.
pub fn plan(db: &Store, text: &str) -> Result<Vec<Change>, ImportError> {
    let entries: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| ImportError::Invalid {
        line: e.line(),
        why: format!("{e} (expected a JSON array like `export` prints)"),
    })?;
    let mut changes = Vec::new();
    for raw in entries {
        // Counted only for an error: counting for every entry made an
        // import quadratic in its length.
        let bad = |why: String| ImportError::Invalid {
            line: line_of(text, raw.get()),
            why,
        };
        let entry: Entry = serde_json::from_str(raw.get()).map_err(|e| bad(e.to_string()))?;
        let by_id = match entry.id {
            Some(id) => db.track(id)?,
            None => None,
        };
        let by_path = entry
            .backing_path
            .as_deref()
            .and_then(|p| db.resolve_track(p).ok());
        // Either one alone will do (a file moved since the export, an id
        // of another store); two different tracks would put one file's
        // tags on another.
        let track = match (by_id, by_path) {
            (Some(a), Some(b)) if a.id != b.id => {
                return Err(bad(format!(
                    "id {} is {} in this store, but backing_path names track {}: an export of \
                     another store? Remove the `id` fields to match tracks by path",
                    a.id, a.backing_path, b.id
                )))
            }
            (Some(t), _) | (None, Some(t)) => t,
            (None, None) => {
                return Err(bad(match (entry.id, &entry.backing_path) {
                    (Some(id), None) => format!("no track with id {id}"),
                    (None, Some(p)) => format!("no track with backing_path {p:?}"),
                    (Some(id), Some(p)) => format!("no track with id {id} or backing_path {p:?}"),
                    (None, None) => "an entry needs an `id` or a `backing_path`".into(),
                }))
            }
        };
        let current = db.tags(track.id)?;
        for (raw_key, values_json) in entry.tags {
            let key = keys::canonical_key(&raw_key)
                .ok_or_else(|| bad(format!("{raw_key:?} is not a valid tag key")))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Tracks 1 (FLAC, titled "A") and 2 (MP3, untagged).
    fn store_of_two_tracks(dir: &std::path::Path) -> Store {
        let mut store = Store::open(&dir.join("s.db")).unwrap();
        let tx = store.write().unwrap();
        for (id, path, format) in [(1, "/a.flac", "flac"), (2, "/b.mp3", "mp3")] {
            tx.execute(
                "INSERT INTO tracks (id, backing_path, format, audio_offset, audio_length, file_size, \
                 mtime_ns, ctime_ns, scanned_at) VALUES (?1, ?2, ?3, 0, 0, 0, 0, 0, 0)",
                (id, path, format),
            )
            .unwrap();
        }
        retagfs_store::set_tag(&tx, 1, "title", &["A".to_string()]).unwrap();
        tx.commit().unwrap();
        store
    }

    #[test]
    fn changes_are_planned_and_a_bad_entry_is_named_by_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let db = store_of_two_tracks(dir.path());
        let good = "[\n  {\"id\": 1, \"tags\": {\"title\": \"B\"}},\n  {\"id\": 2, \"tags\": {\"genre\": [\"Jazz\"]}}\n]";
        let planned = plan(&db, good).unwrap();
        let summary: Vec<_> = planned
            .iter()
            .map(|c| (c.track.id, c.key.as_str(), c.new.clone()))
            .collect();
        assert_eq!(
            summary,
            [
                (1, "title", vec!["B".to_string()]),
                (2, "genre", vec!["Jazz".to_string()])
            ]
        );

        let bad = "[\n  {\"id\": 1, \"tags\": {}},\n\n  {\"id\": 9, \"tags\": {}}\n]";
        let err = plan(&db, bad).unwrap_err().to_string();
        assert_eq!(err, "line 4: no track with id 9");
    }
}
