//! End to end with kubectl: `kubectl create --raw PATH -f FILE --server URL` against the
//! kube-apiserver review paths, as an operator would ask "can this user do that?".
//!
//! kubectl comes from `AUTHZD_E2E_KUBECTL` (set by `scripts/test.sh`), else `kubectl` on
//! PATH. Without one the test is skipped with a message, unless `CI=true`, where a missing
//! kubectl is a failure. `KUBECONFIG` points at an empty file so no user config is read.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use crate::support::tools::{tool_or_skip, KUBECTL};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::server::{run_with_timeout, sample_policy, Server};
use serde_json::Value;

struct Kubectl {
    binary: PathBuf,
    kubeconfig: tempfile::NamedTempFile,
    server: String,
    files: tempfile::TempDir,
}

impl Kubectl {
    /// `kubectl create --raw PATH -f FILE`: the created object, parsed.
    fn create_raw(&self, path: &str, manifest: &str) -> Value {
        let file = self.files.path().join("review.yaml");
        std::fs::write(&file, manifest).unwrap();
        let output = self.run(path, &file);
        assert!(
            output.status.success(),
            "kubectl create --raw {path} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&output.stdout)))
    }

    fn run(&self, path: &str, file: &Path) -> std::process::Output {
        let mut command = Command::new(&self.binary);
        command
            .args(["create", "--raw", path, "-f"])
            .arg(file)
            .args(["--server", &self.server])
            .env("KUBECONFIG", self.kubeconfig.path());
        run_with_timeout(command, Duration::from_secs(60))
    }

    fn allowed(&self, path: &str, manifest: &str) -> bool {
        let answer = self.create_raw(path, manifest);
        answer["status"]["allowed"]
            .as_bool()
            .unwrap_or_else(|| panic!("no status.allowed in {answer}"))
    }
}

const SAR: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
const SELF_SAR: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

fn subject_review(user: &str, verb: &str, resource: &str) -> String {
    format!(
        "apiVersion: authorization.k8s.io/v1\nkind: SubjectAccessReview\nspec:\n  user: {user}\n  \
         resourceAttributes:\n    verb: {verb}\n    resource: {resource}\n"
    )
}

fn self_review(verb: &str, resource: &str) -> String {
    format!(
        r#"{{"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {{"resourceAttributes": {{"verb": "{verb}", "resource": "{resource}"}}}}}}"#
    )
}

fn local_review(namespace: &str, group: &str, resource: &str) -> String {
    format!(
        "apiVersion: authorization.k8s.io/v1\nkind: LocalSubjectAccessReview\nmetadata:\n  \
         namespace: {namespace}\nspec:\n  user: someone\n  groups: [{group}]\n  \
         resourceAttributes:\n    namespace: {namespace}\n    verb: create\n    resource: {resource}\n"
    )
}

#[tokio::test]
async fn kubectl_create_raw_reviews_answer_as_the_policy_says() {
    let Some(binary) = tool_or_skip(&KUBECTL) else {
        return;
    };
    let policy = sample_policy();
    // The caller is alice (no super-group), so the self review has something to refuse. The
    // review privileges come from the policy (docs/security.md §2), so alice is granted them.
    std::fs::write(
        policy.path().join("reviewer.yaml"),
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: reviewer}\nrules:\n- apiGroups: [authorization.k8s.io]\n  resources: [subjectaccessreviews, localsubjectaccessreviews]\n  verbs: [create]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: alice-reviews}\nsubjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]\nroleRef: {kind: ClusterRole, name: reviewer, apiGroup: rbac.authorization.k8s.io}\n",
    )
    .unwrap();
    let server = Server::start_serving(
        policy.path(),
        &["--local-user", "alice", "--local-group", "staff"],
    )
    .await;
    let kubectl = Kubectl {
        binary,
        kubeconfig: tempfile::NamedTempFile::new().unwrap(),
        server: server.url(),
        files: tempfile::tempdir().unwrap(),
    };

    assert!(kubectl.allowed(SAR, &subject_review("alice", "list", "pods")));
    assert!(!kubectl.allowed(SAR, &subject_review("alice", "delete", "pods")));
    assert!(!kubectl.allowed(SAR, &subject_review("bob", "list", "pods")));

    assert!(kubectl.allowed(SELF_SAR, &self_review("get", "pods")));
    assert!(!kubectl.allowed(SELF_SAR, &self_review("get", "secrets")));

    let local = |namespace: &str| {
        format!("/apis/authorization.k8s.io/v1/namespaces/{namespace}/localsubjectaccessreviews")
    };
    assert!(kubectl.allowed(&local("dev"), &local_review("dev", "devs", "pods")));
    // The deny rule: interns may not touch secrets even though devs may.
    let denied = kubectl.create_raw(&local("dev"), &local_review("dev", "interns", "secrets"));
    assert_eq!(denied["status"]["allowed"], false, "{denied}");
    assert_eq!(denied["status"]["denied"], true, "{denied}");
    assert!(!kubectl.allowed(&local("prod"), &local_review("prod", "devs", "pods")));

    // A namespace that does not match the path: kubectl reports the server's refusal.
    let file = kubectl.files.path().join("mismatch.yaml");
    std::fs::write(&file, local_review("prod", "devs", "pods")).unwrap();
    let output = kubectl.run(&local("dev"), &file);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("BadRequest"), "{stderr}");
}
