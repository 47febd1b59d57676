//! Validators of a served file's version and the conditional requests
//! they answer (RFC 9110, section 13): `If-Match`, `If-None-Match`,
//! `If-Unmodified-Since`, `If-Modified-Since` and `If-Range`.
//!
//! The entity tag names the track and its version, so it changes with
//! every edit of its tags or art. A date names a version only when it is
//! the version's own `Last-Modified` and that time is not in the future
//! (each version's time is at least a second after the last, docs/store.md
//! "Change times"): otherwise two versions could share a date, and a date
//! validator is not taken as proof that the version is unchanged.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::header::{
    HeaderMap, HeaderValue, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, IF_UNMODIFIED_SINCE,
};

/// What identifies the version of a served file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Validators {
    /// The entity tag, quoted: `"<track>-<version>"` (not 32 hex digits,
    /// which S3 tools take for an MD5).
    pub(crate) etag: String,
    /// The version's time, whole seconds since the epoch.
    pub(crate) modified_secs: u64,
    /// Whether that time is ahead of the clock (then it is not sent as
    /// `Last-Modified`, which must not be ahead of `Date`, and dates do
    /// not validate).
    pub(crate) modified_in_future: bool,
}

/// The entity tag of a track's version, quoted.
pub(crate) fn entity_tag(track_id: i64, version: i64) -> String {
    format!("\"{track_id}-{version}\"")
}

impl Validators {
    pub(crate) fn new(track_id: i64, version: i64, mtime_ns: i64, now: SystemTime) -> Validators {
        let modified_secs = u64::try_from(mtime_ns.div_euclid(1_000_000_000)).unwrap_or(0);
        let now_secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Validators {
            etag: entity_tag(track_id, version),
            modified_secs,
            modified_in_future: modified_secs > now_secs,
        }
    }

    /// `Last-Modified`, never ahead of the clock.
    pub(crate) fn last_modified(&self, now: SystemTime) -> String {
        let at = UNIX_EPOCH + Duration::from_secs(self.modified_secs);
        httpdate::fmt_http_date(if self.modified_in_future { now } else { at })
    }

    /// Whether an HTTP date names this very version.
    fn dated(&self, value: &HeaderValue) -> bool {
        http_secs(value).is_some_and(|secs| !self.modified_in_future && secs == self.modified_secs)
    }

    /// Whether the version is no newer than an HTTP date (None: no date).
    fn unmodified_since(&self, value: &HeaderValue) -> Option<bool> {
        http_secs(value).map(|secs| !self.modified_in_future && self.modified_secs <= secs)
    }
}

/// What the preconditions of a GET or HEAD decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Precondition {
    /// Serve the file; a `Range` is honoured only if `ranges_allowed`
    /// (an `If-Range` that does not name this version asks for all of it).
    Serve { ranges_allowed: bool },
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// Evaluates the preconditions of a GET or HEAD in RFC 9110's order.
pub(crate) fn evaluate(headers: &HeaderMap, v: &Validators) -> Precondition {
    if let Some(value) = headers.get(IF_MATCH) {
        if !tag_list_matches(value, &v.etag, Comparison::Strong) {
            return Precondition::Failed;
        }
    } else if let Some(value) = headers.get(IF_UNMODIFIED_SINCE) {
        if v.unmodified_since(value) == Some(false) {
            return Precondition::Failed;
        }
    }
    if let Some(value) = headers.get(IF_NONE_MATCH) {
        if tag_list_matches(value, &v.etag, Comparison::Weak) {
            return Precondition::NotModified;
        }
    } else if let Some(value) = headers.get(IF_MODIFIED_SINCE) {
        if v.unmodified_since(value) == Some(true) {
            return Precondition::NotModified;
        }
    }
    let ranges_allowed = match headers.get(IF_RANGE) {
        None => true,
        Some(value) => match value.to_str() {
            Ok(s) if s.trim_start().starts_with("W/") => false,
            Ok(s) if s.trim_start().starts_with('"') => s.trim() == v.etag,
            _ => v.dated(value),
        },
    };
    Precondition::Serve { ranges_allowed }
}

/// An HTTP date's seconds since the epoch.
fn http_secs(value: &HeaderValue) -> Option<u64> {
    let date = httpdate::parse_http_date(value.to_str().ok()?).ok()?;
    Some(date.duration_since(UNIX_EPOCH).ok()?.as_secs())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Comparison {
    Strong,
    Weak,
}

/// Whether an entity-tag list (`*`, or tags separated by commas) holds
/// `etag`. A weak tag (`W/"..."`) never matches strongly.
fn tag_list_matches(value: &HeaderValue, etag: &str, comparison: Comparison) -> bool {
    let Ok(list) = value.to_str() else {
        return false;
    };
    list.split(',').map(str::trim).any(|tag| {
        tag == "*"
            || match tag.strip_prefix("W/") {
                Some(weak) => comparison == Comparison::Weak && weak == etag,
                None => tag == etag,
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(hyper::header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn the_matrix_of_validators() {
        let now = at(2_000_000_000);
        let v = Validators::new(7, 3, 1_900_000_000_000_000_000, now);
        assert_eq!(v.etag, "\"7-3\"");
        let date = httpdate::fmt_http_date(at(1_900_000_000));
        let earlier = httpdate::fmt_http_date(at(1_899_999_999));
        let serve = Precondition::Serve { ranges_allowed: true };
        assert_eq!(evaluate(&headers(&[]), &v), serve);
        assert_eq!(
            evaluate(&headers(&[(IF_NONE_MATCH, "\"7-3\"")]), &v),
            Precondition::NotModified
        );
        assert_eq!(
            evaluate(&headers(&[(IF_NONE_MATCH, "W/\"7-3\", \"x\"")]), &v),
            Precondition::NotModified
        );
        assert_eq!(evaluate(&headers(&[(IF_NONE_MATCH, "\"7-2\"")]), &v), serve);
        assert_eq!(
            evaluate(&headers(&[(IF_MATCH, "\"7-2\"")]), &v),
            Precondition::Failed
        );
        assert_eq!(
            evaluate(&headers(&[(IF_MATCH, "W/\"7-3\"")]), &v),
            Precondition::Failed
        );
        assert_eq!(evaluate(&headers(&[(IF_MATCH, "*")]), &v), serve);
        assert_eq!(
            evaluate(&headers(&[(IF_MODIFIED_SINCE, &date)]), &v),
            Precondition::NotModified
        );
        assert_eq!(evaluate(&headers(&[(IF_MODIFIED_SINCE, &earlier)]), &v), serve);
        assert_eq!(
            evaluate(&headers(&[(IF_UNMODIFIED_SINCE, &earlier)]), &v),
            Precondition::Failed
        );
        let partial = |value: &str| evaluate(&headers(&[(IF_RANGE, value)]), &v);
        assert_eq!(partial("\"7-3\""), serve);
        assert_eq!(
            partial("\"7-2\""),
            Precondition::Serve {
                ranges_allowed: false
            }
        );
        assert_eq!(partial(&date), serve);
        assert_eq!(
            partial(&earlier),
            Precondition::Serve {
                ranges_allowed: false
            }
        );
        assert_eq!(
            partial("garbage"),
            Precondition::Serve {
                ranges_allowed: false
            }
        );
    }

    #[test]
    fn a_time_ahead_of_the_clock_is_not_sent_and_validates_nothing() {
        let now = at(1_000);
        let v = Validators::new(1, 1, 1_001_000_000_000, now);
        assert_eq!(v.last_modified(now), httpdate::fmt_http_date(now));
        let date = httpdate::fmt_http_date(at(1_001));
        assert_eq!(
            evaluate(&headers(&[(IF_RANGE, &date)]), &v),
            Precondition::Serve {
                ranges_allowed: false
            }
        );
        assert_eq!(
            evaluate(&headers(&[(IF_MODIFIED_SINCE, &date)]), &v),
            Precondition::Serve { ranges_allowed: true }
        );
    }
}
