//! The decision engine: request attributes in, an explained decision out.
//!
//! Synchronous and pure: no I/O, no tokio, no protobuf. [`Engine`] runs the authorizer chain of
//! `--authorization-mode` over one compiled [`Index`](crate::policy::index::Index); the
//! reference evaluator in [`reference`] answers the same questions by walking every binding the
//! way upstream does, and property tests hold the two to the same answers.

pub mod chain;
pub mod condition_sets;
pub mod conditional;
pub mod content;
pub mod delta;
pub mod escalation;
pub mod explain;
pub mod gate;
pub mod indexed;
pub mod reference;
pub mod rules;
pub mod search;
pub mod shared;

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

pub use indexed::Engine;

use crate::request::{Action, RequestRef};

/// Three-valued, as upstream: a final `NoOpinion` is a deny.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    Allow,
    Deny,
    NoOpinion,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "ALLOW",
            Decision::Deny => "DENY",
            Decision::NoOpinion => "NO_OPINION",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The authorizers of `--authorization-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    AlwaysAllow,
    /// Answers NoOpinion, as upstream does, so `AlwaysDeny,AlwaysAllow` allows.
    AlwaysDeny,
    Abac,
    /// RBAC plus seed 003's deny rules and negation.
    Rbac,
    /// A remote SubjectAccessReview endpoint, the `n`th configured (kube-apiserver's `Webhook`
    /// mode). The engine never does I/O: it treats the webhook as no opinion, and the serving
    /// layer asks it whenever the chain reaches it undecided (`serving::Delegation`).
    Webhook(u16),
}

impl Mode {
    /// Every authorizer a chain can hold, in the order error messages list them (a webhook as
    /// the first configured).
    pub const ALL: [Mode; 5] = [
        Mode::AlwaysAllow,
        Mode::AlwaysDeny,
        Mode::Abac,
        Mode::Rbac,
        Mode::Webhook(0),
    ];

    /// The authorizer's name, as `--authorization-mode`, AuthorizationConfiguration's `type`
    /// and explanations (`RuleRef::authorizer`) spell it: the one table of names.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::AlwaysAllow => "AlwaysAllow",
            Mode::AlwaysDeny => "AlwaysDeny",
            Mode::Abac => "ABAC",
            Mode::Rbac => "RBAC",
            Mode::Webhook(_) => "Webhook",
        }
    }

    /// The authorizer `name` names (a webhook as the first configured).
    pub fn named(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|mode| mode.as_str() == name)
    }

    /// `AlwaysAllow, AlwaysDeny, ABAC, RBAC or Webhook`, for refusals.
    pub fn names_listed() -> String {
        let names: Vec<&str> = Mode::ALL.iter().map(|mode| mode.as_str()).collect();
        match names.split_last() {
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }

    /// Parses a comma-separated `--authorization-mode` value.
    pub fn parse_chain(s: &str) -> Result<Vec<Mode>, String> {
        let mut modes = Vec::new();
        for part in s.split(',') {
            let mode: Mode = part.trim().parse()?;
            if modes.contains(&mode) {
                return Err(format!(
                    "authorization mode `{}` is listed twice",
                    part.trim()
                ));
            }
            modes.push(mode);
        }
        Ok(modes)
    }
}

impl FromStr for Mode {
    type Err = String;
    /// The flag form configures one webhook (`--authorization-webhook-config-file`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::named(s).ok_or_else(|| {
            format!(
                "unknown authorization mode `{s}` (expected {})",
                Mode::names_listed()
            )
        })
    }
}

/// Which rule allowed or denied: binding -> role -> rule index, or an ABAC `file:line`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleRef {
    /// `RBAC`, `ABAC`, `AlwaysAllow` or `SuperUser`.
    pub authorizer: &'static str,
    /// `ClusterRoleBinding/NAME` or `RoleBinding/NS/NAME`; empty for ABAC.
    pub binding: Arc<str>,
    /// `ClusterRole/NAME` or `Role/NS/NAME`; empty for ABAC.
    pub role: Arc<str>,
    pub rule_index: u32,
    /// `file:line` of the binding (RBAC) or policy line (ABAC).
    pub source: Arc<str>,
}

impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.binding.is_empty() {
            write!(f, "{} {}", self.authorizer, self.source)
        } else {
            write!(
                f,
                "{} {} -> {} rule {} ({})",
                self.authorizer, self.binding, self.role, self.rule_index, self.source
            )
        }
    }
}

/// An explained decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub decision: Decision,
    /// Human-readable, upstream-compatible where upstream defines it.
    pub reason: String,
    /// The first allowing rule found (in evaluation order), even when a deny overrode it.
    pub allowed_by: Vec<RuleRef>,
    /// The first denying rule found, even when a higher-precedence allow overrode it.
    pub denied_by: Vec<RuleRef>,
    /// Evaluation errors (missing roles, unevaluable restrictions). Never fatal.
    pub errors: Vec<String>,
    /// The API's serialized form of the fields above, written once and reused by every answer
    /// holding this same `Arc<Response>` (cache hits, shared responses). The engine never
    /// reads it.
    pub encoded: EncodedOnce,
    /// The decision record's form of the same fields (`src/records/format.rs`), written once per
    /// shared answer, as `encoded` is: a cached answer is recorded many times.
    pub recorded: EncodedOnce,
    /// When a rule with content clauses took part, how to finish this content-free answer
    /// against a request's content ([`content::finish`]); empty for every other answer.
    pub plan: content::PlanSlot,
}

/// A serialized form of one value, computed by the first reader that needs it and kept for
/// the value's life. It is a cache, not part of the value: it compares equal whatever it
/// holds, and a clone starts empty (the clone may be changed before it is encoded).
#[derive(Default)]
pub struct EncodedOnce(OnceLock<Box<[u8]>>);

impl EncodedOnce {
    /// The bytes `encode` writes, computed on the first call only. Callers must always pass
    /// the same encoding of the same value.
    pub fn get_or_init(&self, encode: impl FnOnce() -> Box<[u8]>) -> &[u8] {
        self.0.get_or_init(encode)
    }
}

impl Clone for EncodedOnce {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for EncodedOnce {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for EncodedOnce {}

impl fmt::Debug for EncodedOnce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.get() {
            Some(bytes) => write!(f, "EncodedOnce({} bytes)", bytes.len()),
            None => f.write_str("EncodedOnce(empty)"),
        }
    }
}

impl Response {
    pub fn allowed(&self) -> bool {
        self.decision == Decision::Allow
    }

    pub fn denied(&self) -> bool {
        self.decision == Decision::Deny
    }

    /// Errors joined the way upstream aggregates them.
    pub fn evaluation_error(&self) -> String {
        join_errors(&self.errors)
    }
}

/// "Who can do this?": sorted, de-duplicated subject names. Service accounts appear as users
/// named `system:serviceaccount:NS:NAME`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedSubjects {
    pub users: Vec<String>,
    pub groups: Vec<String>,
    /// Subjects whose own decision is an explicit deny.
    pub denied_users: Vec<String>,
    pub denied_groups: Vec<String>,
    pub errors: Vec<String>,
}

impl AllowedSubjects {
    pub fn evaluation_error(&self) -> String {
        join_errors(&self.errors)
    }
}

/// Upstream's `utilerrors.NewAggregate` formatting: one error plain, several as `[a, b]`.
pub fn join_errors(errors: &[String]) -> String {
    match errors {
        [] => String::new(),
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// How the engine evaluates: the authorizer chain and the super-users that bypass it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// `--authorization-mode`, in order.
    pub modes: Vec<Mode>,
    /// `--super-user`: allowed everything, listed in every who-can answer.
    pub super_users: Vec<String>,
    /// `--super-group`: members are allowed everything; listed in every who-can answer.
    pub super_groups: Vec<String>,
}

impl Default for EngineConfig {
    /// The default chain `RBAC,ABAC`, with no super-users.
    fn default() -> Self {
        Self {
            modes: vec![Mode::Rbac, Mode::Abac],
            super_users: Vec::new(),
            super_groups: Vec::new(),
        }
    }
}

/// A decision as served: shared, because it may come from the cache, and marked when it did.
#[derive(Clone, Debug)]
pub struct Decided {
    pub response: Arc<Response>,
    pub cached: bool,
    /// A caller's cache may keep it (`AuthorizeResponse.cacheable`, docs/caller-cache.md §1):
    /// decided by the policy alone, from the request's subject and action (the cache key),
    /// with no rule that reads content. Cleared by whatever else takes part (a webhook, the
    /// fence).
    pub cacheable: bool,
}

/// The interface the API serves from. The engine implements it directly; the decision cache
/// implements it as a decorator around an engine.
pub trait Authorize {
    /// Decides a borrowed request: an owned one lends itself with `as_borrowed`, a request
    /// still on the wire is read in place, so the hot path never copies one.
    ///
    /// The answer is content-free: `request.content` is not read. Callers whose requests may
    /// carry content call [`Self::decide_content`].
    fn decide(&self, request: RequestRef<'_>) -> Decided;

    /// [`Self::decide`], finished against the request's content when a rule the answer rests
    /// on reads content. Fails only when such a rule needs content the request carries
    /// unreadably; content no rule reads is never decoded.
    fn decide_content(&self, request: RequestRef<'_>) -> Result<Decided, content::ContentError> {
        content::finish(self.decide(request), request, self.diff_config())
    }

    fn who_can(&self, action: &Action) -> AllowedSubjects;

    /// How changed paths are computed for this policy (its FieldPolicies over the defaults).
    fn diff_config(&self) -> &crate::policy::content::path::DiffConfig {
        &content::DEFAULT_DIFF
    }

    /// [`Self::who_can`] for an action on an object: each candidate subject is decided against
    /// the same content, so the answer agrees with [`Self::decide_content`] for every subject.
    /// Without content it is `who_can`'s answer.
    fn who_can_content(
        &self,
        action: &Action,
        content: Option<&crate::request::Content>,
    ) -> Result<AllowedSubjects, content::ContentError> {
        let _ = content;
        Ok(self.who_can(action))
    }
}

impl Authorize for Engine {
    fn decide(&self, request: RequestRef<'_>) -> Decided {
        Decided {
            response: self.authorize_shared(request),
            cached: false,
            // Not for callers' caches: only the serving core knows the key is within bounds.
            cacheable: false,
        }
    }

    fn who_can(&self, action: &Action) -> AllowedSubjects {
        self.allowed_subjects(action)
    }

    fn diff_config(&self) -> &crate::policy::content::path::DiffConfig {
        self.diff()
    }

    fn who_can_content(
        &self,
        action: &Action,
        content: Option<&crate::request::Content>,
    ) -> Result<AllowedSubjects, content::ContentError> {
        self.allowed_subjects_content(action, content)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(reason: &str) -> Response {
        Response {
            decision: Decision::Allow,
            reason: reason.to_string(),
            allowed_by: Vec::new(),
            denied_by: Vec::new(),
            errors: Vec::new(),
            encoded: EncodedOnce::default(),
            recorded: EncodedOnce::default(),
            plan: content::PlanSlot::default(),
        }
    }

    /// The encoding is computed once, and never makes two responses differ: a clone (which
    /// may be changed) starts without it.
    #[test]
    fn encoded_once_is_a_cache_not_part_of_the_response() {
        let first = response("because");
        let mut calls = 0;
        for _ in 0..2 {
            let bytes = first.encoded.get_or_init(|| {
                calls += 1;
                Box::from(&b"one"[..])
            });
            assert_eq!(bytes, b"one");
        }
        assert_eq!(calls, 1);
        assert_eq!(first, response("because"));
        assert_ne!(first, response("otherwise"));

        let mut clone = first.clone();
        clone.reason = "otherwise".to_string();
        assert_eq!(clone.encoded.get_or_init(|| Box::from(&b"two"[..])), b"two");
    }
}
