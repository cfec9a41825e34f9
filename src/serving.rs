//! The serving core: the compiled policy currently in force, swapped in whole, and the
//! decision caches in front of it — between the store and cache below and the protocol
//! adapters (`api`) above, which serve from it and never name the cache's internals.
//!
//! The store (the single writer) publishes each new policy state through [`Publisher`]; every
//! request takes the current [`Snapshot`] with one atomic load and answers from it alone, so a
//! request never mixes two policies. [`ServingState::publish`] keeps the order the cache's
//! no-stale-answer guarantee rests on.
//!
//! Every call enters here the same way, whichever adapter received it: [`ServingState::admit`]
//! (admission: the snapshot, the caller's privilege on it, impersonation) gives a [`Call`],
//! whose verbs decide, list and record from that one snapshot ([`call`]). The write guard of
//! policy writes is here too ([`write_guard`]).

pub mod admission;
pub mod call;
pub mod delegation;
pub mod privilege;
pub mod refusal;
pub mod search;
pub mod subscribers;
pub mod write_guard;

pub use admission::{Caller, Impersonating, Needed, Served};
pub use call::{Call, Question, WithContent};
pub use privilege::Privilege;
pub use refusal::Refusal;
pub use write_guard::WriteOp;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::sync::watch;

use crate::cache::{CacheConfig, CachedEngine, DecisionCache, InvalidationCause};
use crate::engine::{Decided, Decision, Engine, EngineConfig, Response};
use crate::policy::delta::{ChangedObject, PolicyDelta};
use crate::policy::impact::Impact;
use crate::policy::model::PolicySet;
use crate::records::audit::{AuditFigures, AuditLog};
use crate::records::decision::DecisionRecorder;
use crate::request::Request;
use crate::store::etcd::replication::Replication;
use crate::store::etcd::replication::{Freshness, OnStale};
use crate::store::{ChangeCause, Publisher};
use crate::telemetry::metrics::{
    AuditLogFigures, DecisionRecordFigures, EtcdFigures, Metrics, ScrapeFigures, StoreFigures,
};
use delegation::Delegation;

/// The replication, set once etcd mode has started (empty in directory mode).
pub type ReplicationCell = Arc<std::sync::OnceLock<Arc<Replication>>>;

/// Where the policy lives, read now: what `Status` answers and `/metrics` exports.
pub fn store_figures(replication: &ReplicationCell) -> StoreFigures {
    let Some(replication) = replication.get() else {
        return StoreFigures::Directory;
    };
    let freshness = &replication.freshness;
    StoreFigures::Etcd(EtcdFigures {
        replica_id: replication.id().to_string(),
        endpoint: replication.active_endpoint(),
        freshness_age: freshness.age(),
        fenced: freshness.fenced(),
        replicas: replication.replicas(),
        head_revision: replication.head_revision(),
    })
}

/// One compiled policy state and the revision it is published as.
pub struct Snapshot {
    pub engine: Arc<Engine>,
    /// 1 for the first successful load, then +1 per published change.
    pub revision: u64,
}

/// Privilege checks repeat a few (caller, review kind, namespace) triples; this bounds them.
const PRIVILEGE_CACHE_CAPACITY: usize = 10_000;

/// How long a caller's cache keeps a proof unless `--max-staleness` says otherwise (its default).
const DEFAULT_MAX_STALENESS: Duration = Duration::from_secs(5);

/// How long a `min_revision` call waits at most unless `--max-revision-wait` says otherwise.
const DEFAULT_MAX_REVISION_WAIT: Duration = Duration::from_secs(5);

/// How many published snapshots are kept besides the current one, so that a paginated search
/// (AuthZEN, docs/authzen.md §5) answers every page from the revision it started at. An
/// incremental update shares the partitions it did not touch, so a retained snapshot costs
/// what its changes cost; a full reload costs a whole index, hence a small number.
pub const RETAINED_SNAPSHOTS: usize = 8;

/// [`ServingState::traffic_impact`]'s answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrafficImpact {
    /// The cached requests re-decided.
    pub cached_requests: usize,
    /// Those whose answer the write would change.
    pub flips: Vec<Flip>,
}

/// A request whose answer a write would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flip {
    pub request: Request,
    /// Allowed now (and so denied after the write), or the other way round.
    pub allowed_before: bool,
}

/// Holds the current [`Snapshot`] (empty until the first policy compiles) and the cache.
pub struct ServingState {
    current: ArcSwapOption<Snapshot>,
    /// The last [`RETAINED_SNAPSHOTS`] snapshots replaced, oldest first: what a search pinned
    /// to an earlier revision is answered from ([`Self::snapshot_at`]). Written by `publish`
    /// (the store's single writer) and read only by pinned pages, so the lock is uncontended
    /// on every other path.
    retained: std::sync::Mutex<std::collections::VecDeque<Arc<Snapshot>>>,
    cache: DecisionCache,
    /// Privilege checks (`privilege::Gate`): decisions too, cached and invalidated exactly like
    /// `cache`, but kept apart so that `cache` and its counters hold only what callers asked.
    privileges: DecisionCache,
    engine_config: EngineConfig,
    revisions: watch::Sender<u64>,
    metrics: Arc<Metrics>,
    /// etcd mode: this replica's freshness, checked on every allow (empty in directory mode,
    /// where the check is one atomic load).
    freshness: std::sync::OnceLock<Arc<Freshness>>,
    /// The chain's webhooks, when it has any (`--authorization-mode …,Webhook`).
    delegation: std::sync::OnceLock<Arc<Delegation>>,
    /// Where calls and policy writes are recorded, when `--audit-log` is on.
    audit: std::sync::OnceLock<Arc<AuditLog>>,
    /// Where every decision is recorded, when `--decision-records` is on.
    records: std::sync::OnceLock<Arc<DecisionRecorder>>,
    /// The longest a `min_revision` call waits when its deadline allows more (or it has none).
    max_revision_wait: Duration,
    /// The callers' caches following this server (WatchInvalidations).
    subscribers: Arc<subscribers::Subscribers>,
}

/// Whether the server should receive traffic (`/readyz`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// No policy has compiled yet.
    NoPolicy,
    /// etcd mode: this replica cannot prove its policy current with etcd.
    Fenced,
}

/// The decision cache's counters, as `Status` reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheFigures {
    pub entries: u64,
    pub hits: u64,
    pub misses: u64,
    pub inserts: u64,
    pub evictions: u64,
    pub invalidations: u64,
    pub stale_inserts_refused: u64,
}

/// How a fenced replica (etcd mode, `--on-stale unavailable`) answers an allow it may not
/// give: refused (gRPC's `UNAVAILABLE`, Envoy's failure mode), or — on the
/// SubjectAccessReview-shaped HTTP endpoints, as the webhook contract has an authorizer that
/// cannot evaluate answer — no opinion, with why in its evaluation error (kube-apiserver then
/// asks its next authorizer). The HTTP adapter marks its requests with `NoOpinion` as a request
/// extension; the decision itself is made here, counted and audited like any other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FencedAllow {
    #[default]
    Refuse,
    NoOpinion,
}

impl ServingState {
    pub fn new(engine_config: EngineConfig, cache: CacheConfig) -> Self {
        Self {
            current: ArcSwapOption::empty(),
            retained: std::sync::Mutex::new(std::collections::VecDeque::new()),
            privileges: DecisionCache::new(CacheConfig {
                capacity: cache.capacity.min(PRIVILEGE_CACHE_CAPACITY),
                ..cache.clone()
            }),
            cache: DecisionCache::new(cache),
            engine_config,
            revisions: watch::channel(0).0,
            metrics: Arc::new(Metrics::new()),
            freshness: std::sync::OnceLock::new(),
            delegation: std::sync::OnceLock::new(),
            audit: std::sync::OnceLock::new(),
            records: std::sync::OnceLock::new(),
            max_revision_wait: DEFAULT_MAX_REVISION_WAIT,
            subscribers: Arc::new(subscribers::Subscribers::new(DEFAULT_MAX_STALENESS)),
        }
    }

    /// Callers' caches hold a proof of being current for at most `max_staleness`
    /// (`--max-staleness`), and at most `max_subscribers` follow this server at once.
    #[must_use]
    pub fn with_subscribers(mut self, max_staleness: Duration, max_subscribers: usize) -> Self {
        self.subscribers =
            Arc::new(subscribers::Subscribers::new(max_staleness).with_max(max_subscribers));
        self
    }

    /// `min_revision` calls wait at most `wait` (`--max-revision-wait`).
    #[must_use]
    pub fn with_max_revision_wait(mut self, wait: Duration) -> Self {
        self.max_revision_wait = wait;
        self
    }

    /// Calls and policy writes are recorded in `audit` from now on.
    pub fn set_audit(&self, audit: Arc<AuditLog>) {
        let _ = self.audit.set(audit);
    }

    /// Every decision is recorded by `records` from now on.
    pub fn set_records(&self, records: Arc<DecisionRecorder>) {
        let _ = self.records.set(records);
    }

    /// Shutdown: the decision records' last gap line is queued (see
    /// [`DecisionRecorder::close`]).
    pub fn close_records(&self) {
        if let Some(records) = self.records.get() {
            records.close();
        }
    }

    /// A policy write (applied or refused) recorded in the audit log, when there is one.
    pub fn record_write(
        &self,
        rpc: &str,
        caller: &crate::request::UserInfo,
        impersonated: Option<&crate::request::UserInfo>,
        request: impl FnOnce() -> serde_json::Value,
        outcome: Result<(u64, serde_json::Value), String>,
    ) {
        if let Some(audit) = self.audit.get() {
            audit.write(rpc, caller, impersonated, request(), outcome);
        }
    }

    /// Audit entries written and lost, by reason (all 0 without a log).
    pub fn audit_figures(&self) -> AuditFigures {
        self.audit
            .get()
            .map_or_else(AuditFigures::default, |audit| audit.figures())
    }

    /// What a previewed write ([`crate::store::Store::preview`]) would change in who may do
    /// what. The engine in force is reused when it is the one the preview was checked
    /// against, and the write's engine is an incremental update of it, both as a real apply
    /// builds them; either is compiled in full otherwise. Blocking: call it off the async
    /// workers.
    pub fn access_delta(
        &self,
        preview: &crate::store::Preview,
    ) -> Result<crate::engine::delta::Delta, crate::engine::delta::DeltaError> {
        let (before, after) = self.preview_engines(preview);
        crate::engine::delta::access_delta(&preview.before, &preview.after, &before, &after)
    }

    /// What a previewed write would do to the traffic the server sees: of the requests its
    /// decision cache holds answers for (the distinct requests asked recently; at most
    /// `limit` of them read), each whose answer the write would flip, decided on the policy
    /// in force and on the policy the write makes: who, of those actually asking, a write would hit.
    pub fn traffic_impact(&self, preview: &crate::store::Preview, limit: usize) -> TrafficImpact {
        let (before, after) = self.preview_engines(preview);
        let cached = self.cache.cached_requests(limit);
        let flips = cached
            .iter()
            .filter_map(|request| {
                let was = before.authorize_borrowed(request.as_borrowed()).allowed();
                let will = after.authorize_borrowed(request.as_borrowed()).allowed();
                (was != will).then(|| Flip {
                    request: request.clone(),
                    allowed_before: was,
                })
            })
            .collect();
        TrafficImpact {
            cached_requests: cached.len(),
            flips,
        }
    }

    /// The engine of the policy a preview was checked at, and the one its write would make.
    fn preview_engines(&self, preview: &crate::store::Preview) -> (Arc<Engine>, Arc<Engine>) {
        self.engines_for(
            &preview.before,
            Some(preview.revision),
            &preview.after,
            Some(&preview.changed),
        )
    }

    /// The engines of `before` and of `after`: the one in force when `before` is the policy
    /// published at `revision`, and `after`'s as an incremental update of it when the changed
    /// objects are known; either compiled in full otherwise.
    fn engines_for(
        &self,
        before: &PolicySet,
        revision: Option<u64>,
        after: &PolicySet,
        changed: Option<&[crate::policy::delta::ChangedObject]>,
    ) -> (Arc<Engine>, Arc<Engine>) {
        let old = match self.snapshot() {
            Some(snapshot) if Some(snapshot.revision) == revision => Arc::clone(&snapshot.engine),
            _ => Arc::new(Engine::new(before, self.engine_config.clone())),
        };
        let new = changed
            .and_then(|changed| {
                old.update(&PolicyDelta::for_changes_in_canonical(after, changed))
                    .ok()
            })
            .unwrap_or_else(|| Engine::new(after, self.engine_config.clone()));
        (old, Arc::new(new))
    }

    /// The chain delegates to these webhooks from now on.
    pub fn set_delegation(&self, delegation: Arc<Delegation>) {
        let _ = self.delegation.set(delegation);
    }

    /// The chain's webhooks, if it has any.
    fn delegation(&self) -> Option<&Arc<Delegation>> {
        self.delegation.get()
    }

    /// etcd mode: answers are held to this replica's freshness from now on.
    pub fn set_freshness(&self, freshness: Arc<Freshness>) {
        let _ = self.freshness.set(freshness);
    }

    /// `decided`, computed on the policy at `revision`, as a fenced replica may give it (etcd
    /// mode, `--on-stale`): unless a recent proof covers that revision, an allow is refused
    /// (`unavailable`: as `fenced_allow` says) or turned into a deny (`deny-allows`); denies
    /// and no-opinions pass. Directory mode: unchanged.
    fn fresh(
        &self,
        decided: Decided,
        revision: u64,
        fenced_allow: FencedAllow,
    ) -> Result<Decided, Refusal> {
        let Some(freshness) = self.freshness.get() else {
            return Ok(decided);
        };
        if decided.response.decision != Decision::Allow || !freshness.fenced_for(revision) {
            return Ok(decided);
        }
        let answer = |decision: Decision, reason: String, errors: Vec<String>| Decided {
            response: Arc::new(Response {
                decision,
                reason,
                allowed_by: Vec::new(),
                denied_by: Vec::new(),
                errors,
                encoded: Default::default(),
                recorded: Default::default(),
                plan: Default::default(),
            }),
            cached: false,
            cacheable: false,
        };
        match (freshness.on_stale, fenced_allow) {
            (OnStale::Unavailable, FencedAllow::Refuse) => {
                Err(Refusal::Fenced(freshness.refusal()))
            }
            (OnStale::Unavailable, FencedAllow::NoOpinion) => Ok(answer(
                Decision::NoOpinion,
                String::new(),
                vec![freshness.refusal()],
            )),
            (OnStale::DenyAllows, _) => Ok(answer(Decision::Deny, freshness.refusal(), Vec::new())),
            (OnStale::ServeStale, _) => Ok(decided),
        }
    }

    /// Whether who-can may be answered: not while fenced (a list of who is allowed is an
    /// allow for each of them).
    fn fresh_for_who_can(&self, revision: u64) -> Result<(), Refusal> {
        match self.freshness.get() {
            Some(freshness) if freshness.fenced_for(revision) => {
                Err(Refusal::Fenced(freshness.refusal()))
            }
            _ => Ok(()),
        }
    }

    /// etcd mode: whether this replica is fenced now (readiness); never in directory mode.
    pub fn fenced(&self) -> bool {
        self.freshness.get().is_some_and(|f| f.fenced())
    }

    /// Whether the server should receive traffic now: a policy is loaded and, in etcd mode,
    /// this replica is not fenced.
    pub fn readiness(&self) -> Readiness {
        if self.current.load().is_none() {
            Readiness::NoPolicy
        } else if self.fenced() {
            Readiness::Fenced
        } else {
            Readiness::Ready
        }
    }

    /// The server's Prometheus instruments.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The figures `/metrics` reads at scrape time from the state itself. `reload_errors` and
    /// `store` are the store's and the replication's, filled by the caller.
    pub fn scrape_figures(&self) -> ScrapeFigures {
        let cache = &self.cache;
        let stats = &cache.stats;
        ScrapeFigures {
            revision: self.snapshot().map_or(0, |s| s.revision),
            reload_errors: 0,
            cache_entries: cache.len() as u64,
            cache_capacity: cache.capacity() as u64,
            cache_hits: stats.hits.get(),
            cache_misses: stats.misses.get(),
            cache_evictions: stats.evictions.get(),
            cache_invalidations: cache.invalidations(),
            cache_stale_inserts_refused: stats.stale_inserts_refused.get(),
            subscribers: self.subscriber_table_figures(),
            records: self.decision_record_figures(),
            audit: self.audit_log_figures(),
            store: Default::default(),
        }
    }

    /// Audit entries written and lost, by reason, for metrics (all zero without a log).
    fn audit_log_figures(&self) -> AuditLogFigures {
        let figures = self.audit_figures();
        AuditLogFigures {
            written: figures.written,
            dropped_queue_full: figures.queue_full,
            dropped_write_failed: figures.write_failed,
        }
    }

    /// Decision records taken, written and dropped (all zero when they are off).
    fn decision_record_figures(&self) -> DecisionRecordFigures {
        let Some(records) = self.records.get() else {
            return DecisionRecordFigures::default();
        };
        let figures = records.figures();
        DecisionRecordFigures {
            taken: figures.taken,
            written: figures.written,
            dropped_queue_full: figures.queue_full,
            dropped_write_failed: figures.write_failed,
        }
    }

    /// The snapshot in force, or `None` before the first successful load.
    pub fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.current.load_full()
    }

    /// The snapshot published at `revision`, if it is the current one or one of the
    /// [`RETAINED_SNAPSHOTS`] before it; `Err` with the oldest revision still held (0 when
    /// none) otherwise.
    pub fn snapshot_at(&self, revision: u64) -> Result<Arc<Snapshot>, u64> {
        let current = self.snapshot();
        if let Some(current) = current.as_ref().filter(|s| s.revision == revision) {
            return Ok(Arc::clone(current));
        }
        let retained = self.retained.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = retained.iter().find(|s| s.revision == revision) {
            return Ok(Arc::clone(found));
        }
        let oldest = retained
            .front()
            .map(|s| s.revision)
            .or(current.map(|s| s.revision));
        Err(oldest.unwrap_or(0))
    }

    /// The decision cache's counters now.
    pub fn cache_figures(&self) -> CacheFigures {
        let (cache, stats) = (&self.cache, &self.cache.stats);
        CacheFigures {
            entries: cache.len() as u64,
            hits: stats.hits.get(),
            misses: stats.misses.get(),
            inserts: stats.inserts.get(),
            evictions: stats.evictions.get(),
            invalidations: cache.invalidations(),
            stale_inserts_refused: stats.stale_inserts_refused.get(),
        }
    }

    /// The cache decorator over one snapshot: what calls are answered through.
    fn authorizer<'a>(&'a self, snapshot: &'a Snapshot) -> CachedEngine<'a> {
        CachedEngine {
            cache: &self.cache,
            engine: &snapshot.engine,
            revision: snapshot.revision,
        }
    }

    /// The privilege-cache decorator over one snapshot: what `privilege::Gate` asks.
    fn privilege_authorizer<'a>(&'a self, snapshot: &'a Snapshot) -> CachedEngine<'a> {
        CachedEngine {
            cache: &self.privileges,
            engine: &snapshot.engine,
            revision: snapshot.revision,
        }
    }

    /// The current snapshot once its revision is at least `min`, waiting at most `wait`.
    /// `Err(current)` (0 before the first load) when it is not reached in time.
    pub async fn snapshot_at_least(&self, min: u64, wait: Duration) -> Result<Arc<Snapshot>, u64> {
        let mut revisions = self.revisions.subscribe();
        let reached = tokio::time::timeout(wait, async {
            revisions.wait_for(|r| *r >= min.max(1)).await.is_ok()
        })
        .await
        .unwrap_or(false);
        match self.snapshot() {
            Some(snapshot) if reached && snapshot.revision >= min => Ok(snapshot),
            Some(snapshot) => Err(snapshot.revision),
            None => Err(0),
        }
    }
}

impl Publisher for ServingState {
    /// The order the cache's guarantee rests on (see `cache` module docs): refuse stale inserts,
    /// invalidate what the change affects, swap the engine, then announce the revision.
    /// Invalidating before the swap means no request answered from the new snapshot can hit
    /// an entry the change made stale, so a response's revision is always the one it was
    /// evaluated at.
    fn publish(
        &self,
        policy: &PolicySet,
        revision: u64,
        impact: &Impact,
        cause: ChangeCause,
        changed: Option<&[ChangedObject]>,
    ) {
        let cause = match cause {
            ChangeCause::Apply => InvalidationCause::Apply,
            ChangeCause::Delete => InvalidationCause::Delete,
            ChangeCause::Reload => InvalidationCause::Reload,
        };
        // An admin write updates only the index partitions it touched; startup and reloads
        // (which may change anything) compile in full. Either way, before the swap below.
        let engine = match (changed, self.snapshot()) {
            (Some(changed), Some(current)) => {
                let delta = PolicyDelta::for_changes_in_canonical(policy, changed);
                current.engine.update(&delta).unwrap_or_else(|error| {
                    tracing::warn!(%error, "incremental index update refused; compiling in full");
                    Engine::new(policy, self.engine_config.clone())
                })
            }
            _ => Engine::new(policy, self.engine_config.clone()),
        };
        let engine = Arc::new(engine);
        self.cache.begin_revision(revision);
        let removed = self.cache.invalidate(impact, cause);
        self.privileges.begin_revision(revision);
        self.privileges.invalidate(impact, cause);
        let replaced = self
            .current
            .swap(Some(Arc::new(Snapshot { engine, revision })));
        if let Some(replaced) = replaced {
            let mut retained = self.retained.lock().unwrap_or_else(|e| e.into_inner());
            if retained.len() >= RETAINED_SNAPSHOTS {
                retained.pop_front();
            }
            retained.push_back(replaced);
        }
        // Callers' caches hear of the change once it is in force here: an answer they fetch
        // at `revision` is then never older than the invalidation they receive for it.
        self.subscribers.published(revision, impact);
        tracing::debug!(revision, removed, ?cause, "policy published");
        self.revisions.send_replace(revision);
    }

    fn settled(
        &self,
        revision: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            self.subscribers.acknowledge(revision).await;
        })
    }

    /// The ChangeGates of the policy before the change, on engines of this server's chain
    /// (the one that answers requests, so the gate judges the answers it would give): the
    /// engine in force and an incremental update of it when the change is a write to the
    /// policy in force, as a real apply builds them. Nothing is built while no gate is in
    /// force.
    fn gate(&self, change: &crate::store::ProposedChange<'_>) -> Result<(), String> {
        if change.before.gates.is_empty() {
            return Ok(());
        }
        let (old, new) =
            self.engines_for(change.before, change.revision, change.after, change.changed);
        crate::engine::gate::check(
            &change.before.gates,
            change.before,
            change.after,
            &old,
            &new,
        )
        .map_err(|refusal| refusal.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_a_revision_and_times_out_with_the_current_one() {
        let state = Arc::new(ServingState::new(
            EngineConfig::default(),
            CacheConfig::default(),
        ));
        assert_eq!(
            state
                .snapshot_at_least(0, Duration::from_millis(1))
                .await
                .err(),
            Some(0)
        );
        let policy = PolicySet::default();
        state.publish(&policy, 1, &Impact::everything(), ChangeCause::Reload, None);
        let waiter = {
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                state
                    .snapshot_at_least(2, Duration::from_secs(5))
                    .await
                    .map(|s| s.revision)
            })
        };
        state.publish(&policy, 2, &Impact::default(), ChangeCause::Apply, None);
        assert_eq!(waiter.await.unwrap(), Ok(2));
        assert_eq!(
            state
                .snapshot_at_least(3, Duration::from_millis(5))
                .await
                .err(),
            Some(2)
        );
    }

    /// A replaced snapshot stays reachable by its revision for the next
    /// [`RETAINED_SNAPSHOTS`] publishes, then says which is the oldest still held.
    #[test]
    fn replaced_snapshots_are_kept_by_revision_for_a_while() {
        let state = ServingState::new(EngineConfig::default(), CacheConfig::default());
        assert_eq!(state.snapshot_at(1).err(), Some(0));
        let policy = PolicySet::default();
        let last = RETAINED_SNAPSHOTS as u64 + 3;
        for revision in 1..=last {
            state.publish(
                &policy,
                revision,
                &Impact::everything(),
                ChangeCause::Reload,
                None,
            );
        }
        let oldest = last - RETAINED_SNAPSHOTS as u64;
        for revision in oldest..=last {
            let found = state.snapshot_at(revision).map(|s| s.revision);
            assert_eq!(found, Ok(revision));
        }
        assert_eq!(state.snapshot_at(oldest - 1).err(), Some(oldest));
        assert_eq!(state.snapshot_at(last + 1).err(), Some(oldest));
        // The current one is the same allocation as `snapshot()`'s.
        let current = state.snapshot_at(last).unwrap();
        assert!(Arc::ptr_eq(&current, &state.snapshot().unwrap()));
    }
}

#[cfg(test)]
mod store_tests {
    use super::*;
    use crate::policy::load::{parse_manifest, LoadOptions};
    use crate::request::{Action, Request, ResourceAttributes, UserInfo};
    use crate::store::dir::DirectoryBackend;
    use crate::store::{ObjectKind, ObjectRef, Store};

    fn manifest(name: &str, namespace: &str, user: &str, role_kind: &str, role: &str) -> String {
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {name}, namespace: {namespace}}}\nsubjects: [{{kind: User, name: {user}}}]\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: {role_kind}, name: {role}}}\n"
        )
    }

    /// Admin writes take the incremental path; after each, the served engine answers exactly as
    /// a full compile of the store's policy would.
    #[tokio::test]
    async fn incremental_publishes_match_a_full_compile() {
        let dir = tempfile::tempdir().unwrap();
        let shipped = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/policy"));
        for entry in std::fs::read_dir(shipped).unwrap().flatten() {
            std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
        }
        let config = EngineConfig::default();
        let state = Arc::new(ServingState::new(config.clone(), CacheConfig::default()));
        let backend = DirectoryBackend::new(vec![dir.path().to_path_buf()], LoadOptions::default());
        let store = Store::open_directory(backend, state.clone()).unwrap();

        let users = ["jane", "dave", "alice", "Hubert", "Edgar", "bob", "zed"];
        let check = |store: &Store| {
            let fresh = Engine::new(&store.policy(), config.clone());
            let served = state.snapshot().unwrap();
            for user in users {
                for namespace in ["default", "development", "hammer", ""] {
                    for (verb, resource) in
                        [("get", "pods"), ("delete", "secrets"), ("create", "roles")]
                    {
                        let request = Request {
                            user: UserInfo {
                                name: user.into(),
                                ..Default::default()
                            },
                            action: Action::Resource(ResourceAttributes {
                                namespace: namespace.into(),
                                verb: verb.into(),
                                resource: resource.into(),
                                ..Default::default()
                            }),
                        };
                        assert_eq!(served.engine.authorize(&request), fresh.authorize(&request));
                    }
                }
            }
        };
        let writes = [
            manifest("zed-reads", "default", "zed", "Role", "pod-reader"),
            manifest("bob-secrets", "development", "bob", "ClusterRole", "secret-reader"),
            manifest("zed-reads", "default", "zed", "ClusterRole", "secret-reader"),
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: secret-reader}\nrules: [{apiGroups: [\"\"], resources: [secrets], verbs: [get, delete]}]\n".to_string(),
        ];
        for text in &writes {
            let objects = parse_manifest("m", text, &LoadOptions::default()).unwrap();
            store.apply(objects, None).await.unwrap();
            check(&store);
        }
        store
            .delete(
                &ObjectRef {
                    kind: ObjectKind::RoleBinding,
                    namespace: "default".into(),
                    name: "read-pods".into(),
                },
                None,
            )
            .await
            .unwrap();
        check(&store);
    }
}
