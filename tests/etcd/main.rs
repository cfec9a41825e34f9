//! authzd replicas on a real 3-member etcd cluster (`tests/support/etcd.rs`: each member a
//! process of its own, its data on tmpfs): `replicas` (changes acknowledged on one replica hold
//! on every replica, the fence, lost quorum, compaction, restore, a frozen member, hammers
//! across replicas, bulk import), `operations` (`authzd apply/status/replicas`, `/metrics`
//! and the webhook while a replica is fenced) and `subscribers` (a write on one replica reaches
//! the callers' caches of another before it is acknowledged).
//!
//! etcd and etcdctl come from `AUTHZD_E2E_ETCD`/`AUTHZD_E2E_ETCDCTL` (`scripts/test.sh`), else
//! PATH; without them every test skips, saying why, except under `CI=true`, where that fails.
//!
//! `cargo test --test etcd`.

#[path = "../support/mod.rs"]
mod support;

mod change_gate;
mod operations;
mod replicas;
mod subscribers;
