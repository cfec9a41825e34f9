//! Person-readable rendering of engine answers, for the offline CLI (`check`, `who-can`).

use std::fmt::Write;

use crate::engine::{AllowedSubjects, Response, RuleRef};
use crate::proto;

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

// --- authzd diff --------------------------------------------------------------------------------

fn pattern(p: &crate::engine::delta::Pattern) -> String {
    use crate::engine::delta::Pattern;
    match p {
        Pattern::Is(v) if v.is_empty() => "\"\"".to_string(),
        Pattern::Is(v) => v.clone(),
        Pattern::AnyExcept(except) if except.is_empty() => "*".to_string(),
        Pattern::AnyExcept(except) => format!("*(except {})", except.join(",")),
        Pattern::Prefix {
            prefix,
            except,
            except_prefixes,
        } => {
            let mut excepted: Vec<String> = except.clone();
            excepted.extend(except_prefixes.iter().map(|p| format!("{p}*")));
            if excepted.is_empty() {
                format!("{prefix}*")
            } else {
                format!("{prefix}*(except {})", excepted.join(","))
            }
        }
    }
}

/// A row's actions on one line: `VERB GROUP/RESOURCE[/SUBRESOURCE] name=NAME` or `VERB URL`.
pub fn delta_action(action: &crate::engine::delta::ActionPattern) -> String {
    use crate::engine::delta::ActionPattern;
    match action {
        ActionPattern::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
        } => format!(
            "{} group={} resource={} subresource={} name={}",
            pattern(verb),
            pattern(group),
            pattern(resource),
            pattern(subresource),
            pattern(name)
        ),
        ActionPattern::NonResource { verb, path } => {
            format!("{} url={}", pattern(verb), pattern(path))
        }
    }
}

fn delta_scope(scope: &crate::engine::delta::Scope) -> String {
    use crate::engine::delta::Scope;
    match scope {
        Scope::Everywhere { except } if except.is_empty() => "cluster-wide".to_string(),
        Scope::Everywhere { except } => {
            let named: Vec<String> = except
                .iter()
                .map(|ns| {
                    if ns.is_empty() {
                        "cluster scope".to_string()
                    } else {
                        ns.clone()
                    }
                })
                .collect();
            format!("cluster-wide, except {}", named.join(", "))
        }
        Scope::Namespace(ns) if ns.is_empty() => "cluster scope".to_string(),
        Scope::Namespace(ns) => format!("namespace {ns}"),
    }
}

fn delta_subjects(subjects: &crate::engine::delta::Subjects) -> String {
    let mut parts = Vec::new();
    for user in &subjects.users {
        match user.strip_prefix(crate::policy::model::SERVICE_ACCOUNT_PREFIX) {
            Some(sa) => parts.push(format!("serviceaccount {}", sa.replacen(':', "/", 1))),
            None => parts.push(format!("user {user}")),
        }
    }
    parts.extend(subjects.groups.iter().map(|g| format!("group {g}")));
    parts.join(", ")
}

fn witness_line(w: &crate::engine::delta::Witness) -> String {
    let groups = if w.request.user.groups.is_empty() {
        String::new()
    } else {
        format!(" groups={}", w.request.user.groups.join(","))
    };
    let action = match &w.request.action {
        crate::request::Action::Resource(r) => format!(
            "{} namespace={:?} group={:?} resource={:?} subresource={:?} name={:?}",
            r.verb, r.namespace, r.group, r.resource, r.subresource, r.name
        ),
        crate::request::Action::NonResource(n) => format!("{} url={:?}", n.verb, n.path),
    };
    format!(
        "      witness for {}: user={}{groups} {action}",
        w.subject, w.request.user.name
    )
}

/// The delta for a person: rows grouped by scope, `+` lines for gains and `-` for losses.
pub fn delta(delta: &crate::engine::delta::Delta, witness: bool) -> String {
    if delta.rows.is_empty() {
        return "no access changes\n".to_string();
    }
    let mut out = String::new();
    let mut scope = None;
    for row in &delta.rows {
        if scope != Some(&row.scope) {
            out.push_str(&format!("{}:\n", delta_scope(&row.scope)));
            scope = Some(&row.scope);
        }
        let action = delta_action(&row.action);
        for (sign, gain, subjects) in [('+', true, &row.gains), ('-', false, &row.losses)] {
            if subjects.is_empty() {
                continue;
            }
            out.push_str(&format!(
                "  {sign} {action}: {}\n",
                delta_subjects(subjects)
            ));
            if witness {
                for w in row.witnesses.iter().filter(|w| w.gain == gain) {
                    out.push_str(&witness_line(w));
                    out.push('\n');
                }
            }
        }
    }
    out
}

fn pattern_json(p: &crate::engine::delta::Pattern) -> serde_json::Value {
    use crate::engine::delta::Pattern;
    match p {
        Pattern::Is(v) => serde_json::json!(v),
        Pattern::AnyExcept(except) => serde_json::json!({"any": true, "except": except}),
        Pattern::Prefix {
            prefix,
            except,
            except_prefixes,
        } => serde_json::json!({
            "prefix": prefix, "except": except, "exceptPrefixes": except_prefixes,
        }),
    }
}

fn subjects_json(subjects: &crate::engine::delta::Subjects) -> serde_json::Value {
    let (accounts, users): (Vec<&String>, Vec<&String>) = subjects
        .users
        .iter()
        .partition(|u| u.starts_with(crate::policy::model::SERVICE_ACCOUNT_PREFIX));
    serde_json::json!({
        "users": users,
        "groups": subjects.groups,
        "serviceAccounts": accounts,
    })
}

/// The delta for tools: `{"rows": [{scope, action, gains, losses, witnesses?}]}`.
pub fn delta_json(delta: &crate::engine::delta::Delta, witness: bool) -> serde_json::Value {
    use crate::engine::delta::{ActionPattern, Scope};
    let rows: Vec<serde_json::Value> = delta
        .rows
        .iter()
        .map(|row| {
            let scope = match &row.scope {
                Scope::Everywhere { except } => {
                    serde_json::json!({"clusterWide": true, "exceptNamespaces": except})
                }
                Scope::Namespace(ns) => serde_json::json!({"namespace": ns}),
            };
            let action = match &row.action {
                ActionPattern::Resource {
                    verb,
                    group,
                    resource,
                    subresource,
                    name,
                } => serde_json::json!({
                    "verb": pattern_json(verb), "apiGroup": pattern_json(group),
                    "resource": pattern_json(resource),
                    "subresource": pattern_json(subresource), "name": pattern_json(name),
                }),
                ActionPattern::NonResource { verb, path } => serde_json::json!({
                    "verb": pattern_json(verb), "nonResourceURL": pattern_json(path),
                }),
            };
            let mut value = serde_json::json!({
                "scope": scope,
                "action": action,
                "gains": subjects_json(&row.gains),
                "losses": subjects_json(&row.losses),
            });
            if witness {
                value["witnesses"] = row
                    .witnesses
                    .iter()
                    .map(|w| {
                        serde_json::json!({
                            "subject": w.subject,
                            "gain": w.gain,
                            "user": w.request.user.name,
                            "groups": w.request.user.groups,
                            "action": crate::client::text::witness_action(&w.request.action),
                        })
                    })
                    .collect();
            }
            value
        })
        .collect();
    serde_json::json!({ "rows": rows })
}

fn witness_action(action: &crate::request::Action) -> serde_json::Value {
    match action {
        crate::request::Action::Resource(r) => serde_json::json!({
            "verb": r.verb, "namespace": r.namespace, "apiGroup": r.group,
            "resource": r.resource, "subresource": r.subresource, "name": r.name,
        }),
        crate::request::Action::NonResource(n) => {
            serde_json::json!({"verb": n.verb, "nonResourceURL": n.path})
        }
    }
}

/// A dry run's traffic impact: how many of the server's cached requests the write flips, then
/// one line per flipped request listed (`allow -> deny USER [GROUPS] VERB WHAT`).
pub fn traffic(traffic: &proto::TrafficImpact) -> String {
    let mut out = format!(
        "traffic: {} of {} cached requests would flip\n",
        traffic.flipped, traffic.cached_requests
    );
    for flip in &traffic.flips {
        let (before, after) = if flip.allowed_before {
            ("allow", "deny")
        } else {
            ("deny", "allow")
        };
        let user = flip.user.clone().unwrap_or_default();
        let groups = if user.groups.is_empty() {
            String::new()
        } else {
            format!(" [{}]", user.groups.join(","))
        };
        let what = match flip.action.as_ref().and_then(|a| a.kind.as_ref()) {
            Some(proto::action::Kind::ResourceAttributes(r)) => {
                let mut what = format!("{} {}", r.verb, r.resource);
                if !r.group.is_empty() {
                    what = format!("{}.{}", what, r.group);
                }
                if !r.subresource.is_empty() {
                    what = format!("{what}/{}", r.subresource);
                }
                if !r.name.is_empty() {
                    what = format!("{what} {}", r.name);
                }
                if !r.namespace.is_empty() {
                    what = format!("{what} -n {}", r.namespace);
                }
                what
            }
            Some(proto::action::Kind::NonResourceAttributes(n)) => format!("{} {}", n.verb, n.path),
            None => String::new(),
        };
        out.push_str(&format!(
            "  {before} -> {after}  {}{groups} {what}\n",
            user.name
        ));
    }
    if (traffic.flips.len() as u64) < u64::from(traffic.flipped) {
        out.push_str(&format!(
            "  ... and {} more\n",
            u64::from(traffic.flipped) - traffic.flips.len() as u64
        ));
    }
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
            recorded: crate::engine::EncodedOnce::default(),
            plan: Default::default(),
        };
        assert_eq!(
            decision(&response),
            "decision: DENY (not allowed)\nreason: RBAC: denied\nallowed by: -\n\
             denied by: RBAC ClusterRoleBinding/b -> ClusterRole/r rule 2 (p.yaml:3)\n\
             errors: role missing\n"
        );
    }

    #[test]
    fn traffic_lists_each_flip_with_its_direction() {
        let flip = |user: &str, groups: &[&str], allowed_before| proto::FlippedRequest {
            user: Some(proto::UserInfo {
                name: user.into(),
                groups: groups.iter().map(|g| g.to_string()).collect(),
                ..Default::default()
            }),
            action: Some(proto::Action {
                kind: Some(proto::action::Kind::ResourceAttributes(
                    proto::ResourceAttributes {
                        namespace: "team-a".into(),
                        verb: "get".into(),
                        resource: "pods".into(),
                        ..Default::default()
                    },
                )),
            }),
            allowed_before,
        };
        let text = traffic(&proto::TrafficImpact {
            cached_requests: 10,
            flipped: 3,
            flips: vec![flip("bob", &[], true), flip("dave", &["auditors"], false)],
        });
        assert_eq!(
            text,
            "traffic: 3 of 10 cached requests would flip\n  allow -> deny  bob get pods -n \
             team-a\n  deny -> allow  dave [auditors] get pods -n team-a\n  ... and 1 more\n"
        );
    }
}
