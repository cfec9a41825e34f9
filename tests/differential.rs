//! Differential property tests: the compiled engine must answer exactly what the reference
//! evaluator (a plain walk over every binding, as upstream does it) answers — the decision, the
//! reason, the rules named in `allowed_by`/`denied_by` and the evaluation errors — for
//! Authorize and for who-can, on random policies and requests. Vocabularies are small on
//! purpose so that names collide, wildcards overlap and edge cases (`*/`, case differences,
//! negation, missing roles, service accounts without namespaces) come up often.
//!
//! Who-can is also checked against Authorize itself, as SPEC §3 states it: every listed user is
//! allowed when asking alone, every listed group is allowed for an unbound member, no unlisted
//! subject is allowed that way, and the denied lists are exactly the explicit denies.

use std::collections::BTreeMap;

use authzd::engine::reference::ReferenceEvaluator;
use authzd::engine::{
    Action, Decision, Engine, EngineConfig, Mode, NonResourceAttributes, Request,
    ResourceAttributes, UserInfo,
};
use authzd::policy::model::{
    AbacRule, Binding, BindingKind, LabelSelector, LabelSelectorRequirement, PolicyRule, PolicySet,
    Role, RoleKind, RoleRef, SelectorOperator, Source, Subject,
};
use proptest::prelude::*;
use proptest::sample::{select, subsequence};

const USERS: &[&str] = &[
    "alice",
    "bob",
    "Alice",
    "system:serviceaccount:ns1:sa",
    "system:serviceaccount:ns2:default",
];
const GROUPS: &[&str] = &["dev", "ops", "Dev", "system:authenticated"];
const NAMESPACES: &[&str] = &["ns1", "ns2", "*"];
const VERBS: &[&str] = &["get", "list", "create", "delete", "GET", "*", "watch"];
const API_GROUPS: &[&str] = &["", "apps", "*"];
const RULE_RESOURCES: &[&str] = &[
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
const RESOURCE_NAMES: &[&str] = &["a", "b"];
const URLS: &[&str] = &[
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

fn rule() -> impl Strategy<Value = PolicyRule> {
    (
        negatable(VERBS, 3),
        strings(API_GROUPS, 2),
        negatable(RULE_RESOURCES, 3),
        prop_oneof![3 => Just(Vec::new()), 1 => strings(RESOURCE_NAMES, 2)],
        prop_oneof![3 => Just(Vec::new()), 1 => strings(URLS, 2)],
        prop::bool::weighted(0.25),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(
                verbs,
                api_groups,
                resources,
                resource_names,
                non_resource_urls,
                deny,
                restricted,
            )| {
                PolicyRule {
                    verbs,
                    api_groups,
                    resources,
                    resource_names,
                    non_resource_urls,
                    deny,
                    attribute_restrictions: restricted
                        .then(|| "{\"labelsContain\":[\"x\"]}".to_string()),
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

fn role() -> impl Strategy<Value = Role> {
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

fn subject() -> impl Strategy<Value = Subject> {
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

fn binding() -> impl Strategy<Value = Binding> {
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
fn abac_rule() -> impl Strategy<Value = AbacRule> {
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

fn policy() -> impl Strategy<Value = PolicySet> {
    (
        proptest::collection::vec(role(), 0..=6),
        proptest::collection::vec(binding(), 0..=8),
        proptest::collection::vec(abac_rule(), 0..=4),
    )
        .prop_map(|(roles, bindings, abac)| PolicySet {
            roles: dedup_roles(roles),
            bindings: dedup_bindings(bindings),
            abac,
        })
}

fn config() -> impl Strategy<Value = EngineConfig> {
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

fn action() -> impl Strategy<Value = Action> {
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

fn user() -> impl Strategy<Value = UserInfo> {
    (select(USERS), subsequence(GROUPS, 0..=3)).prop_map(|(name, groups)| UserInfo {
        name: name.to_string(),
        groups: groups.into_iter().map(str::to_string).collect(),
        ..Default::default()
    })
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn request(user: UserInfo, action: &Action) -> Request {
    Request {
        user,
        action: action.clone(),
    }
}

/// A user name no policy or vocabulary entry uses, standing for "a member with no bindings of
/// its own".
const UNBOUND: &str = "unbound-member";

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn index_agrees_with_reference(
        policy in policy(),
        config in config(),
        requests in proptest::collection::vec((user(), action()), 1..=6),
    ) {
        let engine = Engine::new(&policy, config.clone());
        let reference = ReferenceEvaluator::new(&policy, &config);
        for (user, action) in &requests {
            let req = request(user.clone(), action);
            prop_assert_eq!(engine.authorize(&req), reference.authorize(&req), "authorize {:?}", req);

            let fast = engine.allowed_subjects(action);
            let slow = reference.allowed_subjects(action);
            prop_assert_eq!(&fast, &slow, "who-can {:?}", action);

            // Who-can agrees with Authorize, subject by subject.
            let everyone = fast.users.iter().any(|u| u == "*");
            for name in USERS.iter().chain(["sa", "default", UNBOUND].iter()) {
                let alone = UserInfo { name: name.to_string(), ..Default::default() };
                let decision = engine.authorize(&request(alone, action)).decision;
                let listed = fast.users.iter().any(|u| u == name);
                let denied = fast.denied_users.iter().any(|u| u == name);
                prop_assert_eq!(decision == Decision::Deny, denied, "user {} denied-list", name);
                if !everyone {
                    prop_assert_eq!(decision == Decision::Allow, listed, "user {} allowed-list", name);
                } else if listed {
                    prop_assert_eq!(decision, Decision::Allow);
                }
            }
            for group in GROUPS {
                let member = UserInfo {
                    name: UNBOUND.to_string(),
                    groups: vec![group.to_string()],
                    ..Default::default()
                };
                let decision = engine.authorize(&request(member, action)).decision;
                let listed = fast.groups.iter().any(|g| g == group);
                let denied = fast.denied_groups.iter().any(|g| g == group);
                prop_assert_eq!(decision == Decision::Deny, denied, "group {} denied-list", group);
                if !everyone {
                    prop_assert_eq!(decision == Decision::Allow, listed, "group {} allowed-list", group);
                } else if listed {
                    prop_assert_eq!(decision, Decision::Allow);
                }
            }
        }
    }
}

/// A hand-written regression: the same user reaching one binding through two subjects is
/// explained through the binding's first applying subject, as a walk would.
#[test]
fn first_applying_subject_explains() {
    let policy = PolicySet {
        roles: vec![Role {
            kind: RoleKind::ClusterRole,
            namespace: String::new(),
            name: "view".into(),
            labels: Default::default(),
            rules: vec![PolicyRule {
                verbs: vec!["get".into()],
                api_groups: vec!["".into()],
                resources: vec!["pods".into()],
                ..Default::default()
            }],
            aggregation_rule: None,
            source: Source::new("r.yaml", 1),
        }],
        bindings: vec![Binding {
            kind: BindingKind::ClusterRoleBinding,
            namespace: String::new(),
            name: "viewers".into(),
            subjects: vec![
                Subject {
                    kind: "Group".into(),
                    api_group: String::new(),
                    name: "dev".into(),
                    namespace: String::new(),
                },
                Subject {
                    kind: "User".into(),
                    api_group: String::new(),
                    name: "alice".into(),
                    namespace: String::new(),
                },
            ],
            role_ref: RoleRef {
                kind: RoleKind::ClusterRole,
                name: "view".into(),
            },
            source: Source::new("b.yaml", 3),
        }],
        abac: Vec::new(),
    };
    let config = EngineConfig::default();
    let engine = Engine::new(&policy, config.clone());
    let reference = ReferenceEvaluator::new(&policy, &config);
    let req = Request {
        user: UserInfo {
            name: "alice".into(),
            groups: vec!["dev".into()],
            ..Default::default()
        },
        action: Action::Resource(ResourceAttributes {
            namespace: "ns1".into(),
            verb: "get".into(),
            resource: "pods".into(),
            ..Default::default()
        }),
    };
    let fast = engine.authorize(&req);
    assert_eq!(fast, reference.authorize(&req));
    assert_eq!(
        fast.reason,
        "RBAC: allowed by ClusterRoleBinding \"viewers\" of ClusterRole \"view\" to Group \"dev\""
    );
    assert_eq!(fast.allowed_by[0].source.as_ref(), "b.yaml:3");
}
