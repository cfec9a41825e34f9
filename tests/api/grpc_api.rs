//! The real `authzd` binary on `127.0.0.1:0` with a temp policy directory, driven by the
//! generated tonic clients: decisions and their explanations, who-can, every review flavour,
//! health, reflection, batches, and bad input.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use crate::support::server::{assert_invalid, sample_policy, Server};
use authzd::proto::access_review_client::AccessReviewClient;
use authzd::proto::action::Kind;
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::{
    Action, AuthorizeRequest, AuthorizeResponse, BatchAuthorizeRequest, Decision,
    GetAllowedSubjectsRequest, LocalResourceAccessReviewRequest, LocalSubjectAccessReviewRequest,
    NonResourceAttributes, PersonalSubjectAccessReviewRequest, ResourceAccessReviewRequest,
    ResourceAttributes, SubjectAccessReviewRequest, UserInfo,
};
use tonic::transport::Channel;
use tonic::Code;

fn resource(namespace: &str, verb: &str, resource: &str) -> Option<Action> {
    Some(Action {
        kind: Some(Kind::ResourceAttributes(ResourceAttributes {
            namespace: namespace.into(),
            verb: verb.into(),
            resource: resource.into(),
            ..Default::default()
        })),
    })
}

fn non_resource(verb: &str, path: &str) -> Option<Action> {
    Some(Action {
        kind: Some(Kind::NonResourceAttributes(NonResourceAttributes {
            path: path.into(),
            verb: verb.into(),
        })),
    })
}

fn user(name: &str, groups: &[&str]) -> Option<UserInfo> {
    Some(UserInfo {
        name: name.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        ..Default::default()
    })
}

fn request(name: &str, groups: &[&str], action: Option<Action>) -> AuthorizeRequest {
    AuthorizeRequest {
        user: user(name, groups),
        action,
        ..Default::default()
    }
}

async fn authorize(
    client: &mut AuthorizerClient<Channel>,
    req: AuthorizeRequest,
) -> AuthorizeResponse {
    client.authorize(req).await.unwrap().into_inner()
}

#[tokio::test]
async fn authorize_allows_denies_and_explains() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let mut client = AuthorizerClient::new(server.channel().await);

    // Allowed by a ClusterRoleBinding.
    let allow = authorize(
        &mut client,
        request("alice", &[], resource("default", "get", "pods")),
    )
    .await;
    assert_eq!(allow.decision, Decision::Allow as i32);
    assert!(allow.allowed && !allow.denied);
    assert_eq!(
        allow.reason,
        r#"RBAC: allowed by ClusterRoleBinding "read-pods" of ClusterRole "pod-reader" to User "alice""#
    );
    assert_eq!(allow.allowed_by.len(), 1);
    let by = &allow.allowed_by[0];
    assert_eq!(
        (
            by.authorizer.as_str(),
            by.binding.as_str(),
            by.role.as_str(),
            by.rule_index
        ),
        (
            "RBAC",
            "ClusterRoleBinding/read-pods",
            "ClusterRole/pod-reader",
            0
        )
    );
    assert!(by.source.contains("rbac.yaml:"), "{by:?}");
    assert_eq!(allow.revision, 1);
    assert!(!allow.cached);

    // Denied by a seed-003 deny rule, which outranks the namespace allow.
    let deny = authorize(
        &mut client,
        request(
            "ivan",
            &["devs", "interns"],
            resource("dev", "get", "secrets"),
        ),
    )
    .await;
    assert_eq!(deny.decision, Decision::Deny as i32);
    assert!(!deny.allowed && deny.denied);
    assert!(
        deny.reason.starts_with("RBAC: denied by"),
        "{}",
        deny.reason
    );
    assert_eq!(deny.denied_by.len(), 1);
    assert_eq!(
        deny.denied_by[0].binding,
        "RoleBinding/dev/interns-no-secrets"
    );
    assert_eq!(deny.denied_by[0].role, "Role/dev/no-secrets");

    // Without the deny, the namespace grant allows.
    let dev = authorize(
        &mut client,
        request("dana", &["devs"], resource("dev", "get", "secrets")),
    )
    .await;
    assert_eq!(dev.decision, Decision::Allow as i32);

    // ABAC answers when RBAC has no opinion, and names its file:line.
    let abac = authorize(
        &mut client,
        request("carol", &[], resource("prod", "list", "configmaps")),
    )
    .await;
    assert_eq!(abac.decision, Decision::Allow as i32);
    assert_eq!(abac.allowed_by[0].authorizer, "ABAC");
    assert!(
        abac.allowed_by[0].source.ends_with("abac.jsonl:2"),
        "{abac:?}"
    );

    // Nothing matches: no opinion, not allowed.
    let none = authorize(
        &mut client,
        request("mallory", &[], resource("default", "delete", "pods")),
    )
    .await;
    assert_eq!(none.decision, Decision::NoOpinion as i32);
    assert!(!none.allowed && !none.denied);
    assert!(none.allowed_by.is_empty() && none.denied_by.is_empty());

    // A binding to a missing role is reported, not fatal.
    let eve = authorize(
        &mut client,
        request("eve", &[], resource("dev", "get", "pods")),
    )
    .await;
    assert_eq!(eve.decision, Decision::NoOpinion as i32);
    assert!(eve.evaluation_error.contains("ghost"), "{eve:?}");

    // The default super-group.
    let root = authorize(
        &mut client,
        request("root", &["system:masters"], non_resource("get", "/metrics")),
    )
    .await;
    assert_eq!(root.decision, Decision::Allow as i32);
    assert_eq!(root.allowed_by[0].authorizer, "SuperUser");
}

#[tokio::test]
async fn batch_authorize_answers_in_order_and_names_bad_entries() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let mut client = AuthorizerClient::new(server.channel().await);

    let batch = client
        .batch_authorize(BatchAuthorizeRequest {
            requests: vec![
                request("alice", &[], resource("default", "get", "pods")),
                request("ivan", &["interns"], resource("dev", "get", "secrets")),
                request("mallory", &[], resource("default", "get", "pods")),
            ],
        })
        .await
        .unwrap()
        .into_inner();
    let decisions: Vec<i32> = batch.responses.iter().map(|r| r.decision).collect();
    assert_eq!(
        decisions,
        vec![
            Decision::Allow as i32,
            Decision::Deny as i32,
            Decision::NoOpinion as i32
        ]
    );
    assert!(batch.responses.iter().all(|r| r.revision == 1));

    let bad = client
        .batch_authorize(BatchAuthorizeRequest {
            requests: vec![
                request("alice", &[], resource("default", "get", "pods")),
                request("alice", &[], resource("default", "get", "pods")),
                request("alice", &[], resource("default", "", "pods")),
            ],
        })
        .await;
    assert_invalid(bad, "requests[2].action.resource_attributes.verb");

    let too_many = client
        .batch_authorize(BatchAuthorizeRequest {
            requests: vec![request("alice", &[], resource("", "get", "pods")); 1001],
        })
        .await;
    assert_invalid(too_many, "requests");
}

/// A request in the plain shape is read as a view of its bytes; one carrying `extra` is decoded
/// by prost. Both reach the same decision through the same cache entry, alone and in batches.
#[tokio::test]
async fn plain_and_prost_decoded_requests_share_decisions_and_cache_entries() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let mut client = AuthorizerClient::new(server.channel().await);
    let plain = || request("alice", &["devs"], resource("default", "get", "pods"));
    let with_extra = || {
        let mut req = plain();
        if let Some(user) = req.user.as_mut() {
            user.extra.insert(
                "scopes".into(),
                authzd::proto::ExtraValues {
                    values: vec!["read".into()],
                },
            );
        }
        req
    };

    let first = authorize(&mut client, with_extra()).await;
    assert_eq!(first.decision, Decision::Allow as i32);
    assert!(!first.cached);
    // The view finds the entry the prost-decoded request left (extra is not part of the key).
    let second = authorize(&mut client, plain()).await;
    assert!(second.cached, "{second:?}");
    assert_eq!(
        (second.decision, &second.reason, &second.allowed_by),
        (first.decision, &first.reason, &first.allowed_by)
    );

    // A batch with one `extra` is decoded by prost as a whole, and answers as the views do.
    let mixed = client
        .batch_authorize(BatchAuthorizeRequest {
            requests: vec![
                plain(),
                with_extra(),
                request("mallory", &[], resource("default", "get", "pods")),
            ],
        })
        .await
        .unwrap()
        .into_inner();
    let views = client
        .batch_authorize(BatchAuthorizeRequest {
            requests: vec![
                plain(),
                plain(),
                request("mallory", &[], resource("default", "get", "pods")),
            ],
        })
        .await
        .unwrap()
        .into_inner();
    let decisions = |batch: &authzd::proto::BatchAuthorizeResponse| {
        batch
            .responses
            .iter()
            .map(|r| (r.decision, r.reason.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(decisions(&mixed), decisions(&views));
    assert!(views.responses.iter().all(|r| r.cached));
    assert_eq!(mixed.responses[0], second);
}

#[tokio::test]
async fn who_can_lists_allowed_and_denied_subjects() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let mut client = AuthorizerClient::new(server.channel().await);

    let pods = client
        .get_allowed_subjects(GetAllowedSubjectsRequest {
            action: resource("default", "get", "pods"),
            min_revision: 0,
            content: None,
            conditions_mode: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(pods.users, vec!["alice"]);
    assert_eq!(pods.groups, vec!["readers", "system:masters"]);
    assert_eq!(pods.revision, 1);

    let secrets = client
        .get_allowed_subjects(GetAllowedSubjectsRequest {
            action: resource("dev", "get", "secrets"),
            min_revision: 0,
            content: None,
            conditions_mode: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(secrets.groups.contains(&"devs".to_string()), "{secrets:?}");
    assert_eq!(secrets.denied_groups, vec!["interns"]);

    let configmaps = client
        .get_allowed_subjects(GetAllowedSubjectsRequest {
            action: resource("prod", "get", "configmaps"),
            min_revision: 0,
            content: None,
            conditions_mode: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        configmaps.users.contains(&"carol".to_string()),
        "{configmaps:?}"
    );

    assert_invalid(
        client
            .get_allowed_subjects(GetAllowedSubjectsRequest {
                action: None,
                min_revision: 0,
                content: None,
                conditions_mode: 0,
            })
            .await,
        "action",
    );
}

#[tokio::test]
async fn the_five_review_flavours() {
    let policy = sample_policy();
    // The caller is `dave` in group `readers`, who may create every kind of review (docs/security.md §2:
    // the privileges come from the policy).
    std::fs::write(
        policy.path().join("reviewer.yaml"),
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: reviewer}\nrules:\n- apiGroups: [authorization.k8s.io]\n  resources: [subjectaccessreviews, localsubjectaccessreviews, resourceaccessreviews, localresourceaccessreviews]\n  verbs: [create]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: dave-reviews}\nsubjects: [{kind: User, name: dave, apiGroup: rbac.authorization.k8s.io}]\nroleRef: {kind: ClusterRole, name: reviewer, apiGroup: rbac.authorization.k8s.io}\n",
    )
    .unwrap();
    let server = Server::start_serving(
        policy.path(),
        &["--local-user", "dave", "--local-group", "readers"],
    )
    .await;
    let mut reviews = AccessReviewClient::new(server.channel().await);

    let sar = reviews
        .subject_access_review(SubjectAccessReviewRequest {
            action: resource("dev", "get", "secrets"),
            user: "ivan".into(),
            groups: vec!["devs".into(), "interns".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!sar.allowed && sar.denied);
    assert_eq!(sar.decision, Decision::Deny as i32);
    assert_eq!(sar.namespace, "dev");
    assert!(sar.reason.starts_with("RBAC: denied by"));
    assert_eq!(sar.revision, 1);

    let groups_only = reviews
        .subject_access_review(SubjectAccessReviewRequest {
            action: resource("default", "list", "pods"),
            groups: vec!["readers".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(groups_only.allowed);

    // Personal: evaluates the caller (dave, group readers).
    let personal = reviews
        .personal_subject_access_review(PersonalSubjectAccessReviewRequest {
            action: resource("default", "watch", "pods"),
            min_revision: 0,
            content: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(personal.allowed, "{personal:?}");
    let personal_no = reviews
        .personal_subject_access_review(PersonalSubjectAccessReviewRequest {
            action: resource("default", "delete", "pods"),
            min_revision: 0,
            content: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(personal_no.decision, Decision::NoOpinion as i32);

    // Local: the attribute namespace is filled from the review.
    let local = reviews
        .local_subject_access_review(LocalSubjectAccessReviewRequest {
            namespace: "dev".into(),
            action: resource("", "delete", "pods"),
            user: "dana".into(),
            groups: vec!["devs".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(local.allowed, "{local:?}");
    assert_eq!(local.namespace, "dev");

    let rar = reviews
        .resource_access_review(ResourceAccessReviewRequest {
            action: resource("dev", "get", "secrets"),
            min_revision: 0,
            content: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(rar.groups.contains(&"devs".to_string()));
    assert_eq!(rar.denied_groups, vec!["interns"]);
    assert_eq!(rar.namespace, "dev");

    let local_rar = reviews
        .local_resource_access_review(LocalResourceAccessReviewRequest {
            namespace: "dev".into(),
            action: resource("", "create", "pods"),
            min_revision: 0,
            content: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        local_rar.groups.contains(&"devs".to_string()),
        "{local_rar:?}"
    );
    assert_eq!(local_rar.namespace, "dev");
    assert_eq!(local_rar.revision, 1);

    // Bad reviews.
    assert_invalid(
        reviews
            .subject_access_review(SubjectAccessReviewRequest {
                action: resource("dev", "get", "pods"),
                ..Default::default()
            })
            .await,
        "user",
    );
    assert_invalid(
        reviews
            .local_subject_access_review(LocalSubjectAccessReviewRequest {
                namespace: "dev".into(),
                action: resource("prod", "get", "pods"),
                user: "dana".into(),
                ..Default::default()
            })
            .await,
        "action.resource_attributes.namespace",
    );
    assert_invalid(
        reviews
            .local_resource_access_review(LocalResourceAccessReviewRequest {
                namespace: String::new(),
                action: resource("", "get", "pods"),
                min_revision: 0,
                content: None,
            })
            .await,
        "namespace",
    );
    assert_invalid(
        reviews
            .local_subject_access_review(LocalSubjectAccessReviewRequest {
                namespace: "dev".into(),
                action: non_resource("get", "/healthz"),
                user: "dana".into(),
                ..Default::default()
            })
            .await,
        "action.non_resource_attributes",
    );
}

#[tokio::test]
async fn bad_input_is_invalid_argument_naming_the_field() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let mut client = AuthorizerClient::new(server.channel().await);

    assert_invalid(
        client.authorize(request("alice", &[], None)).await,
        "action",
    );
    assert_invalid(
        client
            .authorize(request("alice", &[], Some(Action { kind: None })))
            .await,
        "action",
    );
    assert_invalid(
        client
            .authorize(request("alice", &[], resource("", "", "pods")))
            .await,
        "action.resource_attributes.verb",
    );
    assert_invalid(
        client
            .authorize(request("alice", &[], non_resource("", "/healthz")))
            .await,
        "action.non_resource_attributes.verb",
    );
    let mut long = request("alice", &[], resource("", "get", "pods"));
    if let Some(Action {
        kind: Some(Kind::ResourceAttributes(r)),
    }) = long.action.as_mut()
    {
        r.name = "n".repeat(100_000);
    }
    let status = client.authorize(long).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "action.resource_attributes.name: is 100000 bytes long; the limit is 4096"
    );
    assert_invalid(
        client
            .authorize(request(&"u".repeat(5000), &[], resource("", "get", "pods")))
            .await,
        "user.name",
    );
    let groups: Vec<String> = (0..300).map(|i| format!("g{i}")).collect();
    let group_refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    assert_invalid(
        client
            .authorize(request("alice", &group_refs, resource("", "get", "pods")))
            .await,
        "user.groups",
    );
    assert_invalid(
        client
            .authorize(AuthorizeRequest {
                user: None,
                action: resource("", "get", "pods"),
                ..Default::default()
            })
            .await,
        "user",
    );

    // A message over the server's 4 MiB limit is refused before it is decoded.
    let mut huge = request("alice", &[], resource("", "get", "pods"));
    huge.user = Some(UserInfo {
        name: "alice".into(),
        groups: vec!["g".repeat(4096); 1100],
        ..Default::default()
    });
    let status = client.authorize(huge).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");

    // The server is still fine.
    let ok = authorize(
        &mut client,
        request("alice", &[], resource("", "get", "pods")),
    )
    .await;
    assert!(ok.allowed);
}

#[tokio::test]
async fn min_revision_ahead_of_the_server_fails_precondition() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let mut client = AuthorizerClient::new(server.channel().await);

    // The wait is bounded by the request's own deadline (here 2 s, not the 5 s default); the
    // server answers before the deadline so the refusal, not a cancellation, arrives.
    let mut ahead = request("alice", &[], resource("", "get", "pods"));
    ahead.min_revision = 7;
    let mut ahead = tonic::Request::new(ahead);
    ahead.set_timeout(std::time::Duration::from_secs(2));
    let started = std::time::Instant::now();
    let status = client.authorize(ahead).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(started.elapsed() < std::time::Duration::from_millis(4500));
    assert!(
        status.message().contains("at revision 1"),
        "{}",
        status.message()
    );

    let mut current = request("alice", &[], resource("", "get", "pods"));
    current.min_revision = 1;
    assert!(authorize(&mut client, current).await.allowed);

    let mut behind = tonic::Request::new(GetAllowedSubjectsRequest {
        action: resource("", "get", "pods"),
        min_revision: 2,
        content: None,
        conditions_mode: 0,
    });
    behind.set_timeout(std::time::Duration::from_secs(2));
    let status = client.get_allowed_subjects(behind).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
}

#[tokio::test]
async fn health_reports_serving_for_each_service() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let mut health = HealthClient::new(server.channel().await);
    for service in ["", "authz.v1.Authorizer", "authz.v1.AccessReview"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "service {service:?}");
    }
}

#[tokio::test]
async fn reflection_lists_the_services_in_v1_and_v1alpha() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;

    let expected = [
        "authz.v1.AccessReview",
        "authz.v1.Authorizer",
        "grpc.health.v1.Health",
    ];

    {
        use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
        use tonic_reflection::pb::v1::ServerReflectionRequest;

        let mut client = ServerReflectionClient::new(server.channel().await);
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = client
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .unwrap()
            .into_inner();
        let response = stream.message().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
            panic!("unexpected reflection answer {response:?}");
        };
        let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        for name in expected {
            assert!(
                names.iter().any(|n| n == name),
                "v1 lacks {name}: {names:?}"
            );
        }
    }
    {
        use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
        use tonic_reflection::pb::v1alpha::ServerReflectionRequest;

        let mut client = ServerReflectionClient::new(server.channel().await);
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = client
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .unwrap()
            .into_inner();
        let response = stream.message().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
            panic!("unexpected reflection answer {response:?}");
        };
        let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        for name in expected {
            assert!(
                names.iter().any(|n| n == name),
                "v1alpha lacks {name}: {names:?}"
            );
        }
    }
}

#[test]
fn malformed_policy_at_startup_exits_non_zero_naming_file_and_line() {
    let policy = sample_policy();
    std::fs::write(
        policy.path().join("broken.yaml"),
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: x\nrules: [\n",
    )
    .unwrap();
    let output = crate::support::server::run_bin(
        &[
            "serve".as_ref(),
            "--listen".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--policy".as_ref(),
            policy.path().as_os_str(),
        ],
        std::time::Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr:\n{stderr}");
    assert!(stderr.contains("broken.yaml:"), "stderr:\n{stderr}");
}

#[test]
fn usage_errors_exit_two() {
    let output = std::process::Command::new(crate::support::server::BIN)
        .args(["serve", "--authorization-mode", "RBAC,Bogus"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unknown authorization mode `Bogus`"),
        "{stderr}"
    );
}

/// Graceful shutdown ends open watch streams instead of waiting for them forever.
#[tokio::test]
async fn sigterm_ends_open_watch_streams_and_exits() {
    use authzd::proto::policy_admin_client::PolicyAdminClient;
    let policy = sample_policy();
    let mut server = Server::start_serving(policy.path(), &[]).await;
    let mut admin = PolicyAdminClient::new(server.channel().await);
    let mut stream = admin
        .watch(authzd::proto::WatchRequest { from_revision: 0 })
        .await
        .unwrap()
        .into_inner();
    let exited = tokio::task::spawn_blocking(move || {
        let exited = server.terminate(std::time::Duration::from_secs(10));
        (exited, server)
    });
    // The stream ends (cleanly) once the server drains.
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), stream.message()).await;
    assert!(matches!(ended, Ok(Ok(None)) | Ok(Err(_))), "{ended:?}");
    let (exited, server) = exited.await.unwrap();
    assert!(exited, "server still running; stderr:\n{}", server.stderr());
}
