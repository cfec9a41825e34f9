//! The gRPC services `authz.v1.Authorizer` and `authz.v1.AccessReview`.
//!
//! Each handler: authenticate the caller, validate and convert the request (typed errors,
//! field paths), check the caller's privilege, take one snapshot, ask the engine, convert the
//! answer. The engine decides; nothing here does.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::api::convert;
use crate::api::error::{ApiError, Invalid, Result};
use crate::api::identity::{Authenticator, Peer, Privilege};
use crate::api::limits::MAX_BATCH;
use crate::api::state::{ServingState, Snapshot};
use crate::engine::{self, Authorize as _, UserInfo};
use crate::proto;
use crate::proto::access_review_server::{AccessReview, AccessReviewServer};
use crate::proto::authorizer_server::{Authorizer, AuthorizerServer};

/// Both services over one serving state. Cheap to clone.
#[derive(Clone)]
pub struct GrpcApi {
    state: Arc<ServingState>,
    authenticator: Arc<dyn Authenticator>,
}

impl GrpcApi {
    pub fn new(state: Arc<ServingState>, authenticator: Arc<dyn Authenticator>) -> Self {
        Self {
            state,
            authenticator,
        }
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

    fn caller<T>(&self, request: &Request<T>) -> Result<UserInfo> {
        self.authenticator.authenticate(&Peer::of(request))
    }

    /// Privilege checks land with authentication (SPEC §3); until then every caller is
    /// admitted. Handlers already state what they need, so enforcing it changes only this.
    fn admit(&self, caller: &UserInfo, privilege: Privilege<'_>) -> Result<()> {
        tracing::trace!(caller = %caller.name, ?privilege, "admitted (privileges not enforced yet)");
        Ok(())
    }

    /// The snapshot to answer from: the current one, if it is at least `min_revision`.
    fn snapshot(&self, min_revision: u64) -> Result<Arc<Snapshot>> {
        let snapshot = self.state.snapshot().ok_or(ApiError::NotReady)?;
        if snapshot.revision < min_revision {
            // Waiting for the revision (bounded by the deadline) arrives with live reloads.
            return Err(ApiError::RevisionNotReached {
                requested: min_revision,
                current: snapshot.revision,
            });
        }
        Ok(snapshot)
    }

    fn authorize_one(snapshot: &Snapshot, request: &engine::Request) -> proto::AuthorizeResponse {
        let decided = snapshot.engine.decide(request);
        tracing::debug!(
            user = %request.user.name,
            verb = request.action.verb(),
            namespace = request.action.namespace(),
            decision = %decided.response.decision,
            cached = decided.cached,
            revision = snapshot.revision,
            "authorize"
        );
        convert::authorize_response(&decided, snapshot.revision)
    }

    fn resource_review(
        snapshot: &Snapshot,
        action: &engine::Action,
    ) -> proto::ResourceAccessReviewResponse {
        let subjects = snapshot.engine.who_can(action);
        convert::resource_review_response(subjects, action.namespace(), snapshot.revision)
    }

    fn review(
        snapshot: &Snapshot,
        user: UserInfo,
        action: engine::Action,
    ) -> proto::SubjectAccessReviewResponse {
        let request = engine::Request { user, action };
        let decided = snapshot.engine.decide(&request);
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
        request: Request<proto::AuthorizeRequest>,
    ) -> Result<Response<proto::AuthorizeResponse>, Status> {
        let caller = self.caller(&request)?;
        let wire = request.into_inner();
        let min_revision = wire.min_revision;
        let request = convert::authorize_request(wire)?;
        self.admit(&caller, Privilege::SUBJECT_ACCESS_REVIEW)?;
        let snapshot = self.snapshot(min_revision)?;
        Ok(Response::new(Self::authorize_one(&snapshot, &request)))
    }

    async fn batch_authorize(
        &self,
        request: Request<proto::BatchAuthorizeRequest>,
    ) -> Result<Response<proto::BatchAuthorizeResponse>, Status> {
        let caller = self.caller(&request)?;
        let wire = request.into_inner().requests;
        if wire.len() > MAX_BATCH {
            return Err(ApiError::invalid(
                "requests",
                Invalid::TooMany {
                    count: wire.len(),
                    max: MAX_BATCH,
                },
            )
            .into());
        }
        // The whole batch is validated before anything is evaluated, and answered from one
        // snapshot, so its answers are mutually consistent.
        let mut min_revision = 0;
        let mut requests = Vec::with_capacity(wire.len());
        for (i, one) in wire.into_iter().enumerate() {
            min_revision = min_revision.max(one.min_revision);
            let request = convert::authorize_request(one)
                .map_err(|e| e.within(&format!("requests[{i}].")))?;
            requests.push(request);
        }
        self.admit(&caller, Privilege::SUBJECT_ACCESS_REVIEW)?;
        let snapshot = self.snapshot(min_revision)?;
        let responses = requests
            .iter()
            .map(|request| Self::authorize_one(&snapshot, request))
            .collect();
        Ok(Response::new(proto::BatchAuthorizeResponse { responses }))
    }

    async fn get_allowed_subjects(
        &self,
        request: Request<proto::GetAllowedSubjectsRequest>,
    ) -> Result<Response<proto::GetAllowedSubjectsResponse>, Status> {
        let caller = self.caller(&request)?;
        let wire = request.into_inner();
        let action = convert::action(wire.action)?;
        self.admit(&caller, Privilege::RESOURCE_ACCESS_REVIEW)?;
        let snapshot = self.snapshot(wire.min_revision)?;
        let subjects = snapshot.engine.who_can(&action);
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
        let wire = request.into_inner();
        let action = convert::action(wire.action)?;
        let user = convert::review_subject(wire.user, wire.uid, wire.groups, wire.extra)?;
        self.admit(&caller, Privilege::SUBJECT_ACCESS_REVIEW)?;
        let snapshot = self.snapshot(wire.min_revision)?;
        Ok(Response::new(Self::review(&snapshot, user, action)))
    }

    async fn personal_subject_access_review(
        &self,
        request: Request<proto::PersonalSubjectAccessReviewRequest>,
    ) -> Result<Response<proto::SubjectAccessReviewResponse>, Status> {
        let caller = self.caller(&request)?;
        let wire = request.into_inner();
        let action = convert::action(wire.action)?;
        self.admit(&caller, Privilege::Authenticated)?;
        let snapshot = self.snapshot(wire.min_revision)?;
        Ok(Response::new(Self::review(&snapshot, caller, action)))
    }

    async fn local_subject_access_review(
        &self,
        request: Request<proto::LocalSubjectAccessReviewRequest>,
    ) -> Result<Response<proto::SubjectAccessReviewResponse>, Status> {
        let caller = self.caller(&request)?;
        let wire = request.into_inner();
        let action = convert::local_action(&wire.namespace, wire.action)?;
        let user = convert::review_subject(wire.user, wire.uid, wire.groups, wire.extra)?;
        self.admit(
            &caller,
            Privilege::local_subject_access_review(&wire.namespace),
        )?;
        let snapshot = self.snapshot(wire.min_revision)?;
        Ok(Response::new(Self::review(&snapshot, user, action)))
    }

    async fn resource_access_review(
        &self,
        request: Request<proto::ResourceAccessReviewRequest>,
    ) -> Result<Response<proto::ResourceAccessReviewResponse>, Status> {
        let caller = self.caller(&request)?;
        let wire = request.into_inner();
        let action = convert::action(wire.action)?;
        self.admit(&caller, Privilege::RESOURCE_ACCESS_REVIEW)?;
        let snapshot = self.snapshot(wire.min_revision)?;
        Ok(Response::new(Self::resource_review(&snapshot, &action)))
    }

    async fn local_resource_access_review(
        &self,
        request: Request<proto::LocalResourceAccessReviewRequest>,
    ) -> Result<Response<proto::ResourceAccessReviewResponse>, Status> {
        let caller = self.caller(&request)?;
        let wire = request.into_inner();
        let action = convert::local_action(&wire.namespace, wire.action)?;
        self.admit(
            &caller,
            Privilege::local_resource_access_review(&wire.namespace),
        )?;
        let snapshot = self.snapshot(wire.min_revision)?;
        Ok(Response::new(Self::resource_review(&snapshot, &action)))
    }
}
