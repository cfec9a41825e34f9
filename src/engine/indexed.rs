//! The serving engine: the authorizer chain over the compiled index.

use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use crate::engine::chain::{
    fixed_verdict, run_chain, subject_chain_decision, super_user, FirstMatches, Verdict,
};
use crate::engine::content::{
    combine, ChangeChecker, ContentError, ContentPlan, PlanRule, PlanSlot, PlanStep, RbacPlan,
    WHO_CAN_PROBE,
};
use crate::engine::explain::{self, ABAC_NO_MATCH};
use crate::engine::rules::{self, ReviewedRule, SubjectRules};
use crate::engine::shared::{HitKey, Outcome, SharedResponses};
use crate::engine::{AllowedSubjects, Decision, EngineConfig, Mode, Response};
use crate::policy::abac;
use crate::policy::compile::{apply, compile};
use crate::policy::content::path::DiffConfig;
use crate::policy::content::Clauses;
use crate::policy::delta::{DeltaError, PolicyDelta};
use crate::policy::describe;
use crate::policy::index::{
    BindingEntry, BoundSubject, Grant, Index, NamespacePartition, RuleProbe, ScopeBindings,
    ScopeGrants, SubjectName,
};
use crate::policy::model::{PolicyRule, PolicySet};
use crate::policy::rbac::{restriction_error, rule_match_on, MatchTarget, RuleEffect, Unmet};
use crate::request::{Action, Request, RequestRef, SubjectRef};

/// One compiled policy state plus the chain configuration. Immutable in what it answers (its
/// only interior state is the table of shared responses, a memo of pure results); share it
/// behind an `Arc`.
pub struct Engine {
    config: EngineConfig,
    index: Index,
    /// How changed paths are computed (the policy's FieldPolicies over the defaults).
    diff: Arc<DiffConfig>,
    /// Responses shared by requests decided the same way (see [`shared`](super::shared)).
    shared: SharedResponses,
    /// Whether the chain is made of RBAC, ABAC and webhooks only (which the engine answers as no
    /// opinion), the chains whose responses are shared.
    shares_responses: bool,
}

/// A rule reached by a request: the binding, the index of the subject that reached it, and the
/// rule's position in its role.
type Hit<'a> = (&'a BindingEntry, u32, usize);

/// A binding reached through one of the request's subjects.
type Candidates = SmallVec<[Grant; 16]>;

/// What RBAC's walk over a request's candidate rules found.
struct RbacWalk<'a> {
    /// The first rule of each precedence class among rules without content clauses.
    matches: FirstMatches<Hit<'a>>,
    errors: Vec<String>,
    /// Whether the answer needs a plan: a rule with content clauses matched, or the request
    /// is a write that may touch protected paths (which plain allows do not cover).
    planning: bool,
    /// The request is a write that may touch protected paths: every plain allow it meets may
    /// be skipped per unit of change (with an error naming it), not only the first of its
    /// class, so each goes in the plan.
    protects: bool,
    /// Empty unless planning; from then on, every rule that can decide in evaluation order
    /// (the first plain rule of each class, every plain allow of a protected write, every
    /// rule with clauses): the plan's rules.
    trail: Vec<(Hit<'a>, bool, Option<&'a Arc<Clauses>>)>,
}

impl Engine {
    /// A full build of `policy`.
    pub fn new(policy: &PolicySet, config: EngineConfig) -> Self {
        Self::with_index(compile(policy), config, Arc::new(policy.diff_config()))
    }

    fn with_index(index: Index, config: EngineConfig, diff: Arc<DiffConfig>) -> Self {
        let shares_responses = config
            .modes
            .iter()
            .all(|mode| matches!(mode, Mode::Rbac | Mode::Abac | Mode::Webhook(_)));
        Self {
            index,
            config,
            diff,
            shared: SharedResponses::default(),
            shares_responses,
        }
    }

    /// The engine for the policy this one was built from with `delta` applied: only the
    /// partitions the delta carries are rebuilt, all others are shared with `self`. Answers
    /// exactly as `Engine::new` of the new policy would. `self` is left as it was.
    pub fn update(&self, delta: &PolicyDelta) -> Result<Engine, DeltaError> {
        let diff = match &delta.field_policies {
            Some(policies) => Arc::new(crate::policy::model::diff_config_of(policies)),
            None => Arc::clone(&self.diff),
        };
        Ok(Self::with_index(
            apply(&self.index, delta)?,
            self.config.clone(),
            diff,
        ))
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    /// How changed paths are computed for this policy.
    pub fn diff(&self) -> &DiffConfig {
        &self.diff
    }

    pub fn authorize(&self, request: &Request) -> Response {
        self.authorize_borrowed(request.as_borrowed())
    }

    /// [`Self::authorize`] for a request borrowed from wherever its strings live: nothing of
    /// the request is copied. The answer is content-free (`request.content` is not read):
    /// when a rule with content clauses took part it is the fold, with the plan that
    /// finishes it (see [`content`](super::content)).
    pub fn authorize_borrowed(&self, request: RequestRef<'_>) -> Response {
        let mut plan = None;
        let mut response = run_chain(&self.config, request.user, |mode| match mode {
            Mode::Rbac => {
                let (verdict, rbac_plan) = self.rbac(request);
                plan = rbac_plan;
                verdict
            }
            _ => self.abac(request),
        });
        if let Some(rbac_plan) = plan {
            let mut rbac_plan = Some(rbac_plan);
            let steps = self
                .config
                .modes
                .iter()
                .map(|&mode| match (mode, fixed_verdict(mode)) {
                    (_, Some(verdict)) => PlanStep::Fixed(verdict),
                    (Mode::Rbac, None) => PlanStep::Rbac(rbac_plan.take().unwrap_or_default()),
                    (_, None) => PlanStep::Fixed(self.abac(request)),
                })
                .collect();
            response.plan = PlanSlot(Some(Arc::new(ContentPlan::new(steps))));
        }
        response
    }

    /// The answer for `request` with its content: [`Self::authorize_borrowed`], finished.
    pub fn authorize_content(&self, request: RequestRef<'_>) -> Result<Response, ContentError> {
        let decided = crate::engine::Decided {
            response: Arc::new(self.authorize_borrowed(request)),
            cached: false,
            cacheable: false,
        };
        let finished = crate::engine::content::finish(decided, request, &self.diff)?;
        Ok(Arc::unwrap_or_clone(finished.response))
    }

    /// [`Self::authorize_borrowed`], shared: a request decided the same way as an earlier one
    /// (same rules, same subjects, no errors) gets the same `Arc`, so no explanation is built
    /// or allocated for it. Anything else (super-users, errors, `AlwaysAllow`/`AlwaysDeny` in
    /// the chain) is answered by [`Self::authorize_borrowed`] itself.
    pub fn authorize_shared(&self, request: RequestRef<'_>) -> Arc<Response> {
        match self.outcome(request) {
            Some(outcome) => self
                .shared
                .get_or_build(outcome, || self.authorize_borrowed(request)),
            None => Arc::new(self.authorize_borrowed(request)),
        }
    }

    /// What decides `request`, when that alone determines its response; `None` otherwise.
    /// Walks the chain as `run_chain` does, without wording anything.
    fn outcome(&self, request: RequestRef<'_>) -> Option<Outcome> {
        if !self.shares_responses || super_user(&self.config, request.user).is_some() {
            return None;
        }
        for mode in &self.config.modes {
            match mode {
                Mode::Rbac => {
                    let RbacWalk {
                        matches,
                        errors,
                        planning,
                        ..
                    } = self.rbac_matches(request);
                    // Errors and plans make an answer of its own.
                    if !errors.is_empty() || planning {
                        return None;
                    }
                    if let Some((decision, allow, deny)) = matches.deciding_pair() {
                        return Some(Outcome::Rbac {
                            decision,
                            allow: allow.map(hit_key),
                            deny: deny.map(hit_key),
                        });
                    }
                }
                Mode::Abac => {
                    if let Some(line) = self.abac_line(request) {
                        return Some(Outcome::Abac { line });
                    }
                }
                // Locally no opinion: the serving layer asks the webhook.
                Mode::Webhook(_) => {}
                Mode::AlwaysAllow | Mode::AlwaysDeny => return None,
            }
        }
        Some(Outcome::NoOpinion)
    }

    /// RBAC's verdict, and its plan when a rule with content clauses matched (the verdict is
    /// then the plan's fold).
    fn rbac(&self, request: RequestRef<'_>) -> (Verdict, Option<RbacPlan>) {
        let RbacWalk {
            matches,
            errors,
            planning,
            trail,
            ..
        } = self.rbac_matches(request);
        if !planning {
            let verdict = matches.into_verdict(errors, Self::hit_reason, Self::hit_ref);
            return (verdict, None);
        }
        let rules = trail
            .into_iter()
            .map(|(hit, deny, clauses)| PlanRule {
                deny,
                cluster: hit.0.cluster,
                clauses: clauses.cloned(),
                rule_ref: Self::hit_ref(hit),
                reason: Self::hit_reason(if deny { "denied" } else { "allowed" }, hit),
            })
            .collect();
        let plan = RbacPlan { rules, errors };
        let fold = RequestRef {
            content: None,
            ..request
        };
        // Without content nothing is decoded, so resolving cannot fail; were it to, the
        // request would get no opinion and the reason, never a grant.
        let verdict = plan
            .resolve(fold, &self.diff)
            .unwrap_or_else(|e| Verdict::no_opinion(format!("RBAC: {e}"), vec![e.to_string()]));
        (verdict, Some(plan))
    }

    fn hit_reason(word: &'static str, (entry, subject, _): Hit<'_>) -> String {
        let subject = entry.subjects.get(subject as usize);
        let subject = subject.map(BoundSubject::describe).unwrap_or_default();
        describe::rbac_reason_of(word, &entry.facts(), &subject)
    }

    fn hit_ref((entry, _, index): Hit<'_>) -> crate::engine::RuleRef {
        crate::engine::RuleRef {
            authorizer: explain::RBAC,
            binding: entry.binding_id.clone(),
            role: entry.role_id.clone(),
            rule_index: u32::try_from(index).unwrap_or(u32::MAX),
            source: entry.source.clone(),
        }
    }

    /// The first allowing and denying rules RBAC finds for `request`, and its errors.
    fn rbac_matches(&self, request: RequestRef<'_>) -> RbacWalk<'_> {
        let namespace = request.action.namespace();
        let local = if namespace.is_empty() {
            None
        } else {
            self.index.namespace(namespace)
        };
        let target = MatchTarget::new(request.action);
        // Built on the first role big enough to have a rule index, so requests meeting only
        // small roles never pay for it.
        let probe = OnceCell::new();
        let protects = self.diff.protects(request.action);
        let mut walk = RbacWalk {
            matches: FirstMatches::default(),
            errors: Vec::new(),
            planning: protects,
            protects,
            trail: Vec::new(),
        };
        // Canonical binding order: cluster bindings first, then the namespace's, each by
        // position; per binding the first subject that applies, exactly as a walk over all
        // bindings would meet them.
        let mut cluster = Candidates::new();
        let mut namespaced = Candidates::new();
        ScopeGrants::collect(
            &self.index.cluster.grants,
            local.map(|ns| &ns.scope.grants),
            request.user.name,
            request.user.groups,
            &mut cluster,
            &mut namespaced,
        );
        if !cluster.is_empty() {
            self.evaluate(
                &self.index.cluster,
                None,
                &mut cluster,
                (&target, &probe),
                &mut walk,
            );
        }
        if let Some(local) = local.filter(|_| !namespaced.is_empty()) {
            self.evaluate(
                &local.scope,
                Some(local),
                &mut namespaced,
                (&target, &probe),
                &mut walk,
            );
        }
        walk
    }

    /// Evaluates the roles of one scope's candidate grants in canonical order; within a role,
    /// the rules that can match in rule order (all of a small role's, a big role's index
    /// candidates), so the first allowing and denying rules are those a full walk finds.
    fn evaluate<'a, 't>(
        &'a self,
        scope: &'a ScopeBindings,
        local: Option<&'a NamespacePartition>,
        candidates: &mut Candidates,
        (target, probe): (&'t MatchTarget<'t>, &'t OnceCell<RuleProbe<'t>>),
        walk: &mut RbacWalk<'a>,
    ) {
        candidates.sort_unstable();
        candidates.dedup_by_key(|g| g.binding);
        for grant in candidates.iter() {
            let entry = scope.binding(grant.binding);
            let Some(role) = self.index.role_entry(local, entry) else {
                walk.errors
                    .push(describe::missing_role_error_of(&entry.facts()));
                continue;
            };
            let probe = || probe.get_or_init(|| RuleProbe::new(target.action, target.combined()));
            for (index, rule) in role.candidates(probe) {
                let effect = rule_match_on(rule, target);
                if effect == RuleEffect::None {
                    continue;
                }
                let hit = (entry, grant.subject, index);
                match &rule.clauses {
                    None => {
                        let skippable = walk.protects && effect == RuleEffect::Allow;
                        if walk.planning
                            && (skippable || walk.matches.is_vacant(effect, entry.cluster))
                        {
                            walk.trail.push((hit, rule.deny, None));
                        }
                        walk.matches.record(effect, entry.cluster, hit);
                    }
                    Some(clauses) => {
                        if !walk.planning {
                            // The first rule with clauses: the plan starts with what came
                            // before it, the first plain rule of each class.
                            walk.planning = true;
                            let before: Vec<_> = walk
                                .matches
                                .recorded()
                                .map(|(deny, _, hit)| (hit, deny, None))
                                .collect();
                            walk.trail.extend(before);
                        }
                        walk.trail.push((hit, rule.deny, Some(clauses)));
                    }
                }
            }
        }
    }

    fn abac(&self, request: RequestRef<'_>) -> Verdict {
        match self.abac_line(request) {
            Some(line) => {
                let rule = &self.index.abac.rules[line as usize];
                Verdict::allow(
                    explain::abac_reason(rule),
                    explain::abac_rule_ref(rule, line as usize),
                )
            }
            None => Verdict::no_opinion(ABAC_NO_MATCH, Vec::new()),
        }
    }

    /// The first ABAC line (in file order) that allows `request`.
    fn abac_line(&self, request: RequestRef<'_>) -> Option<u32> {
        let abac = &*self.index.abac;
        let mut lines: SmallVec<[u32; 16]> = SmallVec::new();
        if let Some(found) = abac.by_user.get(request.user.name) {
            lines.extend_from_slice(found);
        }
        for group in request.user.groups.iter() {
            if let Some(found) = abac.by_group.get(group) {
                lines.extend_from_slice(found);
            }
        }
        lines.sort_unstable();
        lines.dedup();
        lines
            .into_iter()
            .find(|&line| abac::rule_allows(&abac.rules[line as usize], request))
    }

    /// What `user` may do in `namespace` (`""`: cluster-scoped requests only): every rule
    /// that applies (see [`rules`](crate::engine::rules)), found through the index's grants by
    /// subject as Authorize finds its candidate bindings — the same bindings, in the same
    /// canonical order, as the reference evaluator's walk.
    pub fn rules_for(&self, user: SubjectRef<'_>, namespace: &str) -> SubjectRules {
        let protects_paths = self.diff.protects_paths();
        let rbac = || {
            let local = if namespace.is_empty() {
                None
            } else {
                self.index.namespace(namespace)
            };
            let mut cluster = Candidates::new();
            let mut namespaced = Candidates::new();
            ScopeGrants::collect(
                &self.index.cluster.grants,
                local.map(|ns| &ns.scope.grants),
                user.name,
                user.groups,
                &mut cluster,
                &mut namespaced,
            );
            let mut reached = Vec::new();
            let mut errors = Vec::new();
            let scopes = [
                (&*self.index.cluster, None, cluster),
                // Without a partition there are no namespace candidates either.
                (
                    local.map_or(&*self.index.cluster, |ns| &ns.scope),
                    local,
                    namespaced,
                ),
            ];
            for (scope, partition, mut candidates) in scopes {
                candidates.sort_unstable();
                candidates.dedup_by_key(|g| g.binding);
                for grant in &candidates {
                    let entry = scope.binding(grant.binding);
                    let Some(rules) = self.index.role_rules(partition, entry) else {
                        errors.push(describe::missing_role_error_of(&entry.facts()));
                        continue;
                    };
                    for (index, rule) in rules.iter().enumerate() {
                        let by = Self::hit_ref((entry, grant.subject, index));
                        reached.push(ReviewedRule::rbac(rule, entry.cluster, by, protects_paths));
                    }
                }
            }
            (reached, errors)
        };
        let abac = || rules::abac_rules(&self.index.abac.rules, user, namespace);
        rules::assemble(&self.config, user, rbac, abac)
    }

    /// Who can do this: starts from the rules filed under the action's verb and resource keys,
    /// follows each matching rule to the in-scope bindings of its role, and decides each
    /// subject reached on its own through the chain.
    pub fn allowed_subjects(&self, action: &Action) -> AllowedSubjects {
        // Without content nothing is decoded, so this cannot fail; were it to, nobody would
        // be listed and the error said.
        self.allowed_subjects_content(action, None)
            .unwrap_or_else(|e| AllowedSubjects {
                errors: vec![e.to_string()],
                ..AllowedSubjects::default()
            })
    }

    /// The subjects (users `true`, groups `false`) a rule with content clauses (or a plain
    /// allow a protected path narrows) reaches for `action`: those whose answer may depend on
    /// content, for who-can in RETURN mode.
    pub fn subjects_of_content_rules(&self, action: &Action) -> Vec<(bool, String)> {
        let (mut users, mut groups) = (FxHashMap::default(), FxHashMap::default());
        let (mut errors, mut conditional) = (BTreeSet::new(), Vec::new());
        if self.config.modes.contains(&Mode::Rbac) {
            self.rbac_subjects(
                action,
                &mut users,
                &mut groups,
                &mut errors,
                &mut conditional,
            );
        }
        let mut subjects: Vec<(bool, String)> = conditional
            .iter()
            .flat_map(|(_, _, _, entry)| entry.subjects.iter())
            .filter_map(|subject| match subject.matches() {
                SubjectName::User(user) => Some((true, user.to_string())),
                SubjectName::Group(group) => Some((false, group.to_string())),
                SubjectName::Nothing => None,
            })
            .collect();
        subjects.sort_unstable();
        subjects.dedup();
        subjects
    }

    /// [`Self::allowed_subjects`] for an action on an object: every subject a rule with
    /// content clauses reaches is decided against `content`, unit of change by unit of
    /// change, as [`Self::authorize_content`] decides it.
    pub fn allowed_subjects_content(
        &self,
        action: &Action,
        content: Option<&crate::request::Content>,
    ) -> Result<AllowedSubjects, ContentError> {
        let mut user_matches: FxHashMap<&str, FirstMatches<()>> = FxHashMap::default();
        let mut group_matches: FxHashMap<&str, FirstMatches<()>> = FxHashMap::default();
        let mut errors = BTreeSet::new();
        let mut conditional = Vec::new();
        if self.config.modes.contains(&Mode::Rbac) {
            self.rbac_subjects(
                action,
                &mut user_matches,
                &mut group_matches,
                &mut errors,
                &mut conditional,
            );
        }
        let by_content = if conditional.is_empty() {
            FxHashMap::default()
        } else {
            content_decisions(
                (action, content, &self.diff),
                &conditional,
                (&user_matches, &group_matches),
                &mut errors,
            )?
        };

        let mut abac_users = BTreeSet::new();
        let mut abac_groups = BTreeSet::new();
        if self.config.modes.contains(&Mode::Abac) {
            for rule in &self.index.abac.rules {
                if !abac::rule_allows_action(rule, action.as_borrowed()) {
                    continue;
                }
                // A user with no groups matches lines naming only the user; a user bound
                // nowhere matches, through one group, lines naming only that group.
                match (rule.user.is_empty(), rule.group.is_empty()) {
                    (false, true) => {
                        abac_users.insert(rule.user.as_str());
                    }
                    (true, false) => {
                        abac_groups.insert(rule.group.as_str());
                    }
                    _ => {}
                }
            }
        }

        let modes = &self.config.modes;
        let decide = |user: bool, name: &str, matches: Option<&FirstMatches<()>>, abac_allows| {
            let rbac = match by_content.get(&(user, name)) {
                Some(&decision) => decision,
                None => matches.map_or(Decision::NoOpinion, FirstMatches::decision),
            };
            subject_chain_decision(modes, rbac, abac_allows)
        };
        let mut result = AllowedSubjects::default();
        let mut users: BTreeSet<&str> = user_matches.keys().copied().collect();
        users.extend(abac_users.iter().copied());
        users.extend(by_content.keys().filter(|(u, _)| *u).map(|(_, n)| *n));
        let mut allowed_users = BTreeSet::new();
        let mut denied_users = BTreeSet::new();
        for user in users {
            match decide(
                true,
                user,
                user_matches.get(user),
                abac_users.contains(user),
            ) {
                Decision::Allow => allowed_users.insert(user.to_string()),
                Decision::Deny => denied_users.insert(user.to_string()),
                Decision::NoOpinion => false,
            };
        }
        let mut groups: BTreeSet<&str> = group_matches.keys().copied().collect();
        groups.extend(abac_groups.iter().copied());
        groups.extend(by_content.keys().filter(|(u, _)| !*u).map(|(_, n)| *n));
        let mut allowed_groups = BTreeSet::new();
        let mut denied_groups = BTreeSet::new();
        for group in groups {
            match decide(
                false,
                group,
                group_matches.get(group),
                abac_groups.contains(group),
            ) {
                Decision::Allow => allowed_groups.insert(group.to_string()),
                Decision::Deny => denied_groups.insert(group.to_string()),
                Decision::NoOpinion => false,
            };
        }
        // Super-users bypass every authorizer, denies included.
        for user in &self.config.super_users {
            denied_users.remove(user);
            allowed_users.insert(user.clone());
        }
        for group in &self.config.super_groups {
            denied_groups.remove(group);
            allowed_groups.insert(group.clone());
        }
        if modes.contains(&Mode::AlwaysAllow) {
            allowed_users.insert("*".to_string());
            allowed_groups.insert("*".to_string());
        }
        result.users = allowed_users.into_iter().collect();
        result.groups = allowed_groups.into_iter().collect();
        result.denied_users = denied_users.into_iter().collect();
        result.denied_groups = denied_groups.into_iter().collect();
        result.errors = errors.into_iter().collect();
        Ok(result)
    }

    /// RBAC's view of every subject the action's matching rules reach, plus who-can errors.
    fn rbac_subjects<'a>(
        &'a self,
        action: &Action,
        user_matches: &mut FxHashMap<&'a str, FirstMatches<()>>,
        group_matches: &mut FxHashMap<&'a str, FirstMatches<()>>,
        errors: &mut BTreeSet<String>,
        conditional: &mut Vec<Conditional<'a>>,
    ) {
        let namespace = action.namespace();
        let target = MatchTarget::new(action.as_borrowed());
        let probe = RuleProbe::new(action.as_borrowed(), target.combined());
        // On a write that may touch protected paths, plain allows are decided per change too.
        let protects = self.diff.protects(action.as_borrowed());
        let keys = probe.resource_keys();
        let cluster = &*self.index.cluster;
        let local = if namespace.is_empty() {
            None
        } else {
            self.index.namespace(namespace)
        };
        // Records what one rule says for every subject of the bindings reaching it.
        let mut visit =
            |rule: &'a PolicyRule,
             index: usize,
             entries: &mut dyn Iterator<Item = &'a BindingEntry>| {
                let effect = rule_match_on(rule, &target);
                if effect == RuleEffect::None {
                    return;
                }
                for entry in entries {
                    if rule.clauses.is_some() || (protects && !rule.deny) {
                        // Decided subject by subject once every rule is seen.
                        conditional.push((rule.clauses.as_ref(), rule.deny, index, entry));
                        continue;
                    }
                    for subject in &entry.subjects {
                        let matches = match subject.matches() {
                            SubjectName::User(user) => user_matches.entry(user).or_default(),
                            SubjectName::Group(group) => group_matches.entry(group).or_default(),
                            SubjectName::Nothing => continue,
                        };
                        matches.record(effect, entry.cluster, ());
                    }
                }
            };

        // ClusterRole rules, to the cluster bindings and the namespace's bindings of their slot.
        let cluster_roles = &*self.index.cluster_roles;
        let local_scope = local.map(|ns| &ns.scope);
        for loc in cluster_roles.rules.candidate_rules(action.verb(), &keys) {
            let Some(rule) = cluster_roles
                .slot_rules(loc.role)
                .and_then(|rules| rules.get(loc.rule as usize))
            else {
                continue;
            };
            let mut entries =
                [Some(cluster), local_scope]
                    .into_iter()
                    .flatten()
                    .flat_map(|scope| {
                        let ids = scope.by_cluster_slot.get(&loc.role);
                        ids.into_iter().flatten().map(|id| scope.binding(*id))
                    });
            visit(rule, loc.rule as usize, &mut entries);
        }
        // The namespace's own Roles, to its bindings of them.
        if let Some(local) = local {
            for loc in local.rules.candidate_rules(action.verb(), &keys) {
                let (Some(role), Some(ids)) = (
                    local.roles.get(loc.role as usize),
                    local.scope.by_local_role.get(loc.role as usize),
                ) else {
                    continue;
                };
                let Some(rule) = role.rules().get(loc.rule as usize) else {
                    continue;
                };
                let mut entries = ids.iter().map(|id| local.scope.binding(*id));
                visit(rule, loc.rule as usize, &mut entries);
            }
        }
        // Bindings resolved at query time: the rules of their role that can match (all of a
        // small role's, a big role's index candidates), if the role exists now.
        let mut missing: Vec<&'a BindingEntry> = Vec::new();
        let scopes = [(Some(cluster), None), (local_scope, local)];
        for (scope, partition) in scopes.iter().filter_map(|(s, p)| s.map(|s| (s, *p))) {
            for id in &scope.deferred {
                let entry = scope.binding(*id);
                match self.index.role_entry(partition, entry) {
                    Some(role) => {
                        for (index, rule) in role.candidates(|| &probe) {
                            visit(rule, index, &mut std::iter::once(entry));
                        }
                    }
                    None => missing.push(entry),
                }
            }
            missing.extend(scope.missing.iter().map(|id| scope.binding(*id)));
            for slot in &cluster_roles.tombstones {
                for id in scope.by_cluster_slot.get(slot).into_iter().flatten() {
                    missing.push(scope.binding(*id));
                }
            }
        }
        for entry in missing {
            errors.insert(describe::missing_role_error_of(&entry.facts()));
        }
    }
}

/// Who-can's record per subject name, from the rules without content clauses.
type SubjectMatches<'a> = FxHashMap<&'a str, FirstMatches<()>>;

/// A rule decided per change reached by who-can (one with content clauses, or a plain allow
/// on a write that may touch protected paths): its clauses, whether it denies, its index in
/// its role, and the binding that reaches it.
type Conditional<'a> = (Option<&'a Arc<Clauses>>, bool, usize, &'a BindingEntry);

/// RBAC's decision for every subject a rule with content clauses reaches (users `true`,
/// groups `false`), per unit of change from what the plain rules said about it.
fn content_decisions<'a>(
    (action, content, config): (&'a Action, Option<&'a crate::request::Content>, &DiffConfig),
    conditional: &[Conditional<'a>],
    (users, groups): (&SubjectMatches<'a>, &SubjectMatches<'a>),
    errors: &mut BTreeSet<String>,
) -> Result<FxHashMap<(bool, &'a str), Decision>, ContentError> {
    let reads = conditional
        .iter()
        .any(|(c, ..)| c.is_some_and(|c| c.reads_changes()));
    let checker = ChangeChecker::new(action.as_borrowed(), content, reads, config)?;
    let mut subjects: Vec<(bool, &'a str)> = Vec::new();
    for (_, _, _, entry) in conditional {
        for subject in &entry.subjects {
            match subject.matches() {
                SubjectName::User(user) => subjects.push((true, user)),
                SubjectName::Group(group) => subjects.push((false, group)),
                SubjectName::Nothing => {}
            }
        }
    }
    subjects.sort_unstable();
    subjects.dedup();
    let mut decisions = FxHashMap::default();
    for (is_user, name) in subjects {
        let plain = if is_user {
            users.get(name)
        } else {
            groups.get(name)
        };
        let as_user = if is_user { name } else { WHO_CAN_PROBE };
        let group = [name];
        let as_subject = crate::request::SubjectRef {
            name: as_user,
            groups: crate::request::Groups::Borrowed(if is_user { &[] } else { &group }),
        };
        let mut per_change = Vec::with_capacity(checker.changes.len());
        for change in &checker.changes {
            let mut matches = plain.copied().unwrap_or_default();
            for &(clauses, deny, index, entry) in conditional {
                let reaches = entry.subjects.iter().any(|s| match s.matches() {
                    SubjectName::User(user) => is_user && user == name,
                    SubjectName::Group(group) => !is_user && group == name,
                    SubjectName::Nothing => false,
                });
                if !reaches {
                    continue;
                }
                let error =
                    |unmet: Unmet<'_>| restriction_error(&entry.role_id, index, deny, unmet);
                if let Some(effect) = checker.check(
                    as_subject,
                    (deny, clauses.map(|c| &**c)),
                    change,
                    error,
                    errors,
                )? {
                    matches.record(effect, entry.cluster, ());
                }
            }
            per_change.push(matches.decision());
        }
        decisions.insert((is_user, name), combine(per_change));
    }
    Ok(decisions)
}

/// A hit's identity for [`Outcome`].
fn hit_key((entry, subject, index): Hit<'_>) -> HitKey {
    HitKey {
        entry: std::ptr::from_ref(entry).addr(),
        subject,
        rule: u32::try_from(index).unwrap_or(u32::MAX),
    }
}
