//! AuthZEN's searches (`engine::search`, docs/authzen.md §4) agree with evaluation in both
//! directions, on random policies with deny rules, negation, content clauses and every chain,
//! each held to the reference evaluator's Authorize:
//!
//! * subject search: every listed subject is allowed, and every allowed subject of the
//!   vocabulary is listed (users asked with no groups, groups through a user bound to nothing,
//!   service accounts with their groups) unless the answer says it is not complete (only
//!   `AlwaysAllow` and the service-account groups make it so);
//! * action search: every listed verb is allowed; every allowed verb is listed when the answer
//!   is complete, and every allowed verb of Kubernetes' own always is;
//! * resource search: every listed name is allowed; when complete, every allowed name is listed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support::generators::*;
use authzd::engine::reference::ReferenceEvaluator;
use authzd::engine::search::{self, SubjectKind, KUBERNETES_VERBS};
use authzd::engine::Engine;
use authzd::request::{self, Action, Content, Request, UserInfo};
use proptest::prelude::*;

/// The verbs an action search is held to: the generators' and Kubernetes' own.
const VERBS: &[&str] = &[
    "get",
    "list",
    "create",
    "delete",
    "GET",
    "*",
    "watch",
    "update",
    "patch",
    "deletecollection",
    "escalate",
];

/// The names a resource search is held to: the generators' resource names and one no rule
/// names.
const NAMES: &[&str] = &["a", "b", "c"];

fn allowed(
    reference: &ReferenceEvaluator,
    user: &UserInfo,
    action: &Action,
    content: Option<&Content>,
) -> bool {
    let request = Request {
        user: user.clone(),
        action: action.clone(),
    };
    reference
        .authorize_content(&request, content)
        .is_ok_and(|response| response.allowed())
}

fn with_verb(action: &Action, verb: &str) -> Action {
    let mut action = action.clone();
    match &mut action {
        Action::Resource(r) => r.verb = verb.into(),
        Action::NonResource(n) => n.verb = verb.into(),
    }
    action
}

/// Whether the API would take the action: it refuses an empty verb, resource or path.
fn servable(action: &Action) -> bool {
    match action {
        Action::Resource(r) => !r.verb.is_empty() && !r.resource.is_empty(),
        Action::NonResource(n) => !n.verb.is_empty() && !n.path.is_empty(),
    }
}

proptest! {
    #![proptest_config(crate::support::cases::config(2_000))]

    #[test]
    fn subject_search_agrees_with_evaluation(
        policy in policy(),
        config in config(),
        action in action(),
        content in content(),
    ) {
        prop_assume!(servable(&action));
        let engine = Engine::new(&policy, config.clone());
        let reference = ReferenceEvaluator::new(&policy, &config);
        let content = content.as_ref();
        let named = |name: &str| UserInfo { name: name.into(), ..UserInfo::default() };
        let in_group = |group: &str| UserInfo { groups: vec![group.into()], ..UserInfo::default() };

        let Ok(users) = search::subjects(&engine, SubjectKind::User, &action, content) else {
            return Ok(());
        };
        for user in &users.items {
            prop_assert!(allowed(&reference, &named(user), &action, content), "listed user {user} is not allowed");
        }
        for user in USERS {
            if allowed(&reference, &named(user), &action, content) && users.complete() {
                prop_assert!(users.items.iter().any(|u| u == user), "allowed user {user} not listed: {users:?}");
            }
        }

        let groups = search::subjects(&engine, SubjectKind::Group, &action, content).unwrap();
        for group in &groups.items {
            prop_assert!(allowed(&reference, &in_group(group), &action, content), "listed group {group} is not allowed");
        }
        for group in GROUPS {
            if allowed(&reference, &in_group(group), &action, content) && groups.complete() {
                prop_assert!(groups.items.iter().any(|g| g == group), "allowed group {group} not listed: {groups:?}");
            }
        }

        let accounts = search::subjects(&engine, SubjectKind::ServiceAccount, &action, content).unwrap();
        for account in &accounts.items {
            let user = request::service_account_of(account).unwrap();
            prop_assert!(allowed(&reference, &user, &action, content), "listed service account {account} is not allowed");
        }
        for name in USERS {
            let Some(user) = request::service_account_of(name) else { continue };
            if allowed(&reference, &user, &action, content) && accounts.complete() {
                prop_assert!(accounts.items.iter().any(|a| a == name), "allowed service account {name} not listed: {accounts:?}");
            }
        }
    }

    #[test]
    fn action_search_agrees_with_evaluation(
        policy in policy(),
        config in config(),
        user in user(),
        action in action(),
        content in content(),
    ) {
        prop_assume!(servable(&action));
        let engine = Engine::new(&policy, config.clone());
        let reference = ReferenceEvaluator::new(&policy, &config);
        let content = content.as_ref();
        let Ok(found) = search::actions(&engine, &user, &action, content) else {
            return Ok(());
        };
        for verb in &found.items {
            prop_assert!(
                allowed(&reference, &user, &with_verb(&action, verb), content),
                "listed verb {verb} is not allowed: {found:?}"
            );
        }
        for verb in VERBS {
            let kubernetes = KUBERNETES_VERBS.contains(verb);
            if allowed(&reference, &user, &with_verb(&action, verb), content) && (found.complete() || kubernetes) {
                prop_assert!(found.items.iter().any(|v| v == verb), "allowed verb {verb} not listed: {found:?}");
            }
        }
    }

    #[test]
    fn resource_search_agrees_with_evaluation(
        policy in policy(),
        config in config(),
        user in user(),
        action in action(),
        content in content(),
    ) {
        prop_assume!(servable(&action) && matches!(action, Action::Resource(_)));
        let engine = Engine::new(&policy, config.clone());
        let reference = ReferenceEvaluator::new(&policy, &config);
        let content = content.as_ref();
        let Ok(found) = search::resources(&engine, &user, &action, content) else {
            return Ok(());
        };
        let named = |name: &str| {
            let mut action = action.clone();
            if let Action::Resource(r) = &mut action {
                r.name = name.into();
            }
            action
        };
        for name in &found.items {
            prop_assert!(allowed(&reference, &user, &named(name), content), "listed name {name} is not allowed: {found:?}");
        }
        if found.complete() {
            for name in NAMES {
                if allowed(&reference, &user, &named(name), content) {
                    prop_assert!(found.items.iter().any(|n| n == name), "allowed name {name} not listed: {found:?}");
                }
            }
        }
    }
}
