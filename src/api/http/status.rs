//! Answers on the HTTP side. Refusals: the adapters' typed error (the same one gRPC callers
//! get as a `tonic::Status`) becomes an HTTP status code and a Kubernetes `Status` object, as
//! kube-apiserver answers errors; [`refusal_answer`] is the one HTTP mapping ([`refusal`]
//! writes it as JSON, for endpoints that always answer JSON). Every answer of a review
//! endpoint, refusals included, is an HTTP status and a JSON document until [`render`] writes
//! it in the media the caller accepts ([`AnswerMedia`]): Kubernetes protobuf when its Accept
//! prefers it and the document's kind has a protobuf form, JSON otherwise.

use axum::body::Body;
use axum::response::Response;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::StatusCode;
use serde_json::{json, Value};
use tonic::Code;

use super::document::media_type;
use super::kube_protobuf;
use crate::api::error::{bounded_message, ApiError};

/// The media an answer is written in, negotiated from the request's Accept header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerMedia {
    Json,
    /// Kubernetes protobuf, as kubectl's auth commands ask first
    /// (`Accept: application/vnd.kubernetes.protobuf,application/json`).
    KubeProtobuf,
}

impl AnswerMedia {
    /// Protobuf when the Accept header ranks it above every JSON type (`application/json`,
    /// `application/*`, `*/*`, a `+json` type): a higher q-value, or the same one and listed
    /// first. JSON otherwise, whatever else is asked for (no answer is refused for its media).
    /// An entry with an `as` parameter asks for a transformation (`as=Table`) authzd does not
    /// make, and is passed over.
    pub fn negotiate(headers: &http::HeaderMap) -> Self {
        // The best (quality, position) of each kind of entry.
        let mut protobuf: Option<(u16, usize)> = None;
        let mut json: Option<(u16, usize)> = None;
        let entries = headers
            .get_all(ACCEPT)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','));
        for (position, entry) in entries.enumerate() {
            let Some(quality) = accept_quality(entry) else {
                continue;
            };
            let media = media_type(entry);
            let best = if media == kube_protobuf::MEDIA_TYPE {
                &mut protobuf
            } else if matches!(media.as_str(), "application/json" | "application/*" | "*/*")
                || media.ends_with("+json")
            {
                &mut json
            } else {
                continue;
            };
            if best.is_none_or(|(q, _)| quality > q) {
                *best = Some((quality, position));
            }
        }
        match (protobuf, json) {
            (Some(_), None) => AnswerMedia::KubeProtobuf,
            (Some((pq, pp)), Some((jq, jp))) if pq > jq || (pq == jq && pp < jp) => {
                AnswerMedia::KubeProtobuf
            }
            _ => AnswerMedia::Json,
        }
    }
}

/// An Accept entry's q-value in thousandths (1000 when absent); `None` for an entry that is not
/// acceptable: q=0, a q-value that does not parse, or a transformation (`as=...`).
fn accept_quality(entry: &str) -> Option<u16> {
    let mut quality = 1000;
    for parameter in entry.split(';').skip(1) {
        let (name, value) = parameter.split_once('=').unwrap_or((parameter, ""));
        match name.trim().to_ascii_lowercase().as_str() {
            "q" => {
                let q = value.trim().parse::<f32>().ok()?;
                if !(0.0..=1.0).contains(&q) {
                    return None;
                }
                // Within 0..=1000 by the check above.
                quality = (q * 1000.0).round() as u16;
            }
            "as" => return None,
            _ => {}
        }
    }
    (quality > 0).then_some(quality)
}

/// An answer written in `media`: protobuf when asked for and the document's kind has a
/// protobuf form; JSON otherwise, as for a kind that has none (seed 000's `…Response` kinds)
/// or a document that does not fit its kind's message (an echoed field of an odd type).
pub fn render(media: AnswerMedia, code: StatusCode, answer: &Value) -> Response {
    if media == AnswerMedia::KubeProtobuf {
        match kube_protobuf::encode(answer) {
            Ok(body) => {
                let mut response = Response::new(Body::from(body));
                *response.status_mut() = code;
                response.headers_mut().insert(
                    CONTENT_TYPE,
                    http::HeaderValue::from_static(kube_protobuf::MEDIA_TYPE),
                );
                return response;
            }
            Err(error) => {
                tracing::debug!(%error, "answering JSON: the answer has no protobuf form");
            }
        }
    }
    json_response(code, answer)
}

/// The HTTP status and Kubernetes `reason` for a gRPC code (Google's HTTP mapping of
/// `google.rpc.Code`, except `RESOURCE_EXHAUSTED`: here it only ever means "request too
/// large", so 413 rather than 429).
fn http_status(code: Code) -> (StatusCode, &'static str) {
    match code {
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
            (StatusCode::BAD_REQUEST, "BadRequest")
        }
        Code::Unauthenticated => (StatusCode::UNAUTHORIZED, "Unauthorized"),
        Code::PermissionDenied => (StatusCode::FORBIDDEN, "Forbidden"),
        Code::NotFound => (StatusCode::NOT_FOUND, "NotFound"),
        Code::AlreadyExists | Code::Aborted => (StatusCode::CONFLICT, "Conflict"),
        Code::ResourceExhausted => (StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge"),
        Code::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable"),
        Code::DeadlineExceeded => (StatusCode::GATEWAY_TIMEOUT, "Timeout"),
        Code::Unimplemented => (StatusCode::NOT_IMPLEMENTED, "NotImplemented"),
        Code::Ok | Code::Cancelled | Code::Unknown | Code::Internal | Code::DataLoss => {
            (StatusCode::INTERNAL_SERVER_ERROR, "InternalError")
        }
    }
}

/// A refusal as an HTTP status and a Kubernetes `Status`: the status and reason of its gRPC
/// code ([`http_status`]; a body in a media type not read is 415, and too many watches, which
/// has no HTTP endpoint, would be 429), its message bounded as on gRPC, and an invalid field
/// named in `details.causes`, where kubectl shows it.
pub fn refusal_answer(error: &ApiError) -> (StatusCode, Value) {
    let (http_status, reason) = match error {
        ApiError::UnsupportedMediaType(_) => {
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "UnsupportedMediaType")
        }
        ApiError::TooManyWatches | ApiError::Exhausted(_) => {
            (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests")
        }
        _ => http_status(error.code()),
    };
    let message = bounded_message(error.to_string());
    let cause = error
        .field()
        .map(|(field, problem)| (field, problem.to_string()));
    (
        http_status,
        status_object(http_status, reason, &message, cause),
    )
}

/// A refusal as a JSON response ([`refusal_answer`]).
pub fn refusal(error: &ApiError) -> Response {
    let (code, status) = refusal_answer(error);
    json_response(code, &status)
}

/// A Kubernetes `Status` failure that names no field, as JSON.
pub fn failure(http_status: StatusCode, reason: &str, message: &str) -> Response {
    json_response(
        http_status,
        &status_object(http_status, reason, message, None),
    )
}

fn status_object(
    http_status: StatusCode,
    reason: &str,
    message: &str,
    cause: Option<(&str, String)>,
) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": http_status.as_u16(),
    });
    if let Some((field, problem)) = cause {
        status["details"] = json!({
            "causes": [{"reason": "FieldValueInvalid", "field": field, "message": problem}]
        });
    }
    status
}

/// `value` as a JSON response.
pub fn json_response(http_status: StatusCode, value: &serde_json::Value) -> Response {
    let mut response = Response::new(Body::from(value.to_string()));
    *response.status_mut() = http_status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_the_documented_http_statuses() {
        for (code, want) in [
            (Code::InvalidArgument, 400),
            (Code::Unauthenticated, 401),
            (Code::PermissionDenied, 403),
            (Code::ResourceExhausted, 413),
            (Code::Unavailable, 503),
        ] {
            assert_eq!(http_status(code).0.as_u16(), want, "{code:?}");
        }
    }

    /// The field a refusal names comes from the typed error, never from its message.
    #[test]
    fn refusals_name_the_typed_field_only() {
        use crate::api::error::Invalid;
        let (code, body) = refusal_answer(&ApiError::invalid("spec.user", Invalid::Empty));
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert_eq!(body["message"], "spec.user: must not be empty");
        assert_eq!(body["details"]["causes"][0]["field"], "spec.user");
        assert_eq!(body["details"]["causes"][0]["message"], "must not be empty");

        // A message that merely looks like `field: problem` names no field.
        let (code, body) = refusal_answer(&ApiError::Malformed("spec: looks like a field".into()));
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(body.get("details").is_none());

        let (code, body) = refusal_answer(&ApiError::TooLarge);
        assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(body["reason"], "RequestEntityTooLarge");

        let (code, body) = refusal_answer(&ApiError::UnsupportedMediaType("not read".into()));
        assert_eq!(code, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(body["reason"], "UnsupportedMediaType");
        assert_eq!(body["code"], 415);
    }

    fn negotiated(accept: &[&str]) -> AnswerMedia {
        let mut headers = http::HeaderMap::new();
        for value in accept {
            headers.append(ACCEPT, http::HeaderValue::from_str(value).unwrap());
        }
        AnswerMedia::negotiate(&headers)
    }

    #[test]
    fn accept_picks_protobuf_only_when_it_is_preferred() {
        use AnswerMedia::{Json, KubeProtobuf};
        for (accept, want) in [
            (&[][..], Json),
            (&["application/vnd.kubernetes.protobuf,application/json"][..], KubeProtobuf),
            (&["application/vnd.kubernetes.protobuf, */*"][..], KubeProtobuf),
            (&["application/vnd.kubernetes.protobuf"][..], KubeProtobuf),
            (&["Application/Vnd.Kubernetes.Protobuf"][..], KubeProtobuf),
            (&["application/json, application/vnd.kubernetes.protobuf"][..], Json),
            (&["*/*"][..], Json),
            (&["application/json"][..], Json),
            (&["application/xml"][..], Json),
            // q-values rank before order.
            (&["application/json;q=0.5, application/vnd.kubernetes.protobuf"][..], KubeProtobuf),
            (&["application/vnd.kubernetes.protobuf;q=0.9, application/json"][..], Json),
            (&["application/vnd.kubernetes.protobuf;q=0, application/json;q=0.1"][..], Json),
            (&["application/vnd.kubernetes.protobuf;q=0"][..], Json),
            (&["application/vnd.kubernetes.protobuf;q=banana"][..], Json),
            // A transformation authzd does not make.
            (&["application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1, application/json"][..], Json),
            // Several Accept headers are one list, in order.
            (&["application/vnd.kubernetes.protobuf", "application/json"][..], KubeProtobuf),
            (&["application/json", "application/vnd.kubernetes.protobuf"][..], Json),
        ] {
            assert_eq!(negotiated(accept), want, "{accept:?}");
        }
    }

    async fn bytes_of(response: Response) -> Vec<u8> {
        use http_body_util::BodyExt as _;
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        bytes.to_vec()
    }

    #[tokio::test]
    async fn render_writes_protobuf_only_for_kinds_that_have_it() {
        let (code, status) = refusal_answer(&ApiError::Malformed("bad".into()));
        let response = render(AnswerMedia::KubeProtobuf, code, &status);
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            response.headers()[CONTENT_TYPE],
            "application/vnd.kubernetes.protobuf"
        );
        let decoded = kube_protobuf::decode(&bytes_of(response).await).unwrap();
        assert_eq!(decoded, status);

        // Seed 000's kinds have no protobuf form: JSON, whatever was asked.
        let seed = json!({"apiVersion": "authorization.kubernetes.io/v1",
                          "kind": "SubjectAccessReviewResponse", "allowed": true});
        let response = render(AnswerMedia::KubeProtobuf, StatusCode::CREATED, &seed);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
        let body: Value = serde_json::from_slice(&bytes_of(response).await).unwrap();
        assert_eq!(body, seed);

        let response = render(AnswerMedia::Json, code, &status);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
        let body: Value = serde_json::from_slice(&bytes_of(response).await).unwrap();
        assert_eq!(body, status);
    }
}
