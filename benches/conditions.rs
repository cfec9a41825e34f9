//! CEL conditions on rules (docs/policy.md §6). Every bench checks its expected answer before it
//! measures.
//!
//! * `conditions/eval_seed004`: seed 004's condition (`object.metadata.labels ==
//!   oldObject.metadata.labels || 'label-editors' in request.userInfo.groups`) evaluated once
//!   on a 2 KiB ConfigMap update already decoded: the cost one CEL condition adds.
//! * `conditions/eval_true`, `conditions/eval_verb`: the floor (a constant), and one field of
//!   `request`.
//! * `conditions/eval_label`: one label compared between the objects (`object.metadata.labels
//!   ['k'] == oldObject.metadata.labels['k']`): a condition that reads a field.
//! * `conditions/plain-hit` vs `conditions/plan-hit_cel`: a cache hit without content, and a
//!   cached plan finished by that condition on the decoded update (the whole Authorize).
//! * `conditions/return-hit_cel`: the same update asked in RETURN mode without content: the
//!   cached plan and the conditions taken from it (against `plain-hit`).
//! * `conditions/worst_*`: the worst an accepted expression can do within the content limit
//!   (3 MiB per object): the widest macro over a 3 MiB list (`all` with a string method per
//!   element), a pattern over a 3 MiB string, and equality of two 3 MiB objects.
//! * Compile figures (`target/criterion/conditions-compile.json`), timed directly (compiling
//!   happens once per policy load): 100,000 synthetic bindings plus 1,000 roles each with its
//!   own condition, against the same policy with the roles' conditions removed.
//!
//! Run: `cargo bench --bench conditions`.

// Bench setup: a panic is a failed bench, which is what we want.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use authzd::cache::{CacheConfig, CachedEngine, DecisionCache};
use authzd::engine::conditional::{returned, Returned};
use authzd::engine::{Authorize, Decision, Engine, EngineConfig};
use authzd::policy::content::condition::{Condition, Input, RequestInput};
use authzd::policy::load::{parse_manifest, LoadOptions};
use authzd::policy::model::PolicySet;
use authzd::request::{Action, Content, Request, ResourceAttributes, UserInfo, Which};
use authzd::synth::{self, Shape};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SEED_004: &str =
    "object.metadata.labels == oldObject.metadata.labels || 'label-editors' in request.userInfo.groups";

/// One label, compared between the objects (reads two strings of each object).
const LABEL: &str = "object.metadata.labels['label-3.example.com/key'] == oldObject.metadata.labels['label-3.example.com/key']";

/// Seed 004's condition on updates of ConfigMaps in `ns-0`, for `cel-bot`.
fn rules() -> String {
    format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: cel-rules, namespace: ns-0}}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [update]
  condition: "{SEED_004}"
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: cel-bot, namespace: ns-0}}
subjects: [{{kind: User, name: cel-bot}}]
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: cel-rules}}
"#
    )
}

fn add(policy: &mut PolicySet, file: &str, text: &str) {
    for object in parse_manifest(file, text, &LoadOptions::default()).expect("rules load") {
        policy.push(object)
    }
}

/// A ConfigMap of about 2 KiB, and the same with its data changed (labels kept).
fn configmap_pair() -> (Value, Value) {
    let labels: serde_json::Map<String, Value> = (0..10)
        .map(|i| {
            (
                format!("label-{i}.example.com/key"),
                format!("value-{i}").into(),
            )
        })
        .collect();
    let data: serde_json::Map<String, Value> = (0..24)
        .map(|i| (format!("key-{i}"), "x".repeat(48).into()))
        .collect();
    let old = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web", "namespace": "ns-0", "resourceVersion": "17",
            "uid": "3f1c0e6a-8f3e-4c3a-9a4e-2d3c1b0a9f8e", "labels": labels},
        "data": data,
    });
    let mut new = old.clone();
    new["data"]["key-3"] = "changed".into();
    (old, new)
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

fn input<'a>(object: &'a Value, old: &'a Value) -> Input<'a> {
    Input {
        object: Some(object),
        old_object: Some(old),
        request: RequestInput {
            verb: "update",
            api_version: "v1",
            resource: "configmaps",
            name: "web",
            namespace: "ns-0",
            username: "cel-bot",
            ..Default::default()
        },
        changed_paths: &[],
        context: None,
    }
}

/// About `bytes` of JSON: a list of small items, the same as one string, and an object of both.
fn big_object(bytes: usize) -> Value {
    // Each item is about 40 bytes written out: half the budget for the list, half for the string.
    let items: Vec<Value> = (0..bytes / 86)
        .map(|i| json!({"name": format!("item-{i:08}"), "v": i}))
        .collect();
    json!({"metadata": {"name": "big"}, "items": items, "blob": "ab".repeat(bytes / 4 - 64)})
}

fn conditions(c: &mut Criterion) {
    let shape = Shape::with_bindings(10_000);
    let mut policy = synth::policy(&shape, 42);
    add(&mut policy, "cel.yaml", &rules());
    let engine = Engine::new(&policy, EngineConfig::default());
    let cache = DecisionCache::new(CacheConfig::default());
    cache.begin_revision(1);
    let cached = CachedEngine {
        cache: &cache,
        engine: &engine,
        revision: 1,
    };
    let mut group = c.benchmark_group("conditions");
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_millis(500));

    // One condition on a decoded update.
    let (old, new) = configmap_pair();
    let condition = Condition::compile(SEED_004).unwrap();
    assert_eq!(condition.evaluate(&input(&new, &old)), Ok(true));
    group.bench_function("eval_seed004", |b| {
        b.iter(|| condition.evaluate(black_box(&input(&new, &old))))
    });
    for (name, text) in [
        ("eval_true", "true"),
        ("eval_verb", "request.verb == 'update'"),
    ] {
        let c = Condition::compile(text).unwrap();
        assert_eq!(c.evaluate(&input(&new, &old)), Ok(true));
        group.bench_function(name, |b| {
            b.iter(|| c.evaluate(black_box(&input(&new, &old))))
        });
    }
    let label = Condition::compile(LABEL).unwrap();
    assert_eq!(label.evaluate(&input(&new, &old)), Ok(true));
    group.bench_function("eval_label", |b| {
        b.iter(|| label.evaluate(black_box(&input(&new, &old))))
    });

    // The whole Authorize: a plain cache hit, and a plan hit finished by the condition.
    let plain = synth::allowed_request(&shape);
    assert!(!cached.decide_content(plain.as_borrowed()).unwrap().cached);
    group.bench_function("plain-hit", |b| {
        b.iter(|| cached.decide_content(black_box(plain.as_borrowed())))
    });
    let update = request("cel-bot", "update");
    let mut content = Content::default();
    content.old_object = Some(serde_json::to_vec(&old).unwrap());
    content.object = Some(serde_json::to_vec(&new).unwrap());
    assert!(content.decoded(Which::Object).is_some_and(|v| v.is_ok()));
    assert!(content.decoded(Which::OldObject).is_some_and(|v| v.is_ok()));
    let ask = update.with_content(Some(&content));
    assert_eq!(
        cached.decide_content(ask).unwrap().response.decision,
        Decision::Allow
    );
    assert!(cached.decide_content(ask).unwrap().cached);
    group.bench_function("plan-hit_cel", |b| {
        b.iter(|| cached.decide_content(black_box(ask)))
    });
    // RETURN mode without content: the cached plan, and the conditions taken from it.
    let bare = update.as_borrowed();
    let fold = cached.decide_content(bare).unwrap();
    assert!(matches!(
        returned(&fold.response, bare, engine.diff()),
        Returned::Conditional(ref c) if c.len() == 1
    ));
    assert!(cached.decide_content(bare).unwrap().cached);
    group.bench_function("return-hit_cel", |b| {
        b.iter(|| {
            let decided = cached.decide_content(black_box(bare)).unwrap();
            returned(&decided.response, bare, engine.diff())
        })
    });
    group.finish();

    // Worst cases at the content limit.
    let big = big_object(3 << 20);
    let size = serde_json::to_vec(&big).unwrap().len();
    assert!(
        ((3 << 20) * 9 / 10..=3 << 20).contains(&size),
        "{size} bytes"
    );
    let worst = [
        (
            "worst_3mib_all",
            "object.items.all(x, x.name.startsWith('item-'))",
        ),
        ("worst_3mib_matches", "object.blob.matches('^(ab)+$')"),
        ("worst_3mib_equal", "object == oldObject"),
    ];
    let mut group = c.benchmark_group("conditions");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    for (name, text) in worst {
        let condition = Condition::compile(text).unwrap();
        assert_eq!(condition.evaluate(&input(&big, &big)), Ok(true), "{text}");
        group.bench_function(name, |b| {
            b.iter(|| condition.evaluate(black_box(&input(&big, &big))))
        });
    }
    group.finish();

    if std::env::args().any(|a| a == "--bench") {
        compile_figures();
    }
}

/// Compiling 100k bindings with 1,000 distinct conditions, against the same policy without
/// them; medians of 5 runs each, alternating.
fn compile_figures() {
    let roles = |with_conditions: bool, round: usize| -> String {
        (0..1000)
            .map(|i| {
                // Distinct per round too: interning would otherwise compile each text once.
                let condition = if with_conditions {
                    format!("\n  condition: \"object.metadata.labels['k{i}'] == 'v{round}' || request.name.startsWith('n{i}')\"")
                } else {
                    String::new()
                };
                format!(
                    "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: cond-{i}}}\nrules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get]{condition}\n---\n"
                )
            })
            .collect()
    };
    let base = synth::policy(&Shape::with_bindings(100_000), 42);
    let mut with = Vec::new();
    let mut without = Vec::new();
    let mut engine_with = Vec::new();
    for round in 0..5 {
        for conditions in [true, false] {
            let text = roles(conditions, round);
            let started = Instant::now();
            let mut policy = base.clone();
            add(&mut policy, "conditions.yaml", &text);
            let loaded = started.elapsed();
            let engine = Engine::new(&policy, EngineConfig::default());
            let total = started.elapsed();
            black_box(&engine);
            if conditions {
                with.push(loaded.as_secs_f64());
                engine_with.push(total.as_secs_f64());
            } else {
                without.push(loaded.as_secs_f64());
            }
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let report = json!({
        "conditions": 1000,
        "bindings": base.bindings.len(),
        "load_with_s": median(with.clone()),
        "load_without_s": median(without.clone()),
        "added_s": median(with.iter().zip(&without).map(|(a, b)| a - b).collect()),
        "load_and_compile_100k_s": median(engine_with),
    });
    println!("conditions/compile {report}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/criterion");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("conditions-compile.json"), report.to_string()).unwrap();
}

criterion_group!(benches, conditions);
criterion_main!(benches);
