//! Kubernetes' conditional authorization (KEP-5681, alpha; its shapes as written in
//! kubernetes/enhancements, `keps/sig-auth/5681-conditional-authorization`): a conditional
//! answer as a chain of condition sets, and such a chain evaluated. The adapter on the webhook
//! path (`api::http::conditional`) only reads and writes these as JSON.
//!
//! **Writing** ([`condition_sets`]). authzd's conditional answer is a list of rules in seed
//! 003's precedence order, the first that holds deciding ([`super::conditional`]). A KEP set is
//! "any true Deny, else any true Allow, else pass to the next set", not a first match, so the
//! answer becomes one set per precedence tier that has returned rules (cluster rules, then
//! namespace rules: within a tier denies precede allows, so "any deny, else any allow" is the
//! first match of the tier), then an unconditional set for what the authorizers after RBAC
//! answer. That decomposition is exact only when each rule holds or not for the request as a
//! whole; a rule scoped to changed paths (a `fields` clause, a condition over `changedPaths`,
//! an allow narrowed by a FieldPolicy) is decided per path, together with the others, so then
//! the whole answer is one set of two conditions (deny if the rules deny, allow if they
//! allow). A condition is written as CEL ([`CEL`]) when it is the rule's CEL condition over
//! `object`/`oldObject` alone (or `true`), which kube-apiserver can evaluate itself; otherwise
//! the set is of type [`AUTHZD_CONDITIONS`], each condition carrying its rules.
//!
//! **Evaluating** ([`ConditionChain::evaluate`]). Set by set until one is concrete; within a
//! set any true Deny denies (an error too: authzd's sets fail closed), else any true NoOpinion
//! (or error) passes, else any true Allow allows; a set with none passes; a chain with no
//! concrete set is no opinion.

use std::ops::Range;
use std::sync::Arc;

use thiserror::Error;

use super::conditional::{ReturnedRule, CEL};
use super::explain;
use super::{Decision, Response};
use crate::request::{
    Action, Content, Request, RequestRef, ResourceAttributes, SelectorRequirement, UserInfo,
};

/// Conditions authzd evaluates itself: each carries the rules it stands for.
pub const AUTHZD_CONDITIONS: &str = "authzd.io/conditions";

/// Why a chain sent back cannot be evaluated.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConditionSetError {
    /// A `k8s.io/cel` condition that does not compile (or is outside the subset authzd
    /// evaluates); the compiler's message.
    #[error("{0}")]
    Cel(String),
}

/// What a condition does when it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    Allow,
    Deny,
    /// The set cannot allow (authzd writes none; read as its rules denying, failing closed).
    NoOpinion,
}

impl Effect {
    /// As the KEP spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Allow => "Allow",
            Effect::Deny => "Deny",
            Effect::NoOpinion => "NoOpinion",
        }
    }
}

/// The language of a set's conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionsType {
    /// Kubernetes' CEL ([`CEL`]).
    Cel,
    /// authzd's own ([`AUTHZD_CONDITIONS`]).
    Authzd,
}

impl ConditionsType {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionsType::Cel => CEL,
            ConditionsType::Authzd => AUTHZD_CONDITIONS,
        }
    }
}

/// What a written condition says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expression {
    /// A CEL expression over `object` and `oldObject`.
    Cel(String),
    /// These rules of the answer (indices into it), evaluated together against the request
    /// the answer was given for.
    Rules(Range<usize>),
}

/// One condition of a written set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenCondition {
    pub id: String,
    pub effect: Effect,
    pub expression: Expression,
    pub description: String,
}

/// The authorizer names written on the sets.
pub const CLUSTER_RULES: &str = "cluster-rules";
pub const NAMESPACE_RULES: &str = "namespace-rules";
pub const WHOLE_ANSWER: &str = "rbac";
pub const AFTER_RBAC: &str = "after-rbac";

/// One set of a written chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WrittenSet {
    /// An authorizer after RBAC decides whatever the content (`allowed` or `denied`).
    Decided {
        authorizer: &'static str,
        allowed: bool,
    },
    Conditions {
        authorizer: &'static str,
        conditions_type: ConditionsType,
        /// Deny when any condition denies, else NoOpinion.
        failure_mode: Effect,
        conditions: Vec<WrittenCondition>,
    },
}

/// A conditional answer (`rules`, in precedence order, as [`super::conditional::returned`]
/// gives them) as a chain of condition sets (see the module documentation).
pub fn condition_sets(rules: &[ReturnedRule]) -> Vec<WrittenSet> {
    if rules.iter().any(path_scoped) {
        return vec![whole_answer(rules.iter().map(|rule| rule.deny))];
    }
    let mut chain = Vec::new();
    let mut start = 0;
    while start < rules.len() {
        if rules[start].otherwise {
            chain.push(WrittenSet::Decided {
                authorizer: AFTER_RBAC,
                allowed: !rules[start].deny,
            });
            start += 1;
            continue;
        }
        let cluster = rules[start].cluster;
        let end = (start..rules.len())
            .find(|&i| rules[i].otherwise || rules[i].cluster != cluster)
            .unwrap_or(rules.len());
        chain.push(tier_set(cluster, &rules[start..end], start));
        start = end;
    }
    chain
}

/// The whole answer as one set of the rules whose effects `denies` lists (in order): a Deny
/// condition true when they deny, an Allow condition true when they allow (each only when the
/// rules can answer so).
pub fn whole_answer(denies: impl ExactSizeIterator<Item = bool> + Clone) -> WrittenSet {
    let count = denies.len();
    let can_deny = denies.clone().any(|deny| deny);
    let can_allow = denies.into_iter().any(|deny| !deny);
    let mut conditions = Vec::new();
    if can_deny {
        conditions.push(WrittenCondition {
            id: "deny".into(),
            effect: Effect::Deny,
            expression: Expression::Rules(0..count),
            description: "the rules, evaluated together (per changed path), deny".into(),
        });
    }
    if can_allow {
        conditions.push(WrittenCondition {
            id: "allow".into(),
            effect: Effect::Allow,
            expression: Expression::Rules(0..count),
            description: "the rules, evaluated together (per changed path), allow".into(),
        });
    }
    WrittenSet::Conditions {
        authorizer: WHOLE_ANSWER,
        conditions_type: ConditionsType::Authzd,
        failure_mode: if can_deny {
            Effect::Deny
        } else {
            Effect::NoOpinion
        },
        conditions,
    }
}

/// Whether a rule is decided per changed path (so not alone, as a condition is).
fn path_scoped(rule: &ReturnedRule) -> bool {
    rule.protected || rule.clauses.as_deref().is_some_and(|c| c.reads_changes())
}

/// A rule that is its CEL condition over the objects alone (or holds whatever the content).
fn kube_cel(rule: &ReturnedRule) -> Option<String> {
    let (language, expression) = rule.expression();
    if language != CEL {
        return None;
    }
    let reads_more = rule
        .clauses
        .as_deref()
        .and_then(|c| c.condition.as_ref())
        .is_some_and(|c| {
            let reads = c.reads();
            reads.request || reads.changed_paths || reads.selectors || reads.context
        });
    (!reads_more).then_some(expression)
}

/// One precedence tier's rules (`rules`, the answer's from `first` on) as a condition set.
fn tier_set(cluster: bool, rules: &[ReturnedRule], first: usize) -> WrittenSet {
    let cel: Option<Vec<String>> = rules.iter().map(kube_cel).collect();
    let conditions = rules
        .iter()
        .enumerate()
        .map(|(i, rule)| WrittenCondition {
            id: format!("rule-{}", first + i),
            effect: if rule.deny {
                Effect::Deny
            } else {
                Effect::Allow
            },
            expression: match &cel {
                Some(texts) => Expression::Cel(texts[i].clone()),
                None => Expression::Rules(first + i..first + i + 1),
            },
            description: description(rule),
        })
        .collect();
    WrittenSet::Conditions {
        authorizer: if cluster {
            CLUSTER_RULES
        } else {
            NAMESPACE_RULES
        },
        conditions_type: if cel.is_some() {
            ConditionsType::Cel
        } else {
            ConditionsType::Authzd
        },
        failure_mode: if rules.iter().any(|r| r.deny) {
            Effect::Deny
        } else {
            Effect::NoOpinion
        },
        conditions,
    }
}

/// `binding -> role rules[i]`, or the authorizer's name.
fn description(rule: &ReturnedRule) -> String {
    let r = &rule.rule_ref;
    let mut text = String::new();
    if !r.binding.is_empty() {
        text.push_str(&r.binding);
        text.push_str(" -> ");
    }
    if !r.role.is_empty() {
        text.push_str(&format!("{} rules[{}]", r.role, r.rule_index));
    } else {
        text.push_str(r.authorizer);
    }
    text
}

// --- Evaluating a chain sent back -------------------------------------------------------------

/// One condition to evaluate: the rules it stands for and the request they are asked about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingCondition {
    pub id: String,
    pub effect: Effect,
    pub rules: Vec<ReturnedRule>,
    pub request: Request,
    /// Which of the chain's contents (the objects, with this request's selectors).
    pub content: usize,
}

/// The selectors a request carries (KEP-4601's field and label selectors), which rules read as
/// content.
pub type Selectors = (Vec<SelectorRequirement>, Vec<SelectorRequirement>);

impl PendingCondition {
    /// A `k8s.io/cel` condition as a rule that holds when the expression does: an allow rule
    /// for an Allow condition, else a deny rule (so that an evaluation error counts as true,
    /// as the fold counts a deny that cannot be evaluated). `at` names the condition in
    /// explanations. It reads only `object` and `oldObject`, so it is asked under a
    /// placeholder request: no attribute matters but the verb's kind, not a write, so that
    /// the condition is evaluated once over the whole request (a write's rules are evaluated
    /// per changed path), as a condition of a set is.
    pub fn cel(
        id: String,
        effect: Effect,
        text: &str,
        at: &str,
    ) -> Result<(Self, Selectors), ConditionSetError> {
        let clauses = if text.trim() == "true" {
            None
        } else {
            let condition = crate::policy::content::condition::Condition::compile(text)
                .map_err(ConditionSetError::Cel)?;
            Some(Arc::new(crate::policy::content::Clauses {
                condition: Some(condition),
                ..Default::default()
            }))
        };
        let rule = ReturnedRule {
            deny: effect != Effect::Allow,
            cluster: false,
            rule_ref: explain::simple_rule_ref(explain::RBAC, ""),
            reason: format!("the condition at {at} holds"),
            clauses,
            otherwise: false,
            protected: false,
        };
        let request = Request {
            user: UserInfo::default(),
            action: Action::Resource(ResourceAttributes {
                verb: "get".to_string(),
                resource: "*".to_string(),
                ..Default::default()
            }),
        };
        let condition = PendingCondition {
            id,
            effect,
            rules: vec![rule],
            request,
            content: 0,
        };
        Ok((condition, Selectors::default()))
    }

    /// Whether the condition holds, given its rules' answer; and the answer's error.
    fn holds(&self, response: &Response) -> (bool, String) {
        let error = response.evaluation_error();
        let holds = match self.effect {
            Effect::Allow => response.decision == Decision::Allow,
            // A deny rule that cannot be evaluated applies (the fold's rule): Deny.
            Effect::Deny => response.decision == Decision::Deny,
            // authzd writes none; one read as its rules denying, failing closed.
            Effect::NoOpinion => response.decision == Decision::Deny || !error.is_empty(),
        };
        (holds, error)
    }
}

/// One condition set of a chain sent back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PendingSet {
    Allowed,
    Denied,
    Conditions(Vec<PendingCondition>),
    /// A nested chain (a composite authorizer's).
    Chain(Vec<PendingSet>),
}

/// A chain sent back, with the content it is evaluated against.
#[derive(Clone, Debug, Default)]
pub struct ConditionChain {
    pub sets: Vec<PendingSet>,
    /// The objects sent, with each distinct request's selectors (in practice one: the
    /// conditions of one answer share its request): decoded once each.
    pub contents: Vec<Content>,
    /// Condition sets in the chain, nested ones included (for the explanation).
    pub set_count: usize,
}

/// The concrete decision a chain evaluates to, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainVerdict {
    pub decision: Decision,
    pub reason: String,
    pub evaluation_error: String,
}

/// Finishes returned rules against a request with content (the server's EvaluateConditions
/// path, or the engine's offline), failing as `E`.
pub type Finish<'a, E> =
    dyn FnMut(&[ReturnedRule], RequestRef<'_>) -> Result<Arc<Response>, E> + 'a;

impl ConditionChain {
    /// The content `objects` with `selectors`, added on first use; its index.
    pub fn content_for(&mut self, objects: &Content, selectors: Selectors) -> usize {
        let found = self
            .contents
            .iter()
            .position(|c| (&c.field_selector, &c.label_selector) == (&selectors.0, &selectors.1));
        if let Some(i) = found {
            return i;
        }
        let mut content = objects.clone();
        (content.field_selector, content.label_selector) = selectors;
        self.contents.push(content);
        self.contents.len() - 1
    }

    /// The chain a written one stands for, evaluated for `request` with `objects` (what a
    /// caller sends back: `rules` are the answer's, as the sets' [`Expression::Rules`] index
    /// them; the request's selectors travel with its conditions).
    pub fn of_written(
        sets: &[WrittenSet],
        rules: &[ReturnedRule],
        request: &Request,
        objects: &Content,
    ) -> Result<Self, ConditionSetError> {
        let mut chain = ConditionChain::default();
        let selectors = (
            objects.field_selector.clone(),
            objects.label_selector.clone(),
        );
        let mut bare = objects.clone();
        (bare.field_selector, bare.label_selector) = (Vec::new(), Vec::new());
        for set in sets {
            chain.set_count += 1;
            let pending = match set {
                WrittenSet::Decided { allowed: true, .. } => PendingSet::Allowed,
                WrittenSet::Decided { allowed: false, .. } => PendingSet::Denied,
                WrittenSet::Conditions { conditions, .. } => {
                    let mut pending = Vec::with_capacity(conditions.len());
                    for condition in conditions {
                        let (condition, selectors) = match &condition.expression {
                            Expression::Cel(text) => PendingCondition::cel(
                                condition.id.clone(),
                                condition.effect,
                                text,
                                &condition.id,
                            )?,
                            Expression::Rules(range) => (
                                PendingCondition {
                                    id: condition.id.clone(),
                                    effect: condition.effect,
                                    rules: rules.get(range.clone()).unwrap_or_default().to_vec(),
                                    request: request.clone(),
                                    content: 0,
                                },
                                selectors.clone(),
                            ),
                        };
                        let content = chain.content_for(&bare, selectors);
                        pending.push(PendingCondition {
                            content,
                            ..condition
                        });
                    }
                    PendingSet::Conditions(pending)
                }
            };
            chain.sets.push(pending);
        }
        Ok(chain)
    }

    /// The chain evaluated as the KEP says (see the module documentation); `finish` finishes
    /// a condition's rules against its request and content.
    pub fn evaluate<E>(&self, finish: &mut Finish<'_, E>) -> Result<ChainVerdict, E> {
        let mut evaluate_one = |condition: &PendingCondition| -> Result<(bool, String), E> {
            let content = self.contents.get(condition.content);
            let response = finish(&condition.rules, condition.request.with_content(content))?;
            Ok(condition.holds(&response))
        };
        let verdict = evaluate_chain(&self.sets, &mut evaluate_one)?;
        Ok(verdict.unwrap_or(ChainVerdict {
            decision: Decision::NoOpinion,
            reason: format!(
                "no condition of the {} condition set(s) decided the request",
                self.set_count
            ),
            evaluation_error: String::new(),
        }))
    }
}

/// Whether one condition holds, and its rules' evaluation error.
type EvaluateOne<'a, E> = dyn FnMut(&PendingCondition) -> Result<(bool, String), E> + 'a;

/// The first concrete verdict of `chain`, or `None` (no opinion).
fn evaluate_chain<E>(
    chain: &[PendingSet],
    evaluate_one: &mut EvaluateOne<'_, E>,
) -> Result<Option<ChainVerdict>, E> {
    for set in chain {
        let verdict = match set {
            PendingSet::Allowed => Some(ChainVerdict {
                decision: Decision::Allow,
                reason: "allowed unconditionally after the conditional sets".into(),
                evaluation_error: String::new(),
            }),
            PendingSet::Denied => Some(ChainVerdict {
                decision: Decision::Deny,
                reason: "denied unconditionally after the conditional sets".into(),
                evaluation_error: String::new(),
            }),
            PendingSet::Chain(nested) => evaluate_chain(nested, evaluate_one)?,
            PendingSet::Conditions(conditions) => evaluate_set(conditions, evaluate_one)?,
        };
        if verdict.is_some() {
            return Ok(verdict);
        }
    }
    Ok(None)
}

/// One set: any true Deny denies, else any true NoOpinion passes, else any true Allow allows.
fn evaluate_set<E>(
    conditions: &[PendingCondition],
    evaluate_one: &mut EvaluateOne<'_, E>,
) -> Result<Option<ChainVerdict>, E> {
    let mut errors = Vec::new();
    for effect in [Effect::Deny, Effect::NoOpinion, Effect::Allow] {
        for condition in conditions.iter().filter(|c| c.effect == effect) {
            let (holds, error) = evaluate_one(condition)?;
            if !error.is_empty() {
                errors.push(format!("condition '{}': {error}", condition.id));
            }
            if !holds {
                continue;
            }
            let (decision, verb) = match effect {
                Effect::Deny => (Decision::Deny, "denied"),
                Effect::Allow => (Decision::Allow, "allowed"),
                // This set cannot allow; later sets may.
                Effect::NoOpinion => return Ok(None),
            };
            return Ok(Some(ChainVerdict {
                decision,
                reason: format!("condition '{}' {verb} the request", condition.id),
                evaluation_error: errors.join("; "),
            }));
        }
    }
    Ok(None)
}
