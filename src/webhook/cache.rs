//! The webhooks' answer cache: least recently used, each entry with its own expiry, as
//! upstream's `cache.LRUExpireCache` (`k8s.io/apimachinery/pkg/util/cache/lruexpirecache.go`).
//! It holds SubjectAccessReview statuses for the Webhook authorizer and TokenReview answers
//! for the proxy's authenticator (`token_review.rs`).
//!
//! Times are passed in, never read here, so the tests decide what "now" is.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tokio::time::Instant;

use super::review::ReviewStatus;

/// Upstream's size: `cache.NewLRUExpireCache(8192)`.
pub(super) const CAPACITY: usize = 8192;

pub(super) struct AnswerCache<V = ReviewStatus> {
    capacity: usize,
    /// Keys are the JSON of a review's spec. A std `HashMap` (SipHash): the keys are the
    /// callers' own strings.
    entries: HashMap<Arc<str>, Entry<V>>,
    /// Recency: the entry last used has the highest stamp, the first to go the lowest.
    by_use: BTreeMap<u64, Arc<str>>,
    next_stamp: u64,
}

struct Entry<V> {
    status: V,
    expires: Instant,
    stamp: u64,
}

impl<V: Clone> AnswerCache<V> {
    pub(super) fn new(capacity: usize) -> Self {
        AnswerCache {
            capacity: capacity.max(1),
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
            next_stamp: 0,
        }
    }

    /// The entry for `key`, if it has not expired at `now`; an expired entry is removed. A
    /// hit makes the entry the most recently used.
    pub(super) fn get(&mut self, key: &str, now: Instant) -> Option<V> {
        let entry = self.entries.get(key)?;
        // Upstream's test is `now.After(expireTime)`: an entry is good up to its expiry.
        if now > entry.expires {
            self.remove(key);
            return None;
        }
        let old = entry.stamp;
        let stamp = self.stamp();
        let entry = self.entries.get_mut(key)?;
        entry.stamp = stamp;
        let status = entry.status.clone();
        if let Some(shared) = self.by_use.remove(&old) {
            self.by_use.insert(stamp, shared);
        }
        Some(status)
    }

    /// Stores `status` under `key` until `now + ttl` (replacing an entry for the same key),
    /// evicting the least recently used entry when the cache is full.
    pub(super) fn insert(&mut self, key: &str, status: V, now: Instant, ttl: std::time::Duration) {
        self.remove(key);
        if self.entries.len() >= self.capacity {
            if let Some((_, oldest)) = self.by_use.pop_first() {
                self.entries.remove(&oldest);
            }
        }
        let shared: Arc<str> = Arc::from(key);
        let stamp = self.stamp();
        self.by_use.insert(stamp, Arc::clone(&shared));
        self.entries.insert(
            shared,
            Entry {
                status,
                expires: now + ttl,
                stamp,
            },
        );
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn remove(&mut self, key: &str) {
        if let Some(entry) = self.entries.remove(key) {
            self.by_use.remove(&entry.stamp);
        }
    }

    fn stamp(&mut self) -> u64 {
        self.next_stamp += 1;
        self.next_stamp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn allowed(reason: &str) -> ReviewStatus {
        ReviewStatus {
            allowed: true,
            denied: false,
            reason: reason.into(),
        }
    }

    #[test]
    fn an_entry_lives_until_its_own_expiry() {
        let t0 = Instant::now();
        let mut cache = AnswerCache::new(8);
        cache.insert("long", allowed("a"), t0, Duration::from_secs(300));
        cache.insert("short", allowed("b"), t0, Duration::from_secs(30));
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(cache.get("short", at(30)), Some(allowed("b")));
        assert_eq!(cache.get("short", at(31)), None);
        assert_eq!(cache.len(), 1, "an expired entry is removed when found");
        assert_eq!(cache.get("long", at(299)), Some(allowed("a")));
        assert_eq!(cache.get("long", at(301)), None);
        assert_eq!(cache.get("never stored", t0), None);
    }

    #[test]
    fn storing_again_replaces_the_answer_and_its_expiry() {
        let t0 = Instant::now();
        let mut cache = AnswerCache::new(8);
        cache.insert("k", allowed("first"), t0, Duration::from_secs(1));
        cache.insert("k", allowed("second"), t0, Duration::from_secs(60));
        assert_eq!(cache.len(), 1);
        assert_eq!(
            cache.get("k", t0 + Duration::from_secs(30)),
            Some(allowed("second"))
        );
    }

    #[test]
    fn the_least_recently_used_entry_goes_first() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(60);
        let mut cache = AnswerCache::new(3);
        for key in ["a", "b", "c"] {
            cache.insert(key, allowed(key), t0, ttl);
        }
        // "a" is used, so "b" is now the least recently used.
        assert!(cache.get("a", t0).is_some());
        cache.insert("d", allowed("d"), t0, ttl);
        assert_eq!(cache.len(), 3);
        assert!(cache.get("b", t0).is_none());
        for key in ["a", "c", "d"] {
            assert!(cache.get(key, t0).is_some(), "{key} was evicted");
        }
    }

    #[test]
    fn the_size_stays_bounded() {
        let t0 = Instant::now();
        let mut cache = AnswerCache::new(CAPACITY);
        for i in 0..CAPACITY + 100 {
            cache.insert(&i.to_string(), allowed(""), t0, Duration::from_secs(60));
        }
        assert_eq!(cache.len(), CAPACITY);
        assert!(cache.get("0", t0).is_none());
        assert!(cache.get(&(CAPACITY + 99).to_string(), t0).is_some());
        assert_eq!(cache.by_use.len(), cache.entries.len());
    }
}
