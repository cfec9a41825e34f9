//! Privilege-escalation prevention for policy writes, as Kubernetes does it (seed 001, upstream
//! `ConfirmNoEscalation` / `BindingAuthorized`), extended to deny rules.
//!
//! A caller may create or replace
//! * a Role or ClusterRole only if it holds `escalate` on `roles`/`clusterroles` (API group
//!   `rbac.authorization.k8s.io`, in the role's namespace, for that role's name), or if every
//!   rule of the new role is *covered* by its own permissions in the role's scope;
//! * a RoleBinding or ClusterRoleBinding only if it holds `bind` on the referenced role, or if
//!   the referenced role's rules are covered in the binding's scope.
//!
//! *Covered* follows upstream's `Covers`: the rule is broken into atoms (one verb, API group,
//! resource and name each; `*` stays a literal `*`, so only a `*` grant covers a `*`), and the
//! caller must be allowed each atom — through the same engine that answers Authorize. authzd's
//! extension: nobody can grant what a deny rule withholds from them. An atom is refused when
//! any deny rule that applies to the caller in that scope overlaps it, even partially (granting
//! `*` on `secrets` is refused to someone denied `delete secrets`). Negated entries in the new
//! rule are ignored when breaking it down — the rule is treated as granting its positive
//! entries, which can only make the check stricter.
//!
//! Content clauses (docs/security.md §4): a rule with clauses is narrower than the same rule without, so
//! an unrestricted grant covers it; a grant the caller holds only under clauses covers only a
//! rule restricted exactly the same way (a refusal says so).
//!
//! Super-users bypass the check, as upstream's super-user does (that is how policy bootstraps).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::engine::{Decision, Engine};
use crate::policy::aggregate::aggregated_rules;
use crate::policy::model::PolicyObject;
use crate::policy::model::{
    Binding, BindingKind, PolicyRule, PolicySet, Role, RoleKind, CHANGE_GATE_RESOURCE,
    FIELD_POLICY_GROUP, FIELD_POLICY_RESOURCE,
};
use crate::policy::rbac::{
    api_group_matches, is_negated, non_resource_url_entry_matches, resource_matches,
    resource_name_matches, rule_matches, verb_matches,
};
use crate::request::{Action, NonResourceAttributes, Request, ResourceAttributes, UserInfo};

pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Checks writes of `caller` against the policy the `engine` was compiled from.
pub struct EscalationCheck<'a> {
    pub engine: &'a Engine,
    pub caller: &'a UserInfo,
}

fn positive(entries: &[String]) -> Vec<&str> {
    entries
        .iter()
        .filter(|e| !is_negated(e))
        .map(String::as_str)
        .collect()
}

/// One permission a rule grants, `*` literal.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Atom {
    Resource {
        verb: String,
        group: String,
        resource: String,
        subresource: String,
        name: String,
    },
    Url {
        verb: String,
        path: String,
    },
}

impl Atom {
    fn action(&self, namespace: &str) -> Action {
        match self {
            Atom::Resource {
                verb,
                group,
                resource,
                subresource,
                name,
            } => Action::Resource(ResourceAttributes {
                namespace: namespace.to_string(),
                verb: verb.clone(),
                group: group.clone(),
                version: "*".to_string(),
                resource: resource.clone(),
                subresource: subresource.clone(),
                name: name.clone(),
            }),
            Atom::Url { verb, path } => Action::NonResource(NonResourceAttributes {
                path: path.clone(),
                verb: verb.clone(),
            }),
        }
    }

    fn describe(&self) -> String {
        match self {
            Atom::Resource {
                verb,
                group,
                resource,
                subresource,
                name,
            } => {
                let mut what = resource.clone();
                if !subresource.is_empty() {
                    what = format!("{what}/{subresource}");
                }
                let group = if group.is_empty() { "core" } else { group };
                let name = if name.is_empty() {
                    String::new()
                } else {
                    format!(" named `{name}`")
                };
                format!("`{verb}` on `{what}`{name} (API group `{group}`)")
            }
            Atom::Url { verb, path } => format!("`{verb}` on URL `{path}`"),
        }
    }

    /// Whether a deny rule denies any request this atom grants (wildcards overlap everything).
    fn overlaps(&self, deny: &PolicyRule) -> bool {
        match self {
            Atom::Resource {
                verb,
                group,
                resource,
                subresource,
                name,
            } => {
                let verbs =
                    verb == "*" && !positive(&deny.verbs).is_empty() || verb_matches(deny, verb);
                let groups =
                    group == "*" && !deny.api_groups.is_empty() || api_group_matches(deny, group);
                let resources = if resource == "*" {
                    !positive(&deny.resources).is_empty()
                } else {
                    resource_matches(deny, resource, subresource)
                        || (!subresource.is_empty()
                            && positive(&deny.resources)
                                .iter()
                                .any(|r| r.ends_with(&format!("/{subresource}"))))
                };
                let names = name.is_empty() || resource_name_matches(deny, name);
                verbs && groups && resources && names
            }
            Atom::Url { verb, path } => {
                let verbs =
                    verb == "*" && !positive(&deny.verbs).is_empty() || verb_matches(deny, verb);
                let prefix = path.strip_suffix('*').map(|p| p.trim_end_matches('*'));
                let urls = deny.non_resource_urls.iter().any(|u| {
                    non_resource_url_entry_matches(u, path)
                        || prefix.is_some_and(|p| u.starts_with(p) || u == "*")
                });
                verbs && urls
            }
        }
    }
}

/// Upstream's `BreakdownRule`: every (verb, group, resource, name) of a resource rule and every
/// (verb, URL) of a non-resource rule.
fn atoms(rule: &PolicyRule) -> Vec<Atom> {
    let verbs = positive(&rule.verbs);
    let mut out = Vec::new();
    for verb in &verbs {
        for group in &rule.api_groups {
            for resource in positive(&rule.resources) {
                let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
                let names: Vec<&str> = if rule.resource_names.is_empty() {
                    vec![""]
                } else {
                    rule.resource_names.iter().map(String::as_str).collect()
                };
                for name in names {
                    out.push(Atom::Resource {
                        verb: verb.to_string(),
                        group: group.clone(),
                        resource: resource.to_string(),
                        subresource: subresource.to_string(),
                        name: name.to_string(),
                    });
                }
            }
        }
        for url in &rule.non_resource_urls {
            out.push(Atom::Url {
                verb: verb.to_string(),
                path: url.clone(),
            });
        }
    }
    out
}

/// The deny rules that apply to `user` in `namespace` (cluster bindings, and the namespace's
/// RoleBindings), walking the policy as upstream's `RulesFor` does.
fn deny_rules_for<'p>(
    policy: &'p PolicySet,
    aggregated: &'p std::collections::HashMap<String, Vec<PolicyRule>>,
    user: &UserInfo,
    namespace: &str,
) -> Vec<(&'p Binding, &'p PolicyRule)> {
    rules_for(policy, aggregated, user, namespace, |rule| rule.deny)
}

/// The rules of `pick` that apply to `user` in `namespace`.
fn rules_for<'p>(
    policy: &'p PolicySet,
    aggregated: &'p std::collections::HashMap<String, Vec<PolicyRule>>,
    user: &UserInfo,
    namespace: &str,
    pick: impl Fn(&PolicyRule) -> bool,
) -> Vec<(&'p Binding, &'p PolicyRule)> {
    let mut out = Vec::new();
    for binding in policy.bindings.iter().map(Arc::as_ref) {
        let in_scope = match binding.kind {
            BindingKind::ClusterRoleBinding => true,
            BindingKind::RoleBinding => !namespace.is_empty() && binding.namespace == namespace,
        };
        let applies = binding.subjects.iter().any(|s| {
            s.user_name(&binding.namespace).as_deref() == Some(user.name.as_str())
                || s.group_name()
                    .is_some_and(|g| user.groups.iter().any(|ug| ug == g))
        });
        if !in_scope || !applies {
            continue;
        }
        for rule in role_rules(policy, aggregated, binding).unwrap_or_default() {
            if pick(rule) {
                out.push((binding, rule));
            }
        }
    }
    out
}

fn role_rules<'p>(
    policy: &'p PolicySet,
    aggregated: &'p std::collections::HashMap<String, Vec<PolicyRule>>,
    binding: &Binding,
) -> Option<&'p [PolicyRule]> {
    let namespace = match binding.role_ref.kind {
        RoleKind::ClusterRole => "",
        RoleKind::Role => binding.namespace.as_str(),
    };
    let role = policy.roles.iter().find(|r| {
        r.kind == binding.role_ref.kind
            && r.namespace == namespace
            && r.name == binding.role_ref.name
    })?;
    match (role.kind, aggregated.get(&role.name)) {
        (RoleKind::ClusterRole, Some(rules)) => Some(rules),
        _ => Some(&role.rules),
    }
}

/// How the caller could be allowed the refused write anyway: the verb that bypasses the check.
/// `*` on every resource and every non-resource URL: cluster-admin.
fn full_authority() -> [PolicyRule; 2] {
    [
        PolicyRule {
            verbs: vec!["*".into()],
            api_groups: vec!["*".into()],
            resources: vec!["*".into()],
            ..Default::default()
        },
        PolicyRule {
            verbs: vec!["*".into()],
            non_resource_urls: vec!["*".into()],
            ..Default::default()
        },
    ]
}

fn remedy(verb: &str, kind: RoleKind, name: &str, namespace: &str) -> String {
    let resource = match kind {
        RoleKind::ClusterRole => "clusterroles",
        RoleKind::Role => "roles",
    };
    let scope = if namespace.is_empty() {
        "cluster-wide".to_string()
    } else {
        format!("in namespace `{namespace}`")
    };
    format!("holding `{verb}` on {resource} `{name}` ({RBAC_GROUP}) {scope} would allow it")
}

impl EscalationCheck<'_> {
    fn is_super(&self) -> bool {
        let config = self.engine.config();
        config.super_users.contains(&self.caller.name)
            || config
                .super_groups
                .iter()
                .any(|g| self.caller.groups.contains(g))
    }

    fn allowed(&self, action: Action) -> bool {
        let request = Request {
            user: self.caller.clone(),
            action,
        };
        self.engine.authorize(&request).decision == Decision::Allow
    }

    /// Whether the caller holds `verb` (escalate, bind) on the named role.
    fn holds_on_role(&self, verb: &str, kind: RoleKind, namespace: &str, name: &str) -> bool {
        let resource = match kind {
            RoleKind::ClusterRole => "clusterroles",
            RoleKind::Role => "roles",
        };
        self.allowed(Action::Resource(ResourceAttributes {
            namespace: namespace.to_string(),
            verb: verb.to_string(),
            group: RBAC_GROUP.to_string(),
            version: "*".to_string(),
            resource: resource.to_string(),
            subresource: String::new(),
            name: name.to_string(),
        }))
    }

    /// What of `rules` the caller cannot grant in `namespace` ("" = cluster-wide), readably.
    fn uncovered(
        &self,
        policy: &PolicySet,
        aggregated: &std::collections::HashMap<String, Vec<PolicyRule>>,
        rules: &[PolicyRule],
        namespace: &str,
    ) -> Vec<String> {
        let denies = deny_rules_for(policy, aggregated, self.caller, namespace);
        // Allow rules the caller holds only under content clauses: each covers exactly the
        // same rule restricted the same way (docs/security.md §4).
        let restricted = rules_for(policy, aggregated, self.caller, namespace, |rule| {
            !rule.deny && rule.clauses.is_some()
        });
        let mut missing = BTreeSet::new();
        for rule in rules {
            for atom in atoms(rule) {
                let action = atom.action(namespace);
                if let Some((binding, _)) = denies.iter().find(|(_, deny)| atom.overlaps(deny)) {
                    missing.insert(format!(
                        "{} (a deny rule reached through {} withholds it from you)",
                        atom.describe(),
                        binding.describe()
                    ));
                } else if self.allowed(action.clone()) {
                    // Held without restriction: covers the rule with or without clauses.
                } else if let Some(clauses) = &rule.clauses {
                    let held = restricted.iter().any(|(_, held)| {
                        held.clauses.as_deref() == Some(&**clauses) && rule_matches(held, &action)
                    });
                    if !held {
                        missing.insert(format!(
                            "{} restricted to {} (you hold it under no restriction, nor under exactly this one)",
                            atom.describe(),
                            clauses.describe()
                        ));
                    }
                } else if restricted
                    .iter()
                    .any(|(_, held)| rule_matches(held, &action))
                {
                    missing.insert(format!(
                        "{} (you hold it only under content restrictions, which this rule lacks)",
                        atom.describe()
                    ));
                } else {
                    missing.insert(atom.describe());
                }
            }
        }
        missing.into_iter().collect()
    }

    /// `Err` lists, per object, the permissions the caller would be granting without holding.
    pub fn check(&self, current: &PolicySet, objects: &[PolicyObject]) -> Result<(), String> {
        // Nothing to check (a delete of roles and bindings) costs nothing: resolving
        // aggregation below reads every ClusterRole.
        if objects.is_empty() || self.is_super() {
            return Ok(());
        }
        let aggregated = aggregated_rules(current);
        let mut refusals = Vec::new();
        for object in objects {
            let (what, missing, remedy) = match object {
                PolicyObject::Role(role) => (
                    role.describe(),
                    self.check_role(current, &aggregated, role),
                    remedy("escalate", role.kind, &role.name, &role.namespace),
                ),
                PolicyObject::Binding(binding) => (
                    binding.describe(),
                    self.check_binding(current, &aggregated, objects, binding),
                    remedy(
                        "bind",
                        binding.role_ref.kind,
                        &binding.role_ref.name,
                        &binding.namespace,
                    ),
                ),
                PolicyObject::ChangeGate(gate) => (
                    format!("ChangeGate {:?}", gate.name),
                    self.check_change_gate(&gate.name),
                    format!(
                        "holding `escalate` on {CHANGE_GATE_RESOURCE} `{}` ({FIELD_POLICY_GROUP}) would allow it",
                        gate.name
                    ),
                ),
                PolicyObject::FieldPolicy(policy) => (
                    format!("FieldPolicy {:?}", policy.name),
                    self.check_field_policy(current, &aggregated, &policy.name),
                    format!(
                        "holding `escalate` on {FIELD_POLICY_RESOURCE} `{}` ({FIELD_POLICY_GROUP}) would allow it",
                        policy.name
                    ),
                ),
            };
            if !missing.is_empty() {
                refusals.push(format!(
                    "{what}: you cannot grant what you do not hold:\n  - {}\n  ({remedy})",
                    missing.join("\n  - ")
                ));
            }
        }
        if refusals.is_empty() {
            Ok(())
        } else {
            Err(refusals.join("\n"))
        }
    }

    fn check_role(
        &self,
        current: &PolicySet,
        aggregated: &std::collections::HashMap<String, Vec<PolicyRule>>,
        role: &Role,
    ) -> Vec<String> {
        if self.holds_on_role("escalate", role.kind, &role.namespace, &role.name) {
            return Vec::new();
        }
        let mut missing = self.uncovered(current, aggregated, &role.rules, &role.namespace);
        // As upstream: an aggregation rule can gather anything, so it needs full authority.
        if role.aggregation_rule.is_some()
            && !self
                .uncovered(current, aggregated, &full_authority(), "")
                .is_empty()
        {
            missing.push(
                "an aggregationRule, which needs cluster-admin privileges (`*` on everything)"
                    .to_string(),
            );
        }
        missing
    }

    /// A ChangeGate decides which writes anybody may make, its writer's own included: creating,
    /// changing or deleting one needs a privilege of its own (issue 33), `escalate` on it,
    /// which no other grant stands in for but a rule naming that verb or `*`.
    fn check_change_gate(&self, name: &str) -> Vec<String> {
        if self.allowed(Action::Resource(ResourceAttributes {
            namespace: String::new(),
            verb: "escalate".to_string(),
            group: FIELD_POLICY_GROUP.to_string(),
            version: "*".to_string(),
            resource: CHANGE_GATE_RESOURCE.to_string(),
            subresource: String::new(),
            name: name.to_string(),
        })) {
            return Vec::new();
        }
        vec![
            "a ChangeGate decides which policy writes are made, which needs its own privilege"
                .to_string(),
        ]
    }

    /// A FieldPolicy changes what every content rule means: an ignored path needs no rule to
    /// cover it, and a path no longer protected is open to plain allows. Creating, changing or
    /// deleting one can widen access, so it needs `escalate` on it, or full authority (`*` on
    /// everything), as an aggregationRule does.
    fn check_field_policy(
        &self,
        current: &PolicySet,
        aggregated: &std::collections::HashMap<String, Vec<PolicyRule>>,
        name: &str,
    ) -> Vec<String> {
        if self.allowed(Action::Resource(ResourceAttributes {
            namespace: String::new(),
            verb: "escalate".to_string(),
            group: FIELD_POLICY_GROUP.to_string(),
            version: "*".to_string(),
            resource: FIELD_POLICY_RESOURCE.to_string(),
            subresource: String::new(),
            name: name.to_string(),
        })) || self
            .uncovered(current, aggregated, &full_authority(), "")
            .is_empty()
        {
            return Vec::new();
        }
        vec![
            "a FieldPolicy decides what content rules cover, which needs cluster-admin privileges (`*` on everything)"
                .to_string(),
        ]
    }

    fn check_binding(
        &self,
        current: &PolicySet,
        aggregated: &std::collections::HashMap<String, Vec<PolicyRule>>,
        objects: &[PolicyObject],
        binding: &Binding,
    ) -> Vec<String> {
        let role_ref = &binding.role_ref;
        if self.holds_on_role("bind", role_ref.kind, &binding.namespace, &role_ref.name) {
            return Vec::new();
        }
        let role_namespace = match role_ref.kind {
            RoleKind::ClusterRole => "",
            RoleKind::Role => binding.namespace.as_str(),
        };
        // The role as it will be after this write: written in the same manifest, or current.
        let written = objects.iter().find_map(|o| match o {
            PolicyObject::Role(r)
                if r.kind == role_ref.kind
                    && r.namespace == role_namespace
                    && r.name == role_ref.name =>
            {
                Some(r.rules.as_slice())
            }
            _ => None,
        });
        let rules = written.or_else(|| role_rules(current, aggregated, binding));
        match rules {
            Some(rules) => self.uncovered(current, aggregated, rules, &binding.namespace),
            None => vec![format!(
                "the referenced {} `{}` does not exist, so what it grants cannot be checked; binding it needs `bind` on it",
                role_ref.kind.as_str(),
                role_ref.name
            )],
        }
    }
}

#[cfg(test)]
mod tests;
