//! Decision records (`serve --decision-records`, docs/records.md): one record per decision
//! taken, with the full request as decided, handed to a [`LineWriter`](super::writer) through
//! a bounded queue.
//!
//! Recording never blocks a decision. The serving thread copies what decided (the subject's
//! name and groups, the action, the content) and tries the queue; when the queue is full the
//! record is dropped and counted (`queue_full`), and the next record that finds room is
//! preceded by a gap line with the count, so a reader of the stream knows where records are
//! missing and how many. Every record carries `seq`, the number of records taken before it:
//! numbers missing from a stream are exactly the records dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use std::time::SystemTime;

pub use super::record::{
    figures, DecisionRecord, DropReason, Gap, PackedRequest, RecordCounts, RecordFigures,
};
use super::writer::Entry;
use crate::engine::Response;
use crate::request::{RequestRef, UserInfo};

/// The serving side: takes records and queues them, never waiting.
#[derive(Debug)]
pub struct DecisionRecorder {
    queue: SyncSender<Entry>,
    counts: Arc<RecordCounts>,
    /// Records dropped as `queue_full` that no gap line has reported yet.
    unreported: AtomicU64,
}

impl DecisionRecorder {
    /// Records go to `queue` (a [`super::writer::LineWriter`]'s, of their own file or of the
    /// audit log's), counted in `counts`.
    pub fn new(queue: SyncSender<Entry>, counts: Arc<RecordCounts>) -> Self {
        Self {
            queue,
            counts,
            unreported: AtomicU64::new(0),
        }
    }

    /// One decision taken by `api` for `caller`, answered `response` from `revision`.
    pub fn record(
        &self,
        api: &'static str,
        caller: &Arc<UserInfo>,
        request: RequestRef<'_>,
        response: &Arc<Response>,
        revision: u64,
        cached: bool,
    ) {
        if self.unreported.load(Ordering::Relaxed) != 0 {
            self.report_gap();
        }
        let seq = self.counts.taken.fetch_add(1, Ordering::Relaxed);
        let record = DecisionRecord {
            seq,
            time: SystemTime::now(),
            api,
            caller: Arc::clone(caller),
            request: PackedRequest::pack(request),
            content: request.content.cloned(),
            response: Arc::clone(response),
            revision,
            cached,
        };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.queue.try_send(Entry::Decision(Box::new(record)))
        {
            let dropped = self.counts.queue_full.fetch_add(1, Ordering::Relaxed) + 1;
            self.unreported.fetch_add(1, Ordering::Relaxed);
            // One warning per power of two: a sustained overload does not flood the log.
            if dropped.is_power_of_two() {
                tracing::warn!(dropped, "decision record queue full: records dropped");
            }
        }
    }

    /// Queues the gap line for the records dropped since the last one; when there is no room
    /// either, the count waits for the next record.
    fn report_gap(&self) {
        if let Some((dropped, gap)) = self.unreported_gap() {
            if self.queue.try_send(gap).is_err() {
                self.unreported.fetch_add(dropped, Ordering::AcqRel);
            }
        }
    }

    /// The last gap, queued before the stream ends (at shutdown, before the writer finishes):
    /// this one waits for room.
    pub fn close(&self) {
        if let Some((_, gap)) = self.unreported_gap() {
            let _ = self.queue.send(gap);
        }
    }

    /// The gap line for the drops no line has reported yet, taken from the count.
    fn unreported_gap(&self) -> Option<(u64, Entry)> {
        let dropped = self.unreported.swap(0, Ordering::AcqRel);
        (dropped > 0).then(|| {
            (
                dropped,
                Entry::Gap(Gap::now(DropReason::QueueFull, dropped)),
            )
        })
    }

    pub fn figures(&self) -> RecordFigures {
        figures(&self.counts)
    }
}

impl Drop for DecisionRecorder {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Decision, EncodedOnce};
    use crate::records::format::{read_line, Line};
    use crate::records::writer::{Destination, LineWriter};
    use crate::request::{Action, Request, ResourceAttributes};

    fn response() -> Arc<Response> {
        Arc::new(Response {
            decision: Decision::Allow,
            reason: String::new(),
            allowed_by: vec![],
            denied_by: vec![],
            errors: vec![],
            encoded: EncodedOnce::default(),
            recorded: EncodedOnce::default(),
            plan: Default::default(),
        })
    }

    fn request() -> Request {
        Request {
            user: UserInfo {
                name: "alice".into(),
                groups: vec!["dev".into()],
                ..UserInfo::default()
            },
            action: Action::Resource(ResourceAttributes {
                verb: "get".into(),
                resource: "pods".into(),
                ..ResourceAttributes::default()
            }),
        }
    }

    /// A writer that takes nothing (a sink that stopped): every record past the queue's room
    /// is dropped and counted, none waits, and the gap that could not be queued either is
    /// still owed.
    #[test]
    fn a_full_queue_drops_and_counts_without_blocking() {
        let (queue, entries) = std::sync::mpsc::sync_channel(4);
        let recorder = Arc::new(DecisionRecorder::new(queue, Arc::default()));
        let (done, finished) = std::sync::mpsc::channel();
        let recording = Arc::clone(&recorder);
        std::thread::spawn(move || {
            let caller = Arc::new(UserInfo::default());
            let (request, response) = (request(), response());
            for _ in 0..1000 {
                recording.record(
                    "Authorize",
                    &caller,
                    request.as_borrowed(),
                    &response,
                    3,
                    false,
                );
            }
            let _ = done.send(());
        });
        assert!(
            finished
                .recv_timeout(std::time::Duration::from_secs(60))
                .is_ok(),
            "recording blocked on a full queue"
        );
        let figures = recorder.figures();
        assert_eq!(figures.taken, 1000);
        assert_eq!(figures.queue_full, 996, "four queued, the rest dropped");
        assert_eq!(recorder.unreported.load(Ordering::Relaxed), 996);
        assert_eq!(entries.try_iter().count(), 4);
    }

    /// Through a real writer into a file that refuses every write (`/dev/full`, a full disk):
    /// no record is counted written, every one is counted `write_failed`, recording never
    /// waits, and the writer finishes.
    #[test]
    fn records_the_file_refuses_are_counted_lost_never_written() {
        let counts = Arc::new(RecordCounts::default());
        let (queue, writer) = LineWriter::start(
            "test-writer",
            Destination::append(std::path::Path::new("/dev/full")),
            1 << 16,
            Arc::clone(&counts),
        )
        .unwrap();
        let recorder = DecisionRecorder::new(queue, Arc::clone(&counts));
        let caller = Arc::new(UserInfo::default());
        let (request, response) = (request(), response());
        for _ in 0..5000 {
            recorder.record(
                "Authorize",
                &caller,
                request.as_borrowed(),
                &response,
                3,
                false,
            );
        }
        drop(recorder);
        writer.finish();
        let figures = figures(&counts);
        assert_eq!(
            (
                figures.taken,
                figures.written,
                figures.queue_full,
                figures.write_failed
            ),
            (5000, 0, 0, 5000)
        );
    }

    /// Through a real writer into a file: records in `seq` order, and after a burst the
    /// writer could not take, one gap line with the count, before the next record.
    #[test]
    fn a_gap_is_written_before_the_next_record_that_finds_room() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.jsonl");
        let counts = Arc::new(RecordCounts::default());
        // Queue and writer apart, so the test decides when the writer runs: records fill the
        // queue first, then the writer starts on what is queued.
        let (queue, entries) = std::sync::mpsc::sync_channel(2);
        let recorder = DecisionRecorder::new(queue, Arc::clone(&counts));
        let caller = Arc::new(UserInfo::default());
        let (request, response) = (request(), response());
        for _ in 0..5 {
            recorder.record(
                "Authorize",
                &caller,
                request.as_borrowed(),
                &response,
                3,
                true,
            );
        }
        let (writer_queue, writer) = LineWriter::start(
            "test-writer",
            Destination::append(&path),
            16,
            Arc::clone(&counts),
        )
        .unwrap();
        for entry in entries.try_iter() {
            writer_queue.send(entry).unwrap();
        }
        // Room again: the gap goes first, then the record.
        let (queue, entries) = std::sync::mpsc::sync_channel(16);
        let recorder = DecisionRecorder {
            queue,
            counts: Arc::clone(&counts),
            unreported: AtomicU64::new(recorder.unreported.swap(0, Ordering::AcqRel)),
        };
        recorder.record(
            "Authorize",
            &caller,
            request.as_borrowed(),
            &response,
            3,
            true,
        );
        for entry in entries.try_iter() {
            writer_queue.send(entry).unwrap();
        }
        drop(writer_queue);
        writer.finish();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Line> = text.lines().map(|l| read_line(l).unwrap()).collect();
        let described: Vec<String> = lines
            .iter()
            .map(|line| match line {
                Line::Decision(d) => format!("record {}", d.seq),
                Line::Gap { reason, dropped } => format!("gap {reason} {dropped}"),
                Line::Other => "other".into(),
            })
            .collect();
        assert_eq!(
            described,
            ["record 0", "record 1", "gap queue_full 3", "record 5"],
            "{text}"
        );
        let figures = figures(&counts);
        assert_eq!(
            (figures.taken, figures.written, figures.queue_full),
            (6, 3, 3)
        );
    }
}
