//! End to end with `kubectl auth can-i`, which posts its SelfSubjectAccessReview as Kubernetes
//! protobuf and asks for protobuf back: against a real server, kubectl reads authzd's
//! protobuf answer and says yes (exit 0) or no (exit 1) with the reason, for an allow, no
//! opinion and a deny rule. The callers are impersonated (`--as`) by the local identity, a
//! super-user.
//!
//! kubectl comes from `AUTHZD_E2E_KUBECTL` (set by `scripts/test.sh`), else `kubectl` on
//! PATH. Without one the test is skipped with a message, unless `CI=true`, where a missing
//! kubectl is a failure. `KUBECONFIG` points at an empty file so no user config is read, and
//! every command gets its own `--cache-dir`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use crate::support::tools::{tool_or_skip, KUBECTL};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support::server::{run_with_timeout, sample_policy, Server};

/// What `kubectl auth can-i ARGS -v=8` printed: its exit code, stdout, and its log.
fn can_i(binary: &PathBuf, server: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let mut command = Command::new(binary);
    command
        .args(["auth", "can-i"])
        .args(args)
        .args(["-v=8", "--server", server, "--cache-dir"])
        .arg(cache.path())
        .env("KUBECONFIG", kubeconfig.path());
    let output = run_with_timeout(command, Duration::from_secs(60));
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn kubectl_auth_can_i_reads_protobuf_answers() {
    let Some(binary) = tool_or_skip(&KUBECTL) else {
        return;
    };
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let url = server.url();
    let ivan = [
        "--as",
        "ivan",
        "--as-group",
        "devs",
        "--as-group",
        "interns",
    ];

    // alice reads pods: yes.
    let (code, stdout, log) = can_i(&binary, &url, &["get", "pods", "--as", "alice"]);
    assert_eq!((code, stdout.trim()), (Some(0), "yes"), "{log}");
    // The review went out as protobuf and came back as protobuf.
    assert!(
        log.contains("Content-Type: application/vnd.kubernetes.protobuf"),
        "{log}"
    );
    let answered = log
        .split("POST ")
        .filter(|request| request.contains("/selfsubjectaccessreviews"))
        .any(|request| {
            request.contains("Response Status: 201")
                && request
                    .split("Response Status")
                    .nth(1)
                    .is_some_and(|response| {
                        response.contains("Content-Type: application/vnd.kubernetes.protobuf")
                    })
        });
    assert!(answered, "no protobuf 201 answer in the log:\n{log}");

    // No policy lets alice list secrets in dev: no, the reason given.
    let (code, stdout, log) = can_i(
        &binary,
        &url,
        &["list", "secrets", "-n", "dev", "--as", "alice"],
    );
    assert_eq!(code, Some(1), "{stdout}\n{log}");
    assert!(stdout.starts_with("no"), "{stdout}\n{log}");

    // ivan's group `interns` is denied secrets in dev by a deny rule, which kubectl shows.
    let args = [&["delete", "secrets", "-n", "dev"][..], &ivan[..]].concat();
    let (code, stdout, log) = can_i(&binary, &url, &args);
    assert_eq!(code, Some(1), "{stdout}\n{log}");
    assert!(stdout.starts_with("no"), "{stdout}\n{log}");
    assert!(stdout.contains("interns-no-secrets"), "{stdout}\n{log}");

    // ...while `devs` may delete pods there.
    let args = [&["delete", "pods", "-n", "dev"][..], &ivan[..]].concat();
    let (code, stdout, log) = can_i(&binary, &url, &args);
    assert_eq!((code, stdout.trim()), (Some(0), "yes"), "{log}");
}
