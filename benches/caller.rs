//! A decision answered in the caller's process (docs/caller-cache.md): the same Authorize
//! through the client library, side by side in one run —
//!
//! * `caller/local_hit`: answered from the local cache (`Client::authorize` on a warm entry
//!   with a proof in force; the future completes on its first poll);
//! * `caller/loopback_authorize`: the same request asked of a real `authzd serve` on
//!   127.0.0.1 through the same library without a local cache (the server answers it from its
//!   own cache), on a current-thread runtime driven by the benchmark's thread.
//!
//! Run: `cargo bench --bench caller`; its figures are in BENCHMARKS.md's run notes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use authzd::caller::{Client, Endpoint, LocalCacheConfig};
use criterion::{criterion_group, criterion_main, Criterion};
use support::server::Server;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Polls a future that completes without waiting (a local hit) once.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a local hit waited"),
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let policy = support::server::sample_policy();
    let server = runtime.block_on(Server::start_serving(policy.path(), &[]));
    let endpoint = Endpoint::new(server.url());
    let request = support::server::get_pods("jane", &["system:authenticated"], "default");
    // The remote client on a runtime of its own, driven by the benchmark's thread itself: each
    // round trip then costs no hop to a worker thread and back.
    let remote_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let remote = remote_runtime.block_on(Client::connect(&endpoint)).unwrap();
    let cached = runtime.block_on(async {
        let cached = Client::connect(&endpoint)
            .await
            .unwrap()
            .with_local_cache(LocalCacheConfig::new("bench"));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !cached.authorize(&request).await.unwrap().from_local_cache {
            assert!(
                std::time::Instant::now() < deadline,
                "never answered locally"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cached
    });
    let mut group = c.benchmark_group("caller");
    group.bench_function("local_hit", |b| {
        b.iter(|| {
            let answer = ready(cached.authorize(&request)).unwrap();
            assert!(answer.from_local_cache);
            answer
        })
    });
    group.bench_function("loopback_authorize", |b| {
        b.iter(|| remote_runtime.block_on(remote.authorize(&request)).unwrap())
    });
    group.finish();
    drop(server);
}

criterion_group!(benches, bench);
criterion_main!(benches);
