//! Rules over object content end to end (docs/policy.md §4), against the real server over gRPC and the
//! webhook: seed 003's ProtectorBot, Edgar and kubelet on the shipped policy, seed 004's own
//! finalizer and restricted secret role, KEP-4601 selectors narrowing list and watch, and the
//! missing-content fold.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::path::Path;

use crate::support::server::{post_json as post, Server};
use authzd::proto::access_review_client::AccessReviewClient;
use authzd::proto::action::Kind;
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::{
    Action, AuthorizeRequest, AuthorizeResponse, Content, Decision, FieldSelectorAttributes,
    GetAllowedSubjectsRequest, ResourceAttributes, SubjectAccessReviewRequest, UserInfo,
};
use serde_json::{json, Value};
use tonic::Code;

/// Seed 004's rules, and a kubelet binding for node identities, beside the shipped policy.
const EXTRA: &str = include_str!("../fixtures/content-seed004-kubelet.yaml");

/// The shipped policy directory plus [`EXTRA`], served.
async fn start() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("policy");
    for entry in std::fs::read_dir(&shipped).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    std::fs::write(dir.path().join("seed004.yaml"), EXTRA).unwrap();
    let server = Server::start_serving(dir.path(), &[]).await;
    (server, dir)
}

fn attributes(namespace: &str, verb: &str, group: &str, resource: &str) -> ResourceAttributes {
    ResourceAttributes {
        namespace: namespace.into(),
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        name: "x".into(),
        ..Default::default()
    }
}

fn action(attributes: ResourceAttributes) -> Option<Action> {
    Some(Action {
        kind: Some(Kind::ResourceAttributes(attributes)),
    })
}

fn objects(old: Option<Value>, new: Option<Value>) -> Option<Content> {
    Some(Content {
        object: new.map(|v| v.to_string().into_bytes()).unwrap_or_default(),
        old_object: old.map(|v| v.to_string().into_bytes()).unwrap_or_default(),
        changed_paths: Vec::new(),
    })
}

async fn ask(
    client: &mut AuthorizerClient<tonic::transport::Channel>,
    user: &str,
    groups: &[&str],
    attributes: ResourceAttributes,
    content: Option<Content>,
) -> AuthorizeResponse {
    client
        .authorize(AuthorizeRequest {
            user: Some(UserInfo {
                name: user.into(),
                groups: groups.iter().map(|g| g.to_string()).collect(),
                ..Default::default()
            }),
            action: action(attributes),
            min_revision: 0,
            content,
            conditions_mode: 0,
        })
        .await
        .unwrap()
        .into_inner()
}

fn dc(labels: Value, replicas: u32) -> Value {
    json!({"metadata": {"name": "x", "labels": labels}, "spec": {"replicas": replicas}})
}

#[tokio::test]
async fn seed_003_restrictions_over_grpc() {
    let (server, _dir) = start().await;
    let mut client = AuthorizerClient::new(server.channel().await);
    let update = || attributes("hammer", "update", "", "DeploymentConfig");

    // ProtectorBot may change a DeploymentConfig's labels and nothing else.
    let relabel = objects(
        Some(dc(json!({"app": "web"}), 1)),
        Some(dc(json!({"app": "web", "protected": "true"}), 1)),
    );
    let answer = ask(&mut client, "ProtectorBot", &[], update(), relabel.clone()).await;
    assert!(answer.allowed, "{answer:?}");
    assert!(
        answer
            .reason
            .contains("changed path .metadata.labels.protected"),
        "{answer:?}"
    );
    // The second ask of the same question is a cached plan finished again.
    let again = ask(&mut client, "ProtectorBot", &[], update(), relabel).await;
    assert!(again.allowed && again.cached, "{again:?}");
    let rescale = objects(
        Some(dc(json!({"app": "web"}), 1)),
        Some(dc(json!({"app": "web", "protected": "true"}), 3)),
    );
    let answer = ask(&mut client, "ProtectorBot", &[], update(), rescale).await;
    assert!(!answer.allowed, "{answer:?}");
    assert_eq!(answer.decision, Decision::NoOpinion as i32);
    assert!(
        answer
            .reason
            .contains("no rule covers changed path .spec.replicas"),
        "{answer:?}"
    );
    let answer = ask(&mut client, "ProtectorBot", &[], update(), None).await;
    assert!(!answer.allowed);
    assert!(
        answer.evaluation_error.contains("needs the changed fields"),
        "{answer:?}"
    );

    // Edgar cannot delete a protected DeploymentConfig; without content, today's deny + error.
    let delete = || attributes("hammer", "delete", "", "DeploymentConfig");
    let protected = objects(Some(dc(json!({"protected": "true"}), 1)), None);
    let answer = ask(&mut client, "Edgar", &[], delete(), protected).await;
    assert!(answer.denied, "{answer:?}");
    let plain = objects(Some(dc(json!({"app": "web"}), 1)), None);
    let answer = ask(&mut client, "Edgar", &[], delete(), plain).await;
    assert!(answer.allowed, "{answer:?}");
    let answer = ask(&mut client, "Edgar", &[], delete(), None).await;
    assert!(answer.denied, "{answer:?}");
    assert!(
        answer
            .evaluation_error
            .contains("needs the object's labels"),
        "{answer:?}"
    );

    // A kubelet on its own node only.
    let pod = |node: &str| objects(Some(json!({"spec": {"nodeName": node}})), None);
    // Seed 003 names the resource kind `Pod`, matched verbatim.
    let get = || attributes("default", "get", "", "Pod");
    let own = ask(
        &mut client,
        "system:node:n1",
        &["system:nodes"],
        get(),
        pod("n1"),
    )
    .await;
    assert!(own.allowed, "{own:?}");
    let other = ask(
        &mut client,
        "system:node:n1",
        &["system:nodes"],
        get(),
        pod("n2"),
    )
    .await;
    assert!(!other.allowed, "{other:?}");

    // Unreadable content a rule needs is INVALID_ARGUMENT naming the field: no decision.
    let bad = Some(Content {
        object: b"{not json".to_vec(),
        old_object: dc(json!({}), 1).to_string().into_bytes(),
        changed_paths: Vec::new(),
    });
    let status = client
        .authorize(AuthorizeRequest {
            user: Some(UserInfo {
                name: "ProtectorBot".into(),
                ..Default::default()
            }),
            action: action(update()),
            min_revision: 0,
            content: bad,
            conditions_mode: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("content.object"), "{status:?}");
}

#[tokio::test]
async fn seed_004_field_paths_and_who_can_over_grpc() {
    let (server, _dir) = start().await;
    let mut client = AuthorizerClient::new(server.channel().await);
    let widget = |finalizers: Value| json!({"metadata": {"name": "w", "finalizers": finalizers}});
    let update = || attributes("apps", "update", "example.com", "widgets");
    for (old, new, allowed) in [
        (
            json!(["other"]),
            json!(["other", "example.com/cleanup"]),
            true,
        ),
        (
            json!(["example.com/cleanup", "other"]),
            json!(["other"]),
            true,
        ),
        (
            json!(["example.com/cleanup", "other"]),
            json!(["example.com/cleanup"]),
            false,
        ),
    ] {
        let content = objects(Some(widget(old)), Some(widget(new)));
        let answer = ask(&mut client, "cleanup-controller", &[], update(), content).await;
        assert_eq!(answer.allowed, allowed, "{answer:?}");
    }

    let secret =
        |data: &str| json!({"metadata": {"name": "s", "labels": {"a": data}}, "data": {"k": data}});
    let secrets = || attributes("apps", "update", "", "secrets");
    let mut relabel = secret("x");
    relabel["metadata"]["labels"]["a"] = json!("y");
    let answer = ask(
        &mut client,
        "olga",
        &[],
        secrets(),
        objects(Some(secret("x")), Some(relabel)),
    )
    .await;
    assert!(answer.allowed, "{answer:?}");
    let answer = ask(
        &mut client,
        "olga",
        &[],
        secrets(),
        objects(Some(secret("x")), Some(secret("y"))),
    )
    .await;
    assert!(answer.denied, "{answer:?}");
    assert!(answer.reason.contains(".data.k"), "{answer:?}");

    // Who-can with the same content agrees.
    let who = client
        .get_allowed_subjects(GetAllowedSubjectsRequest {
            action: action(secrets()),
            min_revision: 0,
            content: objects(Some(secret("x")), Some(secret("y"))),
            conditions_mode: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(who.denied_users.contains(&"olga".to_string()), "{who:?}");

    // A SubjectAccessReview carries content too.
    let mut reviews = AccessReviewClient::new(server.channel().await);
    let answer = reviews
        .subject_access_review(SubjectAccessReviewRequest {
            action: action(update()),
            user: "cleanup-controller".into(),
            content: objects(
                Some(widget(json!([]))),
                Some(widget(json!(["example.com/cleanup"]))),
            ),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(answer.allowed, "{answer:?}");
}

#[tokio::test]
async fn kep_4601_selectors_narrow_list_and_watch_over_grpc_and_the_webhook() {
    let (server, _dir) = start().await;
    let mut client = AuthorizerClient::new(server.channel().await);
    let list = |selector: &str| ResourceAttributes {
        field_selector: (!selector.is_empty()).then(|| FieldSelectorAttributes {
            raw_selector: selector.into(),
            requirements: Vec::new(),
        }),
        ..attributes("default", "watch", "", "Pod")
    };
    for (selector, allowed) in [
        ("spec.nodeName=n1", true),
        ("spec.nodeName=n2", false),
        ("", false),
    ] {
        let answer = ask(
            &mut client,
            "system:node:n1",
            &["system:nodes"],
            list(selector),
            None,
        )
        .await;
        assert_eq!(answer.allowed, allowed, "{selector}: {answer:?}");
    }

    // The same over the webhook, as kube-apiserver sends it.
    for (selector, allowed) in [("spec.nodeName=n1", true), ("spec.nodeName=n2", false)] {
        let review = json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "system:node:n1", "groups": ["system:nodes"],
                "resourceAttributes": {"namespace": "default", "verb": "list", "resource": "Pod",
                    "fieldSelector": {"rawSelector": selector}}}
        });
        let (code, answer) = post(server.addr, "/authorize", &review).await;
        assert_eq!(code, 200, "{answer}");
        assert_eq!(answer["status"]["allowed"], allowed, "{selector}: {answer}");
    }
    // Both raw and requirements is a 400, as KEP-4601 says.
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "system:node:n1", "resourceAttributes": {"verb": "list", "resource": "pods",
            "fieldSelector": {"rawSelector": "spec.nodeName=n1",
                "requirements": [{"key": "spec.nodeName", "operator": "In", "values": ["n1"]}]}}}
    });
    let (code, answer) = post(server.addr, "/authorize", &review).await;
    assert_eq!(code, 400, "{answer}");

    // The webhook folds without content: Edgar's delete is denied with the error.
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "Edgar", "resourceAttributes": {"namespace": "hammer", "verb": "delete",
            "resource": "DeploymentConfig", "name": "x"}}
    });
    let (code, answer) = post(server.addr, "/authorize", &review).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["status"]["allowed"], false, "{answer}");
    assert_eq!(answer["status"]["denied"], true, "{answer}");
    let error = answer["status"]["evaluationError"]
        .as_str()
        .unwrap_or_default();
    assert!(error.contains("needs the object's labels"), "{answer}");
}
