//! Request content over HTTP, against the real server: KEP-4601's `fieldSelector` and
//! `labelSelector` on the Kubernetes SubjectAccessReview shapes (webhook and REST), seed 003's
//! `spec.content` on the seed paths; answers as without them while no rule reads content, and
//! refusals as 400 `Status` objects naming the document's field.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use crate::support::server::{post_json as post, sample_policy, Server};
use serde_json::{json, Value};

/// `--max-content-bytes` of the servers here.
const MAX_CONTENT: usize = 512;

/// The server over the sample policy (kept for as long as the server runs).
async fn start() -> (Server, tempfile::TempDir) {
    let policy = sample_policy();
    let max = MAX_CONTENT.to_string();
    let server = Server::start_serving(policy.path(), &["--max-content-bytes", &max]).await;
    (server, policy)
}

/// A 400 `Status` naming `field` (the message starts with it, and it is the cause's field).
fn assert_refused(code: u16, answer: &Value, field: &str) {
    assert_eq!(code, 400, "{answer}");
    assert_eq!(answer["kind"], "Status", "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("{field}: ")),
        "want {field}, got {message}"
    );
    assert_eq!(answer["details"]["causes"][0]["field"], field, "{answer}");
}

const KUBE: &str = "/apis/authorization.k8s.io/v1";
const SEED: &str = "/apis/authorization.kubernetes.io/v1";

fn kube_review(api_version: &str, kind: &str, spec: Value) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "spec": spec})
}

/// Selectors as KEP-4601 writes them: a raw field selector and label requirements.
fn selectors() -> Value {
    json!({
        "fieldSelector": {"rawSelector": "spec.nodeName=node-1"},
        "labelSelector": {"requirements": [
            {"key": "app", "operator": "In", "values": ["web", "api"]},
            {"key": "canary", "operator": "DoesNotExist"}
        ]}
    })
}

/// `attributes` with `extra` merged in.
fn merged(attributes: &Value, extra: &Value) -> Value {
    let mut merged = attributes.clone();
    for (key, value) in extra.as_object().unwrap() {
        merged[key] = value.clone();
    }
    merged
}

#[tokio::test]
async fn kubernetes_reviews_take_kep_4601_selectors() {
    let (server, _policy) = start().await;
    let addr = server.addr;
    for (user, groups, attributes, allowed) in [
        (
            "alice",
            json!([]),
            json!({"namespace": "dev", "verb": "list", "resource": "pods"}),
            true,
        ),
        (
            "bob",
            json!([]),
            json!({"namespace": "dev", "verb": "list", "resource": "pods"}),
            false,
        ),
        (
            "ivan",
            json!(["devs", "interns"]),
            json!({"namespace": "dev", "verb": "list", "resource": "secrets"}),
            false,
        ),
    ] {
        let with = merged(&attributes, &selectors());
        for resource_attributes in [attributes.clone(), with.clone()] {
            let spec = json!({"user": user, "groups": groups.clone(),
                              "resourceAttributes": resource_attributes});
            for (api_version, groups_key) in [
                ("authorization.k8s.io/v1", "groups"),
                ("authorization.k8s.io/v1beta1", "group"),
            ] {
                let mut spec = spec.clone();
                spec[groups_key] = spec["groups"].take();
                let review = kube_review(api_version, "SubjectAccessReview", spec);
                let (code, answer) = post(addr, "/authorize", &review).await;
                assert_eq!(code, 200, "{answer}");
                assert_eq!(answer["status"]["allowed"], allowed, "{user}: {answer}");
                // The review comes back as sent, selectors included.
                assert_eq!(answer["spec"]["resourceAttributes"], resource_attributes);
            }
            let review = kube_review(
                "authorization.k8s.io/v1",
                "SubjectAccessReview",
                spec.clone(),
            );
            let (code, answer) = post(addr, &format!("{KUBE}/subjectaccessreviews"), &review).await;
            assert_eq!(code, 201, "{answer}");
            assert_eq!(answer["status"]["allowed"], allowed, "{user}: {answer}");
            let review = kube_review(
                "authorization.k8s.io/v1",
                "LocalSubjectAccessReview",
                spec.clone(),
            );
            let path = format!("{KUBE}/namespaces/dev/localsubjectaccessreviews");
            let (code, answer) = post(addr, &path, &review).await;
            assert_eq!(code, 201, "{answer}");
            assert_eq!(answer["status"]["allowed"], allowed, "{user}: {answer}");
        }
    }
    // The caller's own review (the local identity may do anything).
    let review = kube_review(
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview",
        json!({"resourceAttributes": merged(&json!({"verb": "watch", "resource": "pods"}), &selectors())}),
    );
    let (code, answer) = post(addr, &format!("{KUBE}/selfsubjectaccessreviews"), &review).await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["status"]["allowed"], true, "{answer}");
}

#[tokio::test]
async fn bad_selectors_are_400_naming_the_document_field() {
    let (server, _policy) = start().await;
    let addr = server.addr;
    let field = "spec.resourceAttributes.fieldSelector";
    let label = "spec.resourceAttributes.labelSelector";
    let cases = [
        // KEP-4601: both raw and requirements is a 400; so is neither.
        (
            json!({"fieldSelector": {"rawSelector": "a=b",
                                     "requirements": [{"key": "a", "operator": "In", "values": ["b"]}]}}),
            format!("{field}.rawSelector"),
        ),
        (json!({"labelSelector": {}}), label.to_string()),
        (
            json!({"labelSelector": {"rawSelector": "replicas>3"}}),
            format!("{label}.rawSelector"),
        ),
        (
            json!({"fieldSelector": {"rawSelector": "a=b=c"}}),
            format!("{field}.rawSelector"),
        ),
        (
            json!({"labelSelector": {"requirements": [{"key": "a", "operator": "Exists"},
                                                      {"key": "b", "operator": "Gt", "values": ["1"]}]}}),
            format!("{label}.requirements[1].operator"),
        ),
        (
            json!({"labelSelector": {"requirements": [{"key": "a", "operator": "In"}]}}),
            format!("{label}.requirements[0].values"),
        ),
        (
            json!({"fieldSelector": {"requirements": [{"key": "a", "operator": "Exists", "values": ["x"]}]}}),
            format!("{field}.requirements[0].values"),
        ),
        (
            json!({"labelSelector": {"requirements": [{"operator": "Exists"}]}}),
            format!("{label}.requirements[0].key"),
        ),
        // Shapes: the document's own paths.
        (json!({"fieldSelector": "a=b"}), field.to_string()),
        (
            json!({"labelSelector": {"requirements": {"key": "a"}}}),
            format!("{label}.requirements"),
        ),
        (
            json!({"labelSelector": {"requirements": ["a"]}}),
            format!("{label}.requirements[0]"),
        ),
        (
            json!({"labelSelector": {"requirements": [{"key": "a", "operator": "In", "values": [1]}]}}),
            format!("{label}.requirements[0].values[0]"),
        ),
        (
            json!({"fieldSelector": {"rawSelector": 7}}),
            format!("{field}.rawSelector"),
        ),
        // Bounds.
        (
            json!({"labelSelector": {"requirements": vec![json!({"key": "a", "operator": "Exists"}); 65]}}),
            format!("{label}.requirements"),
        ),
        (
            json!({"labelSelector": {"rawSelector": "k".repeat(1025)}}),
            format!("{label}.rawSelector"),
        ),
    ];
    for (selectors, want) in cases {
        let attributes = merged(
            &json!({"namespace": "dev", "verb": "list", "resource": "pods"}),
            &selectors,
        );
        let spec = json!({"user": "alice", "resourceAttributes": attributes});
        for (path, kind) in [
            ("/authorize".to_string(), "SubjectAccessReview"),
            (
                format!("{KUBE}/subjectaccessreviews"),
                "SubjectAccessReview",
            ),
            (
                format!("{KUBE}/namespaces/dev/localsubjectaccessreviews"),
                "LocalSubjectAccessReview",
            ),
            (
                format!("{KUBE}/selfsubjectaccessreviews"),
                "SelfSubjectAccessReview",
            ),
        ] {
            let review = kube_review("authorization.k8s.io/v1", kind, spec.clone());
            let (code, answer) = post(addr, &path, &review).await;
            assert_refused(code, &answer, &want);
        }
    }
}

/// A seed-000 shaped review of `verb` on pods in `dev`, with seed 003's `spec.content`.
fn seed_review(kind: &str, user: &str, verb: &str, content: Option<Value>) -> Value {
    let mut review = json!({
        "kind": kind,
        "apiVersion": "authorization.kubernetes.io/v1",
        "authorizationAttributes": {"verb": verb, "resource": "pods", "namespace": "dev"},
        "user": user,
    });
    if let Some(content) = content {
        review["spec"] = json!({"content": content});
    }
    review
}

fn pod(app: &str) -> Value {
    json!({"kind": "Pod", "apiVersion": "v1",
           "metadata": {"name": "web-1", "namespace": "dev", "labels": {"app": app}},
           "spec": {"nodeName": "node-1"}})
}

#[tokio::test]
async fn seed_reviews_take_spec_content() {
    let (server, _policy) = start().await;
    let addr = server.addr;
    let contents = [
        None,
        // Seed 003's example: the object itself.
        Some(pod("web")),
        Some(json!({"object": pod("web"), "oldObject": pod("api")})),
        Some(json!({"oldObject": pod("api")})),
        Some(json!({"changedPaths": [".metadata.labels"]})),
        Some(json!({})),
    ];
    for (user, verb, allowed) in [("alice", "get", true), ("bob", "update", false)] {
        for content in &contents {
            for (path, kind) in [
                (
                    format!("{SEED}/subjectAccessReviews"),
                    "SubjectAccessReview",
                ),
                (
                    format!("{SEED}/ns/dev/localSubjectAccessReviews"),
                    "LocalSubjectAccessReview",
                ),
            ] {
                let review = seed_review(kind, user, verb, content.clone());
                let (code, answer) = post(addr, &path, &review).await;
                assert_eq!(code, 201, "{answer}");
                assert_eq!(answer["allowed"], allowed, "{user} {content:?}: {answer}");
            }
            let review = seed_review("PersonalSubjectAccessReview", "", verb, content.clone());
            let path = format!("{SEED}/personalSubjectAccessReviews");
            let (code, answer) = post(addr, &path, &review).await;
            assert_eq!(code, 201, "{answer}");
            assert_eq!(answer["allowed"], true, "{answer}");
            for (path, kind) in [
                (
                    format!("{SEED}/resourceAccessReviews"),
                    "ResourceAccessReview",
                ),
                (
                    format!("{SEED}/ns/dev/localResourceAccessReviews"),
                    "LocalResourceAccessReview",
                ),
            ] {
                let review = seed_review(kind, "", "get", content.clone());
                let (code, answer) = post(addr, &path, &review).await;
                assert_eq!(code, 201, "{answer}");
                assert_eq!(answer["users"], json!(["alice"]), "{content:?}: {answer}");
            }
        }
    }
}

#[tokio::test]
async fn bad_seed_content_is_400_naming_the_document_field() {
    let (server, _policy) = start().await;
    let addr = server.addr;
    let large = || json!({"kind": "Pod", "data": "x".repeat(MAX_CONTENT)});
    let cases = [
        (json!("a pod"), "spec.content"),
        (json!({"object": "a pod"}), "spec.content.object"),
        (json!({"oldObject": [1]}), "spec.content.oldObject"),
        (
            json!({"changedPaths": "labels"}),
            "spec.content.changedPaths",
        ),
        (
            json!({"object": pod("web"), "changedPaths": [".metadata.labels"]}),
            "spec.content.changedPaths",
        ),
        // Over --max-content-bytes: as sent bare, and in the wrapper.
        (large(), "spec.content"),
        (json!({"object": large()}), "spec.content.object"),
        (
            json!({"object": pod("web"), "oldObject": large()}),
            "spec.content.oldObject",
        ),
    ];
    for (content, field) in cases {
        for (path, kind) in [
            (
                format!("{SEED}/subjectAccessReviews"),
                "SubjectAccessReview",
            ),
            (
                format!("{SEED}/personalSubjectAccessReviews"),
                "PersonalSubjectAccessReview",
            ),
            (
                format!("{SEED}/ns/dev/localSubjectAccessReviews"),
                "LocalSubjectAccessReview",
            ),
            (
                format!("{SEED}/resourceAccessReviews"),
                "ResourceAccessReview",
            ),
            (
                format!("{SEED}/ns/dev/localResourceAccessReviews"),
                "LocalResourceAccessReview",
            ),
        ] {
            let review = seed_review(kind, "alice", "update", Some(content.clone()));
            let (code, answer) = post(addr, &path, &review).await;
            assert_refused(code, &answer, field);
        }
    }
    // `spec` itself must be an object when present.
    let mut review = seed_review("SubjectAccessReview", "alice", "get", None);
    review["spec"] = json!("content");
    let (code, answer) = post(addr, &format!("{SEED}/subjectAccessReviews"), &review).await;
    assert_refused(code, &answer, "spec");
}
