//! ChangeGates (docs/policy.md §8): whether a policy write breaks a rule of a gate in force,
//! decided exactly, by the access delta's own method ([`crate::engine::delta`]) rather than by
//! enumerating requests.
//!
//! A rule's *region* is the requests whose action one of its `access` rules matches (as the
//! engine matches rules: [`rule_matches`]) in one of its `namespaces` (`*`: every namespace
//! and cluster scope; `""`: cluster scope, where non-resource URLs are too). `NeverRemove` is
//! broken when a protected subject, asking as Kubernetes authenticates it, is allowed some
//! request of the region before the write and not after; `NeverGrantOutside` when some
//! request of the region none of whose subjects (its user, its groups) the rule lists is not
//! allowed before and allowed after. Decisions are compared as the delta compares them:
//! without content, `Allow` or not.
//!
//! How it is exact and finite:
//!
//! 1. **Only the delta's cells can change answer.** The delta's [`changed_cells`] are every
//!    request (action and namespace) whose answer may change, with the *changed subjects*
//!    there: any other request is answered as before. Its atoms get the gate rules' own
//!    literals too (verbs, API groups, resources and subresources, names, URLs and URL
//!    prefixes), and a ClusterRoleBinding's change is asked also in every namespace a gate
//!    rule names: every cell then lies wholly inside or wholly outside each rule's region, so
//!    a cell is in the region iff its representative request is, and a namespace no policy
//!    and no gate names behaves as the fresh one does.
//! 2. **NeverRemove** asks each protected identity (User `u`: user `u` in
//!    `system:authenticated`; ServiceAccount `ns/n`: user `system:serviceaccount:ns:n` in
//!    `system:serviceaccounts`, `system:serviceaccounts:ns` and `system:authenticated`; Group
//!    `g`: a user no policy names, in `g` and `system:authenticated`) in every changed cell of
//!    the region, before and after. All requests of a cell are answered alike, so this is
//!    every request of the region that can change.
//! 3. **NeverGrantOutside** needs a search over subjects, which the delta's argument bounds.
//!    Under the chain's precedence a request's answer is the best of the answers its subjects
//!    get alone, and a subject matters only by its *kind*: how the chain decides it alone,
//!    before and after ([`kind_of`]: decision, authorizer and tier). So if a request gains,
//!    its best subject before (`a`) and after (`b`) do the same with its user: one user and
//!    at most two groups, each replaceable by any unlisted subject of its kind. Subjects
//!    who-can does not name for the cell (before or after, allowed or denied) are decided
//!    alone as a fresh user or a fresh group is: the candidates are who-can's subjects of
//!    both engines, the cell's changed subjects, a fresh user and a fresh group, less the
//!    listed ones; one representative per kind, users and groups apart. An ABAC line naming
//!    a user and a group together matches only the two together, a subject no single one
//!    stands for: the subjects such lines name are kept as candidates each (never folded into
//!    a representative, so replacing a subject by its representative never makes or unmakes
//!    such a pair), and each user is tried with every set of at most two groups. A request
//!    none of whose subjects changes kind keeps its answer, so only those with one are asked;
//!    and a cell whose changed subjects are all listed has no unlisted request that changes.
//!
//! The first broken rule (gates in order, rules in order) is refused, with a witness request
//! that breaks it. `tests/properties/gate.rs` holds [`check`] to a brute-force oracle (the
//! reference evaluator over a finite universe of subjects, actions and namespaces) on random
//! policies, changes and gates, both ways.
//!
//! A gate fails closed: a write that changes what ABAC lines say (compared by content, not by
//! file or position; the delta computes it, but this check is not held to its oracle on it),
//! or whose effect the delta does not compute (the paths FieldPolicies protect:
//! [`crate::engine::delta::DeltaError`]) is refused as
//! [`GateError::Unchecked`] whenever a gate is in force; so is a write that brings an allow
//! rule with content clauses or a CEL condition (new, edited or newly bound), or takes such a
//! deny rule away, reaching a request of a `NeverGrantOutside` rule's region for a subject it
//! does not list: without content such a grant is no `Allow`, with content it may be, and
//! which content is not judged.

use std::collections::BTreeSet;
use std::fmt;

use crate::engine::delta::{
    analysable, changed_cells, conjunctions, fresh, kind_of, request_of, AbacChanges, AloneKind,
    Atoms, Cell, Who,
};
use crate::engine::{Decision, Engine};
use crate::policy::model::{
    ChangeGate, GateRule, GateRuleKind, PolicyRule, PolicySet, SERVICE_ACCOUNT_PREFIX,
};
use crate::policy::rbac::rule_matches;
use crate::request::{Action, Request, UserInfo};

const AUTHENTICATED: &str = "system:authenticated";

/// A rule a write breaks, with a request that shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The ChangeGate's name.
    pub gate: String,
    /// The broken rule's name.
    pub rule: String,
    pub kind: GateRuleKind,
    /// Allowed before and not after (`NeverRemove`), or the reverse (`NeverGrantOutside`).
    pub witness: Request,
    /// `user:NAME` or `group:NAME`: the protected subject that loses access (a service
    /// account as the user `system:serviceaccount:NS:NAME`), or the witness's user, whom the
    /// rule does not list, that gains it.
    pub subject: String,
    /// The witness's values that stand for every value no policy or gate names (the delta's
    /// fresh values, such as `x-other-verb`): any such value breaks the rule alike.
    pub unnamed: Vec<String>,
}

/// Why a write is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("{0}")]
    Broken(Box<Refusal>),
    /// The write's effect on access could not be computed: a gate fails closed.
    #[error("{0}")]
    Unchecked(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, before_after) = match self.kind {
            GateRuleKind::NeverRemove => (
                format!("{} would lose access the rule protects", self.subject),
                "was allowed before the write, and is not after",
            ),
            GateRuleKind::NeverGrantOutside => (
                format!(
                    "access the rule keeps to the subjects it lists would be granted to {}, \
                     whom it does not list",
                    self.subject
                ),
                "was not allowed before the write, and is after",
            ),
        };
        write!(
            f,
            "the write breaks rule {:?} ({}) of ChangeGate {:?}: {what}; the request of user \
             {:?} with groups {:?} to {} {before_after}",
            self.rule,
            self.kind.as_str(),
            self.gate,
            self.witness.user.name,
            self.witness.user.groups,
            describe_action(&self.witness.action),
        )?;
        if !self.unnamed.is_empty() {
            let quoted: Vec<String> = self.unnamed.iter().map(|v| format!("{v:?}")).collect();
            write!(
                f,
                " ({} stand{} for any value no policy names)",
                quoted.join(", "),
                if quoted.len() == 1 { "s" } else { "" }
            )?;
        }
        Ok(())
    }
}

/// `verb "get" on resource "pods" (API group "") named "a" in namespace "ns1"`, or on a
/// non-resource path.
fn describe_action(action: &Action) -> String {
    match action {
        Action::Resource(r) => {
            let mut out = format!("verb {:?} on resource {:?}", r.verb, r.resource);
            if !r.subresource.is_empty() {
                out.push_str(&format!(", subresource {:?}", r.subresource));
            }
            out.push_str(&format!(" (API group {:?})", r.group));
            if !r.name.is_empty() {
                out.push_str(&format!(" named {:?}", r.name));
            }
            if r.namespace.is_empty() {
                out.push_str(" at cluster scope");
            } else {
                out.push_str(&format!(" in namespace {:?}", r.namespace));
            }
            out
        }
        Action::NonResource(n) => {
            format!("verb {:?} on the non-resource path {:?}", n.verb, n.path)
        }
    }
}

/// The refusal of a write whose effect is not computed, naming the gates in force.
fn unchecked(gates: &[ChangeGate], why: &str) -> GateError {
    GateError::Unchecked(unchecked_message(gates, why))
}

fn unchecked_message(gates: &[ChangeGate], why: &str) -> String {
    let names: Vec<String> = gates.iter().map(|g| format!("{:?}", g.name)).collect();
    format!(
        "the write cannot be checked against ChangeGate {}: {why}, and what that does to \
         access is not computed; a gate fails closed, so the write is refused",
        names.join(", ")
    )
}

/// Whether `gates` (those in force: `old.gates`) allow the write from `old` to `new`,
/// compiled as `old_engine` and `new_engine` with one chain. Rules are checked in order
/// (gates in slice order, rules in order) and the first broken one is refused. Without gates
/// it is `Ok` at once.
pub fn check(
    gates: &[ChangeGate],
    old: &PolicySet,
    new: &PolicySet,
    old_engine: &Engine,
    new_engine: &Engine,
) -> Result<(), GateError> {
    if gates.is_empty() {
        return Ok(());
    }
    // The delta computes what a change of ABAC lines does, but this check's search over
    // subjects is held to its oracle on RBAC changes only (`tests/properties/gate.rs`): it
    // keeps failing closed on them, naming the lines.
    if let Some(changes) = AbacChanges::between(&old.abac, &new.abac) {
        let message = unchecked_message(gates, "the ABAC policy lines differ");
        return Err(GateError::Unchecked(format!(
            "{message}. The lines that differ:\n{changes}"
        )));
    }
    if let Err(why) = analysable(old, new) {
        return Err(unchecked(gates, &why.to_string()));
    }
    let access: Vec<&PolicyRule> = gates
        .iter()
        .flat_map(|g| &g.rules)
        .flat_map(|r| &r.access)
        .collect();
    let atoms = Atoms::of([old, new], &access);
    let gate_namespaces: BTreeSet<String> = gates
        .iter()
        .flat_map(|g| &g.rules)
        .flat_map(|r| &r.namespaces)
        .filter(|ns| !ns.is_empty() && *ns != "*")
        .cloned()
        .collect();
    let changed = changed_cells(old, new, &atoms, &gate_namespaces);
    if changed.cells.is_empty() {
        return Ok(());
    }
    let changed_fresh_namespace = changed.fresh_namespace.clone();
    // Every request that may change answer: a URL has no namespace, so its cell is asked once
    // with the changed subjects of all.
    let mut asks: Vec<Ask> = Vec::new();
    for (cell, per_namespace) in changed.cells {
        let conditional = changed.conditional.contains(&cell);
        if let Cell::NonResource(_) = cell {
            asks.push(Ask {
                action: cell.action(""),
                changed: per_namespace.into_values().flatten().collect(),
                conditional,
            });
            continue;
        }
        for (namespace, subjects) in per_namespace {
            asks.push(Ask {
                action: cell.action(&namespace),
                changed: subjects,
                conditional,
            });
        }
    }
    let cx = Cx {
        old: old_engine,
        new: new_engine,
        fresh: Fresh::of(old, new, gates, [old_engine, new_engine]),
        conjunctions: conjunctions([old, new]),
    };
    for gate in gates {
        for rule in &gate.rules {
            let region: Vec<&Ask> = asks
                .iter()
                .filter(|ask| in_region(rule, &ask.action))
                .collect();
            if region.is_empty() {
                continue;
            }
            if let Some(ask) = conditional_grant_outside(rule, &region) {
                return Err(unchecked(
                    std::slice::from_ref(gate),
                    &format!(
                        "it changes a rule with content clauses or a CEL condition that reaches \
                         {}, in the region of rule {:?}",
                        describe_action(&ask.action),
                        rule.name
                    ),
                ));
            }
            let broken = match rule.kind {
                GateRuleKind::NeverRemove => cx.removed(rule, &region),
                GateRuleKind::NeverGrantOutside => cx.granted_outside(rule, &region),
            };
            if let Some((subject, witness)) = broken {
                let unnamed = unnamed_values(&witness, |value| {
                    atoms.is_fresh(value)
                        || value == changed_fresh_namespace
                        || value == cx.fresh.user
                        || value == cx.fresh.group
                });
                return Err(GateError::Broken(Box::new(Refusal {
                    gate: gate.name.clone(),
                    rule: rule.name.clone(),
                    kind: rule.kind,
                    witness,
                    subject,
                    unnamed,
                })));
            }
        }
    }
    Ok(())
}

/// The values of `witness` (user, groups, action) that `fresh` says stand for every unnamed
/// value, once each, in the order they appear.
fn unnamed_values(witness: &Request, fresh: impl Fn(&str) -> bool) -> Vec<String> {
    let mut values: Vec<&str> = vec![witness.user.name.as_str()];
    values.extend(witness.user.groups.iter().map(String::as_str));
    match &witness.action {
        Action::Resource(r) => values.extend([
            r.verb.as_str(),
            r.group.as_str(),
            r.resource.as_str(),
            r.subresource.as_str(),
            r.name.as_str(),
            r.namespace.as_str(),
        ]),
        Action::NonResource(n) => values.extend([n.verb.as_str(), n.path.as_str()]),
    }
    let mut out: Vec<String> = Vec::new();
    for value in values {
        if !value.is_empty() && fresh(value) && !out.iter().any(|v| v == value) {
            out.push(value.to_string());
        }
    }
    out
}

/// A request that may change answer: a cell's action in one namespace, and the subjects
/// whose bindings changed there.
struct Ask {
    action: Action,
    changed: BTreeSet<Who>,
    /// A changed rule with content clauses or a CEL condition reaches this request: how its
    /// answer changes with content is not computed.
    conditional: bool,
}

/// The subjects a `NeverGrantOutside` rule lists, as users and groups.
struct Listed {
    users: BTreeSet<String>,
    groups: BTreeSet<String>,
}

impl Listed {
    fn of(rule: &GateRule) -> Self {
        let (mut users, mut groups) = (BTreeSet::new(), BTreeSet::new());
        for subject in &rule.subjects {
            if let Some(user) = subject.user_name("") {
                users.insert(user);
            } else if let Some(group) = subject.group_name() {
                groups.insert(group.to_string());
            }
        }
        Self { users, groups }
    }

    fn lists(&self, who: &Who) -> bool {
        match who {
            Who::User(u) => self.users.contains(u),
            Who::Group(g) => self.groups.contains(g),
        }
    }
}

/// For a `NeverGrantOutside` rule: a request of its region that a changed rule with clauses
/// reaches, with a changed subject the rule does not list. Answers are compared without
/// content, where such a grant is not an `Allow`, yet with content it may allow: what the
/// write grants outside is not judged, so it is refused. (A `NeverRemove` rule needs no such
/// refusal: "allowed without content" is "allowed whatever the content", and a change that
/// takes that away shows without content.)
fn conditional_grant_outside<'a>(rule: &GateRule, region: &[&'a Ask]) -> Option<&'a Ask> {
    if rule.kind != GateRuleKind::NeverGrantOutside {
        return None;
    }
    let listed = Listed::of(rule);
    region
        .iter()
        .copied()
        .find(|ask| ask.conditional && !ask.changed.iter().all(|w| listed.lists(w)))
}

/// Whether `action` is in `rule`'s region.
fn in_region(rule: &GateRule, action: &Action) -> bool {
    let namespace = match action {
        Action::Resource(r) => r.namespace.as_str(),
        // A URL has no namespace: it is where cluster scope is.
        Action::NonResource(_) => "",
    };
    rule.namespaces
        .iter()
        .any(|ns| ns == "*" || ns == namespace)
        && rule
            .access
            .iter()
            .any(|access| rule_matches(access, action))
}

/// A user and a group no policy, gate or super-user setting names.
struct Fresh {
    user: String,
    group: String,
}

impl Fresh {
    /// Only names that start as the fresh ones do can collide with them: the scan keeps just
    /// those (no copy of every subject's name: at 100k bindings, building the sets of all
    /// names cost four times the rest of a check). A service account's user name starts with
    /// `system:serviceaccount:`, so it never does.
    fn of(old: &PolicySet, new: &PolicySet, gates: &[ChangeGate], engines: [&Engine; 2]) -> Self {
        const USER: &str = "x-other-user";
        const GROUP: &str = "x-other-group";
        let (mut users, mut groups) = (BTreeSet::new(), BTreeSet::new());
        let mut note = |subject_kind: &str, name: &str| {
            let (set, base) = match subject_kind {
                "User" => (&mut users, USER),
                "Group" => (&mut groups, GROUP),
                _ => return,
            };
            if name.starts_with(base) {
                set.insert(name.to_string());
            }
        };
        for policy in [old, new] {
            for subject in policy.bindings.iter().flat_map(|b| &b.subjects) {
                note(&subject.kind, &subject.name);
            }
            for line in &policy.abac {
                note("User", &line.user);
                note("Group", &line.group);
            }
        }
        for subject in gates
            .iter()
            .flat_map(|g| &g.rules)
            .flat_map(|r| &r.subjects)
        {
            note(&subject.kind, &subject.name);
        }
        for engine in engines {
            for user in &engine.config().super_users {
                note("User", user);
            }
            for group in &engine.config().super_groups {
                note("Group", group);
            }
        }
        Fresh {
            user: fresh(&users, USER),
            group: fresh(&groups, GROUP),
        }
    }
}

/// What checking a write needs besides the rule.
struct Cx<'a> {
    old: &'a Engine,
    new: &'a Engine,
    fresh: Fresh,
    conjunctions: Vec<(String, String)>,
}

fn allowed(engine: &Engine, request: &Request) -> bool {
    engine.authorize_shared(request.as_borrowed()).decision == Decision::Allow
}

/// A subject trying to gain access in one cell: its name, whether it is a user, and whether
/// its kind changes.
struct Candidate {
    name: String,
    changes: bool,
}

impl Cx<'_> {
    /// `NeverRemove`: a protected identity allowed in the region before and not after.
    fn removed(&self, rule: &GateRule, region: &[&Ask]) -> Option<(String, Request)> {
        for subject in &rule.subjects {
            let (label, user) = match subject.kind.as_str() {
                "User" => (
                    format!("user:{}", subject.name),
                    UserInfo {
                        name: subject.name.clone(),
                        groups: vec![AUTHENTICATED.to_string()],
                        ..Default::default()
                    },
                ),
                "ServiceAccount" if !subject.namespace.is_empty() => {
                    let ns = &subject.namespace;
                    let name = format!("{SERVICE_ACCOUNT_PREFIX}{ns}:{}", subject.name);
                    (
                        format!("user:{name}"),
                        UserInfo {
                            name,
                            groups: vec![
                                "system:serviceaccounts".to_string(),
                                format!("system:serviceaccounts:{ns}"),
                                AUTHENTICATED.to_string(),
                            ],
                            ..Default::default()
                        },
                    )
                }
                "Group" => (
                    format!("group:{}", subject.name),
                    UserInfo {
                        name: self.fresh.user.clone(),
                        groups: vec![subject.name.clone(), AUTHENTICATED.to_string()],
                        ..Default::default()
                    },
                ),
                // Nothing else authenticates (the loader refuses other kinds).
                _ => continue,
            };
            for ask in region {
                let request = Request {
                    user: user.clone(),
                    action: ask.action.clone(),
                };
                if allowed(self.old, &request) && !allowed(self.new, &request) {
                    return Some((label, request));
                }
            }
        }
        None
    }

    /// `NeverGrantOutside`: a request of the region none of whose subjects is listed, not
    /// allowed before and allowed after.
    fn granted_outside(&self, rule: &GateRule, region: &[&Ask]) -> Option<(String, Request)> {
        let listed = Listed::of(rule);
        let listed = |who: &Who| listed.lists(who);
        for ask in region {
            // Only requests with a changed subject change answer.
            if ask.changed.iter().all(listed) {
                continue;
            }
            if let Some(request) = self.gain_outside(ask, &listed) {
                return Some((format!("user:{}", request.user.name), request));
            }
        }
        None
    }

    /// Step 3 of the module doc in one cell.
    fn gain_outside(&self, ask: &Ask, listed: &dyn Fn(&Who) -> bool) -> Option<Request> {
        let action = &ask.action;
        let mut subjects: BTreeSet<Who> = ask.changed.clone();
        for who in [
            self.old.allowed_subjects(action),
            self.new.allowed_subjects(action),
        ] {
            subjects.extend(who.users.into_iter().map(Who::User));
            subjects.extend(who.denied_users.into_iter().map(Who::User));
            subjects.extend(who.groups.into_iter().map(Who::Group));
            subjects.extend(who.denied_groups.into_iter().map(Who::Group));
        }
        subjects.insert(Who::User(self.fresh.user.clone()));
        subjects.insert(Who::Group(self.fresh.group.clone()));
        let mut paired = BTreeSet::new();
        for (user, group) in &self.conjunctions {
            paired.insert(Who::User(user.clone()));
            paired.insert(Who::Group(group.clone()));
        }
        subjects.extend(paired.iter().cloned());
        // One representative per kind, users and groups apart; subjects an ABAC line pairs
        // stay themselves.
        let mut kinds: BTreeSet<(bool, AloneKind, AloneKind)> = BTreeSet::new();
        let (mut users, mut groups): (Vec<Candidate>, Vec<Candidate>) = Default::default();
        for who in subjects.iter().filter(|who| !listed(who)) {
            let (is_user, alone) = match who {
                Who::User(u) => (true, request_of(Some(u), &[], action)),
                Who::Group(g) => (false, request_of(None, &[g], action)),
            };
            let before = kind_of(&self.old.authorize_shared(alone.as_borrowed()));
            let after = kind_of(&self.new.authorize_shared(alone.as_borrowed()));
            let changes = before != after;
            if !paired.contains(who) && !kinds.insert((is_user, before, after)) {
                continue;
            }
            let (Who::User(name) | Who::Group(name)) = who;
            let candidate = Candidate {
                name: name.clone(),
                changes,
            };
            if is_user {
                users.push(candidate);
            } else {
                groups.push(candidate);
            }
        }
        if !users.iter().chain(&groups).any(|c| c.changes) {
            return None;
        }
        let mut sets: Vec<Vec<&Candidate>> = vec![Vec::new()];
        for (i, first) in groups.iter().enumerate() {
            sets.push(vec![first]);
            for second in &groups[i + 1..] {
                sets.push(vec![first, second]);
            }
        }
        for user in &users {
            for set in &sets {
                if !user.changes && !set.iter().any(|g| g.changes) {
                    continue;
                }
                let names: Vec<&str> = set.iter().map(|g| g.name.as_str()).collect();
                let request = request_of(Some(&user.name), &names, action);
                if !allowed(self.old, &request) && allowed(self.new, &request) {
                    return Some(request);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineConfig;
    use crate::policy::load::{load_sources, LoadOptions};

    const ROLES: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: labelled-secret-reader}
rules:
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
  condition: "object.metadata.name == 'public'"
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: admin}
rules:
- {apiGroups: ["*"], resources: ["*"], verbs: ["*"]}
- {nonResourceURLs: ["*"], verbs: ["*"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: secret-reader}
rules:
- {apiGroups: [""], resources: [secrets], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: no-pods}
rules:
- {apiGroups: [""], resources: [pods], verbs: ["*"], deny: true}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: pod-reader}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get]}
"#;

    const GATES: &str = r#"
---
apiVersion: authzd.io/v1alpha1
kind: ChangeGate
metadata: {name: guard-rails}
spec:
  rules:
  - name: admins-keep-everything
    type: NeverRemove
    subjects: [{kind: Group, name: platform-admins}, {kind: User, name: bob}]
    access: [{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}]
  - name: secrets-only-for-vault
    type: NeverGrantOutside
    subjects: [{kind: ServiceAccount, namespace: vault, name: vault}]
    access: [{apiGroups: [""], resources: [secrets], verbs: [get, list, watch]}]
"#;

    fn binding(kind: &str, namespace: &str, name: &str, role: &str, subjects: &str) -> String {
        let namespace = if namespace.is_empty() {
            String::new()
        } else {
            format!(", namespace: {namespace}")
        };
        format!(
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\n\
             metadata: {{name: {name}{namespace}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\n\
             subjects: {subjects}\n"
        )
    }

    fn policy(bindings: &[String]) -> PolicySet {
        let text = format!("{ROLES}{GATES}{}", bindings.concat());
        load_sources(&[("p.yaml".to_string(), text)], &LoadOptions::default()).unwrap()
    }

    fn admins(name: &str) -> String {
        binding(
            "ClusterRoleBinding",
            "",
            name,
            "admin",
            "[{kind: Group, name: platform-admins}, {kind: User, name: bob}]",
        )
    }

    fn check_change(old: &PolicySet, new: &PolicySet) -> Result<(), GateError> {
        let config = EngineConfig::default();
        let (old_engine, new_engine) = (Engine::new(old, config.clone()), Engine::new(new, config));
        check(&old.gates, old, new, &old_engine, &new_engine)
    }

    fn refusal(result: Result<(), GateError>) -> Refusal {
        match result {
            Err(GateError::Broken(refusal)) => *refusal,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn removing_the_last_binding_of_a_protected_group_is_refused() {
        let old = policy(&[admins("admins")]);
        let new = policy(&[]);
        let refused = refusal(check_change(&old, &new));
        assert_eq!(refused.gate, "guard-rails");
        assert_eq!(refused.rule, "admins-keep-everything");
        assert_eq!(refused.kind, GateRuleKind::NeverRemove);
        assert_eq!(refused.subject, "group:platform-admins");
        assert!(refused
            .witness
            .user
            .groups
            .contains(&"platform-admins".into()));
        let message = refused.to_string();
        for part in [
            "\"admins-keep-everything\" (NeverRemove)",
            "ChangeGate \"guard-rails\"",
            "group:platform-admins",
            "was allowed before the write, and is not after",
        ] {
            assert!(message.contains(part), "{message}");
        }
        // A group is asked by a member no policy names: the message says that name stands
        // for any, and names no value a policy names as such.
        assert!(
            refused.unnamed.contains(&refused.witness.user.name),
            "{refused:?}"
        );
        assert!(
            !refused.unnamed.iter().any(|v| v == "platform-admins"),
            "{refused:?}"
        );
        assert!(
            message.contains("for any value no policy names"),
            "{message}"
        );
    }

    #[test]
    fn removing_one_of_two_bindings_passes() {
        let old = policy(&[admins("admins"), admins("admins-too")]);
        let new = policy(&[admins("admins-too")]);
        assert_eq!(check_change(&old, &new), Ok(()));
    }

    #[test]
    fn a_deny_on_everyone_authenticated_takes_access_from_a_protected_user() {
        let deny = binding(
            "ClusterRoleBinding",
            "",
            "no-pods",
            "no-pods",
            "[{kind: Group, name: system:authenticated}]",
        );
        let (mut old, mut new) = (
            policy(&[admins("admins")]),
            policy(&[admins("admins"), deny]),
        );
        // Bob alone is protected: he is asked as Kubernetes authenticates him, in
        // `system:authenticated`.
        for policy in [&mut old, &mut new] {
            policy.gates[0].rules[0]
                .subjects
                .retain(|s| s.kind == "User");
        }
        let refused = refusal(check_change(&old, &new));
        assert_eq!(refused.rule, "admins-keep-everything");
        assert_eq!(refused.subject, "user:bob");
        assert_eq!(refused.witness.user.name, "bob");
        assert_eq!(refused.witness.user.groups, vec![AUTHENTICATED.to_string()]);
        let Action::Resource(r) = &refused.witness.action else {
            panic!("{refused:?}")
        };
        assert_eq!(r.resource, "pods");
        assert!(refused.to_string().contains("user:bob"), "{refused}");
    }

    #[test]
    fn granting_secrets_to_the_listed_service_account_passes_and_to_a_group_is_refused() {
        let old = policy(&[admins("admins")]);
        let vault = binding(
            "RoleBinding",
            "vault",
            "vault-reads",
            "secret-reader",
            "[{kind: ServiceAccount, name: vault}]",
        );
        let with_vault = policy(&[admins("admins"), vault.clone()]);
        assert_eq!(check_change(&old, &with_vault), Ok(()));
        let devs = binding(
            "RoleBinding",
            "vault",
            "dev-reads",
            "secret-reader",
            "[{kind: Group, name: dev}]",
        );
        let with_devs = policy(&[admins("admins"), vault, devs]);
        let refused = refusal(check_change(&with_vault, &with_devs));
        assert_eq!(refused.rule, "secrets-only-for-vault");
        assert_eq!(refused.kind, GateRuleKind::NeverGrantOutside);
        assert!(refused.witness.user.groups.contains(&"dev".into()));
        assert_eq!(
            refused.subject,
            format!("user:{}", refused.witness.user.name)
        );
        let message = refused.to_string();
        assert!(
            message.contains("was not allowed before the write, and is after")
                && message.contains("resource \"secrets\""),
            "{message}"
        );
    }

    #[test]
    fn a_change_outside_every_region_passes() {
        let old = policy(&[admins("admins")]);
        let readers = binding(
            "ClusterRoleBinding",
            "",
            "readers",
            "pod-reader",
            "[{kind: Group, name: dev}]",
        );
        let new = policy(&[admins("admins"), readers]);
        assert_eq!(check_change(&old, &new), Ok(()));
        assert_eq!(check_change(&new, &old), Ok(()));
    }

    #[test]
    fn without_gates_nothing_is_checked_and_with_them_abac_changes_are_refused() {
        let old = policy(&[admins("admins")]);
        let mut new = policy(&[]);
        new.abac.push(crate::policy::model::AbacRule {
            user: "alice".into(),
            ..Default::default()
        });
        let config = EngineConfig::default();
        let (old_engine, new_engine) =
            (Engine::new(&old, config.clone()), Engine::new(&new, config));
        assert_eq!(check(&[], &old, &new, &old_engine, &new_engine), Ok(()));
        let refused = check(&old.gates, &old, &new, &old_engine, &new_engine).unwrap_err();
        assert!(matches!(refused, GateError::Unchecked(_)), "{refused:?}");
        assert!(
            refused.to_string().contains("ABAC") && refused.to_string().contains("guard-rails"),
            "{refused}"
        );
    }

    #[test]
    fn a_grant_under_a_condition_outside_the_listed_subjects_is_refused_unchecked() {
        let old = policy(&[admins("admins")]);
        let conditional = |name: &str, subjects: &str| {
            binding(
                "RoleBinding",
                "vault",
                name,
                "labelled-secret-reader",
                subjects,
            )
        };
        // To a group the rule does not list: allowed with the right content, so not judged.
        let devs = conditional("dev-reads", "[{kind: Group, name: dev}]");
        let refused = check_change(&old, &policy(&[admins("admins"), devs.clone()])).unwrap_err();
        let GateError::Unchecked(message) = &refused else {
            panic!("{refused:?}")
        };
        assert!(
            message.contains("guard-rails")
                && message.contains("CEL condition")
                && message.contains("secrets-only-for-vault"),
            "{message}"
        );
        // Unbinding it again takes access away: nothing outside is granted.
        assert_eq!(
            check_change(&policy(&[admins("admins"), devs]), &old),
            Ok(())
        );
        // To the listed service account alone: nothing granted outside.
        let vault = conditional("vault-reads", "[{kind: ServiceAccount, name: vault}]");
        assert_eq!(
            check_change(&old, &policy(&[admins("admins"), vault])),
            Ok(())
        );
    }
}
