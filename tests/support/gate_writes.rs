//! Random policy writes against a server holding a random ChangeGate, the
//! same in both store modes (`tests/api/change_gate.rs` over a directory,
//! `tests/etcd/change_gate.rs` over a real etcd cluster): each write is refused exactly when
//! the change it makes breaks a rule of the gate in force, as `engine::gate::check` judges it
//! on the test's own copy of the policy (its exactness against a brute-force oracle is
//! `tests/properties/gate.rs`); a refused write changes nothing the store keeps.

use std::collections::BTreeMap;

use authzd::engine::gate::{check, GateError};
use authzd::engine::{Engine, EngineConfig};
use authzd::policy::load::{load_sources, LoadOptions};
use authzd::policy::model::PolicySet;
use authzd::synth::Rng;

/// The roles every run starts with (never written afterwards).
pub const ROLES: &str = "\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: admin}
rules:
- {apiGroups: [\"*\"], resources: [\"*\"], verbs: [\"*\"]}
- {nonResourceURLs: [\"*\"], verbs: [\"*\"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: secret-reader}
rules:
- {apiGroups: [\"\"], resources: [secrets], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: pod-reader}
rules:
- {apiGroups: [\"\"], resources: [pods, pods/log], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: secret-denier}
rules:
- {apiGroups: [\"\"], resources: [secrets], verbs: [\"*\"], deny: true}
";

const ROLE_NAMES: [&str; 4] = ["admin", "secret-reader", "pod-reader", "secret-denier"];

/// The subjects bindings name: the gates' subjects and others.
const SUBJECTS: [&str; 6] = [
    "{kind: Group, name: platform-admins, apiGroup: rbac.authorization.k8s.io}",
    "{kind: User, name: breakglass, apiGroup: rbac.authorization.k8s.io}",
    "{kind: ServiceAccount, name: vault, namespace: vault}",
    "{kind: Group, name: devs, apiGroup: rbac.authorization.k8s.io}",
    "{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}",
    "{kind: Group, name: system:authenticated, apiGroup: rbac.authorization.k8s.io}",
];

const NAMESPACES: [&str; 2] = ["team-a", "vault"];

/// The gate rules a run draws from (each an item of `spec.rules`).
const GATE_RULES: [&str; 5] = [
    "- name: admins-keep-everything
  type: NeverRemove
  subjects: [{kind: Group, name: platform-admins}]
  access: [{apiGroups: [\"*\"], resources: [\"*\"], verbs: [\"*\"]}]
",
    "- name: breakglass-keeps-secrets
  type: NeverRemove
  subjects: [{kind: User, name: breakglass}]
  namespaces: [\"\", vault]
  access: [{apiGroups: [\"\"], resources: [secrets], verbs: [get]}]
",
    "- name: secrets-only-for-vault
  type: NeverGrantOutside
  subjects: [{kind: ServiceAccount, namespace: vault, name: vault}, {kind: Group, name: platform-admins}, {kind: User, name: breakglass}]
  access: [{apiGroups: [\"\"], resources: [secrets], verbs: [get, list]}]
",
    "- name: logs-stay-with-admins
  type: NeverGrantOutside
  subjects: [{kind: Group, name: platform-admins}, {kind: User, name: breakglass}]
  namespaces: [team-a]
  access: [{apiGroups: [\"\"], resources: [pods/log], verbs: [get]}]
",
    "- name: vault-keeps-its-secrets
  type: NeverRemove
  subjects: [{kind: ServiceAccount, namespace: vault, name: vault}]
  namespaces: [vault]
  access: [{apiGroups: [\"\"], resources: [secrets], verbs: [list]}]
",
];

/// A gate the hand-written tests share: the admins keep everything; secrets only for vault's
/// service account and the admins.
pub const GATE: &str = "\
apiVersion: authzd.io/v1alpha1
kind: ChangeGate
metadata: {name: guard-rails}
spec:
  rules:
  - name: admins-keep-everything
    type: NeverRemove
    subjects: [{kind: Group, name: platform-admins}]
    access: [{apiGroups: [\"*\"], resources: [\"*\"], verbs: [\"*\"]}]
  - name: secrets-only-for-vault
    type: NeverGrantOutside
    subjects: [{kind: ServiceAccount, namespace: vault, name: vault}, {kind: Group, name: platform-admins}]
    access: [{apiGroups: [\"\"], resources: [secrets], verbs: [get, list]}]
";

/// The admins' group as a binding names it.
pub const ADMINS: &str =
    "{kind: Group, name: platform-admins, apiGroup: rbac.authorization.k8s.io}";

/// A binding's manifest.
pub fn binding(name: &str, namespace: Option<&str>, role: &str, subjects: &[&str]) -> String {
    let (kind, metadata) = match namespace {
        Some(ns) => ("RoleBinding", format!("{{name: {name}, namespace: {ns}}}")),
        None => ("ClusterRoleBinding", format!("{{name: {name}}}")),
    };
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\nmetadata: {metadata}\nsubjects: [{}]\nroleRef: {{kind: ClusterRole, name: {role}, apiGroup: rbac.authorization.k8s.io}}\n",
        subjects.join(", ")
    )
}

/// The run's gate: some of [`GATE_RULES`], at least one.
pub fn gate(rng: &mut Rng) -> String {
    let mut rules = String::new();
    for rule in GATE_RULES {
        if rng.below(2) == 0 {
            rules.push_str(rule);
        }
    }
    if rules.is_empty() {
        rules.push_str(GATE_RULES[rng.below(GATE_RULES.len())]);
    }
    let indented: String = rules.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: authzd.io/v1alpha1\nkind: ChangeGate\nmetadata: {{name: guard-rails}}\nspec:\n  rules:\n{indented}"
    )
}

/// The objects a run starts with, by a name the writes use: the gate, and the bindings that
/// give every gate rule's subjects their access.
pub fn initial(rng: &mut Rng) -> BTreeMap<String, String> {
    let mut objects = BTreeMap::new();
    objects.insert("roles".to_string(), ROLES.to_string());
    objects.insert("gate".to_string(), gate(rng));
    for (name, role, subject) in [
        ("admins", "admin", SUBJECTS[0]),
        ("breakglass", "admin", SUBJECTS[1]),
        ("vault", "secret-reader", SUBJECTS[2]),
        ("readers", "pod-reader", SUBJECTS[3]),
    ] {
        objects.insert(name.to_string(), binding(name, None, role, &[subject]));
    }
    objects
}

/// One write: a binding created or replaced, or deleted.
#[derive(Clone, Debug)]
pub enum Write {
    Apply {
        key: String,
        manifest: String,
    },
    Delete {
        key: String,
        kind: String,
        namespace: String,
        name: String,
    },
}

/// A random write over the bindings of `objects` (keys other than `roles` and `gate`).
pub fn random_write(rng: &mut Rng, objects: &BTreeMap<String, String>) -> Write {
    let bindings: Vec<&String> = objects
        .keys()
        .filter(|k| *k != "roles" && *k != "gate")
        .collect();
    if !bindings.is_empty() && rng.below(3) == 0 {
        let key = bindings[rng.below(bindings.len())].clone();
        let (kind, namespace) = kind_of(&objects[&key]);
        let name = name_of(&objects[&key]);
        return Write::Delete {
            key,
            kind,
            namespace,
            name,
        };
    }
    // A name of the initial bindings (replacing one) or a new one.
    let names = [
        "admins",
        "breakglass",
        "vault",
        "readers",
        "extra-1",
        "extra-2",
    ];
    let name = names[rng.below(names.len())];
    let namespace = match rng.below(3) {
        0 => Some(NAMESPACES[rng.below(NAMESPACES.len())]),
        _ => None,
    };
    let role = ROLE_NAMES[rng.below(ROLE_NAMES.len())];
    let count = 1 + rng.below(2);
    let subjects: Vec<&str> = (0..count)
        .map(|_| SUBJECTS[rng.below(SUBJECTS.len())])
        .collect();
    // A RoleBinding and a ClusterRoleBinding of one name are two objects: keyed apart.
    let key = match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    };
    Write::Apply {
        key,
        manifest: binding(name, namespace, role, &subjects),
    }
}

/// A binding manifest's kind and namespace, as the admin API names the object.
fn kind_of(manifest: &str) -> (String, String) {
    let kind = if manifest.contains("kind: RoleBinding") {
        "RoleBinding"
    } else {
        "ClusterRoleBinding"
    };
    let namespace = manifest
        .split("namespace: ")
        .nth(1)
        .filter(|_| kind == "RoleBinding")
        .and_then(|rest| rest.split('}').next())
        .unwrap_or_default();
    (kind.to_string(), namespace.to_string())
}

/// The binding's name in a manifest written by [`binding`].
pub fn name_of(manifest: &str) -> String {
    manifest
        .split("metadata: {name: ")
        .nth(1)
        .and_then(|rest| rest.split([',', '}']).next())
        .unwrap_or_default()
        .to_string()
}

/// The objects after `write`.
pub fn after(objects: &BTreeMap<String, String>, write: &Write) -> BTreeMap<String, String> {
    let mut next = objects.clone();
    match write {
        Write::Apply { key, manifest } => {
            next.insert(key.clone(), manifest.clone());
        }
        Write::Delete { key, .. } => {
            next.remove(key);
        }
    }
    next
}

pub fn policy_of(objects: &BTreeMap<String, String>) -> PolicySet {
    let sources: Vec<(String, String)> = objects
        .iter()
        .map(|(k, v)| (format!("{}.yaml", k.replace('/', "-")), v.clone()))
        .collect();
    load_sources(&sources, &LoadOptions::default()).expect("the test's policy loads")
}

/// A refusal by the gate: FAILED_PRECONDITION with reason CHANGE_GATE_REFUSED, naming `rule`
/// (`context` says which write, in a failure).
pub fn assert_gate_refused<T: std::fmt::Debug>(
    result: Result<T, tonic::Status>,
    rule: &str,
    context: &str,
) {
    let status = result.expect_err(&format!("{context}: refused by `{rule}`"));
    assert_eq!(
        status.code(),
        tonic::Code::FailedPrecondition,
        "{context}: {status:?}"
    );
    assert_eq!(
        authzd::api::error::ErrorReason::of(&status),
        Some(authzd::api::error::ErrorReason::ChangeGateRefused),
        "{context}: {status:?}"
    );
    assert!(
        status.message().contains(rule),
        "{context}: the refusal names the rule `{rule}`: {}",
        status.message()
    );
}

/// The chain a server runs by default: RBAC,ABAC with `system:masters` privileged.
fn server_config() -> EngineConfig {
    EngineConfig {
        super_groups: vec!["system:masters".to_string()],
        ..EngineConfig::default()
    }
}

/// Whether the gate in force before refuses the write: the broken rule's name.
pub fn expected_refusal(
    before: &BTreeMap<String, String>,
    next: &BTreeMap<String, String>,
) -> Option<String> {
    let (old, new) = (policy_of(before), policy_of(next));
    let config = server_config();
    let (old_engine, new_engine) = (Engine::new(&old, config.clone()), Engine::new(&new, config));
    match check(&old.gates, &old, &new, &old_engine, &new_engine) {
        Ok(()) => None,
        Err(GateError::Broken(refusal)) => Some(refusal.rule),
        Err(other) => panic!("the test's writes are always checkable: {other}"),
    }
}
