//! Load shedding and the per-request timeout, as one tower [`Layer`] that wraps any HTTP
//! service (today tonic's router; the combined gRPC + HTTP router when it lands).
//!
//! * **Shedding**: at most `max_in_flight` requests are worked on at once. One more is refused
//!   at once with `RESOURCE_EXHAUSTED` (HTTP 429 for plain HTTP callers) naming the limit;
//!   nothing is queued, so overload costs the server one small response per extra request
//!   and the latency of admitted requests stays that of a server at its limit.
//! * **Timeout**: an admitted request that has not produced its response headers within
//!   `request_timeout` is abandoned with `DEADLINE_EXCEEDED` (HTTP 504), freeing its slot.
//!   This bounds a slow client that trickles its request body as well as a slow handler.
//!
//! Health checks (`grpc.health.v1.Health`) take no slot: a probe must see a busy server as
//! alive. They still have the timeout.
//!
//! A slot is held until the wrapped service's response future resolves, that is until the
//! response headers are ready, and not while the response body streams. For unary calls
//! that is the whole call (tonic decodes the request and runs the handler inside that
//! future, the encoded answer is already in memory). For server-streaming calls (PolicyAdmin
//! `Watch`, health `Watch`, reflection) it is the set-up only: a long-lived stream does not
//! keep a request slot for its lifetime. Streams are bounded instead by the HTTP/2 stream
//! limit per connection and end when the server drains.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tonic::codegen::http;
use tower::{Layer, Service};

#[derive(Debug, Default)]
pub struct ShedStats {
    pub shed: AtomicU64,
    pub timed_out: AtomicU64,
}

/// What every request of one layer shares: one counter it increments and decrements, so that
/// admitting a request costs two atomic operations on it and nothing else shared.
#[derive(Debug)]
struct Shared {
    in_flight: AtomicUsize,
    max_in_flight: usize,
    request_timeout: Duration,
    stats: ShedStats,
}

#[derive(Clone, Debug)]
pub struct ShedLayer {
    shared: Arc<Shared>,
}

impl ShedLayer {
    pub fn new(max_in_flight: usize, request_timeout: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                in_flight: AtomicUsize::new(0),
                max_in_flight: max_in_flight.max(1),
                request_timeout,
                stats: ShedStats::default(),
            }),
        }
    }

    pub fn stats(&self) -> &ShedStats {
        &self.shared.stats
    }

    /// Requests holding a slot now.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Relaxed)
    }
}

impl<S> Layer<S> for ShedLayer {
    type Service = Shed<S>;

    fn layer(&self, inner: S) -> Shed<S> {
        Shed {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Shed<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// An admitted request's slot, given back when its response (or its refusal) is ready.
struct Slot(Option<Arc<Shared>>);

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(shared) = &self.0 {
            shared.in_flight.fetch_sub(1, Ordering::Release);
        }
    }
}

impl Shared {
    /// A slot, or `None` at the limit.
    fn admit(self: &Arc<Self>) -> Option<Slot> {
        let before = self.in_flight.fetch_add(1, Ordering::Acquire);
        if before >= self.max_in_flight {
            self.in_flight.fetch_sub(1, Ordering::Release);
            return None;
        }
        Some(Slot(Some(Arc::clone(self))))
    }
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for Shed<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    ResBody: Default,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = ShedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let grpc = is_grpc(&request);
        let slot = if request.uri().path().starts_with(UNSHED_PREFIX) {
            Some(Slot(None))
        } else {
            self.shared.admit()
        };
        let started = Instant::now();
        let Some(slot) = slot else {
            self.shared.stats.shed.fetch_add(1, Ordering::Relaxed);
            let max = self.shared.max_in_flight;
            tracing::debug!(max, path = request.uri().path(), "request shed");
            return ShedFuture {
                state: State::Shed,
                grpc,
                started,
                timer: None,
                shared: Arc::clone(&self.shared),
                slot: None,
            };
        };
        ShedFuture {
            state: State::Admitted {
                inner: self.inner.call(request),
            },
            grpc,
            started,
            timer: None,
            shared: Arc::clone(&self.shared),
            slot: Some(slot),
        }
    }
}

pin_project! {
    /// The response of an admitted request, bounded by the request timeout; or a refusal.
    ///
    /// The timer is only created if the response is not ready when first polled: most
    /// answers are, and then no timer is registered (or cancelled) at all. Its deadline still
    /// counts from the call.
    pub struct ShedFuture<F> {
        #[pin]
        state: State<F>,
        grpc: bool,
        started: Instant,
        timer: Option<Pin<Box<Sleep>>>,
        shared: Arc<Shared>,
        slot: Option<Slot>,
    }
}

pin_project! {
    #[project = StateProjection]
    enum State<F> {
        Admitted { #[pin] inner: F },
        Shed,
    }
}

impl<F, ResBody, E> Future for ShedFuture<F>
where
    F: Future<Output = Result<http::Response<ResBody>, E>>,
    ResBody: Default,
{
    type Output = Result<http::Response<ResBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let inner = match this.state.project() {
            StateProjection::Shed => {
                let max = this.shared.max_in_flight;
                return Poll::Ready(Ok(refusal(
                    *this.grpc,
                    tonic::Status::resource_exhausted(format!(
                        "server overloaded: {max} requests already in flight \
                         (--max-concurrent-requests); retry with backoff"
                    )),
                    http::StatusCode::TOO_MANY_REQUESTS,
                )));
            }
            StateProjection::Admitted { inner } => inner,
        };
        if let Poll::Ready(answer) = inner.poll(cx) {
            this.slot.take();
            return Poll::Ready(answer);
        }
        let timeout = this.shared.request_timeout;
        let started = *this.started;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(started + timeout)));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        // Abandoned: the inner future is dropped with this one; the slot is free now.
        this.slot.take();
        this.shared.stats.timed_out.fetch_add(1, Ordering::Relaxed);
        Poll::Ready(Ok(refusal(
            *this.grpc,
            tonic::Status::deadline_exceeded(format!(
                "request not answered within the server's request timeout of {} \
                 (--request-timeout)",
                humantime(timeout)
            )),
            http::StatusCode::GATEWAY_TIMEOUT,
        )))
    }
}

const UNSHED_PREFIX: &str = "/grpc.health.v1.Health/";

/// gRPC callers (any `application/grpc*` content type) get a trailers-only gRPC status;
/// everyone else the plain HTTP status.
fn is_grpc<B>(request: &http::Request<B>) -> bool {
    request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

fn refusal<B: Default>(
    grpc: bool,
    status: tonic::Status,
    http_status: http::StatusCode,
) -> http::Response<B> {
    if grpc {
        return status.into_http();
    }
    let mut response = http::Response::new(B::default());
    *response.status_mut() = http_status;
    if let Ok(value) = http::HeaderValue::from_str(status.message()) {
        response.headers_mut().insert("x-authzd-error", value);
    }
    response
}

/// `1.5s`, `250ms`: how the flags spell durations.
fn humantime(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    /// A service whose answers wait until `release` is notified.
    fn gated(
        release: Arc<tokio::sync::Notify>,
    ) -> impl Service<
        http::Request<()>,
        Response = http::Response<String>,
        Error = std::convert::Infallible,
        Future = impl Future + Send,
    > + Clone {
        tower::service_fn(move |_request: http::Request<()>| {
            let release = Arc::clone(&release);
            async move {
                release.notified().await;
                Ok::<_, std::convert::Infallible>(http::Response::new("answer".to_string()))
            }
        })
    }

    fn request(grpc: bool) -> http::Request<()> {
        let mut request = http::Request::new(());
        if grpc {
            request.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/grpc"),
            );
        }
        request
    }

    #[tokio::test]
    async fn the_request_over_the_limit_is_refused_at_once() {
        let release = Arc::new(tokio::sync::Notify::new());
        let layer = ShedLayer::new(1, Duration::from_secs(60));
        let service = layer.layer(gated(Arc::clone(&release)));

        let first = tokio::spawn(service.clone().oneshot(request(true)));
        // Wait until the first request holds the only slot.
        while layer.in_flight() == 0 {
            tokio::task::yield_now().await;
        }
        let refused = service.clone().oneshot(request(true)).await.unwrap();
        let status = tonic::Status::from_header_map(refused.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(status.message().contains("--max-concurrent-requests"));

        let refused = service.clone().oneshot(request(false)).await.unwrap();
        assert_eq!(refused.status(), http::StatusCode::TOO_MANY_REQUESTS);

        // A health check is not shed (it waits for the gate like any request here).
        let mut health = request(true);
        *health.uri_mut() = http::Uri::from_static("/grpc.health.v1.Health/Check");
        let health = tokio::spawn(service.clone().oneshot(health));
        tokio::task::yield_now().await;
        assert!(refused.headers().contains_key("x-authzd-error"));
        assert_eq!(layer.stats().shed.load(Ordering::Relaxed), 2);

        release.notify_waiters();
        assert_eq!(first.await.unwrap().unwrap().into_body(), "answer");
        assert_eq!(health.await.unwrap().unwrap().into_body(), "answer");
        // The slot is free again.
        let next = tokio::spawn(service.clone().oneshot(request(false)));
        while layer.in_flight() == 0 {
            tokio::task::yield_now().await;
        }
        release.notify_one();
        assert_eq!(next.await.unwrap().unwrap().into_body(), "answer");
    }

    #[tokio::test]
    async fn a_request_over_the_timeout_is_abandoned_and_frees_its_slot() {
        let release = Arc::new(tokio::sync::Notify::new());
        let layer = ShedLayer::new(1, Duration::from_millis(100));
        let service = layer.layer(gated(Arc::clone(&release)));

        let abandoned = service.clone().oneshot(request(true)).await.unwrap();
        let status = tonic::Status::from_header_map(abandoned.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        assert!(status.message().contains("100ms"), "{status:?}");
        let abandoned = service.clone().oneshot(request(false)).await.unwrap();
        assert_eq!(abandoned.status(), http::StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(layer.stats().timed_out.load(Ordering::Relaxed), 2);
        assert_eq!(layer.in_flight(), 0);
    }
}
