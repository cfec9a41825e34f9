//! A typed async client for every `authz.v1.Authorizer` and `authz.v1.AccessReview` call,
//! optionally answering [`Client::authorize`] from a [`LocalCache`] in this process. Every
//! call the server answers carries the client's [`Deadline`]; an answer from the local cache
//! waits for nothing and needs none.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::codegen::InterceptedService;
use tonic::transport::Channel;
use tonic::Status;

use super::connect::{connect, ConnectError, Credentials, Endpoint};
use super::deadline::Deadline;
use super::local::{Local, LocalCache, LocalCacheConfig};
use crate::api::convert;
use crate::cache::CacheKey;
use crate::proto;
use crate::proto::access_review_client::AccessReviewClient;
use crate::proto::authorizer_client::AuthorizerClient;
use crate::request::Request;

type Service = InterceptedService<Channel, Credentials>;

thread_local! {
    /// The key buffer of this thread's lookups (see [`Client::look_up`]).
    static KEY: std::cell::RefCell<CacheKey> = std::cell::RefCell::new(CacheKey::default());
}

/// What the local cache said: its answer, or ask the server (keeping the answer with this key
/// and generation, when there is one).
enum Looked {
    Hit(Answer),
    Ask(Option<Box<(CacheKey, u64)>>),
}

/// [`Client::authorize`]'s future: the local cache's answer, or the call to the server.
pub enum Authorizing<'a> {
    Ready(Option<Answer>),
    Asking(Pin<Box<dyn Future<Output = Result<Answer, Status>> + Send + 'a>>),
}

impl Future for Authorizing<'_> {
    type Output = Result<Answer, Status>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            // Polled again after it completed: never ready again, as a fused future.
            Authorizing::Ready(answer) => {
                answer.take().map_or(Poll::Pending, |a| Poll::Ready(Ok(a)))
            }
            Authorizing::Asking(call) => call.as_mut().poll(cx),
        }
    }
}

/// One server, shared by clones (the channel multiplexes; the local cache is one per client
/// and its clones).
#[derive(Clone)]
pub struct Client {
    authorizer: AuthorizerClient<Service>,
    reviews: AccessReviewClient<Service>,
    local: Option<Arc<LocalCache>>,
    deadline: Deadline,
}

/// An Authorize answer, and whether it came from the local cache.
#[derive(Clone, Debug)]
pub struct Answer {
    pub response: Arc<proto::AuthorizeResponse>,
    pub from_local_cache: bool,
}

impl Answer {
    pub fn allowed(&self) -> bool {
        self.response.allowed
    }
}

/// One unary call per method, as the generated client has it with this client's credentials,
/// within this client's deadline.
macro_rules! calls {
    ($($(#[$doc:meta])* $method:ident($field:ident): $request:ty => $response:ty;)*) => {
        $(
            $(#[$doc])*
            pub async fn $method(&self, request: $request) -> Result<$response, Status> {
                let mut service = self.$field.clone();
                let request = self.deadline.request(request);
                self.deadline
                    .bound(async move { Ok(service.$method(request).await?.into_inner()) })
                    .await
            }
        )*
    };
}

impl Client {
    /// Connects to `endpoint`, within its timeout, which then bounds each call
    /// ([`Self::with_timeout`] changes it).
    pub async fn connect(endpoint: &Endpoint) -> Result<Self, ConnectError> {
        let (channel, credentials) = connect(endpoint).await?;
        Ok(Self {
            authorizer: AuthorizerClient::with_interceptor(channel.clone(), credentials.clone())
                .max_decoding_message_size(crate::api::limits::MAX_REQUEST_BYTES),
            reviews: AccessReviewClient::with_interceptor(channel, credentials),
            local: None,
            deadline: Deadline::new(&endpoint.url, endpoint.timeout),
        })
    }

    /// The same client (its connection and local cache shared) whose calls each take at most
    /// `timeout`: the server is told it, and the call fails with `DEADLINE_EXCEEDED` when it
    /// has not answered by then. The invalidation stream of a local cache keeps the timeout
    /// the client had when the cache was made.
    #[must_use]
    pub fn with_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.deadline = Deadline::new(self.deadline.server(), timeout);
        self
    }

    /// How long each call may take.
    pub fn timeout(&self) -> std::time::Duration {
        self.deadline.timeout()
    }

    /// [`Self::authorize`] answers from a cache in this process from now on, kept exact by the
    /// server's invalidation stream (followed by a task on the current tokio runtime, until
    /// the last clone of this client is dropped). Needs `watch` on `decisioninvalidations`.
    #[must_use]
    pub fn with_local_cache(mut self, config: LocalCacheConfig) -> Self {
        let local = Arc::new(LocalCache::new(config));
        tokio::spawn(super::follow::run(
            Arc::downgrade(&local),
            self.authorizer.clone(),
            self.deadline.clone(),
        ));
        self.local = Some(local);
        self
    }

    /// The local cache, when there is one (its counters: [`LocalCache::figures`]).
    pub fn local_cache(&self) -> Option<&LocalCache> {
        self.local.as_deref()
    }

    /// Whether `request.user` may do `request.action`: from the local cache when it holds a
    /// fresh answer, else asked of the server (and kept when the server says it may be).
    ///
    /// The local cache is asked before the future is made, and a hit is a ready future of a
    /// few words: the asking future (a whole gRPC call's state, about a kilobyte) is boxed,
    /// only on a miss, where it costs a round trip anyway. Unboxed, every hit moved it: a
    /// third of a hit's time was that `memmove` (`perf record` on `cargo bench --bench
    /// caller`).
    pub fn authorize<'a>(&'a self, request: &'a Request) -> Authorizing<'a> {
        match self.look_up(request) {
            Looked::Hit(answer) => Authorizing::Ready(Some(answer)),
            Looked::Ask(keep) => Authorizing::Asking(Box::pin(self.ask(request, keep))),
        }
    }

    /// Asks the server, and keeps its answer under `keep`'s key and generation.
    async fn ask(
        &self,
        request: &Request,
        keep: Option<Box<(CacheKey, u64)>>,
    ) -> Result<Answer, Status> {
        let wire = proto::AuthorizeRequest {
            user: Some(convert::user_info(&request.user)),
            action: Some(convert::wire_action(&request.action)),
            ..Default::default()
        };
        let response = Arc::new(self.authorize_request(wire).await?);
        if let (Some(local), Some(keep)) = (self.local.as_deref(), keep) {
            let (key, generation) = *keep;
            local.insert(&key, Arc::clone(&response), generation);
        }
        Ok(Answer {
            response,
            from_local_cache: false,
        })
    }

    /// The local cache's answer, or what asking the server needs to keep its answer.
    #[inline]
    fn look_up(&self, request: &Request) -> Looked {
        let Some(local) = self.local.as_deref() else {
            return Looked::Ask(None);
        };
        let found = |key: &mut CacheKey| match local.lookup(key, request.as_borrowed()) {
            Local::Hit(response) => Looked::Hit(Answer {
                response,
                from_local_cache: true,
            }),
            Local::Miss(generation) => Looked::Ask(Some(Box::new((key.clone(), generation)))),
            Local::Bypass => Looked::Ask(None),
        };
        // The key is written into this thread's buffer: a fresh one would be 400 bytes to
        // zero on every lookup.
        KEY.with(|key| match key.try_borrow_mut() {
            Ok(mut key) => found(&mut key),
            Err(_) => found(&mut CacheKey::default()),
        })
    }

    /// Authorize with the whole message (content, `min_revision`, conditions mode): always
    /// asked of the server, within the deadline (a `min_revision` the server has not reached
    /// is refused by the server a little before it, naming the revision it is at).
    pub async fn authorize_request(
        &self,
        request: proto::AuthorizeRequest,
    ) -> Result<proto::AuthorizeResponse, Status> {
        let mut authorizer = self.authorizer.clone();
        let request = self.deadline.request(request);
        self.deadline
            .bound(async move { Ok(authorizer.authorize(request).await?.into_inner()) })
            .await
    }

    calls! {
        batch_authorize(authorizer): proto::BatchAuthorizeRequest => proto::BatchAuthorizeResponse;
        get_allowed_subjects(authorizer): proto::GetAllowedSubjectsRequest => proto::GetAllowedSubjectsResponse;
        evaluate_conditions(authorizer): proto::EvaluateConditionsRequest => proto::AuthorizeResponse;
        subject_access_review(reviews): proto::SubjectAccessReviewRequest => proto::SubjectAccessReviewResponse;
        personal_subject_access_review(reviews): proto::PersonalSubjectAccessReviewRequest => proto::SubjectAccessReviewResponse;
        local_subject_access_review(reviews): proto::LocalSubjectAccessReviewRequest => proto::SubjectAccessReviewResponse;
        resource_access_review(reviews): proto::ResourceAccessReviewRequest => proto::ResourceAccessReviewResponse;
        local_resource_access_review(reviews): proto::LocalResourceAccessReviewRequest => proto::ResourceAccessReviewResponse;
        subject_rules_review(reviews): proto::SubjectRulesReviewRequest => proto::SubjectRulesReviewResponse;
        self_subject_rules_review(reviews): proto::SelfSubjectRulesReviewRequest => proto::SubjectRulesReviewResponse;
        self_subject_review(reviews): proto::SelfSubjectReviewRequest => proto::SelfSubjectReviewResponse;
    }
}
