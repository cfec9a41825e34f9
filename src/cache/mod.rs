//! The decision cache: a sharded concurrent map (hashbrown tables, one lock per shard, keys
//! packed in one buffer per shard) in front of the engine, with the same interface,
//! revocation-aware and precise invalidation, and CLOCK eviction.
//!
//! The cache knows keys, decisions and revisions — never policy. What a change affects arrives
//! as an [`Impact`] (subjects and namespaces) computed by the policy layer.
//!
//! # The guarantee and why it holds
//!
//! Once a policy change is acknowledged, no request that starts afterwards is answered from a
//! decision computed on an older policy. The single writer applies a change in three steps:
//!
//! 1. [`DecisionCache::begin_revision`]`(new)`: from now on an insert is accepted only if it was
//!    computed at revision `new`;
//! 2. [`DecisionCache::invalidate`]`(impact)`: every entry the change can affect is removed;
//! 3. the new engine snapshot is published;
//!
//! and only then acknowledges. An insert checks the revision *while holding its shard's write
//! lock*, and step 2 takes every shard's write lock after step 1. So an insert computed on the
//! old snapshot either ran its check before step 1 — then it is in the map before step 2 visits
//! its shard and step 2 removes it — or after step 1, and it is refused. Entries the change cannot
//! affect stay: that is the precision. Hits take one shard read lock and compare revisions
//! (below); nothing else.
//!
//! Invalidating *before* the snapshot is published (not after) also keeps responses honest
//! about their revision: a request that loads the new snapshot finds no entry the change made
//! stale, so it never returns an old decision labelled with the new revision. (Requests still
//! on the old snapshot between steps 2 and 3 compute on it, are labelled with its revision, and
//! their inserts are refused.)
//!
//! Conversely, every entry remembers the revision it was computed at, and a request takes a
//! hit only from an entry computed at or before its own snapshot's revision
//! ([`DecisionCache::lookup_at`]): a request still on the old snapshot while the change is
//! published must not return a decision already computed on the new policy labelled with the
//! old revision. An entry computed at `r` and still present is unaffected by every change
//! since `r`, so it answers for any later snapshot.
//!
//! INVARIANT: after `invalidate(impact)` returns, no entry computed before `begin_revision`
//! whose key falls in `impact` is in the map, and none will be inserted later.

use std::hash::Hasher;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use hashbrown::hash_table::Entry as TableEntry;
use hashbrown::HashTable;
use rustc_hash::FxHasher;
use smallvec::SmallVec;

use crate::counter::Counter;
use crate::engine::{Decision, Response};
use crate::policy::impact::Impact;
use crate::request::{Action, ActionFields, Request, RequestRef};

/// Requests whose attributes add up to this many bytes or more are never cached (upstream's
/// webhook `shouldCache` uses the same bound): the caller controls them, and caching them would
/// let one client fill memory.
pub const MAX_CACHEABLE_ATTRIBUTE_BYTES: usize = 10_000;
/// Requests with more groups than this are evaluated but not cached.
pub const MAX_CACHEABLE_GROUPS: usize = 64;

#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// Maximum entries; 0 disables the cache.
    pub capacity: usize,
    /// Optional lifetimes, as defence in depth only: correctness never depends on them.
    pub allow_ttl: Option<Duration>,
    pub deny_ttl: Option<Duration>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            capacity: 100_000,
            allow_ttl: None,
            deny_ttl: None,
        }
    }
}

/// Counters, read without locks.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub hits: Counter,
    pub misses: Counter,
    pub inserts: Counter,
    pub evictions: Counter,
    pub expirations: Counter,
    /// Entries removed because a policy change could affect them, by cause.
    pub invalidated_by_apply: Counter,
    pub invalidated_by_delete: Counter,
    pub invalidated_by_reload: Counter,
    /// Inserts refused because the policy changed while they were being computed.
    pub stale_inserts_refused: Counter,
    /// Inserts skipped because the cache was at its hard limit, waiting for the sweeper.
    pub inserts_skipped_full: Counter,
}

/// Why entries were invalidated, for the per-cause counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidationCause {
    Apply,
    Delete,
    Reload,
}

struct CacheEntry<V> {
    /// The digest of the key (see [`CacheKey::fill`]): the table's hash, kept to rehash.
    digest: u64,
    /// Where the entry's canonical request bytes (see [`encode_into`]) are in its shard's
    /// [`Shard::keys`]: compared on every hit to tell digest collisions from hits, and decoded
    /// by invalidation to find the subject and namespace.
    key_at: u32,
    key_len: u32,
    response: V,
    /// The revision the response was computed at.
    revision: u64,
    expires: Option<Instant>,
    /// CLOCK reference bit: set on every hit, cleared by the eviction sweep.
    referenced: AtomicBool,
}

/// A request prepared for the cache: its canonical form (see `encode_into`) written once, from
/// the request's strings wherever they live (an owned [`Request`] or a request still on the
/// wire), and the digest of those bytes. A hit compares the bytes with the entry's in one go;
/// a miss copies them once, into its shard's key buffer.
///
/// The hot path (`CachedEngine`'s [`Authorize::decide`](crate::engine::Authorize::decide)) keeps one on its stack and has it filled
/// in place ([`DecisionCache::probe`]) and read in place ([`DecisionCache::insert`]):
/// at about 400 bytes, each move would be a `memcpy`.
#[derive(Clone, Default)]
pub struct CacheKey {
    digest: u64,
    encoded: EncodedKey,
}

impl CacheKey {
    #[cfg(test)]
    pub(crate) fn of(
        user: &str,
        groups: &[&str],
        action: crate::request::ActionRef<'_>,
    ) -> CacheKey {
        let mut key = CacheKey::default();
        key.fill(user, groups, &action.decision_fields());
        key
    }

    /// Writes the canonical form of the request into `key`, and its digest.
    fn fill(&mut self, user: &str, groups: &[&str], action: &ActionFields<'_>) {
        encode_into(&mut self.encoded, user, groups, action);
        let mut h = FxHasher::default();
        h.write(&self.encoded);
        // Fx is fast but weakly mixed; finish with a multiply-xorshift so the shard (middle
        // bits), hashbrown's buckets (low bits) and its tags (top bits) all spread.
        let mut digest = h.finish();
        digest ^= digest >> 33;
        digest = digest.wrapping_mul(0xff51_afd7_ed55_8ccd);
        digest ^= digest >> 33;
        self.digest = digest;
    }
}

/// A canonical form, on the stack up to [`KEY_INLINE_BYTES`] so that a lookup does not
/// allocate (a user in ten groups with a resource action is about 230 bytes); a longer one
/// is allocated once, at its exact size. (A `SmallVec<[u8; _]>` would do the same, but its
/// `extend_from_slice` is an insert: two library calls per field where this makes one; it
/// cost about 1.7k instructions per request in `scripts/profile.sh`.)
// Large on purpose: the inline bytes are the point.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub enum EncodedKey {
    Inline {
        len: usize,
        bytes: [u8; KEY_INLINE_BYTES],
    },
    Heap(Vec<u8>),
}
const KEY_INLINE_BYTES: usize = 384;

impl Default for EncodedKey {
    fn default() -> Self {
        EncodedKey::Inline {
            len: 0,
            bytes: [0; KEY_INLINE_BYTES],
        }
    }
}

impl std::ops::Deref for EncodedKey {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            EncodedKey::Inline { len, bytes } => bytes.get(..*len).unwrap_or_default(),
            EncodedKey::Heap(bytes) => bytes,
        }
    }
}

impl PartialEq for EncodedKey {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for EncodedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// Writes one length-prefixed field at `*at`; `false` (nothing written) if it does not fit.
fn put_field(dst: &mut [u8], at: &mut usize, field: &[u8]) -> bool {
    let end = *at + 2 + field.len();
    let Some((len, body)) = dst
        .get_mut(*at..end)
        .and_then(|slot| slot.split_first_chunk_mut::<2>())
    else {
        return false;
    };
    *len = (field.len() as u16).to_le_bytes();
    copy_short(body, field);
    *at = end;
    true
}

/// `dst.copy_from_slice(src)` for the short fields of a key without a call to `memmove`:
/// fixed-size head and tail copies (overlapping when the length is between sizes) are plain
/// moves. A key's dozen fields are mostly under 16 bytes, and the library call per field was
/// about a quarter of a local cache hit (`perf record` on `cargo bench --bench caller`).
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    fn head_tail<const N: usize>(dst: &mut [u8], src: &[u8]) {
        let n = src.len();
        if let (Some(d), Some(s)) = (dst.first_chunk_mut::<N>(), src.first_chunk::<N>()) {
            *d = *s;
        }
        if let (Some(d), Some(s)) = (
            dst.get_mut(n - N..).and_then(|d| d.first_chunk_mut::<N>()),
            src.get(n - N..).and_then(|s| s.first_chunk::<N>()),
        ) {
            *d = *s;
        }
    }
    match src.len() {
        0 => {}
        n @ 1..=3 => {
            for i in [0, n / 2, n - 1] {
                if let (Some(d), Some(s)) = (dst.get_mut(i), src.get(i)) {
                    *d = *s;
                }
            }
        }
        4..=7 => head_tail::<4>(dst, src),
        8..=15 => head_tail::<8>(dst, src),
        16..=31 => head_tail::<16>(dst, src),
        _ => dst.copy_from_slice(src),
    }
}

/// The groups of a request sorted and de-duplicated (callers usually send them so already;
/// only then is this free).
fn canonical_groups(mut groups: SmallVec<[&str; 16]>) -> SmallVec<[&str; 16]> {
    if !groups.windows(2).all(|w| w[0] < w[1]) {
        groups.sort_unstable();
        groups.dedup();
    }
    groups
}

/// The fields of the canonical form, in order: the user, the group count (as a field of its
/// own), each group (sorted and de-duplicated), the action's tag, then the action's fields —
/// exactly [`RequestRef::decision_fields`], the request's one list of what decides.
fn visit_fields(
    user: &str,
    groups: &[&str],
    action: &ActionFields<'_>,
    mut visit: impl FnMut(&[u8]) -> bool,
) -> bool {
    const COUNTS: [&[u8]; 17] = [
        b"0", b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"8", b"9", b"10", b"11", b"12", b"13",
        b"14", b"15", b"16",
    ];
    if !visit(user.as_bytes()) {
        return false;
    }
    let count_field;
    let count: &[u8] = match COUNTS.get(groups.len()) {
        Some(c) => c,
        None => {
            count_field = groups.len().to_string();
            count_field.as_bytes()
        }
    };
    // The count is visited as a field so the walk never reads past the groups.
    visit(count)
        && groups.iter().all(|g| visit(g.as_bytes()))
        && visit(action.tag())
        && action.values().iter().all(|field| visit(field.as_bytes()))
}

/// The canonical form of a request as one byte string, each field u16-length-prefixed
/// (cacheable requests are under [`MAX_CACHEABLE_ATTRIBUTE_BYTES`]): stored in the entry.
#[cfg(test)]
fn encode(user: &str, groups: &[&str], action: crate::request::ActionRef<'_>) -> EncodedKey {
    let mut out = EncodedKey::default();
    encode_into(&mut out, user, groups, &action.decision_fields());
    out
}

/// [`encode`] into `out`, sized exactly before it is written: `out`'s inline buffer if it
/// fits (a default key's), else one allocation.
fn encode_into(out: &mut EncodedKey, user: &str, groups: &[&str], action: &ActionFields<'_>) {
    // The attributes, every field's two length bytes, the group count's decimal digits and the
    // one-byte action tag (see `visit_fields`).
    let fields = 3 + groups.len() + action.values().len();
    let count_digits = groups
        .len()
        .checked_ilog10()
        .map_or(1, |log| log as usize + 1);
    let size = attribute_bytes(user, groups, action) + 2 * fields + count_digits + 1;
    if size <= KEY_INLINE_BYTES {
        if let EncodedKey::Inline { len, bytes } = out {
            *len = 0;
            if visit_fields(user, groups, action, |field| put_field(bytes, len, field)) {
                return;
            }
        }
    }
    let mut heap = Vec::with_capacity(size);
    visit_fields(user, groups, action, |field| {
        heap.extend_from_slice(&(field.len() as u16).to_le_bytes());
        heap.extend_from_slice(field);
        true
    });
    *out = EncodedKey::Heap(heap);
}

/// Whether a request's key is small enough to be cached (by this cache or a caller's).
pub fn within_bounds(request: RequestRef<'_>) -> bool {
    let (user, groups, action) = request.decision_fields();
    let groups: SmallVec<[&str; 16]> = groups.iter().collect();
    groups.len() <= MAX_CACHEABLE_GROUPS
        && attribute_bytes(user, &groups, &action) < MAX_CACHEABLE_ATTRIBUTE_BYTES
}

/// What a cache keeps per request: the server's engine responses, or a caller's answers
/// (`caller::local`). Clones are cheap (an `Arc`); whether it allows picks its TTL.
pub trait CachedValue: Clone + Send + Sync + 'static {
    fn is_allow(&self) -> bool;
}

impl CachedValue for Arc<Response> {
    fn is_allow(&self) -> bool {
        self.decision == Decision::Allow
    }
}

/// What [`DecisionCache::probe`] found; on a miss the caller's key holds the request.
pub enum Probe<V = Arc<Response>> {
    Hit(V),
    Miss,
    Bypass,
}

/// What a lookup found.
// The key is large on purpose: its bytes live on the stack so a lookup does not allocate.
#[allow(clippy::large_enum_variant)]
pub enum Lookup<V = Arc<Response>> {
    Hit(V),
    /// Not cached; insert the answer with this key.
    Miss(CacheKey),
    /// Never cached (cache disabled, or oversized attributes).
    Bypass,
}

/// One field of an encoded key (its two length bytes, then its bytes), taken off its front.
fn take_field<'k>(key: &mut &'k [u8]) -> Option<&'k str> {
    let (len, rest) = key.split_first_chunk::<2>()?;
    let len = u16::from_le_bytes(*len) as usize;
    let (bytes, rest) = (rest.get(..len)?, rest.get(len..)?);
    *key = rest;
    std::str::from_utf8(bytes).ok()
}

/// The request an encoded key was made from, its deciding fields read back in the order
/// [`visit_fields`] wrote them (for a dry run's traffic impact); `None` for a key that does
/// not read back whole.
fn decode_request(key: &[u8]) -> Option<Request> {
    let mut rest = key;
    let user = take_field(&mut rest)?.to_string();
    let count: usize = take_field(&mut rest)?.parse().ok()?;
    let groups = (0..count)
        .map(|_| take_field(&mut rest).map(str::to_string))
        .collect::<Option<Vec<_>>>()?;
    let tag = take_field(&mut rest)?.as_bytes();
    let mut next = || take_field(&mut rest).map(str::to_string);
    let action = if tag == ActionFields::RESOURCE_TAG {
        Action::Resource(crate::request::ResourceAttributes {
            namespace: next()?,
            verb: next()?,
            group: next()?,
            version: next()?,
            resource: next()?,
            subresource: next()?,
            name: next()?,
        })
    } else if tag == ActionFields::NON_RESOURCE_TAG {
        Action::NonResource(crate::request::NonResourceAttributes {
            path: next()?,
            verb: next()?,
        })
    } else {
        return None;
    };
    rest.is_empty().then(|| Request {
        user: crate::request::UserInfo {
            name: user,
            groups,
            ..Default::default()
        },
        action,
    })
}

/// The user, groups and namespace of an encoded key (for invalidation).
fn decode_subject(key: &[u8]) -> Option<(&str, SmallVec<[&str; 16]>, &str)> {
    let mut rest = key;
    let user = take_field(&mut rest)?;
    let count: usize = take_field(&mut rest)?.parse().ok()?;
    let mut groups = SmallVec::new();
    for _ in 0..count {
        groups.push(take_field(&mut rest)?);
    }
    // A resource action's namespace is its first field (`ActionRef::decision_fields`).
    let namespace = match take_field(&mut rest)?.as_bytes() {
        ActionFields::RESOURCE_TAG => take_field(&mut rest)?,
        _ => "",
    };
    Some((user, groups, namespace))
}

/// Shards of the map: many, so that a sweep (eviction, invalidation) holds any one shard's lock
/// only over a few hundred entries at the default size.
const SHARDS: usize = 128;

/// One shard: its entries, and all their keys back to back in one buffer. Keys are what a
/// cache under misses churns: one allocation each is a malloc on the request thread and a
/// free on the sweeper's; here an insert appends to memory the shard already holds, and
/// removals leave garbage that [`Shard::compact`] reclaims in place.
struct Shard<V> {
    entries: HashTable<CacheEntry<V>>,
    keys: Vec<u8>,
    /// Bytes of `keys` that no entry names any more.
    garbage: usize,
}

/// `entry`'s key in its shard's key buffer `keys` (empty if the offsets were ever wrong, which
/// then compares unequal to every request and decodes to nothing: a miss, or a fail-safe drop).
fn key_in<'k, V>(keys: &'k [u8], entry: &CacheEntry<V>) -> &'k [u8] {
    let at = entry.key_at as usize;
    keys.get(at..at + entry.key_len as usize)
        .unwrap_or_default()
}

impl<V> Shard<V> {
    fn key_of(&self, entry: &CacheEntry<V>) -> &[u8] {
        key_in(&self.keys, entry)
    }

    /// Appends `key`, returning where it starts; `None` if offsets would not fit in a `u32`
    /// (a shard of gigabytes of keys: the insert is skipped instead).
    fn push_key(&mut self, key: &[u8]) -> Option<(u32, u32)> {
        let at = u32::try_from(self.keys.len()).ok()?;
        let len = u32::try_from(key.len()).ok()?;
        at.checked_add(len)?;
        self.keys.extend_from_slice(key);
        Some((at, len))
    }

    /// Keeps the entries for which `keep` (given each entry and its key) says so, and
    /// reclaims the key space once enough of it is garbage. Returns how many were removed.
    fn retain(&mut self, mut keep: impl FnMut(&CacheEntry<V>, &[u8]) -> bool) -> usize {
        let Shard {
            entries,
            keys,
            garbage,
        } = self;
        let before = entries.len();
        entries.retain(|entry| {
            let kept = keep(entry, key_in(keys, entry));
            if !kept {
                *garbage += entry.key_len as usize;
            }
            kept
        });
        let removed = before - entries.len();
        self.compact_if_wasteful();
        removed
    }

    /// Compacts once garbage passes a quarter of the buffer. Compacting moves every live key,
    /// so waiting that long moves each byte a bounded number of times over its life.
    fn compact_if_wasteful(&mut self) {
        if self.garbage * 4 > self.keys.len() {
            self.compact();
        }
    }

    /// Moves the live keys to the front of the buffer, in the order they were written, and
    /// drops the garbage. The buffer keeps its capacity: the next inserts reuse it.
    fn compact(&mut self) {
        let mut live: Vec<&mut CacheEntry<V>> = self.entries.iter_mut().collect();
        live.sort_unstable_by_key(|entry| entry.key_at);
        let mut write = 0usize;
        for entry in live {
            let (at, len) = (entry.key_at as usize, entry.key_len as usize);
            self.keys.copy_within(at..at + len, write);
            // `write` ≤ `at`, which fit in a u32.
            entry.key_at = write as u32;
            write += len;
        }
        self.keys.truncate(write);
        self.garbage = 0;
    }
}

/// A shard behind its own lock, on its own cache lines so that neighbouring shards' lock words
/// do not share one.
#[repr(align(128))]
struct ShardLock<V>(RwLock<Shard<V>>);

/// Each shard's table is sized at start for its share of the hard limit (up to this many
/// entries in all): a growing table rehashes under its write lock, on the request path, and
/// leaves the old table's memory to the allocator. Past this, tables grow as they fill.
const PRESIZED_ENTRIES_MAX: usize = 1 << 20;

/// The entries one shard's table is sized for at start.
fn presized_entries(capacity: usize) -> usize {
    // A shard's share varies a little with the digests; an eighth more covers it.
    let share = hard_limit(capacity.min(PRESIZED_ENTRIES_MAX)).div_ceil(SHARDS);
    share + share / 8
}

impl<V> ShardLock<V> {
    fn with_capacity(entries: usize) -> Self {
        Self(RwLock::new(Shard {
            entries: HashTable::with_capacity(entries),
            keys: Vec::new(),
            garbage: 0,
        }))
    }

    // Nothing under a shard's lock is expected to panic. Were a compaction cut short, an entry
    // could name another entry's key bytes: a lookup still cannot hit it (the bytes must equal
    // the request's and its digest the entry's), but invalidation would decode the wrong
    // subject. So a writer that finds the lock poisoned drops the shard's entries (see
    // `write`), and readers carry on.
    fn read(&self) -> RwLockReadGuard<'_, Shard<V>> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The shard for writing; a poisoned one is emptied first (its entries subtracted from
    /// `len`, the cache's count).
    fn write(&self, len: &AtomicUsize) -> RwLockWriteGuard<'_, Shard<V>> {
        match self.0.write() {
            Ok(shard) => shard,
            Err(poisoned) => {
                let mut shard = poisoned.into_inner();
                len.fetch_sub(shard.entries.len(), Ordering::Relaxed);
                shard.entries.clear();
                shard.keys.clear();
                shard.garbage = 0;
                self.0.clear_poison();
                shard
            }
        }
    }
}

/// What the background sweeper shares with the cache (it holds a weak reference, and stops
/// when the cache is dropped).
struct Shared<V> {
    shards: Box<[ShardLock<V>]>,
    len: AtomicUsize,
    /// The CLOCK hand: the shard the next eviction sweep starts at.
    hand: AtomicUsize,
}

impl<V> Shared<V> {
    /// The shard of a digest. Bits from the middle: hashbrown takes a table's bucket from the
    /// low bits and its tag from the top seven, and a shard must not fix either.
    fn shard(&self, digest: u64) -> &ShardLock<V> {
        let index = (digest >> 40) as usize % SHARDS;
        // `shards` has SHARDS elements; the modulo keeps the index in range.
        &self.shards[index]
    }
}

pub struct DecisionCache<V = Arc<Response>> {
    shared: Arc<Shared<V>>,
    config: CacheConfig,
    /// Inserts are accepted only when computed at this revision (see the module docs).
    accepting_revision: AtomicU64,
    /// Eviction runs here, off the request path; `None` if the thread could not be started,
    /// in which case inserts evict inline.
    sweeper: Option<std::thread::Thread>,
    pub stats: Arc<CacheStats>,
}

impl<V> Drop for DecisionCache<V> {
    fn drop(&mut self) {
        // The sweeper notices the cache is gone the next time it wakes.
        if let Some(sweeper) = &self.sweeper {
            sweeper.unpark();
        }
    }
}

/// The bytes of a request's deciding values (without tag, counts or length prefixes).
fn attribute_bytes(user: &str, groups: &[&str], action: &ActionFields<'_>) -> usize {
    let action: usize = action.values().iter().map(|field| field.len()).sum();
    action + user.len() + groups.iter().map(|g| g.len()).sum::<usize>()
}

impl<V: CachedValue> DecisionCache<V> {
    pub fn new(config: CacheConfig) -> Self {
        Self::with_sweeper(config, true)
    }

    /// A cache whose evictions run inline, on the inserting thread (tests that inspect the
    /// shards must not race a sweeper thread).
    #[cfg(test)]
    fn sweeping_inline(config: CacheConfig) -> Self {
        Self::with_sweeper(config, false)
    }

    fn with_sweeper(config: CacheConfig, background: bool) -> Self {
        let shared = Arc::new(Shared {
            shards: (0..SHARDS)
                .map(|_| ShardLock::with_capacity(presized_entries(config.capacity)))
                .collect(),
            len: AtomicUsize::new(0),
            hand: AtomicUsize::new(0),
        });
        let stats = Arc::new(CacheStats::default());
        let sweeper = (background && config.capacity > 0)
            .then(|| spawn_sweeper(Arc::downgrade(&shared), Arc::clone(&stats), config.capacity))
            .flatten();
        Self {
            shared,
            config,
            accepting_revision: AtomicU64::new(0),
            sweeper,
            stats,
        }
    }

    pub fn enabled(&self) -> bool {
        self.config.capacity > 0
    }

    pub fn len(&self) -> usize {
        self.shared.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.config.capacity
    }

    /// Looks `request` up whatever revision its entry was computed at.
    pub fn lookup(&self, request: &Request) -> Lookup<V> {
        self.lookup_at(request, u64::MAX)
    }

    /// Looks `request` up for a reader of the snapshot at `revision`: an entry computed at a
    /// later revision is not a hit (see the module docs).
    pub fn lookup_at(&self, request: &Request, revision: u64) -> Lookup<V> {
        let mut key = CacheKey::default();
        match self.probe(&mut key, request.as_borrowed(), revision) {
            Probe::Hit(response) => Lookup::Hit(response),
            Probe::Miss => Lookup::Miss(key),
            Probe::Bypass => Lookup::Bypass,
        }
    }

    /// [`Self::lookup_at`] for a request borrowed from wherever its strings live (the bytes
    /// of a request on the wire): a hit copies nothing. The request's key is written into
    /// `key`, which the caller keeps for [`Self::insert`] on a miss.
    pub fn probe(&self, key: &mut CacheKey, request: RequestRef<'_>, revision: u64) -> Probe<V> {
        if !self.enabled() {
            return Probe::Bypass;
        }
        let (user, groups, action) = request.decision_fields();
        let groups: SmallVec<[&str; 16]> = groups.iter().collect();
        if groups.len() > MAX_CACHEABLE_GROUPS
            || attribute_bytes(user, &groups, &action) >= MAX_CACHEABLE_ATTRIBUTE_BYTES
        {
            return Probe::Bypass;
        }
        key.fill(user, &canonical_groups(groups), &action);
        let shard = self.shared.shard(key.digest).read();
        if let Some(entry) = shard.entries.find(key.digest, |e| e.digest == key.digest) {
            if entry.revision <= revision && shard.key_of(entry) == &*key.encoded {
                let fresh = entry.expires.is_none_or(|at| Instant::now() < at);
                if fresh {
                    // Write the CLOCK bit only when it changes: a hot entry is read by every
                    // core, and a store on each hit would bounce its cache line between them.
                    if !entry.referenced.load(Ordering::Relaxed) {
                        entry.referenced.store(true, Ordering::Relaxed);
                    }
                    self.stats.hits.add(1);
                    return Probe::Hit(entry.response.clone());
                }
                self.stats.expirations.add(1);
            }
        }
        self.stats.misses.add(1);
        Probe::Miss
    }

    /// The requests the cache holds answers for, at most `limit`, read back from their keys:
    /// the distinct requests asked recently (what a dry run's traffic impact re-decides).
    /// Each shard is read-locked only while it is read.
    pub fn cached_requests(&self, limit: usize) -> Vec<Request> {
        let mut requests = Vec::new();
        for shard in self.shared.shards.iter() {
            let shard = shard.read();
            for entry in shard.entries.iter() {
                if requests.len() >= limit {
                    return requests;
                }
                requests.extend(decode_request(shard.key_of(entry)));
            }
        }
        requests
    }

    /// Stores a decision computed at `revision`. Refused (silently) when the policy has moved
    /// on since: the decision may already be stale.
    pub fn insert(&self, key: &CacheKey, response: V, revision: u64) {
        if self.len() >= hard_limit(self.config.capacity) {
            // The sweeper is behind: answer uncached rather than grow without bound.
            self.stats.inserts_skipped_full.add(1);
            self.request_eviction();
            return;
        }
        let ttl = if response.is_allow() {
            self.config.allow_ttl
        } else {
            self.config.deny_ttl
        };
        let expires = ttl.map(|ttl| Instant::now() + ttl);
        let digest = key.digest;
        let mut shard = self.shared.shard(digest).write(&self.shared.len);
        // INVARIANT: the revision check happens under the shard's write lock (see module docs).
        if self.accepting_revision.load(Ordering::SeqCst) != revision {
            self.stats.stale_inserts_refused.add(1);
            return;
        }
        let Some((key_at, key_len)) = shard.push_key(&key.encoded) else {
            self.stats.inserts_skipped_full.add(1);
            return;
        };
        let entry = CacheEntry {
            digest,
            key_at,
            key_len,
            response,
            revision,
            expires,
            referenced: AtomicBool::new(false),
        };
        let Shard {
            entries, garbage, ..
        } = &mut *shard;
        match entries.entry(digest, |e| e.digest == digest, |e| e.digest) {
            TableEntry::Occupied(mut occupied) => {
                // The same request again (expired, or two misses racing), or another with the
                // same digest: the newer wins. Replacements alone (no sweep need ever run) must
                // not grow the buffer without bound, so they compact too.
                *garbage += occupied.get().key_len as usize;
                *occupied.get_mut() = entry;
                shard.compact_if_wasteful();
            }
            TableEntry::Vacant(vacant) => {
                vacant.insert(entry);
                // Counted while still holding the shard lock: a concurrent invalidation or
                // eviction can only remove the entry (and subtract) after this.
                self.shared.len.fetch_add(1, Ordering::Relaxed);
            }
        }
        drop(shard);
        self.stats.inserts.add(1);
        if self.len() > self.config.capacity {
            self.request_eviction();
        }
    }

    /// Step 1 of a policy change: refuse inserts computed before `revision`.
    pub fn begin_revision(&self, revision: u64) {
        self.accepting_revision.store(revision, Ordering::SeqCst);
    }

    /// Step 3 of a policy change: removes every entry the change can affect. Returns how many.
    pub fn invalidate(&self, impact: &Impact, cause: InvalidationCause) -> usize {
        if impact.is_empty() {
            return 0;
        }
        let mut removed = 0usize;
        for shard in self.shared.shards.iter() {
            let mut shard = shard.write(&self.shared.len);
            removed += shard.retain(|_, key| {
                // An entry that does not decode cannot be attributed: drop it (fail safe).
                let affected = decode_subject(key).is_none_or(|(user, groups, namespace)| {
                    impact.affects(user, groups.iter().copied(), namespace)
                });
                !affected
            });
        }
        self.shared.len.fetch_sub(removed, Ordering::Relaxed);
        let counter = match cause {
            InvalidationCause::Apply => &self.stats.invalidated_by_apply,
            InvalidationCause::Delete => &self.stats.invalidated_by_delete,
            InvalidationCause::Reload => &self.stats.invalidated_by_reload,
        };
        counter.add(removed as u64);
        removed
    }

    /// All invalidations, every cause.
    pub fn invalidations(&self) -> u64 {
        self.stats.invalidated_by_apply.get()
            + self.stats.invalidated_by_delete.get()
            + self.stats.invalidated_by_reload.get()
    }

    /// Asks the sweeper to bring the size back under capacity (or sweeps inline without one).
    fn request_eviction(&self) {
        match &self.sweeper {
            Some(sweeper) => sweeper.unpark(),
            None => sweep(&self.shared, &self.stats, self.config.capacity),
        }
    }
}

/// Above this many entries inserts are skipped until the sweeper catches up, so the size stays
/// bounded however fast misses arrive.
fn hard_limit(capacity: usize) -> usize {
    capacity + capacity / 4
}

/// Starts the background sweeper: it wakes when asked (and every 250 ms), evicts when the cache
/// is over capacity, and ends when the cache is dropped.
fn spawn_sweeper<V: Send + Sync + 'static>(
    shared: std::sync::Weak<Shared<V>>,
    stats: Arc<CacheStats>,
    capacity: usize,
) -> Option<std::thread::Thread> {
    let spawned = std::thread::Builder::new()
        .name("authzd-cache-sweeper".to_string())
        .spawn(move || loop {
            std::thread::park_timeout(Duration::from_millis(250));
            let Some(shared) = shared.upgrade() else {
                return;
            };
            if shared.len.load(Ordering::Relaxed) > capacity {
                sweep(&shared, &stats, capacity);
            }
        });
    match spawned {
        Ok(handle) => Some(handle.thread().clone()),
        Err(error) => {
            tracing::warn!(%error, "cannot start the cache sweeper; evicting inline");
            None
        }
    }
}

/// CLOCK (second chance) down to 7/8 of capacity: entries hit since the last sweep survive one
/// more round, so hot entries stay. Shard by shard, so readers wait for one small shard at most;
/// each shard gives up its share of the excess in proportion to its size, so shards stay even
/// (no shard is emptied while another grows its table), starting where the last sweep stopped.
fn sweep<V>(shared: &Shared<V>, stats: &CacheStats, capacity: usize) {
    let target = capacity - capacity / 8;
    for _pass in 0..2 {
        let len = shared.len.load(Ordering::Relaxed);
        if len <= target {
            break;
        }
        let mut excess = len - target;
        let mut unvisited = len;
        let mut removed = 0usize;
        let start = shared.hand.load(Ordering::Relaxed);
        let mut visited = 0;
        while excess > 0 && visited < SHARDS {
            let index = (start + visited) % SHARDS;
            visited += 1;
            let Some(shard) = shared.shards.get(index) else {
                continue;
            };
            let mut shard = shard.write(&shared.len);
            let here = shard.entries.len();
            // What is still to evict, spread over what is still to visit; an entry this shard
            // keeps for its reference bit moves its share on to the next shards.
            let quota = excess
                .saturating_mul(here)
                .div_ceil(unvisited.max(1))
                .min(excess);
            unvisited = unvisited.saturating_sub(here);
            let mut taken = 0usize;
            let evicted = shard.retain(|entry, _| {
                if taken >= quota || entry.referenced.swap(false, Ordering::Relaxed) {
                    return true;
                }
                taken += 1;
                false
            });
            excess = excess.saturating_sub(evicted);
            removed += evicted;
        }
        shared
            .hand
            .store((start + visited) % SHARDS, Ordering::Relaxed);
        shared.len.fetch_sub(removed, Ordering::Relaxed);
        stats.evictions.add(removed as u64);
    }
}

#[cfg(test)]
mod tests;

/// The cache as a decorator over one engine snapshot: same interface, answers from the cache
/// when it can, computes and inserts (tagged with the snapshot's revision) when it cannot.
pub struct CachedEngine<'a> {
    pub cache: &'a DecisionCache,
    pub engine: &'a crate::engine::Engine,
    /// The revision the engine snapshot was published at.
    pub revision: u64,
}

impl crate::engine::Authorize for CachedEngine<'_> {
    /// Neither a hit nor a miss copies the request (a miss copies only the key it inserts).
    fn decide(&self, request: RequestRef<'_>) -> crate::engine::Decided {
        let mut key = CacheKey::default();
        match self.cache.probe(&mut key, request, self.revision) {
            Probe::Hit(response) => crate::engine::Decided {
                cacheable: response.plan.0.is_none(),
                response,
                cached: true,
            },
            Probe::Miss => {
                let response = self.engine.authorize_shared(request);
                self.cache.insert(&key, response.clone(), self.revision);
                crate::engine::Decided {
                    cacheable: response.plan.0.is_none(),
                    response,
                    cached: false,
                }
            }
            Probe::Bypass => {
                let response = self.engine.authorize_shared(request);
                crate::engine::Decided {
                    cacheable: response.plan.0.is_none() && within_bounds(request),
                    response,
                    cached: false,
                }
            }
        }
    }

    fn who_can(&self, action: &Action) -> crate::engine::AllowedSubjects {
        self.engine.allowed_subjects(action)
    }

    fn who_can_content(
        &self,
        action: &Action,
        content: Option<&crate::request::Content>,
    ) -> Result<crate::engine::AllowedSubjects, crate::engine::content::ContentError> {
        self.engine.allowed_subjects_content(action, content)
    }

    fn diff_config(&self) -> &crate::policy::content::path::DiffConfig {
        self.engine.diff()
    }
}
