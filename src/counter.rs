//! A counter striped over cache-padded cells, for figures bumped on the request path by every
//! worker (the cache's hits and misses, the request metrics) and read rarely (a scrape, a
//! status call): an increment touches only its thread's cell.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A counter striped over cache-padded cells so that concurrent increments from different
/// threads do not contend on one cache line.
#[derive(Debug, Default)]
pub struct Counter {
    stripes: [Padded; STRIPES],
}

const STRIPES: usize = 8;

#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(AtomicU64);

thread_local! {
    /// This thread's stripe, assigned round-robin on first use.
    static STRIPE: usize = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
}
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

impl Counter {
    pub fn add(&self, n: u64) {
        let stripe = STRIPE.with(|s| *s);
        self.stripes[stripe].0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .sum()
    }
}
