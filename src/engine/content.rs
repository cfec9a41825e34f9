//! Content-aware rules at decision time (docs/policy.md §4).
//!
//! A request whose matching rules all lack content clauses is decided exactly as before: its
//! content is never read, not even decoded. When a matching rule has clauses (or the request
//! is a write that may touch a FieldPolicy's protected paths, which plain allows do not
//! cover), the engine
//! answers with the content-free *fold* (an allow needing content grants nothing, a deny
//! needing it applies) and attaches a [`ContentPlan`]: the candidate rules in walk order with
//! their compiled clauses, everything needed to finish the answer against content without
//! the index. The decision cache stores that answer under the content-free key (content never
//! enters a key: docs/api.md §4); [`finish`] completes it per request, after the lookup.
//!
//! Per unit of change (a changed path for writes, the root otherwise), each rule is checked
//! and recorded by seed 003's precedence; the request is denied if any unit is denied,
//! allowed if every unit is allowed, and otherwise no opinion ([`aggregate`]).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, OnceLock};

use smallvec::SmallVec;

use crate::engine::chain::{fold_chain, FirstMatches, Verdict};
use crate::engine::{Decided, Response, RuleRef};
use crate::policy::content::path::{DiffConfig, FieldPath, PathPattern};
use crate::policy::content::{changes, unprotected, Change, Clauses, Coverage, Evidence};
use crate::policy::rbac::{restriction_error, RuleEffect, Unmet};
use crate::request::{RequestRef, SubjectRef};

pub use crate::policy::content::ContentError;

/// A rule of an RBAC plan, owned: the plan lives in the cache, beyond any borrow of the index.
#[derive(Debug)]
pub struct PlanRule {
    pub deny: bool,
    /// Reached through a cluster binding (seed 003's precedence tier).
    pub cluster: bool,
    pub clauses: Option<Arc<Clauses>>,
    pub rule_ref: RuleRef,
    /// The RBAC reason when this rule decides.
    pub reason: String,
}

impl PlanRule {
    fn effect(&self) -> RuleEffect {
        if self.deny {
            RuleEffect::Deny
        } else {
            RuleEffect::Allow
        }
    }
}

/// RBAC's part of a plan: the rules that can decide, in evaluation order (the first plain
/// rule of each tier, and every rule with clauses), and the errors found without content.
#[derive(Debug, Default)]
pub struct RbacPlan {
    pub rules: Vec<PlanRule>,
    pub errors: Vec<String>,
}

/// How the clauses of the rules a request meets judge it, unit of change by unit of change,
/// with the errors of the rules whose content is missing. Shared by the engine's plans and
/// who-can, and the reference evaluator's walk, which differ only in how they find the rules.
pub struct ChangeChecker<'a> {
    verb: &'a str,
    action: crate::request::ActionRef<'a>,
    content: Option<&'a crate::request::Content>,
    /// The protected paths this write must not touch under an allow without a field clause.
    protected: SmallVec<[&'a PathPattern; 2]>,
    pub changes: SmallVec<[Change; 1]>,
}

impl<'a> ChangeChecker<'a> {
    /// The units of change of an action: computed only when a rule reads them
    /// (`reads_changes`) or the write may touch protected paths; otherwise the one root unit
    /// every rule without a field clause covers.
    pub fn new(
        action: crate::request::ActionRef<'a>,
        content: Option<&'a crate::request::Content>,
        reads_changes: bool,
        config: &'a DiffConfig,
    ) -> Result<Self, ContentError> {
        let verb = action.verb();
        let protected = config.protected_for(action);
        let changes = if reads_changes || !protected.is_empty() {
            changes(verb, content, config)?.into()
        } else {
            smallvec::smallvec![Change::Path(FieldPath::ROOT)]
        };
        Ok(Self {
            verb,
            action,
            content,
            protected,
            changes,
        })
    }

    /// Whether a rule covers `change` for `subject`, by its effect once the fold is applied:
    /// `None` when it does not apply; an error is added when content it needs is missing or
    /// its condition fails.
    pub fn check(
        &self,
        subject: SubjectRef<'_>,
        (deny, clauses): (bool, Option<&Clauses>),
        change: &Change,
        error: impl FnOnce(Unmet<'_>) -> String,
        errors: &mut BTreeSet<String>,
    ) -> Result<Option<RuleEffect>, ContentError> {
        let effect = if deny {
            RuleEffect::Deny
        } else {
            RuleEffect::Allow
        };
        // Protected paths narrow allows that do not name fields; a deny covers them as any path.
        let protection = if deny || clauses.is_some_and(Clauses::reads_changes) {
            Coverage::Covers
        } else {
            unprotected(change, &self.protected)
        };
        let coverage = match clauses {
            None => protection,
            Some(clauses) => {
                let evidence = Evidence {
                    verb: self.verb,
                    user: subject.name,
                    groups: subject.groups,
                    action: self.action,
                    content: self.content,
                    changes: &self.changes,
                };
                let own = clauses.check(deny, &evidence, change)?;
                // A rule's own verdict first: its missing content is the one to name.
                own.and(|| protection)
            }
        };
        Ok(match coverage {
            Coverage::Covers => Some(effect),
            Coverage::Not => None,
            Coverage::Missing(what) => {
                errors.insert(error(Unmet::Missing(&what)));
                deny.then_some(RuleEffect::Deny)
            }
            Coverage::Failed(how) => {
                errors.insert(error(Unmet::Failed(&how)));
                deny.then_some(RuleEffect::Deny)
            }
        })
    }
}

/// The decision over every unit of change: deny if any is denied, allow if all are allowed.
pub fn combine(
    decisions: impl IntoIterator<Item = crate::engine::Decision>,
) -> crate::engine::Decision {
    use crate::engine::Decision;
    let mut all_allowed = true;
    for decision in decisions {
        match decision {
            Decision::Deny => return Decision::Deny,
            Decision::Allow => {}
            Decision::NoOpinion => all_allowed = false,
        }
    }
    if all_allowed {
        Decision::Allow
    } else {
        Decision::NoOpinion
    }
}

/// The built-in diff configuration, for authorizers that have no policy of their own.
pub static DEFAULT_DIFF: std::sync::LazyLock<DiffConfig> =
    std::sync::LazyLock::new(DiffConfig::default);

/// The user name who-can evaluates a group's clauses as: a member bound nowhere, no node.
pub const WHO_CAN_PROBE: &str = "authzd:who-can-probe";

/// What RBAC's plan found for one request: per unit of change, the first covering rule of
/// each precedence class (as positions in the plan), and the errors.
pub struct RbacOutcome<'p> {
    plan: &'p RbacPlan,
    per_change: PerChange<FirstMatches<usize>>,
    errors: BTreeSet<String>,
}

/// Records per unit of change; most requests have one.
type PerChange<M> = SmallVec<[(Change, M); 1]>;

/// The identity of an outcome that alone determines the finished answer: one unit of change
/// with nothing to say about it, no errors, and the deciding rules.
type OutcomeKey = (crate::engine::Decision, Option<usize>, Option<usize>);

impl RbacOutcome<'_> {
    fn key(&self) -> Option<OutcomeKey> {
        match &self.per_change[..] {
            [(change, matches)] if self.errors.is_empty() && change.describe().is_none() => {
                match matches.deciding_pair() {
                    Some((decision, allow, deny)) => Some((decision, allow, deny)),
                    None => Some((crate::engine::Decision::NoOpinion, None, None)),
                }
            }
            _ => None,
        }
    }

    fn verdict(self) -> Verdict {
        let rules = &self.plan.rules;
        aggregate(
            self.per_change,
            self.errors.into_iter().collect(),
            |_, i: usize| rules.get(i).map(|r| r.reason.clone()).unwrap_or_default(),
            |i: usize| match rules.get(i) {
                Some(rule) => rule.rule_ref.clone(),
                None => crate::engine::explain::simple_rule_ref(crate::engine::explain::RBAC, ""),
            },
        )
    }
}

impl RbacPlan {
    /// RBAC's verdict for `request` with its content (or the fold, without).
    pub fn resolve(
        &self,
        request: RequestRef<'_>,
        config: &DiffConfig,
    ) -> Result<Verdict, ContentError> {
        Ok(self.outcome(request, config)?.verdict())
    }

    fn outcome(
        &self,
        request: RequestRef<'_>,
        config: &DiffConfig,
    ) -> Result<RbacOutcome<'_>, ContentError> {
        let reads = self
            .rules
            .iter()
            .any(|r| r.clauses.as_ref().is_some_and(|c| c.reads_changes()));
        let checker = ChangeChecker::new(request.action, request.content, reads, config)?;
        let mut errors: BTreeSet<String> = self.errors.iter().cloned().collect();
        let mut per_change = PerChange::new();
        for change in &checker.changes {
            let mut matches = FirstMatches::default();
            for (i, rule) in self.rules.iter().enumerate() {
                let error = |unmet: Unmet<'_>| {
                    restriction_error(
                        &rule.rule_ref.role,
                        rule.rule_ref.rule_index as usize,
                        rule.deny,
                        unmet,
                    )
                };
                if let Some(effect) = checker.check(
                    request.user,
                    (rule.deny, rule.clauses.as_deref()),
                    change,
                    error,
                    &mut errors,
                )? {
                    debug_assert!(effect == rule.effect() || effect == RuleEffect::Deny);
                    matches.record(effect, rule.cluster, i);
                }
            }
            per_change.push((change.clone(), matches));
        }
        Ok(RbacOutcome {
            plan: self,
            per_change,
            errors,
        })
    }
}

/// One verdict from the per-change records: DENY if any change is denied (explained by the
/// first), ALLOW if every change is allowed, otherwise NO_OPINION naming the first change no
/// rule covers. Errors come sorted and de-duplicated.
pub fn aggregate<H: Copy>(
    per_change: impl IntoIterator<Item = (Change, FirstMatches<H>)>,
    errors: Vec<String>,
    reason: impl Fn(&'static str, H) -> String,
    rule_ref: impl Fn(H) -> RuleRef,
) -> Verdict {
    let per_change: PerChange<FirstMatches<H>> = per_change.into_iter().collect();
    let count = per_change.len();
    let deciding = per_change
        .iter()
        .position(|(_, m)| m.decision() == crate::engine::Decision::Deny)
        .or_else(|| {
            per_change
                .iter()
                .position(|(_, m)| m.decision() != crate::engine::Decision::Allow)
        });
    let mut allowers: Vec<RuleRef> = Vec::new();
    for (_, matches) in &per_change {
        if let Some((crate::engine::Decision::Allow, Some(hit), _)) = matches.deciding_pair() {
            let r = rule_ref(hit);
            if !allowers.contains(&r) {
                allowers.push(r);
            }
        }
    }
    let Some((change, matches)) = per_change.into_iter().nth(deciding.unwrap_or(0)) else {
        return Verdict::no_opinion("", errors);
    };
    let mut verdict = matches.into_verdict(errors, &reason, &rule_ref);
    match verdict.decision {
        crate::engine::Decision::Deny => {
            if let Some(what) = change.describe() {
                verdict.reason = format!("{} ({what})", verdict.reason);
            }
        }
        crate::engine::Decision::Allow => {
            verdict.allowed_by = allowers;
            if count > 1 {
                verdict.reason = format!("{} (every one of {count} changed paths)", verdict.reason);
            } else if let Some(what) = change.describe() {
                verdict.reason = format!("{} ({what})", verdict.reason);
            }
        }
        crate::engine::Decision::NoOpinion => {
            if let Some(what) = change.describe() {
                verdict.reason = format!("RBAC: no rule covers {what}");
            }
        }
    }
    verdict
}

/// A content-free answer's way to its finished form: the verdict of every authorizer of the
/// chain, RBAC's as a plan. Super-users never get one (they bypass the chain).
pub struct ContentPlan {
    steps: Vec<PlanStep>,
    /// Finished answers by outcome, for outcomes that alone determine the answer: a hot
    /// object finished again and again builds no new answer, and takes no lock, after its first
    /// answer. Slots fill in order and are never replaced.
    finished: [OnceLock<(OutcomeKey, Arc<Response>)>; FINISHED_MEMO],
}

/// How many finished answers one plan keeps.
const FINISHED_MEMO: usize = 8;

pub enum PlanStep {
    /// An authorizer whose verdict does not depend on content.
    Fixed(Verdict),
    Rbac(RbacPlan),
}

impl fmt::Debug for ContentPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentPlan({} steps)", self.steps.len())
    }
}

impl ContentPlan {
    pub fn new(steps: Vec<PlanStep>) -> Self {
        Self {
            steps,
            finished: Default::default(),
        }
    }

    /// The steps of the chain, in order.
    pub fn steps(&self) -> &[PlanStep] {
        &self.steps
    }

    /// The chain's response for `request` with its content. Every step before RBAC said no
    /// opinion when the plan was made (or RBAC would not have run), so RBAC's outcome, found
    /// first, determines the answer.
    pub fn finish(
        &self,
        request: RequestRef<'_>,
        config: &DiffConfig,
    ) -> Result<Arc<Response>, ContentError> {
        let mut rbac = None;
        for step in &self.steps {
            if let PlanStep::Rbac(plan) = step {
                rbac = Some(plan.outcome(request, config)?);
            }
        }
        let key = rbac.as_ref().and_then(RbacOutcome::key);
        if let Some(key) = key {
            let memo = self.finished.iter().map_while(OnceLock::get);
            if let Some((_, response)) = memo.into_iter().find(|(k, _)| *k == key) {
                return Ok(response.clone());
            }
        }
        let mut verdicts: SmallVec<[Verdict; 2]> = SmallVec::new();
        for step in &self.steps {
            let verdict = match step {
                PlanStep::Fixed(verdict) => verdict.clone(),
                PlanStep::Rbac(_) => match rbac.take() {
                    Some(outcome) => outcome.verdict(),
                    None => Verdict::no_opinion("", Vec::new()),
                },
            };
            let decided = verdict.decision != crate::engine::Decision::NoOpinion;
            verdicts.push(verdict);
            if decided {
                break;
            }
        }
        let response = Arc::new(fold_chain(verdicts));
        if let Some(key) = key {
            // The first empty slot takes it; a slot another request filled first is skipped
            // (two answers for one key are equal, so a duplicate is harmless, just unused).
            for slot in &self.finished {
                match slot.get() {
                    Some((k, _)) if *k == key => break,
                    Some(_) => continue,
                    None => {
                        if slot.set((key, response.clone())).is_ok() {
                            break;
                        }
                    }
                }
            }
        }
        Ok(response)
    }
}

/// The slot a response keeps its plan in. Part of the cached value, not of the answer: two
/// responses equal in every answered field are equal whatever their plans.
#[derive(Clone, Debug, Default)]
pub struct PlanSlot(pub Option<Arc<ContentPlan>>);

impl PartialEq for PlanSlot {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for PlanSlot {}

/// `decided`, finished against the request's content when one of the rules it rests on reads
/// content. An answer without such rules is returned as it is, whatever the request carries.
/// A request without content keeps the fold (it is what finishing without content gives).
/// `config` is the diff configuration of the snapshot the answer is valid for (read at finish
/// time; a change of protected paths, which the cached fold does depend on, invalidates every
/// entry: `policy::impact`).
pub fn finish(
    decided: Decided,
    request: RequestRef<'_>,
    config: &DiffConfig,
) -> Result<Decided, ContentError> {
    // Without content the content-free answer is already the finished one: a condition that
    // reads only `request` reads what the answer is keyed on (the subject and the action),
    // and was evaluated when the answer was made.
    let (Some(plan), Some(_)) = (&decided.response.plan.0, request.content) else {
        return Ok(decided);
    };
    Ok(Decided {
        response: plan.finish(request, config)?,
        cached: decided.cached,
        cacheable: false,
    })
}
