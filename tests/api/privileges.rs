//! Caller identity and privileges against the real server (docs/security.md §1-2, docs/security.md §4, docs/api.md §7): bearer tokens
//! from a `--token-auth-file`, the review table's privileges enforced through the policy,
//! revocation of a privilege, PolicyAdmin's RBAC verbs and escalation prevention with real
//! (token) identities, and the listener safety rule.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::time::Duration;

use crate::support::server::{resource_request, role_binding, run_bin, Server};
use authzd::proto::access_review_client::AccessReviewClient;
use authzd::proto::action::Kind;
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::policy_admin_client::PolicyAdminClient;
use authzd::proto::{
    Action, ApplyRequest, DeleteRequest, GetAllowedSubjectsRequest, GetRequest, ListRequest,
    LocalResourceAccessReviewRequest, LocalSubjectAccessReviewRequest, ObjectRef,
    PersonalSubjectAccessReviewRequest, ResourceAccessReviewRequest, ResourceAttributes,
    StatusRequest, SubjectAccessReviewRequest, WatchRequest,
};
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

/// * group `reviewers` may create cluster-wide reviews (SubjectAccessReview,
///   ResourceAccessReview);
/// * group `readers` reads pods everywhere; every authenticated caller reads configmaps;
/// * `nadia` administers namespace `team-a` (pods, secrets, roles, rolebindings, local reviews),
///   but a deny rule there withholds `delete secrets` from her;
/// * `vic` may create (only create) rolebindings in `team-a` and reads pods there;
/// * `pat` may patch (not update, not create) roles in `team-p` and reads pods there.
const POLICY: &str = include_str!("../fixtures/privileges.yaml");

/// `root` is in the default super-group; `alice` is an ordinary reader.
const TOKENS: &str = "root-token,root,uid-0,system:masters\n\
alice-token,alice,uid-1,\"readers,staff\"\n\
rita-token,rita,uid-2,reviewers\n\
nadia-token,nadia,uid-3\n\
vic-token,vic,uid-4\n\
gateway-token,gateway,uid-5\n\
pat-token,pat,uid-6\n";

struct Fixture {
    _dir: tempfile::TempDir,
    server: Server,
    channel: Channel,
}

impl Fixture {
    async fn start() -> Fixture {
        Self::start_with(|_| Vec::new()).await
    }

    /// Started with the server arguments `extra` gives for the fixture's directory.
    async fn start_with(extra: impl FnOnce(&std::path::Path) -> Vec<String>) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy");
        std::fs::create_dir(&policy).unwrap();
        std::fs::write(policy.join("rbac.yaml"), POLICY).unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, TOKENS).unwrap();
        let mut args = vec![
            "--token-auth-file".to_string(),
            tokens.to_str().unwrap().to_string(),
            "--no-watch".to_string(),
        ];
        args.extend(extra(dir.path()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = Server::start_serving(&policy, &args).await;
        let channel = server.channel().await;
        Fixture {
            _dir: dir,
            server,
            channel,
        }
    }

    fn reviews(&self) -> AccessReviewClient<Channel> {
        AccessReviewClient::new(self.channel.clone())
    }

    fn authorizer(&self) -> AuthorizerClient<Channel> {
        AuthorizerClient::new(self.channel.clone())
    }

    fn admin(&self) -> PolicyAdminClient<Channel> {
        PolicyAdminClient::new(self.channel.clone())
    }

    async fn apply_as(&self, token: &str, manifest: &str) -> Result<u64, Status> {
        self.admin()
            .apply(as_user(
                token,
                ApplyRequest {
                    manifest: manifest.to_string(),
                    dry_run: false,
                    ..Default::default()
                },
            ))
            .await
            .map(|r| r.into_inner().revision)
    }

    async fn delete_as(
        &self,
        token: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<u64, Status> {
        self.admin()
            .delete(as_user(
                token,
                DeleteRequest {
                    object: Some(object(kind, namespace, name)),
                    ..Default::default()
                },
            ))
            .await
            .map(|r| r.into_inner().revision)
    }
}

/// `message` with `authorization: Bearer TOKEN`.
fn as_user<T>(token: &str, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    request
}

fn object(kind: &str, namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
    }
}

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

fn sar(namespace: &str) -> SubjectAccessReviewRequest {
    SubjectAccessReviewRequest {
        action: resource(namespace, "get", "pods"),
        user: "someone".into(),
        groups: vec!["readers".into()],
        ..Default::default()
    }
}

fn local_sar(namespace: &str, attributes_namespace: &str) -> LocalSubjectAccessReviewRequest {
    LocalSubjectAccessReviewRequest {
        namespace: namespace.into(),
        action: resource(attributes_namespace, "get", "pods"),
        user: "someone".into(),
        ..Default::default()
    }
}

fn personal(verb: &str, what: &str) -> PersonalSubjectAccessReviewRequest {
    PersonalSubjectAccessReviewRequest {
        action: resource("default", verb, what),
        min_revision: 0,
        content: None,
    }
}

#[track_caller]
fn assert_refused<T: std::fmt::Debug>(result: Result<T, Status>, code: Code, message: &str) {
    let status = result.expect_err("must be refused");
    assert_eq!(status.code(), code, "{status:?}");
    assert!(
        status.message().contains(message),
        "the message should contain {message:?}: {:?}",
        status.message()
    );
}

// ---------------------------------------------------------------------------------------------
// Authentication.

#[tokio::test]
async fn token_callers_are_who_the_file_says_and_nobody_else_gets_in() {
    let f = Fixture::start().await;
    let mut reviews = f.reviews();

    // No token: with a token file the local identity is not handed out, even on loopback.
    assert_refused(
        reviews
            .personal_subject_access_review(personal("get", "pods"))
            .await,
        Code::Unauthenticated,
        "no credentials",
    );
    // A wrong token never falls back to anything.
    assert_refused(
        reviews
            .personal_subject_access_review(as_user("alice-tokenX", personal("get", "pods")))
            .await,
        Code::Unauthenticated,
        "invalid bearer token",
    );
    let mut basic = Request::new(personal("get", "pods"));
    basic
        .metadata_mut()
        .insert("authorization", "Basic YWxpY2U6eA==".parse().unwrap());
    assert_refused(
        reviews.personal_subject_access_review(basic).await,
        Code::Unauthenticated,
        "expected `Bearer <token>`",
    );

    // A valid token: the policy sees alice with the file's groups plus system:authenticated.
    let pods = reviews
        .personal_subject_access_review(as_user("alice-token", personal("list", "pods")))
        .await
        .unwrap()
        .into_inner();
    assert!(pods.allowed, "{pods:?}");
    assert!(pods.reason.contains("readers-read-pods"), "{pods:?}");
    let configmaps = reviews
        .personal_subject_access_review(as_user("alice-token", personal("get", "configmaps")))
        .await
        .unwrap()
        .into_inner();
    assert!(configmaps.allowed, "{configmaps:?}");
    assert!(
        configmaps.reason.contains("authenticated-read-configmaps"),
        "{configmaps:?}"
    );
    // nadia's token names no groups: she reads configmaps (system:authenticated) but not pods
    // outside her namespace.
    let nadia = reviews
        .personal_subject_access_review(as_user("nadia-token", personal("list", "pods")))
        .await
        .unwrap()
        .into_inner();
    assert!(!nadia.allowed, "{nadia:?}");

    // The super-group member from the token file may do the privileged calls.
    let answer = reviews
        .subject_access_review(as_user("root-token", sar("default")))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.allowed, "{answer:?}");
}

// ---------------------------------------------------------------------------------------------
// The review table's privileges.

#[tokio::test]
async fn an_unprivileged_caller_gets_only_its_personal_review() {
    let f = Fixture::start().await;
    let mut reviews = f.reviews();
    let mut authorizer = f.authorizer();
    let cluster =
        "user \"alice\" cannot create subjectaccessreviews.authorization.k8s.io at cluster scope";

    assert_refused(
        reviews
            .subject_access_review(as_user("alice-token", sar("default")))
            .await,
        Code::PermissionDenied,
        cluster,
    );
    assert_refused(
        reviews
            .resource_access_review(as_user(
                "alice-token",
                ResourceAccessReviewRequest {
                    action: resource("default", "get", "pods"),
                    min_revision: 0,
                    content: None,
                },
            ))
            .await,
        Code::PermissionDenied,
        "user \"alice\" cannot create resourceaccessreviews.authorization.k8s.io at cluster scope",
    );
    assert_refused(
        authorizer
            .authorize(as_user(
                "alice-token",
                resource_request("bob", &[], "default", "get", "pods"),
            ))
            .await,
        Code::PermissionDenied,
        cluster,
    );
    assert_refused(
        authorizer
            .get_allowed_subjects(as_user(
                "alice-token",
                GetAllowedSubjectsRequest {
                    action: resource("default", "get", "pods"),
                    min_revision: 0,
                    content: None,
                    conditions_mode: 0,
                },
            ))
            .await,
        Code::PermissionDenied,
        "resourceaccessreviews",
    );
    assert_refused(
        reviews
            .local_subject_access_review(as_user("alice-token", local_sar("team-a", "")))
            .await,
        Code::PermissionDenied,
        "user \"alice\" cannot create localsubjectaccessreviews.authorization.k8s.io in namespace \"team-a\"",
    );
    // Its personal review works, and evaluates alice herself.
    let own = reviews
        .personal_subject_access_review(as_user("alice-token", personal("get", "pods")))
        .await
        .unwrap()
        .into_inner();
    assert!(own.allowed, "{own:?}");

    // A reviewer may ask about anyone, and the Authorizer calls need the same privilege.
    let other = reviews
        .subject_access_review(as_user("rita-token", sar("default")))
        .await
        .unwrap()
        .into_inner();
    assert!(other.allowed, "{other:?}");
    let decided = authorizer
        .authorize(as_user(
            "rita-token",
            resource_request("bob", &["readers"], "default", "get", "pods"),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(decided.allowed, "{decided:?}");
    let subjects = authorizer
        .get_allowed_subjects(as_user(
            "rita-token",
            GetAllowedSubjectsRequest {
                action: resource("default", "get", "pods"),
                min_revision: 0,
                content: None,
                conditions_mode: 0,
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(
        subjects.groups.contains(&"readers".to_string()),
        "{subjects:?}"
    );
}

#[tokio::test]
async fn a_namespace_admin_reviews_only_its_own_namespace() {
    let f = Fixture::start().await;
    let mut reviews = f.reviews();

    let answer = reviews
        .local_subject_access_review(as_user("nadia-token", local_sar("team-a", "")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.namespace, "team-a");
    assert_refused(
        reviews
            .local_subject_access_review(as_user("nadia-token", local_sar("team-b", "")))
            .await,
        Code::PermissionDenied,
        "user \"nadia\" cannot create localsubjectaccessreviews.authorization.k8s.io in namespace \"team-b\"",
    );
    // A review of team-a whose attributes name team-b is refused, not answered for team-b.
    assert_refused(
        reviews
            .local_subject_access_review(as_user("nadia-token", local_sar("team-a", "team-b")))
            .await,
        Code::InvalidArgument,
        "does not match the review's namespace",
    );

    let rar = |namespace: &str| {
        as_user(
            "nadia-token",
            LocalResourceAccessReviewRequest {
                namespace: namespace.into(),
                action: resource("", "get", "pods"),
                min_revision: 0,
                content: None,
            },
        )
    };
    let subjects = reviews
        .local_resource_access_review(rar("team-a"))
        .await
        .unwrap()
        .into_inner();
    assert!(
        subjects.users.contains(&"nadia".to_string()),
        "{subjects:?}"
    );
    assert_refused(
        reviews.local_resource_access_review(rar("team-b")).await,
        Code::PermissionDenied,
        "cannot create localresourceaccessreviews.authorization.k8s.io in namespace \"team-b\"",
    );
    // Not a cluster reviewer either.
    assert_refused(
        reviews
            .subject_access_review(as_user("nadia-token", sar("team-a")))
            .await,
        Code::PermissionDenied,
        "subjectaccessreviews",
    );
}

#[tokio::test]
async fn revoking_a_privilege_takes_effect_on_the_next_call() {
    let f = Fixture::start().await;
    let mut reviews = f.reviews();
    // Asked twice, so the privilege check is certainly cached before the revocation.
    for _ in 0..2 {
        reviews
            .subject_access_review(as_user("rita-token", sar("default")))
            .await
            .unwrap();
    }
    f.delete_as("root-token", "ClusterRoleBinding", "", "reviewers")
        .await
        .unwrap();
    assert_refused(
        reviews
            .subject_access_review(as_user("rita-token", sar("default")))
            .await,
        Code::PermissionDenied,
        "user \"rita\" cannot create subjectaccessreviews",
    );
    // Granting it back is just as immediate.
    f.apply_as(
        "root-token",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: reviewers}\nsubjects: [{kind: User, name: rita, apiGroup: rbac.authorization.k8s.io}]\nroleRef: {kind: ClusterRole, name: reviewer, apiGroup: rbac.authorization.k8s.io}\n",
    )
    .await
    .unwrap();
    reviews
        .subject_access_review(as_user("rita-token", sar("default")))
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// PolicyAdmin: reads need get/list/watch, Status needs `get /status`, writes need the verbs.

#[tokio::test]
async fn policy_reads_need_the_rbac_read_verbs() {
    let f = Fixture::start().await;
    let mut admin = f.admin();
    let get = |token: &str, kind: &str, namespace: &str, name: &str| {
        as_user(
            token,
            GetRequest {
                object: Some(object(kind, namespace, name)),
            },
        )
    };
    assert_refused(
        admin.get(get("alice-token", "Role", "team-a", "keep-secrets")).await,
        Code::PermissionDenied,
        "user \"alice\" cannot get roles.rbac.authorization.k8s.io \"keep-secrets\" in namespace \"team-a\"",
    );
    let manifest = admin
        .get(get("nadia-token", "Role", "team-a", "keep-secrets"))
        .await
        .unwrap()
        .into_inner()
        .manifest;
    assert!(manifest.contains("keep-secrets"));
    assert_refused(
        admin
            .get(get("nadia-token", "ClusterRole", "", "cluster-admin"))
            .await,
        Code::PermissionDenied,
        "cannot get clusterroles.rbac.authorization.k8s.io \"cluster-admin\" at cluster scope",
    );

    let list = |token: &str, kind: &str, namespace: &str| {
        as_user(
            token,
            ListRequest {
                kind: kind.into(),
                namespace: namespace.into(),
            },
        )
    };
    let listed = admin
        .list(list("nadia-token", "RoleBinding", "team-a"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.manifests.len(), 3);
    assert_refused(
        admin.list(list("nadia-token", "RoleBinding", "")).await,
        Code::PermissionDenied,
        "cannot list rolebindings.rbac.authorization.k8s.io at cluster scope",
    );
    // Every kind at once needs `list` on every kind.
    assert_refused(
        admin.list(list("nadia-token", "", "team-a")).await,
        Code::PermissionDenied,
        "cannot list clusterroles",
    );
    assert_eq!(
        admin
            .list(list("root-token", "", ""))
            .await
            .unwrap()
            .into_inner()
            .manifests
            .len(),
        POLICY.matches("\nkind: ").count()
    );

    assert_refused(
        admin
            .watch(as_user("nadia-token", WatchRequest { from_revision: 0 }))
            .await,
        Code::PermissionDenied,
        "cannot watch clusterroles.rbac.authorization.k8s.io at cluster scope",
    );
    assert_refused(
        admin.status(as_user("alice-token", StatusRequest {})).await,
        Code::PermissionDenied,
        "user \"alice\" cannot get path \"/status\"",
    );
    admin
        .status(as_user("root-token", StatusRequest {}))
        .await
        .unwrap();
}

#[tokio::test]
async fn policy_writes_need_create_update_and_delete() {
    let f = Fixture::start().await;
    let binding = |subject: &str| {
        role_binding(
            "team-a",
            "vic-made",
            "ClusterRole",
            "pod-reader",
            &[("User", subject)],
        )
    };
    // alice holds no RBAC verbs at all.
    assert_refused(
        f.apply_as("alice-token", &binding("bob")).await,
        Code::PermissionDenied,
        "user \"alice\" cannot create rolebindings.rbac.authorization.k8s.io \"vic-made\" in namespace \"team-a\"",
    );
    // vic may create (and holds what pod-reader grants in team-a, so no escalation)...
    f.apply_as("vic-token", &binding("bob")).await.unwrap();
    // ...but not change or delete what exists.
    assert_refused(
        f.apply_as("vic-token", &binding("carl")).await,
        Code::PermissionDenied,
        "user \"vic\" cannot update rolebindings.rbac.authorization.k8s.io \"vic-made\" in namespace \"team-a\"",
    );
    assert_refused(
        f.delete_as("vic-token", "RoleBinding", "team-a", "vic-made").await,
        Code::PermissionDenied,
        "user \"vic\" cannot delete rolebindings.rbac.authorization.k8s.io \"vic-made\" in namespace \"team-a\"",
    );
    // Not even in another namespace.
    assert_refused(
        f.apply_as(
            "vic-token",
            &role_binding(
                "team-b",
                "x",
                "ClusterRole",
                "pod-reader",
                &[("User", "bob")],
            ),
        )
        .await,
        Code::PermissionDenied,
        "cannot create rolebindings.rbac.authorization.k8s.io \"x\" in namespace \"team-b\"",
    );
    // nadia holds update and delete.
    f.apply_as("nadia-token", &binding("carl")).await.unwrap();
    f.delete_as("nadia-token", "RoleBinding", "team-a", "vic-made")
        .await
        .unwrap();
}

/// `kubectl apply` writes an existing object with a PATCH, which Kubernetes
/// authorizes with `patch` alone, so Apply of an existing object takes `update` or `patch`; a new
/// object still needs `create`, and escalation prevention is unchanged.
#[tokio::test]
async fn apply_of_an_existing_object_takes_update_or_patch() {
    let f = Fixture::start().await;
    let pods = |verbs: &str| {
        role(
            "team-p",
            "pod-watcher",
            &format!("- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [{verbs}]\n"),
        )
    };
    // pat holds patch, not create: a new role is refused, naming create.
    assert_refused(
        f.apply_as("pat-token", &pods("get")).await,
        Code::PermissionDenied,
        "user \"pat\" cannot create roles.rbac.authorization.k8s.io \"pod-watcher\" in namespace \"team-p\"",
    );
    f.apply_as("root-token", &pods("get")).await.unwrap();
    // Existing: patch is enough (he holds get, list and watch on pods there, so no escalation).
    f.apply_as("pat-token", &pods("get, list")).await.unwrap();
    let stored = f
        .admin()
        .get(as_user(
            "pat-token",
            GetRequest {
                object: Some(object("Role", "team-p", "pod-watcher")),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(stored.manifest.contains("list"), "{stored:?}");
    // Escalation prevention still holds: he cannot grant what he does not hold.
    assert_refused(
        f.apply_as("pat-token", &pods("get, delete")).await,
        Code::PermissionDenied,
        "`delete` on `pods` (API group `core`)",
    );
    // Holding neither update nor patch (vic on his own binding) is refused, naming both.
    let binding = |subject: &str| {
        role_binding(
            "team-a",
            "vic-made",
            "ClusterRole",
            "pod-reader",
            &[("User", subject)],
        )
    };
    f.apply_as("vic-token", &binding("bob")).await.unwrap();
    assert_refused(
        f.apply_as("vic-token", &binding("carl")).await,
        Code::PermissionDenied,
        "user \"vic\" cannot update rolebindings.rbac.authorization.k8s.io \"vic-made\" in namespace \"team-a\" (applying an existing object needs update or patch)",
    );
    // Nor does patch on roles reach another namespace.
    f.apply_as(
        "root-token",
        &role(
            "team-a",
            "pod-watcher",
            "- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [get]\n",
        ),
    )
    .await
    .unwrap();
    assert_refused(
        f.apply_as(
            "pat-token",
            &role(
                "team-a",
                "pod-watcher",
                "- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [list]\n",
            ),
        )
        .await,
        Code::PermissionDenied,
        "user \"pat\" cannot update roles.rbac.authorization.k8s.io \"pod-watcher\" in namespace \"team-a\"",
    );
}

// ---------------------------------------------------------------------------------------------
// Escalation prevention with real identities.

fn role(namespace: &str, name: &str, rules: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: {name}, namespace: {namespace}}}\nrules:\n{rules}"
    )
}

#[tokio::test]
async fn a_namespace_admin_cannot_escalate_without_bind_or_escalate() {
    let f = Fixture::start().await;
    let bind_cluster_admin = role_binding(
        "team-a",
        "nadia-is-god",
        "ClusterRole",
        "cluster-admin",
        &[("User", "nadia")],
    );
    let broad = role(
        "team-a",
        "node-reader",
        "- apiGroups: [\"\"]\n  resources: [pods, configmaps]\n  verbs: [get]\n",
    );
    let delete_secrets = role(
        "team-a",
        "secret-deleter",
        "- apiGroups: [\"\"]\n  resources: [secrets]\n  verbs: [get, delete]\n",
    );

    // Binding cluster-admin would grant far more than she holds; the refusal lists it readably.
    let refused = f
        .apply_as("nadia-token", &bind_cluster_admin)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().starts_with(
            "RoleBinding \"nadia-is-god/team-a\": you cannot grant what you do not hold:"
        ) && refused.message().contains("\n  - `*` on URL `*`")
            && refused.message().contains("`*` on `*` (API group `*`)")
            && refused.message().ends_with(
                "\n  (holding `bind` on clusterroles `cluster-admin` (rbac.authorization.k8s.io) in namespace `team-a` would allow it)"
            ),
        "{}",
        refused.message()
    );
    // A role broader than her own: she holds `get configmaps` (through system:authenticated)
    // but not `list`.
    let broader = role(
        "team-a",
        "lister",
        "- apiGroups: [\"\"]\n  resources: [pods, configmaps]\n  verbs: [get, list]\n",
    );
    assert_refused(
        f.apply_as("nadia-token", &broader).await,
        Code::PermissionDenied,
        "`list` on `configmaps` (API group `core`)",
    );
    assert_refused(
        f.apply_as("nadia-token", &broader).await,
        Code::PermissionDenied,
        "(holding `escalate` on roles `lister` (rbac.authorization.k8s.io) in namespace `team-a` would allow it)",
    );
    // What she does hold she may grant (get pods, get configmaps).
    f.apply_as("nadia-token", &broad).await.unwrap();
    // The deny rule withholds `delete secrets` from her: she cannot grant it, though
    // namespace-admin allows `*` on secrets.
    assert_refused(
        f.apply_as("nadia-token", &delete_secrets).await,
        Code::PermissionDenied,
        "`delete` on `secrets` (API group `core`) (a deny rule reached through RoleBinding \"nadia-keep-secrets/team-a\" withholds it from you)",
    );

    // With `bind` on cluster-admin (in team-a) she may bind it there...
    f.apply_as(
        "root-token",
        &format!(
            "{}---\n{}",
            role(
                "team-a",
                "may-bind-admin",
                "- apiGroups: [rbac.authorization.k8s.io]\n  resources: [clusterroles]\n  verbs: [bind]\n  resourceNames: [cluster-admin]\n- apiGroups: [rbac.authorization.k8s.io]\n  resources: [roles]\n  verbs: [escalate]\n",
            ),
            role_binding(
                "team-a",
                "nadia-may-bind",
                "Role",
                "may-bind-admin",
                &[("User", "nadia")],
            )
        ),
    )
    .await
    .unwrap();
    f.apply_as("nadia-token", &bind_cluster_admin)
        .await
        .unwrap();
    // ...and with `escalate` on roles she may write roles beyond her own, the withheld
    // permission included.
    f.apply_as("nadia-token", &broader).await.unwrap();
    f.apply_as("nadia-token", &delete_secrets).await.unwrap();
    // Binding in another namespace still needs what she lacks there.
    assert_refused(
        f.apply_as(
            "nadia-token",
            &role_binding(
                "team-b",
                "nadia-is-god",
                "ClusterRole",
                "cluster-admin",
                &[("User", "nadia")],
            ),
        )
        .await,
        Code::PermissionDenied,
        "cannot create rolebindings.rbac.authorization.k8s.io \"nadia-is-god\" in namespace \"team-b\"",
    );
}

/// A FieldPolicy decides what every content rule covers: writing or deleting one needs the
/// verb on `fieldpolicies.authzd.io` and, beyond it, `escalate` on the FieldPolicy (or
/// cluster-admin).
#[tokio::test]
async fn field_policy_writes_need_the_verb_and_escalate() {
    let f = Fixture::start().await;
    let field_policy = "apiVersion: authzd.io/v1alpha1\nkind: FieldPolicy\nmetadata: {name: open}\nspec:\n  ignore: [\".data\"]\n";
    let grant = |name: &str, verbs: &str| {
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: {name}}}\nrules:\n- apiGroups: [authzd.io]\n  resources: [fieldpolicies]\n  verbs: [{verbs}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {name}}}\nsubjects: [{{kind: User, name: nadia, apiGroup: rbac.authorization.k8s.io}}]\nroleRef: {{kind: ClusterRole, name: {name}, apiGroup: rbac.authorization.k8s.io}}\n"
        )
    };
    assert_refused(
        f.apply_as("nadia-token", field_policy).await,
        Code::PermissionDenied,
        "user \"nadia\" cannot create fieldpolicies.authzd.io \"open\" at cluster scope",
    );
    f.apply_as("root-token", &grant("fp-writer", "create, update, delete"))
        .await
        .unwrap();
    assert_refused(
        f.apply_as("nadia-token", field_policy).await,
        Code::PermissionDenied,
        "FieldPolicy \"open\": you cannot grant what you do not hold:\n  - a FieldPolicy decides what content rules cover, which needs cluster-admin privileges (`*` on everything)\n  (holding `escalate` on fieldpolicies `open` (authzd.io) would allow it)",
    );
    f.apply_as("root-token", &grant("fp-escalator", "escalate"))
        .await
        .unwrap();
    f.apply_as("nadia-token", field_policy).await.unwrap();
    // Deleting one can open protected paths: checked the same way.
    f.delete_as("root-token", "ClusterRoleBinding", "", "fp-escalator")
        .await
        .unwrap();
    assert_refused(
        f.delete_as("nadia-token", "FieldPolicy", "", "open").await,
        Code::PermissionDenied,
        "(holding `escalate` on fieldpolicies `open` (authzd.io) would allow it)",
    );
    f.delete_as("root-token", "FieldPolicy", "", "open")
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Listener safety and bad token files (the server refuses to start).

fn serve_args<'a>(policy: &'a std::path::Path, extra: &[&'a str]) -> Vec<&'a std::ffi::OsStr> {
    let mut args: Vec<&std::ffi::OsStr> = ["serve", "--policy"]
        .iter()
        .map(std::ffi::OsStr::new)
        .collect();
    args.push(policy.as_os_str());
    args.extend(extra.iter().map(|arg| std::ffi::OsStr::new(*arg)));
    args
}

#[test]
fn a_remote_listener_without_authentication_refuses_to_start() {
    let policy = crate::support::server::sample_policy();
    let out = run_bin(
        &serve_args(policy.path(), &["--listen", "0.0.0.0:0"]),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for needed in [
        "refusing to listen on 0.0.0.0:0 without authentication",
        "local identity `system:admin`",
        "--token-auth-file",
        "--client-ca-file",
        "loopback",
        "--insecure-allow-unauthenticated-remote",
    ] {
        assert!(
            stderr.contains(needed),
            "{needed:?} missing from:\n{stderr}"
        );
    }
    assert!(!stderr.contains("authzd listening"), "{stderr}");
}

/// Starts `authzd serve ARGS` and returns its stderr up to the `listening` line (or all of
/// it, if it exits first); the server is killed afterwards.
fn start_and_capture(args: &[&std::ffi::OsStr]) -> (bool, String) {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(crate::support::server::BIN)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut captured = String::new();
    let mut listening = false;
    for line in BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        captured.push_str(&line);
        captured.push('\n');
        if line.starts_with("authzd listening on ") {
            listening = true;
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    (listening, captured)
}

#[test]
fn a_remote_listener_starts_with_tokens_or_the_loud_insecure_flag() {
    let policy = crate::support::server::sample_policy();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();

    let (listening, stderr) = start_and_capture(&serve_args(
        policy.path(),
        &[
            "--listen",
            "0.0.0.0:0",
            "--token-auth-file",
            tokens.to_str().unwrap(),
        ],
    ));
    assert!(listening, "{stderr}");
    assert!(!stderr.contains("WARNING"), "{stderr}");

    let (listening, stderr) = start_and_capture(&serve_args(
        policy.path(),
        &[
            "--listen",
            "0.0.0.0:0",
            "--insecure-allow-unauthenticated-remote",
        ],
    ));
    assert!(listening, "{stderr}");
    assert!(
        stderr.contains("WARNING: --insecure-allow-unauthenticated-remote")
            && stderr.contains("accepts unauthenticated callers from the network"),
        "{stderr}"
    );
}

#[test]
fn a_bad_token_file_stops_the_server_naming_file_and_line() {
    let policy = crate::support::server::sample_policy();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "t1,alice,u1\nt2,bob\n").unwrap();
    let out = run_bin(
        &serve_args(
            policy.path(),
            &[
                "--listen",
                "127.0.0.1:0",
                "--token-auth-file",
                tokens.to_str().unwrap(),
            ],
        ),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "bad --token-auth-file: {}:2: must have at least 3 columns",
            tokens.display()
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn without_a_token_file_a_presented_token_is_refused_not_ignored() {
    let policy = crate::support::server::sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let mut reviews = AccessReviewClient::new(server.channel().await);
    // No credentials on loopback: the local identity (system:admin, a super-user).
    let answer = reviews
        .subject_access_review(sar("default"))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.allowed, "{answer:?}");
    // A token the server cannot check is not silently replaced by the local identity.
    assert_refused(
        reviews
            .subject_access_review(as_user("some-token", sar("default")))
            .await,
        Code::Unauthenticated,
        "a bearer token was presented, but this server has no --token-auth-file",
    );
}

#[tokio::test]
async fn the_cli_sends_its_token_from_the_environment() {
    let f = Fixture::start().await;
    let status = |token: Option<&str>| {
        let mut command = std::process::Command::new(crate::support::server::BIN);
        command
            .args(["status", "--server", &f.server.url()])
            .env_remove("AUTHZD_TOKEN");
        if let Some(token) = token {
            command.env("AUTHZD_TOKEN", token);
        }
        crate::support::server::run_with_timeout(command, Duration::from_secs(30))
    };
    let anonymous = status(None);
    let stderr = String::from_utf8_lossy(&anonymous.stderr);
    assert!(!anonymous.status.success());
    assert!(stderr.contains("no credentials"), "{stderr}");
    let reader = status(Some("alice-token"));
    let stderr = String::from_utf8_lossy(&reader.stderr);
    assert!(
        stderr.contains("user \"alice\" cannot get path \"/status\""),
        "{stderr}"
    );
    let root = status(Some("root-token"));
    assert!(
        root.status.success(),
        "{}",
        String::from_utf8_lossy(&root.stderr)
    );
    assert!(String::from_utf8_lossy(&root.stdout).contains("revision"));
}

#[test]
fn unix_sockets_count_as_local_and_one_remote_listener_is_enough_to_refuse() {
    let policy = crate::support::server::sample_policy();
    let dir = tempfile::tempdir().unwrap();
    let socket = format!("unix://{}", dir.path().join("authzd.sock").display());
    let (listening, stderr) = start_and_capture(&serve_args(policy.path(), &["--listen", &socket]));
    assert!(listening, "{stderr}");
    assert!(!stderr.contains("WARNING"), "{stderr}");

    let out = run_bin(
        &serve_args(
            policy.path(),
            &["--listen", &socket, "--listen", "0.0.0.0:0"],
        ),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:0 without authentication"),
        "{stderr}"
    );
}

/// `POST path` over HTTP/1.1 with an optional bearer token: (status code, body).
fn http_post(server: &Server, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    let authorization = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: authzd\r\n{authorization}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    (status, body)
}

/// The HTTP paths and Envoy's Check go through the same gate as the gRPC reviews.
#[tokio::test]
async fn http_paths_and_envoy_check_enforce_the_same_privileges() {
    let fixture = Fixture::start().await;
    let server = &fixture.server;
    let sar = r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview",
        "spec":{"user":"alice","groups":["readers"],"resourceAttributes":{"verb":"get","resource":"pods","namespace":"x"}}}"#;
    let path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

    let (status, body) = http_post(server, path, None, sar);
    assert_eq!(status, 401, "{body}");
    let (status, body) = http_post(server, path, Some("wrong-token"), sar);
    assert_eq!(status, 401, "{body}");
    let (status, body) = http_post(server, path, Some("alice-token"), sar);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("subjectaccessreviews"), "{body}");
    let (status, body) = http_post(server, path, Some("rita-token"), sar);
    assert_eq!(status, 201, "{body}");
    assert!(body.contains(r#""allowed":true"#), "{body}");
    // The webhook is a cluster-wide review too.
    let (status, _) = http_post(server, "/authorize", Some("alice-token"), sar);
    assert_eq!(status, 403);
    let (status, body) = http_post(server, "/authorize", Some("rita-token"), sar);
    assert_eq!(status, 200, "{body}");

    // alice may always ask about herself.
    let self_review = r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview",
        "spec":{"resourceAttributes":{"verb":"get","resource":"pods","namespace":"x"}}}"#;
    let (status, body) = http_post(
        server,
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        Some("alice-token"),
        self_review,
    );
    assert_eq!(status, 201, "{body}");
    assert!(body.contains(r#""allowed":true"#), "{body}");

    // nadia's local reviews: in team-a yes, elsewhere no.
    let local = |ns: &str| {
        format!(
            r#"{{"apiVersion":"authorization.k8s.io/v1","kind":"LocalSubjectAccessReview",
            "metadata":{{"namespace":"{ns}"}},
            "spec":{{"user":"bob","resourceAttributes":{{"verb":"get","resource":"pods","namespace":"{ns}"}}}}}}"#
        )
    };
    let local_path = |ns: &str| {
        format!("/apis/authorization.k8s.io/v1/namespaces/{ns}/localsubjectaccessreviews")
    };
    let (status, body) = http_post(
        server,
        &local_path("team-a"),
        Some("nadia-token"),
        &local("team-a"),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = http_post(
        server,
        &local_path("team-b"),
        Some("nadia-token"),
        &local("team-b"),
    );
    assert_eq!(status, 403, "{body}");

    // Envoy's Check needs what Authorize needs.
    use envoy_types::pb::envoy::service::auth::v3::attribute_context::{
        HttpRequest, Request as HttpAttributes,
    };
    use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
    use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest};
    let check = || CheckRequest {
        attributes: Some(AttributeContext {
            request: Some(HttpAttributes {
                http: Some(HttpRequest {
                    method: "GET".into(),
                    path: "/hello".into(),
                    headers: [("x-remote-user".to_string(), "alice".to_string())].into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    };
    let mut envoy = AuthorizationClient::new(fixture.channel.clone());
    let refused = envoy.check(as_user("alice-token", check())).await;
    assert_refused(refused, Code::PermissionDenied, "subjectaccessreviews");
    let refused = envoy.check(Request::new(check())).await;
    assert_eq!(refused.unwrap_err().code(), Code::Unauthenticated);
    let answered = envoy.check(as_user("rita-token", check())).await.unwrap();
    // rita may ask; the answer is that alice may not GET /hello (a denial Envoy turns into 403).
    let status = answered.into_inner().status.expect("a status");
    assert_eq!(status.code, Code::PermissionDenied as i32);
}

// ---------------------------------------------------------------------------------------------
// Rules reviews ("what can X do?").

/// SubjectRulesReview needs what SubjectAccessReview needs; SelfSubjectRulesReview only an
/// identity. nadia's own rules in `team-a` carry the deny that withholds `delete secrets`,
/// first among her namespace rules, and Kubernetes' form leaves out the grant it narrows and
/// says so; a reviewer asking about nadia sees exactly what nadia sees.
#[tokio::test]
async fn rules_reviews_follow_the_review_privileges_and_show_denies() {
    use authzd::proto::{RuleEffect, SelfSubjectRulesReviewRequest, SubjectRulesReviewRequest};
    let f = Fixture::start().await;
    let mut reviews = f.reviews();
    let about_nadia = || SubjectRulesReviewRequest {
        user: "nadia".into(),
        groups: vec!["system:authenticated".into()],
        namespace: "team-a".into(),
        ..Default::default()
    };
    assert_refused(
        reviews
            .subject_rules_review(as_user("alice-token", about_nadia()))
            .await,
        Code::PermissionDenied,
        "user \"alice\" cannot create subjectaccessreviews.authorization.k8s.io at cluster scope",
    );
    let own = reviews
        .self_subject_rules_review(as_user(
            "nadia-token",
            SelfSubjectRulesReviewRequest {
                namespace: "team-a".into(),
                min_revision: 0,
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let asked = reviews
        .subject_rules_review(as_user("rita-token", about_nadia()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(own, asked);
    assert_eq!(own.namespace, "team-a");

    let effects: Vec<(String, i32, Vec<String>)> = own
        .rules
        .iter()
        .map(|r| (r.tier.clone(), r.effect, r.resources.clone()))
        .collect();
    let allow = RuleEffect::Allow as i32;
    let deny = RuleEffect::Deny as i32;
    assert_eq!(
        effects,
        [
            ("cluster".to_string(), allow, vec!["configmaps".to_string()]),
            ("namespace".to_string(), deny, vec!["secrets".to_string()]),
            (
                "namespace".to_string(),
                allow,
                vec!["pods".to_string(), "secrets".to_string()]
            ),
            (
                "namespace".to_string(),
                allow,
                vec!["roles".to_string(), "rolebindings".to_string()]
            ),
            (
                "namespace".to_string(),
                allow,
                vec![
                    "localsubjectaccessreviews".to_string(),
                    "localresourceaccessreviews".to_string()
                ]
            ),
        ]
    );
    let denied_by = own.rules[1].rule.as_ref().unwrap();
    assert_eq!(denied_by.binding, "RoleBinding/team-a/nadia-keep-secrets");

    assert!(own.incomplete);
    assert!(
        own.evaluation_error
            .contains("RoleBinding/team-a/nadia-admin -> ClusterRole/namespace-admin rule 0")
            && own
                .evaluation_error
                .contains("narrowed by the deny rule RBAC RoleBinding/team-a/nadia-keep-secrets"),
        "{}",
        own.evaluation_error
    );
    let listed: Vec<Vec<String>> = own
        .resource_rules
        .iter()
        .map(|r| r.resources.clone())
        .collect();
    assert_eq!(
        listed,
        [
            vec!["configmaps".to_string()],
            vec!["roles".to_string(), "rolebindings".to_string()],
            vec![
                "localsubjectaccessreviews".to_string(),
                "localresourceaccessreviews".to_string()
            ],
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Impersonation.

/// `request` asking to be served as `user` (and `groups`), as `kubectl --as/--as-group` asks.
fn impersonating<T>(mut request: Request<T>, user: &str, groups: &[&str]) -> Request<T> {
    let metadata = request.metadata_mut();
    metadata.insert("impersonate-user", user.parse().unwrap());
    for group in groups {
        metadata.append("impersonate-group", group.parse().unwrap());
    }
    request
}

/// `message` from `token`'s caller, asking to be served as `user`.
fn asking_as<T>(token: &str, user: &str, message: T) -> Request<T> {
    impersonating(as_user(token, message), user, &[])
}

/// An impersonating caller needs `impersonate` on the user (and each group) through the
/// policy; once admitted, the call is answered — and privileged — as the impersonated user.
#[tokio::test]
async fn impersonation_needs_impersonate_and_answers_as_the_impersonated_user() {
    let f = Fixture::start().await;
    let mut reviews = f.reviews();
    let delete_secrets = || PersonalSubjectAccessReviewRequest {
        action: resource("team-a", "delete", "secrets"),
        ..Default::default()
    };
    assert_refused(
        reviews
            .personal_subject_access_review(impersonating(
                as_user("alice-token", delete_secrets()),
                "nadia",
                &[],
            ))
            .await,
        Code::PermissionDenied,
        "user \"alice\" cannot impersonate users \"nadia\"",
    );
    let grant = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: impersonate-nadia}
rules:
- {apiGroups: [""], resources: [users], resourceNames: [nadia], verbs: [impersonate]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-impersonates-nadia}
subjects: [{kind: User, name: alice}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: impersonate-nadia}
"#;
    f.apply_as("root-token", grant).await.unwrap();

    // As nadia: her deny on deleting secrets in team-a answers.
    let answer = reviews
        .personal_subject_access_review(impersonating(
            as_user("alice-token", delete_secrets()),
            "nadia",
            &[],
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.denied, "{answer:?}");
    assert!(answer.reason.contains("nadia"), "{answer:?}");
    // Her own rules, through the self rules review.
    let rules = reviews
        .self_subject_rules_review(impersonating(
            as_user(
                "alice-token",
                authzd::proto::SelfSubjectRulesReviewRequest {
                    namespace: "team-a".into(),
                    min_revision: 0,
                },
            ),
            "nadia",
            &[],
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(rules
        .rules
        .iter()
        .any(|r| r.rule.as_ref().unwrap().binding == "RoleBinding/team-a/nadia-keep-secrets"));
    // Groups need their own grant; another user is not covered by resourceNames.
    assert_refused(
        reviews
            .personal_subject_access_review(impersonating(
                as_user("alice-token", delete_secrets()),
                "nadia",
                &["reviewers"],
            ))
            .await,
        Code::PermissionDenied,
        "user \"alice\" cannot impersonate groups \"reviewers\"",
    );
    assert_refused(
        reviews
            .personal_subject_access_review(impersonating(
                as_user("alice-token", delete_secrets()),
                "vic",
                &[],
            ))
            .await,
        Code::PermissionDenied,
        "cannot impersonate users \"vic\"",
    );
    // The call's own privilege is the impersonated user's: nadia may not create cluster-wide
    // SubjectAccessReviews, even though alice impersonates her.
    assert_refused(
        reviews
            .subject_access_review(impersonating(
                as_user("alice-token", sar("default")),
                "nadia",
                &[],
            ))
            .await,
        Code::PermissionDenied,
        "user \"nadia\" cannot create subjectaccessreviews",
    );
    // Who am I: alice as authenticated, and as whom she is served while impersonating.
    let whoami = |request| {
        let mut reviews = f.reviews();
        async move {
            reviews
                .self_subject_review(request)
                .await
                .unwrap()
                .into_inner()
                .user_info
                .unwrap()
        }
    };
    let me = whoami(as_user(
        "alice-token",
        authzd::proto::SelfSubjectReviewRequest {},
    ))
    .await;
    assert_eq!(
        (me.name.as_str(), me.uid.as_str(), me.groups.clone()),
        (
            "alice",
            "uid-1",
            vec![
                "readers".to_string(),
                "staff".to_string(),
                "system:authenticated".to_string()
            ]
        )
    );
    let as_nadia = whoami(impersonating(
        as_user("alice-token", authzd::proto::SelfSubjectReviewRequest {}),
        "nadia",
        &[],
    ))
    .await;
    assert_eq!(as_nadia.name, "nadia");
    assert_eq!(as_nadia.groups, ["system:authenticated"]);
    // A group without a user is refused outright.
    let mut only_group = as_user("alice-token", delete_secrets());
    only_group
        .metadata_mut()
        .insert("impersonate-group", "readers".parse().unwrap());
    assert_refused(
        reviews.personal_subject_access_review(only_group).await,
        Code::InvalidArgument,
        "impersonate-user",
    );
}

/// A deny rule withholds what a namespace admin may otherwise do, and she may not take it
/// away: deleting her binding to it, deleting the role, or replacing the role without it is
/// refused, and the deny still answers afterwards.
#[tokio::test]
async fn a_namespace_admin_cannot_lift_her_own_deny() {
    let f = Fixture::start().await;
    for (kind, name) in [
        ("RoleBinding", "nadia-keep-secrets"),
        ("Role", "keep-secrets"),
    ] {
        assert_refused(
            f.delete_as("nadia-token", kind, "team-a", name).await,
            Code::PermissionDenied,
            "you cannot lift a deny rule",
        );
    }
    let emptied = role(
        "team-a",
        "keep-secrets",
        "- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [delete]\n  deny: true\n",
    );
    assert_refused(
        f.apply_as("nadia-token", &emptied).await,
        Code::PermissionDenied,
        "you cannot lift a deny rule",
    );
    let answer = f
        .reviews()
        .personal_subject_access_review(as_user(
            "nadia-token",
            PersonalSubjectAccessReviewRequest {
                action: resource("team-a", "delete", "secrets"),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.denied, "{answer:?}");
    // A super-user may.
    f.delete_as("root-token", "RoleBinding", "team-a", "nadia-keep-secrets")
        .await
        .unwrap();
}

/// PolicyAdmin serves the user a caller impersonates, as every other call does: a gateway
/// that may impersonate (and may itself write anything) forwards a write "as" vic, and it is
/// judged as vic's — refused — and as nadia's in her namespace — applied; the audit log
/// names both the gateway and whom it wrote as. A caller without `impersonate` is refused,
/// not served as itself; reads and deletes are served as the impersonated user too.
#[tokio::test]
async fn policy_admin_serves_the_impersonated_user_and_audits_both() {
    let f = Fixture::start_with(|dir| {
        vec![
            "--audit-log".into(),
            dir.join("audit.jsonl").to_str().unwrap().into(),
        ]
    })
    .await;
    let audit = f._dir.path().join("audit.jsonl");
    let grant = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: impersonator}
rules:
- {apiGroups: [""], resources: [users], verbs: [impersonate]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: gateway-impersonates}
subjects: [{kind: User, name: gateway}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: impersonator}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: gateway-is-admin}
subjects: [{kind: User, name: gateway}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
"#;
    f.apply_as("root-token", grant).await.unwrap();
    let pod_reader = role(
        "team-a",
        "pod-reader",
        "- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [get]\n",
    );
    let apply = |token: &str, user: &str| {
        let request = asking_as(
            token,
            user,
            ApplyRequest {
                manifest: pod_reader.clone(),
                ..Default::default()
            },
        );
        let mut admin = f.admin();
        async move { admin.apply(request).await }
    };

    // As vic, who may only create rolebindings in team-a: refused, though the gateway could.
    assert_refused(
        apply("gateway-token", "vic").await,
        Code::PermissionDenied,
        "\"vic\"",
    );
    // As nadia, who administers team-a's roles: applied.
    apply("gateway-token", "nadia").await.unwrap();
    // alice may not impersonate: refused outright, not applied as alice.
    assert_refused(
        apply("alice-token", "nadia").await,
        Code::PermissionDenied,
        "user \"alice\" cannot impersonate users \"nadia\"",
    );

    // Reads and deletes, as vic: refused; as nadia: served.
    let pod_reader_ref = || Some(object("Role", "team-a", "pod-reader"));
    let get = |user: &str| {
        let request = asking_as(
            "gateway-token",
            user,
            GetRequest {
                object: pod_reader_ref(),
            },
        );
        let mut admin = f.admin();
        async move { admin.get(request).await }
    };
    assert_refused(get("vic").await, Code::PermissionDenied, "\"vic\"");
    get("nadia").await.unwrap();
    let delete = |user: &str| {
        let request = asking_as(
            "gateway-token",
            user,
            DeleteRequest {
                object: pod_reader_ref(),
                ..Default::default()
            },
        );
        let mut admin = f.admin();
        async move { admin.delete(request).await }
    };
    assert_refused(delete("vic").await, Code::PermissionDenied, "\"vic\"");
    delete("nadia").await.unwrap();

    // The audit log: the gateway authenticated, and whom each write was made as.
    let lines = wait_for_audit(&audit, 6).await;
    let writes: Vec<(String, String, Option<String>, bool)> = lines
        .iter()
        .filter(|l| l["rpc"] == "Apply" || l["rpc"] == "Delete")
        .map(|l| {
            (
                l["rpc"].as_str().unwrap().to_string(),
                l["caller"]["user"].as_str().unwrap().to_string(),
                l["impersonated_user"]["user"].as_str().map(str::to_string),
                l.get("error").is_none(),
            )
        })
        .collect();
    let row = |rpc: &str, caller: &str, user: Option<&str>, applied: bool| {
        (
            rpc.to_string(),
            caller.to_string(),
            user.map(str::to_string),
            applied,
        )
    };
    assert_eq!(
        writes,
        vec![
            row("Apply", "root", None, true),
            row("Apply", "gateway", Some("vic"), false),
            row("Apply", "gateway", Some("nadia"), true),
            row("Apply", "alice", Some("nadia"), false),
            row("Delete", "gateway", Some("vic"), false),
            row("Delete", "gateway", Some("nadia"), true),
        ]
    );
}

/// The audit log's lines once it holds at least `count` (it is written by a task of its own).
async fn wait_for_audit(path: &std::path::Path, count: usize) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let writes = lines
            .iter()
            .filter(|l| l["rpc"] == "Apply" || l["rpc"] == "Delete")
            .count();
        if writes >= count || std::time::Instant::now() > deadline {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A dry run is checked like the write (escalation prevention included), and its access delta
/// — who gains and loses what — goes only to callers who may ask who-can questions
/// (`create resourceaccessreviews` cluster-wide); others get the dry run with the reason.
#[tokio::test]
async fn a_dry_run_delta_goes_to_who_can_callers_only() {
    let f = Fixture::start().await;
    let dry_run = |token: &'static str, manifest: String| {
        let mut admin = f.admin();
        async move {
            admin
                .apply(as_user(
                    token,
                    ApplyRequest {
                        manifest,
                        dry_run: true,
                        ..Default::default()
                    },
                ))
                .await
                .map(tonic::Response::into_inner)
        }
    };
    // nadia may create this binding (she holds what binding-creator grants in team-a).
    let carol = role_binding(
        "team-a",
        "carol-creates",
        "Role",
        "binding-creator",
        &[("User", "carol")],
    );
    let answer = dry_run("nadia-token", carol.clone()).await.unwrap();
    assert_eq!(answer.delta, None);
    assert!(
        answer
            .delta_withheld
            .starts_with("the access delta names subjects as who-can answers do: ")
            && answer.delta_withheld.contains("resourceaccessreviews"),
        "{}",
        answer.delta_withheld
    );
    // root may ask who-can questions: the delta names carol's gains in team-a.
    let answer = dry_run("root-token", carol).await.unwrap();
    assert_eq!(answer.delta_withheld, "");
    let rows = answer.delta.unwrap().rows;
    assert!(!rows.is_empty());
    for row in &rows {
        assert_eq!(
            (row.cluster_wide, row.namespace.as_str()),
            (false, "team-a")
        );
        assert_eq!(row.gains.as_ref().unwrap().users, ["carol"], "{row:?}");
        assert!(row.losses.as_ref().unwrap().users.is_empty(), "{row:?}");
    }
    // A dry run nadia could not make for real is refused the same way.
    let god = role_binding(
        "team-a",
        "nadia-is-god",
        "ClusterRole",
        "cluster-admin",
        &[("User", "nadia")],
    );
    let refused = dry_run("nadia-token", god).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    // rita may ask who-can questions but not write bindings.
    let refused = dry_run(
        "rita-token",
        role_binding("team-a", "x", "Role", "binding-creator", &[("User", "x")]),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    // Nothing was written.
    let revision = f
        .admin()
        .status(as_user("root-token", StatusRequest {}))
        .await
        .unwrap()
        .into_inner()
        .revision;
    assert_eq!(revision, 1);
}
