//! The reference evaluator: deliberately simple, walks every binding and ABAC line for every
//! request the way upstream does. It is the oracle the compiled index is property-tested
//! against, and the baseline the benchmarks compare with. Never used to serve.

use std::collections::{BTreeSet, HashMap};

use crate::engine::chain::{run_chain, FirstMatches, Verdict};
use crate::engine::explain::{self, ABAC_NO_MATCH};
use crate::engine::{AllowedSubjects, Decision, EngineConfig, Mode, Response};
use crate::policy::abac;
use crate::policy::aggregate::aggregated_rules;
use crate::policy::describe;
use crate::policy::model::{Binding, BindingKind, PolicyRule, PolicySet, RoleKind, Subject};
use crate::policy::rbac::{restriction_error, rule_effect};
use crate::request::{Action, Request, UserInfo};

pub struct ReferenceEvaluator {
    policy: PolicySet,
    config: EngineConfig,
    aggregated: HashMap<String, Vec<PolicyRule>>,
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
        let mut matches = FirstMatches::default();
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
                errors.push(describe::missing_role_error(binding));
                continue;
            };
            let cluster = binding.kind == BindingKind::ClusterRoleBinding;
            for (index, rule) in rules.iter().enumerate() {
                let (effect, restricted) = rule_effect(rule, &request.action);
                if restricted {
                    errors.push(restriction_error(
                        &describe::role_id(binding),
                        index,
                        rule.deny,
                    ));
                }
                matches.record(effect, cluster, (binding, subject, index));
            }
        }
        matches.into_verdict(
            errors,
            |word, (binding, subject, _)| describe::rbac_reason(word, binding, subject),
            |(binding, _, index)| explain::rbac_rule_ref(binding, index),
        )
    }

    fn abac(&self, request: &Request) -> Verdict {
        for (index, rule) in self.policy.abac.iter().enumerate() {
            if abac::rule_allows(rule, request.as_borrowed()) {
                return Verdict::allow(
                    explain::abac_reason(rule),
                    explain::abac_rule_ref(rule, index),
                );
            }
        }
        Verdict::no_opinion(ABAC_NO_MATCH, Vec::new())
    }

    /// The full chain over this evaluator's RBAC and ABAC.
    pub fn authorize(&self, request: &Request) -> Response {
        run_chain(
            &self.config,
            request.user.as_borrowed(),
            |mode| match mode {
                Mode::Rbac => self.rbac(request),
                _ => self.abac(request),
            },
        )
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

    /// A subject's own decision for who-can: one that only `AlwaysAllow` admitted is covered
    /// by the `*` entry rather than listed by name.
    fn own_decision(response: &Response) -> Decision {
        let by_always_allow = response
            .allowed_by
            .first()
            .is_some_and(|r| r.authorizer == explain::ALWAYS_ALLOW);
        if by_always_allow {
            Decision::NoOpinion
        } else {
            response.decision
        }
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
            match Self::own_decision(&self.authorize(&request)) {
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
            match Self::own_decision(&self.authorize(&request)) {
                Decision::Allow => result.groups.push(group),
                Decision::Deny => result.denied_groups.push(group),
                Decision::NoOpinion => {}
            }
        }
        if self.config.modes.contains(&Mode::AlwaysAllow) {
            // Everyone the earlier authorizers left undecided is allowed: say so once.
            result.users.push("*".to_string());
            result.users.sort();
            result.groups.push("*".to_string());
            result.groups.sort();
        }
        result.errors = self.who_can_errors(action);
        result
    }

    /// Who-can errors: every in-scope binding whose role is missing, and every in-scope rule
    /// with attribute restrictions that matches the action. Sorted and de-duplicated.
    fn who_can_errors(&self, action: &Action) -> Vec<String> {
        let mut errors = BTreeSet::new();
        if !self.config.modes.contains(&Mode::Rbac) {
            return Vec::new();
        }
        for binding in &self.policy.bindings {
            if !Self::in_scope(binding, action.namespace()) {
                continue;
            }
            match self.role_rules(binding) {
                None => {
                    errors.insert(describe::missing_role_error(binding));
                }
                Some(rules) => {
                    for (index, rule) in rules.iter().enumerate() {
                        if rule_effect(rule, action).1 {
                            errors.insert(restriction_error(
                                &describe::role_id(binding),
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
