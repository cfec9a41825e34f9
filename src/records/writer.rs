//! The one writer both logs use: a thread that takes entries off a bounded queue and appends
//! them to a file as JSON lines, so that no request ever waits for a disk.
//!
//! * **Never a wake-up per entry.** The thread drains the queue, flushes, and sleeps
//!   [`POLL`] ([`IDLE_POLL`] when it found nothing) before it looks again, instead of parking
//!   in `recv`: a sender that finds the
//!   receiver parked must wake it (a futex call on the serving thread, per decision), and at
//!   tens of thousands of decisions a second that is the cost of recording. A reader of the
//!   file sees an entry within a few milliseconds.
//! * **Rotation** (decision records): once the file would grow past its size, it is renamed
//!   `PATH.1` (the older ones shifting to `PATH.2` ... up to the number kept) and a new one
//!   started. A destination that is not a regular file (a FIFO, `/dev/stdout`) is never
//!   rotated.
//! * **Written means in the file.** Lines wait in [`Pending`], not in a `BufWriter`: a line is
//!   counted written only once the file took all of it, and a line the file refuses (a full
//!   disk, an I/O error) is counted lost — `write_failed` for a decision record, with a gap
//!   line in its place ([`super::pending`]), and for an audit entry in the audit log's counts
//!   ([`AuditCounts`]), warned of at powers of two. A refusing file is tried again at every
//!   poll, so the writer carries on by itself once the disk has room again. Records dropped
//!   before the queue (`queue_full`) are reported by their sender ([`super::decision`]).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::format;
use super::pending::{Flushed, Kind, Pending, Tally};
use super::record::{AuditCounts, DecisionRecord, DropReason, Gap, RecordCounts};

/// How long the writer sleeps once the queue is empty, after a poll that found entries.
pub const POLL: Duration = Duration::from_millis(2);

/// How long it sleeps after a poll that found none: an idle server wakes 50 times a second,
/// not 500 (a wake-up costs tens of microseconds of a virtual machine's time).
pub const IDLE_POLL: Duration = Duration::from_millis(20);

/// The lines kept between the writer and the file: written whenever the queue runs empty, or
/// once this many bytes wait.
const BUFFER_BYTES: usize = 256 << 10;

/// One line to write.
pub enum Entry {
    /// An audit log entry ([`super::audit`]), complete and stamped by its sender.
    Audit(serde_json::Value),
    /// A decision record, formatted here, off the serving threads.
    Decision(Box<DecisionRecord>),
    /// Records lost before this point.
    Gap(Gap),
}

/// Where the lines go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    pub path: PathBuf,
    /// Rotate once the file would grow past this many bytes; `None` never rotates.
    pub max_bytes: Option<u64>,
    /// Rotated files kept (`PATH.1` newest); older ones are removed.
    pub keep: usize,
}

impl Destination {
    /// A file appended to for ever (the audit log).
    pub fn append(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            max_bytes: None,
            keep: 0,
        }
    }
}

/// Why a log could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot open `{path}`: {source}")]
pub struct OpenError {
    path: PathBuf,
    source: std::io::Error,
}

/// The writer thread; [`LineWriter::finish`] waits until everything queued is written.
pub struct LineWriter {
    thread: Option<JoinHandle<()>>,
    /// Set by [`LineWriter::finish`]: the thread drains what is queued and stops, even while
    /// senders remain (the serving state holds one until the process ends).
    stop: Arc<AtomicBool>,
}

impl LineWriter {
    /// Opens (appending, creating if missing) the destination and starts the writer with room
    /// for `capacity` waiting entries; decision records are counted in `counts`. A FIFO's open
    /// waits here for its reader.
    pub fn start(
        name: &str,
        destination: Destination,
        capacity: usize,
        counts: Arc<RecordCounts>,
    ) -> Result<(SyncSender<Entry>, LineWriter), OpenError> {
        Self::start_counting(name, destination, capacity, counts, Arc::default())
    }

    /// As [`LineWriter::start`], with audit entries counted in `audit` (the audit log's writer).
    pub fn start_counting(
        name: &str,
        destination: Destination,
        capacity: usize,
        counts: Arc<RecordCounts>,
        audit: Arc<AuditCounts>,
    ) -> Result<(SyncSender<Entry>, LineWriter), OpenError> {
        let open_error = |source| OpenError {
            path: destination.path.clone(),
            source,
        };
        let file = open(&destination.path).map_err(open_error)?;
        let rotates = destination.max_bytes.is_some()
            && file.metadata().map(|m| m.is_file()).unwrap_or(false);
        let in_file = if rotates {
            file.metadata().map(|m| m.len()).unwrap_or(0)
        } else {
            0
        };
        let (queue, entries) = std::sync::mpsc::sync_channel(capacity.max(1));
        let mut output = Output {
            file,
            pending: Pending::with_capacity(BUFFER_BYTES),
            in_file,
            rotates,
            destination: destination.clone(),
            failed: false,
            line: Vec::with_capacity(1024),
            counts,
            audit,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || output.run(&entries, &stopping))
            .map_err(open_error)?;
        Ok((
            queue,
            LineWriter {
                thread: Some(thread),
                stop,
            },
        ))
    }

    /// Waits for the writer to write everything queued so far, and stops it. Entries queued
    /// after this are not written: call it once nothing more is recorded.
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

struct Output {
    /// Written unbuffered: [`Pending`] is the buffer, and knows which lines the file took.
    file: File,
    pending: Pending,
    /// Bytes in the current file (rotating destinations only).
    in_file: u64,
    rotates: bool,
    destination: Destination,
    /// Whether the last write failed (an error is logged once per run of failures).
    failed: bool,
    /// The line being formatted, reused.
    line: Vec<u8>,
    counts: Arc<RecordCounts>,
    audit: Arc<AuditCounts>,
}

impl Output {
    fn run(&mut self, entries: &Receiver<Entry>, stop: &AtomicBool) {
        let mut busy = false;
        loop {
            match entries.try_recv() {
                Ok(entry) => {
                    busy = true;
                    self.write(entry);
                }
                Err(TryRecvError::Empty) => {
                    if stop.load(Ordering::Acquire) {
                        // An entry sent after the queue was found empty and before `finish`
                        // set the flag (the decision records' last gap line, sent at
                        // shutdown) is in the queue by now: the flag was set after it was
                        // sent. Drain it, or it is lost.
                        for entry in entries.try_iter() {
                            self.write(entry);
                        }
                        break;
                    }
                    // Also what retries a refusing file: whatever waits (a torn line, a gap
                    // line owed) is tried again at every poll, new entries or not.
                    self.flush();
                    std::thread::sleep(if busy { POLL } else { IDLE_POLL });
                    busy = false;
                }
                Err(TryRecvError::Disconnected) => break,
            }
        }
        self.flush();
        // Stopping with the file still refusing: what is left is lost.
        let abandoned = self.pending.abandon();
        self.count_lost(&abandoned);
    }

    fn write(&mut self, entry: Entry) {
        self.line.clear();
        let kind = match &entry {
            Entry::Audit(value) => {
                if let Err(error) = serde_json::to_writer(&mut self.line, value) {
                    tracing::error!(%error, "cannot format an audit entry");
                    self.audit.lost(DropReason::WriteFailed, 1);
                    return;
                }
                Kind::Audit
            }
            Entry::Decision(record) => {
                format::write_decision(&mut self.line, record);
                Kind::Record
            }
            Entry::Gap(gap) => {
                format::write_gap(&mut self.line, gap);
                Kind::Gap(gap.reason, gap.dropped)
            }
        };
        self.line.push(b'\n');
        if let Some(max) = self.destination.max_bytes {
            let size = self.in_file + (self.pending.len() + self.line.len()) as u64;
            if self.rotates && size > max && size > self.line.len() as u64 {
                // What waits goes to the file it was written for, then a new file starts;
                // unless a line is cut short in this one (the disk refused its end): the file
                // grows until that line is finished, rather than start the next one torn.
                self.flush();
                if !self.pending.torn() {
                    self.rotate();
                }
            }
        }
        self.pending.push(kind, &self.line);
        if self.pending.len() >= BUFFER_BYTES {
            self.flush();
        }
    }

    /// Hands what waits to the file, and counts what it took and what it refused.
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let Flushed {
            written,
            lost,
            taken,
            error,
        } = self.pending.flush_to(&mut self.file);
        self.in_file += taken;
        self.counts
            .written
            .fetch_add(written.records, Ordering::Relaxed);
        self.audit
            .written
            .fetch_add(written.audit, Ordering::Relaxed);
        self.count_lost(&lost);
        self.outcome(error);
    }

    /// Lines the file refused: decision records as `write_failed` (their gap line is queued by
    /// [`Pending`]), audit entries in the audit log's counts.
    fn count_lost(&self, lost: &Tally) {
        self.counts
            .write_failed
            .fetch_add(lost.records, Ordering::Relaxed);
        self.audit.lost(DropReason::WriteFailed, lost.audit);
    }

    /// Renames the file `PATH.1` (shifting older ones up, the oldest removed) and starts a
    /// new one. When that fails the file carries on growing, and the error is logged.
    fn rotate(&mut self) {
        let path = &self.destination.path;
        let numbered = |n: usize| {
            let mut name = path.clone().into_os_string();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        let keep = self.destination.keep;
        let shifted = if keep == 0 {
            std::fs::remove_file(path)
        } else {
            let _ = std::fs::remove_file(numbered(keep));
            for n in (1..keep).rev() {
                match std::fs::rename(numbered(n), numbered(n + 1)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot shift a rotated decision record file")
                    }
                }
            }
            std::fs::rename(path, numbered(1))
        };
        let reopened = shifted.and_then(|()| open(path));
        match reopened {
            Ok(file) => {
                self.file = file;
                self.in_file = 0;
            }
            Err(error) => {
                tracing::error!(%error, path = %path.display(), "cannot rotate the decision records");
                // Carry on in the file we have, rather than fail every write.
                self.in_file = 0;
            }
        }
    }

    /// Logs the first failure of a run of them.
    fn outcome(&mut self, error: Option<std::io::Error>) {
        match error {
            None => self.failed = false,
            Some(error) => {
                if !self.failed {
                    self.failed = true;
                    tracing::error!(%error, path = %self.destination.path.display(), "cannot write the log");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small rotating destination: the file is renamed `.1` (older ones shifted, past `keep`
    /// removed) whenever the next line would not fit, and no line is split or lost among the
    /// files kept.
    #[test]
    fn files_rotate_by_size_and_keep_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("decisions.jsonl");
        let destination = Destination {
            path: path.clone(),
            max_bytes: Some(4096),
            keep: 2,
        };
        let (queue, writer) =
            LineWriter::start("test-writer", destination, 1000, Arc::default()).unwrap();
        let lines = 600;
        for n in 0..lines {
            queue
                .send(Entry::Audit(
                    serde_json::json!({ "n": n, "pad": "x".repeat(40) }),
                ))
                .unwrap();
        }
        drop(queue);
        writer.finish();
        let read = |p: &Path| -> Vec<u64> {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l).unwrap()["n"]
                        .as_u64()
                        .unwrap()
                })
                .collect()
        };
        let numbered = |n: usize| dir.path().join(format!("decisions.jsonl.{n}"));
        assert!(!numbered(3).exists(), "only two rotated files are kept");
        let (oldest, older, current) = (read(&numbered(2)), read(&numbered(1)), read(&path));
        for file in [&numbered(2), &numbered(1), &path] {
            assert!(
                std::fs::metadata(file).unwrap().len() <= 4096,
                "{file:?} over its size"
            );
        }
        let kept: Vec<u64> = oldest
            .iter()
            .chain(&older)
            .chain(&current)
            .copied()
            .collect();
        let first = kept[0];
        assert_eq!(
            kept,
            (first..lines).collect::<Vec<_>>(),
            "the kept files hold the newest lines, whole and in order"
        );
        assert!(first > 0, "older files were removed");
    }
}
