//! What the Kubernetes and seed-003 readers check alike: object names, RBAC rules (upstream's
//! `ValidatePolicyRule` plus authzd's negation checks) and attribute restrictions. Both readers
//! import this file; neither imports the other.

use crate::policy::model::PolicyRule;

use super::node::{Node, Problems};

/// The RBAC API group, as `roleRef.apiGroup` names it.
pub(super) const API_GROUP: &str = "rbac.authorization.k8s.io";

/// Upstream `ValidatePathSegmentName`: names end up in paths (and in `name/namespace`
/// descriptions), so `/`, `%`, `.` and `..` are refused.
pub(super) fn check_name(value: &str, path: &str, line: u32, p: &mut Problems) {
    if value == "." || value == ".." {
        p.push(line, format!("`{path}` may not be `{value}`"));
    } else if value.contains(['/', '%']) {
        p.push(
            line,
            format!("`{path}` `{value}` may not contain `/` or `%`"),
        );
    }
}

/// `attributeRestrictions` as canonical JSON.
pub(super) fn restrictions(node: &Node, path: &str, p: &mut Problems) -> String {
    match serde_json::to_string(&node.to_json()) {
        Ok(s) => s,
        Err(e) => {
            p.push(
                node.line,
                format!("`{path}.attributeRestrictions` cannot be stored: {e}"),
            );
            String::new()
        }
    }
}

/// Upstream's `ValidatePolicyRule`, plus the negation checks described in the module docs of
/// `load`. `path` names the rule (`rules[0]`).
pub(super) fn validate_rule(
    rule: &PolicyRule,
    path: &str,
    resources_field: &str,
    namespaced: bool,
    line: u32,
    p: &mut Problems,
) {
    if rule.verbs.is_empty() {
        p.push(line, format!("`{path}.verbs` must list at least one verb"));
    }
    for (field, entries) in [("verbs", &rule.verbs), (resources_field, &rule.resources)] {
        for (i, entry) in entries.iter().enumerate() {
            if entry == "-" {
                p.push(
                    line,
                    format!("`{path}.{field}[{i}]` is a bare `-`, which negates nothing"),
                );
            }
        }
        if !entries.is_empty() && entries.iter().all(|e| e.starts_with('-')) {
            p.push(
                line,
                format!(
                    "`{path}.{field}` has only negated entries, so the rule matches nothing (add `*`)"
                ),
            );
        }
    }
    for (field, entries) in [
        ("apiGroups", &rule.api_groups),
        ("resourceNames", &rule.resource_names),
        ("nonResourceURLs", &rule.non_resource_urls),
    ] {
        for (i, entry) in entries.iter().enumerate() {
            if entry.starts_with('-') {
                p.push(
                    line,
                    format!(
                        "`{path}.{field}[{i}]` `{entry}`: negation is only supported in `verbs` and `resources`"
                    ),
                );
            }
        }
    }
    if !rule.non_resource_urls.is_empty() {
        if namespaced {
            p.push(
                line,
                format!("`{path}.nonResourceURLs` is not allowed in a namespaced `Role`"),
            );
        }
        if !rule.api_groups.is_empty()
            || !rule.resources.is_empty()
            || !rule.resource_names.is_empty()
        {
            p.push(
                line,
                format!("`{path}` cannot apply to both `{resources_field}` and `nonResourceURLs`"),
            );
        }
    } else {
        if rule.api_groups.is_empty() {
            p.push(
                line,
                format!(
                    "`{path}.apiGroups` must list at least one API group (`\"\"` is the core group)"
                ),
            );
        }
        if rule.resources.is_empty() {
            p.push(
                line,
                format!("`{path}.{resources_field}` must list at least one resource"),
            );
        }
    }
}
