//! Refusals on the HTTP side: a `tonic::Status` (the same one gRPC callers get) becomes an
//! HTTP status code and a Kubernetes `Status` object, as kube-apiserver answers errors.

use axum::body::Body;
use axum::response::Response;
use http::header::CONTENT_TYPE;
use http::StatusCode;
use serde_json::json;
use tonic::Code;

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

/// A `tonic::Status` as an HTTP response.
pub fn from_grpc(status: &tonic::Status) -> Response {
    let (http_status, reason) = http_status(status.code());
    failure(http_status, reason, status.message())
}

/// A Kubernetes `Status` failure. An `INVALID_ARGUMENT`-style message (`field: problem`)
/// also names the field in `details.causes`, where kubectl shows it.
pub fn failure(http_status: StatusCode, reason: &str, message: &str) -> Response {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": http_status.as_u16(),
    });
    if http_status == StatusCode::BAD_REQUEST {
        if let Some((field, problem)) = message.split_once(": ") {
            if !field.contains(' ') {
                status["details"] = json!({
                    "causes": [{"reason": "FieldValueInvalid", "field": field, "message": problem}]
                });
            }
        }
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
}
