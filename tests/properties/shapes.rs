//! The policy shapes the benches time (`authzd::synth::shape_cases`) get their expected answers
//! from both the compiled engine and the reference evaluator, and the generators are
//! deterministic, so a bench's figure is always for the same policy and the right answer.

use authzd::engine::reference::ReferenceEvaluator;
use authzd::engine::{Engine, EngineConfig};
use authzd::synth;

#[test]
fn every_shape_gets_its_expected_answer_from_engine_and_reference() {
    let config = EngineConfig::default();
    let cases = synth::shape_cases(2_000, 50, 42);
    assert_eq!(cases.len(), 8);
    for case in &cases {
        let engine = Engine::new(&case.policy, config.clone());
        let reference = ReferenceEvaluator::new(&case.policy, &config);
        let got = engine.authorize(&case.request);
        assert_eq!(got.decision, case.expected, "{}: {got:?}", case.name);
        assert_eq!(
            reference.authorize(&case.request).decision,
            case.expected,
            "{} (reference)",
            case.name
        );
    }
}

#[test]
fn shapes_stress_what_their_names_say() {
    let cases = synth::shape_cases(2_000, 50, 42);
    let by_name = |name: &str| {
        cases
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no case {name}"))
    };
    let wide = by_name("wide-binding");
    assert!(wide.policy.bindings.iter().any(|b| b.subjects.len() == 50));
    assert_eq!(by_name("many-groups").request.user.groups.len(), 50);
    let namespaces: std::collections::BTreeSet<_> = by_name("many-namespaces")
        .policy
        .bindings
        .iter()
        .map(|b| b.namespace.clone())
        .collect();
    assert!(namespaces.len() > 2_000, "{}", namespaces.len());
    assert_eq!(by_name("abac-heavy").policy.abac.len(), 51);
    assert!(by_name("deny-heavy").policy.roles.iter().any(|r| r
        .rules
        .iter()
        .filter(|rule| rule.deny)
        .count()
        == 50));
}

#[test]
fn shape_generators_are_deterministic() {
    let a = synth::shape_cases(1_000, 20, 7);
    let b = synth::shape_cases(1_000, 20, 7);
    let c = synth::shape_cases(1_000, 20, 8);
    for ((x, y), z) in a.iter().zip(&b).zip(&c) {
        assert_eq!(x.policy, y.policy, "{}", x.name);
        assert_eq!(x.request, y.request, "{}", x.name);
        if x.name != "abac-heavy" {
            // The random background differs with the seed (ABAC lines do not use it).
            assert_ne!(x.policy.bindings, z.policy.bindings, "{}", x.name);
        }
    }
}
