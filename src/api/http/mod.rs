//! HTTP/JSON endpoints: adapters only. Each turns the body into the proto request the gRPC
//! service takes and calls the same `GrpcApi` method, with the HTTP headers as metadata and
//! the request extensions (the connection's identity) carried over, so authentication,
//! privilege checks, limits and answers are the same on both transports.
//!
//! * the Kubernetes authorization webhook (`--webhook-path`, `/authorize` by default);
//! * kube-apiserver's review paths (`/apis/authorization.k8s.io/v1/...`), as `kubectl create
//!   --raw` posts them;
//! * seed 000's paths (`/apis/authorization.kubernetes.io/v1/...`);
//! * the OpenID AuthZEN Authorization API 1.0 (`/access/v1/...`, its metadata at
//!   `/.well-known/authzen-configuration`; [`authzen`], docs/authzen.md);
//! * `/healthz` and `/readyz`, open to every caller (probes carry no credentials);
//! * `/metrics`, when the composition root gives it a page to render ([`metrics`]: guarded by
//!   the policy once authentication is configured).

mod authzen;
pub mod conditional;
mod discovery;
mod document;
mod kube_protobuf;
mod kube_review;
pub mod metrics;
mod reviews;
mod self_reviews;
mod status;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::response::Response;
use axum::routing::{get, post};
use http::StatusCode;
use tokio::sync::watch;

use crate::api::grpc::GrpcApi;
use crate::serving::{Readiness, ServingState};

pub use authzen::{AuthzenConfig, BaseUrl, KeyError, PageTokenKey};
pub use document::MAX_DOCUMENT_DEPTH;

/// What the HTTP handlers need. Cheap to clone.
#[derive(Clone)]
pub struct HttpApi {
    grpc: GrpcApi,
    state: Arc<ServingState>,
    draining: watch::Receiver<bool>,
    webhook_path: Arc<str>,
    /// KEP-5681 conditional authorization on the webhook path (alpha; [`conditional`]).
    conditional_authorization: bool,
    /// The listeners have TLS: the AuthZEN metadata names `https` URLs ([`authzen`]).
    https: bool,
    /// The AuthZEN metadata's base URL and the page tokens' key ([`authzen`]).
    authzen: Arc<AuthzenConfig>,
    /// `/metrics`, served when set ([`metrics`]).
    metrics: Option<metrics::MetricsEndpoint>,
}

impl HttpApi {
    pub fn new(
        grpc: GrpcApi,
        state: Arc<ServingState>,
        draining: watch::Receiver<bool>,
        webhook_path: &str,
        authzen: AuthzenConfig,
    ) -> Self {
        Self {
            grpc,
            state,
            draining,
            webhook_path: Arc::from(webhook_path),
            conditional_authorization: false,
            https: false,
            authzen: Arc::new(authzen),
            metrics: None,
        }
    }

    /// Serves `/metrics` ([`metrics`]).
    pub fn with_metrics(mut self, endpoint: metrics::MetricsEndpoint) -> Self {
        self.metrics = Some(endpoint);
        self
    }

    /// The listeners serve TLS (`--tls-cert-file`): URLs the server names are `https`.
    pub fn with_https(mut self, on: bool) -> Self {
        self.https = on;
        self
    }

    /// Turns on KEP-5681 conditional authorization (`--alpha-conditional-authorization`).
    pub fn with_conditional_authorization(mut self, on: bool) -> Self {
        self.conditional_authorization = on;
        self
    }
}

const K8S_V1: &str = "/apis/authorization.k8s.io/v1";
const SEED_V1: &str = "/apis/authorization.kubernetes.io/v1";

/// Merges the HTTP endpoints into `grpc` (tonic's routes as an axum router) and installs the
/// one fallback: the webhook path (configurable, so matched here rather than as a route that
/// could collide with a fixed one), gRPC's UNIMPLEMENTED for gRPC calls to unknown methods,
/// and a 404 `Status` for everything else.
pub fn router(grpc: axum::Router, api: HttpApi) -> axum::Router {
    let http = axum::Router::new()
        .route(
            &format!("{K8S_V1}/subjectaccessreviews"),
            post(reviews::kube_subject_access_review),
        )
        .route(
            &format!("{K8S_V1}/selfsubjectaccessreviews"),
            post(reviews::kube_self_subject_access_review),
        )
        .route(
            &format!("{K8S_V1}/selfsubjectrulesreviews"),
            post(self_reviews::kube_self_subject_rules_review),
        )
        .route(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            post(self_reviews::kube_self_subject_review),
        )
        .route(
            &format!("{K8S_V1}/namespaces/{{namespace}}/localsubjectaccessreviews"),
            post(reviews::kube_local_subject_access_review),
        )
        .route(
            &format!("{SEED_V1}/subjectAccessReviews"),
            post(reviews::seed_subject_access_review),
        )
        .route(
            &format!("{SEED_V1}/personalSubjectAccessReviews"),
            post(reviews::seed_personal_subject_access_review),
        )
        .route(
            &format!("{SEED_V1}/ns/{{namespace}}/localSubjectAccessReviews"),
            post(reviews::seed_local_subject_access_review),
        )
        .route(
            &format!("{SEED_V1}/resourceAccessReviews"),
            post(reviews::seed_resource_access_review),
        )
        .route(
            &format!("{SEED_V1}/ns/{{namespace}}/localResourceAccessReviews"),
            post(reviews::seed_local_resource_access_review),
        )
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(discovery::routes())
        .merge(authzen::routes());
    let http = match api.metrics.clone() {
        Some(endpoint) => http.route(
            "/metrics",
            get(move |State(api): State<HttpApi>, request: Request| {
                metrics::scrape(api, endpoint.clone(), request)
            }),
        ),
        None => http,
    };
    let http = if api.conditional_authorization {
        http.route(
            "/apis/authorization.k8s.io/v1alpha1/authorizationconditionsreviews",
            post(reviews::authorization_conditions_review),
        )
    } else {
        http
    };
    let http = http.with_state(api.clone());
    // Our fallback replaces tonic's (which answered UNIMPLEMENTED to anything, HTTP included).
    http.merge(grpc)
        .fallback(move |request: Request| fallback(api.clone(), request))
}

/// 200 while the process serves requests at all.
async fn healthz() -> Response {
    plain(StatusCode::OK, "ok")
}

/// 200 once the first policy has compiled and while not shutting down or fenced (etcd mode);
/// 503 otherwise, so a load balancer stops sending before the listener closes.
async fn readyz(State(api): State<HttpApi>) -> Response {
    if *api.draining.borrow() {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    }
    match api.state.readiness() {
        Readiness::NoPolicy => plain(StatusCode::SERVICE_UNAVAILABLE, "no policy loaded yet"),
        Readiness::Fenced => plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "fenced: this replica cannot prove its policy current with etcd",
        ),
        Readiness::Ready => plain(StatusCode::OK, "ok"),
    }
}

fn plain(code: StatusCode, text: &'static str) -> Response {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = code;
    response
}

async fn fallback(api: HttpApi, request: Request) -> Response {
    let is_grpc = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/grpc"));
    if is_grpc {
        let (parts, ()) = tonic::Status::unimplemented("")
            .into_http::<()>()
            .into_parts();
        return Response::from_parts(parts, Body::empty());
    }
    if request.uri().path() == &*api.webhook_path {
        if request.method() != http::Method::POST {
            return status::failure(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "the webhook accepts POST only",
            );
        }
        return reviews::webhook(api, request).await;
    }
    status::failure(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("no endpoint at {}", request.uri().path()),
    )
}

/// Path parameter of the namespaced review paths.
type Namespace = Path<String>;

/// The AuthZEN settings of a server in a unit test: no base URL, a random key.
#[cfg(test)]
pub(crate) fn test_authzen() -> AuthzenConfig {
    AuthzenConfig {
        base_url: None,
        page_tokens: PageTokenKey::random().unwrap(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tower::ServiceExt as _;

    use super::*;
    use crate::api::authn::LocalIdentity;
    use crate::cache::CacheConfig;
    use crate::engine::EngineConfig;
    use crate::policy::impact::Impact;
    use crate::policy::model::PolicySet;
    use crate::store::ChangeCause;
    use crate::store::Publisher as _;

    async fn readyz_status(api: &HttpApi) -> StatusCode {
        let request = http::Request::get("/readyz").body(Body::empty()).unwrap();
        router(axum::Router::new(), api.clone())
            .oneshot(request)
            .await
            .unwrap()
            .status()
    }

    /// Not ready before the first policy, ready after it, not ready again once draining.
    #[tokio::test]
    async fn readyz_follows_the_first_policy_and_draining() {
        let state = Arc::new(ServingState::new(
            EngineConfig::default(),
            CacheConfig::default(),
        ));
        let identity = Arc::new(LocalIdentity::new("me".into(), vec![]));
        let grpc = GrpcApi::new(Arc::clone(&state), identity);
        let (draining, draining_rx) = watch::channel(false);
        let api = HttpApi::new(
            grpc,
            Arc::clone(&state),
            draining_rx,
            "/authorize",
            test_authzen(),
        );

        assert_eq!(readyz_status(&api).await, StatusCode::SERVICE_UNAVAILABLE);
        state.publish(
            &PolicySet::default(),
            1,
            &Impact::default(),
            ChangeCause::Reload,
            None,
        );
        assert_eq!(readyz_status(&api).await, StatusCode::OK);
        draining.send(true).unwrap();
        assert_eq!(readyz_status(&api).await, StatusCode::SERVICE_UNAVAILABLE);
    }

    /// alice reads pods cluster-wide; interns are denied secrets in `dev` (a deny rule).
    const FENCE_POLICY: &str = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: pod-reader}\nrules: [{apiGroups: [\"\"], resources: [pods], verbs: [get]}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: alice-reads}\nsubjects: [{kind: User, name: alice}]\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-reader}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: no-secrets, namespace: dev}\nrules: [{apiGroups: [\"\"], resources: [secrets], verbs: [\"*\"], deny: true}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: interns-no-secrets, namespace: dev}\nsubjects: [{kind: Group, name: interns}]\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: no-secrets}\n";

    /// A server holding [`FENCE_POLICY`] (the caller `me` a super-user), held to a freshness
    /// that has never been proved (so fenced) with `on_stale`; `None`: directory mode.
    fn fenced_api(on_stale: Option<crate::store::etcd::replication::OnStale>) -> HttpApi {
        use crate::store::etcd::replication::Freshness;
        let config = EngineConfig {
            super_users: vec!["me".into()],
            ..EngineConfig::default()
        };
        let state = Arc::new(ServingState::new(config, CacheConfig::default()));
        let mut policy = PolicySet::default();
        let objects = crate::policy::load::parse_manifest(
            "fence.yaml",
            FENCE_POLICY,
            &crate::policy::load::LoadOptions::default(),
        )
        .unwrap();
        for object in objects {
            policy.push(object)
        }
        policy.canonicalize();
        state.publish(&policy, 1, &Impact::everything(), ChangeCause::Reload, None);
        if let Some(on_stale) = on_stale {
            state.set_freshness(Arc::new(Freshness::new(Duration::from_secs(1), on_stale)));
        }
        let identity = Arc::new(LocalIdentity::new("me".into(), vec![]));
        let grpc = GrpcApi::new(Arc::clone(&state), identity);
        let (_draining, draining_rx) = watch::channel(false);
        HttpApi::new(grpc, state, draining_rx, "/authorize", test_authzen())
    }

    async fn post(api: &HttpApi, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        use http_body_util::BodyExt as _;
        let request = http::Request::post(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = router(axum::Router::new(), api.clone())
            .oneshot(request)
            .await
            .unwrap();
        let code = response.status().as_u16();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (code, serde_json::from_slice(&bytes).unwrap())
    }

    fn webhook_review(
        user: &str,
        groups: &[&str],
        namespace: &str,
        resource: &str,
    ) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": groups,
                "resourceAttributes": {"namespace": namespace, "verb": "get", "resource": resource}
            }
        })
    }

    /// While fenced (etcd mode, `--on-stale unavailable`), the SubjectAccessReview-shaped
    /// endpoints answer an allow "no opinion" (allowed false, no denied, why in
    /// evaluationError) where gRPC says UNAVAILABLE; a deny is still a deny; who-can is still
    /// refused (503). Unfenced, the same request is allowed; `--on-stale deny-allows` denies it.
    #[tokio::test]
    async fn a_fenced_replica_answers_subject_access_reviews_no_opinion() {
        use crate::store::etcd::replication::OnStale;
        let alice = webhook_review("alice", &[], "default", "pods");
        let intern = webhook_review("bob", &["interns"], "dev", "secrets");

        let directory = fenced_api(None);
        let (code, answer) = post(&directory, "/authorize", alice.clone()).await;
        assert_eq!(
            (code, &answer["status"]["allowed"]),
            (200, &serde_json::json!(true)),
            "{answer}"
        );

        let fenced = fenced_api(Some(OnStale::Unavailable));
        let (code, answer) = post(&fenced, "/authorize", alice.clone()).await;
        assert_eq!(code, 200, "{answer}");
        let status = &answer["status"];
        assert_eq!(status["allowed"], false, "{answer}");
        assert!(status.get("denied").is_none(), "{answer}");
        let error = status["evaluationError"].as_str().unwrap_or_default();
        assert!(error.contains("fenced"), "{answer}");
        assert_eq!(answer["kind"], "SubjectAccessReview", "{answer}");

        let (code, answer) = post(&fenced, "/authorize", intern.clone()).await;
        assert_eq!(code, 200, "{answer}");
        assert_eq!(answer["status"]["denied"], true, "{answer}");
        assert_eq!(answer["status"]["allowed"], false, "{answer}");

        // kube-apiserver's own review paths: created, no opinion.
        let (code, answer) = post(
            &fenced,
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            alice.clone(),
        )
        .await;
        assert_eq!(code, 201, "{answer}");
        assert_eq!(answer["status"]["allowed"], false, "{answer}");
        assert!(
            answer["status"]["evaluationError"]
                .as_str()
                .is_some_and(|e| e.contains("fenced")),
            "{answer}"
        );
        let local = serde_json::json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "LocalSubjectAccessReview",
            "spec": {"user": "alice", "resourceAttributes": {"namespace": "team", "verb": "get", "resource": "pods"}}
        });
        let (code, answer) = post(
            &fenced,
            "/apis/authorization.k8s.io/v1/namespaces/team/localsubjectaccessreviews",
            local,
        )
        .await;
        assert_eq!(code, 201, "{answer}");
        assert_eq!(answer["metadata"]["namespace"], "team", "{answer}");
        assert!(
            answer["status"].get("evaluationError").is_some(),
            "{answer}"
        );

        // The seed's shapes: the same answer, with the namespace asked in.
        let seed = serde_json::json!({
            "user": "alice",
            "authorizationAttributes": {"verb": "get", "resource": "pods"}
        });
        let (code, answer) = post(
            &fenced,
            "/apis/authorization.kubernetes.io/v1/ns/team/localSubjectAccessReviews",
            seed.clone(),
        )
        .await;
        assert_eq!(code, 201, "{answer}");
        assert_eq!(answer["allowed"], false, "{answer}");
        assert_eq!(answer["namespace"], "team", "{answer}");
        assert!(answer.get("denied").is_none(), "{answer}");
        assert!(
            answer["evaluationError"]
                .as_str()
                .is_some_and(|e| e.contains("fenced")),
            "{answer}"
        );

        // Who-can is a list of allows: still refused.
        let (code, answer) = post(
            &fenced,
            "/apis/authorization.kubernetes.io/v1/resourceAccessReviews",
            seed,
        )
        .await;
        assert_eq!(code, 503, "{answer}");

        let deny_allows = fenced_api(Some(OnStale::DenyAllows));
        let (code, answer) = post(&deny_allows, "/authorize", alice).await;
        assert_eq!(code, 200, "{answer}");
        assert_eq!(answer["status"]["denied"], true, "{answer}");
        assert!(
            answer["status"].get("evaluationError").is_none(),
            "{answer}"
        );
    }

    /// Records what the authenticator was shown.
    struct Recording(std::sync::Mutex<Vec<String>>);

    impl crate::api::authn::Authenticator for Recording {
        fn authenticate(
            &self,
            peer: &crate::api::authn::Peer<'_>,
        ) -> crate::api::error::Result<std::sync::Arc<crate::request::UserInfo>> {
            let token = peer
                .metadata
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-");
            let listener = peer.connection.map(|c| c.listener.to_string());
            let seen = format!(
                "token={token} remote={} listener={}",
                peer.remote_addr.is_some(),
                listener.as_deref().unwrap_or("-")
            );
            self.0.lock().unwrap().push(seen);
            Ok(std::sync::Arc::default())
        }
    }

    /// Over the real accept loop: an HTTP review reaches the gRPC handler's authenticator with
    /// the headers as metadata, the remote address and the `ConnectionInfo` of the listener it
    /// arrived on.
    #[tokio::test]
    async fn http_requests_carry_headers_and_connection_to_the_authenticator() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

        let state = Arc::new(ServingState::new(
            EngineConfig::default(),
            CacheConfig::default(),
        ));
        let recording = Arc::new(Recording(std::sync::Mutex::new(Vec::new())));
        let grpc = GrpcApi::new(
            Arc::clone(&state),
            Arc::clone(&recording) as Arc<dyn crate::api::authn::Authenticator>,
        );
        let (_draining, draining_rx) = watch::channel(false);
        let api = HttpApi::new(grpc, state, draining_rx, "/authorize", test_authzen());
        let listener = crate::transport::Listener::bind(
            &crate::transport::ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
            crate::transport::SocketMode::DEFAULT,
        )
        .await
        .unwrap();
        let addr = listener.local_addr().clone();
        let crate::transport::ListenAddr::Tcp(socket_addr) = addr else {
            panic!("not tcp")
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(crate::transport::serve(
            vec![listener],
            router(axum::Router::new(), api),
            crate::transport::ConnectionLimits {
                http2_max_concurrent_streams: 16,
                http2_max_header_list_size: 16 * 1024,
                http2_keepalive_interval: None,
                http2_keepalive_timeout: std::time::Duration::from_secs(10),
                tcp_keepalive: std::time::Duration::from_secs(30),
                max_connection_age: None,
                max_connections: 16,
                http1_only: false,
            },
            async {
                let _ = stopped.await;
            },
        ));

        let body = r#"{"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}}"#;
        let mut stream = tokio::net::TcpStream::connect(socket_addr).await.unwrap();
        let request = format!(
            "POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews HTTP/1.1\r\n\
             Host: x\r\nAuthorization: Bearer secret\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        // No policy is loaded, so the review itself is refused after authentication.
        assert!(response.starts_with("HTTP/1.1 503"), "{response}");
        assert_eq!(
            *recording.0.lock().unwrap(),
            vec![format!("token=Bearer secret remote=true listener={addr}")]
        );
        stop.send(()).unwrap();
        server.await.unwrap();
    }
}
