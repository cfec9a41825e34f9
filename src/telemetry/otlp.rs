//! OpenTelemetry trace export over OTLP/gRPC.
//!
//! Export is on when `--otlp-endpoint` is given or the standard `OTEL_EXPORTER_OTLP_ENDPOINT`
//! / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set; the exporter reads the other standard
//! variables (`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_BSP_*`,
//! `OTEL_SERVICE_NAME`) itself. The exporter's gRPC channel needs the tokio runtime, so for
//! `serve` the subscriber is installed inside it, with the layer [`exporter`] returns.

use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, Tracer};
use opentelemetry_sdk::Resource;
use thiserror::Error;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::Registry;

/// The `tracing` layer that turns spans into OpenTelemetry spans.
pub type OtlpLayer = OpenTelemetryLayer<Registry, Tracer>;

#[derive(Debug, Error)]
pub enum OtlpError {
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// Whether trace export is configured, by flag or by the standard environment variables.
pub fn configured(endpoint_flag: Option<&str>) -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    endpoint_flag.is_some()
        || set("OTEL_EXPORTER_OTLP_ENDPOINT")
        || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
}

/// Flushes and stops the exporter when dropped (at the end of `serve`), so the spans of the
/// last requests are not lost.
pub struct OtlpGuard {
    provider: SdkTracerProvider,
}

impl Drop for OtlpGuard {
    fn drop(&mut self) {
        if let Err(error) = self.provider.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(%error, "OTLP exporter did not shut down cleanly");
        }
    }
}

/// The exporter and the layer feeding it, for [`super::init`]. Must run inside the tokio
/// runtime. `None` when export is not configured.
pub fn exporter(endpoint_flag: Option<&str>) -> Result<Option<(OtlpLayer, OtlpGuard)>, OtlpError> {
    if !configured(endpoint_flag) {
        return Ok(None);
    }
    let mut exporter = opentelemetry_otlp::SpanExporter::builder().with_tonic();
    if let Some(endpoint) = endpoint_flag {
        exporter = exporter.with_endpoint(endpoint);
    }
    let exporter = exporter.build()?;
    let resource = Resource::builder()
        .with_service_name(service_name())
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("authzd"));
    Ok(Some((layer, OtlpGuard { provider })))
}

/// `OTEL_SERVICE_NAME`, else `authzd`.
fn service_name() -> String {
    std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| "authzd".to_owned())
}

/// The W3C trace context (`traceparent`, `tracestate`) a caller sent, from gRPC metadata or
/// HTTP headers (both are HTTP/2 or HTTP/1.1 headers by the time they reach us).
pub fn remote_context(headers: &http::HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&Headers(headers))
}

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TraceContextExt as _;

    use super::*;

    #[test]
    fn traceparent_is_read_from_headers() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            http::HeaderValue::from_static(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
        );
        let context = remote_context(&headers);
        let span = context.span();
        let remote = span.span_context();
        assert!(remote.is_valid());
        assert!(remote.is_remote());
        assert_eq!(
            remote.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(remote.span_id().to_string(), "00f067aa0ba902b7");
    }

    #[test]
    fn malformed_traceparent_gives_no_parent() {
        let mut headers = http::HeaderMap::new();
        headers.insert("traceparent", http::HeaderValue::from_static("00-zz-yy-01"));
        assert!(!remote_context(&headers).span().span_context().is_valid());
        assert!(!remote_context(&http::HeaderMap::new())
            .span()
            .span_context()
            .is_valid());
    }
}
