//! The per-request layer: wraps the whole server (gRPC and HTTP alike), so every request is
//! counted, timed and, when traces are exported, given a span continuing the caller's trace.
//!
//! Handlers add what only they know (caller, decision, cached, revision) to the current span
//! with [`record_caller`] and [`record_decision`].

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use pin_project_lite::pin_project;
use tracing::instrument::Instrumented;
use tracing::{Instrument as _, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::metrics::{decision_label, Metrics, Route};
use crate::engine::Decision;

/// What the layer needs: where to count, how to name the webhook route, and whether spans are
/// exported (then each request gets an `info` span; otherwise a `debug` one, which costs
/// nothing at the default log level).
#[derive(Clone)]
pub struct RequestTelemetryLayer {
    metrics: Arc<Metrics>,
    webhook_path: Arc<str>,
    export_spans: bool,
}

/// Set once any layer exports spans: the handlers' span records then have a live span to
/// write to even at the default log level.
static SPANS_EXPORTED: AtomicBool = AtomicBool::new(false);

impl RequestTelemetryLayer {
    pub fn new(metrics: Arc<Metrics>, webhook_path: &str, export_spans: bool) -> Self {
        if export_spans {
            SPANS_EXPORTED.store(true, Ordering::Relaxed);
        }
        Self {
            metrics,
            webhook_path: Arc::from(webhook_path),
            export_spans,
        }
    }
}

impl<S> tower::Layer<S> for RequestTelemetryLayer {
    type Service = RequestTelemetry<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestTelemetry {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct RequestTelemetry<S> {
    inner: S,
    layer: RequestTelemetryLayer,
}

impl<S, B> tower::Service<http::Request<B>> for RequestTelemetry<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Timed<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let route = Route::of_path(request.uri().path(), &self.layer.webhook_path);
        let span = if self.layer.export_spans {
            let span = tracing::info_span!(
                "request",
                otel.name = route.label(),
                otel.kind = "server",
                route = route.label(),
                caller = tracing::field::Empty,
                decision = tracing::field::Empty,
                cached = tracing::field::Empty,
                revision = tracing::field::Empty,
            );
            let _ = span.set_parent(super::otlp::remote_context(request.headers()));
            span
        } else {
            tracing::debug_span!(
                "request",
                route = route.label(),
                caller = tracing::field::Empty,
                decision = tracing::field::Empty,
                cached = tracing::field::Empty,
                revision = tracing::field::Empty,
            )
        };
        self.layer.metrics.request_started();
        let in_flight = InFlight {
            metrics: Arc::clone(&self.layer.metrics),
            route,
            started: Instant::now(),
        };
        let future = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        Timed {
            inner: future.instrument(span),
            _in_flight: in_flight,
        }
    }
}

/// Counts the request finished when dropped: on completion, error or cancellation alike.
struct InFlight {
    metrics: Arc<Metrics>,
    route: Route,
    started: Instant,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.metrics
            .request_finished(self.route, self.started.elapsed());
    }
}

pin_project! {
    /// The inner response future, inside the request's span, timed until it resolves.
    pub struct Timed<F> {
        #[pin]
        inner: Instrumented<F>,
        _in_flight: InFlight,
    }
}

impl<F: Future> Future for Timed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}

/// Whether the current request may have a live span: its span is `info` when spans are
/// exported and `debug` otherwise, so at the default level (`info`, not exporting) it has
/// none, and looking the current span up (a registry lookup and a reference count, on every
/// request) would find it disabled.
fn request_span_may_be_live() -> bool {
    SPANS_EXPORTED.load(Ordering::Relaxed) || tracing::level_enabled!(tracing::Level::DEBUG)
}

/// Adds the authenticated caller to the current request's span.
pub fn record_caller(name: &str) {
    if !request_span_may_be_live() {
        return;
    }
    let span = Span::current();
    if !span.is_disabled() {
        span.record("caller", name);
    }
}

/// Adds a decision to the current request's span.
pub fn record_decision(decision: Decision, cached: bool, revision: u64) {
    if !request_span_may_be_live() {
        return;
    }
    let span = Span::current();
    if !span.is_disabled() {
        span.record("decision", decision_label(decision));
        span.record("cached", cached);
        span.record("revision", revision);
    }
}
