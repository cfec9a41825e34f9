//! The gRPC services `authz.v1.Authorizer` and `authz.v1.AccessReview`.
//!
//! Every call takes the same steps, in order: who asks (authentication), by when (the
//! deadline), what (conversion and validation, typed errors naming the field), from which
//! snapshot (`min_revision`), and whether the caller may ask (the privilege, checked against
//! that same snapshot); then the engine answers. [`GrpcApi::serve`] runs them for every review
//! RPC, each of which states only what differs ([`Review`]); the HTTP endpoints serve through
//! the same function. `Authorize` and `BatchAuthorize` take the same steps
//! (`GrpcApi::begin`, `GrpcApi::admitted`) around their zero-copy decoding. The engine
//! decides; nothing here does.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataKey};
use tonic::{Request, Response, Status};

use crate::api::authn::impersonation::Impersonation;
use crate::api::authn::{Authenticator, Peer};
use crate::api::convert;
use crate::api::error::{ApiError, Invalid, Result};
use crate::api::limits::{ContentLimits, MAX_CONDITIONS};
use crate::api::privilege::{Gate, Privilege};
use crate::api::wire::service::authorizer_server::{Authorizer, AuthorizerServer};
use crate::api::wire::{
    Answer, AuthorizeCall, AuthorizeInput, AuthorizeReply, BatchAuthorizeCall, BatchAuthorizeReply,
    BatchDecoded, Decoded,
};
use crate::audit::AuditLog;
use crate::engine::{AllowedSubjects, Authorize as _, Decided};
use crate::proto;
use crate::proto::access_review_server::{AccessReview, AccessReviewServer};
use crate::request;
use crate::request::UserInfo;
use crate::serving::{FencedAllow, ServingState, Snapshot};
use crate::telemetry::metrics::{DecisionApi, DecisionTally};
use crate::telemetry::request::{record_caller, record_decision};

/// Both services over one serving state. Cheap to clone.
#[derive(Clone)]
pub struct GrpcApi {
    state: Arc<ServingState>,
    authenticator: Arc<dyn Authenticator>,
    /// The longest a `min_revision` request waits when its deadline allows more (or it has
    /// none).
    max_revision_wait: Duration,
    /// Where review calls are recorded, when `--audit-log` is on.
    audit: Option<Arc<AuditLog>>,
    /// How much content a request may carry (`--max-content-bytes`).
    content_limits: ContentLimits,
}

/// The first step of every call: who asks, and how long they give the server.
struct Caller {
    /// Who the request is served as: the authenticated caller, or, once admitted, whom it
    /// impersonates.
    user: Arc<UserInfo>,
    /// The time left before the caller's deadline, if it sent one.
    deadline: Option<Duration>,
    /// Whom the caller asks to be served as (`impersonate-*` metadata), until admitted.
    impersonation: Option<Impersonation>,
}

/// One review RPC, stated by what differs between them: what its message converts into, what
/// the caller must be allowed to ask it, and the answer. [`GrpcApi::serve`] takes every other
/// step.
pub trait Review: Send + Sized + 'static {
    /// What the engine is asked, converted and validated from the message.
    type Asked: Send;
    type Reply;

    /// The message, converted (typed errors naming the field path; content bounded by
    /// `limits`), and its `min_revision`.
    fn convert(self, limits: &ContentLimits) -> Result<(Self::Asked, u64)>;

    /// What the caller must be allowed, to ask this.
    fn privilege(asked: &Self::Asked) -> Privilege<'_>;

    /// The answer, from the admitted snapshot; refused only when a rule needs content the
    /// request carries unreadably. Asynchronous because a chain with webhooks asks them.
    fn answer(
        call: Admitted<'_>,
        asked: Self::Asked,
    ) -> impl std::future::Future<Output = Result<Self::Reply>> + Send + '_;
}

/// What a request asks (an action, or a subject's request) with the content it carries, as
/// [`convert`] validates them.
pub type WithContent<T> = (T, Option<request::Content>);

/// A call past every shared step: who asked, and the snapshot that admitted them.
#[derive(Clone, Copy)]
pub struct Admitted<'a> {
    api: &'a GrpcApi,
    caller: &'a UserInfo,
    snapshot: &'a Snapshot,
    /// How an allow this replica may not give while fenced is answered (a request extension;
    /// the HTTP review endpoints ask for no opinion).
    fenced_allow: FencedAllow,
}

impl GrpcApi {
    pub fn new(
        state: Arc<ServingState>,
        authenticator: Arc<dyn Authenticator>,
        max_revision_wait: Duration,
    ) -> Self {
        Self {
            state,
            authenticator,
            max_revision_wait,
            audit: None,
            content_limits: ContentLimits::default(),
        }
    }

    /// Bounds the content requests may carry (`--max-content-bytes`).
    #[must_use]
    pub fn with_content_limits(mut self, limits: ContentLimits) -> Self {
        self.content_limits = limits;
        self
    }

    /// Records every answered review call in `audit`.
    #[must_use]
    pub fn with_audit(mut self, audit: Option<Arc<AuditLog>>) -> Self {
        self.audit = audit;
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
        let mut caller = self.begin(&request)?;
        let fenced_allow = request
            .extensions()
            .get::<FencedAllow>()
            .copied()
            .unwrap_or_default();
        let (asked, min_revision) = request.into_inner().convert(&self.content_limits)?;
        let snapshot = self
            .admitted(&mut caller, R::privilege(&asked), min_revision)
            .await?;
        let call = Admitted {
            api: self,
            caller: &caller.user,
            snapshot: &snapshot,
            fenced_allow,
        };
        R::answer(call, asked).await
    }

    /// Who asks (authenticated), whom it asks to be served as, and by when.
    fn begin<T>(&self, request: &Request<T>) -> Result<Caller> {
        let user = self.authenticator.authenticate(&Peer::of(request))?;
        record_caller(&user.name);
        Ok(Caller {
            user,
            deadline: request_deadline(request),
            impersonation: Impersonation::requested(request.metadata())?,
        })
    }

    /// The snapshot to answer from (see [`Self::snapshot`]), once the caller is admitted by
    /// that same snapshot's policy: a privilege revoked at revision N is refused to every
    /// request answered at N or later. An impersonating caller must first be allowed each
    /// `impersonate` it needs; from then on it is served as the impersonated user, who must
    /// hold the call's privilege itself (as kube-apiserver serves an impersonated request).
    async fn admitted(
        &self,
        caller: &mut Caller,
        privilege: Privilege<'_>,
        min_revision: u64,
    ) -> Result<Arc<Snapshot>> {
        let snapshot = self.snapshot(min_revision, caller.deadline).await?;
        let gate = Gate {
            state: &self.state,
            snapshot: &snapshot,
        };
        if let Some(impersonation) = caller.impersonation.take() {
            for needed in impersonation.needed() {
                gate.admit_action(&caller.user, needed.action, || {
                    format!(
                        "user {:?} cannot impersonate {}",
                        caller.user.name, needed.what
                    )
                })?;
            }
            caller.user = Arc::new(impersonation.into_user());
            record_caller(&caller.user.name);
        }
        gate.admit(&caller.user, privilege)?;
        Ok(snapshot)
    }

    /// The snapshot to answer from: the current one, once it is at least `min_revision`. A
    /// request behind the server waits, bounded by its deadline and `max_revision_wait`.
    async fn snapshot(
        &self,
        min_revision: u64,
        deadline: Option<Duration>,
    ) -> Result<Arc<Snapshot>> {
        if min_revision == 0 {
            return self.state.snapshot().ok_or(ApiError::NotReady);
        }
        // Stop waiting a little before the caller's deadline, so that the refusal (naming the
        // revision reached) arrives instead of the client's own cancellation.
        let wait = deadline.map_or(self.max_revision_wait, |d| {
            d.saturating_sub((d / 5).max(Duration::from_millis(50)))
                .min(self.max_revision_wait)
        });
        match self.state.snapshot_at_least(min_revision, wait).await {
            Ok(snapshot) => Ok(snapshot),
            Err(0) => Err(ApiError::NotReady),
            Err(current) => Err(ApiError::RevisionNotReached {
                requested: min_revision,
                current,
            }),
        }
    }

    /// One request decided from `snapshot` through the cache, with its content; an unreadable
    /// content a rule needs is `INVALID_ARGUMENT` naming the field.
    async fn decide_one(
        &self,
        snapshot: &Snapshot,
        request: &AuthorizeInput<'_, '_>,
    ) -> Result<Decided> {
        let decided = request.decide(&self.state.authorizer(snapshot))?;
        let decided = self
            .state
            .fresh(decided, snapshot.revision, FencedAllow::Refuse)?;
        match self.state.delegation() {
            None => Ok(decided),
            Some(delegation) => Ok(delegation.finish(&request.to_request(), decided).await),
        }
    }

    /// RETURN mode: the conditions `decided` (the answer to `request`, which carries no
    /// content) depends on; `None` when it depends on none, or when a webhook may still
    /// decide what the engine leaves open (conditions cover the engine's chain only). A
    /// fenced replica refuses them, as it refuses allows.
    fn conditions(
        &self,
        snapshot: &Snapshot,
        request: &crate::request::Request,
        decided: &Decided,
    ) -> Result<Option<Vec<crate::engine::conditional::ReturnedRule>>> {
        if self.state.delegation().is_some() {
            return Ok(None);
        }
        let authorizer = self.state.authorizer(snapshot);
        match crate::engine::conditional::returned(
            &decided.response,
            request.as_borrowed(),
            authorizer.diff_config(),
        ) {
            crate::engine::conditional::Returned::Decided(_) => Ok(None),
            crate::engine::conditional::Returned::Conditional(conditions) => {
                self.state.fresh_for_who_can(snapshot.revision)?;
                Ok(Some(conditions))
            }
        }
    }

    /// A decided request counted, recorded in the audit log and traced as `api`.
    fn record_one(
        &self,
        caller: &UserInfo,
        snapshot: &Snapshot,
        request: &AuthorizeInput<'_, '_>,
        answer: &Answer,
        api: DecisionApi,
        tally: &mut DecisionTally,
    ) {
        self.count_one(snapshot, request, answer, api, tally);
        self.audit_one(caller, snapshot, request, answer, api);
    }

    /// A decided request counted (in `tally`, which the caller commits) and traced as `api`.
    fn count_one(
        &self,
        snapshot: &Snapshot,
        request: &AuthorizeInput<'_, '_>,
        answer: &Answer,
        api: DecisionApi,
        tally: &mut DecisionTally,
    ) {
        let response = answer.response();
        tally.add(response.decision);
        tracing::debug!(
            user = request.user_name(),
            verb = request.action().verb(),
            namespace = request.action().namespace(),
            decision = %response.decision,
            cached = answer.cached(),
            revision = snapshot.revision,
            "authorize"
        );
        // A batch's span would only keep its last item's decision: not recorded per item.
        if api == DecisionApi::Authorize {
            record_decision(response.decision, answer.cached(), snapshot.revision);
        }
    }

    /// A decided request recorded in the audit log, when there is one.
    fn audit_one(
        &self,
        caller: &UserInfo,
        snapshot: &Snapshot,
        request: &AuthorizeInput<'_, '_>,
        answer: &Answer,
        api: DecisionApi,
    ) {
        if let Some(audit) = &self.audit {
            let request = request.to_request();
            audit.review(
                api.rpc(),
                caller,
                &request.user,
                &request.action,
                answer.response(),
                snapshot.revision,
            );
        }
    }

    /// Answers a validated batch from one snapshot, in one pass over the items. An item whose
    /// content a rule cannot read refuses the whole batch (as an invalid item does, naming
    /// it); the tally is committed, and the audit log written, only for a batch answered
    /// whole, so nothing of a refused batch is counted or audited.
    async fn answer_batch<'r, 'a: 'r>(
        &self,
        caller: &mut Caller,
        requests: impl ExactSizeIterator<Item = AuthorizeInput<'r, 'a>> + Clone,
        min_revision: u64,
    ) -> Result<BatchAuthorizeReply> {
        let snapshot = self
            .admitted(caller, Privilege::SUBJECT_ACCESS_REVIEW, min_revision)
            .await?;
        let api = DecisionApi::BatchAuthorize;
        let mut tally = DecisionTally::default();
        let mut answers = Vec::with_capacity(requests.len());
        for (i, request) in requests.clone().enumerate() {
            let decided = self
                .decide_one(&snapshot, &request)
                .await
                .map_err(within(i))?;
            let answer = Answer::new(decided, snapshot.revision);
            self.count_one(&snapshot, &request, &answer, api, &mut tally);
            answers.push(answer);
        }
        if self.audit.is_some() {
            for (request, answer) in requests.zip(&answers) {
                self.audit_one(&caller.user, &snapshot, &request, answer, api);
            }
        }
        self.state.metrics().tally(api, &tally);
        Ok(BatchAuthorizeReply::new(answers))
    }
}

/// An error of a batch's item `i`, named within the batch (`requests[3].action`).
fn within(i: usize) -> impl Fn(ApiError) -> ApiError {
    move |e: ApiError| e.within(&format!("requests[{i}]."))
}

impl Admitted<'_> {
    /// Who can do `action` (on the object `content` describes), recorded in the audit log as
    /// asked by `rpc`.
    fn who_can(
        &self,
        rpc: &str,
        action: &request::Action,
        content: Option<&request::Content>,
    ) -> Result<AllowedSubjects> {
        self.api.state.fresh_for_who_can(self.snapshot.revision)?;
        let mut subjects = self.snapshot.engine.who_can_content(action, content)?;
        if let Some(delegation) = self.api.state.delegation() {
            subjects.errors.extend(delegation.listing_errors());
        }
        if let Some(audit) = &self.api.audit {
            audit.who_can(rpc, self.caller, action, &subjects, self.snapshot.revision);
        }
        Ok(subjects)
    }

    /// `request` decided through the cache with its content, counted, recorded and answered
    /// as `api`.
    async fn review(
        &self,
        request: request::Request,
        content: Option<&request::Content>,
        api: DecisionApi,
    ) -> Result<proto::SubjectAccessReviewResponse> {
        let decided = self.decide_review(&request, content).await?;
        Ok(self.reviewed(&request, &decided, api))
    }

    /// `request` (without content) in RETURN mode: the conditions its answer depends on, or
    /// the answer itself when it depends on none (as [`GrpcApi::authorize`] answers). Counted
    /// and recorded as the fold it stands for.
    async fn review_conditional(
        &self,
        request: request::Request,
        api: DecisionApi,
    ) -> Result<proto::SubjectAccessReviewResponse> {
        let decided = self.decide_review(&request, None).await?;
        let conditions = self.api.conditions(self.snapshot, &request, &decided)?;
        let mut reply = self.reviewed(&request, &decided, api);
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

    /// Conditions sent back (KEP-5681's AuthorizationConditionsReview) finished against
    /// `request`'s content, as EvaluateConditions finishes them: the returned rules are
    /// self-contained, so only the evaluating server's FieldPolicies come from the snapshot.
    pub fn finish_conditions(
        &self,
        conditions: &[crate::engine::conditional::ReturnedRule],
        request: request::RequestRef<'_>,
    ) -> Result<Arc<crate::engine::Response>> {
        let authorizer = self.api.state.authorizer(self.snapshot);
        let response =
            crate::engine::conditional::evaluate(conditions, request, authorizer.diff_config())?;
        let decided = self.api.state.fresh(
            Decided {
                response,
                cached: false,
            },
            self.snapshot.revision,
            self.fenced_allow,
        )?;
        Ok(decided.response)
    }

    /// `request` decided through the cache with its content, then by the webhooks after the
    /// engine.
    async fn decide_review(
        &self,
        request: &request::Request,
        content: Option<&request::Content>,
    ) -> Result<Decided> {
        let (state, snapshot) = (&self.api.state, self.snapshot);
        let decided = state
            .authorizer(snapshot)
            .decide_content(request.with_content(content))?;
        let decided = state.fresh(decided, snapshot.revision, self.fenced_allow)?;
        Ok(state.delegate(request, decided).await)
    }

    /// A decided review counted, recorded in the audit log and answered as `api`.
    fn reviewed(
        &self,
        request: &request::Request,
        decided: &Decided,
        api: DecisionApi,
    ) -> proto::SubjectAccessReviewResponse {
        let (state, snapshot) = (&self.api.state, self.snapshot);
        state.metrics().decision(api, decided.response.decision);
        record_decision(decided.response.decision, decided.cached, snapshot.revision);
        if let Some(audit) = &self.api.audit {
            audit.review(
                api.rpc(),
                self.caller,
                &request.user,
                &request.action,
                &decided.response,
                snapshot.revision,
            );
        }
        convert::review_response(
            &decided.response,
            request.action.namespace(),
            snapshot.revision,
        )
    }
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
        call: Admitted<'_>,
        (action, content, conditional): Self::Asked,
    ) -> Result<Self::Reply> {
        let subjects = call.who_can("GetAllowedSubjects", &action, content.as_ref())?;
        let mut reply = convert::allowed_subjects_response(subjects, call.snapshot.revision);
        // Conditions cover the engine's chain only: with a webhook, none are returned.
        if conditional && call.api.state.delegation().is_none() {
            let listed =
                crate::engine::conditional::conditional_subjects(&call.snapshot.engine, &action);
            convert::add_conditional_subjects(&mut reply, listed);
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
        call: Admitted<'_>,
        (request, content, conditional): Self::Asked,
    ) -> Result<Self::Reply> {
        let api = DecisionApi::SubjectAccessReview;
        if conditional {
            return call.review_conditional(request, api).await;
        }
        call.review(request, content.as_ref(), api).await
    }
}

/// The caller's own access: the subject is the caller.
impl Review for proto::PersonalSubjectAccessReviewRequest {
    type Asked = WithContent<request::Action>;
    type Reply = proto::SubjectAccessReviewResponse;

    fn convert(self, limits: &ContentLimits) -> Result<(Self::Asked, u64)> {
        let asked = convert::action(self.action, self.content, limits)?;
        Ok((asked, self.min_revision))
    }

    fn privilege(_: &Self::Asked) -> Privilege<'_> {
        Privilege::Authenticated
    }

    async fn answer(call: Admitted<'_>, (action, content): Self::Asked) -> Result<Self::Reply> {
        let user = call.caller.clone();
        let request = request::Request { user, action };
        let api = DecisionApi::PersonalSubjectAccessReview;
        call.review(request, content.as_ref(), api).await
    }
}

/// A review within one namespace, which the action must agree with (`convert::local_action`),
/// so the namespace the privilege names is the review's.
impl Review for proto::LocalSubjectAccessReviewRequest {
    type Asked = WithContent<request::Request>;
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

    async fn answer(call: Admitted<'_>, (request, content): Self::Asked) -> Result<Self::Reply> {
        let api = DecisionApi::LocalSubjectAccessReview;
        call.review(request, content.as_ref(), api).await
    }
}

impl Review for proto::ResourceAccessReviewRequest {
    type Asked = WithContent<request::Action>;
    type Reply = proto::ResourceAccessReviewResponse;

    fn convert(self, limits: &ContentLimits) -> Result<(Self::Asked, u64)> {
        let asked = convert::action(self.action, self.content, limits)?;
        Ok((asked, self.min_revision))
    }

    fn privilege(_: &Self::Asked) -> Privilege<'_> {
        Privilege::RESOURCE_ACCESS_REVIEW
    }

    async fn answer(call: Admitted<'_>, (action, content): Self::Asked) -> Result<Self::Reply> {
        let subjects = call.who_can("ResourceAccessReview", &action, content.as_ref())?;
        Ok(convert::resource_review_response(
            subjects,
            action.namespace(),
            call.snapshot.revision,
        ))
    }
}

impl Review for proto::LocalResourceAccessReviewRequest {
    type Asked = WithContent<request::Action>;
    type Reply = proto::ResourceAccessReviewResponse;

    fn convert(self, limits: &ContentLimits) -> Result<(Self::Asked, u64)> {
        let asked = convert::local_action(&self.namespace, self.action, self.content, limits)?;
        Ok((asked, self.min_revision))
    }

    fn privilege((action, _): &Self::Asked) -> Privilege<'_> {
        Privilege::local_resource_access_review(action.namespace())
    }

    async fn answer(call: Admitted<'_>, (action, content): Self::Asked) -> Result<Self::Reply> {
        let subjects = call.who_can("LocalResourceAccessReview", &action, content.as_ref())?;
        Ok(convert::resource_review_response(
            subjects,
            action.namespace(),
            call.snapshot.revision,
        ))
    }
}

/// What a subject may do in a namespace. The rules list allows, so a fenced replica refuses it
/// as it refuses who-can.
fn rules_review(
    call: Admitted<'_>,
    user: &UserInfo,
    namespace: &str,
) -> Result<proto::SubjectRulesReviewResponse> {
    call.api.state.fresh_for_who_can(call.snapshot.revision)?;
    let mut rules = call
        .snapshot
        .engine
        .rules_for(user.as_borrowed(), namespace);
    // A webhook's rules cannot be listed: the answer covers the local authorizers only.
    if let Some(delegation) = call.api.state.delegation() {
        rules.errors.extend(delegation.listing_errors());
    }
    Ok(convert::rules_review_response(
        &rules,
        namespace,
        call.snapshot.revision,
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

    async fn answer(call: Admitted<'_>, (user, namespace): Self::Asked) -> Result<Self::Reply> {
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

    async fn answer(call: Admitted<'_>, namespace: Self::Asked) -> Result<Self::Reply> {
        rules_review(call, call.caller, &namespace)
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

    async fn answer(call: Admitted<'_>, (): Self::Asked) -> Result<Self::Reply> {
        Ok(proto::SelfSubjectReviewResponse {
            user_info: Some(convert::user_info(call.caller)),
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
        let mut caller = self.begin(&request)?;
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
        let snapshot = self
            .admitted(&mut caller, Privilege::SUBJECT_ACCESS_REVIEW, min_revision)
            .await?;
        let decided = self.decide_one(&snapshot, &request).await?;
        let conditional = match (&request, return_conditions) {
            (AuthorizeInput::Owned { request, .. }, true) => {
                self.conditions(&snapshot, request, &decided)?
            }
            _ => None,
        };
        let cached = decided.cached;
        let answer = Answer::new(decided, snapshot.revision);
        let api = DecisionApi::Authorize;
        let mut tally = DecisionTally::default();
        self.record_one(&caller.user, &snapshot, &request, &answer, api, &mut tally);
        self.state.metrics().tally(api, &tally);
        Ok(Response::new(match conditional {
            Some(conditions) => AuthorizeReply::message(convert::conditional_response(
                &conditions,
                snapshot.revision,
                cached,
            )),
            None => AuthorizeReply::new(answer),
        }))
    }

    async fn evaluate_conditions(
        &self,
        request: Request<proto::EvaluateConditionsRequest>,
    ) -> Result<Response<proto::AuthorizeResponse>, Status> {
        let mut caller = self.begin(&request)?;
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
        let snapshot = self
            .admitted(&mut caller, Privilege::SUBJECT_ACCESS_REVIEW, min_revision)
            .await?;
        let authorizer = self.state.authorizer(&snapshot);
        let response = crate::engine::conditional::evaluate(
            &conditions,
            request.with_content(content.as_ref()),
            authorizer.diff_config(),
        )
        .map_err(ApiError::from)
        .map_err(|e| e.within("request."))?;
        let decided = self
            .state
            .fresh(
                Decided {
                    response,
                    cached: false,
                },
                snapshot.revision,
                FencedAllow::Refuse,
            )
            .map_err(ApiError::from)?;
        Ok(Response::new(convert::authorize_response(
            &decided,
            snapshot.revision,
        )))
    }

    async fn batch_authorize(
        &self,
        request: Request<BatchAuthorizeCall>,
    ) -> Result<Response<BatchAuthorizeReply>, Status> {
        let mut caller = self.begin(&request)?;
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
                self.answer_batch(&mut caller, requests, min_revision)
                    .await?
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
                self.answer_batch(&mut caller, requests, min_revision)
                    .await?
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
