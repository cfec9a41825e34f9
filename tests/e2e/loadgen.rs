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

/// `--serve-noop` runs the no-op server alone (as `scripts/profile.sh` profiles it): it prints
/// its endpoint and answers Authorize with the empty response until killed.
#[test]
fn serve_noop_runs_the_noop_server_as_its_own_process() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let mut child = Command::new(env!("CARGO_BIN_EXE_authzd-loadgen"))
        .arg("--serve-noop")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start authzd-loadgen --serve-noop");
    let mut endpoint = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut endpoint)
        .unwrap();
    let endpoint = endpoint.trim().to_string();
    assert!(endpoint.starts_with("http://127.0.0.1:"), "{endpoint:?}");
    let answered = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut client =
            authzd::proto::authorizer_client::AuthorizerClient::connect(endpoint.clone())
                .await
                .unwrap();
        client
            .authorize(authzd::proto::AuthorizeRequest::default())
            .await
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let answer = answered.expect("the no-op answers").into_inner();
    assert_eq!(answer, authzd::proto::AuthorizeResponse::default());
}
