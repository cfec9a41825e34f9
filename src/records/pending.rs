//! The lines the writer ([`super::writer`]) has formatted but the file has not yet taken, each
//! with what it is, so that a line is counted written only once the file took its last byte,
//! and counted lost when a write fails (docs/records.md §1, "Never blocking a decision").
//!
//! A buffer in front of the file (a `BufWriter`) would say a line was written when it was only
//! copied into memory; the write that fails comes later, at a flush, for lines already counted.
//! Here the bytes are handed to the file by [`Pending::flush_to`], which knows how far the file
//! got and so which lines it took whole:
//!
//! * a line the file took whole is **written**;
//! * a line the file did not start is **lost**, and a gap line saying so takes its place, at
//!   the head of what is written next, so that the gap lines of a stream still add up to the
//!   records missing from it (a gap line that is itself lost is owed again, with the same
//!   reason and count);
//! * a line the file took part of (a short write, then an error) is kept and finished first
//!   when the file takes writes again, so that no torn line sits in the middle of the stream.

use std::io::{ErrorKind, Write};

use super::format;
use super::record::{DropReason, Gap};

/// What a line is: how it is counted once written or lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An audit log entry.
    Audit,
    /// A decision record.
    Record,
    /// A gap line: `dropped` records lost for `reason` before it.
    Gap(DropReason, u64),
}

/// Lines by what they are: audit entries, decision records, and the records the gap lines
/// among them report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub audit: u64,
    pub records: u64,
    /// Records reported by gap lines, by reason ([`DropReason::ALL`]'s order).
    pub gap_records: [u64; 2],
}

impl Tally {
    fn add(&mut self, kind: Kind) {
        match kind {
            Kind::Audit => self.audit += 1,
            Kind::Record => self.records += 1,
            Kind::Gap(reason, dropped) => self.gap_records[reason_index(reason)] += dropped,
        }
    }
}

fn reason_index(reason: DropReason) -> usize {
    match reason {
        DropReason::QueueFull => 0,
        DropReason::WriteFailed => 1,
    }
}

/// What one [`Pending::flush_to`] did.
#[derive(Debug, Default)]
pub struct Flushed {
    /// Lines the file took whole.
    pub written: Tally,
    /// Lines the file did not take (their records are owed a gap line, already queued).
    pub lost: Tally,
    /// Bytes the file took.
    pub taken: u64,
    /// Why the file stopped taking bytes, when it did.
    pub error: Option<std::io::Error>,
}

/// Formatted lines waiting for the file.
#[derive(Debug, Default)]
pub struct Pending {
    bytes: Vec<u8>,
    /// Where each line ends in `bytes` (past its `\n`), and what it is.
    lines: Vec<(usize, Kind)>,
    /// The first line is already partly in the file: it is finished, never dropped.
    torn: bool,
}

impl Pending {
    pub fn with_capacity(bytes: usize) -> Self {
        Pending {
            bytes: Vec::with_capacity(bytes),
            lines: Vec::with_capacity(bytes / 256),
            torn: false,
        }
    }

    /// Bytes waiting.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Whether a line is partly in the file: it must be finished in the same file (no
    /// rotation before it is).
    pub fn torn(&self) -> bool {
        self.torn
    }

    /// Queues one line (`line` holds it, its `\n` included).
    pub fn push(&mut self, kind: Kind, line: &[u8]) {
        self.bytes.extend_from_slice(line);
        self.lines.push((self.bytes.len(), kind));
    }

    /// Hands every waiting byte to `out` (a file: what `write` took is the kernel's), and
    /// counts the lines it took whole and those it did not. After a failure the lost records
    /// are owed a gap line, queued here, first after a torn line.
    pub fn flush_to(&mut self, out: &mut impl Write) -> Flushed {
        let mut done = 0;
        let mut error = None;
        while done < self.bytes.len() {
            match out.write(&self.bytes[done..]) {
                Ok(0) => {
                    error = Some(ErrorKind::WriteZero.into());
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let mut flushed = Flushed::default();
        let mut start = 0;
        let mut kept = None;
        for (index, &(end, kind)) in self.lines.iter().enumerate() {
            if end <= done {
                flushed.written.add(kind);
            } else if start < done || (index == 0 && self.torn) {
                // In the file in part: finished before anything else once the file takes
                // writes again.
                kept = Some((start.max(done), end, kind));
            } else {
                flushed.lost.add(kind);
            }
            start = end;
        }
        flushed.error = error;
        flushed.taken = done as u64;
        match kept {
            Some((from, end, kind)) => {
                self.bytes.truncate(end);
                self.bytes.drain(..from);
                self.lines.clear();
                self.lines.push((self.bytes.len(), kind));
                self.torn = true;
            }
            None => {
                self.bytes.clear();
                self.lines.clear();
                self.torn = false;
            }
        }
        self.owe_gaps(&flushed.lost);
        flushed
    }

    /// Gap lines for the records `lost` stood for: decision records lost to the write, and
    /// the records of gap lines lost with them (owed again, with their own reason).
    fn owe_gaps(&mut self, lost: &Tally) {
        let write_failed = lost.records + lost.gap_records[reason_index(DropReason::WriteFailed)];
        let queue_full = lost.gap_records[reason_index(DropReason::QueueFull)];
        for (reason, dropped) in [
            (DropReason::QueueFull, queue_full),
            (DropReason::WriteFailed, write_failed),
        ] {
            if dropped > 0 {
                format::write_gap(&mut self.bytes, &Gap::now(reason, dropped));
                self.bytes.push(b'\n');
                self.lines
                    .push((self.bytes.len(), Kind::Gap(reason, dropped)));
            }
        }
    }

    /// Gives up on everything waiting (the writer is stopping and the file refused it): the
    /// lines, counted lost. A torn line stays cut short at the end of the file, where a reader
    /// expects a writer stopped mid-line (docs/records.md §3).
    pub fn abandon(&mut self) -> Tally {
        let mut lost = Tally::default();
        for &(_, kind) in &self.lines {
            lost.add(kind);
        }
        self.bytes.clear();
        self.lines.clear();
        self.torn = false;
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that takes `room` more bytes, then refuses until given room again; a write is
    /// cut short at the limit, as a filling disk cuts it.
    struct Disk {
        taken: Vec<u8>,
        room: usize,
    }

    impl Write for Disk {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::from_raw_os_error(28)); // ENOSPC
            }
            let n = bytes.len().min(self.room);
            self.taken.extend_from_slice(&bytes[..n]);
            self.room -= n;
            Ok(n)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn record(seq: u64) -> Vec<u8> {
        format!("{{\"v\":1,\"kind\":\"decision\",\"seq\":{seq}}}\n").into_bytes()
    }

    /// The stream as the file holds it: the records' `seq`s and the gaps' counts by reason.
    fn read(disk: &Disk) -> (Vec<u64>, u64, u64) {
        let text = std::str::from_utf8(&disk.taken).unwrap();
        let (mut seqs, mut queue_full, mut write_failed) = (Vec::new(), 0, 0);
        for line in text.lines() {
            let value: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: a torn line {line}"));
            match value["kind"].as_str().unwrap() {
                "decision" => seqs.push(value["seq"].as_u64().unwrap()),
                "gap" if value["reason"] == "queue_full" => {
                    queue_full += value["dropped"].as_u64().unwrap()
                }
                "gap" => write_failed += value["dropped"].as_u64().unwrap(),
                other => panic!("{other}"),
            }
        }
        assert!(text.is_empty() || text.ends_with('\n'), "{text}");
        (seqs, queue_full, write_failed)
    }

    /// A disk that is full from the start, then has room again: nothing is counted written
    /// while it refuses, every record is counted lost once, and when it recovers the first
    /// line written is the gap that counts them, before the next record.
    #[test]
    fn a_full_disk_loses_counted_records_and_the_gap_comes_first_on_recovery() {
        let mut disk = Disk {
            taken: Vec::new(),
            room: 0,
        };
        let mut pending = Pending::default();
        let mut lost_records = 0;
        for round in 0..3u64 {
            for seq in round * 10..round * 10 + 10 {
                pending.push(Kind::Record, &record(seq));
            }
            let flushed = pending.flush_to(&mut disk);
            assert!(flushed.error.is_some());
            assert_eq!(flushed.written, Tally::default(), "nothing is written");
            assert_eq!(flushed.lost.records, 10);
            lost_records += flushed.lost.records;
        }
        // A gap line reported by the recorder (records the queue could not take), lost too.
        pending.push(
            Kind::Gap(DropReason::QueueFull, 5),
            b"{\"v\":1,\"kind\":\"gap\",\"reason\":\"queue_full\",\"dropped\":5}\n",
        );
        assert!(pending.flush_to(&mut disk).error.is_some());
        assert!(disk.taken.is_empty());

        disk.room = usize::MAX;
        pending.push(Kind::Record, &record(35));
        let flushed = pending.flush_to(&mut disk);
        assert!(flushed.error.is_none());
        assert_eq!(flushed.written.records, 1);
        assert!(pending.is_empty());
        let (seqs, queue_full, write_failed) = read(&disk);
        assert_eq!(seqs, [35]);
        assert_eq!((queue_full, write_failed), (5, lost_records));
        let text = std::str::from_utf8(&disk.taken).unwrap();
        assert!(
            text.lines().last().unwrap().contains("\"seq\":35"),
            "the gaps come before the next record: {text}"
        );
    }

    /// A disk that fills in the middle of a line: the lines it took whole are written, the
    /// cut line is finished first when there is room again (never dropped, never torn in the
    /// stream), the lines after it are lost and counted by a gap after it.
    #[test]
    fn a_line_cut_short_is_finished_first_and_the_stream_stays_whole() {
        let lines: Vec<Vec<u8>> = (0..6).map(record).collect();
        let room = lines[0].len() + lines[1].len() + 7;
        let mut disk = Disk {
            taken: Vec::new(),
            room,
        };
        let mut pending = Pending::default();
        for line in &lines {
            pending.push(Kind::Record, line);
        }
        let flushed = pending.flush_to(&mut disk);
        assert!(flushed.error.is_some());
        assert_eq!(flushed.written.records, 2);
        assert_eq!(flushed.lost.records, 3, "records 3, 4, 5");
        assert!(pending.torn(), "record 2 is in the file in part");

        // Still full: the torn line is kept, the gap is lost and owed again.
        let flushed = pending.flush_to(&mut disk);
        assert_eq!(
            (flushed.written, flushed.lost.records),
            (Tally::default(), 0)
        );
        assert!(pending.torn());

        disk.room = usize::MAX;
        pending.push(Kind::Record, &record(6));
        let flushed = pending.flush_to(&mut disk);
        assert!(flushed.error.is_none());
        assert_eq!(
            flushed.written.records, 2,
            "record 2 finished, and record 6"
        );
        let (seqs, queue_full, write_failed) = read(&disk);
        assert_eq!(seqs, [0, 1, 2, 6]);
        assert_eq!((queue_full, write_failed), (0, 3));
    }

    /// Audit entries are counted apart from records, and stopping on a refusing file counts
    /// what is left as lost.
    #[test]
    fn audit_entries_are_counted_and_abandoned_lines_are_lost() {
        let mut disk = Disk {
            taken: Vec::new(),
            room: 0,
        };
        let mut pending = Pending::default();
        pending.push(Kind::Audit, b"{\"rpc\":\"Authorize\"}\n");
        pending.push(Kind::Audit, b"{\"rpc\":\"Apply\"}\n");
        let flushed = pending.flush_to(&mut disk);
        assert_eq!((flushed.lost.audit, flushed.lost.records), (2, 0));
        assert!(pending.is_empty(), "lost audit entries owe no gap line");
        pending.push(Kind::Audit, b"{\"rpc\":\"Delete\"}\n");
        assert_eq!(pending.abandon().audit, 1);
        assert!(pending.is_empty());
    }
}
