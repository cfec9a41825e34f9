//! Compilation of policy into an [`Index`], whole ([`compile`]) or partition by partition
//! ([`apply`], for incremental updates). Deterministic: the same policy always yields the same
//! answers, whatever order its files were read in and whichever path built the index.
//!
//! Each partition builder sorts its own objects into canonical order (stable, by namespace and
//! name, as [`PolicySet::canonicalize`] does), so a partition built from a delta is the
//! partition a full build of the same policy would make. The one piece of state an update
//! carries over is the ClusterRole slot map (see [`crate::policy::index`]).

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::policy::aggregate::aggregated_rules_of;
use crate::policy::delta::{DeltaError, PolicyDelta};
use crate::policy::describe::{self, BindingFacts};
use crate::policy::index::{
    filing_keys, AbacPartition, BindingEntry, BindingId, BoundSubject, ClusterRoles, Grant, Index,
    NameGrants, NameMap, NamespacePartition, RoleEntry, RoleId, RoleTarget, RuleLoc, RulesByVerb,
    ScopeBindings, ScopeGrants, SubjectName,
};
use crate::policy::model::{
    AbacRule, Binding, BindingKind, PolicyRule, PolicySet, Role, RoleKind, Source,
};

/// A full build: every partition from scratch, with fresh ClusterRole slots.
pub fn compile(policy: &PolicySet) -> Index {
    let mut cluster_roles = Vec::new();
    let mut cluster_bindings = Vec::new();
    type Parts<'a> = (Vec<&'a Role>, Vec<&'a Binding>);
    let mut namespaces: FxHashMap<&str, Parts<'_>> = FxHashMap::default();
    for role in policy.roles.iter().map(Arc::as_ref) {
        match role.kind {
            RoleKind::ClusterRole => cluster_roles.push(role),
            RoleKind::Role => namespaces
                .entry(role.namespace.as_str())
                .or_default()
                .0
                .push(role),
        }
    }
    for binding in policy.bindings.iter().map(Arc::as_ref) {
        match binding.kind {
            BindingKind::ClusterRoleBinding => cluster_bindings.push(binding),
            BindingKind::RoleBinding => namespaces
                .entry(binding.namespace.as_str())
                .or_default()
                .1
                .push(binding),
        }
    }

    let mut shared = SharedStrings::default();
    let cluster_roles = Arc::new(build_cluster_roles(cluster_roles, None));
    let cluster = Arc::new(build_scope(
        cluster_bindings,
        None,
        &cluster_roles,
        &mut shared,
    ));
    let namespaces = namespaces
        .into_iter()
        .map(|(namespace, (roles, bindings))| {
            let partition = build_namespace(roles, bindings, &cluster_roles, &mut shared);
            (shared.share(namespace), Arc::new(partition))
        })
        .collect();
    Index {
        cluster_roles,
        cluster,
        namespaces,
        abac: Arc::new(build_abac(policy.abac.clone())),
    }
}

/// An incremental build: `index` with the partitions `delta` carries replaced, every other
/// partition shared. ClusterRoles keep their slots, so bindings elsewhere stay valid.
pub fn apply(index: &Index, delta: &PolicyDelta) -> Result<Index, DeltaError> {
    delta.validate()?;
    let cluster_roles = match &delta.cluster_roles {
        Some(roles) => Arc::new(build_cluster_roles(
            roles.iter().collect(),
            Some(&index.cluster_roles),
        )),
        None => Arc::clone(&index.cluster_roles),
    };
    let mut shared = SharedStrings::default();
    let cluster = match &delta.cluster_bindings {
        Some(bindings) => Arc::new(build_scope(
            bindings.iter().collect(),
            None,
            &cluster_roles,
            &mut shared,
        )),
        None => Arc::clone(&index.cluster),
    };
    let mut namespaces = index.namespaces.clone();
    for ns in &delta.namespaces {
        if ns.roles.is_empty() && ns.bindings.is_empty() {
            namespaces.remove(ns.namespace.as_str());
        } else {
            let partition = build_namespace(
                ns.roles.iter().collect(),
                ns.bindings.iter().collect(),
                &cluster_roles,
                &mut shared,
            );
            namespaces.insert(shared.share(&ns.namespace), Arc::new(partition));
        }
    }
    let abac = match &delta.abac {
        Some(rules) => Arc::new(build_abac(rules.clone())),
        None => Arc::clone(&index.abac),
    };
    Ok(Index {
        cluster_roles,
        cluster,
        namespaces,
        abac,
    })
}

/// Every ClusterRole (`roles` holds exactly the roles of kind ClusterRole), with aggregation
/// resolved. Slots of `previous` are kept: its names keep their slots (tombstones when the role
/// is gone), new names get new slots.
fn build_cluster_roles(mut roles: Vec<&Role>, previous: Option<&ClusterRoles>) -> ClusterRoles {
    roles.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let aggregated = aggregated_rules_of(roles.iter().copied());

    let mut out = ClusterRoles::default();
    if let Some(previous) = previous {
        out.names = previous.names.clone();
        out.slot_by_name = previous.slot_by_name.clone();
        out.roles = out.names.iter().map(|_| None).collect();
    }
    for role in roles {
        // A ClusterRole is looked up with an empty namespace; one with a namespace can only
        // feed aggregation.
        if !role.namespace.is_empty() {
            continue;
        }
        let slot = match out.slot_by_name.get(role.name.as_str()) {
            Some(slot) => *slot,
            None => {
                let slot = out.names.len() as RoleId;
                out.names.push(role.name.as_str().into());
                out.roles.push(None);
                out.slot_by_name.insert(role.name.as_str().into(), slot);
                slot
            }
        };
        let rules = match aggregated.get(&role.name) {
            Some(rules) => rules.clone(),
            None => role.rules.clone(),
        };
        // Of two ClusterRoles with one name, the later in canonical order wins, as in a
        // name-keyed map.
        if let Some(entry) = out.roles.get_mut(slot as usize) {
            *entry = Some(RoleEntry::new(rules));
        }
    }
    for (slot, role) in out.roles.iter().enumerate() {
        match role {
            Some(role) => {
                for (rule_index, rule) in role.rules().iter().enumerate() {
                    file_rule(&mut out.rules, slot as RoleId, rule_index as u32, rule);
                }
            }
            None => out.tombstones.push(slot as RoleId),
        }
    }
    out
}

/// One namespace: `roles` are its Roles, `bindings` its RoleBindings.
fn build_namespace(
    mut roles: Vec<&Role>,
    bindings: Vec<&Binding>,
    cluster_roles: &ClusterRoles,
    shared: &mut SharedStrings,
) -> NamespacePartition {
    roles.sort_by(|a, b| a.name.cmp(&b.name));
    let mut partition = NamespacePartition::default();
    for (id, role) in roles.iter().enumerate() {
        let id = id as RoleId;
        for (rule_index, rule) in role.rules.iter().enumerate() {
            file_rule(&mut partition.rules, id, rule_index as u32, rule);
        }
        partition.roles.push(RoleEntry::new(role.rules.clone()));
        // Of two Roles with one name, the later in canonical order wins.
        partition.role_by_name.insert(role.name.as_str().into(), id);
    }
    partition.scope = build_scope(bindings, Some(&partition), cluster_roles, shared);
    partition
}

/// Equal strings shared among the bindings of one build: role ids (one per role, not per
/// binding), namespaces (one per namespace, also the key of its partition) and rendered
/// sources. Dropped when the build ends; the index holds the only references.
#[derive(Default)]
struct SharedStrings {
    strings: FxHashSet<Arc<str>>,
    sources: FxHashMap<Source, Arc<str>>,
}

impl SharedStrings {
    fn share(&mut self, text: &str) -> Arc<str> {
        if let Some(shared) = self.strings.get(text) {
            return Arc::clone(shared);
        }
        let shared: Arc<str> = Arc::from(text);
        self.strings.insert(Arc::clone(&shared));
        shared
    }

    /// `file:line`.
    fn source(&mut self, source: &Source) -> Arc<str> {
        let rendered = self
            .sources
            .entry(source.clone())
            .or_insert_with(|| Arc::from(source.to_string()));
        Arc::clone(rendered)
    }
}

/// The bindings of one scope: the ClusterRoleBindings (`local` is `None`) or the RoleBindings
/// of the namespace `local` (whose Roles are already built). Every collection is built to its
/// exact size: a namespace holds few bindings, and growth slack would dominate.
fn build_scope(
    mut bindings: Vec<&Binding>,
    local: Option<&NamespacePartition>,
    cluster_roles: &ClusterRoles,
    shared: &mut SharedStrings,
) -> ScopeBindings {
    bindings.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut entries = Vec::with_capacity(bindings.len());
    let mut by_local_role = local.map_or_else(Vec::new, |ns| vec![Vec::new(); ns.roles.len()]);
    let mut by_cluster_slot: FxHashMap<RoleId, Vec<BindingId>> = FxHashMap::default();
    let mut deferred = Vec::new();
    let mut missing = Vec::new();
    let mut users: NameMap<Vec<Grant>> = NameMap::default();
    let mut groups: NameMap<Vec<Grant>> = NameMap::default();
    for binding in bindings {
        let id = entries.len() as BindingId;
        let name = binding.role_ref.name.as_str();
        let role = match (binding.role_ref.kind, local) {
            (RoleKind::ClusterRole, _) => match cluster_roles.slot_by_name.get(name) {
                Some(slot) => RoleTarget::ClusterSlot(*slot),
                None => RoleTarget::ClusterByName,
            },
            (RoleKind::Role, Some(ns)) => match ns.role_by_name.get(name) {
                Some(local) => RoleTarget::Local(*local),
                None => RoleTarget::Missing,
            },
            (RoleKind::Role, None) => RoleTarget::ForeignRole,
        };
        match role {
            RoleTarget::Local(local) => {
                if let Some(ids) = by_local_role.get_mut(local as usize) {
                    ids.push(id);
                }
            }
            RoleTarget::ClusterSlot(slot) => by_cluster_slot.entry(slot).or_default().push(id),
            RoleTarget::ClusterByName | RoleTarget::ForeignRole => deferred.push(id),
            RoleTarget::Missing => missing.push(id),
        }

        let mut subjects = Vec::with_capacity(binding.subjects.len());
        for (subject_index, subject) in binding.subjects.iter().enumerate() {
            let grant = Grant {
                binding: id,
                subject: subject_index as u32,
            };
            let subject = BoundSubject::new(subject, &binding.namespace);
            match subject.matches() {
                SubjectName::User(user) => users.entry(user).push(grant),
                SubjectName::Group(group) => groups.entry(group).push(grant),
                SubjectName::Nothing => {}
            }
            subjects.push(subject);
        }

        let ids = (
            Arc::from(describe::binding_id(binding)),
            shared.share(&describe::role_id(binding)),
            shared.share(&binding.namespace),
            shared.source(&binding.source),
        );
        entries.push(BindingEntry::new(
            BindingFacts::of(binding),
            ids,
            subjects.into_boxed_slice(),
            role,
        ));
    }
    ScopeBindings {
        bindings: entries,
        grants: ScopeGrants {
            users: users.map_values(NameGrants::from_vec),
            groups: groups.map_values(NameGrants::from_vec),
        },
        by_local_role: by_local_role
            .into_iter()
            .map(Vec::into_boxed_slice)
            .collect(),
        by_cluster_slot: by_cluster_slot
            .into_iter()
            .map(|(slot, ids)| (slot, ids.into_boxed_slice()))
            .collect(),
        deferred: deferred.into_boxed_slice(),
        missing: missing.into_boxed_slice(),
    }
}

fn build_abac(rules: Vec<AbacRule>) -> AbacPartition {
    let mut partition = AbacPartition::default();
    for (line, rule) in rules.iter().enumerate() {
        let line = line as u32;
        if !rule.user.is_empty() {
            partition
                .by_user
                .entry(rule.user.as_str().into())
                .or_default()
                .push(line);
        } else if !rule.group.is_empty() {
            partition
                .by_group
                .entry(rule.group.as_str().into())
                .or_default()
                .push(line);
        }
    }
    partition.rules = rules;
    partition
}

/// Files a rule in a who-can index under every key a matching request can probe.
fn file_rule(index: &mut RulesByVerb, role: RoleId, rule: u32, policy_rule: &PolicyRule) {
    let loc = RuleLoc { role, rule };
    filing_keys(policy_rule, |verb, resource| {
        let by_resource = index.by_verb.entry(verb.into()).or_default();
        let locs = by_resource.entry(resource.into()).or_default();
        if locs.last() != Some(&loc) {
            locs.push(loc);
        }
    });
}
