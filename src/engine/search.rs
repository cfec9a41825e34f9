//! Search (the AuthZEN Search APIs, docs/authzen.md §4): *who* may do this, *what* may this
//! subject do to this object, *which* objects of a kind may it act on — answered so that they
//! agree with Authorize, which the specification only recommends (AuthZEN 1.0 §6.1: results
//! "SHOULD" evaluate to a permit).
//!
//! Each search first lists candidates from what the policy names — who-can's subjects, the
//! verbs and resource names of the rules that apply to the subject — then keeps exactly the
//! candidates Authorize allows, decided with the same content. So every result is allowed, and
//! every allowed entity the policy names is a result. Where a grant names no entity (a `*`
//! verb, a rule without `resourceNames`, a group that holds every service account) the
//! allowed set cannot be listed: the answer says it is not complete, and why.
//!
//! Pure and synchronous over one [`Engine`], like the rest of the engine; the serving core's
//! verbs (`serving::search`) add the fence, the webhooks' caveat and the snapshot.

use std::collections::BTreeSet;

use crate::engine::content::ContentError;
use crate::engine::rules::{ReviewedRule, RulePattern};
use crate::engine::{Authorize as _, Engine};
use crate::policy::rbac::is_negated;
use crate::request::{Action, Content, Request, UserInfo};

/// Kubernetes' own verbs: candidates of an action search whenever a grant covers verbs it
/// does not name (`*`, or a negation), besides every verb the subject's rules name.
pub const KUBERNETES_VERBS: [&str; 8] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// A verb no policy names: a rule that matches it covers verbs it does not list.
const UNNAMED_VERB: &str = "authzd:unnamed-verb";

/// What a search found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// The entities Authorize allows, sorted and without repeats.
    pub items: Vec<String>,
    /// Why more entities than [`Self::items`] may be allowed; empty when the list is every
    /// allowed entity.
    pub incomplete: Vec<String>,
    /// Evaluation errors met (missing roles), as who-can and rules reviews report them.
    pub errors: Vec<String>,
}

impl Found {
    /// Whether [`Self::items`] is every allowed entity.
    pub fn complete(&self) -> bool {
        self.incomplete.is_empty()
    }
}

/// The kind of subject a subject search lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubjectKind {
    /// Users, each decided with no groups (who-can's users: service accounts included, by
    /// their user names).
    User,
    /// Groups, each decided for a user bound to nothing (who-can's groups).
    Group,
    /// Service accounts (`system:serviceaccount:NS:NAME`), each decided with the groups
    /// Kubernetes gives it ([`crate::request::service_account`]).
    ServiceAccount,
}

/// Who may do `action` (on the object `content` describes), as subjects of `kind`.
pub fn subjects(
    engine: &Engine,
    kind: SubjectKind,
    action: &Action,
    content: Option<&Content>,
) -> Result<Found, ContentError> {
    let who = engine.who_can_content(action, content)?;
    let mut found = Found {
        errors: who.errors,
        ..Found::default()
    };
    // Who-can's `*` entry: an authorizer (AlwaysAllow) admits everyone, named or not.
    if who.users.iter().chain(&who.groups).any(|s| s == "*") {
        found.incomplete.push(
            "every subject is allowed (`*`: AlwaysAllow in the chain); only those named are listed"
                .into(),
        );
    }
    match kind {
        // Who-can's users and groups are decided exactly as an evaluation of the same
        // subject decides them (tests/properties/differential.rs holds it).
        SubjectKind::User => found.items = who.users,
        SubjectKind::Group => found.items = who.groups,
        SubjectKind::ServiceAccount => {
            // A service account is decided with its groups too, which may deny it: each is
            // decided again as an evaluation would.
            for name in &who.users {
                let Some(user) = crate::request::service_account_of(name) else {
                    continue;
                };
                if allowed(engine, user, action, content)? {
                    found.items.push(name.clone());
                }
            }
            for group in &who.groups {
                if let Some(scope) = service_account_group_scope(group) {
                    found.incomplete.push(format!(
                        "the group {group:?} is allowed: every service account {scope} is, and only those named in the policy are listed"
                    ));
                }
            }
        }
    }
    found.items.sort();
    found.items.dedup();
    Ok(found)
}

/// `Some("in namespace \"ns\"")` for the groups Kubernetes gives service accounts.
fn service_account_group_scope(group: &str) -> Option<String> {
    match group.strip_prefix(crate::request::SERVICE_ACCOUNTS_GROUP) {
        Some("") => Some("of the cluster".to_string()),
        Some(rest) => rest
            .strip_prefix(':')
            .map(|namespace| format!("in namespace {namespace:?}")),
        None => None,
    }
}

/// What `user` may do to the object of `action` (its verb is ignored): the verbs Authorize
/// allows among those the user's rules name — and, when a grant covers verbs it does not name,
/// among every verb the policy's roles in scope name and Kubernetes' own.
pub fn actions(
    engine: &Engine,
    user: &UserInfo,
    action: &Action,
    content: Option<&Content>,
) -> Result<Found, ContentError> {
    let rules = engine.rules_for(user.as_borrowed(), action.namespace());
    let mut candidates = BTreeSet::new();
    let mut unnamed = None;
    for rule in &rules.rules {
        for verb in written_verbs(&rule.pattern) {
            candidates.insert(verb.trim_start_matches('-').to_string());
        }
        if !rule.deny && rule.matches(with_verb(action, UNNAMED_VERB).as_borrowed()) {
            unnamed.get_or_insert_with(|| rule.by.to_string());
        }
    }
    let mut found = Found {
        errors: rules.errors.clone(),
        ..Found::default()
    };
    if let Some(by) = unnamed {
        candidates.extend(KUBERNETES_VERBS.iter().map(|v| v.to_string()));
        candidates.extend(named_verbs(engine, action.namespace()));
        found.incomplete.push(format!(
            "{by} allows verbs it does not name; only the verbs the policy names and Kubernetes' own are listed"
        ));
    }
    for verb in candidates {
        if allowed(engine, user.clone(), &with_verb(action, &verb), content)? {
            found.items.push(verb);
        }
    }
    Ok(found)
}

/// The names of the objects of `action`'s kind (its name is ignored) that `user` may act on
/// with its verb: those the user's rules grant by name, as Authorize allows them. A grant
/// without names makes the set not enumerable, and the answer says so.
pub fn resources(
    engine: &Engine,
    user: &UserInfo,
    action: &Action,
    content: Option<&Content>,
) -> Result<Found, ContentError> {
    let rules = engine.rules_for(user.as_borrowed(), action.namespace());
    let mut found = Found {
        errors: rules.errors.clone(),
        ..Found::default()
    };
    let mut candidates = BTreeSet::new();
    for rule in rules.rules.iter().filter(|rule| !rule.deny) {
        for name in written_names(rule, action) {
            if rule.matches(with_name(action, &name).as_borrowed()) {
                candidates.insert(name);
            }
        }
        // An object named nowhere: a rule that covers it grants by kind, not by name.
        if grants_unnamed(rule, action) {
            found.incomplete.push(format!(
                "{} grants {} without naming them; only the names the policy grants are listed",
                rule.by,
                what_is_granted(action)
            ));
        }
    }
    for name in candidates {
        if allowed(engine, user.clone(), &with_name(action, &name), content)? {
            found.items.push(name);
        }
    }
    Ok(found)
}

/// Whether `rule` covers an object of `action`'s kind that no policy names: a resource rule
/// without `resourceNames`, a URL pattern ending in `*`, an ABAC line, everything.
fn grants_unnamed(rule: &ReviewedRule, action: &Action) -> bool {
    const UNNAMED: &str = "authzd:unnamed";
    match action {
        Action::Resource(_) => rule.matches(with_name(action, "").as_borrowed()),
        Action::NonResource(_) => {
            let mut probes = vec![format!("/{UNNAMED}")];
            if let RulePattern::Rbac(policy) = &rule.pattern {
                probes.extend(
                    policy
                        .non_resource_urls
                        .iter()
                        .filter_map(|url| url.strip_suffix('*'))
                        .map(|prefix| format!("{}{UNNAMED}", prefix.trim_end_matches('*'))),
                );
            }
            probes
                .iter()
                .any(|probe| rule.matches(with_name(action, probe).as_borrowed()))
        }
    }
}

/// Every verb the roles a request in `namespace` can reach name (ClusterRoles, and the
/// namespace's Roles), as the who-can index files them.
fn named_verbs(engine: &Engine, namespace: &str) -> Vec<String> {
    let index = engine.index();
    let local = index.namespace(namespace).map(|partition| &partition.rules);
    std::iter::once(&index.cluster_roles.rules)
        .chain(local)
        .flat_map(|rules| rules.by_verb.keys())
        .filter(|verb| &***verb != "*")
        .map(|verb| verb.to_string())
        .collect()
}

/// The verbs a rule writes (negated ones with their `-`).
fn written_verbs(pattern: &RulePattern) -> Vec<&str> {
    match pattern {
        RulePattern::Rbac(rule) => rule
            .verbs
            .iter()
            .map(String::as_str)
            .filter(|v| *v != "*")
            .collect(),
        RulePattern::Abac { line, .. } if line.readonly => vec!["get", "list", "watch"],
        RulePattern::Abac { .. } | RulePattern::Everything => Vec::new(),
    }
}

/// The names a rule could grant an object of `action`'s kind by: its `resourceNames`, or for
/// a non-resource action its exact (not prefix) URLs.
fn written_names(rule: &ReviewedRule, action: &Action) -> Vec<String> {
    let RulePattern::Rbac(policy) = &rule.pattern else {
        return Vec::new();
    };
    let names = match action {
        Action::Resource(_) => &policy.resource_names,
        Action::NonResource(_) => &policy.non_resource_urls,
    };
    names
        .iter()
        .filter(|name| !name.ends_with('*') && !is_negated(name))
        .cloned()
        .collect()
}

fn what_is_granted(action: &Action) -> String {
    match action {
        Action::Resource(r) if r.group.is_empty() => format!("{} {:?}", r.verb, r.resource),
        Action::Resource(r) => format!("{} {:?} of {:?}", r.verb, r.resource, r.group),
        Action::NonResource(n) => format!("{} on paths it matches by prefix or `*`", n.verb),
    }
}

/// `action` with another verb.
fn with_verb(action: &Action, verb: &str) -> Action {
    let mut action = action.clone();
    match &mut action {
        Action::Resource(r) => r.verb = verb.to_string(),
        Action::NonResource(n) => n.verb = verb.to_string(),
    }
    action
}

/// `action` on the object `name` (the path, for a non-resource action).
fn with_name(action: &Action, name: &str) -> Action {
    let mut action = action.clone();
    match &mut action {
        Action::Resource(r) => r.name = name.to_string(),
        Action::NonResource(n) => n.path = name.to_string(),
    }
    action
}

/// Whether Authorize allows `user` to do `action` with `content`.
fn allowed(
    engine: &Engine,
    user: UserInfo,
    action: &Action,
    content: Option<&Content>,
) -> Result<bool, ContentError> {
    let request = Request {
        user,
        action: action.clone(),
    };
    let decided = engine.decide_content(request.with_content(content))?;
    Ok(decided.response.allowed())
}
