//! Conditional answers (docs/policy.md §8), as properties over random policies (the shared
//! vocabulary of `tests/support/generators.rs`: RBAC with deny, negation, content clauses, CEL conditions
//! and FieldPolicy-free diffs; ABAC; chains) and random requests and contents:
//!
//! 1. The conditions returned for a request without content, finished against any content,
//!    give the answer Authorize gives with that content (its decision and the rule that
//!    decides it), at the same revision; an unconditional answer has the decision Authorize
//!    gives with any content.
//! 2. The fold (the answer without content, as every caller that does not ask for conditions
//!    gets it) is never more permissive than an evaluation with content.
//!
//! 10,000 cases in CI (`tests/support/cases.rs`: 256 in a local run, `PROPTEST_CASES` wins).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support::generators::*;
use authzd::engine::conditional::{conditional_subjects, evaluate, returned, Returned};
use authzd::engine::{Authorize, Decision, Engine, EngineConfig, Mode, Response};
use authzd::policy::model::{
    Binding, BindingKind, PolicyRule, PolicySet, Role, RoleKind, RoleRef, Source, Subject,
};
use authzd::request::{Action, Content, Request, UserInfo};
use proptest::prelude::*;
use proptest::sample::select;

/// What both answers must agree on: the decision and the rule that decides it.
fn deciding(response: &Response) -> (Decision, Vec<String>) {
    let by = match response.decision {
        Decision::Allow => &response.allowed_by,
        Decision::Deny => &response.denied_by,
        Decision::NoOpinion => return (Decision::NoOpinion, Vec::new()),
    };
    (
        response.decision,
        by.iter().map(|r| r.to_string()).collect(),
    )
}

fn check(
    engine: &Engine,
    user: UserInfo,
    action: &Action,
    contents: &[Option<Content>],
) -> Result<bool, TestCaseError> {
    let request = Request {
        user,
        action: action.clone(),
    };
    let fold = engine.decide(request.as_borrowed()).response;
    let answer = returned(&fold, request.as_borrowed(), engine.diff());
    for content in contents {
        let with = request.with_content(content.as_ref());
        let Ok(full) = engine.authorize_content(with) else {
            continue;
        };
        // Property 2: the fold allows only what every evaluation with content allows.
        if fold.decision == Decision::Allow {
            prop_assert_eq!(
                full.decision,
                Decision::Allow,
                "the fold allows {:?}, content {:?} does not",
                request,
                content
            );
        }
        // Property 1: the decision, and for conditional answers the rule that decides.
        match &answer {
            Returned::Decided(response) => prop_assert_eq!(
                response.decision,
                full.decision,
                "{:?} with {:?}: unconditional",
                request,
                content
            ),
            Returned::Conditional(conditions) => {
                prop_assert!(!conditions.is_empty());
                let finished =
                    evaluate(conditions, with, engine.diff()).expect("content read before");
                prop_assert_eq!(
                    deciding(&finished),
                    deciding(&full),
                    "{:?} with {:?}: conditions {:?}",
                    request,
                    content,
                    conditions
                );
                kep_chain_finishes_as_authorize(engine, &request, conditions, content, &full)?;
            }
        }
    }
    Ok(matches!(answer, Returned::Conditional(_)))
}

/// Property 1 on the webhook's KEP-5681 shapes: the conditions as a chain of condition sets
/// (`engine::condition_sets`), sent back with the objects, evaluate to the decision Authorize
/// gives with them. Content with no KEP form is skipped: changed paths, and selectors on a
/// non-resource request (a SubjectAccessReview's `nonResourceAttributes` carry none). The
/// sets' JSON, both ways, is the webhook adapter's and is tested there and end to end
/// (`tests/kep5681.rs`).
fn kep_chain_finishes_as_authorize(
    engine: &Engine,
    request: &Request,
    conditions: &[authzd::engine::conditional::ReturnedRule],
    content: &Option<Content>,
    full: &Response,
) -> Result<(), TestCaseError> {
    use authzd::engine::condition_sets::{condition_sets, ConditionChain};
    let Some(content) = content else {
        return Ok(());
    };
    let selectors = !content.field_selector.is_empty() || !content.label_selector.is_empty();
    if !content.changed_paths.is_empty()
        || (selectors && matches!(request.action, Action::NonResource(_)))
    {
        return Ok(());
    }
    let sets = condition_sets(conditions);
    let chain = ConditionChain::of_written(&sets, conditions, request, content)
        .map_err(|e| TestCaseError::fail(format!("the chain was refused: {e:?}")))?;
    let verdict = chain
        .evaluate(&mut |rules, with| evaluate(rules, with, engine.diff()))
        .map_err(|e| TestCaseError::fail(format!("the chain was refused: {e:?}")))?;
    prop_assert_eq!(
        verdict.decision,
        full.decision,
        "{:?} with {:?}: chain {:?} answered {:?}",
        request,
        content,
        sets,
        verdict
    );
    Ok(())
}

proptest! {
    #![proptest_config(crate::support::cases::config(10_000))]

    #[test]
    fn returned_conditions_finish_as_authorize(
        policy in clause_heavy_policy(),
        config in chain(),
        requests in proptest::collection::vec(
            (
                prop_oneof![3 => bound_user(), 1 => user()],
                action(),
                proptest::collection::vec(content(), 1..=4),
            ),
            1..=4,
        ),
    ) {
        let engine = Engine::new(&policy, config);
        for (user, action, contents) in &requests {
            check(&engine, user.clone(), action, contents)?;
            who_can_agrees(&engine, action, contents)?;
        }
    }
}

/// Who-can in RETURN mode: a subject listed as conditional is, for any content, allowed by
/// its conditions exactly when who-can with that content lists it.
fn who_can_agrees(
    engine: &Engine,
    action: &Action,
    contents: &[Option<Content>],
) -> Result<(), TestCaseError> {
    for subject in conditional_subjects(engine, action) {
        let request = Request {
            user: UserInfo {
                name: if subject.user {
                    subject.name.clone()
                } else {
                    authzd::engine::content::WHO_CAN_PROBE.to_string()
                },
                groups: if subject.user {
                    Vec::new()
                } else {
                    vec![subject.name.clone()]
                },
                ..Default::default()
            },
            action: action.clone(),
        };
        for content in contents {
            let Ok(who) = engine.allowed_subjects_content(action, content.as_ref()) else {
                continue;
            };
            // `*` (an AlwaysAllow after RBAC) lists everyone not listed as denied.
            let (allowed, denied) = if subject.user {
                (&who.users, &who.denied_users)
            } else {
                (&who.groups, &who.denied_groups)
            };
            let listed = allowed.contains(&subject.name)
                || (allowed.iter().any(|n| n == "*") && !denied.contains(&subject.name));
            let finished = evaluate(
                &subject.conditions,
                request.with_content(content.as_ref()),
                engine.diff(),
            )
            .expect("content read before");
            prop_assert_eq!(
                finished.decision == Decision::Allow,
                listed,
                "{} {:?} for {:?} with {:?}: conditions {:?}, who-can {:?}",
                if subject.user { "user" } else { "group" },
                subject.name,
                action,
                content,
                subject.conditions,
                who
            );
        }
    }
    Ok(())
}

/// Policies where most requests meet rules with content clauses: the shared vocabulary's
/// rules with clauses on about half of them (a CEL condition in 3 of 10), plus one or two
/// ClusterRoles whose broad rules (any resource of any group, a few verbs, a deny in one of
/// three) carry clauses, bound to the users and groups requests are made by, cluster-wide or
/// in `ns1`.
/// Chains with RBAC, without super-users (who bypass every rule).
fn chain() -> impl Strategy<Value = EngineConfig> {
    prop_oneof![
        3 => Just(vec![Mode::Rbac]),
        3 => Just(vec![Mode::Rbac, Mode::Abac]),
        1 => Just(vec![Mode::Abac, Mode::Rbac]),
        1 => Just(vec![Mode::AlwaysDeny, Mode::Rbac, Mode::AlwaysAllow]),
    ]
    .prop_map(|modes| EngineConfig {
        modes,
        ..EngineConfig::default()
    })
}

/// A user the broad bindings name (or a member of a group they name).
fn bound_user() -> impl Strategy<Value = UserInfo> {
    (
        select(&["alice", "bob", "carol"][..]),
        proptest::sample::subsequence(&["dev", "ops"][..], 0..=2),
    )
        .prop_map(|(name, groups)| UserInfo {
            name: name.to_string(),
            groups: groups.into_iter().map(str::to_string).collect(),
            ..Default::default()
        })
}

const BROAD_VERBS: &[&[&str]] = &[
    &["*"],
    &["update", "patch"],
    &["get", "list"],
    &["delete"],
    &["create", "update"],
];

fn clause_heavy_policy() -> impl Strategy<Value = PolicySet> {
    let broad_rule = (
        select(BROAD_VERBS),
        prop::bool::weighted(0.33),
        proptest::option::weighted(0.8, some_clauses()),
    )
        .prop_map(|(verbs, deny, clauses)| PolicyRule {
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
            api_groups: vec!["*".into()],
            resources: vec!["*".into()],
            deny,
            clauses,
            ..PolicyRule::default()
        });
    let broad_role = (
        select(&["c1", "c2"][..]),
        proptest::collection::vec(broad_rule, 1..=4),
    )
        .prop_map(|(name, rules)| Role {
            kind: RoleKind::ClusterRole,
            namespace: String::new(),
            name: name.to_string(),
            labels: Default::default(),
            rules,
            aggregation_rule: None,
            source: Source::new("broad.yaml", 1),
        });
    let broad_binding = (
        prop::bool::ANY,
        select(&["c1", "c2"][..]),
        select(&["alice", "bob", "dev", "ops"][..]),
        select(&["x1", "x2", "x3"][..]),
    )
        .prop_map(|(cluster, role, subject, name)| Binding {
            kind: if cluster {
                BindingKind::ClusterRoleBinding
            } else {
                BindingKind::RoleBinding
            },
            namespace: if cluster { String::new() } else { "ns1".into() },
            name: name.to_string(),
            subjects: vec![Subject {
                kind: if matches!(subject, "dev" | "ops") {
                    "Group"
                } else {
                    "User"
                }
                .into(),
                api_group: String::new(),
                name: subject.to_string(),
                namespace: String::new(),
            }],
            role_ref: RoleRef {
                kind: RoleKind::ClusterRole,
                name: role.to_string(),
            },
            source: Source::new("broad.yaml", 2),
        });
    (
        policy(),
        proptest::collection::vec(proptest::option::of(some_clauses()), 32),
        proptest::collection::vec(broad_role, 1..=2),
        proptest::collection::vec(broad_binding, 1..=4),
    )
        .prop_map(|(mut policy, clauses, roles, bindings)| {
            let mut next = clauses.into_iter().cycle();
            for role in &mut policy.roles {
                for rule in &mut std::sync::Arc::make_mut(role).rules {
                    if let Some(Some(clauses)) = next.next() {
                        rule.clauses = Some(clauses);
                    }
                }
            }
            let mut seen = std::collections::HashSet::new();
            policy.roles.extend(
                roles
                    .into_iter()
                    .filter(|r| seen.insert(r.name.clone()))
                    .map(Into::into),
            );
            let mut seen: std::collections::HashSet<(BindingKind, String)> = policy
                .bindings
                .iter()
                .map(|b| (b.kind, b.name.clone()))
                .collect();
            policy.bindings.extend(
                bindings
                    .into_iter()
                    .filter(|b| seen.insert((b.kind, b.name.clone())))
                    .map(Into::into),
            );
            policy
        })
}

/// The vocabulary does reach conditional answers (the property above would hold vacuously
/// otherwise): a policy with a condition over the object returns it.
#[test]
fn a_condition_over_the_object_is_returned() {
    let policy = authzd::policy::load::parse_manifest(
        "roles.yaml",
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: web}
rules:
- apiGroups: [apps]
  resources: [deployments]
  verbs: [update]
  condition: "object.metadata.labels == oldObject.metadata.labels"
- {apiGroups: [apps], resources: [deployments], verbs: [update], deny: true, condition: "request.name == 'frozen'"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: web}
subjects: [{kind: User, name: alice}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: web}
"#,
        &authzd::policy::load::LoadOptions::default(),
    )
    .unwrap();
    let mut set = authzd::policy::model::PolicySet::default();
    for object in policy {
        set.push(object)
    }
    let engine = Engine::new(&set, authzd::engine::EngineConfig::default());
    let ask = |name: &str| Request {
        user: UserInfo {
            name: "alice".into(),
            ..Default::default()
        },
        action: Action::Resource(authzd::request::ResourceAttributes {
            namespace: "apps".into(),
            verb: "update".into(),
            group: "apps".into(),
            resource: "deployments".into(),
            name: name.into(),
            ..Default::default()
        }),
    };
    // The deny's condition reads only the request: decided here, outright.
    let frozen = ask("frozen");
    let fold = engine.decide(frozen.as_borrowed()).response;
    match returned(&fold, frozen.as_borrowed(), engine.diff()) {
        Returned::Decided(response) => assert_eq!(response.decision, Decision::Deny),
        other => panic!("{other:?}"),
    }
    // Otherwise the allow's condition is returned, and finishes either way.
    let web = ask("web");
    let fold = engine.decide(web.as_borrowed()).response;
    assert_eq!(fold.decision, Decision::NoOpinion);
    let Returned::Conditional(conditions) = returned(&fold, web.as_borrowed(), engine.diff())
    else {
        panic!("expected conditions");
    };
    assert_eq!(conditions.len(), 1, "{conditions:?}");
    assert!(!conditions[0].deny);
    let content = |labels: &str| {
        let mut c = Content::default();
        c.old_object = Some(br#"{"metadata":{"labels":{"app":"web"}}}"#.to_vec());
        c.object = Some(format!(r#"{{"metadata":{{"labels":{labels}}}}}"#).into_bytes());
        c
    };
    let same = content(r#"{"app":"web"}"#);
    let changed = content(r#"{"app":"db"}"#);
    let finish = |c: &Content| {
        evaluate(&conditions, web.with_content(Some(c)), engine.diff())
            .unwrap()
            .decision
    };
    assert_eq!(finish(&same), Decision::Allow);
    assert_eq!(finish(&changed), Decision::NoOpinion);
}

/// The property above is not vacuous: among 500 generated policies and requests (a fixed
/// seed), many get conditional answers, which it then finishes against content.
#[test]
fn the_property_meets_conditional_answers() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
    );
    let (mut requests, mut conditional) = (0, 0);
    for _ in 0..500 {
        let policy = clause_heavy_policy()
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let config = chain().new_tree(&mut runner).unwrap().current();
        let user = prop_oneof![3 => bound_user(), 1 => user()]
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let action = action().new_tree(&mut runner).unwrap().current();
        let engine = Engine::new(&policy, config);
        requests += 1;
        if check(&engine, user, &action, &[None]).unwrap() {
            conditional += 1;
        }
    }
    assert!(
        conditional * 20 >= requests,
        "only {conditional} of {requests} answers were conditional"
    );
}
