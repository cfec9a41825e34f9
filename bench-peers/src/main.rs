//! `authzd-bench-peers`: authzd, its reference evaluator, cedar-policy and casbin (plain and
//! cached enforcer) on the same synthetic RBAC policy, from 1k to 1M bindings, in one run.
//!
//! For every size and engine: the time to build it from the policy, the heap it keeps (bytes
//! live after building, counted by this binary's allocator), its agreement with authzd on a
//! deterministic sample of requests (checked BEFORE timing; any disagreement aborts the run),
//! and the median latency of the probe requests (user in 10 groups: allowed, and nothing
//! matches). Prints one JSON object per line; `scripts/benchmarks_md.py` renders them.
//!
//!   authzd-bench-peers [--sizes 1000,10000,100000,1000000] [--max-cedar N] [--max-casbin N]
//!                      [--max-reference N] [--budget-ms MS]
#![allow(clippy::print_stdout)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use authzd::cache::{CacheConfig, CachedEngine, DecisionCache};
use authzd::engine::reference::ReferenceEvaluator;
use authzd::engine::{Authorize as _, Decision, Engine, EngineConfig};
use authzd::request::Request;
use authzd::synth;
use authzd_bench_peers as peers;
use casbin::CoreApi as _;
use serde_json::json;

/// Counts heap bytes allocated minus freed while [`COUNTING`] is on: the memory an engine
/// keeps is the count across its construction. Off while timing, so timed code pays one
/// relaxed load per allocation and nothing more.
struct CountingAllocator;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counters only
// observe sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Builds something, returning it with the build time and the heap bytes it still holds.
fn built<T>(build: impl FnOnce() -> Result<T>) -> Result<(T, Duration, isize)> {
    let before = LIVE.load(Ordering::Relaxed);
    COUNTING.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let value = build();
    let elapsed = start.elapsed();
    COUNTING.store(false, Ordering::SeqCst);
    Ok((value?, elapsed, LIVE.load(Ordering::Relaxed) - before))
}

/// Median time of one call, in nanoseconds: rounds of at least ~1 ms each (a single call when
/// one is slower than that), repeated until `budget` is spent, at least 3 and at most 31.
fn median_ns(budget: Duration, mut call: impl FnMut()) -> f64 {
    let start = Instant::now();
    call();
    let once = start.elapsed().max(Duration::from_nanos(1));
    let per_round = (Duration::from_millis(1).as_nanos() / once.as_nanos()).clamp(1, 1_000_000);
    let mut samples = Vec::new();
    let begun = Instant::now();
    while samples.len() < 31 && (samples.len() < 3 || begun.elapsed() < budget) {
        let round = Instant::now();
        for _ in 0..per_round {
            call();
        }
        samples.push(round.elapsed().as_nanos() as f64 / per_round as f64);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Checks `decide` against authzd's answers, in sample order, until every request is checked
/// or `budget` is spent (at least `min` requests). Fails on the first disagreement.
/// `allow_only`: the peer answers a boolean (casbin), so only allowed/not allowed is compared.
fn check(
    engine: &str,
    truth: &[(Request, Decision)],
    budget: Duration,
    min: usize,
    allow_only: bool,
    mut decide: impl FnMut(&Request) -> Result<Decision>,
) -> Result<usize> {
    let start = Instant::now();
    // The three probe requests (allow, deny, nothing matches) are at the end: check them first.
    let order = truth.iter().rev();
    let mut checked = 0;
    for (request, expected) in order {
        if checked >= min && start.elapsed() > budget {
            break;
        }
        let got = decide(request)?;
        let agree = if allow_only {
            (got == Decision::Allow) == (*expected == Decision::Allow)
        } else {
            got == *expected
        };
        if !agree {
            bail!("{engine} disagrees with authzd: {got:?} != {expected:?} for {request:?}");
        }
        checked += 1;
    }
    Ok(checked)
}

/// A casbin request by reference, so timing measures casbin and not our string copies.
fn refs(t: &peers::CasbinRequest) -> (&String, &String, &String, &String, &String) {
    (&t.0, &t.1, &t.2, &t.3, &t.4)
}

struct Args {
    sizes: Vec<usize>,
    max_cedar: usize,
    max_casbin: usize,
    max_reference: usize,
    budget: Duration,
}

fn args() -> Result<Args> {
    let mut args = Args {
        sizes: vec![1_000, 10_000, 100_000, 1_000_000],
        max_cedar: 1_000_000,
        max_casbin: 100_000,
        max_reference: 1_000_000,
        budget: Duration::from_millis(400),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<usize>().with_context(|| format!("{flag} {v}"));
        match flag.as_str() {
            "--sizes" => {
                args.sizes = value.split(',').map(number).collect::<Result<_>>()?;
            }
            "--max-cedar" => args.max_cedar = number(&value)?,
            "--max-casbin" => args.max_casbin = number(&value)?,
            "--max-reference" => args.max_reference = number(&value)?,
            "--budget-ms" => args.budget = Duration::from_millis(number(&value)? as u64),
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(args)
}

fn emit(size: usize, engine: &str, fields: serde_json::Value) {
    let mut line = json!({ "bindings": size, "engine": engine });
    if let (Some(line), Some(fields)) = (line.as_object_mut(), fields.as_object()) {
        line.extend(fields.clone());
    }
    println!("{line}");
}

fn skipped(size: usize, engine: &str, why: &str) {
    emit(size, engine, json!({ "skipped": why }));
}

fn main() -> Result<()> {
    let args = args()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .context("tokio runtime")?;
    for &size in &args.sizes {
        let shape = peers::scaling_shape(size);
        let policy = synth::policy(&shape, 42);
        let sample = peers::sample(&shape, &policy, 100, 7);
        let allow = synth::allowed_request(&shape);
        let nomatch = synth::unmatched_request(&shape);
        let bindings = policy.bindings.len();
        let per_binding = |bytes: isize| bytes as f64 / bindings as f64;

        // authzd: the compiled index, no cache. Its answers are the truth the peers are held to.
        let config = EngineConfig::default();
        let (engine, compile, bytes) = built(|| Ok(Engine::new(&policy, config.clone())))?;
        let truth: Vec<(Request, Decision)> = sample
            .requests
            .iter()
            .map(|r| (r.clone(), engine.authorize(r).decision))
            .collect();
        if engine.authorize(&allow).decision != Decision::Allow
            || engine.authorize(&nomatch).decision != Decision::NoOpinion
        {
            bail!("authzd's probe answers are wrong at {size}");
        }
        let count = |d: Decision| truth.iter().filter(|(_, t)| *t == d).count();
        emit(
            size,
            "authzd",
            json!({
                "namespaces": shape.namespaces,
                "compile_ms": compile.as_secs_f64() * 1e3,
                "bytes_per_binding": per_binding(bytes),
                "allow_ns": median_ns(args.budget, || { black_box(engine.authorize(black_box(&allow))); }),
                "nomatch_ns": median_ns(args.budget, || { black_box(engine.authorize(black_box(&nomatch))); }),
                "sample": truth.len(),
                "sample_allow": count(Decision::Allow),
                "sample_deny": count(Decision::Deny),
                "sample_noopinion": count(Decision::NoOpinion),
            }),
        );

        // authzd behind its decision cache: a hit on the probe request.
        let cache = DecisionCache::new(CacheConfig::default());
        cache.begin_revision(1);
        let cached = CachedEngine {
            cache: &cache,
            engine: &engine,
            revision: 1,
        };
        cached.decide(allow.as_borrowed());
        if !cached.decide(allow.as_borrowed()).cached {
            bail!("authzd cache did not hit");
        }
        emit(
            size,
            "authzd-cached",
            json!({ "hit_ns": median_ns(args.budget, || { black_box(cached.decide(black_box(&allow).as_borrowed())); }) }),
        );
        drop(cache);

        // The reference evaluator: upstream's linear walk over every binding.
        if size <= args.max_reference {
            let (reference, compile, bytes) =
                built(|| Ok(ReferenceEvaluator::new(&policy, &config)))?;
            let checked = check("reference", &truth, args.budget * 5, 30, false, |r| {
                Ok(reference.authorize(r).decision)
            })?;
            emit(
                size,
                "reference",
                json!({
                    "compile_ms": compile.as_secs_f64() * 1e3,
                    "bytes_per_binding": per_binding(bytes),
                    "checked": checked,
                    "allow_ns": median_ns(args.budget, || { black_box(reference.authorize(black_box(&allow))); }),
                    "nomatch_ns": median_ns(args.budget, || { black_box(reference.authorize(black_box(&nomatch))); }),
                }),
            );
        } else {
            skipped(size, "reference", "larger than --max-reference");
        }

        if size <= args.max_cedar {
            let (cedar, compile, bytes) = built(|| {
                let translated = peers::cedar_policy(&policy, &sample.users)?;
                peers::Cedar::new(translated)
            })?;
            let checked = check("cedar", &truth, args.budget * 5, 30, false, |r| {
                Ok(cedar.decide(&cedar.request(r)?))
            })
            .map_err(|e| match e.to_string().contains("disagrees") {
                true => {
                    let why = truth
                        .iter()
                        .find_map(|(r, want)| {
                            let request = cedar.request(r).ok()?;
                            (cedar.decide(&request) != *want).then(|| cedar.explain(&request))
                        })
                        .unwrap_or_default();
                    anyhow!("{e}; cedar's determining policies: {why}")
                }
                false => e,
            })?;
            let allow_request = cedar.request(&allow)?;
            let nomatch_request = cedar.request(&nomatch)?;
            emit(
                size,
                "cedar",
                json!({
                    "compile_ms": compile.as_secs_f64() * 1e3,
                    "bytes_per_binding": per_binding(bytes),
                    "policies": cedar.policies.policies().count(),
                    "checked": checked,
                    "allow_ns": median_ns(args.budget, || { black_box(cedar.decide(black_box(&allow_request))); }),
                    "nomatch_ns": median_ns(args.budget, || { black_box(cedar.decide(black_box(&nomatch_request))); }),
                }),
            );
        } else {
            skipped(
                size,
                "cedar",
                "larger than --max-cedar (scripts/bench.sh stops cedar at 100k to stay within \
                 its 10-minute budget; the 100k row shows its build and decision times)",
            );
        }

        if size <= args.max_casbin {
            let (enforcer, compile, bytes) = built(|| {
                let translated = peers::casbin_policy(&policy, &sample.users)?;
                runtime.block_on(peers::casbin_enforcer::<casbin::Enforcer>(translated))
            })?;
            let enforce = |e: &casbin::Enforcer, r: &Request| -> Result<Decision> {
                let allowed = e
                    .enforce(peers::casbin_request(r)?)
                    .map_err(|e| anyhow!("casbin: {e}"))?;
                Ok(if allowed {
                    Decision::Allow
                } else {
                    Decision::NoOpinion
                })
            };
            let checked = check("casbin", &truth, args.budget * 5, 30, true, |r| {
                enforce(&enforcer, r)
            })?;
            let allow_tuple = peers::casbin_request(&allow)?;
            let nomatch_tuple = peers::casbin_request(&nomatch)?;
            emit(
                size,
                "casbin",
                json!({
                    "compile_ms": compile.as_secs_f64() * 1e3,
                    "bytes_per_binding": per_binding(bytes),
                    "checked": checked,
                    "allow_ns": median_ns(args.budget, || { black_box(enforcer.enforce(black_box(refs(&allow_tuple))).ok()); }),
                    "nomatch_ns": median_ns(args.budget, || { black_box(enforcer.enforce(black_box(refs(&nomatch_tuple))).ok()); }),
                }),
            );
            drop(enforcer);

            let translated = peers::casbin_policy(&policy, &sample.users)?;
            let cached: casbin::CachedEnforcer =
                runtime.block_on(peers::casbin_enforcer(translated))?;
            let first = cached
                .enforce(refs(&allow_tuple))
                .map_err(|e| anyhow!("casbin: {e}"))?;
            if !first {
                bail!("casbin cached enforcer denies the probe request");
            }
            emit(
                size,
                "casbin-cached",
                json!({ "hit_ns": median_ns(args.budget, || { black_box(cached.enforce(black_box(refs(&allow_tuple))).ok()); }) }),
            );
        } else {
            skipped(
                size,
                "casbin",
                "larger than --max-casbin (100k by default, to keep scripts/bench.sh within \
                 its 10-minute budget; the 100k row shows its build and decision times)",
            );
        }
    }
    Ok(())
}
