//! Wire adapters: they convert and validate, never decide.
//!
//! * [`grpc`]: `authz.v1.Authorizer` and `authz.v1.AccessReview` over the [`serving`](crate::serving) core;
//! * [`http`]: the HTTP/JSON review endpoints and webhook, calling the same handlers;
//! * [`admin`]: `authz.v1.PolicyAdmin` over the store;
//! * [`envoy`]: `envoy.service.auth.v3.Authorization` (Envoy ext_authz) over the [`serving`](crate::serving) core;
//! * [`invalidations`]: `Authorizer/WatchInvalidations`, a caller's cache following the server;
//! * [`dispatch`]: the Authorizer's calls straight to it, the rest through the router;
//! * [`convert`]: wire <-> engine types with typed, field-naming validation errors;
//! * [`delta_wire`]: the access delta of a dry-run `Apply`, to the wire and back;
//! * [`error`]: the one mapping of adapter errors to gRPC status codes;
//! * [`authn`]: who the caller is (certificate, bearer token, local identity; the listener rule);
//! * [`limits`]: every input limit;
//! * [`shed`]: load shedding and the request timeout, as a tower layer.

pub mod admin;
pub mod authn;
pub mod convert;
pub mod delta_wire;
pub mod dispatch;
pub mod envoy;
pub mod error;
pub mod grpc;
pub mod http;
pub mod invalidations;
pub mod limits;
pub mod shed;
pub mod wire;
