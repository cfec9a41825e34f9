//! Conditional answers (docs/policy.md §8; KEP-5681's idea): a request without content, asked
//! with `conditions_mode = RETURN`, gets the rules its answer depends on instead of the fold,
//! so that a caller without the object at hand can finish the answer later, against content,
//! with no policy lookup.
//!
//! The conditions come from the content-free answer's plan ([`ContentPlan`]), the one the
//! decision cache keeps: nothing is computed per request but this walk. A rule whose verdict
//! cannot change with content (no clause that reads content, no protected path to respect) is
//! decided here, as the fold decides it; the others are returned, in seed 003's precedence
//! order (cluster deny, cluster allow, namespace deny, namespace allow; walk order within a
//! class), up to and including the first rule that decides whatever the content. When no rule
//! before that one depends on content (or it is a deny and only denies before it do), the
//! answer is unconditional and is the fold itself: an unconditional deny answers DENY
//! outright, though the deny its explanation names may differ from the one content would.
//!
//! [`evaluate`] finishes such an answer: it rebuilds a plan of exactly the returned rules and
//! finishes it as the engine finishes its own plans, so that for any content,
//! `evaluate(returned(Authorize(no content)), content) == Authorize(content)` (checked by
//! `tests/properties/conditional.rs`).

use std::sync::Arc;

use crate::engine::chain::Verdict;
use crate::engine::content::{
    ChangeChecker, ContentError, ContentPlan, PlanRule, PlanStep, RbacPlan,
};
use crate::engine::{Decision, Response, RuleRef};
use crate::policy::content::path::DiffConfig;
use crate::policy::content::Clauses;
use crate::policy::rbac::Unmet;
use crate::request::RequestRef;

/// One returned rule: self-contained (its clauses travel with it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReturnedRule {
    pub deny: bool,
    /// Reached through a cluster binding (its precedence class).
    pub cluster: bool,
    pub rule_ref: RuleRef,
    /// The explanation when it decides.
    pub reason: String,
    /// `None`: the rule holds whatever the content (the last one returned).
    pub clauses: Option<Arc<Clauses>>,
    /// The answer of the rest of the chain (an authorizer after RBAC) when no RBAC rule
    /// decides: always last, never an RBAC rule.
    pub otherwise: bool,
    /// An allow returned because the write may touch paths a FieldPolicy protects (which an
    /// allow without a field clause does not cover): the evaluating server's FieldPolicies
    /// decide it.
    pub protected: bool,
}

/// A content-free answer in RETURN mode.
#[derive(Debug)]
pub enum Returned {
    /// The answer does not depend on content: the fold, as Authorize gives it.
    Decided(Arc<Response>),
    /// The rules the answer depends on, in precedence order.
    Conditional(Vec<ReturnedRule>),
}

/// Precedence class of a rule: cluster deny, cluster allow, namespace deny, namespace allow.
fn class(deny: bool, cluster: bool) -> u8 {
    match (cluster, deny) {
        (true, true) => 0,
        (true, false) => 1,
        (false, true) => 2,
        (false, false) => 3,
    }
}

/// The content-free answer `response` to `request` (asked without content) in RETURN mode.
pub fn returned(
    response: &Arc<Response>,
    request: RequestRef<'_>,
    config: &DiffConfig,
) -> Returned {
    let Some(plan) = &response.plan.0 else {
        return Returned::Decided(Arc::clone(response));
    };
    let protected = !config.protected_for(request.action).is_empty();
    let mut rbac: Option<&RbacPlan> = None;
    let mut otherwise: Option<&Verdict> = None;
    for step in plan.steps() {
        match step {
            PlanStep::Rbac(rbac_plan) => rbac = Some(rbac_plan),
            // Authorizers after RBAC: the first that decides answers when RBAC does not.
            PlanStep::Fixed(verdict) if rbac.is_some() && otherwise.is_none() => {
                if verdict.decision != Decision::NoOpinion {
                    otherwise = Some(verdict);
                }
            }
            PlanStep::Fixed(_) => {}
        }
    }
    let Some(rbac) = rbac else {
        return Returned::Decided(Arc::clone(response));
    };
    let mut rules: Vec<&PlanRule> = rbac.rules.iter().collect();
    rules.sort_by_key(|rule| class(rule.deny, rule.cluster));
    // Rules that cannot depend on content are decided as the fold decides them, by the
    // engine's own check of a rule against a request without content.
    let Ok(checker) = ChangeChecker::new(request.action, None, false, config) else {
        return Returned::Decided(Arc::clone(response));
    };
    let mut out = Vec::new();
    let mut terminal = false;
    for rule in rules {
        let clauses = rule.clauses.as_deref();
        // An allow without a field clause must leave protected paths alone: that reads the
        // changes.
        let narrowed = protected && !rule.deny && !clauses.is_some_and(Clauses::reads_changes);
        if narrowed || clauses.is_some_and(|c| c.depends_on_content(request.action.verb())) {
            let mut returned = ReturnedRule::of(rule);
            returned.protected = narrowed;
            out.push(returned);
            continue;
        }
        // A rule that holds (or a deny that cannot be evaluated) decides whatever the
        // content; anything else never applies.
        let mut errors = std::collections::BTreeSet::new();
        let decided = checker.changes.first().is_some_and(|change| {
            checker
                .check(
                    request.user,
                    (rule.deny, clauses),
                    change,
                    |_: Unmet<'_>| String::new(),
                    &mut errors,
                )
                .is_ok_and(|effect| effect.is_some())
        });
        if decided {
            // Nothing before it depends on content, or only denies do and it is a deny
            // itself: the answer is the fold's whatever the content (an unconditional deny
            // answers DENY outright; which deny the explanation names may differ).
            if out.is_empty() || (rule.deny && out.iter().all(|r| r.deny)) {
                return Returned::Decided(Arc::clone(response));
            }
            let mut last = ReturnedRule::of(rule);
            // It holds whatever the content: no clause left to evaluate (a deny that could not
            // be evaluated applies as an unrestricted deny, as it does in the fold).
            last.clauses = None;
            out.push(last);
            terminal = true;
            break;
        }
    }
    if out.is_empty() {
        return Returned::Decided(Arc::clone(response));
    }
    if !terminal {
        if let Some(verdict) = otherwise {
            let deny = verdict.decision == Decision::Deny;
            let by = if deny {
                &verdict.denied_by
            } else {
                &verdict.allowed_by
            };
            let rule_ref = by.first().cloned().unwrap_or_else(|| {
                crate::engine::explain::simple_rule_ref(crate::engine::explain::RBAC, "")
            });
            out.push(ReturnedRule {
                deny,
                cluster: false,
                rule_ref,
                reason: verdict.reason.clone(),
                clauses: None,
                otherwise: true,
                protected: false,
            });
        }
    }
    Returned::Conditional(out)
}

/// CEL's language name, as KEP-5681 and Kubernetes' AuthorizationConfiguration use it.
pub const CEL: &str = "k8s.io/cel";
/// authzd's JSON form of a rule's clauses.
pub const CLAUSES_JSON: &str = "authzd.io/clauses";

impl ReturnedRule {
    /// How the rule's clauses are written in an answer: (language, expression). CEL when the
    /// rule holds whatever the content (`true`) or is decided by its condition alone;
    /// otherwise the clauses as JSON (with `protectedPaths`, informative, for an allow the
    /// evaluating server's FieldPolicies decide).
    pub fn expression(&self) -> (&'static str, String) {
        match self.clauses.as_deref() {
            None if !self.protected => (CEL, "true".to_string()),
            Some(clauses)
                if !self.protected
                    && clauses.fields.is_empty()
                    && clauses.object_selector.is_none()
                    && clauses.field_selector.is_empty()
                    && clauses.label_selector.is_empty()
                    && !clauses.same_node
                    && clauses.unevaluable.is_none()
                    && clauses.condition.is_some() =>
            {
                let text = clauses.condition.as_ref().map_or("true", |c| c.text());
                (CEL, text.to_string())
            }
            clauses => {
                let mut value = clauses.map_or_else(
                    || serde_json::Value::Object(Default::default()),
                    crate::policy::render::clauses_to_value,
                );
                if self.protected {
                    value["protectedPaths"] = serde_json::Value::Bool(true);
                }
                (CLAUSES_JSON, value.to_string())
            }
        }
    }

    fn of(rule: &PlanRule) -> Self {
        Self {
            deny: rule.deny,
            cluster: rule.cluster,
            rule_ref: rule.rule_ref.clone(),
            reason: rule.reason.clone(),
            clauses: rule.clauses.clone(),
            otherwise: false,
            protected: false,
        }
    }
}

/// Finishes a conditional answer against `request`'s content (or the fold, without): the
/// returned rules as a plan of their own, finished as the engine finishes its plans.
pub fn evaluate(
    conditions: &[ReturnedRule],
    request: RequestRef<'_>,
    config: &DiffConfig,
) -> Result<Arc<Response>, ContentError> {
    let rules = conditions
        .iter()
        .filter(|c| !c.otherwise)
        .map(|c| PlanRule {
            deny: c.deny,
            cluster: c.cluster,
            clauses: c.clauses.clone(),
            rule_ref: c.rule_ref.clone(),
            reason: c.reason.clone(),
        })
        .collect();
    let mut steps = vec![PlanStep::Rbac(RbacPlan {
        rules,
        errors: Vec::new(),
    })];
    for c in conditions.iter().filter(|c| c.otherwise) {
        steps.push(PlanStep::Fixed(if c.deny {
            Verdict::deny(c.reason.clone(), c.rule_ref.clone())
        } else {
            Verdict::allow(c.reason.clone(), c.rule_ref.clone())
        }));
    }
    ContentPlan::new(steps).finish(request, config)
}

/// A subject whose answer is conditional, with its conditions (who-can in RETURN mode).
#[derive(Debug)]
pub struct ConditionalSubject {
    /// A user (asking alone) or a group (asked by a member bound nowhere else).
    pub user: bool,
    pub name: String,
    pub conditions: Vec<ReturnedRule>,
}

/// Who-can in RETURN mode: every subject a rule with content clauses reaches for `action`
/// whose answer (asking as who-can's answers are checked: a user alone, a group through a
/// member bound nowhere else) is conditional, with its conditions.
pub fn conditional_subjects(
    engine: &crate::engine::Engine,
    action: &crate::request::Action,
) -> Vec<ConditionalSubject> {
    let mut out = Vec::new();
    for (user, name) in engine.subjects_of_content_rules(action) {
        let request = crate::request::Request {
            user: crate::request::UserInfo {
                name: if user {
                    name.clone()
                } else {
                    crate::engine::content::WHO_CAN_PROBE.to_string()
                },
                groups: if user { Vec::new() } else { vec![name.clone()] },
                ..Default::default()
            },
            action: action.clone(),
        };
        let fold = engine.authorize_shared(request.as_borrowed());
        if let Returned::Conditional(conditions) =
            returned(&fold, request.as_borrowed(), engine.diff())
        {
            out.push(ConditionalSubject {
                user,
                name,
                conditions,
            });
        }
    }
    out
}
