//! The checks on one caller's policy write, as Kubernetes makes them: `create` (a new object),
//! `update` or `patch` (an existing one) or `delete` on the object (API group
//! `rbac.authorization.k8s.io`, `authzd.io` for FieldPolicies), then privilege-escalation
//! prevention (`engine::escalation`).
//!
//! Apply of an existing object takes `update` or `patch` because `kubectl apply`, client- or
//! server-side, writes an existing object with a PATCH, and Kubernetes authorizes that PATCH
//! with the `patch` verb alone: a subject Kubernetes lets apply a change is let here too. The
//! escalation check is the same whichever verb admitted the write.
//!
//! The store calls the guard under its writer lock (in etcd mode its committer does, on behalf
//! of the waiting writer, which is why the guard is owned), so the snapshot loaded there is the
//! policy the write changes; the checks are evaluated uncached for the same reason.

use std::sync::Arc;

use super::privilege::Privilege;
use super::ServingState;
use crate::engine::escalation::EscalationCheck;
use crate::policy::model::{PolicyObject, PolicySet};
use crate::request::UserInfo;
use crate::store::{find_object, ObjectRef, WriteGuard};

/// What a policy write is, for the RBAC verb it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOp {
    /// Create (new object) or update or patch (existing object), then escalation prevention.
    Apply,
    Delete,
}

impl ServingState {
    /// The guard of `caller`'s `op` on policy objects, for the store to check the write with.
    pub fn write_guard(
        self: &Arc<Self>,
        caller: Arc<UserInfo>,
        op: WriteOp,
    ) -> Arc<dyn WriteGuard> {
        Arc::new(PolicyWriteGuard {
            state: Arc::clone(self),
            caller,
            op,
        })
    }
}

struct PolicyWriteGuard {
    state: Arc<ServingState>,
    caller: Arc<UserInfo>,
    op: WriteOp,
}

impl WriteGuard for PolicyWriteGuard {
    fn check(&self, current: &PolicySet, objects: &[PolicyObject]) -> Result<(), String> {
        let snapshot = self
            .state
            .snapshot()
            .ok_or_else(|| "no policy is loaded yet".to_string())?;
        let refusals: Vec<String> = objects
            .iter()
            .filter_map(|object| {
                let object = ObjectRef::of(object);
                let privilege =
                    |verb| Privilege::object(verb, object.kind, &object.namespace, &object.name);
                let held =
                    |privilege: &Privilege<'_>| privilege.held_by(&snapshot.engine, &self.caller);
                match self.op {
                    WriteOp::Apply if find_object(current, &object).is_some() => {
                        let update = privilege("update");
                        (!held(&update) && !held(&privilege("patch"))).then(|| {
                            format!(
                                "{} (applying an existing object needs update or patch)",
                                update.refusal(&self.caller)
                            )
                        })
                    }
                    op => {
                        let verb = match op {
                            WriteOp::Delete => "delete",
                            WriteOp::Apply => "create",
                        };
                        let privilege = privilege(verb);
                        (!held(&privilege)).then(|| privilege.refusal(&self.caller))
                    }
                }
            })
            .collect();
        if !refusals.is_empty() {
            return Err(refusals.join("\n"));
        }
        let escalation = EscalationCheck {
            engine: &snapshot.engine,
            caller: &self.caller,
        };
        match self.op {
            WriteOp::Apply => escalation.check(current, objects),
            // Deleting a role or binding takes access away, and its deny rules' denials too;
            // deleting a FieldPolicy can open protected paths and deleting a ChangeGate lifts
            // what it refuses.
            WriteOp::Delete => escalation.check_delete(current, objects),
        }
    }
}
