//! ChangeGate in etcd mode: random writes of bindings through a replica on a
//! real 3-member etcd cluster, against random gates, are refused exactly when the gate check
//! says their change breaks a rule (`tests/support/gate_writes.rs`, the same driver as the
//! directory's `tests/api/change_gate.rs`); a refused write leaves every etcd key under the
//! prefix and the replicas' revision as they were, and the other replica sees what the first
//! one made.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::time::Duration;

use crate::support::etcd::{etcd_binary, etcdctl_binary, unique_prefix, Cluster, Replica};
use crate::support::gate_writes::{self, Write};
use crate::support::server::run_with_timeout;
use authzd::proto::{ApplyRequest, DeleteRequest, ObjectRef, StatusRequest};
use authzd::synth::Rng;

/// Every key and value under `prefix`, as etcdctl prints them.
fn keys(etcdctl: &std::path::Path, cluster: &Cluster, prefix: &str) -> String {
    let mut command = std::process::Command::new(etcdctl);
    command.args([
        "--endpoints",
        &cluster.endpoints(),
        "get",
        "--prefix",
        prefix,
    ]);
    let out = run_with_timeout(command, Duration::from_secs(20));
    assert!(out.status.success(), "etcdctl get: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn revision(replica: &mut Replica) -> u64 {
    replica
        .admin
        .status(StatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .revision
}

#[tokio::test]
async fn random_writes_are_refused_exactly_when_they_break_the_gate() {
    let Some(binary) = etcd_binary() else { return };
    let Some(etcdctl) = etcdctl_binary() else {
        return;
    };
    let cluster = Cluster::start(binary);
    let seeds = if crate::support::ci() { 4 } else { 2 };
    let (mut refused, mut made) = (0, 0);
    for seed in 0..seeds {
        let prefix = unique_prefix("gate");
        let mut a = Replica::start(&cluster, &prefix, "gate-a", &[]).await;
        let b = Replica::start(&cluster, &prefix, "gate-b", &[]).await;
        let mut rng = Rng::new(0x9a7e + seed);
        let mut objects = gate_writes::initial(&mut rng);
        // The starting policy in one write: no gate is in force before it.
        let all: Vec<String> = objects.values().cloned().collect();
        a.apply(&all.join("---\n")).await;
        for step in 0..20 {
            let write = gate_writes::random_write(&mut rng, &objects);
            let next = gate_writes::after(&objects, &write);
            let expected = gate_writes::expected_refusal(&objects, &next);
            let (keys_before, revision_before) =
                (keys(&etcdctl, &cluster, &prefix), revision(&mut a).await);
            let answer = match &write {
                Write::Apply { manifest, .. } => a
                    .admin
                    .apply(ApplyRequest {
                        manifest: manifest.clone(),
                        ..Default::default()
                    })
                    .await
                    .map(|r| r.into_inner().revision),
                Write::Delete {
                    kind,
                    namespace,
                    name,
                    ..
                } => a
                    .admin
                    .delete(DeleteRequest {
                        object: Some(ObjectRef {
                            kind: kind.clone(),
                            namespace: namespace.clone(),
                            name: name.clone(),
                        }),
                        ..Default::default()
                    })
                    .await
                    .map(|r| r.into_inner().revision),
            };
            let context = format!("seed {seed} step {step}: {write:?}");
            match expected {
                Some(rule) => {
                    gate_writes::assert_gate_refused(answer, &rule, &context);
                    assert_eq!(
                        keys(&etcdctl, &cluster, &prefix),
                        keys_before,
                        "{context}: etcd unchanged"
                    );
                    assert_eq!(revision(&mut a).await, revision_before, "{context}");
                    refused += 1;
                }
                None => {
                    let written = answer.unwrap_or_else(|s| panic!("{context}: {s:?}"));
                    objects = next;
                    made += 1;
                    // The other replica holds the same policy: it refuses what A would.
                    crate::support::wait::eventually(
                        Duration::from_secs(10),
                        || format!("{context}: replica b at revision {written}"),
                        || {
                            let mut admin = b.admin.clone();
                            async move {
                                let at = admin
                                    .status(StatusRequest {})
                                    .await
                                    .ok()?
                                    .into_inner()
                                    .revision;
                                (at >= written).then_some(())
                            }
                        },
                    )
                    .await;
                }
            }
        }
    }
    eprintln!("{refused} writes refused, {made} made");
    assert!(
        refused > 0 && made > 0,
        "both outcomes are exercised: {refused} refused, {made} made"
    );
}
