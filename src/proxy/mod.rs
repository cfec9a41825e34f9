//! `authzd proxy`: an authorizing reverse proxy for one upstream that a kube-rbac-proxy user
//! switches to without rewriting its flags or its `--config-file` (docs/proxy.md). It is the
//! client library's first user: every decision goes through [`Client::authorize`], answered
//! from a local decision cache that authzd's invalidation stream keeps exact
//! (docs/caller-cache.md), so an allowed request usually costs no round trip at all.
//!
//! Per request, in kube-rbac-proxy's order (`cmd/kube-rbac-proxy/app/kube-rbac-proxy.go`):
//! the path cleaned once (`request_path.rs`; 400 when it cannot be cleaned safely) →
//! `--allow-paths` (404 outside them) → `--ignore-paths` (passed on unchecked) → who is
//! asking (`identity.rs`; 401) → what they ask (`attributes.rs`; 400 when nothing, or a value
//! it cannot read) → each action allowed by a `static` entry or by authzd (403 naming it; 500
//! when authzd cannot answer) → the upstream (`forward.rs`), for the clean path, told the
//! caller in headers when asked (`identity_headers.rs`).
//!
//! INVARIANT: the path the patterns match, the path authzd is asked about and the path the
//! upstream receives are one `CleanPath`, computed once per request.
//!
//! Files: `config_file.rs` (the `--config-file`), `paths.rs` (Go's `path.Match`).

pub mod attributes;
pub mod config_file;
pub mod forward;
pub mod identity;
pub mod identity_headers;
pub mod paths;
pub mod request_path;

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::api::authn::token_file::TokenFile;
use crate::caller::{Client, LocalCacheConfig};
use crate::config::proxy::ProxySettings;
use crate::request::{Request as Question, UserInfo};
use crate::transport::{self, tls, ConnectionInfo, ListenAddr, Listener, SocketMode};
use attributes::RequestAttributes;
use identity::Identify;
use identity_headers::IdentityHeaders;
use paths::PathPattern;
use request_path::CleanPath;

/// Everything a request is decided and passed on with.
pub struct Proxy {
    allow: Vec<PathPattern>,
    ignore: Vec<PathPattern>,
    identify: Identify,
    attributes: RequestAttributes,
    authzd: Client,
    upstream: forward::Upstream,
    identity_headers: Option<IdentityHeaders>,
}

/// Why the proxy cannot start.
pub type StartError = String;

impl Proxy {
    /// Reads every file the settings name (a bad one is a startup error) and connects to
    /// authzd (with the local cache: subscribes to its invalidation stream).
    pub async fn new(settings: &ProxySettings) -> Result<Self, StartError> {
        let authorization = match &settings.config_file {
            Some(path) => config_file::load(path)?.authorization.unwrap_or_default(),
            None => Default::default(),
        };
        let patterns = |list: &[String]| {
            list.iter()
                .map(|p| PathPattern::new(p))
                .collect::<Result<Vec<_>, _>>()
        };
        let tokens = settings
            .token_auth_file
            .as_deref()
            .map(TokenFile::load)
            .transpose()
            .map_err(|e| format!("bad --token-auth-file: {e}"))?;
        let reviewer = crate::webhook::TokenReviewer::new(
            settings.kubeconfig.as_deref(),
            settings.audiences.clone(),
        )?;
        match &reviewer {
            Some(reviewer) => {
                tracing::info!(server = %reviewer.server(), "bearer tokens are checked with TokenReview")
            }
            None => tracing::info!("no --kubeconfig and not in a cluster: no TokenReview"),
        }
        // A proxy with no way to know its callers answers 401 to every request it authorizes,
        // which looks like a broken upstream: say at startup which ways are on.
        let mut authenticators = Vec::new();
        if settings.client_ca.is_some() && settings.secure_listen.is_some() {
            authenticators.push("client certificates (--client-ca-file)");
        }
        if tokens.is_some() {
            authenticators.push("bearer tokens (--token-auth-file)");
        }
        if reviewer.is_some() {
            authenticators.push("bearer tokens (TokenReview)");
        }
        if authenticators.is_empty() {
            tracing::warn!(
                "no caller authenticator is on: every request outside --ignore-paths will be \
                 answered 401 Unauthorized; give --token-auth-file, --client-ca-file (with \
                 --secure-listen-address) or --kubeconfig (docs/proxy.md §1)"
            );
        } else {
            tracing::info!(
                authenticators = %authenticators.join(", "),
                "caller authenticators"
            );
        }
        let upstream_tls = match settings.upstream.scheme_str() {
            Some("https") => Some(crate::webhook::tls_client_config(
                settings.upstream_ca.as_deref(),
                settings
                    .upstream_client
                    .as_ref()
                    .map(|(c, k)| (c.as_path(), k.as_path())),
            )?),
            _ => None,
        };
        let mut authzd = Client::connect(&settings.authzd)
            .await
            .map_err(|e| format!("authzd: {e}"))?;
        if let Some((subscriber_id, max_staleness)) = &settings.local_cache {
            authzd = authzd.with_local_cache(LocalCacheConfig {
                max_staleness: *max_staleness,
                ..LocalCacheConfig::new(subscriber_id.clone())
            });
        }
        Ok(Proxy {
            allow: patterns(&settings.allow_paths)?,
            ignore: patterns(&settings.ignore_paths)?,
            identify: Identify::new(tokens, reviewer),
            attributes: RequestAttributes::new(authorization)?,
            authzd,
            upstream: forward::Upstream::new(
                settings.upstream.clone(),
                upstream_tls,
                settings.upstream_h2c,
            ),
            identity_headers: settings
                .auth_headers
                .as_ref()
                .map(IdentityHeaders::new)
                .transpose()?,
        })
    }

    /// The authzd client (its local cache's figures, for metrics and tests).
    pub fn authzd(&self) -> &Client {
        &self.authzd
    }

    /// The proxy's own endpoints (`--proxy-endpoints-port`): `/healthz` as kube-rbac-proxy
    /// serves it, and `/metrics`, the local cache's figures (docs/caller-cache.md §8).
    pub fn endpoint(&self, path: &str) -> Response<Body> {
        match path {
            "/healthz" => Response::new(Body::from("ok")),
            "/metrics" => {
                let mut out = String::new();
                if let Some(local) = self.authzd.local_cache() {
                    local.figures().render_prometheus(&mut out);
                }
                let mut response = Response::new(Body::from(out));
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4"),
                );
                response
            }
            _ => text(StatusCode::NOT_FOUND, "404 page not found"),
        }
    }

    pub async fn handle(&self, mut request: Request<Incoming>) -> Response<Body> {
        let path = match CleanPath::of(request.uri()) {
            Ok(path) => path,
            Err(why) => return text(StatusCode::BAD_REQUEST, &format!("Bad Request: {why}")),
        };
        if !self.allow.is_empty() && !paths::any_matches(&self.allow, path.decoded()) {
            return text(StatusCode::NOT_FOUND, "404 page not found");
        }
        let connection = request.extensions().get::<Arc<ConnectionInfo>>().cloned();
        let remote = connection.as_ref().and_then(|c| c.remote_addr);
        if paths::any_matches(&self.ignore, path.decoded()) {
            return self.pass_on(request, &path, None, remote).await;
        }
        let caller = match self
            .identify
            .caller(connection.as_deref(), request.headers())
            .await
        {
            Ok(caller) => caller,
            Err(why) => {
                tracing::debug!(%why, "request not authenticated");
                return text(StatusCode::UNAUTHORIZED, "Unauthorized");
            }
        };
        let actions = match self.attributes.actions(
            request.method(),
            &path,
            request.uri().query(),
            request.headers(),
        ) {
            Ok(actions) => actions,
            Err(why) => return text(StatusCode::BAD_REQUEST, &format!("Bad Request: {why}")),
        };
        let mut actions = actions.into_iter();
        let Some(first) = actions.next() else {
            return text(
                StatusCode::BAD_REQUEST,
                "Bad Request. The request or configuration is malformed.",
            );
        };
        // One question, its action replaced for each: the user is copied once per request.
        let mut question = Question {
            user: (*caller.user).clone(),
            action: first,
        };
        loop {
            if let Some(refused) = self.refusal(&question).await {
                return refused;
            }
            match actions.next() {
                Some(action) => question.action = action,
                None => break,
            }
        }
        if caller.by_token {
            request.headers_mut().remove(http::header::AUTHORIZATION);
        }
        self.pass_on(request, &path, Some(caller.user.as_ref()), remote)
            .await
    }

    /// Passes `request` on for `path`, telling the upstream who `caller` is when asked to. The
    /// order matters: hop-by-hop headers (and those `Connection` names) go first, then every
    /// identity the client claimed, and only then is the caller's set, so that nothing the
    /// client sent can remove or stand in for it (kube-rbac-proxy sets its headers before Go's
    /// `ReverseProxy` drops what `Connection` names, `net/http/httputil/reverseproxy.go`).
    async fn pass_on(
        &self,
        mut request: Request<Incoming>,
        path: &CleanPath,
        caller: Option<&UserInfo>,
        remote: Option<std::net::SocketAddr>,
    ) -> Response<Body> {
        let headers = request.headers_mut();
        forward::remove_hop_by_hop(headers);
        if let Some(identity) = &self.identity_headers {
            identity.remove_claimed(headers);
            if let Some(user) = caller {
                if let Err(why) = identity.tell(user, headers) {
                    tracing::error!(
                        %why,
                        user = %user.name,
                        "cannot tell the upstream who the caller is"
                    );
                    return text(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error");
                }
            }
        }
        self.upstream.forward(request, path, remote).await
    }

    /// Why `question` is not let through (403, or 500 when authzd cannot answer), or `None`
    /// when a `static` entry or authzd allows it.
    async fn refusal(&self, question: &Question) -> Option<Response<Body>> {
        if self
            .attributes
            .statically_allowed(&question.user, &question.action)
        {
            return None;
        }
        // kube-rbac-proxy's messages (`pkg/filters/auth.go`).
        let subject = |what: &str| {
            let (resource, subresource) = match &question.action {
                crate::request::Action::Resource(r) => {
                    (r.resource.as_str(), r.subresource.as_str())
                }
                crate::request::Action::NonResource(_) => ("", ""),
            };
            format!(
                "{what} (user={}, verb={}, resource={resource}, subresource={subresource})",
                question.user.name,
                question.action.verb(),
            )
        };
        match self.authzd.authorize(question).await {
            Ok(answer) if answer.allowed() => None,
            Ok(answer) => {
                tracing::debug!(reason = %answer.response.reason, "{}", subject("Forbidden"));
                Some(text(StatusCode::FORBIDDEN, &subject("Forbidden")))
            }
            Err(status) => {
                tracing::error!(error = %status.message(), "{}", subject("Authorization error"));
                Some(text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &subject("Authorization error"),
                ))
            }
        }
    }
}

/// A plain-text answer as Go's `http.Error` writes it.
pub(crate) fn text(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = Response::new(Body::from(format!("{message}\n")));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// Serves until `shutdown` completes.
pub async fn run(
    settings: ProxySettings,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    for warning in &settings.warnings {
        tracing::warn!("{warning}");
    }
    let proxy = Arc::new(Proxy::new(&settings).await?);
    let mut listeners = Vec::new();
    if let Some(addr) = settings.insecure_listen {
        listeners.push(bind(addr).await?);
    }
    let mut tls_server = None;
    if let Some(addr) = settings.secure_listen {
        let files = match &settings.tls {
            Some((cert, key)) => tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: settings.client_ca.clone(),
            },
            None => self_signed(settings.client_ca.clone())?,
        };
        let server =
            Arc::new(tls::TlsServer::load(files).map_err(|e| format!("bad TLS files: {e}"))?);
        Arc::clone(&server).spawn_reloader();
        listeners.push(bind(addr).await?.with_tls(Some(Arc::clone(&server))));
        tls_server = Some(server);
    }
    let limits = transport::ConnectionLimits {
        http2_max_concurrent_streams: settings.http2_max_concurrent_streams,
        http2_max_header_list_size: 1 << 20,
        http2_keepalive_interval: None,
        http2_keepalive_timeout: std::time::Duration::from_secs(20),
        tcp_keepalive: std::time::Duration::from_secs(60),
        max_connection_age: None,
        max_connections: 10_000,
        http1_only: !settings.http2,
    };
    let (stop, stopped) = tokio::sync::watch::channel(());
    let health = match (settings.proxy_endpoints_port, settings.secure_listen) {
        (Some(port), Some(secure)) => {
            let listener = bind(std::net::SocketAddr::new(secure.ip(), port))
                .await?
                .with_tls(tls_server.clone());
            let mut stopped = stopped.clone();
            let proxy = Arc::clone(&proxy);
            Some(tokio::spawn(transport::serve(
                vec![listener],
                tower::service_fn(move |request: Request<Incoming>| {
                    let answer = proxy.endpoint(request.uri().path());
                    async move { Ok::<_, Infallible>(answer) }
                }),
                limits,
                async move {
                    let _ = stopped.changed().await;
                },
            )))
        }
        (Some(_), None) => {
            return Err("--proxy-endpoints-port needs --secure-listen-address".into())
        }
        _ => None,
    };
    let service = tower::service_fn(move |request: Request<Incoming>| {
        let proxy = Arc::clone(&proxy);
        async move { Ok::<_, Infallible>(proxy.handle(request).await) }
    });
    let mut stopped_main = stopped;
    let serving = tokio::spawn(transport::serve(listeners, service, limits, async move {
        let _ = stopped_main.changed().await;
    }));
    shutdown.await;
    let _ = stop.send(());
    let _ = serving.await;
    if let Some(health) = health {
        let _ = health.await;
    }
    Ok(())
}

async fn bind(addr: std::net::SocketAddr) -> Result<Listener, StartError> {
    let listener = Listener::bind(&ListenAddr::Tcp(addr), SocketMode::DEFAULT)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr().clone();
    eprintln!("authzd proxy listening on {bound}");
    tracing::info!(addr = %bound, "listening");
    Ok(listener)
}

/// kube-rbac-proxy serves a self-signed certificate for the host name when given none; so
/// does this proxy, written to a private directory for the TLS loader.
fn self_signed(client_ca: Option<std::path::PathBuf>) -> Result<tls::TlsFiles, StartError> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let names: Vec<String> = [host, "localhost".to_string()]
        .into_iter()
        .filter(|n| !n.is_empty())
        .collect();
    let key = rcgen::KeyPair::generate()
        .map_err(|e| format!("cannot generate a key for a self-signed certificate: {e}"))?;
    let cert = rcgen::CertificateParams::new(names)
        .and_then(|params| params.self_signed(&key))
        .map_err(|e| format!("cannot generate a self-signed certificate: {e}"))?;
    let dir = std::env::temp_dir().join(format!("authzd-proxy-{}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let write = |name: &str, text: String| -> Result<std::path::PathBuf, StartError> {
        use std::io::Write as _;
        let path = dir.join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut file| file.write_all(text.as_bytes()))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    };
    tracing::info!("generating a self-signed certificate as none is given");
    Ok(tls::TlsFiles {
        cert: write("tls.crt", cert.pem())?,
        key: write("tls.key", key.serialize_pem())?,
        client_ca,
    })
}
