//! The review endpoints: body → proto request → the gRPC handler's steps → body.
//!
//! Every endpoint takes the same steps ([`review`]): read the body, parse it into the gRPC
//! request (the endpoint's own part), serve it through [`GrpcApi::serve`] (authentication,
//! deadline, conversion, snapshot, privilege — exactly as over gRPC), and shape the answer
//! (the endpoint's own part). A refusal from any step is one typed error, its field path
//! renamed to the document's, mapped once by [`status::refusal_answer`]. One difference from gRPC:
//! the requests are marked [`FencedAllow::NoOpinion`], so a fenced replica (etcd mode) answers
//! an allow it may not give "no opinion", as the webhook contract has an authorizer that
//! cannot evaluate answer (who-can is still refused).
//!
//! Media: a body is JSON or YAML, or Kubernetes protobuf when its Content-Type says so (any
//! other declared type is refused with 415), read as one JSON document either way
//! ([`BodyMedia`]); an answer is an HTTP status and a JSON document, written once, by
//! [`status::render`], as Kubernetes protobuf when the caller's Accept prefers it and the
//! document's kind has a protobuf form (`kube_protobuf`'s kinds, refusals' `Status` included),
//! else as JSON. A new endpoint gets both by calling [`review`]; one that does not fit it reads
//! with [`read`] and answers with `status::render(AnswerMedia::negotiate(headers), code,
//! &value)`.

use axum::extract::{Path, Request, State};
use axum::response::Response;
use http::StatusCode;
use serde_json::{json, Map, Value};
use tonic::metadata::MetadataMap;

use super::document::{parse_body, read_body, BodyError, BodyMedia, Object};
use super::kube_review::{self, SpecVersion};
use super::status::AnswerMedia;
use super::{conditional, status, HttpApi, Namespace};
use crate::api::error::ApiError;
use crate::api::grpc::Review;
use crate::kube::authorization::ConditionalStatus;
use crate::proto;
use crate::serving::FencedAllow;

/// Proto field paths and the document paths they stand for, in one endpoint's shape.
pub(super) type Renames = &'static [(&'static str, &'static str)];

/// The body, parsed into one JSON document whatever its media ([`BodyMedia`]: a Content-Type
/// that is not read is refused before the body is), the request parts it came with (headers,
/// extensions), and the `minRevision` query parameter (gRPC's `min_revision`; 0 when absent).
pub(super) async fn read(
    request: Request,
) -> Result<(http::request::Parts, Value, u64), BodyError> {
    let (parts, body) = request.into_parts();
    let min_revision = min_revision(parts.uri.query())?;
    let media = BodyMedia::of(&parts.headers)?;
    let bytes = read_body(&parts.headers, body).await?;
    let value = parse_body(media, &bytes)?;
    Ok((parts, value, min_revision))
}

/// `?minRevision=N`: wait until the server has reached revision N, as gRPC's `min_revision`
/// (Kubernetes review objects have no field for it). Other parameters are ignored.
fn min_revision(query: Option<&str>) -> Result<u64, BodyError> {
    let Some(query) = query else { return Ok(0) };
    let mut found = 0;
    for pair in query.split('&') {
        if let Some(value) = pair.strip_prefix("minRevision=") {
            found = value.parse().map_err(|_| {
                BodyError::field(
                    "minRevision",
                    &format!("`{value}` is not a revision number"),
                )
            })?;
        }
    }
    Ok(found)
}

/// The gRPC request the HTTP request stands for: headers become metadata (bearer tokens
/// travel as `authorization`), extensions carry the connection's identity, and a fenced
/// replica's refused allow is asked for as no opinion (see [`FencedAllow`]).
fn grpc_request<T>(parts: http::request::Parts, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::from_parts(
        MetadataMap::from_headers(parts.headers),
        parts.extensions,
        message,
    );
    request.extensions_mut().insert(FencedAllow::NoOpinion);
    request
}

/// The steps every review endpoint takes. `parse` reads the document (JSON, YAML or Kubernetes
/// protobuf, as one JSON document) into the gRPC request and names the renames of its shape;
/// `respond` shapes the answer, an HTTP status and a JSON document, from the document sent and
/// the gRPC reply. The answer, or the refusal of any step, is written in the media the
/// request's Accept header negotiates ([`status::render`]): an endpoint states no media.
pub(super) async fn review<R: Review>(
    api: &HttpApi,
    request: Request,
    parse: impl FnOnce(&Object<'_>, u64) -> Result<(R, Renames), ApiError>,
    respond: impl FnOnce(Value, &R::Reply) -> (StatusCode, Value),
) -> Response {
    let media = AnswerMedia::negotiate(request.headers());
    let answered = async {
        let (parts, document, min_revision) = read(request).await?;
        let (message, renames) = parse(&Object::root(&document)?, min_revision)?;
        let reply = api
            .grpc
            .serve(grpc_request(parts, message))
            .await
            .map_err(|error| error.renamed(renames))?;
        Ok::<_, ApiError>(respond(document, &reply))
    }
    .await;
    let (code, answer) = answered.unwrap_or_else(|error| status::refusal_answer(&error));
    status::render(media, code, &answer)
}

// --- Kubernetes shapes (authorization.k8s.io) ---------------------------------------------

pub(super) const K8S_GROUP_V1: &str = "authorization.k8s.io/v1";
const K8S_GROUP_V1BETA1: &str = "authorization.k8s.io/v1beta1";

/// Proto field paths → `SubjectAccessReview` JSON paths; `groups_field` is `spec.groups`
/// (v1) or `spec.group` (v1beta1).
const fn kube_renames(groups_field: &'static str) -> [(&'static str, &'static str); 12] {
    [
        ("action.resource_attributes", "spec.resourceAttributes"),
        (
            "action.resource_attributes.field_selector",
            "spec.resourceAttributes.fieldSelector",
        ),
        (
            "action.resource_attributes.field_selector.raw_selector",
            "spec.resourceAttributes.fieldSelector.rawSelector",
        ),
        (
            "action.resource_attributes.label_selector",
            "spec.resourceAttributes.labelSelector",
        ),
        (
            "action.resource_attributes.label_selector.raw_selector",
            "spec.resourceAttributes.labelSelector.rawSelector",
        ),
        (
            "action.non_resource_attributes",
            "spec.nonResourceAttributes",
        ),
        ("action", "spec"),
        ("user", "spec.user"),
        ("uid", "spec.uid"),
        ("groups", groups_field),
        ("extra", "spec.extra"),
        ("namespace", "metadata.namespace"),
    ]
}

const KUBE_RENAMES: Renames = &kube_renames("spec.groups");
const KUBE_V1BETA1_RENAMES: Renames = &kube_renames("spec.group");

/// `apiVersion` and `kind` as a typed decode checks them: present and what the endpoint takes.
pub(super) fn check_type_meta<'v>(
    root: &Object<'_>,
    kind: &str,
    versions: &[&'v str],
) -> Result<&'v str, BodyError> {
    let api_version = root.string("apiVersion")?;
    let Some(version) = versions.iter().find(|v| **v == api_version) else {
        return Err(BodyError::field(
            "apiVersion",
            &format!("must be {} (got `{api_version}`)", versions.join(" or ")),
        ));
    };
    let got = root.string("kind")?;
    if got != kind {
        return Err(BodyError::field(
            "kind",
            &format!("must be {kind} (got `{got}`)"),
        ));
    }
    Ok(version)
}

/// The object the caller sent, with `status` filled (as kube-apiserver echoes a review).
pub(super) fn echo(mut document: Value, status: Value, namespace: Option<&str>) -> Value {
    if let Value::Object(map) = &mut document {
        if let Some(namespace) = namespace {
            let metadata = map.entry("metadata").or_insert_with(|| json!({}));
            if let Value::Object(metadata) = metadata {
                metadata.insert("namespace".into(), Value::String(namespace.into()));
            }
        }
        map.insert("status".into(), status);
    }
    document
}

/// The answer to a Kubernetes review: the object the caller sent, with `status` filled.
fn kube_answer(
    code: StatusCode,
    namespace: Option<&str>,
) -> impl FnOnce(Value, &proto::SubjectAccessReviewResponse) -> (StatusCode, Value) + '_ {
    move |document, review| {
        let status = kube_review::review_status(review);
        (code, echo(document, status, namespace))
    }
}

/// The webhook: a `SubjectAccessReview` (v1 `spec.groups`, v1beta1 `spec.group`) in, the same
/// apiVersion and kind back with `status`, HTTP 200 (the webhook contract:
/// <https://kubernetes.io/docs/reference/access-authn-authz/webhook/>).
///
/// With `--alpha-conditional-authorization`, a review whose `spec.conditionalAuthorization.mode`
/// is set may be answered with KEP-5681's `status.conditionSetChain` ([`conditional`]).
pub(super) async fn webhook(api: HttpApi, request: Request) -> Response {
    let conditional_authorization = api.conditional_authorization;
    let parse = |root: &Object<'_>, min_revision| {
        let version = check_type_meta(
            root,
            "SubjectAccessReview",
            &[K8S_GROUP_V1, K8S_GROUP_V1BETA1],
        )?;
        let (spec_version, renames) = if version == K8S_GROUP_V1 {
            (SpecVersion::V1, KUBE_RENAMES)
        } else {
            (SpecVersion::V1beta1, KUBE_V1BETA1_RENAMES)
        };
        let spec = kube_review::review_spec(root.map, spec_version)?;
        let mut message = kube_review::review_request(spec, min_revision)?;
        if conditional_authorization && kube_review::conditional_spec(root.map)?.asks_conditions() {
            message.conditions_mode = proto::ConditionsMode::Return as i32;
        }
        Ok((message, renames))
    };
    let respond = |document: Value, reply: &proto::SubjectAccessReviewResponse| {
        if reply.conditions.is_empty() {
            return kube_answer(StatusCode::OK, None)(document, reply);
        }
        let context = conditional::request_context(document.get("spec"));
        let status = ConditionalStatus {
            allowed: false,
            reason: reply.reason.clone(),
            condition_set_chain: conditional::condition_set_chain(&reply.conditions, &context),
        };
        let status = serde_json::to_value(&status).unwrap_or_default();
        (StatusCode::OK, echo(document, status, None))
    };
    review(&api, request, parse, respond).await
}

/// `POST /apis/authorization.k8s.io/v1alpha1/authorizationconditionsreviews` (alpha): the
/// conditions a conditional answer returned, evaluated against the objects sent with them.
pub(super) async fn authorization_conditions_review(
    State(api): State<HttpApi>,
    request: Request,
) -> Response {
    let parse = |root: &Object<'_>, _min_revision| {
        check_type_meta(
            root,
            conditional::REVIEW_KIND,
            &[conditional::REVIEW_API_VERSION],
        )?;
        let document = Value::Object(root.map.clone());
        Ok((conditional::ConditionsReviewCall(document), NO_RENAMES))
    };
    let respond = |document: Value, verdict: &crate::engine::condition_sets::ChainVerdict| {
        (
            StatusCode::OK,
            conditional::review_answer(document, verdict),
        )
    };
    review(&api, request, parse, respond).await
}

/// For documents whose errors already name their own paths.
const NO_RENAMES: Renames = &[];

/// `review` asked within `namespace`.
fn local_review(
    namespace: String,
    review: proto::SubjectAccessReviewRequest,
) -> proto::LocalSubjectAccessReviewRequest {
    let proto::SubjectAccessReviewRequest {
        action,
        user,
        groups,
        uid,
        extra,
        min_revision,
        content,
        // Conditional answers are the webhook's (KEP-5681 alpha), not a local review's.
        conditions_mode: _,
    } = review;
    proto::LocalSubjectAccessReviewRequest {
        namespace,
        action,
        user,
        groups,
        uid,
        extra,
        min_revision,
        content,
    }
}

/// `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`: 201 with `status` filled.
pub(super) async fn kube_subject_access_review(
    State(api): State<HttpApi>,
    request: Request,
) -> Response {
    let parse = |root: &Object<'_>, min_revision| {
        check_type_meta(root, "SubjectAccessReview", &[K8S_GROUP_V1])?;
        let spec = kube_review::review_spec(root.map, SpecVersion::V1)?;
        Ok((
            kube_review::review_request(spec, min_revision)?,
            KUBE_RENAMES,
        ))
    };
    review(&api, request, parse, kube_answer(StatusCode::CREATED, None)).await
}

/// `POST .../selfsubjectaccessreviews`: the caller's own access (PersonalSubjectAccessReview).
pub(super) async fn kube_self_subject_access_review(
    State(api): State<HttpApi>,
    request: Request,
) -> Response {
    let parse = |root: &Object<'_>, min_revision| {
        check_type_meta(root, "SelfSubjectAccessReview", &[K8S_GROUP_V1])?;
        let (resource, non_resource) = kube_review::attributes_document(root.map)?;
        let message = proto::PersonalSubjectAccessReviewRequest {
            action: Some(kube_review::action(resource, non_resource, "spec.")?),
            min_revision,
            content: None,
        };
        Ok((message, KUBE_RENAMES))
    };
    review(&api, request, parse, kube_answer(StatusCode::CREATED, None)).await
}

/// `POST .../namespaces/{ns}/localsubjectaccessreviews`. As upstream: `metadata.namespace`,
/// when set, and `spec.resourceAttributes.namespace` must both equal the path's namespace.
pub(super) async fn kube_local_subject_access_review(
    State(api): State<HttpApi>,
    Path(namespace): Namespace,
    request: Request,
) -> Response {
    let parse = |root: &Object<'_>, min_revision| {
        check_type_meta(root, "LocalSubjectAccessReview", &[K8S_GROUP_V1])?;
        if let Some(metadata) = root.object("metadata")? {
            let declared = metadata.string("namespace")?;
            if !declared.is_empty() && declared != namespace {
                return Err(BodyError::field(
                    "metadata.namespace",
                    &format!(
                        "`{declared}` does not match the namespace of the request `{namespace}`"
                    ),
                )
                .into());
            }
        }
        let spec = kube_review::review_spec(root.map, SpecVersion::V1)?;
        if let Some(resource) = &spec.resource_attributes {
            let attribute = &resource.namespace;
            if *attribute != namespace {
                return Err(BodyError::field(
                    "spec.resourceAttributes.namespace",
                    &format!("`{attribute}` must match the namespace of the request `{namespace}`"),
                )
                .into());
            }
        }
        let request = kube_review::review_request(spec, min_revision)?;
        Ok((local_review(namespace.clone(), request), KUBE_RENAMES))
    };
    let answer = kube_answer(StatusCode::CREATED, Some(&namespace));
    review(&api, request, parse, answer).await
}

// --- Seed 000 shapes (authorization.kubernetes.io/v1) ---------------------------------------

const SEED_VERSION: &str = "authorization.kubernetes.io/v1";

/// Proto field paths → seed 000's `authorizationAttributes` names, and seed 003's
/// `spec.content`; `object_field` is where the object is (`spec.content.object`, or
/// `spec.content` itself when the content is the bare object).
const fn seed_renames(object_field: &'static str) -> [(&'static str, &'static str); 14] {
    [
        ("action.resource_attributes", "authorizationAttributes"),
        (
            "action.resource_attributes.group",
            "authorizationAttributes.resourceGroup",
        ),
        (
            "action.resource_attributes.version",
            "authorizationAttributes.resourceVersion",
        ),
        (
            "action.resource_attributes.name",
            "authorizationAttributes.resourceName",
        ),
        ("action.non_resource_attributes", "authorizationAttributes"),
        ("action", "authorizationAttributes"),
        ("user", "user"),
        ("groups", "groups"),
        ("namespace", "namespace"),
        ("uid", "uid"),
        ("content", "spec.content"),
        ("content.object", object_field),
        ("content.old_object", "spec.content.oldObject"),
        ("content.changed_paths", "spec.content.changedPaths"),
    ]
}

const SEED_RENAMES: Renames = &seed_renames("spec.content.object");
const SEED_BARE_CONTENT_RENAMES: Renames = &seed_renames("spec.content");

/// The keys of seed 003's content wrapper: `object` and `oldObject` (and `changedPaths`, gRPC's
/// `changed_paths`). Content with any other key is the object itself.
const CONTENT_WRAPPER_KEYS: [&str; 3] = ["object", "oldObject", "changedPaths"];

/// Seed 003's `spec.content` (`SubjectAccessReviewSpec.Content`): `{object, oldObject}` (or
/// `changedPaths`), or a bare object meaning `object`. Objects become the JSON bytes gRPC
/// carries, bounded there; an empty `{}` carries nothing. The renames name the fields as the
/// document wrote them.
fn seed_content(root: &Object<'_>) -> Result<(Option<proto::Content>, Renames), BodyError> {
    let content = match root.object("spec")? {
        Some(spec) => spec.object("content")?,
        None => None,
    };
    let Some(content) = content else {
        return Ok((None, SEED_RENAMES));
    };
    let json = |object: &Map<String, Value>| {
        serde_json::to_vec(object)
            .map_err(|error| BodyError::Malformed(format!("cannot encode spec.content: {error}")))
    };
    let wrapped = content
        .map
        .keys()
        .all(|key| CONTENT_WRAPPER_KEYS.contains(&key.as_str()));
    if !wrapped {
        let object = json(content.map)?;
        let content = proto::Content {
            object,
            ..Default::default()
        };
        return Ok((Some(content), SEED_BARE_CONTENT_RENAMES));
    }
    let object = match content.object("object")? {
        Some(object) => json(object.map)?,
        None => Vec::new(),
    };
    let old_object = match content.object("oldObject")? {
        Some(object) => json(object.map)?,
        None => Vec::new(),
    };
    let changed_paths = content.strings("changedPaths")?;
    let content = proto::Content {
        object,
        old_object,
        changed_paths,
    };
    Ok((Some(content), SEED_RENAMES))
}

/// `apiVersion` and `kind` are optional on the seed's paths (its examples always send them);
/// when present they must name this endpoint's type.
fn check_seed_type_meta(root: &Object<'_>, kind: &str) -> Result<(), BodyError> {
    let api_version = root.string("apiVersion")?;
    if !api_version.is_empty() && api_version != SEED_VERSION {
        return Err(BodyError::field(
            "apiVersion",
            &format!("must be {SEED_VERSION} (got `{api_version}`)"),
        ));
    }
    let got = root.string("kind")?;
    if !got.is_empty() && got != kind {
        return Err(BodyError::field(
            "kind",
            &format!("must be {kind} (got `{got}`)"),
        ));
    }
    Ok(())
}

/// The seed's `AuthorizationAttributes` (`resourceGroup`, `resourceVersion`, `resourceName`;
/// a non-resource request as OpenShift later spelled it: `isNonResourceURL` and `path`).
fn seed_action(root: &Object<'_>) -> Result<proto::Action, BodyError> {
    use proto::action::Kind;
    let Some(attributes) = root.object("authorizationAttributes")? else {
        return Err(BodyError::field("authorizationAttributes", "is required"));
    };
    let kind = if attributes.bool("isNonResourceURL")? {
        Kind::NonResourceAttributes(proto::NonResourceAttributes {
            path: attributes.string("path")?,
            verb: attributes.string("verb")?,
        })
    } else {
        Kind::ResourceAttributes(proto::ResourceAttributes {
            namespace: attributes.string("namespace")?,
            verb: attributes.string("verb")?,
            group: attributes.string("resourceGroup")?,
            version: attributes.string("resourceVersion")?,
            resource: attributes.string("resource")?,
            subresource: attributes.string("subresource")?,
            name: attributes.string("resourceName")?,
            field_selector: None,
            label_selector: None,
        })
    };
    Ok(proto::Action { kind: Some(kind) })
}

/// `{kind}Response` with `allowed` and `reason` (and `namespace` where the seed's type has
/// one); `denied` and `evaluationError` are added when set, as on the gRPC answer.
fn seed_review_response(
    kind: &str,
    review: &proto::SubjectAccessReviewResponse,
    with_namespace: bool,
) -> Value {
    let mut response = Map::new();
    response.insert("kind".into(), Value::String(format!("{kind}Response")));
    response.insert("apiVersion".into(), Value::String(SEED_VERSION.into()));
    if with_namespace {
        response.insert("namespace".into(), Value::String(review.namespace.clone()));
    }
    if let Value::Object(status) = kube_review::review_status(review) {
        response.extend(status);
    }
    Value::Object(response)
}

fn seed_resource_response(kind: &str, review: &proto::ResourceAccessReviewResponse) -> Value {
    let mut response = json!({
        "kind": format!("{kind}Response"),
        "apiVersion": SEED_VERSION,
        "namespace": review.namespace,
        "users": review.users,
        "groups": review.groups,
    });
    if let Value::Object(map) = &mut response {
        if !review.denied_users.is_empty() {
            map.insert("deniedUsers".into(), json!(review.denied_users));
        }
        if !review.denied_groups.is_empty() {
            map.insert("deniedGroups".into(), json!(review.denied_groups));
        }
        if !review.evaluation_error.is_empty() {
            map.insert("evaluationError".into(), json!(review.evaluation_error));
        }
    }
    response
}

/// The seed's subject access review: attributes, user and groups (no uid or extra).
fn seed_review_request(
    root: &Object<'_>,
    min_revision: u64,
) -> Result<proto::SubjectAccessReviewRequest, BodyError> {
    Ok(proto::SubjectAccessReviewRequest {
        action: Some(seed_action(root)?),
        user: root.string("user")?,
        groups: root.strings("groups")?,
        uid: String::new(),
        extra: Default::default(),
        min_revision,
        content: None,
        conditions_mode: proto::ConditionsMode::Fold as i32,
    })
}

pub(super) async fn seed_subject_access_review(
    State(api): State<HttpApi>,
    request: Request,
) -> Response {
    const KIND: &str = "SubjectAccessReview";
    let parse = |root: &Object<'_>, min_revision| {
        check_seed_type_meta(root, KIND)?;
        let (content, renames) = seed_content(root)?;
        let message = proto::SubjectAccessReviewRequest {
            content,
            ..seed_review_request(root, min_revision)?
        };
        Ok((message, renames))
    };
    let respond = |_, review: &_| {
        (
            StatusCode::CREATED,
            seed_review_response(KIND, review, false),
        )
    };
    review(&api, request, parse, respond).await
}

pub(super) async fn seed_personal_subject_access_review(
    State(api): State<HttpApi>,
    request: Request,
) -> Response {
    const KIND: &str = "PersonalSubjectAccessReview";
    let parse = |root: &Object<'_>, min_revision| {
        check_seed_type_meta(root, KIND)?;
        let (content, renames) = seed_content(root)?;
        let message = proto::PersonalSubjectAccessReviewRequest {
            action: Some(seed_action(root)?),
            min_revision,
            content,
        };
        Ok((message, renames))
    };
    let respond = |_, review: &_| {
        (
            StatusCode::CREATED,
            seed_review_response(KIND, review, true),
        )
    };
    review(&api, request, parse, respond).await
}

/// The path's namespace is the review's; a `namespace` in the body, when set, must agree.
fn seed_namespace(root: &Object<'_>, namespace: &str) -> Result<(), BodyError> {
    let declared = root.string("namespace")?;
    if !declared.is_empty() && declared != namespace {
        return Err(BodyError::field(
            "namespace",
            &format!("`{declared}` does not match the namespace of the request `{namespace}`"),
        ));
    }
    Ok(())
}

pub(super) async fn seed_local_subject_access_review(
    State(api): State<HttpApi>,
    Path(namespace): Namespace,
    request: Request,
) -> Response {
    const KIND: &str = "LocalSubjectAccessReview";
    let parse = |root: &Object<'_>, min_revision| {
        check_seed_type_meta(root, KIND)?;
        seed_namespace(root, &namespace)?;
        let (content, renames) = seed_content(root)?;
        let request = proto::SubjectAccessReviewRequest {
            content,
            ..seed_review_request(root, min_revision)?
        };
        Ok((local_review(namespace, request), renames))
    };
    let respond = |_, review: &_| {
        (
            StatusCode::CREATED,
            seed_review_response(KIND, review, true),
        )
    };
    review(&api, request, parse, respond).await
}

pub(super) async fn seed_resource_access_review(
    State(api): State<HttpApi>,
    request: Request,
) -> Response {
    const KIND: &str = "ResourceAccessReview";
    let parse = |root: &Object<'_>, min_revision| {
        check_seed_type_meta(root, KIND)?;
        let (content, renames) = seed_content(root)?;
        let message = proto::ResourceAccessReviewRequest {
            action: Some(seed_action(root)?),
            min_revision,
            content,
        };
        Ok((message, renames))
    };
    let respond = |_, review: &_| (StatusCode::CREATED, seed_resource_response(KIND, review));
    review(&api, request, parse, respond).await
}

pub(super) async fn seed_local_resource_access_review(
    State(api): State<HttpApi>,
    Path(namespace): Namespace,
    request: Request,
) -> Response {
    const KIND: &str = "LocalResourceAccessReview";
    let parse = |root: &Object<'_>, min_revision| {
        check_seed_type_meta(root, KIND)?;
        seed_namespace(root, &namespace)?;
        let (content, renames) = seed_content(root)?;
        let message = proto::LocalResourceAccessReviewRequest {
            namespace,
            action: Some(seed_action(root)?),
            min_revision,
            content,
        };
        Ok((message, renames))
    };
    let respond = |_, review: &_| (StatusCode::CREATED, seed_resource_response(KIND, review));
    review(&api, request, parse, respond).await
}
