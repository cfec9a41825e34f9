//! How many cases a property test runs — the one place every `proptest!` of `tests/` takes its
//! configuration from ([`config`]).
//!
//! Each property states its full strength: the cases it runs in CI (10,000 for the
//! differential, conditional and rules-review properties; fewer for those whose case costs
//! more: the access delta and big roles 1,000, ...). A run scales every property by one number,
//! [`cases`]:
//!
//! * `PROPTEST_CASES=N`, when set, wins: properties run `N / 10,000` of their full strength
//!   (`PROPTEST_CASES=10000` is the CI run, on any machine);
//! * else under `CI=true`, full strength;
//! * else (a local run) [`QUICK`], 256: about 2.5% of full strength, at least one case.
//!
//! Failing cases are recorded beside the property's source file, in
//! `<file stem>.proptest-regressions` (`tests/properties/delta.proptest-regressions`), and
//! every recorded seed is replayed first on every run, whatever the number of cases.

use proptest::test_runner::{Config, FileFailurePersistence};

/// The scale of a CI run: a property of full strength `full` runs `full` cases.
pub const FULL: u32 = 10_000;

/// The scale of a local run without `PROPTEST_CASES`.
pub const QUICK: u32 = 256;

/// The scale of this run: `PROPTEST_CASES`, else [`FULL`] under `CI=true`, else [`QUICK`].
pub fn cases() -> u32 {
    match std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(n) => n,
        None if super::ci() => FULL,
        None => QUICK,
    }
}

/// The cases a property of full strength `full` runs in this run: `full * cases() / FULL`, at
/// least one.
pub fn scaled(full: u32) -> u32 {
    let n = u64::from(full) * u64::from(cases()) / u64::from(FULL);
    u32::try_from(n).unwrap_or(u32::MAX).max(1)
}

/// The configuration of a property of full strength `full`: [`scaled`] cases, failures
/// persisted beside the source file.
pub fn config(full: u32) -> Config {
    Config {
        cases: scaled(full),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}
