//! A query's terms tested against a track.

use super::fold::contains_folded;
use super::{QueryTrack, Range, Term, Test};

/// What bare words are looked for in.
pub(super) const COMMON_FIELDS: &[&str] = &["artist", "albumartist", "album", "title"];

impl Term {
    pub(super) fn matches(&self, track: &QueryTrack<'_>) -> bool {
        let found = match &self.field {
            None => COMMON_FIELDS
                .iter()
                .any(|field| self.test.matches_any(values(track, field))),
            Some(field) => match (&self.test, field.as_str()) {
                (Test::Range(Range::Time(from, to)), "added") => within(track.added, *from, *to),
                (Test::Exact(exact), _) if exact.is_empty() => values(track, field).all(|v| v.is_empty()),
                (test, _) => test.matches_any(values(track, field)),
            },
        };
        found != self.negated
    }
}

impl Test {
    /// Whether any of a field's values passes (multi-valued fields).
    pub(super) fn matches_any<'v>(&self, mut values: impl Iterator<Item = &'v str>) -> bool {
        match self {
            Test::Contains(needle) => values.any(|v| contains_folded(v, needle)),
            Test::Exact(exact) => values.any(|v| v == exact),
            Test::Regex(re) => values.any(|v| re.is_match(v)),
            Test::Range(Range::Number(from, to)) => values.any(|v| {
                leading_number(v).is_some_and(|n| from.is_none_or(|f| n >= f) && to.is_none_or(|t| n <= t))
            }),
            // Only `added` has times, and it is matched above.
            Test::Range(Range::Time(..)) => false,
        }
    }
}

fn within(t: i64, from: Option<i64>, to: Option<i64>) -> bool {
    from.is_none_or(|f| t >= f) && to.is_none_or(|e| t <= e)
}

/// The values of a field: a tag's, or one the query language computes
/// (`year`, `format`, `path`).
fn values<'a>(track: &'a QueryTrack<'a>, field: &'a str) -> Box<dyn Iterator<Item = &'a str> + 'a> {
    match field {
        "year" => Box::new(year(track).into_iter()),
        "format" => Box::new(std::iter::once(track.format)),
        "path" => Box::new(std::iter::once(track.backing_path)),
        _ => Box::new(tag_values(track, field)),
    }
}

fn tag_values<'a>(track: &'a QueryTrack<'a>, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    track
        .tags
        .iter()
        .filter(move |(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The first four digits of `date`, or of `year` where a track has no
/// date.
fn year<'a>(track: &'a QueryTrack<'a>) -> Option<&'a str> {
    let first = |key| tag_values(track, key).find_map(year_digits);
    first("date").or_else(|| first("year"))
}

/// The year a `date` or `year` value starts with: its first four
/// characters, when they are digits.
pub(super) fn year_digits(value: &str) -> Option<&str> {
    value.get(..4).filter(|y| y.bytes().all(|b| b.is_ascii_digit()))
}

/// The number a value starts with: `3` of "3/12", `128.5` of "128.5 BPM".
fn leading_number(value: &str) -> Option<f64> {
    let value = value.trim_start();
    let end = value
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '-' || c == '+'))))
        .map_or(value.len(), |(i, _)| i);
    value[..end].parse().ok()
}
