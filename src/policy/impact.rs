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
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;

use crate::policy::aggregate::{aggregated_rules, aggregated_rules_of};
use crate::policy::model::{
    AbacRule, Binding, BindingKey, BindingKind, PolicyRule, PolicySet, Role, RoleKey, RoleKind,
};

/// A subject as cache keys see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubjectKey<'a> {
    User(&'a str),
    Group(&'a str),
}

/// The decisions a change can affect.
///
/// Subjects are kept as 64-bit hashes of (scope, subject), never as strings: an impact of tens
/// of thousands of subjects (a ClusterRole bound in every namespace changed) is then built
/// without an allocation per subject, and the cache probes it for every entry it holds without
/// allocating either. Two subjects whose hashes collide are both affected when one is, which
/// costs a cache miss, never a stale answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Impact {
    /// Every decision (used when precision is not worth it, e.g. configuration changes).
    pub everything: bool,
    /// Subjects affected in every namespace and at cluster scope.
    cluster: FxHashSet<u64>,
    /// Subjects affected only for requests in one namespace, with that namespace.
    namespaced: FxHashSet<u64>,
}

/// The hash an impact keeps for `subject` in `scope` (a namespace, or empty for every scope).
///
/// It is also how an impact travels to callers' caches (WatchInvalidations,
/// docs/caller-cache.md §3), so it is written out field by field rather than left to
/// `#[derive(Hash)]`'s layout: rustc-hash 2's `FxHasher` over the scope's bytes, a tag byte
/// (0 for a user, 1 for a group), then the name's bytes. `a_subject_key_is_stable` pins it:
/// changing it changes the wire.
pub fn key_hash(scope: &str, subject: SubjectKey<'_>) -> u64 {
    use std::hash::Hasher;
    let (tag, name) = match subject {
        SubjectKey::User(name) => (0u8, name),
        SubjectKey::Group(name) => (1u8, name),
    };
    let mut hasher = rustc_hash::FxHasher::default();
    hasher.write(scope.as_bytes());
    hasher.write_u8(tag);
    hasher.write(name.as_bytes());
    hasher.finish()
}

/// A binding's subjects as an impact keeps them: hashed in the binding's scope.
#[derive(Clone, Debug)]
struct BindingKeys {
    /// A ClusterRoleBinding's (affected everywhere), or a RoleBinding's (in its namespace).
    cluster: bool,
    hashes: SmallVec<[u64; 2]>,
}

impl BindingKeys {
    fn of(binding: &Binding) -> Self {
        let scope = match binding.kind {
            BindingKind::ClusterRoleBinding => "",
            BindingKind::RoleBinding => binding.namespace.as_str(),
        };
        let hashes = binding
            .subjects
            .iter()
            .filter_map(|subject| {
                // A `User`'s name is its own; a service account's is composed.
                if subject.kind == "User" {
                    Some(key_hash(scope, SubjectKey::User(&subject.name)))
                } else if let Some(group) = subject.group_name() {
                    Some(key_hash(scope, SubjectKey::Group(group)))
                } else {
                    let user = subject.user_name(&binding.namespace)?;
                    Some(key_hash(scope, SubjectKey::User(&user)))
                }
            })
            .collect();
        BindingKeys {
            cluster: binding.kind == BindingKind::ClusterRoleBinding,
            hashes,
        }
    }
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

    /// Marks `subject`'s decisions in every namespace and at cluster scope.
    pub fn insert_cluster(&mut self, subject: SubjectKey<'_>) {
        self.cluster.insert(key_hash("", subject));
    }

    /// Marks `subject`'s decisions for requests in `namespace`.
    pub fn insert_namespaced(&mut self, namespace: &str, subject: SubjectKey<'_>) {
        self.namespaced.insert(key_hash(namespace, subject));
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
        let probe_namespace = !namespace.is_empty() && !self.namespaced.is_empty();
        let hit = |key: SubjectKey<'_>| {
            self.cluster.contains(&key_hash("", key))
                || (probe_namespace && self.namespaced.contains(&key_hash(namespace, key)))
        };
        hit(SubjectKey::User(user)) || groups.into_iter().any(|g| hit(SubjectKey::Group(g)))
    }

    fn add_binding(&mut self, binding: &Binding) {
        self.add_keys(&BindingKeys::of(binding));
    }

    fn add_keys(&mut self, keys: &BindingKeys) {
        let set = if keys.cluster {
            &mut self.cluster
        } else {
            &mut self.namespaced
        };
        set.extend(keys.hashes.iter().copied());
    }

    fn add_abac(&mut self, rule: &AbacRule) {
        // ABAC lines are not namespaced in a way worth tracking: affect the subject everywhere.
        if !rule.user.is_empty() {
            self.insert_cluster(SubjectKey::User(&rule.user));
        }
        if !rule.group.is_empty() {
            self.insert_cluster(SubjectKey::Group(&rule.group));
        }
    }

    /// The subject keys affected everywhere and those affected in one namespace (each keyed
    /// with it, see [`key_hash`]): what an impact sends to callers' caches.
    pub fn keys(
        &self,
    ) -> (
        impl Iterator<Item = u64> + '_,
        impl Iterator<Item = u64> + '_,
    ) {
        (
            self.cluster.iter().copied(),
            self.namespaced.iter().copied(),
        )
    }

    /// An impact from the keys [`Self::keys`] gave (a caller's cache receiving one).
    pub fn from_keys(
        everything: bool,
        cluster: impl IntoIterator<Item = u64>,
        namespaced: impl IntoIterator<Item = u64>,
    ) -> Self {
        Impact {
            everything,
            cluster: cluster.into_iter().collect(),
            namespaced: namespaced.into_iter().collect(),
        }
    }

    /// How many subject keys it holds (what keeping it costs).
    pub fn key_count(&self) -> usize {
        self.cluster.len() + self.namespaced.len()
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

/// Whether the two policies protect different paths. Protected paths decide which plain
/// allows need content, so answers cached for any subject may have changed. The rest of a
/// FieldPolicy (ignored paths, list kinds) only shapes the diff a request's content is
/// finished with, which is never cached, so it invalidates nothing.
pub fn protected_paths_changed(old: &PolicySet, new: &PolicySet) -> bool {
    !old.protected_paths().eq(new.protected_paths())
}

/// The impact of replacing `old` by `new`.
pub fn impact_of_change(old: &PolicySet, new: &PolicySet) -> Impact {
    if protected_paths_changed(old, new) {
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
            let (kind, ns, name) = binding.role_key();
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
/// where diffing the whole policy would be wasteful. A changed role is followed to its
/// bindings by scanning both policies; [`impact_of_applied_objects`] uses an index instead.
pub fn impact_of_objects(
    policy_after: &PolicySet,
    policy_before: &PolicySet,
    roles: &[(Option<&Role>, Option<&Role>)],
    bindings: &[(Option<&Binding>, Option<&Binding>)],
) -> Impact {
    let aggregated = || {
        (
            aggregated_rules(policy_before),
            aggregated_rules(policy_after),
        )
    };
    impact_with_referrers(roles, bindings, aggregated, |changed, impact| {
        let changed: Vec<RoleKey<'_>> = changed
            .iter()
            .map(|(kind, namespace, name)| (*kind, &**namespace, &**name))
            .collect();
        for policy in [policy_before, policy_after] {
            for binding in &policy.bindings {
                if changed.contains(&binding.role_key()) {
                    impact.add_binding(binding);
                }
            }
        }
    })
}

/// [`impact_of_objects`] at a cost proportional to the change, for policies in canonical order
/// ([`PolicySet::canonicalize`]) whose bindings `referrers` indexes as they are after the
/// change. `bindings` must list every binding that differs between the two policies (the
/// store's applier passes every object of the change): then a binding that referenced a changed
/// role before the change and does not after is among them, and the bindings referencing it
/// after are all a changed role needs. A changed ClusterRole's bindings come from `referrers`;
/// a changed Role's are its namespace's RoleBindings, a run of the canonical order. Aggregation
/// is resolved over the ClusterRoles only (the run canonical order puts first).
pub fn impact_of_applied_objects(
    policy_after: &PolicySet,
    policy_before: &PolicySet,
    roles: &[(Option<&Role>, Option<&Role>)],
    bindings: &[(Option<&Binding>, Option<&Binding>)],
    referrers: &ClusterRoleReferrers,
) -> Impact {
    let cluster_roles = |policy: &PolicySet| {
        let roles = policy.roles.as_slice();
        let end = roles.partition_point(|r| r.kind == RoleKind::ClusterRole);
        aggregated_rules_of(roles[..end].iter().map(|r| &**r))
    };
    let aggregated = || (cluster_roles(policy_before), cluster_roles(policy_after));
    impact_with_referrers(roles, bindings, aggregated, |changed, impact| {
        for (kind, namespace, name) in changed {
            match kind {
                RoleKind::ClusterRole => referrers.add_referrers_of(name, impact),
                RoleKind::Role => {
                    for binding in role_bindings_in(policy_after, namespace) {
                        if binding.role_ref.kind == RoleKind::Role
                            && binding.role_ref.name.as_str() == &**name
                        {
                            impact.add_binding(binding);
                        }
                    }
                }
            }
        }
    })
}

/// A role's key, owned.
type OwnedRoleKey = (RoleKind, Box<str>, Box<str>);

fn owned_role_key((kind, namespace, name): (RoleKind, &str, &str)) -> OwnedRoleKey {
    (kind, namespace.into(), name.into())
}

/// The impact of changed objects, with the bindings of changed roles found by `referrers`
/// (given every role whose effective rules may have changed, it adds those roles' bindings).
fn impact_with_referrers(
    roles: &[(Option<&Role>, Option<&Role>)],
    bindings: &[(Option<&Binding>, Option<&Binding>)],
    aggregated: impl FnOnce() -> (
        HashMap<String, Vec<PolicyRule>>,
        HashMap<String, Vec<PolicyRule>>,
    ),
    referrers: impl FnOnce(&FxHashSet<OwnedRoleKey>, &mut Impact),
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
    let mut changed: FxHashSet<OwnedRoleKey> = FxHashSet::default();
    for (before, after) in roles {
        for role in before.iter().chain(after.iter()) {
            changed.insert(owned_role_key(role.key()));
        }
    }
    if changed
        .iter()
        .any(|(kind, _, _)| *kind == RoleKind::ClusterRole)
    {
        let (old_agg, new_agg) = aggregated();
        let names: BTreeMap<&String, ()> = old_agg
            .keys()
            .chain(new_agg.keys())
            .map(|n| (n, ()))
            .collect();
        for name in names.keys() {
            if old_agg.get(*name) != new_agg.get(*name) {
                changed.insert((RoleKind::ClusterRole, "".into(), name.as_str().into()));
            }
        }
    }
    referrers(&changed, &mut impact);
    impact
}

/// The RoleBindings of `namespace` in a canonical policy: a run of its order, found by binary
/// search.
fn role_bindings_in<'a>(policy: &'a PolicySet, namespace: &str) -> &'a [Arc<Binding>] {
    let bindings = policy.bindings.as_slice();
    let from = bindings.partition_point(|b| {
        (b.kind, b.namespace.as_str()) < (BindingKind::RoleBinding, namespace)
    });
    let len = bindings[from..]
        .partition_point(|b| b.kind == BindingKind::RoleBinding && b.namespace == namespace);
    &bindings[from..from + len]
}

/// The bindings of a policy that reference each ClusterRole (ClusterRoleBindings and
/// RoleBindings alike), so that a ClusterRole's change reaches its bindings without a scan of
/// every binding, each with its subjects already hashed as the impact keeps them: a ClusterRole
/// bound in every namespace changes, and its impact is built from this index alone, without
/// reading the bindings' names again. Holds the policy's own `Arc`s, keyed by their address:
/// the store inserts and removes exactly the `Arc`s it puts into and takes out of its policy,
/// so an entry is found again by the object itself, without a copy of its key.
#[derive(Default)]
pub struct ClusterRoleReferrers {
    by_name: FxHashMap<Box<str>, Referrers>,
}

/// One ClusterRole's bindings, by address (see [`ClusterRoleReferrers`]).
type Referrers = FxHashMap<usize, (Arc<Binding>, BindingKeys)>;

impl ClusterRoleReferrers {
    /// The index of every binding of `policy`.
    pub fn of(policy: &PolicySet) -> Self {
        let mut referrers = Self::default();
        for binding in &policy.bindings {
            referrers.insert(binding);
        }
        referrers
    }

    /// Files `binding` (nothing for a binding to a namespaced Role).
    pub fn insert(&mut self, binding: &Arc<Binding>) {
        if binding.role_ref.kind == RoleKind::ClusterRole {
            self.by_name
                .entry(binding.role_ref.name.as_str().into())
                .or_default()
                .insert(
                    Self::address(binding),
                    (Arc::clone(binding), BindingKeys::of(binding)),
                );
        }
    }

    /// Removes `binding`, the `Arc` that was inserted.
    pub fn remove(&mut self, binding: &Arc<Binding>) {
        if binding.role_ref.kind != RoleKind::ClusterRole {
            return;
        }
        let name = binding.role_ref.name.as_str();
        let Some(referrers) = self.by_name.get_mut(name) else {
            debug_assert!(false, "{} was never filed", binding.describe());
            return;
        };
        let removed = referrers.remove(&Self::address(binding));
        debug_assert!(removed.is_some(), "{} was never filed", binding.describe());
        if referrers.is_empty() {
            self.by_name.remove(name);
        }
    }

    /// Adds the subjects of every binding referencing the ClusterRole `name` to `impact`.
    fn add_referrers_of(&self, name: &str, impact: &mut Impact) {
        for (_, keys) in self.by_name.get(name).into_iter().flat_map(|r| r.values()) {
            impact.add_keys(keys);
        }
    }

    fn address(binding: &Arc<Binding>) -> usize {
        Arc::as_ptr(binding) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scope and kind are part of the key: a namespaced subject is affected in its namespace
    /// only, a cluster one everywhere, and a user never stands for a group of the same name.
    #[test]
    fn affects_by_scope_and_kind() {
        let mut impact = Impact::default();
        impact.insert_namespaced("team-a", SubjectKey::User("alice"));
        impact.insert_cluster(SubjectKey::Group("ops"));
        assert!(impact.affects("alice", [], "team-a"));
        assert!(!impact.affects("alice", [], "team-b"));
        assert!(!impact.affects("alice", [], ""));
        assert!(!impact.affects("bob", ["alice"], "team-a"));
        assert!(impact.affects("bob", ["dev", "ops"], ""));
        assert!(impact.affects("bob", ["ops"], "team-b"));
        assert!(!impact.affects("ops", [], "team-b"));
        assert!(!Impact::default().affects("alice", [], "team-a"));
        assert!(Impact::everything().affects("anyone", [], ""));
    }

    /// Subject keys travel to callers' caches, which may be built from another release: the
    /// function is part of the wire (docs/caller-cache.md §3), and a change to it (or to
    /// rustc-hash's `FxHasher`) must be a deliberate one.
    #[test]
    fn a_subject_key_is_stable() {
        assert_eq!(key_hash("", SubjectKey::User("alice")), KEY_ALICE);
        assert_eq!(key_hash("team-a", SubjectKey::Group("ops")), KEY_TEAM_A_OPS);
        assert_ne!(
            key_hash("", SubjectKey::User("ops")),
            key_hash("", SubjectKey::Group("ops"))
        );
        let (cluster, namespaced) = {
            let mut impact = Impact::default();
            impact.insert_cluster(SubjectKey::User("alice"));
            impact.insert_namespaced("team-a", SubjectKey::Group("ops"));
            let (c, n) = impact.keys();
            (c.collect::<Vec<_>>(), n.collect::<Vec<_>>())
        };
        assert_eq!(
            (cluster.as_slice(), namespaced.as_slice()),
            (&[KEY_ALICE][..], &[KEY_TEAM_A_OPS][..])
        );
        let back = Impact::from_keys(false, cluster, namespaced);
        assert!(back.affects("alice", [], "anywhere"));
        assert!(back.affects("bob", ["ops"], "team-a"));
        assert!(!back.affects("bob", ["ops"], "team-b"));
    }
    const KEY_ALICE: u64 = 12436861119259762157;
    const KEY_TEAM_A_OPS: u64 = 16261327761491879702;
}
