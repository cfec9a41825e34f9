//! `authzd replay` held to real servers: 100,000 requests over a generated policy are recorded
//! by one server, the same requests are asked of a second server started on a candidate
//! policy, and replay's flipped requests (with their counts) are exactly those whose answers
//! differ between the two — trusting the recorded answers, and re-deciding them on the old
//! policy. Also its gates and its errors.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use authzd::proto::action::Kind;
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::{
    Action, AuthorizeRequest, BatchAuthorizeRequest, NonResourceAttributes, ResourceAttributes,
    UserInfo,
};
use authzd::synth::{Rng, Shape};
use serde_json::{json, Value};

use crate::support::server::{run_bin, Server};

const REQUESTS: usize = 100_000;

/// Requests over the generated policy's users, groups, namespaces and the resources its roles
/// name, with a few non-resource URLs; as Authorize requests and as the key replay groups by.
fn requests(shape: &Shape) -> Vec<(AuthorizeRequest, Value)> {
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    let verbs = ["get", "list", "watch", "create", "update", "delete"];
    let resources = [
        ("", "pods"),
        ("", "secrets"),
        ("", "configmaps"),
        ("apps", "deployments"),
        ("rbac.authorization.k8s.io", "roles"),
    ];
    (0..REQUESTS)
        .map(|_| {
            // A few users and groups beyond the policy's, who match nothing.
            let user = format!("user-{}", rng.below(shape.users + 10));
            let groups: Vec<String> = (0..rng.below(3))
                .map(|_| format!("group-{}", rng.below(shape.groups + 5)))
                .collect();
            let verb = verbs[rng.below(verbs.len())].to_string();
            let (kind, action) = if rng.below(50) == 0 {
                let path = ["/healthz", "/metrics", "/api"][rng.below(3)].to_string();
                (
                    Kind::NonResourceAttributes(NonResourceAttributes {
                        path: path.clone(),
                        verb: verb.clone(),
                    }),
                    json!({"non_resource": {"path": path, "verb": verb}}),
                )
            } else {
                let (group, resource) = resources[rng.below(resources.len())];
                let namespace = if rng.below(20) == 0 {
                    String::new()
                } else {
                    format!("ns-{}", rng.below(shape.namespaces + 2))
                };
                (
                    Kind::ResourceAttributes(ResourceAttributes {
                        namespace: namespace.clone(),
                        verb: verb.clone(),
                        group: group.into(),
                        resource: resource.into(),
                        ..Default::default()
                    }),
                    json!({"resource": {
                        "namespace": namespace, "verb": verb, "group": group, "version": "",
                        "resource": resource, "subresource": "", "name": "",
                    }}),
                )
            };
            let mut key = json!({"user": user, "groups": groups});
            key.as_object_mut()
                .unwrap()
                .extend(action.as_object().unwrap().clone());
            let request = AuthorizeRequest {
                user: Some(UserInfo {
                    name: user,
                    groups,
                    ..Default::default()
                }),
                action: Some(Action { kind: Some(kind) }),
                ..Default::default()
            };
            (request, key)
        })
        .collect()
}

/// Every request asked of `server` in batches: whether each was allowed.
async fn allowed(server: &Server, requests: &[(AuthorizeRequest, Value)]) -> Vec<bool> {
    let mut client = AuthorizerClient::new(server.channel().await);
    let mut answers = Vec::with_capacity(requests.len());
    for batch in requests.chunks(1000) {
        let reply = client
            .batch_authorize(BatchAuthorizeRequest {
                requests: batch.iter().map(|(r, _)| r.clone()).collect(),
            })
            .await
            .unwrap()
            .into_inner();
        answers.extend(reply.responses.iter().map(|r| r.allowed));
    }
    answers
}

/// `authzd replay ... -o json`, its exit code and report.
fn replay(args: &[&str]) -> (i32, Value, String) {
    let args: Vec<&std::ffi::OsStr> = std::iter::once("replay")
        .chain(args.iter().copied())
        .chain(["-o", "json"])
        .map(std::ffi::OsStr::new)
        .collect();
    let out = run_bin(&args, Duration::from_secs(300));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "not JSON: {}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (out.status.code().unwrap_or(-1), report, stderr)
}

/// Replay's flips as `{request key with direction: count}`.
fn flips_of(report: &Value) -> BTreeMap<String, u64> {
    report["flips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|flip| {
            let mut key = json!({
                "direction": flip["direction"],
                "user": flip["user"],
                "groups": flip["groups"],
            });
            for action in ["resource", "non_resource"] {
                if !flip[action].is_null() {
                    key[action] = flip[action].clone();
                }
            }
            (canonical(&key), flip["count"].as_u64().unwrap())
        })
        .collect()
}

/// `value` as text with every object's keys sorted, so that two keys built in different
/// orders compare equal.
fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, String> =
                map.iter().map(|(k, v)| (k, canonical(v))).collect();
            let fields: Vec<String> = sorted
                .iter()
                .map(|(k, v)| format!("{}:{v}", Value::String((*k).clone())))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

fn write_policy(dir: &Path, shape: &Shape) {
    authzd::loadgen::spawn::write_policy(dir, shape, 7).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_flips_exactly_what_a_server_on_the_candidate_policy_answers_differently() {
    let old_shape = Shape {
        bindings: 2_000,
        namespaces: 40,
        users: 300,
        groups: 60,
        groups_per_user: 3,
    };
    // The candidate: the same generator with fewer bindings, so some access goes and (the
    // operators' bindings are drawn after the others) some comes.
    let new_shape = Shape {
        bindings: 1_700,
        ..old_shape
    };
    let (old_dir, new_dir, out) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    write_policy(old_dir.path(), &old_shape);
    write_policy(new_dir.path(), &new_shape);
    let records = out.path().join("decisions.jsonl");
    let requests = requests(&old_shape);

    let sink = format!("file:{}", records.display());
    let recording = Server::start_serving(
        old_dir.path(),
        &[
            "--decision-records",
            &sink,
            "--decision-records-queue",
            "200000",
        ],
    )
    .await;
    let before = allowed(&recording, &requests).await;
    recording.stop_gracefully().await;
    let candidate = Server::start_serving(new_dir.path(), &[]).await;
    let after = allowed(&candidate, &requests).await;

    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for (((_, key), was), is) in requests.iter().zip(&before).zip(&after) {
        if was != is {
            let mut key = key.clone();
            key["direction"] = json!(if *is { "gain" } else { "loss" });
            *expected.entry(canonical(&key)).or_default() += 1;
        }
    }
    let gains = expected
        .keys()
        .filter(|k| k.contains(r#""direction":"gain""#))
        .count();
    assert!(
        gains > 0 && gains < expected.len(),
        "the change must both grant and remove access to test both directions: {} flipped requests, {gains} gaining",
        expected.len()
    );

    eprintln!(
        "{} of {REQUESTS} requests flip ({} distinct, {gains} of them gaining)",
        expected.values().sum::<u64>(),
        expected.len()
    );
    let new_arg = new_dir.path().to_str().unwrap();
    let records_arg = records.to_str().unwrap();
    for old in [None, Some(old_dir.path().to_str().unwrap())] {
        let mut args = vec!["--records", records_arg, "--policy-new", new_arg];
        if let Some(old) = old {
            args.extend(["--policy", old]);
        }
        let (code, report, stderr) = replay(&args);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(
            report["records"], REQUESTS as u64,
            "every decision was recorded"
        );
        assert_eq!(report["gaps"], json!({}), "no gaps in the stream");
        let flipped: u64 = expected.values().sum();
        assert_eq!(report["flipped"], flipped, "old answers from {old:?}");
        let got = flips_of(&report);
        let missing: Vec<_> = expected
            .iter()
            .filter(|(k, v)| got.get(*k) != Some(v))
            .take(5)
            .collect();
        let extra: Vec<_> = got
            .iter()
            .filter(|(k, v)| expected.get(*k) != Some(v))
            .take(5)
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "old answers from {old:?}: {} mismatches; expected but not replayed: {missing:?}; replayed but not expected: {extra:?}",
            missing.len() + extra.len()
        );
    }
}

/// A gate fires on a flip of a matching subject (exit 1, named on stderr) and not on others;
/// a broken record is `file:line` and exit 2; a cut-short last line is skipped with a warning.
#[test]
fn replay_gates_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.yaml");
    let new = dir.path().join("new.yaml");
    let role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: reader}\nrules: [{apiGroups: [\"\"], resources: [pods], verbs: [get]}]\n";
    let binding = "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: readers}\nsubjects: [{kind: Group, name: readers, apiGroup: rbac.authorization.k8s.io}]\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}\n";
    std::fs::write(&old, format!("{role}{binding}")).unwrap();
    std::fs::write(&new, role).unwrap();
    let record = |seq: u64, user: &str, groups: &str, decision: &str| {
        format!(
            r#"{{"v":1,"kind":"decision","seq":{seq},"api":"Authorize","caller":{{"user":"gateway","groups":[]}},"request":{{"user":"{user}","groups":[{groups}],"resource":{{"namespace":"dev","verb":"get","resource":"pods"}}}},"decision":"{decision}","revision":1,"cached":false}}"#
        )
    };
    let records = dir.path().join("records.jsonl");
    std::fs::write(
        &records,
        format!(
            "{}\n{}\n{}\n{{\"v\":1,\"kind\":\"gap\",\"reason\":\"queue_full\",\"dropped\":4}}\n{}\n",
            record(0, "alice", r#""readers""#, "allow"),
            record(1, "alice", r#""readers""#, "allow"),
            record(2, "bob", "", "no_opinion"),
            record(7, "carol", r#""readers""#, "allow"),
        ),
    )
    .unwrap();
    let (records_arg, new_arg) = (records.to_str().unwrap(), new.to_str().unwrap());
    let base = ["--records", records_arg, "--policy-new", new_arg];

    let (code, report, _) = replay(&base);
    assert_eq!(code, 0);
    assert_eq!(report["records"], 4);
    assert_eq!(report["gaps"], json!({"queue_full": 4}));
    assert_eq!(
        (report["losses"].clone(), report["gains"].clone()),
        (json!(3), json!(0))
    );
    assert_eq!(
        report["flips"][0]["user"], "alice",
        "most records first: {report}"
    );
    assert_eq!(report["flips"][0]["count"], 2);
    assert_eq!(report["flips"][0]["callers"], json!(["gateway"]));
    assert_eq!(report["flips"][0]["from"], json!({"allow": 2}));
    assert_eq!(report["flips"][0]["to"], "no_opinion");

    let gated: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--fail-on-loss", "read*"])
        .collect();
    let (code, _, stderr) = replay(&gated);
    assert_eq!(code, 1, "a group matching the glob loses access");
    assert!(
        stderr.contains("--fail-on-loss read*: alice (readers) loses get pods in dev (×2)"),
        "{stderr}"
    );
    let not_gated: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--fail-on-gain", "*", "--fail-on-loss", "bob"])
        .collect();
    assert_eq!(
        replay(&not_gated).0,
        0,
        "nobody gains, and bob's answer does not flip"
    );

    // A broken line in the middle: file:line, exit 2.
    let broken = dir.path().join("broken.jsonl");
    std::fs::write(
        &broken,
        format!(
            "{}\nnot json\n{}\n",
            record(0, "a", "", "allow"),
            record(1, "b", "", "allow")
        ),
    )
    .unwrap();
    let out = run_bin(
        &[
            "replay",
            "--records",
            broken.to_str().unwrap(),
            "--policy-new",
            new_arg,
        ]
        .map(std::ffi::OsStr::new),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}:2:", broken.display())),
        "{stderr}"
    );

    // A writer killed mid-line: the records before it replay, with a warning.
    let cut = dir.path().join("cut.jsonl");
    let whole = record(0, "alice", r#""readers""#, "allow");
    std::fs::write(&cut, format!("{whole}\n{}", &whole[..40])).unwrap();
    let (code, report, _) = replay(&["--records", cut.to_str().unwrap(), "--policy-new", new_arg]);
    assert_eq!(code, 0);
    assert_eq!(report["records"], 1);
}
