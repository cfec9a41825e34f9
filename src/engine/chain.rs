//! The serving engine: the authorizer chain over the compiled index.

use crate::engine::reference::ReferenceEvaluator;
use crate::engine::{Action, AllowedSubjects, EngineConfig, Request, Response};
use crate::policy::model::PolicySet;

/// One compiled policy state plus the chain configuration. Immutable; cheap to share.
pub struct Engine {
    config: EngineConfig,
    // TEMPORARY: answers through the reference evaluator until the compiled index lands.
    inner: ReferenceEvaluator,
}

impl Engine {
    pub fn new(policy: &PolicySet, config: EngineConfig) -> Self {
        Self {
            inner: ReferenceEvaluator::new(policy, &config),
            config,
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn authorize(&self, request: &Request) -> Response {
        self.inner.authorize(request)
    }

    pub fn allowed_subjects(&self, action: &Action) -> AllowedSubjects {
        self.inner.allowed_subjects(action)
    }
}
