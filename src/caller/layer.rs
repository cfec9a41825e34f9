//! A `tower` layer that authorizes every HTTP (or gRPC) request of the service it wraps: a
//! function the user supplies maps the request to attributes (who, and what they ask), the
//! [`Client`] decides (from its local cache when it has one), and a refused request is
//! answered `403` with the reason (gRPC: `PERMISSION_DENIED`) without reaching the service.
//! A request the function cannot map is answered `401` (gRPC: `UNAUTHENTICATED`); one the
//! server could not decide, `503` (`UNAVAILABLE`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{Either, Full};

use super::client::Client;
use crate::request::Request;

/// The body of a response from the wrapped service or of a refusal.
pub type Body<B> = Either<B, Full<Bytes>>;

/// See the module docs. `attributes` returns `Err(why)` for a request it cannot map.
pub struct AuthorizeLayer<F> {
    client: Client,
    attributes: Arc<F>,
}

impl<F> AuthorizeLayer<F> {
    pub fn new(client: Client, attributes: F) -> Self {
        Self {
            client,
            attributes: Arc::new(attributes),
        }
    }
}

impl<F> Clone for AuthorizeLayer<F> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            attributes: Arc::clone(&self.attributes),
        }
    }
}

impl<S, F> tower::Layer<S> for AuthorizeLayer<F> {
    type Service = AuthorizeService<S, F>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthorizeService {
            inner,
            client: self.client.clone(),
            attributes: Arc::clone(&self.attributes),
        }
    }
}

pub struct AuthorizeService<S, F> {
    inner: S,
    client: Client,
    attributes: Arc<F>,
}

impl<S: Clone, F> Clone for AuthorizeService<S, F> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            client: self.client.clone(),
            attributes: Arc::clone(&self.attributes),
        }
    }
}

/// A refusal as the caller's protocol spells it.
fn refusal<B>(
    grpc: bool,
    status: http::StatusCode,
    code: u8,
    reason: &str,
) -> http::Response<Body<B>> {
    let mut response = http::Response::new(Either::Right(Full::new(if grpc {
        Bytes::new()
    } else {
        Bytes::from(format!("{reason}\n"))
    })));
    if grpc {
        // A trailers-only gRPC answer: the status in the headers.
        let headers = response.headers_mut();
        headers.insert(
            "content-type",
            http::HeaderValue::from_static("application/grpc"),
        );
        headers.insert("grpc-status", http::HeaderValue::from(u16::from(code)));
        let message: String = reason
            .bytes()
            .flat_map(|b| match b {
                b' '..=b'~' if b != b'%' => vec![b as char],
                _ => format!("%{b:02X}").chars().collect(),
            })
            .collect();
        if let Ok(value) = http::HeaderValue::from_str(&message) {
            headers.insert("grpc-message", value);
        }
    } else {
        *response.status_mut() = status;
        response.headers_mut().insert(
            "content-type",
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    response
}

impl<S, F, B, RB> tower::Service<http::Request<B>> for AuthorizeService<S, F>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>> + Clone + Send + 'static,
    S::Future: Send,
    F: Fn(&http::Request<B>) -> Result<Request, String> + Send + Sync + 'static,
    B: Send + 'static,
{
    type Response = http::Response<Body<RB>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The service polled ready is the one that serves this request (tower's contract).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let client = self.client.clone();
        let grpc = request
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/grpc"));
        let attributes = (self.attributes)(&request);
        Box::pin(async move {
            let asked = match attributes {
                Ok(asked) => asked,
                Err(why) => {
                    return Ok(refusal(grpc, http::StatusCode::UNAUTHORIZED, 16, &why));
                }
            };
            match client.authorize(&asked).await {
                Ok(answer) if answer.allowed() => {
                    let response = inner.call(request).await?;
                    Ok(response.map(Either::Left))
                }
                Ok(answer) => {
                    let reason = if answer.response.reason.is_empty() {
                        "forbidden"
                    } else {
                        answer.response.reason.as_str()
                    };
                    Ok(refusal(grpc, http::StatusCode::FORBIDDEN, 7, reason))
                }
                Err(status) => Ok(refusal(
                    grpc,
                    http::StatusCode::SERVICE_UNAVAILABLE,
                    14,
                    &format!("authorization unavailable: {}", status.message()),
                )),
            }
        })
    }
}
