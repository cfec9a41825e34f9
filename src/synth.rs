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

use crate::engine::{Action, Request, ResourceAttributes, UserInfo};
use crate::policy::model::{
    Binding, BindingKind, PolicyRule, PolicySet, Role, RoleKind, RoleRef, Source, Subject,
};

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
    /// groups: the shape of issue 4's headline target.
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

/// xorshift64*: tiny, fast and deterministic; good enough to spread names.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    fn below(&mut self, n: usize) -> usize {
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
        roles,
        bindings,
        abac: Vec::new(),
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
