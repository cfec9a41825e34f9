//! End to end with a real, independent client: Python grpcio that knows authzd only through
//! server reflection (`tests/e2e/reflection_client.py`).
//!
//! The interpreter comes from `AUTHZD_E2E_PYTHON` (set by `scripts/test.sh`), else
//! `.e2e-venv/bin/python`. Without one that can import grpcio and grpcio-reflection the test
//! is skipped with a message — unless `CI=true`, where a missing client is a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use crate::support::tools::{tool_or_skip, PYTHON_GRPC};
use std::process::Command;
use std::time::Duration;

use crate::support::server::{run_with_timeout, sample_policy, Server};

#[tokio::test]
async fn python_client_uses_only_reflection() {
    let Some(python) = tool_or_skip(&PYTHON_GRPC) else {
        return;
    };
    let policy = sample_policy();
    // A rule over object content (docs/policy.md §4), which the client exercises with `content`.
    std::fs::write(
        policy.path().join("content.yaml"),
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: labeler}\n\
         rules:\n- {apiGroups: [apps], resources: [deployments], verbs: [update], fields: [\".metadata.labels\"]}\n\
         ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: labelbot}\n\
         subjects: [{kind: User, name: labelbot}]\n\
         roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: labeler}\n",
    )
    .unwrap();
    let server = Server::start_serving(
        policy.path(),
        &[
            "--envoy-path-template",
            "/api/v1/namespaces/{namespace}/{resource}/{name}",
        ],
    )
    .await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/e2e/reflection_client.py"
    );
    let mut client = Command::new(&python);
    client.arg(script).arg(server.addr.to_string());
    let output = run_with_timeout(client, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python client failed ({}):\n{stdout}\n{stderr}\nserver stderr:\n{}",
        output.status,
        server.stderr()
    );
    assert!(stdout.contains("checks passed"), "{stdout}");
    println!("{stdout}");
}
