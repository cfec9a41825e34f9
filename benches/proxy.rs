//! What `authzd proxy` adds in front of a trivial upstream, with its local decision cache on
//! and off, side by side in alternating rounds of one run (docs/proxy.md):
//!
//! * `direct`: GET /metrics straight to the upstream (an in-process hyper server answering
//!   `ok`), over one keep-alive HTTP/1.1 connection;
//! * `cached`: the same through `authzd proxy` (local cache on: an allowed request is answered
//!   from memory);
//! * `uncached`: through `authzd proxy --local-cache=false` (every request asks authzd);
//! * `authorize`: one Authorize round trip to the same authzd through the client library, the
//!   cost a hit saves.
//!
//! The bar: (p50 uncached − p50 direct) − (p50 cached − p50 direct) is at least 80 % of
//! p50 authorize. Run: `cargo bench --bench proxy` (under `cargo test --benches`: one short
//! round, as a smoke test).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use authzd::caller::{Client, Endpoint};
use authzd::request::{Action, NonResourceAttributes, Request, UserInfo};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use support::server::{Server, BIN};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `/metrics` for the service account `default/default` (kube-rbac-proxy's non-resource-url
/// example, as tests/e2e/proxy.rs runs it).
const POLICY: &str = include_str!("../tests/fixtures/metrics-url.yaml");

struct Proxy(Child, String);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn proxy(authzd: &str, upstream: &str, callers: &str, local_cache: bool) -> Proxy {
    let mut child = Command::new(BIN)
        .args([
            "proxy",
            "--insecure-listen-address=127.0.0.1:0",
            &format!("--upstream={upstream}"),
            &format!("--authzd-server={authzd}"),
            &format!("--token-auth-file={callers}"),
            &format!("--local-cache={local_cache}"),
        ])
        .env("AUTHZD_TOKEN", "proxy-token")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| {
            line.strip_prefix("authzd proxy listening on ")
                .map(str::to_string)
        })
        .expect("the proxy's address");
    std::thread::spawn(move || for _ in lines {});
    Proxy(child, addr)
}

/// A trivial upstream: `ok` to everything, on a keep-alive connection.
async fn upstream() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_| async {
                    Ok::<_, Infallible>(hyper::Response::new(http_body_util::Full::new(
                        Bytes::from_static(b"ok"),
                    )))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    format!("http://{addr}/")
}

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
    let policy = dir.path().join("policy");
    std::fs::create_dir(&policy).unwrap();
    std::fs::write(policy.join("metrics.yaml"), POLICY).unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "proxy-token,authzd-proxy,uid-p,system:masters\n").unwrap();
    let callers = dir.path().join("callers.csv");
    std::fs::write(
        &callers,
        "scraper-token,system:serviceaccount:default:default,uid-s\n",
    )
    .unwrap();
    let server = runtime.block_on(Server::start_serving(
        &policy,
        &["--token-auth-file", tokens.to_str().unwrap()],
    ));
    let upstream = runtime.block_on(upstream());
    let callers = callers.to_str().unwrap();
    let cached = proxy(&server.url(), &upstream, callers, true);
    let uncached = proxy(&server.url(), &upstream, callers, false);

    let http: HttpClient<_, Empty<Bytes>> = HttpClient::builder(TokioExecutor::new()).build_http();
    let get = |base: String| {
        let http = http.clone();
        async move {
            let request = hyper::Request::get(format!("{}metrics", base))
                .header("authorization", "Bearer scraper-token")
                .body(Empty::new())
                .unwrap();
            let started = Instant::now();
            let response = http.request(request).await.unwrap();
            assert_eq!(response.status(), 200, "{base}");
            response.into_body().collect().await.unwrap();
            started.elapsed()
        }
    };
    let mut endpoint = Endpoint::new(server.url());
    endpoint.token = Some("proxy-token".into());
    let client = runtime.block_on(Client::connect(&endpoint)).unwrap();
    let question = Request {
        user: UserInfo {
            name: "system:serviceaccount:default:default".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        },
        action: Action::NonResource(NonResourceAttributes {
            path: "/metrics".into(),
            verb: "get".into(),
        }),
    };
    let targets = [
        ("direct", upstream.clone()),
        ("cached", format!("http://{}/", cached.1)),
        ("uncached", format!("http://{}/", uncached.1)),
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); 4];
    runtime.block_on(async {
        // Warm every connection, and the cached proxy's cache (its stream subscribes first).
        for _ in 0..200 {
            for (_, base) in &targets {
                get(base.clone()).await;
            }
            client.authorize(&question).await.unwrap();
        }
        for _ in 0..rounds {
            for (i, (_, base)) in targets.iter().enumerate() {
                for _ in 0..per_round {
                    samples[i].push(get(base.clone()).await);
                }
            }
            for _ in 0..per_round {
                let started = Instant::now();
                assert!(client.authorize(&question).await.unwrap().allowed());
                samples[3].push(started.elapsed());
            }
        }
    });
    let [direct, cached_p50, uncached_p50, authorize] =
        [0, 1, 2, 3].map(|i| median(&mut samples[i]));
    let added = |p50: Duration| p50.saturating_sub(direct);
    let saved = added(uncached_p50).saturating_sub(added(cached_p50));
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "proxy: {rounds} alternating rounds of {per_round} requests each; p50 in µs: direct \
         {:.1}, through the proxy with the local cache {:.1} (adds {:.1}), without it {:.1} \
         (adds {:.1}); one Authorize round trip {:.1}; the cache saves {:.1} = {:.0}% of a \
         round trip (bar: 80%)",
        micros(direct),
        micros(cached_p50),
        micros(added(cached_p50)),
        micros(uncached_p50),
        micros(added(uncached_p50)),
        micros(authorize),
        micros(saved),
        100.0 * saved.as_secs_f64() / authorize.as_secs_f64().max(f64::MIN_POSITIVE),
    );
}
