//! Responses shared between requests that were decided the same way.
//!
//! A response is a function of what decided it, not of the request: two requests allowed by the
//! same rule of the same binding through the same subject get byte-identical explanations,
//! whatever resource they name. The engine builds each such response once per snapshot and
//! hands out the same `Arc`, so a decision that misses the cache allocates no explanation, and
//! the cache's entries share their responses instead of each holding a copy.

use std::sync::Arc;

use dashmap::DashMap;
use rustc_hash::FxBuildHasher;

use crate::engine::{Decision, Response};

/// At most this many distinct responses are kept per snapshot (a few MiB); past it, responses
/// are built per request, as without sharing.
pub const MAX_SHARED_RESPONSES: usize = 16_384;

/// One rule hit, by identity: the binding entry (its address, stable for the engine's life),
/// the index of the subject that reached it, and the rule's position in its role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HitKey {
    pub entry: usize,
    pub subject: u32,
    pub rule: u32,
}

/// What decided a request, in the cases where that alone determines the whole response (no
/// super-user, no evaluation error, a chain of RBAC and ABAC only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// RBAC decided: the decision, the first allowing and the first denying rule.
    Rbac {
        decision: Decision,
        allow: Option<HitKey>,
        deny: Option<HitKey>,
    },
    /// This ABAC line allowed.
    Abac { line: u32 },
    /// No authorizer had an opinion.
    NoOpinion,
}

/// The responses of one engine snapshot, by outcome.
#[derive(Default)]
pub struct SharedResponses {
    map: DashMap<Outcome, Arc<Response>, FxBuildHasher>,
}

impl SharedResponses {
    /// The response for `outcome`, built by `build` the first time (or every time, once the
    /// table is full).
    pub fn get_or_build(
        &self,
        outcome: Outcome,
        build: impl FnOnce() -> Response,
    ) -> Arc<Response> {
        if let Some(found) = self.map.get(&outcome) {
            return Arc::clone(found.value());
        }
        let response = Arc::new(build());
        if self.map.len() < MAX_SHARED_RESPONSES {
            // Another thread may have raced us here; either copy is correct, keep the first.
            let kept = self.map.entry(outcome).or_insert(response);
            return Arc::clone(kept.value());
        }
        response
    }
}
