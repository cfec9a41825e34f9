//! Which cached decisions a policy change can affect.
//!
//! A decision depends only on the bindings that name its user or one of its groups, in cluster
//! scope or in its namespace, on the roles those bindings reference, and on the ABAC lines that
//! name its user or groups. So a change's impact is a set of `(scope, subject)` pairs: a
//! ClusterRoleBinding (or a role reached through one) affects its subjects everywhere; a
//! RoleBinding affects its subjects in its namespace only. [`impact_of_change`] computes it by
//! comparing the old and new policy object by object, following roles to the bindings that
//! reference them and aggregated ClusterRoles to their aggregators. The cache removes exactly
//! the entries whose subject and namespace fall in the impact; everything else stays warm.

use std::collections::{BTreeMap, HashMap};

use rustc_hash::FxHashSet;

use crate::policy::aggregate::aggregated_rules;
use crate::policy::model::{
    AbacRule, Binding, BindingKey, BindingKind, PolicySet, Role, RoleKey, RoleKind,
};

/// A subject as cache keys see it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SubjectKey {
    User(Box<str>),
    Group(Box<str>),
}

/// The decisions a change can affect.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Impact {
    /// Every decision (used when precision is not worth it, e.g. configuration changes).
    pub everything: bool,
    /// Subjects affected in every namespace and at cluster scope.
    pub cluster: FxHashSet<SubjectKey>,
    /// Subjects affected only for requests in one namespace.
    pub namespaced: FxHashSet<(Box<str>, SubjectKey)>,
}

impl Impact {
    pub fn everything() -> Self {
        Impact {
            everything: true,
            ..Default::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.everything && self.cluster.is_empty() && self.namespaced.is_empty()
    }

    /// Whether a decision for `user` with `groups` in `namespace` may have changed.
    pub fn affects<'a>(
        &self,
        user: &str,
        groups: impl IntoIterator<Item = &'a str> + Clone,
        namespace: &str,
    ) -> bool {
        if self.everything {
            return true;
        }
        let hit = |key: SubjectKey| {
            self.cluster.contains(&key)
                || (!namespace.is_empty()
                    && !self.namespaced.is_empty()
                    && self.namespaced.contains(&(namespace.into(), key)))
        };
        hit(SubjectKey::User(user.into()))
            || groups.into_iter().any(|g| hit(SubjectKey::Group(g.into())))
    }

    fn add_binding(&mut self, binding: &Binding) {
        for subject in &binding.subjects {
            let key = if let Some(user) = subject.user_name(&binding.namespace) {
                SubjectKey::User(user.into())
            } else if let Some(group) = subject.group_name() {
                SubjectKey::Group(group.into())
            } else {
                continue;
            };
            match binding.kind {
                BindingKind::ClusterRoleBinding => {
                    self.cluster.insert(key);
                }
                BindingKind::RoleBinding => {
                    self.namespaced
                        .insert((binding.namespace.as_str().into(), key));
                }
            }
        }
    }

    fn add_abac(&mut self, rule: &AbacRule) {
        // ABAC lines are not namespaced in a way worth tracking: affect the subject everywhere.
        if !rule.user.is_empty() {
            self.cluster
                .insert(SubjectKey::User(rule.user.as_str().into()));
        }
        if !rule.group.is_empty() {
            self.cluster
                .insert(SubjectKey::Group(rule.group.as_str().into()));
        }
    }

    /// Merges another impact into this one.
    pub fn extend(&mut self, other: Impact) {
        self.everything |= other.everything;
        self.cluster.extend(other.cluster);
        self.namespaced.extend(other.namespaced);
    }
}

fn roles_by_key(policy: &PolicySet) -> HashMap<RoleKey<'_>, &Role> {
    policy.roles.iter().map(|r| (r.key(), &**r)).collect()
}

fn bindings_by_key(policy: &PolicySet) -> HashMap<BindingKey<'_>, &Binding> {
    policy.bindings.iter().map(|b| (b.key(), &**b)).collect()
}

/// The key of the role a binding references.
fn referenced_role(binding: &Binding) -> (RoleKind, &str, &str) {
    match binding.role_ref.kind {
        RoleKind::ClusterRole => (RoleKind::ClusterRole, "", binding.role_ref.name.as_str()),
        RoleKind::Role => (
            RoleKind::Role,
            binding.namespace.as_str(),
            binding.role_ref.name.as_str(),
        ),
    }
}

/// The impact of replacing `old` by `new`.
pub fn impact_of_change(old: &PolicySet, new: &PolicySet) -> Impact {
    // Protected paths decide which plain allows need content: answers cached for any subject
    // may have changed.
    let protected = |p: &PolicySet| -> Vec<crate::policy::content::path::Protected> {
        p.field_policies
            .iter()
            .flat_map(|f| f.protected.iter().cloned())
            .collect()
    };
    if protected(old) != protected(new) {
        return Impact::everything();
    }
    let mut impact = Impact::default();

    // Roles whose effective rules differ (added, removed, edited, or re-aggregated).
    let old_roles = roles_by_key(old);
    let new_roles = roles_by_key(new);
    let old_aggregated = aggregated_rules(old);
    let new_aggregated = aggregated_rules(new);
    let effective = |roles: &HashMap<RoleKey<'_>, &Role>,
                     aggregated: &HashMap<String, Vec<crate::policy::model::PolicyRule>>,
                     key: &RoleKey<'_>| {
        roles.get(key).map(|role| match role.kind {
            RoleKind::ClusterRole => aggregated
                .get(&role.name)
                .cloned()
                .unwrap_or_else(|| role.rules.clone()),
            RoleKind::Role => role.rules.clone(),
        })
    };
    let mut changed_roles: FxHashSet<(RoleKind, String, String)> = FxHashSet::default();
    for key in old_roles.keys().chain(new_roles.keys()) {
        if effective(&old_roles, &old_aggregated, key)
            != effective(&new_roles, &new_aggregated, key)
        {
            changed_roles.insert((key.0, key.1.to_string(), key.2.to_string()));
        }
    }

    // Bindings that changed, or that reference a changed role, in either policy.
    let old_bindings = bindings_by_key(old);
    let new_bindings = bindings_by_key(new);
    for (policy_bindings, other) in [
        (&old_bindings, &new_bindings),
        (&new_bindings, &old_bindings),
    ] {
        for (key, binding) in policy_bindings {
            let (kind, ns, name) = referenced_role(binding);
            let role_changed = changed_roles.contains(&(kind, ns.to_string(), name.to_string()));
            if role_changed || other.get(key) != Some(binding) {
                impact.add_binding(binding);
            }
        }
    }

    // ABAC: explanations name lines by position, so any change re-evaluates every subject
    // named by a line that is not identical at the same position.
    let max = old.abac.len().max(new.abac.len());
    for i in 0..max {
        let (a, b) = (old.abac.get(i), new.abac.get(i));
        if a != b {
            for rule in a.into_iter().chain(b) {
                impact.add_abac(rule);
            }
        }
    }
    impact
}

/// The impact of a set of role/binding objects changing from `before` to `after` (either may be
/// absent), given the policy as it is after the change. Used for single-object admin writes,
/// where diffing the whole policy would be wasteful.
pub fn impact_of_objects(
    policy_after: &PolicySet,
    policy_before: &PolicySet,
    roles: &[(Option<&Role>, Option<&Role>)],
    bindings: &[(Option<&Binding>, Option<&Binding>)],
) -> Impact {
    let mut impact = Impact::default();
    for (before, after) in bindings {
        for binding in before.iter().chain(after.iter()) {
            impact.add_binding(binding);
        }
    }
    if roles.is_empty() {
        return impact;
    }
    // A changed role affects every binding that references it, and through aggregation every
    // binding of an aggregator whose effective rules changed.
    let mut changed: Vec<(RoleKind, String, String)> = Vec::new();
    for (before, after) in roles {
        for role in before.iter().chain(after.iter()) {
            changed.push((role.kind, role.namespace.clone(), role.name.clone()));
        }
    }
    if changed
        .iter()
        .any(|(kind, _, _)| *kind == RoleKind::ClusterRole)
    {
        let old_agg = aggregated_rules(policy_before);
        let new_agg = aggregated_rules(policy_after);
        let names: BTreeMap<&String, ()> = old_agg
            .keys()
            .chain(new_agg.keys())
            .map(|n| (n, ()))
            .collect();
        for name in names.keys() {
            if old_agg.get(*name) != new_agg.get(*name) {
                changed.push((RoleKind::ClusterRole, String::new(), (*name).clone()));
            }
        }
    }
    for policy in [policy_before, policy_after] {
        for binding in &policy.bindings {
            let (kind, ns, name) = referenced_role(binding);
            if changed
                .iter()
                .any(|(k, n, r)| *k == kind && n == ns && r == name)
            {
                impact.add_binding(binding);
            }
        }
    }
    impact
}
