//! End to end with `buf curl` (npm `@bufbuild/buf`, pinned, installed into `.e2e-node` by
//! `scripts/test.sh`): a grpcurl-like client that knows authzd only through server reflection.
//! It lists every service and calls Authorize, GetAllowedSubjects and the Envoy Check.
//!
//! buf comes from `AUTHZD_E2E_BUF`, else `.e2e-node/node_modules/.bin/buf`. Without it the test
//! is skipped with a message, unless `CI=true`, where a missing buf is a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use crate::support::tools::{tool_or_skip, BUF};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support::server::{run_with_timeout, sample_policy, Server};
use serde_json::Value;

/// `buf curl` over plaintext HTTP/2 (gRPC protocol, schema from reflection); stdout.
fn curl(buf: &PathBuf, server: &Server, extra: &[&str]) -> String {
    let mut command = Command::new(buf);
    command
        .args(["curl", "--protocol", "grpc", "--http2-prior-knowledge"])
        .args(extra);
    let output = run_with_timeout(command, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "buf curl {extra:?} failed ({}):\n{stdout}\n{}\nserver:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        server.stderr()
    );
    stdout
}

fn call(buf: &PathBuf, server: &Server, method: &str, body: &str) -> Value {
    let url = format!("{}/{method}", server.url());
    let out = curl(buf, server, &["-d", body, &url]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{method}: not JSON ({e}):\n{out}"))
}

#[tokio::test]
async fn buf_curl_lists_and_calls_through_reflection() {
    let Some(buf) = tool_or_skip(&BUF) else {
        return;
    };
    let policy = sample_policy();
    let server = Server::start_serving(
        policy.path(),
        &[
            "--envoy-path-template",
            "/api/v1/namespaces/{namespace}/{resource}/{name}",
        ],
    )
    .await;

    let services = curl(&buf, &server, &["--list-services", &server.url()]);
    let listed: Vec<&str> = services.lines().map(str::trim).collect();
    for service in [
        "authz.v1.Authorizer",
        "authz.v1.AccessReview",
        "authz.v1.PolicyAdmin",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "envoy.service.auth.v3.Authorization",
    ] {
        assert!(listed.contains(&service), "{service} not in {listed:?}");
    }

    let allowed = call(
        &buf,
        &server,
        "authz.v1.Authorizer/Authorize",
        r#"{"user":{"name":"alice"},"action":{"resourceAttributes":{"namespace":"dev","verb":"get","resource":"pods"}}}"#,
    );
    assert_eq!(allowed["decision"], "DECISION_ALLOW", "{allowed}");
    assert_eq!(
        allowed["allowedBy"][0]["binding"],
        "ClusterRoleBinding/read-pods"
    );

    let subjects = call(
        &buf,
        &server,
        "authz.v1.Authorizer/GetAllowedSubjects",
        r#"{"action":{"resourceAttributes":{"namespace":"dev","verb":"delete","resource":"secrets"}}}"#,
    );
    let text = subjects.to_string();
    assert!(text.contains("devs"), "{text}");
    assert!(!text.contains("alice"), "{text}");

    // Envoy's Check, as Envoy would send it: alice may get pods (template → resource request).
    let check = |user: &str, path: &str| {
        call(
            &buf,
            &server,
            "envoy.service.auth.v3.Authorization/Check",
            &format!(
                r#"{{"attributes":{{"request":{{"http":{{"method":"GET","path":"{path}","headers":{{"x-remote-user":"{user}"}}}}}}}}}}"#
            ),
        )
    };
    let ok = check("alice", "/api/v1/namespaces/dev/pods/web");
    assert!(ok.get("okResponse").is_some(), "{ok}");
    assert_eq!(
        ok["status"].get("code"),
        None,
        "code 0 (OK) is omitted: {ok}"
    );
    let denied = check("bob", "/api/v1/namespaces/dev/pods/web");
    assert_eq!(denied["status"]["code"], 7, "{denied}");
    assert_eq!(denied["deniedResponse"]["status"]["code"], "Forbidden");
    let reason = denied["deniedResponse"]["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["header"]["key"] == "x-authzd-reason")
        .map(|h| h["header"]["value"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no reason header: {denied}"));
    assert!(
        reason.contains(r#"user "bob" cannot get resource "pods""#),
        "{reason}"
    );
}
