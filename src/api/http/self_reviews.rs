//! What kubectl asks about its own caller: `SelfSubjectRulesReview` (`kubectl auth can-i
//! --list`: the rules that apply in a namespace) and `SelfSubjectReview` (`kubectl auth
//! whoami`: who authzd authenticated — or, impersonating, whom it serves). Both go through
//! [`review`], so they are read and answered in JSON, YAML or Kubernetes protobuf and refused
//! exactly as every other review.

use axum::extract::{Request, State};
use axum::response::Response;
use http::StatusCode;
use serde_json::{json, Map, Value};

use super::document::{BodyError, Object};
use super::reviews::{check_type_meta, echo, review, Renames, K8S_GROUP_V1};
use super::HttpApi;
use crate::proto;

const AUTHENTICATION_V1: &str = "authentication.k8s.io/v1";

/// `POST /apis/authorization.k8s.io/v1/selfsubjectrulesreviews`: `spec.namespace` in (required,
/// as upstream), Kubernetes' rule lists out — the grants that can be stated whole, `incomplete`
/// with an `evaluationError` naming what deny rules, negation or conditions leave out. (The
/// complete form, denies included, is gRPC's `SelfSubjectRulesReview`.)
pub(super) async fn kube_self_subject_rules_review(
    State(api): State<HttpApi>,
    request: Request,
) -> Response {
    const RENAMES: Renames = &[("namespace", "spec.namespace")];
    let parse = |root: &Object<'_>, min_revision| {
        check_type_meta(root, "SelfSubjectRulesReview", &[K8S_GROUP_V1])?;
        let namespace = match root.object("spec")? {
            Some(spec) => spec.string("namespace")?,
            None => String::new(),
        };
        if namespace.is_empty() {
            return Err(BodyError::field("spec.namespace", "is required").into());
        }
        let message = proto::SelfSubjectRulesReviewRequest {
            namespace,
            min_revision,
        };
        Ok((message, RENAMES))
    };
    let respond = |document, rules: &proto::SubjectRulesReviewResponse| {
        (
            StatusCode::CREATED,
            echo(document, rules_status(rules), None),
        )
    };
    review(&api, request, parse, respond).await
}

/// `SubjectRulesReviewStatus` in upstream's JSON shape.
fn rules_status(rules: &proto::SubjectRulesReviewResponse) -> Value {
    let resource_rules: Vec<Value> = rules
        .resource_rules
        .iter()
        .map(|rule| {
            let mut out = Map::new();
            out.insert("verbs".into(), json!(rule.verbs));
            if !rule.api_groups.is_empty() {
                out.insert("apiGroups".into(), json!(rule.api_groups));
            }
            if !rule.resources.is_empty() {
                out.insert("resources".into(), json!(rule.resources));
            }
            if !rule.resource_names.is_empty() {
                out.insert("resourceNames".into(), json!(rule.resource_names));
            }
            Value::Object(out)
        })
        .collect();
    let non_resource_rules: Vec<Value> = rules
        .non_resource_rules
        .iter()
        .map(|rule| json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}))
        .collect();
    let mut status = Map::new();
    status.insert("resourceRules".into(), Value::Array(resource_rules));
    status.insert("nonResourceRules".into(), Value::Array(non_resource_rules));
    status.insert("incomplete".into(), Value::Bool(rules.incomplete));
    if !rules.evaluation_error.is_empty() {
        status.insert(
            "evaluationError".into(),
            Value::String(rules.evaluation_error.clone()),
        );
    }
    Value::Object(status)
}

/// `POST /apis/authentication.k8s.io/v1/selfsubjectreviews`: the caller's `userInfo`.
pub(super) async fn kube_self_subject_review(
    State(api): State<HttpApi>,
    request: Request,
) -> Response {
    let parse = |root: &Object<'_>, _min_revision| {
        check_type_meta(root, "SelfSubjectReview", &[AUTHENTICATION_V1])?;
        Ok((proto::SelfSubjectReviewRequest {}, &[][..]))
    };
    let respond = |document: Value, review: &proto::SelfSubjectReviewResponse| {
        let user = review.user_info.clone().unwrap_or_default();
        let mut info = Map::new();
        if !user.name.is_empty() {
            info.insert("username".into(), Value::String(user.name));
        }
        if !user.uid.is_empty() {
            info.insert("uid".into(), Value::String(user.uid));
        }
        if !user.groups.is_empty() {
            info.insert("groups".into(), json!(user.groups));
        }
        if !user.extra.is_empty() {
            let extra: Map<String, Value> = user
                .extra
                .into_iter()
                .map(|(key, values)| (key, json!(values.values)))
                .collect();
            info.insert("extra".into(), Value::Object(extra));
        }
        let status = json!({"userInfo": Value::Object(info)});
        (StatusCode::CREATED, echo(document, status, None))
    };
    review(&api, request, parse, respond).await
}
