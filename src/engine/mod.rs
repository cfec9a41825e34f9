//! The decision engine: request attributes in, an explained decision out.
//!
//! Synchronous and pure: no I/O, no tokio, no protobuf. [`Engine`] runs the authorizer chain of
//! `--authorization-mode` over one compiled [`Index`](crate::policy::index::Index); the
//! reference evaluator in [`reference`] answers the same questions by walking every binding the
//! way upstream does, and property tests hold the two to the same answers.

pub mod chain;
pub mod escalation;
pub mod explain;
pub mod reference;
pub mod shared;
pub mod verdict;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

pub use chain::Engine;

/// The subject of a request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ResourceAttributes {
    pub namespace: String,
    pub verb: String,
    /// API group; `""` is the core group.
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NonResourceAttributes {
    pub path: String,
    pub verb: String,
}

/// What is being done: a resource request or a non-resource request, never both.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Resource(ResourceAttributes),
    NonResource(NonResourceAttributes),
}

impl Action {
    pub fn verb(&self) -> &str {
        match self {
            Action::Resource(r) => &r.verb,
            Action::NonResource(n) => &n.verb,
        }
    }

    /// The namespace a resource request targets; `""` for cluster scope and non-resource paths.
    pub fn namespace(&self) -> &str {
        match self {
            Action::Resource(r) => &r.namespace,
            Action::NonResource(_) => "",
        }
    }
}

/// An [`Action`] borrowed from wherever its strings live (an owned action, or the bytes of a
/// request on the wire), so a cache lookup needs no copy of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionRef<'a> {
    Resource(ResourceRef<'a>),
    NonResource { path: &'a str, verb: &'a str },
}

/// Borrowed [`ResourceAttributes`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceRef<'a> {
    pub namespace: &'a str,
    pub verb: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub name: &'a str,
}

impl Action {
    pub fn as_borrowed(&self) -> ActionRef<'_> {
        match self {
            Action::Resource(r) => ActionRef::Resource(ResourceRef {
                namespace: &r.namespace,
                verb: &r.verb,
                group: &r.group,
                version: &r.version,
                resource: &r.resource,
                subresource: &r.subresource,
                name: &r.name,
            }),
            Action::NonResource(n) => ActionRef::NonResource {
                path: &n.path,
                verb: &n.verb,
            },
        }
    }
}

impl<'a> ActionRef<'a> {
    pub fn verb(&self) -> &'a str {
        match self {
            ActionRef::Resource(r) => r.verb,
            ActionRef::NonResource { verb, .. } => verb,
        }
    }

    /// As [`Action::namespace`].
    pub fn namespace(&self) -> &'a str {
        match self {
            ActionRef::Resource(r) => r.namespace,
            ActionRef::NonResource { .. } => "",
        }
    }

    /// Upstream `IsReadOnly`: exactly get, list and watch, case-sensitive.
    pub fn is_read_only(&self) -> bool {
        matches!(self.verb(), "get" | "list" | "watch")
    }

    pub fn to_action(&self) -> Action {
        match *self {
            ActionRef::Resource(r) => Action::Resource(ResourceAttributes {
                namespace: r.namespace.to_owned(),
                verb: r.verb.to_owned(),
                group: r.group.to_owned(),
                version: r.version.to_owned(),
                resource: r.resource.to_owned(),
                subresource: r.subresource.to_owned(),
                name: r.name.to_owned(),
            }),
            ActionRef::NonResource { path, verb } => Action::NonResource(NonResourceAttributes {
                path: path.to_owned(),
                verb: verb.to_owned(),
            }),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    pub user: UserInfo,
    pub action: Action,
}

impl Request {
    pub fn as_borrowed(&self) -> RequestRef<'_> {
        RequestRef {
            user: self.user.as_borrowed(),
            action: self.action.as_borrowed(),
        }
    }
}

impl UserInfo {
    pub fn as_borrowed(&self) -> SubjectRef<'_> {
        SubjectRef {
            name: &self.name,
            groups: Groups::Owned(&self.groups),
        }
    }
}

/// A request as the engine reads it, borrowed from wherever its strings live (an owned
/// [`Request`], or a request still on the wire), so a cache miss evaluates without copying it.
/// UID and extra are absent: no authorizer in the chain reads them.
#[derive(Clone, Copy, Debug)]
pub struct RequestRef<'a> {
    pub user: SubjectRef<'a>,
    pub action: ActionRef<'a>,
}

/// The subject of a [`RequestRef`]: its name and groups.
#[derive(Clone, Copy, Debug)]
pub struct SubjectRef<'a> {
    pub name: &'a str,
    pub groups: Groups<'a>,
}

/// A request's groups as they are held: owned strings (a decoded request) or borrowed ones (a
/// view of the wire bytes). An enum rather than a type parameter, so the engine is compiled once.
#[derive(Clone, Copy, Debug)]
pub enum Groups<'a> {
    Owned(&'a [String]),
    Borrowed(&'a [&'a str]),
}

impl<'a> Groups<'a> {
    pub const NONE: Groups<'static> = Groups::Borrowed(&[]);

    pub fn iter(self) -> GroupsIter<'a> {
        match self {
            Groups::Owned(groups) => GroupsIter::Owned(groups.iter()),
            Groups::Borrowed(groups) => GroupsIter::Borrowed(groups.iter()),
        }
    }

    /// Exact, case-sensitive membership.
    pub fn contains(self, group: &str) -> bool {
        self.iter().any(|g| g == group)
    }
}

/// The iterator of [`Groups::iter`].
#[derive(Clone, Debug)]
pub enum GroupsIter<'a> {
    Owned(std::slice::Iter<'a, String>),
    Borrowed(std::slice::Iter<'a, &'a str>),
}

impl<'a> Iterator for GroupsIter<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        match self {
            GroupsIter::Owned(groups) => groups.next().map(String::as_str),
            GroupsIter::Borrowed(groups) => groups.next().copied(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            GroupsIter::Owned(groups) => groups.size_hint(),
            GroupsIter::Borrowed(groups) => groups.size_hint(),
        }
    }
}

impl ExactSizeIterator for GroupsIter<'_> {}

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
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::AlwaysAllow => "AlwaysAllow",
            Mode::AlwaysDeny => "AlwaysDeny",
            Mode::Abac => "ABAC",
            Mode::Rbac => "RBAC",
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
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "AlwaysAllow" => Ok(Mode::AlwaysAllow),
            "AlwaysDeny" => Ok(Mode::AlwaysDeny),
            "ABAC" => Ok(Mode::Abac),
            "RBAC" => Ok(Mode::Rbac),
            other => Err(format!(
                "unknown authorization mode `{other}` (expected AlwaysAllow, AlwaysDeny, ABAC or RBAC)"
            )),
        }
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
}

/// The interface the API serves from. The engine implements it directly; the decision cache
/// implements it as a decorator around an engine.
pub trait Authorize {
    fn decide(&self, request: &Request) -> Decided;
    fn who_can(&self, action: &Action) -> AllowedSubjects;
}

impl Authorize for Engine {
    fn decide(&self, request: &Request) -> Decided {
        Decided {
            response: self.authorize_shared(request.as_borrowed()),
            cached: false,
        }
    }

    fn who_can(&self, action: &Action) -> AllowedSubjects {
        self.allowed_subjects(action)
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
