//! Revocation (docs/api.md §3) against the real `authzd` binary on loopback, no mocks:
//!
//! * every kind of policy change revokes (and grants) for the very next request on the same
//!   connection, although the old answer was warm in the cache;
//! * a concurrency hammer: no request started after an acknowledged change is answered from
//!   the older policy (cache on and off); 10 s per mode under `CI=true`, 2 s locally
//!   (`AUTHZD_HAMMER_SECS` sets it);
//! * invalidation is precise: a change in one namespace leaves another's entries warm;
//! * Watch reports the changes in order with their revisions; a broken file on disk is
//!   reported with `file:line` and the last good policy stays in force.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::server::{
    cluster_role_binding, replace_file, resource_request as req, role_binding, Server, POD_READER,
};
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::policy_admin_client::PolicyAdminClient;
use authzd::proto::{
    ApplyRequest, AuthorizeRequest, AuthorizeResponse, ConditionsMode, Content, Decision,
    DeleteRequest, ObjectRef, StatusRequest, StatusResponse, WatchEvent, WatchRequest,
};
use tempfile::TempDir;
use tokio::sync::Notify;
use tonic::transport::Channel;
use tonic::Streaming;

/// One server, one connection, both clients on it. Every response's revision is checked
/// against the latest acknowledged write (`floor`).
struct Session {
    // Dropped in this order: the server is killed before its directory goes.
    _server: Server,
    authz: AuthorizerClient<Channel>,
    admin: PolicyAdminClient<Channel>,
    dir: TempDir,
    floor: u64,
}

impl Session {
    async fn start(files: &[(&str, &str)], args: &[&str]) -> Session {
        let dir = tempfile::tempdir().unwrap();
        for (name, content) in files {
            std::fs::write(dir.path().join(name), content).unwrap();
        }
        let server = Server::start_serving(dir.path(), args).await;
        let channel = server.channel().await;
        let mut session = Session {
            dir,
            authz: AuthorizerClient::new(channel.clone()),
            admin: PolicyAdminClient::new(channel),
            _server: server,
            floor: 0,
        };
        session.floor = session.status().await.revision;
        assert_eq!(session.floor, 1);
        session
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    async fn ask(&mut self, request: &AuthorizeRequest) -> AuthorizeResponse {
        let response = self
            .authz
            .authorize(request.clone())
            .await
            .unwrap()
            .into_inner();
        assert!(
            response.revision >= self.floor,
            "answered at revision {} after a write acknowledged at {}",
            response.revision,
            self.floor
        );
        response
    }

    /// Asks twice: the first answer is `allowed`, the second the same, from the cache.
    async fn warm(&mut self, request: &AuthorizeRequest, allowed: bool) {
        let first = self.ask(request).await;
        assert_eq!(first.allowed, allowed, "warming {request:?}: {first:?}");
        let second = self.ask(request).await;
        assert_eq!(second.allowed, allowed, "{second:?}");
        assert!(second.cached, "the second answer is not cached: {second:?}");
        assert_eq!(second.decision, first.decision);
    }

    /// The answer right after a change: `allowed`, and computed afresh.
    async fn expect_now(&mut self, request: &AuthorizeRequest, allowed: bool) -> AuthorizeResponse {
        let response = self.ask(request).await;
        assert_eq!(
            response.allowed, allowed,
            "the first answer after the change acknowledged at revision {} is stale: {response:?}",
            self.floor
        );
        assert!(
            !response.cached,
            "the first answer after a change came from the cache: {response:?}"
        );
        response
    }

    fn acknowledged(&mut self, revision: u64) -> u64 {
        assert!(
            revision > self.floor,
            "a change was acknowledged at revision {revision}, not after {}",
            self.floor
        );
        self.floor = revision;
        revision
    }

    async fn apply(&mut self, manifest: &str) -> u64 {
        let revision = self
            .admin
            .apply(ApplyRequest {
                manifest: manifest.to_string(),
                dry_run: false,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("apply failed: {e:?}\n{manifest}"))
            .into_inner()
            .revision;
        self.acknowledged(revision)
    }

    async fn delete(&mut self, kind: &str, namespace: &str, name: &str) -> u64 {
        let revision = self
            .admin
            .delete(DeleteRequest {
                object: Some(object(kind, namespace, name)),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .revision;
        self.acknowledged(revision)
    }

    async fn status(&mut self) -> StatusResponse {
        self.admin
            .status(StatusRequest {})
            .await
            .unwrap()
            .into_inner()
    }

    /// The revision the watcher's next reload will publish. Read it *before* touching the
    /// directory, so a reload that happens at once is not missed.
    async fn next_revision(&mut self) -> u64 {
        self.status().await.revision + 1
    }

    /// The answer once the server has published `revision` (a reload the watcher is about to
    /// do): `min_revision` makes the server wait, no sleeping here.
    async fn ask_at(&mut self, request: &AuthorizeRequest, revision: u64) -> AuthorizeResponse {
        let mut waiting = request.clone();
        waiting.min_revision = revision;
        let response = self.ask(&waiting).await;
        assert!(response.revision >= revision, "{response:?}");
        self.floor = response.revision;
        response
    }
}

fn object(kind: &str, namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Revocation and grant, one kind of change per test, each on one connection.

#[tokio::test]
async fn deleting_the_granting_binding_revokes_and_applying_it_grants() {
    let grant = cluster_role_binding("alice-read", "pod-reader", &[("User", "alice")]);
    let mut s = Session::start(&[("roles.yaml", POD_READER), ("alice.yaml", &grant)], &[]).await;
    let alice = req("alice", &[], "default", "get", "pods");

    s.warm(&alice, true).await;
    s.delete("ClusterRoleBinding", "", "alice-read").await;
    s.expect_now(&alice, false).await;

    s.warm(&alice, false).await;
    s.apply(&grant).await;
    let allowed = s.expect_now(&alice, true).await;
    assert!(allowed.reason.contains("alice-read"), "{allowed:?}");
}

#[tokio::test]
async fn removing_a_group_from_a_binding_revokes_and_adding_it_grants() {
    let both = cluster_role_binding(
        "readers-read",
        "pod-reader",
        &[("Group", "readers"), ("Group", "auditors")],
    );
    let auditors_only =
        cluster_role_binding("readers-read", "pod-reader", &[("Group", "auditors")]);
    let mut s = Session::start(&[("roles.yaml", POD_READER), ("readers.yaml", &both)], &[]).await;
    let gina = req("gina", &["readers"], "default", "list", "pods");
    let olly = req("olly", &["auditors"], "default", "list", "pods");

    s.warm(&gina, true).await;
    s.warm(&olly, true).await;
    s.apply(&auditors_only).await;
    s.expect_now(&gina, false).await;
    assert!(
        s.ask(&olly).await.allowed,
        "the remaining group keeps access"
    );

    s.warm(&gina, false).await;
    s.apply(&both).await;
    s.expect_now(&gina, true).await;
    assert!(s.ask(&olly).await.allowed);
}

fn configmap_editor(verbs: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: cm-editor\nrules:\n- apiGroups: [\"\"]\n  resources: [\"configmaps\"]\n  verbs: [{verbs}]\n"
    )
}

#[tokio::test]
async fn removing_a_verb_from_a_cluster_role_revokes_and_adding_it_grants() {
    let binding = cluster_role_binding("bob-cm", "cm-editor", &[("User", "bob")]);
    let with_update = configmap_editor("\"get\", \"update\"");
    let without_update = configmap_editor("\"get\"");
    let mut s = Session::start(
        &[("role.yaml", &with_update), ("binding.yaml", &binding)],
        &[],
    )
    .await;
    let update = req("bob", &[], "apps", "update", "configmaps");
    let get = req("bob", &[], "apps", "get", "configmaps");

    s.warm(&update, true).await;
    s.warm(&get, true).await;
    s.apply(&without_update).await;
    s.expect_now(&update, false).await;
    assert!(
        s.ask(&get).await.allowed,
        "the verb left in the rule still allows"
    );

    s.warm(&update, false).await;
    s.apply(&with_update).await;
    s.expect_now(&update, true).await;
}

fn endpoint_reader(aggregate_to: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: endpoint-reader\n  labels:\n    example.com/aggregate-to: {aggregate_to}\nrules:\n- apiGroups: [\"\"]\n  resources: [\"endpoints\"]\n  verbs: [\"get\"]\n"
    )
}

const MONITORING: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: monitoring
aggregationRule:
  clusterRoleSelectors:
  - matchLabels:
      example.com/aggregate-to: monitoring
rules: []
"#;

#[tokio::test]
async fn relabelling_an_aggregated_cluster_role_revokes_and_relabelling_back_grants() {
    let binding = cluster_role_binding("carl-monitoring", "monitoring", &[("User", "carl")]);
    let selected = endpoint_reader("monitoring");
    let unselected = endpoint_reader("nothing");
    let mut s = Session::start(
        &[
            ("monitoring.yaml", MONITORING),
            ("endpoint-reader.yaml", &selected),
            ("binding.yaml", &binding),
        ],
        &[],
    )
    .await;
    let carl = req("carl", &[], "kube-system", "get", "endpoints");

    s.warm(&carl, true).await;
    s.apply(&unselected).await;
    s.expect_now(&carl, false).await;

    s.warm(&carl, false).await;
    s.apply(&selected).await;
    let allowed = s.expect_now(&carl, true).await;
    assert!(allowed.reason.contains("monitoring"), "{allowed:?}");
}

const DEV_EDITOR: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: dev-editor
  namespace: dev
rules:
- apiGroups: [""]
  resources: ["pods", "secrets", "configmaps"]
  verbs: ["*"]
"#;

/// A deny Role (seed 003) denying configmaps, and optionally secrets too.
fn restrictions(deny_secrets: bool) -> String {
    let mut role = String::from(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: restrictions\n  namespace: dev\nrules:\n- apiGroups: [\"\"]\n  resources: [\"configmaps\"]\n  verbs: [\"*\"]\n  deny: true\n",
    );
    if deny_secrets {
        role.push_str(
            "- apiGroups: [\"\"]\n  resources: [\"secrets\"]\n  verbs: [\"*\"]\n  deny: true\n",
        );
    }
    role
}

#[tokio::test]
async fn adding_a_deny_rule_revokes_and_removing_it_grants() {
    let edit = role_binding(
        "dev",
        "dora-edit",
        "Role",
        "dev-editor",
        &[("User", "dora")],
    );
    let restricted = role_binding(
        "dev",
        "dora-restrictions",
        "Role",
        "restrictions",
        &[("User", "dora")],
    );
    let mut s = Session::start(
        &[
            ("editor.yaml", DEV_EDITOR),
            ("restrictions.yaml", &restrictions(false)),
            ("bindings.yaml", &format!("{edit}---\n{restricted}")),
        ],
        &[],
    )
    .await;
    let secrets = req("dora", &[], "dev", "get", "secrets");
    let configmaps = req("dora", &[], "dev", "get", "configmaps");

    s.warm(&secrets, true).await;
    s.warm(&configmaps, false).await;
    s.apply(&restrictions(true)).await;
    let denied = s.expect_now(&secrets, false).await;
    assert_eq!(denied.decision, Decision::Deny as i32, "{denied:?}");
    assert!(denied.denied);
    assert_eq!(denied.denied_by[0].role, "Role/dev/restrictions");

    s.warm(&secrets, false).await;
    s.apply(&restrictions(false)).await;
    let allowed = s.expect_now(&secrets, true).await;
    assert_eq!(allowed.decision, Decision::Allow as i32);
    assert!(
        !s.ask(&configmaps).await.allowed,
        "the other deny rule stays"
    );
}

#[tokio::test]
async fn deleting_a_policy_file_revokes_once_reloaded_and_restoring_it_grants() {
    let grant = cluster_role_binding("frank-read", "pod-reader", &[("User", "frank")]);
    let mut s = Session::start(&[("roles.yaml", POD_READER), ("frank.yaml", &grant)], &[]).await;
    let frank = req("frank", &[], "default", "watch", "pods");

    s.warm(&frank, true).await;
    let reloaded = s.next_revision().await;
    std::fs::remove_file(s.dir().join("frank.yaml")).unwrap();
    let denied = s.ask_at(&frank, reloaded).await;
    assert!(!denied.allowed, "{denied:?}");
    assert!(!denied.cached, "{denied:?}");

    s.warm(&frank, false).await;
    let reloaded = s.next_revision().await;
    replace_file(s.dir(), "frank.yaml", &grant);
    let allowed = s.ask_at(&frank, reloaded).await;
    assert!(allowed.allowed, "{allowed:?}");
    assert!(!allowed.cached, "{allowed:?}");
    assert!(s.status().await.last_error.is_empty());
}

const PROTECT_SECRET_DATA: &str = r#"apiVersion: authzd.io/v1alpha1
kind: FieldPolicy
metadata: {name: special}
spec:
  protected:
  - {path: ".data", resources: [secrets]}
"#;

/// A server where dora may edit (plain allows, no fields clause) in namespace `dev`.
async fn dora_edits_dev() -> Session {
    let edit = role_binding(
        "dev",
        "dora-edit",
        "Role",
        "dev-editor",
        &[("User", "dora")],
    );
    Session::start(&[("roles.yaml", DEV_EDITOR), ("dora.yaml", &edit)], &[]).await
}

/// Protecting a path changes what plain allows grant on writes (a FieldPolicy arrives with a
/// reload): every cached plain answer it touches is gone at once, and unprotecting grants again.
#[tokio::test]
async fn protecting_a_path_revokes_cached_plain_writes_and_unprotecting_grants() {
    let mut s = dora_edits_dev().await;
    let update = req("dora", &[], "dev", "update", "secrets");
    let read = req("dora", &[], "dev", "get", "secrets");

    s.warm(&update, true).await;
    s.warm(&read, true).await;
    let reloaded = s.next_revision().await;
    replace_file(s.dir(), "fields.yaml", PROTECT_SECRET_DATA);
    let folded = s.ask_at(&update, reloaded).await;
    assert!(!folded.allowed && !folded.denied, "{folded:?}");
    assert!(!folded.cached, "{folded:?}");
    assert!(
        folded
            .evaluation_error
            .contains("may change protected paths (.data)"),
        "{folded:?}"
    );
    // Reads were never protected; their answer is recomputed all the same (a FieldPolicy
    // change reaches every subject).
    let still = s.expect_now(&read, true).await;
    assert!(still.evaluation_error.is_empty(), "{still:?}");

    s.warm(&update, false).await;
    let reloaded = s.next_revision().await;
    std::fs::remove_file(s.dir().join("fields.yaml")).unwrap();
    let granted = s.ask_at(&update, reloaded).await;
    assert!(granted.allowed, "{granted:?}");
    assert!(!granted.cached, "{granted:?}");
}

/// A FieldPolicy written through the admin API (the only way in etcd mode) takes effect like
/// any policy change: the first answer after the acknowledgement is computed under it, and
/// deleting it grants again. In directory mode it is a file like any other object.
#[tokio::test]
async fn a_field_policy_applied_and_deleted_through_the_admin_api_takes_effect_at_once() {
    let mut s = dora_edits_dev().await;
    let update = req("dora", &[], "dev", "update", "secrets");

    s.warm(&update, true).await;
    s.apply(PROTECT_SECRET_DATA).await;
    let folded = s.expect_now(&update, false).await;
    assert!(!folded.denied, "{folded:?}");
    assert!(
        folded
            .evaluation_error
            .contains("may change protected paths (.data)"),
        "{folded:?}"
    );
    let file = s.dir().join("fieldpolicy.special.yaml");
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(written.contains("kind: FieldPolicy"), "{written}");

    s.warm(&update, false).await;
    s.delete("FieldPolicy", "", "special").await;
    s.expect_now(&update, true).await;
    assert!(!file.exists(), "the FieldPolicy's file is still there");
}

// ---------------------------------------------------------------------------------------------
// 2. The hammer.

use crate::support::hammer_for;
const HAMMER_TASKS: usize = 16;
const HAMMER_CHANNELS: usize = 4;

struct Sample {
    start: Instant,
    end: Instant,
    allowed: bool,
    revision: u64,
    cached: bool,
}

struct Write {
    sent: Instant,
    acked: Instant,
    revision: u64,
    /// The user's access once this write is visible.
    granted: bool,
}

struct HammerReport {
    requests: usize,
    checked: usize,
    writes: usize,
    cached_answers: usize,
    status: StatusResponse,
    failures: Vec<String>,
}

/// A role whose grants are partly content rules (docs/policy.md §4): reads plain, label-only updates,
/// deletes of `app=web` pods; and a standing restricted deny that the hammer's updates (labels
/// only) never trigger, so plans carry a deny rule too.
const POD_CONTENT_ROLES: &str = include_str!("../fixtures/hammer-pod-content.yaml");

/// The hammer's toggled grant as CEL conditions (docs/policy.md §6): reads plain, updates that keep
/// the `app` label, deletes of `app=web` pods, and patches of `app=web` pods, which the hammer
/// asks in RETURN mode without content (a conditional answer while granted, none once
/// revoked).
const POD_CEL_ROLES: &str = include_str!("../fixtures/hammer-pod-cel.yaml");

/// What the hammer's toggled grant is made of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Grant {
    Plain,
    /// Content rules (fields, object selectors); requests carry objects.
    Content,
    /// CEL conditions; requests carry objects, or ask for conditions in RETURN mode.
    Conditions,
}

/// The hammer's request number `i`: a few distinct cache keys, all decided by the toggled
/// binding; with content rules or conditions, label-only updates and deletes of `app=web`
/// pods too, carrying their objects; with conditions, patches asked in RETURN mode too.
fn hammer_request(i: usize, grant: Grant) -> AuthorizeRequest {
    let kinds = match grant {
        Grant::Plain => 3,
        Grant::Content => 5,
        Grant::Conditions => 6,
    };
    let verb = ["get", "list", "watch", "update", "delete", "patch"][i % kinds];
    let namespace = format!("ns-{}", (i / kinds) % 4);
    let mut request = req("hank", &[], &namespace, verb, "pods");
    let pod = |labels: &str| {
        format!(r#"{{"metadata":{{"name":"p","labels":{labels}}},"spec":{{"nodeName":"n{i}"}}}}"#)
    };
    request.content = match verb {
        "update" => Some(Content {
            old_object: pod(r#"{"app":"web"}"#).into_bytes(),
            object: pod(&format!(r#"{{"app":"web","seen":"{i}"}}"#)).into_bytes(),
            changed_paths: Vec::new(),
        }),
        "delete" => Some(Content {
            old_object: pod(r#"{"app":"web"}"#).into_bytes(),
            ..Default::default()
        }),
        _ => None,
    };
    if verb == "patch" {
        request.conditions_mode = ConditionsMode::Return as i32;
    }
    request
}

/// Whether an answer grants access, or may (a conditional answer: only a granted role has
/// conditions to return).
fn grants(response: &AuthorizeResponse) -> bool {
    response.allowed || response.decision == Decision::Conditional as i32
}

/// Askers hammer one user's access (a few cache keys) while a revoker toggles it; returns
/// what was seen and every answer that contradicts an acknowledged state or its own revision.
/// `kind` says what the toggled grant is made of.
async fn hammer(args: &[&str], kind: Grant) -> HammerReport {
    let role = match kind {
        Grant::Plain => "pod-reader",
        Grant::Content => "pod-mixed",
        Grant::Conditions => "pod-cel",
    };
    let grant = cluster_role_binding("hank-read", role, &[("User", "hank")]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("roles.yaml"), POD_READER).unwrap();
    match kind {
        Grant::Plain => {}
        Grant::Content => {
            std::fs::write(dir.path().join("content.yaml"), POD_CONTENT_ROLES).unwrap()
        }
        Grant::Conditions => std::fs::write(dir.path().join("cel.yaml"), POD_CEL_ROLES).unwrap(),
    }
    std::fs::write(dir.path().join("clusterrolebinding.hank-read.yaml"), &grant).unwrap();
    let server = Server::start_serving(dir.path(), args).await;
    let mut channels = Vec::new();
    for _ in 0..HAMMER_CHANNELS {
        channels.push(server.channel().await);
    }
    let stop = Arc::new(AtomicBool::new(false));
    // Requests answered so far, and a wake-up for the revoker waiting on that count.
    let answered = Arc::new(AtomicUsize::new(0));
    let answer_signal = Arc::new(Notify::new());

    let mut askers = Vec::new();
    for task in 0..HAMMER_TASKS {
        let mut client = AuthorizerClient::new(channels[task % HAMMER_CHANNELS].clone());
        let stop = Arc::clone(&stop);
        let answered = Arc::clone(&answered);
        let answer_signal = Arc::clone(&answer_signal);
        askers.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut i = task;
            while !stop.load(Ordering::Relaxed) {
                let request = hammer_request(i, kind);
                i += 1;
                let start = Instant::now();
                let response = client.authorize(request).await.unwrap().into_inner();
                let end = Instant::now();
                answered.fetch_add(1, Ordering::SeqCst);
                answer_signal.notify_waiters();
                samples.push(Sample {
                    start,
                    end,
                    allowed: grants(&response),
                    revision: response.revision,
                    cached: response.cached,
                });
            }
            samples
        }));
    }

    let mut admin = PolicyAdminClient::new(server.channel().await);
    let mut writes: Vec<Write> = Vec::new();
    let mut granted = true;
    let until = Instant::now() + hammer_for();
    while Instant::now() < until {
        let sent = Instant::now();
        let revision = if granted {
            admin
                .delete(DeleteRequest {
                    object: Some(object("ClusterRoleBinding", "", "hank-read")),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .revision
        } else {
            admin
                .apply(ApplyRequest {
                    manifest: grant.clone(),
                    dry_run: false,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .revision
        };
        let acked = Instant::now();
        granted = !granted;
        writes.push(Write {
            sent,
            acked,
            revision,
            granted,
        });
        // The next write goes once HAMMER_TASKS requests started after this acknowledgement
        // have been answered (each asker is sequential, so after 2 * HAMMER_TASKS answers at
        // most HAMMER_TASKS of them started before it): those are the unambiguous requests
        // the check below judges. Everything else overlaps a write and is judged by revision.
        let target = answered.load(Ordering::SeqCst) + 2 * HAMMER_TASKS;
        loop {
            let woken = answer_signal.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if answered.load(Ordering::SeqCst) >= target || Instant::now() >= until {
                break;
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), woken).await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    for asker in askers {
        samples.extend(asker.await.unwrap());
    }
    let status = admin.status(StatusRequest {}).await.unwrap().into_inner();
    drop(server);

    let mut failures = Vec::new();
    for pair in writes.windows(2) {
        if pair[1].revision <= pair[0].revision {
            failures.push(format!(
                "write revisions went from {} to {}",
                pair[0].revision, pair[1].revision
            ));
        }
    }
    // The state at each revision: the last write at or below it (revision 1 grants).
    let state_at = |revision: u64| -> bool {
        let k = writes.partition_point(|w| w.revision <= revision);
        if k == 0 {
            true
        } else {
            writes[k - 1].granted
        }
    };
    let mut checked = 0;
    for sample in &samples {
        // The last write acknowledged before this request started.
        let k = writes.partition_point(|w| w.acked < sample.start);
        let (expected, floor, next_sent) = if k == 0 {
            (true, 1, writes.first().map(|w| w.sent))
        } else {
            (
                writes[k - 1].granted,
                writes[k - 1].revision,
                writes.get(k).map(|w| w.sent),
            )
        };
        if sample.revision < floor {
            failures.push(format!(
                "answered at revision {} though revision {floor} was acknowledged before the request started",
                sample.revision
            ));
        }
        // The answer must match the revision it claims.
        if sample.allowed != state_at(sample.revision) {
            let overlapped: Vec<u64> = writes
                .iter()
                .filter(|w| w.sent < sample.end && sample.start < w.acked)
                .map(|w| w.revision)
                .collect();
            failures.push(format!(
                "answered allowed={} (cached={}) at revision {}, whose policy says {} (the request overlapped the writes of revisions {overlapped:?})",
                sample.allowed,
                sample.cached,
                sample.revision,
                state_at(sample.revision)
            ));
        }
        // Unambiguous: started after an acknowledgement, answered before the next write was
        // sent.
        if next_sent.is_none_or(|sent| sample.end < sent) {
            checked += 1;
            if sample.allowed != expected {
                failures.push(format!(
                    "started after the acknowledgement of revision {floor} (access {}) but answered allowed={} (cached={}, revision {})",
                    if expected { "granted" } else { "revoked" },
                    sample.allowed,
                    sample.cached,
                    sample.revision
                ));
            }
        }
    }
    HammerReport {
        requests: samples.len(),
        checked,
        writes: writes.len(),
        cached_answers: samples.iter().filter(|s| s.cached).count(),
        status,
        failures,
    }
}

#[test]
fn hammer_no_stale_answer_after_an_acknowledged_change() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    for (mode, args, kind) in [
        ("cache on", &[][..], Grant::Plain),
        (
            "cache off (--cache-size 0)",
            &["--cache-size", "0"][..],
            Grant::Plain,
        ),
        ("content rules, cache on", &[][..], Grant::Content),
        (
            "content rules, cache off",
            &["--cache-size", "0"][..],
            Grant::Content,
        ),
        (
            "CEL conditions and RETURN mode, cache on",
            &[][..],
            Grant::Conditions,
        ),
        (
            "CEL conditions and RETURN mode, cache off",
            &["--cache-size", "0"][..],
            Grant::Conditions,
        ),
    ] {
        let started = Instant::now();
        let report = runtime.block_on(hammer(args, kind));
        let s = &report.status;
        println!(
            "hammer, {mode}: {} requests ({} unambiguous), {} writes, {} cached answers; server: {} hits, {} misses, {} inserts, {} invalidations, {} stale inserts refused; {:.1?}",
            report.requests,
            report.checked,
            report.writes,
            report.cached_answers,
            s.cache_hits,
            s.cache_misses,
            s.cache_inserts,
            s.cache_invalidations,
            s.cache_stale_inserts_refused,
            started.elapsed()
        );
        assert!(
            report.failures.is_empty(),
            "{mode}: {} stale answers, e.g.:\n{}",
            report.failures.len(),
            report.failures[..report.failures.len().min(10)].join("\n")
        );
        // Loose floors (the machine may be busy): the run must have exercised something.
        assert!(report.writes >= 10, "too few writes: {}", report.writes);
        assert!(report.checked >= 100, "too few unambiguous requests");
        if args.is_empty() {
            assert!(report.cached_answers > 0, "the cache never answered");
        } else {
            assert_eq!(report.cached_answers, 0);
            assert_eq!(s.cache_hits + s.cache_inserts, 0);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Precision.

#[tokio::test]
async fn a_change_in_one_namespace_leaves_other_namespaces_warm() {
    let team_a = |subjects: &[(&str, &str)]| {
        role_binding("team-a", "readers", "ClusterRole", "pod-reader", subjects)
    };
    let team_b = role_binding(
        "team-b",
        "readers",
        "ClusterRole",
        "pod-reader",
        &[("User", "b1"), ("User", "b2")],
    );
    // No watcher: a reload (which changes nothing) must not race the counters.
    let mut s = Session::start(
        &[
            ("roles.yaml", POD_READER),
            ("team-a.yaml", &team_a(&[("User", "a1"), ("User", "a2")])),
            ("team-b.yaml", &team_b),
        ],
        &["--no-watch"],
    )
    .await;
    // Affected by team-a's binding: its subjects' requests in team-a.
    let affected = [
        (req("a1", &[], "team-a", "get", "pods"), true),
        (req("a1", &[], "team-a", "list", "pods"), true),
        (req("a2", &[], "team-a", "get", "pods"), true),
    ];
    // Not affected: other namespaces, other subjects.
    let unaffected = [
        (req("b1", &[], "team-b", "get", "pods"), true),
        (req("b2", &[], "team-b", "list", "pods"), true),
        (req("a1", &[], "team-b", "get", "pods"), false),
        (req("b1", &[], "team-a", "get", "pods"), false),
    ];
    for (request, allowed) in affected.iter().chain(&unaffected) {
        s.warm(request, *allowed).await;
    }
    let before = s.status().await;
    assert_eq!(before.cache_entries, 7);

    s.apply(&team_a(&[("User", "a1")])).await;
    let after = s.status().await;
    assert_eq!(
        after.cache_invalidations - before.cache_invalidations,
        affected.len() as u64,
        "exactly team-a's entries for a1 and a2 are invalidated"
    );
    assert_eq!(after.cache_entries, 7 - affected.len() as u64);

    for (request, allowed) in &unaffected {
        let response = s.ask(request).await;
        assert!(response.cached, "unaffected entry lost: {response:?}");
        assert_eq!(response.allowed, *allowed);
        assert_eq!(response.revision, s.floor, "{response:?}");
    }
    let hits = s.status().await.cache_hits;
    assert_eq!(hits - after.cache_hits, unaffected.len() as u64);

    let a2 = s.expect_now(&affected[2].0, false).await;
    assert_eq!(a2.revision, s.floor);
    s.expect_now(&affected[0].0, true).await;
    s.expect_now(&affected[1].0, true).await;
}

// ---------------------------------------------------------------------------------------------
// 5. Watch, and a broken file on disk.

async fn next_event(stream: &mut Streaming<WatchEvent>) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("a watch event within 10 s")
        .unwrap()
        .expect("the watch stream ended")
}

fn event_summary(event: &WatchEvent) -> (String, String, u64) {
    let object = event.object.clone().unwrap();
    (
        event.r#type.clone(),
        format!("{}/{}/{}", object.kind, object.namespace, object.name),
        event.revision,
    )
}

#[tokio::test]
async fn watch_sees_changes_in_order_and_a_broken_file_keeps_the_last_good_policy() {
    let alice_grant = cluster_role_binding("alice-read", "pod-reader", &[("User", "alice")]);
    let mut s = Session::start(
        &[("roles.yaml", POD_READER), ("alice.yaml", &alice_grant)],
        &[],
    )
    .await;
    let from = s.status().await.revision;
    let mut live = s
        .admin
        .watch(WatchRequest {
            from_revision: from,
        })
        .await
        .unwrap()
        .into_inner();

    let added = s
        .apply(&role_binding(
            "dev",
            "watched",
            "ClusterRole",
            "pod-reader",
            &[("User", "wendy")],
        ))
        .await;
    let modified = s
        .apply(&role_binding(
            "dev",
            "watched",
            "ClusterRole",
            "pod-reader",
            &[("User", "wendy"), ("User", "walt")],
        ))
        .await;
    // An apply that changes nothing is acknowledged at the current revision, with no event.
    let unchanged = s
        .admin
        .apply(ApplyRequest {
            manifest: alice_grant.clone(),
            dry_run: false,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .revision;
    assert_eq!(unchanged, modified);
    let deleted = s.delete("RoleBinding", "dev", "watched").await;

    let expected = vec![
        (
            "ADDED".to_string(),
            "RoleBinding/dev/watched".to_string(),
            added,
        ),
        (
            "MODIFIED".into(),
            "RoleBinding/dev/watched".into(),
            modified,
        ),
        ("DELETED".into(), "RoleBinding/dev/watched".into(), deleted),
    ];
    let mut seen = Vec::new();
    let mut manifests = Vec::new();
    for _ in 0..expected.len() {
        let event = next_event(&mut live).await;
        seen.push(event_summary(&event));
        manifests.push(event.manifest);
    }
    assert_eq!(seen, expected);
    assert!(!manifests[0].contains("walt") && manifests[1].contains("walt"));
    assert!(
        manifests[2].contains("walt"),
        "DELETED carries the last state"
    );

    // The same history replayed from the kept backlog, and from a later revision.
    let mut replay = s
        .admin
        .watch(WatchRequest {
            from_revision: from,
        })
        .await
        .unwrap()
        .into_inner();
    let mut replayed = Vec::new();
    for _ in 0..expected.len() {
        replayed.push(event_summary(&next_event(&mut replay).await));
    }
    assert_eq!(replayed, expected);
    let mut later = s
        .admin
        .watch(WatchRequest {
            from_revision: added,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(event_summary(&next_event(&mut later).await), expected[1]);
    assert_eq!(event_summary(&next_event(&mut later).await), expected[2]);

    // A broken file: the reload is rejected with file:line, the last good policy stays.
    let alice = req("alice", &[], "default", "get", "pods");
    let before = s.ask(&alice).await;
    assert!(before.allowed);
    let revision = s.status().await.revision;
    let broken = cluster_role_binding("broken", "pod-reader", &[("User", "bert")])
        .replace("  name: pod-reader", "  nmae: pod-reader");
    let broken_line = broken.lines().position(|l| l.contains("nmae")).unwrap() + 1;
    replace_file(s.dir(), "broken.yaml", &broken);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = s.status().await;
        if !status.last_error.is_empty() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the broken file was never reported"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        status
            .last_error
            .contains(&format!("broken.yaml:{broken_line}:")),
        "last_error does not name broken.yaml:{broken_line}: {:?}",
        status.last_error
    );
    assert_eq!(
        status.revision, revision,
        "a rejected reload publishes nothing"
    );
    let during = s.ask(&alice).await;
    assert_eq!(
        (
            during.allowed,
            during.decision,
            during.revision,
            &during.reason
        ),
        (
            before.allowed,
            before.decision,
            before.revision,
            &before.reason
        )
    );
    assert!(
        !s.ask(&req("bert", &[], "default", "get", "pods"))
            .await
            .allowed
    );

    // Fixed: the reload goes through, the error clears, the new binding is in force.
    replace_file(
        s.dir(),
        "broken.yaml",
        &cluster_role_binding("broken", "pod-reader", &[("User", "bert")]),
    );
    let bert = s
        .ask_at(&req("bert", &[], "default", "get", "pods"), revision + 1)
        .await;
    assert!(bert.allowed, "{bert:?}");
    assert_eq!(bert.revision, revision + 1);
    assert!(s.status().await.last_error.is_empty());
    assert_eq!(
        event_summary(&next_event(&mut live).await),
        (
            "ADDED".to_string(),
            "ClusterRoleBinding//broken".to_string(),
            revision + 1
        )
    );
    assert!(s.ask(&alice).await.allowed);
}
