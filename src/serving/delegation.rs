//! The `Webhook` mode: authorizers outside the process, in the chain.
//!
//! The engine never does I/O, so it answers a chain with webhooks as if each said no opinion
//! (and that answer is what the decision cache holds: it depends on local policy alone, so
//! precise invalidation still covers it). [`Delegation::finish`] then asks, in chain order,
//! every webhook the chain reached undecided — those before the authorizer that decided
//! locally, or all of them when nothing did — and the first that decides, decides; otherwise
//! the local answer stands, as kube-apiserver's union authorizer folds its chain. A webhook's
//! answers are cached by the webhook itself for its TTLs (upstream's cache), so a delegated
//! decision can be up to that TTL stale: authzd's precise revocation covers its own policy,
//! not a remote one.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::engine::explain;
use crate::engine::{Decided, Decision, Mode, Response, RuleRef};
use crate::request::Request;

/// What a remote authorizer said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteAnswer {
    pub decision: Decision,
    pub reason: String,
    /// Why it could not answer (its failure policy then decided), or an error it reported.
    pub error: Option<String>,
    /// Served from the remote authorizer's own cache.
    pub cached: bool,
}

/// An authorizer the chain delegates to: a webhook (the composition root adapts
/// `webhook::WebhookAuthorizer` to it).
pub trait RemoteAuthorizer: Send + Sync + 'static {
    /// Its name, for explanations (`RuleRef.source`).
    fn name(&self) -> &str;

    fn authorize<'a>(
        &'a self,
        request: &'a Request,
    ) -> Pin<Box<dyn Future<Output = RemoteAnswer> + Send + 'a>>;
}

/// The chain's modes and the remote authorizers its `Webhook(n)` entries name.
pub struct Delegation {
    modes: Vec<Mode>,
    remotes: Vec<Arc<dyn RemoteAuthorizer>>,
}

impl Delegation {
    /// `remotes[n]` answers `Mode::Webhook(n)`; `None` when a webhook the chain names has
    /// no authorizer.
    pub fn new(modes: Vec<Mode>, remotes: Vec<Arc<dyn RemoteAuthorizer>>) -> Option<Self> {
        let complete = modes.iter().all(|mode| match mode {
            Mode::Webhook(n) => usize::from(*n) < remotes.len(),
            _ => true,
        });
        complete.then_some(Self { modes, remotes })
    }

    /// The names of the remote authorizers, in chain order.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.remotes.iter().map(|remote| remote.name())
    }

    /// What who-can and rules reviews say when the chain has webhooks: their answers cover
    /// the local authorizers only, as upstream's webhook cannot list rules or subjects.
    pub fn listing_errors(&self) -> Vec<String> {
        self.names()
            .map(|name| {
                format!(
                    "webhook authorizer {name:?} cannot list rules or subjects; this answer covers the local authorizers only"
                )
            })
            .collect()
    }

    /// Where in the chain the authorizer that decided `response` stands; `None` when nothing
    /// decided. Super-users bypass the whole chain.
    fn decided_at(&self, response: &Response) -> Option<usize> {
        let by = match response.decision {
            Decision::Allow => response.allowed_by.first(),
            Decision::Deny => response.denied_by.first(),
            Decision::NoOpinion => return None,
        };
        let mode = match by.map(|rule| Mode::named(rule.authorizer)) {
            Some(Some(mode)) if !matches!(mode, Mode::Webhook(_)) => mode,
            // Super-users, and a decision without a rule (a fenced replica's deny): made
            // before any webhook.
            _ => return Some(0),
        };
        self.modes.iter().position(|m| *m == mode).or(Some(0))
    }

    /// The chain's answer to `request`, from the engine's `decided` (webhooks as no opinion).
    pub async fn finish(&self, request: &Request, decided: Decided) -> Decided {
        let reached = self
            .decided_at(&decided.response)
            .unwrap_or(self.modes.len());
        let mut undecided = Vec::new();
        for mode in self.modes.iter().take(reached) {
            let Mode::Webhook(n) = mode else { continue };
            let Some(remote) = self.remotes.get(usize::from(*n)) else {
                continue;
            };
            let answer = remote.authorize(request).await;
            if answer.decision != Decision::NoOpinion {
                // `cached`: served from the webhook's own TTL cache, without a call.
                let cached = answer.cached;
                return Decided {
                    response: Arc::new(remote_response(remote.name(), answer)),
                    cached,
                    cacheable: false,
                };
            }
            undecided.push(answer);
        }
        // Asked webhooks had no opinion: a later authorizer's decision stands as it was; a
        // chain undecided throughout also carries the webhooks' reasons and errors.
        if decided.response.decision != Decision::NoOpinion
            || undecided
                .iter()
                .all(|a| a.reason.is_empty() && a.error.is_none())
        {
            // A webhook asked took part, even with no opinion: its next answer may differ.
            let cacheable = decided.cacheable && undecided.is_empty();
            return Decided {
                cacheable,
                ..decided
            };
        }
        let mut response = Response::clone(&decided.response);
        for answer in undecided {
            if !answer.reason.is_empty() {
                if !response.reason.is_empty() {
                    response.reason.push('\n');
                }
                response.reason.push_str(&answer.reason);
            }
            response.errors.extend(answer.error);
        }
        Decided {
            response: Arc::new(response),
            cached: false,
            cacheable: false,
        }
    }
}

/// A remote authorizer's decision as an explained response: the webhook named as the rule.
fn remote_response(name: &str, answer: RemoteAnswer) -> Response {
    let rule = RuleRef {
        authorizer: explain::WEBHOOK,
        binding: Arc::from(""),
        role: Arc::from(""),
        rule_index: 0,
        source: Arc::from(name),
    };
    let (allowed_by, denied_by) = match answer.decision {
        Decision::Allow => (vec![rule], Vec::new()),
        _ => (Vec::new(), vec![rule]),
    };
    Response {
        decision: answer.decision,
        reason: answer.reason,
        allowed_by,
        denied_by,
        errors: answer.error.into_iter().collect(),
        encoded: Default::default(),
        recorded: Default::default(),
        plan: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, EngineConfig};
    use crate::policy::model::PolicySet;
    use crate::request::{Action, ResourceAttributes, UserInfo};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Answers one fixed decision and counts the calls.
    struct Scripted {
        decision: Decision,
        calls: AtomicUsize,
    }

    impl RemoteAuthorizer for Scripted {
        fn name(&self) -> &str {
            "scripted"
        }

        fn authorize<'a>(
            &'a self,
            _: &'a Request,
        ) -> Pin<Box<dyn Future<Output = RemoteAnswer> + Send + 'a>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let answer = RemoteAnswer {
                decision: self.decision,
                reason: format!("remote says {}", self.decision),
                error: None,
                cached: false,
            };
            Box::pin(std::future::ready(answer))
        }
    }

    const POLICY: &str = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r}\nrules:\n- {apiGroups: [\"\"], resources: [pods], verbs: [get]}\n- {apiGroups: [\"\"], resources: [secrets], verbs: [get], deny: true}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: b}\nsubjects: [{kind: User, name: alice}]\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: r}\n";

    fn engine(modes: Vec<Mode>) -> Engine {
        let mut policy = PolicySet::default();
        for object in crate::policy::load::parse_manifest(
            "p.yaml",
            POLICY,
            &crate::policy::load::LoadOptions::default(),
        )
        .unwrap()
        {
            policy.push(object)
        }
        policy.canonicalize();
        Engine::new(
            &policy,
            EngineConfig {
                modes,
                ..EngineConfig::default()
            },
        )
    }

    fn get(resource: &str) -> Request {
        Request {
            user: UserInfo {
                name: "alice".into(),
                ..Default::default()
            },
            action: Action::Resource(ResourceAttributes {
                verb: "get".into(),
                resource: resource.into(),
                namespace: "default".into(),
                ..Default::default()
            }),
        }
    }

    async fn decide(
        modes: Vec<Mode>,
        remote: Decision,
        resource: &str,
    ) -> (Decision, String, usize) {
        let scripted = Arc::new(Scripted {
            decision: remote,
            calls: AtomicUsize::new(0),
        });
        let remotes: Vec<Arc<dyn RemoteAuthorizer>> = vec![scripted.clone()];
        let delegation = Delegation::new(modes.clone(), remotes).unwrap();
        let request = get(resource);
        let local = Decided {
            response: Arc::new(engine(modes).authorize(&request)),
            cached: false,
            cacheable: true,
        };
        let finished = delegation.finish(&request, local).await;
        let by = finished
            .response
            .allowed_by
            .first()
            .or(finished.response.denied_by.first())
            .map(|r| r.authorizer.to_string())
            .unwrap_or_default();
        (
            finished.response.decision,
            by,
            scripted.calls.load(Ordering::SeqCst),
        )
    }

    /// `RBAC,Webhook`: a local allow or deny decides without asking; what RBAC leaves
    /// undecided goes to the webhook, whose decision is explained as the webhook's.
    #[tokio::test]
    async fn rbac_then_webhook_asks_only_what_rbac_leaves_undecided() {
        let chain = vec![Mode::Rbac, Mode::Webhook(0)];
        assert_eq!(
            decide(chain.clone(), Decision::Deny, "pods").await,
            (Decision::Allow, "RBAC".into(), 0)
        );
        assert_eq!(
            decide(chain.clone(), Decision::Allow, "secrets").await,
            (Decision::Deny, "RBAC".into(), 0)
        );
        assert_eq!(
            decide(chain.clone(), Decision::Allow, "configmaps").await,
            (Decision::Allow, "Webhook".into(), 1)
        );
        assert_eq!(
            decide(chain, Decision::NoOpinion, "configmaps").await,
            (Decision::NoOpinion, String::new(), 1)
        );
    }

    /// `Webhook,RBAC`: the webhook is asked first and decides; its no opinion lets RBAC's
    /// decision stand.
    #[tokio::test]
    async fn webhook_then_rbac_asks_the_webhook_first() {
        let chain = vec![Mode::Webhook(0), Mode::Rbac];
        assert_eq!(
            decide(chain.clone(), Decision::Deny, "pods").await,
            (Decision::Deny, "Webhook".into(), 1)
        );
        assert_eq!(
            decide(chain, Decision::NoOpinion, "pods").await,
            (Decision::Allow, "RBAC".into(), 1)
        );
    }
}
