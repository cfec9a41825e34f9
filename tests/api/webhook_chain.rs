//! The Webhook authorizer in the chain, against a second real authzd as the webhook (its
//! `/authorize` endpoint, the kube-apiserver webhook contract) and against an address where
//! nothing listens: `RBAC,Webhook` where local deny rules win, delegation of what RBAC leaves
//! undecided, the authorized TTL (a revoked remote grant is served from the cache until the
//! TTL passes, as upstream's webhook cache does, and then no longer), failure policies from an
//! AuthorizationConfiguration, and who-can reporting that a webhook cannot list.
//! The webhook client's own behaviour (retries, timeouts, flips, TLS, cache steps) is tested
//! against a real HTTP server in tests/webhook_client.rs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::server::{resource_request, Server};
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::policy_admin_client::PolicyAdminClient;
use authzd::proto::{
    AuthorizeResponse, Decision, DeleteRequest, GetAllowedSubjectsRequest, ObjectRef,
};

/// The webhook's own policy: alice may get configmaps and secrets anywhere.
const REMOTE_POLICY: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: remote-reader}
rules:
- {apiGroups: [""], resources: [configmaps, secrets], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-remote}
subjects: [{kind: User, name: alice}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: remote-reader}
"#;

/// The local policy: alice may get pods; a deny rule withholds secrets from her.
const LOCAL_POLICY: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: local}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get]}
- {apiGroups: [""], resources: [secrets], verbs: [get], deny: true}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-local}
subjects: [{kind: User, name: alice}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: local}
"#;

fn policy_dir(root: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("rbac.yaml"), text).unwrap();
    dir
}

/// A kubeconfig naming `server` (the webhook's URL), with no credentials.
fn kubeconfig(root: &Path, name: &str, server: &str) -> std::path::PathBuf {
    let path = root.join(name);
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: webhook\n  cluster: {{server: \"{server}\"}}\nusers:\n- name: authzd\n  user: {{}}\ncontexts:\n- name: webhook\n  context: {{cluster: webhook, user: authzd}}\ncurrent-context: webhook\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

async fn authorize(server: &Server, resource: &str) -> AuthorizeResponse {
    AuthorizerClient::new(server.channel().await)
        .authorize(resource_request("alice", &[], "default", "get", resource))
        .await
        .unwrap()
        .into_inner()
}

fn decided_by(answer: &AuthorizeResponse) -> (Decision, String) {
    let by = answer
        .allowed_by
        .first()
        .or(answer.denied_by.first())
        .map(|rule| format!("{} {}", rule.authorizer, rule.source))
        .unwrap_or_default();
    (answer.decision(), by)
}

#[tokio::test]
async fn rbac_then_webhook_delegates_what_rbac_leaves_and_caches_for_the_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Server::start_serving(
        &policy_dir(dir.path(), "remote", REMOTE_POLICY),
        &["--no-watch"],
    )
    .await;
    let webhook = kubeconfig(
        dir.path(),
        "webhook.kubeconfig",
        &format!("{}/authorize", remote.url()),
    );
    let local = Server::start_serving(
        &policy_dir(dir.path(), "local", LOCAL_POLICY),
        &[
            "--no-watch",
            "--authorization-mode",
            "RBAC,Webhook",
            "--authorization-webhook-config-file",
            webhook.to_str().unwrap(),
            "--authorization-webhook-version",
            "v1",
            "--authorization-webhook-cache-authorized-ttl",
            "3s",
        ],
    )
    .await;

    // RBAC decides what it can, without the webhook: its allow, and its deny over the
    // webhook's allow.
    let pods = authorize(&local, "pods").await;
    assert_eq!(pods.decision(), Decision::Allow, "{pods:?}");
    assert_eq!(pods.allowed_by[0].authorizer, "RBAC");
    let secrets = authorize(&local, "secrets").await;
    assert_eq!(secrets.decision(), Decision::Deny, "{secrets:?}");
    assert_eq!(secrets.denied_by[0].authorizer, "RBAC");
    // What RBAC leaves undecided, the webhook decides.
    let first_asked = Instant::now();
    let configmaps = authorize(&local, "configmaps").await;
    assert_eq!(
        decided_by(&configmaps),
        (Decision::Allow, "Webhook webhook".to_string())
    );
    assert!(configmaps.reason.contains("alice-remote"), "{configmaps:?}");
    let nodes = authorize(&local, "nodes").await;
    assert_eq!(nodes.decision(), Decision::NoOpinion, "{nodes:?}");

    // Revoked at the webhook: served from the webhook cache until its authorized TTL has
    // passed (a delegated decision can be that stale), then no longer.
    let revoked = Instant::now();
    PolicyAdminClient::new(remote.channel().await)
        .delete(DeleteRequest {
            object: Some(ObjectRef {
                kind: "ClusterRoleBinding".into(),
                namespace: String::new(),
                name: "alice-remote".into(),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let soon = authorize(&local, "configmaps").await;
    if revoked.elapsed() < Duration::from_secs(3) {
        assert!(soon.cached && soon.allowed, "within the TTL: {soon:?}");
    }
    // Waited for, not slept: every answer inside the TTL is the cached allow, and the first
    // answer that is not comes after the TTL, and soon after it.
    let later = loop {
        let asked = Instant::now();
        let answer = authorize(&local, "configmaps").await;
        if !answer.allowed {
            break answer;
        }
        assert!(
            revoked.elapsed() < Duration::from_secs(6),
            "still allowed long after the TTL: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100).saturating_sub(asked.elapsed())).await;
    };
    // The webhook's answer was cached when first asked, no earlier.
    assert!(
        first_asked.elapsed() >= Duration::from_secs(3),
        "the cached allow ended before its TTL ({:?}): {later:?}",
        first_asked.elapsed()
    );
    assert_eq!(
        later.decision(),
        Decision::NoOpinion,
        "after the TTL: {later:?}"
    );

    // Who-can covers the local policy only, and says so.
    let who = AuthorizerClient::new(local.channel().await)
        .get_allowed_subjects(GetAllowedSubjectsRequest {
            action: resource_request("x", &[], "default", "get", "pods").action,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(who.users.contains(&"alice".to_string()), "{who:?}");
    let rules = authzd::proto::access_review_client::AccessReviewClient::new(local.channel().await)
        .subject_rules_review(authzd::proto::SubjectRulesReviewRequest {
            user: "alice".into(),
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(rules.incomplete, "{rules:?}");
    assert!(
        rules
            .evaluation_error
            .contains("webhook authorizer \"webhook\" cannot list"),
        "{rules:?}"
    );
    assert!(
        who.evaluation_error
            .contains("webhook authorizer \"webhook\" cannot list"),
        "{who:?}"
    );
}

/// An AuthorizationConfiguration: a webhook nobody answers with failure policy NoOpinion, then
/// RBAC, then another with failure policy Deny. RBAC's allow stands after the first webhook's
/// failure; what RBAC leaves undecided is denied by the second's failure policy.
#[tokio::test]
async fn failure_policies_from_an_authorization_configuration() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bound, then released.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let unreachable = kubeconfig(
        dir.path(),
        "dead.kubeconfig",
        &format!("http://{dead}/authorize"),
    );
    let config = dir.path().join("authorization.yaml");
    let webhook = |name: &str, policy: &str| {
        format!(
            "- type: Webhook\n  name: {name}\n  webhook:\n    timeout: 2s\n    subjectAccessReviewVersion: v1\n    matchConditionSubjectAccessReviewVersion: v1\n    failurePolicy: {policy}\n    connectionInfo: {{type: KubeConfigFile, kubeConfigFile: {}}}\n",
            unreachable.display()
        )
    };
    std::fs::write(
        &config,
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n{}- type: RBAC\n  name: rbac\n{}",
            webhook("lenient", "NoOpinion"),
            webhook("strict", "Deny")
        ),
    )
    .unwrap();
    let local = Server::start_serving(
        &policy_dir(dir.path(), "local", LOCAL_POLICY),
        &[
            "--no-watch",
            "--authorization-config",
            config.to_str().unwrap(),
        ],
    )
    .await;
    let pods = authorize(&local, "pods").await;
    assert_eq!(pods.decision(), Decision::Allow, "{pods:?}");
    assert_eq!(pods.allowed_by[0].authorizer, "RBAC");
    let nodes = authorize(&local, "nodes").await;
    assert_eq!(
        decided_by(&nodes),
        (Decision::Deny, "Webhook strict".to_string()),
        "{nodes:?}"
    );
    assert!(
        !nodes.evaluation_error.is_empty(),
        "the failure is explained: {nodes:?}"
    );

    // A configuration that does not validate stops startup, naming the field.
    std::fs::write(&config, "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- type: Webhook\n  name: x\n").unwrap();
    let output = crate::support::server::run_bin(
        &[
            "serve".as_ref(),
            "--policy".as_ref(),
            dir.path().join("local").as_os_str(),
            "--authorization-config".as_ref(),
            config.as_os_str(),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("authorizers[0].webhook: is required"),
        "{stderr}"
    );
}
