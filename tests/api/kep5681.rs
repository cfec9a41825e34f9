//! Kubernetes' conditional authorization (KEP-5681, alpha) on the webhook path, against the
//! real server: the golden exchanges of `tests/kep5681/*.yaml` (see its README), and the
//! alpha flag's absence (conditions never returned, no review endpoint). That the chains
//! authzd returns finish as Authorize with content does, for random policies, is a property
//! of `tests/properties/conditional.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::path::PathBuf;

use crate::support::server::{post_json, Server};
use serde_json::{json, Value};

const REVIEW_PATH: &str = "/apis/authorization.k8s.io/v1alpha1/authorizationconditionsreviews";

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Golden {
    description: String,
    #[serde(default)]
    args: Vec<String>,
    policy: String,
    exchanges: Vec<Exchange>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Exchange {
    #[serde(default)]
    description: String,
    post: Endpoint,
    body: Value,
    code: u16,
    answer: Value,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum Endpoint {
    Webhook,
    Review,
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kep5681")
}

/// `expected` is a subset of `actual`: objects by the keys given (`null`: absent or null),
/// lists item by item with the same length, anything else equal. The first difference, by
/// path.
fn subset(expected: &Value, actual: &Value, path: &str) -> Option<String> {
    match (expected, actual) {
        (Value::Null, Value::Null) => None,
        (Value::Object(want), Value::Object(got)) => want.iter().find_map(|(key, value)| {
            let at = format!("{path}.{key}");
            match got.get(key) {
                None if value.is_null() => None,
                None => Some(format!("{at}: missing")),
                Some(found) => subset(value, found, &at),
            }
        }),
        (Value::Array(want), Value::Array(got)) => {
            if want.len() != got.len() {
                return Some(format!("{path}: {} items, want {}", got.len(), want.len()));
            }
            want.iter()
                .zip(got)
                .enumerate()
                .find_map(|(i, (w, g))| subset(w, g, &format!("{path}[{i}]")))
        }
        (want, got) if want == got => None,
        (want, got) => Some(format!("{path}: {got}, want {want}")),
    }
}

/// `body` with every `"$chain N"` replaced by exchange N's `status.conditionSetChain`.
fn substitute(body: &Value, answers: &[Value]) -> Value {
    match body {
        Value::String(s) => match s.strip_prefix("$chain ") {
            Some(n) => {
                let n: usize = n.parse().expect("$chain N");
                let chain = &answers[n]["status"]["conditionSetChain"];
                assert!(chain.is_array(), "exchange {n} answered no chain");
                chain.clone()
            }
            None => body.clone(),
        },
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), substitute(v, answers)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| substitute(v, answers)).collect()),
        other => other.clone(),
    }
}

async fn serve(policy: &str, args: &[&str]) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.yaml"), policy).unwrap();
    let server = Server::start_serving(dir.path(), args).await;
    (server, dir)
}

#[tokio::test]
async fn golden_exchanges_follow_the_kep() {
    let mut files: Vec<_> = std::fs::read_dir(golden_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "golden files: {files:?}");
    let mut failures = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let golden: Golden = serde_saphyr::from_str(&std::fs::read_to_string(file).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!golden.description.is_empty(), "{name}: a description");
        let mut args = vec!["--alpha-conditional-authorization"];
        args.extend(golden.args.iter().map(String::as_str));
        let (server, _dir) = serve(&golden.policy, &args).await;
        let mut answers = Vec::new();
        for (i, exchange) in golden.exchanges.iter().enumerate() {
            let path = match exchange.post {
                Endpoint::Webhook => "/authorize",
                Endpoint::Review => REVIEW_PATH,
            };
            let body = substitute(&exchange.body, &answers);
            let (code, answer) = post_json(server.addr, path, &body).await;
            let what = format!("{name} exchange {i} ({})", exchange.description);
            if code != exchange.code {
                failures.push(format!(
                    "{what}: HTTP {code}, want {}: {answer}",
                    exchange.code
                ));
            } else if let Some(difference) = subset(&exchange.answer, &answer, "") {
                failures.push(format!("{what}: {difference}\n  answer: {answer}"));
            }
            answers.push(answer);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn alice_review(mode: Option<&str>) -> Value {
    let mut spec = json!({
        "user": "alice",
        "resourceAttributes": {"namespace": "team", "verb": "create", "version": "v1",
                               "resource": "persistentvolumeclaims"},
    });
    if let Some(mode) = mode {
        spec["conditionalAuthorization"] = json!({"mode": mode});
    }
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
}

const DEV_CLAIMS: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: dev-claims}
rules:
  - apiGroups: [""]
    resources: [persistentvolumeclaims]
    verbs: [create]
    condition: 'object.spec.storageClassName == "dev"'
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-dev-claims}
subjects: [{kind: User, name: alice}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: dev-claims}
"#;

/// Without the alpha flag authzd is an old webhook: the mode is ignored (the fold answers,
/// never conditions) and the review endpoint does not exist. With it, an empty mode is "the
/// caller does not support conditions".
#[tokio::test]
async fn without_the_alpha_flag_conditions_are_never_returned() {
    let (server, _dir) = serve(DEV_CLAIMS, &[]).await;
    let (code, answer) = post_json(
        server.addr,
        "/authorize",
        &alice_review(Some("HumanReadable")),
    )
    .await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["status"]["allowed"], false, "{answer}");
    assert!(
        answer["status"].get("conditionSetChain").is_none(),
        "{answer}"
    );
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1alpha1",
        "kind": "AuthorizationConditionsReview",
        "request": {"conditionSetChain": [{"authorizerName": "x", "allowed": true}]},
    });
    let (code, answer) = post_json(server.addr, REVIEW_PATH, &review).await;
    assert_eq!(code, 404, "{answer}");

    let (server, _dir) = serve(DEV_CLAIMS, &["--alpha-conditional-authorization"]).await;
    let (_, answer) = post_json(server.addr, "/authorize", &alice_review(Some(""))).await;
    assert!(
        answer["status"].get("conditionSetChain").is_none(),
        "{answer}"
    );
    let (_, answer) = post_json(
        server.addr,
        "/authorize",
        &alice_review(Some("HumanReadable")),
    )
    .await;
    assert!(answer["status"]["conditionSetChain"].is_array(), "{answer}");
}
