//! The `[[playlist]]` tables of the configuration file: smart playlists,
//! each `Playlists/NAME.m3u8` at the mount's root (docs/usage.md, "Smart
//! playlists").
//!
//! ```toml
//! [[playlist]]
//! name = "Jazz of the 60s"
//! query = "genre:jazz year:1960..1969"
//! sort = "-year artist"
//! ```

use std::sync::Arc;

use retagfs_core::view::playlists::{PlaylistSpec, SortKey};
use toml_edit::{ArrayOfTables, Table};

use crate::config_tables::{ErrorAt, TableKind};
use crate::UsageError;

/// The `[[playlist]]` table.
const PLAYLIST: TableKind = TableKind {
    one: "a playlist",
    several: "playlists",
    keys: &["name", "query", "sort"],
};

/// The playlists of `[[playlist]]` tables; `error(span, what)` makes an
/// error that names the line.
pub fn playlists_of(tables: &ArrayOfTables, error: ErrorAt) -> Result<Vec<PlaylistSpec>, UsageError> {
    PLAYLIST.items_of(tables, error, |table| playlist_of(table, error), |p| &p.name)
}

fn playlist_of(table: &Table, error: ErrorAt) -> Result<PlaylistSpec, UsageError> {
    PLAYLIST.check_keys(table, error)?;
    let text = |key: &str| PLAYLIST.text(table, key, error);
    let Some((name, name_span)) = text("name")? else {
        return Err(error(
            table.span(),
            "a playlist needs a `name`: its file, without .m3u8".into(),
        ));
    };
    if name.trim().is_empty() || name.contains(['/', '\0']) || name.starts_with('.') {
        return Err(error(
            name_span,
            format!("playlist {name:?}: a name is a file's, without `/`, not starting with `.`"),
        ));
    }
    let Some((query, query_span)) = text("query")? else {
        return Err(error(table.span(), format!("playlist {name:?} needs a `query`")));
    };
    let query =
        crate::query::parse(&query).map_err(|e| error(query_span, format!("playlist {name:?}: {e}")))?;
    let sort = match text("sort")? {
        None => Vec::new(),
        Some((words, span)) => (words.split_whitespace())
            .map(|w| {
                SortKey::parse(w)
                    .ok_or_else(|| error(span.clone(), format!("playlist {name:?}: sort by {w:?}?")))
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(PlaylistSpec {
        name,
        query: Arc::new(query),
        sort,
    })
}
