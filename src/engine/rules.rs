//! "What can this subject do?": the rules that apply to one subject in one namespace
//! (Kubernetes' SubjectRulesReview), in authzd's complete form and in Kubernetes' own.
//!
//! **authzd's form** ([`SubjectRules::rules`]) lists every rule that can decide a request of
//! the subject in the namespace, in the order the chain consults them: super-users, then each
//! authorizer of `--authorization-mode` in turn, RBAC's rules in seed 003's precedence (cluster
//! deny, cluster allow, namespace deny, namespace allow; binding then rule order within each).
//! So the *first* rule that matches a request decides it — a deny denies, an allow allows,
//! none: no opinion — exactly as Authorize decides it ([`SubjectRules::decide`]; property-
//! tested against Authorize in `tests/properties/rules_review.rs`). Rules with content clauses are
//! returned flagged `conditional`: they decide only where their clauses hold.
//!
//! **Kubernetes' form** ([`SubjectRules::kubernetes`]) has no deny, no negation and no
//! condition, so it lists only what it can state whole: an allow rule is listed only when it
//! has no negated entry, no condition, and no deny consulted before it could overlap it (a
//! grant a deny narrows is never listed as if it were whole). Everything left out is named in
//! the evaluation error and the list is marked incomplete, so the list is always sound (every
//! request it covers is allowed) and, when complete, exact.

use crate::engine::chain::{super_user, SuperUser};
use crate::engine::explain;
use crate::engine::{Decision, EngineConfig, Mode, RuleRef};
use crate::policy::abac;
use crate::policy::model::{AbacRule, PolicyRule};
use crate::policy::rbac::{self, is_negated, MatchTarget};
use crate::request::{ActionRef, SubjectRef};

/// Which part of the chain a rule belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleTier {
    /// `--super-user` / `--super-group`: everything, before any authorizer.
    SuperUser,
    /// RBAC through a ClusterRoleBinding.
    Cluster,
    /// RBAC through a RoleBinding of the reviewed namespace.
    Namespace,
    /// An ABAC line.
    Abac,
    /// The `AlwaysAllow` authorizer: everything.
    AlwaysAllow,
}

impl RuleTier {
    pub fn as_str(self) -> &'static str {
        match self {
            RuleTier::SuperUser => "super-user",
            RuleTier::Cluster => "cluster",
            RuleTier::Namespace => "namespace",
            RuleTier::Abac => "abac",
            RuleTier::AlwaysAllow => "always-allow",
        }
    }
}

/// What a reviewed rule matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RulePattern {
    /// An RBAC rule as written (negated entries included), matched as `policy::rbac` matches.
    Rbac(PolicyRule),
    /// An ABAC line, matched as `policy::abac` matches (its resource covers every subresource
    /// of that resource). `resources`: whether its namespace covers the reviewed one, so its
    /// resource half applies (its non-resource half applies in every namespace).
    Abac { line: AbacRule, resources: bool },
    /// Every request (super-users, `AlwaysAllow`).
    Everything,
}

/// One rule that applies to the subject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReviewedRule {
    pub deny: bool,
    pub tier: RuleTier,
    pub pattern: RulePattern,
    /// Where the rule comes from (binding → role → rule index, or ABAC `file:line`).
    pub by: RuleRef,
    /// The rule holds only where its content clauses hold (or, for an allow under a
    /// FieldPolicy that protects paths, where a write leaves them alone): decided per request
    /// with its content.
    pub conditional: bool,
}

impl ReviewedRule {
    /// An RBAC rule reached through a binding (`cluster`: a ClusterRoleBinding).
    pub fn rbac(rule: &PolicyRule, cluster: bool, by: RuleRef, protects_paths: bool) -> Self {
        Self {
            deny: rule.deny,
            tier: if cluster {
                RuleTier::Cluster
            } else {
                RuleTier::Namespace
            },
            conditional: rule.clauses.is_some() || (protects_paths && !rule.deny),
            pattern: RulePattern::Rbac(rule.clone()),
            by,
        }
    }

    /// ABAC line `index`, reviewed in a namespace its own covers (`resources`) or not.
    pub fn abac(rule: &AbacRule, index: usize, resources: bool) -> Self {
        Self {
            deny: false,
            tier: RuleTier::Abac,
            pattern: RulePattern::Abac {
                line: rule.clone(),
                resources,
            },
            by: explain::abac_rule_ref(rule, index),
            conditional: false,
        }
    }

    fn everything(tier: RuleTier, by: RuleRef) -> Self {
        Self {
            deny: false,
            tier,
            pattern: RulePattern::Everything,
            by,
            conditional: false,
        }
    }

    /// What the rule names, as the API writes it: an RBAC rule as written; an ABAC line in
    /// Kubernetes' terms (`readonly` as get, list and watch; its resource fields only where
    /// its namespace covers the reviewed one); everything as `*`.
    pub fn written(&self) -> WrittenRule {
        let everything = || vec!["*".to_string()];
        match &self.pattern {
            RulePattern::Rbac(rule) => WrittenRule {
                verbs: rule.verbs.clone(),
                api_groups: rule.api_groups.clone(),
                resources: rule.resources.clone(),
                resource_names: rule.resource_names.clone(),
                non_resource_urls: rule.non_resource_urls.clone(),
            },
            RulePattern::Abac { line, resources } => WrittenRule {
                verbs: abac_verbs(line),
                api_groups: if *resources {
                    vec![line.api_group.clone()]
                } else {
                    Vec::new()
                },
                resources: if *resources {
                    vec![line.resource.clone()]
                } else {
                    Vec::new()
                },
                resource_names: Vec::new(),
                non_resource_urls: if line.non_resource_path.is_empty() {
                    Vec::new()
                } else {
                    vec![line.non_resource_path.clone()]
                },
            },
            RulePattern::Everything => WrittenRule {
                verbs: everything(),
                api_groups: everything(),
                resources: everything(),
                resource_names: Vec::new(),
                non_resource_urls: everything(),
            },
        }
    }

    /// Whether the rule's pattern matches `action` (its condition aside).
    pub fn matches(&self, action: ActionRef<'_>) -> bool {
        // A non-resource request has no namespace, so RoleBindings never decide one.
        if self.tier == RuleTier::Namespace && !matches!(action, ActionRef::Resource(_)) {
            return false;
        }
        match &self.pattern {
            RulePattern::Rbac(rule) => rbac::rule_matches_target(rule, &MatchTarget::new(action)),
            RulePattern::Abac { line, resources } => {
                (*resources || !matches!(action, ActionRef::Resource(_)))
                    && abac::rule_allows_action(line, action)
            }
            RulePattern::Everything => true,
        }
    }
}

/// What a reviewed rule names (see [`ReviewedRule::written`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WrittenRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

/// The rules that apply to one subject in one namespace, in the order the chain consults
/// them, and the errors met finding them (missing roles).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubjectRules {
    pub rules: Vec<ReviewedRule>,
    pub errors: Vec<String>,
}

/// The ABAC lines whose subject is `user`, as rules reviewed in `namespace`.
pub fn abac_rules<'a>(
    lines: impl IntoIterator<Item = &'a AbacRule>,
    user: SubjectRef<'_>,
    namespace: &str,
) -> Vec<ReviewedRule> {
    lines
        .into_iter()
        .enumerate()
        .filter(|(_, line)| abac::subject_matches(line, user.name, user.groups))
        .map(|(index, line)| {
            let resources = line.namespace == "*" || line.namespace == namespace;
            ReviewedRule::abac(line, index, resources)
        })
        .collect()
}

/// The chain's order over what RBAC and ABAC found: `rbac` yields the RBAC rules reached (in
/// canonical binding then rule order) and its errors; `abac` the ABAC rules. Each is asked
/// only if its authorizer is in the chain, and neither for a super-user.
pub fn assemble(
    config: &EngineConfig,
    user: SubjectRef<'_>,
    rbac: impl FnOnce() -> (Vec<ReviewedRule>, Vec<String>),
    abac: impl FnOnce() -> Vec<ReviewedRule>,
) -> SubjectRules {
    let mut review = SubjectRules::default();
    if let Some(why) = super_user(config, user) {
        let by = match why {
            SuperUser::User => explain::simple_rule_ref(explain::SUPER_USER, user.name),
            SuperUser::Group(group) => explain::simple_rule_ref(explain::SUPER_USER, group),
        };
        review
            .rules
            .push(ReviewedRule::everything(RuleTier::SuperUser, by));
        return review;
    }
    let (mut rbac, mut abac) = (Some(rbac), Some(abac));
    for mode in &config.modes {
        match mode {
            Mode::Rbac => {
                let Some(rbac) = rbac.take() else { continue };
                let (reached, errors) = rbac();
                // Seed 003's precedence, each class in canonical order (a stable sort).
                let mut reached = reached;
                reached.sort_by_key(|rule| (rule.tier != RuleTier::Cluster, !rule.deny));
                review.rules.extend(reached);
                review.errors.extend(errors);
            }
            Mode::Abac => {
                if let Some(abac) = abac.take() {
                    review.rules.extend(abac());
                }
            }
            Mode::AlwaysAllow => {
                let by = explain::simple_rule_ref(explain::ALWAYS_ALLOW, "");
                review
                    .rules
                    .push(ReviewedRule::everything(RuleTier::AlwaysAllow, by));
                // Nothing after it is ever consulted.
                break;
            }
            // A webhook's rules cannot be listed (the serving layer says so).
            Mode::AlwaysDeny | Mode::Webhook(_) => {}
        }
    }
    review
}

impl SubjectRules {
    /// The decision the rules give `action` (in the reviewed namespace): the first rule that
    /// matches decides. Conditional rules are skipped: they need the request's content.
    pub fn decide(&self, action: ActionRef<'_>) -> Decision {
        self.rules
            .iter()
            .filter(|rule| !rule.conditional)
            .find(|rule| rule.matches(action))
            .map_or(Decision::NoOpinion, |rule| {
                if rule.deny {
                    Decision::Deny
                } else {
                    Decision::Allow
                }
            })
    }

    /// Kubernetes' form (see the module docs).
    pub fn kubernetes(&self) -> KubernetesRules {
        let mut out = KubernetesRules {
            errors: self.errors.clone(),
            ..KubernetesRules::default()
        };
        let mut denies: Vec<&ReviewedRule> = Vec::new();
        for rule in &self.rules {
            if rule.deny {
                denies.push(rule);
                continue;
            }
            if rule.conditional {
                out.errors.push(format!(
                    "{} applies only where its content conditions hold, which Kubernetes rules cannot express; left out",
                    rule.by
                ));
                continue;
            }
            let (resource, non_resource) = match &rule.pattern {
                RulePattern::Rbac(policy) => {
                    let negated = policy
                        .verbs
                        .iter()
                        .chain(&policy.resources)
                        .any(|entry| is_negated(entry));
                    if negated {
                        out.errors.push(format!(
                            "{} has negated entries, which Kubernetes rules cannot express; left out",
                            rule.by
                        ));
                        continue;
                    }
                    let (resource, non_resource) = rbac_halves(policy);
                    // A non-resource request has no namespace: RoleBindings never grant one.
                    let non_resource = non_resource.filter(|_| rule.tier != RuleTier::Namespace);
                    (resource, non_resource)
                }
                RulePattern::Abac { line, resources } => {
                    let halves = abac_halves(line, *resources);
                    if halves.0.is_some() && line.resource != "*" {
                        out.errors.push(format!(
                            "{} also allows every subresource of {:?}, which Kubernetes rules cannot express; listed for {:?} only",
                            rule.by, line.resource, line.resource
                        ));
                    }
                    halves
                }
                RulePattern::Everything => (
                    Some(ResourceRule::everything()),
                    Some(NonResourceRule {
                        verbs: vec!["*".into()],
                        non_resource_urls: vec!["*".into()],
                    }),
                ),
            };
            if let Some(resource) = resource {
                match denies
                    .iter()
                    .find(|deny| deny_overlaps_resource(deny, &resource))
                {
                    Some(deny) => out.errors.push(narrowed(rule, deny)),
                    None => out.resource_rules.push(resource),
                }
            }
            if let Some(non_resource) = non_resource {
                let overlapping = denies
                    .iter()
                    .find(|deny| deny_overlaps_non_resource(deny, &non_resource));
                match overlapping {
                    Some(deny) => out.errors.push(narrowed(rule, deny)),
                    None => out.non_resource_rules.push(non_resource),
                }
            }
        }
        out.incomplete = !out.errors.is_empty();
        out
    }
}

fn narrowed(rule: &ReviewedRule, deny: &ReviewedRule) -> String {
    format!(
        "{} is narrowed by the deny rule {}; left out",
        rule.by, deny.by
    )
}

/// Kubernetes' `ResourceRule`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
}

impl ResourceRule {
    fn everything() -> Self {
        Self {
            verbs: vec!["*".into()],
            api_groups: vec!["*".into()],
            resources: vec!["*".into()],
            resource_names: Vec::new(),
        }
    }

    /// Whether the rule covers `action`, with Kubernetes' matching (no negation here).
    pub fn covers(&self, action: ActionRef<'_>) -> bool {
        let rule = PolicyRule {
            verbs: self.verbs.clone(),
            api_groups: self.api_groups.clone(),
            resources: self.resources.clone(),
            resource_names: self.resource_names.clone(),
            ..PolicyRule::default()
        };
        matches!(action, ActionRef::Resource(_))
            && rbac::rule_matches_target(&rule, &MatchTarget::new(action))
    }
}

/// Kubernetes' `NonResourceRule`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NonResourceRule {
    pub verbs: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

impl NonResourceRule {
    /// Whether the rule covers `action`, with Kubernetes' matching.
    pub fn covers(&self, action: ActionRef<'_>) -> bool {
        match action {
            ActionRef::NonResource { path, verb } => {
                self.verbs.iter().any(|v| v == "*" || v == verb)
                    && self
                        .non_resource_urls
                        .iter()
                        .any(|url| rbac::non_resource_url_entry_matches(url, path))
            }
            ActionRef::Resource(_) => false,
        }
    }
}

/// Kubernetes' `SubjectRulesReviewStatus`, with the evaluation errors still apart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KubernetesRules {
    pub resource_rules: Vec<ResourceRule>,
    pub non_resource_rules: Vec<NonResourceRule>,
    /// Set when anything could not be stated (see `errors`).
    pub incomplete: bool,
    /// Errors met finding the rules, then each rule left out or listed in part, and why.
    pub errors: Vec<String>,
}

/// A rule's resource half (when it names verbs, groups and resources) and non-resource half
/// (when it names URLs): a rule may list both.
fn rbac_halves(rule: &PolicyRule) -> (Option<ResourceRule>, Option<NonResourceRule>) {
    let resource = (!rule.verbs.is_empty()
        && !rule.api_groups.is_empty()
        && !rule.resources.is_empty())
    .then(|| ResourceRule {
        verbs: rule.verbs.clone(),
        api_groups: rule.api_groups.clone(),
        resources: rule.resources.clone(),
        resource_names: rule.resource_names.clone(),
    });
    let non_resource =
        (!rule.verbs.is_empty() && !rule.non_resource_urls.is_empty()).then(|| NonResourceRule {
            verbs: rule.verbs.clone(),
            non_resource_urls: rule.non_resource_urls.clone(),
        });
    (resource, non_resource)
}

/// An ABAC line in Kubernetes' terms, as upstream's ABAC `RulesFor` writes it: `readonly`
/// means get, list and watch.
fn abac_halves(
    line: &AbacRule,
    resources: bool,
) -> (Option<ResourceRule>, Option<NonResourceRule>) {
    let verbs = abac_verbs(line);
    let resource = (resources && !line.resource.is_empty()).then(|| ResourceRule {
        verbs: verbs.clone(),
        api_groups: vec![line.api_group.clone()],
        resources: vec![line.resource.clone()],
        resource_names: Vec::new(),
    });
    let non_resource = (!line.non_resource_path.is_empty()).then(|| NonResourceRule {
        verbs,
        non_resource_urls: vec![line.non_resource_path.clone()],
    });
    (resource, non_resource)
}

/// An ABAC line's verbs in Kubernetes' terms, as upstream's ABAC `RulesFor` writes them.
fn abac_verbs(line: &AbacRule) -> Vec<String> {
    if line.readonly {
        vec!["get".into(), "list".into(), "watch".into()]
    } else {
        vec!["*".into()]
    }
}

/// Positive entries of a list (negated entries only narrow what a deny matches, so ignoring
/// them over-approximates the deny, which is the safe side here).
fn positives(entries: &[String]) -> impl Iterator<Item = &str> {
    entries
        .iter()
        .map(String::as_str)
        .filter(|entry| !is_negated(entry))
}

fn any_pair(a: &[String], b: &[String], overlap: impl Fn(&str, &str) -> bool) -> bool {
    positives(a).any(|x| positives(b).any(|y| overlap(x, y)))
}

fn same_or_star(x: &str, y: &str) -> bool {
    x == "*" || y == "*" || x == y
}

/// Whether some resource (with subresource) matches both resource entries.
fn resources_overlap(x: &str, y: &str) -> bool {
    // `*/sub` matches any resource with exactly that subresource.
    let star_sub = |pattern: &str, other: &str| {
        pattern.strip_prefix("*/").is_some_and(|sub| {
            other
                .split_once('/')
                .is_some_and(|(_, other_sub)| other_sub == sub)
        })
    };
    same_or_star(x, y) || star_sub(x, y) || star_sub(y, x)
}

/// Whether some path matches both non-resource URL entries (`*`, exact, or `prefix*`).
fn urls_overlap(x: &str, y: &str) -> bool {
    fn prefix(url: &str) -> Option<&str> {
        url.ends_with('*').then(|| url.trim_end_matches('*'))
    }
    match (prefix(x), prefix(y)) {
        _ if x == "*" || y == "*" || x == y => true,
        (Some(px), Some(py)) => px.starts_with(py) || py.starts_with(px),
        (Some(px), None) => y.starts_with(px),
        (None, Some(py)) => x.starts_with(py),
        (None, None) => false,
    }
}

/// Whether `deny` may match a request `allow` covers (an over-approximation: safe).
fn deny_overlaps_resource(deny: &ReviewedRule, allow: &ResourceRule) -> bool {
    match &deny.pattern {
        RulePattern::Rbac(rule) => {
            any_pair(&rule.verbs, &allow.verbs, same_or_star)
                && any_pair(&rule.api_groups, &allow.api_groups, same_or_star)
                && any_pair(&rule.resources, &allow.resources, resources_overlap)
                && (rule.resource_names.is_empty()
                    || allow.resource_names.is_empty()
                    || any_pair(&rule.resource_names, &allow.resource_names, |x, y| x == y))
        }
        // Only RBAC rules deny.
        RulePattern::Abac { .. } | RulePattern::Everything => true,
    }
}

fn deny_overlaps_non_resource(deny: &ReviewedRule, allow: &NonResourceRule) -> bool {
    match &deny.pattern {
        // A RoleBinding's deny never meets a non-resource request (it has no namespace).
        RulePattern::Rbac(_) if deny.tier == RuleTier::Namespace => false,
        RulePattern::Rbac(rule) => {
            any_pair(&rule.verbs, &allow.verbs, same_or_star)
                && any_pair(
                    &rule.non_resource_urls,
                    &allow.non_resource_urls,
                    urls_overlap,
                )
        }
        RulePattern::Abac { .. } | RulePattern::Everything => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_entries_overlap_as_the_matcher_reads_them() {
        assert!(resources_overlap("*", "pods"));
        assert!(resources_overlap("pods", "pods"));
        assert!(!resources_overlap("pods", "pods/log"));
        assert!(resources_overlap("*/log", "pods/log"));
        assert!(resources_overlap("pods/log", "*/log"));
        assert!(!resources_overlap("*/log", "pods"));
        assert!(!resources_overlap("*/log", "*/exec"));
        assert!(!resources_overlap("secrets", "pods"));
    }

    #[test]
    fn url_entries_overlap_on_shared_paths() {
        assert!(urls_overlap("/healthz", "/healthz"));
        assert!(!urls_overlap("/healthz", "/livez"));
        assert!(urls_overlap("/api/*", "/api/v1"));
        assert!(urls_overlap("/api/v1", "/api/*"));
        assert!(urls_overlap("/api/*", "/a*"));
        assert!(!urls_overlap("/api/*", "/apis"));
        assert!(urls_overlap("*", "/x"));
        assert!(!urls_overlap("/logs/*", "/metrics/*"));
    }
}
