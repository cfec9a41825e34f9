//! "What can this subject do?" (SubjectRulesReview): the compiled engine's rules equal the
//! reference evaluator's, and the rules mean what Authorize does — the first matching rule of
//! authzd's form decides every request exactly as Authorize does, and Kubernetes' form never
//! covers a request Authorize does not allow (and, when complete, covers every one it does).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support::generators::*;
use authzd::engine::reference::ReferenceEvaluator;
use authzd::engine::rules::RuleTier;
use authzd::engine::{Decision, Engine, EngineConfig};
use authzd::policy::model::PolicySet;
use authzd::request::{Action, Request, UserInfo};
use proptest::prelude::*;

/// Namespaces a review may ask about, overlapping the generated bindings' and actions'.
fn namespace() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("ns1".to_string()),
        Just("ns2".to_string()),
        Just("*".to_string()),
    ]
}

/// `action` moved into the reviewed namespace (non-resource actions have none).
fn in_namespace(action: &Action, namespace: &str) -> Action {
    let mut action = action.clone();
    if let Action::Resource(r) = &mut action {
        r.namespace = namespace.to_string();
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

/// The policy without content clauses or FieldPolicies: rules that hold only per request's
/// content are returned `conditional`, which the decision properties leave aside.
fn plain(mut policy: PolicySet) -> PolicySet {
    for role in &mut policy.roles {
        for rule in &mut std::sync::Arc::make_mut(role).rules {
            rule.clauses = None;
        }
    }
    policy.field_policies.clear();
    policy
}

proptest! {
    #![proptest_config(crate::support::cases::config(10_000))]

    /// The index finds exactly the rules the reference walk finds, in the same order, with
    /// the same references and errors.
    #[test]
    fn engine_rules_equal_the_reference_rules(
        policy in policy(),
        config in config(),
        user in user(),
        namespace in namespace(),
    ) {
        let engine = Engine::new(&policy, config.clone());
        let reference = ReferenceEvaluator::new(&policy, &config);
        prop_assert_eq!(
            engine.rules_for(user.as_borrowed(), &namespace),
            reference.rules_for(&user, &namespace)
        );
    }

    /// authzd's form decides as Authorize: a request the returned allow rules cover and no
    /// deny before them covers is allowed, one a deny covers first is denied, and one no rule
    /// covers gets no opinion — and the reverse. Kubernetes' form is sound, and exact when
    /// it says it is complete.
    #[test]
    fn rules_decide_as_authorize(
        policy in policy().prop_map(plain),
        config in config(),
        user in user(),
        namespace in namespace(),
        actions in proptest::collection::vec(action(), 1..=8),
    ) {
        let engine = Engine::new(&policy, config.clone());
        let rules = engine.rules_for(user.as_borrowed(), &namespace);
        let kubernetes = rules.kubernetes();
        for action in actions.iter().filter(|a| servable(a)) {
            let action = in_namespace(action, &namespace);
            let request = Request { user: user.clone(), action: action.clone() };
            let authorized = engine.authorize(&request).decision;
            prop_assert_eq!(
                rules.decide(action.as_borrowed()),
                authorized,
                "rules {:?} for {:?}",
                rules,
                action
            );
            let covered = kubernetes.resource_rules.iter().any(|r| r.covers(action.as_borrowed()))
                || kubernetes.non_resource_rules.iter().any(|r| r.covers(action.as_borrowed()));
            if covered {
                prop_assert_eq!(authorized, Decision::Allow, "{:?} lists {:?}", kubernetes, action);
            } else if !kubernetes.incomplete {
                prop_assert_ne!(authorized, Decision::Allow, "{:?} misses {:?}", kubernetes, action);
            }
        }
    }
}

const POLICY: &str = include_str!("../fixtures/rules-review.yaml");

fn load(text: &str) -> PolicySet {
    let objects = authzd::policy::load::parse_manifest(
        "policy.yaml",
        text,
        &authzd::policy::load::LoadOptions::default(),
    )
    .unwrap();
    let mut policy = PolicySet::default();
    for object in objects {
        policy.push(object)
    }
    policy.canonicalize();
    policy
}

fn named(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo {
        name: name.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        ..Default::default()
    }
}

/// alice in `dev`: the cluster reader, the namespace deny on secrets before her grants, her
/// negated `*` rule (left out of Kubernetes' form), the deployments update (whole, listed), and
/// the secrets grant the deny narrows (left out) — each named in the evaluation error.
#[test]
fn a_deny_and_a_negation_make_the_kubernetes_list_incomplete_and_say_why() {
    let engine = Engine::new(&load(POLICY), EngineConfig::default());
    let rules = engine.rules_for(named("alice", &["devs"]).as_borrowed(), "dev");
    let tiers: Vec<(RuleTier, bool)> = rules.rules.iter().map(|r| (r.tier, r.deny)).collect();
    assert_eq!(
        tiers,
        [
            (RuleTier::Cluster, false),
            (RuleTier::Cluster, false),
            (RuleTier::Namespace, true),
            (RuleTier::Namespace, false),
            (RuleTier::Namespace, false),
            (RuleTier::Namespace, false),
        ]
    );
    let kubernetes = rules.kubernetes();
    assert!(kubernetes.incomplete);
    let listed: Vec<(Vec<String>, Vec<String>)> = kubernetes
        .resource_rules
        .iter()
        .map(|r| (r.resources.clone(), r.verbs.clone()))
        .collect();
    assert_eq!(
        listed,
        [
            (
                vec!["pods".to_string(), "configmaps".to_string()],
                vec!["get".to_string(), "list".to_string()]
            ),
            (vec!["deployments".to_string()], vec!["update".to_string()]),
        ]
    );
    assert_eq!(kubernetes.non_resource_rules.len(), 1);
    assert_eq!(
        kubernetes.errors,
        [
            "RBAC RoleBinding/dev/alice-edits -> Role/dev/editor rule 0 (policy.yaml:29) has negated entries, which Kubernetes rules cannot express; left out",
            "RBAC RoleBinding/dev/alice-edits -> Role/dev/editor rule 2 (policy.yaml:29) is narrowed by the deny rule RBAC RoleBinding/dev/devs-no-secrets -> Role/dev/no-secrets rule 0 (policy.yaml:35); left out",
        ]
    );
    // The same subject outside `dev`: the cluster reader alone, whole.
    let elsewhere = engine.rules_for(named("alice", &["devs"]).as_borrowed(), "prod");
    let kubernetes = elsewhere.kubernetes();
    assert!(!kubernetes.incomplete, "{kubernetes:?}");
    assert_eq!(kubernetes.resource_rules.len(), 1);
}

/// A super-user may do everything, in Kubernetes' own words; a missing role is an error that
/// makes the list incomplete.
#[test]
fn super_users_get_everything_and_missing_roles_are_reported() {
    let config = EngineConfig {
        super_groups: vec!["system:masters".into()],
        ..EngineConfig::default()
    };
    let policy = load(&format!(
        "{POLICY}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: ghost}}\nsubjects: [{{kind: User, name: carol}}]\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gone}}\n"
    ));
    let engine = Engine::new(&policy, config);
    let admin = engine
        .rules_for(named("root", &["system:masters"]).as_borrowed(), "dev")
        .kubernetes();
    assert!(!admin.incomplete);
    assert_eq!(admin.resource_rules[0].verbs, ["*"]);
    assert_eq!(admin.resource_rules[0].resources, ["*"]);
    assert_eq!(admin.non_resource_rules[0].non_resource_urls, ["*"]);

    let carol = engine
        .rules_for(named("carol", &[]).as_borrowed(), "")
        .kubernetes();
    assert!(carol.incomplete);
    assert!(carol.resource_rules.is_empty());
    assert_eq!(carol.errors.len(), 1);
    assert!(carol.errors[0].contains("\"gone\" not found"), "{carol:?}");
}
