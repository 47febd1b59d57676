//! The `[[view]]` tables of the configuration file: several views in one
//! mount, each a top-level folder with its template and, optionally, a
//! query selecting its tracks and fallbacks of its own (docs/usage.md,
//! "Several views").
//!
//! ```toml
//! [[view]]
//! name = "Jazz 60s"
//! template = "$albumartist/$album/${tracknumber:02} $title"
//! query = "genre:jazz year:1960..1969"
//! fallback = ["albumartist=Various"]
//! ```

use std::sync::Arc;

use retagfs_core::query::Query;
use retagfs_core::view::views::invalid_view_name;
use retagfs_core::Template;
use toml_edit::{ArrayOfTables, Item, Table, Value};

use crate::args::fallback_pair;
use crate::config_tables::{ErrorAt, TableKind};
use crate::UsageError;

/// A view as the file defines it, checked.
#[derive(Clone, Debug)]
pub struct ViewDefinition {
    pub name: String,
    pub template: Template,
    pub query: Option<Arc<Query>>,
    /// Its own `KEY=VALUE` fallbacks, over the mount's.
    pub fallbacks: Vec<(String, String)>,
    pub default_fallback: Option<String>,
}

/// The `[[view]]` table.
const VIEW: TableKind = TableKind {
    one: "a view",
    several: "views",
    keys: &["name", "template", "query", "fallback", "default-fallback"],
};

/// The views of `[[view]]` tables; `error(span, what)` makes an error that
/// names the line.
pub fn views_of(tables: &ArrayOfTables, error: ErrorAt) -> Result<Vec<ViewDefinition>, UsageError> {
    VIEW.items_of(tables, error, |table| view_of(table, error), |v| &v.name)
}

fn view_of(table: &Table, error: ErrorAt) -> Result<ViewDefinition, UsageError> {
    VIEW.check_keys(table, error)?;
    let text = |key: &str| VIEW.text(table, key, error);
    let table_span = table.span();
    let Some((name, name_span)) = text("name")? else {
        return Err(error(table_span, "a view needs a `name`: its folder".into()));
    };
    if let Some(why) = invalid_view_name(&name) {
        return Err(error(name_span, format!("view {name:?}: {why}")));
    }
    let Some((template, template_span)) = text("template")? else {
        return Err(error(table_span, format!("view {name:?} needs a `template`")));
    };
    let template =
        Template::parse(&template).map_err(|e| error(template_span, format!("view {name:?}: {e}")))?;
    let query = match text("query")? {
        None => None,
        Some((query, span)) => Some(Arc::new(
            crate::query::parse(&query).map_err(|e| error(span, format!("view {name:?}: {e}")))?,
        )),
    };
    let fallbacks = match table.get("fallback") {
        None => Vec::new(),
        Some(Item::Value(Value::Array(items))) => items
            .iter()
            .map(|item| match item {
                Value::String(pair) => fallback_pair(pair.value())
                    .ok_or_else(|| error(item.span(), format!("view {name:?}: a fallback is \"KEY=VALUE\""))),
                other => Err(error(
                    other.span(),
                    format!("view {name:?}: a fallback is \"KEY=VALUE\""),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(error(
                other.span(),
                format!("view {name:?}: `fallback` is a list of \"KEY=VALUE\""),
            ))
        }
    };
    Ok(ViewDefinition {
        name,
        template,
        query,
        fallbacks,
        default_fallback: text("default-fallback")?.map(|(v, _)| v),
    })
}
