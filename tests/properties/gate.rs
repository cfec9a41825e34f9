//! The ChangeGate check is exact (docs/policy.md §8), as a property over random policies and
//! changes (the shared vocabulary of `tests/support/generators.rs`, as `delta` makes them) and
//! random gates (`gate()`: its rules name the vocabulary and a value no policy names):
//! [`check`] refuses a write exactly when a brute-force oracle finds a request that breaks a
//! rule, names the first such rule (gates in order, rules in order), and its witness breaks
//! that rule when asked again, of both engines and of the reference evaluator.
//!
//! The oracle knows nothing of the engine's cells, kinds or who-can: it asks the reference
//! evaluator (`authzd::engine::reference`) every request of a finite universe in the rule's
//! region, before and after. The universe: every action built from the vocabulary's values
//! in each dimension plus [`GATE_ONLY`] and a fresh value, in every namespace of the
//! vocabulary, `""`, [`GATE_ONLY`]'s and a fresh one; every user and group. Two reductions,
//! each plain on its face, keep it affordable:
//!
//! * an action whose RBAC matches are the same before and after (for every binding in scope:
//!   its subjects and the rules of its role that match the action) is answered alike for
//!   every subject, since ABAC lines and the chain do not change: only the others are asked;
//! * a subject no matching binding, ABAC line or super-user setting names changes no answer:
//!   a request's user is one such name or a fresh one, and its groups every subset (up to
//!   three when there are more than five) of such names. A listed subject never takes part
//!   in a `NeverGrantOutside` witness, so the listed ones are left out.
//!
//! 500 cases in CI, scaled as `tests/support/cases.rs` says (12 in a local run). Changes of
//! ABAC lines make the check fail closed (`Unchecked`), asserted by the same property, and a
//! change of protected paths too (a test apart). So does a write bringing a conditional grant
//! to a subject a `NeverGrantOutside` rule does not list, which the oracle (comparing answers
//! without content, as the check does) cannot judge either: the property then asserts only
//! that the refusal says so, and `src/engine/gate.rs`'s unit tests say when it is made.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use crate::support::generators::*;
use crate::support::universe::{actions, in_namespace, namespaces, FRESH};
use authzd::engine::gate::{check, GateError, Refusal};
use authzd::engine::reference::ReferenceEvaluator;
use authzd::engine::{Decision, Engine, EngineConfig};
use authzd::policy::aggregate::aggregated_rules;
use authzd::policy::model::{
    Binding, BindingKind, ChangeGate, GateRule, GateRuleKind, PolicyRule, PolicySet, RoleKind,
    Subject,
};
use authzd::policy::rbac::rule_matches;
use authzd::request::{Action, Request, UserInfo};
use proptest::prelude::*;

const AUTHENTICATED: &str = "system:authenticated";

fn in_region(rule: &GateRule, action: &Action) -> bool {
    let namespace = match action {
        Action::Resource(r) => r.namespace.as_str(),
        Action::NonResource(_) => "",
    };
    rule.namespaces.iter().any(|n| n == "*" || n == namespace)
        && rule.access.iter().any(|a| rule_matches(a, action))
}

/// One policy's bindings with their roles' effective rules, in canonical order.
struct Bound {
    bindings: Vec<(Binding, Vec<PolicyRule>)>,
}

impl Bound {
    fn of(policy: &PolicySet) -> Self {
        let mut policy = policy.clone();
        policy.canonicalize();
        let aggregated = aggregated_rules(&policy);
        let bindings = policy
            .bindings
            .iter()
            .filter_map(|binding| {
                let namespace = match binding.role_ref.kind {
                    RoleKind::ClusterRole => "",
                    RoleKind::Role => binding.namespace.as_str(),
                };
                let role = policy.roles.iter().find(|r| {
                    r.kind == binding.role_ref.kind
                        && r.namespace == namespace
                        && r.name == binding.role_ref.name
                })?;
                let rules = match aggregated.get(&role.name) {
                    Some(rules) if role.kind == RoleKind::ClusterRole => rules.clone(),
                    _ => role.rules.clone(),
                };
                Some(((**binding).clone(), rules))
            })
            .collect();
        Bound { bindings }
    }

    /// Every binding in scope of `action` (every binding: `all`) with a rule matching it:
    /// the binding and the indexes of those rules.
    fn matches(&self, action: &Action, all: bool) -> Vec<(&Binding, Vec<(usize, &PolicyRule)>)> {
        let namespace = action.namespace();
        self.bindings
            .iter()
            .filter(|(b, _)| match b.kind {
                BindingKind::ClusterRoleBinding => true,
                BindingKind::RoleBinding => {
                    all || (!namespace.is_empty() && b.namespace == namespace)
                }
            })
            .filter_map(|(binding, rules)| {
                let matched: Vec<(usize, &PolicyRule)> = rules
                    .iter()
                    .enumerate()
                    .filter(|(_, rule)| rule_matches(rule, action))
                    .collect();
                (!matched.is_empty()).then_some((binding, matched))
            })
            .collect()
    }
}

/// The brute-force oracle over the universe.
struct Oracle {
    old: ReferenceEvaluator,
    new: ReferenceEvaluator,
    /// Every (action, namespace) of the universe whose RBAC matches differ before and after,
    /// with the user and group names the matching bindings name.
    changing: Vec<(Action, BTreeSet<String>, BTreeSet<String>)>,
}

impl Oracle {
    fn new(old: &PolicySet, new: &PolicySet, config: &EngineConfig) -> Self {
        let (old_bound, new_bound) = (Bound::of(old), Bound::of(new));
        let access: Vec<&PolicyRule> = old
            .gates
            .iter()
            .flat_map(|g| &g.rules)
            .flat_map(|r| &r.access)
            .collect();
        // Names every request may meet whatever its action: ABAC lines', super-users'.
        let (mut users, mut groups) = (BTreeSet::new(), BTreeSet::new());
        for line in &old.abac {
            users.insert(line.user.clone());
            groups.insert(line.group.clone());
        }
        users.extend(config.super_users.iter().cloned());
        groups.extend(config.super_groups.iter().cloned());
        let mut changing = Vec::new();
        for action in actions() {
            // Outside every region whatever the namespace, or the same matches in every
            // namespace (all bindings taken as in scope): nothing to ask.
            if !access.iter().any(|a| rule_matches(a, &action))
                || old_bound.matches(&action, true) == new_bound.matches(&action, true)
            {
                continue;
            }
            let namespaces = match action {
                Action::Resource(_) => namespaces(),
                Action::NonResource(_) => vec![""],
            };
            for namespace in namespaces {
                let action = in_namespace(&action, namespace);
                let (before, after) = (
                    old_bound.matches(&action, false),
                    new_bound.matches(&action, false),
                );
                if before == after {
                    continue;
                }
                let (mut users, mut groups) = (users.clone(), groups.clone());
                for (binding, _) in before.iter().chain(&after) {
                    for subject in &binding.subjects {
                        if let Some(user) = subject.user_name(&binding.namespace) {
                            users.insert(user);
                        } else if let Some(group) = subject.group_name() {
                            groups.insert(group.to_string());
                        }
                    }
                }
                changing.push((action, users, groups));
            }
        }
        Oracle {
            old: ReferenceEvaluator::new(old, config),
            new: ReferenceEvaluator::new(new, config),
            changing,
        }
    }

    fn allowed(evaluator: &ReferenceEvaluator, request: &Request) -> bool {
        evaluator.authorize(request).decision == Decision::Allow
    }

    /// Allowed before and not after (`lose`), or the reverse.
    fn flips(&self, request: &Request, lose: bool) -> bool {
        Self::allowed(&self.new, request) != lose && Self::allowed(&self.old, request) == lose
    }

    /// A request that breaks `rule`, if any.
    fn breaks(&self, rule: &GateRule) -> Option<Request> {
        let region = self.changing.iter().filter(|(a, _, _)| in_region(rule, a));
        match rule.kind {
            GateRuleKind::NeverRemove => {
                let identities: Vec<UserInfo> = rule.subjects.iter().filter_map(identity).collect();
                for (action, _, _) in region {
                    for user in &identities {
                        let request = Request {
                            user: user.clone(),
                            action: action.clone(),
                        };
                        if self.flips(&request, true) {
                            return Some(request);
                        }
                    }
                }
                None
            }
            GateRuleKind::NeverGrantOutside => {
                let (listed_users, listed_groups) = listed(rule);
                for (action, users, groups) in region {
                    let mut users: Vec<&String> = users.difference(&listed_users).collect();
                    let fresh = FRESH.to_string();
                    users.push(&fresh);
                    let groups: Vec<&String> = groups.difference(&listed_groups).collect();
                    let most = if groups.len() > 5 { 3 } else { groups.len() };
                    for set in subsets(&groups, most) {
                        for user in &users {
                            let request = Request {
                                user: UserInfo {
                                    name: user.to_string(),
                                    groups: set.iter().map(|g| g.to_string()).collect(),
                                    ..Default::default()
                                },
                                action: action.clone(),
                            };
                            if self.flips(&request, false) {
                                return Some(request);
                            }
                        }
                    }
                }
                None
            }
        }
    }
}

/// Every subset of `items` of at most `most` elements.
fn subsets<'a>(items: &[&'a String], most: usize) -> Vec<Vec<&'a String>> {
    let mut out: Vec<Vec<&String>> = vec![Vec::new()];
    for item in items {
        let grown: Vec<Vec<&String>> = out
            .iter()
            .filter(|s| s.len() < most)
            .map(|s| {
                let mut s = s.clone();
                s.push(item);
                s
            })
            .collect();
        out.extend(grown);
    }
    out
}

/// A protected subject as Kubernetes authenticates it (a group's member: a fresh user).
fn identity(subject: &authzd::policy::model::Subject) -> Option<UserInfo> {
    let (name, groups) = match subject.kind.as_str() {
        "User" => (subject.name.clone(), vec![AUTHENTICATED.to_string()]),
        "ServiceAccount" => (
            subject.user_name("")?,
            vec![
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{}", subject.namespace),
                AUTHENTICATED.to_string(),
            ],
        ),
        "Group" => (
            FRESH.to_string(),
            vec![subject.name.clone(), AUTHENTICATED.to_string()],
        ),
        _ => return None,
    };
    Some(UserInfo {
        name,
        groups,
        ..Default::default()
    })
}

fn listed(rule: &GateRule) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut users, mut groups) = (BTreeSet::new(), BTreeSet::new());
    for subject in &rule.subjects {
        if let Some(user) = subject.user_name("") {
            users.insert(user);
        } else if let Some(group) = subject.group_name() {
            groups.insert(group.to_string());
        }
    }
    (users, groups)
}

/// The refusal's witness breaks the rule it names: in the region, of the right subject,
/// flipping the right way on both engines and on the oracle's evaluators.
fn witnessed(
    refusal: &Refusal,
    rule: &GateRule,
    engines: [&Engine; 2],
    oracle: &Oracle,
) -> Result<(), TestCaseError> {
    let witness = &refusal.witness;
    prop_assert_eq!(refusal.kind, rule.kind);
    prop_assert!(
        in_region(rule, &witness.action),
        "{refusal:?} outside {rule:?}"
    );
    let lose = rule.kind == GateRuleKind::NeverRemove;
    let allowed = |engine: &Engine| {
        engine.authorize_shared(witness.as_borrowed()).decision == Decision::Allow
    };
    prop_assert_eq!(allowed(engines[0]), lose, "{:?}", refusal);
    prop_assert_eq!(allowed(engines[1]), !lose, "{:?}", refusal);
    prop_assert!(oracle.flips(witness, lose), "{refusal:?}");
    if lose {
        let protected = rule.subjects.iter().any(|s| {
            identity(s).is_some_and(|id| {
                let label = match s.kind.as_str() {
                    "Group" => format!("group:{}", s.name),
                    _ => format!("user:{}", id.name),
                };
                label == refusal.subject
                    && id.groups == witness.user.groups
                    && (s.kind == "Group" || id.name == witness.user.name)
            })
        });
        prop_assert!(
            protected,
            "{refusal:?} is not of a protected subject of {rule:?}"
        );
    } else {
        let (users, groups) = listed(rule);
        prop_assert!(!users.contains(&witness.user.name), "{refusal:?}");
        prop_assert!(
            !witness.user.groups.iter().any(|g| groups.contains(g)),
            "{refusal:?}"
        );
        prop_assert_eq!(&refusal.subject, &format!("user:{}", witness.user.name));
    }
    Ok(())
}

/// `gate` aimed at the write from `old` adding `other`'s objects, so that it breaks the gate
/// often: each rule, as `picks` (cycled) say, keeps its subjects, namespaces and access, or
/// takes those of one of the bindings of `old` (`NeverRemove`) or `other`
/// (`NeverGrantOutside`): its subjects (to protect: `NeverRemove` only), mostly its namespace, and mostly
/// a rule of its role (as an allow, without content clauses).
fn aimed(mut gate: ChangeGate, old: &PolicySet, other: &PolicySet, picks: &[usize]) -> ChangeGate {
    let mut picks = picks.iter().cycle();
    for rule in &mut gate.rules {
        let pick = *picks.next().unwrap_or(&0);
        let policy = match rule.kind {
            GateRuleKind::NeverRemove => old,
            GateRuleKind::NeverGrantOutside => other,
        };
        if pick.is_multiple_of(4) || policy.bindings.is_empty() {
            continue;
        }
        let binding = &policy.bindings[pick % policy.bindings.len()];
        // Subjects to protect; those who may gain stay the gate's own (others gain).
        if rule.kind == GateRuleKind::NeverRemove {
            rule.subjects = binding
                .subjects
                .iter()
                .filter(|s| s.user_name(&binding.namespace).is_some() || s.kind == "Group")
                .map(|s| Subject {
                    namespace: match s.kind.as_str() {
                        "ServiceAccount" if s.namespace.is_empty() => binding.namespace.clone(),
                        _ => s.namespace.clone(),
                    },
                    ..s.clone()
                })
                .collect();
        }
        // The access of the binding's role (any role's when it has none).
        let role_namespace = match binding.role_ref.kind {
            RoleKind::ClusterRole => "",
            RoleKind::Role => binding.namespace.as_str(),
        };
        let bound: Vec<&PolicyRule> = policy
            .roles
            .iter()
            .filter(|r| {
                r.kind == binding.role_ref.kind
                    && r.namespace == role_namespace
                    && r.name == binding.role_ref.name
            })
            .flat_map(|r| &r.rules)
            .collect();
        let rules = if bound.is_empty() {
            policy.roles.iter().flat_map(|r| &r.rules).collect()
        } else {
            bound
        };
        if binding.kind == BindingKind::RoleBinding && !pick.is_multiple_of(3) {
            rule.namespaces = vec![binding.namespace.clone()];
        }
        if !pick.is_multiple_of(5) && !rules.is_empty() {
            rule.access = vec![PolicyRule {
                deny: false,
                clauses: None,
                attribute_restrictions: None,
                ..rules[pick % rules.len()].clone()
            }];
        }
    }
    gate
}

proptest! {
    #![proptest_config(crate::support::cases::config(500))]

    #[test]
    fn the_gate_check_is_exact(
        old in policy(),
        other in policy(),
        keep in proptest::collection::vec(proptest::bool::weighted(0.7), 1..16),
        config in config(),
        gates in (gate("g0"), proptest::option::weighted(0.3, gate("g1"))),
        picks in proptest::collection::vec(0usize..24, 1..4),
        abac_changes in proptest::bool::weighted(0.1),
    ) {
        let mut old = old;
        old.gates = std::iter::once(gates.0)
            .chain(gates.1)
            .map(|gate| aimed(gate, &old, &other, &picks))
            .collect();
        let other_abac = other.abac.clone();
        let mut new = changed(&old, other, &keep);
        if abac_changes {
            new.abac = other_abac;
        }
        let old_engine = Engine::new(&old, config.clone());
        let new_engine = Engine::new(&new, config.clone());
        let result = check(&old.gates, &old, &new, &old_engine, &new_engine);
        if old.abac != new.abac {
            prop_assert!(matches!(result, Err(GateError::Unchecked(_))), "{result:?}");
            return Ok(());
        }
        if let Err(GateError::Unchecked(why)) = &result {
            // A conditional grant outside a NeverGrantOutside rule's subjects is not judged
            // (unit tests in src/engine/gate.rs): then the write brings a rule with clauses.
            prop_assert!(why.contains("content clauses or a CEL condition"), "{why}");
            let with_clauses = |p: &PolicySet| {
                p.roles.iter().flat_map(|r| &r.rules).filter(|r| r.clauses.is_some()).count()
            };
            prop_assert!(with_clauses(&old) + with_clauses(&new) > 0, "{why}");
            return Ok(());
        }
        let oracle = Oracle::new(&old, &new, &config);
        let broken = old.gates.iter().find_map(|gate| {
            gate.rules
                .iter()
                .find_map(|rule| oracle.breaks(rule).map(|witness| (gate, rule, witness)))
        });
        match (result, broken) {
            (Ok(()), None) => {}
            (Err(GateError::Broken(refusal)), Some((gate, rule, _))) => {
                prop_assert_eq!((&refusal.gate, &refusal.rule), (&gate.name, &rule.name));
                witnessed(&refusal, rule, [&old_engine, &new_engine], &oracle)?;
            }
            (result, broken) => {
                prop_assert!(
                    false,
                    "check says {:?}; the oracle finds {:?}",
                    result,
                    broken.map(|(gate, rule, witness)| (&gate.name, &rule.name, witness))
                );
            }
        }
    }
}

/// The property is not vacuous: over many random changes and gates, both kinds of rule are
/// broken, and writes pass too.
#[test]
fn gates_are_broken_and_kept() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut removed, mut granted, mut passed, mut unjudged) = (0, 0, 0, 0);
    for _ in 0..300 {
        let mut old = policy().new_tree(&mut runner).unwrap().current();
        let gate = gate("g0").new_tree(&mut runner).unwrap().current();
        let picks = proptest::collection::vec(0usize..24, 1..4)
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let other = policy().new_tree(&mut runner).unwrap().current();
        old.gates = vec![aimed(gate, &old, &other, &picks)];
        let new = changed(&old, other, &[true, false]);
        let config = EngineConfig::default();
        let old_engine = Engine::new(&old, config.clone());
        let new_engine = Engine::new(&new, config);
        match check(&old.gates, &old, &new, &old_engine, &new_engine) {
            Ok(()) => passed += 1,
            Err(GateError::Broken(r)) if r.kind == GateRuleKind::NeverRemove => removed += 1,
            Err(GateError::Broken(_)) => granted += 1,
            // A conditional grant outside the listed subjects, not judged.
            Err(GateError::Unchecked(why)) if why.contains("CEL condition") => unjudged += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        removed >= 5 && granted >= 5 && passed >= 100 && unjudged < passed,
        "removed {removed}, granted {granted}, passed {passed}, not judged {unjudged}"
    );
}

/// A change of protected paths changes the fold of every plain allow on writes, which is not
/// computed: a gate in force refuses it, saying so.
#[test]
fn a_change_of_protected_paths_is_unchecked() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let old = PolicySet {
        gates: vec![gate("g0").new_tree(&mut runner).unwrap().current()],
        ..PolicySet::default()
    };
    let new = PolicySet {
        field_policies: vec![protect_some()],
        ..old.clone()
    };
    let config = EngineConfig::default();
    let (old_engine, new_engine) = (Engine::new(&old, config.clone()), Engine::new(&new, config));
    let refused = check(&old.gates, &old, &new, &old_engine, &new_engine).unwrap_err();
    assert!(matches!(refused, GateError::Unchecked(_)), "{refused:?}");
    assert!(
        refused.to_string().contains("protect different paths")
            && refused.to_string().contains("\"g0\""),
        "{refused}"
    );
    assert_eq!(check(&[], &old, &new, &old_engine, &new_engine), Ok(()));
}
