//! ABAC matching, exactly as upstream `pkg/auth/authorizer/abac/abac.go`, over lines already
//! converted to the internal (v1beta1) shape by the loader.

use crate::policy::model::AbacRule;
use crate::request::{ActionRef, Groups, RequestRef};

/// `subjectMatches`: a set user must equal the name (or be `*`), a set group must be one of the
/// user's groups (or `*`); both must hold when both are set; neither set matches nobody.
pub fn subject_matches(rule: &AbacRule, user: &str, groups: Groups<'_>) -> bool {
    let user_set = !rule.user.is_empty();
    let group_set = !rule.group.is_empty();
    if !user_set && !group_set {
        return false;
    }
    let user_ok = !user_set || rule.user == "*" || rule.user == user;
    let group_ok = !group_set || rule.group == "*" || groups.contains(&rule.group);
    user_ok && group_ok
}

/// `verbMatches`: read-only requests always pass; otherwise the line must not be `readonly`.
pub fn verb_matches(rule: &AbacRule, action: ActionRef<'_>) -> bool {
    action.is_read_only() || !rule.readonly
}

/// `resourceMatches` for resource requests, `nonResourceMatches` otherwise.
pub fn action_matches(rule: &AbacRule, action: ActionRef<'_>) -> bool {
    match action {
        ActionRef::Resource(r) => {
            (rule.namespace == "*" || rule.namespace == r.namespace)
                && (rule.resource == "*" || rule.resource == r.resource)
                && (rule.api_group == "*" || rule.api_group == r.group)
        }
        ActionRef::NonResource { path, .. } => {
            non_resource_path_matches(&rule.non_resource_path, path)
        }
    }
}

/// `*`, exact, or trailing-`*` prefix with every trailing `*` removed.
pub fn non_resource_path_matches(pattern: &str, path: &str) -> bool {
    if pattern == "*" || pattern == path {
        return true;
    }
    pattern.ends_with('*') && path.starts_with(pattern.trim_end_matches('*'))
}

/// Whether the line allows the request, ignoring its subject (used by who-can).
pub fn rule_allows_action(rule: &AbacRule, action: ActionRef<'_>) -> bool {
    verb_matches(rule, action) && action_matches(rule, action)
}

/// Whether the line allows the request.
pub fn rule_allows(rule: &AbacRule, request: RequestRef<'_>) -> bool {
    subject_matches(rule, request.user.name, request.user.groups)
        && rule_allows_action(rule, request.action)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_paths() {
        assert!(non_resource_path_matches("/root/*", "/root/"));
        assert!(non_resource_path_matches("/root/*", "/root/a/b"));
        assert!(!non_resource_path_matches("/root/*", "/root"));
        assert!(!non_resource_path_matches("", "/x"));
        assert!(non_resource_path_matches("", ""));
    }

    #[test]
    fn subjects() {
        let r = AbacRule {
            user: "alice".into(),
            ..Default::default()
        };
        assert!(subject_matches(&r, "alice", Groups::NONE));
        assert!(!subject_matches(&r, "Alice", Groups::NONE));
        assert!(!subject_matches(
            &AbacRule::default(),
            "alice",
            Groups::NONE
        ));
        let both = AbacRule {
            user: "alice".into(),
            group: "dev".into(),
            ..Default::default()
        };
        assert!(!subject_matches(&both, "alice", Groups::NONE));
        assert!(subject_matches(&both, "alice", Groups::Borrowed(&["dev"])));
    }
}
