//! The serving state: the compiled policy currently in force, swapped in whole.
//!
//! One writer (today the startup load in `app`; with live reloads, the store) publishes a new
//! [`Snapshot`]; every request takes the current one with a single atomic load and answers
//! from it alone, so a request never mixes two policies.

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::engine::Engine;

/// One compiled policy state and the revision it is published as.
pub struct Snapshot {
    pub engine: Arc<Engine>,
    /// 1 for the first successful load, then +1 per published policy.
    pub revision: u64,
}

/// Holds the current [`Snapshot`]; empty until the first policy compiles.
#[derive(Default)]
pub struct ServingState {
    current: ArcSwapOption<Snapshot>,
}

impl ServingState {
    /// The snapshot in force, or `None` before the first successful load.
    pub fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.current.load_full()
    }

    /// Publishes `engine` as the next revision and returns that revision.
    pub fn publish(&self, engine: Engine) -> u64 {
        let engine = Arc::new(engine);
        // INVARIANT: revisions grow by exactly one per publish, even if two writers raced
        // (`rcu` retries the closure against the value it lost to).
        let previous = self.current.rcu(|current| {
            Some(Arc::new(Snapshot {
                engine: Arc::clone(&engine),
                revision: next_revision(current.as_deref()),
            }))
        });
        next_revision(previous.as_deref())
    }
}

fn next_revision(current: Option<&Snapshot>) -> u64 {
    current.map_or(1, |s| s.revision + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineConfig;
    use crate::policy::model::PolicySet;

    #[test]
    fn revisions_start_at_one_and_grow() {
        let state = ServingState::default();
        assert!(state.snapshot().is_none());
        let engine = || Engine::new(&PolicySet::default(), EngineConfig::default());
        assert_eq!(state.publish(engine()), 1);
        assert_eq!(state.snapshot().map(|s| s.revision), Some(1));
        assert_eq!(state.publish(engine()), 2);
        assert_eq!(state.snapshot().map(|s| s.revision), Some(2));
    }
}
