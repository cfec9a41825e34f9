//! Escalation prevention is exact (docs/security.md §4), as a property over random policies,
//! chains, callers and written objects (the vocabulary of `tests/support/generators.rs`:
//! wildcards, negation, deny rules, content clauses, aggregation, ABAC):
//! [`EscalationCheck::check`] passes a write of a Role, ClusterRole, RoleBinding or
//! ClusterRoleBinding exactly when a brute-force oracle says it may be written.
//!
//! The oracle knows nothing of the check's classes of requests: it asks the reference
//! evaluator every request of the finite universe (`tests/support/universe.rs`). A write may
//! be made when the author is a super-user, holds `escalate` on the role (`bind` on the role a
//! binding refers to), or is allowed every request each allow rule of the object grants:
//! a Role's or RoleBinding's resource requests in its namespace, a ClusterRole's or
//! ClusterRoleBinding's in every namespace of the universe and at cluster scope, and every
//! non-resource request the rules name. "Allowed" is decided on the policy as the author holds
//! it for certain: an allow under content clauses dropped, a deny under clauses made
//! unconditional. A rule written with clauses is also held, request by request, where nothing
//! denies the request and the author holds a rule with exactly those clauses that matches it.
//! A ClusterRole with an aggregation rule needs every request of the universe. A written
//! object that replaces one of the policy must also not lift a deny rule from whom it
//! reached unless the author holds what it withheld (or `escalate` on the old role, `bind` on
//! the old binding's role): a role's deny rules the new version drops, wherever the role is
//! bound; a binding's role's deny rules, when the new binding drops a subject or names another
//! role.
//!
//! 3000 cases in CI, scaled as `tests/support/cases.rs` says (76 in a local run).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;

use crate::support::generators::*;
use crate::support::universe::{in_namespace, policy_actions, policy_namespaces};
use authzd::engine::escalation::EscalationCheck;
use authzd::engine::reference::ReferenceEvaluator;
use authzd::engine::{Decision, Engine, EngineConfig};
use authzd::policy::abac;
use authzd::policy::aggregate::aggregated_rules;
use authzd::policy::model::{
    AbacRule, Binding, BindingKind, PolicyObject, PolicyRule, PolicySet, Role, RoleKind, Subject,
};
use authzd::policy::rbac::rule_matches;
use authzd::request::{Action, Request, ResourceAttributes, UserInfo};
use proptest::prelude::*;

/// The policy as a caller holds it for certain, whatever a request carries.
fn held_for_certain(policy: &PolicySet) -> PolicySet {
    let mut certain = policy.clone();
    certain.roles = policy
        .roles
        .iter()
        .map(|role| {
            let rules = role
                .rules
                .iter()
                .filter(|rule| rule.deny || rule.clauses.is_none())
                .map(|rule| PolicyRule {
                    clauses: None,
                    attribute_restrictions: None,
                    ..rule.clone()
                })
                .collect();
            Arc::new(Role {
                rules,
                ..(**role).clone()
            })
        })
        .collect();
    certain
}

fn applies(subject: &Subject, user: &UserInfo, namespace: &str) -> bool {
    match subject.kind.as_str() {
        "User" | "ServiceAccount" => subject.user_name(namespace).as_deref() == Some(&user.name),
        "Group" => user.groups.contains(&subject.name),
        _ => false,
    }
}

/// What decides the author's answer to a request in one namespace: the matching rules
/// (binding, rule), the allowing ABAC lines, and whether a protected path applies.
type Key = (Vec<(usize, usize)>, Vec<usize>, bool);

/// [`Key`] before the namespace is known: every matching rule, every ABAC line allowing the
/// action in some namespace (with that namespace).
struct Hits {
    rules: Vec<(usize, usize)>,
    abac: Vec<(usize, String)>,
    protected: bool,
}

struct Oracle {
    policy: PolicySet,
    aggregated: HashMap<String, Vec<PolicyRule>>,
    config: EngineConfig,
    author: UserInfo,
    full: ReferenceEvaluator,
    certain: ReferenceEvaluator,
    /// Answers of `certain` already asked, by what they depend on ([`Self::key`]).
    asked: HashMap<Key, Decision>,
    /// The bindings of the policy held for certain whose subjects name the author: kind,
    /// namespace and the effective rules of the role (none when it is missing).
    reach: Vec<(BindingKind, String, Vec<PolicyRule>)>,
    /// The ABAC lines whose subject is the author: index, namespace, and the line for any
    /// namespace (its namespace is then matched apart).
    abac: Vec<(usize, String, AbacRule)>,
    diff: authzd::policy::content::path::DiffConfig,
    universe: Arc<Vec<Action>>,
}

/// The universe, built once for every case.
static UNIVERSE: std::sync::LazyLock<Arc<Vec<Action>>> =
    std::sync::LazyLock::new(|| Arc::new(policy_actions()));

impl Oracle {
    fn new(policy: &PolicySet, config: &EngineConfig, author: &UserInfo) -> Self {
        let certain = held_for_certain(policy);
        let certain_aggregated = aggregated_rules(&certain);
        let reach = certain
            .bindings
            .iter()
            .filter(|b| b.subjects.iter().any(|s| applies(s, author, &b.namespace)))
            .map(|binding| {
                let role_namespace = match binding.role_ref.kind {
                    RoleKind::ClusterRole => "",
                    RoleKind::Role => binding.namespace.as_str(),
                };
                let role = certain.roles.iter().find(|r| {
                    r.kind == binding.role_ref.kind
                        && r.namespace == role_namespace
                        && r.name == binding.role_ref.name
                });
                let rules = match (role, certain_aggregated.get(&binding.role_ref.name)) {
                    (Some(role), Some(rules)) if role.kind == RoleKind::ClusterRole => {
                        rules.clone()
                    }
                    (Some(role), _) => role.rules.clone(),
                    (None, _) => Vec::new(),
                };
                (binding.kind, binding.namespace.clone(), rules)
            })
            .collect();
        let abac = (certain.abac.iter().enumerate())
            .filter(|(_, line)| {
                abac::subject_matches(line, &author.name, author.as_borrowed().groups)
            })
            .map(|(i, line)| {
                let any = AbacRule {
                    namespace: "*".to_string(),
                    ..line.clone()
                };
                (i, line.namespace.clone(), any)
            })
            .collect();
        Oracle {
            reach,
            abac,
            policy: policy.clone(),
            aggregated: aggregated_rules(policy),
            config: config.clone(),
            author: author.clone(),
            full: ReferenceEvaluator::new(policy, config),
            certain: ReferenceEvaluator::new(&certain, config),
            asked: HashMap::new(),
            diff: policy.diff_config(),
            universe: Arc::clone(&UNIVERSE),
        }
    }

    fn request(&self, action: Action) -> Request {
        Request {
            user: self.author.clone(),
            action,
        }
    }

    /// The author holds `verb` on the role `kind/name` in `namespace`, as Authorize says.
    fn holds_on_role(&self, verb: &str, kind: RoleKind, namespace: &str, name: &str) -> bool {
        let resource = match kind {
            RoleKind::ClusterRole => "clusterroles",
            RoleKind::Role => "roles",
        };
        let action = Action::Resource(ResourceAttributes {
            namespace: namespace.to_string(),
            verb: verb.to_string(),
            group: "rbac.authorization.k8s.io".to_string(),
            version: "*".to_string(),
            resource: resource.to_string(),
            subresource: String::new(),
            name: name.to_string(),
        });
        self.full.authorize(&self.request(action)).decision == Decision::Allow
    }

    /// The rules reaching the author in `namespace`, as upstream's `RulesFor` walks them.
    fn bound_rules(&self, namespace: &str) -> Vec<&PolicyRule> {
        let mut out = Vec::new();
        for binding in &self.policy.bindings {
            let in_scope = match binding.kind {
                BindingKind::ClusterRoleBinding => true,
                BindingKind::RoleBinding => !namespace.is_empty() && binding.namespace == namespace,
            };
            if !in_scope
                || !binding
                    .subjects
                    .iter()
                    .any(|s| applies(s, &self.author, &binding.namespace))
            {
                continue;
            }
            if let Some(rules) = self.role_rules(
                binding.role_ref.kind,
                &binding.namespace,
                &binding.role_ref.name,
            ) {
                out.extend(rules);
            }
        }
        out
    }

    fn role_rules(
        &self,
        kind: RoleKind,
        binding_namespace: &str,
        name: &str,
    ) -> Option<&[PolicyRule]> {
        let namespace = match kind {
            RoleKind::ClusterRole => "",
            RoleKind::Role => binding_namespace,
        };
        let role = self
            .policy
            .roles
            .iter()
            .find(|r| r.kind == kind && r.namespace == namespace && r.name == name)?;
        match (kind, self.aggregated.get(name)) {
            (RoleKind::ClusterRole, Some(rules)) => Some(rules),
            _ => Some(&role.rules),
        }
    }

    /// What the author's answers to `action` depend on in any namespace, on the policy held
    /// for certain (which has no content clauses): the rules of the bindings reaching the
    /// author that match it (binding and rule, in order), the ABAC lines that allow it (with
    /// the namespace each is for), and whether a FieldPolicy protects what it writes. Two
    /// requests alike in these, in the same namespace, are answered alike by the reference
    /// evaluator, which reads nothing else.
    fn hits(&self, action: &Action) -> Hits {
        let mut rules = Vec::new();
        for (b, (_, _, held)) in self.reach.iter().enumerate() {
            for (r, rule) in held.iter().enumerate() {
                if rule_matches(rule, action) {
                    rules.push((b, r));
                }
            }
        }
        // ABAC matches a non-resource request by its path alone, whatever its namespace.
        let resource = matches!(action, Action::Resource(_));
        let abac = (self.abac.iter())
            .filter(|(_, _, line)| abac::rule_allows_action(line, action.as_borrowed()))
            .map(|(i, namespace, _)| {
                (
                    *i,
                    if resource {
                        namespace.clone()
                    } else {
                        "*".into()
                    },
                )
            })
            .collect();
        Hits {
            rules,
            abac,
            protected: self.diff.protects(action.as_borrowed()),
        }
    }

    /// [`Self::hits`] narrowed to one namespace: the decision's key there.
    fn key(&self, hits: &Hits, namespace: &str) -> Key {
        let rules = (hits.rules.iter())
            .filter(|(b, _)| match &self.reach[*b] {
                (BindingKind::ClusterRoleBinding, _, _) => true,
                (BindingKind::RoleBinding, bound_in, _) => {
                    !namespace.is_empty() && bound_in == namespace
                }
            })
            .copied()
            .collect();
        let abac = (hits.abac.iter())
            .filter(|(_, line_namespace)| line_namespace == "*" || line_namespace == namespace)
            .map(|(i, _)| *i)
            .collect();
        (rules, abac, hits.protected)
    }

    /// Whether the author holds `action` in `namespace` as `written` grants it (`hits`: the
    /// action's).
    fn holds(
        &mut self,
        written: &PolicyRule,
        hits: &Hits,
        action: &Action,
        namespace: &str,
    ) -> bool {
        let key = self.key(hits, namespace);
        let decision = match self.asked.get(&key) {
            Some(decision) => *decision,
            None => {
                let cell = in_namespace(action, namespace);
                let decision = self.certain.authorize(&self.request(cell)).decision;
                self.asked.insert(key, decision);
                decision
            }
        };
        match decision {
            Decision::Allow => true,
            Decision::Deny => false,
            Decision::NoOpinion => {
                written.clauses.is_some() && {
                    let cell = in_namespace(action, namespace);
                    self.bound_rules(namespace).iter().any(|held| {
                        !held.deny && held.clauses == written.clauses && rule_matches(held, &cell)
                    })
                }
            }
        }
    }

    /// Every request the allow rules grant in the scope of `namespace` (`""`: every namespace
    /// and cluster scope) is held.
    fn covered(&mut self, rules: &[PolicyRule], namespace: &str) -> bool {
        let scopes: Vec<&str> = if namespace.is_empty() {
            policy_namespaces()
        } else {
            vec![namespace]
        };
        let universe = Arc::clone(&self.universe);
        let mut held = true;
        'rules: for rule in rules.iter().filter(|r| !r.deny) {
            // Whether a rule matches an action does not depend on its namespace.
            for action in universe.iter().filter(|action| rule_matches(rule, action)) {
                let hits = self.hits(action);
                let scopes: &[&str] = match action {
                    Action::Resource(_) => &scopes,
                    Action::NonResource(_) => &[""],
                };
                for namespace in scopes {
                    if !self.holds(rule, &hits, action, namespace) {
                        held = false;
                        break 'rules;
                    }
                }
            }
        }
        held
    }

    /// Whether the author may write `object` over the policy.
    fn may_write(&mut self, object: &PolicyObject) -> bool {
        let is_super = self.config.super_users.contains(&self.author.name)
            || self
                .config
                .super_groups
                .iter()
                .any(|g| self.author.groups.contains(g));
        if is_super {
            return true;
        }
        match object {
            PolicyObject::Role(role) => {
                if self.holds_on_role("escalate", role.kind, &role.namespace, &role.name) {
                    return true;
                }
                let everything = [
                    PolicyRule {
                        verbs: vec!["*".into()],
                        api_groups: vec!["*".into()],
                        resources: vec!["*".into()],
                        ..Default::default()
                    },
                    PolicyRule {
                        verbs: vec!["*".into()],
                        non_resource_urls: vec!["*".into()],
                        ..Default::default()
                    },
                ];
                self.covered(&role.rules, &role.namespace)
                    && (role.aggregation_rule.is_none() || self.covered(&everything, ""))
                    && self.may_lift_from_role(role)
            }
            PolicyObject::Binding(binding) => {
                let role = &binding.role_ref;
                let granted = self.holds_on_role("bind", role.kind, &binding.namespace, &role.name)
                    || match self.role_rules(role.kind, &binding.namespace, &role.name) {
                        Some(rules) => {
                            let rules = rules.to_vec();
                            self.covered(&rules, &binding.namespace)
                        }
                        None => false,
                    };
                granted && self.may_lift_from_binding(binding)
            }
            other => panic!("only roles and bindings are written here, not {other:?}"),
        }
    }

    /// Replacing a role without some of its deny rules grants what they withheld wherever
    /// the role is bound: the author holds `escalate` on it, or holds what they withheld
    /// there.
    fn may_lift_from_role(&mut self, written: &Role) -> bool {
        let Some(old) = (self.policy.roles.iter()).find(|r| {
            (r.kind, &r.namespace, &r.name) == (written.kind, &written.namespace, &written.name)
        }) else {
            return true;
        };
        let lifted: Vec<PolicyRule> = (old.rules.iter())
            .filter(|r| r.deny && !written.rules.contains(r))
            .map(|r| PolicyRule {
                deny: false,
                ..r.clone()
            })
            .collect();
        // Where the role is bound: `""` for a ClusterRoleBinding (everywhere).
        let mut scopes: Vec<String> = Vec::new();
        for binding in &self.policy.bindings {
            let role_namespace = match binding.role_ref.kind {
                RoleKind::ClusterRole => "",
                RoleKind::Role => binding.namespace.as_str(),
            };
            if (
                binding.role_ref.kind,
                binding.role_ref.name.as_str(),
                role_namespace,
            ) == (old.kind, old.name.as_str(), old.namespace.as_str())
            {
                scopes.push(binding.namespace.clone());
            }
        }
        if lifted.is_empty() || scopes.is_empty() {
            return true;
        }
        if self.holds_on_role("escalate", old.kind, &old.namespace, &old.name) {
            return true;
        }
        scopes.iter().all(|scope| self.covered(&lifted, scope))
    }

    /// Replacing a binding so that it binds some subject no more, or another role, takes its
    /// role's deny rules from them: the author holds `bind` on that role, or what they
    /// withheld in the binding's scope.
    fn may_lift_from_binding(&mut self, written: &Binding) -> bool {
        let Some(old) = (self.policy.bindings.iter())
            .find(|b| {
                (b.kind, &b.namespace, &b.name) == (written.kind, &written.namespace, &written.name)
            })
            .cloned()
        else {
            return true;
        };
        let narrowed = old.role_ref != written.role_ref
            || old.subjects.iter().any(|s| !written.subjects.contains(s));
        let role = &old.role_ref;
        let lifted: Vec<PolicyRule> = match self.role_rules(role.kind, &old.namespace, &role.name) {
            Some(rules) => (rules.iter())
                .filter(|r| r.deny)
                .map(|r| PolicyRule {
                    deny: false,
                    ..r.clone()
                })
                .collect(),
            None => Vec::new(),
        };
        !narrowed
            || lifted.is_empty()
            || self.holds_on_role("bind", role.kind, &old.namespace, &role.name)
            || self.covered(&lifted, &old.namespace)
    }
}

/// A written object: a role or a binding (which often refers to a role of the policy).
fn written() -> impl Strategy<Value = PolicyObject> {
    prop_oneof![
        role().prop_map(PolicyObject::Role),
        binding().prop_map(PolicyObject::Binding),
    ]
}

/// `random`, or — as `picks` (cycled) say, so that the check is often near its edge — a
/// caller the policy's bindings name, writing a variant of a rule of the policy (as is,
/// negations dropped, verbs or resources widened to `*`, or a privilege verb added) in the
/// namespace of one of its bindings, or a binding of an existing role there.
fn aimed(
    policy: &PolicySet,
    random: (UserInfo, PolicyObject),
    picks: &[usize],
) -> (UserInfo, PolicyObject) {
    let mut picks = picks.iter().copied().cycle();
    let mut pick = |n: usize| picks.next().unwrap_or(0) % n.max(1);
    let (mut author, mut object) = random;
    if pick(4) == 0 || policy.bindings.is_empty() {
        return (author, object);
    }
    let binding = &policy.bindings[pick(policy.bindings.len())];
    let subject = &binding.subjects[pick(binding.subjects.len())];
    match subject.kind.as_str() {
        "Group" => author.groups = vec![subject.name.clone()],
        _ => {
            if let Some(name) = subject.user_name(&binding.namespace) {
                author.name = name;
            }
        }
    }
    let namespace = if binding.namespace.is_empty() {
        ["ns1", "ns2", ""][pick(3)].to_string()
    } else {
        binding.namespace.clone()
    };
    // The rules of the author's binding's role, mostly; any role's otherwise.
    let bound = policy.roles.iter().filter(|r| {
        r.kind == binding.role_ref.kind
            && r.name == binding.role_ref.name
            && (r.kind == RoleKind::ClusterRole || r.namespace == binding.namespace)
    });
    let rules: Vec<&PolicyRule> = if pick(4) == 0 {
        policy.roles.iter().flat_map(|r| &r.rules).collect()
    } else {
        bound.flat_map(|r| &r.rules).collect()
    };
    if pick(2) == 0 && !rules.is_empty() {
        let mut rule = rules[pick(rules.len())].clone();
        rule.deny = false;
        match pick(7) {
            0 => {}
            1 => {
                rule.verbs.retain(|v| !v.starts_with('-'));
                rule.resources.retain(|r| !r.starts_with('-'));
            }
            2 => rule.verbs.retain(|v| !v.starts_with('-')),
            3 => rule.resources.retain(|r| !r.starts_with('-')),
            4 => rule.verbs = vec!["*".to_string()],
            5 => rule.resources = vec!["*".to_string()],
            _ => rule.verbs.push("bind".to_string()),
        }
        object = PolicyObject::Role(Role {
            kind: if namespace.is_empty() {
                RoleKind::ClusterRole
            } else {
                RoleKind::Role
            },
            namespace,
            name: "written".to_string(),
            labels: Default::default(),
            rules: vec![rule],
            aggregation_rule: None,
            source: Default::default(),
        });
    } else if !policy.roles.is_empty() {
        let role = &policy.roles[pick(policy.roles.len())];
        let mut written = (**binding).clone();
        written.name = "written".to_string();
        written.role_ref.kind = role.kind;
        written.role_ref.name = role.name.clone();
        if role.kind == RoleKind::Role {
            written.kind = BindingKind::RoleBinding;
            written.namespace = role.namespace.clone();
        } else if namespace.is_empty() {
            written.kind = BindingKind::ClusterRoleBinding;
            written.namespace = String::new();
        } else {
            written.kind = BindingKind::RoleBinding;
            written.namespace = namespace;
        }
        object = PolicyObject::Binding(written);
    }
    (author, object)
}

proptest! {
    #![proptest_config(crate::support::cases::config(3000))]

    #[test]
    fn the_check_passes_exactly_what_the_author_holds(
        policy in policy(),
        config in config(),
        author in user(),
        object in written(),
        picks in proptest::collection::vec(0usize..64, 8),
    ) {
        let mut policy = policy;
        policy.canonicalize();
        let (author, object) = aimed(&policy, (author, object), &picks);
        let engine = Engine::new(&policy, config.clone());
        let verdict = EscalationCheck { engine: &engine, caller: &author }
            .check(&policy, std::slice::from_ref(&object));
        let mut oracle = Oracle::new(&policy, &config, &author);
        let expected = oracle.may_write(&object);
        prop_assert_eq!(
            verdict.is_ok(),
            expected,
            "check said {:?} for {:?} writing {:?}",
            verdict,
            author,
            object
        );
    }
}
