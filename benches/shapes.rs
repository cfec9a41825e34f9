//! Authorize without a cache, by policy shape: one binding with many subjects, many
//! namespaces, a user in many groups, an aggregated ClusterRole, deny-heavy and negation-heavy
//! roles, an ABAC-heavy file, and the worst case where nothing matches. Each case is built by
//! `authzd::synth::shape_cases` over 100k background bindings and checks its expected answer
//! (engine and reference evaluator) before it is timed.
//!
//! Run: `cargo bench --bench shapes`.

use std::hint::black_box;
use std::time::Duration;

use authzd::engine::reference::ReferenceEvaluator;
use authzd::engine::{Engine, EngineConfig};
use authzd::synth;
use criterion::{criterion_group, criterion_main, Criterion};

/// Background bindings, and the width of the stressed part of each shape.
const BINDINGS: usize = 100_000;
const WIDE: usize = 1_000;
/// `cargo test --all-targets` runs each bench once as a smoke test, in a debug build: a small
/// background keeps that quick while still checking every answer.
const SMOKE_BINDINGS: usize = 2_000;

fn shapes(c: &mut Criterion) {
    let mut group = c.benchmark_group("shapes");
    group.measurement_time(Duration::from_secs(1));
    group.warm_up_time(Duration::from_millis(300));
    let config = EngineConfig::default();
    // `cargo bench` passes `--bench`; a smoke run under `cargo test` does not.
    let bindings = if std::env::args().any(|a| a == "--bench") {
        BINDINGS
    } else {
        SMOKE_BINDINGS
    };
    for case in synth::shape_cases(bindings, WIDE, 42) {
        let engine = Engine::new(&case.policy, config.clone());
        let answer = engine.authorize(&case.request);
        assert_eq!(answer.decision, case.expected, "{}: {answer:?}", case.name);
        let reference = ReferenceEvaluator::new(&case.policy, &config);
        assert_eq!(
            reference.authorize(&case.request).decision,
            case.expected,
            "{} (reference)",
            case.name
        );
        let id = format!("{}/{bindings}-bindings/{WIDE}-wide", case.name);
        group.bench_function(id, |b| {
            b.iter(|| engine.authorize(black_box(&case.request)))
        });
    }
    group.finish();
}

criterion_group!(benches, shapes);
criterion_main!(benches);
