//! What the integration test binaries share (`tests/api`, `tests/cli`, `tests/e2e`, `tests/etcd`,
//! `tests/properties`, `tests/house`), and the etcd benchmark: each includes this directory as
//! `#[path = "../support/mod.rs"] mod support;`.
//!
//! * [`server`]: the real `authzd` binary on `127.0.0.1:0`, the sample policy, manifest and
//!   request builders; [`raw`]: a gRPC codec for bytes as they are.
//! * [`etcd`]: a real 3-member etcd cluster and authzd replicas on it.
//! * [`tools`]: the one `tool_or_skip` for the external programs the end-to-end tests drive.
//! * [`ca`]: the one test certificate authority (rcgen).
//! * [`generators`] and [`cases`]: proptest's random policies and requests, and how many cases a
//!   property runs (few locally, full strength under `CI=true`; `PROPTEST_CASES` wins);
//!   [`universe`]: the finite set of requests the brute-force oracles ask.
//! * [`wait`]: waiting on a condition with a deadline, instead of sleeping a fixed time.
//! * [`fixture`]: policy files under `tests/fixtures/`.
// Test support: failing loudly is the point here; each binary uses only part of it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod ca;
pub mod cases;
pub mod etcd;
pub mod gate_writes;
pub mod generators;
pub mod raw;
pub mod server;
pub mod tools;
pub mod universe;
pub mod wait;

/// Whether this is a CI run (`CI=true`): slow tests run at full strength and a missing tool is
/// a failure, not a skip.
pub fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// How long a revocation hammer runs: `AUTHZD_HAMMER_SECS`, else 10 s under `CI=true` (full
/// strength), else 2 s (a local run).
pub fn hammer_for() -> std::time::Duration {
    let secs = std::env::var("AUTHZD_HAMMER_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if ci() { 10 } else { 2 });
    std::time::Duration::from_secs(secs)
}

/// The repository root.
pub fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The text of `tests/fixtures/NAME`.
pub fn fixture(name: &str) -> String {
    let path = repo().join("tests/fixtures").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The name of the running test (libtest names each test's thread after it), for messages.
pub fn test_name() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => "this run".to_string(),
    }
}
