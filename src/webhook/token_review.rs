//! Bearer tokens checked by a Kubernetes API server: a TokenReview posted through a kubeconfig
//! (or the in-cluster service account), as kube-rbac-proxy's delegating authenticator does
//! (`pkg/authn/delegating.go` in brancz/kube-rbac-proxy, over upstream's token webhook,
//! `staging/src/k8s.io/apiserver/plugin/pkg/authenticator/token/webhook/webhook.go`): the
//! answer, authenticated or not, is cached for two minutes (its `CacheTTL`) in the webhooks'
//! LRU-expire cache (`cache.rs`, bounded), errors never are.
//!
//! With audiences configured (`--auth-token-audiences`) they are sent in `spec.audiences`, and a
//! token counts as authenticated only when the answer's `status.audiences` shares one of them
//! (upstream's `tokenReviewRequest` intersection).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper::body::Bytes;
use serde::Deserialize;
use tokio::time::Instant;

use super::cache::{self, AnswerCache};
use super::client::{RetryBackoff, Transport};
use super::kubeconfig;
use crate::request::UserInfo;

/// Where a TokenReview is created on an API server.
const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

/// kube-rbac-proxy's `CacheTTL`, for authenticated and unauthenticated answers alike.
const CACHE_TTL: Duration = Duration::from_secs(2 * 60);

/// The most one review may take, retries included (upstream's webhook token authenticator
/// default, `DefaultAuthWebhookRetryBackoff` inside it).
const TIMEOUT: Duration = Duration::from_secs(10);

/// Every authenticated user is in this group (upstream's `AuthenticatedGroupAdder`).
const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// Each token's answer: the user, or `None` (not authenticated).
type Answers = AnswerCache<Option<Arc<UserInfo>>>;

/// Checks tokens with an API server's TokenReview.
pub struct TokenReviewer {
    transport: Transport,
    audiences: Vec<String>,
    cache: Mutex<Answers>,
}

impl std::fmt::Debug for TokenReviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenReviewer")
            .field("server", &self.transport.server())
            .field("audiences", &self.audiences)
            .finish_non_exhaustive()
    }
}

impl TokenReviewer {
    /// The API server of the kubeconfig at `kubeconfig`, or the in-cluster one when `None`
    /// (`Ok(None)` outside a cluster: no API server to ask).
    pub fn new(kubeconfig: Option<&Path>, audiences: Vec<String>) -> Result<Option<Self>, String> {
        let endpoint = match kubeconfig {
            Some(path) => kubeconfig::load(path)
                .map_err(|problem| format!("kubeconfig `{}`: {problem}", path.display()))?,
            None => match kubeconfig::in_cluster()? {
                Some(endpoint) => endpoint,
                None => return Ok(None),
            },
        };
        for warning in &endpoint.unused {
            tracing::warn!("{warning}");
        }
        let transport = Transport::new(endpoint.at_api_path(TOKEN_REVIEWS)?)?;
        Ok(Some(TokenReviewer {
            transport,
            audiences,
            cache: Mutex::new(AnswerCache::new(cache::CAPACITY)),
        }))
    }

    /// The API server reviews are posted to, for logs.
    pub fn server(&self) -> String {
        self.transport.server()
    }

    /// The user `token` authenticates, `Ok(None)` when the API server says it does not, or why
    /// the API server could not be asked.
    pub async fn review(&self, token: &str) -> Result<Option<Arc<UserInfo>>, String> {
        if let Some(user) = self.cache().get(token, Instant::now()) {
            return Ok(user);
        }
        let body = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": { "token": token, "audiences": self.audiences },
        });
        let called = self
            .transport
            .call_decoding(
                Bytes::from(body.to_string()),
                TIMEOUT,
                RetryBackoff::upstream(),
                decode,
            )
            .await;
        let status = called
            .outcome
            .map_err(|error| format!("TokenReview at {}: {error}", self.server()))?;
        let user = self.authenticated(status);
        self.cache()
            .insert(token, user.clone(), Instant::now(), CACHE_TTL);
        Ok(user)
    }

    fn authenticated(&self, status: Status) -> Option<Arc<UserInfo>> {
        if !status.authenticated {
            return None;
        }
        if !self.audiences.is_empty()
            && !status.audiences.iter().any(|a| self.audiences.contains(a))
        {
            return None;
        }
        let user = status.user.unwrap_or_default();
        let mut groups = user.groups;
        if !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            groups.push(AUTHENTICATED_GROUP.to_string());
        }
        Some(Arc::new(UserInfo {
            name: user.username,
            uid: user.uid,
            groups,
            extra: user.extra.into_iter().collect(),
        }))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Answers> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Deserialize, Default)]
struct Status {
    #[serde(default)]
    authenticated: bool,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    audiences: Vec<String>,
}

#[derive(Deserialize, Default)]
struct User {
    #[serde(default)]
    username: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    extra: HashMap<String, Vec<String>>,
}

fn decode(body: &[u8]) -> Result<Status, String> {
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        status: Option<Status>,
    }
    let answer: Answer = serde_json::from_slice(body)
        .map_err(|error| format!("the answer is not a TokenReview: {error}"))?;
    Ok(answer.status.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_read_with_its_audiences_and_the_authenticated_group() {
        let status = decode(
            br#"{"status":{"authenticated":true,"user":{"username":"jane","groups":["dev"]},"audiences":["a"]}}"#,
        )
        .unwrap();
        assert!(status.authenticated);
        assert_eq!(status.audiences, ["a"]);
        assert!(decode(b"{}").is_ok_and(|s| !s.authenticated));
        assert!(decode(b"not json").is_err());
    }
}
