//! A policy directory as users keep it: `helm template --output-dir` output
//! (`tests/fixtures/helm-rendered/`, a made-up chart `ledger`) holds ServiceAccounts, a
//! Deployment, a Service, a CRD, ... beside its RBAC objects. They are skipped and counted by
//! `lint` and `serve`, the RBAC objects decide, and a misspelt policy kind is still refused
//! with `file:line`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use authzd::proto::action::Kind;
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::Action;

use crate::support::server::{resource_request, run_bin, Server};

/// The fixture's files, relative to `tests/fixtures/helm-rendered/`, with their text
/// (`include_str!`, so a change to them rebuilds this test).
const CHART: [(&str, &str); 13] = [
    (
        "ledger/crds/ledgerentries.yaml",
        include_str!("../fixtures/helm-rendered/ledger/crds/ledgerentries.yaml"),
    ),
    (
        "ledger/templates/clusterrole.yaml",
        include_str!("../fixtures/helm-rendered/ledger/templates/clusterrole.yaml"),
    ),
    (
        "ledger/templates/configmap.yaml",
        include_str!("../fixtures/helm-rendered/ledger/templates/configmap.yaml"),
    ),
    (
        "ledger/templates/deployment.yaml",
        include_str!("../fixtures/helm-rendered/ledger/templates/deployment.yaml"),
    ),
    (
        "ledger/templates/hpa.yaml",
        include_str!("../fixtures/helm-rendered/ledger/templates/hpa.yaml"),
    ),
    (
        "ledger/templates/networkpolicy.yaml",
        include_str!("../fixtures/helm-rendered/ledger/templates/networkpolicy.yaml"),
    ),
    (
        "ledger/templates/pdb.yaml",
        include_str!("../fixtures/helm-rendered/ledger/templates/pdb.yaml"),
    ),
    (
        "ledger/templates/role.yaml",
        include_str!("../fixtures/helm-rendered/ledger/templates/role.yaml"),
    ),
    (
        "ledger/templates/rolebinding.yaml",
        include_str!("../fixtures/helm-rendered/ledger/templates/rolebinding.yaml"),
    ),
    (
        "ledger/templates/service.yaml",
        include_str!("../fixtures/helm-rendered/ledger/templates/service.yaml"),
    ),
    (
        "ledger/templates/serviceaccount.yaml",
        include_str!("../fixtures/helm-rendered/ledger/templates/serviceaccount.yaml"),
    ),
    (
        "ledger/templates/servicemonitor.yaml",
        include_str!("../fixtures/helm-rendered/ledger/templates/servicemonitor.yaml"),
    ),
    (
        "ledger/templates/tests/test-connection.yaml",
        include_str!("../fixtures/helm-rendered/ledger/templates/tests/test-connection.yaml"),
    ),
];

/// What the chart holds besides policy, as `lint` and `serve` count it.
const SKIPPED: &str =
    "skipped 11 objects of other kinds: 2 ServiceAccount (v1), 1 ConfigMap (v1), \
     1 CustomResourceDefinition (apiextensions.k8s.io/v1), 1 Deployment (apps/v1), \
     1 HorizontalPodAutoscaler (autoscaling/v2), 1 NetworkPolicy (networking.k8s.io/v1), \
     1 Pod (v1), 1 PodDisruptionBudget (policy/v1), 1 Service (v1), \
     1 ServiceMonitor (monitoring.coreos.com/v1)";

/// The chart written into a temporary directory, `edit` applied to each file's text first.
fn rendered(edit: impl Fn(&str, &str) -> String) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rendered");
    for (name, text) in CHART {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, edit(name, text)).unwrap();
    }
    (dir, root)
}

fn authzd(policy: &Path, args: &[&str]) -> Output {
    let mut all: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    all.push(OsStr::new("--policy"));
    all.push(policy.as_os_str());
    run_bin(&all, Duration::from_secs(60))
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn every_fixture_file_is_in_the_chart() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/helm-rendered");
    let mut on_disk = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                on_disk.push(path.strip_prefix(&root).unwrap().display().to_string());
            }
        }
    }
    on_disk.sort();
    let listed: Vec<&str> = CHART.iter().map(|(name, _)| *name).collect();
    assert_eq!(on_disk, listed);
}

#[test]
fn lint_counts_the_skipped_objects_and_exits_zero() {
    let (_dir, root) = rendered(|_, text| text.to_owned());
    let out = authzd(&root, &["lint"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "note: {SKIPPED}\nok: {}: 2 roles, 2 bindings, 0 ABAC rules\n",
            root.display()
        )
    );
}

#[test]
fn check_decides_with_the_charts_rbac_objects() {
    let (_dir, root) = rendered(|_, text| text.to_owned());
    let ask = |who: &[&str], verb: &str, group: &str, resource: &str, namespace: &str| {
        let mut args = vec!["check"];
        args.extend_from_slice(who);
        args.extend_from_slice(&[
            "--verb",
            verb,
            "--api-group",
            group,
            "--resource",
            resource,
            "-n",
            namespace,
        ]);
        authzd(&root, &args)
    };
    let ledger = ["--user", "system:serviceaccount:finance:ledger"];
    // The ClusterRoleBinding grants the chart's ServiceAccount and the auditors group.
    let out = ask(
        &ledger,
        "list",
        "finance.example.com",
        "ledgerentries",
        "finance",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains(
            "allowed by: RBAC ClusterRoleBinding/ledger-reader -> ClusterRole/ledger-reader rule 0 ("
        ),
        "{}",
        text(&out)
    );
    let auditor = ["--user", "eve", "--group", "finance:auditors"];
    let out = ask(
        &auditor,
        "watch",
        "finance.example.com",
        "ledgerentries",
        "audit",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // The RoleBinding grants leases in the release namespace only.
    let out = ask(
        &ledger,
        "update",
        "coordination.k8s.io",
        "leases",
        "finance",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = ask(
        &ledger,
        "update",
        "coordination.k8s.io",
        "leases",
        "default",
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    // Nothing grants what the chart does not.
    let out = ask(
        &ledger,
        "delete",
        "finance.example.com",
        "ledgerentries",
        "finance",
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}

#[test]
fn a_misspelt_policy_kind_in_the_chart_is_refused_with_file_line() {
    let (_dir, root) = rendered(|name, text| {
        if name.ends_with("clusterrole.yaml") {
            text.replace("kind: ClusterRoleBinding", "kind: ClusterRoleBindng")
        } else {
            text.to_owned()
        }
    });
    let file = root.join("ledger/templates/clusterrole.yaml");
    let problem = format!(
        "{}:22: unknown kind `ClusterRoleBindng` for apiVersion `rbac.authorization.k8s.io/v1`",
        file.display()
    );
    let out = authzd(&root, &["lint"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{problem}\n1 problem(s) in {}\n", root.display())
    );
    let out = authzd(
        &root,
        &[
            "check",
            "--user",
            "eve",
            "--verb",
            "get",
            "--resource",
            "pods",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains(&problem), "{}", text(&out));
}

/// `serve` logs the count when it loads the directory, and answers from the chart's RBAC.
#[tokio::test]
async fn serve_logs_the_skipped_objects_and_answers_from_the_chart() {
    let (_dir, root) = rendered(|_, text| text.to_owned());
    let server = Server::start_serving(&root, &[]).await;
    let log = server.stderr();
    assert!(
        log.contains(&format!(
            "policy files hold objects of other API groups: {SKIPPED}"
        )),
        "{log}"
    );
    let mut client = AuthorizerClient::new(server.channel().await);
    let mut request = resource_request(
        "system:serviceaccount:finance:ledger",
        &[],
        "finance",
        "get",
        "ledgerentries",
    );
    if let Some(Action {
        kind: Some(Kind::ResourceAttributes(resource)),
    }) = request.action.as_mut()
    {
        resource.group = "finance.example.com".into();
    }
    let answer = client.authorize(request).await.unwrap().into_inner();
    assert!(answer.allowed, "{answer:?}");
}
