//! Kubernetes review documents read into the typed model (`crate::kube::authorization`) and
//! converted into the gRPC messages the serving path takes, and a review's status written
//! back from the model. The review endpoints and the KEP-5681 condition parser both read
//! requests this way.

use serde_json::{Map, Value};

use super::document::BodyError;
use crate::kube::authorization::{
    ConditionalSpec, NonResourceAttributes, ResourceAttributes, SelectorAttributes,
    SubjectAccessReviewSpec, SubjectAccessReviewSpecV1beta1, SubjectAccessReviewStatus,
};
use crate::kube::{from_document, FieldError};
use crate::proto;

/// The spec versions a SubjectAccessReview is read in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecVersion {
    V1,
    /// `spec.group` for v1's `spec.groups`.
    V1beta1,
}

/// A model error, at `prefix` in the document (`spec.`).
pub fn at(prefix: &str) -> impl Fn(FieldError) -> BodyError + '_ {
    move |error| {
        let field = if error.field.is_empty() || error.field == "." {
            prefix.trim_end_matches('.').to_string()
        } else {
            format!("{prefix}{}", error.field)
        };
        BodyError::field(&field, &error.problem)
    }
}

/// The document's `spec`, required to be an object.
fn spec_document(document: &Map<String, Value>) -> Result<&Value, BodyError> {
    match document.get("spec") {
        None | Some(Value::Null) => Err(BodyError::field("spec", "is required")),
        Some(spec @ Value::Object(_)) => Ok(spec),
        Some(_) => Err(BodyError::field("spec", "must be an object")),
    }
}

/// `spec` of a SubjectAccessReview document, in `version`'s shape, as the model's v1 spec.
pub fn review_spec(
    document: &Map<String, Value>,
    version: SpecVersion,
) -> Result<SubjectAccessReviewSpec, BodyError> {
    let spec = spec_document(document)?;
    match version {
        SpecVersion::V1 => from_document::<SubjectAccessReviewSpec>(spec).map_err(at("spec.")),
        SpecVersion::V1beta1 => from_document::<SubjectAccessReviewSpecV1beta1>(spec)
            .map(SubjectAccessReviewSpec::from)
            .map_err(at("spec.")),
    }
}

/// The attributes of a spec (`spec` for a SubjectAccessReview, or the attributes of a
/// SelfSubjectAccessReview, read from the same document shape), with their KEP-4601
/// selectors.
pub fn attributes_document(
    document: &Map<String, Value>,
) -> Result<(Option<ResourceAttributes>, Option<NonResourceAttributes>), BodyError> {
    let spec = spec_document(document)?;
    let spec = from_document::<crate::kube::authorization::SelfSubjectAccessReviewSpec>(spec)
        .map_err(at("spec."))?;
    Ok((spec.resource_attributes, spec.non_resource_attributes))
}

/// KEP-5681's fields of `spec` (see [`ConditionalSpec`]).
pub fn conditional_spec(document: &Map<String, Value>) -> Result<ConditionalSpec, BodyError> {
    from_document::<ConditionalSpec>(spec_document(document)?).map_err(at("spec."))
}

/// `spec.resourceAttributes` xor `spec.nonResourceAttributes` (upstream's validation), with
/// the resource attributes' KEP-4601 `fieldSelector` and `labelSelector`, as gRPC's action.
/// What makes a selector valid (never both forms, never neither, known operators, bounds) is
/// the gRPC conversion's, so both transports refuse alike; the renames name the document's
/// fields. `prefix` is where the attributes are (`spec.`).
pub fn action(
    resource: Option<ResourceAttributes>,
    non_resource: Option<NonResourceAttributes>,
    prefix: &str,
) -> Result<proto::Action, BodyError> {
    use proto::action::Kind;
    let kind = match (resource, non_resource) {
        (Some(_), Some(_)) => {
            return Err(BodyError::field(
                &format!("{prefix}nonResourceAttributes"),
                "cannot be specified in combination with resourceAttributes",
            ))
        }
        (None, None) => {
            return Err(BodyError::field(
                &format!("{prefix}resourceAttributes"),
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ))
        }
        (Some(r), None) => Kind::ResourceAttributes(proto::ResourceAttributes {
            namespace: r.namespace,
            verb: r.verb,
            group: r.group,
            version: r.version,
            resource: r.resource,
            subresource: r.subresource,
            name: r.name,
            field_selector: r.field_selector.map(|s| {
                let (raw_selector, requirements) = selector(s);
                proto::FieldSelectorAttributes {
                    raw_selector,
                    requirements,
                }
            }),
            label_selector: r.label_selector.map(|s| {
                let (raw_selector, requirements) = selector(s);
                proto::LabelSelectorAttributes {
                    raw_selector,
                    requirements,
                }
            }),
        }),
        (None, Some(n)) => Kind::NonResourceAttributes(proto::NonResourceAttributes {
            path: n.path,
            verb: n.verb,
        }),
    };
    Ok(proto::Action { kind: Some(kind) })
}

/// A KEP-4601 selector as written: its raw form and its requirements.
fn selector(selector: SelectorAttributes) -> (String, Vec<proto::SelectorRequirement>) {
    let requirements = selector
        .requirements
        .into_iter()
        .map(|r| proto::SelectorRequirement {
            key: r.key,
            operator: r.operator,
            values: r.values,
        })
        .collect();
    (selector.raw_selector, requirements)
}

/// A SubjectAccessReview spec as the gRPC review request it stands for.
pub fn review_request(
    spec: SubjectAccessReviewSpec,
    min_revision: u64,
) -> Result<proto::SubjectAccessReviewRequest, BodyError> {
    let SubjectAccessReviewSpec {
        resource_attributes,
        non_resource_attributes,
        user,
        groups,
        extra,
        uid,
    } = spec;
    Ok(proto::SubjectAccessReviewRequest {
        action: Some(action(
            resource_attributes,
            non_resource_attributes,
            "spec.",
        )?),
        user,
        groups,
        uid,
        extra: extra
            .into_iter()
            .map(|(key, values)| {
                let values = values.items;
                (key, proto::ExtraValues { values })
            })
            .collect(),
        min_revision,
        content: None,
        conditions_mode: proto::ConditionsMode::Fold as i32,
    })
}

/// `SubjectAccessReviewStatus` of a gRPC review answer, as JSON: `allowed` always, the rest
/// only when set.
pub fn review_status(review: &proto::SubjectAccessReviewResponse) -> Value {
    let status = SubjectAccessReviewStatus {
        allowed: review.allowed,
        denied: review.denied,
        reason: review.reason.clone(),
        evaluation_error: review.evaluation_error.clone(),
    };
    serde_json::to_value(&status).unwrap_or_else(|_| serde_json::json!({"allowed": false}))
}
