//! Wording of explanations, shared by the compiled engine and the reference evaluator so that
//! both produce byte-identical reasons (upstream's formats where upstream defines one).

use std::sync::Arc;

use crate::engine::{Mode, RuleRef};
use crate::policy::describe::{binding_id, role_id};
use crate::policy::model::{AbacRule, Binding};

/// The authorizers an explanation names (`RuleRef::authorizer`): the chain's, by the names
/// [`Mode::as_str`] gives them, and the super-users, who bypass the chain.
pub const RBAC: &str = Mode::Rbac.as_str();
pub const ABAC: &str = Mode::Abac.as_str();
pub const ALWAYS_ALLOW: &str = Mode::AlwaysAllow.as_str();
pub const SUPER_USER: &str = "SuperUser";
pub const WEBHOOK: &str = Mode::Webhook(0).as_str();

/// The name an explanation gives the authorizer called `name`, if there is one.
pub fn authorizer_named(name: &str) -> Option<&'static str> {
    match Mode::named(name) {
        Some(mode) => Some(mode.as_str()),
        None => (name == SUPER_USER).then_some(SUPER_USER),
    }
}

/// Upstream ABAC's NoOpinion reason.
pub const ABAC_NO_MATCH: &str = "No policy matched.";

pub fn rbac_rule_ref(binding: &Binding, rule_index: usize) -> RuleRef {
    RuleRef {
        authorizer: RBAC,
        binding: binding_id(binding).into(),
        role: role_id(binding).into(),
        rule_index: u32::try_from(rule_index).unwrap_or(u32::MAX),
        source: binding.source.to_string().into(),
    }
}

pub fn abac_rule_ref(rule: &AbacRule, index: usize) -> RuleRef {
    RuleRef {
        authorizer: ABAC,
        binding: Arc::from(""),
        role: Arc::from(""),
        rule_index: u32::try_from(index).unwrap_or(u32::MAX),
        source: rule.source.to_string().into(),
    }
}

pub fn abac_reason(rule: &AbacRule) -> String {
    format!("ABAC: allowed by policy line {}", rule.source)
}

pub fn simple_rule_ref(authorizer: &'static str, what: &str) -> RuleRef {
    RuleRef {
        authorizer,
        binding: Arc::from(""),
        role: Arc::from(""),
        rule_index: 0,
        source: Arc::from(what),
    }
}

pub fn super_user_reason(user: &str) -> String {
    format!("allowed as super-user {user:?}")
}

pub fn super_group_reason(group: &str) -> String {
    format!("allowed as member of super-group {group:?}")
}
