//! What a decision record is, as data: the copy taken on the serving thread, the reasons records
//! are lost, and the counts both the recorder ([`super::decision`]) and the writer
//! ([`super::writer`]) keep.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use crate::engine::Response;
use crate::request::{Action, Content, UserInfo};

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
    /// The subject decided on: its name and groups, the fields that decide.
    pub user: String,
    pub groups: Vec<String>,
    pub action: Action,
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

/// What happened to the records taken, shared by the recorder and its writer.
#[derive(Debug, Default)]
pub struct RecordCounts {
    pub taken: AtomicU64,
    pub written: AtomicU64,
    pub queue_full: AtomicU64,
    pub write_failed: AtomicU64,
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
