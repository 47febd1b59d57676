//! `retagfs export`: the store as JSON, one object per track.

use serde::Serialize;

use retagfs_core::{tree, Mode, Snapshot};
use std::collections::BTreeMap;

use crate::args::ExportArgs;

#[derive(Serialize)]
struct ArtJson<'a> {
    sha256: &'a str,
    mime: &'a str,
    picture_type: u8,
}

#[derive(Serialize)]
struct TrackJson<'a> {
    id: i64,
    backing_path: &'a str,
    path: String,
    format: &'static str,
    tags: BTreeMap<&'a str, Vec<&'a str>>,
    art: Vec<ArtJson<'a>>,
}

pub fn run(a: ExportArgs) -> anyhow::Result<()> {
    let config = a.view.config(Mode::Synthesis)?;
    let store = crate::open_existing(&a.db)?;
    let snapshot = Snapshot::load(&store)?;
    let tree = snapshot.tree(&config);
    let tracks: Vec<TrackJson> = snapshot
        .tracks
        .iter()
        .map(|t| {
            let mut tags: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for (k, v) in snapshot.tags(t.id) {
                tags.entry(k).or_default().push(v);
            }
            TrackJson {
                id: t.id,
                backing_path: &t.backing_path,
                path: tree.path(tree::file_ino(t.id)).unwrap_or_default(),
                format: t.format.as_str(),
                tags,
                art: snapshot
                    .art(t.id)
                    .iter()
                    .map(|l| ArtJson {
                        sha256: &l.sha256,
                        mime: &l.mime,
                        picture_type: l.picture_type,
                    })
                    .collect(),
            }
        })
        .collect();
    let stdout = std::io::stdout().lock();
    let mut w = std::io::BufWriter::new(stdout);
    serde_json::to_writer_pretty(&mut w, &tracks)?;
    use std::io::Write;
    writeln!(w)?;
    Ok(())
}
