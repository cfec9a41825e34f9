//! The access delta of a policy change (docs/cli.md §6): who gains and who loses which access, per
//! scope and action pattern, computed from the changed objects and the engines' indexes, not
//! by enumerating requests.
//!
//! How it is exact:
//!
//! 1. **Where a change can show.** A request's answer depends only on the bindings whose
//!    subjects it matches and on their roles' effective rules (aggregation resolved). So only
//!    requests of a subject named by a changed binding, or by a binding of a role whose
//!    effective rules changed, can change answer, and only in the binding's scope (its
//!    namespace; everywhere for a ClusterRoleBinding) and within the action patterns of those
//!    rules (old and new). Those subjects are the *changed subjects*.
//! 2. **Finitely many kinds of request.** Rules match literals and wildcards (and seed 003's
//!    negated resources), so along each dimension (verb, API group, resource, subresource,
//!    name, URL) every value the policies never name behaves alike: the atoms of a dimension
//!    are the values the policies name plus one fresh value standing for all others; a URL
//!    prefix `p*` adds `p` followed by a fresh segment. Namespaces likewise: a RoleBinding's
//!    change is asked in its namespace; a ClusterRoleBinding's in `""` (cluster scope), in
//!    every namespace a RoleBinding or an ABAC line names (a partner may be decided there), and
//!    in a fresh one.
//!    Each combination of atoms inside a changed rule's patterns is one *cell*, asked of both
//!    engines as one request.
//! 3. **Which subjects gain or lose in a cell.** A subject `s` gains when some request that
//!    `s` takes part in (its user, or one of its groups) is not allowed before and allowed
//!    after. Under the precedence of the chain (first deciding rule wins), a request's answer
//!    is the best of the answers its subjects would get alone, so a changed request has a
//!    changed pair of subjects doing the same: it is enough to try each changed subject alone
//!    and with one partner of every kind, where a partner is any subject who-can names for the
//!    cell (before or after, allowed or denied) and its kind is how the chain decides it alone,
//!    before and after (decision and precedence tier). An ABAC line naming both a user and a
//!    group matches only the two together, so that pair joins each changed subject as is.
//!    Each subject listed has that request as its witness.
//!
//! Rows then merge: a cell's namespaces become one row everywhere (with the namespaces whose
//! answer differs excepted and given rows of their own), and cells that differ in one
//! dimension become one row with `*` when they cover its fresh value (with the values they do
//! not cover excepted). `tests/properties/delta.rs` holds the result to both directions of exactness on
//! random policies and changes: every request whose answer changes is covered by a row of its
//! direction naming one of its subjects, and every subject a row names has a witness there.
//!
//! Rules whose clauses read content are compared by the answer without content (the fold),
//! so a rule that gains a condition shows as a loss. ABAC policy lines are compared by content
//! (file and position do not matter, [`AbacChanges`]); a line one policy has and the other
//! does not is a region like a changed binding's (step 1: its subjects, namespace and the
//! actions it matches, [`abac_region`]), and the rest of the argument holds as it is: a
//! subject alone is matched only by the lines naming it, so partners keep their kind, and a
//! line naming a user and a group is tried as that pair. A changed line naming every user
//! (`*`) is refused ([`DeltaError::AbacWildcard`]), and so is a change of the paths
//! FieldPolicies protect ([`DeltaError::ProtectedPathsChanged`]), which changes the fold of
//! every plain allow on writes; the rest of a FieldPolicy never changes a fold.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::engine::{Authorize, Decision, Engine, Response};
use crate::policy::model::{
    AbacRule, Binding, BindingKind, PolicyRule, PolicySet, Role, RoleKey, RoleKind,
};
use crate::policy::rbac::{
    has_negation, is_negated, non_resource_url_entry_matches, PRIVILEGE_VERBS,
};
use crate::request::{Action, NonResourceAttributes, Request, ResourceAttributes, UserInfo};

/// Why a delta was not computed.
#[derive(Debug, thiserror::Error)]
pub enum DeltaError {
    /// A changed ABAC line matches every user (`*`; the loader turns `*` into the group
    /// `system:authenticated`, so only a policy made in memory has one): the delta names
    /// users and groups, and no name stands for everyone.
    #[error(
        "an ABAC line that matches every user (`*`) differs; the delta names users and \
         groups, not everyone. The lines that differ:\n{0}"
    )]
    AbacWildcard(AbacChanges),
    #[error(
        "the FieldPolicies protect different paths, which changes what every plain allow \
         grants on writes; authzd diff computes the delta of RBAC objects only, so apply a \
         change of protected paths on its own"
    )]
    ProtectedPathsChanged,
}

/// The ABAC lines of one policy whose content the other has nowhere, each with where it is.
///
/// Lines are compared by what they say, never by where they are: ABAC allows a request when any
/// line does, so neither a line's file, its position nor a repetition of it changes an answer.
/// Two copies of one policy in different directories are therefore no change at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AbacChanges {
    /// Lines of the old policy the new one does not have (with their old `file:line`).
    pub removed: Vec<AbacRule>,
    /// Lines of the new policy the old one did not have (with their new `file:line`).
    pub added: Vec<AbacRule>,
}

/// What an ABAC line says: every field but its source.
type AbacContent<'a> = (&'a str, &'a str, bool, &'a str, &'a str, &'a str, &'a str);

fn abac_content(line: &AbacRule) -> AbacContent<'_> {
    (
        &line.user,
        &line.group,
        line.readonly,
        &line.api_group,
        &line.namespace,
        &line.resource,
        &line.non_resource_path,
    )
}

impl AbacChanges {
    /// `None` when `old` and `new` say the same lines, wherever each is written.
    pub fn between(old: &[AbacRule], new: &[AbacRule]) -> Option<Self> {
        let in_old: BTreeSet<AbacContent<'_>> = old.iter().map(abac_content).collect();
        let in_new: BTreeSet<AbacContent<'_>> = new.iter().map(abac_content).collect();
        let only = |lines: &[AbacRule], other: &BTreeSet<AbacContent<'_>>| -> Vec<AbacRule> {
            lines
                .iter()
                .filter(|line| !other.contains(&abac_content(line)))
                .cloned()
                .collect()
        };
        let changes = AbacChanges {
            removed: only(old, &in_new),
            added: only(new, &in_old),
        };
        (!changes.removed.is_empty() || !changes.added.is_empty()).then_some(changes)
    }
}

/// One line per changed ABAC line: `- FILE:LINE: SPEC` for an old one, `+ FILE:LINE: SPEC` for
/// a new one, the spec in the internal (v1beta1) shape the loader converts every line to.
impl std::fmt::Display for AbacChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (sign, lines) in [("-", &self.removed), ("+", &self.added)] {
            for line in lines {
                if !first {
                    writeln!(f)?;
                }
                first = false;
                write!(f, "  {sign} {}: {}", line.source, abac_spec(line))?;
            }
        }
        Ok(())
    }
}

/// An ABAC line's spec as JSON, fields in upstream's order, empty strings and `false` left out
/// (as a hand-written line leaves them out).
fn abac_spec(line: &AbacRule) -> String {
    let mut fields: Vec<String> = Vec::new();
    for (key, value) in [
        ("user", &line.user),
        ("group", &line.group),
        ("apiGroup", &line.api_group),
        ("namespace", &line.namespace),
        ("resource", &line.resource),
        ("nonResourcePath", &line.non_resource_path),
    ] {
        if !value.is_empty() {
            // serde_json quotes and escapes the value as JSON does.
            fields.push(format!(
                "\"{key}\": {}",
                serde_json::Value::from(value.as_str())
            ));
        }
    }
    if line.readonly {
        fields.push("\"readonly\": true".into());
    }
    format!("{{{}}}", fields.join(", "))
}

/// Subjects by kind (service accounts are users named `system:serviceaccount:NS:NAME`).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Subjects {
    pub users: BTreeSet<String>,
    pub groups: BTreeSet<String>,
}

impl Subjects {
    pub fn is_empty(&self) -> bool {
        self.users.is_empty() && self.groups.is_empty()
    }

    /// The subjects whose name matches the glob `pattern` (`*` any run, `?` one character).
    pub fn matching<'a>(&'a self, pattern: &'a str) -> impl Iterator<Item = &'a String> + 'a {
        self.users
            .iter()
            .chain(&self.groups)
            .filter(move |name| glob_matches(pattern, name))
    }
}

/// `*` matches any run of characters, `?` one; everything else itself.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Iterative matching with one backtrack point (the last `*`): linear in practice.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

/// One value of a dimension, or every value but some, or (URLs) every path under a prefix
/// but some paths and deeper prefixes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pattern {
    Is(String),
    AnyExcept(Vec<String>),
    Prefix {
        prefix: String,
        except: Vec<String>,
        except_prefixes: Vec<String>,
    },
}

impl Pattern {
    pub fn matches(&self, value: &str) -> bool {
        match self {
            Pattern::Is(v) => v == value,
            Pattern::AnyExcept(except) => !except.iter().any(|e| e == value),
            Pattern::Prefix {
                prefix,
                except,
                except_prefixes,
            } => {
                value.starts_with(prefix.as_str())
                    && !except.iter().any(|e| e == value)
                    && !except_prefixes
                        .iter()
                        .any(|p| value.starts_with(p.as_str()))
            }
        }
    }
}

/// Where a row holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Every namespace and cluster scope, but the namespaces listed (`""`: cluster scope).
    Everywhere { except: Vec<String> },
    /// One namespace (`""`: cluster scope, the namespace of cluster-scoped resources).
    Namespace(String),
}

impl Scope {
    pub fn matches(&self, namespace: &str) -> bool {
        match self {
            Scope::Everywhere { except } => !except.iter().any(|e| e == namespace),
            Scope::Namespace(ns) => ns == namespace,
        }
    }
}

/// The actions of a row.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(clippy::large_enum_variant)] // rows are few; boxing would only add indirection
pub enum ActionPattern {
    Resource {
        verb: Pattern,
        group: Pattern,
        resource: Pattern,
        subresource: Pattern,
        name: Pattern,
    },
    NonResource {
        verb: Pattern,
        path: Pattern,
    },
}

impl ActionPattern {
    pub fn matches(&self, action: &Action) -> bool {
        match (self, action) {
            (
                ActionPattern::Resource {
                    verb,
                    group,
                    resource,
                    subresource,
                    name,
                },
                Action::Resource(r),
            ) => {
                verb.matches(&r.verb)
                    && group.matches(&r.group)
                    && resource.matches(&r.resource)
                    && subresource.matches(&r.subresource)
                    && name.matches(&r.name)
            }
            (ActionPattern::NonResource { verb, path }, Action::NonResource(n)) => {
                verb.matches(&n.verb) && path.matches(&n.path)
            }
            _ => false,
        }
    }
}

/// A request that shows a subject's gain or loss.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Witness {
    /// `user:NAME` or `group:NAME`: the subject it witnesses.
    pub subject: String,
    pub request: Request,
    pub gain: bool,
}

/// One row of the delta.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub scope: Scope,
    pub action: ActionPattern,
    pub gains: Subjects,
    pub losses: Subjects,
    /// One request per subject listed, gains first.
    pub witnesses: Vec<Witness>,
}

/// What a change does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    pub rows: Vec<Row>,
}

impl Delta {
    /// The row of `direction` covering `request` and naming one of its subjects, if any.
    pub fn covering(&self, request: &Request, gain: bool) -> Option<&Row> {
        self.rows.iter().find(|row| {
            let subjects = if gain { &row.gains } else { &row.losses };
            row.scope.matches(request.action.namespace())
                && row.action.matches(&request.action)
                && (subjects.users.contains(&request.user.name)
                    || request
                        .user
                        .groups
                        .iter()
                        .any(|g| subjects.groups.contains(g)))
        })
    }
}

/// The fresh value of a dimension: one the policies never name.
pub(super) fn fresh(named: &BTreeSet<String>, base: &str) -> String {
    let mut value = base.to_string();
    while named.contains(&value) {
        value.push('~');
    }
    value
}

/// Every value the two policies name, per dimension, and the fresh values.
pub(super) struct Atoms {
    verbs: Vec<String>,
    groups: Vec<String>,
    resources: Vec<String>,
    subresources: Vec<String>,
    names: Vec<String>,
    /// Literal URLs, and for each prefix `p*` the URL `p` + a fresh segment.
    paths: Vec<String>,
    /// What each URL atom stands for.
    path_patterns: HashMap<String, Pattern>,
    fresh_verb: String,
    fresh_group: String,
    fresh_resource: String,
    fresh_subresource: String,
    fresh_name: String,
}

impl Atoms {
    /// Whether `value` is one of the fresh values, standing for every value no policy names
    /// (a URL: every path under a prefix no longer one names).
    pub(super) fn is_fresh(&self, value: &str) -> bool {
        [
            &self.fresh_verb,
            &self.fresh_group,
            &self.fresh_resource,
            &self.fresh_subresource,
            &self.fresh_name,
        ]
        .iter()
        .any(|fresh| fresh.as_str() == value)
            || matches!(self.path_patterns.get(value), Some(Pattern::Prefix { .. }))
    }

    /// The atoms of `policies`, and of `extra` rules that decide nothing but must each see
    /// every cell wholly inside or wholly outside their patterns (a ChangeGate's access:
    /// [`crate::engine::gate`]).
    pub(super) fn of(policies: [&PolicySet; 2], extra: &[&PolicyRule]) -> Self {
        // Borrowed and hashed while scanning (every rule of both policies), owned and sorted
        // once at the end.
        type Seen<'p> = rustc_hash::FxHashSet<&'p str>;
        let (mut verbs, mut groups, mut resources, mut subresources): (Seen, Seen, Seen, Seen) =
            Default::default();
        let (mut names, mut urls, mut prefixes): (Seen, Seen, Seen) = Default::default();
        for rule in policies
            .iter()
            .flat_map(|p| p.roles.iter())
            .flat_map(|r| &r.rules)
            .chain(extra.iter().copied())
        {
            for verb in &rule.verbs {
                let verb = verb.strip_prefix('-').unwrap_or(verb);
                if verb != "*" {
                    verbs.insert(verb);
                }
            }
            // A limited grant's `*` does not cover the privilege verbs: they are not alike
            // the verbs no policy names.
            if has_negation(rule) {
                verbs.extend(PRIVILEGE_VERBS);
            }
            groups.extend(
                rule.api_groups
                    .iter()
                    .map(String::as_str)
                    .filter(|g| *g != "*"),
            );
            for resource in &rule.resources {
                let resource = resource.strip_prefix('-').unwrap_or(resource);
                let (base, sub) = resource.split_once('/').unwrap_or((resource, ""));
                if base != "*" {
                    resources.insert(base);
                }
                if !sub.is_empty() && sub != "*" {
                    subresources.insert(sub);
                }
            }
            names.extend(rule.resource_names.iter().map(String::as_str));
            for url in &rule.non_resource_urls {
                // As upstream: a trailing `*` makes a prefix of what is left without any.
                match url.strip_suffix('*') {
                    Some(_) => prefixes.insert(url.trim_end_matches('*')),
                    None => urls.insert(url.as_str()),
                };
            }
        }
        // ABAC lines decide partners' answers (they are not analysed as changes): what they
        // tell apart is what they name, and read-only verbs.
        for line in policies.iter().flat_map(|p| p.abac.iter()) {
            verbs.extend(["get", "list", "watch"]);
            for (set, value) in [
                (&mut groups, &line.api_group),
                (&mut resources, &line.resource),
            ] {
                if value != "*" {
                    set.insert(value.as_str());
                }
            }
            match line.non_resource_path.strip_suffix('*') {
                Some(_) => prefixes.insert(line.non_resource_path.trim_end_matches('*')),
                None => urls.insert(line.non_resource_path.as_str()),
            };
        }
        let owned =
            |set: Seen| -> BTreeSet<String> { set.into_iter().map(str::to_string).collect() };
        let (verbs, groups, resources, mut subresources) = (
            owned(verbs),
            owned(groups),
            owned(resources),
            owned(subresources),
        );
        let (mut names, urls, mut prefixes) = (owned(names), owned(urls), owned(prefixes));
        let fresh_verb = fresh(&verbs, "x-other-verb");
        let fresh_group = fresh(&groups, "x-other.example");
        let fresh_resource = fresh(&resources, "x-other-resources");
        let fresh_subresource = fresh(&subresources, "x-other-subresource");
        let fresh_name = fresh(&names, "x-other-name");
        let segment = "x-other-path";
        let fresh_path = fresh(&urls, &format!("/{segment}"));
        let mut path_patterns = HashMap::new();
        for url in &urls {
            path_patterns.insert(url.clone(), Pattern::Is(url.clone()));
        }
        // `*` (the empty prefix) is the fresh path's class.
        prefixes.insert(String::new());
        for prefix in &prefixes {
            let atom = if prefix.is_empty() {
                fresh_path.clone()
            } else {
                format!("{prefix}{segment}")
            };
            let pattern = Pattern::Prefix {
                prefix: prefix.clone(),
                except: urls
                    .iter()
                    .filter(|u| u.starts_with(prefix.as_str()))
                    .cloned()
                    .collect(),
                except_prefixes: prefixes
                    .iter()
                    .filter(|q| q.len() > prefix.len() && q.starts_with(prefix.as_str()))
                    .cloned()
                    .collect(),
            };
            path_patterns.insert(atom, pattern);
        }
        let paths: BTreeSet<String> = path_patterns.keys().cloned().collect();
        // A name atom for requests without one (collections, creates).
        names.insert(String::new());
        subresources.insert(String::new());
        Atoms {
            verbs: with(verbs, &fresh_verb),
            groups: with(groups, &fresh_group),
            resources: with(resources, &fresh_resource),
            subresources: with(subresources, &fresh_subresource),
            names: with(names, &fresh_name),
            paths: paths.into_iter().collect(),
            path_patterns,
            fresh_verb,
            fresh_group,
            fresh_resource,
            fresh_subresource,
            fresh_name,
        }
    }
}

fn with(mut set: BTreeSet<String>, fresh: &str) -> Vec<String> {
    set.insert(fresh.to_string());
    set.into_iter().collect()
}

/// A cell's action, without its namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Cell {
    Resource([String; 5]),
    NonResource([String; 2]),
}

impl Cell {
    pub(super) fn action(&self, namespace: &str) -> Action {
        match self {
            Cell::Resource([verb, group, resource, subresource, name]) => {
                Action::Resource(ResourceAttributes {
                    namespace: namespace.to_string(),
                    verb: verb.clone(),
                    group: group.clone(),
                    version: String::new(),
                    resource: resource.clone(),
                    subresource: subresource.clone(),
                    name: name.clone(),
                })
            }
            Cell::NonResource([verb, path]) => Action::NonResource(NonResourceAttributes {
                path: path.clone(),
                verb: verb.clone(),
            }),
        }
    }
}

/// The cells a rule's patterns reach (a superset: evaluating a cell the rule does not match
/// only finds no change there).
fn cells_of(rule: &PolicyRule, atoms: &Atoms, out: &mut BTreeSet<Cell>) {
    // `*`, or a negation (seed 003: every value but the negated), reaches every atom.
    let pick = |listed: &[String], all: &[String]| -> Vec<String> {
        if listed.iter().any(|v| v == "*" || is_negated(v)) {
            all.to_vec()
        } else {
            listed.to_vec()
        }
    };
    let verbs = pick(&rule.verbs, &atoms.verbs);
    if !rule.non_resource_urls.is_empty() {
        for url in &rule.non_resource_urls {
            // The atoms the entry matches, by the matcher rules are matched with; an exact URL
            // is an atom itself.
            let paths: Vec<&String> = atoms
                .paths
                .iter()
                .filter(|p| non_resource_url_entry_matches(url, p))
                .collect();
            for verb in &verbs {
                for path in &paths {
                    out.insert(Cell::NonResource([verb.clone(), (*path).clone()]));
                }
            }
        }
    }
    if rule.resources.is_empty() {
        return;
    }
    let groups = pick(&rule.api_groups, &atoms.groups);
    let names = if rule.resource_names.is_empty() {
        atoms.names.clone()
    } else {
        rule.resource_names.clone()
    };
    let mut pairs: BTreeSet<(String, String)> = BTreeSet::new();
    for resource in &rule.resources {
        let negated = is_negated(resource);
        let resource = resource.strip_prefix('-').unwrap_or(resource);
        let (base, sub) = resource.split_once('/').unwrap_or((resource, ""));
        let bases: Vec<String> = if base == "*" || negated {
            atoms.resources.clone()
        } else {
            vec![base.to_string()]
        };
        let subs: Vec<String> = if sub == "*" || base == "*" || negated {
            atoms.subresources.clone()
        } else {
            vec![sub.to_string()]
        };
        for b in &bases {
            for s in &subs {
                pairs.insert((b.clone(), s.clone()));
            }
        }
    }
    for verb in &verbs {
        for group in &groups {
            for (resource, subresource) in &pairs {
                for name in &names {
                    out.insert(Cell::Resource([
                        verb.clone(),
                        group.clone(),
                        resource.clone(),
                        subresource.clone(),
                        name.clone(),
                    ]));
                }
            }
        }
    }
}

/// A request's subject as the delta names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Who {
    User(String),
    Group(String),
}

/// `items` in key order, one per key (the last, as a map built in order would keep).
fn by_key<'a, T, K: Ord>(items: &'a [T], key: impl Fn(&'a T) -> K) -> Vec<&'a T> {
    let mut sorted: Vec<&T> = items.iter().collect();
    sorted.sort_by_key(|item| key(item));
    sorted.dedup_by(|later, earlier| {
        let same = key(later) == key(earlier);
        if same {
            *earlier = *later;
        }
        same
    });
    sorted
}

/// The items of two lists that differ, by key: each key present on one side only, or on both
/// with items that are not `same`, once, with its item on either side, in key order. A
/// canonical policy's lists are in key order already: they are walked together once, as they
/// lie in memory; other lists are put in key order first.
fn changed_pairs<'a, T, K: Ord>(
    old: &'a [T],
    new: &'a [T],
    key: impl Fn(&'a T) -> K,
    same: impl Fn(&T, &T) -> bool,
) -> Vec<Pair<'a, T>> {
    let (old_refs, new_refs): (Vec<&T>, Vec<&T>) = (old.iter().collect(), new.iter().collect());
    match walk(&old_refs, &new_refs, &key, &same) {
        Some(pairs) => pairs,
        None => walk(&by_key(old, &key), &by_key(new, &key), &key, &same).unwrap_or_default(),
    }
}

/// An item on either side of a comparison, or both.
type Pair<'a, T> = (Option<&'a T>, Option<&'a T>);

/// [`changed_pairs`] of two lists walked together; `None` as soon as either turns out not to
/// be strictly in key order (never for lists from [`by_key`]).
fn walk<'a, T, K: Ord>(
    old: &[&'a T],
    new: &[&'a T],
    key: &impl Fn(&'a T) -> K,
    same: &impl Fn(&T, &T) -> bool,
) -> Option<Vec<Pair<'a, T>>> {
    use std::cmp::Ordering;
    let ordered = |list: &[&'a T], at: usize| at == 0 || key(list[at - 1]) < key(list[at]);
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < old.len() || j < new.len() {
        let order = match (old.get(i), new.get(j)) {
            (Some(a), Some(b)) => key(a).cmp(&key(b)),
            (Some(_), None) => Ordering::Less,
            _ => Ordering::Greater,
        };
        if (order != Ordering::Greater && !ordered(old, i))
            || (order != Ordering::Less && !ordered(new, j))
        {
            return None;
        }
        match order {
            Ordering::Less => {
                out.push((Some(old[i]), None));
                i += 1;
            }
            Ordering::Greater => {
                out.push((None, Some(new[j])));
                j += 1;
            }
            Ordering::Equal => {
                if !same(old[i], new[j]) {
                    out.push((Some(old[i]), Some(new[j])));
                }
                i += 1;
                j += 1;
            }
        }
    }
    Some(out)
}

/// One policy's roles in key order, with the effective rules of its aggregated ClusterRoles.
struct Roles<'a> {
    sorted: Vec<&'a std::sync::Arc<Role>>,
    aggregated: HashMap<String, Vec<PolicyRule>>,
}

impl<'a> Roles<'a> {
    fn of(policy: &'a PolicySet) -> Self {
        Roles {
            sorted: by_key(&policy.roles, |role| role.key()),
            aggregated: crate::policy::aggregate::aggregated_rules(policy),
        }
    }

    /// A role's effective rules: its own, or for an aggregated ClusterRole those aggregated.
    fn effective(&self, role: &'a Role) -> &[PolicyRule] {
        match role.kind {
            RoleKind::ClusterRole if role.aggregation_rule.is_some() => self
                .aggregated
                .get(&role.name)
                .map_or(&[][..], Vec::as_slice),
            _ => role.rules.as_slice(),
        }
    }

    fn rules(&self, key: RoleKey<'_>) -> Option<&[PolicyRule]> {
        let at = self
            .sorted
            .binary_search_by(|role| role.key().cmp(&key))
            .ok()?;
        Some(self.effective(self.sorted[at]))
    }
}

/// One binding that may change answers: its scope, subjects and rules (old and new).
struct Region {
    /// `None`: everywhere (a ClusterRoleBinding).
    namespace: Option<String>,
    subjects: BTreeSet<Who>,
    rules: Vec<PolicyRule>,
    /// The rules with content clauses or a CEL condition whose change may grant with content
    /// what the fold does not show: an allow the write brings (new, or not as before), a deny
    /// it takes away (gone, or not as after).
    conditional: Vec<PolicyRule>,
}

/// The bindings whose subjects' answers may change, old and new versions together: those
/// that changed, and those of roles whose effective rules changed. Comparing walks both
/// policies once in key order (borrowed, no copies; in memory order for a canonical policy);
/// what is collected is proportional to the change.
fn regions(old: &PolicySet, new: &PolicySet) -> Vec<Region> {
    let (old_roles, new_roles) = (Roles::of(old), Roles::of(new));
    let changed_roles: rustc_hash::FxHashSet<RoleKey<'_>> = changed_pairs(
        &old.roles,
        &new.roles,
        |role| role.key(),
        |b, a| old_roles.effective(b) == new_roles.effective(a),
    )
    .into_iter()
    .filter_map(|pair| match pair {
        (Some(role), _) | (_, Some(role)) => Some(role.key()),
        (None, None) => None,
    })
    .collect();
    let same_binding = |b: &Binding, a: &Binding| {
        b.subjects == a.subjects
            && b.role_ref == a.role_ref
            && (changed_roles.is_empty() || !changed_roles.contains(&b.role_key()))
    };
    let mut out = Vec::new();
    for (before, after) in changed_pairs(
        &old.bindings,
        &new.bindings,
        |binding| binding.key(),
        |b, a| same_binding(b, a),
    ) {
        let mut subjects = BTreeSet::new();
        let mut rules = Vec::new();
        let mut sides: [&[PolicyRule]; 2] = [&[], &[]];
        for (side, (binding, roles)) in [(before, &old_roles), (after, &new_roles)]
            .into_iter()
            .enumerate()
        {
            let Some(binding) = binding else { continue };
            for subject in &binding.subjects {
                if let Some(user) = subject.user_name(&binding.namespace) {
                    subjects.insert(Who::User(user));
                } else if let Some(group) = subject.group_name() {
                    subjects.insert(Who::Group(group.to_string()));
                }
            }
            if let Some(role_rules) = roles.rules(binding.role_key()) {
                rules.extend(role_rules.iter().cloned());
                sides[side] = role_rules;
            }
        }
        let [old_rules, new_rules] = sides;
        let brought = |rule: &&PolicyRule, deny: bool, other: &[PolicyRule]| {
            rule.clauses.is_some() && rule.deny == deny && !other.contains(rule)
        };
        let conditional = new_rules
            .iter()
            .filter(|r| brought(r, false, old_rules))
            .chain(old_rules.iter().filter(|r| brought(r, true, new_rules)))
            .cloned()
            .collect();
        let namespace = match (before, after) {
            (Some(binding), _) | (_, Some(binding)) => binding.key(),
            (None, None) => continue,
        };
        out.push(Region {
            namespace: (namespace.0 == BindingKind::RoleBinding).then(|| namespace.1.to_string()),
            subjects,
            rules,
            conditional,
        });
    }
    if let Some(changes) = AbacChanges::between(&old.abac, &new.abac) {
        out.extend(
            changes
                .removed
                .iter()
                .chain(&changes.added)
                .filter_map(abac_region),
        );
    }
    out
}

/// The region of an ABAC line that one policy has and the other does not (by content): the
/// requests it allows are the only ones its coming or going can change, as a binding's are.
/// Its subjects are the ones it names (a line naming a user and a group matches only the
/// two together, which the conjunctions of [`outcome`] try); its scope is its namespace
/// (`*`: everywhere); its actions are rules whose cells are those the line matches: any
/// verb, or the read-only ones; its API group; its resource with every subresource (ABAC
/// ignores subresources and names); its non-resource path, a trailing `*` a prefix. A line
/// naming nobody matches nobody. Lines naming everyone (`*`) are refused before
/// ([`analysable`]).
fn abac_region(line: &AbacRule) -> Option<Region> {
    let mut subjects = BTreeSet::new();
    if !line.user.is_empty() {
        subjects.insert(Who::User(line.user.clone()));
    }
    if !line.group.is_empty() {
        subjects.insert(Who::Group(line.group.clone()));
    }
    if subjects.is_empty() {
        return None;
    }
    let verbs: Vec<String> = if line.readonly {
        ["get", "list", "watch"].map(String::from).to_vec()
    } else {
        vec!["*".to_string()]
    };
    let resource = if line.resource == "*" {
        "*".to_string()
    } else {
        format!("{}/*", line.resource)
    };
    let path = match line.non_resource_path.strip_suffix('*') {
        // As `abac::non_resource_path_matches`: every trailing `*` goes, what is left is a
        // prefix (`*` alone: every path).
        Some(_) => format!("{}*", line.non_resource_path.trim_end_matches('*')),
        None => line.non_resource_path.clone(),
    };
    Some(Region {
        namespace: (line.namespace != "*").then(|| line.namespace.clone()),
        subjects,
        rules: vec![
            PolicyRule {
                verbs: verbs.clone(),
                api_groups: vec![line.api_group.clone()],
                resources: vec![resource],
                ..Default::default()
            },
            PolicyRule {
                verbs,
                non_resource_urls: vec![path],
                ..Default::default()
            },
        ],
        conditional: Vec::new(),
    })
}

/// How the chain decides a subject alone: the decision, and the authorizer and tier of the
/// rule that decides it.
pub(super) type AloneKind = (u8, String);

pub(super) fn kind_of(response: &Response) -> AloneKind {
    let by = match response.decision {
        Decision::Allow => response.allowed_by.first(),
        Decision::Deny => response.denied_by.first(),
        Decision::NoOpinion => None,
    };
    let tier = by.map_or_else(String::new, |r| {
        let cluster = r.binding.starts_with("ClusterRoleBinding");
        format!("{}:{cluster}", r.authorizer)
    });
    let decision = match response.decision {
        Decision::Allow => 0,
        Decision::Deny => 1,
        Decision::NoOpinion => 2,
    };
    (decision, tier)
}

pub(super) fn request_of(user: Option<&str>, groups: &[&str], action: &Action) -> Request {
    Request {
        user: UserInfo {
            name: user
                .unwrap_or(crate::engine::content::WHO_CAN_PROBE)
                .to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        },
        action: action.clone(),
    }
}

/// What each changed subject does in one cell: gains and losses with their witnesses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Outcome {
    gains: Subjects,
    losses: Subjects,
    witnesses: Vec<Witness>,
}

impl Outcome {
    /// The subjects only (rows merge on them, not on their witnesses).
    fn key(&self) -> (Subjects, Subjects) {
        (self.gains.clone(), self.losses.clone())
    }
}

/// An ABAC line naming both a user and a group matches only the two together, which no single
/// partner stands for: its (user, group) joins each changed subject's candidates as is.
pub(super) type Conjunction = (String, String);

pub(super) fn conjunctions(policies: [&PolicySet; 2]) -> Vec<Conjunction> {
    let mut out: Vec<Conjunction> = policies
        .iter()
        .flat_map(|p| &p.abac)
        .filter(|line| !line.group.is_empty() && line.group != "*")
        .filter(|line| !line.user.is_empty() && line.user != "*")
        .map(|line| (line.user.clone(), line.group.clone()))
        .collect();
    out.sort();
    out.dedup();
    out
}

fn outcome(
    old: &Engine,
    new: &Engine,
    action: &Action,
    changed: &BTreeSet<Who>,
    conjunctions: &[Conjunction],
) -> Outcome {
    let allowed = |engine: &Engine, request: &Request| {
        engine.authorize_shared(request.as_borrowed()).decision == Decision::Allow
    };
    // Partners: every subject who-can names for the cell, one per kind. A subject alone is
    // matched only by the bindings naming it, and those that changed for this cell name a
    // subject of `changed`: any other subject is decided alone as before, by the same rule. So
    // the new engine's who-can adds only subjects of `changed`, and the old engine's kind of
    // the others stands for both.
    let mut partners: Vec<Who> = Vec::new();
    let subjects = old.who_can(action);
    partners.extend(subjects.users.into_iter().map(Who::User));
    partners.extend(subjects.denied_users.into_iter().map(Who::User));
    partners.extend(subjects.groups.into_iter().map(Who::Group));
    partners.extend(subjects.denied_groups.into_iter().map(Who::Group));
    partners.extend(changed.iter().cloned());
    partners.sort();
    partners.dedup();
    let alone = |who: &Who| match who {
        Who::User(u) => request_of(Some(u), &[], action),
        Who::Group(g) => request_of(None, &[g], action),
    };
    let mut kinds: BTreeMap<(AloneKind, AloneKind), Who> = BTreeMap::new();
    for partner in partners {
        let request = alone(&partner);
        let before = kind_of(&old.authorize_shared(request.as_borrowed()));
        let after = if changed.contains(&partner) {
            kind_of(&new.authorize_shared(request.as_borrowed()))
        } else {
            before.clone()
        };
        kinds.entry((before, after)).or_insert(partner);
    }
    let mut out = Outcome::default();
    for subject in changed {
        let mut candidates = vec![alone(subject)];
        for partner in kinds.values() {
            let request = match (subject, partner) {
                (Who::User(_), Who::User(_)) => continue,
                (Who::User(u), Who::Group(g)) | (Who::Group(g), Who::User(u)) => {
                    request_of(Some(u), &[g], action)
                }
                (Who::Group(a), Who::Group(b)) => request_of(None, &[a, b], action),
            };
            candidates.push(request);
        }
        for (user, group) in conjunctions {
            candidates.push(match subject {
                Who::User(u) => request_of(Some(u), &[group], action),
                Who::Group(g) => request_of(Some(user), &[group, g], action),
            });
        }
        let (mut gained, mut lost) = (false, false);
        for request in candidates {
            let before = allowed(old, &request);
            let after = allowed(new, &request);
            if before == after || (gained && after) || (lost && !after) {
                continue;
            }
            let (label, set) = match subject {
                Who::User(u) => (
                    format!("user:{u}"),
                    if after {
                        &mut out.gains.users
                    } else {
                        &mut out.losses.users
                    },
                ),
                Who::Group(g) => (
                    format!("group:{g}"),
                    if after {
                        &mut out.gains.groups
                    } else {
                        &mut out.losses.groups
                    },
                ),
            };
            set.insert(match subject {
                Who::User(u) | Who::Group(u) => u.clone(),
            });
            out.witnesses.push(Witness {
                subject: label,
                request,
                gain: after,
            });
            if after {
                gained = true;
            } else {
                lost = true;
            }
            if gained && lost {
                break;
            }
        }
    }
    out
}

/// The delta from `old` to `new` (compiled as `old_engine`, `new_engine`, with one chain).
pub fn access_delta(
    old: &PolicySet,
    new: &PolicySet,
    old_engine: &Engine,
    new_engine: &Engine,
) -> Result<Delta, DeltaError> {
    analysable(old, new)?;
    let atoms = Atoms::of([old, new], &[]);
    let conjunctions = conjunctions([old, new]);
    let ChangedCells {
        cells: work,
        everywhere: everywhere_cells,
        fresh_namespace,
        conditional: _,
    } = changed_cells(old, new, &atoms, &BTreeSet::new());
    let mut results: Vec<(Scope, Cell, Outcome)> = Vec::new();
    for (cell, per_namespace) in &work {
        if let Cell::NonResource(_) = cell {
            // A URL has no namespace (and only ClusterRoleBindings grant URLs): one outcome.
            let changed: BTreeSet<Who> = per_namespace.values().flatten().cloned().collect();
            let action = cell.action("");
            let o = outcome(old_engine, new_engine, &action, &changed, &conjunctions);
            results.push((Scope::Everywhere { except: Vec::new() }, cell.clone(), o));
            continue;
        }
        let mut outcomes: BTreeMap<&String, Outcome> = BTreeMap::new();
        for (ns, changed) in per_namespace {
            let action = cell.action(ns);
            outcomes.insert(
                ns,
                outcome(old_engine, new_engine, &action, changed, &conjunctions),
            );
        }
        match outcomes.get(&fresh_namespace) {
            Some(everywhere) if everywhere_cells.contains_key(cell) => {
                let except: Vec<String> = outcomes
                    .iter()
                    .filter(|(ns, o)| **ns != &fresh_namespace && o.key() != everywhere.key())
                    .map(|(ns, _)| (*ns).clone())
                    .collect();
                for ns in &except {
                    let o = &outcomes[ns];
                    results.push((Scope::Namespace(ns.clone()), cell.clone(), o.clone()));
                }
                results.push((
                    Scope::Everywhere { except },
                    cell.clone(),
                    everywhere.clone(),
                ));
            }
            _ => {
                for (ns, o) in outcomes {
                    results.push((Scope::Namespace(ns.clone()), cell.clone(), o));
                }
            }
        }
    }
    results.retain(|(_, _, o)| !o.gains.is_empty() || !o.losses.is_empty());
    Ok(Delta {
        rows: merge(results, &atoms),
    })
}

/// Whether the change from `old` to `new` is one whose effect on access this module computes
/// (the delta, and a ChangeGate's check over its cells, which refuses ABAC changes itself).
pub(super) fn analysable(old: &PolicySet, new: &PolicySet) -> Result<(), DeltaError> {
    if let Some(changes) = AbacChanges::between(&old.abac, &new.abac) {
        let wildcard = |line: &AbacRule| line.user == "*" || line.group == "*";
        if changes.removed.iter().chain(&changes.added).any(wildcard) {
            return Err(DeltaError::AbacWildcard(changes));
        }
    }
    if crate::policy::impact::protected_paths_changed(old, new) {
        return Err(DeltaError::ProtectedPathsChanged);
    }
    Ok(())
}

/// The requests a change can change the answer of, as cells: per cell (changed rules' atoms)
/// and namespace it is asked in, the changed subjects there (steps 1 and 2 of the module
/// doc).
pub(super) struct ChangedCells {
    /// Per cell and namespace: the changed subjects there (a ClusterRoleBinding's in every
    /// namespace listed for the cell).
    pub(super) cells: BTreeMap<Cell, BTreeMap<String, BTreeSet<Who>>>,
    /// The cells a ClusterRoleBinding's change reaches, with its changed subjects: their
    /// answers may change in every namespace, represented by the fresh one.
    pub(super) everywhere: BTreeMap<Cell, BTreeSet<Who>>,
    /// The namespace standing for every namespace no RoleBinding, ABAC line or
    /// `extra_namespaces` entry names.
    pub(super) fresh_namespace: String,
    /// The cells a conditional allow the write brings, or a conditional deny it takes away,
    /// reaches (`Region::conditional`): their answers are compared without content (the
    /// fold), so what the change grants with content may not show in them.
    pub(super) conditional: BTreeSet<Cell>,
}

/// The [`ChangedCells`] of the change from `old` to `new` over `atoms`. A ClusterRoleBinding's
/// change is asked also in each of `extra_namespaces` (a gate's namespaces), which then is
/// not the fresh one's to stand for.
pub(super) fn changed_cells(
    old: &PolicySet,
    new: &PolicySet,
    atoms: &Atoms,
    extra_namespaces: &BTreeSet<String>,
) -> ChangedCells {
    let regions = regions(old, new);
    // Namespaces where a cluster-wide change may show differently from elsewhere: every
    // namespace a RoleBinding or an ABAC line names, since a subject bound there (alone, or
    // as the partner of a changed subject in one request) may be decided there by it.
    let mut named_namespaces = BTreeSet::new();
    if regions.iter().any(|r| r.namespace.is_none()) {
        named_namespaces.extend(extra_namespaces.iter().cloned());
        for policy in [old, new] {
            for binding in &policy.bindings {
                if binding.kind == BindingKind::RoleBinding {
                    named_namespaces.insert(binding.namespace.clone());
                }
            }
            for line in &policy.abac {
                if line.namespace != "*" {
                    named_namespaces.insert(line.namespace.clone());
                }
            }
        }
    }
    let fresh_namespace = fresh(&named_namespaces, "x-other-namespace");
    // Per cell and namespace: the changed subjects there.
    let mut work: BTreeMap<Cell, BTreeMap<String, BTreeSet<Who>>> = BTreeMap::new();
    // Per cell reached by a ClusterRoleBinding region: its changed subjects, which change
    // answers in every namespace.
    let mut everywhere_cells: BTreeMap<Cell, BTreeSet<Who>> = BTreeMap::new();
    let mut conditional = BTreeSet::new();
    for region in &regions {
        let mut cells = BTreeSet::new();
        for rule in &region.rules {
            cells_of(rule, atoms, &mut cells);
        }
        for rule in &region.conditional {
            cells_of(rule, atoms, &mut conditional);
        }
        let namespaces: Vec<String> = match &region.namespace {
            Some(ns) => vec![ns.clone()],
            None => {
                let mut all: Vec<String> = named_namespaces.iter().cloned().collect();
                all.push(String::new());
                all.push(fresh_namespace.clone());
                all
            }
        };
        for cell in cells {
            if region.namespace.is_none() {
                everywhere_cells
                    .entry(cell.clone())
                    .or_default()
                    .extend(region.subjects.iter().cloned());
            }
            let per_namespace = work.entry(cell).or_default();
            for ns in &namespaces {
                per_namespace
                    .entry(ns.clone())
                    .or_default()
                    .extend(region.subjects.iter().cloned());
            }
        }
    }
    for (cell, subjects) in &everywhere_cells {
        if let Some(per_namespace) = work.get_mut(cell) {
            for changed in per_namespace.values_mut() {
                changed.extend(subjects.iter().cloned());
            }
        }
    }
    ChangedCells {
        cells: work,
        everywhere: everywhere_cells,
        fresh_namespace,
        conditional,
    }
}

/// Rows from cells: cells alike but for one dimension merge, to `*` when they cover the
/// dimension's fresh value (excepting the atoms they do not cover).
fn merge(results: Vec<(Scope, Cell, Outcome)>, atoms: &Atoms) -> Vec<Row> {
    let mut rows: Vec<Row> = results
        .into_iter()
        .map(|(scope, cell, outcome)| Row {
            scope,
            action: match cell {
                Cell::Resource([verb, group, resource, subresource, name]) => {
                    ActionPattern::Resource {
                        verb: Pattern::Is(verb),
                        group: Pattern::Is(group),
                        resource: Pattern::Is(resource),
                        subresource: Pattern::Is(subresource),
                        name: Pattern::Is(name),
                    }
                }
                Cell::NonResource([verb, path]) => ActionPattern::NonResource {
                    verb: Pattern::Is(verb),
                    path: atoms
                        .path_patterns
                        .get(&path)
                        .cloned()
                        .unwrap_or(Pattern::Is(path)),
                },
            },
            gains: outcome.gains,
            losses: outcome.losses,
            witnesses: outcome.witnesses,
        })
        .collect();
    for dimension in 0..5 {
        rows = merge_dimension(rows, dimension, atoms);
    }
    rows.sort_by(|a, b| (&a.scope, &a.action).cmp(&(&b.scope, &b.action)));
    rows
}

/// The dimension `d` of a row's action (resource: verb, group, resource, subresource, name
/// as 4..0; non-resource: verb, path as 1, 0) and its atoms.
fn dimension<'a>(
    action: &'a mut ActionPattern,
    d: usize,
    atoms: &'a Atoms,
) -> Option<(&'a mut Pattern, &'a [String], &'a str)> {
    match action {
        ActionPattern::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
        } => Some(match d {
            0 => (name, &atoms.names[..], atoms.fresh_name.as_str()),
            1 => (
                subresource,
                &atoms.subresources[..],
                atoms.fresh_subresource.as_str(),
            ),
            2 => (
                resource,
                &atoms.resources[..],
                atoms.fresh_resource.as_str(),
            ),
            3 => (group, &atoms.groups[..], atoms.fresh_group.as_str()),
            _ => (verb, &atoms.verbs[..], atoms.fresh_verb.as_str()),
        }),
        // URL atoms stand for prefixes, not values: their rows stay apart.
        ActionPattern::NonResource { verb, .. } => match d {
            1 => Some((verb, &atoms.verbs[..], atoms.fresh_verb.as_str())),
            _ => None,
        },
    }
}

fn merge_dimension(rows: Vec<Row>, d: usize, atoms: &Atoms) -> Vec<Row> {
    // Group rows by everything but dimension d.
    let mut groups: BTreeMap<(Scope, ActionPattern, Subjects, Subjects), Vec<Row>> =
        BTreeMap::new();
    let mut out = Vec::new();
    for row in rows {
        let mut blanked = row.action.clone();
        let Some((slot, _, _)) = dimension(&mut blanked, d, atoms) else {
            out.push(row);
            continue;
        };
        if !matches!(slot, Pattern::Is(_)) {
            out.push(row);
            continue;
        }
        *slot = Pattern::Is(String::new());
        let key = (
            row.scope.clone(),
            blanked,
            row.gains.clone(),
            row.losses.clone(),
        );
        groups.entry(key).or_default().push(row);
    }
    for (_, mut members) in groups {
        let mut values: BTreeSet<String> = BTreeSet::new();
        for member in &mut members {
            if let Some((Pattern::Is(v), _, _)) = dimension(&mut member.action, d, atoms) {
                values.insert(v.clone());
            }
        }
        let mut first = members.swap_remove(0);
        let Some((slot, all, fresh_value)) = dimension(&mut first.action, d, atoms) else {
            continue;
        };
        if values.contains(fresh_value) {
            let except: Vec<String> = all
                .iter()
                .filter(|a| !values.contains(*a))
                .cloned()
                .collect();
            *slot = Pattern::AnyExcept(except);
            out.push(first);
        } else {
            out.push(first);
            out.extend(members);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{changed_pairs, glob_matches};

    /// Lists in key order are walked as they are; others (out of order, a key twice: the last
    /// counts) are ordered first, with the same answer.
    #[test]
    fn changed_pairs_are_the_same_in_any_order() {
        let key = |item: &(u8, char)| item.0;
        let same = |a: &(u8, char), b: &(u8, char)| a.1 == b.1;
        let old = [(1, 'a'), (2, 'b'), (3, 'c'), (5, 'e')];
        let new = [(1, 'a'), (2, 'x'), (4, 'd'), (5, 'e')];
        let expected = vec![
            (Some(&(2, 'b')), Some(&(2, 'x'))),
            (Some(&(3, 'c')), None),
            (None, Some(&(4, 'd'))),
        ];
        assert_eq!(changed_pairs(&old, &new, key, same), expected);
        let shuffled_old = [(5, 'e'), (3, 'c'), (1, 'a'), (2, 'z'), (2, 'b')];
        let shuffled_new = [(4, 'd'), (2, 'x'), (5, 'e'), (1, 'a')];
        assert_eq!(
            changed_pairs(&shuffled_old, &shuffled_new, key, same),
            expected
        );
    }

    #[test]
    fn globs_match_as_a_shell_does() {
        assert!(glob_matches(
            "system:serviceaccount:*",
            "system:serviceaccount:ns:sa"
        ));
        assert!(glob_matches(
            "system:unauthenticated",
            "system:unauthenticated"
        ));
        assert!(!glob_matches(
            "system:unauthenticated",
            "system:authenticated"
        ));
        assert!(glob_matches("*", ""));
        assert!(glob_matches("a?c*", "abcde"));
        assert!(!glob_matches("a?c", "ac"));
        assert!(glob_matches("*ops*", "team-ops-1"));
        assert!(!glob_matches("*ops", "ops-1"));
    }
}
