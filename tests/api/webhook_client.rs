//! The Webhook authorizer's client against a real webhook started in the test (hyper on
//! 127.0.0.1:0, plain HTTP or TLS with rcgen certificates) that answers what each test
//! scripts: decisions, retried and unretried failures, stalls, garbage; the cache's TTLs and
//! flags as upstream's `TestV1WebhookCache` describes them; the bodies as the webhook
//! received them; bearer tokens and client certificates as presented.
//!
//! No assertion waits on a short timer to see an answer cached: "cached" is asserted with
//! TTLs of an hour, "expired" after advancing tokio's clock several times a short TTL. The
//! client takes its time from tokio (TTLs, backoff, timeouts), so the tests of expiry, backoff
//! and timeouts run on a paused clock (`start_paused`): virtual time, no real waiting.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use crate::support::ca::Ca;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use authzd::engine::Decision;
use authzd::request::{Action, NonResourceAttributes, Request, ResourceAttributes, UserInfo};
use authzd::webhook::{
    FailurePolicy, RetryBackoff, WebhookAnswer, WebhookAuthorizer, WebhookSettings, WebhookVersion,
};
use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};
use tokio::net::TcpListener;

// --- the webhook ---------------------------------------------------------------------------

/// One scripted answer.
#[derive(Clone, Debug)]
enum Reply {
    /// 200 with this status.
    Review {
        allowed: bool,
        denied: bool,
        reason: &'static str,
    },
    /// This HTTP status with a short body, and `Retry-After` when given.
    Http(u16, Option<u64>),
    /// Never answers.
    Stall,
    /// 200 with this body.
    Body(Vec<u8>),
}

const ALLOW: Reply = Reply::Review {
    allowed: true,
    denied: false,
    reason: "allowed by the test",
};
const DENY: Reply = Reply::Review {
    allowed: false,
    denied: true,
    reason: "denied by the test",
};
const NO_OPINION: Reply = Reply::Review {
    allowed: false,
    denied: false,
    reason: "no opinion",
};

/// What the webhook received.
#[derive(Clone, Debug)]
struct Received {
    method: String,
    path_and_query: String,
    version: http::Version,
    content_type: Option<String>,
    authorization: Option<String>,
    body: Value,
    /// The client certificate presented in the TLS handshake, if any.
    client_certificate: Option<Vec<u8>>,
}

#[derive(Default)]
struct Script {
    /// Answers to give first, in order...
    first: VecDeque<Reply>,
    /// ...then this one, every time.
    then: Option<Reply>,
}

struct Webhook {
    address: SocketAddr,
    script: Arc<Mutex<Script>>,
    received: Arc<Mutex<Vec<Received>>>,
    connections: Arc<AtomicUsize>,
}

/// TLS for the webhook: its certificate, and the CA its clients' certificates must come from.
struct ServerTls {
    cert_pem: String,
    key_pem: String,
    client_ca_pem: Option<String>,
}

impl Webhook {
    async fn plain() -> Webhook {
        Webhook::start(None).await
    }

    async fn start(tls: Option<ServerTls>) -> Webhook {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let webhook = Webhook {
            address,
            script: Arc::new(Mutex::new(Script {
                then: Some(ALLOW),
                ..Script::default()
            })),
            received: Arc::default(),
            connections: Arc::default(),
        };
        let acceptor =
            tls.map(|tls| tokio_rustls::TlsAcceptor::from(Arc::new(server_config(&tls))));
        let (script, received, connections) = (
            webhook.script.clone(),
            webhook.received.clone(),
            webhook.connections.clone(),
        );
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                connections.fetch_add(1, Ordering::SeqCst);
                let (script, received, acceptor) =
                    (script.clone(), received.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match acceptor {
                        None => serve(TokioIo::new(tcp), script, received, None).await,
                        Some(acceptor) => {
                            // A refused handshake is the client's answer to read, not ours.
                            let Ok(tls) = acceptor.accept(tcp).await else {
                                return;
                            };
                            let presented = tls
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|chain| chain.first())
                                .map(|leaf| leaf.as_ref().to_vec());
                            serve(TokioIo::new(tls), script, received, presented).await
                        }
                    }
                });
            }
        });
        webhook
    }

    fn url(&self, scheme: &str, path: &str) -> String {
        format!("{scheme}://{}{path}", self.address)
    }

    /// Answers `first` in order, then `then` every time; forgets what was received.
    fn script(&self, first: &[Reply], then: Reply) {
        *self.script.lock().unwrap() = Script {
            first: first.iter().cloned().collect(),
            then: Some(then),
        };
        self.received.lock().unwrap().clear();
    }

    fn answer(&self, reply: Reply) {
        self.script(&[], reply);
    }

    fn calls(&self) -> usize {
        self.received.lock().unwrap().len()
    }

    fn last(&self) -> Received {
        self.received
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a call")
    }
}

async fn serve<IO>(
    io: TokioIo<IO>,
    script: Arc<Mutex<Script>>,
    received: Arc<Mutex<Vec<Received>>>,
    client_certificate: Option<Vec<u8>>,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
        let (script, received, client_certificate) =
            (script.clone(), received.clone(), client_certificate.clone());
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            let header = |name: http::header::HeaderName| {
                parts
                    .headers
                    .get(name)
                    .map(|v| v.to_str().unwrap().to_string())
            };
            received.lock().unwrap().push(Received {
                method: parts.method.to_string(),
                path_and_query: parts.uri.path_and_query().unwrap().to_string(),
                version: parts.version,
                content_type: header(http::header::CONTENT_TYPE),
                authorization: header(http::header::AUTHORIZATION),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                client_certificate,
            });
            let reply = {
                let mut script = script.lock().unwrap();
                script.first.pop_front().or(script.then.clone()).unwrap()
            };
            Ok::<_, Infallible>(respond(reply).await)
        }
    });
    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
        .serve_connection(io, service)
        .await;
}

async fn respond(reply: Reply) -> http::Response<Full<Bytes>> {
    let (status, body, retry_after) = match reply {
        Reply::Review {
            allowed,
            denied,
            reason,
        } => (
            200,
            json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "status": {"allowed": allowed, "denied": denied, "reason": reason}
            })
            .to_string()
            .into_bytes(),
            None,
        ),
        Reply::Http(status, retry_after) => (status, b"HTTP Error".to_vec(), retry_after),
        Reply::Stall => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            (200, Vec::new(), None)
        }
        Reply::Body(body) => (200, body, None),
    };
    let mut response = http::Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if let Some(seconds) = retry_after {
        response = response.header("retry-after", seconds.to_string());
    }
    response.body(Full::new(Bytes::from(body))).unwrap()
}

fn server_config(tls: &ServerTls) -> rustls::ServerConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = CertificateDer::pem_slice_iter(tls.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(tls.key_pem.as_bytes()).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match &tls.client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                roots.add(cert.unwrap()).unwrap();
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config
}

// --- the client's side -----------------------------------------------------------------------

/// Waits short enough that five attempts take well under a second.
const QUICK_RETRIES: RetryBackoff = RetryBackoff {
    initial: Duration::from_millis(5),
    factor: 1.5,
    jitter: 0.2,
    attempts: 5,
};

const HOUR: Duration = Duration::from_secs(3600);

fn base64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A kubeconfig in a directory of its own, with any other files beside it.
struct Kubeconfig {
    dir: tempfile::TempDir,
}

impl Kubeconfig {
    /// `cluster` and `user` are the YAML flow mappings of one cluster and one user, chosen by
    /// the current context.
    fn new(cluster: &str, user: &str) -> Kubeconfig {
        let kubeconfig = Kubeconfig {
            dir: tempfile::tempdir().unwrap(),
        };
        kubeconfig.write(
            "kubeconfig",
            &format!(
                "apiVersion: v1
kind: Config
clusters:
- name: authz
  cluster: {cluster}
users:
- name: authzd
  user: {user}
contexts:
- name: webhook
  context: {{cluster: authz, user: authzd}}
current-context: webhook
"
            ),
        );
        kubeconfig
    }

    fn plain(webhook: &Webhook) -> Kubeconfig {
        Kubeconfig::new(
            &format!("{{server: '{}'}}", webhook.url("http", "/authorize")),
            "{}",
        )
    }

    fn write(&self, name: &str, content: &str) {
        std::fs::write(self.dir.path().join(name), content).unwrap();
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    fn settings(&self) -> WebhookSettings {
        WebhookSettings {
            name: "test-webhook".to_string(),
            version: WebhookVersion::V1,
            ..WebhookSettings::flag_defaults(self.path())
        }
    }

    fn authorizer(&self, change: impl FnOnce(&mut WebhookSettings)) -> WebhookAuthorizer {
        let mut settings = self.settings();
        change(&mut settings);
        WebhookAuthorizer::new(settings)
            .unwrap()
            .with_retry_backoff(QUICK_RETRIES)
    }
}

fn uncached(settings: &mut WebhookSettings) {
    settings.cache_authorized = false;
    settings.cache_unauthorized = false;
}

fn user(name: &str) -> UserInfo {
    UserInfo {
        name: name.to_string(),
        ..UserInfo::default()
    }
}

/// `user` lists pods in `kittensandponies`.
fn list_pods(name: &str) -> Request {
    Request {
        user: user(name),
        action: Action::Resource(ResourceAttributes {
            namespace: "kittensandponies".into(),
            verb: "list".into(),
            version: "v1".into(),
            resource: "pods".into(),
            ..ResourceAttributes::default()
        }),
    }
}

/// Upstream's "ridiculous" request: 10000 bytes of attributes.
fn ridiculous(name: &str) -> Request {
    let long = |c: &str| c.repeat(2000);
    Request {
        user: user(name),
        action: Action::Resource(ResourceAttributes {
            namespace: "kittensandponies".into(),
            verb: long("v"),
            group: long("g"),
            version: long("a"),
            resource: long("r"),
            name: long("n"),
            ..ResourceAttributes::default()
        }),
    }
}

fn assert_answer(answer: &WebhookAnswer, decision: Decision, cached: bool) {
    assert_eq!(answer.decision, decision, "{answer:?}");
    assert_eq!(answer.cached, cached, "{answer:?}");
}

fn error_of(answer: &WebhookAnswer) -> &str {
    answer
        .error
        .as_deref()
        .unwrap_or_else(|| panic!("no error in {answer:?}"))
}

// --- decisions -------------------------------------------------------------------------------

#[tokio::test]
async fn the_status_decides_and_the_reason_is_passed_on() {
    let webhook = Webhook::plain().await;
    let authorizer = Kubeconfig::plain(&webhook).authorizer(uncached);
    let alice = list_pods("alice");
    for (reply, decision) in [
        (ALLOW, Decision::Allow),
        (DENY, Decision::Deny),
        (NO_OPINION, Decision::NoOpinion),
    ] {
        webhook.answer(reply.clone());
        let answer = authorizer.authorize(&alice).await;
        assert_answer(&answer, decision, false);
        assert_eq!(answer.error, None);
        let Reply::Review { reason, .. } = reply else {
            unreachable!()
        };
        assert_eq!(answer.reason, reason);
        assert_eq!(webhook.calls(), 1);
    }
    webhook.answer(Reply::Review {
        allowed: true,
        denied: true,
        reason: "confused",
    });
    let both = authorizer.authorize(&alice).await;
    assert_answer(&both, Decision::Deny, false);
    assert_eq!(both.reason, "confused");
    assert!(error_of(&both).contains("both allow and deny"));
}

#[tokio::test]
async fn a_webhook_that_changes_its_mind_is_heard_when_nothing_is_cached() {
    let webhook = Webhook::plain().await;
    let authorizer = Kubeconfig::plain(&webhook).authorizer(uncached);
    let alice = list_pods("alice");
    webhook.answer(ALLOW);
    assert_answer(&authorizer.authorize(&alice).await, Decision::Allow, false);
    webhook.answer(DENY);
    assert_answer(&authorizer.authorize(&alice).await, Decision::Deny, false);
    webhook.answer(ALLOW);
    assert_answer(&authorizer.authorize(&alice).await, Decision::Allow, false);
}

// --- the bodies sent -------------------------------------------------------------------------

fn jane() -> Request {
    Request {
        user: UserInfo {
            name: "jane".into(),
            uid: "1".into(),
            groups: vec!["group1".into(), "group2".into()],
            extra: [("scopes".to_string(), vec!["view".to_string()])].into(),
        },
        action: Action::Resource(ResourceAttributes {
            namespace: "kittensandponies".into(),
            verb: "GET".into(),
            group: "group3".into(),
            version: "v7beta3".into(),
            resource: "pods".into(),
            subresource: "proxy".into(),
            name: "my-pod".into(),
        }),
    }
}

#[tokio::test]
async fn v1_and_v1beta1_bodies_as_the_webhook_received_them() {
    let webhook = Webhook::plain().await;
    let kubeconfig = Kubeconfig::new(
        &format!(
            "{{server: '{}'}}",
            webhook.url("http", "/authorize?tenant=a")
        ),
        "{}",
    );
    let spec = |groups_field: &str| {
        json!({
            "resourceAttributes": {
                "namespace": "kittensandponies", "verb": "GET", "group": "group3",
                "version": "v7beta3", "resource": "pods", "subresource": "proxy",
                "name": "my-pod"
            },
            "user": "jane",
            groups_field: ["group1", "group2"],
            "extra": {"scopes": ["view"]},
            "uid": "1"
        })
    };
    for (version, api_version, groups_field) in [
        (WebhookVersion::V1, "authorization.k8s.io/v1", "groups"),
        (
            WebhookVersion::V1beta1,
            "authorization.k8s.io/v1beta1",
            "group",
        ),
    ] {
        let authorizer = kubeconfig.authorizer(|s| s.version = version);
        webhook.answer(ALLOW);
        assert_answer(&authorizer.authorize(&jane()).await, Decision::Allow, false);
        let received = webhook.last();
        assert_eq!(received.method, "POST");
        // The exact path (and query) of the kubeconfig's server, as client-go posts.
        assert_eq!(received.path_and_query, "/authorize?tenant=a");
        assert_eq!(received.content_type.as_deref(), Some("application/json"));
        assert_eq!(received.authorization, None);
        assert_eq!(
            received.body,
            json!({
                "apiVersion": api_version,
                "kind": "SubjectAccessReview",
                "spec": spec(groups_field)
            })
        );
    }
}

/// Upstream's `TestV1Webhook`: an empty non-resource request still says it is one.
#[tokio::test]
async fn an_empty_request_sends_empty_non_resource_attributes() {
    let webhook = Webhook::plain().await;
    let authorizer = Kubeconfig::plain(&webhook).authorizer(|_| {});
    let nobody = Request {
        user: UserInfo::default(),
        action: Action::NonResource(NonResourceAttributes::default()),
    };
    authorizer.authorize(&nobody).await;
    assert_eq!(
        webhook.last().body["spec"],
        json!({"nonResourceAttributes": {}})
    );
}

// --- failures and retries --------------------------------------------------------------------

#[tokio::test]
async fn server_errors_and_429_are_retried_until_an_answer() {
    let webhook = Webhook::plain().await;
    let authorizer = Kubeconfig::plain(&webhook).authorizer(uncached);
    webhook.script(
        &[
            Reply::Http(500, None),
            Reply::Http(429, None),
            Reply::Http(502, None),
        ],
        ALLOW,
    );
    let answer = authorizer.authorize(&list_pods("alice")).await;
    assert_answer(&answer, Decision::Allow, false);
    assert_eq!(answer.error, None);
    assert_eq!(webhook.calls(), 4);
}

/// Upstream's `DefaultAuthWebhookRetryBackoff`: the first wait is 0.5 to 0.6 s (of tokio's
/// paused clock).
#[tokio::test(start_paused = true)]
async fn upstreams_backoff_waits_half_a_second_first() {
    let webhook = Webhook::plain().await;
    let authorizer = WebhookAuthorizer::new(Kubeconfig::plain(&webhook).settings()).unwrap();
    webhook.script(&[Reply::Http(500, None)], ALLOW);
    let started = tokio::time::Instant::now();
    assert_answer(
        &authorizer.authorize(&list_pods("alice")).await,
        Decision::Allow,
        false,
    );
    assert_eq!(webhook.calls(), 2);
    assert!(started.elapsed() >= Duration::from_millis(500));
}

/// Upstream's cache test: "server errors retry" and "429s retry" make 5 calls each.
#[tokio::test]
async fn five_failed_attempts_apply_the_failure_policy() {
    let webhook = Webhook::plain().await;
    let kubeconfig = Kubeconfig::plain(&webhook);
    for (code, policy, decision) in [
        (500, FailurePolicy::NoOpinion, Decision::NoOpinion),
        (429, FailurePolicy::Deny, Decision::Deny),
    ] {
        let authorizer = kubeconfig.authorizer(|s| s.failure_policy = policy);
        webhook.answer(Reply::Http(code, None));
        let answer = authorizer.authorize(&list_pods("alice")).await;
        assert_answer(&answer, decision, false);
        assert_eq!(answer.reason, "");
        let error = error_of(&answer);
        assert!(error.contains(&code.to_string()), "{error}");
        assert!(error.contains("after 5 attempts"), "{error}");
        assert!(error.contains("test-webhook"), "{error}");
        assert_eq!(webhook.calls(), 5);
    }
}

/// Upstream's cache test: 404, 403 and 401 are not retried; nor is 400, nor 503 unless the
/// answer asks for a delay.
#[tokio::test]
async fn client_errors_are_not_retried() {
    let webhook = Webhook::plain().await;
    let authorizer = Kubeconfig::plain(&webhook).authorizer(|_| {});
    for code in [400, 401, 403, 404, 503] {
        webhook.answer(Reply::Http(code, None));
        let answer = authorizer.authorize(&list_pods("alice")).await;
        assert_answer(&answer, Decision::NoOpinion, false);
        let error = error_of(&answer);
        assert!(error.contains(&code.to_string()), "{error}");
        assert!(error.contains("HTTP Error"), "the body is quoted: {error}");
        assert_eq!(webhook.calls(), 1, "{code} was retried");
    }
    webhook.script(&[Reply::Http(503, Some(1))], DENY);
    assert_answer(
        &authorizer.authorize(&list_pods("alice")).await,
        Decision::Deny,
        false,
    );
    assert_eq!(webhook.calls(), 2, "a 503 with Retry-After is retried");
}

#[tokio::test(start_paused = true)]
async fn a_stalled_webhook_times_out_into_the_failure_policy() {
    let webhook = Webhook::plain().await;
    let kubeconfig = Kubeconfig::plain(&webhook);
    webhook.answer(Reply::Stall);
    for (policy, decision) in [
        (FailurePolicy::NoOpinion, Decision::NoOpinion),
        (FailurePolicy::Deny, Decision::Deny),
    ] {
        let authorizer = kubeconfig.authorizer(|s| {
            s.timeout = Duration::from_millis(300);
            s.failure_policy = policy;
        });
        let started = tokio::time::Instant::now();
        // The outer bound turns a timeout that does not fire into a failure, not a hang.
        let answer = tokio::time::timeout(
            Duration::from_secs(20),
            authorizer.authorize(&list_pods("alice")),
        )
        .await
        .expect("the webhook's timeout fired");
        assert_answer(&answer, decision, false);
        assert!(error_of(&answer).contains("did not answer within"));
        assert!(started.elapsed() < Duration::from_secs(20));
    }
}

/// The timeout bounds the retries too: with upstream's waits (0.5 s, then 0.75 s) a second of
/// budget leaves room for two attempts at most, and no wait is begun that would outlast it.
#[tokio::test(start_paused = true)]
async fn retries_end_within_the_timeout() {
    let webhook = Webhook::plain().await;
    let kubeconfig = Kubeconfig::plain(&webhook);
    let mut settings = kubeconfig.settings();
    settings.timeout = Duration::from_secs(1);
    let authorizer = WebhookAuthorizer::new(settings).unwrap();
    webhook.answer(Reply::Http(500, None));
    let started = tokio::time::Instant::now();
    let answer = authorizer.authorize(&list_pods("alice")).await;
    assert_answer(&answer, Decision::NoOpinion, false);
    assert!(
        (1..=2).contains(&webhook.calls()),
        "{} calls",
        webhook.calls()
    );
    // As upstream, the error is the webhook's last one, not the end of the time allowed.
    assert!(error_of(&answer).contains("500"), "{answer:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn garbage_is_an_error_and_never_cached() {
    let webhook = Webhook::plain().await;
    let authorizer = Kubeconfig::plain(&webhook).authorizer(|s| s.unauthorized_ttl = HOUR);
    let alice = list_pods("alice");
    let oversized = {
        let mut body = br#"{"status":{"allowed":true,"reason":""#.to_vec();
        body.extend(std::iter::repeat_n(b'x', 2 << 20));
        body.extend(br#""}}"#);
        body
    };
    for (garbage, expected) in [
        (
            b"<html>not json</html>".to_vec(),
            "not a SubjectAccessReview",
        ),
        (Vec::new(), "empty body"),
        (
            br#"{"status":{"allowed":"yes"}}"#.to_vec(),
            "not a SubjectAccessReview",
        ),
        (oversized, "larger than"),
    ] {
        webhook.answer(Reply::Body(garbage));
        let answer = authorizer.authorize(&alice).await;
        assert_answer(&answer, Decision::NoOpinion, false);
        let error = error_of(&answer);
        assert!(error.contains(expected), "{error}");
        assert_eq!(webhook.calls(), 1, "not retried");
    }
    webhook.answer(ALLOW);
    assert_answer(&authorizer.authorize(&alice).await, Decision::Allow, false);
}

#[tokio::test]
async fn an_unreachable_webhook_fails_at_once_into_the_failure_policy() {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = closed.local_addr().unwrap();
    drop(closed);
    let kubeconfig = Kubeconfig::new(&format!("{{server: 'http://{address}/'}}"), "{}");
    let authorizer = kubeconfig.authorizer(|s| s.failure_policy = FailurePolicy::Deny);
    let answer = authorizer.authorize(&list_pods("alice")).await;
    assert_answer(&answer, Decision::Deny, false);
    let error = error_of(&answer);
    assert!(
        !error.contains("attempts"),
        "a refused connection is not retried: {error}"
    );
}

// --- the cache -------------------------------------------------------------------------------

/// Upstream's `TestV1WebhookCache`, step by step (errors are never cached; answers are, for
/// their TTL; ridiculous requests never are).
#[tokio::test]
async fn answers_are_cached_and_errors_are_not() {
    let webhook = Webhook::plain().await;
    let authorizer = Kubeconfig::plain(&webhook).authorizer(|s| {
        s.authorized_ttl = HOUR;
        s.unauthorized_ttl = HOUR;
    });
    let (alice, bob) = (list_pods("alice"), list_pods("bob"));
    let steps: &[(&Request, Reply, Decision, bool, usize)] = &[
        // (request, the webhook's answer, decision, from the cache, calls)
        (
            &alice,
            Reply::Http(500, None),
            Decision::NoOpinion,
            false,
            5,
        ),
        (
            &alice,
            Reply::Http(429, None),
            Decision::NoOpinion,
            false,
            5,
        ),
        (
            &alice,
            Reply::Http(404, None),
            Decision::NoOpinion,
            false,
            1,
        ),
        (&alice, ALLOW, Decision::Allow, false, 1),
        (&alice, Reply::Http(500, None), Decision::Allow, true, 0),
        (&bob, Reply::Http(500, None), Decision::NoOpinion, false, 5),
        (&bob, DENY, Decision::Deny, false, 1),
        (&bob, Reply::Http(500, None), Decision::Deny, true, 0),
    ];
    for (i, (request, reply, decision, cached, calls)) in steps.iter().enumerate() {
        webhook.answer(reply.clone());
        let answer = authorizer.authorize(request).await;
        assert_eq!(
            (answer.decision, answer.cached, webhook.calls()),
            (*decision, *cached, *calls),
            "step {i}: {answer:?}"
        );
    }
    for name in ["bob", "alice"] {
        for reply in [NO_OPINION, ALLOW] {
            webhook.answer(reply);
            assert!(!authorizer.authorize(&ridiculous(name)).await.cached);
            assert!(!authorizer.authorize(&ridiculous(name)).await.cached);
            assert_eq!(webhook.calls(), 2, "ridiculous requests are not cached");
        }
    }
}

#[tokio::test]
async fn no_opinion_is_cached_as_unauthorized() {
    let webhook = Webhook::plain().await;
    let authorizer = Kubeconfig::plain(&webhook).authorizer(|s| {
        s.authorized_ttl = Duration::ZERO;
        s.unauthorized_ttl = HOUR;
    });
    webhook.answer(NO_OPINION);
    authorizer.authorize(&list_pods("alice")).await;
    let again = authorizer.authorize(&list_pods("alice")).await;
    assert_answer(&again, Decision::NoOpinion, true);
    assert_eq!(again.reason, "no opinion");
    assert_eq!(webhook.calls(), 1);
}

/// Each kind of answer lives for its own TTL: checked once with allows short-lived and once
/// with the rest short-lived; the long-lived kind stays cached meanwhile. On a paused clock:
/// five short TTLs pass at once.
#[tokio::test(start_paused = true)]
async fn each_kind_of_answer_lives_for_its_own_ttl() {
    let short = Duration::from_millis(100);
    let webhook = Webhook::plain().await;
    let kubeconfig = Kubeconfig::plain(&webhook);
    for allows_short_lived in [true, false] {
        let authorizer = kubeconfig.authorizer(|s| {
            (s.authorized_ttl, s.unauthorized_ttl) = if allows_short_lived {
                (short, HOUR)
            } else {
                (HOUR, short)
            };
        });
        let (allowed, denied) = (list_pods("alice"), list_pods("bob"));
        webhook.answer(ALLOW);
        authorizer.authorize(&allowed).await;
        webhook.answer(DENY);
        authorizer.authorize(&denied).await;
        tokio::time::advance(short * 5).await;
        webhook.answer(Reply::Http(404, None));
        let (expired, kept) = if allows_short_lived {
            (&allowed, &denied)
        } else {
            (&denied, &allowed)
        };
        let kept_answer = authorizer.authorize(kept).await;
        assert!(kept_answer.cached, "{kept_answer:?}");
        assert_eq!(webhook.calls(), 0);
        let expired_answer = authorizer.authorize(expired).await;
        assert_answer(&expired_answer, Decision::NoOpinion, false);
        assert_eq!(webhook.calls(), 1, "the short-lived answer expired");
    }
}

#[tokio::test]
async fn a_kind_of_answer_not_cached_is_asked_every_time() {
    let webhook = Webhook::plain().await;
    let kubeconfig = Kubeconfig::plain(&webhook);
    for cache_allows in [false, true] {
        let authorizer = kubeconfig.authorizer(|s| {
            s.authorized_ttl = HOUR;
            s.unauthorized_ttl = HOUR;
            s.cache_authorized = cache_allows;
            s.cache_unauthorized = !cache_allows;
        });
        let (allowed, denied) = (list_pods("alice"), list_pods("bob"));
        for _ in 0..2 {
            webhook.answer(ALLOW);
            authorizer.authorize(&allowed).await;
            webhook.answer(DENY);
            authorizer.authorize(&denied).await;
        }
        webhook.answer(ALLOW);
        let allowed_again = authorizer.authorize(&allowed).await;
        webhook.answer(DENY);
        let denied_again = authorizer.authorize(&denied).await;
        assert_eq!(allowed_again.cached, cache_allows);
        assert_eq!(denied_again.cached, !cache_allows);
    }
}

/// The chain holds webhooks behind `Arc` and awaits them in boxed `Send` futures.
#[tokio::test]
async fn the_authorizer_and_its_answers_cross_tasks() {
    fn send<T: Send>(value: T) -> T {
        value
    }
    let webhook = Webhook::plain().await;
    let authorizer = Kubeconfig::plain(&webhook).authorizer(|_| {});
    assert_eq!(authorizer.name(), "test-webhook");
    let request = list_pods("alice");
    let answer = send(authorizer.authorize(&request)).await;
    assert_answer(&answer, Decision::Allow, false);
}

#[tokio::test]
async fn connections_are_reused_and_the_authorizer_is_shared() {
    let webhook = Webhook::plain().await;
    let authorizer = Arc::new(Kubeconfig::plain(&webhook).authorizer(uncached));
    for _ in 0..3 {
        authorizer.authorize(&list_pods("alice")).await;
    }
    assert_eq!(webhook.calls(), 3);
    assert_eq!(webhook.connections.load(Ordering::SeqCst), 1);
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let authorizer = authorizer.clone();
            tokio::spawn(async move { authorizer.authorize(&list_pods(&format!("u{i}"))).await })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().decision, Decision::Allow);
    }
    assert_eq!(webhook.calls(), 35);
}

// --- credentials and TLS ---------------------------------------------------------------------

#[tokio::test]
async fn a_bearer_token_is_presented() {
    let webhook = Webhook::plain().await;
    let server = webhook.url("http", "/");
    let inline = Kubeconfig::new(&format!("{{server: '{server}'}}"), "{token: s3cr3t}");
    inline
        .authorizer(|_| {})
        .authorize(&list_pods("alice"))
        .await;
    assert_eq!(
        webhook.last().authorization.as_deref(),
        Some("Bearer s3cr3t")
    );

    let from_file = Kubeconfig::new(&format!("{{server: '{server}'}}"), "{tokenFile: token}");
    from_file.write("token", "from-the-file\n");
    from_file
        .authorizer(|_| {})
        .authorize(&list_pods("alice"))
        .await;
    assert_eq!(
        webhook.last().authorization.as_deref(),
        Some("Bearer from-the-file")
    );
}

/// A webhook on TLS that requires a client certificate from `ca`.
async fn tls_webhook(ca: &Ca) -> Webhook {
    let server = ca.leaf(&["127.0.0.1", "localhost"], "webhook", &[]);
    Webhook::start(Some(ServerTls {
        cert_pem: server.pem,
        key_pem: server.key_pem,
        client_ca_pem: Some(ca.pem.clone()),
    }))
    .await
}

#[tokio::test]
async fn tls_with_files_relative_to_the_kubeconfig() {
    let ca = Ca::new("webhook CA");
    let webhook = tls_webhook(&ca).await;
    let client = ca.leaf(&[], "authzd", &[]);
    let kubeconfig = Kubeconfig::new(
        &format!(
            "{{server: '{}', certificate-authority: ca.crt}}",
            webhook.url("https", "/authorize")
        ),
        "{client-certificate: certs/authzd.crt, client-key: certs/authzd.key}",
    );
    kubeconfig.write("ca.crt", &ca.pem);
    std::fs::create_dir(kubeconfig.dir.path().join("certs")).unwrap();
    kubeconfig.write("certs/authzd.crt", &client.pem);
    kubeconfig.write("certs/authzd.key", &client.key_pem);
    let answer = kubeconfig
        .authorizer(|_| {})
        .authorize(&list_pods("alice"))
        .await;
    assert_answer(&answer, Decision::Allow, false);
    let received = webhook.last();
    assert_eq!(
        received.client_certificate.as_deref(),
        Some(&client.der[..])
    );
    // The webhook offered h2 and the client took it, as Go's client does.
    assert_eq!(received.version, http::Version::HTTP_2);
}

#[tokio::test]
async fn tls_with_inline_data() {
    let ca = Ca::new("webhook CA");
    let webhook = tls_webhook(&ca).await;
    let client = ca.leaf(&[], "authzd", &[]);
    let kubeconfig = Kubeconfig::new(
        &format!(
            "{{server: '{}', certificate-authority-data: {}}}",
            webhook.url("https", "/"),
            base64(&ca.pem)
        ),
        &format!(
            "{{client-certificate-data: {}, client-key-data: {}, token: also-a-token}}",
            base64(&client.pem),
            base64(&client.key_pem)
        ),
    );
    let answer = kubeconfig
        .authorizer(|_| {})
        .authorize(&list_pods("alice"))
        .await;
    assert_answer(&answer, Decision::Allow, false);
    let received = webhook.last();
    assert_eq!(
        received.client_certificate.as_deref(),
        Some(&client.der[..])
    );
    assert_eq!(
        received.authorization.as_deref(),
        Some("Bearer also-a-token")
    );
}

#[tokio::test]
async fn a_webhook_the_ca_does_not_vouch_for_is_not_asked() {
    let webhook_ca = Ca::new("webhook CA");
    let webhook = tls_webhook(&webhook_ca).await;
    let other_ca = Ca::new("some other CA");
    let client = webhook_ca.leaf(&[], "authzd", &[]);
    let kubeconfig = Kubeconfig::new(
        &format!(
            "{{server: '{}', certificate-authority-data: {}}}",
            webhook.url("https", "/"),
            base64(&other_ca.pem)
        ),
        &format!(
            "{{client-certificate-data: {}, client-key-data: {}}}",
            base64(&client.pem),
            base64(&client.key_pem)
        ),
    );
    let answer = kubeconfig
        .authorizer(|s| s.failure_policy = FailurePolicy::Deny)
        .authorize(&list_pods("alice"))
        .await;
    assert_answer(&answer, Decision::Deny, false);
    assert!(error_of(&answer).contains("certificate"), "{answer:?}");
    assert_eq!(webhook.calls(), 0);

    // insecure-skip-tls-verify: the same webhook is asked without a CA.
    let insecure = Kubeconfig::new(
        &format!(
            "{{server: '{}', insecure-skip-tls-verify: true}}",
            webhook.url("https", "/")
        ),
        &format!(
            "{{client-certificate-data: {}, client-key-data: {}}}",
            base64(&client.pem),
            base64(&client.key_pem)
        ),
    );
    let answer = insecure
        .authorizer(|_| {})
        .authorize(&list_pods("alice"))
        .await;
    assert_answer(&answer, Decision::Allow, false);
}

#[tokio::test]
async fn without_a_client_certificate_the_webhook_refuses_the_handshake() {
    let ca = Ca::new("webhook CA");
    let webhook = tls_webhook(&ca).await;
    let kubeconfig = Kubeconfig::new(
        &format!(
            "{{server: '{}', certificate-authority-data: {}}}",
            webhook.url("https", "/"),
            base64(&ca.pem)
        ),
        "{}",
    );
    let answer = kubeconfig
        .authorizer(|_| {})
        .authorize(&list_pods("alice"))
        .await;
    assert_answer(&answer, Decision::NoOpinion, false);
    assert!(answer.error.is_some());
    assert_eq!(webhook.calls(), 0);
}

// --- startup ---------------------------------------------------------------------------------

fn startup_error(kubeconfig: &Kubeconfig) -> String {
    WebhookAuthorizer::new(kubeconfig.settings())
        .map(|_| ())
        .expect_err("the kubeconfig loaded")
        .to_string()
}

#[test]
fn a_bad_kubeconfig_is_a_startup_error_naming_the_problem() {
    let missing_ca = Kubeconfig::new(
        "{server: 'https://authz.example.com', certificate-authority: ca.crt}",
        "{}",
    );
    let error = startup_error(&missing_ca);
    let expected_path = missing_ca.dir.path().join("ca.crt");
    for part in [
        "webhook `test-webhook`",
        &missing_ca.path().display().to_string(),
        "cannot read `certificate-authority`",
        &expected_path.display().to_string(),
    ] {
        assert!(error.contains(part), "{error:?} does not say {part:?}");
    }

    let exec = Kubeconfig::new(
        "{server: 'https://authz.example.com', insecure-skip-tls-verify: true}",
        "{exec: {apiVersion: client.authentication.k8s.io/v1, command: get-token}}",
    );
    assert!(startup_error(&exec).contains("exec credential plugins"));

    let not_a_file = Kubeconfig::new("{}", "{}");
    let settings = WebhookSettings {
        kubeconfig: not_a_file.dir.path().join("absent"),
        ..not_a_file.settings()
    };
    let error = WebhookAuthorizer::new(settings).unwrap_err().to_string();
    assert!(error.contains("cannot read it"), "{error}");
}

#[test]
fn a_zero_timeout_is_refused() {
    let kubeconfig = Kubeconfig::new("{server: 'http://127.0.0.1:1'}", "{}");
    let settings = WebhookSettings {
        timeout: Duration::ZERO,
        ..kubeconfig.settings()
    };
    let error = WebhookAuthorizer::new(settings).unwrap_err().to_string();
    assert!(error.contains("timeout"), "{error}");
}
