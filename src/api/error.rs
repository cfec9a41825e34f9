//! Every refusal an adapter makes, as one typed error, and the one place where it gets its
//! gRPC code ([`ApiError::code`]). The gRPC services answer `tonic::Status::from(error)`; the
//! HTTP endpoints map the same error once more, to an HTTP status and a Kubernetes `Status`
//! object (`api::http::status::refusal`), renaming a field path to the document's own
//! (`ApiError::renamed`) without reading it back out of a message.

use thiserror::Error;

use crate::api::limits::{MAX_BATCH, MAX_REQUEST_BYTES};
use crate::engine::content::ContentError;
use crate::serving::Refusal;
use crate::store::StoreError;

/// The serving core's refusals, each as the adapters refuse it.
impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::NotReady => ApiError::NotReady,
            Refusal::RevisionNotReached { requested, current } => {
                ApiError::RevisionNotReached { requested, current }
            }
            Refusal::PermissionDenied(message) => ApiError::PermissionDenied(message),
            Refusal::RevisionGone { revision, oldest } => {
                ApiError::RevisionGone { revision, oldest }
            }
            Refusal::Fenced(message) => ApiError::Fenced(message),
            Refusal::Exhausted(message) => ApiError::Exhausted(message),
            Refusal::Invalid { field, problem } => ApiError::InvalidArgument {
                field: field.into(),
                problem: Invalid::Other(problem),
            },
            Refusal::Content(error) => error.into(),
        }
    }
}

/// A refusal of the serving core as gRPC answers it.
impl From<Refusal> for tonic::Status {
    fn from(refusal: Refusal) -> Self {
        ApiError::from(refusal).into()
    }
}

pub type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Everything an adapter can refuse a request for. Evaluation never fails: a decision that could
/// not be fully evaluated is still a decision, carrying its errors (see `engine::Response`).
#[derive(Debug, Error)]
pub enum ApiError {
    /// etcd mode: this replica cannot prove its policy current, and the answer was an allow.
    #[error("{0}")]
    Fenced(String),

    /// Malformed input. `field` is the path of the offending field, e.g.
    /// `requests[3].action.resource_attributes.verb`.
    #[error("{field}: {problem}")]
    InvalidArgument { field: String, problem: Invalid },

    /// A message or body that cannot be read at all: not protobuf, not UTF-8, not JSON or
    /// YAML. Names no field: there is none to name yet.
    #[error("{0}")]
    Malformed(String),

    /// An HTTP body declared in a media type the endpoint does not read; the message names
    /// the ones it does.
    #[error("{0}")]
    UnsupportedMediaType(String),

    /// An HTTP body over [`MAX_REQUEST_BYTES`] (gRPC messages over it are refused by tonic's
    /// codec before any handler runs).
    #[error("request body is larger than the limit of {MAX_REQUEST_BYTES} bytes")]
    TooLarge,

    /// `--max-watches` streams are open already.
    #[error("too many open watch streams (--max-watches); retry with backoff")]
    TooManyWatches,

    /// A bound on open streams other than watches (invalidation subscribers) is reached.
    #[error("{0}")]
    Exhausted(String),

    /// A watch stream fell too far behind the changes to be continued.
    #[error(
        "watch fell behind by {missed} events; list again and watch from the current revision"
    )]
    WatchLagged { missed: u64 },

    /// The request asked for a policy revision the server has not reached.
    #[error("server is at revision {current}, behind the requested min_revision {requested}")]
    RevisionNotReached { requested: u64, current: u64 },

    /// No policy has compiled yet; health says `NOT_SERVING` meanwhile.
    #[error("no policy is loaded yet; retry when health reports SERVING")]
    NotReady,

    /// A page token pinned to a revision the server no longer holds.
    #[error("the page token is pinned to policy revision {revision}, which this server no longer holds (the oldest it holds is {oldest}); start the search again without a token")]
    RevisionGone { revision: u64, oldest: u64 },

    /// A policy write or read the store refused.
    #[error(transparent)]
    Store(#[from] StoreError),

    /// No identity: no credentials where the listener requires them, or credentials that do
    /// not verify.
    #[error("{0}")]
    Unauthenticated(String),

    /// The caller lacks the privilege the call needs; the message says which.
    #[error("{0}")]
    PermissionDenied(String),
}

/// What is wrong with one field.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Invalid {
    #[error("must set resource_attributes or non_resource_attributes")]
    MissingAction,
    #[error("must not be empty")]
    Empty,
    #[error("must set a user or at least one group")]
    NoSubject,
    #[error("is {len} bytes long; the limit is {max}")]
    TooLong { len: usize, max: usize },
    #[error("has {count} entries; the limit is {max}")]
    TooMany { count: usize, max: usize },
    #[error("has a key {len} bytes long; the limit is {max}")]
    KeyTooLong { len: usize, max: usize },
    #[error("`{got}` does not match the review's namespace `{want}`")]
    NamespaceMismatch { got: String, want: String },
    #[error("non-resource attributes are not allowed in a local review")]
    NonResourceInLocalReview,
    /// Two fields of which a request may set at most one.
    #[error("cannot be set together with {other}")]
    Exclusive { other: &'static str },
    /// A selector with neither a raw selector nor requirements.
    #[error("must set a raw selector or requirements")]
    EmptySelector,
    #[error("`{0}` is not a selector operator; use In, NotIn, Exists or DoesNotExist")]
    UnknownOperator(String),
    #[error("must not be empty with the operator {operator}")]
    ValuesRequired { operator: &'static str },
    #[error("must be empty with the operator {operator}")]
    ValuesForbidden { operator: &'static str },
    /// A raw selector that does not parse; the parser's message.
    #[error("is not a valid selector: {0}")]
    Selector(String),
    #[error("{0}")]
    Other(String),
}

impl ApiError {
    /// The gRPC code of this refusal: the one classification both protocols map from.
    pub fn code(&self) -> tonic::Code {
        use tonic::Code;
        match self {
            ApiError::InvalidArgument { .. }
            | ApiError::Malformed(_)
            | ApiError::UnsupportedMediaType(_) => Code::InvalidArgument,
            ApiError::TooLarge | ApiError::TooManyWatches | ApiError::Exhausted(_) => {
                Code::ResourceExhausted
            }
            ApiError::RevisionNotReached { .. } | ApiError::RevisionGone { .. } => {
                Code::FailedPrecondition
            }
            ApiError::NotReady | ApiError::Fenced(_) => Code::Unavailable,
            ApiError::WatchLagged { .. } => Code::DataLoss,
            ApiError::Unauthenticated(_) => Code::Unauthenticated,
            ApiError::PermissionDenied(_) => Code::PermissionDenied,
            ApiError::Store(error) => match error {
                StoreError::Invalid(_) | StoreError::TooLarge(_) => Code::InvalidArgument,
                StoreError::NotFound(_) => Code::NotFound,
                StoreError::ReadOnly
                | StoreError::ReadOnlyStore(_)
                | StoreError::Compacted { .. }
                | StoreError::GateRefused(_)
                | StoreError::FileChanged(_) => Code::FailedPrecondition,
                StoreError::Forbidden(_) => Code::PermissionDenied,
                StoreError::Io { .. } | StoreError::Unavailable(_) => Code::Unavailable,
                StoreError::Aborted(_) => Code::Aborted,
            },
        }
    }

    /// The offending field and what is wrong with it, for an invalid argument.
    pub fn field(&self) -> Option<(&str, &Invalid)> {
        match self {
            ApiError::InvalidArgument { field, problem } => Some((field, problem)),
            _ => None,
        }
    }

    /// The same error with its field path rewritten by the first matching entry of `renames`
    /// (`(from, to)` pairs, the longest `from` that is the path or a prefix of it ending at
    /// a `.` or `[`): proto field paths become the paths of the document an HTTP caller
    /// sent.
    #[must_use]
    pub fn renamed(self, renames: &[(&str, &str)]) -> Self {
        let ApiError::InvalidArgument { field, problem } = self else {
            return self;
        };
        let renamed = renames
            .iter()
            .filter(|(from, _)| {
                field == *from
                    || field
                        .strip_prefix(from)
                        .is_some_and(|rest| rest.starts_with(['.', '[']))
            })
            .max_by_key(|(from, _)| from.len())
            .map(|(from, to)| format!("{to}{}", &field[from.len()..]));
        ApiError::InvalidArgument {
            field: renamed.unwrap_or(field),
            problem,
        }
    }

    /// A batch of `count` requests, over [`MAX_BATCH`].
    pub fn batch_too_large(count: usize) -> Self {
        ApiError::invalid(
            "requests",
            Invalid::TooMany {
                count,
                max: MAX_BATCH,
            },
        )
    }

    pub fn invalid(field: impl Into<String>, problem: Invalid) -> Self {
        ApiError::InvalidArgument {
            field: field.into(),
            problem,
        }
    }

    /// The same error for a message nested at `prefix` (e.g. `requests[3].`).
    pub fn within(self, prefix: &str) -> Self {
        match self {
            ApiError::InvalidArgument { field, problem } => ApiError::InvalidArgument {
                field: format!("{prefix}{field}"),
                problem,
            },
            other => other,
        }
    }
}

/// Content a rule needed and could not read (unreadable JSON, a malformed changed path): the
/// request is refused naming the field, never decided (docs/api.md §7).
impl From<ContentError> for ApiError {
    fn from(error: ContentError) -> Self {
        ApiError::invalid(error.field, Invalid::Other(error.problem))
    }
}

/// Longest status message sent. The message travels in an HTTP/2 header (`grpc-message`,
/// percent-encoded), and clients refuse large headers (gRPC C-core's default limit is 8 KiB
/// for all of them): an error quoting a megabyte of hostile input would otherwise reach the
/// caller as a protocol error instead of the refusal.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 4 * 1024;

/// `message`, cut at a character boundary to [`MAX_STATUS_MESSAGE_BYTES`] with a note of its
/// full length.
pub fn bounded_message(message: String) -> String {
    if message.len() <= MAX_STATUS_MESSAGE_BYTES {
        return message;
    }
    let mut cut = MAX_STATUS_MESSAGE_BYTES - 64;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}… (message cut; {} bytes in all)",
        &message[..cut],
        message.len()
    )
}

/// The domain of authzd's `google.rpc.ErrorInfo` details.
pub const ERROR_DOMAIN: &str = "authzd.io";

/// What a refusal means, for a client to act on, as a `google.rpc.ErrorInfo` detail's reason
/// (a client decides by it, never by a message's text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorReason {
    /// A write changes more objects, or carries more bytes, than one commit takes (etcd's
    /// transaction limits): send it in parts.
    WriteTooLarge,
    /// A request larger than the server reads: send less at once.
    RequestTooLarge,
    /// A policy write whose effect on access breaks a ChangeGate rule: the message names
    /// the rule and a request it would change (docs/policy.md §8).
    ChangeGateRefused,
    /// An admin write to a server that only follows its policy (`--read-only`, a directory
    /// it cannot write, the embedded example): write through the server that holds the
    /// directory's lock, or change the files themselves.
    StoreReadOnly,
    /// A policy file the write would rewrite changed on disk since the server loaded it:
    /// finish or fix that edit (the server reloads it), then retry (docs/policy.md §2).
    PolicyFileChanged,
}

impl ErrorReason {
    const ALL: [ErrorReason; 5] = [
        ErrorReason::WriteTooLarge,
        ErrorReason::RequestTooLarge,
        ErrorReason::ChangeGateRefused,
        ErrorReason::StoreReadOnly,
        ErrorReason::PolicyFileChanged,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorReason::WriteTooLarge => "WRITE_TOO_LARGE",
            ErrorReason::RequestTooLarge => "REQUEST_TOO_LARGE",
            ErrorReason::ChangeGateRefused => "CHANGE_GATE_REFUSED",
            ErrorReason::StoreReadOnly => "STORE_READ_ONLY",
            ErrorReason::PolicyFileChanged => "POLICY_FILE_CHANGED",
        }
    }

    /// The reason `status` carries in an `ErrorInfo` of authzd's domain, if any.
    pub fn of(status: &tonic::Status) -> Option<Self> {
        use tonic_types::StatusExt as _;
        let info = status.get_details_error_info()?;
        if info.domain != ERROR_DOMAIN {
            return None;
        }
        ErrorReason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == info.reason)
    }

    /// A status of `code` saying `message`, with this reason as its `ErrorInfo` detail.
    pub fn status(self, code: tonic::Code, message: String) -> tonic::Status {
        use tonic_types::{ErrorDetails, StatusExt as _};
        let details = ErrorDetails::with_error_info(
            self.as_str(),
            ERROR_DOMAIN,
            std::collections::HashMap::new(),
        );
        tonic::Status::with_error_details(code, message, details)
    }
}

impl ApiError {
    /// What the refusal means for a client to act on, when there is something to do.
    pub fn reason(&self) -> Option<ErrorReason> {
        match self {
            ApiError::Store(StoreError::TooLarge(_)) => Some(ErrorReason::WriteTooLarge),
            ApiError::Store(StoreError::GateRefused(_)) => Some(ErrorReason::ChangeGateRefused),
            ApiError::Store(StoreError::ReadOnly | StoreError::ReadOnlyStore(_)) => {
                Some(ErrorReason::StoreReadOnly)
            }
            ApiError::Store(StoreError::FileChanged(_)) => Some(ErrorReason::PolicyFileChanged),
            ApiError::TooLarge => Some(ErrorReason::RequestTooLarge),
            _ => None,
        }
    }
}

/// The gRPC mapping: the error's code, its message bounded, and its reason as a
/// `google.rpc.ErrorInfo` detail when it has one.
impl From<ApiError> for tonic::Status {
    fn from(error: ApiError) -> Self {
        let message = bounded_message(error.to_string());
        match error.reason() {
            Some(reason) => reason.status(error.code(), message),
            None => tonic::Status::new(error.code(), message),
        }
    }
}

/// The gRPC status header of a trailers-only response, named once: a `&str` key would be
/// parsed again on every response.
const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");

/// Transport-level half of the mapping, applied to every HTTP response as one tower layer
/// (one header lookup per response): two refusals tonic's codec makes before any handler runs
/// are the caller's fault, and get the codes gRPC's convention and docs/api.md §7 give them.
///
/// * A message over the size limit is refused with `OUT_OF_RANGE`; it becomes
///   `RESOURCE_EXHAUSTED`.
/// * A request body that is not a valid protobuf message is refused with `INTERNAL` ("failed to
///   decode Protobuf message"); it becomes `INVALID_ARGUMENT`.
///
/// The status of such a refusal travels in the response headers (a trailers-only response),
/// so rewriting the headers suffices; the message is kept.
///
/// INVARIANT: no handler returns `OUT_OF_RANGE` or `INTERNAL` (see [`ApiError`]), so every
/// `OUT_OF_RANGE` here is a size refusal and every `INTERNAL` one of the codec's.
pub fn caller_faults_get_their_codes<B>(mut response: http::Response<B>) -> http::Response<B> {
    const OUT_OF_RANGE: &[u8] = b"11";
    const INTERNAL: &[u8] = b"13";
    let headers = response.headers_mut();
    let rewritten = match headers.get(&GRPC_STATUS).map(http::HeaderValue::as_bytes) {
        Some(OUT_OF_RANGE) => tonic::Code::ResourceExhausted,
        Some(INTERNAL)
            if tonic::Status::from_header_map(headers).is_some_and(|status| {
                status.message().starts_with("failed to decode Protobuf")
            }) =>
        {
            tonic::Code::InvalidArgument
        }
        _ => return response,
    };
    headers.insert(GRPC_STATUS, (rewritten as i32).into());
    if rewritten == tonic::Code::ResourceExhausted {
        // Said as a reason a client can act on (send less at once), as authzd's own size
        // refusals say it.
        let typed = ErrorReason::RequestTooLarge.status(rewritten, String::new());
        let mut typed_headers = http::HeaderMap::new();
        if typed.add_header(&mut typed_headers).is_ok() {
            if let Some(details) = typed_headers.remove(GRPC_STATUS_DETAILS) {
                headers.insert(GRPC_STATUS_DETAILS, details);
            }
        }
    }
    response
}

/// Where a gRPC status carries its `google.rpc.Status` details.
const GRPC_STATUS_DETAILS: http::HeaderName =
    http::HeaderName::from_static("grpc-status-details-bin");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_argument_names_the_field() {
        let status = tonic::Status::from(ApiError::invalid(
            "requests[3].action.resource_attributes.verb",
            Invalid::Empty,
        ));
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "requests[3].action.resource_attributes.verb: must not be empty"
        );
    }

    #[test]
    fn oversized_refusals_become_resource_exhausted() {
        let refusal = tonic::Status::out_of_range("too large").into_http::<()>();
        let mapped = caller_faults_get_their_codes(refusal);
        let status = tonic::Status::from_header_map(mapped.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(status.message(), "too large");

        let other = tonic::Status::invalid_argument("x").into_http::<()>();
        let mapped = caller_faults_get_their_codes(other);
        let status = tonic::Status::from_header_map(mapped.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn long_messages_are_cut() {
        let status = tonic::Status::from(ApiError::invalid(
            "manifest",
            Invalid::Other(format!("bad name `{}`", "é".repeat(100_000))),
        ));
        assert!(status.message().len() <= MAX_STATUS_MESSAGE_BYTES);
        assert!(status.message().starts_with("manifest: bad name `éé"));
        assert!(status.message().ends_with("bytes in all)"));
        let short = tonic::Status::from(ApiError::invalid("x", Invalid::Empty));
        assert_eq!(short.message(), "x: must not be empty");
    }

    #[test]
    fn undecodable_requests_become_invalid_argument() {
        let refusal =
            tonic::Status::internal("failed to decode Protobuf message: buffer underflow")
                .into_http::<()>();
        let mapped = caller_faults_get_their_codes(refusal);
        let status = tonic::Status::from_header_map(mapped.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains("buffer underflow"));

        let other = tonic::Status::internal("something else").into_http::<()>();
        let mapped = caller_faults_get_their_codes(other);
        let status = tonic::Status::from_header_map(mapped.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::Internal);
    }

    #[test]
    fn revision_not_reached_is_failed_precondition() {
        let status = tonic::Status::from(ApiError::RevisionNotReached {
            requested: 9,
            current: 2,
        });
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert!(status.message().contains("at revision 2"));
    }

    /// HTTP callers see the paths of the document they sent: the longest matching proto path
    /// is replaced, at a path boundary only, and the problem is kept as it was.
    #[test]
    fn renamed_rewrites_the_field_path_not_the_message() {
        let renames = [
            ("action", "spec"),
            ("action.resource_attributes", "spec.resourceAttributes"),
            ("groups", "spec.groups"),
        ];
        let error = ApiError::invalid("action.resource_attributes.verb", Invalid::Empty);
        assert_eq!(
            error.renamed(&renames).to_string(),
            "spec.resourceAttributes.verb: must not be empty"
        );
        let error = ApiError::invalid("groups[2]", Invalid::Empty).renamed(&renames);
        assert_eq!(
            error.field().map(|(field, _)| field),
            Some("spec.groups[2]")
        );
        // `actions` is not under `action`.
        let error = ApiError::invalid("actions", Invalid::Empty).renamed(&renames);
        assert_eq!(error.field().map(|(field, _)| field), Some("actions"));
        // Only field paths are renamed: other refusals are returned as they came.
        let error = ApiError::Malformed("action: not a field".into()).renamed(&renames);
        assert_eq!(error.to_string(), "action: not a field");
    }

    #[test]
    fn an_oversized_batch_is_an_invalid_argument_naming_requests() {
        let status = tonic::Status::from(ApiError::batch_too_large(MAX_BATCH + 1));
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().starts_with("requests: has 1001 entries"),
            "{}",
            status.message()
        );
    }
}
