//! The wording of policy objects in explanations and errors: binding and role ids, upstream's
//! subject and binding descriptions, RBAC reasons and missing-role errors. The compiled index
//! and the reference evaluator both word through these functions, so their explanations are
//! byte-identical (upstream's formats where upstream defines one:
//! `plugin/pkg/auth/authorizer/rbac/rbac.go` in kubernetes/kubernetes).

use crate::policy::model::{self, Binding, BindingKind, RoleKind, Subject};

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

/// What explanations say about a binding, borrowed from the model [`Binding`] (reference
/// evaluator) or from the compiled index (which keeps no model `Binding`), so that both word
/// their explanations through the same functions.
#[derive(Clone, Copy, Debug)]
pub struct BindingFacts<'a> {
    pub kind: BindingKind,
    pub namespace: &'a str,
    pub name: &'a str,
    pub role_kind: RoleKind,
    pub role_name: &'a str,
}

impl<'a> BindingFacts<'a> {
    pub fn of(binding: &'a Binding) -> Self {
        Self {
            kind: binding.kind,
            namespace: &binding.namespace,
            name: &binding.name,
            role_kind: binding.role_ref.kind,
            role_name: &binding.role_ref.name,
        }
    }

    /// Upstream's binding description: `ClusterRoleBinding "NAME"` / `RoleBinding "NAME/NS"`
    /// (the wording of [`Binding::describe`]).
    pub fn describe(&self) -> String {
        crate::policy::model::describe_binding(self.kind, self.name, self.namespace)
    }
}

/// Upstream `describeSubject`.
pub fn describe_subject(subject: &Subject, binding_namespace: &str) -> String {
    let service_account_namespace = if subject.namespace.is_empty() {
        binding_namespace
    } else {
        &subject.namespace
    };
    describe_subject_parts(&subject.kind, &subject.name, service_account_namespace)
}

/// Upstream `describeSubject` from a subject's kind, name and (service accounts only) its
/// effective namespace, the subject's own or else the binding's.
pub fn describe_subject_parts(kind: &str, name: &str, service_account_namespace: &str) -> String {
    let mut out = String::with_capacity(kind.len() + name.len() + 4);
    out.push_str(kind);
    out.push(' ');
    if kind == "ServiceAccount" {
        model::push_quoted_pair(&mut out, name, service_account_namespace);
    } else {
        model::push_quoted(&mut out, name);
    }
    out
}

/// Upstream's `RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to User "u"`, and the
/// same wording with `denied by` for deny rules.
pub fn rbac_reason(verdict: &str, binding: &Binding, subject: &Subject) -> String {
    rbac_reason_of(
        verdict,
        &BindingFacts::of(binding),
        &describe_subject(subject, &binding.namespace),
    )
}

/// [`rbac_reason`] from a binding's facts and its subject's description
/// ([`describe_subject`]).
pub fn rbac_reason_of(verdict: &str, binding: &BindingFacts<'_>, subject: &str) -> String {
    // Built by pushing, not `format!`: this runs for every decision that is not a cache hit.
    let mut out = String::with_capacity(
        48 + verdict.len()
            + binding.name.len()
            + binding.namespace.len()
            + binding.role_name.len()
            + subject.len(),
    );
    out.push_str("RBAC: ");
    out.push_str(verdict);
    out.push_str(" by ");
    model::push_binding_description(&mut out, binding.kind, binding.name, binding.namespace);
    out.push_str(" of ");
    out.push_str(binding.role_kind.as_str());
    out.push(' ');
    model::push_quoted(&mut out, binding.role_name);
    out.push_str(" to ");
    out.push_str(subject);
    out
}

/// The error upstream reports for a binding whose role cannot be resolved.
pub fn missing_role_error(binding: &Binding) -> String {
    missing_role_error_of(&BindingFacts::of(binding))
}

/// [`missing_role_error`] from a binding's facts.
pub fn missing_role_error_of(binding: &BindingFacts<'_>) -> String {
    match binding.role_kind {
        RoleKind::ClusterRole => format!(
            "clusterrole.rbac.authorization.k8s.io {:?} not found (referenced by {})",
            binding.role_name,
            binding.describe()
        ),
        RoleKind::Role => format!(
            "role.rbac.authorization.k8s.io {:?} not found in namespace {:?} (referenced by {})",
            binding.role_name,
            binding.namespace,
            binding.describe()
        ),
    }
}
