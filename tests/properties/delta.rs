//! The access delta is exact (docs/cli.md §6), as a property over random policies (the shared
//! vocabulary of `tests/support/generators.rs`: RBAC with deny rules, negation, aggregation, content clauses;
//! ABAC; chains) and random changes to them:
//!
//! 1. **Complete**: every request whose answer changes (allowed before and not after, or the
//!    reverse) is covered by a row of that direction that names one of its subjects (its user,
//!    or one of its groups) in a scope and action pattern that match it.
//! 2. **Witnessed**: every subject a row names has a witness request in that row: a concrete
//!    request of that subject, within the row's scope and actions, whose answer changes in the
//!    row's direction.
//!
//! 1,000 cases in CI, a tenth of the scale (`tests/support/cases.rs`: 25 in a local run,
//! `PROPTEST_CASES / 10` when set): one case computes a delta and asks both engines some 40
//! requests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support::generators::*;
use authzd::engine::delta::{access_delta, Delta, Row};
use authzd::engine::{Decision, Engine, EngineConfig};
use authzd::policy::model::PolicySet;
use authzd::request::{Action, Request, UserInfo};
use proptest::prelude::*;

fn allowed(engine: &Engine, request: &Request) -> bool {
    engine.authorize_shared(request.as_borrowed()).decision == Decision::Allow
}

fn subject_matches(witness_subject: &str, request: &Request) -> bool {
    match witness_subject.split_once(':') {
        Some(("user", name)) => request.user.name == name,
        Some(("group", name)) => request.user.groups.iter().any(|g| g == name),
        _ => false,
    }
}

fn witnessed(row: &Row, old: &Engine, new: &Engine) -> Result<(), TestCaseError> {
    let listed = [(true, &row.gains), (false, &row.losses)];
    for (gain, subjects) in listed {
        let labels = subjects
            .users
            .iter()
            .map(|u| format!("user:{u}"))
            .chain(subjects.groups.iter().map(|g| format!("group:{g}")));
        for label in labels {
            let witness = row
                .witnesses
                .iter()
                .find(|w| w.subject == label && w.gain == gain);
            prop_assert!(witness.is_some(), "{label} has no witness in {row:?}");
            let request = &witness.unwrap().request;
            prop_assert!(subject_matches(&label, request), "{label}: {request:?}");
            prop_assert!(row.scope.matches(request.action.namespace()), "{row:?}");
            prop_assert!(row.action.matches(&request.action), "{row:?}");
            prop_assert_eq!(allowed(old, request), !gain, "{:?} in {:?}", request, row);
            prop_assert_eq!(allowed(new, request), gain, "{:?} in {:?}", request, row);
        }
    }
    Ok(())
}

/// Requests aimed at the change: random actions asked by the subjects the two policies' bindings
/// name (a user with one of the groups), in their namespaces. Random requests alone rarely
/// change answer.
fn aimed(old: &PolicySet, new: &PolicySet, random: &[(UserInfo, Action)]) -> Vec<Request> {
    let (mut users, mut groups, mut namespaces) = (Vec::new(), Vec::new(), vec![String::new()]);
    for binding in old.bindings.iter().chain(&new.bindings) {
        namespaces.push(binding.namespace.clone());
        for subject in &binding.subjects {
            if let Some(user) = subject.user_name(&binding.namespace) {
                users.push(user);
            } else if let Some(group) = subject.group_name() {
                groups.push(group.to_string());
            }
        }
    }
    // ABAC lines' subjects and namespaces too; and per line, a request of its subjects
    // together (a line naming a user and a group matches only the pair).
    let lines: Vec<_> = old.abac.iter().chain(&new.abac).collect();
    for line in &lines {
        if !line.user.is_empty() {
            users.push(line.user.clone());
        }
        if !line.group.is_empty() {
            groups.push(line.group.clone());
        }
        if line.namespace != "*" {
            namespaces.push(line.namespace.clone());
        }
    }
    users.push("nobody".into());
    let mut out = Vec::new();
    for (i, (_, action)) in random.iter().enumerate().filter(|_| !lines.is_empty()) {
        let line = lines[i % lines.len()];
        let mut action = action.clone();
        if let Action::Resource(r) = &mut action {
            if line.namespace != "*" {
                r.namespace = line.namespace.clone();
            }
        }
        let name = if line.user.is_empty() {
            "nobody"
        } else {
            &line.user
        };
        let groups = if line.group.is_empty() {
            Vec::new()
        } else {
            vec![line.group.clone()]
        };
        out.push(Request {
            user: UserInfo {
                name: name.to_string(),
                groups,
                ..Default::default()
            },
            action,
        });
    }
    for (i, (user, action)) in random.iter().enumerate() {
        out.push(Request {
            user: user.clone(),
            action: action.clone(),
        });
        let mut action = action.clone();
        if let Action::Resource(r) = &mut action {
            r.namespace = namespaces[i % namespaces.len()].clone();
        }
        let groups = match groups.len() {
            0 => Vec::new(),
            n => vec![groups[i % n].clone(), groups[(i / 2) % n].clone()],
        };
        out.push(Request {
            user: UserInfo {
                name: users[(i / 3) % users.len()].clone(),
                groups,
                ..Default::default()
            },
            action,
        });
    }
    out
}

fn covered(
    delta: &Delta,
    old: &Engine,
    new: &Engine,
    request: &Request,
) -> Result<(), TestCaseError> {
    let (before, after) = (allowed(old, request), allowed(new, request));
    if before != after {
        prop_assert!(
            delta.covering(request, after).is_some(),
            "{:?} changes ({} -> {}) but no row covers it: {:#?}",
            request,
            before,
            after,
            delta.rows
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(crate::support::cases::config(1_000))]

    #[test]
    fn the_delta_is_complete_and_witnessed(
        old in policy(),
        other in policy(),
        keep in proptest::collection::vec(proptest::bool::weighted(0.8), 1..16),
        config in config(),
        requests in proptest::collection::vec((user(), action()), 40),
    ) {
        let new = changed(&old, other, &keep);
        let old_engine = Engine::new(&old, config.clone());
        let new_engine = Engine::new(&new, config);
        let delta = access_delta(&old, &new, &old_engine, &new_engine).expect("RBAC only");
        for row in &delta.rows {
            witnessed(row, &old_engine, &new_engine)?;
        }
        for request in aimed(&old, &new, &requests) {
            covered(&delta, &old_engine, &new_engine, &request)?;
        }
    }
}

/// `new` with its ABAC lines replaced: `old`'s, some dropped (`keep`, cycled), then `other`'s
/// added (in another file: sources never matter).
fn with_abac_changed(
    new: &PolicySet,
    old: &PolicySet,
    other: &PolicySet,
    keep: &[bool],
) -> PolicySet {
    let mut keep = keep.iter().cycle();
    let mut out = new.clone();
    out.abac = old
        .abac
        .iter()
        .filter(|_| *keep.next().unwrap_or(&true))
        .cloned()
        .chain(other.abac.iter().map(|line| {
            let mut line = line.clone();
            line.source = authzd::policy::model::Source::new("other.jsonl", line.source.line);
            line
        }))
        .collect();
    out
}

proptest! {
    // 100 cases in CI: a case costs about 1.3 s (`PROPTEST_CASES=1000` ran 100 in 126 s on
    // a 2-core machine), so 1,000 would take 21 minutes, past CI's budget on its own.
    #![proptest_config(crate::support::cases::config(100))]

    /// ABAC lines added and removed (alone, or with RBAC changes), held to
    /// both directions as RBAC changes are.
    #[test]
    fn the_delta_of_abac_changes_is_complete_and_witnessed(
        old in policy(),
        other in policy(),
        keep in proptest::collection::vec(proptest::bool::weighted(0.8), 1..16),
        keep_abac in proptest::collection::vec(proptest::bool::weighted(0.6), 1..8),
        rbac_too in proptest::bool::ANY,
        config in config(),
        requests in proptest::collection::vec((user(), action()), 40),
    ) {
        let rbac = if rbac_too { changed(&old, other.clone(), &keep) } else { old.clone() };
        let new = with_abac_changed(&rbac, &old, &other, &keep_abac);
        let old_engine = Engine::new(&old, config.clone());
        let new_engine = Engine::new(&new, config);
        let delta = access_delta(&old, &new, &old_engine, &new_engine).expect("no `*` lines");
        for row in &delta.rows {
            witnessed(row, &old_engine, &new_engine)?;
        }
        for request in aimed(&old, &new, &requests) {
            covered(&delta, &old_engine, &new_engine, &request)?;
        }
    }
}

/// ABAC changes alone are found too: requests that change are found and rows name them.
#[test]
fn abac_changes_are_found() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut rows, mut changed_requests) = (0, 0);
    for _ in 0..200 {
        let old = policy().new_tree(&mut runner).unwrap().current();
        let other = policy().new_tree(&mut runner).unwrap().current();
        let new = with_abac_changed(&old, &old, &other, &[true, false]);
        let config = EngineConfig::default();
        let old_engine = Engine::new(&old, config.clone());
        let new_engine = Engine::new(&new, config);
        let delta = access_delta(&old, &new, &old_engine, &new_engine).unwrap();
        rows += delta.rows.len();
        changed_requests +=
            requests_that_change(&mut runner, &old, &new, [&old_engine, &new_engine]);
    }
    assert!(rows > 50, "{rows} rows");
    assert!(
        changed_requests >= 10,
        "{changed_requests} changed requests"
    );
}

/// Of 20 random requests aimed at the change (`aimed`), how many the change answers
/// differently.
fn requests_that_change(
    runner: &mut proptest::test_runner::TestRunner,
    old: &PolicySet,
    new: &PolicySet,
    [old_engine, new_engine]: [&Engine; 2],
) -> usize {
    use proptest::strategy::ValueTree;
    let random: Vec<_> = (0..20)
        .map(|_| {
            (
                user().new_tree(runner).unwrap().current(),
                action().new_tree(runner).unwrap().current(),
            )
        })
        .collect();
    aimed(old, new, &random)
        .iter()
        .filter(|request| allowed(old_engine, request) != allowed(new_engine, request))
        .count()
}

/// The property is not vacuous: over many random changes, rows of both directions appear,
/// and requests that change are found and covered.
#[test]
fn changes_are_found() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut gains, mut losses, mut changed_requests) = (0, 0, 0);
    for _ in 0..200 {
        let old = policy().new_tree(&mut runner).unwrap().current();
        let other = policy().new_tree(&mut runner).unwrap().current();
        let new = changed(&old, other, &[true, false, true, true]);
        let config = EngineConfig::default();
        let old_engine = Engine::new(&old, config.clone());
        let new_engine = Engine::new(&new, config);
        let delta = access_delta(&old, &new, &old_engine, &new_engine).unwrap();
        gains += delta.rows.iter().filter(|r| !r.gains.is_empty()).count();
        losses += delta.rows.iter().filter(|r| !r.losses.is_empty()).count();
        changed_requests +=
            requests_that_change(&mut runner, &old, &new, [&old_engine, &new_engine]);
    }
    assert!(gains > 50 && losses > 50, "gains {gains}, losses {losses}");
    assert!(
        changed_requests >= 10,
        "{changed_requests} changed requests"
    );
}

/// Protecting a path changes the fold of every plain allow on writes, which the delta does not
/// analyse: it is refused, saying so, rather than reported as no change.
#[test]
fn a_change_of_protected_paths_is_refused() {
    let old = PolicySet::default();
    let new = PolicySet {
        field_policies: vec![protect_some()],
        ..PolicySet::default()
    };
    let config = EngineConfig::default();
    let refused = access_delta(
        &old,
        &new,
        &Engine::new(&old, config.clone()),
        &Engine::new(&new, config),
    )
    .unwrap_err();
    assert!(
        refused.to_string().contains("protect different paths"),
        "{refused}"
    );
}
