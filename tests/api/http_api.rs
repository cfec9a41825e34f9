//! The HTTP/JSON endpoints against the real server: the Kubernetes webhook contract (v1 and
//! v1beta1), seed 000's review paths, JSON and YAML bodies without a Content-Type, refusals
//! as Kubernetes `Status` objects, body limits, `/healthz` and `/readyz`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::net::SocketAddr;

use crate::support::server::{metric, sample_policy, Server};
use crate::support::wait::eventually;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::time::Duration;

/// One HTTP/1.1 request on a fresh connection; no Content-Type unless given in `headers`.
async fn send<B>(addr: SocketAddr, request: http::Request<B>) -> (u16, Vec<u8>)
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, body.to_vec())
}

async fn post(addr: SocketAddr, path: &str, body: &str) -> (u16, Value) {
    let request = http::Request::post(format!("http://{addr}{path}"))
        .header("host", addr.to_string())
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let (status, body) = send(addr, request).await;
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&body)));
    (status, value)
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let request = http::Request::get(format!("http://{addr}{path}"))
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, body) = send(addr, request).await;
    (status, String::from_utf8(body).unwrap())
}

fn webhook_review(api_version: &str, groups_key: &str, spec: Value) -> String {
    let mut spec = spec;
    if let Some(groups) = spec.as_object_mut().unwrap().remove("groups") {
        spec[groups_key] = groups;
    }
    json!({"apiVersion": api_version, "kind": "SubjectAccessReview", "spec": spec}).to_string()
}

/// A webhook round trip in both versions: the answer echoes the apiVersion and kind and
/// fills `status`; HTTP 200.
async fn webhook_both_versions(addr: SocketAddr, spec: Value) -> Value {
    let mut answers = Vec::new();
    for (version, groups_key) in [
        ("authorization.k8s.io/v1", "groups"),
        ("authorization.k8s.io/v1beta1", "group"),
    ] {
        let body = webhook_review(version, groups_key, spec.clone());
        let (code, answer) = post(addr, "/authorize", &body).await;
        assert_eq!(code, 200, "{answer}");
        assert_eq!(answer["apiVersion"], version);
        assert_eq!(answer["kind"], "SubjectAccessReview");
        answers.push(answer["status"].clone());
    }
    assert_eq!(answers[0], answers[1], "v1 and v1beta1 must decide alike");
    answers.remove(0)
}

#[tokio::test]
async fn webhook_answers_allowed_denied_no_opinion_and_evaluation_errors() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let addr = server.addr;

    // Allowed through a group: proves `groups` (v1) and `group` (v1beta1) are both read.
    let allowed = webhook_both_versions(
        addr,
        json!({"user": "dave", "groups": ["readers"], "uid": "42", "extra": {"scopes": ["a"]},
               "resourceAttributes": {"namespace": "dev", "verb": "get", "group": "",
                                      "version": "v1", "resource": "pods", "name": "web"}}),
    )
    .await;
    assert_eq!(allowed["allowed"], true, "{allowed}");
    assert!(allowed.get("denied").is_none(), "{allowed}");
    assert!(
        allowed["reason"].as_str().unwrap().contains("read-pods"),
        "{allowed}"
    );

    // A deny rule: denied, and the field is present only then.
    let denied = webhook_both_versions(
        addr,
        json!({"user": "ivan", "groups": ["devs", "interns"],
               "resourceAttributes": {"namespace": "dev", "verb": "get", "resource": "secrets"}}),
    )
    .await;
    assert_eq!(denied["allowed"], false, "{denied}");
    assert_eq!(denied["denied"], true, "{denied}");

    // No opinion: not allowed, no `denied`.
    let no_opinion = webhook_both_versions(
        addr,
        json!({"user": "bob", "resourceAttributes": {"verb": "delete", "resource": "nodes"}}),
    )
    .await;
    assert_eq!(no_opinion["allowed"], false, "{no_opinion}");
    assert!(no_opinion.get("denied").is_none(), "{no_opinion}");

    // eve's binding names a missing Role: an evaluation error, still an answer.
    let errored = webhook_both_versions(
        addr,
        json!({"user": "eve",
               "resourceAttributes": {"namespace": "dev", "verb": "get", "resource": "pods"}}),
    )
    .await;
    assert_eq!(errored["allowed"], false, "{errored}");
    assert!(
        errored["evaluationError"]
            .as_str()
            .unwrap()
            .contains("ghost"),
        "{errored}"
    );

    // Non-resource attributes: alice reads pods only, so no opinion on /healthz... but the
    // super-group may do anything.
    let non_resource = webhook_both_versions(
        addr,
        json!({"user": "root", "groups": ["system:masters"],
               "nonResourceAttributes": {"path": "/healthz", "verb": "get"}}),
    )
    .await;
    assert_eq!(non_resource["allowed"], true, "{non_resource}");
}

#[tokio::test]
async fn webhook_path_is_configurable() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &["--webhook-path", "/hook/sar"]).await;
    let body = webhook_review(
        "authorization.k8s.io/v1",
        "groups",
        json!({"user": "alice", "resourceAttributes": {"verb": "get", "resource": "pods"}}),
    );
    let (code, answer) = post(server.addr, "/hook/sar", &body).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["status"]["allowed"], true);
    let (code, answer) = post(server.addr, "/authorize", &body).await;
    assert_eq!(code, 404, "{answer}");
    assert_eq!(answer["kind"], "Status");
}

#[tokio::test]
async fn seed_000_paths_answer_in_the_seed_shapes() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let addr = server.addr;
    let base = "/apis/authorization.kubernetes.io/v1";

    let (code, answer) = post(
        addr,
        &format!("{base}/subjectAccessReviews"),
        r#"{"kind": "SubjectAccessReview", "apiVersion": "authorization.kubernetes.io/v1",
            "authorizationAttributes": {"verb": "list", "resource": "pods"},
            "user": "Clark", "groups": ["readers", "managers"]}"#,
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["kind"], "SubjectAccessReviewResponse");
    assert_eq!(answer["apiVersion"], "authorization.kubernetes.io/v1");
    assert_eq!(answer["allowed"], true, "{answer}");

    let (code, answer) = post(
        addr,
        &format!("{base}/subjectAccessReviews"),
        r#"{"authorizationAttributes": {"verb": "create", "resource": "pods"}, "user": "Clark"}"#,
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["allowed"], false, "{answer}");

    // The caller (the local identity, system:masters) may do anything.
    let (code, answer) = post(
        addr,
        &format!("{base}/personalSubjectAccessReviews"),
        r#"{"kind": "PersonalSubjectAccessReview", "apiVersion": "authorization.kubernetes.io/v1",
            "authorizationAttributes": {"verb": "create", "resource": "pods", "namespace": "any-ns"}}"#,
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["kind"], "PersonalSubjectAccessReviewResponse");
    assert_eq!(answer["namespace"], "any-ns");
    assert_eq!(answer["allowed"], true, "{answer}");

    // The path's namespace is the review's: devs may create pods in dev only.
    let local = r#"{"kind": "LocalSubjectAccessReview", "apiVersion": "authorization.kubernetes.io/v1",
        "authorizationAttributes": {"verb": "create", "resource": "pods"},
        "user": "Clark", "groups": ["devs"]}"#;
    let (code, answer) = post(
        addr,
        &format!("{base}/ns/dev/localSubjectAccessReviews"),
        local,
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["kind"], "LocalSubjectAccessReviewResponse");
    assert_eq!(answer["namespace"], "dev");
    assert_eq!(answer["allowed"], true, "{answer}");
    let (_, answer) = post(
        addr,
        &format!("{base}/ns/prod/localSubjectAccessReviews"),
        local,
    )
    .await;
    assert_eq!(answer["namespace"], "prod");
    assert_eq!(answer["allowed"], false, "{answer}");

    let (code, answer) = post(
        addr,
        &format!("{base}/resourceAccessReviews"),
        r#"{"kind": "ResourceAccessReview", "apiVersion": "authorization.kubernetes.io/v1",
            "authorizationAttributes": {"verb": "list", "resource": "pods"}}"#,
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["kind"], "ResourceAccessReviewResponse");
    assert_eq!(answer["users"], json!(["alice"]), "{answer}");
    assert_eq!(
        answer["groups"],
        json!(["readers", "system:masters"]),
        "{answer}"
    );

    let (code, answer) = post(
        addr,
        &format!("{base}/ns/dev/localResourceAccessReviews"),
        r#"{"kind": "LocalResourceAccessReview",
            "authorizationAttributes": {"verb": "get", "resource": "secrets"}}"#,
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["kind"], "LocalResourceAccessReviewResponse");
    assert_eq!(answer["namespace"], "dev");
    let groups = answer["groups"].as_array().unwrap();
    assert!(groups.contains(&json!("devs")), "{answer}");
    assert_eq!(answer["deniedGroups"], json!(["interns"]), "{answer}");
}

#[tokio::test]
async fn yaml_and_json_bodies_without_content_type_decide_alike() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let yaml = "apiVersion: authorization.k8s.io/v1\nkind: SubjectAccessReview\nspec:\n  \
                user: alice\n  resourceAttributes:\n    verb: list\n    resource: pods\n";
    let json = r#"{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "spec": {"user": "alice", "resourceAttributes": {"verb": "list", "resource": "pods"}}}"#;
    let (yaml_code, from_yaml) = post(server.addr, path, yaml).await;
    let (json_code, from_json) = post(server.addr, path, json).await;
    assert_eq!(
        (yaml_code, json_code),
        (201, 201),
        "{from_yaml} {from_json}"
    );
    assert_eq!(from_yaml["status"]["allowed"], true, "{from_yaml}");
    assert_eq!(from_yaml, from_json);
    assert_eq!(from_yaml["spec"]["user"], "alice", "the object is echoed");
}

/// Each refusal is a Kubernetes `Status` with HTTP 400 naming the offending field.
#[tokio::test]
async fn malformed_reviews_are_refused_naming_the_field() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let sar = |spec: &str| {
        format!(
            r#"{{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {spec}}}"#
        )
    };
    let cases = [
        ("/authorize", sar(r#"{"user": "a", "groups": ["x", 7], "resourceAttributes": {"verb": "get"}}"#), "spec.groups[1]"),
        ("/authorize", sar(r#"{"user": "a", "resourceAttributes": {"verb": ""}}"#), "spec.resourceAttributes.verb"),
        ("/authorize", sar(r#"{"user": "a"}"#), "spec.resourceAttributes"),
        ("/authorize", sar(r#"{"user": "a", "resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"verb": "get", "path": "/x"}}"#), "spec.nonResourceAttributes"),
        ("/authorize", sar(r#"{"resourceAttributes": {"verb": "get"}}"#), "spec.user"),
        ("/authorize", r#"{"apiVersion": "authorization.k8s.io/v2", "kind": "SubjectAccessReview", "spec": {}}"#.to_string(), "apiVersion"),
        ("/authorize", r#"{"apiVersion": "authorization.k8s.io/v1", "kind": "Pod", "spec": {}}"#.to_string(), "kind"),
        ("/apis/authorization.k8s.io/v1/subjectaccessreviews", sar(r#"{"user": "a", "resourceAttributes": {"verb": "get", "resource": 5}}"#), "spec.resourceAttributes.resource"),
        ("/apis/authorization.kubernetes.io/v1/subjectAccessReviews", r#"{"user": "a", "authorizationAttributes": {"resource": "pods"}}"#.to_string(), "authorizationAttributes.verb"),
        ("/apis/authorization.kubernetes.io/v1/subjectAccessReviews", format!(r#"{{"user": "a", "authorizationAttributes": {{"verb": "get", "resourceName": "{}"}}}}"#, "n".repeat(5000)), "authorizationAttributes.resourceName"),
    ];
    for (path, body, field) in cases {
        let (code, answer) = post(server.addr, path, &body).await;
        assert_eq!(code, 400, "{path} {body}: {answer}");
        assert_eq!(answer["kind"], "Status");
        assert_eq!(answer["apiVersion"], "v1");
        assert_eq!(answer["status"], "Failure");
        assert_eq!(answer["reason"], "BadRequest");
        assert_eq!(answer["code"], 400);
        let message = answer["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{field}: ")),
            "want {field}, got {message}"
        );
    }

    // Not JSON, not YAML, absurdly deep: 400, and the server keeps serving.
    for body in [
        "{not json".to_string(),
        "\u{0}\u{1}binary".to_string(),
        format!(
            "{{\"spec\": {}{}}}",
            "[".repeat(200_000),
            "]".repeat(200_000)
        ),
        format!("spec: {}{}", "[".repeat(200_000), "]".repeat(200_000)),
        String::new(),
    ] {
        let (code, answer) = post(server.addr, "/authorize", &body).await;
        assert_eq!(code, 400, "{answer}");
        assert_eq!(answer["kind"], "Status");
    }
    let (code, _) = get(server.addr, "/healthz").await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn local_review_namespace_must_match_the_path() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let path = "/apis/authorization.k8s.io/v1/namespaces/dev/localsubjectaccessreviews";
    let review = |namespace: &str| {
        format!(
            r#"{{"apiVersion": "authorization.k8s.io/v1", "kind": "LocalSubjectAccessReview",
                "spec": {{"groups": ["devs"], "resourceAttributes": {{"namespace": "{namespace}", "verb": "delete", "resource": "pods"}}}}}}"#
        )
    };
    let (code, answer) = post(server.addr, path, &review("dev")).await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["status"]["allowed"], true, "{answer}");
    assert_eq!(answer["metadata"]["namespace"], "dev");
    for namespace in ["prod", ""] {
        let (code, answer) = post(server.addr, path, &review(namespace)).await;
        assert_eq!(code, 400, "{answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(
            message.starts_with("spec.resourceAttributes.namespace: "),
            "{message}"
        );
    }
}

/// A server that kept reading an endless body would never answer: fail instead of hanging.
async fn refused_in_time<T>(answer: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(30), answer)
        .await
        .expect("the server kept reading an oversized body instead of refusing it")
}

#[tokio::test]
async fn oversized_bodies_get_413_declared_or_chunked() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    let limit = authzd::api::limits::MAX_REQUEST_BYTES;

    // The bodies below never end: the server must answer from what it has read (a body that
    // ended could race the refusal and fail the client's write instead).
    let endless = |bytes: usize| {
        let chunks = (0..bytes.div_ceil(65_536)).map(|_| {
            Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(vec![b' '; 65_536])))
        });
        StreamBody::new(tokio_stream::StreamExt::chain(
            tokio_stream::iter(chunks),
            tokio_stream::pending(),
        ))
    };

    // A declared Content-Length over the limit is refused before reading.
    let declared = http::Request::post(format!("http://{}/authorize", server.addr))
        .header("host", server.addr.to_string())
        .header("content-length", (limit + 1).to_string())
        .body(endless(65_536))
        .unwrap();
    let (code, body) = refused_in_time(send(server.addr, declared)).await;
    assert_eq!(code, 413, "{}", String::from_utf8_lossy(&body));
    let status: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status["reason"], "RequestEntityTooLarge");
    assert_eq!(status["code"], 413);

    // No Content-Length (chunked): counted as the chunks arrive.
    let chunked = http::Request::post(format!("http://{}/authorize", server.addr))
        .header("host", server.addr.to_string())
        .body(endless(limit + 1))
        .unwrap();
    let (code, body) = refused_in_time(send(server.addr, chunked)).await;
    assert_eq!(code, 413, "{}", String::from_utf8_lossy(&body));

    // Just under the limit is read (and refused only for what it says).
    let (code, _) = post(server.addr, "/authorize", &" ".repeat(limit - 10)).await;
    assert_eq!(code, 400);
}

#[tokio::test]
async fn healthz_readyz_and_unknown_paths() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &[]).await;
    assert_eq!(get(server.addr, "/healthz").await.0, 200);
    assert_eq!(get(server.addr, "/readyz").await.0, 200);
    let (code, body) = get(server.addr, "/no/such/path").await;
    assert_eq!(code, 404);
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["reason"], "NotFound");
    // GET on the webhook is refused, not evaluated.
    let (code, _) = get(server.addr, "/authorize").await;
    assert_eq!(code, 405);
}

/// `?minRevision=N` is gRPC's `min_revision`: answered once reached, refused when the server
/// does not get there in time.
#[tokio::test]
async fn min_revision_query_behaves_as_on_grpc() {
    let policy = sample_policy();
    let server = Server::start_serving(policy.path(), &["--max-revision-wait", "100ms"]).await;
    let body = r#"{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "spec": {"user": "alice", "resourceAttributes": {"verb": "get", "resource": "pods"}}}"#;
    let path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let (code, answer) = post(server.addr, &format!("{path}?minRevision=1"), body).await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["status"]["allowed"], true);

    let (code, answer) = post(server.addr, "/authorize?minRevision=50", body).await;
    assert_eq!(code, 400, "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(message.contains("server is at revision 1"), "{message}");

    let (code, answer) = post(server.addr, &format!("{path}?minRevision=soon"), body).await;
    assert_eq!(code, 400, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .starts_with("minRevision: "),
        "{answer}"
    );
}

/// SIGTERM: the in-flight request (here one waiting for a revision) still gets its answer,
/// new connections are refused, readiness is gone, and the process exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_requests_and_takes_no_new_ones() {
    let policy = sample_policy();
    let mut server = Server::start_serving(policy.path(), &["--max-revision-wait", "1500ms"]).await;
    let addr = server.addr;
    let body = r#"{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "spec": {"user": "alice", "resourceAttributes": {"verb": "get", "resource": "pods"}}}"#;
    let in_flight = tokio::spawn(async move { post(addr, "/authorize?minRevision=9", body).await });
    // In flight once `/metrics` counts it beside the scrape itself.
    eventually(
        Duration::from_secs(10),
        || "the waiting request never reached the server".to_string(),
        || async { (metric(addr, "authzd_requests_in_flight").await >= Some(2.0)).then_some(()) },
    )
    .await;

    let exited = tokio::task::spawn_blocking(move || {
        let exited = server.terminate(std::time::Duration::from_secs(20));
        (exited, server)
    });
    // Draining: new connections are refused while the request is still in flight (it waits
    // up to --max-revision-wait, 1.5 s).
    eventually(
        Duration::from_secs(10),
        || "new connections were still accepted after SIGTERM".to_string(),
        || async {
            tokio::net::TcpStream::connect(addr)
                .await
                .is_err()
                .then_some(())
        },
    )
    .await;
    assert!(
        !in_flight.is_finished(),
        "the listener closed only after the in-flight request was answered"
    );

    let (code, answer) = in_flight.await.unwrap();
    assert_eq!(code, 400, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("server is at revision 1"),
        "{answer}"
    );
    let (exited, server) = exited.await.unwrap();
    assert!(exited, "no graceful exit; stderr:\n{}", server.stderr());
}
