//! Policy deltas: what an incremental update of the index needs to know.
//!
//! The index is partitioned (see [`crate::policy::index`]): all ClusterRoles, the
//! ClusterRoleBindings, each namespace's Roles and RoleBindings, and the ABAC lines. A
//! [`PolicyDelta`] carries, for each partition that changed, that partition's *complete new
//! contents*; partitions it does not mention are kept as they are.
//! The engine's `update` (a layer above, which this module does not name) rebuilds only the
//! partitions the delta carries, so an update costs what the changed partitions cost, not what
//! the policy costs.
//!
//! [`PolicyDelta::for_changes`] computes a delta from the new policy and the keys of the
//! objects that changed by scanning the policy; [`PolicyDelta::for_changes_in_canonical`],
//! for a policy in canonical order (as the store keeps it), finds each changed partition by
//! binary search instead.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;
use thiserror::Error;

use crate::policy::model::{
    AbacRule, Binding, BindingKind, FieldPolicy, PolicySet, Role, RoleKind,
};

/// The new contents of one namespace: all its Roles and all its RoleBindings. Both empty means
/// the namespace is now empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceDelta {
    pub namespace: String,
    /// Roles of kind `Role` in `namespace`.
    pub roles: Vec<Role>,
    /// Bindings of kind `RoleBinding` in `namespace`.
    pub bindings: Vec<Binding>,
}

/// The complete new contents of every partition that changed; `None` (or an absent namespace)
/// means unchanged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyDelta {
    /// Every role of kind `ClusterRole` (all of them: aggregation relates them to each other).
    pub cluster_roles: Option<Vec<Role>>,
    /// Every binding of kind `ClusterRoleBinding`.
    pub cluster_bindings: Option<Vec<Binding>>,
    /// Each changed namespace at most once.
    pub namespaces: Vec<NamespaceDelta>,
    /// Every ABAC line, in file order.
    pub abac: Option<Vec<AbacRule>>,
    /// Every FieldPolicy, in name order. Not part of the index: the engine derives how
    /// changed paths are computed from them.
    pub field_policies: Option<Vec<FieldPolicy>>,
}

/// A delta that does not describe partitions: applying it could silently serve an object in
/// the wrong scope, so it is refused as a whole.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum DeltaError {
    #[error("{object} does not belong in the {partition} partition")]
    Misfiled { object: String, partition: String },
    #[error("namespace {0:?} appears more than once in the delta")]
    DuplicateNamespace(String),
}

/// The kinds of object whose change a delta can carry. ABAC lines change as one partition, and
/// so do FieldPolicies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChangedKind {
    ClusterRole,
    Role,
    ClusterRoleBinding,
    RoleBinding,
    Abac,
    FieldPolicy,
    /// Changes no answer: only what later writes may do.
    ChangeGate,
}

/// The key of an object that was created, replaced or deleted.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChangedObject {
    pub kind: ChangedKind,
    /// Empty for cluster-scoped kinds and ABAC.
    pub namespace: String,
    /// Empty for ABAC.
    pub name: String,
}

impl ChangedObject {
    pub fn new(kind: ChangedKind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    pub fn of_role(role: &Role) -> Self {
        let kind = match role.kind {
            RoleKind::ClusterRole => ChangedKind::ClusterRole,
            RoleKind::Role => ChangedKind::Role,
        };
        Self::new(kind, role.namespace.as_str(), role.name.as_str())
    }

    pub fn of_binding(binding: &Binding) -> Self {
        let kind = match binding.kind {
            BindingKind::ClusterRoleBinding => ChangedKind::ClusterRoleBinding,
            BindingKind::RoleBinding => ChangedKind::RoleBinding,
        };
        Self::new(kind, binding.namespace.as_str(), binding.name.as_str())
    }
}

/// Which partitions a set of changed objects touches.
struct Touched<'a> {
    cluster_roles: bool,
    cluster_bindings: bool,
    abac: bool,
    field_policies: bool,
    /// Changed namespaces, in order.
    namespaces: BTreeSet<&'a str>,
}

impl<'a> Touched<'a> {
    fn of(changed: impl IntoIterator<Item = &'a ChangedObject>) -> Self {
        let mut touched = Touched {
            cluster_roles: false,
            cluster_bindings: false,
            abac: false,
            field_policies: false,
            namespaces: BTreeSet::new(),
        };
        for object in changed {
            match object.kind {
                ChangedKind::ClusterRole => touched.cluster_roles = true,
                ChangedKind::ClusterRoleBinding => touched.cluster_bindings = true,
                ChangedKind::Abac => touched.abac = true,
                ChangedKind::FieldPolicy => touched.field_policies = true,
                ChangedKind::ChangeGate => {}
                ChangedKind::Role | ChangedKind::RoleBinding => {
                    touched.namespaces.insert(object.namespace.as_str());
                }
            }
        }
        touched
    }

    /// The delta's frame: every touched partition present and still empty (ABAC and
    /// FieldPolicies whole).
    fn empty_delta(&self, policy: &PolicySet) -> PolicyDelta {
        PolicyDelta {
            cluster_roles: self.cluster_roles.then(Vec::new),
            cluster_bindings: self.cluster_bindings.then(Vec::new),
            namespaces: self
                .namespaces
                .iter()
                .map(|ns| NamespaceDelta {
                    namespace: ns.to_string(),
                    ..Default::default()
                })
                .collect(),
            abac: self.abac.then(|| policy.abac.clone()),
            field_policies: self.field_policies.then(|| policy.field_policies.clone()),
        }
    }
}

impl PolicyDelta {
    /// The delta that takes an index of the policy before the change to an index of `policy`
    /// (the policy after it), given the keys of every object that changed. Scans `policy` once;
    /// [`for_changes_in_canonical`](Self::for_changes_in_canonical) does not.
    pub fn for_changes<'a>(
        policy: &PolicySet,
        changed: impl IntoIterator<Item = &'a ChangedObject>,
    ) -> Self {
        let touched = Touched::of(changed);
        let mut delta = touched.empty_delta(policy);
        let positions: FxHashMap<&str, usize> = touched
            .namespaces
            .iter()
            .enumerate()
            .map(|(i, ns)| (*ns, i))
            .collect();
        let slot = |namespace: &str| positions.get(namespace).copied();
        if touched.cluster_roles || !touched.namespaces.is_empty() {
            for role in &policy.roles {
                match role.kind {
                    RoleKind::ClusterRole => {
                        if let Some(roles) = &mut delta.cluster_roles {
                            roles.push(Role::clone(role));
                        }
                    }
                    RoleKind::Role => {
                        if let Some(ns) =
                            slot(&role.namespace).and_then(|i| delta.namespaces.get_mut(i))
                        {
                            ns.roles.push(Role::clone(role));
                        }
                    }
                }
            }
        }
        if touched.cluster_bindings || !touched.namespaces.is_empty() {
            for binding in &policy.bindings {
                match binding.kind {
                    BindingKind::ClusterRoleBinding => {
                        if let Some(bindings) = &mut delta.cluster_bindings {
                            bindings.push(Binding::clone(binding));
                        }
                    }
                    BindingKind::RoleBinding => {
                        if let Some(ns) =
                            slot(&binding.namespace).and_then(|i| delta.namespaces.get_mut(i))
                        {
                            ns.bindings.push(Binding::clone(binding));
                        }
                    }
                }
            }
        }
        delta
    }

    /// [`for_changes`](Self::for_changes) for a policy in canonical order
    /// ([`PolicySet::canonicalize`]; every policy the store holds is): each touched partition
    /// is a run of that order, found by binary search, so this costs what the touched
    /// partitions hold, not what the policy holds. On such a policy the result is
    /// `for_changes`'s (property-tested); on any other it would miss objects, so debug builds
    /// check the order.
    pub fn for_changes_in_canonical<'a>(
        policy: &PolicySet,
        changed: impl IntoIterator<Item = &'a ChangedObject>,
    ) -> Self {
        debug_assert!(policy.is_canonical(), "policy not in canonical order");
        let touched = Touched::of(changed);
        let mut delta = touched.empty_delta(policy);
        let roles = policy.roles.as_slice();
        let bindings = policy.bindings.as_slice();
        // Cluster-scoped kinds sort first.
        let cluster_roles = roles.partition_point(|r| r.kind == RoleKind::ClusterRole);
        let cluster_bindings =
            bindings.partition_point(|b| b.kind == BindingKind::ClusterRoleBinding);
        if let Some(out) = &mut delta.cluster_roles {
            out.extend(roles[..cluster_roles].iter().map(|r| Role::clone(r)));
        }
        if let Some(out) = &mut delta.cluster_bindings {
            out.extend(
                bindings[..cluster_bindings]
                    .iter()
                    .map(|b| Binding::clone(b)),
            );
        }
        for ns in &mut delta.namespaces {
            let namespace = ns.namespace.as_str();
            let in_roles = &roles[cluster_roles..];
            let from = in_roles.partition_point(|r| r.namespace.as_str() < namespace);
            let to = from + in_roles[from..].partition_point(|r| r.namespace == namespace);
            ns.roles
                .extend(in_roles[from..to].iter().map(|r| Role::clone(r)));
            let in_bindings = &bindings[cluster_bindings..];
            let from = in_bindings.partition_point(|b| b.namespace.as_str() < namespace);
            let to = from + in_bindings[from..].partition_point(|b| b.namespace == namespace);
            ns.bindings
                .extend(in_bindings[from..to].iter().map(|b| Binding::clone(b)));
        }
        delta
    }

    /// Whether the delta changes nothing.
    pub fn is_empty(&self) -> bool {
        self.cluster_roles.is_none()
            && self.cluster_bindings.is_none()
            && self.namespaces.is_empty()
            && self.abac.is_none()
            && self.field_policies.is_none()
    }

    /// Checks that every object sits in the partition it belongs to and that no namespace is
    /// given twice.
    pub fn validate(&self) -> Result<(), DeltaError> {
        let misfiled = |object: String, partition: &str| DeltaError::Misfiled {
            object,
            partition: partition.to_string(),
        };
        for role in self.cluster_roles.iter().flatten() {
            if role.kind != RoleKind::ClusterRole {
                return Err(misfiled(role.describe(), "ClusterRole"));
            }
        }
        for binding in self.cluster_bindings.iter().flatten() {
            if binding.kind != BindingKind::ClusterRoleBinding {
                return Err(misfiled(binding.describe(), "ClusterRoleBinding"));
            }
        }
        let mut seen = BTreeSet::new();
        for ns in &self.namespaces {
            if !seen.insert(ns.namespace.as_str()) {
                return Err(DeltaError::DuplicateNamespace(ns.namespace.clone()));
            }
            let partition = || format!("namespace {:?}", ns.namespace);
            for role in &ns.roles {
                if role.kind != RoleKind::Role || role.namespace != ns.namespace {
                    return Err(misfiled(role.describe(), &partition()));
                }
            }
            for binding in &ns.bindings {
                if binding.kind != BindingKind::RoleBinding || binding.namespace != ns.namespace {
                    return Err(misfiled(binding.describe(), &partition()));
                }
            }
        }
        Ok(())
    }
}
