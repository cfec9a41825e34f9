//! The OpenID AuthZEN Authorization API 1.0 (docs/authzen.md), on the HTTP listener: the
//! Access Evaluation and Evaluations APIs (§6, §7), the three Search APIs (§8) and the PDP
//! metadata document (§10). Conversion only: each endpoint reads its document (`wire`), maps
//! it to the request a SubjectAccessReview asks (`mapping`), and is served through
//! [`GrpcApi::serve`] — authentication, deadline, admission on one snapshot and the privilege
//! table, exactly as every review — by one verb of the admitted call. What the answers say
//! beyond the specification (reasons, revision, completeness) is written here; page tokens
//! are sealed and opened by `page_token`, and the metadata's base URL is chosen by `metadata`.

mod mapping;
mod metadata;
mod page_token;
mod wire;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::{get, post};
use http::{HeaderMap, HeaderName, StatusCode};
use serde_json::{json, Map, Value};
use tonic::metadata::MetadataMap;

use super::document::{media_type, parse_document, read_body, BodyError, Object};
use super::{status, HttpApi};
use crate::api::error::{ApiError, Invalid, Result};
use crate::api::grpc::Review;
use crate::api::limits::{ContentLimits, MAX_BATCH};
use crate::engine::search::{Found, SubjectKind};
use crate::engine::Response as Decision;
use crate::request;
use crate::serving::{Call, Privilege, Refusal, WithContent};
use crate::telemetry::metrics::DecisionApi;
use crate::transport::ConnectionInfo;
use mapping::Id;
pub use metadata::BaseUrl;
use page_token::Cursor;
pub use page_token::{KeyError, PageTokenKey};
use wire::{ActionEntity, Options, PageRequest, Parts, Semantic};

const EVALUATION: &str = "/access/v1/evaluation";
const EVALUATIONS: &str = "/access/v1/evaluations";
const SEARCH_SUBJECT: &str = "/access/v1/search/subject";
const SEARCH_ACTION: &str = "/access/v1/search/action";
const SEARCH_RESOURCE: &str = "/access/v1/search/resource";
const METADATA: &str = "/.well-known/authzen-configuration";

/// §11.1.3: a request's identifier, echoed on its answer.
static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// `min_revision` as a header (docs/authzen.md §6), as gRPC's field means it.
static MIN_REVISION: HeaderName = HeaderName::from_static("x-authzd-min-revision");

/// What the AuthZEN endpoints are configured with (`serve`'s AuthZEN flags, docs/authzen.md
/// §1 and §5).
#[derive(Debug)]
pub struct AuthzenConfig {
    /// `--authzen-base-url`; without it the metadata names the listener's own address.
    pub base_url: Option<BaseUrl>,
    /// The key page tokens are sealed with: random per process, or
    /// `--authzen-page-token-key-file`'s.
    pub page_tokens: PageTokenKey,
}

pub(super) fn routes() -> axum::Router<HttpApi> {
    axum::Router::new()
        .route(EVALUATION, post(evaluation))
        .route(EVALUATIONS, post(evaluations))
        .route(SEARCH_SUBJECT, post(search_subject))
        .route(SEARCH_ACTION, post(search_action))
        .route(SEARCH_RESOURCE, post(search_resource))
        .route(METADATA, get(metadata))
}

// --- The endpoints -----------------------------------------------------------------------------

async fn evaluation(State(api): State<HttpApi>, request: Request) -> Response {
    serve(&api, request, |root, min_revision| {
        EvaluationsCall::read(root, min_revision, false)
    })
    .await
}

async fn evaluations(State(api): State<HttpApi>, request: Request) -> Response {
    serve(&api, request, |root, min_revision| {
        EvaluationsCall::read(root, min_revision, true)
    })
    .await
}

async fn search_subject(State(api): State<HttpApi>, request: Request) -> Response {
    search(api, request, Searched::Subject).await
}

async fn search_action(State(api): State<HttpApi>, request: Request) -> Response {
    search(api, request, Searched::Action).await
}

async fn search_resource(State(api): State<HttpApi>, request: Request) -> Response {
    search(api, request, Searched::Resource).await
}

async fn search(api: HttpApi, request: Request, searched: Searched) -> Response {
    let config = Arc::clone(&api.authzen);
    serve(&api, request, |root, min_revision| {
        SearchCall::read(root, min_revision, searched, config)
    })
    .await
}

/// §10: the endpoints served, under this server's base URL ([`metadata::base_url`]: the
/// configured one, or the listener's address; never the request's `Host`). Public, as
/// discovery documents are: it says nothing about the policy.
async fn metadata(State(api): State<HttpApi>, request: Request) -> Response {
    let headers = request.headers();
    let connection = request
        .extensions()
        .get::<Arc<ConnectionInfo>>()
        .map(|info| &**info);
    let base = metadata::base_url(api.authzen.base_url.as_ref(), connection, api.https);
    let document = json!({
        "policy_decision_point": base,
        "access_evaluation_endpoint": format!("{base}{EVALUATION}"),
        "access_evaluations_endpoint": format!("{base}{EVALUATIONS}"),
        "search_subject_endpoint": format!("{base}{SEARCH_SUBJECT}"),
        "search_action_endpoint": format!("{base}{SEARCH_ACTION}"),
        "search_resource_endpoint": format!("{base}{SEARCH_RESOURCE}"),
    });
    let mut response = status::json_response(StatusCode::OK, &document);
    echo_request_id(headers, &mut response);
    response
}

/// What every endpoint does: read the document (JSON only, §11.1), parse it into the call,
/// serve it as every review is served, and answer 200 with the call's document — or the
/// refusal, its status from the one HTTP mapping ([`status::refusal_answer`]) and its body
/// an AuthZEN error (docs/authzen.md §7). The request's `X-Request-ID` is echoed either way.
async fn serve<R>(
    api: &HttpApi,
    request: Request,
    parse: impl FnOnce(&Object<'_>, u64) -> Result<R>,
) -> Response
where
    R: Review,
    R::Reply: Answer,
{
    let request_id = request.headers().get(&REQUEST_ID).cloned();
    let answered = async {
        let (parts, body) = request.into_parts();
        let min_revision = header_min_revision(&parts.headers)?;
        json_only(&parts.headers)?;
        let bytes = read_body(&parts.headers, body).await?;
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'{') {
            return Err(ApiError::Malformed(
                "the body must be a JSON object (AuthZEN 1.0 §11.1.1)".into(),
            ));
        }
        let document = parse_document(&bytes)?;
        let message = parse(&Object::root(&document)?, min_revision)?;
        let grpc = tonic::Request::from_parts(
            MetadataMap::from_headers(parts.headers),
            parts.extensions,
            message,
        );
        let reply = api.grpc.serve(grpc).await?;
        Ok::<_, ApiError>(reply.document())
    }
    .await;
    let mut response = match answered {
        Ok(document) => status::json_response(StatusCode::OK, &document),
        Err(error) => {
            let (code, _) = status::refusal_answer(&error);
            status::json_response(code, &json!({ "error": error_object(&error) }))
        }
    };
    if let Some(id) = request_id {
        response.headers_mut().insert(REQUEST_ID.clone(), id);
    }
    response
}

fn echo_request_id(headers: &HeaderMap, response: &mut Response) {
    if let Some(id) = headers.get(&REQUEST_ID) {
        response
            .headers_mut()
            .insert(REQUEST_ID.clone(), id.clone());
    }
}

/// §11.1: requests are `application/json` (a `+json` type too); anything else is a bad
/// request (400, as the certification scenario asks), not 415.
fn json_only(headers: &HeaderMap) -> Result<()> {
    let declared = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(media_type)
        .unwrap_or_default();
    if declared == "application/json" || declared.ends_with("+json") {
        return Ok(());
    }
    Err(ApiError::Malformed(format!(
        "the Content-Type must be application/json (AuthZEN 1.0 §11.1), not `{declared}`"
    )))
}

fn header_min_revision(headers: &HeaderMap) -> Result<u64> {
    let Some(value) = headers.get(&MIN_REVISION) else {
        return Ok(0);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| {
            ApiError::invalid(
                "X-Authzd-Min-Revision",
                Invalid::Other("must be a policy revision number".into()),
            )
        })
}

/// An error as AuthZEN answers carry one (the shape of the specification's §7.2.1
/// example): its HTTP status, its message and, when it is one field's, the field.
fn error_object(error: &ApiError) -> Value {
    let (code, _) = status::refusal_answer(error);
    let mut object = json!({
        "status": code.as_u16(),
        "message": crate::api::error::bounded_message(error.to_string()),
    });
    if let Some((field, _)) = error.field() {
        object["field"] = Value::String(field.to_string());
    }
    object
}

/// A reply as the AuthZEN document answering it.
trait Answer {
    fn document(&self) -> Value;
}

// --- Evaluation and Evaluations ----------------------------------------------------------------

/// One evaluation, mapped: the request, what it carries, and where its resource's properties
/// are in the document (a content error is named there).
type Mapped = (request::Request, Option<request::Content>, String);

/// The Access Evaluation API (one item, `batch` false) or the Access Evaluations API: items
/// with the top-level entities as defaults, and `options`.
pub struct EvaluationsCall {
    /// Each item's entities, or why it does not read (answered in place, as an item missing
    /// a field is).
    items: Vec<std::result::Result<Parts, BodyError>>,
    defaults: Parts,
    /// An `evaluations` array with items was sent: the answer is `{"evaluations": [...]}`
    /// and an item in error is answered in place (§7.2.1), not refused.
    batch: bool,
    options: Options,
    min_revision: u64,
}

impl EvaluationsCall {
    fn read(root: &Object<'_>, header_min_revision: u64, evaluations: bool) -> Result<Self> {
        let defaults = Parts::read(root)?;
        let options = Options::read(root)?;
        let items = if evaluations {
            root.objects("evaluations")?
        } else {
            Vec::new()
        };
        if items.len() > MAX_BATCH {
            return Err(ApiError::invalid(
                "evaluations",
                Invalid::TooMany {
                    count: items.len(),
                    max: MAX_BATCH,
                },
            ));
        }
        let min_revision = wire::min_revision(defaults.context.as_ref())?.max(header_min_revision);
        let batch = !items.is_empty();
        let items = if batch {
            items.iter().map(Parts::read).collect()
        } else {
            // No items (§7.1: absent or empty): the top-level entities are the one evaluation.
            vec![Ok(Parts::default())]
        };
        Ok(EvaluationsCall {
            items,
            defaults,
            batch,
            options,
            min_revision,
        })
    }
}

/// One item of an evaluations call, its defaults filled, mapped to the request it asks.
fn map_item(
    parts: std::result::Result<Parts, BodyError>,
    defaults: &Parts,
    at: &str,
    limits: &ContentLimits,
) -> Result<Mapped> {
    let parts = parts?.or(defaults);
    let subject = parts.subject(at)?;
    let action = parts.action(at)?;
    let resource = parts.resource(at)?;
    let user = mapping::subject(subject)?;
    let (action, content) = mapping::target(action, resource, Id::Required, limits)?;
    let content = mapping::with_context(content, parts.context.as_ref());
    let properties = format!("{}.properties", resource.path);
    Ok((request::Request { user, action }, content, properties))
}

pub struct EvaluationsAsked {
    items: Vec<Result<Mapped>>,
    batch: bool,
    options: Options,
}

pub struct EvaluationsReply {
    answers: Vec<Result<Arc<Decision>>>,
    batch: bool,
    reasons: bool,
    revision: u64,
}

impl Review for EvaluationsCall {
    type Asked = EvaluationsAsked;
    type Reply = EvaluationsReply;

    fn convert(self, limits: &ContentLimits) -> Result<(Self::Asked, u64)> {
        let EvaluationsCall {
            items,
            defaults,
            batch,
            options,
            min_revision,
        } = self;
        let items: Vec<Result<Mapped>> = items
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                let at = if batch {
                    format!("evaluations[{i}].")
                } else {
                    String::new()
                };
                map_item(item, &defaults, &at, limits)
            })
            .collect();
        // A single evaluation that does not map is the request's error (§11.1.1: 400).
        let items = if batch {
            items
        } else {
            let single = items.into_iter().next().ok_or_else(|| {
                ApiError::invalid("subject", Invalid::Other("is required".into()))
            })?;
            vec![Ok(single?)]
        };
        Ok((
            EvaluationsAsked {
                items,
                batch,
                options,
            },
            min_revision,
        ))
    }

    fn privilege(_: &Self::Asked) -> Privilege<'_> {
        Privilege::SUBJECT_ACCESS_REVIEW
    }

    async fn answer(call: &Call<'_>, asked: Self::Asked) -> Result<Self::Reply> {
        let EvaluationsAsked {
            items,
            batch,
            options,
        } = asked;
        let api = if batch {
            DecisionApi::AuthzenEvaluations
        } else {
            DecisionApi::AuthzenEvaluation
        };
        let mut answers = Vec::with_capacity(items.len());
        // All from the call's one snapshot, in order, so a short-circuit (§7.1.2.1) stops
        // at the same item whatever runs beside it.
        for item in items {
            let answer = match item {
                Err(error) => Err(error),
                Ok((request, content, properties)) => {
                    let question = WithContent(&request, content.as_ref());
                    match call.decide(api, &question).await {
                        Ok(decided) => Ok(decided.response),
                        // Content a rule cannot read is this item's error, named in the
                        // document; any other refusal (fenced) is the whole call's.
                        Err(refusal @ Refusal::Content(_)) if batch => {
                            let renames = [("content.object", properties.as_str())];
                            Err(ApiError::from(refusal).renamed(&renames))
                        }
                        Err(refusal) => {
                            let renames = [("content.object", properties.as_str())];
                            return Err(ApiError::from(refusal).renamed(&renames));
                        }
                    }
                }
            };
            let allowed = matches!(&answer, Ok(response) if response.allowed());
            answers.push(answer);
            match options.semantic {
                Semantic::DenyOnFirstDeny if !allowed => break,
                Semantic::PermitOnFirstPermit if allowed => break,
                _ => {}
            }
        }
        Ok(EvaluationsReply {
            answers,
            batch,
            reasons: options.reasons,
            revision: call.revision(),
        })
    }
}

impl Answer for EvaluationsReply {
    fn document(&self) -> Value {
        let decisions: Vec<Value> = self
            .answers
            .iter()
            .map(|answer| match answer {
                Ok(response) => decision(response, self.reasons.then_some(self.revision)),
                Err(error) => json!({
                    "decision": false,
                    "context": {"error": error_object(error)},
                }),
            })
            .collect();
        if self.batch {
            json!({ "evaluations": decisions })
        } else {
            decisions
                .into_iter()
                .next()
                .unwrap_or(json!({"decision": false}))
        }
    }
}

/// A decision (§5.5): `decision` alone, or with why when asked (docs/authzen.md §3):
/// authzd's three-valued answer, the deciding rules, the reason, errors and the revision.
fn decision(response: &Decision, reasons: Option<u64>) -> Value {
    let mut answer = json!({ "decision": response.allowed() });
    if let Some(revision) = reasons {
        let rules = |rules: &[crate::engine::RuleRef]| -> Vec<String> {
            rules.iter().map(ToString::to_string).collect()
        };
        let mut context = json!({
            "authzd_decision": response.decision.to_string(),
            "reason": response.reason,
            "allowed_by": rules(&response.allowed_by),
            "denied_by": rules(&response.denied_by),
            "revision": revision,
        });
        if !response.errors.is_empty() {
            context["evaluation_errors"] = json!(response.errors);
        }
        answer["context"] = context;
    }
    answer
}

// --- Search ------------------------------------------------------------------------------------

/// Which Search API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Searched {
    Subject,
    Action,
    Resource,
}

impl Searched {
    fn endpoint(self) -> &'static str {
        match self {
            Searched::Subject => SEARCH_SUBJECT,
            Searched::Action => SEARCH_ACTION,
            Searched::Resource => SEARCH_RESOURCE,
        }
    }
}

/// A search request, read: its entities (not yet mapped), its page and options, and the
/// canonical text of everything a later page must repeat (§9: "MUST be identical"), which its
/// page tokens are sealed over.
pub struct SearchCall {
    searched: Searched,
    parts: Parts,
    page: PageRequest,
    options: Options,
    min_revision: u64,
    query: String,
    config: Arc<AuthzenConfig>,
}

impl SearchCall {
    fn read(
        root: &Object<'_>,
        header_min_revision: u64,
        searched: Searched,
        config: Arc<AuthzenConfig>,
    ) -> Result<Self> {
        let parts = Parts::read(root)?;
        let page = PageRequest::read(root)?;
        let options = Options::read(root)?;
        let min_revision = wire::min_revision(parts.context.as_ref())?.max(header_min_revision);
        let mut query = root.map.clone();
        query.remove("page");
        query.insert("limit".into(), json!(page.limit));
        let mut text = searched.endpoint().to_string();
        wire::canonical(&Value::Object(query), &mut text);
        Ok(SearchCall {
            searched,
            parts,
            page,
            options,
            min_revision,
            query: text,
            config,
        })
    }
}

pub struct SearchAsked {
    searched: Searched,
    /// The subject kind listed (subject search).
    kind: SubjectKind,
    /// The type the results are written with (subject or resource search).
    result_type: String,
    /// The namespace resource results are in, written in their properties.
    namespace: String,
    /// The subject whose actions or resources are searched.
    user: Option<request::UserInfo>,
    action: request::Action,
    content: Option<request::Content>,
    limit: usize,
    /// Where this page starts, when it continues a search.
    cursor: Option<Cursor>,
    /// The search's canonical text, and the key, the next page's token is sealed with.
    query: String,
    config: Arc<AuthzenConfig>,
    reasons: bool,
}

pub struct SearchReply {
    found: Found,
    asked: SearchAsked,
    revision: u64,
}

impl Review for SearchCall {
    type Asked = SearchAsked;
    type Reply = SearchReply;

    fn convert(self, limits: &ContentLimits) -> Result<(Self::Asked, u64)> {
        let SearchCall {
            searched,
            parts,
            page,
            options,
            min_revision,
            query,
            config,
        } = self;
        // A token sealed by another key, for another query (§9: every field but page.token
        // as in the first request) or with a field changed: one answer for all, so that a
        // forger learns nothing of what failed.
        let cursor = match &page.token {
            None => None,
            Some(token) => Some(Cursor::open(token, &config.page_tokens, &query).ok_or_else(
                || ApiError::invalid("page.token", Invalid::Other("invalid page token".into())),
            )?),
        };
        let resource = parts.resource("")?;
        // The action search has no action (§8.6.1): its verb is what is searched for.
        let any_verb = ActionEntity {
            path: "action".into(),
            name: "get".into(),
        };
        let (verb, id, user) = match searched {
            Searched::Subject => (parts.action("")?, Id::Required, None),
            Searched::Action => (&any_verb, Id::Required, Some(parts.subject("")?)),
            Searched::Resource => (parts.action("")?, Id::Ignored, Some(parts.subject("")?)),
        };
        let user = user.map(mapping::subject).transpose()?;
        let (action, content) = mapping::target(verb, resource, id, limits)?;
        let content = mapping::with_context(content, parts.context.as_ref());
        let kind = match parts.subject("")?.kind.as_str() {
            mapping::GROUP => SubjectKind::Group,
            mapping::SERVICE_ACCOUNT => SubjectKind::ServiceAccount,
            _ => SubjectKind::User,
        };
        let result_type = match searched {
            Searched::Subject => parts.subject("")?.kind.clone(),
            _ => resource.kind.clone(),
        };
        let asked = SearchAsked {
            searched,
            kind,
            result_type,
            namespace: action.namespace().to_string(),
            user,
            action,
            content,
            limit: page.limit,
            cursor,
            query,
            config,
            reasons: options.reasons,
        };
        Ok((asked, min_revision))
    }

    /// Subject search is who-can (ResourceAccessReview's privilege); action and resource
    /// search are a rules review of the subject (SubjectRulesReview's: SubjectAccessReview's).
    fn privilege(asked: &Self::Asked) -> Privilege<'_> {
        match asked.searched {
            Searched::Subject => Privilege::RESOURCE_ACCESS_REVIEW,
            Searched::Action | Searched::Resource => Privilege::SUBJECT_ACCESS_REVIEW,
        }
    }

    fn pinned(asked: &Self::Asked) -> Option<u64> {
        asked.cursor.map(|cursor| cursor.revision)
    }

    async fn answer(call: &Call<'_>, asked: Self::Asked) -> Result<Self::Reply> {
        let content = asked.content.as_ref();
        let user = asked.user.clone().unwrap_or_default();
        let found = match asked.searched {
            Searched::Subject => call.search_subjects(asked.kind, &asked.action, content),
            Searched::Action => call.search_actions(&user, &asked.action, content),
            Searched::Resource => call.search_resources(&user, &asked.action, content),
        }
        .map_err(|refusal| {
            ApiError::from(refusal).renamed(&[("content.object", "resource.properties")])
        })?;
        Ok(SearchReply {
            found,
            revision: call.revision(),
            asked,
        })
    }
}

impl Answer for SearchReply {
    /// §8.3: `page` first, then `context`, then `results`. The page is a slice of the
    /// sorted results of the pinned revision, so pages never overlap or skip.
    fn document(&self) -> Value {
        let asked = &self.asked;
        let total = self.found.items.len();
        let start = asked.cursor.map_or(0, |c| c.offset).min(total);
        let end = start.saturating_add(asked.limit).min(total);
        let next_token = if end < total {
            Cursor {
                revision: self.revision,
                offset: end,
            }
            .seal(&asked.config.page_tokens, &asked.query)
        } else {
            String::new()
        };
        let results: Vec<Value> = self.found.items[start..end]
            .iter()
            .map(|item| self.result(item))
            .collect();
        let mut context = json!({ "complete": self.found.complete() });
        if !self.found.complete() {
            context["incomplete"] = json!(self.found.incomplete);
        }
        if !self.found.errors.is_empty() {
            context["evaluation_errors"] = json!(self.found.errors);
        }
        if asked.reasons {
            context["revision"] = json!(self.revision);
        }
        let mut document = Map::new();
        document.insert(
            "page".into(),
            json!({"next_token": next_token, "count": results.len(), "total": total}),
        );
        document.insert("context".into(), context);
        document.insert("results".into(), Value::Array(results));
        Value::Object(document)
    }
}

impl SearchReply {
    fn result(&self, item: &str) -> Value {
        let asked = &self.asked;
        match asked.searched {
            Searched::Action => json!({ "name": item }),
            Searched::Subject => {
                let id = match asked.kind {
                    SubjectKind::ServiceAccount => mapping::service_account_id(item),
                    _ => item.into(),
                };
                json!({ "type": asked.result_type, "id": id })
            }
            Searched::Resource => {
                let mut result = json!({ "type": asked.result_type, "id": item });
                if !asked.namespace.is_empty() {
                    result["properties"] = json!({ "namespace": asked.namespace });
                }
                result
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_is_read() {
        let mut headers = HeaderMap::new();
        assert!(json_only(&headers).is_err());
        for (value, ok) in [
            ("application/json", true),
            ("application/json; charset=utf-8", true),
            ("application/authzen+json", true),
            ("text/plain", false),
            ("application/x-www-form-urlencoded", false),
        ] {
            headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static(value),
            );
            assert_eq!(json_only(&headers).is_ok(), ok, "{value}");
        }
    }

    /// Bytes of a good document, mutated at random, read and converted by every endpoint's
    /// steps: never a panic, and every refusal a bad request (never an internal error).
    mod hostile {
        use super::*;
        use proptest::prelude::*;

        const GOOD: &str = r#"{"subject": {"type": "serviceaccount", "id": "ns:sa", "properties": {"groups": ["g"]}}, "action": {"name": "get"}, "resource": {"type": "deployments.apps/scale", "id": "d", "properties": {"namespace": "n", "ownerID": "x"}}, "context": {"min_revision": 1, "purpose": "audit"}, "options": {"evaluations_semantic": "deny_on_first_deny", "reasons": true}, "page": {"limit": 2, "token": "YXV0aHpkMS4xLjIuMDAwMDAwMDAwMDAwMDAwMA"}, "evaluations": [{"resource": {"type": "route", "id": "/x"}}, {}]}"#;

        fn read_all(bytes: &[u8]) -> Vec<ApiError> {
            let mut refusals = Vec::new();
            let Ok(document) = parse_document(bytes) else {
                return refusals;
            };
            let Ok(root) = Object::root(&document) else {
                return refusals;
            };
            let limits = ContentLimits::default();
            for batch in [false, true] {
                match EvaluationsCall::read(&root, 0, batch).and_then(|c| c.convert(&limits)) {
                    Ok((asked, _)) => {
                        refusals.extend(asked.items.into_iter().filter_map(Result::err))
                    }
                    Err(error) => refusals.push(error),
                }
            }
            let config = Arc::new(AuthzenConfig {
                base_url: None,
                page_tokens: PageTokenKey::random().unwrap(),
            });
            for searched in [Searched::Subject, Searched::Action, Searched::Resource] {
                if let Err(error) = SearchCall::read(&root, 0, searched, Arc::clone(&config))
                    .and_then(|c| c.convert(&limits))
                {
                    refusals.push(error);
                }
            }
            refusals
        }

        #[test]
        fn the_good_document_reads() {
            // Only the search token (issued for another query) is refused.
            let refusals = read_all(GOOD.as_bytes());
            assert!(
                refusals
                    .iter()
                    .all(|e| e.field().is_some_and(|(f, _)| f == "page.token")),
                "{refusals:?}"
            );
        }

        proptest! {
            #[test]
            fn mutated_documents_are_refused_as_bad_requests(
                edits in proptest::collection::vec((0usize..GOOD.len(), any::<u8>()), 1..8),
            ) {
                let mut bytes = GOOD.as_bytes().to_vec();
                for (at, byte) in edits {
                    bytes[at] = byte;
                }
                for error in read_all(&bytes) {
                    prop_assert_eq!(error.code(), tonic::Code::InvalidArgument, "{}", error);
                }
            }
        }
    }
}
