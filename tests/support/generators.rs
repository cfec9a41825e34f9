//! Proptest generators of random policies and requests, shared by the property tests.
//! Vocabularies are small on purpose so that names collide, wildcards overlap and edge cases
//! (`*/`, case differences, negation, missing roles, service accounts without namespaces) come
//! up often. How many cases a property runs is [`super::cases`]'s.
#![allow(clippy::expect_used)] // generators of fixed vocabularies, outside #[test]

use std::collections::BTreeMap;

use authzd::engine::{EngineConfig, Mode};
use authzd::policy::content::condition::Condition;
use authzd::policy::content::path::PathPattern;
use authzd::policy::content::Clauses;
use authzd::policy::model::{
    AbacRule, Binding, BindingKind, ChangeGate, GateRule, GateRuleKind, LabelSelector,
    LabelSelectorRequirement, PolicyRule, PolicySet, Role, RoleKind, RoleRef, SelectorOperator,
    Source, Subject,
};
use authzd::request::{
    Action, Content, NonResourceAttributes, ResourceAttributes, SelectorRequirement, UserInfo,
};
use proptest::prelude::*;
use proptest::sample::{select, subsequence};
use std::sync::Arc;

pub const USERS: &[&str] = &[
    "alice",
    "bob",
    "Alice",
    "system:serviceaccount:ns1:sa",
    "system:serviceaccount:ns2:default",
    "system:node:n1",
];
pub const GROUPS: &[&str] = &["dev", "ops", "Dev", "system:authenticated"];
pub const NAMESPACES: &[&str] = &["ns1", "ns2", "*"];
/// `bind` is a privilege verb: a limited grant's `*` does not cover it (`policy::rbac`).
pub const VERBS: &[&str] = &[
    "get", "list", "create", "delete", "GET", "*", "watch", "update", "patch", "bind",
];
pub const API_GROUPS: &[&str] = &["", "apps", "*"];
pub const RULE_RESOURCES: &[&str] = &[
    "pods",
    "pods/status",
    "pods/log",
    "deployments",
    "deployments/scale",
    "*",
    "*/scale",
    "*/status",
    "*/other/segment",
    "secrets",
    "Pods",
    "*/",
    "",
    "/",
];
pub const RESOURCE_NAMES: &[&str] = &["a", "b"];
pub const URLS: &[&str] = &[
    "/healthz", "/api/*", "/api", "*", "/api/*/*", "/apis/**", "/",
];
const ROLE_NAMES: &[&str] = &["r1", "r2", "r3"];
const LABELS: &[&str] = &["agg-a", "agg-b"];

fn strings(pool: &'static [&'static str], max: usize) -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(select(pool), 0..=max)
        .prop_map(|v| v.into_iter().map(str::to_string).collect())
}

/// Verb or resource entries, some negated with seed 003's leading `-`.
fn negatable(pool: &'static [&'static str], max: usize) -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec((select(pool), prop::bool::weighted(0.2)), 0..=max).prop_map(|v| {
        v.into_iter()
            .map(|(s, neg)| if neg { format!("-{s}") } else { s.to_string() })
            .collect()
    })
}

pub fn rule() -> impl Strategy<Value = PolicyRule> {
    (
        negatable(VERBS, 3),
        strings(API_GROUPS, 2),
        negatable(RULE_RESOURCES, 3),
        prop_oneof![3 => Just(Vec::new()), 1 => strings(RESOURCE_NAMES, 2)],
        prop_oneof![3 => Just(Vec::new()), 1 => strings(URLS, 2)],
        prop::bool::weighted(0.25),
        clauses(),
    )
        .prop_map(
            |(verbs, api_groups, resources, resource_names, non_resource_urls, deny, clauses)| {
                PolicyRule {
                    verbs,
                    api_groups,
                    resources,
                    resource_names,
                    non_resource_urls,
                    deny,
                    attribute_restrictions: None,
                    clauses,
                }
            },
        )
}

fn selector() -> impl Strategy<Value = LabelSelector> {
    prop_oneof![
        select(LABELS).prop_map(|l| LabelSelector {
            match_labels: BTreeMap::from([(l.to_string(), "true".to_string())]),
            ..Default::default()
        }),
        select(LABELS).prop_map(|l| LabelSelector {
            match_expressions: vec![LabelSelectorRequirement {
                key: l.to_string(),
                operator: SelectorOperator::Exists,
                values: Vec::new(),
            }],
            ..Default::default()
        }),
    ]
}

pub fn role() -> impl Strategy<Value = Role> {
    (
        prop::bool::ANY,
        select(&["ns1", "ns2"][..]),
        select(ROLE_NAMES),
        proptest::collection::vec(rule(), 0..=3),
        subsequence(LABELS, 0..=2),
        prop_oneof![4 => Just(None), 1 => proptest::collection::vec(selector(), 0..=2).prop_map(Some)],
    )
        .prop_map(|(cluster, ns, name, rules, labels, aggregation)| {
            let kind = if cluster { RoleKind::ClusterRole } else { RoleKind::Role };
            Role {
                kind,
                namespace: if cluster { String::new() } else { ns.to_string() },
                name: name.to_string(),
                labels: labels
                    .into_iter()
                    .map(|l| (l.to_string(), "true".to_string()))
                    .collect(),
                rules,
                aggregation_rule: if cluster { aggregation } else { None },
                source: Source::new("roles.yaml", 1),
            }
        })
}

pub fn subject() -> impl Strategy<Value = Subject> {
    let name = prop_oneof![
        select(USERS),
        select(GROUPS),
        select(&["sa", "default"][..])
    ];
    (
        select(&["User", "Group", "ServiceAccount", "Robot"][..]),
        name,
        select(&["", "ns1", "ns2"][..]),
    )
        .prop_map(|(kind, name, namespace)| Subject {
            kind: kind.to_string(),
            api_group: String::new(),
            name: name.to_string(),
            namespace: if kind == "ServiceAccount" {
                namespace.to_string()
            } else {
                String::new()
            },
        })
}

pub fn binding() -> impl Strategy<Value = Binding> {
    (
        prop::bool::ANY,
        select(NAMESPACES),
        select(&["b1", "b2", "b3", "b4"][..]),
        proptest::collection::vec(subject(), 1..=3),
        prop::bool::ANY,
        select(ROLE_NAMES),
    )
        .prop_map(|(cluster, ns, name, subjects, ref_cluster, role)| Binding {
            kind: if cluster {
                BindingKind::ClusterRoleBinding
            } else {
                BindingKind::RoleBinding
            },
            namespace: if cluster {
                String::new()
            } else {
                ns.to_string()
            },
            name: name.to_string(),
            subjects,
            role_ref: RoleRef {
                kind: if cluster || ref_cluster {
                    RoleKind::ClusterRole
                } else {
                    RoleKind::Role
                },
                name: role.to_string(),
            },
            source: Source::new("bindings.yaml", 1),
        })
}

/// ABAC lines in their converted form: `*` user/group already became `system:authenticated`.
pub fn abac_rule() -> impl Strategy<Value = AbacRule> {
    (
        prop_oneof![Just(""), select(USERS)],
        prop_oneof![Just(""), select(GROUPS)],
        prop::bool::ANY,
        select(&["", "*", "apps"][..]),
        select(&["", "*", "ns1"][..]),
        select(&["", "*", "pods", "deployments"][..]),
        select(&["", "*", "/api/*", "/healthz"][..]),
        1u32..50,
    )
        .prop_map(
            |(user, group, readonly, api_group, namespace, resource, path, line)| AbacRule {
                user: user.to_string(),
                group: group.to_string(),
                readonly,
                api_group: api_group.to_string(),
                namespace: namespace.to_string(),
                resource: resource.to_string(),
                non_resource_path: path.to_string(),
                source: Source::new("policy.jsonl", line),
            },
        )
}

fn dedup_roles(mut roles: Vec<Role>) -> Vec<Role> {
    let mut seen = std::collections::HashSet::new();
    roles.retain(|r| seen.insert((r.kind, r.namespace.clone(), r.name.clone())));
    roles
}

fn dedup_bindings(mut bindings: Vec<Binding>) -> Vec<Binding> {
    let mut seen = std::collections::HashSet::new();
    bindings.retain(|b| seen.insert((b.kind, b.namespace.clone(), b.name.clone())));
    bindings
}

pub fn policy() -> impl Strategy<Value = PolicySet> {
    (
        proptest::collection::vec(role(), 0..=6),
        proptest::collection::vec(binding(), 0..=8),
        proptest::collection::vec(abac_rule(), 0..=4),
        0u8..4,
    )
        .prop_map(|(roles, bindings, abac, field_policy)| PolicySet {
            roles: dedup_roles(roles).into_iter().map(Into::into).collect(),
            bindings: dedup_bindings(bindings)
                .into_iter()
                .map(Into::into)
                .collect(),
            abac,
            field_policies: match field_policy {
                0 | 1 => Vec::new(),
                2 => vec![ignore_data()],
                _ => vec![protect_some()],
            },
            gates: Vec::new(),
        })
}

/// `new`: `old` with some of its roles and bindings dropped (`keep`, cycled, says which stay)
/// and some of `other`'s added (an object of the same kind and name replaces the old one):
/// bindings added and removed, subjects changed, rules narrowed or widened, denies and
/// negations added, labels changed. `other`'s FieldPolicies replace `old`'s when they protect
/// the same paths (a change of protected paths is refused by the delta and by gates, tested
/// apart): ignored paths change no fold. ABAC lines and ChangeGates stay `old`'s.
pub fn changed(old: &PolicySet, other: PolicySet, keep: &[bool]) -> PolicySet {
    let mut keep = keep.iter().cycle();
    let field_policies = if old.protected_paths().eq(other.protected_paths()) {
        other.field_policies.clone()
    } else {
        old.field_policies.clone()
    };
    let mut new = PolicySet {
        roles: Vec::new(),
        bindings: Vec::new(),
        abac: old.abac.clone(),
        field_policies,
        gates: old.gates.clone(),
    };
    for role in &old.roles {
        if *keep.next().unwrap_or(&true) {
            new.roles.push(role.clone());
        }
    }
    for binding in &old.bindings {
        if *keep.next().unwrap_or(&true) {
            new.bindings.push(binding.clone());
        }
    }
    for role in other.roles {
        new.roles.retain(|r| {
            (r.kind, &r.namespace, &r.name) != (role.kind, &role.namespace, &role.name)
        });
        new.roles.push(role);
    }
    for binding in other.bindings {
        new.bindings.retain(|b| {
            (b.kind, &b.namespace, &b.name) != (binding.kind, &binding.namespace, &binding.name)
        });
        new.bindings.push(binding);
    }
    new
}

/// A value no policy [`policy`] makes names, in any dimension: a ChangeGate may name what no
/// policy does (a user, a group, a namespace, a verb, a resource, a name, a URL).
pub const GATE_ONLY: &str = "x-gate";

/// A ChangeGate over the generators' vocabulary and [`GATE_ONLY`]: 1–3 rules of either type,
/// each with 0–3 subjects (User, Group, ServiceAccount), `*` or a few namespaces (`""`
/// included), and 1–2 access rules (resources with wildcards, subresources and sometimes
/// names; or non-resource URLs).
pub fn gate(name: &'static str) -> impl Strategy<Value = ChangeGate> {
    proptest::collection::vec(gate_rule(), 1..=3).prop_map(move |rules| ChangeGate {
        name: name.to_string(),
        source: Source::new("gates.yaml", 1),
        rules: rules
            .into_iter()
            .enumerate()
            .map(|(i, rule)| GateRule {
                name: format!("rule-{i}"),
                ..rule
            })
            .collect(),
    })
}

fn gate_rule() -> impl Strategy<Value = GateRule> {
    let namespaces = prop_oneof![
        1 => Just(vec!["*".to_string()]),
        2 => subsequence(&["ns1", "ns2", "", GATE_ONLY][..], 1..=3)
            .prop_map(|v| v.into_iter().map(str::to_string).collect()),
    ];
    (
        prop::bool::ANY,
        proptest::collection::vec(gate_subject(), 0..=3),
        namespaces,
        proptest::collection::vec(gate_access(), 1..=2),
    )
        .prop_map(|(remove, subjects, namespaces, access)| GateRule {
            name: String::new(),
            kind: if remove {
                GateRuleKind::NeverRemove
            } else {
                GateRuleKind::NeverGrantOutside
            },
            subjects,
            namespaces,
            access,
        })
}

fn gate_subject() -> impl Strategy<Value = Subject> {
    let subject = |kind: &str, name: &str, namespace: &str| Subject {
        kind: kind.to_string(),
        api_group: String::new(),
        name: name.to_string(),
        namespace: namespace.to_string(),
    };
    prop_oneof![
        prop_oneof![select(USERS), Just(GATE_ONLY)].prop_map(move |n| subject("User", n, "")),
        prop_oneof![select(GROUPS), Just(GATE_ONLY)].prop_map(move |n| subject("Group", n, "")),
        (
            select(&["ns1", "ns2"][..]),
            select(&["sa", "default", GATE_ONLY][..])
        )
            .prop_map(move |(ns, n)| subject("ServiceAccount", n, ns)),
    ]
}

fn gate_access() -> impl Strategy<Value = PolicyRule> {
    let verbs =
        proptest::collection::vec(prop_oneof![9 => select(VERBS), 1 => Just(GATE_ONLY)], 1..=2);
    let resource = prop_oneof![
        5 => select(&["pods", "pods/status", "deployments", "deployments/scale", "secrets"][..]),
        2 => select(&["*", "*/scale", "*/status"][..]),
        1 => select(&[GATE_ONLY, "pods/x-gate"][..]),
    ];
    let named = prop_oneof![
        3 => Just(Vec::new()),
        1 => proptest::collection::vec(select(&["a", "b", GATE_ONLY][..]), 1..=2),
    ];
    prop_oneof![
        4 => (
            verbs.clone(),
            prop_oneof![4 => select(API_GROUPS), 1 => Just(GATE_ONLY)],
            proptest::collection::vec(resource, 1..=2),
            named,
        )
            .prop_map(|(verbs, group, resources, names)| PolicyRule {
                verbs: verbs.into_iter().map(str::to_string).collect(),
                api_groups: vec![group.to_string()],
                resources: resources.into_iter().map(str::to_string).collect(),
                resource_names: names.into_iter().map(str::to_string).collect(),
                ..PolicyRule::default()
            }),
        1 => (
            verbs,
            proptest::collection::vec(
                prop_oneof![3 => select(URLS), 1 => select(&["/x-gate", "/x-gate/*"][..])],
                1..=2,
            ),
        )
            .prop_map(|(verbs, urls)| PolicyRule {
                verbs: verbs.into_iter().map(str::to_string).collect(),
                non_resource_urls: urls.into_iter().map(str::to_string).collect(),
                ..PolicyRule::default()
            }),
    ]
}

/// A FieldPolicy protecting paths the generated content changes: the finalizers on every
/// resource, `.spec.replicas` on deployments (of any group) and `.data` on core secrets.
pub fn protect_some() -> authzd::policy::model::FieldPolicy {
    use authzd::policy::content::path::Protected;
    let protected = |path: &str, resources: &[(&str, &str)]| Protected {
        pattern: PathPattern::parse(path).expect("parses"),
        resources: resources
            .iter()
            .map(|(g, r)| (g.to_string(), r.to_string()))
            .collect(),
    };
    authzd::policy::model::FieldPolicy {
        name: "protect-some".into(),
        source: Source::default(),
        ignore: Vec::new(),
        sets: Vec::new(),
        keyed_lists: Vec::new(),
        protected: vec![
            protected(".metadata.finalizers", &[]),
            protected(".spec.replicas", &[("*", "deployments")]),
            protected(".data", &[("", "secrets")]),
        ],
    }
}

/// A FieldPolicy under which `.data` and `.spec.replicas` never change: the diff both
/// evaluators compute must follow it.
pub fn ignore_data() -> authzd::policy::model::FieldPolicy {
    authzd::policy::model::FieldPolicy {
        name: "ignore-data".into(),
        source: Source::default(),
        ignore: vec![
            PathPattern::parse(".data").expect("parses"),
            PathPattern::parse(".spec.replicas").expect("parses"),
        ],
        sets: vec![PathPattern::parse(".metadata.labels").expect("parses")],
        keyed_lists: Vec::new(),
        protected: Vec::new(),
    }
}

pub fn config() -> impl Strategy<Value = EngineConfig> {
    let modes = prop_oneof![
        6 => Just(vec![Mode::Rbac, Mode::Abac]),
        2 => Just(vec![Mode::Abac, Mode::Rbac]),
        1 => Just(vec![Mode::Rbac]),
        1 => Just(vec![Mode::Abac]),
        1 => Just(vec![Mode::AlwaysDeny, Mode::Rbac, Mode::AlwaysAllow]),
        1 => Just(vec![Mode::AlwaysDeny]),
    ];
    (
        modes,
        subsequence(&["bob"][..], 0..=1),
        subsequence(&["ops"][..], 0..=1),
    )
        .prop_map(|(modes, users, groups)| EngineConfig {
            modes,
            super_users: users.into_iter().map(str::to_string).collect(),
            super_groups: groups.into_iter().map(str::to_string).collect(),
        })
}

pub fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (
            select(&["", "ns1", "ns2", "*"][..]),
            select(VERBS),
            select(&["", "apps", "Apps"][..]),
            select(&["pods", "deployments", "secrets", "Pods", "*"][..]),
            select(&["", "status", "log", "scale", "other/segment"][..]),
            select(&["", "a", "b"][..]),
        )
            .prop_map(|(namespace, verb, group, resource, subresource, name)| {
                Action::Resource(ResourceAttributes {
                    namespace: namespace.to_string(),
                    verb: verb.to_string(),
                    group: group.to_string(),
                    version: "v1".to_string(),
                    resource: resource.to_string(),
                    subresource: subresource.to_string(),
                    name: name.to_string(),
                })
            }),
        1 => (
            select(&["/healthz", "/api", "/api/v1", "/apis/x", "/", "", "/healthz/"][..]),
            select(VERBS),
        )
            .prop_map(|(path, verb)| Action::NonResource(NonResourceAttributes {
                path: path.to_string(),
                verb: verb.to_string(),
            })),
    ]
}

pub fn user() -> impl Strategy<Value = UserInfo> {
    (select(USERS), subsequence(GROUPS, 0..=3)).prop_map(|(name, groups)| UserInfo {
        name: name.to_string(),
        groups: groups.into_iter().map(str::to_string).collect(),
        ..Default::default()
    })
}

/// Field patterns rules may carry, overlapping the paths [`content`] changes.
const FIELD_PATTERNS: &[&str] = &[
    ".metadata.labels",
    ".metadata.labels['team.example.com/*']",
    ".metadata.finalizers[=\"f1\"]",
    ".metadata",
    ".spec.replicas",
    ".spec",
    ".data",
    ".",
];
const OBJECT_LABELS: &[&str] = &["protected", "app", "team.example.com/owner"];

/// CEL conditions rules may carry (docs/policy.md §6), over what [`object`], [`user`] and [`action`]
/// vary: the request alone (decided without content), either object, the changed paths, a
/// macro, a pattern, and conditions that fail on some objects (a label that may be absent).
const CONDITIONS: &[&str] = &[
    "object.metadata.labels == oldObject.metadata.labels || 'ops' in request.userInfo.groups",
    "request.userInfo.username.startsWith('a') && request.name != 'b'",
    "'dev' in request.userInfo.groups",
    "request.verb == 'update' ? object.spec.nodeName == 'n1' : request.namespace == 'ns1'",
    "object.spec.replicas > 1",
    "oldObject.metadata.labels['app'] == 'x'",
    "has(object.metadata.labels.protected)",
    "object.metadata.finalizers.exists(f, f == 'f1')",
    "oldObject == null || oldObject.data.k == 'v1'",
    "size(changedPaths) <= 1",
    "object.metadata.name.matches('^a$')",
    "request.fieldSelector.all(r, r.key != 'spec.nodeName')",
];

fn requirement(
    keys: &'static [&'static str],
    values: &'static [&'static str],
) -> impl Strategy<Value = SelectorRequirement> {
    (
        select(keys),
        select(&[In, NotIn, Exists, DoesNotExist][..]),
        select(values),
    )
        .prop_map(|(key, operator, value)| SelectorRequirement {
            key: key.to_string(),
            operator,
            values: match operator {
                In | NotIn => vec![value.to_string()],
                Exists | DoesNotExist => Vec::new(),
            },
        })
}

use authzd::request::SelectorOperator::{DoesNotExist, Exists, In, NotIn};

/// Content clauses on a rule, mostly none.
pub fn clauses() -> impl Strategy<Value = Option<Arc<Clauses>>> {
    prop_oneof![6 => Just(None), 1 => some_clauses().prop_map(Some)]
}

/// Content clauses on a rule: some of fields, selectors, same-node, an unevaluable
/// restriction and a CEL condition.
pub fn some_clauses() -> impl Strategy<Value = Arc<Clauses>> {
    (
        subsequence(FIELD_PATTERNS, 0..=2),
        prop::option::weighted(0.3, selector_over(OBJECT_LABELS)),
        proptest::collection::vec(requirement(OBJECT_LABELS, &["x", "true"]), 0..=1),
        proptest::collection::vec(
            requirement(
                &["spec.nodeName", "metadata.name"],
                &["n1", "a", "{{nodeName}}", "{{user}}"],
            ),
            0..=1,
        ),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.05),
        prop::option::weighted(0.3, select(CONDITIONS)),
    )
        .prop_map(
            |(
                fields,
                object_selector,
                label_selector,
                field_selector,
                same_node,
                unevaluable,
                condition,
            )| {
                Arc::new(Clauses {
                    fields: fields
                        .into_iter()
                        .map(|f| PathPattern::parse(f).expect("vocabulary patterns parse"))
                        .collect(),
                    object_selector,
                    field_selector,
                    label_selector,
                    same_node,
                    unevaluable: unevaluable.then(|| "attributeRestrictions {\"x\":1}".to_string()),
                    condition: condition
                        .map(|c| Condition::compile(c).expect("vocabulary conditions compile")),
                })
            },
        )
}

fn selector_over(labels: &'static [&'static str]) -> impl Strategy<Value = LabelSelector> {
    (
        proptest::collection::btree_map(select(labels), select(&["x", "true"][..]), 0..=1),
        proptest::collection::vec(requirement(labels, &["x", "true"]), 0..=1),
    )
        .prop_map(|(labels, expressions)| LabelSelector {
            match_labels: labels
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            match_expressions: expressions,
        })
}

/// A small Kubernetes-like object whose labels, finalizers, node and data vary.
pub fn object() -> impl Strategy<Value = serde_json::Value> {
    (
        select(&["a", "b"][..]),
        proptest::collection::btree_map(select(OBJECT_LABELS), select(&["x", "true"][..]), 0..=2),
        subsequence(&["f1", "f2"][..], 0..=2),
        select(&["n1", "n2"][..]),
        select(&[1, 2][..]),
        select(&["v1", "v2"][..]),
    )
        .prop_map(|(name, labels, finalizers, node, replicas, data)| {
            serde_json::json!({
                "metadata": {"name": name, "labels": labels, "finalizers": finalizers,
                    "resourceVersion": replicas.to_string()},
                "spec": {"nodeName": node, "replicas": replicas},
                "data": {"k": data},
            })
        })
}

/// What a request may carry: nothing, objects, a changed-path list, and selectors.
pub fn content() -> impl Strategy<Value = Option<Content>> {
    let bytes = |v: serde_json::Value| serde_json::to_vec(&v).expect("JSON values serialize");
    let some = (
        prop::option::weighted(0.7, object()),
        prop::option::weighted(0.6, object()),
        prop::option::weighted(
            0.15,
            subsequence(
                &[
                    ".metadata.labels.app",
                    ".spec.replicas",
                    ".data.k",
                    ".metadata.finalizers[=\"f1\"]",
                ][..],
                1..=2,
            ),
        ),
        proptest::collection::vec(requirement(OBJECT_LABELS, &["x", "true"]), 0..=1),
        proptest::collection::vec(
            requirement(&["spec.nodeName", "metadata.name"], &["n1", "a"]),
            0..=1,
        ),
    )
        .prop_map(
            move |(object, old_object, changed, label_selector, field_selector)| {
                let (object, old_object, changed_paths) = match changed {
                    Some(paths) => (None, None, paths.into_iter().map(str::to_string).collect()),
                    None => (object.map(bytes), old_object.map(bytes), Vec::new()),
                };
                let mut content = Content::default();
                content.object = object;
                content.old_object = old_object;
                content.changed_paths = changed_paths;
                content.field_selector = field_selector;
                content.label_selector = label_selector;
                content
            },
        );
    prop_oneof![1 => Just(None), 3 => some.prop_map(Some)]
}
