//! `retagfs export`: the store as JSON, one object per track.

use serde::Serialize;

use retagfs_core::{load_tree, tree, Mode};
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

pub fn run(a: ExportArgs) -> anyhow::Result<()> {
    let config = a.view.config(Mode::Synthesis)?;
    let store = crate::open_existing(&a.db)?;
    let tracks = store.read_snapshot(|s| {
        let (tree, count) = load_tree(s, &config)?;
        let mut tracks = Vec::with_capacity(count);
        s.for_each_track(|b| {
            let mut tags: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (k, v) in b.tags {
                tags.entry(k).or_default().push(v);
            }
            tracks.push(TrackJson {
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
            })
        })?;
        Ok(tracks)
    })?;
    let stdout = std::io::stdout().lock();
    let mut w = std::io::BufWriter::new(stdout);
    serde_json::to_writer_pretty(&mut w, &tracks)?;
    use std::io::Write;
    writeln!(w)?;
    Ok(())
}
