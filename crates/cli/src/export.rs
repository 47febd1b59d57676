//! `retagfs export`: the store as JSON, one object per track.

use std::io::Write;

use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;

use retagfs_core::view::tree;
use retagfs_core::{load_tree, Mode};
use retagfs_store::TrackBundle;
use std::collections::BTreeMap;

use crate::args::ExportArgs;

#[derive(Serialize)]
struct ArtJson {
    sha256: String,
    mime: String,
    picture_type: u8,
}

#[derive(Serialize)]
struct TrackJson {
    id: i64,
    backing_path: String,
    path: String,
    format: &'static str,
    tags: BTreeMap<String, Vec<String>>,
    art: Vec<ArtJson>,
}

/// Writes the array one track at a time as the store is read: a list of
/// every track would hold the whole library's tags at once.
pub fn run(a: ExportArgs) -> anyhow::Result<()> {
    let config = a.view.config(Mode::Synthesis)?;
    let store = crate::open_existing(&a.db)?;
    let mut json = serde_json::Serializer::pretty(std::io::BufWriter::new(std::io::stdout().lock()));
    // The store's reader takes no fallible callback: the first write error
    // is kept, and nothing more is written after it.
    let mut failed: Option<serde_json::Error> = None;
    store.read_snapshot(|s| {
        let (tree, count) = load_tree(s, &config)?;
        let mut seq = match (&mut json).serialize_seq(Some(count)) {
            Ok(seq) => seq,
            Err(e) => {
                failed = Some(e);
                return Ok(());
            }
        };
        s.for_each_track(|b| {
            if failed.is_none() {
                failed = seq.serialize_element(&track_json(&tree, b)).err();
            }
        })?;
        if failed.is_none() {
            failed = seq.end().err();
        }
        Ok(())
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    let mut out = json.into_inner();
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

fn track_json(tree: &tree::Tree, b: TrackBundle) -> TrackJson {
    let mut tags: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in b.tags {
        tags.entry(k).or_default().push(v);
    }
    TrackJson {
        id: b.track.id,
        path: tree.path(tree::file_ino(b.track.id)).unwrap_or_default(),
        backing_path: b.track.backing_path,
        format: b.track.format.as_str(),
        tags,
        art: b
            .art
            .into_iter()
            .map(|l| ArtJson {
                sha256: l.sha256,
                mime: l.mime,
                picture_type: l.picture_type,
            })
            .collect(),
    }
}
