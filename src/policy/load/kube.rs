//! Kubernetes RBAC objects: `Role`, `ClusterRole`, `RoleBinding`, `ClusterRoleBinding`, their
//! `*List` kinds and `List`, apiVersion `rbac.authorization.k8s.io/{v1,v1beta1,v1alpha1}`.
//!
//! Rules may carry seed 003's extensions (`deny`, `attributeRestrictions`, `-`negation).
//! v1alpha1 (seed 001's examples) also allows `roleRef.namespace` and `roleRef.apiVersion`
//! (its roleRef was an ObjectReference) and `subjects[].apiVersion`; a `roleRef.namespace` must
//! be the binding's own namespace, since that is where a Role is looked up.
//!
//! Items of a `List` that belong to other API groups are skipped and counted (`other_kinds`).

use std::collections::BTreeMap;

use crate::policy::model::{
    Binding, BindingKind, LabelSelector, PolicyRule, Role, RoleKind, RoleRef, Subject,
};

use super::node::{self, Fields, Node, Problems};
use super::rules::{check_name, parse_selector, rule_clauses, validate_rule, API_GROUP};
use super::{label, other_kinds, Cx, SEED003_KINDS};
use crate::policy::model::PolicyObject;

const API_VERSIONS: [&str; 3] = [
    "rbac.authorization.k8s.io/v1",
    "rbac.authorization.k8s.io/v1beta1",
    "rbac.authorization.k8s.io/v1alpha1",
];
const V1ALPHA1: &str = "rbac.authorization.k8s.io/v1alpha1";

/// `metadata` fields that servers write and authzd ignores.
const IGNORED_METADATA: [&str; 13] = [
    "annotations",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "ownerReferences",
    "finalizers",
    "selfLink",
    "generateName",
    "clusterName",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Role,
    ClusterRole,
    RoleBinding,
    ClusterRoleBinding,
}

impl Kind {
    const ALL: [Kind; 4] = [
        Kind::Role,
        Kind::ClusterRole,
        Kind::RoleBinding,
        Kind::ClusterRoleBinding,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Kind::Role => "Role",
            Kind::ClusterRole => "ClusterRole",
            Kind::RoleBinding => "RoleBinding",
            Kind::ClusterRoleBinding => "ClusterRoleBinding",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// `RoleList` -> `Role`, ...
    fn list_of(s: &str) -> Option<Kind> {
        Kind::parse(s.strip_suffix("List")?)
    }

    fn namespaced(self) -> bool {
        matches!(self, Kind::Role | Kind::RoleBinding)
    }
}

/// Whether this reader reads objects of `kind` (in its group): the four RBAC kinds, their
/// `*List` kinds and `List`.
pub(super) fn reads_kind(kind: &str) -> bool {
    kind == "List" || Kind::parse(kind).is_some() || Kind::list_of(kind).is_some()
}

/// What a list passes down to its items.
enum Parent<'a> {
    Top,
    /// Inside `List`: items name their own kind and apiVersion.
    List,
    /// Inside `RoleList` etc.: items may leave kind and apiVersion out.
    Typed(Kind, &'a str),
}

/// Parses one Kubernetes object (or list of objects) into `cx`.
pub(super) fn parse(node: &Node, cx: &mut Cx<'_>) {
    parse_with(node, Parent::Top, cx);
}

fn parse_with(node: &Node, parent: Parent<'_>, cx: &mut Cx<'_>) {
    let mut p = Problems::default();
    let Some(mut f) = Fields::new(node, "", false, &mut p) else {
        cx.report("", p);
        return;
    };
    let mut api_version = f.string("apiVersion", &mut p);
    let mut kind = f.string("kind", &mut p);
    if let Parent::Typed(element, list_version) = parent {
        if kind.is_empty() {
            kind = element.as_str().to_owned();
        } else if kind != element.as_str() {
            p.push(
                node.line,
                format!(
                    "an item of a `{}List` must be a `{}`, found kind `{kind}`",
                    element.as_str(),
                    element.as_str()
                ),
            );
            cx.report("", p);
            return;
        }
        if api_version.is_empty() {
            api_version = list_version.to_owned();
        }
    }
    if kind.is_empty() {
        if p.0.is_empty() {
            p.push(node.line, "missing `kind`");
        }
        cx.report("", p);
        return;
    }
    let is_list = kind == "List" || Kind::list_of(&kind).is_some();
    if is_list && !matches!(parent, Parent::Top) {
        p.push(
            node.line,
            format!("`{kind}` inside a list is not supported"),
        );
        cx.report("", p);
        return;
    }
    if kind == "List" {
        if api_version != "v1" {
            p.push(
                node.line,
                format!(
                    "`List` needs `apiVersion: v1`, found {}",
                    shown(&api_version)
                ),
            );
        }
        parse_list(f, Parent::List, p, cx);
    } else if let Some(element) = Kind::list_of(&kind) {
        check_api_version(&api_version, &kind, node.line, &mut p);
        parse_list(f, Parent::Typed(element, &api_version), p, cx);
    } else if let Some(k) = Kind::parse(&kind) {
        check_api_version(&api_version, &kind, node.line, &mut p);
        parse_single(f, k, &api_version, p, cx);
    } else {
        let hint = if api_version.starts_with(&format!("{}/", other_kinds::ABAC_GROUP)) {
            " (ABAC policies are read from `.jsonl` files, one per line)"
        } else if SEED003_KINDS.contains(&kind.as_str()) {
            " (seed-003 documents have no `apiVersion`)"
        } else {
            ""
        };
        p.push(
            node.line,
            format!(
                "unknown kind `{kind}` for apiVersion {}{hint}",
                shown(&api_version)
            ),
        );
        cx.report("", p);
    }
}

/// `` `value` ``, or "none" for an empty value.
fn shown(value: &str) -> String {
    if value.is_empty() {
        "none".to_owned()
    } else {
        format!("`{value}`")
    }
}

fn check_api_version(api_version: &str, kind: &str, line: u32, p: &mut Problems) {
    if !API_VERSIONS.contains(&api_version) {
        p.push(
            line,
            format!(
                "unsupported apiVersion {} for kind `{kind}` (expected `{}`)",
                shown(api_version),
                API_VERSIONS.join("`, `")
            ),
        );
    }
}

fn parse_list(mut f: Fields<'_>, parent: Parent<'_>, mut p: Problems, cx: &mut Cx<'_>) {
    // ListMeta (resourceVersion, continue, ...) says nothing about policy.
    f.ignore(&["metadata"]);
    let items = f.list("items", &mut p);
    f.finish(&mut p);
    cx.report("", p);
    for item in items {
        let parent = match parent {
            Parent::Top | Parent::List => {
                // A `List` (`kubectl get ... -o yaml`) may mix kinds: items of other API
                // groups are skipped and counted, as top-level objects are.
                if !other_kinds::sift(item, cx, reads_kind) {
                    continue;
                }
                // authzd's own kinds keep their own readers inside a List too.
                if super::parse_authzd_kind(item, kind_of(item), cx) {
                    continue;
                }
                Parent::List
            }
            Parent::Typed(k, v) => Parent::Typed(k, v),
        };
        parse_with(item, parent, cx);
    }
}

/// An item's `kind` as written, empty when it has none (or not a string).
fn kind_of(node: &Node) -> &str {
    match &node.value {
        node::Value::Map(entries) => entries
            .iter()
            .find(|(k, _)| k == "kind")
            .and_then(|(_, v)| match &v.value {
                node::Value::String(kind) => Some(kind.as_str()),
                _ => None,
            })
            .unwrap_or_default(),
        _ => "",
    }
}

/// `metadata`: name, namespace, labels.
#[derive(Default)]
struct Meta {
    name: String,
    namespace: String,
    labels: BTreeMap<String, String>,
}

fn parse_metadata(node: Option<&Node>, p: &mut Problems) -> Meta {
    let mut meta = Meta::default();
    let Some(node) = node else {
        return meta;
    };
    let Some(mut f) = Fields::new(node, "metadata", false, p) else {
        return meta;
    };
    meta.name = f.string("name", p);
    meta.namespace = f.string("namespace", p);
    if let Some(labels) = f.take("labels", p) {
        meta.labels = node::string_map(labels, "metadata.labels", p);
    }
    f.ignore(&IGNORED_METADATA);
    f.finish(p);
    meta
}

fn parse_single(
    mut f: Fields<'_>,
    kind: Kind,
    api_version: &str,
    mut p: Problems,
    cx: &mut Cx<'_>,
) {
    let line = f.line();
    let v1alpha1 = api_version == V1ALPHA1;
    let meta_node = f.take("metadata", &mut p);
    let meta = parse_metadata(meta_node, &mut p);
    let label = label(kind.as_str(), &meta.namespace, &meta.name);

    if meta.name.is_empty() {
        p.push(
            line,
            "missing `metadata.name` (authzd never generates names)",
        );
    }
    check_name(&meta.name, "metadata.name", line, &mut p);
    check_name(&meta.namespace, "metadata.namespace", line, &mut p);
    if kind.namespaced() && meta.namespace.is_empty() {
        p.push(
            line,
            format!(
                "missing `metadata.namespace` (a `{}` is namespaced)",
                kind.as_str()
            ),
        );
    }
    if !kind.namespaced() && !meta.namespace.is_empty() {
        p.push(
            line,
            format!(
                "a `{}` is cluster-scoped and cannot have `metadata.namespace` (found `{}`)",
                kind.as_str(),
                meta.namespace
            ),
        );
    }

    let source = cx.source(line);
    let object = match kind {
        Kind::Role | Kind::ClusterRole => {
            let mut rules = Vec::new();
            for (i, rule) in f.list("rules", &mut p).iter().enumerate() {
                if let Some(rule) =
                    parse_rule(rule, &format!("rules[{i}]"), kind.namespaced(), &mut p)
                {
                    rules.push(rule);
                }
            }
            let aggregation_rule = match f.take("aggregationRule", &mut p) {
                None => None,
                Some(n) if kind == Kind::Role => {
                    p.push(
                        n.line,
                        "`aggregationRule` is only allowed on a `ClusterRole`",
                    );
                    None
                }
                Some(n) => Some(parse_aggregation(n, &mut p)),
            };
            PolicyObject::Role(Role {
                kind: if kind == Kind::Role {
                    RoleKind::Role
                } else {
                    RoleKind::ClusterRole
                },
                namespace: meta.namespace.clone(),
                name: meta.name.clone(),
                labels: meta.labels,
                rules,
                aggregation_rule,
                source,
            })
        }
        Kind::RoleBinding | Kind::ClusterRoleBinding => {
            let mut subjects = Vec::new();
            for (i, subject) in f.list("subjects", &mut p).iter().enumerate() {
                if let Some(s) =
                    parse_subject(subject, &format!("subjects[{i}]"), kind, v1alpha1, &mut p)
                {
                    subjects.push(s);
                }
            }
            let role_ref = match f.take("roleRef", &mut p) {
                Some(n) => parse_role_ref(n, kind, &meta.namespace, v1alpha1, &mut p),
                None => {
                    p.push(line, "missing `roleRef`");
                    None
                }
            };
            let binding_kind = if kind == Kind::RoleBinding {
                BindingKind::RoleBinding
            } else {
                BindingKind::ClusterRoleBinding
            };
            match role_ref {
                Some(role_ref) => PolicyObject::Binding(Binding {
                    kind: binding_kind,
                    namespace: meta.namespace.clone(),
                    name: meta.name.clone(),
                    subjects,
                    role_ref,
                    source,
                }),
                None => {
                    f.finish(&mut p);
                    cx.report(&label, p);
                    return;
                }
            }
        }
    };
    f.finish(&mut p);
    if p.0.is_empty() {
        cx.objects.push(object);
    } else {
        cx.report(&label, p);
    }
}

/// A ChangeGate's access rule (module `change_gate`): read as a ClusterRole's rule is.
pub(super) fn gate_access_rule(node: &Node, path: &str, p: &mut Problems) -> Option<PolicyRule> {
    parse_rule(node, path, false, p)
}

/// A ChangeGate's subject (module `change_gate`): read as a ClusterRoleBinding's subject is,
/// so that a ServiceAccount names its namespace.
pub(super) fn gate_subject(node: &Node, path: &str, p: &mut Problems) -> Option<Subject> {
    parse_subject(node, path, Kind::ClusterRoleBinding, false, p)
}

/// One RBAC rule, with seed 003's `deny` and `attributeRestrictions`.
fn parse_rule(node: &Node, path: &str, namespaced: bool, p: &mut Problems) -> Option<PolicyRule> {
    let mut f = Fields::new(node, path, false, p)?;
    let mut rule = PolicyRule {
        verbs: f.strings("verbs", p),
        api_groups: f.strings("apiGroups", p),
        resources: f.strings("resources", p),
        resource_names: f.strings("resourceNames", p),
        non_resource_urls: f.strings("nonResourceURLs", p),
        deny: f.boolean("deny", p),
        ..PolicyRule::default()
    };
    rule_clauses(&mut rule, &mut f, path, node.line, p);
    f.finish(p);
    validate_rule(&rule, path, "resources", namespaced, node.line, p);
    Some(rule)
}

fn parse_aggregation(node: &Node, p: &mut Problems) -> Vec<LabelSelector> {
    let Some(mut f) = Fields::new(node, "aggregationRule", false, p) else {
        return Vec::new();
    };
    let mut selectors = Vec::new();
    for (i, s) in f.list("clusterRoleSelectors", p).iter().enumerate() {
        let path = format!("aggregationRule.clusterRoleSelectors[{i}]");
        if let Some(selector) = parse_selector(s, &path, p) {
            selectors.push(selector);
        }
    }
    f.finish(p);
    selectors
}

fn parse_subject(
    node: &Node,
    path: &str,
    binding: Kind,
    v1alpha1: bool,
    p: &mut Problems,
) -> Option<Subject> {
    let mut f = Fields::new(node, path, false, p)?;
    let kind = f.string("kind", p);
    let mut api_group = f.string("apiGroup", p);
    let name = f.string("name", p);
    let namespace = f.string("namespace", p);
    if v1alpha1 {
        // v1alpha1 subjects named the group with its version; the group is what counts.
        f.ignore(&["apiVersion"]);
    }
    f.finish(p);
    let line = node.line;
    match kind.as_str() {
        "User" | "Group" => {
            if api_group.is_empty() {
                api_group = API_GROUP.to_owned();
            }
            if api_group != API_GROUP {
                p.push(
                    line,
                    format!("`{path}.apiGroup` must be `{API_GROUP}` for a `{kind}`, found `{api_group}`"),
                );
            }
        }
        "ServiceAccount" => {
            if !api_group.is_empty() {
                p.push(
                    line,
                    format!("`{path}.apiGroup` must be empty for a `ServiceAccount`, found `{api_group}`"),
                );
            }
            if binding == Kind::ClusterRoleBinding && namespace.is_empty() {
                p.push(
                    line,
                    format!("`{path}`: a `ServiceAccount` subject of a `ClusterRoleBinding` needs a `namespace`"),
                );
            }
        }
        other => p.push(
            line,
            format!(
                "`{path}.kind` must be `User`, `Group` or `ServiceAccount`, found {}",
                shown(other)
            ),
        ),
    }
    if name.is_empty() {
        p.push(line, format!("missing `{path}.name`"));
    }
    Some(Subject {
        kind,
        api_group,
        name,
        namespace,
    })
}

fn parse_role_ref(
    node: &Node,
    binding: Kind,
    binding_namespace: &str,
    v1alpha1: bool,
    p: &mut Problems,
) -> Option<RoleRef> {
    let mut f = Fields::new(node, "roleRef", false, p)?;
    let kind = f.string("kind", p);
    let name = f.string("name", p);
    let api_group = f.string("apiGroup", p);
    let (namespace, api_version) = if v1alpha1 {
        (f.string("namespace", p), f.string("apiVersion", p))
    } else {
        (String::new(), String::new())
    };
    f.finish(p);
    let line = node.line;
    if !api_group.is_empty() && api_group != API_GROUP {
        p.push(
            line,
            format!("`roleRef.apiGroup` must be `{API_GROUP}`, found `{api_group}`"),
        );
    }
    if !api_version.is_empty() && !api_version.starts_with(&format!("{API_GROUP}/")) {
        p.push(
            line,
            format!("`roleRef.apiVersion` must be in group `{API_GROUP}`, found `{api_version}`"),
        );
    }
    if !namespace.is_empty() && namespace != binding_namespace {
        p.push(
            line,
            format!(
                "`roleRef.namespace` `{namespace}` differs from the binding's namespace {} (roles are looked up in the binding's namespace)",
                shown(binding_namespace)
            ),
        );
    }
    if name.is_empty() {
        p.push(line, "missing `roleRef.name`");
    }
    let kind = match kind.as_str() {
        "Role" if binding == Kind::ClusterRoleBinding => {
            p.push(
                line,
                "a `ClusterRoleBinding` can only reference a `ClusterRole`, found `roleRef.kind: Role`",
            );
            return None;
        }
        "Role" => RoleKind::Role,
        "ClusterRole" => RoleKind::ClusterRole,
        other => {
            p.push(
                line,
                format!(
                    "`roleRef.kind` must be `Role` or `ClusterRole`, found {}",
                    shown(other)
                ),
            );
            return None;
        }
    };
    Some(RoleRef { kind, name })
}
