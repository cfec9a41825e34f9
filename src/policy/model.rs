//! Plain policy data, free of wire formats and of matching logic.
//!
//! Every loader (Kubernetes RBAC objects, seed-003 documents, ABAC lines) produces these types;
//! the compiler turns a [`PolicySet`] into an immutable index. Fields hold exactly what the
//! policy says after the documented conversions (ABAC v0 -> v1beta1, seed 003 -> RBAC), so the
//! reference evaluator and the compiled index read the same data.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Where an object or an ABAC line came from, for explanations and errors (`file:line`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Source {
    pub file: Arc<str>,
    /// 1-based line of the document or ABAC line; 0 when unknown (objects made in memory).
    pub line: u32,
}

impl Source {
    pub fn new(file: impl Into<Arc<str>>, line: u32) -> Self {
        Self {
            file: file.into(),
            line,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// One RBAC rule, extended with seed 003's `deny` flag, `-`negated verbs/resources and
/// attribute restrictions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    /// `res`, `res/sub`, `*`, `*/sub`; a leading `-` negates (seed 003).
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
    /// A matching deny rule forbids instead of allowing (seed 003).
    pub deny: bool,
    /// Seed 003 attribute restrictions, kept verbatim (as canonical JSON) for rendering; what
    /// they mean is in `clauses`.
    pub attribute_restrictions: Option<String>,
    /// Content clauses (`fields`, `objectSelector`, `fieldSelector`, `labelSelector`, or seed
    /// 003's restrictions translated): the rule applies only where they hold. `None` for a
    /// plain rule, which never reads content.
    pub clauses: Option<Arc<crate::policy::content::Clauses>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RoleKind {
    // Cluster-scoped first: canonical order visits cluster objects first, as upstream does.
    ClusterRole,
    Role,
}

impl RoleKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RoleKind::Role => "Role",
            RoleKind::ClusterRole => "ClusterRole",
        }
    }
}

pub use crate::policy::content::selector::{LabelSelector, LabelSelectorRequirement};
pub use crate::request::SelectorOperator;

/// A Role (namespaced) or ClusterRole (`namespace` empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Role {
    pub kind: RoleKind,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub rules: Vec<PolicyRule>,
    /// ClusterRoles only: when set, the role's effective rules are the union of the rules of
    /// the ClusterRoles its selectors match (as upstream's aggregation controller writes them).
    pub aggregation_rule: Option<Vec<LabelSelector>>,
    pub source: Source,
}

/// A role's key in canonical order: (kind, namespace — empty for a ClusterRole —, name).
pub type RoleKey<'a> = (RoleKind, &'a str, &'a str);
/// A binding's key in canonical order: (kind, namespace — empty for a ClusterRoleBinding —,
/// name).
pub type BindingKey<'a> = (BindingKind, &'a str, &'a str);

impl Role {
    /// Its key: [`PolicySet::canonicalize`] sorts roles by it.
    pub fn key(&self) -> RoleKey<'_> {
        (self.kind, self.namespace.as_str(), self.name.as_str())
    }

    /// `ClusterRole "NAME"` / `Role "NAME/NS"`, in the style of upstream's binding descriptions.
    pub fn describe(&self) -> String {
        if self.namespace.is_empty() {
            format!("{} {:?}", self.kind.as_str(), self.name)
        } else {
            format!(
                "{} {:?}",
                self.kind.as_str(),
                format!("{}/{}", self.name, self.namespace)
            )
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BindingKind {
    // Cluster-scoped first: canonical order visits ClusterRoleBindings first, as upstream does.
    ClusterRoleBinding,
    RoleBinding,
}

impl BindingKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BindingKind::RoleBinding => "RoleBinding",
            BindingKind::ClusterRoleBinding => "ClusterRoleBinding",
        }
    }
}

/// A binding's subject exactly as written (upstream returns subjects as written from who-can).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Subject {
    /// `User`, `Group`, `ServiceAccount`; any other kind never matches.
    pub kind: String,
    /// Ignored for matching, as upstream ignores it.
    pub api_group: String,
    pub name: String,
    /// ServiceAccount only; empty means the binding's namespace.
    pub namespace: String,
}

pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

impl Subject {
    /// The user name this subject stands for, if it names a single user: `User` names, and
    /// service accounts as `system:serviceaccount:NS:NAME` with NS defaulting to the binding's
    /// namespace. `None` for groups, unknown kinds and namespace-less service accounts.
    pub fn user_name(&self, binding_namespace: &str) -> Option<String> {
        match self.kind.as_str() {
            "User" => Some(self.name.clone()),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_namespace
                } else {
                    &self.namespace
                };
                (!ns.is_empty()).then(|| format!("{SERVICE_ACCOUNT_PREFIX}{ns}:{}", self.name))
            }
            _ => None,
        }
    }

    /// The group this subject names, if it is a `Group`.
    pub fn group_name(&self) -> Option<&str> {
        (self.kind == "Group").then_some(self.name.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleRef {
    /// `Role` or `ClusterRole`; anything else is rejected by the loaders.
    pub kind: RoleKind,
    pub name: String,
}

/// A RoleBinding (namespaced) or ClusterRoleBinding (`namespace` empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub kind: BindingKind,
    pub namespace: String,
    pub name: String,
    pub subjects: Vec<Subject>,
    pub role_ref: RoleRef,
    pub source: Source,
}

impl Binding {
    /// Its key: [`PolicySet::canonicalize`] sorts bindings by it.
    pub fn key(&self) -> BindingKey<'_> {
        (self.kind, self.namespace.as_str(), self.name.as_str())
    }

    /// The key of the role it refers to: a ClusterRole by name, a Role by name in the
    /// binding's own namespace.
    pub fn role_key(&self) -> RoleKey<'_> {
        let namespace = match self.role_ref.kind {
            RoleKind::ClusterRole => "",
            RoleKind::Role => self.namespace.as_str(),
        };
        (self.role_ref.kind, namespace, self.role_ref.name.as_str())
    }

    /// Upstream's binding description: `ClusterRoleBinding "NAME"` / `RoleBinding "NAME/NS"`.
    pub fn describe(&self) -> String {
        describe_binding(self.kind, &self.name, &self.namespace)
    }
}

/// Upstream's binding description: `ClusterRoleBinding "NAME"` / `RoleBinding "NAME/NS"`.
pub fn describe_binding(kind: BindingKind, name: &str, namespace: &str) -> String {
    let mut out = String::with_capacity(24 + name.len() + namespace.len());
    push_binding_description(&mut out, kind, name, namespace);
    out
}

/// Appends [`describe_binding`]'s wording to `out`.
pub fn push_binding_description(out: &mut String, kind: BindingKind, name: &str, namespace: &str) {
    match kind {
        BindingKind::ClusterRoleBinding => {
            out.push_str("ClusterRoleBinding ");
            push_quoted(out, name);
        }
        BindingKind::RoleBinding => {
            out.push_str("RoleBinding ");
            push_quoted_pair(out, name, namespace);
        }
    }
}

/// Whether `{:?}` prints `value` as itself between quotes: printable ASCII other than the two
/// characters it escapes.
fn quotes_plainly(value: &str) -> bool {
    value
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

/// Appends `value` exactly as `{:?}` formats it (the Go-like quoting upstream's messages use).
/// Names are plain almost always, and are quoted without the formatting machinery, which a
/// decision's explanation would otherwise run several times.
pub fn push_quoted(out: &mut String, value: &str) {
    if quotes_plainly(value) {
        out.push('"');
        out.push_str(value);
        out.push('"');
    } else {
        use std::fmt::Write as _;
        let _ = write!(out, "{value:?}");
    }
}

/// Appends `"FIRST/SECOND"` exactly as `{:?}` formats the joined string.
pub fn push_quoted_pair(out: &mut String, first: &str, second: &str) {
    if quotes_plainly(first) && quotes_plainly(second) {
        out.push('"');
        out.push_str(first);
        out.push('/');
        out.push_str(second);
        out.push('"');
    } else {
        push_quoted(out, &format!("{first}/{second}"));
    }
}

/// One ABAC policy line after conversion to the internal (v1beta1) shape.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AbacRule {
    pub user: String,
    pub group: String,
    pub readonly: bool,
    pub api_group: String,
    pub namespace: String,
    pub resource: String,
    pub non_resource_path: String,
    pub source: Source,
}

/// Everything one policy state holds. Order is the canonical evaluation order: roles and
/// bindings sorted by (kind, namespace, name), ABAC lines in file then line order. Roles and
/// bindings are shared (`Arc`): the policy after a change is a copy of the one before with the
/// changed objects replaced, so copying it costs a reference count per object, not the
/// objects themselves (the etcd applier and the store make one per applied change).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicySet {
    pub roles: Vec<Arc<Role>>,
    pub bindings: Vec<Arc<Binding>>,
    pub abac: Vec<AbacRule>,
    /// How changed paths are computed (docs/policy.md §5), sorted by name.
    pub field_policies: Vec<FieldPolicy>,
    /// What no write may do to access (docs/policy.md §8), sorted by name.
    pub gates: Vec<ChangeGate>,
}

pub const FIELD_POLICY_KIND: &str = "FieldPolicy";
/// The API group and resource whose privileges guard writing FieldPolicies.
pub const FIELD_POLICY_GROUP: &str = "authzd.io";
pub const FIELD_POLICY_RESOURCE: &str = "fieldpolicies";

/// `kind: FieldPolicy` (authzd.io/v1alpha1): what the server-side diff ignores, which
/// lists it compares per element and which paths are protected, added to the built-in
/// defaults. Read from policy files, and written through the admin API like roles and
/// bindings (in etcd mode that is the only way).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPolicy {
    pub name: String,
    pub source: Source,
    /// Paths whose changes no rule needs to cover (`spec.ignore`).
    pub ignore: Vec<crate::policy::content::path::PathPattern>,
    /// Lists compared as sets of values (`spec.sets`).
    pub sets: Vec<crate::policy::content::path::PathPattern>,
    /// Lists compared per element by key fields (`spec.keyedLists: [{path, keys}]`).
    pub keyed_lists: Vec<(crate::policy::content::path::PathPattern, Vec<String>)>,
    /// Paths only an allow naming them in `fields` may change (`spec.protected`).
    pub protected: Vec<crate::policy::content::path::Protected>,
}

pub const CHANGE_GATE_KIND: &str = "ChangeGate";
/// The resource whose privileges guard writing ChangeGates (API group `authzd.io`).
pub const CHANGE_GATE_RESOURCE: &str = "changegates";

/// `kind: ChangeGate` (authzd.io/v1alpha1): rules every policy write is checked against by
/// what it does to access (docs/policy.md §8). A write whose access delta breaks a
/// rule is refused, whatever store keeps the policy and whoever writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeGate {
    pub name: String,
    pub source: Source,
    pub rules: Vec<GateRule>,
}

/// One rule of a ChangeGate: which access, where, and what may not happen to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateRule {
    /// Named in a refusal.
    pub name: String,
    pub kind: GateRuleKind,
    /// RBAC subjects: the protected ones (`NeverRemove`) or the only ones who may gain the
    /// access (`NeverGrantOutside`). A ServiceAccount names its namespace.
    pub subjects: Vec<Subject>,
    /// Where the rule holds: namespace names, `""` for cluster scope (and non-resource
    /// URLs), `*` for every namespace and cluster scope.
    pub namespaces: Vec<String>,
    /// The access, as RBAC rules (verbs, apiGroups, resources, resourceNames,
    /// nonResourceURLs); never deny rules, never content clauses.
    pub access: Vec<PolicyRule>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GateRuleKind {
    /// Lockout and break-glass protection: no write may take the access from a subject,
    /// asking as Kubernetes authenticates it.
    NeverRemove,
    /// No write may give the access to a request none of whose subjects is listed.
    NeverGrantOutside,
}

impl GateRuleKind {
    pub fn as_str(self) -> &'static str {
        match self {
            GateRuleKind::NeverRemove => "NeverRemove",
            GateRuleKind::NeverGrantOutside => "NeverGrantOutside",
        }
    }
}

impl PolicySet {
    /// The diff configuration in force: the built-in defaults, then every FieldPolicy's
    /// additions in name order.
    pub fn diff_config(&self) -> crate::policy::content::path::DiffConfig {
        diff_config_of(&self.field_policies)
    }

    /// Adds `object` at the end of its list (call [`canonicalize`](Self::canonicalize) once
    /// all are in).
    pub fn push(&mut self, object: PolicyObject) {
        match object {
            PolicyObject::Role(role) => self.roles.push(Arc::new(role)),
            PolicyObject::Binding(binding) => self.bindings.push(Arc::new(binding)),
            PolicyObject::FieldPolicy(policy) => self.field_policies.push(policy),
            PolicyObject::ChangeGate(gate) => self.gates.push(gate),
        }
    }

    /// Puts roles and bindings into canonical order so that explanations ("first rule that
    /// allowed") do not depend on file layout.
    pub fn canonicalize(&mut self) {
        self.roles.sort_by(|a, b| a.key().cmp(&b.key()));
        self.bindings.sort_by(|a, b| a.key().cmp(&b.key()));
        self.field_policies.sort_by(|a, b| a.name.cmp(&b.name));
        self.gates.sort_by(|a, b| a.name.cmp(&b.name));
    }

    /// Whether roles and bindings are in the order [`canonicalize`](Self::canonicalize) puts
    /// them in (a scan: for checks, not for the hot path).
    pub fn is_canonical(&self) -> bool {
        self.roles.windows(2).all(|w| w[0].key() <= w[1].key())
            && self.bindings.windows(2).all(|w| w[0].key() <= w[1].key())
            && self
                .field_policies
                .windows(2)
                .all(|w| w[0].name <= w[1].name)
            && self.gates.windows(2).all(|w| w[0].name <= w[1].name)
    }

    /// The paths every FieldPolicy protects, in name order.
    pub fn protected_paths(
        &self,
    ) -> impl Iterator<Item = &crate::policy::content::path::Protected> {
        self.field_policies.iter().flat_map(|f| f.protected.iter())
    }
}

/// The diff configuration of `policies` (in name order): the built-in defaults, then each
/// one's additions.
pub fn diff_config_of(policies: &[FieldPolicy]) -> crate::policy::content::path::DiffConfig {
    use crate::policy::content::path::{DiffConfig, ListKind};
    let mut config = DiffConfig::default();
    for policy in policies {
        config.ignored.extend(policy.ignore.iter().cloned());
        config.protected.extend(policy.protected.iter().cloned());
        // Configured lists come before the defaults: the first that names a list wins.
        let mut lists: Vec<_> = policy
            .sets
            .iter()
            .map(|p| (p.clone(), ListKind::Set))
            .chain(
                policy
                    .keyed_lists
                    .iter()
                    .map(|(p, keys)| (p.clone(), ListKind::Keyed(keys.clone()))),
            )
            .collect();
        lists.append(&mut config.lists);
        config.lists = lists;
    }
    config
}

/// A role, binding, FieldPolicy or ChangeGate read from a manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyObject {
    Role(Role),
    Binding(Binding),
    FieldPolicy(FieldPolicy),
    ChangeGate(ChangeGate),
}

impl PolicyObject {
    /// `Role`, `ClusterRole`, `RoleBinding`, `ClusterRoleBinding` or `FieldPolicy`.
    pub fn kind(&self) -> &'static str {
        match self {
            PolicyObject::Role(r) => r.kind.as_str(),
            PolicyObject::Binding(b) => b.kind.as_str(),
            PolicyObject::FieldPolicy(_) => FIELD_POLICY_KIND,
            PolicyObject::ChangeGate(_) => CHANGE_GATE_KIND,
        }
    }

    /// Empty for cluster-scoped objects.
    pub fn namespace(&self) -> &str {
        match self {
            PolicyObject::Role(r) => &r.namespace,
            PolicyObject::Binding(b) => &b.namespace,
            PolicyObject::FieldPolicy(_) | PolicyObject::ChangeGate(_) => "",
        }
    }

    pub fn name(&self) -> &str {
        match self {
            PolicyObject::Role(r) => &r.name,
            PolicyObject::Binding(b) => &b.name,
            PolicyObject::FieldPolicy(f) => &f.name,
            PolicyObject::ChangeGate(g) => &g.name,
        }
    }

    pub fn source(&self) -> &Source {
        match self {
            PolicyObject::Role(r) => &r.source,
            PolicyObject::Binding(b) => &b.source,
            PolicyObject::FieldPolicy(f) => &f.source,
            PolicyObject::ChangeGate(g) => &g.source,
        }
    }
}

#[cfg(test)]
mod quoting_tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The plain path and the fallback both give exactly `{:?}`'s quoting.
        #[test]
        fn quoting_is_debug_formatting(
            first in prop_oneof!["[a-z0-9:./ '-]{0,12}", "\\PC{0,8}", ".{0,8}"],
            second in prop_oneof!["[a-z0-9-]{0,12}", "\\PC{0,8}", ".{0,8}"],
        ) {
            let mut out = String::new();
            push_quoted(&mut out, &first);
            prop_assert_eq!(&out, &format!("{first:?}"));
            out.clear();
            push_quoted_pair(&mut out, &first, &second);
            prop_assert_eq!(&out, &format!("{:?}", format!("{first}/{second}")));
            prop_assert_eq!(
                describe_binding(BindingKind::RoleBinding, &first, &second),
                format!("RoleBinding {:?}", format!("{first}/{second}"))
            );
            prop_assert_eq!(
                describe_binding(BindingKind::ClusterRoleBinding, &first, &second),
                format!("ClusterRoleBinding {first:?}")
            );
        }
    }

    #[test]
    fn escapes_are_kept() {
        for value in [
            "a\"b",
            "back\\slash",
            "tab\there",
            "\u{301}accent",
            "ü",
            "\u{7f}",
        ] {
            let mut out = String::new();
            push_quoted(&mut out, value);
            assert_eq!(out, format!("{value:?}"), "{value:?}");
        }
    }
}
