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
//! *Covered* means exactly what it says: every request the rule grants in that scope is
//! allowed to the caller, negation, deny rules and the chain's precedence included
//! ([`cover`] says how that is decided on finitely many requests). Upstream's `Covers` keeps a
//! granted `*` as a literal `*`, which a grant of `["*", "-delete"]` would "cover" — and with
//! it `delete`; here a `*` is covered only where every value it stands for is. Deny rules in
//! the written role grant nothing and need no cover.
//!
//! Taking a deny rule away grants what it withheld, so it is checked as granting is: a write
//! that replaces a bound role without one of its deny rules, deletes a bound role that has
//! deny rules, or deletes or narrows a binding of such a role (a subject dropped, another role
//! referenced) needs `escalate` on the role (`bind` for a binding), or to hold what each lifted
//! deny rule withholds, in every scope it was bound in ([`EscalationCheck::check_delete`] for
//! deletes). A nadia denied `delete secrets` cannot lift her own denial.
//!
//! Content clauses (docs/security.md §4): a rule with clauses is narrower than the same rule
//! without, so an unrestricted grant covers it; a grant the caller holds only under clauses
//! covers only a rule restricted exactly the same way (a refusal says so).
//!
//! Super-users bypass the check, as upstream's super-user does (that is how policy bootstraps).

mod cover;

use std::collections::{BTreeSet, HashMap};

use crate::engine::{Decision, Engine};
use crate::policy::aggregate::aggregated_rules;
use crate::policy::model::PolicyObject;
use crate::policy::model::{
    Binding, PolicyRule, PolicySet, Role, RoleKind, CHANGE_GATE_RESOURCE, FIELD_POLICY_GROUP,
    FIELD_POLICY_RESOURCE,
};
use crate::policy::rbac::{is_negated, rule_matches};
use crate::request::{Action, Request, ResourceAttributes, UserInfo};
use cover::{Gap, Holder, Scope, Why};

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

fn negated(entries: &[String]) -> Vec<String> {
    entries.iter().filter(|e| is_negated(e)).cloned().collect()
}

/// One line of upstream's `BreakdownRule`: one positive verb, API group, resource and name of
/// a resource rule, or one verb and URL of a non-resource rule, with the rule's negations.
/// Refusals name what is not held by these; the check itself is [`cover`]'s.
#[derive(Clone, Debug)]
struct Atom {
    /// The atom as a rule of its own, to tell which requests are its.
    rule: PolicyRule,
}

impl Atom {
    fn verb(&self) -> &str {
        positive(&self.rule.verbs)
            .first()
            .copied()
            .unwrap_or_default()
    }

    fn describe(&self) -> String {
        let except = |entries: &[String]| {
            let negated = negated(entries);
            if negated.is_empty() {
                String::new()
            } else {
                let names: Vec<String> = negated
                    .iter()
                    .map(|n| format!("`{}`", n.trim_start_matches('-')))
                    .collect();
                format!(" but {}", names.join(", "))
            }
        };
        let verb = format!("`{}`{}", self.verb(), except(&self.rule.verbs));
        match self.rule.non_resource_urls.first() {
            Some(path) => format!("{verb} on URL `{path}`"),
            None => {
                let resource = positive(&self.rule.resources)
                    .first()
                    .copied()
                    .unwrap_or_default();
                let group = match self.rule.api_groups.first().map(String::as_str) {
                    Some("") | None => "core",
                    Some(group) => group,
                };
                let name = match self.rule.resource_names.first() {
                    Some(name) => format!(" named `{name}`"),
                    None => String::new(),
                };
                format!(
                    "{verb} on `{resource}`{}{name} (API group `{group}`)",
                    except(&self.rule.resources)
                )
            }
        }
    }

    /// Whether `action` is this atom itself, no wildcard, negation or name left open (a
    /// refusal then needs no example).
    fn is(&self, action: &Action) -> bool {
        let rule = &self.rule;
        let plain = |entries: &[String]| entries.len() == 1 && entries[0] != "*";
        match action {
            Action::Resource(r) => {
                plain(&rule.verbs)
                    && plain(&rule.api_groups)
                    && plain(&rule.resources)
                    && !rule.resources[0].starts_with("*/")
                    && rule.resource_names.first().map_or("", String::as_str) == r.name
            }
            Action::NonResource(n) => {
                plain(&rule.verbs)
                    && plain(&rule.non_resource_urls)
                    && !rule.non_resource_urls[0].ends_with('*')
                    && rule.non_resource_urls[0] == n.path
            }
        }
    }
}

/// Upstream's `BreakdownRule`: every (verb, group, resource, name) of a resource rule and every
/// (verb, URL) of a non-resource rule, each keeping the rule's negations.
fn atoms(rule: &PolicyRule) -> Vec<Atom> {
    let (verbs, resources) = (negated(&rule.verbs), negated(&rule.resources));
    let mut out = Vec::new();
    for verb in positive(&rule.verbs) {
        let verbs = || {
            let mut all = vec![verb.to_string()];
            all.extend(verbs.iter().cloned());
            all
        };
        for group in &rule.api_groups {
            for resource in positive(&rule.resources) {
                let mut entries = vec![resource.to_string()];
                entries.extend(resources.iter().cloned());
                let names: Vec<Vec<String>> = if rule.resource_names.is_empty() {
                    vec![Vec::new()]
                } else {
                    rule.resource_names
                        .iter()
                        .map(|n| vec![n.clone()])
                        .collect()
                };
                for resource_names in names {
                    out.push(Atom {
                        rule: PolicyRule {
                            verbs: verbs(),
                            api_groups: vec![group.clone()],
                            resources: entries.clone(),
                            resource_names,
                            ..PolicyRule::default()
                        },
                    });
                }
            }
        }
        for url in &rule.non_resource_urls {
            out.push(Atom {
                rule: PolicyRule {
                    verbs: verbs(),
                    non_resource_urls: vec![url.clone()],
                    ..PolicyRule::default()
                },
            });
        }
    }
    out
}

/// A request a refusal shows, readably, with what its made-up values stand for.
fn describe_gap(gap: &Gap, scope: Scope<'_>) -> String {
    let what = match &gap.action {
        Action::Resource(r) => {
            let mut what = r.resource.clone();
            if !r.subresource.is_empty() {
                what = format!("{what}/{}", r.subresource);
            }
            let group = if r.group.is_empty() { "core" } else { &r.group };
            let name = if r.name.is_empty() {
                String::new()
            } else {
                format!(" named `{}`", r.name)
            };
            let place = match scope {
                Scope::Namespace(_) => String::new(),
                Scope::Cluster if r.namespace.is_empty() => " at cluster scope".to_string(),
                Scope::Cluster => format!(" in namespace `{}`", r.namespace),
            };
            format!(
                "`{}` on `{what}`{name} (API group `{group}`){place}",
                r.verb
            )
        }
        Action::NonResource(n) => format!("`{}` on URL `{}`", n.verb, n.path),
    };
    if gap.fresh.is_empty() {
        return what;
    }
    let fresh: Vec<String> = gap
        .fresh
        .iter()
        .map(|(value, stands_for)| format!("`{value}` stands for {stands_for}"))
        .collect();
    format!("{what}, where {}", fresh.join(" and "))
}

/// One line of a refusal: the atom, and where it is wider than a single request, the first
/// request of it that the caller does not hold.
fn refusal_line(atom: &Atom, gap: &Gap, written: &PolicyRule, scope: Scope<'_>) -> String {
    let mut line = atom.describe();
    if let Some(clauses) = &written.clauses {
        line.push_str(&format!(" restricted to {}", clauses.describe()));
    }
    let exact = atom.is(&gap.action)
        && match (&gap.action, scope) {
            (Action::Resource(r), Scope::Cluster) => r.namespace.is_empty(),
            _ => true,
        };
    if !exact {
        line.push_str(&format!(", for example {}", describe_gap(gap, scope)));
    }
    match &gap.why {
        Why::Denied(binding) => line.push_str(&format!(
            " (a deny rule reached through {binding} withholds it from you)"
        )),
        Why::NotHeld => {}
        Why::OnlyRestricted => {
            line.push_str(" (you hold it only under content restrictions, which this rule lacks)")
        }
        Why::NotThisRestriction => {
            line.push_str(" (you hold it under no restriction, nor under exactly this one)")
        }
    }
    line
}

/// The role a binding refers to in `policy`, with its effective rules (aggregation resolved).
fn role_of<'p>(
    policy: &'p PolicySet,
    aggregated: &'p HashMap<String, Vec<PolicyRule>>,
    binding: &Binding,
) -> Option<(&'p Role, &'p [PolicyRule])> {
    let role = policy
        .roles
        .iter()
        .find(|r| r.key() == binding.role_key())?;
    let rules = match (role.kind, aggregated.get(&role.name)) {
        (RoleKind::ClusterRole, Some(rules)) => rules.as_slice(),
        _ => role.rules.as_slice(),
    };
    Some((role, rules))
}

/// A Role's or binding's scope: its namespace, or (`""`) every namespace and cluster scope.
fn scope_of(namespace: &str) -> Scope<'_> {
    if namespace.is_empty() {
        Scope::Cluster
    } else {
        Scope::Namespace(namespace)
    }
}

/// A deny rule as the grant its removal makes.
fn as_grant(rule: &PolicyRule) -> PolicyRule {
    PolicyRule {
        deny: false,
        ..rule.clone()
    }
}

/// Where `role` is bound in `policy`: cluster-wide (a ClusterRoleBinding), else the namespace
/// of each RoleBinding.
fn bound_scopes<'p>(policy: &'p PolicySet, role: &Role) -> Vec<Scope<'p>> {
    let mut namespaces = BTreeSet::new();
    for binding in &policy.bindings {
        if binding.role_key() != role.key() {
            continue;
        }
        if binding.namespace.is_empty() {
            return vec![Scope::Cluster];
        }
        namespaces.insert(binding.namespace.as_str());
    }
    namespaces.into_iter().map(Scope::Namespace).collect()
}

/// The refusal of lifting deny rules whose withheld requests `missing` lists, if any.
fn lifted_refusal(what: &str, missing: BTreeSet<String>, remedy: String) -> Option<String> {
    if missing.is_empty() {
        return None;
    }
    let missing: Vec<String> = missing.into_iter().collect();
    Some(format!(
        "{what}: you cannot lift a deny rule that withholds what you do not hold yourself:\n  - {}\n  ({remedy})",
        missing.join("\n  - ")
    ))
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

    /// What of `rules` the caller cannot grant in `scope`, readably: one line per atom of
    /// upstream's breakdown that holds a request the caller is not allowed.
    fn uncovered(
        &self,
        holder: &Holder<'_>,
        rules: &[PolicyRule],
        scope: Scope<'_>,
    ) -> Vec<String> {
        let mut missing = BTreeSet::new();
        for rule in rules {
            let atoms = atoms(rule);
            // Per atom, the request to show: the one with the fewest made-up values.
            let mut shown: Vec<Option<Gap>> = vec![None; atoms.len()];
            for gap in holder.gaps(rule, scope) {
                // The first atom holding the request (one always does: the atoms together are
                // the rule).
                let Some(index) = atoms
                    .iter()
                    .position(|a| rule_matches(&a.rule, &gap.action))
                else {
                    continue;
                };
                if shown[index]
                    .as_ref()
                    .is_none_or(|shown| gap.fresh.len() < shown.fresh.len())
                {
                    shown[index] = Some(gap);
                }
            }
            for (atom, gap) in atoms.iter().zip(&shown) {
                if let Some(gap) = gap {
                    missing.insert(refusal_line(atom, gap, rule, scope));
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
        // The caller's access, read once and only when an object is not written through
        // `escalate` or `bind`.
        let cell = std::cell::OnceCell::new();
        let holder = || {
            cell.get_or_init(|| Holder::of(current, &aggregated, self.caller, self.engine.config()))
        };
        let mut refusals = Vec::new();
        for object in objects {
            let (what, missing, remedy) = match object {
                PolicyObject::Role(role) => (
                    role.describe(),
                    self.check_role(&holder, role),
                    remedy("escalate", role.kind, &role.name, &role.namespace),
                ),
                PolicyObject::Binding(binding) => (
                    binding.describe(),
                    self.check_binding(&holder, current, &aggregated, objects, binding),
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
                    self.check_field_policy(&holder, &policy.name),
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
            if let Some(lifted) = self.lifted_by_replacing(&holder, current, &aggregated, object) {
                refusals.push(lifted);
            }
        }
        if refusals.is_empty() {
            Ok(())
        } else {
            Err(refusals.join("\n"))
        }
    }

    /// Deletes of `objects` (as they are in `current`): a FieldPolicy or a ChangeGate is
    /// checked as writing one is; a role or binding takes access away, but its deny rules too,
    /// which is checked as granting what they withheld is.
    pub fn check_delete(
        &self,
        current: &PolicySet,
        objects: &[PolicyObject],
    ) -> Result<(), String> {
        let written: Vec<PolicyObject> = objects
            .iter()
            .filter(|o| {
                matches!(
                    o,
                    PolicyObject::FieldPolicy(_) | PolicyObject::ChangeGate(_)
                )
            })
            .cloned()
            .collect();
        self.check(current, &written)?;
        // A deny rule can reach a binding through aggregation: whether one does is for
        // `lifted_binding` to say, on the aggregated rules.
        let lifts = |o: &PolicyObject| {
            matches!(o, PolicyObject::Role(r) if r.rules.iter().any(|r| r.deny))
                || matches!(o, PolicyObject::Binding(_))
        };
        if self.is_super() || !objects.iter().any(lifts) {
            return Ok(());
        }
        let aggregated = aggregated_rules(current);
        let cell = std::cell::OnceCell::new();
        let holder = || {
            cell.get_or_init(|| Holder::of(current, &aggregated, self.caller, self.engine.config()))
        };
        let refusals: Vec<String> = objects
            .iter()
            .filter_map(|object| match object {
                PolicyObject::Role(role) => {
                    let denies: Vec<&PolicyRule> = role.rules.iter().filter(|r| r.deny).collect();
                    self.lifted_role(&holder, current, role, &denies)
                }
                PolicyObject::Binding(binding) => {
                    self.lifted_binding(&holder, current, &aggregated, binding)
                }
                _ => None,
            })
            .collect();
        if refusals.is_empty() {
            Ok(())
        } else {
            Err(refusals.join("\n"))
        }
    }

    /// For a written object that replaces one in `current`: the refusal of the deny rules the
    /// replacement takes away, when the caller does not hold what they withheld.
    fn lifted_by_replacing<'h>(
        &self,
        holder: &dyn Fn() -> &'h Holder<'h>,
        current: &PolicySet,
        aggregated: &HashMap<String, Vec<PolicyRule>>,
        object: &PolicyObject,
    ) -> Option<String> {
        match object {
            PolicyObject::Role(role) => {
                let old = current.roles.iter().find(|r| r.key() == role.key())?;
                let lifted: Vec<&PolicyRule> = old
                    .rules
                    .iter()
                    .filter(|r| r.deny && !role.rules.contains(r))
                    .collect();
                self.lifted_role(holder, current, old, &lifted)
            }
            PolicyObject::Binding(binding) => {
                let old = current.bindings.iter().find(|b| b.key() == binding.key())?;
                let narrowed = old.role_ref != binding.role_ref
                    || old.subjects.iter().any(|s| !binding.subjects.contains(s));
                narrowed
                    .then(|| self.lifted_binding(holder, current, aggregated, old))
                    .flatten()
            }
            _ => None,
        }
    }

    /// The refusal of taking `denies` (deny rules of `role`) away, where the role is bound.
    fn lifted_role<'h>(
        &self,
        holder: &dyn Fn() -> &'h Holder<'h>,
        current: &PolicySet,
        role: &Role,
        denies: &[&PolicyRule],
    ) -> Option<String> {
        if denies.is_empty() {
            return None;
        }
        let scopes = bound_scopes(current, role);
        if scopes.is_empty()
            || self.holds_on_role("escalate", role.kind, &role.namespace, &role.name)
        {
            return None;
        }
        let withheld: Vec<PolicyRule> = denies.iter().map(|r| as_grant(r)).collect();
        let missing: BTreeSet<String> = scopes
            .into_iter()
            .flat_map(|scope| self.uncovered(holder(), &withheld, scope))
            .collect();
        lifted_refusal(
            &role.describe(),
            missing,
            remedy("escalate", role.kind, &role.name, &role.namespace),
        )
    }

    /// The refusal of taking away what `binding` (as it is in `current`) applies of its
    /// role's deny rules.
    fn lifted_binding<'h>(
        &self,
        holder: &dyn Fn() -> &'h Holder<'h>,
        current: &PolicySet,
        aggregated: &HashMap<String, Vec<PolicyRule>>,
        binding: &Binding,
    ) -> Option<String> {
        let (_, rules) = role_of(current, aggregated, binding)?;
        let withheld: Vec<PolicyRule> = rules.iter().filter(|r| r.deny).map(as_grant).collect();
        let role_ref = &binding.role_ref;
        if withheld.is_empty()
            || self.holds_on_role("bind", role_ref.kind, &binding.namespace, &role_ref.name)
        {
            return None;
        }
        let missing: BTreeSet<String> = self
            .uncovered(holder(), &withheld, scope_of(&binding.namespace))
            .into_iter()
            .collect();
        lifted_refusal(
            &binding.describe(),
            missing,
            remedy("bind", role_ref.kind, &role_ref.name, &binding.namespace),
        )
    }

    fn check_role<'h>(&self, holder: &dyn Fn() -> &'h Holder<'h>, role: &Role) -> Vec<String> {
        if self.holds_on_role("escalate", role.kind, &role.namespace, &role.name) {
            return Vec::new();
        }
        let mut missing = self.uncovered(holder(), &role.rules, scope_of(&role.namespace));
        // As upstream: an aggregation rule can gather anything, so it needs full authority.
        if role.aggregation_rule.is_some()
            && !self
                .uncovered(holder(), &full_authority(), Scope::Cluster)
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
    /// changing or deleting one needs a privilege of its own, `escalate` on it,
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
    fn check_field_policy<'h>(
        &self,
        holder: &dyn Fn() -> &'h Holder<'h>,
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
            .uncovered(holder(), &full_authority(), Scope::Cluster)
            .is_empty()
        {
            return Vec::new();
        }
        vec![
            "a FieldPolicy decides what content rules cover, which needs cluster-admin privileges (`*` on everything)"
                .to_string(),
        ]
    }

    fn check_binding<'h>(
        &self,
        holder: &dyn Fn() -> &'h Holder<'h>,
        current: &PolicySet,
        aggregated: &HashMap<String, Vec<PolicyRule>>,
        objects: &[PolicyObject],
        binding: &Binding,
    ) -> Vec<String> {
        let role_ref = &binding.role_ref;
        if self.holds_on_role("bind", role_ref.kind, &binding.namespace, &role_ref.name) {
            return Vec::new();
        }
        // The role as it will be after this write: written in the same manifest, or current.
        let written = objects.iter().find_map(|o| match o {
            PolicyObject::Role(r) if r.key() == binding.role_key() => Some(r.rules.as_slice()),
            _ => None,
        });
        let rules =
            written.or_else(|| role_of(current, aggregated, binding).map(|(_, rules)| rules));
        match rules {
            Some(rules) => self.uncovered(holder(), rules, scope_of(&binding.namespace)),
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
