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
//! * **Losses are written down.** A decision record the file refuses (a write error) is
//!   counted as `write_failed` and, once a write succeeds again, a gap line says how many
//!   were lost; records dropped before the queue (`queue_full`) are reported by their sender
//!   ([`super::decision`]). Audit entries lost to a write error are logged, as they always were.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::format;
use super::record::{DecisionRecord, DropReason, Gap, RecordCounts};

/// How long the writer sleeps once the queue is empty, after a poll that found entries.
pub const POLL: Duration = Duration::from_millis(2);

/// How long it sleeps after a poll that found none: an idle server wakes 50 times a second,
/// not 500 (a wake-up costs tens of microseconds of a virtual machine's time).
pub const IDLE_POLL: Duration = Duration::from_millis(20);

/// The buffer between the writer and the file: flushed whenever the queue runs empty.
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
    /// for `capacity` waiting entries. A FIFO's open waits here for its reader.
    pub fn start(
        name: &str,
        destination: Destination,
        capacity: usize,
        counts: Arc<RecordCounts>,
    ) -> Result<(SyncSender<Entry>, LineWriter), OpenError> {
        let open_error = |source| OpenError {
            path: destination.path.clone(),
            source,
        };
        let file = open(&destination.path).map_err(open_error)?;
        let rotates = destination.max_bytes.is_some()
            && file.metadata().map(|m| m.is_file()).unwrap_or(false);
        let written = if rotates {
            file.metadata().map(|m| m.len()).unwrap_or(0)
        } else {
            0
        };
        let (queue, entries) = std::sync::mpsc::sync_channel(capacity.max(1));
        let mut output = Output {
            out: BufWriter::with_capacity(BUFFER_BYTES, file),
            written,
            rotates,
            destination: destination.clone(),
            failed: false,
            line: Vec::with_capacity(1024),
            counts,
            unreported_failures: 0,
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
    out: BufWriter<File>,
    /// Bytes in the current file (rotating destinations only).
    written: u64,
    rotates: bool,
    destination: Destination,
    /// Whether the last write failed (an error is logged once per run of failures).
    failed: bool,
    /// The line being formatted, reused.
    line: Vec<u8>,
    counts: Arc<RecordCounts>,
    /// Decision records lost to write errors and not yet reported by a gap line.
    unreported_failures: u64,
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
                    self.flush();
                    std::thread::sleep(if busy { POLL } else { IDLE_POLL });
                    busy = false;
                }
                Err(TryRecvError::Disconnected) => break,
            }
        }
        self.flush();
    }

    fn write(&mut self, entry: Entry) {
        self.line.clear();
        let is_record = matches!(entry, Entry::Decision(_));
        match &entry {
            Entry::Audit(value) => {
                if let Err(error) = serde_json::to_writer(&mut self.line, value) {
                    tracing::error!(%error, "cannot format an audit entry");
                    return;
                }
            }
            Entry::Decision(record) => format::write_decision(&mut self.line, record),
            Entry::Gap(gap) => format::write_gap(&mut self.line, gap),
        }
        self.line.push(b'\n');
        match self.append() {
            Ok(()) => {
                if is_record {
                    self.counts.written.fetch_add(1, Ordering::Relaxed);
                }
                if self.unreported_failures > 0 {
                    self.report_failures();
                }
            }
            Err(()) => {
                if is_record {
                    self.counts.write_failed.fetch_add(1, Ordering::Relaxed);
                    self.unreported_failures += 1;
                }
            }
        }
    }

    /// The gap line for the records lost to write errors since the last one.
    fn report_failures(&mut self) {
        let gap = Gap::now(DropReason::WriteFailed, self.unreported_failures);
        self.line.clear();
        format::write_gap(&mut self.line, &gap);
        self.line.push(b'\n');
        if self.append().is_ok() {
            self.unreported_failures = 0;
        }
    }

    /// Appends the formatted line, rotating first when it would not fit.
    fn append(&mut self) -> Result<(), ()> {
        if let Some(max) = self.destination.max_bytes {
            if self.rotates && self.written > 0 && self.written + self.line.len() as u64 > max {
                self.rotate();
            }
        }
        let result = self.out.write_all(&self.line);
        let ok = self.outcome(result);
        if ok {
            self.written += self.line.len() as u64;
            Ok(())
        } else {
            Err(())
        }
    }

    fn flush(&mut self) {
        let result = self.out.flush();
        self.outcome(result);
    }

    /// Renames the file `PATH.1` (shifting older ones up, the oldest removed) and starts a
    /// new one. When that fails the file carries on growing, and the error is logged.
    fn rotate(&mut self) {
        let flushed = self.out.flush();
        self.outcome(flushed);
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
                self.out = BufWriter::with_capacity(BUFFER_BYTES, file);
                self.written = 0;
            }
            Err(error) => {
                tracing::error!(%error, path = %path.display(), "cannot rotate the decision records");
                // Carry on in the file we have, rather than fail every write.
                self.written = 0;
            }
        }
    }

    /// Whether `result` succeeded; the first failure of a run is logged.
    fn outcome(&mut self, result: std::io::Result<()>) -> bool {
        match result {
            Ok(()) => {
                self.failed = false;
                true
            }
            Err(error) => {
                if !self.failed {
                    self.failed = true;
                    tracing::error!(%error, path = %self.destination.path.display(), "cannot write the log");
                }
                false
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
