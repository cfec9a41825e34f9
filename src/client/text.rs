//! Person-readable rendering of engine answers, for the offline CLI (`check`, `who-can`).

use std::fmt::Write;

use crate::engine::{AllowedSubjects, Response, RuleRef};

fn refs(out: &mut String, label: &str, refs: &[RuleRef]) {
    if refs.is_empty() {
        let _ = writeln!(out, "{label}: -");
    }
    for r in refs {
        let _ = writeln!(out, "{label}: {r}");
    }
}

fn list(out: &mut String, label: &str, items: &[String]) {
    if items.is_empty() {
        let _ = writeln!(out, "{label}: -");
    } else {
        let _ = writeln!(out, "{label}: {}", items.join(", "));
    }
}

/// ```text
/// decision: ALLOW (allowed)
/// reason: RBAC: allowed by ClusterRoleBinding "admins" of ClusterRole "admin" to Group "ops"
/// allowed by: RBAC ClusterRoleBinding/admins -> ClusterRole/admin rule 0 (policy/rbac.yaml:12)
/// denied by: -
/// errors: -
/// ```
pub fn decision(response: &Response) -> String {
    let mut out = String::new();
    let verdict = if response.allowed() {
        "allowed"
    } else {
        "not allowed"
    };
    let _ = writeln!(out, "decision: {} ({verdict})", response.decision);
    let reason = if response.reason.is_empty() {
        "-"
    } else {
        &response.reason
    };
    let _ = writeln!(out, "reason: {reason}");
    refs(&mut out, "allowed by", &response.allowed_by);
    refs(&mut out, "denied by", &response.denied_by);
    list(&mut out, "errors", &response.errors);
    out
}

/// A conditional answer (RETURN mode): its conditions in precedence order.
///
/// ```text
/// decision: CONDITIONAL (not allowed until the conditions are evaluated)
/// condition 1: DENY if authzd.io/clauses {"fields":[".metadata.finalizers"]}
///   rule: RBAC ClusterRoleBinding/deployers -> ClusterRole/label-keeper rule 1 (policy.yaml:22)
/// condition 2: ALLOW if k8s.io/cel object.metadata.labels == oldObject.metadata.labels
///   rule: ...
/// otherwise: NO_OPINION
/// ```
pub fn conditions(conditions: &[crate::engine::conditional::ReturnedRule]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "decision: CONDITIONAL (not allowed until the conditions are evaluated)"
    );
    let mut otherwise = "NO_OPINION".to_string();
    let mut n = 0;
    for condition in conditions {
        let effect = if condition.deny { "DENY" } else { "ALLOW" };
        if condition.otherwise {
            otherwise = format!("{effect} ({})", condition.rule_ref);
            continue;
        }
        n += 1;
        let (language, expression) = condition.expression();
        let _ = writeln!(out, "condition {n}: {effect} if {language} {expression}");
        let _ = writeln!(out, "  rule: {}", condition.rule_ref);
    }
    let _ = writeln!(out, "otherwise: {otherwise}");
    out
}

/// ```text
/// users: alice, system:serviceaccount:dev:builder
/// groups: system:masters
/// denied users: -
/// denied groups: interns
/// errors: -
/// ```
pub fn allowed_subjects(subjects: &AllowedSubjects) -> String {
    let mut out = String::new();
    list(&mut out, "users", &subjects.users);
    list(&mut out, "groups", &subjects.groups);
    list(&mut out, "denied users", &subjects.denied_users);
    list(&mut out, "denied groups", &subjects.denied_groups);
    list(&mut out, "errors", &subjects.errors);
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::engine::Decision;

    #[test]
    fn renders_a_decision() {
        let response = Response {
            decision: Decision::Deny,
            reason: "RBAC: denied".into(),
            allowed_by: vec![],
            denied_by: vec![RuleRef {
                authorizer: "RBAC",
                binding: Arc::from("ClusterRoleBinding/b"),
                role: Arc::from("ClusterRole/r"),
                rule_index: 2,
                source: Arc::from("p.yaml:3"),
            }],
            errors: vec!["role missing".into()],
            encoded: crate::engine::EncodedOnce::default(),
            plan: Default::default(),
        };
        assert_eq!(
            decision(&response),
            "decision: DENY (not allowed)\nreason: RBAC: denied\nallowed by: -\n\
             denied by: RBAC ClusterRoleBinding/b -> ClusterRole/r rule 2 (p.yaml:3)\n\
             errors: role missing\n"
        );
    }
}
