//! Finding tracks by what they are: the query language of docs/query.md
//! (beets' syntax where beets has one). `genre:jazz year:1955..1965`,
//! `albumartist:=`, `added:-30d..`, `beyonce , adele`.

mod fold;
mod in_store;
mod matching;
mod parse;
mod prefilter;

use std::fmt;

use regex::Regex;

pub use fold::{contains_folded, fold};

/// A parsed query: any of its alternatives matches when all of that
/// alternative's terms do. An empty query matches every track.
#[derive(Debug)]
pub struct Query {
    alternatives: Vec<Vec<Term>>,
}

/// One term: a test of a field (or of the common text fields), maybe
/// negated.
#[derive(Debug)]
struct Term {
    negated: bool,
    /// None: any of artist, album artist, album and title.
    field: Option<String>,
    test: Test,
}

#[derive(Debug, Clone)]
enum Test {
    /// A folded substring of a folded value.
    Contains(String),
    /// A value exactly (case and accents count); "" also matches a
    /// missing field.
    Exact(String),
    Regex(Regex),
    Range(Range),
}

/// Inclusive bounds; None is open.
#[derive(Debug, Clone)]
enum Range {
    Number(Option<f64>, Option<f64>),
    /// Seconds since the epoch.
    Time(Option<i64>, Option<i64>),
}

/// What a query is tested against: a track's tags and what the store
/// knows of it.
pub struct QueryTrack<'a> {
    /// (key, value), keys lower case; a key may repeat (multi-valued).
    pub tags: &'a [(String, String)],
    /// When the track entered the store, in seconds since the epoch.
    pub added: i64,
    pub format: &'a str,
    pub backing_path: &'a str,
}

impl<'a> QueryTrack<'a> {
    /// What a query is tested against, of a track as the store holds it.
    pub fn of(b: &'a retagfs_store::TrackBundle) -> QueryTrack<'a> {
        QueryTrack {
            tags: &b.tags,
            added: b.track.added_at,
            format: b.track.format.as_str(),
            backing_path: &b.track.backing_path,
        }
    }
}

/// A query that cannot be read: where (in characters from its start) and
/// why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryError {
    pub at: usize,
    pub message: String,
}

impl QueryError {
    fn new(at: usize, message: impl Into<String>) -> QueryError {
        QueryError {
            at,
            message: message.into(),
        }
    }

    /// The query with a caret under the character the error is at, for a
    /// terminal.
    pub fn pointing_into(&self, query: &str) -> String {
        format!("  {query}\n  {}^", " ".repeat(self.at))
    }
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at character {})", self.message, self.at + 1)
    }
}

impl std::error::Error for QueryError {}

impl Query {
    /// Parses `text`; relative times (`added:-30d`) count back from
    /// `now_secs`.
    pub fn parse(text: &str, now_secs: i64) -> Result<Query, QueryError> {
        Ok(Query {
            alternatives: parse::parse(text, now_secs)?,
        })
    }

    pub fn matches(&self, track: &QueryTrack<'_>) -> bool {
        self.alternatives
            .iter()
            .any(|terms| terms.iter().all(|t| t.matches(track)))
    }
}

#[cfg(test)]
mod tests;
