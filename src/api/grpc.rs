//! The gRPC services `authz.v1.Authorizer` and `authz.v1.AccessReview`.
//!
//! Each handler: authenticate the caller, validate and convert the request (typed errors,
//! field paths), check the caller's privilege, take one snapshot, ask the engine, convert the
//! answer. The engine decides; nothing here does.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataKey};
use tonic::{Request, Response, Status};

use crate::api::authn::{Authenticator, Peer};
use crate::api::convert;
use crate::api::error::{ApiError, Invalid, Result};
use crate::api::limits::MAX_BATCH;
use crate::api::privilege::{Gate, Privilege};
use crate::api::wire::service::authorizer_server::{Authorizer, AuthorizerServer};
use crate::api::wire::{
    Answer, AuthorizeCall, AuthorizeInput, AuthorizeReply, BatchAuthorizeCall, BatchAuthorizeReply,
    BatchDecoded, Decoded,
};
use crate::audit::AuditLog;
use crate::engine::Authorize as _;
use crate::proto;
use crate::proto::access_review_server::{AccessReview, AccessReviewServer};
use crate::request;
use crate::request::UserInfo;
use crate::serving::{ServingState, Snapshot};
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
        }
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

    fn caller<T>(&self, request: &Request<T>) -> Result<Arc<UserInfo>> {
        let caller = self.authenticator.authenticate(&Peer::of(request))?;
        record_caller(&caller.name);
        Ok(caller)
    }

    /// The snapshot to answer from (see [`Self::snapshot`]), once the caller is admitted by
    /// that same snapshot's policy: a privilege revoked at revision N is refused to every
    /// request answered at N or later.
    async fn admitted(
        &self,
        caller: &Arc<UserInfo>,
        privilege: Privilege<'_>,
        min_revision: u64,
        deadline: Option<Duration>,
    ) -> Result<Arc<Snapshot>> {
        let snapshot = self.snapshot(min_revision, deadline).await?;
        Gate {
            state: &self.state,
            snapshot: &snapshot,
        }
        .admit(caller, privilege)?;
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

    fn authorize_one(
        &self,
        caller: &UserInfo,
        snapshot: &Snapshot,
        request: &AuthorizeInput<'_, '_>,
        api: DecisionApi,
        tally: &mut DecisionTally,
    ) -> Answer {
        let decided = request.decide(&self.state.authorizer(snapshot));
        tally.add(decided.response.decision);
        if let Some(audit) = &self.audit {
            let request = request.to_request();
            audit.review(
                api.rpc(),
                caller,
                &request.user,
                &request.action,
                &decided.response,
                snapshot.revision,
            );
        }
        tracing::debug!(
            user = request.user_name(),
            verb = request.action().verb(),
            namespace = request.action().namespace(),
            decision = %decided.response.decision,
            cached = decided.cached,
            revision = snapshot.revision,
            "authorize"
        );
        // A batch's span would only keep its last item's decision: not recorded per item.
        if api == DecisionApi::Authorize {
            record_decision(decided.response.decision, decided.cached, snapshot.revision);
        }
        Answer::new(decided, snapshot.revision)
    }

    /// Answers a validated batch from one snapshot.
    async fn answer_batch<'r, 'a: 'r>(
        &self,
        caller: &Arc<UserInfo>,
        requests: impl ExactSizeIterator<Item = AuthorizeInput<'r, 'a>>,
        min_revision: u64,
        deadline: Option<Duration>,
    ) -> Result<Response<BatchAuthorizeReply>, Status> {
        let snapshot = self
            .admitted(
                caller,
                Privilege::SUBJECT_ACCESS_REVIEW,
                min_revision,
                deadline,
            )
            .await?;
        let api = DecisionApi::BatchAuthorize;
        let mut tally = DecisionTally::default();
        let answers = requests
            .map(|request| self.authorize_one(caller, &snapshot, &request, api, &mut tally))
            .collect();
        self.state.metrics().tally(api, &tally);
        Ok(Response::new(BatchAuthorizeReply::new(answers)))
    }

    fn resource_review(
        &self,
        rpc: &str,
        caller: &UserInfo,
        snapshot: &Snapshot,
        action: &request::Action,
    ) -> proto::ResourceAccessReviewResponse {
        let subjects = snapshot.engine.who_can(action);
        if let Some(audit) = &self.audit {
            audit.who_can(rpc, caller, action, &subjects, snapshot.revision);
        }
        convert::resource_review_response(subjects, action.namespace(), snapshot.revision)
    }

    fn review(
        &self,
        caller: &UserInfo,
        snapshot: &Snapshot,
        user: UserInfo,
        action: request::Action,
        api: DecisionApi,
    ) -> proto::SubjectAccessReviewResponse {
        let request = request::Request { user, action };
        let decided = self
            .state
            .authorizer(snapshot)
            .decide(request.as_borrowed());
        self.state
            .metrics()
            .decision(api, decided.response.decision);
        record_decision(decided.response.decision, decided.cached, snapshot.revision);
        if let Some(audit) = &self.audit {
            audit.review(
                api.rpc(),
                caller,
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

#[tonic::async_trait]
impl Authorizer for GrpcApi {
    async fn authorize(
        &self,
        request: Request<AuthorizeCall>,
    ) -> Result<Response<AuthorizeReply>, Status> {
        let caller = self.caller(&request)?;
        let deadline = request_deadline(&request);
        let call = request.into_inner();
        let (view, owned);
        let (request, min_revision) = match call.decode()? {
            Decoded::View(decoded) => {
                view = decoded;
                view.validate()?;
                (AuthorizeInput::Borrowed(&view), view.min_revision)
            }
            Decoded::Owned(wire) => {
                let min_revision = wire.min_revision;
                owned = convert::authorize_request(wire)?;
                (AuthorizeInput::Owned(&owned), min_revision)
            }
        };
        let snapshot = self
            .admitted(
                &caller,
                Privilege::SUBJECT_ACCESS_REVIEW,
                min_revision,
                deadline,
            )
            .await?;
        let api = DecisionApi::Authorize;
        let mut tally = DecisionTally::default();
        let answer = self.authorize_one(&caller, &snapshot, &request, api, &mut tally);
        self.state.metrics().tally(api, &tally);
        Ok(Response::new(AuthorizeReply::new(answer)))
    }

    async fn batch_authorize(
        &self,
        request: Request<BatchAuthorizeCall>,
    ) -> Result<Response<BatchAuthorizeReply>, Status> {
        let caller = self.caller(&request)?;
        let deadline = request_deadline(&request);
        let call = request.into_inner();
        let decoded = call.decode()?;
        // `decode` counts, without decoding, a batch past the limit (`TooMany`); the other
        // shapes are checked too, so the limit holds whatever the decoder does.
        let count = decoded.len();
        if count > MAX_BATCH {
            return Err(ApiError::invalid(
                "requests",
                Invalid::TooMany {
                    count,
                    max: MAX_BATCH,
                },
            )
            .into());
        }
        // The whole batch is validated before anything is evaluated, and answered from one
        // snapshot, so its answers are mutually consistent.
        let within = |i: usize| move |e: ApiError| e.within(&format!("requests[{i}]."));
        let mut min_revision = 0;
        match decoded {
            BatchDecoded::Views(views) => {
                for (i, view) in views.iter().enumerate() {
                    min_revision = min_revision.max(view.min_revision);
                    view.validate().map_err(within(i))?;
                }
                let requests = views.iter().map(AuthorizeInput::Borrowed);
                self.answer_batch(&caller, requests, min_revision, deadline)
                    .await
            }
            // Refused above: `count` is its length.
            BatchDecoded::TooMany(_) => Err(Status::internal("a refused batch was answered")),
            BatchDecoded::Owned(wire) => {
                let mut requests = Vec::with_capacity(count);
                for (i, one) in wire.requests.into_iter().enumerate() {
                    min_revision = min_revision.max(one.min_revision);
                    requests.push(convert::authorize_request(one).map_err(within(i))?);
                }
                let requests = requests.iter().map(AuthorizeInput::Owned);
                self.answer_batch(&caller, requests, min_revision, deadline)
                    .await
            }
        }
    }

    async fn get_allowed_subjects(
        &self,
        request: Request<proto::GetAllowedSubjectsRequest>,
    ) -> Result<Response<proto::GetAllowedSubjectsResponse>, Status> {
        let caller = self.caller(&request)?;
        let deadline = request_deadline(&request);
        let wire = request.into_inner();
        let action = convert::action(wire.action)?;
        let snapshot = self
            .admitted(
                &caller,
                Privilege::RESOURCE_ACCESS_REVIEW,
                wire.min_revision,
                deadline,
            )
            .await?;
        let subjects = snapshot.engine.who_can(&action);
        if let Some(audit) = &self.audit {
            audit.who_can(
                "GetAllowedSubjects",
                &caller,
                &action,
                &subjects,
                snapshot.revision,
            );
        }
        Ok(Response::new(convert::allowed_subjects_response(
            subjects,
            snapshot.revision,
        )))
    }
}

#[tonic::async_trait]
impl AccessReview for GrpcApi {
    async fn subject_access_review(
        &self,
        request: Request<proto::SubjectAccessReviewRequest>,
    ) -> Result<Response<proto::SubjectAccessReviewResponse>, Status> {
        let caller = self.caller(&request)?;
        let deadline = request_deadline(&request);
        let wire = request.into_inner();
        let action = convert::action(wire.action)?;
        let user = convert::review_subject(wire.user, wire.uid, wire.groups, wire.extra)?;
        let snapshot = self
            .admitted(
                &caller,
                Privilege::SUBJECT_ACCESS_REVIEW,
                wire.min_revision,
                deadline,
            )
            .await?;
        Ok(Response::new(self.review(
            &caller,
            &snapshot,
            user,
            action,
            DecisionApi::SubjectAccessReview,
        )))
    }

    async fn personal_subject_access_review(
        &self,
        request: Request<proto::PersonalSubjectAccessReviewRequest>,
    ) -> Result<Response<proto::SubjectAccessReviewResponse>, Status> {
        let caller = self.caller(&request)?;
        let deadline = request_deadline(&request);
        let wire = request.into_inner();
        let action = convert::action(wire.action)?;
        let snapshot = self
            .admitted(
                &caller,
                Privilege::Authenticated,
                wire.min_revision,
                deadline,
            )
            .await?;
        Ok(Response::new(self.review(
            &caller,
            &snapshot,
            UserInfo::clone(&caller),
            action,
            DecisionApi::PersonalSubjectAccessReview,
        )))
    }

    async fn local_subject_access_review(
        &self,
        request: Request<proto::LocalSubjectAccessReviewRequest>,
    ) -> Result<Response<proto::SubjectAccessReviewResponse>, Status> {
        let caller = self.caller(&request)?;
        let deadline = request_deadline(&request);
        let wire = request.into_inner();
        let action = convert::local_action(&wire.namespace, wire.action)?;
        let user = convert::review_subject(wire.user, wire.uid, wire.groups, wire.extra)?;
        let snapshot = self
            .admitted(
                &caller,
                Privilege::local_subject_access_review(&wire.namespace),
                wire.min_revision,
                deadline,
            )
            .await?;
        Ok(Response::new(self.review(
            &caller,
            &snapshot,
            user,
            action,
            DecisionApi::LocalSubjectAccessReview,
        )))
    }

    async fn resource_access_review(
        &self,
        request: Request<proto::ResourceAccessReviewRequest>,
    ) -> Result<Response<proto::ResourceAccessReviewResponse>, Status> {
        let caller = self.caller(&request)?;
        let deadline = request_deadline(&request);
        let wire = request.into_inner();
        let action = convert::action(wire.action)?;
        let snapshot = self
            .admitted(
                &caller,
                Privilege::RESOURCE_ACCESS_REVIEW,
                wire.min_revision,
                deadline,
            )
            .await?;
        Ok(Response::new(self.resource_review(
            "ResourceAccessReview",
            &caller,
            &snapshot,
            &action,
        )))
    }

    async fn local_resource_access_review(
        &self,
        request: Request<proto::LocalResourceAccessReviewRequest>,
    ) -> Result<Response<proto::ResourceAccessReviewResponse>, Status> {
        let caller = self.caller(&request)?;
        let deadline = request_deadline(&request);
        let wire = request.into_inner();
        let action = convert::local_action(&wire.namespace, wire.action)?;
        let snapshot = self
            .admitted(
                &caller,
                Privilege::local_resource_access_review(&wire.namespace),
                wire.min_revision,
                deadline,
            )
            .await?;
        Ok(Response::new(self.resource_review(
            "LocalResourceAccessReview",
            &caller,
            &snapshot,
            &action,
        )))
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
