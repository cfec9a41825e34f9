//! The reference evaluator: deliberately simple, walks every binding and ABAC line for every
//! request the way upstream does. It is the oracle the compiled index is property-tested
//! against, and the baseline the benchmarks compare with. Never used to serve.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::engine::chain::{fold_chain, run_chain, FirstMatches, Verdict};
use crate::engine::content::{aggregate, ChangeChecker, ContentError};
use crate::engine::explain::{self, ABAC_NO_MATCH};
use crate::engine::rules::{self, ReviewedRule, SubjectRules};
use crate::engine::{AllowedSubjects, Decision, EngineConfig, Mode, Response};
use crate::policy::abac;
use crate::policy::aggregate::aggregated_rules;
use crate::policy::describe;
use crate::policy::model::{Binding, BindingKind, PolicyRule, PolicySet, RoleKind, Subject};
use crate::policy::rbac::{restriction_error, rule_match_on, MatchTarget, RuleEffect, Unmet};
use crate::request::{Action, Content, Request, UserInfo};

pub struct ReferenceEvaluator {
    policy: PolicySet,
    config: EngineConfig,
    aggregated: HashMap<String, Vec<PolicyRule>>,
    diff: crate::policy::content::path::DiffConfig,
}

impl ReferenceEvaluator {
    pub fn new(policy: &PolicySet, config: &EngineConfig) -> Self {
        let mut policy = policy.clone();
        policy.canonicalize();
        let aggregated = aggregated_rules(&policy);
        let diff = policy.diff_config();
        Self {
            policy,
            config: config.clone(),
            aggregated,
            diff,
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

    /// RBAC's verdict. When a matching rule has content clauses, each unit of change of the
    /// request (docs/policy.md §4) is judged by walking every rule again.
    fn rbac(&self, request: &Request, content: Option<&Content>) -> Result<Verdict, ContentError> {
        let namespace = request.action.namespace();
        let target = MatchTarget::new(request.action.as_borrowed());
        let mut errors = Vec::new();
        // Every rule whose pattern matches, reached through an in-scope binding and the first
        // subject of it that applies, in binding order then rule order.
        let mut reached = Vec::new();
        for binding in self.policy.bindings.iter().map(Arc::as_ref) {
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
            for (index, rule) in rules.iter().enumerate() {
                let effect = rule_match_on(rule, &target);
                if effect != RuleEffect::None {
                    reached.push(((binding, subject, index), effect, rule));
                }
            }
        }
        let reason = |word, (binding, subject, _): (&Binding, &Subject, usize)| {
            describe::rbac_reason(word, binding, subject)
        };
        let rule_ref = |(binding, _, index): (&Binding, &Subject, usize)| {
            explain::rbac_rule_ref(binding, index)
        };
        let cluster = |binding: &Binding| binding.kind == BindingKind::ClusterRoleBinding;
        let protects = self.diff.protects(request.action.as_borrowed());
        if !protects && reached.iter().all(|(_, _, rule)| rule.clauses.is_none()) {
            let mut matches = FirstMatches::default();
            for (hit, effect, _) in reached {
                matches.record(effect, cluster(hit.0), hit);
            }
            return Ok(matches.into_verdict(errors, reason, rule_ref));
        }
        let reads_changes = reached
            .iter()
            .any(|(_, _, rule)| rule.clauses.as_ref().is_some_and(|c| c.reads_changes()));
        let checker = ChangeChecker::new(
            request.action.as_borrowed(),
            content,
            reads_changes,
            &self.diff,
        )?;
        let mut all_errors: BTreeSet<String> = errors.into_iter().collect();
        let mut per_change = Vec::new();
        for change in &checker.changes {
            let mut matches = FirstMatches::default();
            for &(hit, _, rule) in &reached {
                let (binding, _, index) = hit;
                let error = |unmet: Unmet<'_>| {
                    restriction_error(&describe::role_id(binding), index, rule.deny, unmet)
                };
                let clauses = rule.clauses.as_deref();
                if let Some(effect) = checker.check(
                    request.user.as_borrowed(),
                    (rule.deny, clauses),
                    change,
                    error,
                    &mut all_errors,
                )? {
                    matches.record(effect, cluster(binding), hit);
                }
            }
            per_change.push((change.clone(), matches));
        }
        Ok(aggregate(
            per_change,
            all_errors.into_iter().collect(),
            reason,
            rule_ref,
        ))
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

    /// The full chain over this evaluator's RBAC and ABAC, for a request without content.
    pub fn authorize(&self, request: &Request) -> Response {
        // Without content nothing is decoded, so this cannot fail; were it to, the answer
        // would be no opinion with the reason, never a grant.
        self.authorize_content(request, None).unwrap_or_else(|e| {
            fold_chain([Verdict::no_opinion(e.to_string(), vec![e.to_string()])])
        })
    }

    /// The full chain for a request carrying `content`.
    pub fn authorize_content(
        &self,
        request: &Request,
        content: Option<&Content>,
    ) -> Result<Response, ContentError> {
        let mut failure = None;
        let response = run_chain(
            &self.config,
            request.user.as_borrowed(),
            |mode| match mode {
                Mode::Rbac => self.rbac(request, content).unwrap_or_else(|e| {
                    failure = Some(e);
                    Verdict::no_opinion("", Vec::new())
                }),
                _ => self.abac(request),
            },
        );
        match failure {
            Some(e) => Err(e),
            None => Ok(response),
        }
    }

    /// What `user` may do in `namespace` (`""`: cluster-scoped requests only): every rule
    /// that applies, walking every binding (see [`rules`](crate::engine::rules)).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> SubjectRules {
        let protects_paths = self.diff.protects_paths();
        let rbac = || {
            let mut reached = Vec::new();
            let mut errors = Vec::new();
            for binding in self.policy.bindings.iter().map(Arc::as_ref) {
                let applies = Self::in_scope(binding, namespace)
                    && binding
                        .subjects
                        .iter()
                        .any(|s| Self::applies_to(s, user, &binding.namespace));
                if !applies {
                    continue;
                }
                let Some(rules) = self.role_rules(binding) else {
                    errors.push(describe::missing_role_error(binding));
                    continue;
                };
                let cluster = binding.kind == BindingKind::ClusterRoleBinding;
                for (index, rule) in rules.iter().enumerate() {
                    let by = explain::rbac_rule_ref(binding, index);
                    reached.push(ReviewedRule::rbac(rule, cluster, by, protects_paths));
                }
            }
            (reached, errors)
        };
        let abac = || rules::abac_rules(&self.policy.abac, user.as_borrowed(), namespace);
        rules::assemble(&self.config, user.as_borrowed(), rbac, abac)
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
        // Without content nothing is decoded, so this cannot fail.
        self.allowed_subjects_content(action, None)
            .unwrap_or_else(|e| AllowedSubjects {
                errors: vec![e.to_string()],
                ..AllowedSubjects::default()
            })
    }

    /// Who can, for an action on an object: each subject decided with `content`.
    pub fn allowed_subjects_content(
        &self,
        action: &Action,
        content: Option<&Content>,
    ) -> Result<AllowedSubjects, ContentError> {
        let mut users = BTreeSet::new();
        let mut groups = BTreeSet::new();
        for binding in self.policy.bindings.iter().map(Arc::as_ref) {
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
            match Self::own_decision(&self.authorize_content(&request, content)?) {
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
            match Self::own_decision(&self.authorize_content(&request, content)?) {
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
        result.errors = self.who_can_errors(action, content, &probe)?;
        Ok(result)
    }

    /// Who-can errors: every in-scope binding whose role is missing, and every rule decided
    /// per change (content clauses, or a plain allow on a write that may touch protected
    /// paths) that matches the action and lacks content for one of its binding's subjects. Sorted and de-duplicated.
    fn who_can_errors(
        &self,
        action: &Action,
        content: Option<&Content>,
        probe: &str,
    ) -> Result<Vec<String>, ContentError> {
        let mut errors = BTreeSet::new();
        if !self.config.modes.contains(&Mode::Rbac) {
            return Ok(Vec::new());
        }
        let target = MatchTarget::new(action.as_borrowed());
        let protects = self.diff.protects(action.as_borrowed());
        let mut conditional = Vec::new();
        for binding in self.policy.bindings.iter().map(Arc::as_ref) {
            if !Self::in_scope(binding, action.namespace()) {
                continue;
            }
            match self.role_rules(binding) {
                None => {
                    errors.insert(describe::missing_role_error(binding));
                }
                Some(rules) => {
                    for (index, rule) in rules.iter().enumerate() {
                        if (rule.clauses.is_some() || (protects && !rule.deny))
                            && rule_match_on(rule, &target) != RuleEffect::None
                        {
                            conditional.push((binding, index, rule));
                        }
                    }
                }
            }
        }
        if conditional.is_empty() {
            return Ok(errors.into_iter().collect());
        }
        let reads = conditional
            .iter()
            .any(|(_, _, rule)| rule.clauses.as_ref().is_some_and(|c| c.reads_changes()));
        let checker = ChangeChecker::new(action.as_borrowed(), content, reads, &self.diff)?;
        for (binding, index, rule) in conditional {
            for subject in &binding.subjects {
                let (user, group) =
                    match (subject.user_name(&binding.namespace), subject.group_name()) {
                        (Some(user), _) => (user, None),
                        (None, Some(group)) => (probe.to_string(), Some(group)),
                        (None, None) => continue,
                    };
                let groups: &[&str] = match &group {
                    Some(group) => std::slice::from_ref(group),
                    None => &[],
                };
                let as_subject = crate::request::SubjectRef {
                    name: &user,
                    groups: crate::request::Groups::Borrowed(groups),
                };
                for change in &checker.changes {
                    let error = |unmet: Unmet<'_>| {
                        restriction_error(&describe::role_id(binding), index, rule.deny, unmet)
                    };
                    checker.check(
                        as_subject,
                        (rule.deny, rule.clauses.as_deref()),
                        change,
                        error,
                        &mut errors,
                    )?;
                }
            }
        }
        Ok(errors.into_iter().collect())
    }
}
