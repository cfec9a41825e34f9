//! Whether a write's author holds every request a rule would grant: exact over wildcards,
//! negation, deny rules and the chain's precedence (docs/security.md §4).
//!
//! Upstream's `Covers` breaks a rule into single permissions and keeps `*` as a literal, so a
//! grant of `verbs: ["*", "-delete"]` "covers" the literal verb `*` — and with it `delete`.
//! Here a rule is covered when every request it matches is allowed to its author, which is
//! decided on finitely many requests:
//!
//! * **Only the author's rules decide.** A request of the author is decided by the bindings
//!   whose subjects name the author (its user, its groups), the ABAC lines that match it, the
//!   chain and the FieldPolicies' protected paths (a plain allow does not cover a write of a
//!   protected resource). The author's *view* is a policy of just those, answered by the
//!   reference evaluator, which the compiled engine is property-tested against.
//! * **Every value no rule names behaves alike.** Rules match by equality, `*`, negation,
//!   `*/sub` and URL prefixes, so along each dimension the values that matter are the ones the
//!   author's rules and the written rule name, plus one fresh value for all others (a URL:
//!   one path under each prefix that no longer prefix or literal claims). Dimensions are
//!   fixed one after another (verb, API group, resource and subresource, name), and once one
//!   is fixed only the rules that still match take part, so the values of the next one come
//!   from fewer rules: the requests asked are the classes the rules tell apart, not the
//!   product of every value named.
//! * **Scopes.** A Role or RoleBinding grants resource requests in its namespace; a ClusterRole
//!   or ClusterRoleBinding grants them in every namespace and at cluster scope, so they are
//!   asked at cluster scope, in every namespace the author's RoleBindings or ABAC lines name,
//!   and in one no rule names. Non-resource URLs a rule names are asked at cluster scope,
//!   where they are decided, whatever object names them (as upstream asks a RoleBinding's
//!   author to hold the URLs of the ClusterRole it binds).
//!
//! Content clauses: a grant the author holds only under clauses (fields, selectors, a CEL
//! condition) does not count as held, a deny under clauses counts as unconditional — what
//! such a rule allows or denies depends on what a request carries, which a write cannot
//! know. A rule written with clauses is covered, request by request, by the author's
//! unrestricted access, or, where nothing denies it, by a rule the author holds under
//! exactly the same clauses.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::engine::delta::fresh;
use crate::engine::explain::rbac_rule_ref;
use crate::engine::reference::ReferenceEvaluator;
use crate::engine::{Decision, EngineConfig, Response};
use crate::policy::abac;
use crate::policy::content::Clauses;
use crate::policy::model::{AbacRule, BindingKind, PolicyRule, PolicySet, Role};
use crate::policy::rbac::{
    api_group_matches, has_negation, non_resource_url_matches, resource_matches,
    resource_name_matches, rule_matches, verb_matches, PRIVILEGE_VERBS,
};
use crate::request::{Action, NonResourceAttributes, Request, ResourceAttributes, UserInfo};

/// Where a written rule grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scope<'a> {
    /// A Role's or RoleBinding's namespace.
    Namespace(&'a str),
    /// A ClusterRole's or ClusterRoleBinding's: every namespace and cluster scope.
    Cluster,
}

/// A request a written rule grants that its author is not allowed, and why.
#[derive(Clone, Debug)]
pub(super) struct Gap {
    pub action: Action,
    pub why: Why,
    /// The values of `action` that stand for every value no rule names, with what they
    /// stand for (`any verb no rule names`).
    pub fresh: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Why {
    /// A deny rule reached through this binding (its description) withholds it.
    Denied(String),
    /// Nothing allows it.
    NotHeld,
    /// Held only under content clauses, which the written rule lacks.
    OnlyRestricted,
    /// The written rule's clauses: held neither unrestricted nor under exactly these.
    NotThisRestriction,
}

/// One rule reaching the author: `namespace` is its RoleBinding's, `""` for a
/// ClusterRoleBinding's.
struct Held<'p> {
    rule: &'p PolicyRule,
    namespace: &'p str,
}

/// The author's access as the check reads it.
pub(super) struct Holder<'p> {
    user: &'p UserInfo,
    view: ReferenceEvaluator,
    held: Vec<Held<'p>>,
    abac: Vec<&'p AbacRule>,
    /// `(apiGroup, resource)` of every protected path; `("*", "*")` for one on every resource.
    protected: Vec<(String, String)>,
    /// Namespaces the author's RoleBindings and ABAC lines name.
    namespaces: BTreeSet<String>,
    /// A binding's id in explanations (`RoleBinding/NS/NAME`) to its description.
    bindings: HashMap<Arc<str>, String>,
}

const READ_VERBS: [&str; 3] = ["get", "list", "watch"];
const WRITE_VERBS: [&str; 3] = ["create", "update", "patch"];

impl<'p> Holder<'p> {
    /// `aggregated`: the effective rules of aggregated ClusterRoles of `policy`.
    pub(super) fn of(
        policy: &'p PolicySet,
        aggregated: &'p HashMap<String, Vec<PolicyRule>>,
        user: &'p UserInfo,
        config: &EngineConfig,
    ) -> Self {
        let mut view = PolicySet {
            field_policies: policy.field_policies.clone(),
            ..PolicySet::default()
        };
        let mut held = Vec::new();
        let mut namespaces = BTreeSet::new();
        let mut bindings = HashMap::new();
        let mut roles = BTreeSet::new();
        for binding in policy.bindings.iter().map(Arc::as_ref) {
            let applies = binding.subjects.iter().any(|s| {
                s.user_name(&binding.namespace).as_deref() == Some(user.name.as_str())
                    || s.group_name()
                        .is_some_and(|g| user.groups.iter().any(|ug| ug == g))
            });
            if !applies {
                continue;
            }
            view.bindings.push(Arc::new(binding.clone()));
            bindings.insert(rbac_rule_ref(binding, 0).binding, binding.describe());
            if binding.kind == BindingKind::RoleBinding {
                namespaces.insert(binding.namespace.clone());
            }
            let Some((role, rules)) = super::role_of(policy, aggregated, binding) else {
                continue;
            };
            for rule in rules {
                held.push(Held {
                    rule,
                    namespace: &binding.namespace,
                });
            }
            if roles.insert((role.kind, role.namespace.clone(), role.name.clone())) {
                view.roles.push(Arc::new(Role {
                    rules: rules.iter().filter_map(unconditional).collect(),
                    aggregation_rule: None,
                    labels: Default::default(),
                    ..role.clone()
                }));
            }
        }
        let abac: Vec<&AbacRule> = policy
            .abac
            .iter()
            .filter(|line| abac::subject_matches(line, &user.name, user.as_borrowed().groups))
            .collect();
        for line in &abac {
            if !matches!(line.namespace.as_str(), "" | "*") {
                namespaces.insert(line.namespace.clone());
            }
        }
        view.abac = abac.iter().map(|line| (*line).clone()).collect();
        let protected = policy
            .protected_paths()
            .flat_map(|p| {
                if p.resources.is_empty() {
                    vec![("*".to_string(), "*".to_string())]
                } else {
                    p.resources.clone()
                }
            })
            .collect();
        Holder {
            user,
            view: ReferenceEvaluator::new(&view, config),
            held,
            abac,
            protected,
            namespaces,
            bindings,
        }
    }

    /// Every class of request `rule` grants in `scope` that the author is not allowed, one
    /// representative each, in a stable order. Deny rules grant nothing.
    pub(super) fn gaps(&self, rule: &PolicyRule, scope: Scope<'_>) -> Vec<Gap> {
        let mut gaps = Vec::new();
        if rule.deny {
            return gaps;
        }
        let mut ask = |action: Action, fresh: Vec<(String, String)>| {
            if let Some(why) = self.uncovered(rule, &action) {
                gaps.push(Gap { action, why, fresh });
            }
        };
        if !rule.resources.is_empty() {
            let namespaces: Vec<Value> = match scope {
                Scope::Namespace(namespace) => vec![Value::named(namespace)],
                Scope::Cluster => {
                    let mut named: BTreeSet<String> = self.namespaces.clone();
                    named.insert(String::new());
                    with_fresh(named, "x-other-namespace", "namespace")
                }
            };
            for namespace in &namespaces {
                let pieces = self.pieces(rule, &namespace.text);
                resource_cells(rule, namespace, &pieces, &mut ask);
            }
        }
        if !rule.non_resource_urls.is_empty() {
            let pieces = self.pieces(rule, "");
            non_resource_cells(rule, &pieces, &mut ask);
        }
        gaps
    }

    /// The rules that can decide a request of the author in `namespace` (`""`: cluster
    /// scope and non-resource URLs), with the written rule.
    fn pieces<'a>(&'a self, written: &'a PolicyRule, namespace: &str) -> Pieces<'a> {
        let mut rules: Vec<&PolicyRule> = self
            .held
            .iter()
            .filter(|h| {
                h.namespace.is_empty() || (!namespace.is_empty() && h.namespace == namespace)
            })
            .map(|h| h.rule)
            .collect();
        rules.push(written);
        Pieces {
            rules,
            abac: self
                .abac
                .iter()
                .copied()
                .filter(|line| line.namespace == "*" || line.namespace == namespace)
                .collect(),
            protected: self.protected.iter().collect(),
        }
    }

    /// Why the author does not hold `action` as `written` grants it, or `None` if it does.
    fn uncovered(&self, written: &PolicyRule, action: &Action) -> Option<Why> {
        let request = Request {
            user: self.user.clone(),
            action: action.clone(),
        };
        let response = self.view.authorize(&request);
        if response.allowed() {
            return None;
        }
        if response.decision == Decision::Deny {
            return Some(Why::Denied(self.denier(&response)));
        }
        let namespace = action.namespace();
        let held_under = |clauses: Option<&Clauses>| {
            self.held.iter().any(|h| {
                !h.rule.deny
                    && (h.namespace.is_empty()
                        || (!namespace.is_empty() && h.namespace == namespace))
                    && h.rule.clauses.is_some()
                    && clauses.is_none_or(|c| h.rule.clauses.as_deref() == Some(c))
                    && rule_matches(h.rule, action)
            })
        };
        match written.clauses.as_deref() {
            Some(clauses) if held_under(Some(clauses)) => None,
            Some(_) => Some(Why::NotThisRestriction),
            None if held_under(None) => Some(Why::OnlyRestricted),
            None => Some(Why::NotHeld),
        }
    }

    fn denier(&self, response: &Response) -> String {
        response
            .denied_by
            .first()
            .map(|by| {
                self.bindings
                    .get(&by.binding)
                    .cloned()
                    .unwrap_or_else(|| by.to_string())
            })
            .unwrap_or_default()
    }
}

/// A held rule as the view keeps it: an allow under clauses grants nothing for sure, a deny
/// under clauses may apply to any request.
fn unconditional(rule: &PolicyRule) -> Option<PolicyRule> {
    match (&rule.clauses, rule.deny) {
        (None, _) => Some(rule.clone()),
        (Some(_), false) => None,
        (Some(_), true) => Some(PolicyRule {
            clauses: None,
            attribute_restrictions: None,
            ..rule.clone()
        }),
    }
}

/// One value of a dimension: named by a rule, or standing for every value none names.
#[derive(Clone, Debug)]
struct Value {
    text: String,
    /// What a fresh value stands for (`any verb no rule names`); `None` for a named one.
    stands_for: Option<String>,
}

impl Value {
    fn named(text: &str) -> Self {
        Value {
            text: text.to_string(),
            stands_for: None,
        }
    }
}

/// The named values, then one no rule names.
fn with_fresh(named: BTreeSet<String>, base: &str, dimension: &str) -> Vec<Value> {
    let other = fresh(&named, base);
    let mut out: Vec<Value> = named.iter().map(|n| Value::named(n)).collect();
    out.push(Value {
        text: other,
        stands_for: Some(format!("any {dimension} no rule names")),
    });
    out
}

/// What can tell requests apart once some dimensions are fixed: the rules that still match
/// (the author's and the written one), the ABAC lines and the protected resources.
#[derive(Clone)]
struct Pieces<'a> {
    rules: Vec<&'a PolicyRule>,
    abac: Vec<&'a AbacRule>,
    protected: Vec<&'a (String, String)>,
}

impl<'a> Pieces<'a> {
    fn narrow(
        &self,
        rule: impl Fn(&PolicyRule) -> bool,
        line: impl Fn(&AbacRule) -> bool,
        protected: impl Fn(&(String, String)) -> bool,
    ) -> Pieces<'a> {
        Pieces {
            rules: self.rules.iter().copied().filter(|r| rule(r)).collect(),
            abac: self.abac.iter().copied().filter(|l| line(l)).collect(),
            protected: self
                .protected
                .iter()
                .copied()
                .filter(|p| protected(p))
                .collect(),
        }
    }

    fn verbs(&self) -> Vec<Value> {
        let mut named: BTreeSet<String> = BTreeSet::new();
        for rule in &self.rules {
            for verb in &rule.verbs {
                named.insert(verb.strip_prefix('-').unwrap_or(verb).to_string());
            }
        }
        // A limited grant's `*` does not cover the privilege verbs.
        if self.rules.iter().any(|r| has_negation(r)) {
            named.extend(PRIVILEGE_VERBS.map(str::to_string));
        }
        // ABAC tells read-only verbs from the others; protected paths, writes.
        if !self.abac.is_empty() {
            named.extend(READ_VERBS.map(str::to_string));
        }
        if !self.protected.is_empty() {
            named.extend(WRITE_VERBS.map(str::to_string));
        }
        named.remove("*");
        with_fresh(named, "x-other-verb", "verb")
    }

    fn groups(&self) -> Vec<Value> {
        let mut named: BTreeSet<String> = BTreeSet::new();
        for rule in &self.rules {
            named.extend(rule.api_groups.iter().cloned());
        }
        named.extend(self.abac.iter().map(|l| l.api_group.clone()));
        named.extend(self.protected.iter().map(|(g, _)| g.clone()));
        named.remove("*");
        with_fresh(named, "x-other.example", "API group")
    }

    /// `(resource, subresource)` pairs. Rules match the combined `resource/subresource`, so
    /// an entry names every way of splitting it at a `/` (a request may carry a resource
    /// with a `/` in it), and a negated bare resource `-r` also the resources under `r/`.
    fn resources(&self) -> Vec<(Value, Value)> {
        let (mut bases, mut subs) = (BTreeSet::new(), BTreeSet::new());
        for rule in &self.rules {
            for entry in &rule.resources {
                let (negated, entry) = match entry.strip_prefix('-') {
                    Some(entry) => (true, entry),
                    None => (false, entry.as_str()),
                };
                bases.insert(entry.to_string());
                for (i, _) in entry.match_indices('/') {
                    bases.insert(entry[..i].to_string());
                    subs.insert(entry[i + 1..].to_string());
                }
                if negated && !entry.contains('/') {
                    bases.insert(format!("{entry}/x-other-resources"));
                }
            }
        }
        bases.extend(self.abac.iter().map(|l| l.resource.clone()));
        bases.extend(self.protected.iter().map(|(_, r)| r.clone()));
        bases.remove("*");
        subs.remove("*");
        subs.remove("");
        let bases = with_fresh(bases, "x-other-resources", "resource");
        let mut subs = with_fresh(subs, "x-other-subresource", "subresource");
        subs.insert(0, Value::named(""));
        let mut out = Vec::with_capacity(bases.len() * subs.len());
        for base in &bases {
            for sub in &subs {
                out.push((base.clone(), sub.clone()));
            }
        }
        out
    }

    fn names(&self) -> Vec<Value> {
        let mut named: BTreeSet<String> = BTreeSet::new();
        for rule in &self.rules {
            named.extend(rule.resource_names.iter().cloned());
        }
        named.remove("");
        let mut out = with_fresh(named, "x-other-name", "name");
        out.insert(0, Value::named(""));
        out
    }

    /// One path per class of paths the rules' URLs and the ABAC lines' paths tell apart:
    /// each literal, and under each prefix one path that no longer prefix and no literal
    /// claims.
    fn paths(&self) -> Vec<Value> {
        let (mut literals, mut prefixes) = (BTreeSet::new(), BTreeSet::new());
        let entries = self
            .rules
            .iter()
            .flat_map(|r| r.non_resource_urls.iter())
            .chain(self.abac.iter().map(|l| &l.non_resource_path));
        for entry in entries {
            match entry.strip_suffix('*') {
                Some(_) => prefixes.insert(entry.trim_end_matches('*').to_string()),
                None => literals.insert(entry.clone()),
            };
        }
        prefixes.insert(String::new());
        let mut out: Vec<Value> = literals.iter().map(|l| Value::named(l)).collect();
        for prefix in &prefixes {
            // The next character of a longer prefix would put the path under it.
            let taken: BTreeSet<char> = prefixes
                .iter()
                .filter(|q| q.len() > prefix.len() && q.starts_with(prefix.as_str()))
                .filter_map(|q| q[prefix.len()..].chars().next())
                .collect();
            let candidates = ('x'..='z')
                .chain('a'..='w')
                .chain('A'..='Z')
                .chain('0'..='9')
                .chain((0xA1u32..0x10_FFFF).filter_map(char::from_u32));
            if let Some(path) = candidates
                .filter(|c| !taken.contains(c))
                .map(|c| format!("{prefix}{c}-other-path"))
                .find(|path| !literals.contains(path))
            {
                let stands_for = if prefix.is_empty() {
                    "any path no rule names".to_string()
                } else {
                    format!("any path under `{prefix}` no rule names")
                };
                out.push(Value {
                    text: path,
                    stands_for: Some(stands_for),
                });
            }
        }
        out
    }
}

/// The fresh values among `values`, with what each stands for.
fn fresh_of(values: &[&Value]) -> Vec<(String, String)> {
    values
        .iter()
        .filter_map(|v| v.stands_for.clone().map(|s| (v.text.clone(), s)))
        .collect()
}

/// The verbs `written` matches, each with the pieces that can decide a request of it: the
/// rules matching the verb, the ABAC lines allowing it (a read-only line only reads), and the
/// protected paths when `keep_protected` (for resource requests: a URL has no content).
fn verb_classes<'a>(
    written: &PolicyRule,
    pieces: &Pieces<'a>,
    keep_protected: bool,
) -> Vec<(Value, Pieces<'a>)> {
    pieces
        .verbs()
        .into_iter()
        .filter(|verb| verb_matches(written, &verb.text))
        .map(|verb| {
            let read = READ_VERBS.contains(&verb.text.as_str());
            let by_verb = pieces.narrow(
                |r| verb_matches(r, &verb.text),
                |l| read || !l.readonly,
                |_| keep_protected,
            );
            (verb, by_verb)
        })
        .collect()
}

/// Every class of resource request in `namespace` that `written` matches, narrowing the
/// pieces one dimension at a time.
fn resource_cells(
    written: &PolicyRule,
    namespace: &Value,
    pieces: &Pieces<'_>,
    visit: &mut impl FnMut(Action, Vec<(String, String)>),
) {
    for (verb, by_verb) in verb_classes(written, pieces, true) {
        for group in by_verb.groups() {
            if !api_group_matches(written, &group.text) {
                continue;
            }
            let by_group = by_verb.narrow(
                |r| api_group_matches(r, &group.text),
                |l| l.api_group == "*" || l.api_group == group.text,
                |(g, _)| g == "*" || *g == group.text,
            );
            for (resource, subresource) in by_group.resources() {
                if !resource_matches(written, &resource.text, &subresource.text) {
                    continue;
                }
                let by_resource = by_group.narrow(
                    |r| resource_matches(r, &resource.text, &subresource.text),
                    |l| l.resource == "*" || l.resource == resource.text,
                    |(_, r)| r == "*" || *r == resource.text,
                );
                for name in by_resource.names() {
                    if !resource_name_matches(written, &name.text) {
                        continue;
                    }
                    let fresh =
                        fresh_of(&[namespace, &verb, &group, &resource, &subresource, &name]);
                    visit(
                        Action::Resource(ResourceAttributes {
                            namespace: namespace.text.clone(),
                            verb: verb.text.clone(),
                            group: group.text.clone(),
                            version: "*".to_string(),
                            resource: resource.text.clone(),
                            subresource: subresource.text.clone(),
                            name: name.text,
                        }),
                        fresh,
                    );
                }
            }
        }
    }
}

/// Every class of non-resource request that `written` matches.
fn non_resource_cells(
    written: &PolicyRule,
    pieces: &Pieces<'_>,
    visit: &mut impl FnMut(Action, Vec<(String, String)>),
) {
    let pieces = pieces.narrow(|r| !r.non_resource_urls.is_empty(), |_| true, |_| false);
    for (verb, by_verb) in verb_classes(written, &pieces, false) {
        for path in by_verb.paths() {
            if non_resource_url_matches(written, &path.text) {
                let fresh = fresh_of(&[&verb, &path]);
                visit(
                    Action::NonResource(NonResourceAttributes {
                        path: path.text,
                        verb: verb.text.clone(),
                    }),
                    fresh,
                );
            }
        }
    }
}
