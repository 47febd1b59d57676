//! The tracks that may match a query, picked by SQL in one pass over the
//! tags table, so that a query of a large library reads only those tracks.
//!
//! The SQL is a necessary condition, never the judge: for each of the
//! query's alternatives it tests one term that one tag value can decide,
//! with the query's own Rust code (a function registered for the query),
//! and every candidate is then tested whole. Terms that no single value
//! decides (negations, `field:=` for a missing field, `added`, `format`,
//! `path`) are left to that second test.

use rusqlite::functions::FunctionFlags;
use rusqlite::types::ValueRef;
use rusqlite::Connection;

use super::matching::{year_digits, COMMON_FIELDS};
use super::{Range, Term, Test};

/// The SQL function that tests a tag value against term N of the query.
const TERM_FUNCTION: &str = "retagfs_query_term";

/// A query's candidates as SQL over the tags table.
pub(super) struct Prefilter {
    sql: String,
    keys: Vec<String>,
    tests: Vec<ValueTest>,
}

/// A term as a test of one tag value.
#[derive(Clone)]
struct ValueTest {
    test: Test,
    /// Test the year a `date` or `year` value starts with.
    year: bool,
}

impl ValueTest {
    fn passes(&self, value: &str) -> bool {
        let value = if self.year {
            year_digits(value)
        } else {
            Some(value)
        };
        value.is_some_and(|v| self.test.matches_any(std::iter::once(v)))
    }
}

/// Whether a track matches `term` only if one of its tag values passes
/// the term's test.
fn decidable_by_one_value(term: &Term) -> bool {
    let by_values = match &term.test {
        Test::Exact(exact) => !exact.is_empty(),
        Test::Range(Range::Time(..)) => false,
        Test::Contains(_) | Test::Regex(_) | Test::Range(Range::Number(..)) => true,
    };
    by_values && !term.negated && !matches!(term.field.as_deref(), Some("format" | "path" | "added"))
}

/// How many tracks a test is likely to let through, as a rank: a value
/// exactly, a substring, a pattern, then a range (years and track numbers
/// are shared by many).
fn commonness(test: &Test) -> u8 {
    match test {
        Test::Exact(_) => 0,
        Test::Contains(_) => 1,
        Test::Regex(_) => 2,
        Test::Range(_) => 3,
    }
}

impl Prefilter {
    /// The prefilter of a query's alternatives, or None when one of them
    /// may match a track whatever its tag values (then every track is a
    /// candidate).
    pub(super) fn of(alternatives: &[Vec<Term>]) -> Option<Prefilter> {
        let mut prefilter = Prefilter {
            sql: String::new(),
            keys: Vec::new(),
            tests: Vec::new(),
        };
        let mut conditions = Vec::new();
        for terms in alternatives {
            // One term per alternative: a track has a row for each of its
            // terms, and testing the likeliest to be rare keeps the pass
            // to one scan of the table, with no grouping of its rows.
            let rarest = terms
                .iter()
                .filter(|t| decidable_by_one_value(t))
                .min_by_key(|t| commonness(&t.test))?;
            conditions.push(prefilter.condition(rarest));
        }
        prefilter.sql = format!(
            "SELECT track_id FROM tags NOT INDEXED WHERE {}",
            conditions.join(" OR ")
        );
        Some(prefilter)
    }

    /// A condition on one tags row that every track matching `term` (one
    /// [`decidable_by_one_value`]) has a row for.
    fn condition(&mut self, term: &Term) -> String {
        let (keys, year): (Vec<&str>, bool) = match term.field.as_deref() {
            None => (COMMON_FIELDS.to_vec(), false),
            Some("year") => (vec!["date", "year"], true),
            Some(field) => (vec![field], false),
        };
        let placeholders: Vec<String> = keys
            .into_iter()
            .map(|k| {
                self.keys.push(k.to_string());
                format!("?{}", self.keys.len())
            })
            .collect();
        self.tests.push(ValueTest {
            test: term.test.clone(),
            year,
        });
        format!(
            "(key IN ({}) AND {TERM_FUNCTION}(value, {}))",
            placeholders.join(", "),
            self.tests.len() - 1
        )
    }

    /// The ids of the candidate tracks, in order.
    pub(super) fn candidates(&self, conn: &Connection) -> rusqlite::Result<Vec<i64>> {
        let tests = self.tests.clone();
        conn.create_scalar_function(
            TERM_FUNCTION,
            2,
            FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
            move |ctx| {
                let test = usize::try_from(ctx.get::<i64>(1)?)
                    .ok()
                    .and_then(|i| tests.get(i));
                // What cannot be read here is a candidate: the whole test
                // after this one reads it as the store's reader does.
                Ok(match (test, ctx.get_raw(0)) {
                    (Some(test), ValueRef::Text(bytes)) => {
                        std::str::from_utf8(bytes).map_or(true, |v| test.passes(v))
                    }
                    _ => true,
                })
            },
        )?;
        let mut statement = conn.prepare(&self.sql)?;
        let rows = statement.query_map(rusqlite::params_from_iter(&self.keys), |r| {
            Ok(r.get::<_, i64>(0).ok())
        })?;
        let mut ids = rows
            .filter_map(|r| r.transpose())
            .collect::<rusqlite::Result<Vec<i64>>>()?;
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }
}
