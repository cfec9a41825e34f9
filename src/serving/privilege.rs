//! What a caller must be allowed to call each RPC (docs/security.md §2).
//!
//! [`Privilege`] states what an RPC needs; [`Gate`] checks it through the policy itself.
//! Admission ([`super::admission`]) asks the gate for every call, whichever adapter received
//! it, so the same policy decides who may ask. Who the caller is comes first, from the
//! adapters' authentication.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use super::refusal::Refusal;
use super::{ServingState, Snapshot};
use crate::engine::{Authorize as _, Engine};
use crate::request::{Action, NonResourceAttributes, Request, ResourceAttributes, UserInfo};
use crate::store::ObjectKind;

pub const AUTHORIZATION_GROUP: &str = "authorization.k8s.io";
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// What the caller of an RPC must be allowed to do (the "who may call it" column), as one
/// request to the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Privilege<'a> {
    /// `verb` on `resource` in `group`, in `namespace` ("" = cluster scope), on the object
    /// `name` ("" = any).
    Resource {
        verb: &'static str,
        group: &'static str,
        resource: &'static str,
        namespace: &'a str,
        name: &'a str,
    },
    /// `verb` on a non-resource URL.
    NonResource {
        verb: &'static str,
        path: &'static str,
    },
    /// Any authenticated caller (PersonalSubjectAccessReview).
    Authenticated,
}

impl<'a> Privilege<'a> {
    const fn create_review(resource: &'static str, namespace: &'a str) -> Self {
        Privilege::Resource {
            verb: "create",
            group: AUTHORIZATION_GROUP,
            resource,
            namespace,
            name: "",
        }
    }

    /// SubjectAccessReview, and Authorize/BatchAuthorize ("same as the cluster-wide reviews").
    pub const SUBJECT_ACCESS_REVIEW: Privilege<'static> =
        Privilege::create_review("subjectaccessreviews", "");
    /// ResourceAccessReview and GetAllowedSubjects.
    pub const RESOURCE_ACCESS_REVIEW: Privilege<'static> =
        Privilege::create_review("resourceaccessreviews", "");
    /// WatchInvalidations: a caller's cache learns which answers each change invalidates,
    /// which says whose access changed: `watch` on `decisioninvalidations` (API group
    /// `authzd.io`), cluster-wide.
    pub const WATCH_INVALIDATIONS: Privilege<'static> = Privilege::Resource {
        verb: "watch",
        group: "authzd.io",
        resource: "decisioninvalidations",
        namespace: "",
        name: "",
    };
    /// PolicyAdmin Status: revision, last load error and cache counters are operational data,
    /// guarded like kube-apiserver's `/metrics`: `get` on the non-resource URL `/status`.
    pub const STATUS: Privilege<'static> = Privilege::NonResource {
        verb: "get",
        path: "/status",
    };

    /// `GET /metrics` once authentication is configured: what kube-apiserver asks of a scraper
    /// of its own `/metrics`, `get` on the non-resource URL `/metrics`.
    pub const METRICS: Privilege<'static> = Privilege::NonResource {
        verb: "get",
        path: "/metrics",
    };

    /// `==`, quicker for the usual case: the `'static` parts come from the constants above, so
    /// two equal privileges nearly always share their strings' addresses, and a comparison
    /// by address skips a `memcmp` per string (the memo below does this on every Authorize).
    fn same_as(self, other: Privilege<'_>) -> bool {
        fn same(a: &str, b: &str) -> bool {
            std::ptr::eq(a, b) || a == b
        }
        match (self, other) {
            (
                Privilege::Resource {
                    verb,
                    group,
                    resource,
                    namespace,
                    name,
                },
                Privilege::Resource {
                    verb: other_verb,
                    group: other_group,
                    resource: other_resource,
                    namespace: other_namespace,
                    name: other_name,
                },
            ) => {
                same(verb, other_verb)
                    && same(group, other_group)
                    && same(resource, other_resource)
                    && same(namespace, other_namespace)
                    && same(name, other_name)
            }
            (
                Privilege::NonResource { verb, path },
                Privilege::NonResource {
                    verb: other_verb,
                    path: other_path,
                },
            ) => same(verb, other_verb) && same(path, other_path),
            (Privilege::Authenticated, Privilege::Authenticated) => true,
            _ => false,
        }
    }

    pub fn local_subject_access_review(namespace: &'a str) -> Self {
        Privilege::create_review("localsubjectaccessreviews", namespace)
    }

    pub fn local_resource_access_review(namespace: &'a str) -> Self {
        Privilege::create_review("localresourceaccessreviews", namespace)
    }

    /// `verb` on policy objects of `kind`, as Kubernetes guards its RBAC API (API group
    /// `rbac.authorization.k8s.io`; `authzd.io` for FieldPolicies).
    pub fn object(verb: &'static str, kind: ObjectKind, namespace: &'a str, name: &'a str) -> Self {
        Privilege::Resource {
            verb,
            group: kind.api_group(),
            resource: kind.plural(),
            namespace: if kind.is_namespaced() { namespace } else { "" },
            name,
        }
    }

    /// The request the policy is asked; `None` when any authenticated caller qualifies.
    pub fn action(&self) -> Option<Action> {
        match *self {
            Privilege::Resource {
                verb,
                group,
                resource,
                namespace,
                name,
            } => Some(Action::Resource(ResourceAttributes {
                namespace: namespace.to_string(),
                verb: verb.to_string(),
                group: group.to_string(),
                version: "*".to_string(),
                resource: resource.to_string(),
                subresource: String::new(),
                name: name.to_string(),
            })),
            Privilege::NonResource { verb, path } => {
                Some(Action::NonResource(NonResourceAttributes {
                    path: path.to_string(),
                    verb: verb.to_string(),
                }))
            }
            Privilege::Authenticated => None,
        }
    }

    /// Whether `engine` allows `caller` this privilege, uncached (for checks made under the
    /// store's writer lock, against the policy the write changes).
    pub fn held_by(&self, engine: &Engine, caller: &UserInfo) -> bool {
        self.action().is_none_or(|action| {
            engine
                .authorize(&Request {
                    user: caller.clone(),
                    action,
                })
                .allowed()
        })
    }

    /// What the refusal says: `user "alice" cannot create
    /// subjectaccessreviews.authorization.k8s.io at cluster scope`.
    pub fn refusal(&self, caller: &UserInfo) -> String {
        match *self {
            Privilege::Resource {
                verb,
                group,
                resource,
                namespace,
                name,
            } => {
                let object = if name.is_empty() {
                    String::new()
                } else {
                    format!(" {name:?}")
                };
                let scope = if namespace.is_empty() {
                    "at cluster scope".to_string()
                } else {
                    format!("in namespace {namespace:?}")
                };
                format!(
                    "user {:?} cannot {verb} {resource}.{group}{object} {scope}",
                    caller.name
                )
            }
            Privilege::NonResource { verb, path } => {
                format!("user {:?} cannot {verb} path {path:?}", caller.name)
            }
            Privilege::Authenticated => format!("user {:?} is not authenticated", caller.name),
        }
    }
}

/// The privilege check every admission makes: is `caller` allowed
/// a [`Privilege`] by the policy of `snapshot` — the same chain, super-users included, that
/// answers the request itself, so the privilege is granted and revoked like any permission.
///
/// Privilege checks are decisions, so they are cached, in the serving state's privilege cache:
/// invalidated by every policy change exactly as the decision cache is (a revocation takes
/// effect on the next call), but kept apart from it so that the decision cache's entries and
/// counters describe only the decisions callers asked for.
pub struct Gate<'a> {
    pub state: &'a ServingState,
    /// The snapshot the request is answered from: the privilege is checked against the same
    /// policy.
    pub snapshot: &'a Arc<Snapshot>,
}

impl Gate<'_> {
    /// `Ok` when allowed; `PERMISSION_DENIED` saying what was needed otherwise.
    pub fn admit(&self, caller: &Arc<UserInfo>, privilege: Privilege<'_>) -> Result<(), Refusal> {
        // The memo first: building the action allocates each of its strings.
        if admitted_before(self.snapshot, caller, privilege) {
            return Ok(());
        }
        let Some(action) = privilege.action() else {
            return Ok(());
        };
        if self.allows(caller, action) {
            remember_admitted(self.snapshot, Arc::clone(caller), privilege);
            Ok(())
        } else {
            tracing::debug!(caller = %caller.name, ?privilege, "privilege refused");
            Err(Refusal::PermissionDenied(privilege.refusal(caller)))
        }
    }
}

impl Gate<'_> {
    /// Whether `caller` may do `action`, a permission with parts only the request names (such
    /// as impersonating a given user); `PERMISSION_DENIED` with `refusal` otherwise. Decided
    /// and cached like every privilege check.
    pub fn admit_action(
        &self,
        caller: &Arc<UserInfo>,
        action: Action,
        refusal: impl FnOnce() -> String,
    ) -> Result<(), Refusal> {
        if self.allows(caller, action) {
            Ok(())
        } else {
            Err(Refusal::PermissionDenied(refusal()))
        }
    }

    /// Whether the snapshot's policy allows `caller` to do `action`, through the privilege
    /// cache.
    fn allows(&self, caller: &UserInfo, action: Action) -> bool {
        let request = Request {
            user: caller.clone(),
            action,
        };
        self.state
            .privilege_authorizer(self.snapshot)
            .decide(request.as_borrowed())
            .response
            .allowed()
    }
}

/// A privilege granted to a caller by one snapshot's policy.
///
/// Every Authorize is also a privilege check for its caller, almost always the same caller
/// (a proxy's identity) asking for the same privilege. The answer is a function of the policy
/// and the request alone, so for the same snapshot it cannot change: each worker thread keeps
/// the last few grants and answers a repeat by comparing values instead of building, hashing and
/// looking up a second request. A policy change publishes a new snapshot, so a revoked privilege
/// is never answered from here (the snapshot no longer matches); the `Weak` keeps the old
/// snapshot's allocation from being reused for a new one without keeping its index alive.
/// Refusals are not remembered: they take the full path and are explained.
struct AdmittedPrivilege {
    snapshot: Weak<Snapshot>,
    /// Callers are shared identities (the authenticators hand them out as `Arc`s), so a repeat is usually the very
    /// same `Arc`, told by its address before its value is compared.
    caller: Arc<UserInfo>,
    privilege: Privilege<'static>,
}

/// Grants remembered per worker thread; a handful covers the callers and RPCs of a busy proxy.
const ADMITTED_MEMO: usize = 4;

thread_local! {
    /// The last [`ADMITTED_MEMO`] grants, newest last.
    static ADMITTED: RefCell<Vec<AdmittedPrivilege>> = const { RefCell::new(Vec::new()) };
}

/// The privilege with its borrowed parts, if it has none (every cluster-wide privilege):
/// only those are remembered, so an entry owns nothing borrowed from a request.
fn static_privilege(privilege: Privilege<'_>) -> Option<Privilege<'static>> {
    match privilege {
        Privilege::Resource {
            verb,
            group,
            resource,
            namespace: "",
            name: "",
        } => Some(Privilege::Resource {
            verb,
            group,
            resource,
            namespace: "",
            name: "",
        }),
        Privilege::Resource { .. } => None,
        Privilege::NonResource { verb, path } => Some(Privilege::NonResource { verb, path }),
        Privilege::Authenticated => Some(Privilege::Authenticated),
    }
}

fn admitted_before(
    snapshot: &Arc<Snapshot>,
    caller: &Arc<UserInfo>,
    privilege: Privilege<'_>,
) -> bool {
    let Some(privilege) = static_privilege(privilege) else {
        return false;
    };
    ADMITTED.with(|memo| {
        memo.borrow().iter().any(|entry| {
            std::ptr::eq(entry.snapshot.as_ptr(), Arc::as_ptr(snapshot))
                && entry.privilege.same_as(privilege)
                && (Arc::ptr_eq(&entry.caller, caller) || entry.caller == *caller)
        })
    })
}

fn remember_admitted(snapshot: &Arc<Snapshot>, caller: Arc<UserInfo>, privilege: Privilege<'_>) {
    let Some(privilege) = static_privilege(privilege) else {
        return;
    };
    ADMITTED.with(|memo| {
        let mut entries = memo.borrow_mut();
        // Entries of replaced snapshots can never match again.
        entries.retain(|entry| std::ptr::eq(entry.snapshot.as_ptr(), Arc::as_ptr(snapshot)));
        if entries.len() >= ADMITTED_MEMO {
            entries.remove(0);
        }
        entries.push(AdmittedPrivilege {
            snapshot: Arc::downgrade(snapshot),
            caller,
            privilege,
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(revision: u64) -> Arc<Snapshot> {
        let engine = crate::engine::Engine::new(
            &crate::policy::model::PolicySet::default(),
            crate::engine::EngineConfig::default(),
        );
        Arc::new(Snapshot {
            engine: Arc::new(engine),
            revision,
        })
    }

    fn user(name: &str, groups: &[&str]) -> Arc<UserInfo> {
        Arc::new(UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..UserInfo::default()
        })
    }

    #[test]
    fn same_as_is_equality() {
        // Equal contents at other addresses, as a privilege built elsewhere could have.
        let copy = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
        let privileges = [
            Privilege::SUBJECT_ACCESS_REVIEW,
            Privilege::RESOURCE_ACCESS_REVIEW,
            Privilege::STATUS,
            Privilege::Authenticated,
            Privilege::local_subject_access_review("team-a"),
            Privilege::local_subject_access_review("team-b"),
            Privilege::Resource {
                verb: copy("create"),
                group: copy(AUTHORIZATION_GROUP),
                resource: copy("subjectaccessreviews"),
                namespace: "",
                name: "",
            },
            Privilege::Resource {
                verb: "create",
                group: AUTHORIZATION_GROUP,
                resource: "subjectaccessreviews",
                namespace: "",
                name: "one",
            },
            Privilege::NonResource {
                verb: copy("get"),
                path: copy("/status"),
            },
            Privilege::NonResource {
                verb: "get",
                path: "/statusz",
            },
        ];
        for a in privileges {
            for b in privileges {
                assert_eq!(a.same_as(b), a == b, "{a:?} against {b:?}");
            }
        }
        // The copies are equal to the constants they copy.
        assert!(privileges[0].same_as(privileges[6]));
        assert!(privileges[2].same_as(privileges[8]));
    }

    #[test]
    fn a_remembered_grant_answers_only_the_same_snapshot_caller_and_privilege() {
        let first = snapshot(1);
        let proxy = user("proxy", &["system:authenticated"]);
        let sar = Privilege::SUBJECT_ACCESS_REVIEW;
        assert!(!admitted_before(&first, &proxy, sar));
        remember_admitted(&first, proxy.clone(), sar);
        assert!(admitted_before(&first, &proxy, sar));
        // The same identity in another allocation is the same caller.
        assert!(admitted_before(
            &first,
            &Arc::new(UserInfo::clone(&proxy)),
            sar
        ));
        // Another caller, one group more or less, another privilege: not this grant.
        assert!(!admitted_before(&first, &user("proxy", &[]), sar));
        assert!(!admitted_before(
            &first,
            &user("other", &["system:authenticated"]),
            sar
        ));
        assert!(!admitted_before(
            &first,
            &proxy,
            Privilege::RESOURCE_ACCESS_REVIEW
        ));
        // A new snapshot (a policy change, even at the same revision number) starts over.
        let second = snapshot(1);
        assert!(!admitted_before(&second, &proxy, sar));
        drop(first);
        let third = snapshot(2);
        assert!(!admitted_before(&third, &proxy, sar));
        // Namespaced privileges borrow from the request and are never remembered.
        let local = Privilege::local_subject_access_review("team-a");
        remember_admitted(&third, proxy.clone(), local);
        assert!(!admitted_before(&third, &proxy, local));
    }

    #[test]
    fn the_memo_keeps_the_newest_grants_of_the_current_snapshot_only() {
        let old = snapshot(1);
        let current = snapshot(2);
        let sar = Privilege::SUBJECT_ACCESS_REVIEW;
        remember_admitted(&old, user("a", &[]), sar);
        let callers: Vec<Arc<UserInfo>> = (0..=ADMITTED_MEMO)
            .map(|i| user(&format!("u{i}"), &[]))
            .collect();
        for caller in &callers {
            remember_admitted(&current, caller.clone(), sar);
        }
        ADMITTED.with(|memo| assert_eq!(memo.borrow().len(), ADMITTED_MEMO));
        assert!(!admitted_before(&old, &user("a", &[]), sar));
        assert!(!admitted_before(&current, &callers[0], sar));
        assert!(admitted_before(&current, &callers[ADMITTED_MEMO], sar));
    }

    #[test]
    fn refusals_say_what_was_needed() {
        let alice = UserInfo {
            name: "alice".into(),
            ..UserInfo::default()
        };
        assert_eq!(
            Privilege::SUBJECT_ACCESS_REVIEW.refusal(&alice),
            "user \"alice\" cannot create subjectaccessreviews.authorization.k8s.io at cluster scope"
        );
        assert_eq!(
            Privilege::local_resource_access_review("dev").refusal(&alice),
            "user \"alice\" cannot create localresourceaccessreviews.authorization.k8s.io in namespace \"dev\""
        );
        assert_eq!(
            Privilege::object("get", ObjectKind::ClusterRole, "ignored", "admin").refusal(&alice),
            "user \"alice\" cannot get clusterroles.rbac.authorization.k8s.io \"admin\" at cluster scope"
        );
    }
}
