//! Deterministic synthetic policies and requests, shared by benchmarks, tests and the load
//! generator so that every figure is reproducible from a shape and a seed.
//!
//! The shape mimics a multi-tenant cluster: `namespaces` namespaces, each with a `ns-reader`
//! Role; `bindings` RoleBindings spread round-robin over the namespaces, each binding one
//! random user and one random group to `ns-reader` or to one of the shared ClusterRoles
//! (`view`, `edit`, a deny-capable `no-secrets`); a few ClusterRoleBindings for operators.
//! On top of that sits one probe subject, `bench-user` in `groups_per_user` groups, whose
//! answers are known in advance: allowed to get pods in `ns-0`, denied (explicitly) to get
//! secrets in `ns-0`, and with no opinion anywhere else.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::policy::model::{
    Binding, BindingKind, PolicyRule, PolicySet, Role, RoleKind, RoleRef, Source, Subject,
};
use crate::request::{Action, Request, ResourceAttributes, UserInfo};

/// The size and form of a synthetic policy.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub bindings: usize,
    pub namespaces: usize,
    /// Distinct users and groups the random bindings draw from.
    pub users: usize,
    pub groups: usize,
    /// Groups of the probe user (`bench-user`).
    pub groups_per_user: usize,
}

impl Shape {
    /// `bindings` bindings over `bindings / 10` namespaces (at least one), probe user in 10
    /// groups: the shape of BENCHMARKS.md's headline run.
    pub fn with_bindings(bindings: usize) -> Self {
        Shape {
            bindings,
            namespaces: (bindings / 10).max(1),
            users: (bindings / 4).max(1),
            groups: (bindings / 20).max(1),
            groups_per_user: 10,
        }
    }
}

/// xorshift64*: tiny, fast and deterministic; good enough to spread names (and, for the tests
/// and benches that draw requests over a synthetic policy, to draw the same ones every run).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x % n.max(1) as u64) as usize
    }
}

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], deny: bool) -> PolicyRule {
    PolicyRule {
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        api_groups: groups.iter().map(|s| s.to_string()).collect(),
        resources: resources.iter().map(|s| s.to_string()).collect(),
        deny,
        ..Default::default()
    }
}

fn cluster_role(name: &str, rules: Vec<PolicyRule>) -> Role {
    Role {
        kind: RoleKind::ClusterRole,
        namespace: String::new(),
        name: name.to_string(),
        labels: BTreeMap::new(),
        rules,
        aggregation_rule: None,
        source: Source::new("synthetic", 0),
    }
}

fn subject(kind: &str, name: String) -> Subject {
    Subject {
        kind: kind.to_string(),
        api_group: "rbac.authorization.k8s.io".to_string(),
        name,
        namespace: String::new(),
    }
}

pub fn namespace(i: usize) -> String {
    format!("ns-{i}")
}

pub const PROBE_USER: &str = "bench-user";

pub fn probe_groups(shape: &Shape) -> Vec<String> {
    (0..shape.groups_per_user)
        .map(|i| format!("bench-group-{i}"))
        .collect()
}

/// The synthetic policy for `shape`; the same shape and seed always give the same policy.
pub fn policy(shape: &Shape, seed: u64) -> PolicySet {
    let mut rng = Rng::new(seed);
    let mut roles = vec![
        cluster_role(
            "view",
            vec![rule(&["get", "list", "watch"], &["*"], &["*"], false)],
        ),
        cluster_role(
            "edit",
            vec![rule(
                &["*"],
                &["", "apps"],
                &["*", "-secrets", "-roles"],
                false,
            )],
        ),
        cluster_role("no-secrets", vec![rule(&["*"], &["*"], &["secrets"], true)]),
    ];
    for ns in 0..shape.namespaces {
        roles.push(Role {
            kind: RoleKind::Role,
            namespace: namespace(ns),
            name: "ns-reader".to_string(),
            labels: BTreeMap::new(),
            rules: vec![
                rule(&["get", "list"], &[""], &["pods", "pods/log"], false),
                rule(&["get"], &["apps"], &["deployments", "*/scale"], false),
            ],
            aggregation_rule: None,
            source: Source::new("synthetic", 0),
        });
    }

    let mut bindings = Vec::with_capacity(shape.bindings + 4);
    // Operators: a handful of cluster-wide bindings for users the probe never is.
    for i in 0..(shape.bindings / 1000).max(1) {
        bindings.push(Binding {
            kind: BindingKind::ClusterRoleBinding,
            namespace: String::new(),
            name: format!("operators-{i}"),
            subjects: vec![subject("User", format!("operator-{i}"))],
            role_ref: RoleRef {
                kind: RoleKind::ClusterRole,
                name: "view".to_string(),
            },
            source: Source::new("synthetic", 0),
        });
    }
    for i in 0..shape.bindings {
        let (kind, name) = match rng.below(4) {
            0 => (RoleKind::ClusterRole, "view"),
            1 => (RoleKind::ClusterRole, "edit"),
            2 => (RoleKind::ClusterRole, "no-secrets"),
            _ => (RoleKind::Role, "ns-reader"),
        };
        bindings.push(Binding {
            kind: BindingKind::RoleBinding,
            namespace: namespace(i % shape.namespaces.max(1)),
            name: format!("rb-{i}"),
            subjects: vec![
                subject("User", format!("user-{}", rng.below(shape.users))),
                subject("Group", format!("group-{}", rng.below(shape.groups))),
            ],
            role_ref: RoleRef {
                kind,
                name: name.to_string(),
            },
            source: Source::new("synthetic", 0),
        });
    }
    // The probe: its last group reads pods in ns-0 and is denied secrets there.
    let probe_group = probe_groups(shape)
        .pop()
        .unwrap_or_else(|| "bench-group".to_string());
    for (name, role) in [
        ("probe-reader", "ns-reader"),
        ("probe-no-secrets", "no-secrets"),
    ] {
        let kind = if role == "ns-reader" {
            RoleKind::Role
        } else {
            RoleKind::ClusterRole
        };
        bindings.push(Binding {
            kind: BindingKind::RoleBinding,
            namespace: namespace(0),
            name: name.to_string(),
            subjects: vec![subject("Group", probe_group.clone())],
            role_ref: RoleRef {
                kind,
                name: role.to_string(),
            },
            source: Source::new("synthetic", 0),
        });
    }
    let mut set = PolicySet {
        roles: roles.into_iter().map(Arc::new).collect(),
        bindings: bindings.into_iter().map(Arc::new).collect(),
        ..PolicySet::default()
    };
    set.canonicalize();
    set
}

fn probe_request(shape: &Shape, namespace: String, verb: &str, resource: &str) -> Request {
    Request {
        user: UserInfo {
            name: PROBE_USER.to_string(),
            groups: probe_groups(shape),
            ..Default::default()
        },
        action: Action::Resource(ResourceAttributes {
            namespace,
            verb: verb.to_string(),
            group: String::new(),
            version: "v1".to_string(),
            resource: resource.to_string(),
            subresource: String::new(),
            name: String::new(),
        }),
    }
}

/// Allowed: the probe user gets pods in `ns-0`.
pub fn allowed_request(shape: &Shape) -> Request {
    probe_request(shape, namespace(0), "get", "pods")
}

/// Explicitly denied: the probe user gets secrets in `ns-0`.
pub fn denied_request(shape: &Shape) -> Request {
    probe_request(shape, namespace(0), "get", "secrets")
}

/// Worst case: nothing matches (a namespace the probe has no binding in), NoOpinion.
pub fn unmatched_request(shape: &Shape) -> Request {
    probe_request(
        shape,
        namespace(shape.namespaces.saturating_sub(1).max(1)),
        "delete",
        "pods",
    )
}

/// Who can get pods in `ns-0`.
pub fn who_can_action() -> Action {
    Action::Resource(ResourceAttributes {
        namespace: namespace(0),
        verb: "get".to_string(),
        version: "v1".to_string(),
        resource: "pods".to_string(),
        ..Default::default()
    })
}

/// One policy shape that stresses one part of the decision path, with a request and the answer
/// it must get. Shared by `benches/shapes.rs` (which checks the answer before timing) and
/// `tests/properties/shapes.rs` (which holds the engine and the reference evaluator to it).
pub struct ShapeCase {
    pub name: &'static str,
    pub policy: PolicySet,
    pub request: Request,
    pub expected: crate::engine::Decision,
}

/// A subject-less RoleBinding of `role` in `ns`; callers add the subjects.
fn role_binding(ns: &str, name: &str, kind: RoleKind, role: &str) -> Binding {
    Binding {
        kind: BindingKind::RoleBinding,
        namespace: ns.to_string(),
        name: name.to_string(),
        subjects: Vec::new(),
        role_ref: RoleRef {
            kind,
            name: role.to_string(),
        },
        source: Source::new("synthetic", 0),
    }
}

fn request_for(
    user: &str,
    groups: Vec<String>,
    verb: &str,
    group: &str,
    resource: &str,
) -> Request {
    Request {
        user: UserInfo {
            name: user.to_string(),
            groups,
            ..Default::default()
        },
        action: Action::Resource(ResourceAttributes {
            namespace: namespace(0),
            verb: verb.to_string(),
            group: group.to_string(),
            version: "v1".to_string(),
            resource: resource.to_string(),
            subresource: String::new(),
            name: String::new(),
        }),
    }
}

/// The shape cases over a background of `bindings` random bindings (see [`policy`]); `wide`
/// sets how many subjects, groups, rules, aggregated roles or ABAC lines the stressed part has.
/// Deterministic: the same arguments always give the same cases.
pub fn shape_cases(bindings: usize, wide: usize, seed: u64) -> Vec<ShapeCase> {
    use crate::engine::Decision;
    use crate::policy::model::{AbacRule, LabelSelector};

    let shape = Shape::with_bindings(bindings);
    let base = policy(&shape, seed);
    let wide = wide.max(1);
    let mut cases = Vec::new();

    // Wide bindings: one binding with `wide` subjects; the asking user is the last one.
    let mut set = base.clone();
    let mut binding = role_binding(&namespace(0), "wide", RoleKind::Role, "ns-reader");
    binding.subjects = (0..wide)
        .map(|i| subject("User", format!("wide-user-{i}")))
        .collect();
    set.bindings.push(binding.into());
    set.canonicalize();
    let last = format!("wide-user-{}", wide - 1);
    cases.push(ShapeCase {
        name: "wide-binding",
        policy: set,
        request: request_for(&last, Vec::new(), "get", "", "pods"),
        expected: Decision::Allow,
    });

    // Many namespaces: one binding per namespace.
    let many = Shape {
        namespaces: bindings.max(1),
        ..shape
    };
    cases.push(ShapeCase {
        name: "many-namespaces",
        policy: policy(&many, seed),
        request: allowed_request(&many),
        expected: Decision::Allow,
    });

    // A user in `wide` groups; only the last one is bound (see `policy`).
    let grouped = Shape {
        groups_per_user: wide,
        ..shape
    };
    cases.push(ShapeCase {
        name: "many-groups",
        policy: policy(&grouped, seed),
        request: allowed_request(&grouped),
        expected: Decision::Allow,
    });

    // Aggregation: `agg-admin` gathers `wide` labelled ClusterRoles; the request needs the
    // last one's rule.
    let mut set = base.clone();
    for i in 0..wide {
        let mut role = cluster_role(
            &format!("agg-part-{i}"),
            vec![rule(&["get"], &[""], &[&format!("res-{i}")], false)],
        );
        role.labels
            .insert("aggregate-to-admin".to_string(), "true".to_string());
        set.roles.push(role.into());
    }
    let mut admin = cluster_role("agg-admin", Vec::new());
    admin.aggregation_rule = Some(vec![LabelSelector {
        match_labels: BTreeMap::from([("aggregate-to-admin".to_string(), "true".to_string())]),
        ..Default::default()
    }]);
    set.roles.push(admin.into());
    let mut binding = role_binding(&namespace(0), "agg", RoleKind::ClusterRole, "agg-admin");
    binding.subjects = vec![subject("User", "agg-user".to_string())];
    set.bindings.push(binding.into());
    set.canonicalize();
    cases.push(ShapeCase {
        name: "aggregated-clusterrole",
        policy: set,
        request: request_for(
            "agg-user",
            Vec::new(),
            "get",
            "",
            &format!("res-{}", wide - 1),
        ),
        expected: Decision::Allow,
    });

    // Deny-heavy: a role of `wide` deny rules, then an allow; the request meets the last deny.
    let mut set = base.clone();
    let mut rules: Vec<PolicyRule> = (0..wide)
        .map(|i| rule(&["*"], &[""], &[&format!("forbidden-{i}")], true))
        .collect();
    rules.push(rule(&["*"], &[""], &["*"], false));
    set.roles.push(cluster_role("deny-heavy", rules).into());
    let mut binding = role_binding(
        &namespace(0),
        "deny-heavy",
        RoleKind::ClusterRole,
        "deny-heavy",
    );
    binding.subjects = vec![subject("User", "deny-user".to_string())];
    set.bindings.push(binding.into());
    set.canonicalize();
    cases.push(ShapeCase {
        name: "deny-heavy",
        policy: set,
        request: request_for(
            "deny-user",
            Vec::new(),
            "get",
            "",
            &format!("forbidden-{}", wide - 1),
        ),
        expected: Decision::Deny,
    });

    // Negation-heavy: `*` except `wide` resources; the request is for one not excepted.
    let mut set = base.clone();
    let mut resources = vec!["*".to_string()];
    resources.extend((0..wide).map(|i| format!("-hidden-{i}")));
    let negated = PolicyRule {
        verbs: vec!["get".to_string()],
        api_groups: vec![String::new()],
        resources,
        ..Default::default()
    };
    set.roles
        .push(cluster_role("negation-heavy", vec![negated]).into());
    let mut binding = role_binding(
        &namespace(0),
        "negation-heavy",
        RoleKind::ClusterRole,
        "negation-heavy",
    );
    binding.subjects = vec![subject("User", "negation-user".to_string())];
    set.bindings.push(binding.into());
    set.canonicalize();
    cases.push(ShapeCase {
        name: "negation-heavy",
        policy: set,
        request: request_for("negation-user", Vec::new(), "get", "", "pods"),
        expected: Decision::Allow,
    });

    // ABAC-heavy: `wide` lines for other users, the asking user's line last; RBAC has no
    // opinion on this user, so the chain falls through to ABAC.
    let mut set = base.clone();
    set.abac = (0..=wide)
        .map(|i| AbacRule {
            user: if i == wide {
                "abac-user".to_string()
            } else {
                format!("abac-other-{i}")
            },
            readonly: true,
            api_group: "*".to_string(),
            namespace: namespace(0),
            resource: "pods".to_string(),
            source: Source::new("synthetic.abac", u32::try_from(i + 1).unwrap_or(u32::MAX)),
            ..Default::default()
        })
        .collect();
    cases.push(ShapeCase {
        name: "abac-heavy",
        policy: set,
        request: request_for("abac-user", Vec::new(), "get", "", "pods"),
        expected: Decision::Allow,
    });

    // Worst case: a user in 10 groups, and nothing matches anywhere.
    cases.push(ShapeCase {
        name: "nothing-matches",
        policy: base,
        request: unmatched_request(&shape),
        expected: Decision::NoOpinion,
    });
    cases
}
