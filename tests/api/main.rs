//! The server's APIs against the real `authzd` binary on `127.0.0.1:0` (or a Unix socket),
//! driven by real clients — tonic's generated ones, raw HTTP/1.1, a real webhook:
//!
//! * gRPC: `grpc_api`, `grpc_content`, `grpc_conditions`, `wire_contract` (the hand-written
//!   fast path pinned to the proto); HTTP and the Kubernetes webhook contract: `http_api`,
//!   `http_content`, `kube_protobuf`, `kep5681` (the golden exchanges of `tests/kep5681/`);
//!   Envoy's `ext_authz`: `envoy_authz`; content rules end to end: `content`;
//! * who may ask: `privileges`, `tls`, `unix_socket`; what it costs: `limits`, `hostile`;
//! * what it tells: `metrics`, `otlp`, `decision_records`, `full_disk` (the audit log and the
//!   records on a disk that refuses every write);
//! * who writes a policy directory: `dir_lock` (one writer, read-only followers, the embedded
//!   example served without `--policy`);
//! * policy changes: `revocation` (every change revokes at once; the hammer), `durability`
//!   (acknowledged writes survive `kill -9`), `multi_file_writes` (a write of several files is
//!   whole after `kill -9` at any instant of it, and leaves the files' other documents and
//!   comments as written), `directory_edits` (a hand edit is never overwritten; a write changes
//!   only its objects' documents), `caller_cache` (callers' own caches, through the
//!   library and through `authzd ask` processes: the hammer, SIGSTOP, a restart);
//! * the Webhook authorizer: `webhook_client` (against a scripted webhook), `webhook_chain`
//!   (against a second authzd).
//!
//! Every server listens on port 0 in a temp directory of its own, so the tests of this binary
//! run in parallel. `cargo test --test api`.

#[path = "../support/mod.rs"]
mod support;

mod caller_cache;
mod change_gate;
mod content;
mod decision_records;
mod dir_lock;
mod directory_edits;
mod durability;
mod envoy_authz;
mod full_disk;
mod grpc_api;
mod grpc_conditions;
mod grpc_content;
mod hostile;
mod http_api;
mod http_content;
mod kep5681;
mod kube_protobuf;
mod limits;
mod metrics;
mod multi_file_writes;
mod otlp;
mod privileges;
mod revocation;
mod tls;
mod traffic_impact;
mod unix_socket;
mod webhook_chain;
mod webhook_client;
mod wire_contract;
