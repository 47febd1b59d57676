//! `retagfs query`: the tracks that match a query (docs/query.md).

use std::time::{SystemTime, UNIX_EPOCH};

use retagfs_core::query::{Query, QueryTrack};
use retagfs_core::Mode;

use crate::args::QueryArgs;
use crate::export::{print_tracks, Output};
use crate::UsageError;

pub fn run(a: QueryArgs) -> anyhow::Result<()> {
    let text = a.query.join(" ");
    let query = parse(&text)?;
    let config = a.view.config(Mode::Synthesis)?;
    let output = if a.json { Output::Json } else { Output::Paths };
    let printed = print_tracks(&a.db, &config, output, |b| query.matches(&QueryTrack::of(b)))?;
    if printed == 0 {
        eprintln!("retagfs: no track matches {text:?}");
    }
    Ok(())
}

/// The query, or a usage error that shows where it went wrong.
pub fn parse(text: &str) -> anyhow::Result<Query> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    Query::parse(text, now).map_err(|e| {
        UsageError(format!(
            "invalid query: {e}\n{}\n(see docs/query.md)",
            e.pointing_into(text)
        ))
        .into()
    })
}

/// The ids of the tracks that match `query`, in id order.
pub fn matching_ids(store: &retagfs_store::Store, query: &Query) -> anyhow::Result<Vec<i64>> {
    let mut ids = Vec::new();
    store.read_snapshot(|s| {
        s.for_each_track(|b| {
            if query.matches(&QueryTrack::of(&b)) {
                ids.push(b.track.id);
            }
        })
    })?;
    Ok(ids)
}
