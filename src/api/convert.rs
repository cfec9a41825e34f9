//! Wire <-> engine conversion, with validation. Every problem becomes an
//! [`ApiError::InvalidArgument`] naming the field path; nothing here decides anything.
//!
//! Field paths are relative to the message being converted (a batch prefixes them with
//! `requests[i].` through [`ApiError::within`]) and are only formatted on the error path, so
//! valid requests allocate nothing extra.

use std::collections::{BTreeMap, HashMap};

use crate::api::error::{ApiError, Invalid, Result};
use crate::api::limits::{
    ContentLimits, MAX_CHANGED_PATHS, MAX_CHANGED_PATH_BYTES, MAX_EXTRA_KEYS, MAX_EXTRA_VALUES,
    MAX_GROUPS, MAX_PATH_BYTES, MAX_RAW_SELECTOR_BYTES, MAX_SELECTOR_REQUIREMENTS,
    MAX_SELECTOR_STRING_BYTES, MAX_SELECTOR_VALUES, MAX_STRING_BYTES,
};
use crate::engine::conditional::{ReturnedRule, CEL, CLAUSES_JSON};
use crate::engine::rules::{ReviewedRule, SubjectRules};
use crate::engine::{AllowedSubjects, Decided, Decision, Response, RuleRef};
use crate::policy::content::condition::Condition;
use crate::proto;
use crate::request;
use crate::request::selector;

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

/// Validates an action (field `action`) and what the request carries with it: `content` and
/// the action's KEP-4601 field and label selectors, bounded by `limits`. The content is `None`
/// when the request carries none of them, so a plain request reaches the engine as before.
pub fn action(
    wire: Option<proto::Action>,
    content: Option<proto::Content>,
    limits: &ContentLimits,
) -> Result<(request::Action, Option<request::Content>)> {
    use proto::action::Kind;
    let (action, field_selector, label_selector) = match wire.and_then(|a| a.kind) {
        None => return Err(ApiError::invalid("action", Invalid::MissingAction)),
        Some(Kind::ResourceAttributes(r)) => {
            // Every field named: one added to the proto does not compile until it is handled.
            let proto::ResourceAttributes {
                namespace,
                verb,
                group,
                version,
                resource,
                subresource,
                name,
                field_selector,
                label_selector,
            } = r;
            let attributes = request::ResourceAttributes {
                namespace,
                verb,
                group,
                version,
                resource,
                subresource,
                name,
            };
            (
                request::Action::Resource(attributes),
                field_selector,
                label_selector,
            )
        }
        Some(Kind::NonResourceAttributes(n)) => {
            let action = request::Action::NonResource(request::NonResourceAttributes {
                path: n.path,
                verb: n.verb,
            });
            (action, None, None)
        }
    };
    check_action(action.as_borrowed())?;
    let content = request_content(content, field_selector, label_selector, limits)?;
    Ok((action, content))
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

/// Validates a rules review's namespace (field `namespace`): bounded; empty asks about
/// cluster-scoped requests only.
pub fn rules_namespace(namespace: String) -> Result<String> {
    At { scope: "" }.check_len("namespace", &namespace, MAX_STRING_BYTES)?;
    Ok(namespace)
}

/// Validates the action of a local review against the review's namespace (upstream's
/// LocalSubjectAccessReview rules): the namespace is required, an empty attribute namespace
/// takes the review's, a different one is an error, and non-resource actions are refused. The
/// content is validated as [`action`]'s.
pub fn local_action(
    namespace: &str,
    wire: Option<proto::Action>,
    content: Option<proto::Content>,
    limits: &ContentLimits,
) -> Result<(request::Action, Option<request::Content>)> {
    let top = At { scope: "" };
    top.check_len("namespace", namespace, MAX_STRING_BYTES)?;
    top.check_non_empty("namespace", namespace)?;
    match action(wire, content, limits)? {
        (request::Action::NonResource(_), _) => Err(top.invalid(
            "action.non_resource_attributes",
            Invalid::NonResourceInLocalReview,
        )),
        (request::Action::Resource(mut r), content) => {
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
            Ok((request::Action::Resource(r), content))
        }
    }
}

/// Validates one `AuthorizeRequest`: the engine's request and the content it carries.
pub fn authorize_request(
    wire: proto::AuthorizeRequest,
    limits: &ContentLimits,
) -> Result<(request::Request, Option<request::Content>)> {
    let proto::AuthorizeRequest {
        user,
        action: wire_action,
        min_revision: _,
        content,
        // Read by the handler, which decides how the answer is given.
        conditions_mode: _,
    } = wire;
    let Some(user) = user else {
        return Err(ApiError::invalid("user", Invalid::NoSubject));
    };
    let user = subject("user.", "name", user.into())?;
    let (action, content) = action(wire_action, content, limits)?;
    Ok((request::Request { user, action }, content))
}

/// The request's content and selectors as the engine reads them; `None` when it carries
/// neither. Objects are bounded in size and kept as the caller's bytes: they are decoded by
/// the engine, and only when a rule reads them.
fn request_content(
    wire: Option<proto::Content>,
    field_selector: Option<proto::FieldSelectorAttributes>,
    label_selector: Option<proto::LabelSelectorAttributes>,
    limits: &ContentLimits,
) -> Result<Option<request::Content>> {
    let field_selector = match field_selector {
        Some(s) => Selector::Field.requirements(&s.raw_selector, s.requirements)?,
        None => Vec::new(),
    };
    let label_selector = match label_selector {
        Some(s) => Selector::Label.requirements(&s.raw_selector, s.requirements)?,
        None => Vec::new(),
    };
    let proto::Content {
        object,
        old_object,
        changed_paths,
    } = wire.unwrap_or_default();
    let at = At { scope: "content." };
    for (field, bytes) in [("object", &object), ("old_object", &old_object)] {
        if bytes.len() > limits.max_object_bytes {
            return Err(at.invalid(
                field,
                Invalid::TooLong {
                    len: bytes.len(),
                    max: limits.max_object_bytes,
                },
            ));
        }
    }
    if !changed_paths.is_empty() {
        if !object.is_empty() || !old_object.is_empty() {
            return Err(at.invalid(
                "changed_paths",
                Invalid::Exclusive {
                    other: "object or old_object",
                },
            ));
        }
        at.check_count("changed_paths", changed_paths.len(), MAX_CHANGED_PATHS)?;
        for (i, path) in changed_paths.iter().enumerate() {
            if path.len() > MAX_CHANGED_PATH_BYTES {
                at.check_len(&format!("changed_paths[{i}]"), path, MAX_CHANGED_PATH_BYTES)?;
            }
        }
    }
    if object.is_empty()
        && old_object.is_empty()
        && changed_paths.is_empty()
        && field_selector.is_empty()
        && label_selector.is_empty()
    {
        return Ok(None);
    }
    // proto3 bytes: empty is absent. (Field by field: the decoded cache is private to it.)
    let present = |bytes: Vec<u8>| (!bytes.is_empty()).then_some(bytes);
    let mut content = request::Content::default();
    content.object = present(object);
    content.old_object = present(old_object);
    content.changed_paths = changed_paths;
    content.field_selector = field_selector;
    content.label_selector = label_selector;
    Ok(Some(content))
}

/// The two KEP-4601 selectors of resource attributes, which differ only in their raw syntax.
#[derive(Clone, Copy)]
enum Selector {
    Field,
    Label,
}

impl Selector {
    /// The field's path, and its fields' scope.
    fn path(self) -> (&'static str, At<'static>) {
        match self {
            Selector::Field => (
                "action.resource_attributes.field_selector",
                At {
                    scope: "action.resource_attributes.field_selector.",
                },
            ),
            Selector::Label => (
                "action.resource_attributes.label_selector",
                At {
                    scope: "action.resource_attributes.label_selector.",
                },
            ),
        }
    }

    fn parse(self, raw: &str) -> std::result::Result<Vec<request::SelectorRequirement>, String> {
        match self {
            Selector::Field => selector::parse_field_selector(raw),
            Selector::Label => selector::parse_label_selector(raw),
        }
    }

    /// The selector's requirements: parsed from `raw`, or `requirements` checked; never both
    /// and never neither (KEP-4601's validation, which answers 400 to either).
    fn requirements(
        self,
        raw: &str,
        requirements: Vec<proto::SelectorRequirement>,
    ) -> Result<Vec<request::SelectorRequirement>> {
        let (path, at) = self.path();
        match (raw.is_empty(), requirements.is_empty()) {
            (false, false) => Err(at.invalid(
                "raw_selector",
                Invalid::Exclusive {
                    other: "requirements",
                },
            )),
            (true, true) => Err(ApiError::invalid(path, Invalid::EmptySelector)),
            (false, true) => {
                at.check_len("raw_selector", raw, MAX_RAW_SELECTOR_BYTES)?;
                let parsed = self
                    .parse(raw)
                    .map_err(|problem| at.invalid("raw_selector", Invalid::Selector(problem)))?;
                if parsed.len() > MAX_SELECTOR_REQUIREMENTS {
                    return Err(at.invalid(
                        "raw_selector",
                        Invalid::Other(format!(
                            "has {} requirements; the limit is {MAX_SELECTOR_REQUIREMENTS}",
                            parsed.len()
                        )),
                    ));
                }
                for (i, r) in parsed.iter().enumerate() {
                    check_requirement(&r.key, r.operator, &r.values).map_err(
                        |(field, problem)| {
                            at.invalid(
                                "raw_selector",
                                Invalid::Other(format!("requirement {i}: {field} {problem}")),
                            )
                        },
                    )?;
                }
                Ok(parsed)
            }
            (true, false) => {
                at.check_count(
                    "requirements",
                    requirements.len(),
                    MAX_SELECTOR_REQUIREMENTS,
                )?;
                let mut checked = Vec::with_capacity(requirements.len());
                for (i, r) in requirements.into_iter().enumerate() {
                    let proto::SelectorRequirement {
                        key,
                        operator,
                        values,
                    } = r;
                    let field = |name: &str| format!("requirements[{i}].{name}");
                    let Some(operator) = request::SelectorOperator::parse(&operator) else {
                        return Err(
                            at.invalid(&field("operator"), Invalid::UnknownOperator(operator))
                        );
                    };
                    check_requirement(&key, operator, &values)
                        .map_err(|(name, problem)| at.invalid(&field(&name), problem))?;
                    checked.push(request::SelectorRequirement {
                        key,
                        operator,
                        values,
                    });
                }
                Ok(checked)
            }
        }
    }
}

/// One selector requirement's key and values against its operator and the bounds; the error
/// names the requirement's field (`key`, `values`, `values[2]`).
fn check_requirement(
    key: &str,
    operator: request::SelectorOperator,
    values: &[String],
) -> std::result::Result<(), (String, Invalid)> {
    use request::SelectorOperator::{DoesNotExist, Exists, In, NotIn};
    let too_long = |len| Invalid::TooLong {
        len,
        max: MAX_SELECTOR_STRING_BYTES,
    };
    if key.is_empty() {
        return Err(("key".into(), Invalid::Empty));
    }
    if key.len() > MAX_SELECTOR_STRING_BYTES {
        return Err(("key".into(), too_long(key.len())));
    }
    match operator {
        In | NotIn if values.is_empty() => {
            let operator = operator.as_str();
            return Err(("values".into(), Invalid::ValuesRequired { operator }));
        }
        Exists | DoesNotExist if !values.is_empty() => {
            let operator = operator.as_str();
            return Err(("values".into(), Invalid::ValuesForbidden { operator }));
        }
        _ => {}
    }
    if values.len() > MAX_SELECTOR_VALUES {
        let count = values.len();
        let max = MAX_SELECTOR_VALUES;
        return Err(("values".into(), Invalid::TooMany { count, max }));
    }
    match values
        .iter()
        .position(|v| v.len() > MAX_SELECTOR_STRING_BYTES)
    {
        Some(j) => Err((format!("values[{j}]"), too_long(values[j].len()))),
        None => Ok(()),
    }
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
        conditions: Vec::new(),
        cacheable: decided.cacheable,
    }
}

/// A DECISION_CONDITIONAL answer: the rules it depends on, in precedence order.
pub fn conditional_response(
    conditions: &[ReturnedRule],
    revision: u64,
    cached: bool,
) -> proto::AuthorizeResponse {
    proto::AuthorizeResponse {
        decision: proto::Decision::Conditional as i32,
        allowed: false,
        denied: false,
        reason: conditional_reason(conditions.len()),
        evaluation_error: String::new(),
        allowed_by: Vec::new(),
        denied_by: Vec::new(),
        revision,
        cached,
        conditions: conditions.iter().map(condition).collect(),
        cacheable: false,
    }
}

/// The reason of a conditional answer (Authorize's and SubjectAccessReview's alike).
pub fn conditional_reason(conditions: usize) -> String {
    format!("conditional: decided by {conditions} rule(s) over content the request did not carry")
}

pub fn condition(rule: &ReturnedRule) -> proto::Condition {
    let (language, expression) = rule.expression();
    let effect = if rule.deny {
        proto::RuleEffect::Deny
    } else {
        proto::RuleEffect::Allow
    };
    proto::Condition {
        effect: effect as i32,
        rule: rule_refs(std::slice::from_ref(&rule.rule_ref)).pop(),
        language: language.to_string(),
        expression,
        cluster: rule.cluster,
        reason: rule.reason.clone(),
        otherwise: rule.otherwise,
    }
}

/// A condition as a caller sends it back to EvaluateConditions; `Err` names the field.
pub fn returned_rule(wire: proto::Condition, at: &str) -> Result<ReturnedRule> {
    let invalid = |field: &str, problem: String| {
        ApiError::invalid(format!("{at}.{field}"), Invalid::Other(problem))
    };
    let deny = match proto::RuleEffect::try_from(wire.effect) {
        Ok(proto::RuleEffect::Allow) => false,
        Ok(proto::RuleEffect::Deny) => true,
        _ => return Err(invalid("effect", "must be ALLOW or DENY".into())),
    };
    let rule = wire.rule.unwrap_or_default();
    let authorizer =
        crate::engine::explain::authorizer_named(&rule.authorizer).ok_or_else(|| {
            invalid(
                "rule.authorizer",
                format!("`{}` is not an authorizer", rule.authorizer),
            )
        })?;
    let rule_ref = RuleRef {
        authorizer,
        binding: rule.binding.into(),
        role: rule.role.into(),
        rule_index: rule.rule_index,
        source: rule.source.into(),
    };
    let (clauses, protected) = match wire.language.as_str() {
        CEL if wire.expression.trim() == "true" => (None, false),
        CEL => {
            let condition = Condition::compile(&wire.expression)
                .map_err(|problem| invalid("expression", problem))?;
            let clauses = crate::policy::content::Clauses {
                condition: Some(condition),
                ..Default::default()
            };
            (Some(std::sync::Arc::new(clauses)), false)
        }
        CLAUSES_JSON => {
            // `protectedPaths` is informative; the rest are the rule's clauses.
            let mut value: serde_json::Value = serde_json::from_str(&wire.expression)
                .map_err(|e| invalid("expression", format!("is not JSON: {e}")))?;
            let protected = value
                .as_object_mut()
                .and_then(|o| o.remove("protectedPaths"))
                .is_some();
            let clauses = crate::policy::load::clauses_from_json(&value.to_string())
                .map_err(|problem| invalid("expression", problem))?;
            let empty = clauses == crate::policy::content::Clauses::default();
            ((!empty).then(|| std::sync::Arc::new(clauses)), protected)
        }
        other => {
            return Err(invalid(
                "language",
                format!("`{other}` is not `{CEL}` or `{CLAUSES_JSON}`"),
            ))
        }
    };
    Ok(ReturnedRule {
        deny,
        cluster: wire.cluster,
        rule_ref,
        reason: wire.reason,
        clauses,
        otherwise: wire.otherwise,
        protected,
    })
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
        conditions: Vec::new(),
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
        ..Default::default()
    }
}

/// Who-can in RETURN mode: the conditional subjects, users and groups apart.
pub fn add_conditional_subjects(
    reply: &mut proto::GetAllowedSubjectsResponse,
    subjects: Vec<crate::engine::conditional::ConditionalSubject>,
) {
    for subject in subjects {
        let listed = proto::ConditionalSubject {
            name: subject.name,
            conditions: subject.conditions.iter().map(condition).collect(),
        };
        if subject.user {
            reply.conditional_users.push(listed);
        } else {
            reply.conditional_groups.push(listed);
        }
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

/// An action as the API writes one, without selectors.
pub fn wire_action(action: &request::Action) -> proto::Action {
    let kind = match action {
        request::Action::Resource(r) => {
            proto::action::Kind::ResourceAttributes(proto::ResourceAttributes {
                namespace: r.namespace.clone(),
                verb: r.verb.clone(),
                group: r.group.clone(),
                version: r.version.clone(),
                resource: r.resource.clone(),
                subresource: r.subresource.clone(),
                name: r.name.clone(),
                field_selector: None,
                label_selector: None,
            })
        }
        request::Action::NonResource(n) => {
            proto::action::Kind::NonResourceAttributes(proto::NonResourceAttributes {
                path: n.path.clone(),
                verb: n.verb.clone(),
            })
        }
    };
    proto::Action { kind: Some(kind) }
}

/// A user as the API writes one.
pub fn user_info(user: &request::UserInfo) -> proto::UserInfo {
    proto::UserInfo {
        name: user.name.clone(),
        uid: user.uid.clone(),
        groups: user.groups.clone(),
        extra: user
            .extra
            .iter()
            .map(|(key, values)| {
                let values = proto::ExtraValues {
                    values: values.clone(),
                };
                (key.clone(), values)
            })
            .collect(),
    }
}

/// Both forms of a rules review: authzd's (every rule, in the order the chain consults them)
/// and Kubernetes' (whole grants only; what is left out named in `evaluation_error`).
pub fn rules_review_response(
    rules: &SubjectRules,
    namespace: &str,
    revision: u64,
) -> proto::SubjectRulesReviewResponse {
    let kubernetes = rules.kubernetes();
    proto::SubjectRulesReviewResponse {
        namespace: namespace.to_string(),
        rules: rules.rules.iter().map(reviewed_rule).collect(),
        resource_rules: kubernetes
            .resource_rules
            .into_iter()
            .map(|r| proto::ResourceRule {
                verbs: r.verbs,
                api_groups: r.api_groups,
                resources: r.resources,
                resource_names: r.resource_names,
            })
            .collect(),
        non_resource_rules: kubernetes
            .non_resource_rules
            .into_iter()
            .map(|r| proto::NonResourceRule {
                verbs: r.verbs,
                non_resource_urls: r.non_resource_urls,
            })
            .collect(),
        incomplete: kubernetes.incomplete,
        evaluation_error: crate::engine::join_errors(&kubernetes.errors),
        revision,
    }
}

fn reviewed_rule(rule: &ReviewedRule) -> proto::ReviewedRule {
    let written = rule.written();
    proto::ReviewedRule {
        effect: if rule.deny {
            proto::RuleEffect::Deny
        } else {
            proto::RuleEffect::Allow
        } as i32,
        tier: rule.tier.as_str().to_string(),
        verbs: written.verbs,
        api_groups: written.api_groups,
        resources: written.resources,
        resource_names: written.resource_names,
        non_resource_urls: written.non_resource_urls,
        rule: rule_refs(std::slice::from_ref(&rule.by)).pop(),
        conditional: rule.conditional,
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

    /// An action that carries nothing: it converts to no content.
    fn plain(wire: Option<proto::Action>) -> Result<request::Action> {
        let (action, content) = action(wire, None, &ContentLimits::default())?;
        assert!(content.is_none());
        Ok(action)
    }

    fn local(namespace: &str, wire: Option<proto::Action>) -> Result<request::Action> {
        let limits = ContentLimits::default();
        let (action, content) = local_action(namespace, wire, None, &limits)?;
        assert!(content.is_none());
        Ok(action)
    }

    #[test]
    fn missing_action_names_the_field() {
        let e = plain(None).unwrap_err().within("requests[2].");
        assert_eq!(
            e.to_string(),
            "requests[2].action: must set resource_attributes or non_resource_attributes"
        );
    }

    #[test]
    fn empty_verb_names_the_field() {
        let e = plain(resource("", "")).unwrap_err();
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
        let e = plain(wire).unwrap_err();
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
        assert!(plain(wire).is_ok());
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
        let filled = local("dev", resource("", "get")).unwrap();
        assert_eq!(filled.namespace(), "dev");
        assert!(local("dev", resource("dev", "get")).is_ok());

        let e = local("dev", resource("prod", "get")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "action.resource_attributes.namespace: `prod` does not match the review's namespace `dev`"
        );
        assert_eq!(
            field_of(local("", resource("", "get")).unwrap_err()),
            "namespace"
        );
        let non_resource = Some(proto::Action {
            kind: Some(Kind::NonResourceAttributes(proto::NonResourceAttributes {
                path: "/healthz".into(),
                verb: "get".into(),
            })),
        });
        assert_eq!(
            field_of(local("dev", non_resource).unwrap_err()),
            "action.non_resource_attributes"
        );
    }

    #[test]
    fn authorize_request_requires_a_user() {
        let e = authorize_request(
            proto::AuthorizeRequest {
                user: None,
                action: resource("", "get"),
                min_revision: 0,
                content: None,
                conditions_mode: 0,
            },
            &ContentLimits::default(),
        )
        .unwrap_err();
        assert_eq!(field_of(e), "user");
    }

    fn with_selectors(
        field: Option<proto::FieldSelectorAttributes>,
        label: Option<proto::LabelSelectorAttributes>,
    ) -> Option<proto::Action> {
        Some(proto::Action {
            kind: Some(Kind::ResourceAttributes(proto::ResourceAttributes {
                verb: "list".into(),
                resource: "pods".into(),
                field_selector: field,
                label_selector: label,
                ..Default::default()
            })),
        })
    }

    fn requirement(key: &str, operator: &str, values: &[&str]) -> proto::SelectorRequirement {
        proto::SelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    fn field_selector(
        raw: &str,
        requirements: Vec<proto::SelectorRequirement>,
    ) -> Option<proto::Action> {
        with_selectors(
            Some(proto::FieldSelectorAttributes {
                raw_selector: raw.into(),
                requirements,
            }),
            None,
        )
    }

    fn label_selector(
        raw: &str,
        requirements: Vec<proto::SelectorRequirement>,
    ) -> Option<proto::Action> {
        with_selectors(
            None,
            Some(proto::LabelSelectorAttributes {
                raw_selector: raw.into(),
                requirements,
            }),
        )
    }

    /// The content an action converts to, or the refusal's `field: problem`.
    fn carried(
        wire: Option<proto::Action>,
        content: Option<proto::Content>,
        limits: &ContentLimits,
    ) -> std::result::Result<Option<request::Content>, String> {
        action(wire, content, limits)
            .map(|(_, content)| content)
            .map_err(|e| e.to_string())
    }

    fn objects(object: &[u8], old_object: &[u8]) -> Option<proto::Content> {
        Some(proto::Content {
            object: object.to_vec(),
            old_object: old_object.to_vec(),
            changed_paths: vec![],
        })
    }

    #[test]
    fn objects_are_carried_as_sent_and_bounded() {
        let limits = ContentLimits {
            max_object_bytes: 8,
        };
        let content = carried(
            resource("", "update"),
            objects(b"{\"a\":1}", b"{}"),
            &limits,
        )
        .unwrap()
        .unwrap();
        assert_eq!(content.object.as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(content.old_object.as_deref(), Some(&b"{}"[..]));
        // Not decoded here: the engine decodes, and only when a rule reads the object.
        assert!(!content.was_decoded());
        // Nor checked: what is not JSON is the engine's to refuse, if a rule needs it.
        let content = carried(resource("", "create"), objects(b"not json", b""), &limits);
        let content = content.unwrap().unwrap();
        assert_eq!(content.object.as_deref(), Some(&b"not json"[..]));
        assert_eq!(content.old_object, None);

        assert_eq!(
            carried(resource("", "create"), objects(b"123456789", b""), &limits).unwrap_err(),
            "content.object: is 9 bytes long; the limit is 8"
        );
        assert_eq!(
            carried(
                resource("", "update"),
                objects(b"{}", b"123456789"),
                &limits
            )
            .unwrap_err(),
            "content.old_object: is 9 bytes long; the limit is 8"
        );
        // Non-resource requests carry content too (the engine decides what it means).
        let healthz = Some(proto::Action {
            kind: Some(Kind::NonResourceAttributes(proto::NonResourceAttributes {
                path: "/x".into(),
                verb: "post".into(),
            })),
        });
        assert!(carried(healthz, objects(b"{}", b""), &limits)
            .unwrap()
            .is_some());
    }

    #[test]
    fn nothing_carried_is_no_content() {
        let limits = ContentLimits::default();
        assert!(carried(resource("", "get"), None, &limits)
            .unwrap()
            .is_none());
        let empty = Some(proto::Content::default());
        assert!(carried(resource("", "get"), empty, &limits)
            .unwrap()
            .is_none());
        // A selector that parses to no requirement restricts nothing.
        let blank = field_selector("  ", vec![]);
        assert!(carried(blank, None, &limits).unwrap().is_none());
    }

    #[test]
    fn changed_paths_exclude_objects_and_are_bounded() {
        let limits = ContentLimits::default();
        let paths = |paths: Vec<String>, object: &[u8]| {
            Some(proto::Content {
                object: object.to_vec(),
                old_object: vec![],
                changed_paths: paths,
            })
        };
        let content = carried(
            resource("", "patch"),
            paths(vec![".metadata.labels".into()], b""),
            &limits,
        );
        assert_eq!(
            content.unwrap().unwrap().changed_paths,
            [".metadata.labels"]
        );
        assert_eq!(
            carried(
                resource("", "patch"),
                paths(vec![".spec".into()], b"{}"),
                &limits
            )
            .unwrap_err(),
            "content.changed_paths: cannot be set together with object or old_object"
        );
        let many = vec![".a".to_string(); MAX_CHANGED_PATHS + 1];
        assert_eq!(
            carried(resource("", "patch"), paths(many, b""), &limits).unwrap_err(),
            format!(
                "content.changed_paths: has {} entries; the limit is {MAX_CHANGED_PATHS}",
                MAX_CHANGED_PATHS + 1
            )
        );
        let long = vec![".a".to_string(), "x".repeat(MAX_CHANGED_PATH_BYTES + 1)];
        let e = action(resource("", "patch"), paths(long, b""), &limits).unwrap_err();
        assert_eq!(field_of(e), "content.changed_paths[1]");
        let at_limit = vec!["x".repeat(MAX_CHANGED_PATH_BYTES); MAX_CHANGED_PATHS];
        assert!(carried(resource("", "patch"), paths(at_limit, b""), &limits).is_ok());
    }

    #[test]
    fn selectors_are_parsed_or_checked_into_requirements() {
        use request::SelectorOperator::{DoesNotExist, Exists, In, NotIn};
        let limits = ContentLimits::default();
        let content = carried(
            with_selectors(
                Some(proto::FieldSelectorAttributes {
                    raw_selector: "spec.nodeName=node-1".into(),
                    requirements: vec![],
                }),
                Some(proto::LabelSelectorAttributes {
                    raw_selector: String::new(),
                    requirements: vec![
                        requirement("app", "In", &["web", "api"]),
                        requirement("canary", "DoesNotExist", &[]),
                    ],
                }),
            ),
            None,
            &limits,
        )
        .unwrap()
        .unwrap();
        let read = |r: &[request::SelectorRequirement]| -> Vec<(String, request::SelectorOperator, Vec<String>)> {
            r.iter().map(|r| (r.key.clone(), r.operator, r.values.clone())).collect()
        };
        assert_eq!(
            read(&content.field_selector),
            [("spec.nodeName".into(), In, vec!["node-1".into()])]
        );
        assert_eq!(
            read(&content.label_selector),
            [
                ("app".into(), In, vec!["web".into(), "api".into()]),
                ("canary".into(), DoesNotExist, vec![])
            ]
        );
        assert!(content.object.is_none() && content.changed_paths.is_empty());

        let content = carried(
            label_selector("tier notin (cache), team", vec![]),
            None,
            &limits,
        );
        assert_eq!(
            read(&content.unwrap().unwrap().label_selector),
            [
                ("tier".into(), NotIn, vec!["cache".into()]),
                ("team".into(), Exists, vec![])
            ]
        );
    }

    #[test]
    fn bad_selectors_are_refused_naming_the_field() {
        let limits = ContentLimits::default();
        let refused = |wire| carried(wire, None, &limits).unwrap_err();
        let f = "action.resource_attributes.field_selector";
        let l = "action.resource_attributes.label_selector";
        // KEP-4601: both raw and requirements, or neither, is a 400.
        assert_eq!(
            refused(field_selector("a=b", vec![requirement("a", "In", &["b"])])),
            format!("{f}.raw_selector: cannot be set together with requirements")
        );
        assert_eq!(
            refused(label_selector("", vec![])),
            format!("{l}: must set a raw selector or requirements")
        );
        assert_eq!(
            refused(label_selector("", vec![requirement("a", "Gt", &["1"])])),
            format!("{l}.requirements[0].operator: `Gt` is not a selector operator; use In, NotIn, Exists or DoesNotExist")
        );
        assert_eq!(
            refused(label_selector(
                "",
                vec![
                    requirement("a", "Exists", &[]),
                    requirement("b", "NotIn", &[])
                ]
            )),
            format!("{l}.requirements[1].values: must not be empty with the operator NotIn")
        );
        assert_eq!(
            refused(field_selector(
                "",
                vec![requirement("a", "DoesNotExist", &["x"])]
            )),
            format!("{f}.requirements[0].values: must be empty with the operator DoesNotExist")
        );
        assert_eq!(
            refused(field_selector("", vec![requirement("", "Exists", &[])])),
            format!("{f}.requirements[0].key: must not be empty")
        );
        let e = refused(label_selector("a >1", vec![]));
        assert!(
            e.starts_with(&format!("{l}.raw_selector: is not a valid selector: ")),
            "{e}"
        );
        assert!(e.contains("`>` is not supported"), "{e}");
        let e = refused(field_selector("a", vec![]));
        assert!(
            e.starts_with(&format!("{f}.raw_selector: is not a valid selector: ")),
            "{e}"
        );

        // Bounds, alike for requirements and for what a raw selector parses into.
        let key = "k".repeat(MAX_SELECTOR_STRING_BYTES + 1);
        assert_eq!(
            refused(label_selector("", vec![requirement(&key, "Exists", &[])])),
            format!("{l}.requirements[0].key: is 1025 bytes long; the limit is 1024")
        );
        assert_eq!(
            refused(label_selector(&key, vec![])),
            format!("{l}.raw_selector: requirement 0: key is 1025 bytes long; the limit is 1024")
        );
        let long = "v".repeat(MAX_SELECTOR_STRING_BYTES + 1);
        assert_eq!(
            refused(label_selector(
                "",
                vec![requirement("a", "In", &["x", "y", &long])]
            )),
            format!("{l}.requirements[0].values[2]: is 1025 bytes long; the limit is 1024")
        );
        let values = vec!["v"; MAX_SELECTOR_VALUES + 1];
        assert_eq!(
            refused(label_selector("", vec![requirement("a", "In", &values)])),
            format!("{l}.requirements[0].values: has 65 entries; the limit is 64")
        );
        let raw_values = format!("a in ({})", values.join(","));
        assert_eq!(
            refused(label_selector(&raw_values, vec![])),
            format!("{l}.raw_selector: requirement 0: values has 65 entries; the limit is 64")
        );
        let many = vec![requirement("a", "Exists", &[]); MAX_SELECTOR_REQUIREMENTS + 1];
        assert_eq!(
            refused(field_selector("", many)),
            format!("{f}.requirements: has 65 entries; the limit is 64")
        );
        let raw_many = vec!["a=b"; MAX_SELECTOR_REQUIREMENTS + 1].join(",");
        assert_eq!(
            refused(field_selector(&raw_many, vec![])),
            format!("{f}.raw_selector: has 65 requirements; the limit is 64")
        );
        let huge = "a".repeat(MAX_RAW_SELECTOR_BYTES + 1);
        assert_eq!(
            field_of(action(label_selector(&huge, vec![]), None, &limits).unwrap_err()),
            format!("{l}.raw_selector")
        );
        // At the bounds: fine.
        let values = vec!["v".repeat(MAX_SELECTOR_STRING_BYTES); MAX_SELECTOR_VALUES];
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        let full = vec![
            requirement(&"k".repeat(MAX_SELECTOR_STRING_BYTES), "NotIn", &values);
            MAX_SELECTOR_REQUIREMENTS
        ];
        assert!(carried(label_selector("", full), None, &limits).is_ok());
    }

    #[test]
    fn authorize_requests_and_local_reviews_carry_their_content() {
        let limits = ContentLimits::default();
        let (request, content) = authorize_request(
            proto::AuthorizeRequest {
                user: Some(proto::UserInfo {
                    name: "alice".into(),
                    ..Default::default()
                }),
                action: label_selector("app=web", vec![]),
                min_revision: 3,
                content: objects(b"{}", b""),
                conditions_mode: 0,
            },
            &limits,
        )
        .unwrap();
        assert_eq!(request.user.name, "alice");
        let content = content.unwrap();
        assert_eq!(content.object.as_deref(), Some(&b"{}"[..]));
        assert_eq!(content.label_selector.len(), 1);

        let (action, content) =
            local_action("dev", resource("", "delete"), objects(b"", b"{}"), &limits).unwrap();
        assert_eq!(action.namespace(), "dev");
        assert_eq!(content.unwrap().old_object.as_deref(), Some(&b"{}"[..]));
        // A namespace the review does not share is refused, whatever the content.
        let e = local_action(
            "dev",
            resource("prod", "delete"),
            objects(b"{}", b""),
            &limits,
        );
        assert_eq!(
            field_of(e.unwrap_err()),
            "action.resource_attributes.namespace"
        );
    }
}
