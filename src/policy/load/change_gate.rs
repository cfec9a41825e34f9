//! `kind: ChangeGate` (`authzd.io/v1alpha1`): rules every policy write is checked against by
//! the access it removes or grants (docs/policy.md §8):
//!
//! ```yaml
//! apiVersion: authzd.io/v1alpha1
//! kind: ChangeGate
//! metadata: {name: guard-rails}
//! spec:
//!   rules:
//!   - name: admins-keep-everything          # lockout and break-glass protection
//!     type: NeverRemove
//!     subjects: [{kind: Group, name: platform-admins}]
//!     namespaces: ["*"]                     # the default; "" is cluster scope
//!     access: [{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}]
//!   - name: secrets-only-for-vault
//!     type: NeverGrantOutside
//!     subjects: [{kind: ServiceAccount, namespace: vault, name: vault}]
//!     access: [{apiGroups: [""], resources: [secrets], verbs: [get, list, watch]}]
//! ```
//!
//! `access` is RBAC rules as a ClusterRole writes them (negation included); a deny rule or a
//! content clause says nothing about which access is meant, so either is refused here.

use crate::policy::model::{ChangeGate, GateRule, GateRuleKind, Source};

use super::node::{Fields, Node, Problems};
use super::Cx;

pub(super) fn parse(node: &Node, cx: &mut Cx<'_>) {
    let mut p = Problems::default();
    if let Some(gate) = read(node, &mut p) {
        if p.0.is_empty() {
            cx.objects
                .push(crate::policy::model::PolicyObject::ChangeGate(ChangeGate {
                    source: Source::new(cx.file.clone(), node.line),
                    ..gate
                }));
        }
    }
    cx.report("ChangeGate", p);
}

fn read(node: &Node, p: &mut Problems) -> Option<ChangeGate> {
    let mut f = Fields::new(node, "", false, p)?;
    let name = super::field_policy::header(node, &mut f, p);
    let mut gate = ChangeGate {
        name,
        source: Source::default(),
        rules: Vec::new(),
    };
    let spec = f.take("spec", p);
    f.finish(p);
    let Some(spec) = spec else {
        p.push(node.line, "missing `spec`");
        return Some(gate);
    };
    let mut s = Fields::new(spec, "spec", false, p)?;
    let rules = s.list("rules", p);
    s.finish(p);
    if rules.is_empty() {
        p.push(spec.line, "`spec.rules` must hold at least one rule");
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, item) in rules.iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        if let Some(rule) = read_rule(item, &at, p) {
            if !names.insert(rule.name.clone()) {
                p.push(
                    item.line,
                    format!("`{at}.name` `{}` names an earlier rule too", rule.name),
                );
            }
            gate.rules.push(rule);
        }
    }
    Some(gate)
}

fn read_rule(node: &Node, at: &str, p: &mut Problems) -> Option<GateRule> {
    let mut f = Fields::new(node, at, false, p)?;
    let name = f.string("name", p);
    let kind_text = f.string("type", p);
    let subjects_nodes = f.list("subjects", p);
    let namespaces_given = f.has("namespaces");
    let mut namespaces = f.strings("namespaces", p);
    let access_nodes = f.list("access", p);
    f.finish(p);
    let line = node.line;
    if name.is_empty() {
        p.push(line, format!("missing `{at}.name`"));
    }
    let kind = match kind_text.as_str() {
        "NeverRemove" => GateRuleKind::NeverRemove,
        "NeverGrantOutside" => GateRuleKind::NeverGrantOutside,
        other => {
            p.push(
                line,
                format!(
                    "`{at}.type` must be `NeverRemove` or `NeverGrantOutside`, found `{other}`"
                ),
            );
            GateRuleKind::NeverRemove
        }
    };
    let mut subjects = Vec::new();
    for (i, subject) in subjects_nodes.iter().enumerate() {
        if let Some(s) = super::kube::gate_subject(subject, &format!("{at}.subjects[{i}]"), p) {
            subjects.push(s);
        }
    }
    if subjects.is_empty() && kind == GateRuleKind::NeverRemove {
        p.push(
            line,
            format!("`{at}.subjects` must name at least one subject to protect"),
        );
    }
    if !namespaces_given {
        namespaces.push("*".to_string());
    } else if namespaces.is_empty() {
        p.push(
            line,
            format!("`{at}.namespaces` must name at least one namespace (`*` for all, `\"\"` for cluster scope)"),
        );
    }
    let mut access = Vec::new();
    for (i, item) in access_nodes.iter().enumerate() {
        let path = format!("{at}.access[{i}]");
        let Some(rule) = super::kube::gate_access_rule(item, &path, p) else {
            continue;
        };
        if rule.deny {
            p.push(
                item.line,
                format!(
                    "`{path}.deny`: a gate's access is what is allowed; write it without `deny`"
                ),
            );
        }
        if rule.clauses.is_some() {
            p.push(
                item.line,
                format!("`{path}`: a gate's access is stated without content clauses"),
            );
        }
        access.push(rule);
    }
    if access.is_empty() {
        p.push(line, format!("`{at}.access` must hold at least one rule"));
    }
    Some(GateRule {
        name,
        kind,
        subjects,
        namespaces,
        access,
    })
}
