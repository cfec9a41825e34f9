//! What makes an acknowledged change hold on every replica (docs/etcd.md §7-8).
//!
//! **Freshness.** Each replica proves, every `--max-staleness`/5, that it is current: a
//! linearizable read of the head key, sent at `t0`, returns the revision `M` of the newest
//! authzd write; once this replica has applied `M`, it was current at `t0` (nothing committed
//! before `t0` is newer than `M`). A replica whose last proof is older than `--max-staleness`
//! is *fenced*: it answers no allow and no who-can ([`Freshness::fenced`], checked per
//! request, cache hits included, so a replica frozen by SIGSTOP or a GC pause finds itself
//! fenced the moment it wakes).
//!
//! **Acknowledgement.** Every replica reports the revision it has applied under
//! `v1/replicas/ID`, on a lease. A write committed at revision `R` at time `tc` returns
//! (`ACK_CLUSTER`) once every registered replica reported `R`, or `--max-staleness` after the
//! commit: a replica that has not applied `R` cannot prove itself after `tc` (its head read
//! would return at least `R`), so by then its last proof is older than `--max-staleness` and it
//! is fenced. Either way, no request that starts after the acknowledgement gets an allow
//! computed on the older policy.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The fence's clock is tokio's, so that its tests can run on a paused clock.
use tokio::time::Instant as FenceInstant;

use tokio::sync::Notify;

use super::client::rpc;
use super::{Batch, EtcdClient, Keys};
use crate::policy::load::LoadOptions;
use crate::store::Store;

/// What a fenced replica does with an allow (`--on-stale`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OnStale {
    /// Refuse it with `UNAVAILABLE` (the webhook: no opinion); denies are still answered.
    #[default]
    Unavailable,
    /// Answer it as a deny.
    DenyAllows,
    /// Serve it anyway (availability over the guarantee; the operator's choice).
    ServeStale,
}

/// How far a write's acknowledgement reaches (`ApplyRequest.ack`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AckMode {
    /// Every live replica applied it or fenced itself (the default).
    #[default]
    Cluster,
    /// This replica applied it.
    Local,
    /// etcd committed it (this replica applied it too: a write waits for its own watch).
    Committed,
}

/// Who confirmed a write, and who was taken as fenced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AckReport {
    pub confirmed: Vec<String>,
    pub fenced: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct ReplicationConfig {
    /// This replica's id (`--replica-id`; host name and process id by default).
    pub id: String,
    pub max_staleness: Duration,
    pub on_stale: OnStale,
    /// ABAC lines (`--authorization-policy-file`), part of the policy beside what etcd holds.
    pub abac: Vec<crate::policy::model::AbacRule>,
}

/// How many recent proofs are kept. An answer is fresh when a proof at most `--max-staleness`
/// old covers the policy snapshot it was computed on; proofs come every `--max-staleness`/5,
/// so a few cover any request that did not itself take a whole proof interval.
const PROOFS_KEPT: usize = 4;

/// One proof of freshness: at `at` (nanoseconds from the epoch, when its read was sent; 0 =
/// none), etcd's head was `head`, and this replica had applied it.
#[derive(Clone, Copy, Debug, Default)]
struct Proof {
    at: u64,
    head: u64,
}

/// When this replica last proved itself current, checked per request.
///
/// A proof is a linearizable read of the head sent at `t0` that returned a revision this
/// replica had applied: every change committed before `t0` was then in its policy. An answer
/// computed on the snapshot at revision `S` is fresh only if some proof with `head <= S` is at
/// most `--max-staleness` old — not merely the latest proof: a proof made between loading the
/// snapshot and checking it may cover a revision the snapshot does not have (a replica waking
/// from SIGSTOP applies the revocation and proves itself while a request that started on the
/// old snapshot is still being answered).
#[derive(Debug)]
pub struct Freshness {
    epoch: FenceInstant,
    /// The last proofs, newest first.
    proofs: arc_swap::ArcSwap<[Proof; PROOFS_KEPT]>,
    max_staleness: Duration,
    pub on_stale: OnStale,
}

impl Freshness {
    pub fn new(max_staleness: Duration, on_stale: OnStale) -> Self {
        Self {
            epoch: FenceInstant::now(),
            proofs: arc_swap::ArcSwap::from_pointee([Proof::default(); PROOFS_KEPT]),
            max_staleness,
            on_stale,
        }
    }

    fn since_epoch(&self, at: FenceInstant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// How old the last proof is; `None` before the first.
    pub fn age(&self) -> Option<Duration> {
        let latest = self.proofs.load()[0];
        (latest.at != 0).then(|| {
            Duration::from_nanos(
                self.since_epoch(FenceInstant::now())
                    .saturating_sub(latest.at),
            )
        })
    }

    /// Whether this replica may be behind a change acknowledged elsewhere (readiness, status).
    pub fn fenced(&self) -> bool {
        if self.on_stale == OnStale::ServeStale {
            return false;
        }
        self.age().is_none_or(|age| age > self.max_staleness)
    }

    /// Whether an answer computed on the policy at `revision` may be behind a change
    /// acknowledged elsewhere: no recent enough proof covers that revision.
    pub fn fenced_for(&self, revision: u64) -> bool {
        if self.on_stale == OnStale::ServeStale {
            return false;
        }
        let now = self.since_epoch(FenceInstant::now());
        let limit = u64::try_from(self.max_staleness.as_nanos()).unwrap_or(u64::MAX);
        !self
            .proofs
            .load()
            .iter()
            .any(|p| p.at != 0 && p.head <= revision && now.saturating_sub(p.at) <= limit)
    }

    /// How old the newest proof covering `revision` is (its head at most `revision`), if one
    /// is recent enough that an answer at `revision` is not fenced: what this replica can
    /// vouch for to the caches it feeds (`serving::subscribers`). `serve-stale` vouches
    /// nothing: it gives up the guarantee a subscriber's proof would rest on.
    pub fn proof_age_for(&self, revision: u64) -> Option<Duration> {
        if self.on_stale == OnStale::ServeStale {
            return None;
        }
        let now = self.since_epoch(FenceInstant::now());
        let limit = u64::try_from(self.max_staleness.as_nanos()).unwrap_or(u64::MAX);
        self.proofs
            .load()
            .iter()
            .filter(|p| p.at != 0 && p.head <= revision)
            .map(|p| now.saturating_sub(p.at))
            .filter(|age| *age <= limit)
            .min()
            .map(Duration::from_nanos)
    }

    /// The refusal a fenced replica gives.
    pub fn refusal(&self) -> String {
        match self.age() {
            Some(age) => format!(
                "this replica is fenced: it last proved its policy current {:.1}s ago (--max-staleness {:.1}s); it answers denies only until etcd is reachable again",
                age.as_secs_f64(),
                self.max_staleness.as_secs_f64()
            ),
            None => "this replica is fenced: it has not yet proved its policy current with etcd".into(),
        }
    }

    /// Records a proof: the head read at `t0` was `head`, applied here. Proofs are made one
    /// at a time (one task), so they arrive in order.
    fn proved(&self, t0: FenceInstant, head: u64) {
        let proof = Proof {
            at: self.since_epoch(t0).max(1),
            head,
        };
        let previous = self.proofs.load();
        let mut proofs = [Proof::default(); PROOFS_KEPT];
        proofs[0] = proof;
        proofs[1..].copy_from_slice(&previous[..PROOFS_KEPT - 1]);
        self.proofs.store(Arc::new(proofs));
    }
}

/// What one proof found.
enum Proving {
    Proved,
    /// etcd's head is ahead of what this replica applied.
    Behind,
    /// etcd did not answer.
    Failed,
}

/// One replica's replication: the store it applies to, its lease and reports, the replica
/// table and its freshness.
pub struct Replication {
    pub(crate) client: Arc<EtcdClient>,
    pub(crate) keys: Keys,
    pub(crate) load: LoadOptions,
    pub store: Arc<Store>,
    pub freshness: Arc<Freshness>,
    config: ReplicationConfig,
    /// Woken when the proofs see the head move and the watch does not follow.
    pub(crate) restart_watch: Notify,
    /// The endpoint (index) the watch streams from.
    pub(crate) watching: std::sync::atomic::AtomicUsize,
    /// The head revision the latest proof read (0 before the first), for `Status`.
    head: std::sync::atomic::AtomicU64,
    lease: AtomicI64,
    /// Every registered replica and the revision it reported.
    replicas: Mutex<BTreeMap<String, u64>>,
    replicas_changed: Notify,
    /// The revision this replica applied last, for the reporter task: reports go out
    /// coalesced and off the applier's path (the applier never waits for etcd to take one).
    applied: tokio::sync::watch::Sender<u64>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Report {
    applied: u64,
}

impl Replication {
    /// Connects, registers this replica, lists the policy and publishes it, then starts the
    /// applier, the proofs and the lease keep-alive.
    pub async fn start(
        client: EtcdClient,
        prefix: &str,
        load: LoadOptions,
        config: ReplicationConfig,
        publisher: Arc<dyn crate::store::Publisher>,
    ) -> Result<Arc<Self>, super::EtcdError> {
        let client = Arc::new(client);
        let keys = Keys::new(prefix);
        super::initialize(&client, &keys).await?;
        let ttl = i64::try_from(config.max_staleness.as_secs().max(1) * 2)
            .unwrap_or(10)
            .max(2);
        let lease = client.lease_grant(ttl).await?;
        let listing = super::list(&client, &keys, &load).await?;
        for error in &listing.errors {
            tracing::error!(%error, "etcd: an object does not load; left out");
        }
        let sink = Arc::new(super::EtcdSink {
            client: Arc::clone(&client),
            keys: keys.clone(),
            writer: config.id.clone(),
        });
        let compiling = Instant::now();
        let mut policy = listing.policy;
        policy.abac = config.abac.clone();
        let store = Store::open(sink, policy, listing.revision, publisher);
        tracing::info!(
            compile_ms = compiling.elapsed().as_millis(),
            "etcd: policy published"
        );
        let freshness = Arc::new(Freshness::new(config.max_staleness, config.on_stale));
        let replication = Arc::new(Self {
            client,
            keys,
            load,
            store,
            freshness,
            config,
            restart_watch: Notify::new(),
            watching: std::sync::atomic::AtomicUsize::new(0),
            head: std::sync::atomic::AtomicU64::new(0),
            lease: AtomicI64::new(lease),
            replicas: Mutex::new(BTreeMap::new()),
            replicas_changed: Notify::new(),
            applied: tokio::sync::watch::channel(listing.revision).0,
        });
        replication.load_replicas().await?;
        replication.report(listing.revision).await;
        // The first proof before serving: a replica starts fenced until it has one.
        replication.prove().await;
        tokio::spawn(super::run_applier(
            Arc::clone(&replication),
            listing.read_at,
        ));
        tokio::spawn(Arc::clone(&replication).run_proofs());
        tokio::spawn(Arc::clone(&replication).run_reports());
        tokio::spawn(Arc::clone(&replication).run_lease(ttl));
        Ok(replication)
    }

    pub fn id(&self) -> &str {
        &self.config.id
    }

    pub fn active_endpoint(&self) -> String {
        self.client.active_endpoint()
    }

    /// etcd's head revision as the latest freshness proof read it; 0 before the first.
    pub fn head_revision(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    /// The replica table: id and the revision each reported.
    pub fn replicas(&self) -> BTreeMap<String, u64> {
        self.replicas.lock().map(|r| r.clone()).unwrap_or_default()
    }

    async fn load_replicas(&self) -> Result<(), super::EtcdError> {
        let prefix = self.keys.replicas();
        let response = self
            .client
            .range(rpc::RangeRequest {
                key: prefix.clone().into_bytes(),
                range_end: super::client::prefix_end(prefix.as_bytes()),
                ..Default::default()
            })
            .await?;
        let mut table = BTreeMap::new();
        for kv in response.kvs {
            let key = String::from_utf8_lossy(&kv.key).to_string();
            if let (Some(id), Ok(report)) = (
                key.strip_prefix(&prefix),
                serde_json::from_slice::<Report>(&kv.value),
            ) {
                table.insert(id.to_string(), report.applied);
            }
        }
        if let Ok(mut replicas) = self.replicas.lock() {
            *replicas = table;
        }
        Ok(())
    }

    /// Tells the others what this replica has applied (its key lives on its lease).
    async fn report(&self, applied: u64) {
        let key = format!("{}{}", self.keys.replicas(), self.config.id);
        let value = serde_json::to_vec(&Report { applied }).unwrap_or_default();
        let lease = self.lease.load(Ordering::Acquire);
        let put = rpc::RequestOp {
            request: Some(rpc::request_op::Request::RequestPut(rpc::PutRequest {
                key: key.into_bytes(),
                value,
                lease,
            })),
        };
        let result = self
            .client
            .txn(rpc::TxnRequest {
                compare: Vec::new(),
                success: vec![put],
                failure: Vec::new(),
            })
            .await;
        if let Err(error) = result {
            tracing::warn!(%error, applied, "etcd: cannot report the applied revision");
        }
    }

    /// One revision of watch events: the replica table, then the policy (reported once
    /// applied).
    pub(crate) async fn apply(&self, batch: Batch) {
        if !batch.replicas.is_empty() {
            if let Ok(mut table) = self.replicas.lock() {
                for (id, value) in &batch.replicas {
                    match value.as_deref().map(serde_json::from_slice::<Report>) {
                        Some(Ok(report)) => {
                            table.insert(id.clone(), report.applied);
                        }
                        Some(Err(_)) => {}
                        None => {
                            table.remove(id);
                        }
                    }
                }
            }
            self.replicas_changed.notify_waiters();
        }
        if batch.policy_moved {
            tracing::debug!(
                revision = batch.revision,
                objects = batch.policy.len(),
                "etcd: applying a revision"
            );
            self.store.apply_changes(batch.revision, batch.policy).await;
            self.applied.send_replace(batch.revision);
        }
    }

    /// Reports each newly applied revision (the latest, when several came meanwhile).
    async fn run_reports(self: Arc<Self>) {
        let mut applied = self.applied.subscribe();
        while applied.changed().await.is_ok() {
            let revision = *applied.borrow_and_update();
            // This replica's subscribers first: a write acknowledged across the fleet must
            // have reached the callers' caches each replica feeds.
            self.store.settled(revision).await;
            self.report(revision).await;
        }
    }

    /// Waits for a write committed at `revision` to reach as far as `mode` asks.
    pub async fn acknowledge(&self, revision: u64, mode: AckMode) -> AckReport {
        if mode != AckMode::Cluster {
            return AckReport {
                confirmed: vec![self.config.id.clone()],
                fenced: Vec::new(),
            };
        }
        let deadline = tokio::time::Instant::now() + self.config.max_staleness;
        loop {
            let changed = self.replicas_changed.notified();
            let table = self.replicas();
            let (confirmed, pending): (Vec<_>, Vec<_>) =
                table.iter().partition(|(_, applied)| **applied >= revision);
            let names = |list: Vec<(&String, &u64)>| -> Vec<String> {
                list.into_iter().map(|(id, _)| id.clone()).collect()
            };
            if pending.is_empty() {
                return AckReport {
                    confirmed: names(confirmed),
                    fenced: Vec::new(),
                };
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                // Past --max-staleness since the commit: whoever has not confirmed cannot
                // have proved itself since, and is fenced.
                return AckReport {
                    confirmed: names(confirmed),
                    fenced: names(pending),
                };
            }
        }
    }

    /// One proof: the head read linearizably, then this replica's applied revision.
    async fn prove(&self) -> Proving {
        let t0 = FenceInstant::now();
        let head = self
            .client
            .range(rpc::RangeRequest {
                key: self.keys.head().into_bytes(),
                ..Default::default()
            })
            .await;
        let newest = match head {
            Ok(response) => response
                .kvs
                .first()
                .map_or(0, |kv| u64::try_from(kv.mod_revision).unwrap_or(0)),
            Err(error) => {
                tracing::debug!(%error, "etcd: freshness proof failed");
                return Proving::Failed;
            }
        };
        self.head.fetch_max(newest, Ordering::AcqRel);
        if self.store.revision() >= newest {
            self.freshness.proved(t0, newest);
            return Proving::Proved;
        }
        Proving::Behind
    }

    async fn run_proofs(self: Arc<Self>) {
        let interval = (self.config.max_staleness / 5)
            .clamp(Duration::from_millis(20), Duration::from_secs(1));
        let mut behind = 0u32;
        loop {
            tokio::time::sleep(interval).await;
            match self.prove().await {
                Proving::Proved => behind = 0,
                // etcd unreachable: the read failed over by itself; nothing says the watch is
                // the problem.
                Proving::Failed => {}
                Proving::Behind => {
                    behind += 1;
                    // The head moved and the watch did not follow for a while: the member it
                    // streams from may be frozen. Leave it, and watch again.
                    if behind >= 3 {
                        behind = 0;
                        let watched = self.watching.load(Ordering::Acquire);
                        self.client.fail_over_from(watched);
                        self.restart_watch.notify_one();
                    }
                }
            }
        }
    }

    async fn run_lease(self: Arc<Self>, ttl: i64) {
        let every = Duration::from_secs(u64::try_from(ttl).unwrap_or(2).max(1)) / 3;
        loop {
            tokio::time::sleep(every).await;
            let lease = self.lease.load(Ordering::Acquire);
            match self.client.lease_keep_alive(lease).await {
                Ok(true) => {}
                Ok(false) => {
                    // Expired (this replica was frozen, or etcd lost it): a new lease, and the
                    // report again on it.
                    if let Ok(new) = self.client.lease_grant(ttl).await {
                        self.lease.store(new, Ordering::Release);
                        self.report(self.store.revision()).await;
                    }
                }
                Err(error) => tracing::debug!(%error, "etcd: lease keep-alive failed"),
            }
        }
    }

    /// Leaves the replica table (on shutdown): writers stop waiting for this replica.
    pub async fn leave(&self) {
        let lease = self.lease.load(Ordering::Acquire);
        if let Err(error) = self.client.lease_revoke(lease).await {
            tracing::debug!(%error, "etcd: cannot revoke the lease on shutdown");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// An answer is fresh only on a snapshot some recent proof covers: a proof made after the
    /// snapshot was loaded (of a newer head) does not vouch for it.
    /// On tokio's paused clock: time passes only when the test advances it.
    #[tokio::test(start_paused = true)]
    async fn a_proof_covers_only_snapshots_at_or_after_the_head_it_read() {
        let freshness = Freshness::new(Duration::from_millis(300), OnStale::Unavailable);
        assert!(
            freshness.fenced() && freshness.fenced_for(10),
            "never proved"
        );
        freshness.proved(FenceInstant::now(), 5);
        assert!(!freshness.fenced());
        assert!(!freshness.fenced_for(5) && !freshness.fenced_for(6));
        assert!(
            freshness.fenced_for(4),
            "a snapshot older than the proved head"
        );
        // An older proof of an older head still covers the older snapshot.
        freshness.proved(FenceInstant::now(), 8);
        assert!(!freshness.fenced_for(5) && freshness.fenced_for(4));
        // Proofs older than --max-staleness cover nothing.
        tokio::time::advance(Duration::from_millis(300)).await;
        assert!(
            !freshness.fenced_for(8),
            "exactly --max-staleness old still covers"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(freshness.fenced() && freshness.fenced_for(8) && freshness.fenced_for(100));
        // Only the last few proofs are kept.
        for head in 20..20 + PROOFS_KEPT as u64 {
            freshness.proved(FenceInstant::now(), head);
        }
        assert!(freshness.fenced_for(19) && !freshness.fenced_for(20));
        let serve_stale = Freshness::new(Duration::from_millis(1), OnStale::ServeStale);
        assert!(!serve_stale.fenced() && !serve_stale.fenced_for(1));
    }
}
