//! Operating replicas on etcd (docs/etcd.md §7, §10) with the real thing: a 3-member etcd
//! cluster on loopback and real authzd replicas, driven as an operator and kube-apiserver do —
//! `authzd apply/delete/status/replicas` as subprocesses, the webhook and `/metrics` over HTTP.
//!
//! etcd comes from `AUTHZD_E2E_ETCD`, else `etcd` on PATH; without one the test is skipped
//! with a message, unless `CI=true`, where a missing etcd is a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use crate::support::etcd::{etcd_binary, unique_prefix, Cluster, Replica};
use crate::support::server::{http_get, metric, post_json, run_bin, Server, RBAC_YAML};
use serde_json::{json, Value};

/// One replica in etcd mode, fenced 1 s after its last proof of freshness.
async fn replica(cluster: &Cluster, prefix: &str, id: &str) -> Replica {
    Replica::start(cluster, prefix, id, &["--max-staleness", "1s"]).await
}

/// `authzd ARGS... --server URL`: (exit code, stdout, stderr).
fn cli(server: &Server, args: &[&OsStr]) -> (Option<i32>, String, String) {
    let url = server.url();
    let mut all = args.to_vec();
    all.extend([OsStr::new("--server"), OsStr::new(&url)]);
    let out = run_bin(&all, Duration::from_secs(30));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `cli` that must succeed; its stdout.
fn cli_ok(server: &Server, args: &[&str]) -> String {
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let (code, stdout, stderr) = cli(server, &args);
    assert_eq!(code, Some(0), "authzd {args:?}:\n{stdout}\n{stderr}");
    stdout
}

/// A webhook `SubjectAccessReview` (v1) as kube-apiserver posts it: status code and `status`.
async fn webhook(
    server: &Server,
    user: &str,
    groups: &[&str],
    ns: &str,
    resource: &str,
) -> (u16, Value) {
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": groups,
            "resourceAttributes": {"namespace": ns, "verb": "get", "resource": resource}
        }
    });
    let (code, answer) = post_json(server.addr, "/authorize", &review).await;
    (code, answer["status"].clone())
}

/// Polls `/metrics` until `authzd_store_fenced` is `want`, for at most `within`.
async fn wait_fenced(server: &Server, want: f64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let fenced = metric(server.addr, "authzd_store_fenced").await;
        if fenced == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "authzd_store_fenced is {fenced:?}, not {want}, after {within:?}\n{}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes acknowledged across replicas name them (and the fenced one) in the CLI's output;
/// `status`, `replicas` and `/metrics` show the store; with quorum lost the replica fences,
/// and while fenced the webhook answers a granted request "no opinion" (200, allowed false, no
/// denied, why in evaluationError) and a denied one denied, as `/metrics`, `/readyz`, `status`
/// and `replicas` show; with quorum back, it unfences and allows again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operating_replicas_and_the_webhook_while_fenced() {
    let Some(binary) = etcd_binary() else { return };
    let cluster = Cluster::start(binary);
    let prefix = unique_prefix("ops");
    let a = replica(&cluster, &prefix, "ops-a").await.server;
    let b = replica(&cluster, &prefix, "ops-b").await.server;
    let dir = tempfile::tempdir().unwrap();

    // alice reads pods; interns are denied secrets in `dev` (a deny rule).
    let policy = dir.path().join("rbac.yaml");
    std::fs::write(&policy, RBAC_YAML).unwrap();
    let out = cli_ok(&a, &["apply", "-f", policy.to_str().unwrap()]);
    assert!(
        out.ends_with("acknowledged by ops-a, ops-b\n"),
        "default --ack cluster: {out}"
    );
    let grant = dir.path().join("frank.yaml");
    std::fs::write(
        &grant,
        crate::support::server::cluster_role_binding(
            "frank-read",
            "pod-reader",
            &[("User", "frank")],
        ),
    )
    .unwrap();
    // A dry run answers with the access delta and commits nothing.
    let revision = |out: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix("revision: "))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no revision in {out}"))
    };
    let before = revision(&cli_ok(&b, &["status"]));
    let out = cli_ok(&a, &["apply", "--dry-run", "-f", grant.to_str().unwrap()]);
    assert!(
        out.starts_with("ClusterRoleBinding/frank-read applied (dry run)\nrevision ")
            && out.contains("\ncluster-wide:\n  + get group=\"\" resource=pods subresource=\"\" name=*: user frank\n"),
        "{out}"
    );
    assert_eq!(
        revision(&cli_ok(&b, &["status"])),
        before,
        "a dry run committed"
    );
    let out = cli_ok(
        &a,
        &["apply", "-f", grant.to_str().unwrap(), "--ack", "local"],
    );
    assert!(
        out.ends_with("\nacknowledged by ops-a\n"),
        "--ack local: {out}"
    );

    // A replica frozen during a deletion: taken as fenced, and the output says so.
    crate::support::etcd::signal_process(b.pid(), "STOP");
    let args = ["delete", "clusterrolebinding", "frank-read"];
    let (code, out, err) = cli(&a, &args.map(OsStr::new));
    crate::support::etcd::signal_process(b.pid(), "CONT");
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        out.starts_with("deleted at revision ")
            && out.ends_with("\nacknowledged by ops-a; fenced: ops-b\n"),
        "{out}"
    );

    // Healthy: the store on /metrics, status and replicas; the webhook allows.
    wait_fenced(&a, 0.0, Duration::from_secs(10)).await;
    // The active endpoint may be any member (failover), so only its form is checked.
    let (_, text) = http_get(a.addr, "/metrics").await;
    let prefix = r#"authzd_store_info{store="etcd",replica_id="ops-a",endpoint="http://127.0.0.1:"#;
    assert!(
        text.lines()
            .any(|line| line.starts_with(prefix) && line.ends_with("\"} 1")),
        "{text}"
    );
    assert_eq!(metric(a.addr, "authzd_store_replicas").await, Some(2.0));
    let age = metric(a.addr, "authzd_store_freshness_age_seconds")
        .await
        .unwrap();
    assert!((0.0..=1.0).contains(&age), "freshness age {age}");
    let (code, status) = webhook(&a, "alice", &[], "default", "pods").await;
    assert_eq!((code, &status["allowed"]), (200, &json!(true)), "{status}");
    let out = cli_ok(&a, &["status"]);
    for line in [
        "\nstore: etcd\n",
        "\nreplica id: ops-a\n",
        "\netcd endpoint: http://127.0.0.1:",
        "\netcd head revision: ",
        "\nfenced: no\n",
        "\nreplicas:\n  REPLICA  APPLIED  NOTE\n  ops-a    ",
    ] {
        assert!(out.contains(line), "no {line:?} in\n{out}");
    }
    let out = cli_ok(&b, &["replicas"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("REPLICA  APPLIED"), "{out}");
    assert!(lines[1].starts_with("ops-a  "), "{out}");
    assert!(
        lines[2].starts_with("ops-b  ") && lines[2].contains("this replica"),
        "{out}"
    );

    // Quorum lost: the replicas fence after --max-staleness.
    cluster.signal(1, "STOP");
    cluster.signal(2, "STOP");
    wait_fenced(&a, 1.0, Duration::from_secs(10)).await;

    let (code, status) = webhook(&a, "alice", &[], "default", "pods").await;
    assert_eq!(code, 200, "the webhook answers, no opinion: {status}");
    assert_eq!(status["allowed"], false, "{status}");
    assert!(
        status.get("denied").is_none(),
        "no opinion is not a deny: {status}"
    );
    let error = status["evaluationError"].as_str().unwrap_or_default();
    assert!(
        error.contains("fenced") && error.contains("--max-staleness"),
        "{status}"
    );
    let (code, status) = webhook(&a, "bob", &["interns"], "dev", "secrets").await;
    assert_eq!(code, 200, "{status}");
    assert_eq!(status["denied"], true, "a deny is still a deny: {status}");
    assert_eq!(status["allowed"], false, "{status}");
    let (code, status) = webhook(&a, "nobody", &[], "default", "pods").await;
    assert_eq!(code, 200, "{status}");
    assert_eq!(
        (&status["allowed"], status.get("denied")),
        (&json!(false), None)
    );
    assert!(status.get("evaluationError").is_none(), "{status}");
    assert_eq!(http_get(a.addr, "/readyz").await.0, 503);

    let out = cli_ok(&a, &["status"]);
    assert!(out.contains("\nstore: etcd\n"), "{out}");
    assert!(out.contains("\nfenced: yes"), "{out}");
    let out = cli_ok(&a, &["replicas"]);
    assert!(
        out.lines()
            .any(|line| line.starts_with("ops-a  ") && line.contains("this replica")),
        "{out}"
    );

    // Quorum back: unfenced, and the grant is an allow again.
    cluster.signal(1, "CONT");
    cluster.signal(2, "CONT");
    wait_fenced(&a, 0.0, Duration::from_secs(20)).await;
    let (code, status) = webhook(&a, "alice", &[], "default", "pods").await;
    assert_eq!((code, &status["allowed"]), (200, &json!(true)), "{status}");
    assert!(cli_ok(&a, &["status"]).contains("\nfenced: no\n"));
}

/// A directory-mode server: `replicas` says it has none (stderr, exit 0, empty stdout), and
/// `/metrics` names the store without etcd's gauges.
#[tokio::test]
async fn a_directory_server_has_no_replicas() {
    let policy = crate::support::server::sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let (code, stdout, stderr) = cli(&server, &[OsStr::new("replicas")]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("is not in etcd mode"), "{stderr}");
    let (_, text) = http_get(server.addr, "/metrics").await;
    assert!(
        text.contains("\nauthzd_store_info{store=\"directory\"} 1\n"),
        "{text}"
    );
    assert!(!text.contains("authzd_store_fenced"), "{text}");
    let out = cli_ok(&server, &["status"]);
    assert!(!out.contains("store:"), "{out}");
}
