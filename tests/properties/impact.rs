//! Soundness of precise invalidation: whenever a policy change alters the answer to a request
//! (decision, reason, explanation or errors), the change's computed impact must cover that
//! request's subject and namespace — otherwise the cache would keep serving the old answer.
//! Checked on random policies and random edits, for whole-policy diffs (directory reloads) and
//! for single-object changes (admin writes), where the applier's indexed impact must equal the
//! scanned one.

use crate::support::generators::*;
use authzd::engine::Engine;
use authzd::policy::impact::{
    impact_of_applied_objects, impact_of_change, impact_of_objects, ClusterRoleReferrers, Impact,
};
use authzd::policy::model::{Binding, PolicySet, Role};
use authzd::request::Request;
use proptest::prelude::*;

/// Before and after versions of the objects one write changes.
type RoleChanges = Vec<(Option<Role>, Option<Role>)>;
type BindingChanges = Vec<(Option<Binding>, Option<Binding>)>;

fn key_of_role(r: &Role) -> (authzd::policy::model::RoleKind, String, String) {
    (r.kind, r.namespace.clone(), r.name.clone())
}

fn key_of_binding(b: &Binding) -> (authzd::policy::model::BindingKind, String, String) {
    (b.kind, b.namespace.clone(), b.name.clone())
}

/// `old` with some objects removed and some replaced or added from `delta`.
fn edited(old: &PolicySet, delta: &PolicySet, keep_mask: u64, abac_change: bool) -> PolicySet {
    let mut new = old.clone();
    new.roles = old
        .roles
        .iter()
        .enumerate()
        .filter(|(i, _)| keep_mask & (1 << (i % 64)) != 0)
        .map(|(_, r)| r.clone())
        .collect();
    new.bindings = old
        .bindings
        .iter()
        .enumerate()
        .filter(|(i, _)| keep_mask & (1 << ((i + 17) % 64)) != 0)
        .map(|(_, b)| b.clone())
        .collect();
    for role in &delta.roles {
        new.roles.retain(|r| key_of_role(r) != key_of_role(role));
        new.roles.push(role.clone());
    }
    for binding in &delta.bindings {
        new.bindings
            .retain(|b| key_of_binding(b) != key_of_binding(binding));
        new.bindings.push(binding.clone());
    }
    if abac_change {
        new.abac = delta.abac.clone();
    }
    new.canonicalize();
    new
}

fn assert_covered(
    old: &PolicySet,
    new: &PolicySet,
    impact: &Impact,
    config: &authzd::engine::EngineConfig,
    requests: &[(authzd::request::UserInfo, authzd::request::Action)],
) -> Result<(), TestCaseError> {
    let before = Engine::new(old, config.clone());
    let after = Engine::new(new, config.clone());
    for (user, action) in requests {
        let req = Request {
            user: user.clone(),
            action: action.clone(),
        };
        if before.authorize(&req) != after.authorize(&req) {
            prop_assert!(
                impact.affects(
                    &user.name,
                    user.groups.iter().map(String::as_str),
                    action.namespace()
                ),
                "answer changed but not in impact: {:?}",
                req
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(crate::support::cases::config(3_000))]

    #[test]
    fn whole_policy_diff_covers_every_changed_answer(
        old in policy(),
        delta in policy(),
        keep_mask in any::<u64>(),
        abac_change in prop::bool::weighted(0.3),
        field_policy_change in prop::bool::weighted(0.3),
        config in config(),
        requests in proptest::collection::vec((user(), action()), 1..=10),
    ) {
        let mut old = old;
        old.canonicalize();
        let new = if field_policy_change {
            // FieldPolicies come with reloads only; protected paths change plain answers, so
            // a FieldPolicy edit alone must reach them.
            PolicySet { field_policies: delta.field_policies.clone(), ..old.clone() }
        } else {
            edited(&old, &delta, keep_mask, abac_change)
        };
        let impact = impact_of_change(&old, &new);
        assert_covered(&old, &new, &impact, &config, &requests)?;
    }

    #[test]
    fn single_object_impact_covers_every_changed_answer(
        old in policy(),
        replacement_role in role(),
        replacement_binding in binding(),
        change in 0u8..4,
        config in config(),
        requests in proptest::collection::vec((user(), action()), 1..=10),
    ) {
        let mut old = old;
        old.canonicalize();
        let mut new = old.clone();
        let (roles, bindings): (RoleChanges, BindingChanges) = match change {
            // Apply (create or replace) a role.
            0 => {
                let before = old.roles.iter().find(|r| key_of_role(r) == key_of_role(&replacement_role)).map(|r| Role::clone(r));
                new.roles.retain(|r| key_of_role(r) != key_of_role(&replacement_role));
                new.roles.push(replacement_role.clone().into());
                (vec![(before, Some(replacement_role))], vec![])
            }
            // Delete a role.
            1 => match old.roles.first().cloned() {
                Some(gone) => {
                    new.roles.retain(|r| key_of_role(r) != key_of_role(&gone));
                    (vec![(Some(Role::clone(&gone)), None)], vec![])
                }
                None => (vec![], vec![]),
            },
            // Apply a binding.
            2 => {
                let before = old.bindings.iter().find(|b| key_of_binding(b) == key_of_binding(&replacement_binding)).map(|b| Binding::clone(b));
                new.bindings.retain(|b| key_of_binding(b) != key_of_binding(&replacement_binding));
                new.bindings.push(replacement_binding.clone().into());
                (vec![], vec![(before, Some(replacement_binding))])
            }
            // Delete a binding.
            _ => match old.bindings.first().cloned() {
                Some(gone) => {
                    new.bindings.retain(|b| key_of_binding(b) != key_of_binding(&gone));
                    (vec![], vec![(Some(Binding::clone(&gone)), None)])
                }
                None => (vec![], vec![]),
            },
        };
        new.canonicalize();
        let role_refs: Vec<(Option<&Role>, Option<&Role>)> = roles.iter().map(|(a, b)| (a.as_ref(), b.as_ref())).collect();
        let binding_refs: Vec<(Option<&Binding>, Option<&Binding>)> = bindings.iter().map(|(a, b)| (a.as_ref(), b.as_ref())).collect();
        let impact = impact_of_objects(&new, &old, &role_refs, &binding_refs);
        assert_covered(&old, &new, &impact, &config, &requests)?;
        // The store's applier finds a changed role's bindings through its index and the
        // canonical order instead of scanning both policies: the same impact.
        let referrers = ClusterRoleReferrers::of(&new);
        prop_assert_eq!(
            impact_of_applied_objects(&new, &old, &role_refs, &binding_refs, &referrers),
            impact
        );
    }
}
