//! CEL conditions and conditional answers over gRPC, against the real server (docs/policy.md §6-7): the
//! fold for callers that do not ask, DECISION_CONDITIONAL with self-contained conditions in
//! RETURN mode, EvaluateConditions finishing them against content (and refusing bad ones with
//! INVALID_ARGUMENT naming the field), and a condition that does not load refused with its
//! file and line.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support::server::{assert_invalid, Server};
use authzd::proto::action::Kind;
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::{
    Action, AuthorizeRequest, AuthorizeResponse, Condition, ConditionsMode, Content, Decision,
    EvaluateConditionsRequest, GetAllowedSubjectsRequest, ResourceAttributes, RuleEffect, UserInfo,
};

const POLICY: &str = include_str!("../fixtures/grpc-conditions.yaml");

fn update(name: &str, mode: ConditionsMode, content: Option<Content>) -> AuthorizeRequest {
    AuthorizeRequest {
        user: Some(UserInfo {
            name: "dora".into(),
            groups: vec!["deployers".into()],
            ..Default::default()
        }),
        action: Some(Action {
            kind: Some(Kind::ResourceAttributes(ResourceAttributes {
                namespace: "apps".into(),
                verb: "update".into(),
                group: "apps".into(),
                resource: "deployments".into(),
                name: name.into(),
                ..Default::default()
            })),
        }),
        content,
        conditions_mode: mode as i32,
        ..Default::default()
    }
}

fn objects(old: &str, new: &str) -> Option<Content> {
    Some(Content {
        old_object: old.as_bytes().to_vec(),
        object: new.as_bytes().to_vec(),
        changed_paths: vec![],
    })
}

fn decision(response: &AuthorizeResponse) -> Decision {
    Decision::try_from(response.decision).unwrap()
}

async fn start() -> (
    Server,
    AuthorizerClient<tonic::transport::Channel>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.yaml"), POLICY).unwrap();
    let server = Server::start(dir.path(), &[]);
    server.wait_serving().await;
    let client = AuthorizerClient::new(server.channel().await);
    (server, client, dir)
}

#[tokio::test]
async fn conditional_answers_round_trip() {
    let (_server, mut client, _dir) = start().await;
    let same = objects(
        r#"{"metadata":{"labels":{"app":"web"}}}"#,
        r#"{"metadata":{"labels":{"app":"web"}},"spec":{"replicas":2}}"#,
    );
    let relabelled = objects(
        r#"{"metadata":{"labels":{"app":"web"}}}"#,
        r#"{"metadata":{"labels":{"app":"db"}}}"#,
    );

    // A caller that does not ask gets the fold: the deny on finalizers needs the changes, so
    // it applies; the allow needs the objects, so it grants nothing; the error says both.
    let fold = client
        .authorize(update("web", ConditionsMode::Fold, None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(decision(&fold), Decision::Deny);
    assert!(
        fold.evaluation_error.contains("needs the object"),
        "{fold:?}"
    );
    assert!(
        fold.evaluation_error.contains("needs the changed fields"),
        "{fold:?}"
    );
    assert!(fold.conditions.is_empty());

    // RETURN mode: the conditions, in precedence order (the deny on finalizers first, then
    // the allow's CEL condition), self-contained.
    let returned = client
        .authorize(update("web", ConditionsMode::Return, None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(decision(&returned), Decision::Conditional, "{returned:?}");
    assert!(!returned.allowed);
    assert_eq!(returned.conditions.len(), 2, "{returned:?}");
    let (deny, allow) = (&returned.conditions[0], &returned.conditions[1]);
    assert_eq!(deny.effect, RuleEffect::Deny as i32);
    assert_eq!(deny.language, "authzd.io/clauses");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&deny.expression).unwrap(),
        serde_json::json!({"fields": [".metadata.finalizers"]})
    );
    assert_eq!(allow.effect, RuleEffect::Allow as i32);
    assert_eq!(allow.language, "k8s.io/cel");
    assert_eq!(
        allow.expression,
        "object.metadata.labels == oldObject.metadata.labels || 'label-editors' in request.userInfo.groups"
    );
    assert_eq!(
        allow.rule.as_ref().unwrap().role,
        "ClusterRole/label-keeper"
    );

    // The deny whose condition reads only the request is decided at once: DENY outright.
    let frozen = client
        .authorize(update("frozen", ConditionsMode::Return, None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(decision(&frozen), Decision::Deny, "{frozen:?}");
    assert!(frozen.conditions.is_empty());

    // EvaluateConditions finishes them as Authorize with the content answers.
    for (content, expected) in [
        (same.clone(), Decision::Allow),
        (relabelled.clone(), Decision::NoOpinion),
        (
            objects(
                r#"{"metadata":{"labels":{"app":"web"}}}"#,
                r#"{"metadata":{"labels":{"app":"web"},"finalizers":["x"]}}"#,
            ),
            Decision::Deny,
        ),
    ] {
        let finished = client
            .evaluate_conditions(EvaluateConditionsRequest {
                request: Some(update("web", ConditionsMode::Fold, content.clone())),
                conditions: returned.conditions.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        let full = client
            .authorize(update("web", ConditionsMode::Fold, content.clone()))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(decision(&finished), expected, "{content:?}: {finished:?}");
        assert_eq!(decision(&full), expected, "{content:?}: {full:?}");
        assert_eq!(finished.allowed_by, full.allowed_by);
        assert_eq!(finished.denied_by, full.denied_by);
    }

    // With content, RETURN mode answers as FOLD does: nothing is left to return.
    let with_content = client
        .authorize(update("web", ConditionsMode::Return, same.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(decision(&with_content), Decision::Allow);

    // Bad conditions are refused, naming the field.
    let bad = |condition: Condition| EvaluateConditionsRequest {
        request: Some(update("web", ConditionsMode::Fold, same.clone())),
        conditions: vec![condition],
    };
    let good = allow.clone();
    for (condition, field) in [
        (
            Condition {
                expression: "object.spec.replicas + 1 > 2".into(),
                ..good.clone()
            },
            "conditions[0].expression",
        ),
        (
            Condition {
                language: "rego".into(),
                ..good.clone()
            },
            "conditions[0].language",
        ),
        (
            Condition {
                effect: 0,
                ..good.clone()
            },
            "conditions[0].effect",
        ),
        (
            Condition {
                language: "authzd.io/clauses".into(),
                expression: r#"{"fields": ["not a path"]}"#.into(),
                ..good.clone()
            },
            "conditions[0].expression",
        ),
    ] {
        assert_invalid(client.evaluate_conditions(bad(condition)).await, field);
    }
    assert_invalid(
        client
            .evaluate_conditions(EvaluateConditionsRequest {
                request: Some(update("web", ConditionsMode::Fold, same.clone())),
                conditions: vec![],
            })
            .await,
        "conditions",
    );
    assert_invalid(
        client
            .evaluate_conditions(EvaluateConditionsRequest {
                request: Some(update(
                    "web",
                    ConditionsMode::Fold,
                    objects("{", r#"{"metadata":{}}"#),
                )),
                conditions: vec![good],
            })
            .await,
        "request.content.old_object",
    );
}

/// Who-can in RETURN mode lists the subjects whose answer is conditional, with their
/// conditions; without it (or with content) the answer is who-can's as ever.
#[tokio::test]
async fn who_can_returns_conditional_subjects() {
    let (_server, mut client, _dir) = start().await;
    let ask = |mode: ConditionsMode, content: Option<Content>| GetAllowedSubjectsRequest {
        action: update("web", mode, None).action,
        content,
        conditions_mode: mode as i32,
        ..Default::default()
    };
    let folded = client
        .get_allowed_subjects(ask(ConditionsMode::Fold, None))
        .await
        .unwrap()
        .into_inner();
    // The fold: the deny on finalizers applies without the changes (system:masters, the
    // default super-group, is listed whatever the policy).
    assert_eq!(folded.groups, ["system:masters"], "{folded:?}");
    assert_eq!(folded.denied_groups, ["deployers"], "{folded:?}");
    assert!(folded.conditional_groups.is_empty());

    let returned = client
        .get_allowed_subjects(ask(ConditionsMode::Return, None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(returned.groups, ["system:masters"], "{returned:?}");
    assert_eq!(returned.conditional_groups.len(), 1, "{returned:?}");
    let deployers = &returned.conditional_groups[0];
    assert_eq!(deployers.name, "deployers");
    assert_eq!(deployers.conditions.len(), 2, "{deployers:?}");
    assert_eq!(deployers.conditions[1].language, "k8s.io/cel");

    let with_content = client
        .get_allowed_subjects(ask(
            ConditionsMode::Return,
            objects(
                r#"{"metadata":{"labels":{"app":"web"}}}"#,
                r#"{"metadata":{"labels":{"app":"web"}},"spec":{"replicas":2}}"#,
            ),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        with_content.groups,
        ["deployers", "system:masters"],
        "{with_content:?}"
    );
    assert!(with_content.conditional_groups.is_empty());
}

/// A condition outside the subset does not load: the server refuses to start, naming the
/// file, the line and what it used.
#[tokio::test]
async fn a_condition_that_does_not_load_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("roles.yaml"),
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: x}\nrules:\n- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [get]\n  condition: \"int(object.spec.replicas) > 1\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(crate::support::server::BIN)
        .args(["check", "--policy"])
        .arg(dir.path())
        .args(["--user", "u", "--verb", "get", "--resource", "pods"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("roles.yaml:8") && stderr.contains("`int()`"),
        "{stderr}"
    );
}
