//! authzd: an out-of-process authorization service for Kubernetes-style policy.
//!
//! Floors, from the ground up; each names only the floors below it (ARCHITECTURE.md's table,
//! guarded by `tests/house/layering.rs`):
//! * [`request`]: the question — who asks to do what, and the one list of what decides;
//! * [`policy`]: the plain policy model, its loaders, its exact matching semantics and its
//!   compilation into an immutable index; [`kube`]: the Kubernetes objects authzd reads and
//!   writes (the access reviews), one typed model for JSON and protobuf;
//! * [`engine`]: the answer, and the authorizer chain over the index (pure, synchronous), with
//!   the reference evaluator it is tested against;
//! * [`cache`] and [`store`]: the decision cache in front of the engine, and the single writer
//!   of policy; [`webhook`]: the Webhook authorizer's client (a decision asked of a remote
//!   SubjectAccessReview endpoint), and TokenReview for the proxy;
//! * [`serving`]: the snapshot in force and the publish order the revocation guarantee rests on;
//! * [`api`]: protocol adapters (gRPC, HTTP, Envoy) that convert and validate, never decide;
//! * [`caller`]: the library callers link (published as the `authzd-client` crate): a typed
//!   client, a decision cache in the caller's process kept exact by the server's invalidation
//!   stream, and a `tower` layer;
//! * [`proxy`]: `authzd proxy`, an authorizing reverse proxy taking kube-rbac-proxy's flags,
//!   the library's first user;
//! * [`app`]: the composition root, configured by [`config`]; logs via [`telemetry`];
//! * [`client`]: the commands that talk to a running server (`apply`, `get`, `watch`, ...);
//!   [`policy_test`]: `authzd test`, files of expected answers run against the engine;
//!   [`replay`]: `authzd replay`, recorded decisions re-decided on a candidate policy.
//!
//! The documentation the code answers to is in `docs/`, cited by path and section
//! (`docs/security.md §2` is its section 2).

pub mod api;
pub mod app;
pub mod cache;
pub mod caller;
pub mod client;
pub mod config;
pub mod counter;
pub mod engine;
pub mod kube;
pub mod loadgen;
pub mod policy;
pub mod policy_test;
pub mod proto_codec;
pub mod proxy;
pub mod records;
pub mod replay;
pub mod request;
pub mod serving;
pub mod store;
pub mod synth;
pub mod telemetry;
pub mod transport;
pub mod webhook;

/// Generated protobuf types and tonic services of `proto/authz/v1/authz.proto`.
pub mod proto {
    #![allow(clippy::all, clippy::pedantic)]
    tonic::include_proto!("authz.v1");

    /// Encoded file descriptor set, served by gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("authz_descriptor");
    /// The vendored Envoy ext_authz contract (`proto/third_party/`), for reflection only.
    pub const ENVOY_FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("envoy_descriptor");
}
