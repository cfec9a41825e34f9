//! The finite universe brute-force oracles ask (`tests/properties/gate.rs`,
//! `tests/properties/escalation.rs`): every action built from the generators' vocabulary in each
//! dimension, plus [`GATE_ONLY`] (a value only a ChangeGate names) and [`FRESH`] (a value
//! nothing names), and the namespaces requests are asked in. Rules match by equality,
//! wildcards, negation, `*/sub` and URL prefixes, so a value no rule names behaves as
//! [`FRESH`] does; a checker that misses a value some rule names is caught by asking it.

use std::collections::BTreeSet;

use super::generators::{
    API_GROUPS, GATE_ONLY, NAMESPACES, RESOURCE_NAMES, RULE_RESOURCES, URLS, VERBS,
};
use authzd::request::{Action, NonResourceAttributes, ResourceAttributes};

/// A value the vocabulary never names, in every dimension (and as a user or group).
pub const FRESH: &str = "o-fresh";

/// Every action of the universe, without its namespace (resource actions in namespace `""`),
/// with resources and subresources as rules name them (`res/sub`, `*/sub`) split at their
/// first `/`, and [`GATE_ONLY`] in every dimension.
pub fn actions() -> Vec<Action> {
    let (mut resources, mut subresources) = (BTreeSet::new(), BTreeSet::new());
    for entry in RULE_RESOURCES.iter().chain(&["pods/x-gate", GATE_ONLY]) {
        let (base, sub) = entry.split_once('/').unwrap_or((entry, ""));
        resources.insert(base.to_string());
        subresources.insert(sub.to_string());
    }
    actions_over(resources, subresources, &[GATE_ONLY])
}

/// The universe of policies alone (no ChangeGate names anything): [`actions`] without
/// [`GATE_ONLY`], and with resources a request may carry that contain a `/` (rules match the
/// combined `resource/subresource`): every whole entry (`*/`, `pods/status`) and one under a
/// bare resource (what a negated `-pods` also removes).
pub fn policy_actions() -> Vec<Action> {
    let (mut resources, mut subresources) = (BTreeSet::new(), BTreeSet::new());
    for entry in RULE_RESOURCES {
        let (base, sub) = entry.split_once('/').unwrap_or((entry, ""));
        resources.insert(base.to_string());
        subresources.insert(sub.to_string());
    }
    resources.extend(RULE_RESOURCES.iter().map(|entry| entry.to_string()));
    resources.insert(format!("pods/{FRESH}"));
    actions_over(resources, subresources, &[])
}

fn actions_over(
    mut resources: BTreeSet<String>,
    mut subresources: BTreeSet<String>,
    extra: &[&'static str],
) -> Vec<Action> {
    let mut verbs: Vec<&str> = VERBS.to_vec();
    verbs.extend(extra.iter().copied().chain([FRESH]));
    let mut groups: Vec<&str> = API_GROUPS.iter().copied().filter(|g| *g != "*").collect();
    groups.extend(
        ["Apps"]
            .into_iter()
            .chain(extra.iter().copied())
            .chain([FRESH]),
    );
    resources.remove("*");
    subresources.remove("*");
    resources.extend(extra.iter().map(|e| e.to_string()));
    resources.insert(FRESH.to_string());
    subresources.extend(extra.iter().map(|e| e.to_string()));
    subresources.extend([String::new(), FRESH.to_string()]);
    let mut names: Vec<&str> = RESOURCE_NAMES.to_vec();
    names.extend([""].into_iter().chain(extra.iter().copied()).chain([FRESH]));
    let mut out = Vec::new();
    for verb in &verbs {
        for group in &groups {
            for resource in &resources {
                for subresource in &subresources {
                    for name in &names {
                        out.push(Action::Resource(ResourceAttributes {
                            namespace: String::new(),
                            verb: verb.to_string(),
                            group: group.to_string(),
                            version: "v1".to_string(),
                            resource: resource.to_string(),
                            subresource: subresource.to_string(),
                            name: name.to_string(),
                        }));
                    }
                }
            }
        }
        // Literal URLs, a path under each prefix, and paths no entry names.
        let mut paths: BTreeSet<String> = ["", "/api/v1", "/apis/x", "/healthz/", "/o-fresh"]
            .iter()
            .map(|p| p.to_string())
            .collect();
        let gate_urls: &[&str] = if extra.is_empty() {
            &[]
        } else {
            &["/x-gate", "/x-gate/*"]
        };
        for url in URLS.iter().chain(gate_urls) {
            paths.insert(url.to_string());
            paths.insert(format!("{}o-fresh", url.trim_end_matches('*')));
        }
        for path in paths {
            out.push(Action::NonResource(NonResourceAttributes {
                path,
                verb: verb.to_string(),
            }));
        }
    }
    out
}

/// Every namespace of the universe: the vocabulary's, cluster scope (`""`), [`GATE_ONLY`]'s
/// and a fresh one.
pub fn namespaces() -> Vec<&'static str> {
    let mut out: Vec<&str> = NAMESPACES.to_vec();
    out.extend(["", GATE_ONLY, FRESH]);
    out
}

/// [`namespaces`] of policies alone: without [`GATE_ONLY`]'s.
pub fn policy_namespaces() -> Vec<&'static str> {
    let mut out: Vec<&str> = NAMESPACES.to_vec();
    out.extend(["", FRESH]);
    out
}

/// `action` asked in `namespace` (a non-resource action has none).
pub fn in_namespace(action: &Action, namespace: &str) -> Action {
    let mut action = action.clone();
    if let Action::Resource(r) = &mut action {
        r.namespace = namespace.to_string();
    }
    action
}
