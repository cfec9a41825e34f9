//! A commit of several policy files, all or nothing: an intent journal rolled forward.
//!
//! Each file is replaced atomically ([`super::durable`]), but a write whose objects live in
//! several files replaces them one after another, and a process killed in between would leave
//! some new and some old: a binding kept and the narrowing of the role it binds lost. So a
//! commit of more than one file first writes, durably, a journal of what every file will hold
//! ([`JOURNAL_NAME`], in the policy directory), then replaces the files, then removes the
//! journal. Whatever instant the process dies at, the directory holds one of:
//!
//! * no journal (perhaps an unfinished temporary one): no policy file was touched yet, the old
//!   policy is whole; recovery removes the unfinished journal (the write is rolled back);
//! * a journal: the write was validated whole (escalation, ChangeGates, every file parsed back)
//!   before it was written, and every file holds either its content before the write or the
//!   content the journal gives; recovery writes the rest (the write is rolled forward);
//! * no journal and every file in place: the write is done.
//!
//! Recovery ([`Journal::recover`]) runs before the policy is first read at startup and before
//! every reload, under the same lock as commits, so a policy in the middle of a commit is never
//! read. Why a journal rolled forward rather than the alternatives:
//!
//! * not a generation swapped whole (the policy directory a symbolic link to a complete copy,
//!   as Kubernetes' ConfigMap volumes do with `..data`): the directory is the user's, given with
//!   `--policy` (a GitOps checkout, a Helm chart's output, several paths), and files must stay
//!   where they are and be edited in place (ENGINEERING.md, habit L);
//! * forward rather than back: once the journal is durable the write is decided, and most
//!   instants of a commit are after its first file is in place; rolling back would need the
//!   old content of every file in the journal, where a digest of it is enough to check that a
//!   file is still one of the two states the write knows.
//!
//! A file that holds neither (someone edited it after the crash) or a journal that cannot be
//! read (truncated, corrupt) stops recovery with an error naming it, rather than a guess.
//!
//! A commit replaces a file only if it still holds what the commit read (`FileWrite::before`),
//! checked once its new content is durable, right before the rename: a file someone saved
//! meanwhile is left alone, the commit fails with [`StoreError::FileChanged`] and the files it
//! had replaced are put back. (Recovery has no such check to make: it writes only files that
//! hold the content before the write, which it checks first.)
//!
//! # The journal's format
//!
//! One header line, `authzd-commit-journal 1 LENGTH sha256:DIGEST`, then LENGTH bytes of JSON
//! whose SHA-256 is DIGEST: `{"files": [{"path", "before", "after"}]}`, where `path` is relative
//! to the journal's directory (absolute for a file under another `--policy` path), `before` the
//! SHA-256 of the file's bytes when the commit read them (`null`: there was no such file) and
//! `after` the content the commit writes (`null`: it removes the file). The length tells a
//! truncated journal from a corrupt one; the digest catches both. A journal may name only
//! policy files under the policy paths: recovery never writes anywhere else.

use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::durable::{
    read_if_exists, remove_durably, remove_durably_if, sync_dir, temp_prefix, write_atomically,
    write_atomically_over,
};
use crate::policy::load::{Format, LoadError, LoadErrors};
use crate::store::{Result, StoreError};

/// The journal's file name: a dotfile, so that the loader never reads it as policy and the
/// directory watcher ignores it (`policy::load`, "Files and directories"; `store::watch`).
pub const JOURNAL_NAME: &str = ".authzd-commit-journal";

const MAGIC: &str = "authzd-commit-journal";
const VERSION: u32 = 1;

/// One file of a commit: what it holds now, and what the commit makes of it.
#[derive(Clone, Debug)]
pub(super) struct FileWrite {
    pub path: PathBuf,
    /// The file's bytes when the commit read it; `None`: there is no such file.
    pub before: Option<Vec<u8>>,
    /// What the commit writes; `None`: the commit removes the file.
    pub after: Option<String>,
}

impl FileWrite {
    /// `path` as it is now, to become `after`.
    #[cfg(test)]
    pub fn read(path: PathBuf, after: Option<String>) -> Result<Self> {
        let before = read_if_exists(&path)?;
        Ok(FileWrite {
            path,
            before,
            after,
        })
    }

    fn apply(&self) -> Result<()> {
        match &self.after {
            Some(content) => write_atomically(&self.path, content.as_bytes()),
            None => remove_durably(&self.path),
        }
    }

    /// [`Self::apply`], only over the file as the commit read it (`before`): a commit never
    /// replaces a file someone changed while it was being made.
    fn apply_over_before(&self) -> Result<()> {
        let before = self.before.as_deref();
        match &self.after {
            Some(content) => write_atomically_over(&self.path, content.as_bytes(), Some(before)),
            None => remove_durably_if(&self.path, before),
        }
    }

    /// Puts the file back as the commit found it; one it had not replaced yet (the one that
    /// failed, usually) is left alone.
    fn undo(&self) -> Result<()> {
        if read_if_exists(&self.path).is_ok_and(|now| now == self.before) {
            return Ok(());
        }
        match &self.before {
            Some(bytes) => write_atomically(&self.path, bytes),
            None => remove_durably(&self.path),
        }
    }
}

/// What recovery found.
#[derive(Debug, PartialEq, Eq)]
pub enum Recovery {
    /// No journal: no commit was interrupted.
    Clean,
    /// Only unfinished journals: the write had touched no policy file; they were removed.
    RolledBack { unfinished: usize },
    /// A journal: every file it names now holds the write (`written` of them had to be
    /// written, the others were already in place), and the journal is gone.
    RolledForward { files: usize, written: usize },
}

/// Why recovery stopped. The policy directory is left as it was found.
#[derive(Debug, Error)]
pub enum JournalError {
    #[error("this commit journal cannot be read ({reason}). An admin write was interrupted while it was in place, so the policy files may hold part of that write, and authzd will not guess which. Make the policy files what they should be (from version control or a backup), then remove this journal and start authzd again (or, if it is running, send it SIGHUP)")]
    Unreadable { journal: PathBuf, reason: String },
    #[error("`{file}` holds neither its content before the interrupted write this journal records nor the content the write was making: it was changed since. authzd will not guess which to keep: make the files the journal names what they should be (its `after` is what the write was making), then remove this journal and start authzd again (or, if it is running, send it SIGHUP)")]
    Diverged { journal: PathBuf, file: String },
    #[error("cannot finish the interrupted write this journal records (`{path}`: {source}); fix the cause and start authzd again (or, if it is running, send it SIGHUP)")]
    Io {
        journal: PathBuf,
        path: String,
        source: std::io::Error,
    },
}

impl JournalError {
    /// As the loader reports a problem: the journal is the file at fault.
    pub fn into_load_errors(self) -> LoadErrors {
        let journal = match &self {
            JournalError::Unreadable { journal, .. }
            | JournalError::Diverged { journal, .. }
            | JournalError::Io { journal, .. } => journal.display().to_string(),
        };
        LoadErrors(vec![LoadError {
            file: journal,
            line: 0,
            message: self.to_string(),
        }])
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    files: Vec<Entry>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    path: String,
    before: Option<String>,
    after: Option<String>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The intent journal of the directory store's commits (see the module documentation).
pub struct Journal {
    /// The directory the journal lives in, absolute.
    dir: PathBuf,
    path: PathBuf,
    /// The policy paths, absolute: the only places a journal may write.
    roots: Vec<PathBuf>,
    /// A commit left its journal behind (it failed half-way and could not be undone, or the
    /// journal could not be removed): no commit may write another until recovery ran.
    unfinished: AtomicBool,
}

impl Journal {
    /// The journal of a store over `roots` (the `--policy` paths), kept in `dir`.
    pub fn new(dir: &Path, roots: &[PathBuf]) -> Self {
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let dir = absolute(dir);
        Journal {
            path: dir.join(JOURNAL_NAME),
            dir,
            roots: roots.iter().map(|r| absolute(r)).collect(),
            unfinished: AtomicBool::new(false),
        }
    }

    /// Whether a commit left its journal behind for recovery to finish.
    pub fn unfinished(&self) -> bool {
        self.unfinished.load(Ordering::SeqCst)
    }

    /// The commit: makes every file what `files` says, all or nothing across a crash. The one
    /// function of the directory store that writes policy files; checks of what a file holds
    /// go before it.
    ///
    /// On an error the files already written are put back as they were and the error is
    /// returned; if even that fails the journal stays (recovery finishes the write at the next
    /// reload or restart) and the error says the outcome is unknown.
    pub(super) fn write_files(&self, files: &[FileWrite]) -> Result<()> {
        match files {
            [] => return Ok(()),
            // One rename is atomic already: a journal would add fsyncs and nothing else.
            [file] => return file.apply_over_before(),
            _ => {}
        }
        if let Err(error) = self.write_journal(files) {
            // The journal may be in place though its directory's fsync failed: it must go,
            // or recovery would make the write this call refuses.
            return Err(self.undo(&[], error));
        }
        for (at, file) in files.iter().enumerate() {
            if let Err(error) = file.apply_over_before() {
                // A file found changed was not touched, and putting it "back" would destroy
                // the change: only the files before it are undone. Any other failure may
                // have replaced it (a rename made, its directory's fsync failed).
                let written = match error {
                    StoreError::FileChanged(_) => &files[..at],
                    _ => &files[..=at],
                };
                return Err(self.undo(written, error));
            }
        }
        if let Err(error) = self.remove_journal() {
            // Every file is in place: the write is made. The journal must still go before
            // any other commit changes these files (recovery would find them changed).
            self.unfinished.store(true, Ordering::SeqCst);
            tracing::warn!(journal = %self.path.display(), %error, "a policy write is in place but its journal could not be removed; the next commit removes it first");
        }
        Ok(())
    }

    /// The journal of `files`, written durably: after this, recovery rolls the write forward.
    pub(super) fn write_journal(&self, files: &[FileWrite]) -> Result<()> {
        write_atomically(&self.path, &self.encode(files))
    }

    /// Removes the journal durably: after this, the write is done.
    fn remove_journal(&self) -> Result<()> {
        remove_durably(&self.path)
    }

    /// Puts `written` back as they were before a commit that failed with `error`, and removes
    /// the journal; the error to answer.
    fn undo(&self, written: &[FileWrite], error: StoreError) -> StoreError {
        let undone = written
            .iter()
            .rev()
            .try_for_each(FileWrite::undo)
            .and_then(|()| self.remove_journal());
        match undone {
            Ok(()) => error,
            Err(undo_error) => {
                self.unfinished.store(true, Ordering::SeqCst);
                StoreError::Unavailable(format!(
                    "the write failed half-way ({error}) and could not be undone ({undo_error}); its journal `{}` finishes it at the next reload or restart, so its outcome is unknown: retrying it is safe",
                    self.path.display()
                ))
            }
        }
    }

    fn encode(&self, files: &[FileWrite]) -> Vec<u8> {
        let body = Body {
            files: files
                .iter()
                .map(|file| Entry {
                    path: self.journal_path(&file.path),
                    before: file.before.as_deref().map(sha256_hex),
                    after: file.after.clone(),
                })
                .collect(),
        };
        // A struct of strings always serializes.
        let json = serde_json::to_vec(&body).unwrap_or_default();
        let mut out = format!(
            "{MAGIC} {VERSION} {} sha256:{}\n",
            json.len(),
            sha256_hex(&json)
        )
        .into_bytes();
        out.extend_from_slice(&json);
        out
    }

    /// `path` as the journal names it: relative to the journal's directory when under it, so
    /// that a directory moved (a volume mounted elsewhere) is still recovered.
    fn journal_path(&self, path: &Path) -> String {
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        match absolute.strip_prefix(&self.dir) {
            Ok(relative)
                if relative
                    .components()
                    .all(|c| matches!(c, Component::Normal(_))) =>
            {
                relative.display().to_string()
            }
            _ => absolute.display().to_string(),
        }
    }

    /// Where a journal's `path` is, if it is a policy file under the policy paths.
    fn resolve(&self, path: &str) -> Option<PathBuf> {
        let path = Path::new(path);
        let path = if path.is_absolute() {
            path.to_path_buf()
        } else if path.components().all(|c| matches!(c, Component::Normal(_))) {
            self.dir.join(path)
        } else {
            return None;
        };
        let name = path.file_name()?.to_str()?;
        Format::from_name(name)?;
        let under_a_root = self.roots.iter().any(|root| match path.strip_prefix(root) {
            // An explicitly named policy file.
            Ok(rest) if rest.as_os_str().is_empty() => true,
            // A file the loader reads in a policy directory: no `..`, no dot-entries.
            Ok(rest) => rest.components().all(
                |c| matches!(c, Component::Normal(n) if !n.as_encoded_bytes().starts_with(b".")),
            ),
            Err(_) => false,
        });
        under_a_root.then_some(path)
    }

    fn unreadable(&self, reason: impl Into<String>) -> JournalError {
        JournalError::Unreadable {
            journal: self.path.clone(),
            reason: reason.into(),
        }
    }

    /// The journal's entries, each with the file it names, or why it cannot be trusted.
    fn decode(&self, bytes: &[u8]) -> std::result::Result<Vec<(PathBuf, Entry)>, JournalError> {
        if bytes.is_empty() {
            return Err(self.unreadable("it is empty"));
        }
        let Some(newline) = bytes.iter().position(|b| *b == b'\n') else {
            return Err(self.unreadable("truncated: its header line is incomplete"));
        };
        let (header, body) = (&bytes[..newline], &bytes[newline + 1..]);
        let header =
            std::str::from_utf8(header).map_err(|_| self.unreadable("its header is not text"))?;
        let fields: Vec<&str> = header.split(' ').collect();
        let [magic, version, length, digest] = fields[..] else {
            return Err(self.unreadable(format!("its header `{header}` is not a journal's")));
        };
        if magic != MAGIC {
            return Err(self.unreadable(format!("its header `{header}` is not a journal's")));
        }
        if version != VERSION.to_string() {
            return Err(self.unreadable(format!(
                "it is of format version {version}; this authzd reads version {VERSION}"
            )));
        }
        let length: usize = length
            .parse()
            .map_err(|_| self.unreadable(format!("its header `{header}` is not a journal's")))?;
        if body.len() < length {
            return Err(self.unreadable(format!(
                "truncated: its header announces {length} bytes and {} follow",
                body.len()
            )));
        }
        if body.len() > length || digest != format!("sha256:{}", sha256_hex(body)) {
            return Err(self.unreadable("corrupt: its content does not match its checksum"));
        }
        let body: Body =
            serde_json::from_slice(body).map_err(|e| self.unreadable(format!("corrupt: {e}")))?;
        body.files
            .into_iter()
            .map(|entry| match self.resolve(&entry.path) {
                Some(path) => Ok((path, entry)),
                None => Err(self.unreadable(format!(
                    "it names `{}`, which is not a policy file under the policy paths",
                    entry.path
                ))),
            })
            .collect()
    }

    /// Finishes a commit a killed (or failed) writer left: run before the policy is read at
    /// startup and before every reload, under the lock commits hold. Logs what it found and
    /// what it did.
    pub fn recover(&self) -> std::result::Result<Recovery, JournalError> {
        let unfinished = self.remove_unfinished_journals();
        let bytes = match read_if_exists(&self.path) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                self.unfinished.store(false, Ordering::SeqCst);
                if unfinished == 0 {
                    return Ok(Recovery::Clean);
                }
                tracing::warn!(
                    journal = %self.path.display(),
                    unfinished,
                    "an admin write was interrupted before its journal was complete, so before it touched any policy file: rolled back (its unfinished journal removed; the policy is as it was before that write)"
                );
                return Ok(Recovery::RolledBack { unfinished });
            }
            Err(error) => return Err(self.io_error(error)),
        };
        let entries = self.decode(&bytes)?;
        // Every file is checked before any is written: a journal that does not fit the
        // directory changes nothing.
        let mut pending = Vec::new();
        for (path, entry) in &entries {
            let now = read_if_exists(path).map_err(|e| self.io_error(e))?;
            let written = match (&now, &entry.after) {
                (Some(now), Some(after)) => now == after.as_bytes(),
                (None, None) => true,
                _ => false,
            };
            if written {
                continue;
            }
            let before = match (&now, &entry.before) {
                (Some(now), Some(digest)) => sha256_hex(now) == *digest,
                (None, None) => true,
                _ => false,
            };
            if !before {
                return Err(JournalError::Diverged {
                    journal: self.path.clone(),
                    file: path.display().to_string(),
                });
            }
            pending.push(FileWrite {
                path: path.clone(),
                before: None,
                after: entry.after.clone(),
            });
        }
        for file in &pending {
            file.apply().map_err(|e| self.io_error(e))?;
        }
        self.remove_journal().map_err(|e| self.io_error(e))?;
        self.unfinished.store(false, Ordering::SeqCst);
        tracing::warn!(
            journal = %self.path.display(),
            files = entries.len(),
            written = pending.len(),
            already_in_place = entries.len() - pending.len(),
            "an admin write was interrupted after its journal was complete: rolled forward (every file it names now holds that write; the journal removed)"
        );
        Ok(Recovery::RolledForward {
            files: entries.len(),
            written: pending.len(),
        })
    }

    /// Removes the temporary files of journals whose writing was interrupted; how many.
    fn remove_unfinished_journals(&self) -> usize {
        let prefix = temp_prefix(JOURNAL_NAME);
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => removed += 1,
                    Err(error) => {
                        tracing::warn!(file = %entry.path().display(), %error, "cannot remove an unfinished commit journal")
                    }
                }
            }
        }
        if removed > 0 {
            let _ = sync_dir(&self.dir);
        }
        removed
    }

    /// An I/O failure of recovery (the durable primitives report a [`StoreError::Io`]).
    fn io_error(&self, error: StoreError) -> JournalError {
        let (path, source) = match error {
            StoreError::Io { path, source } => (path, source),
            other => (
                self.path.display().to_string(),
                std::io::Error::other(other.to_string()),
            ),
        };
        JournalError::Io {
            journal: self.path.clone(),
            path,
            source,
        }
    }
}

#[cfg(test)]
mod tests;
