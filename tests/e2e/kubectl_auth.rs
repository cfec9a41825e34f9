//! End to end with the real kubectl as a first-class client, the way a Kubernetes user asks:
//! `kubectl auth can-i` (resources, subresources, resource names, non-resource URLs,
//! namespaces; `--as`/`--as-group`), `kubectl auth can-i --list` and `kubectl auth whoami`,
//! over plaintext and over TLS, authenticated with a bearer token from a kubeconfig, against a
//! policy with deny rules and negation. Every can-i answer is checked against the server's own
//! SubjectAccessReview over gRPC; exit codes as kubectl prints them (0 yes, 1 no).
//!
//! kubectl comes from `AUTHZD_E2E_KUBECTL` (set by `scripts/test.sh`), else `kubectl` on
//! PATH. Without one the test is skipped with a message, unless `CI=true`, where a missing
//! kubectl is a failure. Every command gets its own kubeconfig and `--cache-dir`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use crate::support::ca::Ca;
use crate::support::tools::{tool_or_skip, KUBECTL};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::server::{run_with_timeout, Server};
use authzd::proto::access_review_client::AccessReviewClient;
use authzd::proto::action::Kind;
use authzd::proto::{
    Action, NonResourceAttributes, ResourceAttributes, SubjectAccessReviewRequest,
};

/// * group `devs` reads pods (and their logs) everywhere and may `get /healthz`;
/// * alice edits everything in `dev` except secrets (negation), but may read the secret
///   `public-cert`, and may update deployments;
/// * group `interns` may not delete pods in `dev` (a deny rule);
/// * bob may impersonate users and groups.
const POLICY: &str = include_str!("../fixtures/kubectl-auth.yaml");

const TOKENS: &str = "alice-token,alice,uid-a,\"devs,interns\"\n\
bob-token,bob,uid-b\n\
admin-token,admin,uid-0,system:masters\n";

/// One kubectl invocation's world: a kubeconfig naming the server, its CA and a token.
struct Kubectl {
    binary: PathBuf,
    dir: tempfile::TempDir,
}

impl Kubectl {
    fn new(binary: &Path, server: &str, ca: Option<&Path>, token: &str) -> Kubectl {
        let dir = tempfile::tempdir().unwrap();
        let ca = ca.map_or(String::new(), |ca| {
            format!(", certificate-authority: {}", ca.display())
        });
        let user = if token.is_empty() {
            "{}".to_string()
        } else {
            format!("{{token: {token}}}")
        };
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: authzd\n  cluster: {{server: \"{server}\"{ca}}}\nusers:\n- name: caller\n  user: {user}\ncontexts:\n- name: authzd\n  context: {{cluster: authzd, user: caller, namespace: default}}\ncurrent-context: authzd\n"
        );
        std::fs::write(dir.path().join("kubeconfig"), kubeconfig).unwrap();
        Kubectl {
            binary: binary.to_path_buf(),
            dir,
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        let cache = tempfile::tempdir_in(self.dir.path()).unwrap();
        let mut command = Command::new(&self.binary);
        command
            .args(args)
            .arg("--cache-dir")
            .arg(cache.path())
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"));
        run_with_timeout(command, Duration::from_secs(60))
    }

    /// `kubectl auth can-i ARGS`: whether it said yes (exit 0) or no (exit 1), and stdout.
    fn can_i(&self, args: &[&str]) -> (bool, String) {
        let output = self.run(&[&["auth", "can-i"][..], args].concat());
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        match output.status.code() {
            Some(0) => {
                assert!(stdout.starts_with("yes"), "{args:?}: {stdout} {stderr}");
                (true, stdout)
            }
            Some(1) => {
                assert!(stdout.starts_with("no"), "{args:?}: {stdout} {stderr}");
                (false, stdout)
            }
            other => panic!("{args:?}: exit {other:?}: {stdout} {stderr}"),
        }
    }
}

fn resource(
    namespace: &str,
    verb: &str,
    group: &str,
    resource: &str,
    sub: &str,
    name: &str,
) -> Action {
    Action {
        kind: Some(Kind::ResourceAttributes(ResourceAttributes {
            namespace: namespace.into(),
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            ..Default::default()
        })),
    }
}

fn path(verb: &str, path: &str) -> Action {
    Action {
        kind: Some(Kind::NonResourceAttributes(NonResourceAttributes {
            path: path.into(),
            verb: verb.into(),
        })),
    }
}

/// The can-i questions: kubectl's arguments and the same question as an action, with the
/// answer the policy gives alice (groups devs, interns).
fn questions() -> Vec<(Vec<&'static str>, Action, bool)> {
    vec![
        (
            vec!["get", "pods", "-n", "dev"],
            resource("dev", "get", "", "pods", "", ""),
            true,
        ),
        // The interns' deny rule outranks alice's `*` in dev.
        (
            vec!["delete", "pods", "-n", "dev"],
            resource("dev", "delete", "", "pods", "", ""),
            false,
        ),
        (
            vec!["get", "pods", "--subresource", "log", "-n", "prod"],
            resource("prod", "get", "", "pods", "log", ""),
            true,
        ),
        (
            vec!["get", "pods", "--subresource", "exec", "-n", "prod"],
            resource("prod", "get", "", "pods", "exec", ""),
            false,
        ),
        // Negation: everything but secrets...
        (
            vec!["list", "secrets", "-n", "dev"],
            resource("dev", "list", "", "secrets", "", ""),
            false,
        ),
        (
            vec!["create", "configmaps", "-n", "dev"],
            resource("dev", "create", "", "configmaps", "", ""),
            true,
        ),
        // ...except the one secret named.
        (
            vec!["get", "secrets/public-cert", "-n", "dev"],
            resource("dev", "get", "", "secrets", "", "public-cert"),
            true,
        ),
        (
            vec!["get", "secrets/private-key", "-n", "dev"],
            resource("dev", "get", "", "secrets", "", "private-key"),
            false,
        ),
        // Discovery maps deployments to apps.
        (
            vec!["create", "deployments", "-n", "dev"],
            resource("dev", "create", "apps", "deployments", "", ""),
            true,
        ),
        (
            vec!["create", "deployments", "-n", "prod"],
            resource("prod", "create", "apps", "deployments", "", ""),
            false,
        ),
        (vec!["get", "/healthz"], path("get", "/healthz"), true),
        (vec!["get", "/metrics"], path("get", "/metrics"), false),
    ]
}

/// The server's own answer (gRPC SubjectAccessReview, asked as the local identity).
async fn authorized(server: &Server, user: &str, groups: &[&str], action: &Action) -> bool {
    let mut reviews = AccessReviewClient::new(server.channel().await);
    let request = SubjectAccessReviewRequest {
        action: Some(action.clone()),
        user: user.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        ..Default::default()
    };
    reviews
        .subject_access_review(request)
        .await
        .unwrap()
        .into_inner()
        .allowed
}

fn policy_and_tokens() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("policy")).unwrap();
    std::fs::write(dir.path().join("policy/rbac.yaml"), POLICY).unwrap();
    std::fs::write(dir.path().join("tokens.csv"), TOKENS).unwrap();
    dir
}

/// Alice, as kubectl impersonates her with her groups.
const AS_ALICE: [&str; 6] = [
    "--as",
    "alice",
    "--as-group",
    "devs",
    "--as-group",
    "interns",
];

/// Over plaintext (client-go sends no bearer token over plain HTTP), as the loopback
/// listener's local identity, a super-user, impersonating alice: every can-i answer equals
/// the server's own SubjectAccessReview; --list and whoami answer for alice.
#[tokio::test]
async fn kubectl_auth_can_i_list_and_whoami_answer_as_authorize_does() {
    let Some(binary) = tool_or_skip(&KUBECTL) else {
        return;
    };
    let dir = policy_and_tokens();
    let server = Server::start_serving(&dir.path().join("policy"), &["--no-watch"]).await;
    let kubectl = Kubectl::new(&binary, &server.url(), None, "");

    for (args, action, expected) in questions() {
        let truth = authorized(
            &server,
            "alice",
            &["devs", "interns", "system:authenticated"],
            &action,
        )
        .await;
        assert_eq!(truth, expected, "the policy's answer to {args:?}");
        let (said, stdout) = kubectl.can_i(&[&args[..], &AS_ALICE[..]].concat());
        assert_eq!(
            said, truth,
            "kubectl auth can-i {args:?} --as alice: {stdout}"
        );
    }
    // Without the interns group, the deny no longer applies; with it, its reason reaches
    // kubectl.
    let (said, _) = kubectl.can_i(&[
        "delete",
        "pods",
        "-n",
        "dev",
        "--as",
        "alice",
        "--as-group",
        "devs",
    ]);
    assert!(said);
    let (_, stdout) =
        kubectl.can_i(&[&["delete", "pods", "-n", "dev"][..], &AS_ALICE[..]].concat());
    assert!(stdout.contains("interns-no-pod-deletes"), "{stdout}");

    // --list in dev: the whole grants; the negated rule left out (incomplete).
    let table = list(&kubectl, &[&["-n", "dev"][..], &AS_ALICE[..]].concat());
    let row = |resource: &str| {
        table
            .lines()
            .find(|line| line.split_whitespace().next() == Some(resource))
            .unwrap_or_else(|| panic!("no {resource} row in\n{table}"))
            .to_string()
    };
    assert!(row("deployments.apps").contains("[update]"), "{table}");
    assert!(row("secrets").contains("[public-cert]"), "{table}");
    assert!(row("pods/log").contains("[get list]"), "{table}");
    assert!(table.contains("[/healthz]"), "{table}");
    // The `*` minus secrets grant cannot be written as a Kubernetes rule: not listed.
    assert!(!table.lines().any(|l| l.starts_with("*.")), "{table}");
    // Outside dev only the cluster grants remain.
    let prod = list(&kubectl, &[&["-n", "prod"][..], &AS_ALICE[..]].concat());
    assert!(!prod.contains("deployments.apps"), "{prod}");
    assert!(prod.contains("pods/log"), "{prod}");
    // The local identity itself is a super-user: everything.
    let everything = list(&kubectl, &["-n", "dev"]);
    assert!(
        everything.lines().any(|l| l.starts_with("*.*")),
        "{everything}"
    );

    let me = whoami(&kubectl, &[]);
    assert_eq!(me["status"]["userInfo"]["username"], "system:admin", "{me}");
    let impersonated = whoami(&kubectl, &AS_ALICE);
    assert_eq!(impersonated["status"]["userInfo"]["username"], "alice");
    assert_eq!(
        impersonated["status"]["userInfo"]["groups"],
        serde_json::json!(["devs", "interns", "system:authenticated"])
    );
}

/// `kubectl auth can-i --list ARGS`: its table.
fn list(kubectl: &Kubectl, args: &[&str]) -> String {
    let output = kubectl.run(&[&["auth", "can-i", "--list"][..], args].concat());
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{table} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    table
}

/// `kubectl auth whoami -o json ARGS`.
fn whoami(kubectl: &Kubectl, args: &[&str]) -> serde_json::Value {
    let output = kubectl.run(&[&["auth", "whoami", "-o", "json"][..], args].concat());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The same client over TLS: kubectl verifies authzd's certificate against the CA in its
/// kubeconfig and sends its bearer token.
#[tokio::test]
async fn kubectl_over_tls_with_a_bearer_token() {
    let Some(binary) = tool_or_skip(&KUBECTL) else {
        return;
    };
    let dir = policy_and_tokens();
    let ca = Ca::new("authzd kubectl test CA");
    let leaf = ca.leaf(&["localhost"], "localhost", &[]);
    let file = |name: &str, content: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path
    };
    let ca = file("ca.crt", &ca.pem);
    let cert = file("server.crt", &leaf.pem);
    let key = file("server.key", &leaf.key_pem);
    let tokens = dir.path().join("tokens.csv");
    let server = Server::start(
        &dir.path().join("policy"),
        &[
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--tls-cert-file",
            cert.to_str().unwrap(),
            "--tls-private-key-file",
            key.to_str().unwrap(),
            "--no-watch",
        ],
    );
    let url = format!("https://localhost:{}", server.addr.port());
    let alice = Kubectl::new(&binary, &url, Some(&ca), "alice-token");
    // The first call may race the first policy load: retry until the server answers.
    let mut ready = false;
    for _ in 0..50 {
        let output = alice.run(&["auth", "can-i", "get", "pods", "-n", "dev"]);
        if output.status.code() == Some(0) {
            ready = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        ready,
        "kubectl over TLS never got a yes: {}",
        server.stderr()
    );
    for (args, _, expected) in questions() {
        let (said, stdout) = alice.can_i(&args);
        assert_eq!(said, expected, "TLS: kubectl auth can-i {args:?}: {stdout}");
    }
    // bob may impersonate: as alice with her groups he gets her answers.
    let bob = Kubectl::new(&binary, &url, Some(&ca), "bob-token");
    for (args, _, expected) in questions() {
        let (said, stdout) = bob.can_i(&[&args[..], &AS_ALICE[..]].concat());
        assert_eq!(said, expected, "TLS: bob --as alice: {args:?}: {stdout}");
    }
    // alice may not impersonate: refused, naming what she lacks.
    let refused = alice.run(&["auth", "can-i", "get", "pods", "--as", "bob"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("cannot impersonate users \"bob\""),
        "{stderr}"
    );
    // Her own list and identity, as her token says.
    assert_eq!(
        list(&alice, &["-n", "dev"]),
        list(&bob, &[&["-n", "dev"][..], &AS_ALICE[..]].concat())
    );
    let me = whoami(&alice, &[]);
    assert_eq!(me["status"]["userInfo"]["username"], "alice", "{me}");
    assert_eq!(me["status"]["userInfo"]["uid"], "uid-a", "{me}");
    assert_eq!(
        me["status"]["userInfo"]["groups"],
        serde_json::json!(["devs", "interns", "system:authenticated"]),
        "{me}"
    );
    // A client that does not trust authzd's CA is refused by kubectl itself.
    let untrusting = Kubectl::new(&binary, &url, None, "alice-token");
    let refused = untrusting.run(&["auth", "can-i", "get", "pods"]);
    assert!(!refused.status.success());
}
