//! Incremental index updates against a full compile, at 100k bindings over 10k namespaces
//! (`synth::policy(&Shape::with_bindings(100_000), 42)`), in the same run: one RoleBinding
//! applied, one RoleBinding deleted, one ClusterRoleBinding applied, one ClusterRole changed.
//! Every bench first checks that the updated engine's answer changed as expected and equals a
//! full build of the new policy. Each measured update includes dropping the engine it made.
//! `delta/for-changes` times the helper that finds a change's partitions by scanning the
//! policy (the store can hand partitions over directly instead); `policy-copy` the copy of the
//! policy set the store makes for every applied change (and dropping it).
//!
//! `applier/*` times etcd mode's applier (`Store::apply_changes`) publishing into the serving
//! core, a RoleBinding created and deleted in turn: `in-place` as it runs (it edits its spare
//! copy of the policy), `copy` with a reader holding that spare so that the applier must copy
//! the policy and drop the previous one, as it did for every change before the spare copy.
//! `impact/clusterrole-*` the impact analysis of a ClusterRole change: scanning every binding
//! of both policies against the index of the ClusterRole's bindings.
//!
//! Run: `cargo bench --bench update`.

use std::hint::black_box;
use std::time::Duration;

use authzd::engine::{Decision, Engine, EngineConfig};
use std::sync::Arc;

use authzd::cache::CacheConfig;
use authzd::policy::delta::{ChangedKind, ChangedObject, PolicyDelta};
use authzd::policy::impact::{impact_of_applied_objects, impact_of_objects, ClusterRoleReferrers};
use authzd::policy::model::{
    Binding, BindingKind, PolicyObject, PolicyRule, PolicySet, Role, RoleKind, RoleRef, Source,
    Subject,
};
use authzd::request::Request;
use authzd::serving::ServingState;
use authzd::store::{FeedOnly, ObjectRef, Publisher, Store};
use authzd::synth::{self, Shape};
use criterion::{criterion_group, criterion_main, Criterion};

const SIZE: usize = 100_000;
/// `cargo test --all-targets` runs each bench once as a smoke test, in a debug build: a smaller
/// policy keeps that quick while still checking every answer.
const SMOKE_SIZE: usize = 5_000;

/// The policy size: [`SIZE`] under `cargo bench` (which passes `--bench`), else [`SMOKE_SIZE`].
fn size() -> usize {
    if std::env::args().any(|a| a == "--bench") {
        SIZE
    } else {
        SMOKE_SIZE
    }
}

fn user_binding(
    kind: BindingKind,
    namespace: &str,
    name: &str,
    user: &str,
    role: RoleRef,
) -> Binding {
    Binding {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
        subjects: vec![Subject {
            kind: "User".to_string(),
            api_group: "rbac.authorization.k8s.io".to_string(),
            name: user.to_string(),
            namespace: String::new(),
        }],
        role_ref: role,
        source: Source::new("bench", 0),
    }
}

/// One change: the policy after it, the object it touched, and a request whose answer moves
/// from `before` to `after`.
struct Case {
    name: &'static str,
    after: PolicySet,
    changed: ChangedObject,
    request: Request,
    before: Decision,
    expected: Decision,
}

fn cases(shape: &Shape, policy: &PolicySet) -> Vec<Case> {
    let mut cases = Vec::new();

    // A new RoleBinding in ns-0 lets a new user read pods there.
    let mut after = policy.clone();
    let binding = user_binding(
        BindingKind::RoleBinding,
        &synth::namespace(0),
        "rb-new",
        "new-user",
        RoleRef {
            kind: RoleKind::Role,
            name: "ns-reader".to_string(),
        },
    );
    let changed = ChangedObject::of_binding(&binding);
    after.bindings.push(binding.into());
    let mut request = synth::allowed_request(shape);
    request.user.name = "new-user".to_string();
    request.user.groups.clear();
    cases.push(Case {
        name: "rolebinding-apply",
        after,
        changed,
        request,
        before: Decision::NoOpinion,
        expected: Decision::Allow,
    });

    // Deleting the probe's reader binding in ns-0 takes its pod access away.
    let mut after = policy.clone();
    after
        .bindings
        .retain(|b| !(b.namespace == synth::namespace(0) && b.name == "probe-reader"));
    cases.push(Case {
        name: "rolebinding-delete",
        after,
        changed: ChangedObject::new(
            ChangedKind::RoleBinding,
            synth::namespace(0),
            "probe-reader",
        ),
        request: synth::allowed_request(shape),
        before: Decision::Allow,
        expected: Decision::NoOpinion,
    });

    // A new ClusterRoleBinding to `view` lets the probe read pods in every namespace.
    let mut after = policy.clone();
    let binding = user_binding(
        BindingKind::ClusterRoleBinding,
        "",
        "probe-view",
        synth::PROBE_USER,
        RoleRef {
            kind: RoleKind::ClusterRole,
            name: "view".to_string(),
        },
    );
    let changed = ChangedObject::of_binding(&binding);
    after.bindings.push(binding.into());
    let mut request = synth::allowed_request(shape);
    if let authzd::request::Action::Resource(r) = &mut request.action {
        r.namespace = synth::namespace(shape.namespaces - 1);
    }
    cases.push(Case {
        name: "clusterrolebinding-apply",
        after,
        changed,
        request,
        before: Decision::NoOpinion,
        expected: Decision::Allow,
    });

    // `no-secrets` now denies configmaps instead: the probe is no longer denied secrets.
    let mut after = policy.clone();
    for role in &mut after.roles {
        if role.kind == RoleKind::ClusterRole && role.name == "no-secrets" {
            std::sync::Arc::make_mut(role).rules = vec![PolicyRule {
                verbs: vec!["*".to_string()],
                api_groups: vec!["*".to_string()],
                resources: vec!["configmaps".to_string()],
                deny: true,
                ..Default::default()
            }];
        }
    }
    cases.push(Case {
        name: "clusterrole-change",
        after,
        changed: ChangedObject::new(ChangedKind::ClusterRole, "", "no-secrets"),
        request: synth::denied_request(shape),
        before: Decision::Deny,
        expected: Decision::NoOpinion,
    });
    cases
}

fn update(c: &mut Criterion) {
    let size = size();
    let shape = Shape::with_bindings(size);
    let policy = synth::policy(&shape, 42);
    let config = EngineConfig::default();
    let engine = Engine::new(&policy, config.clone());

    let mut group = c.benchmark_group("update");
    group.measurement_time(Duration::from_secs(3));
    for case in cases(&shape, &policy) {
        let delta = PolicyDelta::for_changes(&case.after, [&case.changed]);
        let updated = match engine.update(&delta) {
            Ok(updated) => updated,
            Err(e) => {
                eprintln!("{}: delta refused: {e}", case.name);
                std::process::exit(1);
            }
        };
        let full = Engine::new(&case.after, config.clone());
        assert_eq!(
            engine.authorize(&case.request).decision,
            case.before,
            "{}",
            case.name
        );
        let answer = updated.authorize(&case.request);
        assert_eq!(answer.decision, case.expected, "{}", case.name);
        assert_eq!(answer, full.authorize(&case.request), "{}", case.name);
        assert_eq!(
            updated.allowed_subjects(&case.request.action),
            full.allowed_subjects(&case.request.action),
            "{}",
            case.name
        );
        drop((updated, full));

        group.bench_function(format!("{}/{size}-bindings", case.name), |b| {
            b.iter(|| engine.update(black_box(&delta)))
        });
        if case.name == "rolebinding-apply" {
            group.sample_size(20);
            group.bench_function(format!("delta/for-changes/{size}-bindings"), |b| {
                b.iter(|| PolicyDelta::for_changes(black_box(&case.after), [&case.changed]))
            });
            // The store's way: its policy is in canonical order, and the changed partition is
            // found by binary search.
            let mut canonical = case.after.clone();
            canonical.canonicalize();
            assert_eq!(
                PolicyDelta::for_changes_in_canonical(&canonical, [&case.changed]),
                PolicyDelta::for_changes(&canonical, [&case.changed])
            );
            group.bench_function(
                format!("delta/for-changes-in-canonical/{size}-bindings"),
                |b| {
                    b.iter(|| {
                        PolicyDelta::for_changes_in_canonical(
                            black_box(&canonical),
                            [&case.changed],
                        )
                    })
                },
            );
            // The store's copy of the policy per applied change (its objects are shared), and
            // dropping it.
            group.bench_function(format!("policy-copy/{size}-bindings"), |b| {
                b.iter(|| black_box(&case.after).clone())
            });
            group.sample_size(100);
        }
    }

    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function(format!("full-compile/{size}-bindings"), |b| {
        b.iter(|| Engine::new(black_box(&policy), config.clone()))
    });
    group.finish();
}

/// `value`, or the bench stops saying what was missing.
fn or_exit<T>(value: Option<T>, what: &str) -> T {
    value.unwrap_or_else(|| {
        eprintln!("missing: {what}");
        std::process::exit(1)
    })
}

fn applier(c: &mut Criterion) {
    let size = size();
    let shape = Shape::with_bindings(size);
    let policy = synth::policy(&shape, 42);
    let runtime = or_exit(
        tokio::runtime::Builder::new_current_thread().build().ok(),
        "a tokio runtime",
    );
    let serving = Arc::new(ServingState::new(
        EngineConfig::default(),
        CacheConfig::default(),
    ));
    let store = Store::open(
        Arc::new(FeedOnly),
        policy.clone(),
        1,
        Arc::clone(&serving) as Arc<dyn Publisher>,
    );
    let binding = PolicyObject::Binding(user_binding(
        BindingKind::RoleBinding,
        &synth::namespace(0),
        "rb-toggled",
        "new-user",
        RoleRef {
            kind: RoleKind::Role,
            name: "ns-reader".to_string(),
        },
    ));
    let key = ObjectRef::of(&binding);
    let mut revision = 1;
    // Creates the binding on odd revisions, deletes it on even ones.
    let mut toggle = || {
        revision += 1;
        let state = (revision % 2 == 0).then(|| binding.clone());
        runtime.block_on(store.apply_changes(revision, vec![(key.clone(), state)]));
    };
    let mut request = synth::allowed_request(&shape);
    request.user.name = "new-user".to_string();
    request.user.groups.clear();
    let decision = |serving: &ServingState| {
        let snapshot = or_exit(serving.snapshot(), "a published policy");
        snapshot.engine.authorize(&request).decision
    };
    toggle();
    assert_eq!(decision(&serving), Decision::Allow, "not created");
    toggle();
    assert_eq!(decision(&serving), Decision::NoOpinion, "not deleted");

    let mut group = c.benchmark_group("update");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function(format!("applier/in-place/{size}-bindings"), |b| {
        b.iter(&mut toggle)
    });
    let mut reader = None;
    group.bench_function(format!("applier/copy/{size}-bindings"), |b| {
        b.iter(|| {
            // Held across the next change, when this policy is the applier's spare.
            let held = store.policy();
            toggle();
            reader = Some(held);
        })
    });
    drop(reader);

    // `no-secrets` changes, as in `clusterrole-change` above.
    let before = policy.clone();
    let mut after = policy;
    let at = or_exit(
        after
            .roles
            .iter()
            .position(|r| r.kind == RoleKind::ClusterRole && r.name == "no-secrets"),
        "the no-secrets ClusterRole",
    );
    let old_role = Role::clone(&after.roles[at]);
    let mut new_role = old_role.clone();
    new_role.rules.truncate(0);
    after.roles[at] = Arc::new(new_role.clone());
    let roles = [(Some(&old_role), Some(&new_role))];
    let referrers = ClusterRoleReferrers::of(&after);
    let scanned = impact_of_objects(&after, &before, &roles, &[]);
    assert!(!scanned.is_empty());
    assert_eq!(
        impact_of_applied_objects(&after, &before, &roles, &[], &referrers),
        scanned
    );
    group.bench_function(format!("impact/clusterrole-scan/{size}-bindings"), |b| {
        b.iter(|| impact_of_objects(black_box(&after), &before, &roles, &[]))
    });
    group.bench_function(format!("impact/clusterrole-indexed/{size}-bindings"), |b| {
        b.iter(|| impact_of_applied_objects(black_box(&after), &before, &roles, &[], &referrers))
    });
    group.finish();
}

criterion_group!(benches, update, applier);
criterion_main!(benches);
