//! Incremental updates: an engine built from policy P and updated with the delta P → P' must
//! answer every Authorize and who-can request exactly as an engine built from P' — the full
//! `Response` (decision, reason, rule references, errors, in order) and the full
//! `AllowedSubjects`. Updates are chained, so slots, tombstones and by-name role references
//! carried across several updates are exercised too. Edits replace, add and remove Roles,
//! ClusterRoles (aggregation labels and selectors included), RoleBindings in several
//! namespaces, ClusterRoleBindings and ABAC lines, and sometimes name partitions that did not
//! change at all.

use std::sync::Arc;

use crate::support::generators::*;
use authzd::engine::{Decision, Engine, EngineConfig};
use authzd::policy::delta::{ChangedKind, ChangedObject, DeltaError, NamespaceDelta, PolicyDelta};
use authzd::policy::model::{
    AbacRule, Binding, BindingKind, PolicyRule, PolicySet, Role, RoleKind, RoleRef, Source, Subject,
};
use authzd::request::{Action, Request, ResourceAttributes, UserInfo};
use authzd::synth::{self, Shape};
use proptest::prelude::*;
use proptest::sample::{select, Index};

#[derive(Clone, Debug)]
enum Edit {
    /// Adds the role, or replaces the role with its key.
    PutRole(Role),
    RemoveRole(Index),
    /// Adds the binding, or replaces the binding with its key.
    PutBinding(Binding),
    RemoveBinding(Index),
    /// Replaces the rules of an existing role, keeping labels and selectors.
    SetRules(Index, Vec<PolicyRule>),
    /// Replaces every ABAC line.
    SetAbac(Vec<AbacRule>),
    /// Replaces every FieldPolicy: none, one that ignores paths, one that protects them, or
    /// both.
    SetFieldPolicies(u8),
    /// Names a partition as changed without changing it.
    Touch(ChangedKind, &'static str),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => role().prop_map(Edit::PutRole),
        2 => any::<Index>().prop_map(Edit::RemoveRole),
        3 => binding().prop_map(Edit::PutBinding),
        2 => any::<Index>().prop_map(Edit::RemoveBinding),
        2 => (any::<Index>(), proptest::collection::vec(rule(), 0..=3))
            .prop_map(|(i, rules)| Edit::SetRules(i, rules)),
        1 => proptest::collection::vec(abac_rule(), 0..=4).prop_map(Edit::SetAbac),
        1 => (0u8..4).prop_map(Edit::SetFieldPolicies),
        1 => (
            select(&[
                ChangedKind::ClusterRole,
                ChangedKind::Role,
                ChangedKind::ClusterRoleBinding,
                ChangedKind::RoleBinding,
                ChangedKind::Abac,
                ChangedKind::FieldPolicy,
            ][..]),
            select(&["ns1", "ns2", "ns3", "*"][..]),
        )
            .prop_map(|(kind, ns)| Edit::Touch(kind, ns)),
    ]
}

/// Applies one edit to `policy`, returning the keys of the objects it changed.
fn apply(policy: &mut PolicySet, edit: &Edit) -> Vec<ChangedObject> {
    match edit {
        Edit::PutRole(role) => {
            let key = |r: &Role| (r.kind, r.namespace.clone(), r.name.clone());
            match policy.roles.iter_mut().find(|r| key(r) == key(role)) {
                Some(existing) => *existing = role.clone().into(),
                None => policy.roles.push(role.clone().into()),
            }
            vec![ChangedObject::of_role(role)]
        }
        Edit::RemoveRole(i) if !policy.roles.is_empty() => {
            let removed = policy.roles.remove(i.index(policy.roles.len()));
            vec![ChangedObject::of_role(&removed)]
        }
        Edit::PutBinding(binding) => {
            let key = |b: &Binding| (b.kind, b.namespace.clone(), b.name.clone());
            match policy.bindings.iter_mut().find(|b| key(b) == key(binding)) {
                Some(existing) => *existing = binding.clone().into(),
                None => policy.bindings.push(binding.clone().into()),
            }
            vec![ChangedObject::of_binding(binding)]
        }
        Edit::RemoveBinding(i) if !policy.bindings.is_empty() => {
            let removed = policy.bindings.remove(i.index(policy.bindings.len()));
            vec![ChangedObject::of_binding(&removed)]
        }
        Edit::SetRules(i, rules) if !policy.roles.is_empty() => {
            let len = policy.roles.len();
            let role = std::sync::Arc::make_mut(&mut policy.roles[i.index(len)]);
            role.rules = rules.clone();
            vec![ChangedObject::of_role(role)]
        }
        Edit::SetAbac(lines) => {
            policy.abac = lines.clone();
            vec![ChangedObject::new(ChangedKind::Abac, "", "")]
        }
        Edit::SetFieldPolicies(which) => {
            policy.field_policies = match which {
                0 => Vec::new(),
                1 => vec![ignore_data()],
                2 => vec![protect_some()],
                _ => vec![ignore_data(), protect_some()],
            };
            vec![ChangedObject::new(ChangedKind::FieldPolicy, "", "")]
        }
        Edit::Touch(kind, ns) => {
            let ns = match kind {
                ChangedKind::Role | ChangedKind::RoleBinding => *ns,
                _ => "",
            };
            vec![ChangedObject::new(*kind, ns, "untouched")]
        }
        Edit::RemoveRole(_) | Edit::RemoveBinding(_) | Edit::SetRules(..) => Vec::new(),
    }
}

fn request(user: &UserInfo, action: &Action) -> Request {
    Request {
        user: user.clone(),
        action: action.clone(),
    }
}

proptest! {
    #![proptest_config(crate::support::cases::config(5_000))]

    /// On a policy in canonical order (every policy the store holds is), the delta found by
    /// binary search is the one the scan finds, whatever partitions the edits touch.
    #[test]
    fn canonical_delta_is_the_scanned_delta(
        policy in policy(),
        edits in proptest::collection::vec(edit(), 1..=6),
    ) {
        let mut current = policy;
        let changed: Vec<ChangedObject> =
            edits.iter().flat_map(|e| apply(&mut current, e)).collect();
        current.canonicalize();
        prop_assert_eq!(
            PolicyDelta::for_changes_in_canonical(&current, &changed),
            PolicyDelta::for_changes(&current, &changed)
        );
    }

    #[test]
    fn updated_engine_answers_as_full_build(
        policy in policy(),
        config in config(),
        steps in proptest::collection::vec(
            (
                proptest::collection::vec(edit(), 1..=4),
                proptest::collection::vec((user(), action()), 1..=4),
            ),
            1..=3,
        ),
    ) {
        let mut current = policy.clone();
        let mut engine = Engine::new(&policy, config.clone());
        for (edits, requests) in &steps {
            let changed: Vec<ChangedObject> =
                edits.iter().flat_map(|e| apply(&mut current, e)).collect();
            let delta = PolicyDelta::for_changes(&current, &changed);
            engine = match engine.update(&delta) {
                Ok(updated) => updated,
                Err(e) => return Err(TestCaseError::fail(format!("delta refused: {e}"))),
            };
            let full = Engine::new(&current, config.clone());
            prop_assert_eq!(engine.diff(), full.diff());
            for (user, action) in requests {
                let req = request(user, action);
                prop_assert_eq!(engine.authorize(&req), full.authorize(&req), "authorize {:?}", req);
                prop_assert_eq!(
                    engine.allowed_subjects(action),
                    full.allowed_subjects(action),
                    "who-can {:?}",
                    action
                );
            }
        }
    }
}

fn small_policy() -> PolicySet {
    synth::policy(&Shape::with_bindings(100), 7)
}

fn get_pods(user: &str, groups: &[&str], namespace: &str) -> Request {
    Request {
        user: UserInfo {
            name: user.to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        },
        action: Action::Resource(ResourceAttributes {
            namespace: namespace.to_string(),
            verb: "get".to_string(),
            version: "v1".to_string(),
            resource: "pods".to_string(),
            ..Default::default()
        }),
    }
}

fn role_binding(namespace: &str, name: &str, user: &str, role: (RoleKind, &str)) -> Binding {
    Binding {
        kind: if namespace.is_empty() {
            BindingKind::ClusterRoleBinding
        } else {
            BindingKind::RoleBinding
        },
        namespace: namespace.to_string(),
        name: name.to_string(),
        subjects: vec![Subject {
            kind: "User".to_string(),
            api_group: String::new(),
            name: user.to_string(),
            namespace: String::new(),
        }],
        role_ref: RoleRef {
            kind: role.0,
            name: role.1.to_string(),
        },
        source: Source::new("test.yaml", 1),
    }
}

/// An update shares every partition it does not carry, and replaces the ones it does.
#[test]
fn untouched_partitions_are_shared() {
    let mut policy = small_policy();
    let engine = Engine::new(&policy, EngineConfig::default());
    policy.bindings.push(std::sync::Arc::new(role_binding(
        "ns-3",
        "new",
        "carol",
        (RoleKind::Role, "ns-reader"),
    )));
    let changed = [ChangedObject::new(ChangedKind::RoleBinding, "ns-3", "new")];
    let delta = PolicyDelta::for_changes(&policy, &changed);
    let updated = engine.update(&delta).unwrap();

    let (old, new) = (engine.index(), updated.index());
    assert!(Arc::ptr_eq(&old.cluster_roles, &new.cluster_roles));
    assert!(Arc::ptr_eq(&old.cluster, &new.cluster));
    assert!(Arc::ptr_eq(&old.abac, &new.abac));
    assert_eq!(old.namespaces.len(), new.namespaces.len());
    for (ns, partition) in old.namespaces.iter() {
        let shared = new
            .namespaces
            .get(ns)
            .is_some_and(|p| Arc::ptr_eq(partition, p));
        assert_eq!(shared, &**ns != "ns-3", "{ns}");
    }
    let request = get_pods("carol", &[], "ns-3");
    assert_eq!(engine.authorize(&request).decision, Decision::NoOpinion);
    assert_eq!(updated.authorize(&request).decision, Decision::Allow);
}

/// A ClusterRole deleted and re-created (its slot a tombstone in between) is found again by
/// bindings in partitions that were never rebuilt, with the same missing-role error meanwhile;
/// a ClusterRole created after its binding is found by name.
#[test]
fn cluster_role_slots_survive_delete_and_recreate() {
    let mut policy = small_policy();
    policy.bindings.push(std::sync::Arc::new(role_binding(
        "ns-2",
        "carol-view",
        "carol",
        (RoleKind::ClusterRole, "view"),
    )));
    policy.bindings.push(std::sync::Arc::new(role_binding(
        "ns-2",
        "carol-later",
        "carol",
        (RoleKind::ClusterRole, "later"),
    )));
    let config = EngineConfig::default();
    let mut engine = Engine::new(&policy, config.clone());
    let request = get_pods("carol", &[], "ns-2");
    let cluster_roles = [ChangedObject::new(ChangedKind::ClusterRole, "", "view")];

    let view = policy.roles.iter().position(|r| r.name == "view").unwrap();
    let view_role = policy.roles.remove(view);
    engine = engine
        .update(&PolicyDelta::for_changes(&policy, &cluster_roles))
        .unwrap();
    let full = Engine::new(&policy, config.clone());
    assert_eq!(engine.authorize(&request), full.authorize(&request));
    assert_eq!(engine.authorize(&request).errors.len(), 2);
    assert_eq!(
        engine.allowed_subjects(&request.action),
        full.allowed_subjects(&request.action)
    );

    policy.roles.push(view_role.clone());
    policy.roles.push(std::sync::Arc::new(Role {
        name: "later".to_string(),
        ..Role::clone(&view_role)
    }));
    engine = engine
        .update(&PolicyDelta::for_changes(&policy, &cluster_roles))
        .unwrap();
    let full = Engine::new(&policy, config);
    let response = engine.authorize(&request);
    assert_eq!(response, full.authorize(&request));
    assert_eq!(response.decision, Decision::Allow);
    assert_eq!(
        &*response.allowed_by[0].binding,
        "RoleBinding/ns-2/carol-later"
    );
    assert_eq!(
        engine.allowed_subjects(&request.action),
        full.allowed_subjects(&request.action)
    );
}

/// A delta that files an object in the wrong partition, or names a namespace twice, is refused.
#[test]
fn misfiled_deltas_are_refused() {
    let engine = Engine::new(&small_policy(), EngineConfig::default());
    let binding = role_binding("ns-1", "b", "carol", (RoleKind::Role, "ns-reader"));
    let wrong_namespace = PolicyDelta {
        namespaces: vec![NamespaceDelta {
            namespace: "ns-2".to_string(),
            roles: Vec::new(),
            bindings: vec![binding.clone()],
        }],
        ..Default::default()
    };
    assert!(matches!(
        engine.update(&wrong_namespace),
        Err(DeltaError::Misfiled { .. })
    ));
    let wrong_kind = PolicyDelta {
        cluster_bindings: Some(vec![binding.clone()]),
        ..Default::default()
    };
    assert!(matches!(
        engine.update(&wrong_kind),
        Err(DeltaError::Misfiled { .. })
    ));
    let twice = NamespaceDelta {
        namespace: "ns-1".to_string(),
        roles: Vec::new(),
        bindings: vec![binding],
    };
    let duplicate = PolicyDelta {
        namespaces: vec![twice.clone(), twice],
        ..Default::default()
    };
    assert_eq!(
        engine.update(&duplicate).err(),
        Some(DeltaError::DuplicateNamespace("ns-1".to_string()))
    );
}

/// A ClusterRoleBinding referencing a `Role` (every loader rejects this) resolves it in the
/// namespace partition of its own namespace at query time, before and after that partition
/// changes, exactly as the reference evaluator does.
#[test]
fn cluster_binding_to_a_role_resolves_at_query_time() {
    use authzd::engine::reference::ReferenceEvaluator;

    let reader = |rules: Vec<PolicyRule>| Role {
        kind: RoleKind::Role,
        namespace: String::new(),
        name: "odd".to_string(),
        labels: Default::default(),
        rules,
        aggregation_rule: None,
        source: Source::new("test.yaml", 2),
    };
    let get_pods_rule = PolicyRule {
        verbs: vec!["get".to_string()],
        api_groups: vec![String::new()],
        resources: vec!["pods".to_string()],
        ..Default::default()
    };
    let mut policy = PolicySet {
        roles: Vec::new(),
        bindings: vec![role_binding("", "odd", "carol", (RoleKind::Role, "odd")).into()],
        abac: Vec::new(),
        field_policies: Vec::new(),
        gates: Vec::new(),
    };
    let config = EngineConfig::default();
    let request = get_pods("carol", &[], "ns-1");
    let changed = [ChangedObject::new(ChangedKind::Role, "", "odd")];
    let mut engine = Engine::new(&policy, config.clone());
    for roles in [
        vec![reader(vec![get_pods_rule.clone()])],
        vec![reader(Vec::new())],
        Vec::new(),
        vec![reader(vec![get_pods_rule.clone()])],
    ] {
        policy.roles = roles.into_iter().map(Into::into).collect();
        engine = engine
            .update(&PolicyDelta::for_changes(&policy, &changed))
            .unwrap();
        let reference = ReferenceEvaluator::new(&policy, &config);
        assert_eq!(engine.authorize(&request), reference.authorize(&request));
        assert_eq!(
            engine.allowed_subjects(&request.action),
            reference.allowed_subjects(&request.action)
        );
    }
    assert_eq!(engine.authorize(&request).decision, Decision::Allow);
}
