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
//! objects that changed (it scans the policy; a store that keeps policy grouped by partition
//! can build the delta directly).

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;
use thiserror::Error;

use crate::policy::model::{AbacRule, Binding, BindingKind, PolicySet, Role, RoleKind};

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

/// The kinds of object whose change a delta can carry. ABAC lines change as one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChangedKind {
    ClusterRole,
    Role,
    ClusterRoleBinding,
    RoleBinding,
    Abac,
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

impl PolicyDelta {
    /// The delta that takes an index of the policy before the change to an index of `policy`
    /// (the policy after it), given the keys of every object that changed. Scans `policy` once.
    pub fn for_changes<'a>(
        policy: &PolicySet,
        changed: impl IntoIterator<Item = &'a ChangedObject>,
    ) -> Self {
        let mut cluster_roles = false;
        let mut cluster_bindings = false;
        let mut abac = false;
        let mut namespaces: BTreeSet<&str> = BTreeSet::new();
        for object in changed {
            match object.kind {
                ChangedKind::ClusterRole => cluster_roles = true,
                ChangedKind::ClusterRoleBinding => cluster_bindings = true,
                ChangedKind::Abac => abac = true,
                ChangedKind::Role | ChangedKind::RoleBinding => {
                    namespaces.insert(object.namespace.as_str());
                }
            }
        }

        let mut delta = PolicyDelta {
            cluster_roles: cluster_roles.then(Vec::new),
            cluster_bindings: cluster_bindings.then(Vec::new),
            namespaces: namespaces
                .iter()
                .map(|ns| NamespaceDelta {
                    namespace: ns.to_string(),
                    ..Default::default()
                })
                .collect(),
            abac: abac.then(|| policy.abac.clone()),
        };
        let positions: FxHashMap<&str, usize> = namespaces
            .iter()
            .enumerate()
            .map(|(i, ns)| (*ns, i))
            .collect();
        let slot = |namespace: &str| positions.get(namespace).copied();
        if cluster_roles || !namespaces.is_empty() {
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
        if cluster_bindings || !namespaces.is_empty() {
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

    /// Whether the delta changes nothing.
    pub fn is_empty(&self) -> bool {
        self.cluster_roles.is_none()
            && self.cluster_bindings.is_none()
            && self.namespaces.is_empty()
            && self.abac.is_none()
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
