//! The Webhook authorizer's client: a decision delegated to a remote SubjectAccessReview
//! endpoint, as kube-apiserver's `--authorization-mode=Webhook` does
//! (docs/semantics.md §8; upstream's
//! `staging/src/k8s.io/apiserver/plugin/pkg/authorizer/webhook/webhook.go`).
//!
//! [`WebhookAuthorizer::authorize`] writes the request as a SubjectAccessReview
//! (`review.rs`), answers from the cache when it can (`cache.rs`), else posts the review to
//! the kubeconfig's server (`kubeconfig.rs`, `client.rs`) with upstream's retries, and reads
//! the decision from the answer's status:
//!
//! | status                | decision                 |
//! | --------------------- | ------------------------ |
//! | `allowed` and `denied`| Deny, with an error      |
//! | `denied`              | Deny                     |
//! | `allowed`             | Allow                    |
//! | otherwise             | NoOpinion                |
//!
//! A call that fails (transport, timeout, a non-2xx answer, a body that does not decode) is
//! answered with the failure policy's decision and the error, and never cached.
//!
//! One difference from upstream, on purpose: upstream bounds each HTTP attempt by the
//! timeout and the retries by its caller's context; [`WebhookAuthorizer::authorize`] has no
//! caller deadline to go by, so the timeout bounds the whole call, retries and waits
//! included.

mod cache;
mod client;
mod kubeconfig;
mod review;
pub mod token_review;

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use hyper::body::Bytes;
use tokio::time::Instant;

pub use client::{outbound_client, OutboundClient, RetryBackoff};
pub use kubeconfig::tls_client_config;
pub use token_review::TokenReviewer;

use crate::engine::Decision;
use crate::request::Request;
use cache::AnswerCache;
use client::Transport;
use review::ReviewStatus;

/// The SubjectAccessReview version sent and expected (`--authorization-webhook-version`,
/// `subjectAccessReviewVersion`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WebhookVersion {
    /// `authorization.k8s.io/v1`: the groups are `spec.groups`.
    V1,
    /// `authorization.k8s.io/v1beta1`: the groups are `spec.group`.
    V1beta1,
}

/// The decision when the webhook cannot be asked (`failurePolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailurePolicy {
    NoOpinion,
    Deny,
}

impl FailurePolicy {
    fn decision(self) -> Decision {
        match self {
            FailurePolicy::NoOpinion => Decision::NoOpinion,
            FailurePolicy::Deny => Decision::Deny,
        }
    }
}

/// One webhook's settings: kube-apiserver's `--authorization-webhook-*` flags, or one
/// `type: Webhook` authorizer of an `AuthorizationConfiguration`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookSettings {
    /// For messages and logs: `webhook` for the flag form, the configuration's name otherwise.
    pub name: String,
    /// The kubeconfig naming the webhook's server and authzd's credentials.
    pub kubeconfig: PathBuf,
    pub version: WebhookVersion,
    /// How long an allow is cached.
    pub authorized_ttl: Duration,
    /// How long a deny or no opinion is cached.
    pub unauthorized_ttl: Duration,
    pub cache_authorized: bool,
    pub cache_unauthorized: bool,
    /// The most one call may take, retries and the waits between them included.
    pub timeout: Duration,
    pub failure_policy: FailurePolicy,
}

impl WebhookSettings {
    /// kube-apiserver's defaults for the flag form (`pkg/kubeapiserver/options/authorization.go`,
    /// `NewBuiltInAuthorizationOptions` and `buildAuthorizationConfiguration`): v1beta1,
    /// allows cached 5m and the rest 30s (each cached since its TTL is not zero), a 30s
    /// timeout, and no opinion when the webhook fails.
    pub fn flag_defaults(kubeconfig: PathBuf) -> Self {
        WebhookSettings {
            name: "webhook".to_string(),
            kubeconfig,
            version: WebhookVersion::V1beta1,
            authorized_ttl: Duration::from_secs(5 * 60),
            unauthorized_ttl: Duration::from_secs(30),
            cache_authorized: true,
            cache_unauthorized: true,
            timeout: Duration::from_secs(30),
            failure_policy: FailurePolicy::NoOpinion,
        }
    }
}

/// Why a webhook could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("webhook `{name}`: kubeconfig `{path}`: {problem}")]
pub struct WebhookError {
    name: String,
    path: String,
    problem: String,
}

/// What the webhook answered, or the failure policy's answer with the error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookAnswer {
    pub decision: Decision,
    /// The webhook's `status.reason`; empty when it could not be asked.
    pub reason: String,
    /// Why the webhook could not be asked, or that it answered both allowed and denied.
    pub error: Option<String>,
    /// Answered from the cache, without a call.
    pub cached: bool,
}

/// A webhook authorizer: one per configured webhook, shared (`Arc`) by every request.
pub struct WebhookAuthorizer {
    settings: WebhookSettings,
    transport: Transport,
    backoff: RetryBackoff,
    cache: Mutex<AnswerCache>,
}

impl std::fmt::Debug for WebhookAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookAuthorizer")
            .field("name", &self.settings.name)
            .field("server", &self.transport.server())
            .finish_non_exhaustive()
    }
}

impl WebhookAuthorizer {
    /// Reads and checks the kubeconfig now (its files too: CA, client certificate and key,
    /// token file), so a bad one is a startup error naming the problem.
    pub fn new(settings: WebhookSettings) -> Result<Self, WebhookError> {
        let error = |problem: String| WebhookError {
            name: settings.name.clone(),
            path: settings.kubeconfig.display().to_string(),
            problem,
        };
        if settings.timeout.is_zero() {
            return Err(error("the timeout must be longer than zero".to_string()));
        }
        let endpoint = kubeconfig::load(&settings.kubeconfig).map_err(error)?;
        for warning in &endpoint.unused {
            tracing::warn!(webhook = %settings.name, "{warning}");
        }
        let transport = Transport::new(endpoint).map_err(error)?;
        Ok(WebhookAuthorizer {
            settings,
            transport,
            backoff: RetryBackoff::upstream(),
            cache: Mutex::new(AnswerCache::new(cache::CAPACITY)),
        })
    }

    /// Replaces upstream's backoff (as kube-apiserver's `WebhookRetryBackoff` option does);
    /// the timeout still bounds the whole call.
    pub fn with_retry_backoff(mut self, backoff: RetryBackoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The webhook's name, for messages and logs.
    pub fn name(&self) -> &str {
        &self.settings.name
    }

    pub fn settings(&self) -> &WebhookSettings {
        &self.settings
    }

    /// The webhook's decision on `request`. Never fails: when the webhook cannot be asked,
    /// the answer is the failure policy's decision with the error.
    pub async fn authorize(&self, request: &Request) -> WebhookAnswer {
        let started = Instant::now();
        let version = self.settings.version;
        let spec = review::spec_json(request, version);
        let hit = self.cache().get(&spec, Instant::now());
        if let Some(status) = hit {
            let answer = answer(status, true);
            self.log(&answer, 0, started);
            return answer;
        }
        let body = Bytes::from(review::body(&spec, version));
        let called = self
            .transport
            .call(body, self.settings.timeout, self.backoff)
            .await;
        let answer = match called.outcome {
            Ok(status) => {
                self.remember(request, &spec, &status);
                answer(status, false)
            }
            Err(error) => WebhookAnswer {
                decision: self.settings.failure_policy.decision(),
                reason: String::new(),
                error: Some(format!(
                    "webhook `{}` ({}): {error}{}",
                    self.settings.name,
                    self.transport.server(),
                    match called.attempts {
                        1 => String::new(),
                        n => format!(" (after {n} attempts)"),
                    }
                )),
                cached: false,
            },
        };
        self.log(&answer, called.attempts, started);
        answer
    }

    /// Caches a successful answer: an allow for `authorized_ttl`, anything else for
    /// `unauthorized_ttl`, each only when its kind is cached and its TTL is not zero, and
    /// never for a request too large to cache (upstream's `shouldCache`).
    fn remember(&self, request: &Request, spec: &str, status: &ReviewStatus) {
        let (cached, ttl) = if status.allowed {
            (self.settings.cache_authorized, self.settings.authorized_ttl)
        } else {
            (
                self.settings.cache_unauthorized,
                self.settings.unauthorized_ttl,
            )
        };
        if cached && !ttl.is_zero() && review::should_cache(&request.action) {
            self.cache()
                .insert(spec, status.clone(), Instant::now(), ttl);
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, AnswerCache> {
        // The cache's methods do not panic, so a poisoned lock cannot hide a half-made change.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn log(&self, answer: &WebhookAnswer, attempts: u32, started: Instant) {
        tracing::debug!(
            webhook = %self.settings.name,
            decision = %answer.decision,
            cached = answer.cached,
            attempts,
            elapsed = ?started.elapsed(),
            error = answer.error.as_deref().unwrap_or(""),
            "webhook authorization"
        );
    }
}

/// The decision a status stands for (upstream's `switch` at the end of `Authorize`).
fn answer(status: ReviewStatus, cached: bool) -> WebhookAnswer {
    let (decision, error) = match (status.allowed, status.denied) {
        (true, true) => (
            Decision::Deny,
            Some("webhook subject access review returned both allow and deny response".to_string()),
        ),
        (_, true) => (Decision::Deny, None),
        (true, false) => (Decision::Allow, None),
        (false, false) => (Decision::NoOpinion, None),
    };
    WebhookAnswer {
        decision,
        reason: status.reason,
        error,
        cached,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(allowed: bool, denied: bool) -> ReviewStatus {
        ReviewStatus {
            allowed,
            denied,
            reason: "because".into(),
        }
    }

    #[test]
    fn the_status_decides() {
        let both = answer(status(true, true), false);
        assert_eq!(both.decision, Decision::Deny);
        assert!(both.error.is_some());
        assert_eq!(both.reason, "because");
        for (allowed, denied, decision) in [
            (false, true, Decision::Deny),
            (true, false, Decision::Allow),
            (false, false, Decision::NoOpinion),
        ] {
            let answered = answer(status(allowed, denied), true);
            assert_eq!(answered.decision, decision);
            assert_eq!(answered.error, None);
            assert!(answered.cached);
        }
    }

    #[test]
    fn flag_defaults_are_upstreams() {
        let settings = WebhookSettings::flag_defaults(PathBuf::from("/etc/authz.kubeconfig"));
        assert_eq!(settings.version, WebhookVersion::V1beta1);
        assert_eq!(settings.authorized_ttl, Duration::from_secs(300));
        assert_eq!(settings.unauthorized_ttl, Duration::from_secs(30));
        assert!(settings.cache_authorized && settings.cache_unauthorized);
        assert_eq!(settings.timeout, Duration::from_secs(30));
        assert_eq!(settings.failure_policy, FailurePolicy::NoOpinion);
        assert_eq!(settings.name, "webhook");
    }

    #[test]
    fn the_authorizer_can_be_shared_across_tasks() {
        fn shared<T: Send + Sync + 'static>() {}
        shared::<WebhookAuthorizer>();
    }
}
