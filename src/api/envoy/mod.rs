//! `envoy.service.auth.v3.Authorization` (Envoy's ext_authz filter, gRPC v3): an adapter only.
//!
//! Each `Check`: identify the caller (Envoy), turn the HTTP request Envoy describes into an engine
//! request (subject from the mesh's authentication headers or the peer principal; action from
//! the path and method), ask the serving core's call for its decision as the `Authorizer`
//! service does, and convert the answer into an Envoy `CheckResponse`. The serving core
//! decides; nothing here does.
//!
//! Answers, as Envoy reads them (`CheckResponse.status` decides; `http_response` shapes it):
//! * allowed: status `OK`, `OkHttpResponse` (optionally `x-authzd-allowed-by` added upstream);
//! * denied or no opinion: `PERMISSION_DENIED`, HTTP 403, reason in `x-authzd-reason` and body;
//! * no subject: `UNAUTHENTICATED`, HTTP 401 (the mesh did not authenticate the request, which
//!   is what 401 means; 403 would claim the policy was asked about someone);
//! * a request authzd cannot read (no HTTP attributes, oversized headers; with
//!   `--envoy-body-as-object`, a body over `--max-content-bytes`, a partial body, or one a rule
//!   needs and cannot read as JSON): `INVALID_ARGUMENT`, HTTP 400, with the same reason header.
//!
//! Before the first policy compiles, `Check` fails with `UNAVAILABLE` like every other RPC, so
//! Envoy applies its own `failure_mode_allow` / `status_on_error` (deny by default).
//!
//! The path templates and the method-to-verb mapping that make a path a resource request are
//! [`path_template`].

pub mod path_template;

use std::collections::HashMap;
use std::sync::Arc;

use envoy_types::ext_authz::v3::pb::{
    Authorization, AuthorizationServer, CheckRequest, CheckResponse, HeaderAppendAction,
    HttpStatusCode,
};
use envoy_types::ext_authz::v3::{
    CheckResponseExt, DeniedHttpResponseBuilder, OkHttpResponseBuilder,
};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::HttpRequest;
use tonic::{Code, Request, Response, Status};

use crate::api::authn::{self, Authenticator};
use crate::api::convert::{self, WireSubject};
use crate::api::error::{ApiError, Invalid, Result};
use crate::api::limits::ContentLimits;
use crate::proto;
use crate::request;
use crate::request::UserInfo;
use crate::serving::{Call, Privilege, Refusal, ServingState, WithContent};
use crate::telemetry::metrics::DecisionApi;

use path_template::resource_verb;
pub use path_template::PathTemplate;

/// The response header carrying the reason of a refusal (and the body repeats it).
pub const REASON_HEADER: &str = "x-authzd-reason";
/// The header added to an allowed request, naming the rule that allowed it (when enabled).
pub const ALLOWED_BY_HEADER: &str = "x-authzd-allowed-by";
/// The header Envoy adds to a check whose body it cut at `with_request_body.max_request_bytes`
/// (`allow_partial_message: true`).
pub const PARTIAL_BODY_HEADER: &str = "x-envoy-auth-partial-body";

/// Where the body is in a `CheckRequest`, for refusals that name it: as text, or as bytes
/// (`with_request_body.pack_as_bytes`).
const BODY_FIELD: &str = "attributes.request.http.body";
const RAW_BODY_FIELD: &str = "attributes.request.http.raw_body";

/// Where the subject of a checked request comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubjectSource {
    /// Request headers set by the mesh's authentication, named as Kubernetes' request-header
    /// authentication names them (`X-Remote-User`, `X-Remote-Group`, `X-Remote-Extra-*`).
    /// Names are lower-case, as Envoy reports them.
    Headers {
        user: String,
        group: String,
        extra_prefix: Option<String>,
    },
    /// The authenticated peer Envoy reports (`attributes.source.principal`, e.g. the SPIFFE ID
    /// or certificate subject of an mTLS client), as the user name, with no groups.
    PeerPrincipal,
}

/// How `Check` reads a request. Validated at startup by [`EnvoyConfig::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvoyConfig {
    pub subject: SubjectSource,
    /// Tried in order; the first that matches makes the request a resource request. A path no
    /// template matches is a non-resource request.
    pub templates: Vec<PathTemplate>,
    /// Add [`ALLOWED_BY_HEADER`] to allowed requests (overwriting any the client sent).
    pub allowed_by_header: bool,
    /// The body of a POST, PUT or PATCH (Envoy's `with_request_body`) is the request's
    /// `content.object`, for rules over object content.
    pub body_as_object: bool,
}

impl Default for EnvoyConfig {
    fn default() -> Self {
        Self {
            subject: SubjectSource::Headers {
                user: "x-remote-user".into(),
                group: "x-remote-group".into(),
                extra_prefix: None,
            },
            templates: Vec::new(),
            allowed_by_header: false,
            body_as_object: false,
        }
    }
}

/// `--envoy-subject-from`.
pub const SUBJECT_FROM_HEADERS: &str = "headers";
pub const SUBJECT_FROM_PEER_PRINCIPAL: &str = "peer-principal";

impl EnvoyConfig {
    /// Validates the flags: header names must be HTTP tokens (stored lower-case); the subject
    /// source is `headers` or `peer-principal`.
    pub fn new(
        subject_from: &str,
        user_header: &str,
        group_header: &str,
        extra_prefix: Option<&str>,
        templates: Vec<PathTemplate>,
        allowed_by_header: bool,
        body_as_object: bool,
    ) -> Result<Self, String> {
        let subject = match subject_from {
            SUBJECT_FROM_HEADERS => SubjectSource::Headers {
                user: header_name("--envoy-user-header", user_header)?,
                group: header_name("--envoy-group-header", group_header)?,
                extra_prefix: extra_prefix
                    .map(|p| header_name("--envoy-extra-header-prefix", p))
                    .transpose()?,
            },
            SUBJECT_FROM_PEER_PRINCIPAL => SubjectSource::PeerPrincipal,
            other => {
                return Err(format!(
                    "--envoy-subject-from: `{other}` is not one of `{SUBJECT_FROM_HEADERS}`, \
                     `{SUBJECT_FROM_PEER_PRINCIPAL}`"
                ))
            }
        };
        Ok(Self {
            subject,
            templates,
            allowed_by_header,
            body_as_object,
        })
    }
}

/// A header name as Envoy reports it (lower case), or why it cannot be one.
fn header_name(flag: &str, name: &str) -> Result<String, String> {
    let is_token_char = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(is_token_char) {
        return Err(format!("{flag}: `{name}` is not an HTTP header name"));
    }
    Ok(name.to_ascii_lowercase())
}

/// The service. Cheap to clone.
#[derive(Clone)]
pub struct EnvoyApi {
    state: Arc<ServingState>,
    authenticator: Arc<dyn Authenticator>,
    config: Arc<EnvoyConfig>,
    content_limits: ContentLimits,
}

impl EnvoyApi {
    pub fn new(
        state: Arc<ServingState>,
        authenticator: Arc<dyn Authenticator>,
        config: EnvoyConfig,
    ) -> Self {
        Self {
            state,
            authenticator,
            config: Arc::new(config),
            content_limits: ContentLimits::default(),
        }
    }

    /// Bounds the body taken as the object (`--max-content-bytes`).
    #[must_use]
    pub fn with_content_limits(mut self, limits: ContentLimits) -> Self {
        self.content_limits = limits;
        self
    }

    /// The tonic service, with the request size limit applied.
    pub fn service(self, max_request_bytes: usize) -> AuthorizationServer<Self> {
        AuthorizationServer::new(self).max_decoding_message_size(max_request_bytes)
    }

    /// Who is calling `Check` (Envoy itself, not the HTTP client it asks about), admitted by
    /// the serving core: the single place the caller is identified. Envoy needs the privilege
    /// `Authorize` needs (docs/security.md §2: the cluster-wide review privilege), and the
    /// check is answered from the snapshot that admitted it.
    async fn admit<T>(&self, request: &Request<T>) -> Result<Call<'_>> {
        let caller = authn::identify(&*self.authenticator, request)?;
        let call = self
            .state
            .admit(caller, Privilege::SUBJECT_ACCESS_REVIEW, 0)
            .await?;
        Ok(call)
    }

    /// The engine request the checked HTTP request stands for.
    fn engine_request(&self, check: &CheckRequest) -> Result<request::Request> {
        let attributes = check.attributes.as_ref();
        let http = attributes
            .and_then(|a| a.request.as_ref())
            .and_then(|r| r.http.as_ref())
            .ok_or_else(|| {
                ApiError::Malformed("the check carries no HTTP request attributes".into())
            })?;
        let user = match &self.config.subject {
            SubjectSource::Headers {
                user,
                group,
                extra_prefix,
            } => subject_from_headers(http, user, group, extra_prefix.as_deref())?,
            SubjectSource::PeerPrincipal => {
                let principal = attributes
                    .and_then(|a| a.source.as_ref())
                    .map(|s| s.principal.clone())
                    .unwrap_or_default();
                if principal.is_empty() {
                    return Err(ApiError::Unauthenticated(
                        "no authenticated peer principal: the request did not come over an \
                         authenticated (mTLS) connection"
                            .into(),
                    ));
                }
                validated_subject(principal, Vec::new(), HashMap::new())?
            }
        };
        let action = self.action(http)?;
        Ok(request::Request { user, action })
    }

    /// Path (without query) and method as a resource request when a template matches, else as a
    /// non-resource request; validated as the authz.v1 API validates actions.
    fn action(&self, http: &HttpRequest) -> Result<request::Action> {
        if http.method.is_empty() {
            return Err(ApiError::Malformed("the check names no HTTP method".into()));
        }
        let target = http.path.split('#').next().unwrap_or_default();
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        if path.is_empty() {
            return Err(ApiError::Malformed("the check names no HTTP path".into()));
        }
        let action = match self.config.templates.iter().find_map(|t| t.capture(path)) {
            Some(mut attributes) => {
                attributes.verb = resource_verb(&http.method, !attributes.name.is_empty(), query);
                request::Action::Resource(attributes)
            }
            None => request::Action::NonResource(request::NonResourceAttributes {
                path: path.to_string(),
                verb: http.method.to_ascii_lowercase(),
            }),
        };
        convert::check_action(action.as_borrowed())?;
        Ok(action)
    }

    /// With `--envoy-body-as-object`, the body of a POST, PUT or PATCH as the object acted on
    /// (taken out of the check, not copied), bounded as any object; `None` otherwise, or when
    /// Envoy sent no body. A body Envoy cut short is refused: rules must not read part of an
    /// object as the whole. Also the field that names the body, for refusals.
    fn body_content(
        &self,
        check: &mut CheckRequest,
    ) -> Result<(Option<request::Content>, &'static str)> {
        let http = check
            .attributes
            .as_mut()
            .and_then(|a| a.request.as_mut())
            .and_then(|r| r.http.as_mut());
        let Some(http) = http.filter(|_| self.config.body_as_object) else {
            return Ok((None, BODY_FIELD));
        };
        let method = http.method.as_str();
        if !["POST", "PUT", "PATCH"]
            .iter()
            .any(|m| m.eq_ignore_ascii_case(method))
        {
            return Ok((None, BODY_FIELD));
        }
        let (field, body) = if http.raw_body.is_empty() {
            (BODY_FIELD, std::mem::take(&mut http.body).into_bytes())
        } else {
            (RAW_BODY_FIELD, std::mem::take(&mut http.raw_body))
        };
        if body.is_empty() {
            return Ok((None, field));
        }
        let partial = header_values(http, PARTIAL_BODY_HEADER)
            .iter()
            .any(|v| v.trim().eq_ignore_ascii_case("true"));
        if partial {
            return Err(ApiError::invalid(
                field,
                Invalid::Other(format!(
                    "is only part of the body ({PARTIAL_BODY_HEADER}); configure Envoy's \
                     with_request_body to send whole bodies (allow_partial_message: false)"
                )),
            ));
        }
        let max = self.content_limits.max_object_bytes;
        if body.len() > max {
            let len = body.len();
            return Err(ApiError::invalid(field, Invalid::TooLong { len, max }));
        }
        let mut content = request::Content::default();
        content.object = Some(body);
        Ok((Some(content), field))
    }

    async fn check_one(&self, call: &Call<'_>, mut check: CheckRequest) -> Result<CheckResponse> {
        // What Envoy sent is the client's request: a refusal of it goes back to the client
        // (below), not to Envoy as a failed call.
        let (content, body_field) = match self.body_content(&mut check) {
            Ok(content) => content,
            Err(refusal) => return Ok(refused(&refusal)),
        };
        let request = match self.engine_request(&check) {
            Ok(request) => request,
            Err(refusal) => return Ok(refused(&refusal)),
        };
        let question = WithContent(&request, content.as_ref());
        let decided = match call.decide(DecisionApi::EnvoyCheck, &question).await {
            Ok(decided) => decided,
            // A body a rule needs and cannot read: the client's request is malformed.
            Err(Refusal::Content(unreadable)) => {
                let refusal = ApiError::from(unreadable).renamed(&[("content.object", body_field)]);
                return Ok(refused(&refusal));
            }
            // etcd mode: a fenced replica's allow is a failed call (Envoy's failure mode
            // decides).
            Err(refusal) => return Err(refusal.into()),
        };
        let response = &decided.response;
        if response.allowed() {
            let mut ok = OkHttpResponseBuilder::new();
            if self.config.allowed_by_header {
                if let Some(rule) = response.allowed_by.first() {
                    ok.add_header(
                        ALLOWED_BY_HEADER,
                        header_safe(&rule.to_string()),
                        Some(HeaderAppendAction::OverwriteIfExistsOrAdd),
                        false,
                    );
                }
            } else {
                // The upstream must never take a client-sent copy for authzd's word.
                ok.remove_header(ALLOWED_BY_HEADER);
            }
            let mut answer = CheckResponse::with_status(Status::ok(""));
            answer.set_http_response(ok);
            return Ok(answer);
        }
        let reason = forbidden_reason(&request, &response.reason);
        Ok(refused(&ApiError::PermissionDenied(reason)))
    }
}

/// A refusal Envoy sends to the client: a status for Envoy with the refusal's code, and an
/// HTTP status and the reason (header and body) for the client.
fn refused(refusal: &ApiError) -> CheckResponse {
    let reason = refusal.to_string();
    // The Envoy mapping, chosen once: the client's HTTP status for each refusal's code.
    let code = match refusal.code() {
        Code::Unauthenticated => HttpStatusCode::Unauthorized,
        Code::PermissionDenied => HttpStatusCode::Forbidden,
        _ => HttpStatusCode::BadRequest,
    };
    let status = Status::new(refusal.code(), reason.clone());
    let mut denied = DeniedHttpResponseBuilder::new();
    denied
        .set_http_status(code)
        .add_header(
            REASON_HEADER,
            header_safe(&reason),
            Some(HeaderAppendAction::OverwriteIfExistsOrAdd),
            false,
        )
        .add_header(
            "content-type",
            "text/plain; charset=utf-8",
            Some(HeaderAppendAction::OverwriteIfExistsOrAdd),
            false,
        )
        .set_body(format!("{reason}\n"));
    let mut answer = CheckResponse::with_status(status);
    answer.set_http_response(denied);
    answer
}

/// `user "bob" cannot get path "/admin"` / `... cannot list resource "pods" in namespace
/// "default"`, then the engine's reason when it gave one (the kube-apiserver Forbidden shape).
fn forbidden_reason(request: &request::Request, engine_reason: &str) -> String {
    let who = if request.user.name.is_empty() {
        format!("groups {:?}", request.user.groups)
    } else {
        format!("user {:?}", request.user.name)
    };
    let what = match &request.action {
        request::Action::NonResource(n) => format!("{} path {:?}", n.verb, n.path),
        request::Action::Resource(r) => {
            let mut what = format!("{} resource {:?}", r.verb, r.resource);
            if !r.subresource.is_empty() {
                what.push_str(&format!(" subresource {:?}", r.subresource));
            }
            what.push_str(&format!(" in API group {:?}", r.group));
            if !r.namespace.is_empty() {
                what.push_str(&format!(" in namespace {:?}", r.namespace));
            }
            what
        }
    };
    if engine_reason.is_empty() {
        format!("{who} cannot {what}")
    } else {
        format!("{who} cannot {what}: {engine_reason}")
    }
}

/// A header value can carry neither control characters nor non-ASCII safely.
fn header_safe(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if c.is_ascii() && !c.is_ascii_control() {
                c
            } else {
                ' '
            }
        })
        .collect()
}

/// Every value of header `name`: one per occurrence from the raw header list when Envoy sends
/// it (`encode_raw_headers`), else the one, possibly comma-joined, value of the header map.
fn header_values<'a>(http: &'a HttpRequest, name: &str) -> Vec<std::borrow::Cow<'a, str>> {
    match http.header_map.as_ref().filter(|m| !m.headers.is_empty()) {
        Some(raw) => raw
            .headers
            .iter()
            .filter(|h| h.key.eq_ignore_ascii_case(name))
            .map(|h| {
                if h.raw_value.is_empty() {
                    std::borrow::Cow::Borrowed(h.value.as_str())
                } else {
                    String::from_utf8_lossy(&h.raw_value)
                }
            })
            .collect(),
        None => http
            .headers
            .get(name)
            .map(|v| std::borrow::Cow::Borrowed(v.as_str()))
            .into_iter()
            .collect(),
    }
}

/// Comma-separated values across all occurrences, trimmed, empty ones dropped.
fn list_values(values: &[std::borrow::Cow<'_, str>]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .collect()
}

fn subject_from_headers(
    http: &HttpRequest,
    user_header: &str,
    group_header: &str,
    extra_prefix: Option<&str>,
) -> Result<UserInfo> {
    let users = header_values(http, user_header);
    if users.len() > 1 {
        return Err(ApiError::Malformed(format!(
            "header `{user_header}` appears {} times; a request has one user",
            users.len()
        )));
    }
    let name = users
        .first()
        .map(|u| u.trim().to_string())
        .unwrap_or_default();
    let groups = list_values(&header_values(http, group_header));
    let mut extra: HashMap<String, proto::ExtraValues> = HashMap::new();
    if let Some(prefix) = extra_prefix {
        let keys: Vec<&str> = match http.header_map.as_ref().filter(|m| !m.headers.is_empty()) {
            Some(raw) => raw.headers.iter().map(|h| h.key.as_str()).collect(),
            None => http.headers.keys().map(String::as_str).collect(),
        };
        // `header_values` gathers every occurrence of a name (in any case), so each name is
        // read once: a repeated header must not add its values once per occurrence.
        let mut seen = std::collections::HashSet::new();
        for key in keys {
            let lower = key.to_ascii_lowercase();
            let Some(extra_key) = lower.strip_prefix(prefix).filter(|k| !k.is_empty()) else {
                continue;
            };
            if !seen.insert(lower.clone()) {
                continue;
            }
            let values = list_values(&header_values(http, key));
            extra
                .entry(extra_key.to_string())
                .or_default()
                .values
                .extend(values);
        }
        for values in extra.values_mut() {
            values.values.dedup();
        }
    }
    if name.is_empty() && groups.is_empty() {
        return Err(ApiError::Unauthenticated(format!(
            "no authenticated subject: the request carries neither `{user_header}` nor \
             `{group_header}`"
        )));
    }
    validated_subject(name, groups, extra)
}

/// The same limits as the authz.v1 API (lengths, counts).
fn validated_subject(
    name: String,
    groups: Vec<String>,
    extra: HashMap<String, proto::ExtraValues>,
) -> Result<UserInfo> {
    convert::subject(
        "subject.",
        "name",
        WireSubject {
            name,
            uid: String::new(),
            groups,
            extra,
        },
    )
}

#[tonic::async_trait]
impl Authorization for EnvoyApi {
    async fn check(
        &self,
        request: Request<CheckRequest>,
    ) -> Result<Response<CheckResponse>, Status> {
        let call = self.admit(&request).await?;
        Ok(Response::new(
            self.check_one(&call, request.into_inner()).await?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_are_validated_and_lower_cased() {
        let config = EnvoyConfig::new(
            "headers",
            "X-Auth-User",
            "X-Auth-Groups",
            None,
            vec![],
            false,
            false,
        )
        .unwrap();
        assert_eq!(
            config.subject,
            SubjectSource::Headers {
                user: "x-auth-user".into(),
                group: "x-auth-groups".into(),
                extra_prefix: None
            }
        );
        assert!(
            EnvoyConfig::new("headers", "bad header", "g", None, vec![], false, false).is_err()
        );
        assert!(EnvoyConfig::new("cookies", "u", "g", None, vec![], false, false).is_err());
    }

    #[test]
    fn extra_attributes_come_from_prefixed_headers_once_each() {
        use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
        let raw = |key: &str, value: &str| HeaderValue {
            key: key.into(),
            raw_value: value.as_bytes().to_vec(),
            ..Default::default()
        };
        let http = HttpRequest {
            header_map: Some(HeaderMap {
                headers: vec![
                    raw("x-remote-user", "alice"),
                    // Repeated, and in two spellings of the same name: one key, each value once.
                    raw("x-remote-extra-scopes", "read, write"),
                    raw("X-Remote-Extra-Scopes", "admin"),
                    raw("x-remote-extra-tenant", "acme"),
                    // The bare prefix names no key; an unrelated header is not an attribute.
                    raw("x-remote-extra-", "ignored"),
                    raw("x-remote-extraneous", "ignored"),
                ],
            }),
            ..Default::default()
        };
        let user = subject_from_headers(
            &http,
            "x-remote-user",
            "x-remote-group",
            Some("x-remote-extra-"),
        )
        .unwrap();
        assert_eq!(user.name, "alice");
        let expected: std::collections::BTreeMap<String, Vec<String>> = [
            (
                "scopes".to_string(),
                vec!["read".into(), "write".into(), "admin".into()],
            ),
            ("tenant".to_string(), vec!["acme".into()]),
        ]
        .into_iter()
        .collect();
        assert_eq!(user.extra, expected);

        // Without the flag, no header is an extra attribute.
        let plain = subject_from_headers(&http, "x-remote-user", "x-remote-group", None).unwrap();
        assert!(plain.extra.is_empty());

        // Envoy's plain header map (one value per name) is read the same way.
        let mut http = HttpRequest::default();
        http.headers.insert("x-remote-user".into(), "bob".into());
        http.headers
            .insert("x-remote-extra-scopes".into(), "read,read,write".into());
        let user = subject_from_headers(
            &http,
            "x-remote-user",
            "x-remote-group",
            Some("x-remote-extra-"),
        )
        .unwrap();
        assert_eq!(user.extra["scopes"], ["read", "write"]);
    }

    #[test]
    fn header_values_repeat_or_comma_separate() {
        use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
        let mut http = HttpRequest::default();
        http.headers
            .insert("x-remote-group".into(), "dev, ops,,qa".into());
        assert_eq!(
            list_values(&header_values(&http, "x-remote-group")),
            ["dev", "ops", "qa"]
        );
        http.header_map = Some(HeaderMap {
            headers: ["dev,ops", "qa"]
                .iter()
                .map(|v| HeaderValue {
                    key: "x-remote-group".into(),
                    raw_value: v.as_bytes().to_vec(),
                    ..Default::default()
                })
                .collect(),
        });
        assert_eq!(
            list_values(&header_values(&http, "x-remote-group")),
            ["dev", "ops", "qa"]
        );
    }
}
