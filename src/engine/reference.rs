//! The reference evaluator: deliberately simple, walks every binding and ABAC line for every
//! request the way upstream does. It is the oracle the compiled index is property-tested
//! against, and the baseline the benchmarks compare with. Never used to serve.

use std::collections::{BTreeSet, HashMap};

use crate::engine::explain::{self, ABAC_NO_MATCH};
use crate::engine::{
    Action, AllowedSubjects, Decision, EngineConfig, Mode, Request, Response, RuleRef, UserInfo,
};
use crate::policy::abac;
use crate::policy::aggregate::aggregated_rules;
use crate::policy::model::{Binding, BindingKind, PolicyRule, PolicySet, RoleKind, Subject};
use crate::policy::rbac::{restriction_error, rule_effect, RuleEffect};

pub struct ReferenceEvaluator {
    policy: PolicySet,
    config: EngineConfig,
    aggregated: HashMap<String, Vec<PolicyRule>>,
}

/// What one authorizer said.
struct Verdict {
    decision: Decision,
    reason: String,
    allowed_by: Vec<RuleRef>,
    denied_by: Vec<RuleRef>,
    errors: Vec<String>,
}

impl Verdict {
    fn no_opinion(reason: &str, errors: Vec<String>) -> Self {
        Verdict {
            decision: Decision::NoOpinion,
            reason: reason.to_string(),
            allowed_by: Vec::new(),
            denied_by: Vec::new(),
            errors,
        }
    }
}

impl ReferenceEvaluator {
    pub fn new(policy: &PolicySet, config: &EngineConfig) -> Self {
        let mut policy = policy.clone();
        policy.canonicalize();
        let aggregated = aggregated_rules(&policy);
        Self {
            policy,
            config: config.clone(),
            aggregated,
        }
    }

    /// The rules a binding's roleRef resolves to, or `None` when the role does not exist.
    fn role_rules(&self, binding: &Binding) -> Option<&[PolicyRule]> {
        let (kind, namespace) = match binding.role_ref.kind {
            RoleKind::ClusterRole => (RoleKind::ClusterRole, ""),
            RoleKind::Role => (RoleKind::Role, binding.namespace.as_str()),
        };
        let role = self.policy.roles.iter().find(|r| {
            r.kind == kind && r.namespace == namespace && r.name == binding.role_ref.name
        })?;
        if kind == RoleKind::ClusterRole {
            if let Some(rules) = self.aggregated.get(&role.name) {
                return Some(rules);
            }
        }
        Some(&role.rules)
    }

    /// Upstream `appliesToUser`.
    fn applies_to(subject: &Subject, user: &UserInfo, binding_namespace: &str) -> bool {
        match subject.kind.as_str() {
            "User" => subject.name == user.name,
            "Group" => user.groups.contains(&subject.name),
            "ServiceAccount" => subject
                .user_name(binding_namespace)
                .is_some_and(|name| name == user.name),
            _ => false,
        }
    }

    /// Whether a binding is consulted for a request in `namespace`.
    fn in_scope(binding: &Binding, namespace: &str) -> bool {
        match binding.kind {
            BindingKind::ClusterRoleBinding => true,
            BindingKind::RoleBinding => !namespace.is_empty() && binding.namespace == namespace,
        }
    }

    fn rbac(&self, request: &Request) -> Verdict {
        let namespace = request.action.namespace();
        let mut errors = Vec::new();
        // First match per (cluster?, deny?), in canonical binding then rule order.
        let mut cluster_deny = None;
        let mut cluster_allow = None;
        let mut ns_deny = None;
        let mut ns_allow = None;
        for binding in &self.policy.bindings {
            if !Self::in_scope(binding, namespace) {
                continue;
            }
            // Subjects match against the binding's namespace ("" for cluster bindings).
            let Some(subject) = binding
                .subjects
                .iter()
                .find(|s| Self::applies_to(s, &request.user, &binding.namespace))
            else {
                continue;
            };
            let Some(rules) = self.role_rules(binding) else {
                errors.push(explain::missing_role_error(binding));
                continue;
            };
            let cluster = binding.kind == BindingKind::ClusterRoleBinding;
            for (index, rule) in rules.iter().enumerate() {
                let (effect, restricted) = rule_effect(rule, &request.action);
                if restricted {
                    errors.push(restriction_error(
                        &explain::role_id(binding),
                        index,
                        rule.deny,
                    ));
                }
                let slot = match (effect, cluster) {
                    (RuleEffect::None, _) => continue,
                    (RuleEffect::Deny, true) => &mut cluster_deny,
                    (RuleEffect::Allow, true) => &mut cluster_allow,
                    (RuleEffect::Deny, false) => &mut ns_deny,
                    (RuleEffect::Allow, false) => &mut ns_allow,
                };
                if slot.is_none() {
                    *slot = Some((binding, subject, index));
                }
            }
        }
        let first_deny = cluster_deny.or(ns_deny);
        let first_allow = cluster_allow.or(ns_allow);
        let deciding = if cluster_deny.is_some() {
            Some((Decision::Deny, cluster_deny))
        } else if cluster_allow.is_some() {
            Some((Decision::Allow, cluster_allow))
        } else if ns_deny.is_some() {
            Some((Decision::Deny, ns_deny))
        } else if ns_allow.is_some() {
            Some((Decision::Allow, ns_allow))
        } else {
            None
        };
        let to_ref = |m: Option<(&Binding, &Subject, usize)>| {
            m.map(|(b, _, i)| explain::rbac_rule_ref(b, i))
                .into_iter()
                .collect::<Vec<_>>()
        };
        match deciding {
            Some((decision, Some((binding, subject, _)))) => Verdict {
                decision,
                reason: explain::rbac_reason(
                    if decision == Decision::Allow {
                        "allowed"
                    } else {
                        "denied"
                    },
                    binding,
                    subject,
                ),
                allowed_by: to_ref(first_allow),
                denied_by: to_ref(first_deny),
                errors,
            },
            _ => {
                let reason = if errors.is_empty() {
                    String::new()
                } else {
                    format!("RBAC: {}", crate::engine::join_errors(&errors))
                };
                Verdict::no_opinion(&reason, errors)
            }
        }
    }

    fn abac(&self, request: &Request) -> Verdict {
        for (index, rule) in self.policy.abac.iter().enumerate() {
            if abac::rule_allows(rule, request) {
                return Verdict {
                    decision: Decision::Allow,
                    reason: explain::abac_reason(rule),
                    allowed_by: vec![explain::abac_rule_ref(rule, index)],
                    denied_by: Vec::new(),
                    errors: Vec::new(),
                };
            }
        }
        Verdict::no_opinion(ABAC_NO_MATCH, Vec::new())
    }

    /// The full chain: super-users first, then each mode; the first Allow or Deny decides.
    pub fn authorize(&self, request: &Request) -> Response {
        let user = &request.user;
        if self.config.super_users.contains(&user.name) {
            return Response {
                decision: Decision::Allow,
                reason: explain::super_user_reason(&user.name),
                allowed_by: vec![explain::simple_rule_ref(explain::SUPER_USER, &user.name)],
                denied_by: Vec::new(),
                errors: Vec::new(),
            };
        }
        if let Some(group) = self
            .config
            .super_groups
            .iter()
            .find(|g| user.groups.contains(g))
        {
            return Response {
                decision: Decision::Allow,
                reason: explain::super_group_reason(group),
                allowed_by: vec![explain::simple_rule_ref(explain::SUPER_USER, group)],
                denied_by: Vec::new(),
                errors: Vec::new(),
            };
        }
        let mut reasons = Vec::new();
        let mut errors = Vec::new();
        for mode in &self.config.modes {
            let verdict = match mode {
                Mode::AlwaysAllow => Verdict {
                    decision: Decision::Allow,
                    reason: String::new(),
                    allowed_by: vec![explain::simple_rule_ref(explain::ALWAYS_ALLOW, "")],
                    denied_by: Vec::new(),
                    errors: Vec::new(),
                },
                Mode::AlwaysDeny => Verdict::no_opinion("", Vec::new()),
                Mode::Abac => self.abac(request),
                Mode::Rbac => self.rbac(request),
            };
            if verdict.decision != Decision::NoOpinion {
                return Response {
                    decision: verdict.decision,
                    reason: verdict.reason,
                    allowed_by: verdict.allowed_by,
                    denied_by: verdict.denied_by,
                    errors: verdict.errors,
                };
            }
            if !verdict.reason.is_empty() {
                reasons.push(verdict.reason);
            }
            errors.extend(verdict.errors);
        }
        Response {
            decision: Decision::NoOpinion,
            reason: reasons.join("\n"),
            allowed_by: Vec::new(),
            denied_by: Vec::new(),
            errors,
        }
    }

    /// A user name bound nowhere, for evaluating a group on its own.
    fn unbound_user_name(&self) -> String {
        let mut name = String::from("authzd:who-can-probe");
        let used = |n: &str| {
            self.config.super_users.iter().any(|u| u == n)
                || self.policy.abac.iter().any(|r| r.user == n)
                || self.policy.bindings.iter().any(|b| {
                    b.subjects
                        .iter()
                        .any(|s| s.user_name(&b.namespace).as_deref() == Some(n))
                })
        };
        while used(&name) {
            name.push('\'');
        }
        name
    }

    /// Who can: every subject named anywhere in the policy, each evaluated on its own through
    /// the full chain (a user with no groups; a group through an unbound user).
    pub fn allowed_subjects(&self, action: &Action) -> AllowedSubjects {
        let mut users = BTreeSet::new();
        let mut groups = BTreeSet::new();
        for binding in &self.policy.bindings {
            for subject in &binding.subjects {
                if let Some(user) = subject.user_name(&binding.namespace) {
                    users.insert(user);
                }
                if let Some(group) = subject.group_name() {
                    groups.insert(group.to_string());
                }
            }
        }
        for rule in &self.policy.abac {
            if !rule.user.is_empty() && rule.user != "*" {
                users.insert(rule.user.clone());
            }
            if !rule.group.is_empty() && rule.group != "*" {
                groups.insert(rule.group.clone());
            }
        }
        users.extend(self.config.super_users.iter().cloned());
        groups.extend(self.config.super_groups.iter().cloned());

        let mut result = AllowedSubjects::default();
        for user in users {
            let request = Request {
                user: UserInfo {
                    name: user.clone(),
                    ..Default::default()
                },
                action: action.clone(),
            };
            match self.authorize(&request).decision {
                Decision::Allow => result.users.push(user),
                Decision::Deny => result.denied_users.push(user),
                Decision::NoOpinion => {}
            }
        }
        let probe = self.unbound_user_name();
        for group in groups {
            let request = Request {
                user: UserInfo {
                    name: probe.clone(),
                    groups: vec![group.clone()],
                    ..Default::default()
                },
                action: action.clone(),
            };
            match self.authorize(&request).decision {
                Decision::Allow => result.groups.push(group),
                Decision::Deny => result.denied_groups.push(group),
                Decision::NoOpinion => {}
            }
        }
        if self.config.modes.contains(&Mode::AlwaysAllow) {
            result.users.insert(0, "*".to_string());
            result.groups.insert(0, "*".to_string());
        }
        result.errors = self.who_can_errors(action);
        result
    }

    /// Who-can errors: every in-scope binding whose role is missing, and every in-scope rule
    /// with attribute restrictions that matches the action. Sorted and de-duplicated.
    fn who_can_errors(&self, action: &Action) -> Vec<String> {
        let mut errors = BTreeSet::new();
        for binding in &self.policy.bindings {
            if !Self::in_scope(binding, action.namespace()) {
                continue;
            }
            match self.role_rules(binding) {
                None => {
                    errors.insert(explain::missing_role_error(binding));
                }
                Some(rules) => {
                    for (index, rule) in rules.iter().enumerate() {
                        if rule_effect(rule, action).1 {
                            errors.insert(restriction_error(
                                &explain::role_id(binding),
                                index,
                                rule.deny,
                            ));
                        }
                    }
                }
            }
        }
        errors.into_iter().collect()
    }
}
