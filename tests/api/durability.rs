//! Durability (docs/policy.md §2): acknowledged admin writes survive `kill -9` of the real `authzd`
//! binary, at several points of a stream of writes, and the server restarts cleanly on the
//! same directory: no half-written file is loaded, leftover temporary files are skipped.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::server::{role_binding, Server, POD_READER};
use authzd::proto::policy_admin_client::PolicyAdminClient;
use authzd::proto::{ApplyRequest, GetRequest, ListRequest, ObjectRef, StatusRequest};
use tokio::sync::Notify;

const NAMESPACE: &str = "dur";
/// Concurrent writers, each on its own connection, so that writes are in flight (queued on
/// the single writer, or being written) when the server is killed.
const WRITERS: usize = 4;

#[derive(Clone, Copy, Debug)]
enum KillPoint {
    /// Once this many writes of the round are acknowledged.
    AfterAcks(usize),
    /// This long after the round's writers start, whatever has been acknowledged.
    After(Duration),
}

/// The names of the bindings written so far: every one sent, and the acknowledged ones.
#[derive(Default)]
struct Ledger {
    sent: BTreeSet<String>,
    acked: BTreeSet<String>,
}

fn binding(name: &str) -> String {
    role_binding(
        NAMESPACE,
        name,
        "ClusterRole",
        "pod-reader",
        &[("User", &format!("user-{name}"))],
    )
}

/// The `metadata.name` of a rendered manifest (the first two-space-indented `name:`).
fn manifest_name(manifest: &str) -> String {
    manifest
        .lines()
        .find_map(|line| line.strip_prefix("  name: "))
        .map(|name| name.trim().trim_matches('"').trim_matches('\'').to_string())
        .unwrap_or_else(|| panic!("no name in {manifest}"))
}

/// Streams writes from `WRITERS` connections until the server dies; kills it at `point`.
async fn write_until_killed(
    server: &mut Server,
    round: usize,
    point: KillPoint,
    ledger: &Arc<Mutex<Ledger>>,
) -> usize {
    let acks = Arc::new(AtomicUsize::new(0));
    let acked_signal = Arc::new(Notify::new());
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let mut admin = PolicyAdminClient::new(server.channel().await);
        let ledger = Arc::clone(ledger);
        let acks = Arc::clone(&acks);
        let acked_signal = Arc::clone(&acked_signal);
        writers.push(tokio::spawn(async move {
            for seq in 0.. {
                let name = format!("r{round}-w{writer}-{seq:05}");
                ledger.lock().unwrap().sent.insert(name.clone());
                let applied = admin
                    .apply(ApplyRequest {
                        manifest: binding(&name),
                        dry_run: false,
                        ..Default::default()
                    })
                    .await;
                match applied {
                    Ok(_) => {
                        ledger.lock().unwrap().acked.insert(name);
                        acks.fetch_add(1, Ordering::SeqCst);
                        acked_signal.notify_waiters();
                    }
                    // The server is gone.
                    Err(_) => return,
                }
            }
        }));
    }
    match point {
        KillPoint::AfterAcks(n) => {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let woken = acked_signal.notified();
                tokio::pin!(woken);
                woken.as_mut().enable();
                if acks.load(Ordering::SeqCst) >= n {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "only {acks:?} writes acknowledged"
                );
                let _ = tokio::time::timeout(Duration::from_millis(200), woken).await;
            }
        }
        KillPoint::After(delay) => tokio::time::sleep(delay).await,
    }
    server.kill();
    for writer in writers {
        tokio::time::timeout(Duration::from_secs(30), writer)
            .await
            .expect("writers stop once the server is gone")
            .unwrap();
    }
    acks.load(Ordering::SeqCst)
}

/// Hidden temporary files the store left behind (`.NAME.tmp-PID-N`).
fn leftover_temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n.contains(".tmp-"))
        .collect()
}

/// The restarted server holds every acknowledged binding, intact, and nothing never sent.
async fn verify(server: &Server, dir: &Path, ledger: &Ledger) -> (usize, usize) {
    let mut admin = PolicyAdminClient::new(server.channel().await);
    let status = admin.status(StatusRequest {}).await.unwrap().into_inner();
    assert_eq!(status.revision, 1, "a fresh start publishes revision 1");
    assert!(status.last_error.is_empty(), "{}", status.last_error);

    let listed = admin
        .list(ListRequest {
            kind: "RoleBinding".into(),
            namespace: NAMESPACE.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .manifests;
    let names: BTreeSet<String> = listed.iter().map(|m| manifest_name(m)).collect();
    assert_eq!(names.len(), listed.len(), "a binding loaded twice");
    let lost: Vec<&String> = ledger.acked.difference(&names).collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    let unknown: Vec<&String> = names.difference(&ledger.sent).collect();
    assert!(unknown.is_empty(), "loaded but never written: {unknown:?}");
    for name in &ledger.acked {
        let manifest = admin
            .get(GetRequest {
                object: Some(ObjectRef {
                    kind: "RoleBinding".into(),
                    namespace: NAMESPACE.into(),
                    name: name.clone(),
                }),
            })
            .await
            .unwrap_or_else(|e| panic!("Get {name}: {e:?}"))
            .into_inner()
            .manifest;
        assert!(
            manifest.contains(&format!("user-{name}")) && manifest.contains("pod-reader"),
            "{name} is not intact:\n{manifest}"
        );
    }
    // Every policy file on disk is one loaded binding (plus the roles file); temporary files
    // may be left over, and are not loaded.
    let files = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("rolebinding."))
        .count();
    assert_eq!(files, names.len());
    (names.len(), leftover_temp_files(dir).len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("roles.yaml"), POD_READER).unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut server = Server::start_serving(dir.path(), &[]).await;
    let points = [
        KillPoint::AfterAcks(1),
        KillPoint::AfterAcks(12),
        KillPoint::After(Duration::from_millis(250)),
        KillPoint::AfterAcks(40),
    ];
    for (round, point) in points.into_iter().enumerate() {
        let acked = write_until_killed(&mut server, round, point, &ledger).await;
        // Restart on the same directory: it must load (start_serving waits for SERVING; a
        // policy that does not load stops the server).
        server = Server::start_serving(dir.path(), &[]).await;
        let written = {
            let ledger = ledger.lock().unwrap();
            Ledger {
                sent: ledger.sent.clone(),
                acked: ledger.acked.clone(),
            }
        };
        let (loaded, temps) = verify(&server, dir.path(), &written).await;
        println!(
            "kill -9 {point:?}: {acked} acknowledged this round; after restart {loaded} bindings loaded ({} acknowledged, {} sent in all), {temps} leftover temporary files skipped",
            written.acked.len(),
            written.sent.len()
        );
    }
}
