//! Admission: the first step of every call, whichever adapter received it. Who asks (an
//! adapter authenticated them), whom they ask to be served as, which snapshot answers
//! (`min_revision`, bounded by the caller's deadline), and whether the policy of that same
//! snapshot allows them the call: a privilege revoked at revision N is refused to every call
//! answered at N or later, and the answer comes from the snapshot that admitted it.

use std::sync::Arc;
use std::time::Duration;

use super::call::Call;
use super::privilege::{Gate, Privilege};
use super::refusal::Refusal;
use super::{FencedAllow, ServingState, Snapshot};
use crate::request::{Action, UserInfo};
use crate::telemetry::request::record_caller;

/// Who asks, as the adapter knows them once authenticated.
#[derive(Clone)]
pub struct Caller {
    /// The authenticated caller.
    pub user: Arc<UserInfo>,
    /// Whom the caller asks to be served as (Kubernetes' impersonation headers), if anyone.
    pub impersonation: Option<Impersonating>,
    /// The time left before the caller's deadline, if it sent one.
    pub deadline: Option<Duration>,
    /// How an allow this replica may not give while fenced is answered.
    pub fenced_allow: FencedAllow,
}

impl Caller {
    /// A caller with no deadline who impersonates no one.
    pub fn new(user: Arc<UserInfo>) -> Self {
        Self {
            user,
            impersonation: None,
            deadline: None,
            fenced_allow: FencedAllow::default(),
        }
    }
}

/// A request to be served as someone else: the `impersonate` permissions that needs, in the
/// order upstream checks them, and the identity served once they hold.
#[derive(Clone)]
pub struct Impersonating {
    pub needed: Vec<Needed>,
    pub user: UserInfo,
}

/// Who a call is served as, and who asked for it.
#[derive(Clone, Debug)]
pub struct Served {
    /// The caller as authenticated.
    pub authenticated: Arc<UserInfo>,
    /// The identity the call is served as: the authenticated caller, or whom it impersonates.
    pub user: Arc<UserInfo>,
}

impl Served {
    /// The impersonated user, when the caller impersonates one.
    pub fn impersonated(&self) -> Option<&UserInfo> {
        (!Arc::ptr_eq(&self.authenticated, &self.user)).then_some(&*self.user)
    }
}

impl Gate<'_> {
    /// An impersonating caller must first be allowed each `impersonate` it needs; from then
    /// on it is served as the impersonated user, who must hold the call's privilege itself
    /// (as kube-apiserver serves an impersonated request).
    fn served_as(
        &self,
        user: &Arc<UserInfo>,
        impersonation: Impersonating,
    ) -> Result<Arc<UserInfo>, Refusal> {
        for needed in impersonation.needed {
            self.admit_action(user, needed.action, || {
                format!("user {:?} cannot impersonate {}", user.name, needed.what)
            })?;
        }
        record_caller(&impersonation.user.name);
        Ok(Arc::new(impersonation.user))
    }
}

/// One `impersonate` permission the caller needs, and how a refusal names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Needed {
    pub action: Action,
    /// `users "alice"`, `userextras/scopes "view"`, …
    pub what: String,
}

impl ServingState {
    /// Admits `caller` to a call needing `privilege`, answered from the snapshot at
    /// `min_revision` or later.
    pub async fn admit(
        &self,
        caller: Caller,
        privilege: Privilege<'_>,
        min_revision: u64,
    ) -> Result<Call<'_>, Refusal> {
        self.admit_all(caller, std::slice::from_ref(&privilege), min_revision)
            .await
    }

    /// [`Self::admit`] for a call needing every one of `privileges`, all checked against the
    /// one snapshot the call is answered from.
    pub async fn admit_all(
        &self,
        caller: Caller,
        privileges: &[Privilege<'_>],
        min_revision: u64,
    ) -> Result<Call<'_>, Refusal> {
        let Caller {
            mut user,
            impersonation,
            deadline,
            fenced_allow,
        } = caller;
        record_caller(&user.name);
        let snapshot = self.snapshot_for(min_revision, deadline).await?;
        let gate = Gate {
            state: self,
            snapshot: &snapshot,
        };
        if let Some(impersonation) = impersonation {
            user = gate.served_as(&user, impersonation)?;
        }
        for privilege in privileges {
            gate.admit(&user, *privilege)?;
        }
        Ok(Call::new(self, user, snapshot, fenced_allow))
    }

    /// Whom `caller` is served as, on the policy in force: itself, or the user it impersonates
    /// once it is allowed every `impersonate` that needs. A call that is not answered from a
    /// snapshot (a policy write, whose guard checks the served user's privileges under the
    /// store's writer lock) takes its identity from here, as every other call does through
    /// [`Self::admit`].
    pub fn identify(&self, caller: Caller) -> Result<Served, Refusal> {
        record_caller(&caller.user.name);
        let Some(impersonation) = caller.impersonation else {
            return Ok(Served {
                user: Arc::clone(&caller.user),
                authenticated: caller.user,
            });
        };
        let snapshot = self.snapshot().ok_or(Refusal::NotReady)?;
        let gate = Gate {
            state: self,
            snapshot: &snapshot,
        };
        Ok(Served {
            user: gate.served_as(&caller.user, impersonation)?,
            authenticated: caller.user,
        })
    }

    /// [`Self::admit`] for a call answered from the snapshot published at `revision` (a later
    /// page of a search pinned to the revision its first page was answered at). The caller
    /// is admitted on the current policy, so a privilege revoked since is refused, and must
    /// hold the privilege on the pinned policy too; a revision no longer retained is
    /// refused, saying so.
    pub async fn admit_pinned(
        &self,
        caller: Caller,
        privilege: Privilege<'_>,
        revision: u64,
    ) -> Result<Call<'_>, Refusal> {
        let current = self.admit(caller, privilege, 0).await?;
        let pinned = self
            .snapshot_at(revision)
            .map_err(|oldest| Refusal::RevisionGone { revision, oldest })?;
        let call = current.pinned_to(pinned);
        call.require(privilege)?;
        Ok(call)
    }

    /// The snapshot to answer from: the current one, once it is at least `min_revision`. A
    /// call behind the server waits, bounded by its deadline and `--max-revision-wait`.
    async fn snapshot_for(
        &self,
        min_revision: u64,
        deadline: Option<Duration>,
    ) -> Result<Arc<Snapshot>, Refusal> {
        if min_revision == 0 {
            return self.snapshot().ok_or(Refusal::NotReady);
        }
        // Stop waiting a little before the caller's deadline, so that the refusal (naming the
        // revision reached) arrives instead of the client's own cancellation.
        let max_wait = self.max_revision_wait;
        let wait = deadline.map_or(max_wait, |d| {
            d.saturating_sub((d / 5).max(Duration::from_millis(50)))
                .min(max_wait)
        });
        match self.snapshot_at_least(min_revision, wait).await {
            Ok(snapshot) => Ok(snapshot),
            Err(0) => Err(Refusal::NotReady),
            Err(current) => Err(Refusal::RevisionNotReached {
                requested: min_revision,
                current,
            }),
        }
    }
}
