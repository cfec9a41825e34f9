//! Content-aware rules (docs/policy.md §4), side by side with the plain path they must not slow down.
//! Every bench checks its expected answer before it measures.
//!
//! * `content/plain-hit` vs `content/unread-2k-hit`: a cache hit, without content and carrying
//!   2 KiB of content no candidate rule reads (never decoded: checked).
//! * `content/plan-hit_object-selector`: a cached plan finished by an object selector on an
//!   object already decoded.
//! * `content/decode_2k-pair` vs `content/fields_2k-update`: decoding a 2 KiB update's two
//!   objects, against the whole fields check of that update (decode, diff, coverage) with one
//!   label changed.
//! * `content/who-can-plain` vs `content/who-can-content` at 100k bindings: who can update a
//!   ConfigMap, without and with an update's content.
//! * Paired (`target/criterion/content-paired.json`): the two ratio targets again, each side
//!   timed in alternation round after round and the ratio taken per round, median over the
//!   rounds. This machine's speed drifts by tens of percent from one criterion bench to the
//!   next; measured in alternation both sides see the same drift, so the ratio holds still.
//!
//! Run: `cargo bench --bench content`.
//!
//! On the server's allocator (mimalloc, `src/main.rs`): decoding content is mostly allocating
//! and freeing small strings and maps, and glibc malloc's consolidation would both misstate
//! what the server pays and swamp the ratios here with its noise.

// Bench setup: a panic is a failed bench, which is what we want.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use authzd::cache::{CacheConfig, CachedEngine, DecisionCache};
use authzd::engine::{Authorize, Decision, Engine, EngineConfig};
use authzd::policy::load::{parse_manifest, LoadOptions};
use authzd::policy::model::PolicySet;
use authzd::request::{Action, Content, Request, ResourceAttributes, UserInfo, Which};
use authzd::synth::{self, Shape};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Restricted rules for `content-bot` in `ns-0`, next to the synthetic policy.
const RULES: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: content-rules, namespace: ns-0}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [update], fields: [".metadata.labels"]}
- {apiGroups: [""], resources: [configmaps], verbs: [get], objectSelector: {matchLabels: {app: web}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: content-bot, namespace: ns-0}
subjects: [{kind: User, name: content-bot}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: content-rules}
"#;

fn policy_of(bindings: usize) -> (Shape, PolicySet) {
    let shape = Shape::with_bindings(bindings);
    let mut policy = synth::policy(&shape, 42);
    for object in
        parse_manifest("content.yaml", RULES, &LoadOptions::default()).expect("rules load")
    {
        policy.push(object)
    }
    (shape, policy)
}

/// A ConfigMap of about 2 KiB, and the same with one label changed.
fn configmap_pair() -> (Vec<u8>, Vec<u8>) {
    let labels: serde_json::Map<String, serde_json::Value> = (0..10)
        .map(|i| {
            (
                format!("label-{i}.example.com/key"),
                format!("value-{i}").into(),
            )
        })
        .collect();
    let data: serde_json::Map<String, serde_json::Value> = (0..24)
        .map(|i| (format!("key-{i}"), "x".repeat(48).into()))
        .collect();
    let old = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web", "namespace": "ns-0", "resourceVersion": "17",
            "uid": "3f1c0e6a-8f3e-4c3a-9a4e-2d3c1b0a9f8e", "labels": labels},
        "data": data,
    });
    let mut new = old.clone();
    new["metadata"]["labels"]["label-3.example.com/key"] = "changed".into();
    let old = serde_json::to_vec(&old).expect("serializes");
    let new = serde_json::to_vec(&new).expect("serializes");
    assert!((1900..2400).contains(&old.len()), "{} bytes", old.len());
    (old, new)
}

fn content_of(old: &[u8], new: &[u8]) -> Content {
    let mut content = Content::default();
    content.old_object = Some(old.to_vec());
    content.object = Some(new.to_vec());
    content
}

fn request(user: &str, verb: &str) -> Request {
    Request {
        user: UserInfo {
            name: user.to_string(),
            ..Default::default()
        },
        action: Action::Resource(ResourceAttributes {
            namespace: "ns-0".into(),
            verb: verb.into(),
            version: "v1".into(),
            resource: "configmaps".into(),
            name: "web".into(),
            ..Default::default()
        }),
    }
}

fn content(c: &mut Criterion) {
    let (shape, policy) = policy_of(10_000);
    let engine = Engine::new(&policy, EngineConfig::default());
    let cache = DecisionCache::new(CacheConfig::default());
    cache.begin_revision(1);
    let cached = CachedEngine {
        cache: &cache,
        engine: &engine,
        revision: 1,
    };
    let (old, new) = configmap_pair();
    let mut group = c.benchmark_group("content");
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_millis(500));

    // A plain request, with and without content no rule reads.
    let plain = synth::allowed_request(&shape);
    let unread = content_of(&old, &new);
    let with_unread = plain.with_content(Some(&unread));
    assert!(
        !cached
            .decide_content(plain.as_borrowed())
            .expect("decides")
            .cached
    );
    assert!(cached.decide_content(with_unread).expect("decides").cached);
    assert!(
        !unread.was_decoded(),
        "content no rule reads is never decoded"
    );
    group.bench_function("plain-hit", |b| {
        b.iter(|| cached.decide_content(black_box(plain.as_borrowed())))
    });
    group.bench_function("unread-2k-hit", |b| {
        b.iter(|| cached.decide_content(black_box(with_unread)))
    });
    assert!(!unread.was_decoded());

    // A plan hit finished by an object selector on a decoded object.
    let get = request("content-bot", "get");
    let mut stored = Content::default();
    stored.old_object = Some(br#"{"metadata":{"name":"web","labels":{"app":"web"}}}"#.to_vec());
    assert!(stored.decoded(Which::OldObject).is_some_and(|v| v.is_ok()));
    let ask = get.with_content(Some(&stored));
    assert_eq!(
        cached
            .decide_content(ask)
            .expect("decides")
            .response
            .decision,
        Decision::Allow
    );
    assert!(cached.decide_content(ask).expect("decides").cached);
    group.bench_function("plan-hit_object-selector", |b| {
        b.iter(|| cached.decide_content(black_box(ask)))
    });

    // Decoding a 2 KiB update's objects, against the whole fields check of it.
    let update = request("content-bot", "update");
    let fresh = content_of(&old, &new);
    assert_eq!(
        cached
            .decide_content(update.with_content(Some(&fresh)))
            .expect("decides")
            .response
            .decision,
        Decision::Allow
    );
    group.bench_function("decode_2k-pair", |b| {
        b.iter_batched(
            || content_of(&old, &new),
            |content| {
                let _ = black_box(content.decoded(Which::Object));
                let _ = black_box(content.decoded(Which::OldObject));
                content
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("fields_2k-update", |b| {
        b.iter_batched(
            || content_of(&old, &new),
            |content| {
                let decided = cached.decide_content(update.with_content(Some(&content)));
                (black_box(decided).is_ok(), content)
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();

    // Who can at 100k bindings, without and with an update's content.
    let (_, big) = policy_of(100_000);
    let engine = Arc::new(Engine::new(&big, EngineConfig::default()));
    let action = update.action.clone();
    let plain_answer = engine.allowed_subjects(&action);
    let content_answer = engine
        .allowed_subjects_content(&action, Some(&content_of(&old, &new)))
        .expect("decides");
    assert!(!plain_answer.users.iter().any(|u| u == "content-bot"));
    assert!(content_answer.users.iter().any(|u| u == "content-bot"));
    let mut group = c.benchmark_group("content");
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("who-can-plain_100k", |b| {
        b.iter(|| engine.allowed_subjects(black_box(&action)))
    });
    group.bench_function("who-can-content_100k", |b| {
        b.iter_batched(
            || content_of(&old, &new),
            |content| {
                let answer = engine.allowed_subjects_content(black_box(&action), Some(&content));
                (answer.is_ok(), content)
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();

    // The same ratios, measured in alternation (only when benchmarking: `cargo test` runs
    // this file once as a smoke test).
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let contents = || (0..PAIRED_BATCH).map(|_| content_of(&old, &new)).collect();
    let decode = |batch: Vec<Content>| {
        timed(batch, |content| {
            let _ = black_box(content.decoded(Which::Object));
            let _ = black_box(content.decoded(Which::OldObject));
        })
    };
    let fields = |batch: Vec<Content>| {
        timed(batch, |content| {
            let _ = black_box(cached.decide_content(update.with_content(Some(content))));
        })
    };
    let who_plain = |batch: Vec<Content>| {
        timed(batch, |_| {
            black_box(engine.allowed_subjects(black_box(&action)));
        })
    };
    let who_content = |batch: Vec<Content>| {
        timed(batch, |content| {
            let _ = black_box(engine.allowed_subjects_content(black_box(&action), Some(content)));
        })
    };
    let mut rounds: Vec<[f64; 4]> = Vec::new();
    for round in 0..PAIRED_ROUNDS {
        let mut times = [0.0; 4];
        // Rotated, so no side always runs first.
        for k in 0..4 {
            let which = (round + k) % 4;
            let batch = contents();
            times[which] = match which {
                0 => decode(batch),
                1 => fields(batch),
                2 => who_plain(batch),
                _ => who_content(batch),
            };
        }
        rounds.push(times);
    }
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let column = |i: usize| median(rounds.iter().map(|r| r[i]).collect());
    let fields_ratio = median(rounds.iter().map(|r| r[1] / r[0]).collect());
    let who_ratio = median(rounds.iter().map(|r| r[3] / (2.0 * r[2] + r[0])).collect());
    let report = serde_json::json!({
        "rounds": PAIRED_ROUNDS,
        "batch": PAIRED_BATCH,
        "decode_2k_pair_ns": column(0),
        "fields_2k_update_ns": column(1),
        "who_can_plain_100k_ns": column(2),
        "who_can_content_100k_ns": column(3),
        "fields_over_decode": fields_ratio,
        "who_can_content_over_bound": who_ratio,
    });
    println!("content/paired {report}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/criterion");
    std::fs::create_dir_all(&dir).expect("target/criterion");
    std::fs::write(dir.join("content-paired.json"), report.to_string()).expect("writes");
}

/// Rounds of the paired measurement, and requests per side per round.
const PAIRED_ROUNDS: usize = 400;
const PAIRED_BATCH: usize = 64;

/// Nanoseconds per item of `work` over `batch` (dropped after the clock stops).
fn timed(mut batch: Vec<Content>, mut work: impl FnMut(&Content)) -> f64 {
    let start = std::time::Instant::now();
    for content in &mut batch {
        work(content);
    }
    let elapsed = start.elapsed().as_nanos() as f64;
    let n = batch.len() as f64;
    drop(batch);
    elapsed / n
}

criterion_group!(benches, content);
criterion_main!(benches);
