//! HTTP/JSON endpoints: adapters only. Each turns the body into the proto request the gRPC
//! service takes and calls the same `GrpcApi` method, with the HTTP headers as metadata and
//! the request extensions (the connection's identity) carried over, so authentication,
//! privilege checks, limits and answers are the same on both transports.
//!
//! * the Kubernetes authorization webhook (`--webhook-path`, `/authorize` by default);
//! * kube-apiserver's review paths (`/apis/authorization.k8s.io/v1/...`), as `kubectl create
//!   --raw` posts them;
//! * seed 000's paths (`/apis/authorization.kubernetes.io/v1/...`);
//! * `/healthz` and `/readyz`.

mod document;
mod reviews;
mod status;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::response::Response;
use axum::routing::{get, post};
use http::StatusCode;
use tokio::sync::watch;

use crate::api::grpc::GrpcApi;
use crate::serving::ServingState;

pub use document::MAX_DOCUMENT_DEPTH;

/// What the HTTP handlers need. Cheap to clone.
#[derive(Clone)]
pub struct HttpApi {
    grpc: GrpcApi,
    state: Arc<ServingState>,
    draining: watch::Receiver<bool>,
    webhook_path: Arc<str>,
}

impl HttpApi {
    pub fn new(
        grpc: GrpcApi,
        state: Arc<ServingState>,
        draining: watch::Receiver<bool>,
        webhook_path: &str,
    ) -> Self {
        Self {
            grpc,
            state,
            draining,
            webhook_path: Arc::from(webhook_path),
        }
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
        .with_state(api.clone());
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
        plain(StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    } else if api.state.snapshot().is_none() {
        plain(StatusCode::SERVICE_UNAVAILABLE, "no policy loaded yet")
    } else if api.state.fenced() {
        plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "fenced: this replica cannot prove its policy current with etcd",
        )
    } else {
        plain(StatusCode::OK, "ok")
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
        let grpc = GrpcApi::new(Arc::clone(&state), identity, Duration::from_secs(1));
        let (draining, draining_rx) = watch::channel(false);
        let api = HttpApi::new(grpc, Arc::clone(&state), draining_rx, "/authorize");

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
            Duration::from_secs(1),
        );
        let (_draining, draining_rx) = watch::channel(false);
        let api = HttpApi::new(grpc, state, draining_rx, "/authorize");
        let listener = crate::transport::Listener::bind(&crate::transport::ListenAddr::Tcp(
            "127.0.0.1:0".parse().unwrap(),
        ))
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
