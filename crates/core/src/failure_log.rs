//! How often a mount logs the failures of one track. A player or an
//! indexer that retries a file whose backing file vanished or changed
//! would otherwise write a line per attempt, for as long as the mount
//! runs: each kind of failure of a track is logged at most once per
//! [`REPEAT_EVERY`], the next line saying how many were left out.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// The least time between two lines about one kind of failure of a track.
pub const REPEAT_EVERY: Duration = Duration::from_secs(60);

/// Tracks remembered before the quiet ones are forgotten (a library
/// whose disk went away fails every track it is asked for).
const REMEMBERED: usize = 4096;

/// A track's id and the kind of failure (a short fixed name).
type Key = (i64, &'static str);

/// When each kind of failure of each track was last logged, and how many
/// were not logged since.
#[derive(Default)]
pub struct FailureLog {
    tracks: Mutex<HashMap<Key, (Instant, u64)>>,
}

impl FailureLog {
    /// Whether a failure of kind `kind` of track `id` at `now` is to be
    /// logged: `Some` with a suffix for the line (empty, or how many such
    /// failures were left out since the last line), `None` to leave it out.
    pub fn check(&self, id: i64, kind: &'static str, now: Instant) -> Option<String> {
        let mut tracks = self.tracks.lock();
        if let Some((last, left_out)) = tracks.get_mut(&(id, kind)) {
            if now.saturating_duration_since(*last) < REPEAT_EVERY {
                *left_out += 1;
                return None;
            }
            let suffix = match *left_out {
                0 => String::new(),
                1 => " (1 more like it, not logged, since the previous such line)".to_string(),
                n => format!(" ({n} more like it, not logged, since the previous such line)"),
            };
            (*last, *left_out) = (now, 0);
            return Some(suffix);
        }
        if tracks.len() >= REMEMBERED {
            tracks.retain(|_, (last, _)| now.saturating_duration_since(*last) < REPEAT_EVERY);
            if tracks.len() >= REMEMBERED {
                tracks.clear();
            }
        }
        tracks.insert((id, kind), (now, 0));
        Some(String::new())
    }
}

static MOUNT_FAILURES: LazyLock<FailureLog> = LazyLock::new(FailureLog::default);

/// [`FailureLog::check`] of the process's log, now.
pub fn failure_to_log(id: i64, kind: &'static str) -> Option<String> {
    MOUNT_FAILURES.check(id, kind, Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_repeated_is_logged_once_a_minute_with_what_was_left_out() {
        let log = FailureLog::default();
        let start = Instant::now();
        let at = |s| start + Duration::from_secs(s);
        assert_eq!(log.check(7, "open", start).as_deref(), Some(""));
        for s in 1..=3 {
            assert_eq!(log.check(7, "open", at(s)), None);
        }
        // Another track, or another kind of failure, is not held back.
        assert_eq!(log.check(8, "open", at(2)).as_deref(), Some(""));
        assert_eq!(log.check(7, "read", at(2)).as_deref(), Some(""));
        let later = start + REPEAT_EVERY;
        let line = log.check(7, "open", later).expect("logged again after a minute");
        assert_eq!(
            line,
            " (3 more like it, not logged, since the previous such line)"
        );
        assert_eq!(log.check(7, "open", later + Duration::from_secs(1)), None);
        assert_eq!(
            log.check(7, "open", later + REPEAT_EVERY).as_deref(),
            Some(" (1 more like it, not logged, since the previous such line)")
        );
    }

    #[test]
    fn failures_of_many_tracks_are_remembered_within_a_bound() {
        let log = FailureLog::default();
        let start = Instant::now();
        for id in 0..(REMEMBERED as i64 * 3) {
            assert!(log.check(id, "open", start).is_some());
        }
        assert!(log.tracks.lock().len() <= REMEMBERED);
        // Forgotten tracks are logged again; the bound holds past the minute.
        let later = start + REPEAT_EVERY;
        assert!(log.check(0, "open", later).is_some());
        assert!(log.tracks.lock().len() <= REMEMBERED);
    }
}
