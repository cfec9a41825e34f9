use super::*;
use crate::engine::EncodedOnce;
use crate::policy::impact::SubjectKey;
use crate::request::{NonResourceAttributes, ResourceAttributes, UserInfo};

fn request(user: &str, groups: &[&str], namespace: &str) -> Request {
    Request {
        user: UserInfo {
            name: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        },
        action: Action::Resource(ResourceAttributes {
            namespace: namespace.into(),
            verb: "get".into(),
            resource: "pods".into(),
            ..Default::default()
        }),
    }
}

fn response(decision: Decision) -> Arc<Response> {
    Arc::new(Response {
        decision,
        reason: String::new(),
        allowed_by: Vec::new(),
        denied_by: Vec::new(),
        errors: Vec::new(),
        encoded: EncodedOnce::default(),
        recorded: EncodedOnce::default(),
        plan: Default::default(),
    })
}

fn cache(capacity: usize) -> DecisionCache {
    let cache = DecisionCache::new(CacheConfig {
        capacity,
        ..Default::default()
    });
    cache.begin_revision(1);
    cache
}

fn put(cache: &DecisionCache, req: &Request, revision: u64) {
    match cache.lookup(req) {
        Lookup::Miss(key) => cache.insert(&key, response(Decision::Allow), revision),
        Lookup::Hit(_) => panic!("unexpected hit"),
        Lookup::Bypass => panic!("unexpected bypass"),
    }
}

fn is_hit(cache: &DecisionCache, req: &Request) -> bool {
    matches!(cache.lookup(req), Lookup::Hit(_))
}

#[test]
fn keys_are_canonical_in_groups() {
    let c = cache(100);
    put(&c, &request("alice", &["b", "a", "a"], "ns"), 1);
    assert!(is_hit(&c, &request("alice", &["a", "b"], "ns")));
    assert!(!is_hit(&c, &request("alice", &["a"], "ns")));
    assert!(!is_hit(&c, &request("alice", &["a", "b"], "other")));
    assert!(!is_hit(&c, &request("Alice", &["a", "b"], "ns")));
}

#[test]
fn oversized_and_disabled_bypass() {
    let c = cache(100);
    let mut big = request("alice", &[], "ns");
    big.user.name = "x".repeat(MAX_CACHEABLE_ATTRIBUTE_BYTES);
    assert!(matches!(c.lookup(&big), Lookup::Bypass));
    let many: Vec<String> = (0..=MAX_CACHEABLE_GROUPS).map(|i| i.to_string()).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(matches!(
        c.lookup(&request("a", &refs, "ns")),
        Lookup::Bypass
    ));
    assert!(matches!(
        cache(0).lookup(&request("a", &[], "ns")),
        Lookup::Bypass
    ));
}

#[test]
fn inserts_computed_on_an_older_revision_are_refused() {
    let c = cache(100);
    let req = request("alice", &[], "ns");
    let Lookup::Miss(key) = c.lookup(&req) else {
        panic!("expected miss")
    };
    c.begin_revision(2);
    c.insert(&key, response(Decision::Allow), 1);
    assert!(!is_hit(&c, &req));
    assert_eq!(c.stats.stale_inserts_refused.get(), 1);
}

#[test]
fn a_reader_of_an_older_snapshot_does_not_hit_a_newer_entry() {
    let c = cache(100);
    let req = request("alice", &[], "ns");
    c.begin_revision(2);
    put(&c, &req, 2);
    // A request still answering from revision 1 computes on it instead.
    assert!(matches!(c.lookup_at(&req, 1), Lookup::Miss(_)));
    assert!(matches!(c.lookup_at(&req, 2), Lookup::Hit(_)));
    // Unaffected by later changes, the entry answers for later snapshots too.
    c.begin_revision(3);
    assert!(matches!(c.lookup_at(&req, 3), Lookup::Hit(_)));
}

#[test]
fn invalidation_is_precise_by_subject_and_namespace() {
    let c = cache(100);
    put(&c, &request("alice", &[], "a"), 1);
    put(&c, &request("alice", &[], "b"), 1);
    put(&c, &request("bob", &["dev"], "a"), 1);
    put(&c, &request("carol", &["ops"], "a"), 1);

    let mut impact = Impact::default();
    impact.insert_namespaced("a", SubjectKey::User("alice"));
    impact.insert_cluster(SubjectKey::Group("dev"));
    c.begin_revision(2);
    assert_eq!(c.invalidate(&impact, InvalidationCause::Apply), 2);

    assert!(!is_hit(&c, &request("alice", &[], "a")));
    assert!(is_hit(&c, &request("alice", &[], "b")));
    assert!(!is_hit(&c, &request("bob", &["dev"], "a")));
    assert!(is_hit(&c, &request("carol", &["ops"], "a")));
    assert_eq!(c.len(), 2);
    assert_eq!(c.invalidations(), 2);
}

#[test]
fn eviction_bounds_size_and_keeps_hot_entries() {
    let c = cache(80);
    let hot = request("hot", &[], "ns");
    put(&c, &hot, 1);
    for i in 0..1000 {
        assert!(is_hit(&c, &hot), "hot entry evicted at {i}");
        // Misses may be answered uncached while the sweeper catches up; never above the bound.
        if let Lookup::Miss(key) = c.lookup(&request(&format!("cold-{i}"), &[], "ns")) {
            c.insert(&key, response(Decision::Allow), 1);
        }
        assert!(
            c.len() <= hard_limit(80),
            "size {} over the hard limit",
            c.len()
        );
    }
    // The background sweeper brings it back under capacity, keeping the hot entry.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while c.len() > 80 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(c.len() <= 80, "size {} after the sweeper ran", c.len());
    assert!(is_hit(&c, &hot));
    assert!(c.stats.evictions.get() > 0);
}

/// Each shard's entry count, and checks its key buffer's bookkeeping on the way: the live
/// bytes are exactly the entries' keys, and garbage never stays above a quarter.
fn shard_sizes(c: &DecisionCache) -> Vec<usize> {
    c.shared
        .shards
        .iter()
        .map(|shard| {
            let shard = shard.read();
            let live: usize = shard.entries.iter().map(|e| e.key_len as usize).sum();
            assert_eq!(shard.keys.len() - shard.garbage, live);
            assert!(shard.garbage * 4 <= shard.keys.len() || shard.garbage == 0);
            shard.entries.len()
        })
        .collect()
}

/// Invalidations leave garbage in the shards' key buffers and compaction moves the survivors'
/// keys: every survivor must still hit (its key compared where it now lives) and still decode
/// for the next invalidation, and every removed entry must miss.
#[test]
fn compaction_keeps_every_surviving_key() {
    let c = cache(100_000);
    let requests: Vec<Request> = (0..4000)
        .map(|i| {
            let team = format!("team-{}", i % 7);
            request(&format!("user-{i}"), &[&team], &format!("ns-{}", i % 13))
        })
        .collect();
    for r in &requests {
        put(&c, r, 1);
    }
    let mut alive = vec![true; requests.len()];
    // Revoke one team at a time: each invalidation removes a sixth to a half of what is left,
    // so some shards compact and others only collect garbage.
    for team in 0..6 {
        let mut impact = Impact::default();
        impact.insert_cluster(SubjectKey::Group(&format!("team-{team}")));
        c.begin_revision(2 + team as u64);
        let removed = c.invalidate(&impact, InvalidationCause::Apply);
        assert_eq!(
            removed,
            (0..requests.len()).filter(|i| i % 7 == team).count()
        );
        for (i, r) in requests.iter().enumerate() {
            if i % 7 == team {
                alive[i] = false;
            }
            assert_eq!(
                is_hit(&c, r),
                alive[i],
                "request {i} after revoking team-{team}"
            );
        }
        let sizes = shard_sizes(&c);
        assert_eq!(sizes.iter().sum::<usize>(), c.len());
    }
    assert_eq!(c.len(), alive.iter().filter(|a| **a).count());
}

/// Eviction takes from every shard in proportion to its size. Taking whole shards in turn (as
/// a plain walk would) empties some while the rest keep growing their tables.
#[test]
fn eviction_spreads_over_the_shards() {
    let capacity = 100 * SHARDS;
    // Evicting inline: a sweeper thread woken by the inserts would race the counts below.
    let c = DecisionCache::sweeping_inline(CacheConfig {
        capacity,
        ..Default::default()
    });
    c.begin_revision(1);
    for i in 0..capacity + capacity / 8 {
        if let Lookup::Miss(key) = c.lookup(&request(&format!("user-{i}"), &[], "ns")) {
            c.insert(&key, response(Decision::Allow), 1);
        }
    }
    sweep(&c.shared, &c.stats, capacity);
    let target = capacity - capacity / 8;
    let sizes = shard_sizes(&c);
    assert_eq!(sizes.iter().sum::<usize>(), c.len());
    assert!(c.len() <= target, "size {} after a sweep", c.len());
    let average = c.len() / SHARDS;
    let smallest = sizes.iter().copied().min().unwrap_or_default();
    assert!(
        smallest * 2 >= average,
        "a shard kept {smallest} entries against an average of {average}"
    );
}

/// A panic under a shard's write lock (none is expected) may leave its keys half-compacted;
/// the next writer drops that shard's entries, keeping the count right, instead of decoding
/// keys it can no longer trust.
#[test]
fn a_poisoned_shard_is_emptied_by_its_next_writer() {
    let c = cache(100);
    let req = request("alice", &[], "ns");
    put(&c, &req, 1);
    put(&c, &request("bob", &[], "ns"), 1);
    let digest = CacheKey::of("alice", &[], req.action.as_borrowed()).digest;
    let shard = c.shared.shard(digest);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _locked = shard.write(&c.shared.len);
        panic!("poison the shard");
    }));
    assert!(panicked.is_err());
    // Readers carry on.
    assert!(is_hit(&c, &req));
    // An invalidation that does not touch alice still writes every shard.
    let mut impact = Impact::default();
    impact.insert_cluster(SubjectKey::User("carol"));
    c.begin_revision(2);
    c.invalidate(&impact, InvalidationCause::Apply);
    assert!(!is_hit(&c, &req));
    assert_eq!(c.len(), shard_sizes(&c).iter().sum::<usize>());
}

#[test]
fn ttl_expires_entries() {
    let c = DecisionCache::new(CacheConfig {
        capacity: 10,
        allow_ttl: Some(Duration::from_millis(1)),
        deny_ttl: None,
    });
    c.begin_revision(1);
    let req = request("alice", &[], "ns");
    put(&c, &req, 1);
    std::thread::sleep(Duration::from_millis(5));
    assert!(!is_hit(&c, &req));
}

/// An entry replaced again and again (here: expired and recomputed) leaves its old key behind
/// each time; the shard must reclaim it even though the cache never fills, so no sweep runs.
#[test]
fn replaced_entries_do_not_grow_the_key_buffer() {
    let c = DecisionCache::new(CacheConfig {
        capacity: 1000,
        allow_ttl: Some(Duration::ZERO),
        deny_ttl: None,
    });
    c.begin_revision(1);
    let req = request("alice", &["dev", "ops"], "ns");
    for _ in 0..10_000 {
        let Lookup::Miss(key) = c.lookup(&req) else {
            panic!("an expired entry must miss");
        };
        c.insert(&key, response(Decision::Allow), 1);
    }
    assert_eq!(c.len(), 1);
    let buffered: usize = c.shared.shards.iter().map(|s| s.read().keys.len()).sum();
    let one_key = encode(
        "alice",
        &["dev", "ops"],
        request("alice", &[], "ns").action.as_borrowed(),
    )
    .len();
    assert!(
        buffered <= 2 * one_key,
        "{buffered} bytes of keys buffered for one entry of {one_key}"
    );
    shard_sizes(&c);
}

/// Many threads insert decisions computed at the old revision while a change happens; once
/// `invalidate` returns, not one affected entry may remain or appear.
#[test]
fn racing_inserts_never_survive_an_invalidation() {
    for round in 0..50 {
        let c = Arc::new(cache(100_000));
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..4)
            .map(|t| {
                let (c, stop) = (c.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let req = request("alice", &[], &format!("ns-{t}-{i}"));
                        if let Lookup::Miss(key) = c.lookup(&req) {
                            c.insert(&key, response(Decision::Allow), 1);
                        }
                        // The size counter never goes below zero (it once did, transiently).
                        assert!(c.len() < usize::MAX / 2, "size counter underflowed");
                        i += 1;
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(2));
        let mut impact = Impact::default();
        impact.insert_cluster(SubjectKey::User("alice"));
        c.begin_revision(2);
        c.invalidate(&impact, InvalidationCause::Apply);
        let after_ack = c.len();
        std::thread::sleep(Duration::from_millis(2));
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(after_ack, 0, "round {round}: stale entries survived");
        assert_eq!(
            c.len(),
            0,
            "round {round}: stale entries inserted after the change"
        );
    }
}

#[test]
fn canonical_encoding_is_unambiguous_and_decodes() {
    fn key(req: &Request) -> CacheKey {
        let groups = canonical_groups(req.user.groups.iter().map(String::as_str).collect());
        let key = CacheKey::of(&req.user.name, &groups, req.action.as_borrowed());
        // A key too long for the stack is allocated at its exact size, so storing it as the
        // entry's key does not reallocate.
        if let EncodedKey::Heap(bytes) = &key.encoded {
            assert_eq!(bytes.capacity(), bytes.len(), "{req:?}");
        }
        key
    }
    let encoded = |req: &Request| key(req).encoded;
    // Field boundaries matter: "ab" + "c" is not "a" + "bc".
    assert_ne!(
        encoded(&request("ab", &["c"], "ns")),
        encoded(&request("a", &["bc"], "ns"))
    );
    // Group order and duplicates do not.
    let unsorted = request("u", &["b", "a", "b"], "ns");
    let sorted = request("u", &["a", "b"], "ns");
    assert_eq!(encoded(&unsorted), encoded(&sorted));
    assert_eq!(key(&sorted).digest, key(&unsorted).digest);
    assert_ne!(encoded(&sorted), encoded(&request("u", &["a"], "ns")));
    // Many groups (beyond the precomputed counts) round-trip too.
    let names: Vec<String> = (0..40).map(|i| format!("g{i:02}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let many = request("u", &refs, "ns");
    assert_eq!(encoded(&many), encoded(&many));
    // A typical key stays on the stack; a long one is allocated, at its exact size (`key`).
    assert!(matches!(encoded(&many), EncodedKey::Inline { .. }));
    let long_names: Vec<String> = (0..40)
        .map(|i| format!("group-{i:02}-{}", "x".repeat(20)))
        .collect();
    let long_refs: Vec<&str> = long_names.iter().map(String::as_str).collect();
    let long = request("u", &long_refs, "ns");
    assert!(matches!(encoded(&long), EncodedKey::Heap(_)));
    assert_eq!(decode_subject(&encoded(&long)).unwrap().1.len(), 40);

    let bytes = encoded(&request("alice", &["z", "dev"], "team"));
    let (user, groups, namespace) = decode_subject(&bytes).unwrap();
    assert_eq!(
        (user, groups.as_slice(), namespace),
        ("alice", &["dev", "z"][..], "team")
    );
    assert_eq!(decode_subject(&encoded(&many)).unwrap().1.len(), 40);
    let non_resource = Request {
        user: UserInfo {
            name: "bob".into(),
            ..Default::default()
        },
        action: Action::NonResource(crate::request::NonResourceAttributes {
            path: "/healthz".into(),
            verb: "get".into(),
        }),
    };
    assert_eq!(decode_subject(&encoded(&non_resource)).unwrap().2, "");
}

/// Two requests whose digests collide are told apart by their bytes: the entry one of them
/// stored is never the other's hit.
#[test]
fn a_digest_collision_is_a_miss() {
    let cache = DecisionCache::new(CacheConfig::default());
    let stored = request("alice", &["dev"], "ns");
    let asked = request("mallory", &["dev"], "ns");
    let key_of = |req: &Request| {
        let groups = canonical_groups(req.user.groups.iter().map(String::as_str).collect());
        CacheKey::of(&req.user.name, &groups, req.action.as_borrowed())
    };
    // alice's decision, filed under mallory's digest.
    let colliding = CacheKey {
        digest: key_of(&asked).digest,
        encoded: key_of(&stored).encoded,
    };
    cache.insert(&colliding, response(Decision::Allow), 0);
    assert_eq!(cache.len(), 1);
    assert!(matches!(cache.lookup(&asked), Lookup::Miss(_)));
}

/// The key is built from the request's one list of deciding fields: changing any one of them
/// (the user, a group, each field of a resource or non-resource action, the kind of action)
/// gives another key, so no two requests that can be decided differently share an entry.
#[test]
fn every_deciding_field_changes_the_key() {
    let base = ResourceAttributes {
        namespace: "ns".into(),
        verb: "get".into(),
        group: "apps".into(),
        version: "v1".into(),
        resource: "deployments".into(),
        subresource: "scale".into(),
        name: "web".into(),
    };
    let key_of = |user: &str, groups: &[&str], action: &Action| {
        CacheKey::of(user, groups, action.as_borrowed())
            .encoded
            .to_vec()
    };
    let resource = Action::Resource(base.clone());
    let original = key_of("alice", &["dev"], &resource);
    assert_ne!(original, key_of("bob", &["dev"], &resource));
    assert_ne!(original, key_of("alice", &["ops"], &resource));
    assert_ne!(original, key_of("alice", &[], &resource));
    let ActionFields::Resource(fields) = resource.as_borrowed().decision_fields() else {
        panic!("a resource action has resource fields");
    };
    for changed in 0..fields.len() {
        let mut attributes = base.clone();
        let field = [
            &mut attributes.namespace,
            &mut attributes.verb,
            &mut attributes.group,
            &mut attributes.version,
            &mut attributes.resource,
            &mut attributes.subresource,
            &mut attributes.name,
        ]
        .into_iter()
        .nth(changed)
        .unwrap();
        field.push('x');
        assert_ne!(
            original,
            key_of("alice", &["dev"], &Action::Resource(attributes)),
            "field {changed} of the resource action is not in the key"
        );
    }
    let non_resource = |path: &str, verb: &str| {
        Action::NonResource(NonResourceAttributes {
            path: path.into(),
            verb: verb.into(),
        })
    };
    let healthz = key_of("alice", &["dev"], &non_resource("/healthz", "get"));
    assert_ne!(
        healthz,
        key_of("alice", &["dev"], &non_resource("/livez", "get"))
    );
    assert_ne!(
        healthz,
        key_of("alice", &["dev"], &non_resource("/healthz", "post"))
    );
    // The tag keeps a non-resource action apart from a resource one with the same strings.
    let lookalike = Action::Resource(ResourceAttributes {
        namespace: "/healthz".into(),
        verb: "get".into(),
        ..Default::default()
    });
    assert_ne!(
        key_of("alice", &["dev"], &non_resource("/healthz", "get")),
        key_of("alice", &["dev"], &lookalike)
    );
}

#[test]
fn short_copies_copy_every_length_exactly() {
    let source: Vec<u8> = (0..64u8)
        .map(|b| b.wrapping_mul(37).wrapping_add(1))
        .collect();
    for len in 0..=source.len() {
        let mut out = vec![0u8; len];
        super::copy_short(&mut out, &source[..len]);
        assert_eq!(out, &source[..len], "length {len}");
    }
}

#[test]
fn a_key_reads_back_as_its_request() {
    let resource = Action::Resource(ResourceAttributes {
        namespace: "team-a".into(),
        verb: "get".into(),
        group: "apps".into(),
        version: "v1".into(),
        resource: "deployments".into(),
        subresource: "scale".into(),
        name: "web".into(),
    });
    let path = Action::NonResource(NonResourceAttributes {
        path: "/metrics".into(),
        verb: "get".into(),
    });
    for (user, groups, action) in [("alice", vec!["dev", "ops"], resource), ("", vec![], path)] {
        let key = CacheKey::of(user, &groups, action.as_borrowed());
        let read = super::decode_request(&key.encoded).unwrap();
        assert_eq!(read.user.name, user);
        assert_eq!(read.user.groups, groups);
        assert_eq!(read.action, action);
    }
    assert!(super::decode_request(b"\x05\x00ab").is_none());
}
