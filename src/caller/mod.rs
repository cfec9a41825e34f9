//! The library a caller links to ask authzd (docs/caller-cache.md), published as the
//! workspace crate `authzd-client`: a typed async [`Client`] for every Authorizer and
//! AccessReview call ([`connect`]: TLS, client certificates, a bearer token, a Unix socket),
//! with an optional decision cache in the caller's own process ([`local`]) kept exact by the
//! server's invalidation stream ([`follow`]), and a `tower` layer that authorizes HTTP or gRPC
//! requests with it ([`layer`]). Every call carries a deadline ([`deadline`]): a server that
//! does not answer, frozen or gone, costs a caller at most that long. The cache's figures render as Prometheus text
//! ([`LocalFigures::render_prometheus`], [`metrics`]) for the caller's own `/metrics`.
//!
//! The local cache is the server's own [`DecisionCache`](crate::cache::DecisionCache), keyed
//! by the same request fields; it answers only while it holds a proof that every change
//! published before a moment at most `--max-staleness` ago has been applied to it, and a write
//! acknowledged with `ACK_CLUSTER` waits for it (`serving::subscribers`).

pub mod client;
pub mod connect;
pub mod deadline;
pub mod follow;
pub mod layer;
pub mod local;
pub mod metrics;

pub use client::{Answer, Authorizing, Client};
pub use connect::{ConnectError, Endpoint};
pub use deadline::{Deadline, DEFAULT_TIMEOUT};
pub use layer::{AuthorizeLayer, AuthorizeService};
pub use local::{LocalCache, LocalCacheConfig, LocalFigures};
