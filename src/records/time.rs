//! Timestamps as both logs write them: RFC 3339 in UTC with milliseconds
//! (`2026-11-23T03:22:35.123Z`), computed without a calendar library.

use std::time::{SystemTime, UNIX_EPOCH};

/// `at` as `2026-11-23T03:22:35.123Z` (a time before 1970 is written as 1970-01-01).
pub fn rfc3339(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// Now, as [`rfc3339`] writes it.
pub fn rfc3339_now() -> String {
    rfc3339(SystemTime::now())
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`, <https://howardhinnant.github.io/date_algorithms.html>,
/// for non-negative day counts).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_415), (2025, 11, 23));
    }

    #[test]
    fn a_time_is_written_to_the_millisecond() {
        let at = UNIX_EPOCH + Duration::from_millis(1_763_868_155_123);
        assert_eq!(rfc3339(at), "2025-11-23T03:22:35.123Z");
    }
}
