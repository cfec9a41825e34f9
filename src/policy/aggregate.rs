//! ClusterRole aggregation, resolved the way upstream's aggregation controller converges.
//!
//! A ClusterRole with an `aggregationRule` gets, as its effective rules, the de-duplicated
//! concatenation of the effective rules of every other ClusterRole one of its selectors matches,
//! taken in name order (the controller sorts them by name). Aggregation nests: a selected role
//! that aggregates itself contributes its own effective rules. A cycle contributes nothing
//! beyond what is reachable without going round it, so the result is deterministic.

use std::collections::HashMap;

use crate::policy::model::{PolicyRule, PolicySet, Role, RoleKind};

/// The effective rules of every ClusterRole that has an `aggregationRule`, by name.
pub fn aggregated_rules(policy: &PolicySet) -> HashMap<String, Vec<PolicyRule>> {
    aggregated_rules_of(policy.roles.iter().map(|role| &**role))
}

/// [`aggregated_rules`] over a list of roles (only its ClusterRoles are considered), e.g. the
/// ClusterRole partition of an incremental update.
pub fn aggregated_rules_of<'a>(
    roles: impl IntoIterator<Item = &'a Role>,
) -> HashMap<String, Vec<PolicyRule>> {
    let mut cluster_roles: Vec<&Role> = roles
        .into_iter()
        .filter(|r| r.kind == RoleKind::ClusterRole)
        .collect();
    cluster_roles.sort_by(|a, b| a.name.cmp(&b.name));

    let mut resolved = HashMap::new();
    for role in &cluster_roles {
        if role.aggregation_rule.is_some() {
            let mut stack = Vec::new();
            let rules = resolve(role, &cluster_roles, &mut stack);
            resolved.insert(role.name.clone(), rules);
        }
    }
    resolved
}

/// Every ClusterRole whose labels one of `role`'s selectors match (never `role` itself).
pub fn selected_roles<'a>(role: &Role, cluster_roles: &[&'a Role]) -> Vec<&'a Role> {
    let Some(selectors) = &role.aggregation_rule else {
        return Vec::new();
    };
    cluster_roles
        .iter()
        .filter(|other| other.name != role.name)
        .filter(|other| selectors.iter().any(|s| s.matches(&other.labels)))
        .copied()
        .collect()
}

fn resolve(role: &Role, cluster_roles: &[&Role], stack: &mut Vec<String>) -> Vec<PolicyRule> {
    if role.aggregation_rule.is_none() {
        return role.rules.clone();
    }
    if stack.contains(&role.name) {
        return Vec::new();
    }
    stack.push(role.name.clone());
    let mut rules: Vec<PolicyRule> = Vec::new();
    for selected in selected_roles(role, cluster_roles) {
        for rule in resolve(selected, cluster_roles, stack) {
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
    }
    stack.pop();
    rules
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::model::LabelSelector;
    use std::collections::BTreeMap;

    fn cluster_role(name: &str, label: Option<&str>, selects: Option<&str>, verb: &str) -> Role {
        Role {
            kind: RoleKind::ClusterRole,
            namespace: String::new(),
            name: name.into(),
            labels: label
                .map(|l| BTreeMap::from([(l.to_string(), "true".to_string())]))
                .unwrap_or_default(),
            rules: vec![PolicyRule {
                verbs: vec![verb.into()],
                ..Default::default()
            }],
            aggregation_rule: selects.map(|l| {
                vec![LabelSelector {
                    match_labels: BTreeMap::from([(l.to_string(), "true".to_string())]),
                    ..Default::default()
                }]
            }),
            source: Default::default(),
        }
    }

    #[test]
    fn nested_aggregation_and_cycles() {
        let policy = PolicySet {
            roles: vec![
                cluster_role("admin", None, Some("agg-admin"), "ignored"),
                cluster_role("edit", Some("agg-admin"), Some("agg-edit"), "ignored"),
                cluster_role("extra", Some("agg-edit"), None, "patch"),
                cluster_role("view", Some("agg-admin"), None, "get"),
                cluster_role("loop-a", Some("b"), Some("a"), "x"),
                cluster_role("loop-b", Some("a"), Some("b"), "y"),
            ]
            .into_iter()
            .map(Into::into)
            .collect(),
            ..Default::default()
        };
        let agg = aggregated_rules(&policy);
        let verbs =
            |n: &str| -> Vec<String> { agg[n].iter().map(|r| r.verbs[0].clone()).collect() };
        assert_eq!(verbs("admin"), vec!["patch", "get"]);
        assert_eq!(verbs("edit"), vec!["patch"]);
        assert!(verbs("loop-a").is_empty());
        assert!(!agg.contains_key("view"));
    }
}
