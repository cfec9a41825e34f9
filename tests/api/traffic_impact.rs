//! A dry-run Apply's traffic impact: of the requests the server's decision
//! cache holds, those the write would flip. Held to a second real server started on the
//! candidate policy: re-asking it every request the first one cached must flip exactly the
//! requests the dry run named, and no others.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::collections::BTreeSet;

use crate::support::server::{cluster_role_binding, resource_request, role_binding, Server};
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::policy_admin_client::PolicyAdminClient;
use authzd::proto::{action::Kind, ApplyRequest, AuthorizeRequest};
use tonic::Request;

const TOKENS: &str = "root-token,root,uid-0,system:masters\n";

const ROLES: &str = "\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: pod-reader
rules:
- apiGroups: [\"\"]
  resources: [\"pods\"]
  verbs: [\"get\", \"list\"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: secret-admin
rules:
- apiGroups: [\"\"]
  resources: [\"secrets\"]
  verbs: [\"*\"]
";

/// The policy in force, one file per binding so the candidate can replace some.
fn policy() -> Vec<(&'static str, String)> {
    vec![
        ("roles.yaml", ROLES.to_string()),
        (
            "a-readers.yaml",
            role_binding(
                "team-a",
                "readers",
                "ClusterRole",
                "pod-reader",
                &[("User", "alice"), ("User", "bob"), ("Group", "devs")],
            ),
        ),
        (
            "b-secrets.yaml",
            role_binding(
                "team-b",
                "secrets",
                "ClusterRole",
                "secret-admin",
                &[("User", "carol")],
            ),
        ),
        (
            "auditors.yaml",
            cluster_role_binding("auditors", "pod-reader", &[("Group", "auditors")]),
        ),
    ]
}

/// The candidate, written over objects of the same names (as Apply does, and as the second
/// server's directory has them): bob loses team-a, devs keep it; dave gains team-b's
/// secrets; the group auditors loses its cluster-wide reads to another group.
fn candidate() -> Vec<(&'static str, String)> {
    vec![
        (
            "a-readers.yaml",
            role_binding(
                "team-a",
                "readers",
                "ClusterRole",
                "pod-reader",
                &[("User", "alice"), ("Group", "devs")],
            ),
        ),
        (
            "b-secrets.yaml",
            role_binding(
                "team-b",
                "secrets",
                "ClusterRole",
                "secret-admin",
                &[("User", "carol"), ("User", "dave")],
            ),
        ),
        (
            "auditors.yaml",
            cluster_role_binding("auditors", "pod-reader", &[("Group", "external-auditors")]),
        ),
    ]
}

/// Every combination the test asks: users with and without groups, three namespaces, reads
/// and deletes of pods and secrets.
fn traffic() -> Vec<AuthorizeRequest> {
    let mut requests = Vec::new();
    for (user, groups) in [
        ("alice", vec![]),
        ("bob", vec![]),
        ("bob", vec!["devs"]),
        ("carol", vec![]),
        ("dave", vec!["auditors"]),
        ("erin", vec!["auditors", "devs"]),
    ] {
        for namespace in ["team-a", "team-b", "team-c"] {
            for verb in ["get", "delete"] {
                for resource in ["pods", "secrets"] {
                    requests.push(resource_request(user, &groups, namespace, verb, resource));
                }
            }
        }
    }
    requests
}

/// A request as the dry run names it: user, groups, and the resource action's fields.
fn named(user: &authzd::proto::UserInfo, action: &authzd::proto::Action) -> String {
    let Some(Kind::ResourceAttributes(r)) = &action.kind else {
        panic!("a resource request: {action:?}");
    };
    format!(
        "{} [{}] {} {} in {}",
        user.name,
        user.groups.join(","),
        r.verb,
        r.resource,
        r.namespace
    )
}

fn as_root<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", "Bearer root-token".parse().unwrap());
    request
}

async fn start(files: &[(&str, String)], dir: &std::path::Path) -> Server {
    let policy = dir.join("policy");
    std::fs::create_dir_all(&policy).unwrap();
    for (name, text) in files {
        std::fs::write(policy.join(name), text).unwrap();
    }
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    Server::start_serving(
        &policy,
        &["--token-auth-file", tokens.to_str().unwrap(), "--no-watch"],
    )
    .await
}

async fn answers(server: &Server, requests: &[AuthorizeRequest]) -> Vec<bool> {
    let mut client = AuthorizerClient::new(server.channel().await);
    let mut allowed = Vec::new();
    for request in requests {
        let answer = client.authorize(as_root(request.clone())).await.unwrap();
        allowed.push(answer.into_inner().allowed);
    }
    allowed
}

#[tokio::test]
async fn a_dry_run_flips_exactly_what_a_server_on_the_candidate_answers_differently() {
    let before_dir = tempfile::tempdir().unwrap();
    let after_dir = tempfile::tempdir().unwrap();
    let in_force = start(&policy(), before_dir.path()).await;
    let mut merged = policy();
    for (name, text) in candidate() {
        merged.retain(|(n, _)| *n != name);
        merged.push((name, text));
    }
    let on_candidate = start(&merged, after_dir.path()).await;

    let requests = traffic();
    let before = answers(&in_force, &requests).await;
    let after = answers(&on_candidate, &requests).await;
    let expected: BTreeSet<String> = requests
        .iter()
        .zip(before.iter().zip(&after))
        .filter(|(_, (b, a))| b != a)
        .map(|(r, (b, _))| {
            format!(
                "{} {}",
                named(r.user.as_ref().unwrap(), r.action.as_ref().unwrap()),
                if *b { "allow->deny" } else { "deny->allow" }
            )
        })
        .collect();
    assert!(
        expected.len() >= 6,
        "the candidate must flip a good share of the traffic: {expected:?}"
    );

    let manifest = candidate()
        .into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join("---\n");
    let mut admin = PolicyAdminClient::new(in_force.channel().await);
    let answer = admin
        .apply(as_root(ApplyRequest {
            manifest,
            dry_run: true,
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
    let traffic = answer.traffic.expect("a dry run's traffic impact");
    assert_eq!(
        traffic.cached_requests as usize,
        requests.len(),
        "every distinct request asked is cached"
    );
    let flipped: BTreeSet<String> = traffic
        .flips
        .iter()
        .map(|f| {
            format!(
                "{} {}",
                named(f.user.as_ref().unwrap(), f.action.as_ref().unwrap()),
                if f.allowed_before {
                    "allow->deny"
                } else {
                    "deny->allow"
                }
            )
        })
        .collect();
    assert_eq!(traffic.flipped as usize, flipped.len());
    assert_eq!(flipped, expected);
    // A dry run changes nothing: the server still answers as before.
    assert_eq!(answers(&in_force, &requests).await, before);
}
