//! The policy store: the single writer that owns policy I/O, revisions and change events.
//!
//! Every change — an admin write, a directory reload, a change another replica made — goes
//! through [`Store`], one at a time (an async mutex is the single-writer lock), and is published
//! through the [`Publisher`] (which compiles the engine, invalidates exactly the affected cache
//! entries and swaps the engine in) before it is acknowledged with its revision.
//!
//! There is one write path, whatever keeps the policy ([`Backend`]: the policy directory,
//! [`dir`], or etcd, [`etcd`]). Writes queue for the store's group committer ([`commit`]),
//! which checks each against the policy at revision V and asks the backend for one commit
//! operation: change these objects if the policy is still at V. The backend's change feed
//! then brings the committed change back into the store ([`Store::apply_changes`],
//! [`Store::replace`]): the directory feeds its own commits and reloads; etcd's watch feeds
//! every replica's writes, this one's included, at etcd's revision. A write returns once its
//! change has come back.

mod commit;
pub mod dir;
mod documents;
mod durable;
mod edit;
pub mod embedded;
pub mod etcd;
pub mod journal;
pub mod lock;
pub mod served;
pub mod watch;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::{Arc, Mutex as StdMutex};

use arc_swap::ArcSwap;
use thiserror::Error;
use tokio::sync::{broadcast, watch as tokio_watch, Mutex};

use crate::policy::delta::{ChangedKind, ChangedObject};
use crate::policy::impact::{
    impact_of_applied_objects, impact_of_change, protected_paths_changed, ClusterRoleReferrers,
    Impact,
};
use crate::policy::load::LoadErrors;
use crate::policy::model::PolicyObject;
use crate::policy::model::{
    Binding, BindingKind, ChangeGate, FieldPolicy, PolicySet, Role, RoleKind,
};
use crate::policy::render;

pub use edit::find_object;
use edit::{apply_change, AppliedChange, SharedObject, SpareCopy};

/// What an apply would do ([`Store::preview`]): nothing of it is written.
#[derive(Debug)]
pub struct Preview {
    /// The revision the write was checked at.
    pub revision: u64,
    /// Every object the write names, changed or not.
    pub applied: Vec<ObjectRef>,
    /// The objects it would change, as the index names them.
    pub changed: Vec<ChangedObject>,
    /// The policy in force at `revision`, and the policy the write would make of it.
    pub before: Arc<PolicySet>,
    pub after: PolicySet,
}

/// The kinds of object the admin API manages: the four RBAC kinds and authzd's FieldPolicy
/// and ChangeGate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    ClusterRole,
    Role,
    ClusterRoleBinding,
    RoleBinding,
    FieldPolicy,
    ChangeGate,
}

impl ObjectKind {
    pub const ALL: [ObjectKind; 6] = [
        ObjectKind::ClusterRole,
        ObjectKind::Role,
        ObjectKind::ClusterRoleBinding,
        ObjectKind::RoleBinding,
        ObjectKind::FieldPolicy,
        ObjectKind::ChangeGate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::ClusterRole => "ClusterRole",
            ObjectKind::Role => "Role",
            ObjectKind::ClusterRoleBinding => "ClusterRoleBinding",
            ObjectKind::RoleBinding => "RoleBinding",
            ObjectKind::FieldPolicy => crate::policy::model::FIELD_POLICY_KIND,
            ObjectKind::ChangeGate => crate::policy::model::CHANGE_GATE_KIND,
        }
    }

    /// The plural resource name, as the kind's API serves it (and etcd keys name it).
    pub fn plural(self) -> &'static str {
        match self {
            ObjectKind::ClusterRole => "clusterroles",
            ObjectKind::Role => "roles",
            ObjectKind::ClusterRoleBinding => "clusterrolebindings",
            ObjectKind::RoleBinding => "rolebindings",
            ObjectKind::FieldPolicy => crate::policy::model::FIELD_POLICY_RESOURCE,
            ObjectKind::ChangeGate => crate::policy::model::CHANGE_GATE_RESOURCE,
        }
    }

    /// The API group whose privileges guard writes of the kind.
    pub fn api_group(self) -> &'static str {
        match self {
            ObjectKind::FieldPolicy | ObjectKind::ChangeGate => {
                crate::policy::model::FIELD_POLICY_GROUP
            }
            _ => "rbac.authorization.k8s.io",
        }
    }

    pub fn is_namespaced(self) -> bool {
        matches!(self, ObjectKind::Role | ObjectKind::RoleBinding)
    }
}

impl FromStr for ObjectKind {
    type Err = String;
    /// Accepts the kind as written (`ClusterRole`) or as kubectl resources (`clusterroles`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        match lower.trim_end_matches('s') {
            "clusterrole" => Ok(ObjectKind::ClusterRole),
            "role" => Ok(ObjectKind::Role),
            "clusterrolebinding" => Ok(ObjectKind::ClusterRoleBinding),
            "rolebinding" => Ok(ObjectKind::RoleBinding),
            _ if lower == "fieldpolicy" || lower == "fieldpolicies" => Ok(ObjectKind::FieldPolicy),
            "changegate" => Ok(ObjectKind::ChangeGate),
            _ => Err(format!(
                "unknown kind `{s}` (expected Role, ClusterRole, RoleBinding, ClusterRoleBinding, FieldPolicy or ChangeGate)"
            )),
        }
    }
}

/// Names one object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub kind: ObjectKind,
    /// Empty for cluster-scoped kinds.
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    pub fn of_role(role: &Role) -> Self {
        ObjectRef {
            kind: match role.kind {
                RoleKind::ClusterRole => ObjectKind::ClusterRole,
                RoleKind::Role => ObjectKind::Role,
            },
            namespace: role.namespace.clone(),
            name: role.name.clone(),
        }
    }

    pub fn of_binding(binding: &Binding) -> Self {
        ObjectRef {
            kind: match binding.kind {
                BindingKind::ClusterRoleBinding => ObjectKind::ClusterRoleBinding,
                BindingKind::RoleBinding => ObjectKind::RoleBinding,
            },
            namespace: binding.namespace.clone(),
            name: binding.name.clone(),
        }
    }

    pub fn of_field_policy(policy: &FieldPolicy) -> Self {
        ObjectRef {
            kind: ObjectKind::FieldPolicy,
            namespace: String::new(),
            name: policy.name.clone(),
        }
    }

    pub fn of_change_gate(gate: &ChangeGate) -> Self {
        ObjectRef {
            kind: ObjectKind::ChangeGate,
            namespace: String::new(),
            name: gate.name.clone(),
        }
    }

    pub fn of(object: &PolicyObject) -> Self {
        match object {
            PolicyObject::Role(r) => Self::of_role(r),
            PolicyObject::Binding(b) => Self::of_binding(b),
            PolicyObject::FieldPolicy(f) => Self::of_field_policy(f),
            PolicyObject::ChangeGate(g) => Self::of_change_gate(g),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} `{}`", self.kind.as_str(), self.name)
        } else {
            write!(
                f,
                "{} `{}/{}`",
                self.kind.as_str(),
                self.namespace,
                self.name
            )
        }
    }
}

/// One object of a policy, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectView<'a> {
    Role(&'a Role),
    Binding(&'a Binding),
    FieldPolicy(&'a FieldPolicy),
    ChangeGate(&'a ChangeGate),
}

impl ObjectView<'_> {
    /// The object as its manifest (a JSON value, as etcd stores it).
    pub fn to_value(&self) -> serde_json::Value {
        match self {
            ObjectView::Role(r) => render::role_to_value(r),
            ObjectView::Binding(b) => render::binding_to_value(b),
            ObjectView::FieldPolicy(f) => render::field_policy_to_value(f),
            ObjectView::ChangeGate(g) => render::change_gate_to_value(g),
        }
    }

    pub fn manifest(&self) -> String {
        render::to_yaml(&self.to_value())
    }

    pub fn source(&self) -> &crate::policy::model::Source {
        match self {
            ObjectView::Role(r) => &r.source,
            ObjectView::Binding(b) => &b.source,
            ObjectView::FieldPolicy(f) => &f.source,
            ObjectView::ChangeGate(g) => &g.source,
        }
    }

    pub fn file(&self) -> &str {
        &self.source().file
    }

    /// The object, owned.
    pub fn to_object(&self) -> PolicyObject {
        match self {
            ObjectView::Role(r) => PolicyObject::Role(Role::clone(r)),
            ObjectView::Binding(b) => PolicyObject::Binding(Binding::clone(b)),
            ObjectView::FieldPolicy(f) => PolicyObject::FieldPolicy(FieldPolicy::clone(f)),
            ObjectView::ChangeGate(g) => PolicyObject::ChangeGate(ChangeGate::clone(g)),
        }
    }
}

impl<'a> From<&'a PolicyObject> for ObjectView<'a> {
    fn from(object: &'a PolicyObject) -> Self {
        match object {
            PolicyObject::Role(r) => ObjectView::Role(r),
            PolicyObject::Binding(b) => ObjectView::Binding(b),
            PolicyObject::FieldPolicy(f) => ObjectView::FieldPolicy(f),
            PolicyObject::ChangeGate(g) => ObjectView::ChangeGate(g),
        }
    }
}

/// Every role, binding, FieldPolicy and ChangeGate of a policy by reference, in canonical
/// order.
pub fn objects(policy: &PolicySet) -> BTreeMap<ObjectRef, ObjectView<'_>> {
    let roles = policy
        .roles
        .iter()
        .map(|r| (ObjectRef::of_role(r), ObjectView::Role(r)));
    let bindings = policy
        .bindings
        .iter()
        .map(|b| (ObjectRef::of_binding(b), ObjectView::Binding(b)));
    let field_policies = policy
        .field_policies
        .iter()
        .map(|f| (ObjectRef::of_field_policy(f), ObjectView::FieldPolicy(f)));
    let gates = policy
        .gates
        .iter()
        .map(|g| (ObjectRef::of_change_gate(g), ObjectView::ChangeGate(g)));
    roles
        .chain(bindings)
        .chain(field_policies)
        .chain(gates)
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One object changed at one revision. `manifest` is the new object, or the last state of a
/// deleted one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeEvent {
    pub kind: EventType,
    pub object: ObjectRef,
    pub manifest: String,
    pub revision: u64,
}

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("{0}")]
    Invalid(LoadErrors),
    #[error("{0} not found")]
    NotFound(ObjectRef),
    #[error("policy writes are disabled: no writable policy directory was given with --policy")]
    ReadOnly,
    /// The whole store is read-only: `--read-only`, a directory this process
    /// cannot write, or the embedded example; the reason says which.
    #[error("the policy store is read-only: {0}")]
    ReadOnlyStore(String),
    #[error("cannot write `{path}`: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("watch from revision {from} is no longer available (the oldest kept change is at revision {oldest}); list again and watch from the current revision")]
    Compacted { from: u64, oldest: u64 },
    #[error("{0}")]
    Forbidden(String),
    /// The shared store cannot be reached, or a write's outcome is unknown (retrying is safe).
    #[error("{0}")]
    Unavailable(String),
    /// Concurrent writers kept changing the policy under this write.
    #[error("{0}")]
    Aborted(String),
    /// The write is larger than one commit may be (etcd's transaction limits): split it.
    #[error("{0}")]
    TooLarge(String),
    /// The write's effect on access breaks a ChangeGate rule (named, with a witness request).
    #[error("{0}")]
    GateRefused(String),
    /// A policy file the write would rewrite is not what the store last loaded (a hand edit,
    /// a half-written file, another process): the message names it and what to do. Nothing
    /// was written.
    #[error("{0}")]
    FileChanged(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Where policy is kept: the one commit operation and the change feed (see the module
/// documentation).
#[tonic::async_trait]
pub trait Backend: Send + Sync {
    /// Makes `commit`'s changes durable if the policy is still at `commit.expected`, and
    /// answers the revision they were committed at. The change comes back into `store`
    /// through the backend's change feed ([`Store::apply_changes`]) — before this returns for
    /// a backend that feeds its own commits, later for one whose feed is a watch.
    async fn commit(&self, store: &Store, commit: Commit<'_>) -> Result<u64, CommitError>;

    /// Reads the whole policy again (the directory watcher, SIGHUP) and feeds a change, if
    /// there is one, into `store`; the revision it was published at. A policy that does not
    /// load is the error, and nothing changes.
    async fn reload(&self, store: &Store) -> Result<Option<u64>, LoadErrors>;

    /// How many objects one commit may change; the group commit keeps a combined commit within
    /// it (one write alone above it is refused as [`CommitError::TooLarge`]).
    fn max_objects(&self) -> usize {
        usize::MAX
    }

    /// Why this backend takes no writes, if it takes none: every write is then refused as
    /// [`StoreError::ReadOnlyStore`] before it is checked or queued. Writable by default.
    fn read_only(&self) -> Option<&str> {
        None
    }
}

/// A backend whose policy only ever changes through its feed, called by whoever drives it
/// (the applier bench, property tests of the applier): it commits nothing and reads nothing
/// again.
pub struct FeedOnly;

#[tonic::async_trait]
impl Backend for FeedOnly {
    async fn commit(&self, _: &Store, _: Commit<'_>) -> Result<u64, CommitError> {
        Err(CommitError::Refused(
            "this store takes changes from its feed only".into(),
        ))
    }

    async fn reload(&self, _: &Store) -> Result<Option<u64>, LoadErrors> {
        Ok(None)
    }
}

/// One commit: what changes, and the policy state it was checked against.
pub struct Commit<'a> {
    /// The revision of the policy every write of the commit was checked against.
    pub expected: u64,
    /// That policy.
    pub policy: &'a Arc<PolicySet>,
    /// Objects created or replaced.
    pub upserts: &'a [PolicyObject],
    /// Objects removed.
    pub deletes: &'a [ObjectRef],
    /// What the writes were, for what the publisher counts.
    pub cause: ChangeCause,
}

/// Why a commit did not happen.
#[derive(Debug, Error)]
pub enum CommitError {
    /// The policy moved on (to at least this revision) since the write was validated.
    #[error("the policy changed (revision {0}) since the write was validated")]
    Conflict(u64),
    /// The store cannot be reached, or did not confirm the commit: its outcome is unknown and
    /// retrying is safe.
    #[error("{0}")]
    Unavailable(String),
    /// The store refused the request itself (an error of its own, not of reachability).
    #[error("{0}")]
    Refused(String),
    /// The write is larger than one commit may be.
    #[error("{0}")]
    TooLarge(String),
    /// The write cannot be made as asked (a file that would not load back, a read-only
    /// directory, a disk error): answered as it is, not retried.
    #[error(transparent)]
    Failed(StoreError),
}

/// How long a write waits for its own commit to come back through the watch.
const APPLY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Makes a policy state the one requests are answered from.
///
/// Implementations must, in this order: refuse cache inserts computed before `revision`,
/// invalidate the cache entries `impact` covers, and swap in the engine compiled from
/// `policy`. When `publish` returns, no request starting afterwards sees the older policy,
/// and no request answered at `revision` was answered from an entry the change made stale.
pub trait Publisher: Send + Sync {
    ///
    /// `changed` lists the objects a write changed (created, replaced, deleted or moved in its
    /// file), so that the index can be updated incrementally; `None` (startup, reloads) means
    /// the whole policy may have changed.
    fn publish(
        &self,
        policy: &PolicySet,
        revision: u64,
        impact: &Impact,
        cause: ChangeCause,
        changed: Option<&[ChangedObject]>,
    );

    /// Resolves once what the publisher feeds further (callers' caches,
    /// `serving::subscribers`) has applied `revision`, or can no longer answer from before it.
    /// In etcd mode a replica reports a revision applied only then, so a write acknowledged
    /// across the fleet has reached every replica's subscribers. At once by default.
    fn settled(&self, revision: u64) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let _ = revision;
        Box::pin(std::future::ready(()))
    }

    /// Whether `change` may be made: `Err` names the ChangeGate rule of the policy before it
    /// that the change breaks, and a request it would change. Asked of every write
    /// before it is committed, of every dry run and of every reload. Every change may be made
    /// by default (a publisher that answers no requests).
    fn gate(&self, change: &ProposedChange<'_>) -> std::result::Result<(), String> {
        let _ = change;
        Ok(())
    }
}

/// A change the store may make, for [`Publisher::gate`]: the policy before and after, and
/// what lets the publisher reuse the engine it serves from rather than compile both.
pub struct ProposedChange<'a> {
    pub before: &'a PolicySet,
    /// The revision `before` was published at, when it is the policy in force (checked under
    /// the writer lock); `None` for a policy only this check sees.
    pub revision: Option<u64>,
    pub after: &'a PolicySet,
    /// The objects the change creates, replaces or deletes, when known (`None`: a reload,
    /// where the whole policy may have changed).
    pub changed: Option<&'a [ChangedObject]>,
}

/// What made the store publish: a write (apply or delete through the API) or a reload of the
/// whole policy (startup, the directory watcher, SIGHUP). The publisher decides what each
/// means for what it keeps (the serving core counts invalidations by cause).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeCause {
    Apply,
    Delete,
    Reload,
}

/// Checks a write against the caller's own permissions (privilege-escalation prevention).
pub trait WriteGuard: Send + Sync {
    /// `Err` names what the caller lacks.
    fn check(
        &self,
        current: &PolicySet,
        objects: &[PolicyObject],
    ) -> std::result::Result<(), String>;
}

/// How many change events are kept for `watch` from an older revision.
const HISTORY: usize = 4096;

struct WriterState {
    revision: u64,
    history: VecDeque<ChangeEvent>,
    /// The applier's spare copy of the policy (etcd mode; see `edit`). Whatever publishes
    /// other than the applier drops it.
    spare: Option<SpareCopy>,
    /// The applier's index of the current policy's ClusterRole bindings, for the impact of a
    /// role change; dropped like `spare` and built again when needed.
    referrers: Option<ClusterRoleReferrers>,
}

impl WriterState {
    fn at(revision: u64) -> Self {
        WriterState {
            revision,
            history: VecDeque::new(),
            spare: None,
            referrers: None,
        }
    }
}

pub struct Store {
    /// Where the policy is kept, and committed.
    backend: Arc<dyn Backend>,
    /// This process's writes waiting to be committed together (see [`commit`]). Only writers
    /// on different replicas (etcd mode) meet in the backend's compare-and-swap.
    commits: StdMutex<commit::CommitQueue>,
    /// The store itself, for the committer task it starts.
    this: std::sync::Weak<Store>,
    publisher: Arc<dyn Publisher>,
    writer: Mutex<WriterState>,
    /// The current policy, for reads that do not need the writer lock.
    policy: ArcSwap<PolicySet>,
    revision_tx: tokio_watch::Sender<u64>,
    events_tx: broadcast::Sender<ChangeEvent>,
    last_error: StdMutex<Option<String>>,
    /// Reloads rejected since startup, for `/metrics`.
    reload_errors: std::sync::atomic::AtomicU64,
}

impl Store {
    /// `policy`, as the backend holds it at `revision`, published; from then on the store
    /// writes through `backend` and applies what its change feed brings.
    pub fn open(
        backend: Arc<dyn Backend>,
        policy: PolicySet,
        revision: u64,
        publisher: Arc<dyn Publisher>,
    ) -> Arc<Self> {
        publisher.publish(
            &policy,
            revision,
            &Impact::everything(),
            ChangeCause::Reload,
            None,
        );
        let (revision_tx, _) = tokio_watch::channel(revision);
        let (events_tx, _) = broadcast::channel(1024);
        // Built now, so that the first change's impact does not pay for it.
        let referrers = ClusterRoleReferrers::of(&policy);
        Arc::new_cyclic(|this| Store {
            this: this.clone(),
            backend,
            commits: StdMutex::default(),
            publisher,
            writer: Mutex::new(WriterState {
                referrers: Some(referrers),
                ..WriterState::at(revision)
            }),
            policy: ArcSwap::from_pointee(policy),
            revision_tx,
            events_tx,
            last_error: StdMutex::new(None),
            reload_errors: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// A store over the policy directory: a write a killed server left half-made finished
    /// first ([`journal`]), then its files read and published as revision 1. A policy that
    /// does not load, or a journal that cannot be read, is returned as the error: there is no
    /// last good policy yet.
    pub fn open_directory(
        backend: dir::DirectoryBackend,
        publisher: Arc<dyn Publisher>,
    ) -> std::result::Result<Arc<Self>, LoadErrors> {
        let policy = backend.recover_and_read()?;
        let revision = backend.revision();
        Ok(Self::open(Arc::new(backend), policy, revision, publisher))
    }

    /// Why this store takes no writes, if it takes none ([`Backend::read_only`]).
    pub fn read_only(&self) -> Option<&str> {
        self.backend.read_only()
    }

    /// etcd mode: one revision's changes from the watch (an object's new state, or `None` when
    /// it was deleted), published at that revision with precise invalidation. A revision with
    /// no object change (only the policy's head key) still advances the revision, so writers
    /// waiting for it return.
    pub async fn apply_changes(
        &self,
        revision: u64,
        changes: Vec<(ObjectRef, Option<PolicyObject>)>,
    ) {
        self.apply_changes_as(revision, changes, ChangeCause::Apply)
            .await;
    }

    /// [`Self::apply_changes`] for changes known to be of `cause` (the directory's own
    /// commits: applies or deletes).
    pub async fn apply_changes_as(
        &self,
        revision: u64,
        changes: Vec<(ObjectRef, Option<PolicyObject>)>,
        cause: ChangeCause,
    ) {
        let mut writer = self.writer.lock().await;
        if revision <= writer.revision {
            return;
        }
        let old = self.policy.load_full();
        // Each change is found by binary search in the canonical order and made in place in
        // the spare copy (see `edit`); only the changed objects are compared, rendered for
        // events and given to the impact analysis, whose index of ClusterRole bindings is kept
        // up to date the same way.
        let mut new = SpareCopy::into_current(writer.spare.take(), &old);
        let change: AppliedChange = changes
            .into_iter()
            .map(|(object, state)| (object, state.map(SharedObject::from)))
            .collect();
        let before = apply_change(&mut new, &change);
        let referrers = writer
            .referrers
            .get_or_insert_with(|| ClusterRoleReferrers::of(&old));
        for (before, (_, after)) in before.iter().zip(&change) {
            if let Some(binding) = before.as_ref().and_then(SharedObject::binding) {
                referrers.remove(binding);
            }
            if let Some(binding) = after.as_ref().and_then(SharedObject::binding) {
                referrers.insert(binding);
            }
        }
        let mut roles = Vec::new();
        let mut bindings = Vec::new();
        fn role(o: &Option<SharedObject>) -> Option<&Role> {
            o.as_ref().and_then(SharedObject::role).map(|r| &**r)
        }
        fn binding(o: &Option<SharedObject>) -> Option<&Binding> {
            o.as_ref().and_then(SharedObject::binding).map(|b| &**b)
        }
        for (before, (_, after)) in before.iter().zip(&change) {
            if role(before).is_some() || role(after).is_some() {
                roles.push((role(before), role(after)));
            }
            if binding(before).is_some() || binding(after).is_some() {
                bindings.push((binding(before), binding(after)));
            }
        }
        let field_policies = change
            .iter()
            .any(|(r, _)| r.kind == ObjectKind::FieldPolicy);
        let impact = if field_policies && protected_paths_changed(&old, &new) {
            Impact::everything()
        } else {
            impact_of_applied_objects(&new, &old, &roles, &bindings, referrers)
        };
        let changed: Vec<ChangedObject> = change.iter().map(|(r, _)| changed_object(r)).collect();
        let events = before
            .iter()
            .zip(&change)
            .filter_map(|(before, (r, after))| {
                let (kind, manifest) = match (before, after) {
                    (None, Some(after)) => (EventType::Added, after.view().manifest()),
                    (Some(before), Some(after)) => {
                        let manifest = after.view().manifest();
                        if before.view().manifest() == manifest {
                            return None;
                        }
                        (EventType::Modified, manifest)
                    }
                    (Some(before), None) => (EventType::Deleted, before.view().manifest()),
                    (None, None) => return None,
                };
                Some(ChangeEvent {
                    kind,
                    object: r.clone(),
                    manifest,
                    revision,
                })
            })
            .collect();
        let referrers = writer.referrers.take();
        self.publish_with(
            &mut writer,
            (&old, new),
            &impact,
            cause,
            Some(&changed),
            revision,
            Some(events),
        );
        writer.referrers = referrers;
        writer.spare = Some(SpareCopy {
            previous: old,
            change,
        });
    }

    /// etcd mode: the whole policy as relisted at `revision` (after a compaction, or etcd
    /// restored from a snapshot), published with the impact of the difference: entries the
    /// difference does not reach stay warm. A revision that went backwards is taken as it is.
    /// etcd holds no ABAC lines: the ones the store was opened with are kept.
    pub async fn replace(&self, mut policy: PolicySet, revision: u64) {
        policy.abac = self.policy.load().abac.clone();
        self.relisted(policy, revision).await;
    }

    /// The whole policy read again at `revision` (etcd's relist, the directory's reload),
    /// published with the impact of the difference: entries the difference does not reach
    /// stay warm. A revision that went backwards is taken as it is.
    pub async fn relisted(&self, policy: PolicySet, revision: u64) {
        let mut writer = self.writer.lock().await;
        let old = self.policy.load_full();
        let impact = impact_of_change(&old, &policy);
        if revision < writer.revision {
            tracing::warn!(
                revision,
                previous = writer.revision,
                "etcd's revision went backwards (restored from a snapshot?): relisted"
            );
            writer.revision = revision.saturating_sub(1);
        }
        // Built before the swap, so that the next change's impact does not pay for it.
        let referrers = ClusterRoleReferrers::of(&policy);
        // The policy read again is good: its error, if the last read had one, goes before
        // the new revision can be seen, so that no caller sees both at once.
        self.set_last_error(None);
        self.publish_at(
            &mut writer,
            &old,
            policy,
            &impact,
            ChangeCause::Reload,
            None,
            revision,
        );
        writer.referrers = Some(referrers);
    }

    /// The ChangeGates of the policy in force checked against a whole policy read again (the
    /// directory's reload): `Err` names the rule it breaks, and the reload is rejected.
    pub fn gate_reload(&self, policy: &PolicySet) -> std::result::Result<(), String> {
        self.publisher.gate(&ProposedChange {
            before: &self.policy.load_full(),
            // Read outside the writer lock: the revision may not be the policy's.
            revision: None,
            after: policy,
            changed: None,
        })
    }

    /// Waits until the policy published is at least `revision`.
    async fn applied(&self, revision: u64) -> Result<()> {
        let mut revisions = self.revision_tx.subscribe();
        let reached = tokio::time::timeout(APPLY_WAIT, async {
            revisions.wait_for(|r| *r >= revision).await.is_ok()
        })
        .await;
        match reached {
            Ok(true) => Ok(()),
            _ => Err(StoreError::Unavailable(format!(
                "the change was committed at etcd revision {revision} but this server has not seen it come back through its watch within {}s; the policy may still be behind",
                APPLY_WAIT.as_secs()
            ))),
        }
    }

    /// Resolves once the publisher's callers' caches have settled `revision`
    /// ([`Publisher::settled`]).
    pub async fn settled(&self, revision: u64) {
        self.publisher.settled(revision).await;
    }

    /// The revision the current policy was published at.
    pub fn revision(&self) -> u64 {
        *self.revision_tx.borrow()
    }

    pub fn policy(&self) -> Arc<PolicySet> {
        self.policy.load_full()
    }

    /// The last reload error, if the policy on disk is currently rejected.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }

    /// How many reloads were rejected since startup.
    pub fn reload_errors(&self) -> u64 {
        self.reload_errors
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn set_last_error(&self, error: Option<String>) {
        if let Ok(mut slot) = self.last_error.lock() {
            *slot = error;
        }
    }

    /// Publishes `new` at `revision` with its events. Caller holds the writer lock.
    #[allow(clippy::too_many_arguments)]
    fn publish_at(
        &self,
        writer: &mut WriterState,
        old: &PolicySet,
        new: PolicySet,
        impact: &Impact,
        cause: ChangeCause,
        changed: Option<&[ChangedObject]>,
        revision: u64,
    ) -> u64 {
        self.publish_with(writer, (old, new), impact, cause, changed, revision, None)
    }

    /// [`Self::publish_at`] with the change events, when the caller knows them (computed from
    /// the two whole policies otherwise).
    #[allow(clippy::too_many_arguments)]
    fn publish_with(
        &self,
        writer: &mut WriterState,
        (old, new): (&PolicySet, PolicySet),
        impact: &Impact,
        cause: ChangeCause,
        changed: Option<&[ChangedObject]>,
        revision: u64,
        events: Option<Vec<ChangeEvent>>,
    ) -> u64 {
        self.publisher
            .publish(&new, revision, impact, cause, changed);
        writer.spare = None;
        writer.referrers = None;
        let events = events.unwrap_or_else(|| diff_events(old, &new, revision));
        self.policy.store(Arc::new(new));
        writer.revision = revision;
        for event in events {
            if writer.history.len() == HISTORY {
                writer.history.pop_front();
            }
            writer.history.push_back(event.clone());
            // No receivers is fine: nobody is watching.
            let _ = self.events_tx.send(event);
        }
        self.revision_tx.send_replace(revision);
        revision
    }

    /// Re-reads the backend. A policy that does not load is rejected and the last good one stays
    /// in force (the error is kept for `Status`). Returns the new revision if anything changed.
    pub async fn reload(&self) -> std::result::Result<Option<u64>, LoadErrors> {
        match self.backend.reload(self).await {
            Ok(revision) => {
                self.set_last_error(None);
                if let Some(revision) = revision {
                    tracing::info!(revision, "policy reloaded");
                }
                Ok(revision)
            }
            Err(errors) => {
                tracing::error!(errors = %errors, "policy reload rejected; the last good policy stays in force");
                self.set_last_error(Some(errors.to_string()));
                self.reload_errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Err(errors)
            }
        }
    }

    /// Creates or replaces `objects`. Validated (and checked by `guard`) before anything is
    /// written; committed durably before it is published; returns the revision at which the
    /// change is visible here. An apply that changes nothing returns the current revision.
    pub async fn apply(
        &self,
        objects: Vec<PolicyObject>,
        guard: Option<Arc<dyn WriteGuard>>,
    ) -> Result<(u64, Vec<ObjectRef>)> {
        let refs: Vec<ObjectRef> = objects.iter().map(ObjectRef::of).collect();
        let revision = self.write(commit::Write::Apply(objects), guard).await?;
        Ok((revision, refs))
    }

    /// A dry run of [`Store::apply`]: `objects` checked as the write would be (by `guard`
    /// too), nothing written or published; the policy in force and the policy the write would
    /// make, for the caller to compare. Both modes alike (in etcd mode a write is checked
    /// against the policy this replica applied).
    pub async fn preview(
        &self,
        objects: Vec<PolicyObject>,
        guard: Option<Arc<dyn WriteGuard>>,
    ) -> Result<Preview> {
        let applied: Vec<ObjectRef> = objects.iter().map(ObjectRef::of).collect();
        let writer = self.writer.lock().await;
        let before = self.policy.load_full();
        if let Some(guard) = &guard {
            guard
                .check(&before, &objects)
                .map_err(StoreError::Forbidden)?;
        }
        // What the write changes, made of the policy as the committer makes it.
        let changes = commit::Changes {
            upserts: changed_objects(&before, &objects),
            deletes: Vec::new(),
        };
        let after = changes.applied_to(&before);
        let changed = changes.changed();
        self.publisher
            .gate(&ProposedChange {
                before: &before,
                revision: Some(writer.revision),
                after: &after,
                changed: Some(&changed),
            })
            .map_err(StoreError::GateRefused)?;
        Ok(Preview {
            revision: writer.revision,
            applied,
            changed,
            before,
            after,
        })
    }

    /// Deletes one object; returns the revision at which it is gone.
    pub async fn delete(
        &self,
        object: &ObjectRef,
        guard: Option<Arc<dyn WriteGuard>>,
    ) -> Result<u64> {
        self.write(commit::Write::Delete(object.clone()), guard)
            .await
    }

    pub fn get(&self, object: &ObjectRef) -> Option<String> {
        find_object(&self.policy(), object).map(|view| view.manifest())
    }

    /// Manifests of every object of `kind` (all kinds when `None`) in `namespace` (all when
    /// empty), in canonical order.
    pub fn list(&self, kind: Option<ObjectKind>, namespace: &str) -> Vec<String> {
        let policy = self.policy();
        objects(&policy)
            .into_iter()
            .filter(|(r, _)| kind.is_none_or(|k| r.kind == k))
            .filter(|(r, _)| namespace.is_empty() || r.namespace == namespace)
            .map(|(_, view)| view.manifest())
            .collect()
    }

    /// Changes after `from` that are still kept, and a receiver for the ones to come.
    /// `from == 0` means "from now on".
    pub async fn watch(
        &self,
        from: u64,
    ) -> Result<(Vec<ChangeEvent>, broadcast::Receiver<ChangeEvent>)> {
        // Holding the writer lock makes backlog and subscription seamless: no event is published
        // between them.
        let writer = self.writer.lock().await;
        let receiver = self.events_tx.subscribe();
        if from == 0 || from >= writer.revision {
            return Ok((Vec::new(), receiver));
        }
        let oldest = writer
            .history
            .front()
            .map_or(writer.revision, |e| e.revision);
        if from + 1 < oldest {
            return Err(StoreError::Compacted { from, oldest });
        }
        let backlog = writer
            .history
            .iter()
            .filter(|e| e.revision > from)
            .cloned()
            .collect();
        Ok((backlog, receiver))
    }
}

/// Equal apart from where they were read from.
pub(crate) fn same_content(current: ObjectView<'_>, object: &PolicyObject) -> bool {
    match (current, object) {
        (ObjectView::Role(a), PolicyObject::Role(b)) => {
            Role {
                source: Default::default(),
                ..a.clone()
            } == Role {
                source: Default::default(),
                ..b.clone()
            }
        }
        (ObjectView::Binding(a), PolicyObject::Binding(b)) => {
            Binding {
                source: Default::default(),
                ..a.clone()
            } == Binding {
                source: Default::default(),
                ..b.clone()
            }
        }
        (ObjectView::ChangeGate(a), PolicyObject::ChangeGate(b)) => {
            ChangeGate {
                source: Default::default(),
                ..a.clone()
            } == ChangeGate {
                source: Default::default(),
                ..b.clone()
            }
        }
        (ObjectView::FieldPolicy(a), PolicyObject::FieldPolicy(b)) => {
            FieldPolicy {
                source: Default::default(),
                ..a.clone()
            } == FieldPolicy {
                source: Default::default(),
                ..b.clone()
            }
        }
        _ => false,
    }
}

/// The objects of a write that differ from what `policy` holds.
fn changed_objects(policy: &PolicySet, objects: &[PolicyObject]) -> Vec<PolicyObject> {
    objects
        .iter()
        .filter(|o| {
            !find_object(policy, &ObjectRef::of(o)).is_some_and(|current| same_content(current, o))
        })
        .cloned()
        .collect()
}

/// The object a delete removes, owned (for the guard and the commit).
fn existing_object(policy: &PolicySet, object: &ObjectRef) -> Result<PolicyObject> {
    find_object(policy, object)
        .map(|view| view.to_object())
        .ok_or_else(|| StoreError::NotFound(object.clone()))
}

/// The index's name for a changed object.
fn changed_object(r: &ObjectRef) -> ChangedObject {
    let kind = match r.kind {
        ObjectKind::ClusterRole => ChangedKind::ClusterRole,
        ObjectKind::Role => ChangedKind::Role,
        ObjectKind::ClusterRoleBinding => ChangedKind::ClusterRoleBinding,
        ObjectKind::RoleBinding => ChangedKind::RoleBinding,
        ObjectKind::FieldPolicy => ChangedKind::FieldPolicy,
        ObjectKind::ChangeGate => ChangedKind::ChangeGate,
    };
    ChangedObject::new(kind, r.namespace.clone(), r.name.clone())
}

/// ADDED / MODIFIED / DELETED events between two policies, in canonical object order.
fn diff_events(old: &PolicySet, new: &PolicySet, revision: u64) -> Vec<ChangeEvent> {
    let old_objects = objects(old);
    let new_objects = objects(new);
    let mut events = Vec::new();
    for (r, view) in &new_objects {
        let kind = match old_objects.get(r) {
            None => EventType::Added,
            Some(before) if before.manifest() != view.manifest() => EventType::Modified,
            Some(_) => continue,
        };
        events.push(ChangeEvent {
            kind,
            object: r.clone(),
            manifest: view.manifest(),
            revision,
        });
    }
    for (r, view) in &old_objects {
        if !new_objects.contains_key(r) {
            events.push(ChangeEvent {
                kind: EventType::Deleted,
                object: r.clone(),
                manifest: view.manifest(),
                revision,
            });
        }
    }
    events
}

#[cfg(test)]
mod tests;
