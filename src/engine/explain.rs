//! Wording of explanations, shared by the compiled engine and the reference evaluator so that
//! both produce byte-identical reasons (upstream's formats where upstream defines one).

use std::sync::Arc;

use crate::engine::RuleRef;
use crate::policy::model::{AbacRule, Binding, BindingKind, RoleKind, Subject};

pub const RBAC: &str = "RBAC";
pub const ABAC: &str = "ABAC";
pub const ALWAYS_ALLOW: &str = "AlwaysAllow";
pub const SUPER_USER: &str = "SuperUser";

/// Upstream ABAC's NoOpinion reason.
pub const ABAC_NO_MATCH: &str = "No policy matched.";

/// `ClusterRoleBinding/NAME` or `RoleBinding/NS/NAME`.
pub fn binding_id(binding: &Binding) -> String {
    match binding.kind {
        BindingKind::ClusterRoleBinding => format!("ClusterRoleBinding/{}", binding.name),
        BindingKind::RoleBinding => format!("RoleBinding/{}/{}", binding.namespace, binding.name),
    }
}

/// `ClusterRole/NAME` or `Role/NS/NAME` of the role a binding refers to.
pub fn role_id(binding: &Binding) -> String {
    match binding.role_ref.kind {
        RoleKind::ClusterRole => format!("ClusterRole/{}", binding.role_ref.name),
        RoleKind::Role => format!("Role/{}/{}", binding.namespace, binding.role_ref.name),
    }
}

/// Upstream `describeSubject`.
pub fn describe_subject(subject: &Subject, binding_namespace: &str) -> String {
    if subject.kind == "ServiceAccount" {
        let ns = if subject.namespace.is_empty() {
            binding_namespace
        } else {
            &subject.namespace
        };
        format!("{} {:?}", subject.kind, format!("{}/{}", subject.name, ns))
    } else {
        format!("{} {:?}", subject.kind, subject.name)
    }
}

/// Upstream's `RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to User "u"`, and the
/// same wording with `denied by` for deny rules.
pub fn rbac_reason(verdict: &str, binding: &Binding, subject: &Subject) -> String {
    format!(
        "RBAC: {verdict} by {} of {} {:?} to {}",
        binding.describe(),
        binding.role_ref.kind.as_str(),
        binding.role_ref.name,
        describe_subject(subject, &binding.namespace)
    )
}

/// The error upstream reports for a binding whose role cannot be resolved.
pub fn missing_role_error(binding: &Binding) -> String {
    match binding.role_ref.kind {
        RoleKind::ClusterRole => format!(
            "clusterrole.rbac.authorization.k8s.io {:?} not found (referenced by {})",
            binding.role_ref.name,
            binding.describe()
        ),
        RoleKind::Role => format!(
            "role.rbac.authorization.k8s.io {:?} not found in namespace {:?} (referenced by {})",
            binding.role_ref.name,
            binding.namespace,
            binding.describe()
        ),
    }
}

pub fn rbac_rule_ref(binding: &Binding, rule_index: usize) -> RuleRef {
    RuleRef {
        authorizer: RBAC,
        binding: binding_id(binding).into(),
        role: role_id(binding).into(),
        rule_index: u32::try_from(rule_index).unwrap_or(u32::MAX),
        source: binding.source.to_string().into(),
    }
}

pub fn abac_rule_ref(rule: &AbacRule, index: usize) -> RuleRef {
    RuleRef {
        authorizer: ABAC,
        binding: Arc::from(""),
        role: Arc::from(""),
        rule_index: u32::try_from(index).unwrap_or(u32::MAX),
        source: rule.source.to_string().into(),
    }
}

pub fn abac_reason(rule: &AbacRule) -> String {
    format!("ABAC: allowed by policy line {}", rule.source)
}

pub fn simple_rule_ref(authorizer: &'static str, what: &str) -> RuleRef {
    RuleRef {
        authorizer,
        binding: Arc::from(""),
        role: Arc::from(""),
        rule_index: 0,
        source: Arc::from(what),
    }
}

pub fn super_user_reason(user: &str) -> String {
    format!("allowed as super-user {user:?}")
}

pub fn super_group_reason(group: &str) -> String {
    format!("allowed as member of super-group {group:?}")
}
