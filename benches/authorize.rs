//! Authorize without a cache: the compiled index against the reference evaluator (upstream's
//! linear walk over every binding), side by side, at 1k, 10k and 100k bindings. Every bench
//! checks its expected answer before it measures.
//!
//! Run: `cargo bench --bench authorize`. With `cargo test --all-targets` each bench runs once
//! as a smoke test so the benches cannot rot.

use std::hint::black_box;
use std::time::Duration;

use authzd::engine::reference::ReferenceEvaluator;
use authzd::engine::{Decision, Engine, EngineConfig};
use authzd::synth::{self, Shape};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

const SIZES: &[usize] = &[1_000, 10_000, 100_000];

fn authorize(c: &mut Criterion) {
    let mut group = c.benchmark_group("authorize");
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_millis(500));
    for &size in SIZES {
        let shape = Shape::with_bindings(size);
        let policy = synth::policy(&shape, 42);
        let config = EngineConfig::default();
        let engine = Engine::new(&policy, config.clone());
        let reference = ReferenceEvaluator::new(&policy, &config);

        let cases = [
            ("allow", synth::allowed_request(&shape), Decision::Allow),
            ("deny", synth::denied_request(&shape), Decision::Deny),
            (
                "no-match",
                synth::unmatched_request(&shape),
                Decision::NoOpinion,
            ),
        ];
        for (name, request, expected) in &cases {
            assert_eq!(
                engine.authorize(request).decision,
                *expected,
                "{name} at {size}"
            );
            assert_eq!(
                reference.authorize(request).decision,
                *expected,
                "{name} at {size}"
            );
            group.bench_with_input(
                BenchmarkId::new(format!("index/{name}"), size),
                request,
                |b, r| b.iter(|| engine.authorize(black_box(r))),
            );
        }
        // The oracle is linear in bindings: one case is enough to show the slope.
        let (_, request, _) = &cases[0];
        group.sample_size(10);
        group.bench_with_input(
            BenchmarkId::new("reference/allow", size),
            request,
            |b, r| b.iter(|| reference.authorize(black_box(r))),
        );
        group.sample_size(100);
    }
    group.finish();
}

/// Who can get pods in `ns-0`: the inverted index against the reference evaluator's walk. The
/// answer at 100k bindings is ~100 subjects (cluster operators, the namespace's bindings, the
/// probe group).
fn who_can(c: &mut Criterion) {
    let mut group = c.benchmark_group("who-can");
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_millis(500));
    for &size in SIZES {
        let shape = Shape::with_bindings(size);
        let policy = synth::policy(&shape, 42);
        let config = EngineConfig::default();
        let engine = Engine::new(&policy, config.clone());
        let action = synth::who_can_action();
        let answer = engine.allowed_subjects(&action);
        let subjects = answer.users.len() + answer.groups.len();
        assert!(
            answer.groups.iter().any(|g| g.starts_with("bench-group")),
            "{answer:?}"
        );
        println!("who-can/index/{size}: {subjects} subjects in the answer");
        group.bench_with_input(BenchmarkId::new("index", size), &action, |b, a| {
            b.iter(|| engine.allowed_subjects(black_box(a)))
        });
        if size <= 10_000 {
            // The oracle decides every subject of the policy through the full chain: far too
            // slow to sample at 100k.
            let reference = ReferenceEvaluator::new(&policy, &config);
            assert_eq!(reference.allowed_subjects(&action), answer);
            group.sample_size(10);
            group.bench_with_input(BenchmarkId::new("reference", size), &action, |b, a| {
                b.iter(|| reference.allowed_subjects(black_box(a)))
            });
            group.sample_size(100);
        }
    }
    group.finish();
}

criterion_group!(benches, authorize, who_can);
criterion_main!(benches);
