//! Kubernetes protobuf on the HTTP review endpoints, against the real server: a
//! SelfSubjectAccessReview posted as `kubectl auth can-i` posts it (gogo's encoding, every
//! string written even when empty; kubectl's Content-Type and Accept) is answered in protobuf
//! with the status the same review gets as JSON; refusals are protobuf `Status` objects when
//! protobuf is preferred; a body in a media type that is not read gets 415; JSON and bodies
//! without a Content-Type are answered as before.
//!
//! The request bytes are written here by hand and the answers read with messages declared
//! here, from upstream's generated.proto (k8s.io/api `authorization/v1/generated.proto`,
//! k8s.io/apimachinery `pkg/runtime/generated.proto` and `pkg/apis/meta/v1/generated.proto`),
//! independently of the server's own codec.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::net::SocketAddr;

use crate::support::server::{sample_policy, Server};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use prost::Message as _;
use serde_json::{json, Value};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// What kubectl (client-go with protobuf on) sends as Accept.
const KUBECTL_ACCEPT: &str = "application/vnd.kubernetes.protobuf,application/json";
const SSAR_PATH: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

/// alice reads pods cluster-wide (the sample policy); ivan is in `devs` and `interns`, so he
/// may do anything with pods in `dev` and is denied secrets there.
const TOKENS: &str = "alice-token,alice,1\nivan-token,ivan,2,\"devs,interns\"\n";

// --- writing protobuf by hand, as gogo writes it ------------------------------------------

fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A length-delimited field (strings, bytes, messages).
fn bytes_field(number: u64, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    varint((number << 3) | 2, &mut out);
    varint(bytes.len() as u64, &mut out);
    out.extend_from_slice(bytes);
    out
}

fn varint_field(number: u64, value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    varint(number << 3, &mut out);
    varint(value, &mut out);
    out
}

/// The envelope: magic, then runtime.Unknown {typeMeta=1 {apiVersion=1, kind=2}, raw=2,
/// contentEncoding=3, contentType=4}.
fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let type_meta = [
        bytes_field(1, api_version.as_bytes()),
        bytes_field(2, kind.as_bytes()),
    ]
    .concat();
    [
        b"k8s\0".to_vec(),
        bytes_field(1, &type_meta),
        bytes_field(2, raw),
        bytes_field(3, b""),
        bytes_field(4, b""),
    ]
    .concat()
}

/// A SelfSubjectAccessReview as kubectl auth can-i writes it: metadata with every field
/// empty (generation and creationTimestamp included), every resource attribute written, and
/// an empty status.
fn kubectl_ssar(namespace: &str, verb: &str, resource: &str) -> Vec<u8> {
    let metadata = [
        bytes_field(1, b""),
        bytes_field(2, b""),
        bytes_field(3, b""),
        bytes_field(4, b""),
        bytes_field(5, b""),
        bytes_field(6, b""),
        varint_field(7, 0),
        bytes_field(8, b""),
    ]
    .concat();
    let attributes = [
        bytes_field(1, namespace.as_bytes()),
        bytes_field(2, verb.as_bytes()),
        bytes_field(3, b""),
        bytes_field(4, b""),
        bytes_field(5, resource.as_bytes()),
        bytes_field(6, b""),
        bytes_field(7, b""),
    ]
    .concat();
    let spec = bytes_field(1, &attributes);
    let status = [
        varint_field(1, 0),
        bytes_field(2, b""),
        bytes_field(3, b""),
        varint_field(4, 0),
    ]
    .concat();
    let raw = [
        bytes_field(1, &metadata),
        bytes_field(2, &spec),
        bytes_field(3, &status),
    ]
    .concat();
    envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview", &raw)
}

fn json_ssar(namespace: &str, verb: &str, resource: &str) -> String {
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
           "spec": {"resourceAttributes": {"namespace": namespace, "verb": verb, "resource": resource}}})
    .to_string()
}

// --- reading the answers -----------------------------------------------------------------

#[derive(Clone, PartialEq, prost::Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", tag = "2")]
    raw: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TypeMeta {
    #[prost(string, tag = "1")]
    api_version: String,
    #[prost(string, tag = "2")]
    kind: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SelfSubjectAccessReview {
    #[prost(message, optional, tag = "2")]
    spec: Option<Spec>,
    #[prost(message, optional, tag = "3")]
    status: Option<ReviewStatus>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Spec {
    #[prost(message, optional, tag = "1")]
    resource_attributes: Option<ResourceAttributes>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ResourceAttributes {
    #[prost(string, tag = "1")]
    namespace: String,
    #[prost(string, tag = "2")]
    verb: String,
    #[prost(string, tag = "5")]
    resource: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ReviewStatus {
    #[prost(bool, tag = "1")]
    allowed: bool,
    #[prost(string, tag = "2")]
    reason: String,
    #[prost(string, tag = "3")]
    evaluation_error: String,
    #[prost(bool, tag = "4")]
    denied: bool,
}

/// meta/v1 Status, the fields a refusal sets.
#[derive(Clone, PartialEq, prost::Message)]
struct Status {
    #[prost(string, tag = "2")]
    status: String,
    #[prost(string, tag = "3")]
    message: String,
    #[prost(string, tag = "4")]
    reason: String,
    #[prost(int32, tag = "6")]
    code: i32,
}

/// The envelope of a protobuf answer: its `(apiVersion, kind)` and the object's bytes.
fn open_envelope(body: &[u8]) -> ((String, String), Vec<u8>) {
    let inner = body
        .strip_prefix(b"k8s\0")
        .unwrap_or_else(|| panic!("no magic: {}", String::from_utf8_lossy(body)));
    let unknown = Unknown::decode(inner).unwrap();
    let type_meta = unknown.type_meta.unwrap_or_default();
    ((type_meta.api_version, type_meta.kind), unknown.raw)
}

fn protobuf_status(body: &[u8]) -> Status {
    let (type_meta, raw) = open_envelope(body);
    assert_eq!(type_meta, ("v1".into(), "Status".into()));
    Status::decode(raw.as_slice()).unwrap()
}

// --- the HTTP client ---------------------------------------------------------------------

struct Answer {
    code: u16,
    content_type: String,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        assert_eq!(self.content_type, "application/json");
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&self.body)))
    }
}

/// One POST on a fresh HTTP/1.1 connection with `headers`.
async fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Answer {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request =
        http::Request::post(format!("http://{addr}{path}")).header("host", addr.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(request.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap();
    let code = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|value| value.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        code,
        content_type,
        body: body.to_vec(),
    }
}

struct Fixture {
    _policy: tempfile::TempDir,
    _tokens: tempfile::TempDir,
    server: Server,
}

async fn fixture() -> Fixture {
    let policy = sample_policy();
    let tokens = tempfile::tempdir().unwrap();
    let token_file = tokens.path().join("tokens.csv");
    std::fs::write(&token_file, TOKENS).unwrap();
    let server = Server::start_serving(
        policy.path(),
        &[
            "--token-auth-file",
            token_file.to_str().unwrap(),
            "--no-watch",
        ],
    )
    .await;
    Fixture {
        _policy: policy,
        _tokens: tokens,
        server,
    }
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// kubectl auth can-i's review, in protobuf, answered in protobuf with the status the same
/// review gets as JSON: an allow (with its reason), a deny rule and no opinion.
#[tokio::test]
async fn kubectl_can_i_gets_protobuf_answers_that_match_json() {
    let fixture = fixture().await;
    let addr = fixture.server.addr;
    let cases = [
        ("alice-token", "default", "get", "pods", Some(true)),
        ("ivan-token", "dev", "delete", "secrets", None),
        ("alice-token", "dev", "list", "secrets", Some(false)),
    ];
    for (token, namespace, verb, resource, allowed) in cases {
        let authorization = bearer(token);
        let from_json = post(
            addr,
            SSAR_PATH,
            &[
                ("content-type", "application/json"),
                ("authorization", &authorization),
            ],
            json_ssar(namespace, verb, resource).into_bytes(),
        )
        .await;
        assert_eq!(
            from_json.code,
            201,
            "{}",
            String::from_utf8_lossy(&from_json.body)
        );
        let json_status = from_json.json()["status"].clone();

        let from_protobuf = post(
            addr,
            SSAR_PATH,
            &[
                ("content-type", PROTOBUF),
                ("accept", KUBECTL_ACCEPT),
                ("authorization", &authorization),
            ],
            kubectl_ssar(namespace, verb, resource),
        )
        .await;
        assert_eq!(
            from_protobuf.code,
            201,
            "{}",
            String::from_utf8_lossy(&from_protobuf.body)
        );
        assert_eq!(from_protobuf.content_type, PROTOBUF);
        let (type_meta, raw) = open_envelope(&from_protobuf.body);
        assert_eq!(
            type_meta,
            (
                "authorization.k8s.io/v1".into(),
                "SelfSubjectAccessReview".into()
            )
        );
        let review = SelfSubjectAccessReview::decode(raw.as_slice()).unwrap();
        let attributes = review.spec.unwrap().resource_attributes.unwrap();
        assert_eq!(
            (
                attributes.namespace.as_str(),
                attributes.verb.as_str(),
                attributes.resource.as_str()
            ),
            (namespace, verb, resource),
            "the review is echoed"
        );
        let status = review.status.unwrap_or_default();
        let mut as_json = json!({"allowed": status.allowed});
        if status.denied {
            as_json["denied"] = json!(true);
        }
        if !status.reason.is_empty() {
            as_json["reason"] = json!(status.reason);
        }
        if !status.evaluation_error.is_empty() {
            as_json["evaluationError"] = json!(status.evaluation_error);
        }
        assert_eq!(
            as_json, json_status,
            "{token} {verb} {resource} in {namespace}"
        );
        match allowed {
            Some(allowed) => {
                assert_eq!(status.allowed, allowed, "{json_status}");
                assert!(!status.denied, "{json_status}");
            }
            None => assert!(status.denied && !status.allowed, "{json_status}"),
        }
    }

    // The same protobuf review, answered in JSON when JSON is preferred.
    let authorization = bearer("alice-token");
    let answer = post(
        addr,
        SSAR_PATH,
        &[
            ("content-type", PROTOBUF),
            (
                "accept",
                "application/json, application/vnd.kubernetes.protobuf",
            ),
            ("authorization", &authorization),
        ],
        kubectl_ssar("default", "get", "pods"),
    )
    .await;
    assert_eq!(answer.code, 201);
    let answer = answer.json();
    assert_eq!(answer["kind"], "SelfSubjectAccessReview");
    assert_eq!(answer["status"]["allowed"], true, "{answer}");
    assert_eq!(
        answer["spec"],
        json!({"resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods"}})
    );
}

/// Refusals are `Status` objects in protobuf when protobuf is preferred: no credentials (401),
/// a review that fails validation (400), an envelope that does not decode (400), a kind the
/// endpoint does not take (400).
#[tokio::test]
async fn refusals_are_protobuf_statuses_when_protobuf_is_preferred() {
    let fixture = fixture().await;
    let addr = fixture.server.addr;
    let authorization = bearer("alice-token");
    let kubectl = |authorization| {
        vec![
            ("content-type", PROTOBUF),
            ("accept", KUBECTL_ACCEPT),
            ("authorization", authorization),
        ]
    };

    let unauthenticated = post(
        addr,
        SSAR_PATH,
        &[("content-type", PROTOBUF), ("accept", KUBECTL_ACCEPT)],
        kubectl_ssar("default", "get", "pods"),
    )
    .await;
    assert_eq!(unauthenticated.code, 401);
    assert_eq!(unauthenticated.content_type, PROTOBUF);
    let status = protobuf_status(&unauthenticated.body);
    assert_eq!(
        (status.status.as_str(), status.reason.as_str(), status.code),
        ("Failure", "Unauthorized", 401)
    );

    let no_verb = post(
        addr,
        SSAR_PATH,
        &kubectl(&authorization),
        kubectl_ssar("default", "", "pods"),
    )
    .await;
    assert_eq!(no_verb.code, 400);
    let status = protobuf_status(&no_verb.body);
    assert!(
        status.message.starts_with("spec.resourceAttributes.verb: "),
        "{status:?}"
    );

    let truncated = kubectl_ssar("default", "get", "pods");
    let truncated = &truncated[..truncated.len() / 2];
    let answer = post(
        addr,
        SSAR_PATH,
        &kubectl(&authorization),
        truncated.to_vec(),
    )
    .await;
    assert_eq!(answer.code, 400);
    let status = protobuf_status(&answer.body);
    assert_eq!(status.reason, "BadRequest");
    assert!(status.message.contains("does not decode"), "{status:?}");

    let json_as_protobuf = post(
        addr,
        SSAR_PATH,
        &kubectl(&authorization),
        json_ssar("default", "get", "pods").into_bytes(),
    )
    .await;
    assert_eq!(json_as_protobuf.code, 400);
    let status = protobuf_status(&json_as_protobuf.body);
    assert!(status.message.contains("magic bytes"), "{status:?}");

    let pod = post(
        addr,
        SSAR_PATH,
        &kubectl(&authorization),
        envelope("v1", "Pod", b""),
    )
    .await;
    assert_eq!(pod.code, 400);
    let status = protobuf_status(&pod.body);
    assert!(status.message.contains("`Pod` of `v1`"), "{status:?}");

    // A kind the codec reads but this endpoint does not take: the endpoint's own check.
    let sar = envelope("authorization.k8s.io/v1", "SubjectAccessReview", b"");
    let wrong_kind = post(addr, SSAR_PATH, &kubectl(&authorization), sar).await;
    assert_eq!(wrong_kind.code, 400);
    let status = protobuf_status(&wrong_kind.body);
    assert!(
        status
            .message
            .starts_with("kind: must be SelfSubjectAccessReview"),
        "{status:?}"
    );
}

/// A body in a media type authzd does not read gets 415, a `Status` naming the ones it does:
/// JSON by default, protobuf when preferred.
#[tokio::test]
async fn unknown_media_types_get_415() {
    let fixture = fixture().await;
    let addr = fixture.server.addr;
    let authorization = bearer("alice-token");
    let xml = b"<SelfSubjectAccessReview/>".to_vec();
    for path in [
        SSAR_PATH,
        "/authorize",
        "/apis/authorization.kubernetes.io/v1/subjectAccessReviews",
    ] {
        let answer = post(
            addr,
            path,
            &[
                ("content-type", "application/xml"),
                ("authorization", &authorization),
            ],
            xml.clone(),
        )
        .await;
        assert_eq!(answer.code, 415, "{path}");
        let status = answer.json();
        assert_eq!(status["kind"], "Status", "{status}");
        assert_eq!(status["reason"], "UnsupportedMediaType", "{status}");
        assert_eq!(status["code"], 415, "{status}");
        let message = status["message"].as_str().unwrap();
        for named in ["application/xml", "application/json", PROTOBUF] {
            assert!(message.contains(named), "{named} not in {message}");
        }
    }

    let answer = post(
        addr,
        SSAR_PATH,
        &[
            ("content-type", "application/xml"),
            ("accept", KUBECTL_ACCEPT),
            ("authorization", &authorization),
        ],
        xml,
    )
    .await;
    assert_eq!(answer.code, 415);
    let status = protobuf_status(&answer.body);
    assert_eq!(
        (status.reason.as_str(), status.code),
        ("UnsupportedMediaType", 415)
    );
}

/// JSON with its Content-Type, JSON without one (kubectl create --raw), YAML and a form body
/// (curl -d) all give the same JSON answer when no Accept prefers protobuf; a JSON review whose
/// Accept does prefer it is answered in protobuf. The seed's shapes have no protobuf form and
/// stay JSON even when protobuf is preferred.
#[tokio::test]
async fn json_and_untyped_bodies_are_answered_as_before() {
    let fixture = fixture().await;
    let addr = fixture.server.addr;
    let authorization = bearer("alice-token");
    let body = json_ssar("default", "get", "pods");
    let yaml = "apiVersion: authorization.k8s.io/v1\nkind: SelfSubjectAccessReview\nspec:\n  \
                resourceAttributes: {namespace: default, verb: get, resource: pods}\n";
    let mut answers = Vec::new();
    for (content_type, body) in [
        (Some("application/json"), body.clone()),
        (None, body.clone()),
        (Some("application/yaml"), yaml.to_string()),
        (None, yaml.to_string()),
        (Some("application/x-www-form-urlencoded"), body.clone()),
    ] {
        let mut headers = vec![("authorization", authorization.as_str())];
        if let Some(content_type) = content_type {
            headers.push(("content-type", content_type));
        }
        let answer = post(addr, SSAR_PATH, &headers, body.into_bytes()).await;
        assert_eq!(answer.code, 201, "{content_type:?}");
        answers.push(answer.json());
    }
    assert_eq!(answers[0]["status"]["allowed"], true, "{}", answers[0]);
    assert!(
        answers.iter().all(|answer| *answer == answers[0]),
        "{answers:?}"
    );

    let protobuf = post(
        addr,
        SSAR_PATH,
        &[
            ("content-type", "application/json"),
            ("accept", KUBECTL_ACCEPT),
            ("authorization", &authorization),
        ],
        body.into_bytes(),
    )
    .await;
    assert_eq!(protobuf.code, 201);
    assert_eq!(protobuf.content_type, PROTOBUF);
    let (_, raw) = open_envelope(&protobuf.body);
    let status = SelfSubjectAccessReview::decode(raw.as_slice())
        .unwrap()
        .status
        .unwrap();
    assert!(status.allowed, "{status:?}");
    assert_eq!(
        status.reason,
        answers[0]["status"]["reason"].as_str().unwrap()
    );

    let seed = post(
        addr,
        "/apis/authorization.kubernetes.io/v1/personalSubjectAccessReviews",
        &[
            ("accept", KUBECTL_ACCEPT),
            ("authorization", &authorization),
        ],
        br#"{"authorizationAttributes": {"verb": "get", "resource": "pods"}}"#.to_vec(),
    )
    .await;
    assert_eq!(seed.code, 201);
    assert_eq!(seed.json()["kind"], "PersonalSubjectAccessReviewResponse");
}

/// Every truncation and many single-byte changes of kubectl's review get an answer — the
/// review (201) or a protobuf `Status` (400) — and the server keeps serving.
#[tokio::test]
async fn mutated_protobuf_bodies_get_answers_not_dropped_connections() {
    let fixture = fixture().await;
    let addr = fixture.server.addr;
    let authorization = bearer("alice-token");
    let headers = [
        ("content-type", PROTOBUF),
        ("accept", KUBECTL_ACCEPT),
        ("authorization", authorization.as_str()),
    ];
    let good = kubectl_ssar("default", "get", "pods");
    let mut bodies: Vec<Vec<u8>> = (0..good.len()).map(|end| good[..end].to_vec()).collect();
    for at in (0..good.len()).step_by(3) {
        for byte in [0x00, 0x7f, 0xff] {
            let mut mutated = good.clone();
            mutated[at] = byte;
            bodies.push(mutated);
        }
    }
    let mut reviewed = 0;
    for body in bodies {
        let answer = post(addr, SSAR_PATH, &headers, body.clone()).await;
        assert_eq!(answer.content_type, PROTOBUF, "{body:?}");
        match answer.code {
            201 => reviewed += 1,
            400 => {
                let status = protobuf_status(&answer.body);
                assert_eq!(status.reason, "BadRequest", "{body:?}: {status:?}");
            }
            other => panic!("{other} for {body:?}"),
        }
    }
    assert!(reviewed > 0, "no mutation left a readable review");
    let answer = post(addr, SSAR_PATH, &headers, good).await;
    assert_eq!(answer.code, 201);
}
