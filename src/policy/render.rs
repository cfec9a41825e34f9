//! Model objects back to Kubernetes manifests (`rbac.authorization.k8s.io/v1`, with authzd's
//! `deny` / `attributeRestrictions` extensions), for the admin API and for files the store
//! writes. Rendering then loading yields the same object (tested below), so a file written by
//! an admin write loads back to exactly what was applied.

use serde_json::{json, Map, Value};

use crate::policy::content::Clauses;
use crate::policy::model::{
    Binding, BindingKind, ChangeGate, FieldPolicy, LabelSelector, PolicyRule, PolicySet, Role,
    RoleKind, Subject, CHANGE_GATE_KIND, FIELD_POLICY_KIND,
};

pub const RBAC_API_VERSION: &str = "rbac.authorization.k8s.io/v1";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

fn metadata(
    name: &str,
    namespace: &str,
    labels: Option<&std::collections::BTreeMap<String, String>>,
) -> Value {
    let mut meta = Map::new();
    meta.insert("name".into(), json!(name));
    if !namespace.is_empty() {
        meta.insert("namespace".into(), json!(namespace));
    }
    if let Some(labels) = labels.filter(|l| !l.is_empty()) {
        meta.insert("labels".into(), json!(labels));
    }
    Value::Object(meta)
}

fn rule(rule: &PolicyRule) -> Value {
    let mut out = Map::new();
    let mut list = |key: &str, values: &[String]| {
        if !values.is_empty() {
            out.insert(key.into(), json!(values));
        }
    };
    list("verbs", &rule.verbs);
    list("apiGroups", &rule.api_groups);
    list("resources", &rule.resources);
    list("resourceNames", &rule.resource_names);
    list("nonResourceURLs", &rule.non_resource_urls);
    if rule.deny {
        out.insert("deny".into(), json!(true));
    }
    if let Some(restrictions) = &rule.attribute_restrictions {
        let value =
            serde_json::from_str(restrictions).unwrap_or(Value::String(restrictions.clone()));
        out.insert("attributeRestrictions".into(), value);
    } else if let Some(clauses) = &rule.clauses {
        // authzd's own clauses (restrictions were rendered as written, above).
        authored_clauses(clauses, &mut out);
    }
    Value::Object(out)
}

/// A rule's clauses as a Role writes them.
fn authored_clauses(clauses: &Clauses, out: &mut Map<String, Value>) {
    if !clauses.fields.is_empty() {
        let fields: Vec<&str> = clauses.fields.iter().map(|p| p.text()).collect();
        out.insert("fields".into(), json!(fields));
    }
    if let Some(object) = &clauses.object_selector {
        out.insert("objectSelector".into(), selector(object));
    }
    if let Some(condition) = &clauses.condition {
        out.insert("condition".into(), json!(condition.text()));
    }
    for (key, requirements) in [
        ("fieldSelector", &clauses.field_selector),
        ("labelSelector", &clauses.label_selector),
    ] {
        if !requirements.is_empty() {
            out.insert(
                key.into(),
                Value::Array(requirements.iter().map(requirement).collect()),
            );
        }
    }
}

/// Every clause of a rule, as a conditional answer carries it (`authzd.io/clauses`): the
/// authored ones, plus what seed 003's restrictions translate to that a Role cannot write
/// (`sameNode`, and `unevaluable`, a restriction that never holds). Read back by
/// `policy::load::clauses_from_json`.
pub fn clauses_to_value(clauses: &Clauses) -> Value {
    let mut out = Map::new();
    authored_clauses(clauses, &mut out);
    if clauses.same_node {
        out.insert("sameNode".into(), json!(true));
    }
    if let Some(what) = &clauses.unevaluable {
        out.insert("unevaluable".into(), json!(what));
    }
    Value::Object(out)
}

fn requirement(req: &crate::request::SelectorRequirement) -> Value {
    let mut e = Map::new();
    e.insert("key".into(), json!(req.key));
    e.insert("operator".into(), json!(req.operator.as_str()));
    if !req.values.is_empty() {
        e.insert("values".into(), json!(req.values));
    }
    Value::Object(e)
}

fn selector(selector: &LabelSelector) -> Value {
    let mut out = Map::new();
    if !selector.match_labels.is_empty() {
        out.insert("matchLabels".into(), json!(selector.match_labels));
    }
    if !selector.match_expressions.is_empty() {
        let expressions: Vec<Value> = selector.match_expressions.iter().map(requirement).collect();
        out.insert("matchExpressions".into(), Value::Array(expressions));
    }
    Value::Object(out)
}

pub fn role_to_value(role: &Role) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(RBAC_API_VERSION));
    out.insert("kind".into(), json!(role.kind.as_str()));
    out.insert(
        "metadata".into(),
        metadata(&role.name, &role.namespace, Some(&role.labels)),
    );
    out.insert(
        "rules".into(),
        Value::Array(role.rules.iter().map(rule).collect()),
    );
    if let (RoleKind::ClusterRole, Some(selectors)) = (role.kind, &role.aggregation_rule) {
        out.insert(
            "aggregationRule".into(),
            json!({ "clusterRoleSelectors": selectors.iter().map(selector).collect::<Vec<_>>() }),
        );
    }
    Value::Object(out)
}

fn subjects(subjects: &[Subject]) -> Vec<Value> {
    subjects
        .iter()
        .map(|s| {
            let mut out = Map::new();
            out.insert("kind".into(), json!(s.kind));
            if !s.api_group.is_empty() {
                out.insert("apiGroup".into(), json!(s.api_group));
            }
            out.insert("name".into(), json!(s.name));
            if !s.namespace.is_empty() {
                out.insert("namespace".into(), json!(s.namespace));
            }
            Value::Object(out)
        })
        .collect()
}

pub fn binding_to_value(binding: &Binding) -> Value {
    let subjects = subjects(&binding.subjects);
    let kind = match binding.kind {
        BindingKind::ClusterRoleBinding => "ClusterRoleBinding",
        BindingKind::RoleBinding => "RoleBinding",
    };
    json!({
        "apiVersion": RBAC_API_VERSION,
        "kind": kind,
        "metadata": metadata(&binding.name, &binding.namespace, None),
        "subjects": subjects,
        "roleRef": {
            "apiGroup": RBAC_GROUP,
            "kind": binding.role_ref.kind.as_str(),
            "name": binding.role_ref.name,
        },
    })
}

/// A FieldPolicy as its `authzd.io/v1alpha1` manifest; lists it does not set are left out.
pub fn field_policy_to_value(policy: &FieldPolicy) -> Value {
    let patterns = |list: &[crate::policy::content::path::PathPattern]| -> Vec<String> {
        list.iter().map(|p| p.to_string()).collect()
    };
    let mut spec = Map::new();
    if !policy.ignore.is_empty() {
        spec.insert("ignore".into(), json!(patterns(&policy.ignore)));
    }
    if !policy.sets.is_empty() {
        spec.insert("sets".into(), json!(patterns(&policy.sets)));
    }
    if !policy.keyed_lists.is_empty() {
        let lists: Vec<Value> = policy
            .keyed_lists
            .iter()
            .map(|(path, keys)| json!({"path": path.to_string(), "keys": keys}))
            .collect();
        spec.insert("keyedLists".into(), Value::Array(lists));
    }
    if !policy.protected.is_empty() {
        let protected: Vec<Value> = policy
            .protected
            .iter()
            .map(|entry| {
                if entry.resources.is_empty() {
                    return json!(entry.pattern.to_string());
                }
                // Back to the loader's `resource` / `resource.group` / `*` spelling.
                let resources: Vec<String> = entry
                    .resources
                    .iter()
                    .map(
                        |(group, resource)| match (group.as_str(), resource.as_str()) {
                            ("*", "*") => "*".to_string(),
                            ("", resource) => resource.to_string(),
                            (group, resource) => format!("{resource}.{group}"),
                        },
                    )
                    .collect();
                json!({"path": entry.pattern.to_string(), "resources": resources})
            })
            .collect();
        spec.insert("protected".into(), Value::Array(protected));
    }
    json!({
        "apiVersion": crate::policy::load::FIELD_POLICY_API_VERSION,
        "kind": FIELD_POLICY_KIND,
        "metadata": metadata(&policy.name, "", None),
        "spec": Value::Object(spec),
    })
}

/// A ChangeGate as its `authzd.io/v1alpha1` manifest (docs/policy.md §8).
pub fn change_gate_to_value(gate: &ChangeGate) -> Value {
    let rules: Vec<Value> = gate
        .rules
        .iter()
        .map(|r| {
            json!({
                "name": r.name,
                "type": r.kind.as_str(),
                "subjects": subjects(&r.subjects),
                "namespaces": r.namespaces,
                "access": r.access.iter().map(rule).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "apiVersion": crate::policy::load::FIELD_POLICY_API_VERSION,
        "kind": CHANGE_GATE_KIND,
        "metadata": metadata(&gate.name, "", None),
        "spec": {"rules": rules},
    })
}

/// One manifest as YAML text (no leading `---`).
pub fn to_yaml(value: &Value) -> String {
    // Rendering a JSON value to YAML cannot fail on these shapes; fall back to JSON (valid
    // YAML) rather than panic if it ever does.
    serde_saphyr::to_string(value).unwrap_or_else(|_| value.to_string())
}

/// Several manifests as one multi-document YAML text.
pub fn to_multi_yaml(values: &[Value]) -> String {
    let mut out = String::new();
    for value in values {
        out.push_str("---\n");
        out.push_str(&to_yaml(value));
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// Every role, binding, FieldPolicy and ChangeGate of `policy` as one multi-document YAML text, in that
/// order (ABAC lines are not manifests and are left out).
pub fn policy_to_multi_yaml(policy: &PolicySet) -> String {
    let roles = policy.roles.iter().map(|role| role_to_value(role));
    let bindings = policy
        .bindings
        .iter()
        .map(|binding| binding_to_value(binding));
    let field_policies = policy.field_policies.iter().map(field_policy_to_value);
    let gates = policy.gates.iter().map(change_gate_to_value);
    to_multi_yaml(
        &roles
            .chain(bindings)
            .chain(field_policies)
            .chain(gates)
            .collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::load::{load_paths, load_sources, LoadOptions};
    use crate::policy::model::Source;

    /// Rules with content clauses render to manifests that load back to the same rules.
    #[test]
    fn content_clauses_round_trip() {
        let text = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: clauses}
rules:
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["update"]
  fields: [".metadata.labels['team.example.com/*']", ".metadata.finalizers[=\"x\"]"]
  objectSelector: {matchLabels: {app: web}, matchExpressions: [{key: protected, operator: DoesNotExist}]}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
  fieldSelector: [{key: spec.nodeName, operator: In, values: ["{{nodeName}}"]}]
  labelSelector: [{key: tier, operator: Exists}]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["delete"]
  deny: true
  attributeRestrictions: {labelsContain: [protected]}
"#;
        let policy =
            load_sources(&[("c.yaml".into(), text.into())], &LoadOptions::default()).unwrap();
        let values: Vec<Value> = policy
            .roles
            .iter()
            .map(|role| role_to_value(role))
            .collect();
        let back = load_sources(
            &[("r.yaml".into(), to_multi_yaml(&values))],
            &LoadOptions::default(),
        )
        .unwrap();
        assert_eq!(back.roles[0].rules, policy.roles[0].rules);
        assert!(policy.roles[0].rules.iter().all(|r| r.clauses.is_some()));
    }

    /// Every object of the shipped policy renders to a manifest that loads back to itself.
    #[test]
    fn shipped_policy_round_trips() {
        let dir = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/policy"));
        let policy = load_paths(&[dir], &LoadOptions::default()).unwrap();
        assert!(!policy.roles.is_empty() && !policy.bindings.is_empty());
        let text = policy_to_multi_yaml(&policy);
        let back = load_sources(&[("r.yaml".into(), text)], &LoadOptions::default()).unwrap();
        let strip_roles = |roles: &[std::sync::Arc<Role>]| -> Vec<Role> {
            roles
                .iter()
                .map(|r| Role {
                    source: Source::default(),
                    ..Role::clone(r)
                })
                .collect()
        };
        let strip_bindings = |bindings: &[std::sync::Arc<Binding>]| -> Vec<Binding> {
            bindings
                .iter()
                .map(|b| Binding {
                    source: Source::default(),
                    ..Binding::clone(b)
                })
                .collect()
        };
        assert_eq!(strip_roles(&back.roles), strip_roles(&policy.roles));
        assert_eq!(
            strip_bindings(&back.bindings),
            strip_bindings(&policy.bindings)
        );
    }

    /// A FieldPolicy using every part of its spec renders to a manifest that loads back to
    /// itself.
    #[test]
    fn field_policy_round_trips() {
        let text = r#"
apiVersion: authzd.io/v1alpha1
kind: FieldPolicy
metadata: {name: everything}
spec:
  ignore: [".status", ".metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']"]
  sets: [".metadata.finalizers"]
  keyedLists: [{path: ".spec.containers", keys: [name, image]}]
  protected:
  - ".metadata.ownerReferences"
  - {path: ".data", resources: [secrets, "deployments.apps", "*", "*.example.com"]}
"#;
        let policy =
            load_sources(&[("f.yaml".into(), text.into())], &LoadOptions::default()).unwrap();
        assert_eq!(policy.field_policies.len(), 1);
        let rendered = to_multi_yaml(&[field_policy_to_value(&policy.field_policies[0])]);
        let back = load_sources(&[("r.yaml".into(), rendered)], &LoadOptions::default()).unwrap();
        let strip = |f: &FieldPolicy| FieldPolicy {
            source: Source::default(),
            ..f.clone()
        };
        assert_eq!(
            strip(&back.field_policies[0]),
            strip(&policy.field_policies[0])
        );
    }
}
