//! Decision plumbing shared by the compiled engine and the reference evaluator: seed 003's
//! precedence within RBAC, and the authorizer chain. Both evaluators differ only in how they
//! find the rules that apply (index lookups versus walking every binding), which is what the
//! differential tests compare.

use crate::engine::explain;
use crate::engine::{Decision, EncodedOnce, EngineConfig, Mode, Response, RuleRef};
use crate::policy::rbac::RuleEffect;
use crate::request::SubjectRef;

/// What one authorizer said.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub decision: Decision,
    pub reason: String,
    pub allowed_by: Vec<RuleRef>,
    pub denied_by: Vec<RuleRef>,
    pub errors: Vec<String>,
}

impl Verdict {
    pub fn no_opinion(reason: impl Into<String>, errors: Vec<String>) -> Self {
        Verdict {
            decision: Decision::NoOpinion,
            reason: reason.into(),
            allowed_by: Vec::new(),
            denied_by: Vec::new(),
            errors,
        }
    }

    pub fn deny(reason: String, by: RuleRef) -> Self {
        Verdict {
            decision: Decision::Deny,
            reason,
            allowed_by: Vec::new(),
            denied_by: vec![by],
            errors: Vec::new(),
        }
    }

    pub fn allow(reason: String, by: RuleRef) -> Self {
        Verdict {
            decision: Decision::Allow,
            reason,
            allowed_by: vec![by],
            denied_by: Vec::new(),
            errors: Vec::new(),
        }
    }
}

/// The first matching rule of each class, in evaluation order (binding order, then rule order).
///
/// Seed 003 / docs/semantics.md §6 precedence: cluster deny, cluster allow, namespace deny, namespace allow.
#[derive(Clone, Copy)]
pub struct FirstMatches<H> {
    cluster_deny: Option<H>,
    cluster_allow: Option<H>,
    namespace_deny: Option<H>,
    namespace_allow: Option<H>,
}

impl<H: Copy> Default for FirstMatches<H> {
    fn default() -> Self {
        Self {
            cluster_deny: None,
            cluster_allow: None,
            namespace_deny: None,
            namespace_allow: None,
        }
    }
}

impl<H: Copy> FirstMatches<H> {
    /// Records a rule's effect; only the first hit of each class is kept.
    pub fn record(&mut self, effect: RuleEffect, cluster: bool, hit: H) {
        let slot = match (effect, cluster) {
            (RuleEffect::None, _) => return,
            (RuleEffect::Deny, true) => &mut self.cluster_deny,
            (RuleEffect::Allow, true) => &mut self.cluster_allow,
            (RuleEffect::Deny, false) => &mut self.namespace_deny,
            (RuleEffect::Allow, false) => &mut self.namespace_allow,
        };
        if slot.is_none() {
            *slot = Some(hit);
        }
    }

    /// Whether a hit of this kind would be the first of its class (so recording it matters).
    pub fn is_vacant(&self, effect: RuleEffect, cluster: bool) -> bool {
        match (effect, cluster) {
            (RuleEffect::None, _) => false,
            (RuleEffect::Deny, true) => self.cluster_deny.is_none(),
            (RuleEffect::Allow, true) => self.cluster_allow.is_none(),
            (RuleEffect::Deny, false) => self.namespace_deny.is_none(),
            (RuleEffect::Allow, false) => self.namespace_allow.is_none(),
        }
    }

    /// The hits recorded so far: (is a deny, through a cluster binding, hit).
    pub fn recorded(&self) -> impl Iterator<Item = (bool, bool, H)> + '_ {
        [
            (true, true, self.cluster_deny),
            (false, true, self.cluster_allow),
            (true, false, self.namespace_deny),
            (false, false, self.namespace_allow),
        ]
        .into_iter()
        .filter_map(|(deny, cluster, hit)| hit.map(|h| (deny, cluster, h)))
    }

    /// The RBAC decision by precedence alone (for who-can's per-subject answers).
    pub fn decision(&self) -> Decision {
        self.deciding().map_or(Decision::NoOpinion, |(d, _)| d)
    }

    fn deciding(&self) -> Option<(Decision, H)> {
        if let Some(hit) = self.cluster_deny {
            Some((Decision::Deny, hit))
        } else if let Some(hit) = self.cluster_allow {
            Some((Decision::Allow, hit))
        } else if let Some(hit) = self.namespace_deny {
            Some((Decision::Deny, hit))
        } else {
            self.namespace_allow.map(|hit| (Decision::Allow, hit))
        }
    }

    /// What the verdict is made of: the decision, the first allowing and the first denying
    /// hit (`allowed_by` and `denied_by`). The deciding hit is one of the two, so these
    /// determine the whole verdict when there are no errors. `None` when nothing matched.
    pub fn deciding_pair(&self) -> Option<(Decision, Option<H>, Option<H>)> {
        let (decision, _) = self.deciding()?;
        Some((
            decision,
            self.cluster_allow.or(self.namespace_allow),
            self.cluster_deny.or(self.namespace_deny),
        ))
    }

    /// The RBAC verdict: the deciding rule gives the reason; `allowed_by` and `denied_by` carry
    /// the first allow and the first deny found, so an overridden rule is still explained.
    pub fn into_verdict(
        self,
        errors: Vec<String>,
        reason: impl Fn(&'static str, H) -> String,
        rule_ref: impl Fn(H) -> RuleRef,
    ) -> Verdict {
        let Some((decision, hit)) = self.deciding() else {
            let reason = if errors.is_empty() {
                String::new()
            } else {
                format!("RBAC: {}", crate::engine::join_errors(&errors))
            };
            return Verdict::no_opinion(reason, errors);
        };
        let word = if decision == Decision::Allow {
            "allowed"
        } else {
            "denied"
        };
        Verdict {
            decision,
            reason: reason(word, hit),
            allowed_by: self
                .cluster_allow
                .or(self.namespace_allow)
                .map(&rule_ref)
                .into_iter()
                .collect(),
            denied_by: self
                .cluster_deny
                .or(self.namespace_deny)
                .map(&rule_ref)
                .into_iter()
                .collect(),
            errors,
        }
    }
}

/// Why a subject bypasses the chain: it is a `--super-user`, or in this `--super-group`.
pub enum SuperUser<'c> {
    User,
    Group(&'c str),
}

/// Whether `user` is a super-user by name or by group (the name first, as [`run_chain`]
/// explains it).
pub fn super_user<'c>(config: &'c EngineConfig, user: SubjectRef<'_>) -> Option<SuperUser<'c>> {
    if config.super_users.iter().any(|s| s == user.name) {
        return Some(SuperUser::User);
    }
    config
        .super_groups
        .iter()
        .find(|g| user.groups.contains(g))
        .map(|g| SuperUser::Group(g))
}

/// Super-users first, then each authorizer of the chain; the first Allow or Deny decides, as
/// upstream's union authorizer. A final NoOpinion joins the reasons and all errors.
pub fn run_chain(
    config: &EngineConfig,
    user: SubjectRef<'_>,
    mut evaluate: impl FnMut(Mode) -> Verdict,
) -> Response {
    match super_user(config, user) {
        Some(SuperUser::User) => {
            return into_response(Verdict::allow(
                explain::super_user_reason(user.name),
                explain::simple_rule_ref(explain::SUPER_USER, user.name),
            ));
        }
        Some(SuperUser::Group(group)) => {
            return into_response(Verdict::allow(
                explain::super_group_reason(group),
                explain::simple_rule_ref(explain::SUPER_USER, group),
            ));
        }
        None => {}
    }
    fold_chain(
        config
            .modes
            .iter()
            .map(|&mode| fixed_verdict(mode).unwrap_or_else(|| evaluate(mode))),
    )
}

/// The verdict of an authorizer that needs no policy (`AlwaysAllow`, `AlwaysDeny`).
pub fn fixed_verdict(mode: Mode) -> Option<Verdict> {
    match mode {
        Mode::AlwaysAllow => Some(Verdict::allow(
            String::new(),
            explain::simple_rule_ref(explain::ALWAYS_ALLOW, ""),
        )),
        // The serving layer asks a webhook the chain reaches undecided; locally it has none.
        Mode::AlwaysDeny | Mode::Webhook(_) => Some(Verdict::no_opinion("", Vec::new())),
        Mode::Abac | Mode::Rbac => None,
    }
}

/// The chain's response from its authorizers' verdicts, in order (evaluated lazily: the
/// iterator is not advanced past the first Allow or Deny).
pub fn fold_chain(verdicts: impl IntoIterator<Item = Verdict>) -> Response {
    let mut reasons = Vec::new();
    let mut errors = Vec::new();
    for verdict in verdicts {
        if verdict.decision != Decision::NoOpinion {
            return into_response(verdict);
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
        encoded: EncodedOnce::default(),
        recorded: EncodedOnce::default(),
        plan: Default::default(),
    }
}

fn into_response(verdict: Verdict) -> Response {
    Response {
        decision: verdict.decision,
        reason: verdict.reason,
        allowed_by: verdict.allowed_by,
        denied_by: verdict.denied_by,
        errors: verdict.errors,
        encoded: EncodedOnce::default(),
        recorded: EncodedOnce::default(),
        plan: Default::default(),
    }
}

/// A subject's decision through the chain for who-can, from what RBAC and ABAC say about that
/// subject alone. `AlwaysAllow` yields NoOpinion here: everyone it admits is reported once as
/// `*` instead of by name.
pub fn subject_chain_decision(modes: &[Mode], rbac: Decision, abac_allows: bool) -> Decision {
    for mode in modes {
        match mode {
            Mode::AlwaysAllow => return Decision::NoOpinion,
            // Who-can covers local policy only; a webhook cannot list subjects (the serving
            // layer says so in the answer's evaluation error).
            Mode::AlwaysDeny | Mode::Webhook(_) => {}
            Mode::Rbac if rbac != Decision::NoOpinion => return rbac,
            Mode::Rbac => {}
            Mode::Abac if abac_allows => return Decision::Allow,
            Mode::Abac => {}
        }
    }
    Decision::NoOpinion
}
