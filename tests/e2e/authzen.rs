//! The AuthZEN Authorization API 1.0 (docs/authzen.md) asked with curl, a real HTTP client,
//! of a running authzd holding `tests/fixtures/authzen.yaml` (roles, ownership through a CEL
//! condition on `object.ownerID`, a deny rule, a negation, a non-resource route, grants by
//! name, a namespace, a service account):
//!
//! * every evaluation equals Authorize (gRPC) for the request docs/authzen.md §2 maps it to,
//!   asked one by one and as one batch;
//! * the three batch semantics, defaults, items in error answered in place, and the
//!   request's `context` read by a CEL condition;
//! * bad input is 400 naming the field; unknown fields are ignored; `X-Request-ID` is echoed;
//! * searches agree with evaluation, and a paginated search is answered at the revision it
//!   started at, or refused once that revision is no longer held;
//! * page tokens are sealed by the server's key: one with its revision or offset changed, or
//!   from a server with another key, is refused (one server's tokens verify on another that
//!   was given the same key file);
//! * the metadata names the listener's address, or `--authzen-base-url`, whatever `Host` the
//!   request carries.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::{
    action::Kind, Action, AuthorizeRequest, Content, NonResourceAttributes, ResourceAttributes,
    UserInfo,
};
use serde_json::{json, Value};

use crate::support::server::Server;
use crate::support::tools::{tool_or_skip, CURL};
use crate::support::wait::eventually;

const POLICY: &str = include_str!("../fixtures/authzen.yaml");

struct Pdp {
    server: Server,
    curl: PathBuf,
    dir: tempfile::TempDir,
}

/// An answer: status, headers (lower-case names), body as JSON (`Null` when it is none).
struct Answer {
    status: u16,
    headers: String,
    body: Value,
}

impl Pdp {
    async fn start() -> Option<Pdp> {
        Self::start_with(&[]).await
    }

    /// A server started with more `serve` flags.
    async fn start_with(args: &[&str]) -> Option<Pdp> {
        let curl = tool_or_skip(&CURL)?;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("authzen.yaml"), POLICY).unwrap();
        let server = Server::start_serving(dir.path(), args).await;
        Some(Pdp { server, curl, dir })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    /// `curl -i` with `args`, the answer read back.
    fn curl(&self, args: &[&str]) -> Answer {
        let output = Command::new(&self.curl)
            .args(["-s", "-i", "--max-time", "10"])
            .args(args)
            .output()
            .expect("run curl");
        assert!(output.status.success(), "curl failed: {output:?}");
        let text = String::from_utf8(output.stdout).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Answer {
            status,
            headers: head.to_ascii_lowercase(),
            body: serde_json::from_str(body).unwrap_or(Value::Null),
        }
    }

    /// POST `body` as JSON to `path`, with more `headers`.
    fn post(&self, path: &str, body: &Value, headers: &[&str]) -> Answer {
        let body = body.to_string();
        let url = self.url(path);
        let mut args = vec![
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            &body,
        ];
        for header in headers {
            args.extend(["-H", header]);
        }
        args.push(&url);
        self.curl(&args)
    }

    /// POST that must answer 200; its body.
    fn ok(&self, path: &str, body: &Value) -> Value {
        let answer = self.post(path, body, &[]);
        assert_eq!(answer.status, 200, "{path} {body}: {}", answer.body);
        answer.body
    }

    fn decide(&self, subject: &Value, action: &str, resource: &Value) -> bool {
        let body = json!({"subject": subject, "action": {"name": action}, "resource": resource});
        let answer = self.ok("/access/v1/evaluation", &body);
        assert_eq!(
            answer.as_object().unwrap().len(),
            1,
            "only `decision`: {answer}"
        );
        answer["decision"].as_bool().unwrap()
    }

    fn policy_dir(&self) -> &Path {
        self.dir.path()
    }
}

fn user(id: &str) -> Value {
    json!({"type": "user", "id": id})
}

/// The request docs/authzen.md §2 maps an evaluation to, built here from the document
/// itself, as an Authorize request.
fn mapped(subject: &Value, verb: &str, resource: &Value) -> AuthorizeRequest {
    let id = subject["id"].as_str().unwrap();
    let mut groups: Vec<String> = subject["properties"]["groups"]
        .as_array()
        .map(|g| g.iter().map(|g| g.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    let name = match subject["type"].as_str().unwrap() {
        "group" => {
            groups.insert(0, id.to_string());
            String::new()
        }
        "serviceaccount" => {
            let (namespace, _) = id.split_once(':').unwrap();
            groups.splice(
                0..0,
                [
                    "system:serviceaccounts".to_string(),
                    format!("system:serviceaccounts:{namespace}"),
                ],
            );
            format!("system:serviceaccount:{id}")
        }
        _ => id.to_string(),
    };
    let resource_id = resource["id"].as_str().unwrap().to_string();
    let (kind, content) = if resource["type"] == "route" {
        let kind = Kind::NonResourceAttributes(NonResourceAttributes {
            path: resource_id,
            verb: verb.into(),
        });
        (kind, None)
    } else {
        let mut properties = resource["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let namespace = properties
            .remove("namespace")
            .map(|n| n.as_str().unwrap().to_string())
            .unwrap_or_default();
        let kind = Kind::ResourceAttributes(ResourceAttributes {
            namespace,
            verb: verb.into(),
            resource: resource["type"].as_str().unwrap().into(),
            name: resource_id,
            ..Default::default()
        });
        let content = (!properties.is_empty()).then(|| Content {
            object: serde_json::to_vec(&properties).unwrap(),
            ..Default::default()
        });
        (kind, content)
    };
    AuthorizeRequest {
        user: Some(UserInfo {
            name,
            groups,
            ..Default::default()
        }),
        action: Some(Action { kind: Some(kind) }),
        content,
        ..Default::default()
    }
}

fn subjects() -> Vec<Value> {
    vec![
        user("rick"),
        user("morty"),
        user("summer"),
        json!({"type": "user", "id": "summer", "properties": {"groups": ["interns"]}}),
        user("beth"),
        user("jerry"),
        json!({"type": "user", "id": "jerry", "properties": {"groups": ["ops", "team-a-readers"]}}),
        json!({"type": "group", "id": "viewers"}),
        json!({"type": "serviceaccount", "id": "bots:reporter"}),
    ]
}

const VERBS: &[&str] = &[
    "can_read_todos",
    "can_create_todo",
    "can_update_todo",
    "can_delete_todo",
    "can_purge",
    "can_share",
    "get",
];

fn resources() -> Vec<Value> {
    vec![
        json!({"type": "todo", "id": "todo-1", "properties": {"ownerID": "morty"}}),
        json!({"type": "todo", "id": "todo-2", "properties": {"ownerID": "summer"}}),
        json!({"type": "todo", "id": "todo-3"}),
        json!({"type": "todo", "id": "todo-1", "properties": {"namespace": "team-a", "ownerID": "rick"}}),
        json!({"type": "route", "id": "/healthz"}),
        json!({"type": "route", "id": "/metrics/requests"}),
    ]
}

/// Every evaluation of the grid equals Authorize for the mapped request — asked one by one
/// with curl, and all at once as one Access Evaluations batch — and the policy's cases come
/// out as the fixture says (so the comparison is not between two wrong answers).
#[tokio::test]
async fn every_evaluation_equals_authorize_for_the_mapped_request() {
    let Some(pdp) = Pdp::start().await else {
        return;
    };
    let mut grpc = AuthorizerClient::new(pdp.server.channel().await);
    let mut asked = Vec::new();
    let mut answers = Vec::new();
    for subject in subjects() {
        for verb in VERBS {
            for resource in resources() {
                let authzen = pdp.decide(&subject, verb, &resource);
                let authorize = grpc
                    .authorize(mapped(&subject, verb, &resource))
                    .await
                    .unwrap()
                    .into_inner()
                    .allowed;
                assert_eq!(authzen, authorize, "{subject} {verb} {resource}");
                asked.push(
                    json!({"subject": subject, "action": {"name": verb}, "resource": resource}),
                );
                answers.push(json!({"decision": authzen}));
            }
        }
    }
    let batch = pdp.ok("/access/v1/evaluations", &json!({"evaluations": asked}));
    assert_eq!(batch, json!({"evaluations": answers}));

    let todo =
        |id: &str, owner: &str| json!({"type": "todo", "id": id, "properties": {"ownerID": owner}});
    let intern = json!({"type": "user", "id": "summer", "properties": {"groups": ["interns"]}});
    for (subject, verb, resource, want) in [
        // Roles.
        (
            user("beth"),
            "can_read_todos",
            todo("todo-1", "morty"),
            true,
        ),
        (
            user("beth"),
            "can_create_todo",
            todo("todo-1", "morty"),
            false,
        ),
        (
            user("morty"),
            "can_create_todo",
            todo("todo-1", "morty"),
            true,
        ),
        // Ownership through the CEL condition on object.ownerID.
        (
            user("morty"),
            "can_update_todo",
            todo("todo-1", "morty"),
            true,
        ),
        (
            user("morty"),
            "can_update_todo",
            todo("todo-2", "summer"),
            false,
        ),
        (
            user("morty"),
            "can_update_todo",
            json!({"type": "todo", "id": "todo-3"}),
            false,
        ),
        // The deny rule.
        (
            user("summer"),
            "can_delete_todo",
            todo("todo-2", "summer"),
            true,
        ),
        (
            intern.clone(),
            "can_delete_todo",
            todo("todo-2", "summer"),
            false,
        ),
        // The negation.
        (
            user("rick"),
            "can_delete_todo",
            todo("todo-2", "summer"),
            true,
        ),
        (user("rick"), "can_purge", todo("todo-2", "summer"), false),
        // The route.
        (
            json!({"type": "group", "id": "ops"}),
            "get",
            json!({"type": "route", "id": "/metrics/requests"}),
            true,
        ),
        (
            user("jerry"),
            "get",
            json!({"type": "route", "id": "/healthz"}),
            false,
        ),
        // A namespace and a service account.
        (
            json!({"type": "group", "id": "team-a-readers"}),
            "can_read_todos",
            json!({"type": "todo", "id": "t", "properties": {"namespace": "team-a"}}),
            true,
        ),
        (
            json!({"type": "group", "id": "team-a-readers"}),
            "can_read_todos",
            json!({"type": "todo", "id": "t", "properties": {"namespace": "team-b"}}),
            false,
        ),
        (
            json!({"type": "serviceaccount", "id": "bots:reporter"}),
            "can_read_user",
            json!({"type": "user", "id": "rick"}),
            true,
        ),
    ] {
        assert_eq!(
            pdp.decide(&subject, verb, &resource),
            want,
            "{subject} {verb} {resource}"
        );
    }
}

/// Defaults fill each item; `execute_all` answers every item, `deny_on_first_deny` stops
/// after the first item not allowed, `permit_on_first_permit` after the first allowed; an
/// item missing a field is answered `false` in place, with the error in its context.
#[tokio::test]
async fn batches_take_defaults_and_the_three_semantics() {
    let Some(pdp) = Pdp::start().await else {
        return;
    };
    let batch = |semantic: &str| {
        json!({
            "subject": user("morty"),
            "action": {"name": "can_update_todo"},
            "options": {"evaluations_semantic": semantic},
            "evaluations": [
                {"resource": {"type": "todo", "id": "a", "properties": {"ownerID": "morty"}}},
                {"resource": {"type": "todo", "id": "b", "properties": {"ownerID": "rick"}}},
                {"action": {"name": "can_read_todos"}, "resource": {"type": "todo", "id": "c"}},
            ]
        })
    };
    let decisions = |body: Value| -> Vec<bool> {
        body["evaluations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["decision"].as_bool().unwrap())
            .collect()
    };
    let path = "/access/v1/evaluations";
    assert_eq!(
        decisions(pdp.ok(path, &batch("execute_all"))),
        [true, false, true]
    );
    assert_eq!(
        decisions(pdp.ok(path, &batch("deny_on_first_deny"))),
        [true, false]
    );
    assert_eq!(
        decisions(pdp.ok(path, &batch("permit_on_first_permit"))),
        [true]
    );
    let mut default = batch("execute_all");
    default.as_object_mut().unwrap().remove("options");
    assert_eq!(decisions(pdp.ok(path, &default)), [true, false, true]);

    // An item in error: false in place, the field named in its context; the items beside
    // it are still decided. Under deny_on_first_deny it stops the batch.
    let mut broken = batch("execute_all");
    broken["evaluations"][1] = json!({"resource": {"id": "b"}});
    let body = pdp.ok(path, &broken);
    assert_eq!(decisions(body.clone()), [true, false, true]);
    assert_eq!(body["evaluations"][1]["context"]["error"]["status"], 400);
    assert_eq!(
        body["evaluations"][1]["context"]["error"]["field"],
        "evaluations[1].resource.type"
    );
    broken["options"]["evaluations_semantic"] = json!("deny_on_first_deny");
    assert_eq!(decisions(pdp.ok(path, &broken)), [true, false]);

    // No (or empty) evaluations: the top level is the one evaluation (§7.1).
    for evaluations in [None, Some(json!([]))] {
        let mut single = json!({
            "subject": user("morty"), "action": {"name": "can_read_todos"},
            "resource": {"type": "todo", "id": "x"}
        });
        if let Some(evaluations) = evaluations {
            single["evaluations"] = evaluations;
        }
        assert_eq!(pdp.ok(path, &single), json!({"decision": true}));
    }

    // The context reaches CEL conditions (`context.purpose`), from the top level or an item.
    let export = json!({
        "subject": user("beth"), "action": {"name": "can_export"},
        "context": {"purpose": "audit"},
        "evaluations": [
            {"resource": {"type": "todo", "id": "a"}},
            {"resource": {"type": "todo", "id": "b"}, "context": {"purpose": "fun"}},
            {"resource": {"type": "todo", "id": "c"}, "context": {}},
        ]
    });
    assert_eq!(decisions(pdp.ok(path, &export)), [true, false, false]);
    let mut single = json!({"subject": user("beth"), "action": {"name": "can_export"}, "resource": {"type": "todo", "id": "a"}});
    assert_eq!(
        pdp.ok("/access/v1/evaluation", &single),
        json!({"decision": false})
    );
    single["context"] = json!({"purpose": "audit"});
    assert_eq!(
        pdp.ok("/access/v1/evaluation", &single),
        json!({"decision": true})
    );

    // Reasons when asked: the deciding rule, the reason and the revision.
    let mut asked = batch("execute_all");
    asked["options"]["reasons"] = json!(true);
    let body = pdp.ok(path, &asked);
    let context = &body["evaluations"][0]["context"];
    assert!(
        context["allowed_by"][0]
            .as_str()
            .unwrap()
            .contains("ClusterRoleBinding/owners"),
        "{body}"
    );
    assert_eq!(context["authzd_decision"], "ALLOW", "{body}");
    assert!(context["revision"].as_u64().unwrap() >= 1, "{body}");
}

/// Bad input: 400 naming the field (the body's `error.field` and its message); unknown fields
/// ignored; `X-Request-ID` echoed on answers and refusals alike.
#[tokio::test]
async fn bad_input_is_400_naming_the_field() {
    let Some(pdp) = Pdp::start().await else {
        return;
    };
    let good = json!({
        "subject": user("beth"), "action": {"name": "can_read_todos"},
        "resource": {"type": "todo", "id": "t"}, "futureField": {"nested": true}
    });
    let answer = pdp.post("/access/v1/evaluation", &good, &["X-Request-ID: req-42"]);
    assert_eq!(
        (answer.status, &answer.body),
        (200, &json!({"decision": true}))
    );
    assert!(
        answer.headers.contains("x-request-id: req-42"),
        "{}",
        answer.headers
    );
    assert!(
        answer.headers.contains("content-type: application/json"),
        "{}",
        answer.headers
    );

    let without = |key: &str| {
        let mut body = good.clone();
        body.as_object_mut().unwrap().remove(key);
        body
    };
    let with = |pointer: &str, value: Value| {
        let mut body = good.clone();
        *body.pointer_mut(pointer).unwrap() = value;
        body
    };
    for (path, body, field) in [
        ("/access/v1/evaluation", without("subject"), "subject"),
        ("/access/v1/evaluation", without("action"), "action"),
        ("/access/v1/evaluation", without("resource"), "resource"),
        (
            "/access/v1/evaluation",
            with("/subject", json!({"id": "beth"})),
            "subject.type",
        ),
        (
            "/access/v1/evaluation",
            with("/subject", json!({"type": "user"})),
            "subject.id",
        ),
        (
            "/access/v1/evaluation",
            with("/action", json!({"name": 123})),
            "action.name",
        ),
        (
            "/access/v1/evaluation",
            with("/resource", json!({"type": "todo"})),
            "resource.id",
        ),
        (
            "/access/v1/evaluation",
            with("/subject", json!("beth")),
            "subject",
        ),
        ("/access/v1/evaluations", without("subject"), "subject"),
        (
            "/access/v1/evaluations",
            json!({"evaluations": [{}], "options": {"evaluations_semantic": "all"}}),
            "options.evaluations_semantic",
        ),
        (
            "/access/v1/search/subject",
            json!({"subject": {"type": "user"}, "resource": {"type": "todo", "id": "t"}}),
            "action",
        ),
        (
            "/access/v1/search/subject",
            json!({"subject": {"type": "user"}, "action": {"name": "x"}, "resource": {"type": "todo"}}),
            "resource.id",
        ),
        (
            "/access/v1/search/resource",
            json!({"subject": {"type": "user"}, "action": {"name": "x"}, "resource": {"type": "todo"}}),
            "subject.id",
        ),
        (
            "/access/v1/search/action",
            json!({"subject": {"type": "user", "id": "a"}}),
            "resource",
        ),
        (
            "/access/v1/search/resource",
            json!({"subject": user("a"), "action": {"name": "x"}, "resource": {"type": "todo"}, "page": {"token": "nonsense"}}),
            "page.token",
        ),
    ] {
        let answer = pdp.post(path, &body, &["X-Request-ID: bad-1"]);
        assert_eq!(answer.status, 400, "{path} {body}: {}", answer.body);
        assert_eq!(
            answer.body["error"]["field"], field,
            "{path} {body}: {}",
            answer.body
        );
        assert!(
            answer.body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(field),
            "{}",
            answer.body
        );
        assert!(
            answer.headers.contains("x-request-id: bad-1"),
            "{}",
            answer.headers
        );
    }
    // Not JSON, or not declared JSON: 400.
    let url = pdp.url("/access/v1/evaluation");
    for args in [
        vec![
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            "not json",
            &url,
        ],
        vec![
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            "",
            &url,
        ],
        vec![
            "-X",
            "POST",
            "-H",
            "Content-Type: text/plain",
            "-d",
            "{}",
            &url,
        ],
    ] {
        assert_eq!(pdp.curl(&args).status, 400, "{args:?}");
    }
    // The metadata names every endpoint under the address it was reached at.
    let metadata = pdp.curl(&[&pdp.url("/.well-known/authzen-configuration")]);
    assert_eq!(metadata.status, 200);
    let base = pdp.server.url();
    assert_eq!(metadata.body["policy_decision_point"], base.as_str());
    for (key, path) in [
        ("access_evaluation_endpoint", "/access/v1/evaluation"),
        ("access_evaluations_endpoint", "/access/v1/evaluations"),
        ("search_subject_endpoint", "/access/v1/search/subject"),
        ("search_action_endpoint", "/access/v1/search/action"),
        ("search_resource_endpoint", "/access/v1/search/resource"),
    ] {
        assert_eq!(metadata.body[key], format!("{base}{path}"), "{key}");
    }
}

fn ids(body: &Value, key: &str) -> Vec<String> {
    body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[key].as_str().unwrap().to_string())
        .collect()
}

/// Searches list what evaluation allows, and only that, and say when a grant makes the set
/// not enumerable.
#[tokio::test]
async fn searches_agree_with_evaluation() {
    let Some(pdp) = Pdp::start().await else {
        return;
    };
    let todo = json!({"type": "todo", "id": "todo-1", "properties": {"ownerID": "morty"}});

    // Who may read todo-1, by kind of subject; each result evaluates to true.
    for (kind, want) in [
        (
            "user",
            vec![
                "beth",
                "morty",
                "rick",
                "summer",
                "system:serviceaccount:bots:reporter",
            ],
        ),
        ("group", vec!["system:masters", "viewers"]),
        ("serviceaccount", vec!["bots:reporter"]),
    ] {
        let body = pdp.ok(
            "/access/v1/search/subject",
            &json!({"subject": {"type": kind}, "action": {"name": "can_read_todos"}, "resource": todo}),
        );
        assert_eq!(ids(&body, "id"), want, "{kind}: {body}");
        assert_eq!(body["context"]["complete"], true, "{body}");
        for id in want {
            let subject = json!({"type": kind, "id": id});
            assert!(pdp.decide(&subject, "can_read_todos", &todo), "{subject}");
        }
    }
    // Who may update it: its owner, and the admin (the negation leaves updates in); not an
    // intern's deletes.
    let body = pdp.ok(
        "/access/v1/search/subject",
        &json!({"subject": {"type": "user"}, "action": {"name": "can_update_todo"}, "resource": todo}),
    );
    assert_eq!(ids(&body, "id"), ["morty", "rick"]);

    // What morty may do to his todo: exactly the verbs that evaluate to true.
    let body = pdp.ok(
        "/access/v1/search/action",
        &json!({"subject": user("morty"), "resource": todo}),
    );
    let actions = ids(&body, "name");
    assert_eq!(
        actions,
        [
            "can_create_todo",
            "can_delete_todo",
            "can_read_todos",
            "can_read_user",
            "can_update_todo"
        ],
        "{body}"
    );
    assert_eq!(body["context"]["complete"], true);
    for verb in VERBS {
        assert_eq!(
            pdp.decide(&user("morty"), verb, &todo),
            actions.contains(&verb.to_string()),
            "{verb}"
        );
    }
    // Rick's `*` (less can_purge) names no verbs: listed are those that evaluate to true
    // among the named and Kubernetes' own, and the answer says it is not complete.
    let body = pdp.ok(
        "/access/v1/search/action",
        &json!({"subject": user("rick"), "resource": todo}),
    );
    let actions = ids(&body, "name");
    assert!(
        actions.contains(&"can_update_todo".to_string()) && actions.contains(&"delete".to_string()),
        "{body}"
    );
    assert!(!actions.contains(&"can_purge".to_string()), "{body}");
    assert_eq!(body["context"]["complete"], false, "{body}");
    for verb in &actions {
        assert!(pdp.decide(&user("rick"), verb, &todo), "{verb}");
    }

    // Which todos beth may share: the two named; which todos morty may read: not
    // enumerable (a grant by kind), said so.
    let search = |subject: Value, verb: &str| {
        pdp.ok(
            "/access/v1/search/resource",
            &json!({"subject": subject, "action": {"name": verb}, "resource": {"type": "todo"}}),
        )
    };
    let body = search(user("beth"), "can_share");
    assert_eq!(ids(&body, "id"), ["todo-1", "todo-2"]);
    assert_eq!(body["context"]["complete"], true);
    let body = search(user("morty"), "can_read_todos");
    assert_eq!(body["context"]["complete"], false, "{body}");
    assert!(
        body["context"]["incomplete"][0]
            .as_str()
            .unwrap()
            .contains("ClusterRoleBinding/viewers"),
        "{body}"
    );
    let body = pdp.ok(
        "/access/v1/search/resource",
        &json!({"subject": json!({"type": "group", "id": "ops"}), "action": {"name": "get"}, "resource": {"type": "route"}}),
    );
    assert_eq!(ids(&body, "id"), ["/healthz"]);
    assert_eq!(
        body["context"]["complete"], false,
        "/metrics/* is a prefix: {body}"
    );
}

/// A paginated search answers every page at the revision its first page was answered at,
/// whatever changes meanwhile; a fresh search sees the change; a token whose revision is
/// no longer held is refused, saying so; a token used with another query is refused.
#[tokio::test]
async fn pages_are_pinned_to_the_revision_they_started_at() {
    let Some(pdp) = Pdp::start().await else {
        return;
    };
    let query = |limit: u64, token: Option<&str>| {
        let mut body = json!({
            "subject": {"type": "user"}, "action": {"name": "can_read_todos"},
            "resource": {"type": "todo", "id": "t"},
            "options": {"reasons": true}, "page": {"limit": limit}
        });
        if let Some(token) = token {
            body["page"]["token"] = json!(token);
        }
        body
    };
    let path = "/access/v1/search/subject";
    let first = pdp.ok(path, &query(2, None));
    let revision = first["context"]["revision"].as_u64().unwrap();
    assert_eq!(first["page"]["total"], 5, "{first}");
    let mut seen = ids(&first, "id");
    let mut token = first["page"]["next_token"].as_str().unwrap().to_string();
    assert!(!token.is_empty());

    // A new viewer, published before the next page.
    let add_viewer = |n: usize| {
        let binding = format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: extra-{n}}}\nsubjects: [{{kind: User, name: aaa-{n}}}]\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: todo-viewer}}\n"
        );
        std::fs::write(pdp.policy_dir().join(format!("extra-{n}.yaml")), binding).unwrap();
    };
    let current = || {
        let body = pdp.ok(path, &query(100, None));
        body["context"]["revision"].as_u64().unwrap()
    };
    add_viewer(0);
    let after = eventually(
        Duration::from_secs(10),
        || "a reload".into(),
        || async {
            let now = current();
            (now > revision).then_some(now)
        },
    )
    .await;
    // Page two (and on) from the first page's revision: aaa-0 is not there.
    while !token.is_empty() {
        let page = pdp.ok(path, &query(2, Some(&token)));
        assert_eq!(page["context"]["revision"], revision, "{page}");
        assert_eq!(page["page"]["total"], 5, "{page}");
        seen.extend(ids(&page, "id"));
        token = page["page"]["next_token"].as_str().unwrap().to_string();
    }
    assert_eq!(
        seen,
        [
            "beth",
            "morty",
            "rick",
            "summer",
            "system:serviceaccount:bots:reporter"
        ]
    );
    // A fresh search sees the change.
    let fresh = pdp.ok(path, &query(100, None));
    assert_eq!(fresh["context"]["revision"], after);
    assert_eq!(ids(&fresh, "id")[0], "aaa-0");

    // Another query with the same token: refused.
    let stale = first["page"]["next_token"].as_str().unwrap();
    let mut other = query(2, Some(stale));
    other["action"]["name"] = json!("can_read_user");
    let answer = pdp.post(path, &other, &[]);
    assert_eq!(
        (answer.status, answer.body["error"]["field"].as_str()),
        (400, Some("page.token")),
        "{}",
        answer.body
    );

    // Once the revision is no longer held (more changes than the server keeps), refused.
    let mut last = after;
    for n in 1..=authzd::serving::RETAINED_SNAPSHOTS + 1 {
        add_viewer(n);
        last = eventually(
            Duration::from_secs(10),
            || "a reload".into(),
            || async {
                let now = current();
                (now > last).then_some(now)
            },
        )
        .await;
    }
    let answer = pdp.post(path, &query(2, Some(stale)), &[]);
    assert_eq!(answer.status, 400, "{}", answer.body);
    let message = answer.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("pinned to policy revision {revision}")),
        "{message}"
    );
    assert!(message.contains("start the search again"), "{message}");
}

/// `token` with its `index`th dot-separated field (1: the revision, 2: the offset) replaced by
/// `value`: a token changed the way a caller without the server's key can change it.
fn forged(token: &str, index: usize, value: &str) -> String {
    use base64::Engine as _;
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let text = String::from_utf8(engine.decode(token).unwrap()).unwrap();
    let mut fields: Vec<&str> = text.split('.').collect();
    fields[index] = value;
    engine.encode(fields.join("."))
}

/// The refusal of every token that does not verify: one message, naming nothing of why.
fn invalid_token() -> Value {
    json!({"error": {"status": 400, "message": "page.token: invalid page token", "field": "page.token"}})
}

/// A subject search of the todo viewers, two per page, continuing from `token`.
fn viewers(token: Option<&str>) -> Value {
    let mut body = json!({
        "subject": {"type": "user"}, "action": {"name": "can_read_todos"},
        "resource": {"type": "todo", "id": "t"},
        "options": {"reasons": true}, "page": {"limit": 2}
    });
    if let Some(token) = token {
        body["page"]["token"] = json!(token);
    }
    body
}

const SEARCH_SUBJECT: &str = "/access/v1/search/subject";

/// A page token is sealed by the server: one whose revision was changed (to an older
/// revision the server still holds, which it would answer from) or whose offset was changed
/// is refused with 400 and one message; the genuine token still pages, at its revision.
#[tokio::test]
async fn forged_page_tokens_are_refused_and_genuine_ones_page() {
    let Some(pdp) = Pdp::start().await else {
        return;
    };
    let first = pdp.ok(SEARCH_SUBJECT, &viewers(None));
    let old_revision = first["context"]["revision"].as_u64().unwrap();
    // A new viewer: a newer revision, and a search started on it.
    let binding = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: extra}\nsubjects: [{kind: User, name: aaa}]\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: todo-viewer}\n";
    std::fs::write(pdp.policy_dir().join("extra.yaml"), binding).unwrap();
    let fresh = eventually(
        Duration::from_secs(10),
        || "a reload".into(),
        || async {
            let body = pdp.ok(SEARCH_SUBJECT, &viewers(None));
            (body["context"]["revision"].as_u64().unwrap() > old_revision).then_some(body)
        },
    )
    .await;
    let revision = fresh["context"]["revision"].as_u64().unwrap();
    assert_eq!(ids(&fresh, "id"), ["aaa", "beth"], "{fresh}");
    let token = fresh["page"]["next_token"].as_str().unwrap();

    for (what, forgery) in [
        (
            "an older revision",
            forged(token, 1, &old_revision.to_string()),
        ),
        ("a later offset", forged(token, 2, "4")),
        ("the first offset", forged(token, 2, "0")),
        ("another search's tag", {
            let other = first["page"]["next_token"].as_str().unwrap();
            forged(other, 1, &revision.to_string())
        }),
    ] {
        let answer = pdp.post(SEARCH_SUBJECT, &viewers(Some(&forgery)), &[]);
        assert_eq!(
            (answer.status, &answer.body),
            (400, &invalid_token()),
            "{what}: {forgery}"
        );
    }

    // The genuine token: the next page, at the revision the search started at.
    let page = pdp.ok(SEARCH_SUBJECT, &viewers(Some(token)));
    assert_eq!(page["context"]["revision"], revision, "{page}");
    assert_eq!(ids(&page, "id"), ["morty", "rick"], "{page}");
}

/// A token sealed by one server does not verify on a server with another key (each has a
/// random one by default), though the policy, its revision and the query are the same; two
/// servers given one `--authzen-page-token-key-file` take each other's tokens.
#[tokio::test]
async fn a_page_token_verifies_only_under_the_key_that_sealed_it() {
    let (Some(a), Some(b)) = (Pdp::start().await, Pdp::start().await) else {
        return;
    };
    let first = a.ok(SEARCH_SUBJECT, &viewers(None));
    let token = first["page"]["next_token"].as_str().unwrap();
    assert_eq!(
        b.ok(SEARCH_SUBJECT, &viewers(None))["context"]["revision"],
        first["context"]["revision"],
        "both at the same revision"
    );
    let answer = b.post(SEARCH_SUBJECT, &viewers(Some(token)), &[]);
    assert_eq!((answer.status, &answer.body), (400, &invalid_token()));
    let own = a.ok(SEARCH_SUBJECT, &viewers(Some(token)));
    assert_eq!(ids(&own, "id"), ["rick", "summer"], "{own}");

    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("page-token.key");
    std::fs::write(&key, "a shared secret of at least 32 bytes, for replicas\n").unwrap();
    let key = key.to_str().unwrap();
    let shared = ["--authzen-page-token-key-file", key];
    let (Some(c), Some(d)) = (
        Pdp::start_with(&shared).await,
        Pdp::start_with(&shared).await,
    ) else {
        return;
    };
    let first = c.ok(SEARCH_SUBJECT, &viewers(None));
    let token = first["page"]["next_token"].as_str().unwrap();
    let page = d.ok(SEARCH_SUBJECT, &viewers(Some(token)));
    assert_eq!(ids(&page, "id"), ["rick", "summer"], "{page}");
}

/// The metadata names the listener's own address whatever `Host` a request carries (curl's
/// `-H Host:`, and raw requests with a spoofed Host and an absolute-form target naming
/// another host), or the configured `--authzen-base-url`; never the request's.
#[tokio::test]
async fn the_metadata_never_names_the_requests_host() {
    let Some(pdp) = Pdp::start().await else {
        return;
    };
    let path = "/.well-known/authzen-configuration";
    let base = pdp.server.url();
    let answer = pdp.curl(&["-H", "Host: evil.example:8443", &pdp.url(path)]);
    assert_eq!(answer.status, 200);
    assert!(!answer.body.to_string().contains("evil"), "{}", answer.body);
    assert_eq!(answer.body["policy_decision_point"], base.as_str());

    for request in [
        format!("GET {path} HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"),
        format!("GET http://evil.example{path} HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"),
        format!("GET {path} HTTP/1.1\r\nHost: evil.example\r\nX-Forwarded-Host: evil.example\r\nConnection: close\r\n\r\n"),
    ] {
        let (status, body) = crate::support::server::raw_http(pdp.server.addr, &request).await;
        assert_eq!(status, 200, "{request}: {body}");
        assert!(!body.contains("evil"), "{request}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["policy_decision_point"], base.as_str());
        assert_eq!(
            body["access_evaluation_endpoint"],
            format!("{base}/access/v1/evaluation")
        );
    }

    let Some(configured) =
        Pdp::start_with(&["--authzen-base-url", "https://pdp.example.com/authz/"]).await
    else {
        return;
    };
    let answer = configured.curl(&["-H", "Host: evil.example", &configured.url(path)]);
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.body["policy_decision_point"],
        "https://pdp.example.com/authz"
    );
    assert_eq!(
        answer.body["search_subject_endpoint"],
        "https://pdp.example.com/authz/access/v1/search/subject"
    );
}
