//! Waiting for a condition, never for a fixed time: a test that waits for something another
//! process does (a reload, a watch event, a replica catching up, a collector receiving a span)
//! polls for it with a deadline, so it goes on as soon as the condition holds and fails, saying
//! what it waited for, when it never does.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is checked.
pub const POLL: Duration = Duration::from_millis(20);

/// Checks `check` every [`POLL`] until it gives `Some`, for at most `within`; then panics with
/// `what()` (which says what was awaited and what was seen instead).
pub async fn eventually<T, Fut>(
    within: Duration,
    what: impl Fn() -> String,
    mut check: impl FnMut() -> Fut,
) -> T
where
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "not within {within:?}: {}",
            what()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// [`eventually`] for a synchronous check, on a thread that may block.
pub fn eventually_blocking<T>(
    within: Duration,
    what: impl Fn() -> String,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "not within {within:?}: {}",
            what()
        );
        std::thread::sleep(POLL);
    }
}
