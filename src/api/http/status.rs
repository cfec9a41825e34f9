//! Refusals on the HTTP side: the adapters' typed error (the same one gRPC callers get as a
//! `tonic::Status`) becomes an HTTP status code and a Kubernetes `Status` object, as
//! kube-apiserver answers errors. [`refusal`] is the one HTTP mapping.

use axum::body::Body;
use axum::response::Response;
use http::header::CONTENT_TYPE;
use http::StatusCode;
use serde_json::json;
use tonic::Code;

use crate::api::error::{bounded_message, ApiError};

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

/// A refusal as an HTTP response: the status and reason of its gRPC code ([`http_status`];
/// too many watches, which has no HTTP endpoint, would be 429), its message bounded as on
/// gRPC, and an invalid field named in `details.causes`, where kubectl shows it.
pub fn refusal(error: &ApiError) -> Response {
    let (http_status, reason) = match error {
        ApiError::TooManyWatches => (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"),
        _ => http_status(error.code()),
    };
    let message = bounded_message(error.to_string());
    let cause = error
        .field()
        .map(|(field, problem)| (field, problem.to_string()));
    failure_with_cause(http_status, reason, &message, cause)
}

/// A Kubernetes `Status` failure that names no field.
pub fn failure(http_status: StatusCode, reason: &str, message: &str) -> Response {
    failure_with_cause(http_status, reason, message, None)
}

fn failure_with_cause(
    http_status: StatusCode,
    reason: &str,
    message: &str,
    cause: Option<(&str, String)>,
) -> Response {
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
    json_response(http_status, &status)
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

    async fn body_of(response: Response) -> serde_json::Value {
        use http_body_util::BodyExt as _;
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// The field a refusal names comes from the typed error, never from its message.
    #[tokio::test]
    async fn refusals_name_the_typed_field_only() {
        use crate::api::error::Invalid;
        let invalid = refusal(&ApiError::invalid("spec.user", Invalid::Empty));
        assert_eq!(invalid.status(), StatusCode::BAD_REQUEST);
        let body = body_of(invalid).await;
        assert_eq!(body["message"], "spec.user: must not be empty");
        assert_eq!(body["details"]["causes"][0]["field"], "spec.user");
        assert_eq!(body["details"]["causes"][0]["message"], "must not be empty");

        // A message that merely looks like `field: problem` names no field.
        let malformed = refusal(&ApiError::Malformed("spec: looks like a field".into()));
        assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
        assert!(body_of(malformed).await.get("details").is_none());

        let too_large = refusal(&ApiError::TooLarge);
        assert_eq!(too_large.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(body_of(too_large).await["reason"], "RequestEntityTooLarge");
    }
}
