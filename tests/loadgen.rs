//! The load generator end to end: a short run against a spawned authzd and the no-op server,
//! both measured, every answer right.
// Test code: failing loudly is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

#[test]
fn loadgen_measures_authzd_and_the_noop_server_without_errors() {
    let output = Command::new(env!("CARGO_BIN_EXE_authzd-loadgen"))
        .args([
            "--spawn",
            "--bindings",
            "1000",
            "--duration",
            "2s",
            "--warmup",
            "500ms",
            "--concurrency",
            "8",
            "--connections",
            "2",
            "--json",
        ])
        .env("AUTHZD_BIN", env!("CARGO_BIN_EXE_authzd"))
        .output()
        .expect("run authzd-loadgen");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "exit {}:\n{stderr}", output.status);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):\n{}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    for target in ["noop", "authzd"] {
        let t = &report["targets"][target];
        let rps = t["all"]["requests_per_s"].as_f64().unwrap_or_default();
        assert!(rps > 0.0, "{target}: no throughput: {t}");
        assert_eq!(t["all"]["errors"], 0, "{target}: {t}");
        for kind in ["authorize", "batch", "who_can"] {
            assert!(t[kind]["requests"].as_u64().unwrap() > 0, "{target} {kind}");
        }
        assert!(t["all"]["latency"]["p99_us"].as_u64().unwrap() > 0);
    }
    let batch = &report["targets"]["authzd"]["batch"];
    let (rps, dps) = (
        batch["requests_per_s"].as_f64().unwrap(),
        batch["decisions_per_s"].as_f64().unwrap(),
    );
    assert!((dps - rps * 100.0).abs() < 1e-6 * dps.max(1.0), "{batch}");
    // Half the requests are drawn from the hot set: some answers come from the cache, and
    // the fresh ones cannot.
    let cached = report["targets"]["authzd"]["cached_decisions"]
        .as_f64()
        .unwrap();
    assert!(cached > 0.2 && cached < 0.8, "cached {cached}");
    assert!(report["ratios"]["all"]["throughput"].as_f64().unwrap() > 0.0);
    assert!(report["ratios"]["all"]["p99"].as_f64().unwrap() > 0.0);
}
