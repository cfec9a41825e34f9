//! One admitted call and its verbs. [`ServingState::admit`](super::ServingState::admit) gives
//! a [`Call`] holding the snapshot that admitted it; every verb answers from that snapshot
//! alone, so a call can never be admitted on one policy and answered from another.
//!
//! The verbs compose what every adapter used to compose for itself: a decision is asked of the
//! decision cache, held to this replica's freshness (the fence, etcd mode), finished by the
//! chain's webhooks (delegation) and recorded (metrics, the request's span, the audit log).
//! Adapters convert to and from their protocol and call one verb.

use std::borrow::Cow;
use std::sync::Arc;

use super::{FencedAllow, ServingState, Snapshot};
use crate::engine::conditional::{self, ConditionalSubject, Returned, ReturnedRule};
use crate::engine::rules::SubjectRules;
use crate::engine::{AllowedSubjects, Authorize as _, Decided, Response};
use crate::request::{Action, Content, Request, RequestRef, UserInfo};
use crate::telemetry::metrics::{DecisionApi, DecisionTally};
use crate::telemetry::request::record_decision;

use super::refusal::Refusal;

/// A request as an adapter holds it: borrowed as the cache and the engine read it, and whole
/// (built only when needed) for the webhooks and the audit log.
pub trait Question {
    /// The request with the content it carries, borrowed.
    fn borrowed(&self) -> RequestRef<'_>;

    /// The whole request (uid and extra included): borrowed when it is one already.
    fn whole(&self) -> Cow<'_, Request>;
}

/// An owned request and the content it carries.
#[derive(Clone, Copy)]
pub struct WithContent<'a>(pub &'a Request, pub Option<&'a Content>);

impl Question for WithContent<'_> {
    fn borrowed(&self) -> RequestRef<'_> {
        self.0.with_content(self.1)
    }

    fn whole(&self) -> Cow<'_, Request> {
        Cow::Borrowed(self.0)
    }
}

/// A call past admission: who is served, and the snapshot that admitted them.
pub struct Call<'s> {
    state: &'s ServingState,
    /// Who the call is served as: the caller, or whom it impersonates.
    caller: Arc<UserInfo>,
    snapshot: Arc<Snapshot>,
    fenced_allow: FencedAllow,
}

impl<'s> Call<'s> {
    pub(super) fn new(
        state: &'s ServingState,
        caller: Arc<UserInfo>,
        snapshot: Arc<Snapshot>,
        fenced_allow: FencedAllow,
    ) -> Self {
        Self {
            state,
            caller,
            snapshot,
            fenced_allow,
        }
    }

    /// The same call answered from `snapshot` instead (admission's pinned pages).
    pub(super) fn pinned_to(self, snapshot: Arc<Snapshot>) -> Self {
        Self { snapshot, ..self }
    }

    /// The serving state the call was admitted by (the serving core's other verbs).
    pub(super) fn state(&self) -> &'s ServingState {
        self.state
    }

    /// Who the call is served as.
    pub fn caller(&self) -> &UserInfo {
        &self.caller
    }

    /// The revision of the snapshot every answer of this call comes from.
    pub fn revision(&self) -> u64 {
        self.snapshot.revision
    }

    /// The snapshot every answer of this call comes from.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    /// The caller also needs `privilege`, checked against the call's own snapshot.
    pub fn require(&self, privilege: super::Privilege<'_>) -> Result<(), Refusal> {
        super::privilege::Gate {
            state: self.state,
            snapshot: &self.snapshot,
        }
        .admit(&self.caller, privilege)
    }

    /// `question` decided and recorded as answered by `api`: through the decision cache, with
    /// its content, held to this replica's freshness, then finished by the webhooks the chain
    /// reaches undecided. Refused only when a rule needs content the request carries
    /// unreadably, or when a fenced replica may not give the allow.
    pub async fn decide<Q: Question>(
        &self,
        api: DecisionApi,
        question: &Q,
    ) -> Result<Decided, Refusal> {
        let decided = self.decided(question).await?;
        self.record(api, question, &decided);
        Ok(decided)
    }

    /// RETURN mode: `request` (carrying no content) decided as [`Self::decide`] decides it,
    /// with the conditions its answer depends on; `None` when it depends on none, or when a
    /// webhook may still decide what the engine leaves open (conditions cover the engine's
    /// chain only). A fenced replica refuses conditions as it refuses allows. Recorded as the
    /// fold the conditions stand for.
    pub async fn decide_conditional(
        &self,
        api: DecisionApi,
        request: &Request,
    ) -> Result<(Decided, Option<Vec<ReturnedRule>>), Refusal> {
        let question = WithContent(request, None);
        let decided = self.decided(&question).await?;
        let conditions = self.conditions(request, &decided)?;
        self.record(api, &question, &decided);
        Ok((decided, conditions))
    }

    /// A batch decided in one pass, each as [`Self::decide`] decides it, from this call's one
    /// snapshot, so its answers are mutually consistent; each answer is handed to `answer`.
    /// An item refused refuses the whole batch (its index is returned with the refusal), and
    /// the tally is committed and the audit log written only for a batch answered whole: nothing
    /// of a refused batch is counted or audited.
    pub async fn decide_batch<Q: Question, T>(
        &self,
        questions: impl ExactSizeIterator<Item = Q> + Clone,
        answer: impl Fn(Decided) -> T,
    ) -> Result<Vec<T>, (usize, Refusal)> {
        let api = DecisionApi::BatchAuthorize;
        let kept = self.state.audit.get().is_some() || self.state.records.get().is_some();
        let mut tally = DecisionTally::default();
        let mut answers = Vec::with_capacity(questions.len());
        let mut responses = Vec::new();
        for (i, question) in questions.clone().enumerate() {
            let decided = self.decided(&question).await.map_err(|e| (i, e))?;
            tally.add(decided.response.decision);
            self.trace(api, &question, &decided);
            if kept {
                responses.push((Arc::clone(&decided.response), decided.cached));
            }
            answers.push(answer(decided));
        }
        for (question, (response, cached)) in questions.zip(&responses) {
            self.audit(api, &question, response);
            self.keep_record(api, &question, response, *cached);
        }
        self.state.metrics().tally(api, &tally);
        Ok(answers)
    }

    /// Who can do `action` (on the object `content` describes), recorded in the audit log as
    /// asked by `rpc`. A fenced replica refuses it: a list of who is allowed is an allow for
    /// each of them. With webhooks the answer covers the local authorizers only, and says so.
    pub fn who_can(
        &self,
        rpc: &str,
        action: &Action,
        content: Option<&Content>,
    ) -> Result<AllowedSubjects, Refusal> {
        self.state.fresh_for_who_can(self.snapshot.revision)?;
        let mut subjects = self.snapshot.engine.who_can_content(action, content)?;
        if let Some(delegation) = self.state.delegation() {
            subjects.errors.extend(delegation.listing_errors());
        }
        if let Some(audit) = self.state.audit.get() {
            audit.who_can(rpc, &self.caller, action, &subjects, self.snapshot.revision);
        }
        Ok(subjects)
    }

    /// Who-can in RETURN mode: the subjects whose answer to `action` is conditional, with
    /// their conditions; `None` with webhooks (conditions cover the engine's chain only).
    pub fn conditional_subjects(&self, action: &Action) -> Option<Vec<ConditionalSubject>> {
        if self.state.delegation().is_some() {
            return None;
        }
        Some(conditional::conditional_subjects(
            &self.snapshot.engine,
            action,
        ))
    }

    /// What `user` may do in `namespace`. The rules list allows, so a fenced replica refuses
    /// them as it refuses who-can; a webhook's rules cannot be listed, and the answer says so.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Result<SubjectRules, Refusal> {
        self.state.fresh_for_who_can(self.snapshot.revision)?;
        let mut rules = self
            .snapshot
            .engine
            .rules_for(user.as_borrowed(), namespace);
        if let Some(delegation) = self.state.delegation() {
            rules.errors.extend(delegation.listing_errors());
        }
        Ok(rules)
    }

    /// Conditions sent back (EvaluateConditions, KEP-5681's AuthorizationConditionsReview)
    /// finished against `request`'s content: the returned rules are self-contained, so only
    /// the evaluating server's FieldPolicies come from the snapshot. Held to this replica's
    /// freshness like any answer.
    pub fn finish_conditions(
        &self,
        conditions: &[ReturnedRule],
        request: RequestRef<'_>,
    ) -> Result<Arc<Response>, Refusal> {
        let response = conditional::evaluate(conditions, request, self.snapshot.engine.diff())?;
        let decided = Decided {
            response,
            cached: false,
            cacheable: false,
        };
        let decided = self
            .state
            .fresh(decided, self.snapshot.revision, self.fenced_allow)?;
        Ok(decided.response)
    }

    /// A decided request counted, traced, and recorded in the audit log and the decision
    /// records as answered by `api`.
    pub fn record<Q: Question>(&self, api: DecisionApi, question: &Q, decided: &Decided) {
        let response = &decided.response;
        self.state.metrics().decision(api, response.decision);
        self.trace(api, question, decided);
        record_decision(response.decision, decided.cached, self.snapshot.revision);
        self.audit(api, question, response);
        self.keep_record(api, question, response, decided.cached);
    }

    /// The decision's record, when decisions are recorded (`--decision-records`): every
    /// decision, Envoy's checks included. Never waits: see [`crate::records::decision`].
    fn keep_record<Q: Question>(
        &self,
        api: DecisionApi,
        question: &Q,
        response: &Arc<Response>,
        cached: bool,
    ) {
        if let Some(records) = self.state.records.get() {
            records.record(
                api.rpc(),
                &self.caller,
                question.borrowed(),
                response,
                self.snapshot.revision,
                cached,
            );
        }
    }

    /// Cache, fence, delegation: the decision itself.
    async fn decided<Q: Question>(&self, question: &Q) -> Result<Decided, Refusal> {
        let state = self.state;
        let decided = state
            .authorizer(&self.snapshot)
            .decide_content(question.borrowed())?;
        let decided = state.fresh(decided, self.snapshot.revision, self.fenced_allow)?;
        match state.delegation() {
            None => Ok(decided),
            Some(delegation) => Ok(delegation.finish(&question.whole(), decided).await),
        }
    }

    /// The conditions a content-free answer depends on (see [`Self::decide_conditional`]).
    fn conditions(
        &self,
        request: &Request,
        decided: &Decided,
    ) -> Result<Option<Vec<ReturnedRule>>, Refusal> {
        if self.state.delegation().is_some() {
            return Ok(None);
        }
        let diff = self.snapshot.engine.diff();
        match conditional::returned(&decided.response, request.as_borrowed(), diff) {
            Returned::Decided(_) => Ok(None),
            Returned::Conditional(conditions) => {
                self.state.fresh_for_who_can(self.snapshot.revision)?;
                Ok(Some(conditions))
            }
        }
    }

    /// The decision as a debug event. The request is borrowed again only when the event is
    /// wanted: on the plain path that is never, and building a view's borrowed form per
    /// decision is measurable there (`scripts/profile.sh`).
    fn trace<Q: Question>(&self, api: DecisionApi, question: &Q, decided: &Decided) {
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        let request = question.borrowed();
        tracing::debug!(
            rpc = api.rpc(),
            user = request.user.name,
            verb = request.action.verb(),
            namespace = request.action.namespace(),
            decision = %decided.response.decision,
            cached = decided.cached,
            revision = self.snapshot.revision,
            "decision"
        );
    }

    /// The decision in the audit log, when there is one. Envoy's checks are not audited: the
    /// log records review calls and policy writes.
    fn audit<Q: Question>(&self, api: DecisionApi, question: &Q, response: &Response) {
        let Some(audit) = self.state.audit.get() else {
            return;
        };
        if api == DecisionApi::EnvoyCheck {
            return;
        }
        let request = question.whole();
        audit.review(
            api.rpc(),
            &self.caller,
            &request.user,
            &request.action,
            response,
            self.snapshot.revision,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheConfig;
    use crate::engine::{Decision, EngineConfig};
    use crate::policy::impact::Impact;
    use crate::policy::load::{load_sources, LoadOptions};
    use crate::request::{ResourceAttributes, UserInfo};
    use crate::serving::{Caller, Privilege, Refusal};
    use crate::store::{ChangeCause, Publisher};

    /// `envoy` may ask reviews and `alice` may read pods, while `granted`.
    fn policy(granted: bool) -> crate::policy::model::PolicySet {
        let bindings = if granted {
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: envoy}\nsubjects: [{kind: User, name: envoy}]\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reviewer}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: alice}\nsubjects: [{kind: User, name: alice}]\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-reader}\n"
        } else {
            ""
        };
        let text = format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: reviewer}}\nrules: [{{apiGroups: [authorization.k8s.io], resources: [subjectaccessreviews], verbs: [create]}}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: pod-reader}}\nrules: [{{apiGroups: [\"\"], resources: [pods], verbs: [get]}}]\n{bindings}"
        );
        load_sources(&[("p.yaml".into(), text)], &LoadOptions::default()).unwrap()
    }

    fn user(name: &str) -> Arc<UserInfo> {
        Arc::new(UserInfo {
            name: name.into(),
            ..UserInfo::default()
        })
    }

    /// A call answers from the snapshot that admitted it, even when the caller's own
    /// privilege is revoked between admission and answer (what Envoy's `Check` once got
    /// wrong by loading a second snapshot): the answer is the admitted policy's, at its
    /// revision, and the next call is refused on the new policy.
    #[tokio::test]
    async fn a_call_answers_from_the_snapshot_that_admitted_it() {
        let state = ServingState::new(EngineConfig::default(), CacheConfig::default());
        state.publish(
            &policy(true),
            1,
            &Impact::everything(),
            ChangeCause::Reload,
            None,
        );
        let call = state
            .admit(
                Caller::new(user("envoy")),
                Privilege::SUBJECT_ACCESS_REVIEW,
                0,
            )
            .await
            .unwrap();
        // Revoked between admission and answer.
        state.publish(
            &policy(false),
            2,
            &Impact::everything(),
            ChangeCause::Apply,
            None,
        );
        let request = Request {
            user: UserInfo::clone(&user("alice")),
            action: Action::Resource(ResourceAttributes {
                verb: "get".into(),
                resource: "pods".into(),
                ..Default::default()
            }),
        };
        let decided = call
            .decide(DecisionApi::EnvoyCheck, &WithContent(&request, None))
            .await
            .unwrap();
        assert_eq!(call.revision(), 1);
        assert_eq!(decided.response.decision, Decision::Allow);
        assert!(call.require(Privilege::SUBJECT_ACCESS_REVIEW).is_ok());
        // The next call is admitted (or not) on the new policy.
        let refused = state
            .admit(
                Caller::new(user("envoy")),
                Privilege::SUBJECT_ACCESS_REVIEW,
                0,
            )
            .await
            .err();
        assert!(
            matches!(refused, Some(Refusal::PermissionDenied(_))),
            "{refused:?}"
        );
    }
}
