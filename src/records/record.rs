//! What a decision record is, as data: the copy taken on the serving thread, the reasons records
//! are lost, and the counts both the recorder ([`super::decision`]) and the writer
//! ([`super::writer`]) keep — and the same counts for the audit log's entries
//! ([`super::audit`]), whose sender counts what the queue refused and whose writer counts what
//! the file took or refused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use crate::engine::Response;
use crate::request::{ActionFields, Content, RequestRef, UserInfo};

/// A decision as it is recorded: copied on the serving thread, formatted by the writer.
#[derive(Debug)]
pub struct DecisionRecord {
    /// Records taken before this one (dropped ones included), from 0 at startup.
    pub seq: u64,
    pub time: SystemTime,
    /// The RPC that asked (`Authorize`, `SubjectAccessReview`, `Check`, ...).
    pub api: &'static str,
    /// Who asked (after impersonation: whom the call is served as).
    pub caller: Arc<UserInfo>,
    /// The subject decided on (its name and groups) and the action: the fields that decide.
    pub request: PackedRequest,
    pub content: Option<Content>,
    pub response: Arc<Response>,
    pub revision: u64,
    pub cached: bool,
}

/// Why records were lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The writer could not keep up: the queue was full.
    QueueFull,
    /// The destination refused the write.
    WriteFailed,
}

impl DropReason {
    pub const ALL: [DropReason; 2] = [DropReason::QueueFull, DropReason::WriteFailed];

    /// The reason as the gap line and the metric label spell it.
    pub fn label(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::WriteFailed => "write_failed",
        }
    }
}

/// Records lost just before this point of the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    pub reason: DropReason,
    pub dropped: u64,
    pub time: SystemTime,
}

impl Gap {
    /// `dropped` records lost for `reason`, up to now.
    pub fn now(reason: DropReason, dropped: u64) -> Self {
        Gap {
            reason,
            dropped,
            time: SystemTime::now(),
        }
    }
}

/// What happened to the records taken, shared by the recorder and its writer.
#[derive(Debug, Default)]
pub struct RecordCounts {
    pub taken: AtomicU64,
    pub written: AtomicU64,
    pub queue_full: AtomicU64,
    pub write_failed: AtomicU64,
}

/// What happened to the audit log's entries: written (the file took every byte), or lost
/// because the queue was full or the file refused the write. Shared by the log's sender and
/// its writer thread.
#[derive(Debug, Default)]
pub struct AuditCounts {
    pub written: AtomicU64,
    pub queue_full: AtomicU64,
    pub write_failed: AtomicU64,
    /// Every entry lost, for either reason: the powers of two it reaches are warned of.
    lost: AtomicU64,
}

impl AuditCounts {
    /// `count` entries lost for `reason`. A warning is logged each time the number lost (for
    /// either reason) reaches a power of two: a full disk or a sustained overload does not
    /// flood the log with warnings about the audit log, and no loss goes unmentioned.
    pub fn lost(&self, reason: DropReason, count: u64) {
        if count == 0 {
            return;
        }
        let by_reason = match reason {
            DropReason::QueueFull => &self.queue_full,
            DropReason::WriteFailed => &self.write_failed,
        };
        by_reason.fetch_add(count, Ordering::Relaxed);
        // One fetch_add per loss: exactly one caller sees each power of two crossed.
        let before = self.lost.fetch_add(count, Ordering::Relaxed);
        let after = before.saturating_add(count);
        let power = 1u64 << (u64::BITS - 1 - after.leading_zeros());
        if power > before {
            tracing::warn!(
                lost = after,
                reason = reason.label(),
                "audit entries lost: not written to the audit log"
            );
        }
    }

    pub fn figures(&self) -> AuditFigures {
        AuditFigures {
            written: self.written.load(Ordering::Relaxed),
            queue_full: self.queue_full.load(Ordering::Relaxed),
            write_failed: self.write_failed.load(Ordering::Relaxed),
        }
    }
}

/// The audit log's counts at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuditFigures {
    pub written: u64,
    pub queue_full: u64,
    pub write_failed: u64,
}

impl AuditFigures {
    /// Entries not written, for either reason (`PolicyAdmin.Status` `audit_dropped`).
    pub fn dropped(&self) -> u64 {
        self.queue_full.saturating_add(self.write_failed)
    }
}

/// The counts at one moment, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordFigures {
    pub taken: u64,
    pub written: u64,
    pub queue_full: u64,
    pub write_failed: u64,
}

impl RecordFigures {
    pub fn dropped(&self, reason: DropReason) -> u64 {
        match reason {
            DropReason::QueueFull => self.queue_full,
            DropReason::WriteFailed => self.write_failed,
        }
    }
}

/// The counts now.
pub fn figures(counts: &RecordCounts) -> RecordFigures {
    RecordFigures {
        taken: counts.taken.load(Ordering::Relaxed),
        written: counts.written.load(Ordering::Relaxed),
        queue_full: counts.queue_full.load(Ordering::Relaxed),
        write_failed: counts.write_failed.load(Ordering::Relaxed),
    }
}

/// A request's deciding fields copied into one buffer: the user's name, the groups, then the
/// action's fields in [`ActionFields`] order, each as its length (4 bytes, little-endian) and
/// its bytes, after one byte naming the kind of action. One allocation on the serving thread
/// instead of one per string, and one run of memory for the writer's thread to read: copied
/// string by string, a record cost the writer more in cache misses and cross-thread frees
/// than in formatting (BENCHMARKS.md, decision records).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedRequest(Box<[u8]>);

/// A [`PackedRequest`] read back, borrowing its strings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedView<'a> {
    pub user: &'a str,
    pub groups: PackedStrings<'a>,
    /// The seven resource fields (namespace, verb, group, version, resource, subresource,
    /// name) or the two non-resource ones (path, verb).
    pub action: PackedAction<'a>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PackedAction<'a> {
    Resource([&'a str; 7]),
    NonResource([&'a str; 2]),
}

impl PackedRequest {
    pub fn pack(request: RequestRef<'_>) -> Self {
        let fields = request.action.decision_fields();
        let groups = request.user.groups;
        let size = 1
            + 4 * (2 + groups.iter().len() + fields.values().len())
            + request.user.name.len()
            + groups.iter().map(str::len).sum::<usize>()
            + fields.values().iter().map(|v| v.len()).sum::<usize>();
        let mut out = Vec::with_capacity(size);
        out.push(match fields {
            ActionFields::Resource(_) => b'r',
            ActionFields::NonResource(_) => b'n',
        });
        push(&mut out, request.user.name);
        out.extend_from_slice(&(groups.iter().len() as u32).to_le_bytes());
        for group in groups.iter() {
            push(&mut out, group);
        }
        for field in fields.values() {
            push(&mut out, field);
        }
        PackedRequest(out.into_boxed_slice())
    }

    /// The fields, read back (a buffer not written by [`Self::pack`] reads as empty fields).
    pub fn view(&self) -> PackedView<'_> {
        let bytes = &self.0[..];
        let kind = bytes.first().copied().unwrap_or(b'r');
        let mut rest = PackedStrings {
            bytes: bytes.get(1..).unwrap_or_default(),
            left: u32::MAX,
        };
        let user = rest.next().unwrap_or_default();
        let count = rest.take_count();
        let groups = PackedStrings {
            bytes: rest.bytes,
            left: count,
        };
        let mut after = groups.clone();
        for _ in 0..count {
            after.next();
        }
        after.left = u32::MAX;
        let mut field = || after.next().unwrap_or_default();
        let action = if kind == b'n' {
            PackedAction::NonResource([field(), field()])
        } else {
            PackedAction::Resource([
                field(),
                field(),
                field(),
                field(),
                field(),
                field(),
                field(),
            ])
        };
        PackedView {
            user,
            groups,
            action,
        }
    }
}

fn push(out: &mut Vec<u8>, value: &str) {
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value.as_bytes());
}

/// The length-prefixed strings of a [`PackedRequest`], in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedStrings<'a> {
    bytes: &'a [u8],
    /// Strings left to read (the groups' count; `u32::MAX` while reading fields).
    left: u32,
}

impl<'a> PackedStrings<'a> {
    fn take_count(&mut self) -> u32 {
        let Some((count, rest)) = self.bytes.split_first_chunk::<4>() else {
            return 0;
        };
        self.bytes = rest;
        u32::from_le_bytes(*count)
    }
}

impl<'a> Iterator for PackedStrings<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.left == 0 {
            return None;
        }
        let (len, rest) = self.bytes.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        let value = rest.get(..len)?;
        self.bytes = rest.get(len..).unwrap_or_default();
        self.left = self.left.saturating_sub(1);
        // Packed from `&str`s, so always UTF-8.
        std::str::from_utf8(value).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{Action, NonResourceAttributes, Request, ResourceAttributes};

    #[test]
    fn a_packed_request_reads_back_whole() {
        let request = Request {
            user: UserInfo {
                name: "alice".into(),
                groups: vec!["dev".into(), "".into(), "ünïcode".into()],
                ..UserInfo::default()
            },
            action: Action::Resource(ResourceAttributes {
                namespace: "ns".into(),
                verb: "get".into(),
                group: "apps".into(),
                version: "v1".into(),
                resource: "deployments".into(),
                subresource: "scale".into(),
                name: "web".into(),
            }),
        };
        let packed = PackedRequest::pack(request.as_borrowed());
        let view = packed.view();
        assert_eq!(view.user, "alice");
        assert_eq!(view.groups.collect::<Vec<_>>(), ["dev", "", "ünïcode"]);
        assert_eq!(
            view.action,
            PackedAction::Resource(["ns", "get", "apps", "v1", "deployments", "scale", "web"])
        );

        let request = Request {
            user: UserInfo::default(),
            action: Action::NonResource(NonResourceAttributes {
                path: "/healthz".into(),
                verb: "get".into(),
            }),
        };
        let view_of = PackedRequest::pack(request.as_borrowed());
        let view = view_of.view();
        assert_eq!((view.user, view.groups.count()), ("", 0));
        assert_eq!(view.action, PackedAction::NonResource(["/healthz", "get"]));
    }
}
