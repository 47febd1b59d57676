//! `schema.sql` is the current schema: a new store made from it and a
//! version-1 store brought forward by every migration have the same tables,
//! columns, constraints, indexes and triggers.

mod common;

use common::store_of_version;
use retagfs_store::{Store, SCHEMA_VERSION};

/// The schema of a store, one normalized line per object: SQL with
/// whitespace and quotes folded, a table's columns and constraints as a
/// sorted set (a migration's `ADD COLUMN` appends where a fresh `CREATE`
/// lists in its own order), then the order of its columns.
fn normalized_schema(conn: &rusqlite::Connection) -> Vec<String> {
    let mut stmt = conn
        .prepare("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY type, name")
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .unwrap();
    let mut out = Vec::new();
    for row in rows {
        let (kind, name, sql) = row.unwrap();
        let sql = fold(&sql);
        if kind == "table" {
            let open = sql.find('(').unwrap();
            let close = sql.rfind(')').unwrap();
            let mut items = top_level_items(&sql[open + 1..close]);
            items.sort();
            out.push(format!("table {name}: {} | {}", items.join(" , "), &sql[close..]));
            let columns: Vec<String> = conn
                .prepare(&format!("SELECT name FROM pragma_table_info('{name}')"))
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            out.push(format!("columns {name}: {}", columns.join(", ")));
        } else {
            out.push(format!("{kind} {name}: {sql}"));
        }
    }
    out
}

/// SQL with comments dropped, whitespace folded to one space (none inside
/// parentheses' edges or before commas) and identifier quotes removed.
fn fold(sql: &str) -> String {
    let without_comments: String = sql
        .lines()
        .map(|l| l.split("--").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join(" ");
    without_comments
        .replace('"', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("( ", "(")
        .replace(" )", ")")
        .replace(" ,", ",")
}

/// The comma-separated items of a column list, at parenthesis depth 0.
fn top_level_items(list: &str) -> Vec<String> {
    let (mut items, mut depth, mut current) = (Vec::new(), 0, String::new());
    for c in list.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(current.trim().to_string());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current.trim().to_string());
    items
}

#[test]
fn a_new_store_and_a_migrated_one_have_the_same_schema() {
    let dir = tempfile::tempdir().unwrap();
    let fresh_path = dir.path().join("fresh.db");
    let fresh = Store::open(&fresh_path).unwrap();
    assert_eq!(fresh.schema_version(), SCHEMA_VERSION);
    let migrated_path = dir.path().join("migrated.db");
    drop(store_of_version(&migrated_path, 1));
    let migrated = Store::open(&migrated_path).unwrap();
    assert_eq!(migrated.schema_version(), SCHEMA_VERSION);
    let (fresh, migrated) = (
        normalized_schema(fresh.conn()),
        normalized_schema(migrated.conn()),
    );
    for (f, m) in fresh.iter().zip(&migrated) {
        assert_eq!(f, m);
    }
    assert_eq!(fresh, migrated);
}
