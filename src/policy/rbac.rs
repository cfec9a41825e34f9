//! RBAC rule matching, exactly as upstream's `evaluation_helpers.go` / `RuleAllows`, plus seed
//! 003's negation.
//!
//! All comparisons are exact and case-sensitive; only the documented `*` forms are wildcards.
//! Negation (seed 003): a verb or resource entry with a leading `-` subtracts from what the
//! positive entries match, so `["*", "-roles"]` is every resource except `roles`. A list with
//! only negative entries matches nothing. A negated bare resource (`-secrets`) also removes its
//! subresources (`secrets/status`): "everything except secrets" must not leak `secrets/*`.
//! A negated `res/sub` or `*/sub` removes exactly what the same positive entry would match.
//!
//! These functions are the single definition of rule semantics: the reference evaluator calls
//! them on every rule it walks; the compiled index only narrows which rules it calls them on.

use crate::policy::model::PolicyRule;
use crate::request::{Action, ActionRef};

const NEGATION: char = '-';

/// Positive entries match by `pos`, negative entries (prefix stripped) exclude by `neg`.
fn list_matches(
    entries: &[String],
    pos: impl Fn(&str) -> bool,
    neg: impl Fn(&str) -> bool,
) -> bool {
    let mut included = false;
    for entry in entries {
        match entry.strip_prefix(NEGATION) {
            Some(negated) => {
                if neg(negated) {
                    return false;
                }
            }
            None => included = included || pos(entry),
        }
    }
    included
}

/// Whether an entry starts with `-` (seed 003 negation).
pub fn is_negated(entry: &str) -> bool {
    entry.starts_with(NEGATION)
}

/// The verbs that act beyond what their holder may do itself: `bind` and `escalate` lift
/// escalation prevention (docs/security.md §4), `impersonate` acts as another subject.
///
/// An allow rule with a negated entry, in its verbs or its resources, is a limited grant
/// ("every verb but `delete`", "every resource but `roles`"), and a limited grant does not
/// hold these: its `*` covers them only where the rule names them. Without negation a `*`
/// covers them, as upstream's does; deny rules deny them as they deny any verb. Seed 003's
/// negation predates these verbs: its `admin` role, `["*", "-create", "-update", "-delete"]`,
/// would otherwise let a project admin bind `cluster-admin` to himself (docs/semantics.md §6).
pub const PRIVILEGE_VERBS: [&str; 3] = ["bind", "escalate", "impersonate"];

/// Whether any verb or resource entry of `rule` is negated.
pub fn has_negation(rule: &PolicyRule) -> bool {
    rule.verbs
        .iter()
        .chain(&rule.resources)
        .any(|e| is_negated(e))
}

/// Upstream `VerbMatches`: some verb is `*` or equal to the request verb; minus negations;
/// and a [privilege verb](PRIVILEGE_VERBS) only by name in an allow rule with negations.
pub fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    let single = |v: &str| v == "*" || v == verb;
    list_matches(&rule.verbs, single, single)
        && (rule.deny
            || !PRIVILEGE_VERBS.contains(&verb)
            || !has_negation(rule)
            || rule.verbs.iter().any(|v| v == verb))
}

/// Upstream `APIGroupMatches`: some group is `*` or equal; `""` is the core group.
pub fn api_group_matches(rule: &PolicyRule, group: &str) -> bool {
    rule.api_groups.iter().any(|g| g == "*" || g == group)
}

/// One rule resource entry against `combined` (`res` or `res/sub`), as upstream.
fn resource_entry_matches(entry: &str, combined: &str, subresource: &str) -> bool {
    if entry == "*" || entry == combined {
        return true;
    }
    // `*/sub` covers every resource's `sub` subresource; exact length check as upstream, so
    // `*/` and `*x/...` never match.
    !subresource.is_empty()
        && entry.len() == subresource.len() + 2
        && entry.starts_with("*/")
        && entry.ends_with(subresource)
}

/// A negated entry: what the positive entry would match, and for a bare resource name also all
/// of its subresources.
fn negated_resource_matches(entry: &str, combined: &str, subresource: &str) -> bool {
    resource_entry_matches(entry, combined, subresource)
        || (!entry.contains('/')
            && combined.len() > entry.len()
            && combined.starts_with(entry)
            && combined.as_bytes()[entry.len()] == b'/')
}

/// Upstream `ResourceMatches(rule, combined, subresource)`, minus negations.
pub fn resource_matches(rule: &PolicyRule, resource: &str, subresource: &str) -> bool {
    resource_matches_combined(rule, &combined_resource(resource, subresource), subresource)
}

/// `resource` or `resource/subresource`, the form rules are matched against.
pub fn combined_resource<'a>(resource: &'a str, subresource: &str) -> std::borrow::Cow<'a, str> {
    if subresource.is_empty() {
        std::borrow::Cow::Borrowed(resource)
    } else {
        std::borrow::Cow::Owned(format!("{resource}/{subresource}"))
    }
}

/// [`resource_matches`] with the combined form computed once per request by the caller.
pub fn resource_matches_combined(rule: &PolicyRule, combined: &str, subresource: &str) -> bool {
    list_matches(
        &rule.resources,
        |e| resource_entry_matches(e, combined, subresource),
        |e| negated_resource_matches(e, combined, subresource),
    )
}

/// Upstream `ResourceNameMatches`: empty list matches all; otherwise the name must be listed,
/// so requests without a name (list, create) do not match a name-restricted rule.
pub fn resource_name_matches(rule: &PolicyRule, name: &str) -> bool {
    rule.resource_names.is_empty() || rule.resource_names.iter().any(|n| n == name)
}

/// One `nonResourceURLs` entry: `*`, exact, or a trailing-`*` prefix (all trailing `*` trimmed).
pub fn non_resource_url_entry_matches(entry: &str, path: &str) -> bool {
    if entry == "*" || entry == path {
        return true;
    }
    match entry.strip_suffix('*') {
        Some(_) => path.starts_with(entry.trim_end_matches('*')),
        None => false,
    }
}

/// Upstream `NonResourceURLMatches`.
pub fn non_resource_url_matches(rule: &PolicyRule, path: &str) -> bool {
    rule.non_resource_urls
        .iter()
        .any(|u| non_resource_url_entry_matches(u, path))
}

pub fn non_resource_rule_matches(rule: &PolicyRule, path: &str, verb: &str) -> bool {
    verb_matches(rule, verb) && non_resource_url_matches(rule, path)
}

/// Upstream `RuleAllows`, ignoring `deny` and restrictions: does the rule's pattern cover the
/// action? Only the half of the rule that fits the request kind is consulted.
pub fn rule_matches(rule: &PolicyRule, action: &Action) -> bool {
    rule_matches_target(rule, &MatchTarget::new(action.as_borrowed()))
}

/// An action prepared once per request for matching against many rules (the combined
/// `resource/subresource` string is built once, not per rule).
pub struct MatchTarget<'a> {
    pub action: ActionRef<'a>,
    combined: std::borrow::Cow<'a, str>,
}

impl<'a> MatchTarget<'a> {
    pub fn new(action: ActionRef<'a>) -> Self {
        let combined = match action {
            ActionRef::Resource(r) => combined_resource(r.resource, r.subresource),
            ActionRef::NonResource { .. } => std::borrow::Cow::Borrowed(""),
        };
        Self { action, combined }
    }

    /// `resource` or `resource/subresource`; empty for non-resource requests.
    pub fn combined(&self) -> &str {
        &self.combined
    }
}

/// [`rule_matches`] against a prepared target.
pub fn rule_matches_target(rule: &PolicyRule, target: &MatchTarget<'_>) -> bool {
    match target.action {
        ActionRef::Resource(r) => {
            verb_matches(rule, r.verb)
                && api_group_matches(rule, r.group)
                && resource_matches_combined(rule, target.combined(), r.subresource)
                && resource_name_matches(rule, r.name)
        }
        ActionRef::NonResource { path, verb } => non_resource_rule_matches(rule, path, verb),
    }
}

/// How a rule applies to an action by its pattern and `deny` flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleEffect {
    /// The rule does not apply.
    None,
    Allow,
    Deny,
}

/// What a rule's pattern and `deny` flag say about an action, before any content clause.
pub fn rule_match_on(rule: &PolicyRule, target: &MatchTarget<'_>) -> RuleEffect {
    match (rule_matches_target(rule, target), rule.deny) {
        (false, _) => RuleEffect::None,
        (true, true) => RuleEffect::Deny,
        (true, false) => RuleEffect::Allow,
    }
}

/// The evaluation error reported for a rule with content clauses whose content is missing.
pub fn restriction_error(role: &str, rule_index: usize, deny: bool, unmet: Unmet<'_>) -> String {
    let consequence = if deny {
        "applied as an unrestricted deny"
    } else {
        "skipped"
    };
    match unmet {
        Unmet::Missing(missing) => format!("{role} rule {rule_index} needs {missing}, which the request does not carry; the rule was {consequence}"),
        Unmet::Failed(failure) => format!("{role} rule {rule_index}: {failure}; the rule was {consequence}"),
    }
}

/// Why a rule's content clauses could not be decided for a request.
#[derive(Clone, Copy, Debug)]
pub enum Unmet<'a> {
    /// Content the request does not carry (what it names).
    Missing(&'a str),
    /// A condition that failed to evaluate (how).
    Failed(&'a str),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ResourceAttributes;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            api_groups: groups.iter().map(|s| s.to_string()).collect(),
            resources: resources.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn urls(urls: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: urls.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn verbs_are_exact_and_case_sensitive() {
        let r = rule(&["get"], &[""], &["pods"]);
        assert!(verb_matches(&r, "get"));
        assert!(!verb_matches(&r, "GET"));
        assert!(!verb_matches(&r, "list"));
        assert!(verb_matches(&rule(&["*"], &[], &[]), "anything"));
    }

    #[test]
    fn negated_verbs_subtract() {
        let r = rule(&["*", "-create", "-update", "-delete"], &["*"], &["*"]);
        assert!(verb_matches(&r, "get"));
        assert!(!verb_matches(&r, "create"));
        assert!(!verb_matches(&rule(&["-create"], &[], &[]), "get"));
    }

    #[test]
    fn subresources_follow_upstream() {
        let pods = rule(&["get"], &[""], &["pods"]);
        assert!(resource_matches(&pods, "pods", ""));
        assert!(!resource_matches(&pods, "pods", "status"));
        let scale = rule(&["get"], &[""], &["*/scale"]);
        assert!(resource_matches(&scale, "deployments", "scale"));
        assert!(!resource_matches(&scale, "deployments", ""));
        assert!(!resource_matches(&scale, "deployments", "status"));
        let deep = rule(&["get"], &[""], &["*/other/segment"]);
        assert!(resource_matches(&deep, "foo", "other/segment"));
        for never in ["*/", "", "/", "*x/scale"] {
            assert!(
                !resource_matches(&rule(&["get"], &[""], &[never]), "pods", "scale"),
                "{never}"
            );
        }
        assert!(resource_matches(
            &rule(&["get"], &[""], &["*"]),
            "pods",
            "log"
        ));
    }

    #[test]
    fn negated_resources_remove_the_resource_and_its_subresources() {
        let r = rule(&["*"], &["*"], &["*", "-secrets", "-pods/exec", "-*/token"]);
        assert!(resource_matches(&r, "pods", ""));
        assert!(!resource_matches(&r, "secrets", ""));
        assert!(!resource_matches(&r, "secrets", "status"));
        assert!(resource_matches(&r, "secretsx", ""));
        assert!(!resource_matches(&r, "pods", "exec"));
        assert!(resource_matches(&r, "pods", "log"));
        assert!(!resource_matches(&r, "serviceaccounts", "token"));
    }

    #[test]
    fn resource_names_require_a_name() {
        let mut r = rule(&["get"], &[""], &["pods"]);
        r.resource_names = vec!["a".into()];
        assert!(resource_name_matches(&r, "a"));
        assert!(!resource_name_matches(&r, ""));
        assert!(!resource_name_matches(&r, "b"));
    }

    #[test]
    fn non_resource_urls_prefix_and_no_mid_glob() {
        assert!(non_resource_url_matches(&urls(&["/foo/*"]), "/foo/bar"));
        assert!(non_resource_url_matches(&urls(&["/foo/*"]), "/foo/"));
        assert!(!non_resource_url_matches(&urls(&["/foo/*"]), "/foo"));
        assert!(!non_resource_url_matches(&urls(&["/api/*/*"]), "/api/v1"));
        assert!(non_resource_url_matches(&urls(&["/api/**"]), "/api/v1"));
        assert!(non_resource_url_matches(&urls(&["*"]), "/anything"));
        assert!(!non_resource_url_matches(&urls(&["/healthz"]), "/healthz/"));
    }

    #[test]
    fn clauses_do_not_change_what_the_pattern_says() {
        let action = Action::Resource(ResourceAttributes {
            verb: "get".into(),
            resource: "pods".into(),
            ..Default::default()
        });
        let target = MatchTarget::new(action.as_borrowed());
        let mut allow = rule(&["get"], &[""], &["pods"]);
        allow.clauses = Some(Default::default());
        assert_eq!(rule_match_on(&allow, &target), RuleEffect::Allow);
        let mut deny = allow.clone();
        deny.deny = true;
        assert_eq!(rule_match_on(&deny, &target), RuleEffect::Deny);
        deny.verbs = vec!["list".into()];
        assert_eq!(rule_match_on(&deny, &target), RuleEffect::None);
    }
}
