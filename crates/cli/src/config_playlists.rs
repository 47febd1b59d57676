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
use toml_edit::{ArrayOfTables, Item, Table, Value};

use crate::UsageError;

type Span = Option<std::ops::Range<usize>>;

/// The keys a `[[playlist]]` takes.
const PLAYLIST_KEYS: &[&str] = &["name", "query", "sort"];

/// The playlists of `[[playlist]]` tables; `error(span, what)` makes an
/// error that names the line.
pub fn playlists_of(
    tables: &ArrayOfTables,
    error: &dyn Fn(Span, String) -> UsageError,
) -> Result<Vec<PlaylistSpec>, UsageError> {
    let mut playlists: Vec<PlaylistSpec> = Vec::new();
    for table in tables.iter() {
        let playlist = playlist_of(table, error)?;
        if playlists.iter().any(|p| p.name == playlist.name) {
            let span = table.get("name").and_then(Item::span);
            return Err(error(
                span,
                format!("two playlists are named {:?}", playlist.name),
            ));
        }
        playlists.push(playlist);
    }
    Ok(playlists)
}

fn playlist_of(
    table: &Table,
    error: &dyn Fn(Span, String) -> UsageError,
) -> Result<PlaylistSpec, UsageError> {
    for (key, _) in table.iter() {
        if !PLAYLIST_KEYS.contains(&key) {
            let span = table.key(key).and_then(|k| k.span());
            return Err(error(
                span,
                format!(
                    "a playlist has no `{key}` (it takes {})",
                    PLAYLIST_KEYS.join(", ")
                ),
            ));
        }
    }
    let text = |key: &str| -> Result<Option<(String, Span)>, UsageError> {
        match table.get(key) {
            None => Ok(None),
            Some(Item::Value(Value::String(s))) => Ok(Some((s.value().clone(), s.span()))),
            Some(other) => Err(error(other.span(), format!("a playlist's `{key}` is a string"))),
        }
    };
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
