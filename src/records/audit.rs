//! The audit log (opt-in, `serve --audit-log PATH`): one JSON line per review call and per
//! policy write, appended to a file.
//!
//! Requests never wait for the disk: a handler builds its entry and hands it to a dedicated
//! writer thread ([`super::writer`], shared with the decision records) through a bounded
//! queue. An entry that does not reach the file is counted ([`AuditCounts`]): dropped here
//! when the queue is full (the disk is slower than the request rate), or by the writer when
//! the file refuses it (a full disk, an I/O error). Both are reported by `PolicyAdmin.Status`
//! (`audit_dropped`, with `audit_write_failed` the part the file refused), by
//! `authzd_audit_dropped_total{reason}`, and in a warning each time the number lost reaches a
//! power of two, so a gap in the log is never silent.
//!
//! Each line has `time` (RFC 3339, UTC), `rpc`, `caller` (user and groups), `request`, and
//! either `decision` (reviews), `subjects` (who-can), `applied`/`deleted` (writes) or `error`
//! (a refused write), plus `revision`. With `--decision-records audit` the decision records
//! ([`super::format`]) are written here too, through the same queue, told apart by their `kind`.

use std::path::Path;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;

use serde_json::{json, Map, Value};

pub use super::record::{AuditCounts, AuditFigures};
use super::record::{DropReason, RecordCounts};
use super::time::rfc3339_now;
use super::writer::{Destination, Entry, LineWriter, OpenError};
use crate::engine::{AllowedSubjects, Response};
use crate::request::{Action, UserInfo};

/// Why the audit log could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("the audit log: {0}")]
pub struct AuditError(#[from] OpenError);

/// The sending half, shared by every handler. Dropping the last clone lets the writer drain
/// the queue and stop.
#[derive(Debug)]
pub struct AuditLog {
    queue: SyncSender<Entry>,
    /// Written and lost, shared with the writer thread.
    counts: Arc<AuditCounts>,
}

/// The writer thread; [`AuditWriter::finish`] waits until everything queued is written.
pub type AuditWriter = LineWriter;

impl AuditLog {
    /// Opens (appending, creating if missing) `path` and starts the writer thread with room
    /// for `capacity` waiting entries. Decision records queued here (`--decision-records
    /// audit`) are counted in `records`.
    pub fn open(
        path: &Path,
        capacity: usize,
        records: Arc<RecordCounts>,
    ) -> Result<(Arc<AuditLog>, AuditWriter), AuditError> {
        let counts = Arc::new(AuditCounts::default());
        let (queue, writer) = LineWriter::start_counting(
            "audit-writer",
            Destination::append(path),
            capacity,
            records,
            Arc::clone(&counts),
        )?;
        Ok((Arc::new(AuditLog { queue, counts }), writer))
    }

    /// The queue, for decision records written into the audit log.
    pub fn queue(&self) -> SyncSender<Entry> {
        self.queue.clone()
    }

    /// Entries written, and lost for either reason, so far.
    pub fn figures(&self) -> AuditFigures {
        self.counts.figures()
    }

    /// Queues one entry, stamped with the time; never blocks.
    pub fn record(&self, mut entry: Map<String, Value>) {
        entry.insert("time".into(), Value::String(rfc3339_now()));
        match self.queue.try_send(Entry::Audit(Value::Object(entry))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counts.lost(DropReason::QueueFull, 1);
            }
        }
    }

    /// A review call that reached a decision.
    pub fn review(
        &self,
        rpc: &str,
        caller: &UserInfo,
        subject: &UserInfo,
        action: &Action,
        response: &Response,
        revision: u64,
    ) {
        let mut entry = base(rpc, caller, revision);
        entry.insert(
            "request".into(),
            json!({ "user": user(subject), "action": action_json(action) }),
        );
        entry.insert(
            "decision".into(),
            json!({ "decision": response.decision.as_str(), "reason": response.reason }),
        );
        self.record(entry);
    }

    /// A who-can call (ResourceAccessReview, GetAllowedSubjects): the answer as counts.
    pub fn who_can(
        &self,
        rpc: &str,
        caller: &UserInfo,
        action: &Action,
        subjects: &AllowedSubjects,
        revision: u64,
    ) {
        let mut entry = base(rpc, caller, revision);
        entry.insert("request".into(), json!({ "action": action_json(action) }));
        entry.insert(
            "subjects".into(),
            json!({
                "users": subjects.users.len(),
                "groups": subjects.groups.len(),
                "denied_users": subjects.denied_users.len(),
                "denied_groups": subjects.denied_groups.len(),
            }),
        );
        self.record(entry);
    }

    /// A policy write: `request` describes it, `outcome` is `Ok((revision, result))` with
    /// what was applied or deleted, or the refusal's message.
    pub fn write(
        &self,
        rpc: &str,
        caller: &UserInfo,
        impersonated: Option<&UserInfo>,
        request: Value,
        outcome: Result<(u64, Value), String>,
    ) {
        let (revision, result) = match outcome {
            Ok((revision, result)) => (revision, ("result", result)),
            Err(message) => (0, ("error", Value::String(message))),
        };
        let mut entry = base(rpc, caller, revision);
        // As Kubernetes' audit events: `user` authenticated, `impersonatedUser` served.
        if let Some(impersonated) = impersonated {
            entry.insert(
                "impersonated_user".into(),
                json!({ "user": impersonated.name, "groups": impersonated.groups }),
            );
        }
        entry.insert("request".into(), request);
        entry.insert(result.0.into(), result.1);
        self.record(entry);
    }
}

fn base(rpc: &str, caller: &UserInfo, revision: u64) -> Map<String, Value> {
    let mut entry = Map::new();
    entry.insert("rpc".into(), Value::String(rpc.to_string()));
    entry.insert(
        "caller".into(),
        json!({ "user": caller.name, "groups": caller.groups }),
    );
    entry.insert("revision".into(), Value::from(revision));
    entry
}

fn user(user: &UserInfo) -> Value {
    json!({
        "name": user.name,
        "uid": user.uid,
        "groups": user.groups,
        "extra": user.extra,
    })
}

fn action_json(action: &Action) -> Value {
    match action {
        Action::Resource(r) => json!({
            "namespace": r.namespace,
            "verb": r.verb,
            "group": r.group,
            "version": r.version,
            "resource": r.resource,
            "subresource": r.subresource,
            "name": r.name,
        }),
        Action::NonResource(n) => json!({ "path": n.path, "verb": n.verb }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Decision, EncodedOnce};
    use crate::request::ResourceAttributes;

    fn caller() -> UserInfo {
        UserInfo {
            name: "admin".into(),
            groups: vec!["ops".into()],
            ..UserInfo::default()
        }
    }

    fn read_lines(path: &Path) -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    #[test]
    fn a_review_is_written_with_its_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let (log, writer) = AuditLog::open(&path, 16, Arc::default()).unwrap();
        let action = Action::Resource(ResourceAttributes {
            namespace: "dev".into(),
            verb: "get".into(),
            resource: "pods".into(),
            ..ResourceAttributes::default()
        });
        let subject = UserInfo {
            name: "alice".into(),
            ..UserInfo::default()
        };
        let response = Response {
            decision: Decision::Allow,
            reason: "because".into(),
            allowed_by: Vec::new(),
            denied_by: Vec::new(),
            errors: Vec::new(),
            encoded: EncodedOnce::default(),
            recorded: EncodedOnce::default(),
            plan: Default::default(),
        };
        log.review("Authorize", &caller(), &subject, &action, &response, 7);
        let counts = Arc::clone(&log.counts);
        drop(log);
        writer.finish();
        assert_eq!(counts.figures().written, 1);
        let lines = read_lines(&path);
        assert_eq!(lines.len(), 1);
        let line = &lines[0];
        assert_eq!(line["rpc"], "Authorize");
        assert_eq!(line["caller"]["user"], "admin");
        assert_eq!(line["caller"]["groups"][0], "ops");
        assert_eq!(line["request"]["user"]["name"], "alice");
        assert_eq!(line["request"]["action"]["resource"], "pods");
        assert_eq!(line["decision"]["decision"], "ALLOW");
        assert_eq!(line["revision"], 7);
        assert!(line["time"].as_str().unwrap().ends_with('Z'));
    }

    /// A file that refuses every write (`/dev/full`, a full disk): every entry is counted
    /// lost as `write_failed`, none written, and the writer still finishes.
    #[test]
    fn entries_the_file_refuses_are_counted_lost() {
        let (log, writer) = AuditLog::open(Path::new("/dev/full"), 4096, Arc::default()).unwrap();
        for _ in 0..1000 {
            log.write("Apply", &caller(), None, json!({}), Err("refused".into()));
        }
        let counts = Arc::clone(&log.counts);
        drop(log);
        writer.finish();
        assert_eq!(
            counts.figures(),
            AuditFigures {
                written: 0,
                queue_full: 0,
                write_failed: 1000
            }
        );
        assert_eq!(counts.figures().dropped(), 1000);
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_blocking() {
        // A queue of one whose writer takes nothing (a disk that stopped): a sender whose
        // receiver nobody reads.
        let (queue, entries) = std::sync::mpsc::sync_channel(1);
        let log = Arc::new(AuditLog {
            queue,
            counts: Arc::default(),
        });
        // Recording on another thread: were it to block, `done` would never arrive.
        let (done, finished) = std::sync::mpsc::channel();
        let recorder = Arc::clone(&log);
        std::thread::spawn(move || {
            for _ in 0..1000 {
                recorder.write("Apply", &caller(), None, json!({}), Err("refused".into()));
            }
            let _ = done.send(());
        });
        assert!(
            finished
                .recv_timeout(std::time::Duration::from_secs(60))
                .is_ok(),
            "recording blocked on a full queue"
        );
        assert_eq!(
            log.figures(),
            AuditFigures {
                written: 0,
                queue_full: 999,
                write_failed: 0
            },
            "one queued, the rest dropped and counted"
        );
        assert_eq!(entries.try_iter().count(), 1);
    }
}
