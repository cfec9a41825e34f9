// The routes of the hand-declared `authz.v1.Authorizer` server, in one file read by both sides:
// `build.rs` generates the server from them (`include!`, since a build script cannot use the
// crate) and the crate compiles them as `api::wire::routes`, where `tests/api/wire_contract.rs`
// holds them to the service in the compiled descriptor set. So the server cannot gain, lose or
// retype a method without the contract test seeing it. Plain `//` comments only: `include!`
// does not take inner doc comments.

/// One method of the manual server.
#[derive(Clone, Copy, Debug)]
pub struct Route {
    /// The method of the generated server trait (snake case).
    pub method: &'static str,
    /// The gRPC method name: the route is `/authz.v1.Authorizer/{route}`.
    pub route: &'static str,
    /// The proto messages the method takes and answers, fully qualified as in the descriptor.
    pub input_message: &'static str,
    pub output_message: &'static str,
    /// The Rust types tonic decodes the request into and encodes the answer from.
    pub input_type: &'static str,
    pub output_type: &'static str,
    /// The codec between those types and the bytes.
    pub codec: &'static str,
    /// Whether the method takes a stream of requests, and answers with a stream.
    pub client_streaming: bool,
    pub server_streaming: bool,
}

/// The proto package of the manual server's service.
pub const AUTHORIZER_PACKAGE: &str = "authz.v1";

/// The service name within [`AUTHORIZER_PACKAGE`].
pub const AUTHORIZER_SERVICE: &str = "Authorizer";

/// Every method of the manual server, in the proto's order. The two decision methods take the
/// request's bytes as received and answer with decisions encoded straight from the cache
/// (`api::wire`); the others are prost's.
pub const AUTHORIZER_ROUTES: &[Route] = &[
    Route {
        method: "authorize",
        route: "Authorize",
        input_message: "authz.v1.AuthorizeRequest",
        output_message: "authz.v1.AuthorizeResponse",
        input_type: "crate::api::wire::AuthorizeCall",
        output_type: "crate::api::wire::AuthorizeReply",
        codec: "crate::proto_codec::FrameCodec",
        client_streaming: false,
        server_streaming: false,
    },
    Route {
        method: "batch_authorize",
        route: "BatchAuthorize",
        input_message: "authz.v1.BatchAuthorizeRequest",
        output_message: "authz.v1.BatchAuthorizeResponse",
        input_type: "crate::api::wire::BatchAuthorizeCall",
        output_type: "crate::api::wire::BatchAuthorizeReply",
        codec: "crate::proto_codec::FrameCodec",
        client_streaming: false,
        server_streaming: false,
    },
    Route {
        method: "get_allowed_subjects",
        route: "GetAllowedSubjects",
        input_message: "authz.v1.GetAllowedSubjectsRequest",
        output_message: "authz.v1.GetAllowedSubjectsResponse",
        input_type: "crate::proto::GetAllowedSubjectsRequest",
        output_type: "crate::proto::GetAllowedSubjectsResponse",
        codec: "crate::proto_codec::SliceCodec",
        client_streaming: false,
        server_streaming: false,
    },
    Route {
        method: "evaluate_conditions",
        route: "EvaluateConditions",
        input_message: "authz.v1.EvaluateConditionsRequest",
        output_message: "authz.v1.AuthorizeResponse",
        input_type: "crate::proto::EvaluateConditionsRequest",
        output_type: "crate::proto::AuthorizeResponse",
        codec: "crate::proto_codec::SliceCodec",
        client_streaming: false,
        server_streaming: false,
    },
    Route {
        method: "watch_invalidations",
        route: "WatchInvalidations",
        input_message: "authz.v1.InvalidationsRequest",
        output_message: "authz.v1.InvalidationEvent",
        input_type: "crate::proto::InvalidationsRequest",
        output_type: "crate::proto::InvalidationEvent",
        codec: "crate::proto_codec::SliceCodec",
        client_streaming: true,
        server_streaming: true,
    },
];
