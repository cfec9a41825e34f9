//! `authzd replay` (docs/records.md §3): recorded decisions re-decided on a candidate policy,
//! and every decision that flips reported, grouped.
//!
//! The record files are read as a stream, one line at a time into one reused buffer, so a file
//! larger than memory replays in constant memory: what grows is the report, one entry per
//! distinct flipped request (subject, action, scope) with at most [`MAX_CALLERS`] caller names
//! each. A record is re-decided on the candidate policy exactly as the server decides it (the
//! same engine, content included, no cache); the old answer is the recorded one, or the old
//! policy's when one is given. A *flip* is a change of `allowed`: a subject that gains access
//! or loses it. Deny and no opinion both refuse, so a change between them is counted apart
//! (`changed_not_flipped`), not reported as a flip.

pub mod report;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::engine::{Authorize, Decision, Engine};
use crate::records::format::{read_line, Line, ReadDecision};
use crate::request::Action;

/// Caller names kept per flipped request; more are counted, not named.
pub const MAX_CALLERS: usize = 20;

/// The longest record line read (a record carries at most one request's content, which the
/// server bounds at 4 MiB; as JSON text that is at most a few times more).
pub const MAX_LINE_BYTES: usize = 32 << 20;

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot read `{path}`: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `file:line: what is wrong`.
    #[error("{path}:{line}: {message}")]
    Record {
        path: PathBuf,
        line: u64,
        message: String,
    },
}

/// One flipped request: who, what, where, and in which direction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlipKey {
    /// Allowed on the candidate policy (and not before).
    pub gain: bool,
    pub user: String,
    pub groups: Vec<String>,
    /// The action, every deciding field of it (its namespace is the scope).
    pub action: Action,
}

/// What is known of one flipped request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flip {
    /// Records of it that flipped.
    pub count: u64,
    /// The old answers they flipped from, and how many of each.
    pub from: BTreeMap<&'static str, u64>,
    /// The candidate policy's answer.
    pub to: &'static str,
    /// Callers that asked it (the first [`MAX_CALLERS`]), and whether there were more.
    pub callers: BTreeSet<String>,
    pub more_callers: bool,
    /// The first record of it, to look it up.
    pub first_seq: u64,
}

/// The outcome of a replay.
#[derive(Debug, Default)]
pub struct Replayed {
    pub files: usize,
    pub records: u64,
    /// Records lost when they were written (gap lines), per reason.
    pub gaps: BTreeMap<String, u64>,
    /// Whether the old answers are the old policy's (else the recorded ones).
    pub old_policy: bool,
    /// Records whose content the candidate policy (or the old one) cannot read: the server
    /// would refuse them rather than answer.
    pub refused: u64,
    /// Records whose answer changes between deny and no opinion (allowed either way).
    pub changed_not_flipped: u64,
    pub flips: HashMap<FlipKey, Flip>,
}

impl Replayed {
    /// Records that flipped to allowed (`true`) or from it (`false`).
    pub fn flipped_to(&self, allowed: bool) -> u64 {
        self.flips
            .iter()
            .filter(|(key, _)| key.gain == allowed)
            .map(|(_, flip)| flip.count)
            .sum()
    }

    pub fn flipped(&self) -> u64 {
        self.flips.values().map(|flip| flip.count).sum()
    }
}

/// Replays every record of `files`: re-decided on `new`, compared with `old`'s answer when
/// given, else with the recorded one.
pub fn replay(
    files: &[PathBuf],
    new: &Engine,
    old: Option<&Engine>,
) -> Result<Replayed, ReplayError> {
    let mut replayed = Replayed {
        files: files.len(),
        old_policy: old.is_some(),
        ..Replayed::default()
    };
    for path in files {
        let file = std::fs::File::open(path).map_err(|source| ReplayError::Read {
            path: path.clone(),
            source,
        })?;
        replay_stream(
            path,
            std::io::BufReader::with_capacity(1 << 20, file),
            new,
            old,
            &mut replayed,
        )?;
    }
    Ok(replayed)
}

/// One record file, line by line.
fn replay_stream(
    path: &Path,
    mut reader: impl BufRead,
    new: &Engine,
    old: Option<&Engine>,
    replayed: &mut Replayed,
) -> Result<(), ReplayError> {
    let mut line = String::new();
    let mut number = 0u64;
    loop {
        line.clear();
        let read = std::io::Read::take(&mut reader, MAX_LINE_BYTES as u64 + 1)
            .read_line(&mut line)
            .map_err(|source| ReplayError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        if read == 0 {
            return Ok(());
        }
        number += 1;
        let error = |message: String| ReplayError::Record {
            path: path.to_path_buf(),
            line: number,
            message,
        };
        if line.len() > MAX_LINE_BYTES {
            return Err(error(format!("a line over {MAX_LINE_BYTES} bytes")));
        }
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        match read_line(text) {
            Ok(Line::Decision(record)) => decide(&record, new, old, replayed),
            Ok(Line::Gap { reason, dropped }) => {
                *replayed.gaps.entry(reason).or_default() += dropped;
            }
            Ok(Line::Other) => {}
            // A writer killed mid-line leaves the last line cut: say so, and stop there.
            Err(message) if !line.ends_with('\n') => {
                tracing::warn!(
                    path = %path.display(),
                    line = number,
                    "the last line is cut short ({message}): not replayed"
                );
                return Ok(());
            }
            Err(message) => return Err(error(message)),
        }
    }
}

/// `engine`'s answer to the record's request, as the server would give it (`None`: refused,
/// content the policy reads is unreadable).
fn answer(engine: &Engine, record: &ReadDecision) -> Option<Decision> {
    let request = crate::request::RequestRef {
        user: record.user.as_borrowed(),
        action: record.action.as_borrowed(),
        content: record.content.as_ref(),
    };
    engine
        .decide_content(request)
        .ok()
        .map(|decided| decided.response.decision)
}

fn decide(record: &ReadDecision, new: &Engine, old: Option<&Engine>, replayed: &mut Replayed) {
    replayed.records += 1;
    let before = match old {
        Some(engine) => answer(engine, record),
        None => Some(record.decision),
    };
    let (Some(before), Some(after)) = (before, answer(new, record)) else {
        replayed.refused += 1;
        return;
    };
    let (was, is) = (before == Decision::Allow, after == Decision::Allow);
    if was == is {
        if before != after {
            replayed.changed_not_flipped += 1;
        }
        return;
    }
    let key = FlipKey {
        gain: is,
        user: record.user.name.clone(),
        groups: record.user.groups.clone(),
        action: record.action.clone(),
    };
    let flip = replayed.flips.entry(key).or_insert_with(|| Flip {
        to: crate::records::format::decision_name(after),
        first_seq: record.seq,
        ..Flip::default()
    });
    flip.count += 1;
    *flip
        .from
        .entry(crate::records::format::decision_name(before))
        .or_default() += 1;
    if !flip.callers.contains(&record.caller) {
        if flip.callers.len() < MAX_CALLERS {
            flip.callers.insert(record.caller.clone());
        } else {
            flip.more_callers = true;
        }
    }
}

/// A gate of `--fail-on-gain` / `--fail-on-loss`: whether a flipped request of `user` in
/// `groups` matches the glob (its user, or one of its groups, as `authzd diff` matches
/// subjects).
pub fn gate_matches(pattern: &str, user: &str, groups: &[String]) -> bool {
    use crate::engine::delta::glob_matches;
    glob_matches(pattern, user) || groups.iter().any(|g| glob_matches(pattern, g))
}
