//! Durations from the counts and rates audio headers hold. A damaged or
//! hostile header can say anything: no duration is better than a wrong
//! one, and none of these numbers may panic or overflow.

/// How long `units` last at `per_second` of them a second, in milliseconds
/// (rounded to the nearest); None for a rate of 0 or a result that does
/// not fit.
pub(crate) fn millis(units: u64, per_second: u64) -> Option<u64> {
    if per_second == 0 {
        return None;
    }
    let per_second = u128::from(per_second);
    let ms = (u128::from(units) * 1000 + per_second / 2) / per_second;
    u64::try_from(ms).ok()
}

/// Asserts that a probe's duration is within 50 ms of what ffprobe says
/// (`ffprobe -v error -show_entries format=duration -of csv=p=0 FILE`).
#[cfg(test)]
pub(crate) fn assert_near_ffprobe(duration_ms: Option<u64>, ffprobe_seconds: f64) {
    let ms = duration_ms.expect("the probe found a duration");
    let ffprobe_ms = ffprobe_seconds * 1000.0;
    assert!(
        (ms as f64 - ffprobe_ms).abs() <= 50.0,
        "probe says {ms} ms, ffprobe {ffprobe_ms} ms"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_the_nearest_millisecond() {
        assert_eq!(millis(44_100, 44_100), Some(1000));
        assert_eq!(millis(1, 3), Some(333));
        assert_eq!(millis(2, 3), Some(667));
    }

    #[test]
    fn hostile_numbers_give_no_duration() {
        assert_eq!(millis(12_345, 0), None);
        assert_eq!(millis(u64::MAX, 1), None);
        assert_eq!(millis(u64::MAX, u64::MAX), Some(1000));
    }
}
