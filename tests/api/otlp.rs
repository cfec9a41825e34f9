//! OpenTelemetry export end to end: a real authzd exports its spans over OTLP/gRPC to a small
//! trace receiver run by this test, and the span of an Authorize call continues the caller's
//! W3C trace (`traceparent` in the gRPC metadata) and carries the decision.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::server::{resource_request, sample_policy, Server};
use authzd::proto::authorizer_client::AuthorizerClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

/// Keeps every span it is sent.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .map(|value| match value {
            Value::StringValue(s) => s.clone(),
            Value::BoolValue(b) => b.to_string(),
            Value::IntValue(i) => i.to_string(),
            other => format!("{other:?}"),
        })
}

#[tokio::test]
async fn authorize_span_continues_the_callers_trace() {
    let receiver = Receiver::default();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector = format!("http://{}", listener.local_addr().unwrap());
    let serving = receiver.clone();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(serving))
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await
    });

    let policy = sample_policy();
    // The batch exporter sends every 5 s by default; the test does not want to wait that long.
    // Set for the server only: the tests beside this one share this process's environment.
    let server = Server::start_env(
        policy.path(),
        &["--otlp-endpoint", &collector],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    );
    server.wait_serving().await;

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_span_id = "00f067aa0ba902b7";
    let mut client = AuthorizerClient::new(server.channel().await);
    let mut request = tonic::Request::new(resource_request("alice", &[], "dev", "get", "pods"));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-{parent_span_id}-01")
            .parse()
            .unwrap(),
    );
    let answer = client.authorize(request).await.unwrap().into_inner();
    assert!(answer.allowed);

    let deadline = Instant::now() + Duration::from_secs(20);
    let span = loop {
        let found = receiver
            .spans
            .lock()
            .unwrap()
            .iter()
            .find(|span| hex(&span.trace_id) == trace_id)
            .cloned();
        if let Some(span) = found {
            break span;
        }
        assert!(
            Instant::now() < deadline,
            "no span with the caller's trace id reached the collector; got {} span(s); authzd stderr:\n{}",
            receiver.spans.lock().unwrap().len(),
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(hex(&span.parent_span_id), parent_span_id);
    assert_eq!(span.name, "authorize");
    assert_eq!(attribute(&span, "decision").as_deref(), Some("allow"));
    assert_eq!(attribute(&span, "cached").as_deref(), Some("false"));
    assert_eq!(attribute(&span, "revision").as_deref(), Some("1"));
    assert_eq!(attribute(&span, "caller").as_deref(), Some("system:admin"));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
