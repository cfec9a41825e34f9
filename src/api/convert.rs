//! Wire <-> engine conversion, with validation. Every problem becomes an
//! [`ApiError::InvalidArgument`] naming the field path; nothing here decides anything.
//!
//! Field paths are relative to the message being converted (a batch prefixes them with
//! `requests[i].` through [`ApiError::within`]) and are only formatted on the error path, so
//! valid requests allocate nothing extra.

use std::collections::{BTreeMap, HashMap};

use crate::api::error::{ApiError, Invalid, Result};
use crate::api::limits::{
    MAX_EXTRA_KEYS, MAX_EXTRA_VALUES, MAX_GROUPS, MAX_PATH_BYTES, MAX_STRING_BYTES,
};
use crate::engine::{AllowedSubjects, Decided, Decision, Response, RuleRef};
use crate::proto;
use crate::request;

/// Where a field lives: `{scope}{field}`, e.g. `user.` + `groups`. Formatted only when an
/// error is reported.
#[derive(Clone, Copy)]
struct At<'a> {
    scope: &'a str,
}

impl At<'_> {
    fn field(self, field: &str) -> String {
        format!("{}{field}", self.scope)
    }

    fn invalid(self, field: &str, problem: Invalid) -> ApiError {
        ApiError::invalid(self.field(field), problem)
    }

    fn check_len(self, field: &str, value: &str, max: usize) -> Result<()> {
        if value.len() > max {
            return Err(self.invalid(
                field,
                Invalid::TooLong {
                    len: value.len(),
                    max,
                },
            ));
        }
        Ok(())
    }

    fn check_non_empty(self, field: &str, value: &str) -> Result<()> {
        if value.is_empty() {
            return Err(self.invalid(field, Invalid::Empty));
        }
        Ok(())
    }

    fn check_count(self, field: &str, count: usize, max: usize) -> Result<()> {
        if count > max {
            return Err(self.invalid(field, Invalid::TooMany { count, max }));
        }
        Ok(())
    }
}

/// The subject fields as they appear on the wire: nested in `user` (Authorize) or flat on a
/// review (`user`, `groups`, `uid`, `extra`).
pub struct WireSubject {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: HashMap<String, proto::ExtraValues>,
}

impl From<proto::UserInfo> for WireSubject {
    fn from(user: proto::UserInfo) -> Self {
        Self {
            name: user.name,
            uid: user.uid,
            groups: user.groups,
            extra: user.extra,
        }
    }
}

/// Validates a subject. `scope` is `"user."` when the subject is nested (Authorize) and `""`
/// on a review; `name_field` is what the user name is called there (`name` or `user`). A subject must name a user or at least one group: an
/// authorization question about nobody is a client bug.
pub fn subject(scope: &str, name_field: &str, wire: WireSubject) -> Result<request::UserInfo> {
    check_identity(
        scope,
        name_field,
        &wire.name,
        &wire.uid,
        &wire.groups,
        wire.groups.len(),
    )?;
    let at = At { scope };
    at.check_count("extra", wire.extra.len(), MAX_EXTRA_KEYS)?;
    let mut extra = BTreeMap::new();
    // In key order, so that of several bad entries the same one is reported every time (a
    // `HashMap`'s order differs from one decode to the next).
    let mut entries: Vec<_> = wire.extra.into_iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    for (key, values) in entries {
        if key.len() > MAX_STRING_BYTES {
            return Err(at.invalid(
                "extra",
                Invalid::KeyTooLong {
                    len: key.len(),
                    max: MAX_STRING_BYTES,
                },
            ));
        }
        let field = || format!("extra[{key:?}]");
        if values.values.len() > MAX_EXTRA_VALUES {
            at.check_count(&field(), values.values.len(), MAX_EXTRA_VALUES)?;
        }
        for (i, value) in values.values.iter().enumerate() {
            if value.len() > MAX_STRING_BYTES {
                at.check_len(&format!("{}[{i}]", field()), value, MAX_STRING_BYTES)?;
            }
        }
        extra.insert(key, values.values);
    }
    Ok(request::UserInfo {
        name: wire.name,
        uid: wire.uid,
        groups: wire.groups,
        extra,
    })
}

/// Validates a subject's name, UID and groups (everything but `extra`), wherever they are
/// borrowed from. `group_count` is how many groups the request named: a reader may keep fewer
/// than that once there are too many.
pub fn check_identity(
    scope: &str,
    name_field: &str,
    name: &str,
    uid: &str,
    groups: &[impl AsRef<str>],
    group_count: usize,
) -> Result<()> {
    let at = At { scope };
    at.check_len(name_field, name, MAX_STRING_BYTES)?;
    at.check_len("uid", uid, MAX_STRING_BYTES)?;
    at.check_count("groups", group_count, MAX_GROUPS)?;
    for (i, group) in groups.iter().enumerate() {
        let group = group.as_ref();
        if group.len() > MAX_STRING_BYTES {
            at.check_len(&format!("groups[{i}]"), group, MAX_STRING_BYTES)?;
        }
    }
    if name.is_empty() && groups.is_empty() {
        return Err(at.invalid(name_field, Invalid::NoSubject));
    }
    Ok(())
}

/// Validates the subject of a (local) SubjectAccessReview: flat `user`, `uid`, `groups`,
/// `extra` fields.
pub fn review_subject(
    user: String,
    uid: String,
    groups: Vec<String>,
    extra: HashMap<String, proto::ExtraValues>,
) -> Result<request::UserInfo> {
    subject(
        "",
        "user",
        WireSubject {
            name: user,
            uid,
            groups,
            extra,
        },
    )
}

/// Validates an action (field `action`).
pub fn action(action: Option<proto::Action>) -> Result<request::Action> {
    use proto::action::Kind;
    match action.and_then(|a| a.kind) {
        None => Err(ApiError::invalid("action", Invalid::MissingAction)),
        Some(Kind::ResourceAttributes(r)) => {
            let attributes = request::ResourceAttributes {
                namespace: r.namespace,
                verb: r.verb,
                group: r.group,
                version: r.version,
                resource: r.resource,
                subresource: r.subresource,
                name: r.name,
            };
            let action = request::Action::Resource(attributes);
            check_action(action.as_borrowed())?;
            Ok(action)
        }
        Some(Kind::NonResourceAttributes(n)) => {
            let action = request::Action::NonResource(request::NonResourceAttributes {
                path: n.path,
                verb: n.verb,
            });
            check_action(action.as_borrowed())?;
            Ok(action)
        }
    }
}

/// Validates the attributes of an action (field `action`), wherever they are borrowed from.
pub fn check_action(action: request::ActionRef<'_>) -> Result<()> {
    match action {
        request::ActionRef::Resource(r) => {
            let at = At {
                scope: "action.resource_attributes.",
            };
            at.check_len("verb", r.verb, MAX_STRING_BYTES)?;
            at.check_non_empty("verb", r.verb)?;
            for (field, value) in [
                ("namespace", r.namespace),
                ("group", r.group),
                ("version", r.version),
                ("resource", r.resource),
                ("subresource", r.subresource),
                ("name", r.name),
            ] {
                at.check_len(field, value, MAX_STRING_BYTES)?;
            }
        }
        request::ActionRef::NonResource { path, verb } => {
            let at = At {
                scope: "action.non_resource_attributes.",
            };
            at.check_len("verb", verb, MAX_STRING_BYTES)?;
            at.check_non_empty("verb", verb)?;
            at.check_len("path", path, MAX_PATH_BYTES)?;
            at.check_non_empty("path", path)?;
        }
    }
    Ok(())
}

/// Validates the action of a local review against the review's namespace (upstream's
/// LocalSubjectAccessReview rules): the namespace is required, an empty attribute namespace
/// takes the review's, a different one is an error, and non-resource actions are refused.
pub fn local_action(namespace: &str, wire: Option<proto::Action>) -> Result<request::Action> {
    let top = At { scope: "" };
    top.check_len("namespace", namespace, MAX_STRING_BYTES)?;
    top.check_non_empty("namespace", namespace)?;
    match action(wire)? {
        request::Action::NonResource(_) => Err(top.invalid(
            "action.non_resource_attributes",
            Invalid::NonResourceInLocalReview,
        )),
        request::Action::Resource(mut r) => {
            if r.namespace.is_empty() {
                r.namespace = namespace.to_string();
            } else if r.namespace != namespace {
                return Err(top.invalid(
                    "action.resource_attributes.namespace",
                    Invalid::NamespaceMismatch {
                        got: r.namespace,
                        want: namespace.to_string(),
                    },
                ));
            }
            Ok(request::Action::Resource(r))
        }
    }
}

/// Validates one `AuthorizeRequest`.
pub fn authorize_request(wire: proto::AuthorizeRequest) -> Result<request::Request> {
    let Some(user) = wire.user else {
        return Err(ApiError::invalid("user", Invalid::NoSubject));
    };
    Ok(request::Request {
        user: subject("user.", "name", user.into())?,
        action: action(wire.action)?,
    })
}

pub fn decision(decision: Decision) -> proto::Decision {
    match decision {
        Decision::Allow => proto::Decision::Allow,
        Decision::Deny => proto::Decision::Deny,
        Decision::NoOpinion => proto::Decision::NoOpinion,
    }
}

fn rule_refs(refs: &[RuleRef]) -> Vec<proto::RuleRef> {
    refs.iter()
        .map(|r| proto::RuleRef {
            authorizer: r.authorizer.to_string(),
            binding: r.binding.to_string(),
            role: r.role.to_string(),
            rule_index: r.rule_index,
            source: r.source.to_string(),
        })
        .collect()
}

pub fn authorize_response(decided: &Decided, revision: u64) -> proto::AuthorizeResponse {
    let response = &decided.response;
    proto::AuthorizeResponse {
        decision: decision(response.decision) as i32,
        allowed: response.allowed(),
        denied: response.denied(),
        reason: response.reason.clone(),
        evaluation_error: response.evaluation_error(),
        allowed_by: rule_refs(&response.allowed_by),
        denied_by: rule_refs(&response.denied_by),
        revision,
        cached: decided.cached,
    }
}

/// `namespace` is the namespace the review was evaluated in (the action's).
pub fn review_response(
    response: &Response,
    namespace: &str,
    revision: u64,
) -> proto::SubjectAccessReviewResponse {
    proto::SubjectAccessReviewResponse {
        allowed: response.allowed(),
        denied: response.denied(),
        reason: response.reason.clone(),
        evaluation_error: response.evaluation_error(),
        namespace: namespace.to_string(),
        decision: decision(response.decision) as i32,
        revision,
    }
}

pub fn allowed_subjects_response(
    subjects: AllowedSubjects,
    revision: u64,
) -> proto::GetAllowedSubjectsResponse {
    proto::GetAllowedSubjectsResponse {
        evaluation_error: subjects.evaluation_error(),
        users: subjects.users,
        groups: subjects.groups,
        denied_users: subjects.denied_users,
        denied_groups: subjects.denied_groups,
        revision,
    }
}

pub fn resource_review_response(
    subjects: AllowedSubjects,
    namespace: &str,
    revision: u64,
) -> proto::ResourceAccessReviewResponse {
    proto::ResourceAccessReviewResponse {
        namespace: namespace.to_string(),
        evaluation_error: subjects.evaluation_error(),
        users: subjects.users,
        groups: subjects.groups,
        denied_users: subjects.denied_users,
        denied_groups: subjects.denied_groups,
        revision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::action::Kind;

    fn resource(namespace: &str, verb: &str) -> Option<proto::Action> {
        Some(proto::Action {
            kind: Some(Kind::ResourceAttributes(proto::ResourceAttributes {
                namespace: namespace.into(),
                verb: verb.into(),
                resource: "pods".into(),
                ..Default::default()
            })),
        })
    }

    fn field_of(error: ApiError) -> String {
        match error {
            ApiError::InvalidArgument { field, .. } => field,
            other => panic!("not an invalid argument: {other}"),
        }
    }

    #[test]
    fn missing_action_names_the_field() {
        let e = action(None).unwrap_err().within("requests[2].");
        assert_eq!(
            e.to_string(),
            "requests[2].action: must set resource_attributes or non_resource_attributes"
        );
    }

    #[test]
    fn empty_verb_names_the_field() {
        let e = action(resource("", "")).unwrap_err();
        assert_eq!(field_of(e), "action.resource_attributes.verb");
    }

    #[test]
    fn long_fields_are_refused() {
        let mut wire = resource("", "get");
        if let Some(proto::Action {
            kind: Some(Kind::ResourceAttributes(r)),
        }) = wire.as_mut()
        {
            r.name = "x".repeat(MAX_STRING_BYTES + 1);
        }
        let e = action(wire).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "action.resource_attributes.name: is {} bytes long; the limit is {MAX_STRING_BYTES}",
                MAX_STRING_BYTES + 1
            )
        );
        // Exactly at the limit is fine.
        let mut wire = resource("", "get");
        if let Some(proto::Action {
            kind: Some(Kind::ResourceAttributes(r)),
        }) = wire.as_mut()
        {
            r.name = "x".repeat(MAX_STRING_BYTES);
        }
        assert!(action(wire).is_ok());
    }

    #[test]
    fn subjects_need_a_user_or_group_and_bounded_lists() {
        let nobody = WireSubject {
            name: String::new(),
            uid: String::new(),
            groups: vec![],
            extra: HashMap::new(),
        };
        assert_eq!(field_of(subject("", "user", nobody).unwrap_err()), "user");

        let many = WireSubject {
            name: "alice".into(),
            uid: String::new(),
            groups: vec!["g".into(); MAX_GROUPS + 1],
            extra: HashMap::new(),
        };
        assert_eq!(
            field_of(subject("user.", "name", many).unwrap_err()),
            "user.groups"
        );

        let long_group = WireSubject {
            name: "alice".into(),
            uid: String::new(),
            groups: vec!["ok".into(), "g".repeat(MAX_STRING_BYTES + 1)],
            extra: HashMap::new(),
        };
        assert_eq!(
            field_of(subject("", "user", long_group).unwrap_err()),
            "groups[1]"
        );

        let mut extra = HashMap::new();
        extra.insert(
            "scopes".to_string(),
            proto::ExtraValues {
                values: vec!["v".into(); MAX_EXTRA_VALUES + 1],
            },
        );
        let wide_extra = WireSubject {
            name: "alice".into(),
            uid: String::new(),
            groups: vec![],
            extra,
        };
        assert_eq!(
            field_of(subject("", "user", wide_extra).unwrap_err()),
            "extra[\"scopes\"]"
        );
    }

    #[test]
    fn local_reviews_fill_or_reject_the_namespace() {
        let filled = local_action("dev", resource("", "get")).unwrap();
        assert_eq!(filled.namespace(), "dev");
        assert!(local_action("dev", resource("dev", "get")).is_ok());

        let e = local_action("dev", resource("prod", "get")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "action.resource_attributes.namespace: `prod` does not match the review's namespace `dev`"
        );
        assert_eq!(
            field_of(local_action("", resource("", "get")).unwrap_err()),
            "namespace"
        );
        let non_resource = Some(proto::Action {
            kind: Some(Kind::NonResourceAttributes(proto::NonResourceAttributes {
                path: "/healthz".into(),
                verb: "get".into(),
            })),
        });
        assert_eq!(
            field_of(local_action("dev", non_resource).unwrap_err()),
            "action.non_resource_attributes"
        );
    }

    #[test]
    fn authorize_request_requires_a_user() {
        let e = authorize_request(proto::AuthorizeRequest {
            user: None,
            action: resource("", "get"),
            min_revision: 0,
        })
        .unwrap_err();
        assert_eq!(field_of(e), "user");
    }
}
