//! The callers' caches that follow this server's policy (WatchInvalidations,
//! docs/caller-cache.md): what each published change invalidates, sent in revision order, and
//! what each subscriber has applied, which a write's acknowledgement waits for.
//!
//! # Why an acknowledged change reaches every subscriber
//!
//! A subscriber answers from memory only while it holds a *proof*: a heartbeat it asked for
//! with a probe sent at `t0` (its clock), which the server answers after every change it had
//! published when it read the probe. Once the subscriber has read the heartbeat it has applied
//! all those changes (the stream is ordered), so every change published before `t0` is in its
//! cache. It keeps the proof for `--max-staleness` from `t0` (less the server's own proof
//! age, etcd mode), then stops answering from memory until the next one.
//!
//! Here, each heartbeat is recorded with the revision it covers and when it was made, in the
//! same critical section that collects the changes sent before it ([`Subscription::heartbeat`]),
//! so a heartbeat either covers a change or was recorded before the change was published.
//! A write published at `R` is acknowledged ([`Subscribers::acknowledge`]) when each subscriber
//! has either confirmed `R` or outlived every proof recorded below `R`: the proofs that could
//! let it answer from before `R` were made before they were recorded, so they expire first.
//! A subscriber that is frozen, slow or cut off therefore delays a write by at most
//! `--max-staleness`, and is reported fenced.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::policy::impact::Impact;
use crate::store::etcd::{AckMode, AckReport};
use crate::telemetry::metrics::SubscriberTableFigures;

/// Changes kept for subscribers that fall behind or reconnect, counted in subject keys (8 bytes
/// each): one that needs an older change than the history holds starts over from everything.
const HISTORY_KEYS: usize = 1 << 20;
/// And counted in changes.
const HISTORY_CHANGES: usize = 4096;
/// Subscribers at once, unless [`Subscribers::with_max`] says otherwise.
pub const DEFAULT_MAX_SUBSCRIBERS: usize = 1024;
/// Proofs kept per subscriber: more than `--max-staleness` holds at one probe per fifth of it.
const PROOFS_KEPT: usize = 16;

/// What a subscription sends, in order.
#[derive(Clone, Debug)]
pub enum Event {
    /// The change published at `revision` may have changed the answers `impact` covers.
    Invalidate { revision: u64, impact: Arc<Impact> },
    /// Everything published up to `revision` was sent before this. `proof_age`: how old the
    /// server's own proof of being current is (zero in directory mode); `None` when it has
    /// none, and the subscriber must not renew its proof.
    Heartbeat {
        revision: u64,
        probe: u64,
        proof_age: Option<Duration>,
    },
}

/// A write's reach among subscribers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubscribersAck {
    pub confirmed: u32,
    pub fenced: u32,
}

/// A write's reach: replicas (etcd mode) and this server's subscribers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acknowledged {
    pub replicas: AckReport,
    pub subscribers: SubscribersAck,
}

/// One subscriber as `Status` lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct SubscriberFigures {
    pub id: String,
    pub applied_revision: u64,
    pub connected: bool,
    /// Since its last heartbeat; `None` before the first.
    pub proof_age: Option<Duration>,
}

/// Why a subscription was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubscribeError {
    #[error("too many invalidation subscribers (at most {max}); retry later")]
    TooMany { max: usize },
    #[error("subscriber_id must be 1 to 253 characters")]
    BadId,
}

/// The longest subscriber id: a Kubernetes object name's bound (a DNS subdomain, RFC 1123),
/// so a pod or service account name fits, and a table listing ids stays bounded.
pub const MAX_SUBSCRIBER_ID_BYTES: usize = 253;

/// The subscriber table and the recent changes.
pub struct Subscribers {
    /// Revisions are comparable within one epoch: this process's (see `docs/caller-cache.md
    /// §2`), so that a subscriber reconnecting to a restarted server starts over.
    epoch: u64,
    max_staleness: Duration,
    max: usize,
    inner: Mutex<Inner>,
    /// Woken when a subscriber confirms, records a proof or leaves.
    changed: Notify,
    /// The latest revision in the history.
    published: watch::Sender<u64>,
}

struct Inner {
    /// The changes after `floor`, oldest first.
    history: VecDeque<(u64, Arc<Impact>)>,
    history_keys: usize,
    /// A subscriber holding this revision or later can be sent exactly the changes since.
    floor: u64,
    head: u64,
    next_key: u64,
    table: BTreeMap<u64, Entry>,
    /// Confirmations that advanced a subscriber's applied revision, since startup.
    confirmations: u64,
    /// Subscribers an acknowledgement counted fenced, at most once per subscriber and revision
    /// (in etcd mode the writing replica waits for a revision twice: for its report and for
    /// the write).
    fenced: u64,
}

struct Entry {
    id: String,
    applied: u64,
    connected: bool,
    /// The heartbeats recorded, newest last: the revision each covered and when it was made,
    /// less the server's proof age (the instant its proof stands from, on this clock).
    proofs: VecDeque<Proof>,
    /// The latest revision it was counted fenced for.
    fenced_for: u64,
}

#[derive(Clone, Copy, Debug)]
struct Proof {
    head: u64,
    from: Instant,
}

fn unpoisoned<'a, T>(
    guard: Result<MutexGuard<'a, T>, PoisonError<MutexGuard<'a, T>>>,
) -> MutexGuard<'a, T> {
    guard.unwrap_or_else(PoisonError::into_inner)
}

impl Subscribers {
    pub fn new(max_staleness: Duration) -> Self {
        Self {
            epoch: new_epoch(),
            max_staleness,
            max: DEFAULT_MAX_SUBSCRIBERS,
            inner: Mutex::new(Inner {
                history: VecDeque::new(),
                history_keys: 0,
                floor: 0,
                head: 0,
                next_key: 0,
                table: BTreeMap::new(),
                confirmations: 0,
                fenced: 0,
            }),
            changed: Notify::new(),
            published: watch::channel(0).0,
        }
    }

    /// At most `max` subscribers at once.
    #[must_use]
    pub fn with_max(mut self, max: usize) -> Self {
        self.max = max.max(1);
        self
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn max_staleness(&self) -> Duration {
        self.max_staleness
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        unpoisoned(self.inner.lock())
    }

    /// The change published at `revision` (called by the single writer, in order, after the
    /// new snapshot is in force).
    pub fn published(&self, revision: u64, impact: &Impact) {
        let mut inner = self.lock();
        if inner.head == 0 {
            // The first policy: nothing before it to replay.
            inner.floor = revision;
        } else {
            let kept = if impact.everything {
                Impact::everything()
            } else {
                impact.clone()
            };
            inner.history_keys += kept.key_count();
            inner.history.push_back((revision, Arc::new(kept)));
            while inner.history.len() > HISTORY_CHANGES
                || (inner.history_keys > HISTORY_KEYS && inner.history.len() > 1)
            {
                if let Some((dropped, impact)) = inner.history.pop_front() {
                    inner.history_keys -= impact.key_count();
                    inner.floor = dropped;
                }
            }
        }
        inner.head = revision;
        drop(inner);
        self.published.send_replace(revision);
    }

    /// A new subscription for a cache named `id` holding `held` of `epoch` (0, 0 when empty).
    pub fn subscribe(
        self: &Arc<Self>,
        id: String,
        epoch: u64,
        held: u64,
    ) -> Result<Subscription, SubscribeError> {
        if id.is_empty() || id.len() > MAX_SUBSCRIBER_ID_BYTES {
            return Err(SubscribeError::BadId);
        }
        let mut inner = self.lock();
        prune(&mut inner, self.max_staleness);
        if inner.table.values().filter(|e| e.connected).count() >= self.max {
            return Err(SubscribeError::TooMany { max: self.max });
        }
        let key = inner.next_key;
        inner.next_key += 1;
        let exact = epoch == self.epoch && held >= inner.floor && held <= inner.head;
        let sent = if exact { held } else { 0 };
        inner.table.insert(
            key,
            Entry {
                id,
                applied: sent,
                connected: true,
                proofs: VecDeque::new(),
                fenced_for: 0,
            },
        );
        Ok(Subscription {
            subscribers: Arc::clone(self),
            key,
            sent,
            published: self.published.subscribe(),
        })
    }

    /// Waits until every subscriber has confirmed `revision`, or has outlived every proof it
    /// was given below it (then it is counted fenced: it answers nothing from memory until
    /// it has caught up). At most `--max-staleness` after the last heartbeat before the
    /// change was published.
    pub async fn acknowledge(&self, revision: u64) -> SubscribersAck {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let now = Instant::now();
            let (ack, next_deadline) = {
                let mut guard = self.lock();
                let inner = &mut *guard;
                let mut ack = SubscribersAck::default();
                let mut next: Option<Instant> = None;
                for entry in inner.table.values() {
                    if entry.applied >= revision {
                        ack.confirmed += 1;
                        continue;
                    }
                    let expires = entry
                        .proofs
                        .iter()
                        .filter(|p| p.head < revision)
                        .map(|p| p.from + self.max_staleness)
                        .max();
                    match expires {
                        Some(at) if at > now => next = Some(next.map_or(at, |n| n.min(at))),
                        _ => ack.fenced += 1,
                    }
                }
                if next.is_none() {
                    // The answer: every subscriber not confirmed is fenced; counted once.
                    for entry in inner.table.values_mut() {
                        if entry.applied < revision && entry.fenced_for < revision {
                            entry.fenced_for = revision;
                            inner.fenced += 1;
                        }
                    }
                }
                (ack, next)
            };
            let Some(deadline) = next_deadline else {
                return ack;
            };
            let _ = tokio::time::timeout_at(deadline, changed).await;
        }
    }

    /// The subscribers now, for `Status`.
    pub fn figures(&self) -> Vec<SubscriberFigures> {
        let mut inner = self.lock();
        prune(&mut inner, self.max_staleness);
        let now = Instant::now();
        inner
            .table
            .values()
            .map(|entry| SubscriberFigures {
                id: entry.id.clone(),
                applied_revision: entry.applied,
                connected: entry.connected,
                proof_age: entry
                    .proofs
                    .back()
                    .map(|p| now.saturating_duration_since(p.from)),
            })
            .collect()
    }

    /// The table in figures, for `/metrics`: one set of series whatever the subscribers are
    /// named (their ids are the callers' to choose; `Status` lists them one by one).
    pub fn table_figures(&self) -> SubscriberTableFigures {
        let mut inner = self.lock();
        prune(&mut inner, self.max_staleness);
        let now = Instant::now();
        let head = inner.head;
        let mut figures = SubscriberTableFigures {
            listed: inner.table.len() as u64,
            confirmations: inner.confirmations,
            fenced: inner.fenced,
            ..Default::default()
        };
        for entry in inner.table.values().filter(|e| e.connected) {
            figures.connected += 1;
            let lag = head.saturating_sub(entry.applied);
            if lag > 0 {
                figures.behind += 1;
            }
            figures.max_lag_revisions = figures.max_lag_revisions.max(lag);
            let proved = entry
                .proofs
                .back()
                .is_some_and(|p| p.from + self.max_staleness > now);
            if !proved {
                figures.without_proof += 1;
            }
        }
        figures
    }
}

/// Forgets subscribers whose stream closed once none of their proofs can still be in use.
fn prune(inner: &mut Inner, max_staleness: Duration) {
    let now = Instant::now();
    inner.table.retain(|_, entry| {
        entry.connected
            || entry
                .proofs
                .back()
                .is_some_and(|p| p.from + max_staleness > now)
    });
}

/// A per-process value that a restarted server does not repeat.
fn new_epoch() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mixed = (nanos ^ (u64::from(std::process::id()) << 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    mixed.max(1)
}

/// One subscriber's stream: what is still to be sent to it, and what it confirmed.
pub struct Subscription {
    subscribers: Arc<Subscribers>,
    key: u64,
    /// The revision sent last (0: nothing yet, the first events start over from everything).
    sent: u64,
    published: watch::Receiver<u64>,
}

impl Subscription {
    pub fn epoch(&self) -> u64 {
        self.subscribers.epoch
    }

    /// The changes published since the last sent.
    pub fn pending(&mut self) -> Vec<Event> {
        let subscribers = Arc::clone(&self.subscribers);
        let inner = subscribers.lock();
        self.collect(&inner)
    }

    fn collect(&mut self, inner: &Inner) -> Vec<Event> {
        if inner.head == 0 || self.sent >= inner.head {
            return Vec::new();
        }
        let events = if self.sent < inner.floor {
            // Behind what the history holds (or new): start over.
            vec![Event::Invalidate {
                revision: inner.head,
                impact: Arc::new(Impact::everything()),
            }]
        } else {
            inner
                .history
                .iter()
                .filter(|(revision, _)| *revision > self.sent)
                .map(|(revision, impact)| Event::Invalidate {
                    revision: *revision,
                    impact: Arc::clone(impact),
                })
                .collect()
        };
        self.sent = inner.head;
        events
    }

    /// The changes still to send, then a heartbeat answering `probe`: recorded as a proof
    /// covering the revision sent, in the same critical section that collected them (the
    /// module docs say why). `proof_age` gives the server's own proof's age for that revision
    /// (zero in directory mode), `None` when it cannot vouch for it: then no proof is recorded.
    pub fn heartbeat(
        &mut self,
        probe: u64,
        proof_age: impl FnOnce(u64) -> Option<Duration>,
    ) -> Vec<Event> {
        let subscribers = Arc::clone(&self.subscribers);
        let mut inner = subscribers.lock();
        let mut events = self.collect(&inner);
        let revision = self.sent;
        let proof_age = proof_age(revision);
        if let (Some(age), Some(entry)) = (proof_age, inner.table.get_mut(&self.key)) {
            let from = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
            entry.proofs.push_back(Proof {
                head: revision,
                from,
            });
            while entry.proofs.len() > PROOFS_KEPT {
                entry.proofs.pop_front();
            }
        }
        drop(inner);
        subscribers.changed.notify_waiters();
        events.push(Event::Heartbeat {
            revision,
            probe,
            proof_age,
        });
        events
    }

    /// The subscriber applied every change up to `revision` (only what was sent counts).
    pub fn confirm(&self, revision: u64) {
        let mut inner = self.subscribers.lock();
        let sent = self.sent;
        if let Some(entry) = inner.table.get_mut(&self.key) {
            let confirmed = revision.min(sent);
            if confirmed > entry.applied {
                entry.applied = confirmed;
                inner.confirmations += 1;
                drop(inner);
                self.subscribers.changed.notify_waiters();
            }
        }
    }

    /// Waits until a change is published that this subscription has not sent.
    pub async fn next_change(&mut self) {
        let sent = self.sent;
        let _ = self.published.wait_for(|head| *head > sent).await;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut inner = self.subscribers.lock();
        if let Some(entry) = inner.table.get_mut(&self.key) {
            entry.connected = false;
        }
        prune(&mut inner, self.subscribers.max_staleness);
        drop(inner);
        self.subscribers.changed.notify_waiters();
    }
}

// --- The serving verbs ---------------------------------------------------------------------

impl super::ServingState {
    /// Admits `caller` as a subscriber (`watch` on `decisioninvalidations`, checked on the
    /// snapshot in force) for a cache named `id` holding `held` of `epoch`.
    pub async fn subscribe(
        &self,
        caller: super::Caller,
        id: String,
        epoch: u64,
        held: u64,
    ) -> Result<Subscription, super::Refusal> {
        self.admit(caller, super::Privilege::WATCH_INVALIDATIONS, 0)
            .await?;
        self.subscribers
            .subscribe(id, epoch, held)
            .map_err(|refused| match refused {
                SubscribeError::TooMany { .. } => super::Refusal::Exhausted(refused.to_string()),
                SubscribeError::BadId => super::Refusal::Invalid {
                    field: "subscriber_id",
                    problem: "must be 1 to 253 characters".into(),
                },
            })
    }

    /// What this server can vouch for to its subscribers about the policy at `revision`: how
    /// old its own proof of being current is (always current in directory mode, where it is
    /// the only writer), `None` while it cannot prove it (etcd mode, fenced).
    pub fn proof_age(&self, revision: u64) -> Option<Duration> {
        match self.freshness.get() {
            None => Some(Duration::ZERO),
            Some(freshness) => freshness.proof_age_for(revision),
        }
    }

    /// How long subscribers may keep a proof (`--max-staleness`): how often they probe.
    pub fn subscriber_staleness(&self) -> Duration {
        self.subscribers.max_staleness()
    }

    /// How far a write committed at `revision` reached, as `mode` asks: with
    /// [`AckMode::Cluster`], this server's subscribers confirmed it or were fenced and, in etcd
    /// mode, every live replica applied it (each after its own subscribers) or was fenced.
    pub async fn acknowledge(
        &self,
        replication: &super::ReplicationCell,
        revision: u64,
        mode: AckMode,
    ) -> Acknowledged {
        let replicas = async {
            match replication.get() {
                Some(replication) => replication.acknowledge(revision, mode).await,
                None => AckReport::default(),
            }
        };
        let subscribers = async {
            match mode {
                AckMode::Cluster => self.subscribers.acknowledge(revision).await,
                AckMode::Local | AckMode::Committed => SubscribersAck::default(),
            }
        };
        let (replicas, subscribers) = tokio::join!(replicas, subscribers);
        Acknowledged {
            replicas,
            subscribers,
        }
    }

    /// The subscribers now, for `Status`.
    pub fn subscriber_figures(&self) -> Vec<SubscriberFigures> {
        self.subscribers.figures()
    }

    /// The subscriber table in figures, for `/metrics`.
    pub fn subscriber_table_figures(&self) -> SubscriberTableFigures {
        self.subscribers.table_figures()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::impact::SubjectKey;

    fn impact_of(user: &str) -> Impact {
        let mut impact = Impact::default();
        impact.insert_cluster(SubjectKey::User(user));
        impact
    }

    fn revisions(events: &[Event]) -> Vec<(u64, bool)> {
        events
            .iter()
            .map(|e| match e {
                Event::Invalidate { revision, impact } => (*revision, impact.everything),
                Event::Heartbeat { revision, .. } => (*revision, false),
            })
            .collect()
    }

    /// A new subscriber starts over from everything; one holding a revision of this epoch is
    /// sent exactly the changes since, in order; one of another epoch starts over.
    #[tokio::test]
    async fn replays_exactly_or_starts_over() {
        let subscribers = Arc::new(Subscribers::new(Duration::from_secs(5)));
        subscribers.published(1, &Impact::everything());
        subscribers.published(2, &impact_of("alice"));
        subscribers.published(3, &impact_of("bob"));
        let epoch = subscribers.epoch();

        let mut fresh = subscribers.subscribe("a".into(), 0, 0).unwrap();
        assert_eq!(revisions(&fresh.pending()), [(3, true)]);
        let mut held = subscribers.subscribe("b".into(), epoch, 1).unwrap();
        assert_eq!(revisions(&held.pending()), [(2, false), (3, false)]);
        let mut other = subscribers.subscribe("c".into(), epoch ^ 1, 2).unwrap();
        assert_eq!(revisions(&other.pending()), [(3, true)]);
        assert!(held.pending().is_empty());
        subscribers.published(4, &impact_of("carol"));
        assert_eq!(revisions(&held.pending()), [(4, false)]);
        assert_eq!(
            revisions(&fresh.heartbeat(7, |_| Some(Duration::ZERO))),
            [(4, false), (4, false)]
        );
    }

    /// The acknowledgement of a change waits for a confirmation, or for the subscriber's last
    /// proof below the change to expire — on tokio's paused clock.
    #[tokio::test(start_paused = true)]
    async fn acknowledgement_waits_for_confirmation_or_the_proof_to_expire() {
        let max = Duration::from_secs(2);
        let subscribers = Arc::new(Subscribers::new(max));
        subscribers.published(1, &Impact::everything());
        let mut a = subscribers.subscribe("a".into(), 0, 0).unwrap();
        let mut b = subscribers.subscribe("b".into(), 0, 0).unwrap();
        a.heartbeat(1, |_| Some(Duration::ZERO));
        b.heartbeat(1, |_| Some(Duration::ZERO));
        a.confirm(1);
        b.confirm(1);

        tokio::time::advance(Duration::from_millis(500)).await;
        subscribers.published(2, &impact_of("alice"));
        let started = Instant::now();
        let ack = {
            let subscribers = Arc::clone(&subscribers);
            tokio::spawn(async move { subscribers.acknowledge(2).await })
        };
        // `a` reads the change and confirms it; `b` never does.
        assert_eq!(revisions(&a.pending()), [(2, false)]);
        a.confirm(2);
        let ack = ack.await.unwrap();
        assert_eq!(
            ack,
            SubscribersAck {
                confirmed: 1,
                fenced: 1
            }
        );
        // b's proof was made 500 ms before the change: it expired 1.5 s after it.
        assert_eq!(started.elapsed(), Duration::from_millis(1500));

        // A confirmation only counts for what was sent.
        subscribers.published(3, &impact_of("bob"));
        b.confirm(3);
        assert_eq!(
            subscribers.acknowledge(3).await,
            SubscribersAck {
                confirmed: 0,
                fenced: 2
            }
        );
    }

    /// A heartbeat covers the changes it was sent after: a subscriber that has one covering the
    /// change but has not confirmed it yet is waited for only as long as its older proofs last;
    /// a subscriber that left is forgotten once its proofs have expired.
    #[tokio::test(start_paused = true)]
    async fn a_subscriber_that_left_is_waited_for_until_its_proof_expires() {
        let max = Duration::from_secs(1);
        let subscribers = Arc::new(Subscribers::new(max));
        subscribers.published(1, &Impact::everything());
        let mut a = subscribers.subscribe("a".into(), 0, 0).unwrap();
        a.heartbeat(1, |_| Some(Duration::ZERO));
        drop(a);
        assert_eq!(subscribers.figures().len(), 1);
        assert!(!subscribers.figures()[0].connected);
        subscribers.published(2, &impact_of("alice"));
        let started = Instant::now();
        assert_eq!(
            subscribers.acknowledge(2).await,
            SubscribersAck {
                confirmed: 0,
                fenced: 1
            }
        );
        assert_eq!(started.elapsed(), max);
        assert!(subscribers.figures().is_empty());
    }

    /// A server that cannot vouch for its policy records no proof: its subscribers are not
    /// waited for (they cannot answer from memory on what it sends).
    #[tokio::test(start_paused = true)]
    async fn no_proof_without_the_servers_own() {
        let subscribers = Arc::new(Subscribers::new(Duration::from_secs(5)));
        subscribers.published(1, &Impact::everything());
        let mut a = subscribers.subscribe("a".into(), 0, 0).unwrap();
        a.heartbeat(1, |_| None);
        subscribers.published(2, &impact_of("alice"));
        let started = Instant::now();
        assert_eq!(
            subscribers.acknowledge(2).await,
            SubscribersAck {
                confirmed: 0,
                fenced: 1
            }
        );
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    /// The figures `/metrics` shows: who is connected, how far behind and without a proof;
    /// the confirmations, and a subscriber fenced counted once per revision however often the
    /// revision is waited for (etcd mode waits twice on the writing replica).
    #[tokio::test(start_paused = true)]
    async fn the_table_in_figures() {
        let max = Duration::from_secs(1);
        let subscribers = Arc::new(Subscribers::new(max));
        subscribers.published(1, &Impact::everything());
        let mut a = subscribers.subscribe("a".into(), 0, 0).unwrap();
        let b = subscribers.subscribe("b".into(), 0, 0).unwrap();
        a.heartbeat(1, |_| Some(Duration::ZERO));
        a.confirm(1);
        subscribers.published(5, &impact_of("alice"));
        a.pending();
        a.confirm(5);
        a.confirm(5);
        assert_eq!(
            subscribers.table_figures(),
            SubscriberTableFigures {
                listed: 2,
                connected: 2,
                behind: 1,
                max_lag_revisions: 5,
                without_proof: 1,
                confirmations: 2,
                fenced: 0,
            }
        );
        for _ in 0..2 {
            assert_eq!(
                subscribers.acknowledge(5).await,
                SubscribersAck {
                    confirmed: 1,
                    fenced: 1
                }
            );
        }
        assert_eq!(subscribers.table_figures().fenced, 1);

        // a's proof runs out; b leaves (it had none: forgotten at once).
        tokio::time::advance(max).await;
        drop(b);
        let figures = subscribers.table_figures();
        assert_eq!(
            (figures.listed, figures.connected, figures.behind),
            (1, 1, 0)
        );
        assert_eq!((figures.max_lag_revisions, figures.without_proof), (0, 1));
    }

    #[test]
    fn refuses_past_the_limit_and_bad_ids() {
        let subscribers = Arc::new(Subscribers::new(Duration::from_secs(5)).with_max(1));
        let _a = subscribers.subscribe("a".into(), 0, 0).unwrap();
        assert_eq!(
            subscribers.subscribe("b".into(), 0, 0).err(),
            Some(SubscribeError::TooMany { max: 1 })
        );
        assert_eq!(
            subscribers.subscribe(String::new(), 0, 0).err(),
            Some(SubscribeError::BadId)
        );
    }
}
