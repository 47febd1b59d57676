//! Whether the remote answers. Once a read failed because the remote
//! could not be reached, reads that need it fail at once instead of each
//! waiting out its deadline; one read a second is let through to find out
//! whether it is back, and the first that succeeds opens the way for all.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How often a read is let through to a remote that is down.
pub(crate) const PROBE_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(crate) struct Health {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Since when the remote is down, and when the next read may try it.
    down: Option<(Instant, Instant)>,
}

/// What a read may do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    Go,
    /// The remote is down: fail now. Carries how long it has been down.
    FailFast(Duration),
}

impl Health {
    pub(crate) fn admit(&self) -> Admission {
        let mut state = self.state.lock();
        match &mut state.down {
            None => Admission::Go,
            Some((since, next_try)) => {
                let now = Instant::now();
                if now >= *next_try {
                    *next_try = now + PROBE_EVERY;
                    Admission::Go
                } else {
                    Admission::FailFast(now - *since)
                }
            }
        }
    }

    /// A request got an answer (any answer: a 412 comes from a live
    /// server). Returns true when the remote was down until now.
    pub(crate) fn answered(&self) -> bool {
        self.state.lock().down.take().is_some()
    }

    /// A request got no usable answer within its deadline. Returns true
    /// when the remote was up until now.
    pub(crate) fn unreachable(&self) -> bool {
        let mut state = self.state.lock();
        let now = Instant::now();
        match &mut state.down {
            Some((_, next_try)) => {
                *next_try = (*next_try).max(now + PROBE_EVERY);
                false
            }
            None => {
                state.down = Some((now, now + PROBE_EVERY));
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_down_remote_fails_fast_then_lets_one_read_try_each_second() {
        let health = Health::default();
        assert_eq!(health.admit(), Admission::Go);
        assert!(health.unreachable());
        assert!(!health.unreachable());
        assert!(matches!(health.admit(), Admission::FailFast(_)));
        std::thread::sleep(PROBE_EVERY);
        assert_eq!(health.admit(), Admission::Go);
        assert!(matches!(health.admit(), Admission::FailFast(_)));
        assert!(health.answered());
        assert_eq!(health.admit(), Admission::Go);
        assert!(!health.answered());
    }
}
