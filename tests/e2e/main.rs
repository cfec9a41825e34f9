//! End to end with real, independent peers, and the slow whole-system runs:
//!
//! * `kubectl*`: kubectl (`create --raw`, `auth can-i`/`whoami` over JSON and Kubernetes
//!   protobuf, API discovery, TLS with a bearer token);
//! * `envoy`: a real Envoy calling `ext_authz`; `buf`: `buf curl` through reflection;
//!   `reflection`: a Python grpcio client that knows authzd only through reflection
//!   (`reflection_client.py`, beside this file, with the pinned `requirements*.txt`);
//! * `authzen`: the AuthZEN Authorization API asked with curl, each evaluation held to the
//!   gRPC Authorize of the request it maps to;
//! * `proxy`: `authzd proxy` with kube-rbac-proxy's example configurations, a real HTTP
//!   upstream and TokenReview endpoint (`proxy_peers.py`), asked with curl;
//! * `proxy_deadline`: `authzd proxy` in front of an authzd frozen with SIGSTOP answers 500
//!   within `--authzd-timeout`, and decides again once authzd resumes;
//! * `proxy_guards`: `authzd proxy` against hostile clients: raw paths with dot segments and
//!   encoded ones in front of upstreams that clean paths themselves (Python's `http.server`,
//!   nginx), claimed identity headers, `Connection` naming them, unreadable rewrite values;
//! * `deploy`: `deploy/`'s manifests parse and agree with the binary and the shipped policy;
//! * `loadgen`: the load generator against a spawned authzd and the no-op server;
//! * `soak`: 60 s at saturation with good, hostile and slow traffic — opt-in locally
//!   (`AUTHZD_SOAK=1`), always under `CI=true`.
//!
//! The tools come from `AUTHZD_E2E_*` (`scripts/test.sh` installs and exports them all), else
//! their usual place (`tests/support/tools.rs`); a missing one skips its test, saying why,
//! except under `CI=true`, where it fails.
//!
//! `cargo test --test e2e`.

#[path = "../support/mod.rs"]
mod support;

mod authzen;
mod buf;
mod deploy;
mod envoy;
mod kubectl;
mod kubectl_auth;
mod kubectl_discovery;
mod kubectl_protobuf;
mod loadgen;
mod proxy;
mod proxy_deadline;
mod proxy_guards;
mod reflection;
mod soak;
