//! The decision cache in the caller's process: the server's [`DecisionCache`], holding the
//! server's cacheable answers, answering only while fresh.
//!
//! Fresh means holding a proof ([`super::follow`]): the server answered a probe sent at `t0`
//! after sending every change it had published when it read it, so every change published
//! before `t0` has been applied here. The proof lasts until `t0 + max_staleness - proof age`;
//! past it, or from the moment the stream breaks, every request is asked of the server.
//!
//! Revisions are tagged with a *generation*, bumped whenever the stream breaks or starts
//! over: the cache accepts an insert only at the generation and revision it is at (the
//! server's own rule, `cache` module docs), so an answer fetched before a break, or from a
//! server that restarted, is never inserted after it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cache::{CacheConfig, CacheKey, CachedValue, DecisionCache, Probe};
use crate::counter::Counter;
use crate::policy::impact::Impact;
use crate::proto;
use crate::request::RequestRef;

/// The clock a hit reads: `CLOCK_MONOTONIC_COARSE`, the monotonic clock as of its last tick
/// (a few nanoseconds to read, where `Instant::now` costs about twenty — a tenth of a hit).
/// It lags the fine clock by at most one tick, so a proof is held against it shortened by
/// [`Coarse::margin`] (two ticks): read late, it still runs out before the proof does.
struct Coarse {
    margin: u64,
}

impl Coarse {
    fn new() -> Self {
        let resolution = rustix::time::clock_getres(rustix::time::ClockId::MonotonicCoarse);
        let tick = nanos(resolution);
        Self {
            margin: tick.max(1_000_000).saturating_mul(2),
        }
    }

    /// Nanoseconds on the coarse clock.
    #[inline]
    fn now(&self) -> u64 {
        nanos(rustix::time::clock_gettime(
            rustix::time::ClockId::MonotonicCoarse,
        ))
    }
}

fn nanos(time: rustix::time::Timespec) -> u64 {
    u64::try_from(time.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(time.tv_nsec).unwrap_or(0))
}

/// Revision bits of a tagged revision; the generation is above them.
const REVISION_BITS: u32 = 40;

fn tagged(generation: u64, revision: u64) -> u64 {
    (generation << REVISION_BITS) | (revision & ((1 << REVISION_BITS) - 1))
}

impl CachedValue for Arc<proto::AuthorizeResponse> {
    fn is_allow(&self) -> bool {
        self.allowed
    }
}

#[derive(Clone, Debug)]
pub struct LocalCacheConfig {
    /// Entries at most (the server's `--cache-size` default).
    pub capacity: usize,
    /// The id the server's `Status` lists this cache under.
    pub subscriber_id: String,
    /// The longest this cache keeps a proof, whatever the server allows (its
    /// `--max-staleness` bounds it too).
    pub max_staleness: Duration,
}

impl LocalCacheConfig {
    pub fn new(subscriber_id: impl Into<String>) -> Self {
        Self {
            capacity: 100_000,
            subscriber_id: subscriber_id.into(),
            max_staleness: Duration::from_secs(5),
        }
    }
}

/// The cache's counters, read without locks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalFigures {
    pub entries: u64,
    /// Answered from memory.
    pub hits: u64,
    /// Asked of the server while fresh (then kept when cacheable).
    pub misses: u64,
    /// Asked of the server because the cache was not fresh.
    pub fenced_requests: u64,
    /// Invalidations received and applied.
    pub invalidations_applied: u64,
    /// Entries those invalidations removed.
    pub entries_invalidated: u64,
    /// How long the cache has been without a proof, in all (since it was created).
    pub fenced_time: Duration,
    /// Whether it holds a proof now (answers from memory).
    pub fresh: bool,
    /// The server revision applied last.
    pub applied_revision: u64,
}

/// What a lookup found.
pub enum Local {
    Hit(Arc<proto::AuthorizeResponse>),
    /// Ask the server; insert its answer with [`LocalCache::insert`] and this generation.
    Miss(u64),
    /// Ask the server and keep nothing: not fresh, or a request too large to cache.
    Bypass,
}

pub struct LocalCache {
    cache: DecisionCache<Arc<proto::AuthorizeResponse>>,
    config: LocalCacheConfig,
    /// Times below are nanoseconds of this clock.
    clock: Coarse,
    /// When the current proof runs out (0: no proof).
    fresh_until: AtomicU64,
    /// See the module docs.
    generation: AtomicU64,
    /// The server's epoch and the revision applied last, as the next subscription gives them.
    epoch: AtomicU64,
    applied: AtomicU64,
    fenced_requests: Counter,
    invalidations_applied: Counter,
    entries_invalidated: Counter,
    /// Nanoseconds without a proof, up to `fenced_from` (when the last proof ran out or the
    /// stream broke, or 0 while fresh).
    fenced_nanos: AtomicU64,
    fenced_from: AtomicU64,
}

impl LocalCache {
    pub fn new(config: LocalCacheConfig) -> Self {
        let cache = DecisionCache::new(CacheConfig {
            capacity: config.capacity,
            allow_ttl: None,
            deny_ttl: None,
        });
        let local = Self {
            cache,
            config,
            clock: Coarse::new(),
            fresh_until: AtomicU64::new(0),
            generation: AtomicU64::new(1),
            epoch: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            fenced_requests: Counter::default(),
            invalidations_applied: Counter::default(),
            entries_invalidated: Counter::default(),
            fenced_nanos: AtomicU64::new(0),
            fenced_from: AtomicU64::new(1),
        };
        local.cache.begin_revision(tagged(1, 0));
        local
    }

    pub fn config(&self) -> &LocalCacheConfig {
        &self.config
    }

    #[inline]
    fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Whether a proof is in force now.
    #[inline]
    pub fn fresh(&self) -> bool {
        self.now() < self.fresh_until.load(Ordering::Acquire)
    }

    /// `request` answered from memory if it can be; `key` is filled for the insert.
    #[inline]
    pub fn lookup(&self, key: &mut CacheKey, request: RequestRef<'_>) -> Local {
        // The generation is read before the proof: an answer fetched from here on is inserted
        // only if no break or restart came between.
        let generation = self.generation.load(Ordering::Acquire);
        if !self.fresh() {
            self.fenced_requests.add(1);
            return Local::Bypass;
        }
        match self.cache.probe(key, request, u64::MAX) {
            Probe::Hit(response) => Local::Hit(response),
            Probe::Miss => Local::Miss(generation),
            Probe::Bypass => Local::Bypass,
        }
    }

    /// Keeps the server's answer (computed at `response.revision`) when the server said it
    /// may be kept and nothing changed since the lookup.
    pub fn insert(&self, key: &CacheKey, response: Arc<proto::AuthorizeResponse>, generation: u64) {
        if response.cacheable {
            let revision = tagged(generation, response.revision);
            self.cache.insert(key, response, revision);
        }
    }

    // --- The follower's side ------------------------------------------------------------

    pub(super) fn held(&self) -> (u64, u64) {
        (
            self.epoch.load(Ordering::Acquire),
            self.applied.load(Ordering::Acquire),
        )
    }

    /// The change published at `revision` of `epoch`: from now on only answers computed at
    /// it are kept, and every entry it may have changed is gone.
    pub(super) fn apply(&self, epoch: u64, revision: u64, impact: &Impact) {
        if epoch != self.epoch.load(Ordering::Acquire) {
            // Another server epoch: its revisions mean nothing next to ours.
            self.generation.fetch_add(1, Ordering::AcqRel);
            self.epoch.store(epoch, Ordering::Release);
        }
        let generation = self.generation.load(Ordering::Acquire);
        self.cache.begin_revision(tagged(generation, revision));
        let removed = self
            .cache
            .invalidate(impact, crate::cache::InvalidationCause::Apply);
        self.applied.store(revision, Ordering::Release);
        self.invalidations_applied.add(1);
        self.entries_invalidated.add(removed as u64);
    }

    /// A proof in force until `until` (a later one replaces an earlier one).
    pub(super) fn renew(&self, until: Instant) {
        let left = until.saturating_duration_since(Instant::now());
        let now = self.now();
        let until = now
            .saturating_add(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX))
            .saturating_sub(self.clock.margin);
        if until <= now {
            return;
        }
        let previous = self.fresh_until.fetch_max(until, Ordering::AcqRel);
        if previous <= now {
            // Fenced until now: since the proof ran out, or since the break.
            let from = self.fenced_from.swap(0, Ordering::AcqRel);
            let from = if from == 0 { previous } else { from };
            self.fenced_nanos
                .fetch_add(now.saturating_sub(from), Ordering::AcqRel);
        }
    }

    /// The stream broke: nothing from memory until a new proof, and nothing fetched before
    /// this is inserted after it.
    pub(super) fn fence(&self) {
        let now = self.now();
        let previous = self.fresh_until.swap(0, Ordering::AcqRel);
        let from = if previous > now { now } else { previous.max(1) };
        let _ = self
            .fenced_from
            .compare_exchange(0, from, Ordering::AcqRel, Ordering::Acquire);
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let applied = self.applied.load(Ordering::Acquire);
        self.cache.begin_revision(tagged(generation, applied));
    }

    /// The counters now.
    pub fn figures(&self) -> LocalFigures {
        let now = self.now();
        let fresh_until = self.fresh_until.load(Ordering::Acquire);
        let from = self.fenced_from.load(Ordering::Acquire);
        let fresh = now < fresh_until;
        let ongoing = if fresh {
            0
        } else {
            now.saturating_sub(if from == 0 { fresh_until } else { from })
        };
        let stats = &self.cache.stats;
        LocalFigures {
            entries: self.cache.len() as u64,
            hits: stats.hits.get(),
            misses: stats.misses.get(),
            fenced_requests: self.fenced_requests.get(),
            invalidations_applied: self.invalidations_applied.get(),
            entries_invalidated: self.entries_invalidated.get(),
            fenced_time: Duration::from_nanos(
                self.fenced_nanos
                    .load(Ordering::Acquire)
                    .saturating_add(ongoing),
            ),
            fresh,
            applied_revision: self.applied.load(Ordering::Acquire),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::impact::SubjectKey;
    use crate::request::{Action, Request, ResourceAttributes, UserInfo};

    fn request(user: &str) -> Request {
        Request {
            user: UserInfo {
                name: user.into(),
                ..Default::default()
            },
            action: Action::Resource(ResourceAttributes {
                namespace: "default".into(),
                verb: "get".into(),
                resource: "pods".into(),
                ..Default::default()
            }),
        }
    }

    fn answer(revision: u64, cacheable: bool) -> Arc<proto::AuthorizeResponse> {
        Arc::new(proto::AuthorizeResponse {
            allowed: true,
            revision,
            cacheable,
            ..Default::default()
        })
    }

    fn ask(local: &LocalCache, user: &str) -> (CacheKey, Local) {
        let mut key = CacheKey::default();
        let request = request(user);
        let found = local.lookup(&mut key, request.as_borrowed());
        (key, found)
    }

    /// Without a proof nothing is answered from memory; with one, a kept answer is; a change
    /// removes what it affects; a break fences at once and refuses what was fetched before it.
    #[test]
    fn answers_only_while_fresh_and_forgets_what_changes() {
        let local = LocalCache::new(LocalCacheConfig::new("t"));
        assert!(matches!(ask(&local, "alice").1, Local::Bypass));
        local.apply(7, 3, &Impact::everything());
        local.renew(Instant::now() + Duration::from_secs(60));
        let (key, found) = ask(&local, "alice");
        let Local::Miss(generation) = found else {
            panic!("a fresh cache misses first")
        };
        // Not cacheable, or computed at another revision: not kept.
        local.insert(&key, answer(3, false), generation);
        local.insert(&key, answer(2, true), generation);
        assert!(matches!(ask(&local, "alice").1, Local::Miss(_)));
        local.insert(&key, answer(3, true), generation);
        assert!(matches!(ask(&local, "alice").1, Local::Hit(_)));

        // A change for bob leaves alice's answer; one for alice removes it.
        let mut bob = Impact::default();
        bob.insert_cluster(SubjectKey::User("bob"));
        local.apply(7, 4, &bob);
        assert!(matches!(ask(&local, "alice").1, Local::Hit(_)));
        let mut alice = Impact::default();
        alice.insert_cluster(SubjectKey::User("alice"));
        local.apply(7, 5, &alice);
        let (key, found) = ask(&local, "alice");
        let Local::Miss(generation) = found else {
            panic!("invalidated")
        };

        // The stream breaks before the answer at 5 arrives: it is not kept.
        local.fence();
        assert!(matches!(ask(&local, "alice").1, Local::Bypass));
        local.insert(&key, answer(5, true), generation);
        local.renew(Instant::now() + Duration::from_secs(60));
        assert!(matches!(ask(&local, "alice").1, Local::Miss(_)));
        assert!(local.figures().fenced_requests >= 2);
        assert_eq!(local.figures().applied_revision, 5);
    }

    /// A proof that ran out fences as a break does; an expired one renews nothing.
    #[test]
    fn a_proof_runs_out() {
        let local = LocalCache::new(LocalCacheConfig::new("t"));
        local.apply(1, 1, &Impact::everything());
        local.renew(Instant::now() + Duration::from_millis(20));
        assert!(local.fresh());
        std::thread::sleep(Duration::from_millis(30));
        assert!(!local.fresh());
        local.renew(Instant::now() - Duration::from_millis(1));
        assert!(!local.fresh());
        assert!(local.figures().fenced_time > Duration::ZERO);
    }
}
