//! Hostile input, property-based: random and mutated input into every parser and endpoint.
//!
//! * Protobuf: random bytes and byte-mutated encodings of valid requests, decoded as every
//!   RPC request type and pushed through the convert layer (in process), and framed as gRPC
//!   to every unary method of the real server with a pass-through bytes codec.
//! * Manifests: mutations of the shipped `policy/` examples and the test policy (truncation,
//!   byte flips, huge strings, duplicated lines), plus fixed hostile documents (alias bombs,
//!   deep nesting, duplicate keys), into `parse_manifest` and into a real server's Apply.
//! * ABAC JSON lines: mutated lines loaded from a file.
//! * Policy files on disk: a broken reload keeps the last good policy.
//!
//! Asserted: nothing panics (the server stays up), each refusal has the right code and says
//! what is wrong, and a refusal changes nothing (revision and answers as before).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use crate::support::raw::RawCodec;
use crate::support::server::{replace_file, resource_request, sample_policy, Server, RBAC_YAML};
use authzd::api::convert;
use authzd::api::error::ApiError;
use authzd::api::limits::ContentLimits;
use authzd::policy::load::{load_paths, parse_manifest, LoadOptions};
use authzd::proto;
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::policy_admin_client::PolicyAdminClient;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Status};

const SHIPPED_RBAC: &str = include_str!("../../policy/seed001-rbac.yaml");
const SHIPPED_SEED003: &str = include_str!("../../policy/seed003-roles.json");
const SHIPPED_ABAC: &str = include_str!("../../policy/seed001-abac.jsonl");

// ---- mutations ----------------------------------------------------------------------------

/// One way to damage a document.
#[derive(Clone, Debug)]
enum Mutation {
    /// Keep only the first `at` bytes.
    Truncate(usize),
    /// Replace the byte at `at` with `byte`.
    Flip(usize, u8),
    /// Insert `len` copies of `x` at `at`.
    Huge(usize, usize),
    /// Repeat the line containing `at` right after itself (duplicate keys, duplicate objects).
    DuplicateLine(usize),
    /// Delete `len` bytes at `at`.
    Cut(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Mutation::Flip(at, b)),
        (any::<usize>(), 1usize..200_000).prop_map(|(at, n)| Mutation::Huge(at, n)),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        (any::<usize>(), 1usize..64).prop_map(|(at, n)| Mutation::Cut(at, n)),
    ]
}

fn mutate(text: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut out = text.to_vec();
    for m in mutations {
        if out.is_empty() {
            break;
        }
        let len = out.len();
        match *m {
            Mutation::Truncate(at) => out.truncate(at % len),
            Mutation::Flip(at, byte) => out[at % len] = byte,
            Mutation::Huge(at, n) => {
                let at = at % len;
                out.splice(at..at, std::iter::repeat_n(b'x', n));
            }
            Mutation::DuplicateLine(at) => {
                let at = at % len;
                let start = out[..at]
                    .iter()
                    .rposition(|b| *b == b'\n')
                    .map_or(0, |i| i + 1);
                let end = out[at..]
                    .iter()
                    .position(|b| *b == b'\n')
                    .map_or(len, |i| at + i + 1);
                let line = out[start..end].to_vec();
                out.splice(end..end, line);
            }
            Mutation::Cut(at, n) => {
                let at = at % len;
                out.drain(at..(at + n).min(len));
            }
        }
    }
    out
}

/// Documents every parser must refuse, each with a word its error must contain.
fn hostile_documents() -> Vec<(&'static str, String, &'static str)> {
    let mut bomb = String::from("a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for i in 1..10 {
        let refs = vec![format!("*a{}", i - 1); 10].join(",");
        bomb.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    bomb.push_str("kind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\nmetadata:\n  name: boom\nrules: *a9\n");
    let deep_json = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_yaml = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_block = (0..5000)
        .map(|i| format!("{}k:\n", " ".repeat(i)))
        .collect::<String>();
    let duplicate = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: dup\nrules:\n- apiGroups: [\"\"]\n  resources: [\"pods\"]\n  verbs: [\"get\"]\n  verbs: [\"*\"]\n".to_string();
    let duplicate_json = r#"{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "dup"}, "rules": [], "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}"#.to_string();
    // An error that quotes a 200 KB value: the refusal must still reach the caller (its
    // message is cut to fit in a header).
    let huge_kind = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: {}\nmetadata:\n  name: k\nrules: []\n",
        "K".repeat(200_000)
    );
    vec![
        ("huge unknown kind", huge_kind, "kind"),
        ("alias bomb", bomb, "alias"),
        ("deep JSON", deep_json, "recursion"),
        ("deep flow YAML", deep_yaml, "recursion"),
        ("deep block YAML", deep_block, "depth"),
        ("duplicate YAML key", duplicate, "duplicate"),
        ("duplicate JSON key", duplicate_json, "duplicate"),
    ]
}

// ---- parsers, in process ------------------------------------------------------------------

#[test]
fn hostile_documents_are_refused_by_the_manifest_parser() {
    let options = LoadOptions::default();
    for (what, text, word) in hostile_documents() {
        let started = Instant::now();
        let errors = match parse_manifest("manifest", &text, &options) {
            Ok(objects) => panic!("{what}: accepted ({} objects)", objects.len()),
            Err(errors) => errors.to_string(),
        };
        println!(
            "{what}: refused in {:?}: {}",
            started.elapsed(),
            first_line(&errors)
        );
        assert!(
            errors.to_lowercase().contains(word),
            "{what}: the error should mention `{word}`: {errors}"
        );
    }
}

fn first_line(text: &str) -> &str {
    let line = text.lines().next().unwrap_or_default();
    &line[..line.len().min(200)]
}

proptest! {
    #![proptest_config(crate::support::cases::config(128))]

    #[test]
    fn mutated_manifests_never_panic_the_parser(
        which in 0usize..3,
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let (name, original) = [
            ("seed001-rbac.yaml", SHIPPED_RBAC),
            ("seed003-roles.json", SHIPPED_SEED003),
            ("rbac.yaml", RBAC_YAML),
        ][which];
        let damaged = String::from_utf8_lossy(&mutate(original.as_bytes(), &mutations)).into_owned();
        // Either it still parses, or every problem is reported as `file:line: message`.
        if let Err(errors) = parse_manifest(name, &damaged, &LoadOptions::default()) {
            prop_assert!(!errors.0.is_empty());
            for error in &errors.0 {
                prop_assert!(!error.message.trim().is_empty(), "an empty error message");
            }
        }
    }

    #[test]
    fn mutated_abac_lines_never_panic_the_loader(
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let damaged = mutate(SHIPPED_ABAC.as_bytes(), &mutations);
        std::fs::write(dir.path().join("abac.jsonl"), &damaged).unwrap();
        if let Err(errors) = load_paths(&[dir.path().to_path_buf()], &LoadOptions::default()) {
            prop_assert!(!errors.0.is_empty());
            for error in &errors.0 {
                prop_assert!(!error.message.trim().is_empty());
            }
        }
    }

    #[test]
    fn random_protobuf_never_panics_the_convert_layer(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        mutations in prop::collection::vec(mutation(), 0..3),
    ) {
        // Random bytes, and damaged encodings of a valid request (which get further into the
        // decoder than pure noise does).
        let mut action = resource_request("a", &[], "dev", "list", "pods").action;
        if let Some(proto::action::Kind::ResourceAttributes(r)) =
            action.as_mut().and_then(|a| a.kind.as_mut())
        {
            r.field_selector = Some(proto::FieldSelectorAttributes {
                raw_selector: r"spec.nodeName=n\,1".into(),
                requirements: vec![],
            });
            r.label_selector = Some(proto::LabelSelectorAttributes {
                raw_selector: String::new(),
                requirements: vec![proto::SelectorRequirement {
                    key: "app".into(),
                    operator: "In".into(),
                    values: vec!["web".into()],
                }],
            });
        }
        let valid = proto::SubjectAccessReviewRequest {
            user: "alice".into(),
            groups: vec!["devs".into(); 3],
            action,
            content: Some(proto::Content {
                object: br#"{"metadata":{"labels":{"app":"web"}}}"#.to_vec(),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec();
        for input in [bytes.clone(), mutate(&valid, &mutations)] {
            convert_everything(&input)?;
        }
    }
}

/// Decodes `bytes` as every request type and converts what decodes; a conversion error must
/// be `INVALID_ARGUMENT` naming a field (`field: problem`).
fn convert_everything(bytes: &[u8]) -> Result<(), TestCaseError> {
    fn check<T>(result: Result<T, ApiError>) -> Result<(), TestCaseError> {
        if let Err(error) = result {
            let status = Status::from(error);
            prop_assert_eq!(status.code(), Code::InvalidArgument, "{:?}", status);
            prop_assert!(status.message().contains(": "), "{:?}", status);
        }
        Ok(())
    }
    let limits = &ContentLimits::default();
    if let Ok(r) = proto::AuthorizeRequest::decode(bytes) {
        check(convert::authorize_request(r, limits))?;
    }
    if let Ok(r) = proto::BatchAuthorizeRequest::decode(bytes) {
        for one in r.requests {
            check(convert::authorize_request(one, limits))?;
        }
    }
    if let Ok(r) = proto::GetAllowedSubjectsRequest::decode(bytes) {
        check(convert::action(r.action, r.content, limits))?;
    }
    if let Ok(r) = proto::SubjectAccessReviewRequest::decode(bytes) {
        check(convert::action(r.action, r.content, limits))?;
        check(convert::review_subject(r.user, r.uid, r.groups, r.extra))?;
    }
    if let Ok(r) = proto::PersonalSubjectAccessReviewRequest::decode(bytes) {
        check(convert::action(r.action, r.content, limits))?;
    }
    if let Ok(r) = proto::LocalSubjectAccessReviewRequest::decode(bytes) {
        check(convert::local_action(
            &r.namespace,
            r.action,
            r.content,
            limits,
        ))?;
        check(convert::review_subject(r.user, r.uid, r.groups, r.extra))?;
    }
    if let Ok(r) = proto::ResourceAccessReviewRequest::decode(bytes) {
        check(convert::action(r.action, r.content, limits))?;
    }
    if let Ok(r) = proto::LocalResourceAccessReviewRequest::decode(bytes) {
        check(convert::local_action(
            &r.namespace,
            r.action,
            r.content,
            limits,
        ))?;
    }
    if let Ok(r) = proto::ApplyRequest::decode(bytes) {
        let _ = parse_manifest("manifest", &r.manifest, &LoadOptions::default());
    }
    Ok(())
}

// ---- the real server ----------------------------------------------------------------------

/// Every unary method of the API.
const METHODS: [&str; 14] = [
    "/authz.v1.Authorizer/Authorize",
    "/authz.v1.Authorizer/BatchAuthorize",
    "/authz.v1.Authorizer/GetAllowedSubjects",
    "/authz.v1.AccessReview/SubjectAccessReview",
    "/authz.v1.AccessReview/PersonalSubjectAccessReview",
    "/authz.v1.AccessReview/LocalSubjectAccessReview",
    "/authz.v1.AccessReview/ResourceAccessReview",
    "/authz.v1.AccessReview/LocalResourceAccessReview",
    "/authz.v1.PolicyAdmin/Apply",
    "/authz.v1.PolicyAdmin/Delete",
    "/authz.v1.PolicyAdmin/Get",
    "/authz.v1.PolicyAdmin/List",
    "/authz.v1.PolicyAdmin/Status",
    "/grpc.health.v1.Health/Check",
];

async fn send_raw(channel: &Channel, method: &str, body: Vec<u8>) -> Result<Vec<u8>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let path = PathAndQuery::try_from(method.to_string()).unwrap();
    grpc.unary(tonic::Request::new(body), path, RawCodec)
        .await
        .map(tonic::Response::into_inner)
}

/// What the server says to a fixed set of questions, and its revision: equal before and
/// after a refused request, or the refusal changed something.
async fn observe(channel: &Channel) -> (u64, Vec<(i32, String)>) {
    let probes = [
        resource_request("alice", &[], "dev", "get", "pods"),
        resource_request("someone", &["interns", "devs"], "dev", "get", "secrets"),
        resource_request("someone", &["devs"], "dev", "delete", "pods"),
        resource_request("bob", &[], "dev", "get", "pods"),
        resource_request("carol", &[], "kube-system", "list", "configmaps"),
    ];
    let mut client = AuthorizerClient::new(channel.clone());
    let mut answers = Vec::new();
    for probe in probes {
        let answer = client.authorize(probe).await.unwrap().into_inner();
        answers.push((answer.decision, answer.reason));
    }
    let status = PolicyAdminClient::new(channel.clone())
        .status(proto::StatusRequest {})
        .await
        .unwrap()
        .into_inner();
    (status.revision, answers)
}

/// Codes a hostile request may get: refused as malformed or too large, or answered (random
/// bytes can decode to a well-formed question), or a write/read of an object that is not
/// there, or a revision not reached.
const ACCEPTABLE: [Code; 6] = [
    Code::Ok,
    Code::InvalidArgument,
    Code::ResourceExhausted,
    Code::NotFound,
    Code::FailedPrecondition,
    Code::PermissionDenied,
];

#[test]
fn raw_grpc_bytes_to_every_method_get_clear_errors_and_change_nothing() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let policy = sample_policy();
    let server = runtime.block_on(Server::start_serving(
        policy.path(),
        &["--max-revision-wait", "50ms"],
    ));
    let channel = runtime.block_on(server.channel());
    let before = runtime.block_on(observe(&channel));

    let valid: Vec<Vec<u8>> = vec![
        resource_request("alice", &["devs"], "dev", "get", "pods").encode_to_vec(),
        proto::SubjectAccessReviewRequest {
            user: "alice".into(),
            action: resource_request("a", &[], "dev", "get", "pods").action,
            ..Default::default()
        }
        .encode_to_vec(),
        proto::DeleteRequest {
            object: Some(proto::ObjectRef {
                kind: "ClusterRole".into(),
                namespace: String::new(),
                name: "pod-reader-not-there".into(),
            }),
            ..Default::default()
        }
        .encode_to_vec(),
    ];
    let input = (
        0..METHODS.len(),
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256),
            (0..valid.len(), prop::collection::vec(mutation(), 1..3))
                .prop_map(move |(i, m)| mutate(&valid[i], &m)),
        ],
    );
    // Generated one by one (no shrinking): each case is a round trip to the server, and a
    // failure message names the method and the status, which is what is needed to fix it.
    let mut runner = TestRunner::new(Config::default());
    let mut codes = std::collections::BTreeMap::<String, usize>::new();
    for _ in 0..300 {
        let (method, body) = input.new_tree(&mut runner).unwrap().current();
        let method = METHODS[method];
        let answer = runtime.block_on(send_raw(&channel, method, body.clone()));
        let code = answer.as_ref().map_or_else(Status::code, |_| Code::Ok);
        *codes.entry(format!("{code:?}")).or_default() += 1;
        if let Err(status) = &answer {
            assert!(
                ACCEPTABLE.contains(&status.code()),
                "{method}: {status:?} for {body:?}"
            );
            assert!(!status.message().is_empty(), "{method}: {status:?}");
        }
    }
    println!("raw gRPC answers by code: {codes:?}");
    assert!(
        codes.get("InvalidArgument").copied().unwrap_or(0) > 0,
        "undecodable input is refused as INVALID_ARGUMENT: {codes:?}"
    );
    assert_eq!(runtime.block_on(observe(&channel)), before);
}

/// Applies `manifest`; if refused, checks the code and that nothing changed. Returns whether
/// it was applied (the caller's baseline then moves on).
async fn apply_and_check(
    channel: &Channel,
    before: &(u64, Vec<(i32, String)>),
    what: &str,
    manifest: String,
) -> bool {
    let answer = PolicyAdminClient::new(channel.clone())
        .max_encoding_message_size(64 * 1024 * 1024)
        .apply(proto::ApplyRequest {
            manifest,
            dry_run: false,
            ..Default::default()
        })
        .await;
    match answer {
        Ok(_) => true,
        Err(status) => {
            assert!(
                matches!(
                    status.code(),
                    Code::InvalidArgument | Code::ResourceExhausted
                ),
                "{what}: {status:?}"
            );
            assert!(!status.message().is_empty(), "{what}: {status:?}");
            assert_eq!(
                &observe(channel).await,
                before,
                "{what}: a refused apply changed something"
            );
            false
        }
    }
}

#[test]
fn hostile_and_mutated_applies_are_refused_and_change_nothing() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let policy = sample_policy();
    let server = runtime.block_on(Server::start_serving(policy.path(), &[]));
    let channel = runtime.block_on(server.channel());
    let mut before = runtime.block_on(observe(&channel));

    let mut fixed = hostile_documents();
    fixed.push((
        "over the 4 MiB message limit",
        format!("# {}\n", "x".repeat(5 * 1024 * 1024)),
        "",
    ));
    for (what, manifest, _) in fixed {
        let started = Instant::now();
        let applied = runtime.block_on(apply_and_check(&channel, &before, what, manifest));
        assert!(!applied, "{what}: applied");
        println!("{what}: refused in {:?}", started.elapsed());
    }

    // Kubernetes puts no length limit on RBAC names: a 1 MB name is applied (it once made
    // the store fail to create a file named after it), and two such names sharing a long
    // prefix both are, read back and deleted.
    let mut admin = runtime.block_on(async { PolicyAdminClient::new(channel.clone()) });
    for suffix in ["a", "b"] {
        let name = format!("{}{suffix}", "n".repeat(1_000_000));
        let manifest = format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {name}\nrules: []\n"
        );
        let object = Some(proto::ObjectRef {
            kind: "ClusterRole".into(),
            namespace: String::new(),
            name,
        });
        runtime.block_on(async {
            admin
                .apply(proto::ApplyRequest {
                    manifest,
                    dry_run: false,
                    ..Default::default()
                })
                .await
                .unwrap();
            let got = admin
                .get(proto::GetRequest {
                    object: object.clone(),
                })
                .await
                .unwrap()
                .into_inner();
            assert!(got.manifest.contains(&format!("n{suffix}")));
            admin
                .delete(proto::DeleteRequest {
                    object,
                    ..Default::default()
                })
                .await
                .unwrap();
        });
    }
    let after = runtime.block_on(observe(&channel));
    assert_eq!(after.1, before.1, "long names came and went");
    before = after;

    let input = (0usize..3, prop::collection::vec(mutation(), 1..4));
    let mut runner = TestRunner::new(Config::default());
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..100 {
        let (which, mutations) = input.new_tree(&mut runner).unwrap().current();
        let original = [SHIPPED_RBAC, SHIPPED_SEED003, RBAC_YAML][which];
        let damaged =
            String::from_utf8_lossy(&mutate(original.as_bytes(), &mutations)).into_owned();
        let what = format!("mutated {mutations:?}");
        if runtime.block_on(apply_and_check(&channel, &before, &what, damaged)) {
            accepted += 1;
            before = runtime.block_on(observe(&channel));
        } else {
            refused += 1;
        }
    }
    println!("mutated manifests: {accepted} applied, {refused} refused");
    assert!(refused > 0, "mutations produced no refusal at all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_policy_file_on_disk_keeps_the_last_good_policy() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let channel = server.channel().await;
    let before = observe(&channel).await;
    let documents = hostile_documents();
    let broken = [
        ("alias bomb", documents[1].1.clone()),
        ("truncated", RBAC_YAML[..RBAC_YAML.len() / 3].to_string()),
        ("duplicate key", documents[5].1.clone()),
    ];
    for (what, content) in broken {
        replace_file(policy.path(), "rbac.yaml", &content);
        let mut admin = PolicyAdminClient::new(channel.clone());
        let deadline = Instant::now() + Duration::from_secs(20);
        let last_error = loop {
            let status = admin
                .status(proto::StatusRequest {})
                .await
                .unwrap()
                .into_inner();
            if !status.last_error.is_empty() {
                break status.last_error;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: the reload error was never reported"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(last_error.contains("rbac.yaml"), "{what}: {last_error}");
        assert_eq!(
            observe(&channel).await,
            before,
            "{what}: the broken file changed the policy"
        );
        // Back to the good file, and wait for the error to clear before the next round.
        replace_file(policy.path(), "rbac.yaml", RBAC_YAML);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let status = admin
                .status(proto::StatusRequest {})
                .await
                .unwrap()
                .into_inner();
            if status.last_error.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: the good file was never reloaded"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let after = observe(&channel).await;
        assert_eq!(
            after.1, before.1,
            "{what}: answers after restoring the good file"
        );
    }
}
