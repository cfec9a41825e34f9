//! What the Kubernetes and seed-003 readers check alike: object names, RBAC rules (upstream's
//! `ValidatePolicyRule` plus authzd's negation checks) and attribute restrictions. Both readers
//! import this file; neither imports the other.

use std::sync::Arc;

use crate::policy::content::condition::Condition;
use crate::policy::content::path::PathPattern;
use crate::policy::content::Clauses;
use crate::policy::model::{LabelSelector, PolicyRule};
use crate::request::{SelectorOperator, SelectorRequirement};

use super::node::{self, Fields, Node, Problems, Value};

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

/// `attributeRestrictions` as canonical JSON (kept for rendering), and what they translate
/// to (docs/policy.md §4): `fieldsMutatable` -> `fields`, `labelsContain` -> an object selector,
/// `{kind: sameMinionRestriction}` -> the same-node predicate. Anything else stays
/// unevaluable: reported at evaluation, never widening.
pub(super) fn restrictions(node: &Node, path: &str, p: &mut Problems) -> (String, Clauses) {
    let json = match serde_json::to_string(&node.to_json()) {
        Ok(s) => s,
        Err(e) => {
            p.push(
                node.line,
                format!("`{path}.attributeRestrictions` cannot be stored: {e}"),
            );
            String::new()
        }
    };
    let path = format!("{path}.attributeRestrictions");
    let mut clauses = Clauses::default();
    let mut unknown = Vec::new();
    let Value::Map(entries) = &node.value else {
        clauses.unevaluable = Some(format!("attributeRestrictions {json}"));
        return (json, clauses);
    };
    for (key, value) in entries {
        let at = format!("{path}.{key}");
        if key.eq_ignore_ascii_case("fieldsMutatable") {
            for (i, field) in node::strings(value, &at, p).iter().enumerate() {
                let text = match field.as_str() {
                    "labels" | "annotations" | "finalizers" | "ownerReferences" => {
                        format!(".metadata.{field}")
                    }
                    other => other.to_string(),
                };
                match PathPattern::parse(&text) {
                    Ok(pattern) => clauses.fields.push(pattern),
                    Err(problem) => p.push(
                        value.line,
                        format!("`{at}[{i}]` `{field}` is neither labels, annotations, finalizers, ownerReferences nor a path: it {problem}"),
                    ),
                }
            }
        } else if key.eq_ignore_ascii_case("labelsContain") {
            let selector = clauses
                .object_selector
                .get_or_insert_with(LabelSelector::default);
            for entry in node::strings(value, &at, p) {
                match entry.split_once('=') {
                    Some((k, v)) => {
                        selector.match_labels.insert(k.to_string(), v.to_string());
                    }
                    None => selector.match_expressions.push(SelectorRequirement {
                        key: entry,
                        operator: SelectorOperator::Exists,
                        values: Vec::new(),
                    }),
                }
            }
        } else if key.eq_ignore_ascii_case("kind")
            && matches!(&value.value, Value::String(k) if k == "sameMinionRestriction")
        {
            clauses.same_node = true;
        } else {
            unknown.push(key.as_str());
        }
    }
    if !unknown.is_empty() {
        clauses.unevaluable = Some(format!(
            "attributeRestrictions {json}, whose {} authzd cannot evaluate",
            unknown.join(", ")
        ));
    }
    (json, clauses)
}

/// authzd's content clauses on a rule (`fields`, `objectSelector`, `condition`,
/// `fieldSelector`, `labelSelector`), read from the rule's fields; `None` when the rule has
/// none. Unparsable patterns and selectors, and conditions that do not compile or leave the
/// accepted CEL subset, are load errors at the clause's line.
pub(super) fn content_clauses(f: &mut Fields<'_>, path: &str, p: &mut Problems) -> Option<Clauses> {
    let mut clauses = Clauses::default();
    let mut any = false;
    if let Some(fields) = f.take("fields", p) {
        any = true;
        let at = format!("{path}.fields");
        let patterns = node::strings(fields, &at, p);
        if patterns.is_empty() {
            p.push(fields.line, format!("`{at}` must list at least one path"));
        }
        for (i, text) in patterns.iter().enumerate() {
            match PathPattern::parse(text) {
                Ok(pattern) => clauses.fields.push(pattern),
                Err(problem) => {
                    p.push(fields.line, format!("`{at}[{i}]` `{text}` {problem}"));
                }
            }
        }
    }
    if let Some(selector) = f.take("objectSelector", p) {
        any = true;
        clauses.object_selector = parse_selector(selector, &format!("{path}.objectSelector"), p);
    }
    if let Some(condition) = f.take("condition", p) {
        any = true;
        let at = format!("{path}.condition");
        let text = node::string(condition, &at, p);
        match Condition::compile(&text) {
            Ok(compiled) => clauses.condition = Some(compiled),
            Err(problem) => p.push(condition.line, format!("`{at}` {problem}")),
        }
    }
    for (key, slot) in [
        ("fieldSelector", &mut clauses.field_selector),
        ("labelSelector", &mut clauses.label_selector),
    ] {
        let at = format!("{path}.{key}");
        for (i, item) in f.list(key, p).iter().enumerate() {
            any = true;
            if let Some(requirement) = parse_requirement(item, &format!("{at}[{i}]"), p) {
                slot.push(requirement);
            }
        }
    }
    any.then_some(clauses)
}

/// The clauses of a rule read by either reader: its own, or its `attributeRestrictions`
/// translated; both on one rule is refused (which would win is not obvious).
pub(super) fn rule_clauses(
    rule: &mut PolicyRule,
    f: &mut Fields<'_>,
    path: &str,
    line: u32,
    p: &mut Problems,
) {
    let own = content_clauses(f, path, p);
    let restricted = f
        .take("attributeRestrictions", p)
        .map(|n| restrictions(n, path, p));
    rule.clauses = match (own, restricted) {
        (Some(_), Some(_)) => {
            p.push(
                line,
                format!("`{path}` has both `attributeRestrictions` and content clauses; write one or the other"),
            );
            None
        }
        (Some(clauses), None) => Some(Arc::new(clauses)),
        (None, Some((json, clauses))) => {
            rule.attribute_restrictions = Some(json);
            Some(Arc::new(clauses))
        }
        (None, None) => None,
    };
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

/// A `metav1.LabelSelector` (aggregation rules, object selectors).
pub(super) fn parse_selector(node: &Node, path: &str, p: &mut Problems) -> Option<LabelSelector> {
    let mut f = Fields::new(node, path, false, p)?;
    let mut selector = LabelSelector::default();
    if let Some(labels) = f.take("matchLabels", p) {
        selector.match_labels = node::string_map(labels, &format!("{path}.matchLabels"), p);
    }
    for (i, e) in f.list("matchExpressions", p).iter().enumerate() {
        let epath = format!("{path}.matchExpressions[{i}]");
        if let Some(requirement) = parse_requirement(e, &epath, p) {
            selector.match_expressions.push(requirement);
        }
    }
    f.finish(p);
    Some(selector)
}

/// One selector requirement (`{key, operator, values}`), checked as upstream validates them.
fn parse_requirement(e: &Node, epath: &str, p: &mut Problems) -> Option<SelectorRequirement> {
    let mut ef = Fields::new(e, epath, false, p)?;
    let key = ef.string("key", p);
    let operator = ef.string("operator", p);
    let values = ef.strings("values", p);
    ef.finish(p);
    if key.is_empty() {
        p.push(e.line, format!("missing `{epath}.key`"));
    }
    let Some(operator) = SelectorOperator::parse(&operator) else {
        let found = if operator.is_empty() {
            "none".to_string()
        } else {
            format!("`{operator}`")
        };
        p.push(
            e.line,
            format!("`{epath}.operator` must be `In`, `NotIn`, `Exists` or `DoesNotExist`, found {found}"),
        );
        return None;
    };
    let needs_values = matches!(operator, SelectorOperator::In | SelectorOperator::NotIn);
    if needs_values && values.is_empty() {
        p.push(
            e.line,
            format!("`{epath}.values` must not be empty for operator `In` or `NotIn`"),
        );
    }
    if !needs_values && !values.is_empty() {
        p.push(
            e.line,
            format!("`{epath}.values` must be empty for operator `Exists` or `DoesNotExist`"),
        );
    }
    Some(SelectorRequirement {
        key,
        operator,
        values,
    })
}
