//! Seed 003's own documents: `role` and `roleBinding` (no apiVersion), and the `Policy` /
//! `PolicyBinding` containers, which hold no rules here and are accepted and ignored.
//!
//! Keys are matched ASCII-case-insensitively, as Go's encoding/json does (the seed writes
//! `"Verbs"`, `"ResourceKinds"`, `"Deny"`); two spellings of one key in an object are an error.
//! `deny` may be a boolean or the string `"true"`/`"false"` (the seed writes `"Deny": "true"`),
//! and `rule` is accepted as an alias of `rules` (the seed's `fatFingeredEditor` uses it;
//! dropping that deny rule would widen access).
//!
//! Mapping onto the model, with `M` the master namespace ([`super::LoadOptions`]):
//!
//! * a `role` in `M` is a ClusterRole, elsewhere a Role of its namespace; `resourceKinds`
//!   become `resources` verbatim, and `apiGroups` is `["*"]` (seed 003 has no API groups);
//! * a `roleBinding` in `M` is a ClusterRoleBinding, elsewhere a RoleBinding; `userNames` and
//!   `groupNames` become `User` and `Group` subjects;
//! * `roleRef: {namespace, name}` references a ClusterRole when the namespace is `M`, and the
//!   binding's own namespace's Role when it is that namespace or empty; seed 003 lets a binding
//!   reference nothing else, so any other namespace is an error;
//! * `referencesGlobalRole: true` with `roleName` references a ClusterRole; `roleName` alone
//!   references a role of the binding's own namespace (like an empty `roleRef.namespace`).

use crate::policy::model::{Binding, BindingKind, PolicyRule, Role, RoleKind, RoleRef, Subject};

use super::node::{Fields, Node, Problems, Value};
use super::rules::{check_name, rule_clauses, validate_rule, API_GROUP};
use super::{label, Cx};
use crate::policy::model::PolicyObject;

pub(super) fn parse(node: &Node, kind: &str, cx: &mut Cx<'_>) {
    let mut p = Problems::default();
    let Some(mut f) = Fields::new(node, "", true, &mut p) else {
        cx.report("", p);
        return;
    };
    let line = node.line;
    // Read (not ignored) so that two spellings of them are reported as duplicates.
    let _ = f.take("kind", &mut p);
    let _ = f.take("apiVersion", &mut p);
    let name = f.string("name", &mut p);
    let namespace = f.string("namespace", &mut p);
    let label = label(kind, &namespace, &name);
    let master = cx.options.master_namespace.clone();
    if name.is_empty() {
        p.push(line, "missing `name` (authzd never generates names)");
    }
    if namespace.is_empty() {
        p.push(
            line,
            format!("missing `namespace` (cluster-wide objects live in the master namespace `{master}`)"),
        );
    }
    check_name(&name, "name", line, &mut p);
    check_name(&namespace, "namespace", line, &mut p);
    let in_master = namespace == master;
    let scoped_namespace = if in_master {
        String::new()
    } else {
        namespace.clone()
    };

    let object = match kind {
        "role" => {
            let rules = parse_rules(&mut f, in_master, &mut p);
            Some(PolicyObject::Role(Role {
                kind: if in_master {
                    RoleKind::ClusterRole
                } else {
                    RoleKind::Role
                },
                namespace: scoped_namespace,
                name,
                labels: Default::default(),
                rules,
                aggregation_rule: None,
                source: cx.source(line),
            }))
        }
        "roleBinding" => {
            let mut subjects = Vec::new();
            for (field, subject_kind) in [("userNames", "User"), ("groupNames", "Group")] {
                for (i, name) in f.strings(field, &mut p).into_iter().enumerate() {
                    if name.is_empty() {
                        p.push(line, format!("`{field}[{i}]` is empty"));
                    }
                    subjects.push(Subject {
                        kind: subject_kind.to_owned(),
                        api_group: API_GROUP.to_owned(),
                        name,
                        namespace: String::new(),
                    });
                }
            }
            parse_role_ref(&mut f, &namespace, &master, line, &mut p).map(|role_ref| {
                PolicyObject::Binding(Binding {
                    kind: if in_master {
                        BindingKind::ClusterRoleBinding
                    } else {
                        BindingKind::RoleBinding
                    },
                    namespace: scoped_namespace,
                    name,
                    subjects,
                    role_ref,
                    source: cx.source(line),
                })
            })
        }
        _ => {
            // `Policy` / `PolicyBinding`: containers, nothing to authorize with.
            for (field, what) in [("roles", "role"), ("roleBindings", "roleBinding")] {
                if let Some(n) = f.take(field, &mut p) {
                    p.push(
                        n.line,
                        format!("embedded `{field}` are not supported; write each as its own `{what}` document"),
                    );
                }
            }
            f.ignore(&["lastModified", "policyRef"]);
            None
        }
    };
    f.finish(&mut p);
    if !p.0.is_empty() {
        cx.report(&label, p);
    } else if let Some(object) = object {
        cx.objects.push(object);
    }
}

fn parse_rules(f: &mut Fields<'_>, in_master: bool, p: &mut Problems) -> Vec<PolicyRule> {
    let key = match (f.has("rules"), f.has("rule")) {
        (true, true) => {
            let line = f.line();
            let _ = f.take("rule", p);
            p.push(line, "both `rules` and its alias `rule` are set");
            "rules"
        }
        (false, true) => "rule",
        _ => "rules",
    };
    let mut rules = Vec::new();
    for (i, node) in f.list(key, p).iter().enumerate() {
        let path = format!("{key}[{i}]");
        let Some(mut rf) = Fields::new(node, &path, true, p) else {
            continue;
        };
        let mut rule = PolicyRule {
            verbs: rf.strings("verbs", p),
            api_groups: vec!["*".to_owned()],
            resources: rf.strings("resourceKinds", p),
            ..PolicyRule::default()
        };
        rule.deny = match rf.take("deny", p) {
            None => false,
            Some(n) => match &n.value {
                Value::Bool(b) => *b,
                Value::String(s) if s == "true" => true,
                Value::String(s) if s == "false" => false,
                _ => {
                    p.push(
                        n.line,
                        format!(
                            "`{path}.deny` must be `true`, `false`, `\"true\"` or `\"false\"`, found {}",
                            describe(n)
                        ),
                    );
                    true
                }
            },
        };
        rule_clauses(&mut rule, &mut rf, &path, node.line, p);
        rf.finish(p);
        validate_rule(&rule, &path, "resourceKinds", !in_master, node.line, p);
        rules.push(rule);
    }
    rules
}

fn describe(n: &Node) -> String {
    match &n.value {
        Value::String(s) => format!("`{s}`"),
        _ => n.describe().to_owned(),
    }
}

fn parse_role_ref(
    f: &mut Fields<'_>,
    namespace: &str,
    master: &str,
    line: u32,
    p: &mut Problems,
) -> Option<RoleRef> {
    let role_ref = f.take("roleRef", p);
    let global = f.boolean("referencesGlobalRole", p);
    let role_name = f.string("roleName", p);
    let local_kind = if namespace == master {
        RoleKind::ClusterRole
    } else {
        RoleKind::Role
    };
    let (kind, name) = if let Some(node) = role_ref {
        if global || !role_name.is_empty() {
            p.push(
                line,
                "set either `roleRef` or `referencesGlobalRole` with `roleName`, not both",
            );
        }
        let mut rf = Fields::new(node, "roleRef", true, p)?;
        let ref_namespace = rf.string("namespace", p);
        let name = rf.string("name", p);
        rf.finish(p);
        let kind = if ref_namespace == master {
            RoleKind::ClusterRole
        } else if ref_namespace.is_empty() || ref_namespace == namespace {
            local_kind
        } else {
            p.push(
                node.line,
                format!(
                    "`roleRef.namespace` `{ref_namespace}` must be the binding's own namespace `{namespace}` or the master namespace `{master}`"
                ),
            );
            return None;
        };
        (kind, name)
    } else if global {
        (RoleKind::ClusterRole, role_name)
    } else if !role_name.is_empty() {
        (local_kind, role_name)
    } else {
        p.push(
            line,
            "missing `roleRef` (or `referencesGlobalRole: true` with `roleName`)",
        );
        return None;
    };
    if name.is_empty() {
        let field = if role_ref.is_some() {
            "roleRef.name"
        } else {
            "roleName"
        };
        p.push(line, format!("missing `{field}`"));
        return None;
    }
    Some(RoleRef { kind, name })
}
