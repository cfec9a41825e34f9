//! The store's one write path, a group commit: the writes one process receives while a commit
//! is in flight are checked together against the policy that commit leaves and committed as
//! one backend commit (one etcd transaction, one set of rewritten files).
//!
//! Every commit is a compare-and-swap (the write was validated against the policy at that
//! revision; etcd compares its head key, the directory its own head), so one at a time a
//! process could write no faster than one commit plus one delivery through the change feed
//! per write. Instead, writes queue; one committer task per store (started by the first write
//! that finds none running, ended when the queue is empty) takes everything queued, checks
//! each write in arrival order against the policy in force (its guard included), commits the
//! changed objects of all of them at once, waits until the change feed has applied it, and
//! answers each write with that revision. The compare-and-swap guarantees the policy every
//! write was checked against is the one the commit applies to, as for a single write.
//!
//! Writes that touch the same object never share a commit: a later one waits for the next, so
//! per object, writes take effect in arrival order. A combined commit stays within the
//! backend's object limit; one that etcd still finds too large is retried one write per
//! commit. A
//! writer whose caller goes away does not stop the committer: the other writes of its commit
//! are answered all the same.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::edit::{apply_change, AppliedChange, SharedObject};
use super::{
    changed_object, changed_objects, existing_object, ChangeCause, Commit, CommitError, ObjectKind,
    ObjectRef, PolicyObject, PolicySet, ProposedChange, Result, Store, StoreError, WriteGuard,
};

/// Conflicts with writers on other replicas a write meets before `ABORTED`.
const WRITE_ATTEMPTS: usize = 10;

/// How long a write whose commit etcd could not confirm is retried before `UNAVAILABLE`.
const UNAVAILABLE_RETRY: Duration = Duration::from_secs(3);

/// What one write asks for.
pub(super) enum Write {
    /// Create or replace these objects.
    Apply(Vec<PolicyObject>),
    Delete(ObjectRef),
}

/// One write waiting for the committer.
pub(super) struct QueuedWrite {
    pub write: Write,
    pub guard: Option<Arc<dyn WriteGuard>>,
    /// Conflicts with other replicas' writes met so far.
    conflicts: usize,
    /// Since when etcd has not confirmed this write's commits.
    unavailable_since: Option<Instant>,
    answer: Option<oneshot::Sender<Result<u64>>>,
}

impl QueuedWrite {
    pub fn new(write: Write, guard: Option<Arc<dyn WriteGuard>>) -> Self {
        QueuedWrite {
            write,
            guard,
            conflicts: 0,
            unavailable_since: None,
            answer: None,
        }
    }

    fn objects(&self) -> Vec<ObjectRef> {
        match &self.write {
            Write::Apply(objects) => objects.iter().map(ObjectRef::of).collect(),
            Write::Delete(object) => vec![object.clone()],
        }
    }

    fn answer(mut self, result: Result<u64>) {
        if let Some(answer) = self.answer.take() {
            // The writer may be gone (its caller cancelled): nobody to tell.
            let _ = answer.send(result);
        }
    }
}

/// What a write changes against one policy state.
pub(super) struct Changes {
    pub upserts: Vec<PolicyObject>,
    pub deletes: Vec<ObjectRef>,
}

/// `write` checked against `policy` (its guard too): the objects it changes, none when it
/// changes nothing.
pub(super) fn check(policy: &PolicySet, write: &QueuedWrite) -> Result<Changes> {
    match &write.write {
        Write::Apply(objects) => {
            if let Some(guard) = &write.guard {
                guard
                    .check(policy, objects)
                    .map_err(StoreError::Forbidden)?;
            }
            Ok(Changes {
                upserts: changed_objects(policy, objects),
                deletes: Vec::new(),
            })
        }
        Write::Delete(object) => {
            let existing = existing_object(policy, object)?;
            if let Some(guard) = &write.guard {
                guard
                    .check(policy, std::slice::from_ref(&existing))
                    .map_err(StoreError::Forbidden)?;
            }
            Ok(Changes {
                upserts: Vec::new(),
                deletes: vec![object.clone()],
            })
        }
    }
}

impl Changes {
    fn touch_gates(&self) -> bool {
        self.upserts
            .iter()
            .any(|o| matches!(o, PolicyObject::ChangeGate(_)))
            || self
                .deletes
                .iter()
                .any(|r| r.kind == ObjectKind::ChangeGate)
    }

    /// The objects changed, as the index names them.
    pub(super) fn changed(&self) -> Vec<crate::policy::delta::ChangedObject> {
        self.upserts
            .iter()
            .map(ObjectRef::of)
            .chain(self.deletes.iter().cloned())
            .map(|r| changed_object(&r))
            .collect()
    }

    /// The policy these changes make of `policy`.
    pub(super) fn applied_to(&self, policy: &PolicySet) -> PolicySet {
        let mut after = policy.clone();
        let change: AppliedChange = self
            .upserts
            .iter()
            .map(|o| (ObjectRef::of(o), Some(SharedObject::from(o.clone()))))
            .chain(self.deletes.iter().map(|r| (r.clone(), None)))
            .collect();
        apply_change(&mut after, &change);
        after
    }
}

/// The writes of one commit gated in turn: each is checked against the
/// ChangeGates of the policy the writes before it leave, by what it does to that policy,
/// so that two writes that each keep a protected grant cannot together remove it. The
/// policies in between are only made while a gate is in force or being written.
struct GatedInTurn<'a> {
    committed: &'a PolicySet,
    /// The revision `committed` is in force at.
    revision: u64,
    /// The policy the writes admitted so far leave, once one of them had to be gated.
    running: Option<PolicySet>,
}

impl<'a> GatedInTurn<'a> {
    fn new(committed: &'a PolicySet, revision: u64) -> Self {
        GatedInTurn {
            committed,
            revision,
            running: None,
        }
    }

    /// Admits `changes` when they break no gate in force, or names the rule they break.
    fn admit(&mut self, store: &Store, changes: &Changes) -> Result<()> {
        let before = self.running.as_ref().unwrap_or(self.committed);
        if before.gates.is_empty() && !changes.touch_gates() && self.running.is_none() {
            return Ok(());
        }
        let after = changes.applied_to(before);
        if !before.gates.is_empty() {
            store
                .publisher
                .gate(&ProposedChange {
                    before,
                    // The policy in force is the one the engine serving requests was built
                    // from: the gate reuses it. Later writes of a commit meet a policy only
                    // this check sees.
                    revision: self.running.is_none().then_some(self.revision),
                    after: &after,
                    changed: Some(&changes.changed()),
                })
                .map_err(StoreError::GateRefused)?;
        }
        self.running = Some(after);
        Ok(())
    }
}

/// The writes waiting to be committed, and whether a committer task is taking them.
#[derive(Default)]
pub(super) struct CommitQueue {
    waiting: VecDeque<QueuedWrite>,
    running: bool,
    /// Writes still to be committed alone, after a combined commit was too large for etcd.
    alone: usize,
}

impl Store {
    /// A write: queued for the committer; answers the revision at which this server has
    /// applied it (from the backend's change feed), or why it was not made.
    pub(super) async fn write(
        &self,
        write: Write,
        guard: Option<Arc<dyn WriteGuard>>,
    ) -> Result<u64> {
        // A read-only store refuses before anything else: the answer does not depend on who
        // asks or what the write holds, and nothing is queued or checked for it.
        if let Some(reason) = self.backend.read_only() {
            return Err(StoreError::ReadOnlyStore(reason.to_string()));
        }
        let mut queued = QueuedWrite::new(write, guard);
        let (answer, answered) = oneshot::channel();
        queued.answer = Some(answer);
        let start_committer = {
            let mut queue = self.commits.lock().unwrap_or_else(|p| p.into_inner());
            queue.waiting.push_back(queued);
            !std::mem::replace(&mut queue.running, true)
        };
        if start_committer {
            let Some(store) = self.this.upgrade() else {
                return Err(StoreError::Unavailable(
                    "the store is shutting down".to_string(),
                ));
            };
            tokio::spawn(async move { store.run_committer().await });
        }
        answered.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the write's committer stopped before answering; its outcome is unknown and retrying it is safe"
                    .to_string(),
            ))
        })
    }

    /// Commits queued writes until none is left.
    async fn run_committer(self: Arc<Self>) {
        let max_objects = self.backend.max_objects();
        while let Some(batch) = self.next_batch(max_objects) {
            self.commit_batch(batch).await;
        }
    }

    /// The writes of the next commit, in arrival order: as many as are queued, up to the
    /// backend's object limit, stopping before a write that touches an object an earlier one
    /// in the commit touches. `None` (and the committer ends) when nothing is queued.
    fn next_batch(&self, max_objects: usize) -> Option<Vec<QueuedWrite>> {
        let mut queue = self.commits.lock().unwrap_or_else(|p| p.into_inner());
        if queue.waiting.is_empty() {
            queue.running = false;
            return None;
        }
        let alone = queue.alone > 0;
        queue.alone = queue.alone.saturating_sub(1);
        let mut batch = Vec::new();
        let mut touched = HashSet::new();
        while let Some(next) = queue.waiting.front() {
            let objects = next.objects();
            let fits = touched.len() + objects.len() <= max_objects
                && objects.iter().all(|o| !touched.contains(o));
            if !batch.is_empty() && (alone || !fits) {
                break;
            }
            touched.extend(objects);
            batch.extend(queue.waiting.pop_front());
        }
        Some(batch)
    }

    /// Puts writes back at the head of the queue, in their order, for the next commit.
    fn requeue(&self, writes: Vec<QueuedWrite>, alone: bool) {
        let mut queue = self.commits.lock().unwrap_or_else(|p| p.into_inner());
        if alone {
            queue.alone = writes.len();
        }
        for write in writes.into_iter().rev() {
            queue.waiting.push_front(write);
        }
    }

    async fn commit_batch(&self, batch: Vec<QueuedWrite>) {
        // Checked under the writer lock: the revision and the policy are one state.
        let (validated, policy, writes, upserts, deletes) = {
            let writer = self.writer.lock().await;
            let policy = self.policy.load_full();
            let mut writes = Vec::new();
            let (mut upserts, mut deletes) = (Vec::new(), Vec::new());
            let mut gated = GatedInTurn::new(&policy, writer.revision);
            for write in batch {
                match check(&policy, &write).and_then(|changes| {
                    gated.admit(self, &changes)?;
                    Ok(changes)
                }) {
                    Err(refused) => write.answer(Err(refused)),
                    Ok(changes) if changes.upserts.is_empty() && changes.deletes.is_empty() => {
                        write.answer(Ok(writer.revision));
                    }
                    Ok(changes) => {
                        upserts.extend(changes.upserts);
                        deletes.extend(changes.deletes);
                        writes.push(write);
                    }
                }
            }
            (writer.revision, policy, writes, upserts, deletes)
        };
        if writes.is_empty() {
            return;
        }
        let commit = Commit {
            expected: validated,
            policy: &policy,
            upserts: &upserts,
            deletes: &deletes,
            // What the publisher counts invalidations by: a commit of deletes only is one.
            cause: if upserts.is_empty() {
                ChangeCause::Delete
            } else {
                ChangeCause::Apply
            },
        };
        match self.backend.commit(self, commit).await {
            Ok(revision) => {
                // Answered once this server's change feed applied it: a write is visible here
                // when it returns.
                let applied = self.applied(revision).await;
                for write in writes {
                    write.answer(match &applied {
                        Ok(()) => Ok(revision),
                        Err(behind) => Err(StoreError::Unavailable(behind.to_string())),
                    });
                }
            }
            Err(CommitError::Conflict(head)) => {
                // Another replica wrote first: catch up to it, then check again.
                if let Err(behind) = self.applied(head).await {
                    for write in writes {
                        write.answer(Err(StoreError::Unavailable(behind.to_string())));
                    }
                    return;
                }
                let mut again = Vec::new();
                for mut write in writes {
                    write.conflicts += 1;
                    if write.conflicts >= WRITE_ATTEMPTS {
                        write.answer(Err(StoreError::Aborted(format!(
                            "the policy kept changing under this write ({WRITE_ATTEMPTS} attempts, last at revision {head}); try again"
                        ))));
                    } else {
                        again.push(write);
                    }
                }
                self.requeue(again, false);
                // Two replicas' writers that keep meeting would retry in lockstep: jitter.
                let jitter = u64::from(std::process::id()) % 20;
                tokio::time::sleep(Duration::from_millis(jitter)).await;
            }
            Err(CommitError::Unavailable(message)) => {
                // A leader election or a failover: the outcome is unknown, and retrying is
                // safe (a commit that did happen comes back through the watch, and the write
                // then changes nothing). Retried for a while, then UNAVAILABLE.
                let now = Instant::now();
                let mut again = Vec::new();
                for mut write in writes {
                    let since = *write.unavailable_since.get_or_insert(now);
                    if now.duration_since(since) >= UNAVAILABLE_RETRY {
                        write.answer(Err(StoreError::Unavailable(message.clone())));
                    } else {
                        again.push(write);
                    }
                }
                self.requeue(again, false);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(CommitError::Refused(message)) => {
                for write in writes {
                    write.answer(Err(StoreError::Unavailable(message.clone())));
                }
            }
            Err(CommitError::TooLarge(message)) if writes.len() > 1 => {
                // Together too large for one transaction: each on its own.
                tracing::debug!(writes = writes.len(), %message, "group commit split");
                self.requeue(writes, true);
            }
            Err(CommitError::TooLarge(message)) => {
                for write in writes {
                    write.answer(Err(StoreError::TooLarge(message.clone())));
                }
            }
            // Several writes: each again on its own, so that the others are made and the
            // failing one is answered with its own error.
            Err(CommitError::Failed(_)) if writes.len() > 1 => self.requeue(writes, true),
            Err(CommitError::Failed(error)) => {
                if let Some(write) = writes.into_iter().next() {
                    write.answer(Err(error));
                }
            }
        }
    }
}
