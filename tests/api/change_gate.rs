//! ChangeGate (docs/policy.md §8) on a real server over a policy directory:
//! a write whose change breaks a gate rule is refused, naming the rule and a witness request,
//! and changes nothing (revision, files); Apply, a dry run, Delete and a reload alike; writes
//! arriving together are gated in turn; changing the gate needs `escalate` on it; and random
//! writes are refused exactly as the gate check judges them (`tests/support/gate_writes.rs`;
//! the same over etcd in `tests/etcd/change_gate.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::support::gate_writes::{self, binding, Write, ADMINS, GATE};
use crate::support::server::{resource_request, Server};
use crate::support::wait::eventually;
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::policy_admin_client::PolicyAdminClient;
use authzd::proto::{ApplyRequest, DeleteRequest, ObjectRef, StatusRequest};
use authzd::synth::Rng;
use tonic::transport::Channel;
use tonic::{Code, Request};

/// root is a super-user (system:masters); writer may write RBAC objects and ChangeGates but
/// holds no `escalate` on ChangeGates; gatekeeper holds it too.
const TOKENS: &str = "root-token,root,uid-0,system:masters\n\
writer-token,writer,uid-1,\n\
gatekeeper-token,gatekeeper,uid-2,\n";

const WRITERS: &str = "\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: policy-writer}
rules:
- {apiGroups: [rbac.authorization.k8s.io], resources: [\"*\"], verbs: [\"*\"]}
- {apiGroups: [authzd.io], resources: [changegates], verbs: [get, list, create, update, delete]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: gate-keeper}
rules:
- {apiGroups: [authzd.io], resources: [changegates], verbs: [get, list, create, update, delete, escalate]}
";

fn files() -> Vec<(String, String)> {
    let mut files = vec![
        ("roles.yaml".to_string(), gate_writes::ROLES.to_string()),
        ("writers.yaml".to_string(), WRITERS.to_string()),
        ("gate.yaml".to_string(), GATE.to_string()),
        (
            "admins-a.yaml".to_string(),
            binding("admins-a", None, "admin", &[ADMINS]),
        ),
        (
            "admins-b.yaml".to_string(),
            binding("admins-b", None, "admin", &[ADMINS]),
        ),
        (
            "vault.yaml".to_string(),
            binding(
                "vault",
                None,
                "secret-reader",
                &["{kind: ServiceAccount, name: vault, namespace: vault}"],
            ),
        ),
    ];
    for (user, role) in [("writer", "policy-writer"), ("gatekeeper", "policy-writer")] {
        files.push((
            format!("{user}.yaml"),
            binding(
                user,
                None,
                role,
                &[&format!(
                    "{{kind: User, name: {user}, apiGroup: rbac.authorization.k8s.io}}"
                )],
            ),
        ));
    }
    files.push((
        "gatekeeper-gates.yaml".to_string(),
        binding(
            "gatekeeper-gates",
            None,
            "gate-keeper",
            &["{kind: User, name: gatekeeper, apiGroup: rbac.authorization.k8s.io}"],
        ),
    ));
    files
}

async fn start(dir: &Path, files: &[(String, String)], watch: bool) -> Server {
    let policy = dir.join("policy");
    std::fs::create_dir_all(&policy).unwrap();
    for (name, text) in files {
        std::fs::write(policy.join(name), text).unwrap();
    }
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let mut args = vec!["--token-auth-file", tokens.to_str().unwrap()];
    if !watch {
        args.push("--no-watch");
    }
    Server::start_serving(&policy, &args).await
}

fn as_user<T>(token: &str, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}-token").parse().unwrap(),
    );
    request
}

/// Every file of the policy directory, by name.
fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir.join("policy"))
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&path).unwrap(),
            )
        })
        .collect()
}

async fn revision(admin: &mut PolicyAdminClient<Channel>) -> u64 {
    admin
        .status(as_user("root", StatusRequest {}))
        .await
        .unwrap()
        .into_inner()
        .revision
}

fn delete_request(kind: &str, namespace: &str, name: &str) -> DeleteRequest {
    DeleteRequest {
        object: Some(ObjectRef {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }),
        ..Default::default()
    }
}

/// [`gate_writes::assert_gate_refused`] where the test says what the write was.
fn assert_gate_refused<T: std::fmt::Debug>(result: Result<T, tonic::Status>, rule: &str) {
    gate_writes::assert_gate_refused(result, rule, "the write");
}

#[tokio::test]
async fn writes_that_break_a_gate_are_refused_naming_the_rule_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &files(), false).await;
    let mut admin = PolicyAdminClient::new(server.channel().await);
    let (files_before, revision_before) = (snapshot(dir.path()), revision(&mut admin).await);

    // One of the two admin bindings may go: the group keeps its access through the other.
    let first = admin
        .delete(as_user(
            "root",
            delete_request("ClusterRoleBinding", "", "admins-a"),
        ))
        .await;
    assert!(first.is_ok(), "{first:?}");
    let (files_before, revision_before) = {
        assert!(revision(&mut admin).await > revision_before);
        assert_ne!(snapshot(dir.path()), files_before);
        (snapshot(dir.path()), revision(&mut admin).await)
    };

    // The last one may not: a refusal naming the rule, the subject and a witness request.
    let last = admin
        .delete(as_user(
            "root",
            delete_request("ClusterRoleBinding", "", "admins-b"),
        ))
        .await;
    let message = last
        .as_ref()
        .map_err(|s| s.message().to_string())
        .expect_err("the last admin binding stays");
    assert_gate_refused(last.map(|_| ()), "admins-keep-everything");
    assert!(message.contains("platform-admins"), "{message}");

    // Granting secrets to a group the rule does not list: refused, as a dry run and for real.
    let devs_secrets = binding(
        "devs-secrets",
        Some("team-a"),
        "secret-reader",
        &["{kind: Group, name: devs, apiGroup: rbac.authorization.k8s.io}"],
    );
    for dry_run in [true, false] {
        let answer = admin
            .apply(as_user(
                "root",
                ApplyRequest {
                    manifest: devs_secrets.clone(),
                    dry_run,
                    ..Default::default()
                },
            ))
            .await;
        assert_gate_refused(answer.map(|_| ()), "secrets-only-for-vault");
    }
    // A deny for every authenticated user takes the admins' secrets too.
    let deny_everyone = binding(
        "deny-everyone",
        None,
        "secret-denier",
        &["{kind: Group, name: system:authenticated, apiGroup: rbac.authorization.k8s.io}"],
    );
    let answer = admin
        .apply(as_user(
            "root",
            ApplyRequest {
                manifest: deny_everyone,
                ..Default::default()
            },
        ))
        .await;
    assert_gate_refused(answer.map(|_| ()), "admins-keep-everything");

    assert_eq!(revision(&mut admin).await, revision_before);
    assert_eq!(snapshot(dir.path()), files_before);

    // What the gate allows still goes through: secrets for the listed service account's
    // namespace-mate is a grant to someone unlisted, but to the listed group it is not.
    let admins_secrets = binding("admins-secrets", Some("team-a"), "secret-reader", &[ADMINS]);
    let answer = admin
        .apply(as_user(
            "root",
            ApplyRequest {
                manifest: admins_secrets,
                ..Default::default()
            },
        ))
        .await;
    assert!(answer.is_ok(), "{answer:?}");
}

/// Two deletes that each leave the admins a binding, sent at once: one is made, the other is
/// refused, whichever commits first, and the admins keep their access.
#[tokio::test]
async fn writes_arriving_together_are_gated_in_turn() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &files(), false).await;
    let channel = server.channel().await;
    let mut answers = Vec::new();
    for round in 0..3 {
        if round > 0 {
            // Both admin bindings back for the next round.
            let mut admin = PolicyAdminClient::new(channel.clone());
            for name in ["admins-a", "admins-b"] {
                admin
                    .apply(as_user(
                        "root",
                        ApplyRequest {
                            manifest: binding(name, None, "admin", &[ADMINS]),
                            ..Default::default()
                        },
                    ))
                    .await
                    .unwrap();
            }
        }
        let deletes = ["admins-a", "admins-b"].map(|name| {
            let mut admin = PolicyAdminClient::new(channel.clone());
            tokio::spawn(async move {
                admin
                    .delete(as_user(
                        "root",
                        delete_request("ClusterRoleBinding", "", name),
                    ))
                    .await
            })
        });
        let mut made = 0;
        for delete in deletes {
            match delete.await.unwrap() {
                Ok(_) => made += 1,
                Err(status) => {
                    assert_gate_refused::<()>(Err(status), "admins-keep-everything");
                }
            }
        }
        answers.push(made);
        let mut authz = AuthorizerClient::new(channel.clone());
        let admin_asks = authz
            .authorize(as_user(
                "root",
                resource_request("someone", &["platform-admins"], "team-a", "delete", "pods"),
            ))
            .await
            .unwrap()
            .into_inner();
        assert!(
            admin_asks.allowed,
            "the admins kept their access: {admin_asks:?}"
        );
    }
    assert_eq!(
        answers,
        vec![1, 1, 1],
        "exactly one delete of each pair is made"
    );
}

#[tokio::test]
async fn changing_a_gate_needs_escalate_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &files(), false).await;
    let mut admin = PolicyAdminClient::new(server.channel().await);
    let loosened = GATE.replace(
        "  - name: secrets-only-for-vault\n    type: NeverGrantOutside\n    subjects: [{kind: ServiceAccount, namespace: vault, name: vault}, {kind: Group, name: platform-admins}]\n    access: [{apiGroups: [\"\"], resources: [secrets], verbs: [get, list]}]\n",
        "",
    );
    assert_ne!(loosened, GATE);
    let writer_edits = admin
        .apply(as_user(
            "writer",
            ApplyRequest {
                manifest: loosened.clone(),
                ..Default::default()
            },
        ))
        .await
        .expect_err("writer holds no escalate on the gate");
    assert_eq!(
        writer_edits.code(),
        Code::PermissionDenied,
        "{writer_edits:?}"
    );
    assert!(
        writer_edits.message().contains("escalate")
            && writer_edits.message().contains("changegates"),
        "{}",
        writer_edits.message()
    );
    let writer_deletes = admin
        .delete(as_user(
            "writer",
            delete_request("ChangeGate", "", "guard-rails"),
        ))
        .await
        .expect_err("nor may writer delete it");
    assert_eq!(
        writer_deletes.code(),
        Code::PermissionDenied,
        "{writer_deletes:?}"
    );
    // The writer may still write what the gate allows.
    let allowed = admin
        .apply(as_user(
            "writer",
            ApplyRequest {
                manifest: binding("readers", None, "pod-reader", &[ADMINS]),
                ..Default::default()
            },
        ))
        .await;
    assert!(allowed.is_ok(), "{allowed:?}");

    let keeper_edits = admin
        .apply(as_user(
            "gatekeeper",
            ApplyRequest {
                manifest: loosened,
                ..Default::default()
            },
        ))
        .await;
    assert!(keeper_edits.is_ok(), "{keeper_edits:?}");
    // The loosened gate is in force: secrets for devs now pass.
    let devs_secrets = admin
        .apply(as_user(
            "root",
            ApplyRequest {
                manifest: binding(
                    "devs-secrets",
                    Some("team-a"),
                    "secret-reader",
                    &["{kind: Group, name: devs, apiGroup: rbac.authorization.k8s.io}"],
                ),
                ..Default::default()
            },
        ))
        .await;
    assert!(devs_secrets.is_ok(), "{devs_secrets:?}");
}

#[tokio::test]
async fn a_reload_that_breaks_a_gate_is_rejected_and_the_policy_stays() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &files(), true).await;
    let channel = server.channel().await;
    let mut admin = PolicyAdminClient::new(channel.clone());
    let revision_before = revision(&mut admin).await;
    let policy = dir.path().join("policy");
    std::fs::remove_file(policy.join("admins-a.yaml")).unwrap();
    // The first removal is allowed: wait until it is in force.
    eventually(
        Duration::from_secs(10),
        || "the reload of a gate-keeping change".to_string(),
        || {
            let mut admin = admin.clone();
            async move { (revision(&mut admin).await > revision_before).then_some(()) }
        },
    )
    .await;
    let revision_before = revision(&mut admin).await;
    std::fs::remove_file(policy.join("admins-b.yaml")).unwrap();
    let error = eventually(
        Duration::from_secs(10),
        || "a rejected reload".to_string(),
        || {
            let mut admin = admin.clone();
            async move {
                let status = admin
                    .status(as_user("root", StatusRequest {}))
                    .await
                    .unwrap()
                    .into_inner();
                (!status.last_error.is_empty()).then_some(status.last_error)
            }
        },
    )
    .await;
    assert!(error.contains("admins-keep-everything"), "{error}");
    assert_eq!(revision(&mut admin).await, revision_before);
    let mut authz = AuthorizerClient::new(channel);
    let answer = authz
        .authorize(as_user(
            "root",
            resource_request("someone", &["platform-admins"], "team-a", "get", "secrets"),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.allowed, "the last good policy stays: {answer:?}");
}

/// Random writes of bindings against random gates: each refused exactly when the gate check
/// says its change breaks a rule; a refused one changes neither the revision nor a file.
#[tokio::test]
async fn random_writes_are_refused_exactly_when_they_break_the_gate() {
    let seeds = if crate::support::ci() { 6 } else { 2 };
    let (mut refused, mut made) = (0, 0);
    for seed in 0..seeds {
        let mut rng = Rng::new(0x6a7e + seed);
        let mut objects = gate_writes::initial(&mut rng);
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<(String, String)> = objects
            .iter()
            .map(|(k, v)| (format!("{k}.yaml"), v.clone()))
            .collect();
        let server = start(dir.path(), &files, false).await;
        let mut admin = PolicyAdminClient::new(server.channel().await);
        for step in 0..25 {
            let write = gate_writes::random_write(&mut rng, &objects);
            let next = gate_writes::after(&objects, &write);
            let expected = gate_writes::expected_refusal(&objects, &next);
            let (files_before, revision_before) =
                (snapshot(dir.path()), revision(&mut admin).await);
            let answer = match &write {
                Write::Apply { manifest, .. } => admin
                    .apply(as_user(
                        "root",
                        ApplyRequest {
                            manifest: manifest.clone(),
                            ..Default::default()
                        },
                    ))
                    .await
                    .map(|_| ()),
                Write::Delete {
                    kind,
                    namespace,
                    name,
                    ..
                } => admin
                    .delete(as_user("root", delete_request(kind, namespace, name)))
                    .await
                    .map(|_| ()),
            };
            let context = format!("seed {seed} step {step}: {write:?}");
            match expected {
                Some(rule) => {
                    gate_writes::assert_gate_refused(answer, &rule, &context);
                    assert_eq!(revision(&mut admin).await, revision_before, "{context}");
                    assert_eq!(snapshot(dir.path()), files_before, "{context}");
                    refused += 1;
                }
                None => {
                    assert!(answer.is_ok(), "{context}: {answer:?}");
                    objects = next;
                    made += 1;
                }
            }
        }
    }
    eprintln!("{refused} writes refused, {made} made");
    assert!(
        refused > 0 && made > 0,
        "both outcomes are exercised: {refused} refused, {made} made"
    );
}
