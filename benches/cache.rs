//! The decision cache: hit latency with 100k entries, miss-and-insert cost, and the hit ratio
//! of a bounded cache under a skewed (Zipf-like) workload. Also full compile time at 10k and
//! 100k bindings; `benches/update.rs` sets incremental updates next to it.
//!
//! Run: `cargo bench --bench cache`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use authzd::cache::{CacheConfig, CachedEngine, DecisionCache, Lookup};
use authzd::engine::{Authorize, Engine, EngineConfig};
use authzd::request::{Action, Request, ResourceAttributes, UserInfo};
use authzd::synth::{self, Shape};
use criterion::{criterion_group, criterion_main, Criterion};

fn request(user: usize, namespace: usize) -> Request {
    Request {
        user: UserInfo {
            name: format!("user-{user}"),
            groups: vec![
                format!("group-{}", user % 50),
                "system:authenticated".to_string(),
            ],
            ..Default::default()
        },
        action: Action::Resource(ResourceAttributes {
            namespace: synth::namespace(namespace),
            verb: "get".to_string(),
            version: "v1".to_string(),
            resource: "pods".to_string(),
            ..Default::default()
        }),
    }
}

fn cache(c: &mut Criterion) {
    let shape = Shape::with_bindings(100_000);
    let policy = synth::policy(&shape, 42);
    let engine = Engine::new(&policy, EngineConfig::default());
    let cache = DecisionCache::new(CacheConfig {
        capacity: 200_000,
        ..Default::default()
    });
    cache.begin_revision(1);
    let cached = CachedEngine {
        cache: &cache,
        engine: &engine,
        revision: 1,
    };
    // Fill with 100k distinct decisions.
    for i in 0..100_000 {
        cached.decide(request(i % 25_000, i / 25_000).as_borrowed());
    }
    assert_eq!(cache.len(), 100_000);
    let hot = request(7, 1);
    assert!(cached.decide(hot.as_borrowed()).cached, "expected a hit");

    let mut group = c.benchmark_group("cache");
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("hit/100k-entries", |b| {
        b.iter(|| match cache.lookup(black_box(&hot)) {
            Lookup::Hit(r) => r,
            _ => unreachable!("hot entry must hit"),
        })
    });
    group.bench_function("decide-hit/100k-entries", |b| {
        b.iter(|| cached.decide(black_box(&hot).as_borrowed()))
    });
    let cold = request(99_999_999, 3);
    group.bench_function("decide-uncached/100k-bindings", |b| {
        b.iter(|| engine.authorize(black_box(&cold)))
    });
    group.finish();

    // Hit ratio of a 10k-entry cache under a skewed workload over 1M distinct requests:
    // request rank r is drawn with probability ~ 1/r (Zipf, s=1).
    let small = DecisionCache::new(CacheConfig {
        capacity: 10_000,
        ..Default::default()
    });
    small.begin_revision(1);
    let skewed = CachedEngine {
        cache: &small,
        engine: &engine,
        revision: 1,
    };
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let harmonic: f64 = (1..=1_000_000).map(|r| 1.0 / r as f64).sum();
    let samples = 300_000;
    let mut hits = 0u64;
    for _ in 0..samples {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let u = (state >> 11) as f64 / (1u64 << 53) as f64;
        // Inverse of the continuous approximation of the Zipf CDF.
        let rank = ((u * harmonic).exp() as usize).clamp(1, 1_000_000);
        if skewed.decide(request(rank, rank % 7).as_borrowed()).cached {
            hits += 1;
        }
    }
    println!(
        "cache/hit-ratio/zipf-s1/1M-keys/10k-capacity: {:.1}% over {samples} requests ({} evictions)",
        100.0 * hits as f64 / samples as f64,
        small.stats.evictions.get()
    );
}

fn compile(c: &mut Criterion) {
    let mut group = c.benchmark_group("compile");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    for size in [10_000usize, 100_000] {
        let policy = Arc::new(synth::policy(&Shape::with_bindings(size), 42));
        group.bench_function(format!("full/{size}-bindings"), |b| {
            b.iter(|| Engine::new(black_box(&policy), EngineConfig::default()))
        });
    }
    group.finish();
}

criterion_group!(benches, cache, compile);
criterion_main!(benches);
