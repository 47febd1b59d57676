//! What the configuration file's arrays of tables (`[[view]]`,
//! `[[playlist]]`) have in common: the keys each takes, string values, and
//! names unique among them; every error names its line.

use toml_edit::{ArrayOfTables, Item, Table, Value};

use crate::UsageError;

/// Where in the file a value is (bytes), when known.
pub type Span = Option<std::ops::Range<usize>>;

/// Makes an error that names the line of a span.
pub type ErrorAt<'a> = &'a dyn Fn(Span, String) -> UsageError;

/// One kind of table: `[[view]]`, `[[playlist]]`.
pub struct TableKind {
    /// What one table is, in an error: "a view".
    pub one: &'static str,
    /// What several are: "views".
    pub several: &'static str,
    /// The keys it takes.
    pub keys: &'static [&'static str],
}

impl TableKind {
    /// Each table made into an item by `item_of`, refusing two items of one
    /// name.
    pub fn items_of<T>(
        &self,
        tables: &ArrayOfTables,
        error: ErrorAt,
        item_of: impl Fn(&Table) -> Result<T, UsageError>,
        name_of: impl Fn(&T) -> &str,
    ) -> Result<Vec<T>, UsageError> {
        let mut items: Vec<T> = Vec::new();
        for table in tables.iter() {
            let item = item_of(table)?;
            if items.iter().any(|seen| name_of(seen) == name_of(&item)) {
                let span = table.get("name").and_then(Item::span);
                let what = format!("two {} are named {:?}", self.several, name_of(&item));
                return Err(error(span, what));
            }
            items.push(item);
        }
        Ok(items)
    }

    /// Refuses a key the table does not take.
    pub fn check_keys(&self, table: &Table, error: ErrorAt) -> Result<(), UsageError> {
        match table.iter().find(|(key, _)| !self.keys.contains(key)) {
            None => Ok(()),
            Some((key, _)) => {
                let span = table.key(key).and_then(|k| k.span());
                let takes = self.keys.join(", ");
                Err(error(
                    span,
                    format!("{} has no `{key}` (it takes {takes})", self.one),
                ))
            }
        }
    }

    /// The string value of `key`, with where it is; None if absent.
    pub fn text(
        &self,
        table: &Table,
        key: &str,
        error: ErrorAt,
    ) -> Result<Option<(String, Span)>, UsageError> {
        match table.get(key) {
            None => Ok(None),
            Some(Item::Value(Value::String(s))) => Ok(Some((s.value().clone(), s.span()))),
            Some(other) => Err(error(other.span(), format!("{}'s `{key}` is a string", self.one))),
        }
    }
}
