//! An AuthZEN evaluation over HTTP/1.1 keep-alive against the same decision asked as a REST
//! SubjectAccessReview, side by side in alternating rounds of one run, against one authzd
//! holding `tests/fixtures/authzen.yaml` (docs/authzen.md):
//!
//! * `authzen`: `POST /access/v1/evaluation` (morty may read todo-1);
//! * `sar`: `POST /apis/authorization.k8s.io/v1/subjectaccessreviews` with the request the
//!   evaluation maps to.
//!
//! Both over one client's pooled keep-alive connection, one request at a time; both allowed
//! (checked). The issue's bar: the AuthZEN median within 1.5x of the review's. Run:
//! `AUTHZD_TEST_RUST_LOG=warn cargo bench --bench authzen` (under `cargo test --benches`: one
//! short round, as a smoke test).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use support::server::Server;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const POLICY: &str = include_str!("../tests/fixtures/authzen.yaml");

const AUTHZEN: &str = r#"{"subject": {"type": "user", "id": "morty"}, "action": {"name": "can_read_todos"}, "resource": {"type": "todo", "id": "todo-1"}}"#;

const SAR: &str = r#"{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {"user": "morty", "resourceAttributes": {"verb": "can_read_todos", "resource": "todo", "name": "todo-1"}}}"#;

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (rounds, per_round) = if full { (20, 1000) } else { (1, 50) };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("authzen.yaml"), POLICY).unwrap();
    // Run with `AUTHZD_TEST_RUST_LOG=warn` to measure the server as it is run (no per-request
    // info logging).
    let server = runtime.block_on(Server::start_serving(dir.path(), &[]));
    let base = server.url();
    let http: HttpClient<_, Full<Bytes>> = HttpClient::builder(TokioExecutor::new()).build_http();
    let post = |path: &'static str, body: &'static str, expect: &'static str| {
        let http = http.clone();
        let url = format!("{base}{path}");
        async move {
            let request = hyper::Request::post(url)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from_static(body.as_bytes())))
                .unwrap();
            let started = Instant::now();
            let response = http.request(request).await.unwrap();
            let status = response.status();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            let elapsed = started.elapsed();
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                status.is_success() && text.contains(expect),
                "{path}: {status} {text}"
            );
            elapsed
        }
    };
    let authzen = || post("/access/v1/evaluation", AUTHZEN, r#""decision":true"#);
    let sar = || {
        post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            SAR,
            r#""allowed":true"#,
        )
    };
    let (mut evaluations, mut reviews) = (Vec::new(), Vec::new());
    runtime.block_on(async {
        for _ in 0..200 {
            authzen().await;
            sar().await;
        }
        for _ in 0..rounds {
            for _ in 0..per_round {
                evaluations.push(authzen().await);
            }
            for _ in 0..per_round {
                reviews.push(sar().await);
            }
        }
    });
    let (evaluation, review) = (median(&mut evaluations), median(&mut reviews));
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "authzen: {rounds} alternating rounds of {per_round} requests each over HTTP/1.1 keep-alive; \
         p50 in µs: AuthZEN evaluation {:.1}, REST SubjectAccessReview {:.1}; ratio {:.2}x (bar: 1.5x)",
        micros(evaluation),
        micros(review),
        evaluation.as_secs_f64() / review.as_secs_f64().max(f64::MIN_POSITIVE),
    );
}
