//! The gRPC services `authz.v1.Authorizer` and `authz.v1.AccessReview`: conversion only.
//!
//! Every call takes the same steps, in order: who asks (authentication), by when (the
//! deadline), what (conversion and validation, typed errors naming the field), then admission
//! by the serving core ([`ServingState::admit`]: the snapshot at `min_revision`, and whether
//! that snapshot's policy allows the caller the call), whose [`Call`] answers. [`GrpcApi::serve`]
//! runs these steps for every review RPC, each of which states only what differs ([`Review`]);
//! the HTTP endpoints serve through the same function. `Authorize` and `BatchAuthorize` take
//! the same steps around their zero-copy decoding. The serving core decides; nothing here does.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataKey};
use tonic::{Request, Response, Status};

use crate::api::authn::{self, Authenticator};
use crate::api::convert;
use crate::api::error::{ApiError, Invalid, Result};
use crate::api::limits::{ContentLimits, MAX_CONDITIONS};
use crate::api::wire::service::authorizer_server::{Authorizer, AuthorizerServer};
use crate::api::wire::{
    Answer, AuthorizeCall, AuthorizeInput, AuthorizeReply, BatchAuthorizeCall, BatchAuthorizeReply,
    BatchDecoded, Decoded,
};
use crate::engine::Decided;
use crate::proto;
use crate::proto::access_review_server::{AccessReview, AccessReviewServer};
use crate::request;
use crate::request::UserInfo;
use crate::serving::{Call, Caller, FencedAllow, Privilege, Question, ServingState, WithContent};
use crate::telemetry::metrics::DecisionApi;

/// Both services over one serving state. Cheap to clone.
#[derive(Clone)]
pub struct GrpcApi {
    state: Arc<ServingState>,
    authenticator: Arc<dyn Authenticator>,
    /// How much content a request may carry (`--max-content-bytes`).
    content_limits: ContentLimits,
    /// Becomes `true` when the server drains: invalidation streams end then.
    draining: tokio::sync::watch::Receiver<bool>,
}

/// One review RPC, stated by what differs between them: what its message converts into, what
/// the caller must be allowed to ask it, and the answer. [`GrpcApi::serve`] takes every other
/// step.
pub trait Review: Send + Sized + 'static {
    /// What the serving core is asked, converted and validated from the message.
    type Asked: Send;
    type Reply;

    /// The message, converted (typed errors naming the field path; content bounded by
    /// `limits`), and its `min_revision`.
    fn convert(self, limits: &ContentLimits) -> Result<(Self::Asked, u64)>;

    /// What the caller must be allowed, to ask this.
    fn privilege(asked: &Self::Asked) -> Privilege<'_>;

    /// The revision this must be answered at, when it continues a call answered earlier (a
    /// later page of an AuthZEN search, pinned to its first page's revision); `None`: the
    /// current snapshot, at `min_revision` or later.
    fn pinned(asked: &Self::Asked) -> Option<u64> {
        let _ = asked;
        None
    }

    /// The answer, from the admitted call's verbs. Asynchronous because a chain with webhooks
    /// asks them.
    fn answer<'c>(
        call: &'c Call<'c>,
        asked: Self::Asked,
    ) -> impl std::future::Future<Output = Result<Self::Reply>> + Send + 'c;
}

/// What a request asks (an action, or a subject's request) with the content it carries, as
/// [`convert`] validates them.
pub type WithOwnContent<T> = (T, Option<request::Content>);

/// An Authorize request as the serving core reads it: borrowed from the wire view or the
/// decoded message, built whole only for the webhooks and the audit log.
impl Question for AuthorizeInput<'_, '_> {
    #[inline]
    fn borrowed(&self) -> request::RequestRef<'_> {
        self.as_request()
    }

    fn whole(&self) -> Cow<'_, request::Request> {
        self.to_request()
    }
}

impl GrpcApi {
    pub fn new(state: Arc<ServingState>, authenticator: Arc<dyn Authenticator>) -> Self {
        Self {
            state,
            authenticator,
            content_limits: ContentLimits::default(),
            draining: tokio::sync::watch::channel(false).1,
        }
    }

    /// Long-lived streams end when `draining` becomes `true` (graceful shutdown).
    #[must_use]
    pub fn with_draining(mut self, draining: tokio::sync::watch::Receiver<bool>) -> Self {
        self.draining = draining;
        self
    }

    /// Bounds the content requests may carry (`--max-content-bytes`).
    #[must_use]
    pub fn with_content_limits(mut self, limits: ContentLimits) -> Self {
        self.content_limits = limits;
        self
    }

    /// The tonic services, with the request size limit applied.
    pub fn services(
        self,
        max_request_bytes: usize,
    ) -> (AuthorizerServer<Self>, AccessReviewServer<Self>) {
        (
            AuthorizerServer::new(self.clone()).max_decoding_message_size(max_request_bytes),
            AccessReviewServer::new(self).max_decoding_message_size(max_request_bytes),
        )
    }

    /// Serves one review call: every step in order (see the module docs), with the RPC's own
    /// conversion, privilege and answer. The gRPC services and the HTTP endpoints both call
    /// this, so both refuse with the same typed errors.
    pub async fn serve<R: Review>(&self, request: Request<R>) -> Result<R::Reply> {
        let caller = self.caller(&request)?;
        let (asked, min_revision) = request.into_inner().convert(&self.content_limits)?;
        let call = match R::pinned(&asked) {
            Some(revision) => {
                self.state
                    .admit_pinned(caller, R::privilege(&asked), revision)
                    .await?
            }
            None => {
                self.state
                    .admit(caller, R::privilege(&asked), min_revision)
                    .await?
            }
        };
        R::answer(&call, asked).await
    }

    /// Who asks (authenticated), whom it asks to be served as, by when, and (a request
    /// extension: the HTTP review endpoints ask for no opinion) how an allow a fenced replica
    /// may not give is answered.
    fn caller<T>(&self, request: &Request<T>) -> Result<Caller> {
        Ok(Caller {
            deadline: request_deadline(request),
            fenced_allow: request
                .extensions()
                .get::<FencedAllow>()
                .copied()
                .unwrap_or_default(),
            ..authn::identify(&*self.authenticator, request)?
        })
    }

    /// A validated batch, answered by the serving core from one snapshot. An item whose
    /// content a rule cannot read refuses the whole batch (as an invalid item does, naming
    /// it).
    async fn answer_batch<'r, 'a: 'r>(
        &self,
        caller: Caller,
        requests: impl ExactSizeIterator<Item = AuthorizeInput<'r, 'a>> + Clone + Send,
        min_revision: u64,
    ) -> Result<BatchAuthorizeReply> {
        let call = self
            .state
            .admit(caller, Privilege::SUBJECT_ACCESS_REVIEW, min_revision)
            .await?;
        let revision = call.revision();
        let answers = call
            .decide_batch(requests, |decided| Answer::new(decided, revision))
            .await
            .map_err(|(i, refusal)| within(i)(refusal.into()))?;
        Ok(BatchAuthorizeReply::new(answers))
    }
}

/// An error of a batch's item `i`, named within the batch (`requests[3].action`).
fn within(i: usize) -> impl Fn(ApiError) -> ApiError {
    move |e: ApiError| e.within(&format!("requests[{i}]."))
}

/// `request` decided with its content, answered as `api`.
async fn review(
    call: &Call<'_>,
    request: request::Request,
    content: Option<&request::Content>,
    api: DecisionApi,
) -> Result<proto::SubjectAccessReviewResponse> {
    let decided = call.decide(api, &WithContent(&request, content)).await?;
    Ok(reviewed(call, &request, &decided))
}

/// `request` (without content) in RETURN mode: the conditions its answer depends on, or the
/// answer itself when it depends on none (as [`GrpcApi::authorize`] answers).
async fn review_conditional(
    call: &Call<'_>,
    request: request::Request,
    api: DecisionApi,
) -> Result<proto::SubjectAccessReviewResponse> {
    let (decided, conditions) = call.decide_conditional(api, &request).await?;
    let mut reply = reviewed(call, &request, &decided);
    if let Some(conditions) = conditions {
        reply.allowed = false;
        reply.denied = false;
        reply.decision = proto::Decision::Conditional as i32;
        reply.reason = convert::conditional_reason(conditions.len());
        reply.evaluation_error.clear();
        reply.conditions = conditions.iter().map(convert::condition).collect();
    }
    Ok(reply)
}

/// A decided review as the wire answers it.
fn reviewed(
    call: &Call<'_>,
    request: &request::Request,
    decided: &Decided,
) -> proto::SubjectAccessReviewResponse {
    convert::review_response(
        &decided.response,
        request.action.namespace(),
        call.revision(),
    )
}

// --- The review RPCs, each stated by what differs ----------------------------------------------

impl Review for proto::GetAllowedSubjectsRequest {
    /// The action, its content, and whether conditional subjects are asked for (RETURN mode
    /// without content).
    type Asked = (request::Action, Option<request::Content>, bool);
    type Reply = proto::GetAllowedSubjectsResponse;

    fn convert(self, limits: &ContentLimits) -> Result<(Self::Asked, u64)> {
        let conditional =
            self.conditions_mode == proto::ConditionsMode::Return as i32 && self.content.is_none();
        let (action, content) = convert::action(self.action, self.content, limits)?;
        Ok(((action, content, conditional), self.min_revision))
    }

    fn privilege(_: &Self::Asked) -> Privilege<'_> {
        Privilege::RESOURCE_ACCESS_REVIEW
    }

    async fn answer(
        call: &Call<'_>,
        (action, content, conditional): Self::Asked,
    ) -> Result<Self::Reply> {
        let subjects = call.who_can("GetAllowedSubjects", &action, content.as_ref())?;
        let mut reply = convert::allowed_subjects_response(subjects, call.revision());
        if conditional {
            if let Some(listed) = call.conditional_subjects(&action) {
                convert::add_conditional_subjects(&mut reply, listed);
            }
        }
        Ok(reply)
    }
}

impl Review for proto::SubjectAccessReviewRequest {
    /// The request, its content, and whether conditions are asked for (RETURN mode without
    /// content).
    type Asked = (request::Request, Option<request::Content>, bool);
    type Reply = proto::SubjectAccessReviewResponse;

    fn convert(self, limits: &ContentLimits) -> Result<(Self::Asked, u64)> {
        let conditional =
            self.conditions_mode == proto::ConditionsMode::Return as i32 && self.content.is_none();
        let (action, content) = convert::action(self.action, self.content, limits)?;
        let user = convert::review_subject(self.user, self.uid, self.groups, self.extra)?;
        Ok((
            (request::Request { user, action }, content, conditional),
            self.min_revision,
        ))
    }

    fn privilege(_: &Self::Asked) -> Privilege<'_> {
        Privilege::SUBJECT_ACCESS_REVIEW
    }

    async fn answer(
        call: &Call<'_>,
        (request, content, conditional): Self::Asked,
    ) -> Result<Self::Reply> {
        let api = DecisionApi::SubjectAccessReview;
        if conditional {
            return review_conditional(call, request, api).await;
        }
        review(call, request, content.as_ref(), api).await
    }
}

/// The caller's own access: the subject is the caller.
impl Review for proto::PersonalSubjectAccessReviewRequest {
    type Asked = WithOwnContent<request::Action>;
    type Reply = proto::SubjectAccessReviewResponse;

    fn convert(self, limits: &ContentLimits) -> Result<(Self::Asked, u64)> {
        let asked = convert::action(self.action, self.content, limits)?;
        Ok((asked, self.min_revision))
    }

    fn privilege(_: &Self::Asked) -> Privilege<'_> {
        Privilege::Authenticated
    }

    async fn answer(call: &Call<'_>, (action, content): Self::Asked) -> Result<Self::Reply> {
        let user = call.caller().clone();
        let request = request::Request { user, action };
        let api = DecisionApi::PersonalSubjectAccessReview;
        review(call, request, content.as_ref(), api).await
    }
}

/// A review within one namespace, which the action must agree with (`convert::local_action`),
/// so the namespace the privilege names is the review's.
impl Review for proto::LocalSubjectAccessReviewRequest {
    type Asked = WithOwnContent<request::Request>;
    type Reply = proto::SubjectAccessReviewResponse;

    fn convert(self, limits: &ContentLimits) -> Result<(Self::Asked, u64)> {
        let (action, content) =
            convert::local_action(&self.namespace, self.action, self.content, limits)?;
        let user = convert::review_subject(self.user, self.uid, self.groups, self.extra)?;
        Ok((
            (request::Request { user, action }, content),
            self.min_revision,
        ))
    }

    fn privilege((request, _): &Self::Asked) -> Privilege<'_> {
        Privilege::local_subject_access_review(request.action.namespace())
    }

    async fn answer(call: &Call<'_>, (request, content): Self::Asked) -> Result<Self::Reply> {
        let api = DecisionApi::LocalSubjectAccessReview;
        review(call, request, content.as_ref(), api).await
    }
}

impl Review for proto::ResourceAccessReviewRequest {
    type Asked = WithOwnContent<request::Action>;
    type Reply = proto::ResourceAccessReviewResponse;

    fn convert(self, limits: &ContentLimits) -> Result<(Self::Asked, u64)> {
        let asked = convert::action(self.action, self.content, limits)?;
        Ok((asked, self.min_revision))
    }

    fn privilege(_: &Self::Asked) -> Privilege<'_> {
        Privilege::RESOURCE_ACCESS_REVIEW
    }

    async fn answer(call: &Call<'_>, (action, content): Self::Asked) -> Result<Self::Reply> {
        let subjects = call.who_can("ResourceAccessReview", &action, content.as_ref())?;
        Ok(convert::resource_review_response(
            subjects,
            action.namespace(),
            call.revision(),
        ))
    }
}

impl Review for proto::LocalResourceAccessReviewRequest {
    type Asked = WithOwnContent<request::Action>;
    type Reply = proto::ResourceAccessReviewResponse;

    fn convert(self, limits: &ContentLimits) -> Result<(Self::Asked, u64)> {
        let asked = convert::local_action(&self.namespace, self.action, self.content, limits)?;
        Ok((asked, self.min_revision))
    }

    fn privilege((action, _): &Self::Asked) -> Privilege<'_> {
        Privilege::local_resource_access_review(action.namespace())
    }

    async fn answer(call: &Call<'_>, (action, content): Self::Asked) -> Result<Self::Reply> {
        let subjects = call.who_can("LocalResourceAccessReview", &action, content.as_ref())?;
        Ok(convert::resource_review_response(
            subjects,
            action.namespace(),
            call.revision(),
        ))
    }
}

/// What a subject may do in a namespace.
fn rules_review(
    call: &Call<'_>,
    user: &UserInfo,
    namespace: &str,
) -> Result<proto::SubjectRulesReviewResponse> {
    let rules = call.rules_for(user, namespace)?;
    Ok(convert::rules_review_response(
        &rules,
        namespace,
        call.revision(),
    ))
}

impl Review for proto::SubjectRulesReviewRequest {
    type Asked = (UserInfo, String);
    type Reply = proto::SubjectRulesReviewResponse;

    fn convert(self, _: &ContentLimits) -> Result<(Self::Asked, u64)> {
        let user = convert::review_subject(self.user, self.uid, self.groups, self.extra)?;
        let namespace = convert::rules_namespace(self.namespace)?;
        Ok(((user, namespace), self.min_revision))
    }

    fn privilege(_: &Self::Asked) -> Privilege<'_> {
        Privilege::SUBJECT_ACCESS_REVIEW
    }

    async fn answer(call: &Call<'_>, (user, namespace): Self::Asked) -> Result<Self::Reply> {
        rules_review(call, &user, &namespace)
    }
}

/// The caller's own rules: the subject is the caller.
impl Review for proto::SelfSubjectRulesReviewRequest {
    type Asked = String;
    type Reply = proto::SubjectRulesReviewResponse;

    fn convert(self, _: &ContentLimits) -> Result<(Self::Asked, u64)> {
        Ok((convert::rules_namespace(self.namespace)?, self.min_revision))
    }

    fn privilege(_: &Self::Asked) -> Privilege<'_> {
        Privilege::Authenticated
    }

    async fn answer(call: &Call<'_>, namespace: Self::Asked) -> Result<Self::Reply> {
        rules_review(call, call.caller(), &namespace)
    }
}

/// Who the caller is, as authenticated (or impersonated).
impl Review for proto::SelfSubjectReviewRequest {
    type Asked = ();
    type Reply = proto::SelfSubjectReviewResponse;

    fn convert(self, _: &ContentLimits) -> Result<(Self::Asked, u64)> {
        Ok(((), 0))
    }

    fn privilege(_: &Self::Asked) -> Privilege<'_> {
        Privilege::Authenticated
    }

    async fn answer(call: &Call<'_>, (): Self::Asked) -> Result<Self::Reply> {
        Ok(proto::SelfSubjectReviewResponse {
            user_info: Some(convert::user_info(call.caller())),
        })
    }
}

// --- The services ------------------------------------------------------------------------------

#[tonic::async_trait]
impl Authorizer for GrpcApi {
    async fn authorize(
        &self,
        request: Request<AuthorizeCall>,
    ) -> Result<Response<AuthorizeReply>, Status> {
        let caller = self.caller(&request)?;
        let call = request.into_inner();
        let (view, owned);
        let mut return_conditions = false;
        let (request, min_revision) = match call.decode()? {
            Decoded::View(decoded) => {
                view = decoded;
                view.validate()?;
                (AuthorizeInput::Borrowed(&view), view.min_revision)
            }
            Decoded::Owned(wire) => {
                let min_revision = wire.min_revision;
                return_conditions = wire.conditions_mode == proto::ConditionsMode::Return as i32
                    && wire.content.is_none();
                owned = convert::authorize_request(wire, &self.content_limits)?;
                let (request, content) = &owned;
                let content = content.as_ref();
                (AuthorizeInput::Owned { request, content }, min_revision)
            }
        };
        let call = self
            .state
            .admit(caller, Privilege::SUBJECT_ACCESS_REVIEW, min_revision)
            .await
            .map_err(ApiError::from)?;
        let api = DecisionApi::Authorize;
        let reply = match (&request, return_conditions) {
            (AuthorizeInput::Owned { request, .. }, true) => {
                match call
                    .decide_conditional(api, request)
                    .await
                    .map_err(ApiError::from)?
                {
                    (decided, Some(conditions)) => AuthorizeReply::message(
                        convert::conditional_response(&conditions, call.revision(), decided.cached),
                    ),
                    (decided, None) => AuthorizeReply::new(Answer::new(decided, call.revision())),
                }
            }
            _ => {
                let decided = call.decide(api, &request).await.map_err(ApiError::from)?;
                AuthorizeReply::new(Answer::new(decided, call.revision()))
            }
        };
        Ok(Response::new(reply))
    }

    async fn evaluate_conditions(
        &self,
        request: Request<proto::EvaluateConditionsRequest>,
    ) -> Result<Response<proto::AuthorizeResponse>, Status> {
        let caller = self.caller(&request)?;
        let call = request.into_inner();
        let Some(wire) = call.request else {
            return Err(ApiError::invalid("request", Invalid::Empty).into());
        };
        if call.conditions.is_empty() {
            return Err(ApiError::invalid("conditions", Invalid::Empty).into());
        }
        if call.conditions.len() > MAX_CONDITIONS {
            return Err(ApiError::invalid(
                "conditions",
                Invalid::TooMany {
                    count: call.conditions.len(),
                    max: MAX_CONDITIONS,
                },
            )
            .into());
        }
        let min_revision = wire.min_revision;
        let (request, content) = convert::authorize_request(wire, &self.content_limits)
            .map_err(|e| e.within("request."))?;
        let mut conditions = Vec::with_capacity(call.conditions.len());
        for (i, wire) in call.conditions.into_iter().enumerate() {
            conditions.push(convert::returned_rule(wire, &format!("conditions[{i}]"))?);
        }
        let call = self
            .state
            .admit(caller, Privilege::SUBJECT_ACCESS_REVIEW, min_revision)
            .await
            .map_err(ApiError::from)?;
        let response = call
            .finish_conditions(&conditions, request.with_content(content.as_ref()))
            .map_err(|refusal| ApiError::from(refusal).within("request."))?;
        let decided = Decided {
            response,
            cached: false,
            cacheable: false,
        };
        Ok(Response::new(convert::authorize_response(
            &decided,
            call.revision(),
        )))
    }

    async fn batch_authorize(
        &self,
        request: Request<BatchAuthorizeCall>,
    ) -> Result<Response<BatchAuthorizeReply>, Status> {
        let caller = self.caller(&request)?;
        let call = request.into_inner();
        // `decode` refuses a batch over the limit, whatever its shape.
        let decoded = call.decode()?;
        // The whole batch is validated before anything is evaluated, and answered from one
        // snapshot, so its answers are mutually consistent.
        let mut min_revision = 0;
        let reply = match decoded {
            BatchDecoded::Views(views) => {
                for (i, view) in views.iter().enumerate() {
                    min_revision = min_revision.max(view.min_revision);
                    view.validate().map_err(within(i))?;
                }
                let requests = views.iter().map(AuthorizeInput::Borrowed);
                self.answer_batch(caller, requests, min_revision).await?
            }
            BatchDecoded::Owned(wire) => {
                let mut requests = Vec::with_capacity(wire.requests.len());
                for (i, one) in wire.requests.into_iter().enumerate() {
                    min_revision = min_revision.max(one.min_revision);
                    let one = convert::authorize_request(one, &self.content_limits);
                    requests.push(one.map_err(within(i))?);
                }
                let requests = requests
                    .iter()
                    .map(|(request, content)| AuthorizeInput::Owned {
                        request,
                        content: content.as_ref(),
                    });
                self.answer_batch(caller, requests, min_revision).await?
            }
        };
        Ok(Response::new(reply))
    }

    async fn get_allowed_subjects(
        &self,
        request: Request<proto::GetAllowedSubjectsRequest>,
    ) -> Result<Response<proto::GetAllowedSubjectsResponse>, Status> {
        Ok(Response::new(self.serve(request).await?))
    }

    type WatchInvalidationsStream = crate::api::invalidations::InvalidationStream;

    async fn watch_invalidations(
        &self,
        request: Request<tonic::Streaming<proto::InvalidationsRequest>>,
    ) -> Result<Response<Self::WatchInvalidationsStream>, Status> {
        let caller = self.caller(&request)?;
        let stream = crate::api::invalidations::watch(
            Arc::clone(&self.state),
            caller,
            request.into_inner(),
            self.draining.clone(),
        )
        .await?;
        Ok(Response::new(stream))
    }
}

#[tonic::async_trait]
impl AccessReview for GrpcApi {
    async fn subject_access_review(
        &self,
        request: Request<proto::SubjectAccessReviewRequest>,
    ) -> Result<Response<proto::SubjectAccessReviewResponse>, Status> {
        Ok(Response::new(self.serve(request).await?))
    }

    async fn personal_subject_access_review(
        &self,
        request: Request<proto::PersonalSubjectAccessReviewRequest>,
    ) -> Result<Response<proto::SubjectAccessReviewResponse>, Status> {
        Ok(Response::new(self.serve(request).await?))
    }

    async fn local_subject_access_review(
        &self,
        request: Request<proto::LocalSubjectAccessReviewRequest>,
    ) -> Result<Response<proto::SubjectAccessReviewResponse>, Status> {
        Ok(Response::new(self.serve(request).await?))
    }

    async fn resource_access_review(
        &self,
        request: Request<proto::ResourceAccessReviewRequest>,
    ) -> Result<Response<proto::ResourceAccessReviewResponse>, Status> {
        Ok(Response::new(self.serve(request).await?))
    }

    async fn local_resource_access_review(
        &self,
        request: Request<proto::LocalResourceAccessReviewRequest>,
    ) -> Result<Response<proto::ResourceAccessReviewResponse>, Status> {
        Ok(Response::new(self.serve(request).await?))
    }

    async fn subject_rules_review(
        &self,
        request: Request<proto::SubjectRulesReviewRequest>,
    ) -> Result<Response<proto::SubjectRulesReviewResponse>, Status> {
        Ok(Response::new(self.serve(request).await?))
    }

    async fn self_subject_review(
        &self,
        request: Request<proto::SelfSubjectReviewRequest>,
    ) -> Result<Response<proto::SelfSubjectReviewResponse>, Status> {
        Ok(Response::new(self.serve(request).await?))
    }

    async fn self_subject_rules_review(
        &self,
        request: Request<proto::SelfSubjectRulesReviewRequest>,
    ) -> Result<Response<proto::SubjectRulesReviewResponse>, Status> {
        Ok(Response::new(self.serve(request).await?))
    }
}

/// The time left before the caller's deadline (gRPC `grpc-timeout`: digits then one of
/// `H M S m u n`), if it sent one.
pub fn request_deadline<T>(request: &Request<T>) -> Option<Duration> {
    // Named once: a `&str` key would be parsed on every request.
    static GRPC_TIMEOUT: LazyLock<MetadataKey<Ascii>> =
        LazyLock::new(|| MetadataKey::from_static("grpc-timeout"));
    let value = request.metadata().get(&*GRPC_TIMEOUT)?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount.saturating_mul(3600)),
        "M" => Duration::from_secs(amount.saturating_mul(60)),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}
