//! `retagfs export`: the store as JSON, one object per track.

use std::io::Write;

use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;

use retagfs_core::view::tree;
use retagfs_core::{load_tree, Mode};
use retagfs_store::{Store, TrackBundle};
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
    /// Seconds it plays; null when unknown.
    duration: Option<f64>,
    tags: BTreeMap<String, Vec<String>>,
    art: Vec<ArtJson>,
}

pub fn run(a: ExportArgs) -> anyhow::Result<()> {
    let config = a.view.config(Mode::Synthesis)?;
    print_tracks(&a.db, &config, Output::Json, |s, f| s.for_each_track(f))?;
    Ok(())
}

/// How [`print_tracks`] prints.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// An array of objects, as `export` prints.
    Json,
    /// Each track's path in the view, one per line.
    ViewPaths,
    /// Each track's backing file (or object), one per line: no view is
    /// built.
    LibraryPaths,
    /// Each track's id, one per line: no view is built.
    Ids,
}

/// Prints the tracks that `tracks` gives, as the store is read: a list of
/// every track would hold the whole library's tags at once. Returns how
/// many were printed.
pub fn print_tracks(
    db: &std::path::Path,
    config: &retagfs_core::ViewConfig,
    output: Output,
    tracks: impl FnOnce(&Store, &mut dyn FnMut(TrackBundle)) -> retagfs_store::Result<()>,
) -> anyhow::Result<u64> {
    let store = crate::open_existing(db)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    // The store's reader takes no fallible callback: the first write error
    // is kept, and nothing more is written after it.
    let mut failed: Option<std::io::Error> = None;
    let mut printed = 0;
    store.read_snapshot(|s| {
        let tree = match output {
            Output::Json | Output::ViewPaths => Some(load_tree(s, config)?.0),
            Output::LibraryPaths | Output::Ids => None,
        };
        let path_of = |b: &TrackBundle| {
            tree.as_ref()
                .and_then(|t| t.path(tree::file_ino(b.track.id)))
                .unwrap_or_default()
        };
        if output != Output::Json {
            return tracks(s, &mut |b| {
                if failed.is_none() {
                    printed += 1;
                    failed = match output {
                        Output::LibraryPaths => writeln!(out, "{}", b.track.backing_path),
                        Output::Ids => writeln!(out, "{}", b.track.id),
                        _ => writeln!(out, "{}", path_of(&b)),
                    }
                    .err();
                }
            });
        }
        let mut json = serde_json::Serializer::pretty(&mut out);
        let mut seq = match json.serialize_seq(None) {
            Ok(seq) => seq,
            Err(e) => {
                failed = Some(e.into());
                return Ok(());
            }
        };
        tracks(s, &mut |b| {
            if failed.is_none() {
                printed += 1;
                let path = path_of(&b);
                failed = seq.serialize_element(&track_json(path, b)).err().map(Into::into);
            }
        })?;
        if failed.is_none() {
            failed = seq.end().err().map(Into::into);
        }
        if failed.is_none() {
            failed = writeln!(out).err();
        }
        Ok(())
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    out.flush()?;
    Ok(printed)
}

fn track_json(path: String, b: TrackBundle) -> TrackJson {
    let mut tags: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in b.tags {
        tags.entry(k).or_default().push(v);
    }
    TrackJson {
        id: b.track.id,
        path,
        backing_path: b.track.backing_path,
        format: b.track.format.as_str(),
        duration: b.track.duration_ms.map(|ms| ms as f64 / 1000.0),
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
