//! The immutable compiled index: what a decision reads instead of scanning bindings.
//!
//! Layout (built by [`compile`](crate::policy::compile::compile)):
//! * **grants by subject**: for cluster scope and for each namespace, a hash map from user name
//!   (users and service accounts) and from group name to the bindings that name that subject.
//!   `Authorize` looks up the request's user and each of its groups, at cluster scope and in the
//!   request's namespace — `2 × (1 + groups)` hash lookups — and evaluates only those bindings'
//!   roles. Bindings, roles and namespaces unrelated to the subject are never touched.
//! * **rules by (verb, resource)**: the inverted index who-can starts from. Each rule is filed
//!   under its positive verb entries (or `*`) and positive resource entries (`res`, `res/sub`,
//!   `*`, `*/sub`) or a non-resource marker; a request probes at most six keys. Candidates are
//!   then checked with the exact matcher, so the index only narrows, never decides.
//! * **bindings by role**: from a role to the ClusterRoleBindings and, per namespace, the
//!   RoleBindings that reference it, so who-can reaches subjects without scanning bindings.
//! * **ABAC lines by subject**, in file order.
//!
//! INVARIANT: every query answers exactly what the reference evaluator answers on the same
//! policy; `tests/differential.rs` property-tests this.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::policy::model::{AbacRule, Binding, PolicyRule};

pub type BindingId = u32;
pub type RoleId = u32;

/// A binding's data as decisions need it, in canonical order (cluster bindings first).
#[derive(Debug)]
pub struct BindingEntry {
    pub binding: Binding,
    /// Resolved role, or `None` when the roleRef names a role that does not exist.
    pub role: Option<RoleId>,
    pub cluster: bool,
    /// `ClusterRoleBinding/NAME` / `RoleBinding/NS/NAME`.
    pub binding_id: Arc<str>,
    /// `ClusterRole/NAME` / `Role/NS/NAME`.
    pub role_id: Arc<str>,
    pub source: Arc<str>,
    /// Each subject resolved to what it matches, in subject order.
    pub subjects: Vec<SubjectName>,
}

/// What a binding subject matches: one user name (users, and service accounts as
/// `system:serviceaccount:NS:NAME`), one group, or nothing (unknown kinds, service accounts
/// without a namespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubjectName {
    User(Box<str>),
    Group(Box<str>),
    Nothing,
}

/// A role's effective rules (after aggregation).
#[derive(Debug, Default)]
pub struct RoleEntry {
    pub rules: Vec<PolicyRule>,
}

/// "Subject `subject` of binding `binding` is this user/group."
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub binding: BindingId,
    /// Index of the subject within the binding, for the reason string.
    pub subject: u32,
}

/// Bindings of one scope (cluster, or one namespace) by the subject they name.
#[derive(Debug, Default)]
pub struct ScopeGrants {
    pub users: FxHashMap<Box<str>, Vec<Grant>>,
    pub groups: FxHashMap<Box<str>, Vec<Grant>>,
}

/// Where a rule lives: role and index within the role's effective rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleLoc {
    pub role: RoleId,
    pub rule: u32,
}

/// Bindings that reference one role.
#[derive(Debug, Default)]
pub struct RoleBindings {
    pub cluster: Vec<BindingId>,
    pub by_namespace: FxHashMap<Box<str>, Vec<BindingId>>,
}

/// Marker resource key for rules filed by their non-resource URLs.
pub const NON_RESOURCE_KEY: &str = "\0non-resource";

#[derive(Debug, Default)]
pub struct Index {
    pub bindings: Vec<BindingEntry>,
    pub roles: Vec<RoleEntry>,
    pub cluster: ScopeGrants,
    pub namespaces: FxHashMap<Box<str>, ScopeGrants>,

    /// verb key (`verb` or `*`) -> resource key -> rules.
    pub rules_by_verb: FxHashMap<Box<str>, FxHashMap<Box<str>, Vec<RuleLoc>>>,
    pub bindings_by_role: Vec<RoleBindings>,
    /// Bindings whose role is missing, by scope, for who-can's error report.
    pub broken_cluster: Vec<BindingId>,
    pub broken_by_namespace: FxHashMap<Box<str>, Vec<BindingId>>,

    pub abac: Vec<AbacRule>,
    pub abac_by_user: FxHashMap<Box<str>, Vec<u32>>,
    /// Lines with a group and no user.
    pub abac_by_group: FxHashMap<Box<str>, Vec<u32>>,
}

impl Index {
    pub fn scope(&self, namespace: &str) -> Option<&ScopeGrants> {
        self.namespaces.get(namespace)
    }

    pub fn binding(&self, id: BindingId) -> &BindingEntry {
        &self.bindings[id as usize]
    }

    pub fn role_rules(&self, id: RoleId) -> &[PolicyRule] {
        &self.roles[id as usize].rules
    }

    /// Rules filed under any key the action can hit: `(verb | *) × (combined | * | */sub)`, or
    /// the non-resource marker. Sorted and de-duplicated.
    pub fn candidate_rules(&self, verb: &str, resource_keys: &[&str]) -> Vec<RuleLoc> {
        let mut found = Vec::new();
        for verb_key in [verb, "*"] {
            let Some(by_resource) = self.rules_by_verb.get(verb_key) else {
                continue;
            };
            for key in resource_keys {
                if let Some(locs) = by_resource.get(*key) {
                    found.extend_from_slice(locs);
                }
            }
            if verb == "*" {
                break;
            }
        }
        found.sort_unstable();
        found.dedup();
        found
    }
}
