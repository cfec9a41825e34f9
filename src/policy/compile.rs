//! Compilation of a [`PolicySet`] into an [`Index`]. Deterministic: the same policy always
//! yields the same index, whatever order its files were read in.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::engine::explain;
use crate::policy::aggregate::aggregated_rules;
use crate::policy::index::{
    BindingEntry, Grant, Index, RoleBindings, RoleEntry, RoleId, RuleLoc, ScopeGrants, SubjectName,
    NON_RESOURCE_KEY,
};
use crate::policy::model::{BindingKind, PolicyRule, PolicySet, RoleKind};
use crate::policy::rbac::is_negated;

pub fn compile(policy: &PolicySet) -> Index {
    let mut policy = policy.clone();
    policy.canonicalize();
    let aggregated = aggregated_rules(&policy);

    let mut index = Index::default();

    // Roles, with aggregated ClusterRoles resolved to their effective rules.
    let mut role_ids: FxHashMap<(RoleKind, &str, &str), RoleId> = FxHashMap::default();
    for role in &policy.roles {
        let id = index.roles.len() as RoleId;
        let rules = match (role.kind, aggregated.get(&role.name)) {
            (RoleKind::ClusterRole, Some(rules)) => rules.clone(),
            _ => role.rules.clone(),
        };
        for (rule_index, rule) in rules.iter().enumerate() {
            file_rule(&mut index, id, rule_index as u32, rule);
        }
        index.roles.push(RoleEntry { rules });
        index.bindings_by_role.push(RoleBindings::default());
        role_ids.insert((role.kind, &role.namespace, &role.name), id);
    }

    for binding in &policy.bindings {
        let id = index.bindings.len() as u32;
        let cluster = binding.kind == BindingKind::ClusterRoleBinding;
        let role_namespace = match binding.role_ref.kind {
            RoleKind::ClusterRole => "",
            RoleKind::Role => binding.namespace.as_str(),
        };
        let role = role_ids
            .get(&(
                binding.role_ref.kind,
                role_namespace,
                binding.role_ref.name.as_str(),
            ))
            .copied();

        match (role, cluster) {
            (Some(role), true) => index.bindings_by_role[role as usize].cluster.push(id),
            (Some(role), false) => index.bindings_by_role[role as usize]
                .by_namespace
                .entry(binding.namespace.as_str().into())
                .or_default()
                .push(id),
            (None, true) => index.broken_cluster.push(id),
            (None, false) => index
                .broken_by_namespace
                .entry(binding.namespace.as_str().into())
                .or_default()
                .push(id),
        }

        let scope: &mut ScopeGrants = if cluster {
            &mut index.cluster
        } else {
            index
                .namespaces
                .entry(binding.namespace.as_str().into())
                .or_default()
        };
        let mut subjects = Vec::with_capacity(binding.subjects.len());
        for (subject_index, subject) in binding.subjects.iter().enumerate() {
            let grant = Grant {
                binding: id,
                subject: subject_index as u32,
            };
            let name = if let Some(user) = subject.user_name(&binding.namespace) {
                let user: Box<str> = user.into();
                scope.users.entry(user.clone()).or_default().push(grant);
                SubjectName::User(user)
            } else if let Some(group) = subject.group_name() {
                scope.groups.entry(group.into()).or_default().push(grant);
                SubjectName::Group(group.into())
            } else {
                SubjectName::Nothing
            };
            subjects.push(name);
        }

        index.bindings.push(BindingEntry {
            binding_id: explain::binding_id(binding).into(),
            role_id: explain::role_id(binding).into(),
            source: Arc::from(binding.source.to_string()),
            binding: binding.clone(),
            role,
            cluster,
            subjects,
        });
    }

    for (line, rule) in policy.abac.iter().enumerate() {
        let line = line as u32;
        if !rule.user.is_empty() {
            index
                .abac_by_user
                .entry(rule.user.as_str().into())
                .or_default()
                .push(line);
        } else if !rule.group.is_empty() {
            index
                .abac_by_group
                .entry(rule.group.as_str().into())
                .or_default()
                .push(line);
        }
    }
    index.abac = policy.abac;
    index
}

/// Files a rule in the who-can index under every key a matching request can probe.
fn file_rule(index: &mut Index, role: RoleId, rule: u32, policy_rule: &PolicyRule) {
    let loc = RuleLoc { role, rule };
    let positive = |entries: &[String]| -> Vec<String> {
        let entries: Vec<&String> = entries.iter().filter(|e| !is_negated(e)).collect();
        if entries.iter().any(|e| *e == "*") {
            vec!["*".to_string()]
        } else {
            entries.into_iter().cloned().collect()
        }
    };
    let verbs = positive(&policy_rule.verbs);
    let mut resource_keys = positive(&policy_rule.resources);
    if !policy_rule.non_resource_urls.is_empty() {
        resource_keys.push(NON_RESOURCE_KEY.to_string());
    }
    for verb in &verbs {
        let by_resource = index.rules_by_verb.entry(verb.as_str().into()).or_default();
        for key in &resource_keys {
            let locs = by_resource.entry(key.as_str().into()).or_default();
            if locs.last() != Some(&loc) {
                locs.push(loc);
            }
        }
    }
}
