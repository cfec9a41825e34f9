//! The HTTP side of the webhook: one pooled hyper client (HTTP/1.1, or HTTP/2 when the
//! webhook offers it over TLS) posting reviews to the kubeconfig's server, and upstream's
//! retries around it.
//!
//! Retries follow `WithExponentialBackoff` and `DefaultShouldRetry` in
//! `staging/src/k8s.io/apiserver/pkg/util/webhook/webhook.go`, with the error reasons
//! client-go gives HTTP statuses (`NewGenericServerResponse` in
//! `staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go`): a reset connection, 429, 504
//! and every other 5xx but 503 are retried, and any answer carrying a positive `Retry-After`
//! (`SuggestsClientDelay`); a timeout, another 4xx, a 503 without `Retry-After`, or an answer
//! that does not decode is not.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use http::{HeaderValue, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use super::kubeconfig::{self, Credentials, Endpoint};
use super::review::{self, ReviewStatus};

/// The most of an answer read; a webhook's SubjectAccessReview is a few hundred bytes.
pub(super) const MAX_ANSWER_BYTES: usize = 1 << 20;

/// How much of an error answer's body goes into the error message.
const ERROR_BODY_SNIPPET: usize = 256;

/// How long a token read from `tokenFile` is used before the file is read again (client-go's
/// `NewCachedFileTokenSource` period), so a rotated token is picked up.
const TOKEN_FILE_PERIOD: Duration = Duration::from_secs(60);

/// Go's `http.DefaultTransport` `IdleConnTimeout`.
const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(90);

const USER_AGENT_VALUE: &str = concat!(
    "authzd/",
    env!("CARGO_PKG_VERSION"),
    " (webhook authorizer)"
);

/// The backoff between attempts: upstream's `wait.Backoff` (the first delay, the factor each
/// delay grows by, jitter as a fraction added at random, and the number of attempts).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryBackoff {
    pub initial: Duration,
    pub factor: f64,
    pub jitter: f64,
    /// Attempts in all, the first included (upstream's `Steps`).
    pub attempts: u32,
}

impl RetryBackoff {
    /// kube-apiserver's `DefaultAuthWebhookRetryBackoff`
    /// (`staging/src/k8s.io/apiserver/pkg/server/options/authentication.go`): 500ms, ×1.5,
    /// jitter 0.2, 5 steps — at most 5 attempts, 4 waits of about 0.5, 0.75, 1.1 and 1.7 s.
    pub const fn upstream() -> Self {
        RetryBackoff {
            initial: Duration::from_millis(500),
            factor: 1.5,
            jitter: 0.2,
            attempts: 5,
        }
    }

    /// The wait before each attempt after the first, as `wait.Backoff.Step`: the current
    /// delay plus up to `jitter` of it at random, then the delay grows by `factor`.
    fn delays(self) -> impl Iterator<Item = Duration> {
        let mut next = self.initial;
        (1..self.attempts.max(1)).map(move |_| {
            let delay = next;
            next = next.mul_f64(self.factor.max(0.0));
            delay + delay.mul_f64(self.jitter.max(0.0) * random_unit())
        })
    }
}

/// A number in [0, 1): jitter only has to keep many clients from retrying in step, so std's
/// randomly keyed hasher is randomness enough.
fn random_unit() -> f64 {
    let bits = RandomState::new().build_hasher().finish() >> 11;
    bits as f64 / (1u64 << 53) as f64
}

/// Why one attempt failed.
#[derive(Debug)]
pub(super) enum CallError {
    /// No connection, or the exchange broke off; `reset` when the peer reset the connection.
    Transport {
        message: String,
        reset: bool,
    },
    /// An answer outside 200-206 (client-go's success range).
    Status {
        code: StatusCode,
        retry_after: Option<u64>,
        body: String,
    },
    TooLarge,
    Undecodable(String),
    TimedOut(Duration),
}

impl CallError {
    /// `DefaultShouldRetry`, over client-go's reason for each status.
    fn retryable(&self) -> bool {
        match self {
            CallError::Transport { reset, .. } => *reset,
            CallError::Status {
                code, retry_after, ..
            } => {
                let code = code.as_u16();
                // 429 TooManyRequests; 504 Timeout; other 5xx InternalError; 503 is
                // ServiceUnavailable, retried only when the answer asks for a delay.
                code == 429
                    || (code >= 500 && code != 503)
                    || retry_after.is_some_and(|seconds| seconds > 0)
            }
            CallError::TooLarge | CallError::Undecodable(_) | CallError::TimedOut(_) => false,
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Transport { message, .. } => f.write_str(message),
            CallError::Status { code, body, .. } if body.is_empty() => {
                write!(f, "the webhook answered {code}")
            }
            CallError::Status { code, body, .. } => {
                write!(f, "the webhook answered {code}: {body}")
            }
            CallError::TooLarge => write!(
                f,
                "the webhook's answer is larger than {MAX_ANSWER_BYTES} bytes"
            ),
            CallError::Undecodable(problem) => f.write_str(problem),
            CallError::TimedOut(timeout) => {
                write!(f, "the webhook did not answer within {timeout:?}")
            }
        }
    }
}

/// The outcome of a call with its retries: the last attempt's, and how many were made.
pub(super) struct Called<T = ReviewStatus> {
    pub outcome: Result<T, CallError>,
    pub attempts: u32,
}

pub(super) struct Transport {
    client: Client<Connector, Full<Bytes>>,
    server: Uri,
    authorization: Authorization,
}

enum Authorization {
    None,
    Fixed(HeaderValue),
    TokenFile {
        path: PathBuf,
        current: Mutex<(HeaderValue, Instant)>,
    },
}

impl Transport {
    pub(super) fn new(endpoint: Endpoint) -> Result<Transport, String> {
        let Endpoint {
            server,
            tls,
            tls_server_name,
            credentials,
            unused: _,
        } = endpoint;
        let authorization = match credentials {
            Credentials::None => Authorization::None,
            Credentials::Bearer(token) => Authorization::Fixed(bearer(&token)?),
            Credentials::Basic { username, password } => {
                let encoded = base64::engine::general_purpose::STANDARD
                    .encode(format!("{username}:{password}"));
                Authorization::Fixed(sensitive(&format!("Basic {encoded}"), "the password")?)
            }
            Credentials::TokenFile { path, first } => Authorization::TokenFile {
                current: Mutex::new((bearer(&first)?, Instant::now())),
                path,
            },
        };
        let connector = Connector {
            tls: tls.map(TlsConnector::from),
            tls_server_name,
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE_CONNECTION_TIMEOUT)
            .pool_timer(TokioTimer::new())
            .build(connector);
        Ok(Transport {
            client,
            server,
            authorization,
        })
    }

    /// The server's URL for messages: scheme, authority and path (a query may carry a
    /// secret).
    pub(super) fn server(&self) -> String {
        format!(
            "{}://{}{}",
            self.server.scheme_str().unwrap_or_default(),
            self.server
                .authority()
                .map(|a| a.as_str())
                .unwrap_or_default(),
            self.server.path()
        )
    }

    /// Posts `body` until an attempt succeeds, fails in a way not worth retrying, the
    /// attempts run out, or the next wait would end past `timeout` from now; each attempt is
    /// bounded by what is left of it. The outcome is the last attempt's.
    pub(super) async fn call(
        &self,
        body: Bytes,
        timeout: Duration,
        backoff: RetryBackoff,
    ) -> Called {
        self.call_decoding(body, timeout, backoff, review::decode_status)
            .await
    }

    /// [`Self::call`] for any review: `decode` reads the answer's body (a TokenReview's
    /// status, for the proxy's authenticator).
    pub(super) async fn call_decoding<T>(
        &self,
        body: Bytes,
        timeout: Duration,
        backoff: RetryBackoff,
        decode: fn(&[u8]) -> Result<T, String>,
    ) -> Called<T> {
        let deadline = Instant::now() + timeout;
        let mut delays = backoff.delays();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let left = deadline.saturating_duration_since(Instant::now());
            let outcome = tokio::time::timeout(left, self.post(body.clone(), decode))
                .await
                .unwrap_or(Err(CallError::TimedOut(timeout)));
            let retry = match &outcome {
                Err(error) if error.retryable() => delays
                    .next()
                    .filter(|delay| Instant::now() + *delay < deadline),
                _ => None,
            };
            // Upstream returns the last webhook error when its context ends while waiting;
            // giving up before a wait that would outlast the timeout answers the same, sooner.
            let Some(delay) = retry else {
                return Called { outcome, attempts };
            };
            tracing::debug!(
                server = %self.server(),
                attempt = attempts,
                error = %outcome.as_ref().err().map(ToString::to_string).unwrap_or_default(),
                ?delay,
                "webhook attempt failed; retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// One attempt: the review posted, the answer read (bounded) and decoded.
    async fn post<T>(
        &self,
        body: Bytes,
        decode: fn(&[u8]) -> Result<T, String>,
    ) -> Result<T, CallError> {
        let mut request = http::Request::post(self.server.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, */*")
            .header(USER_AGENT, USER_AGENT_VALUE);
        if let Some(value) = self.authorization().await {
            request = request.header(AUTHORIZATION, value);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|error| CallError::Transport {
                message: format!("cannot build the request: {error}"),
                reset: false,
            })?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|error| transport_error(&error))?;
        let (parts, answer) = response.into_parts();
        let bytes = match Limited::new(answer, MAX_ANSWER_BYTES).collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(error) if error.is::<http_body_util::LengthLimitError>() => {
                Err(CallError::TooLarge)
            }
            Err(error) => Err(transport_error(&*error)),
        };
        // The status decides first: an error answer is retried or not by its code, whatever
        // its body.
        if !(200..=206).contains(&parts.status.as_u16()) {
            return Err(CallError::Status {
                code: parts.status,
                retry_after: parts
                    .headers
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse().ok()),
                body: bytes.map(|b| snippet(&b)).unwrap_or_default(),
            });
        }
        decode(&bytes?).map_err(CallError::Undecodable)
    }

    /// The `Authorization` header; a token file is read again once its period has passed,
    /// and a read that fails keeps the token in use (client-go's cached file token source).
    async fn authorization(&self) -> Option<HeaderValue> {
        let (path, current) = match &self.authorization {
            Authorization::None => return None,
            Authorization::Fixed(value) => return Some(value.clone()),
            Authorization::TokenFile { path, current } => (path, current),
        };
        let (value, read_at) = current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if read_at.elapsed() < TOKEN_FILE_PERIOD {
            return Some(value);
        }
        let path = path.clone();
        let fresh = tokio::task::spawn_blocking(move || kubeconfig::read_token_file(&path))
            .await
            .map_err(|error| error.to_string())
            .and_then(|read| read)
            .and_then(|token| bearer(&token));
        let mut current = current.lock().unwrap_or_else(PoisonError::into_inner);
        match fresh {
            Ok(fresh) => *current = (fresh, Instant::now()),
            Err(error) => {
                tracing::warn!(%error, "webhook token file not re-read; keeping the token in use");
                current.1 = Instant::now();
            }
        }
        Some(current.0.clone())
    }
}

fn bearer(token: &str) -> Result<HeaderValue, String> {
    sensitive(&format!("Bearer {token}"), "the token")
}

/// A header value that logs and debug output never show.
fn sensitive(value: &str, what: &str) -> Result<HeaderValue, String> {
    let mut value = HeaderValue::from_str(value)
        .map_err(|_| format!("{what} holds characters an HTTP header cannot carry"))?;
    value.set_sensitive(true);
    Ok(value)
}

/// A transport failure, worded with its causes; `reset` when one of them is a connection
/// reset (upstream's `IsConnectionReset`, retried).
fn transport_error(error: &(dyn std::error::Error + 'static)) -> CallError {
    let mut message = error.to_string();
    let mut reset = false;
    let mut source = error.source();
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            reset |= io.kind() == io::ErrorKind::ConnectionReset;
        }
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    CallError::Transport { message, reset }
}

/// The start of an error answer's body, as text on one line.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_SNIPPET)]);
    let mut line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    line = line.trim().to_string();
    if body.len() > ERROR_BODY_SNIPPET {
        line.push_str("...");
    }
    line
}

/// A pooled HTTP client over the webhook's connector, for authzd's other outbound HTTP (the
/// proxy's upstream): `tls` for `https` URLs, `h2c` for HTTP/2 without TLS (prior knowledge).
pub type OutboundClient<B> = Client<Connector, B>;

pub fn outbound_client<B>(tls: Option<Arc<rustls::ClientConfig>>, h2c: bool) -> OutboundClient<B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
    let connector = Connector {
        tls: tls.map(TlsConnector::from),
        tls_server_name: None,
    };
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(IDLE_CONNECTION_TIMEOUT)
        .pool_timer(TokioTimer::new())
        .http2_only(h2c)
        .build(connector)
}

/// Opens connections to the webhook for the pooled client: TCP, then TLS for `https`.
#[derive(Clone)]
pub struct Connector {
    tls: Option<TlsConnector>,
    tls_server_name: Option<ServerName<'static>>,
}

impl tower::Service<Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<Stream>>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connector = self.clone();
        Box::pin(async move { connector.connect(uri).await.map(TokioIo::new) })
    }
}

impl Connector {
    async fn connect(self, uri: Uri) -> io::Result<Stream> {
        let https = uri.scheme_str() == Some("https");
        // `[::1]` is how a URL writes an IPv6 host; the socket wants it bare.
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tcp = TcpStream::connect((host.as_str(), port)).await?;
        tcp.set_nodelay(true)?;
        if !https {
            return Ok(Stream::Plain(tcp));
        }
        let Some(tls) = self.tls else {
            return Err(io::Error::other("no TLS configuration for an https server"));
        };
        let name = match self.tls_server_name {
            Some(name) => name,
            None => ServerName::try_from(host)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "invalid server name"))?,
        };
        let stream = tls.connect(name, tcp).await?;
        Ok(Stream::Tls(Box::new(stream)))
    }
}

/// A connection to the webhook, plain or TLS.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        match self {
            Stream::Tls(tls) if tls.get_ref().1.alpn_protocol() == Some(b"h2") => {
                Connected::new().negotiated_h2()
            }
            _ => Connected::new(),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(&mut **tls).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(&mut **tls).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => Pin::new(&mut **tls).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(tcp) => tcp.is_write_vectored(),
            Stream::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(&mut **tls).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(&mut **tls).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_backoff_waits_grow_by_half_with_at_most_a_fifth_added() {
        let backoff = RetryBackoff::upstream();
        for _ in 0..20 {
            let delays: Vec<Duration> = backoff.delays().collect();
            assert_eq!(delays.len(), 4, "5 attempts, 4 waits");
            for (delay, base_ms) in delays.iter().zip([500.0, 750.0, 1125.0, 1687.5]) {
                let ms = delay.as_secs_f64() * 1000.0;
                assert!(
                    ms >= base_ms - 0.001 && ms <= base_ms * 1.2 + 0.001,
                    "{ms} ms for a base of {base_ms} ms"
                );
            }
        }
        let one = RetryBackoff {
            attempts: 1,
            ..backoff
        };
        assert_eq!(one.delays().count(), 0);
    }

    #[test]
    fn jitter_varies() {
        let draws: std::collections::BTreeSet<u64> =
            (0..32).map(|_| random_unit().to_bits()).collect();
        assert!(draws.len() > 1);
        assert!((0..1000)
            .map(|_| random_unit())
            .all(|u| (0.0..1.0).contains(&u)));
    }

    fn status(code: u16, retry_after: Option<u64>) -> CallError {
        CallError::Status {
            code: StatusCode::from_u16(code).unwrap(),
            retry_after,
            body: String::new(),
        }
    }

    /// `DefaultShouldRetry` over client-go's reasons; upstream's cache test: 500 and 429 are
    /// retried, 404, 403 and 401 are not.
    #[test]
    fn what_is_retried() {
        for code in [429, 500, 501, 502, 504, 599] {
            assert!(status(code, None).retryable(), "{code} is retried");
        }
        for code in [400, 401, 403, 404, 409, 503, 302] {
            assert!(!status(code, None).retryable(), "{code} is not retried");
        }
        assert!(status(503, Some(1)).retryable(), "503 asking for a delay");
        assert!(
            status(404, Some(2)).retryable(),
            "any answer asking for a delay"
        );
        assert!(!status(503, Some(0)).retryable());
        let reset = CallError::Transport {
            message: String::new(),
            reset: true,
        };
        let refused = CallError::Transport {
            message: String::new(),
            reset: false,
        };
        assert!(reset.retryable());
        assert!(!refused.retryable());
        assert!(!CallError::TimedOut(Duration::from_secs(1)).retryable());
        assert!(!CallError::Undecodable(String::new()).retryable());
        assert!(!CallError::TooLarge.retryable());
    }

    #[test]
    fn a_reset_is_found_among_the_causes() {
        #[derive(Debug)]
        struct Outer(io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("client error (SendRequest)")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let error = Outer(io::Error::from(io::ErrorKind::ConnectionReset));
        match transport_error(&error) {
            CallError::Transport { message, reset } => {
                assert!(reset);
                assert!(message.starts_with("client error (SendRequest): "));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn error_bodies_are_cut_short_on_one_line() {
        assert_eq!(snippet(b"HTTP Error\n"), "HTTP Error");
        let long = vec![b'x'; 1000];
        let cut = snippet(&long);
        assert_eq!(cut.len(), ERROR_BODY_SNIPPET + 3);
        assert!(cut.ends_with("..."));
    }
}
