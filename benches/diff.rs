//! `authzd diff` figures (docs/cli.md §6), the delta computation alone (both policies loaded
//! and compiled beforehand, as `authzd diff` does before it):
//!
//! * `diff/one-binding-100k_ns-reader`: 100,000 synthetic bindings; the change adds one
//!   RoleBinding of a namespace's `ns-reader` Role (get/list pods and pods/log, get
//!   deployments and `*/scale`) to a new user. Target ≤ 50 ms.
//! * `diff/one-binding-100k_edit`: the same, binding the wildcard `edit` ClusterRole (every
//!   verb on `*` minus negations in two groups): the worst case of one binding.
//! * `diff/clusterrole-bound-10k`: a ClusterRole bound by 10,000 RoleBindings (one user each,
//!   over 1,000 namespaces) loses a verb. Target ≤ 1 s.
//! * `gate/…`: the same changes checked against a ChangeGate in force (docs/policy.md §8: a
//!   group that keeps everything, secrets only for a service account), the check alone
//!   (`engine::gate::check`), beside the delta of the same change: what a gated write adds to
//!   a write.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Duration;

use authzd::engine::delta::access_delta;
use authzd::engine::gate::check;
use authzd::engine::{Engine, EngineConfig};
use authzd::policy::model::{
    Binding, BindingKind, PolicyRule, PolicySet, Role, RoleKind, RoleRef, Source, Subject,
};
use authzd::synth::{namespace, policy, Shape};
use criterion::{criterion_group, criterion_main, Criterion};

fn user(name: &str) -> Subject {
    Subject {
        kind: "User".into(),
        api_group: String::new(),
        name: name.into(),
        namespace: String::new(),
    }
}

fn role_binding(ns: &str, name: &str, subject: &str, kind: RoleKind, role: &str) -> Binding {
    Binding {
        kind: BindingKind::RoleBinding,
        namespace: ns.into(),
        name: name.into(),
        subjects: vec![user(subject)],
        role_ref: RoleRef {
            kind,
            name: role.into(),
        },
        source: Source::new("bench", 0),
    }
}

/// `cargo bench` passes `--bench`; `cargo test --all-targets` runs each bench once as a smoke
/// test, in a debug build, where a policy a tenth the size keeps that quick while still
/// checking that every change changes access.
fn benchmarking() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn one_binding(role_kind: RoleKind, role: &str) -> (PolicySet, PolicySet) {
    let bindings = if benchmarking() { 100_000 } else { 10_000 };
    let old = policy(&Shape::with_bindings(bindings), 7);
    let mut new = old.clone();
    new.bindings.push(std::sync::Arc::new(role_binding(
        &namespace(5),
        "diff-bench-new",
        "diff-bench-user",
        role_kind,
        role,
    )));
    (old, new)
}

fn shared_role(verbs: &[&str]) -> Role {
    Role {
        kind: RoleKind::ClusterRole,
        namespace: String::new(),
        name: "shared".into(),
        labels: BTreeMap::new(),
        rules: vec![PolicyRule {
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
            api_groups: vec![String::new()],
            resources: vec!["pods".into(), "configmaps".into()],
            resource_names: Vec::new(),
            non_resource_urls: Vec::new(),
            deny: false,
            attribute_restrictions: None,
            clauses: None,
        }],
        aggregation_rule: None,
        source: Source::new("bench", 0),
    }
}

fn clusterrole_bound_10k() -> (PolicySet, PolicySet) {
    let count = if benchmarking() { 10_000 } else { 1_000 };
    let bindings = (0..count)
        .map(|i| {
            role_binding(
                &namespace(i % 1_000),
                &format!("shared-{i}"),
                &format!("user-{i}"),
                RoleKind::ClusterRole,
                "shared",
            )
            .into()
        })
        .collect();
    let old = PolicySet {
        roles: vec![shared_role(&["get", "list", "watch"]).into()],
        bindings,
        ..Default::default()
    };
    let mut new = old.clone();
    new.roles = vec![shared_role(&["get", "list"]).into()];
    (old, new)
}

fn diff(c: &mut Criterion) {
    let mut group = c.benchmark_group("diff");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    let cases = [
        (
            "one-binding-100k_ns-reader",
            one_binding(RoleKind::Role, "ns-reader"),
        ),
        (
            "one-binding-100k_edit",
            one_binding(RoleKind::ClusterRole, "edit"),
        ),
        ("clusterrole-bound-10k", clusterrole_bound_10k()),
    ];
    for (name, (mut old, mut new)) in cases {
        // In canonical order, as `authzd diff` loads them.
        old.canonicalize();
        new.canonicalize();
        let config = EngineConfig::default();
        let (old_engine, new_engine) =
            (Engine::new(&old, config.clone()), Engine::new(&new, config));
        let delta = access_delta(&old, &new, &old_engine, &new_engine).expect("RBAC only");
        assert!(!delta.rows.is_empty(), "{name}: the change changes access");
        eprintln!("{name}: {} rows", delta.rows.len());
        group.bench_function(name, |b| {
            b.iter(|| access_delta(&old, &new, &old_engine, &new_engine).expect("RBAC only"))
        });
    }
    group.finish();
}

/// The bench's gate: every binding of the synthetic policy stays under it, and the changes
/// above break none of its rules (a check that refuses stops at the first broken rule).
fn gate() -> authzd::policy::model::ChangeGate {
    let text = "apiVersion: authzd.io/v1alpha1\nkind: ChangeGate\nmetadata: {name: bench}\nspec:\n  rules:\n  - name: admins-keep-everything\n    type: NeverRemove\n    subjects: [{kind: Group, name: platform-admins}]\n    access: [{apiGroups: [\"*\"], resources: [\"*\"], verbs: [\"*\"]}]\n  - name: secrets-only-for-vault\n    type: NeverGrantOutside\n    subjects: [{kind: ServiceAccount, namespace: vault, name: vault}]\n    access: [{apiGroups: [\"\"], resources: [secrets], verbs: [get, list, watch]}]\n";
    let policy = authzd::policy::load::load_sources(
        &[("gate.yaml".into(), text.into())],
        &authzd::policy::load::LoadOptions::default(),
    )
    .expect("the bench's gate loads");
    policy.gates.into_iter().next().expect("one gate")
}

fn gated(c: &mut Criterion) {
    let mut group = c.benchmark_group("gate");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    let cases = [
        (
            "one-binding-100k_ns-reader",
            one_binding(RoleKind::Role, "ns-reader"),
        ),
        ("clusterrole-bound-10k", clusterrole_bound_10k()),
    ];
    let gates = vec![gate()];
    for (name, (mut old, mut new)) in cases {
        old.gates = gates.clone();
        new.gates = gates.clone();
        old.canonicalize();
        new.canonicalize();
        let config = EngineConfig::default();
        let (old_engine, new_engine) =
            (Engine::new(&old, config.clone()), Engine::new(&new, config));
        let verdict = check(&gates, &old, &new, &old_engine, &new_engine);
        assert!(verdict.is_ok(), "{name}: the gate allows it: {verdict:?}");
        group.bench_function(name, |b| {
            b.iter(|| check(&gates, &old, &new, &old_engine, &new_engine).expect("allowed"))
        });
    }
    group.finish();
}

criterion_group!(benches, diff, gated);
criterion_main!(benches);
