//! Request content (objects, changed paths) and KEP-4601 selectors over gRPC, against the real
//! server: every RPC that can carry them takes them, answers as it would without them while no
//! rule reads content, and refuses bad content with `INVALID_ARGUMENT` naming the field.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use crate::support::server::{assert_invalid, sample_policy, Server};
use authzd::proto::access_review_client::AccessReviewClient;
use authzd::proto::action::Kind;
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::{
    Action, AuthorizeRequest, AuthorizeResponse, BatchAuthorizeRequest, Content,
    FieldSelectorAttributes, GetAllowedSubjectsRequest, GetAllowedSubjectsResponse,
    LabelSelectorAttributes, LocalResourceAccessReviewRequest, LocalSubjectAccessReviewRequest,
    PersonalSubjectAccessReviewRequest, ResourceAccessReviewRequest, ResourceAttributes, RuleRef,
    SelectorRequirement, SubjectAccessReviewRequest, SubjectAccessReviewResponse, UserInfo,
};

/// The largest object the test server takes (`--max-content-bytes`).
const MAX_CONTENT: usize = 1024;

fn resource(namespace: &str, verb: &str, resource: &str) -> ResourceAttributes {
    ResourceAttributes {
        namespace: namespace.into(),
        verb: verb.into(),
        resource: resource.into(),
        ..Default::default()
    }
}

fn action(attributes: ResourceAttributes) -> Option<Action> {
    Some(Action {
        kind: Some(Kind::ResourceAttributes(attributes)),
    })
}

fn requirement(key: &str, operator: &str, values: &[&str]) -> SelectorRequirement {
    SelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

/// `attributes` with both selectors: the field selector raw, the label selector as
/// requirements.
fn with_selectors(attributes: ResourceAttributes) -> ResourceAttributes {
    ResourceAttributes {
        field_selector: Some(FieldSelectorAttributes {
            raw_selector: r"spec.nodeName=node-1,metadata.name!=a\,b".into(),
            requirements: vec![],
        }),
        label_selector: Some(LabelSelectorAttributes {
            raw_selector: String::new(),
            requirements: vec![
                requirement("app", "In", &["web", "api"]),
                requirement("canary", "DoesNotExist", &[]),
            ],
        }),
        ..attributes
    }
}

fn objects(object: &str, old_object: &str) -> Option<Content> {
    Some(Content {
        object: object.as_bytes().to_vec(),
        old_object: old_object.as_bytes().to_vec(),
        changed_paths: vec![],
    })
}

fn changed_paths(paths: &[&str]) -> Option<Content> {
    Some(Content {
        changed_paths: paths.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    })
}

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","labels":{"app":"web"}},"spec":{"nodeName":"node-1"}}"#;
const OLD_POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","labels":{"app":"api"}},"spec":{"nodeName":"node-1"}}"#;

/// The content variations every question is asked with: none, objects, changed paths,
/// selectors, and all of it (objects are not JSON-checked on the way in; no rule reads them).
fn variations(attributes: &ResourceAttributes) -> Vec<(Option<Action>, Option<Content>)> {
    vec![
        (action(attributes.clone()), None),
        (action(attributes.clone()), objects(POD, OLD_POD)),
        (action(attributes.clone()), objects("", POD)),
        (
            action(attributes.clone()),
            changed_paths(&[".metadata.labels"]),
        ),
        (action(with_selectors(attributes.clone())), None),
        (action(with_selectors(attributes.clone())), objects(POD, "")),
        (
            action(attributes.clone()),
            objects(&"x".repeat(MAX_CONTENT), ""),
        ),
        (action(attributes.clone()), Some(Content::default())),
    ]
}

/// The parts of an answer content cannot change while no rule reads it (`cached` and the
/// revision may): decision, allowed, denied, reason, evaluation error.
type Verdict = (i32, bool, bool, String, String);

fn decision(r: &AuthorizeResponse) -> (Verdict, Vec<RuleRef>, Vec<RuleRef>) {
    let verdict = (
        r.decision,
        r.allowed,
        r.denied,
        r.reason.clone(),
        r.evaluation_error.clone(),
    );
    (verdict, r.allowed_by.clone(), r.denied_by.clone())
}

fn review(r: &SubjectAccessReviewResponse) -> Verdict {
    (
        r.decision,
        r.allowed,
        r.denied,
        r.reason.clone(),
        r.evaluation_error.clone(),
    )
}

/// Users, groups, denied users, denied groups, evaluation error.
type Subjects = (Vec<String>, Vec<String>, Vec<String>, Vec<String>, String);

fn subjects(r: &GetAllowedSubjectsResponse) -> Subjects {
    (
        r.users.clone(),
        r.groups.clone(),
        r.denied_users.clone(),
        r.denied_groups.clone(),
        r.evaluation_error.clone(),
    )
}

fn user(name: &str, groups: &[&str]) -> Option<UserInfo> {
    Some(UserInfo {
        name: name.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        ..Default::default()
    })
}

/// Allowed, denied by a deny rule, no opinion, and an evaluation error (a missing role).
fn questions() -> Vec<(&'static str, &'static [&'static str], ResourceAttributes)> {
    vec![
        ("alice", &[], resource("default", "get", "pods")),
        (
            "ivan",
            &["devs", "interns"],
            resource("dev", "update", "secrets"),
        ),
        ("bob", &[], resource("dev", "list", "pods")),
        ("eve", &[], resource("dev", "create", "pods")),
    ]
}

#[tokio::test]
async fn content_and_selectors_leave_every_answer_as_it_is_without_them() {
    let policy = sample_policy();
    let max = MAX_CONTENT.to_string();
    let server = Server::start_serving(policy.path(), &["--max-content-bytes", &max]).await;
    let mut authorizer = AuthorizerClient::new(server.channel().await);
    let mut reviews = AccessReviewClient::new(server.channel().await);

    for (name, groups, attributes) in questions() {
        let mut plain = None;
        let mut batch = Vec::new();
        for (action, content) in variations(&attributes) {
            let request = AuthorizeRequest {
                user: user(name, groups),
                action: action.clone(),
                min_revision: 0,
                content: content.clone(),
                conditions_mode: 0,
            };
            batch.push(request.clone());
            let answer = authorizer.authorize(request).await.unwrap().into_inner();
            let plain = plain.get_or_insert_with(|| decision(&answer));
            assert_eq!(&decision(&answer), plain, "{name}: {action:?} {content:?}");

            let sar = SubjectAccessReviewRequest {
                action: action.clone(),
                user: name.into(),
                groups: groups.iter().map(|g| g.to_string()).collect(),
                content: content.clone(),
                ..Default::default()
            };
            let answer = reviews
                .subject_access_review(sar)
                .await
                .unwrap()
                .into_inner();
            assert_eq!(review(&answer), plain.0, "{name}: {content:?}");

            let local = LocalSubjectAccessReviewRequest {
                namespace: attributes.namespace.clone(),
                action: action.clone(),
                user: name.into(),
                groups: groups.iter().map(|g| g.to_string()).collect(),
                content: content.clone(),
                ..Default::default()
            };
            let local = reviews.local_subject_access_review(local).await;
            let local = local.unwrap().into_inner();
            assert_eq!(review(&local), plain.0, "{name}: {content:?}");
            assert_eq!(local.namespace, attributes.namespace);
        }
        // A batch mixing plain items and items with content (prost's path for all of them)
        // answers each as Authorize does.
        let answers = authorizer
            .batch_authorize(BatchAuthorizeRequest { requests: batch })
            .await
            .unwrap()
            .into_inner();
        let plain = plain.unwrap();
        for answer in &answers.responses {
            assert_eq!(&decision(answer), &plain, "{name}: batch");
        }
    }
}

#[tokio::test]
async fn personal_reviews_and_who_can_take_content_too() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let mut authorizer = AuthorizerClient::new(server.channel().await);
    let mut reviews = AccessReviewClient::new(server.channel().await);

    for attributes in [
        resource("default", "get", "pods"),
        resource("dev", "update", "secrets"),
        resource("dev", "list", "pods"),
    ] {
        let mut plain_subjects = None;
        let mut plain_personal = None;
        for (action, content) in variations(&attributes) {
            let who = authorizer
                .get_allowed_subjects(GetAllowedSubjectsRequest {
                    action: action.clone(),
                    min_revision: 0,
                    content: content.clone(),
                    conditions_mode: 0,
                })
                .await
                .unwrap()
                .into_inner();
            let first = plain_subjects.get_or_insert_with(|| subjects(&who));
            assert_eq!(&subjects(&who), first, "{action:?} {content:?}");

            let rar = reviews
                .resource_access_review(ResourceAccessReviewRequest {
                    action: action.clone(),
                    min_revision: 0,
                    content: content.clone(),
                })
                .await
                .unwrap()
                .into_inner();
            let local_rar = reviews
                .local_resource_access_review(LocalResourceAccessReviewRequest {
                    namespace: attributes.namespace.clone(),
                    action: action.clone(),
                    min_revision: 0,
                    content: content.clone(),
                })
                .await
                .unwrap()
                .into_inner();
            for (users, groups) in [
                (&rar.users, &rar.groups),
                (&local_rar.users, &local_rar.groups),
            ] {
                assert_eq!(users, &who.users, "{content:?}");
                assert_eq!(groups, &who.groups, "{content:?}");
            }

            // The caller is the local identity (system:masters): allowed, content or not.
            let personal = reviews
                .personal_subject_access_review(PersonalSubjectAccessReviewRequest {
                    action: action.clone(),
                    min_revision: 0,
                    content: content.clone(),
                })
                .await
                .unwrap()
                .into_inner();
            let first = plain_personal.get_or_insert_with(|| review(&personal));
            assert_eq!(&review(&personal), first, "{content:?}");
        }
    }
}

#[tokio::test]
async fn bad_content_is_refused_naming_the_field_on_every_rpc() {
    let policy = sample_policy();
    let max = MAX_CONTENT.to_string();
    let server = Server::start_serving(policy.path(), &["--max-content-bytes", &max]).await;
    let mut authorizer = AuthorizerClient::new(server.channel().await);
    let mut reviews = AccessReviewClient::new(server.channel().await);

    let pods = resource("dev", "list", "pods");
    let both = ResourceAttributes {
        field_selector: Some(FieldSelectorAttributes {
            raw_selector: "spec.nodeName=node-1".into(),
            requirements: vec![requirement("spec.nodeName", "In", &["node-1"])],
        }),
        ..pods.clone()
    };
    let unknown_operator = ResourceAttributes {
        label_selector: Some(LabelSelectorAttributes {
            raw_selector: String::new(),
            requirements: vec![requirement("replicas", "Gt", &["3"])],
        }),
        ..pods.clone()
    };
    let unparsable = ResourceAttributes {
        label_selector: Some(LabelSelectorAttributes {
            raw_selector: "replicas > 3".into(),
            requirements: vec![],
        }),
        ..pods.clone()
    };
    let values_on_exists = ResourceAttributes {
        label_selector: Some(LabelSelectorAttributes {
            raw_selector: String::new(),
            requirements: vec![requirement("app", "Exists", &["web"])],
        }),
        ..pods.clone()
    };
    let too_large = "x".repeat(MAX_CONTENT + 1);
    let cases: Vec<(ResourceAttributes, Option<Content>, &str)> = vec![
        (
            both,
            None,
            "action.resource_attributes.field_selector.raw_selector",
        ),
        (
            unknown_operator,
            None,
            "action.resource_attributes.label_selector.requirements[0].operator",
        ),
        (
            unparsable,
            None,
            "action.resource_attributes.label_selector.raw_selector",
        ),
        (
            values_on_exists,
            None,
            "action.resource_attributes.label_selector.requirements[0].values",
        ),
        (
            pods.clone(),
            Some(Content {
                object: POD.as_bytes().to_vec(),
                changed_paths: vec![".metadata.labels".into()],
                ..Default::default()
            }),
            "content.changed_paths",
        ),
        (pods.clone(), objects(&too_large, ""), "content.object"),
        (
            pods.clone(),
            objects("{}", &too_large),
            "content.old_object",
        ),
    ];
    for (attributes, content, field) in cases {
        let authorize = AuthorizeRequest {
            user: user("alice", &[]),
            action: action(attributes.clone()),
            min_revision: 0,
            content: content.clone(),
            conditions_mode: 0,
        };
        assert_invalid(authorizer.authorize(authorize.clone()).await, field);
        let plain = AuthorizeRequest {
            action: action(resource("dev", "get", "pods")),
            content: None,
            ..authorize.clone()
        };
        // In a batch, the item is named, and nothing of the batch is answered.
        assert_invalid(
            authorizer
                .batch_authorize(BatchAuthorizeRequest {
                    requests: vec![plain, authorize],
                })
                .await,
            &format!("requests[1].{field}"),
        );
        assert_invalid(
            authorizer
                .get_allowed_subjects(GetAllowedSubjectsRequest {
                    action: action(attributes.clone()),
                    min_revision: 0,
                    content: content.clone(),
                    conditions_mode: 0,
                })
                .await,
            field,
        );
        assert_invalid(
            reviews
                .subject_access_review(SubjectAccessReviewRequest {
                    action: action(attributes.clone()),
                    user: "alice".into(),
                    content: content.clone(),
                    ..Default::default()
                })
                .await,
            field,
        );
        assert_invalid(
            reviews
                .personal_subject_access_review(PersonalSubjectAccessReviewRequest {
                    action: action(attributes.clone()),
                    min_revision: 0,
                    content: content.clone(),
                })
                .await,
            field,
        );
        assert_invalid(
            reviews
                .local_subject_access_review(LocalSubjectAccessReviewRequest {
                    namespace: "dev".into(),
                    action: action(attributes.clone()),
                    user: "alice".into(),
                    content: content.clone(),
                    ..Default::default()
                })
                .await,
            field,
        );
        assert_invalid(
            reviews
                .resource_access_review(ResourceAccessReviewRequest {
                    action: action(attributes.clone()),
                    min_revision: 0,
                    content: content.clone(),
                })
                .await,
            field,
        );
        assert_invalid(
            reviews
                .local_resource_access_review(LocalResourceAccessReviewRequest {
                    namespace: "dev".into(),
                    action: action(attributes.clone()),
                    min_revision: 0,
                    content: content.clone(),
                })
                .await,
            field,
        );
    }
}

/// The default bound is 3 MiB: an object of that size is taken, one byte more is refused.
#[tokio::test]
async fn the_default_bound_takes_a_three_mib_object() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let mut authorizer = AuthorizerClient::new(server.channel().await);
    let request = |size: usize| AuthorizeRequest {
        user: user("alice", &[]),
        action: action(resource("default", "update", "pods")),
        min_revision: 0,
        content: objects(&"x".repeat(size), ""),
        conditions_mode: 0,
    };
    const DEFAULT: usize = 3 * 1024 * 1024;
    let answer = authorizer.authorize(request(DEFAULT)).await.unwrap();
    assert!(!answer.into_inner().allowed);
    assert_invalid(
        authorizer.authorize(request(DEFAULT + 1)).await,
        "content.object",
    );
}
