//! Callers' caches in etcd mode (docs/caller-cache.md §4): a replica reports a revision applied
//! only once its own subscribers have confirmed it (or been fenced), so a write acknowledged
//! across the fleet on replica A has reached the subscribers of replica B.
//!
//! etcd comes from `AUTHZD_E2E_ETCD`, else `etcd` on PATH; without one the test is skipped
//! with a message, unless `CI=true`, where a missing etcd is a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::etcd::{etcd_binary, unique_prefix, Cluster, Replica};
use crate::support::wait::eventually;
use authzd::caller::{Client, Endpoint, LocalCacheConfig};
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::invalidation_event::Event;
use authzd::proto::{InvalidationsRequest, StatusRequest};
use authzd::request::Request;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const READER: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: pod-reader}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list, watch]}
"#;

const FRANK_READS: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: frank-read}
subjects: [{kind: User, name: frank}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-reader}
"#;

/// Long beside a write's round trip through etcd (milliseconds), short beside
/// `--max-staleness` (5 s here): a replica that did not wait for this subscriber would
/// report the revision applied long before it confirms, and one that waits is not driven to
/// fence it.
const SLOW: Duration = Duration::from_millis(1500);

fn frank_gets_pods() -> Request {
    crate::support::server::get_pods("frank", &[], "default")
}

/// What the slow subscriber has seen: heartbeats, and each revision it confirmed with when it
/// sent the confirmation.
#[derive(Default)]
struct Seen {
    heartbeats: u32,
    confirmed: Vec<(u64, Instant)>,
}

/// A subscriber on the wire (no library): it probes every 200 ms, so the server holds a fresh
/// proof for it, and confirms each invalidation only [`SLOW`] after it arrived.
struct SlowSubscriber {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl SlowSubscriber {
    async fn start(replica: &Replica, id: &str) -> SlowSubscriber {
        let (outgoing, requests) = mpsc::channel(16);
        outgoing
            .send(InvalidationsRequest {
                subscriber_id: id.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let mut events = AuthorizerClient::new(replica.server.channel().await)
            .watch_invalidations(ReceiverStream::new(requests))
            .await
            .unwrap()
            .into_inner();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let task = tokio::spawn({
            let seen = Arc::clone(&seen);
            async move {
                let mut ticker = tokio::time::interval(Duration::from_millis(200));
                let (mut probe, mut applied) = (0u64, 0u64);
                loop {
                    tokio::select! {
                        _ = ticker.tick() => {
                            probe += 1;
                            let request = InvalidationsRequest {
                                probe,
                                applied_revision: applied,
                                ..Default::default()
                            };
                            if outgoing.send(request).await.is_err() {
                                return;
                            }
                        }
                        event = events.message() => {
                            let Ok(Some(event)) = event else { return };
                            match event.event {
                                Some(Event::Invalidation(_)) => {
                                    tokio::time::sleep(SLOW).await;
                                    applied = event.revision;
                                    seen.lock().unwrap().confirmed.push((applied, Instant::now()));
                                    let confirm = InvalidationsRequest {
                                        applied_revision: applied,
                                        ..Default::default()
                                    };
                                    if outgoing.send(confirm).await.is_err() {
                                        return;
                                    }
                                }
                                Some(Event::Heartbeat(_)) => seen.lock().unwrap().heartbeats += 1,
                                None => {}
                            }
                        }
                    }
                }
            }
        });
        SlowSubscriber { seen, task }
    }

    /// When it sent its confirmation of `revision`, if it has.
    fn confirmed_at(&self, revision: u64) -> Option<Instant> {
        let seen = self.seen.lock().unwrap();
        seen.confirmed
            .iter()
            .find(|(confirmed, _)| *confirmed >= revision)
            .map(|(_, at)| *at)
    }

    fn heartbeats(&self) -> u32 {
        self.seen.lock().unwrap().heartbeats
    }
}

impl Drop for SlowSubscriber {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Replica B has two subscribers: the library's cache, answering frank's allow from memory,
/// and a subscriber that confirms each change 1.5 s late. A revocation written on replica A
/// with the cluster acknowledgement returns only after B's slow subscriber confirmed it (B
/// reported the revision applied after its subscribers), and right after it B's cache answers
/// the deny. A's counts are its own subscribers' (none); B counts among the replicas
/// confirmed, not fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_on_one_replica_reaches_the_subscribers_of_another_before_it_is_acknowledged() {
    let Some(binary) = etcd_binary() else { return };
    let cluster = Cluster::start(binary);
    let prefix = unique_prefix("subscribers");
    let staleness = ["--max-staleness", "5s"];
    let mut a = Replica::start(&cluster, &prefix, "a", &staleness).await;
    let b = Replica::start(&cluster, &prefix, "b", &staleness).await;
    a.apply(READER).await;
    let granted = a.apply(FRANK_READS).await;

    let frank = frank_gets_pods();
    let client = Client::connect(&Endpoint::new(b.server.url()))
        .await
        .unwrap()
        .with_local_cache(LocalCacheConfig::new("b-cache"));
    let cached = eventually(
        Duration::from_secs(10),
        || "frank's allow answered from the memory of B's subscriber".to_string(),
        || async {
            let answer = client.authorize(&frank).await.unwrap();
            answer.from_local_cache.then_some(answer)
        },
    )
    .await;
    assert!(cached.allowed(), "{cached:?}");
    assert_eq!(cached.response.revision, granted.revision);

    let slow = SlowSubscriber::start(&b, "b-slow").await;
    eventually(
        Duration::from_secs(10),
        || "the slow subscriber of B has confirmed the grant and holds a proof".to_string(),
        || async {
            (slow.confirmed_at(granted.revision).is_some() && slow.heartbeats() > 0).then_some(())
        },
    )
    .await;

    let written = Instant::now();
    let revoked = a.delete_binding("frank-read").await;
    let acknowledged = Instant::now();
    // At once: no answer of B's subscriber says the old allow, from memory or otherwise.
    let after = client.authorize(&frank).await.unwrap();
    assert!(
        !after.allowed() && after.response.revision >= revoked.revision,
        "B's subscriber answered on the policy before an acknowledged revocation: {after:?}"
    );
    let confirmed_at = slow.confirmed_at(revoked.revision);
    assert!(
        confirmed_at.is_some_and(|at| at <= acknowledged),
        "A acknowledged the revocation {:?} after it was sent, before B's slow subscriber \
         confirmed it (at {:?}): B reported it applied without waiting for its subscribers",
        acknowledged - written,
        confirmed_at.map(|at| at.saturating_duration_since(written)),
    );
    let mut replicas = revoked.replicas_confirmed.clone();
    replicas.sort();
    assert_eq!(replicas, ["a", "b"], "{revoked:?}");
    assert!(revoked.replicas_fenced.is_empty(), "{revoked:?}");
    assert_eq!(
        (revoked.subscribers_confirmed, revoked.subscribers_fenced),
        (0, 0),
        "the counts are the writing replica's own subscribers: {revoked:?}"
    );

    // B lists both, at the revocation.
    let status = b
        .admin
        .clone()
        .status(StatusRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut listed: Vec<(&str, bool, bool)> = status
        .subscribers
        .iter()
        .map(|s| {
            (
                s.id.as_str(),
                s.connected,
                s.applied_revision >= revoked.revision,
            )
        })
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [("b-cache", true, true), ("b-slow", true, true)],
        "{status:?}"
    );
}
