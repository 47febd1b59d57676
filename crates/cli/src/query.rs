//! `retagfs query`: the tracks that match a query (docs/query.md).

use std::time::{SystemTime, UNIX_EPOCH};

use retagfs_core::query::Query;
use retagfs_core::Mode;

use crate::args::{Printed, QueryArgs};
use crate::export::{print_tracks, Output};
use crate::UsageError;

pub fn run(a: QueryArgs) -> anyhow::Result<()> {
    let text = a.query.join(" ");
    let query = parse(&text)?;
    let config = a.view.config(Mode::Synthesis)?;
    let output = match (a.json, a.print) {
        (true, _) => Output::Json,
        (false, Printed::View) => Output::ViewPaths,
        (false, Printed::Library) => Output::LibraryPaths,
        (false, Printed::Id) => Output::Ids,
    };
    let printed = print_tracks(&a.db, &config, output, |s, f| query.for_each_match(s, f))?;
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
