//! The policy directory as a store backend: the directory is the single source of truth.
//!
//! An admin write edits, in the files that hold its objects, those objects' documents and
//! nothing else ([`super::documents`]: comments, key order, other documents and the objects
//! of other API groups stay byte for byte); a new object gets a document of its own in
//! `KIND.NAMESPACE.NAME.yaml` in the first directory given with `--policy`. The new content of
//! every file is parsed in memory before anything touches the disk, so a write that would not
//! load back changes nothing. The files are then written by one commit, all or nothing: each
//! atomically and durably ([`super::durable`]), and a write of several files under an intent
//! journal rolled forward after a crash ([`super::journal`]).
//!
//! The store never overwrites what it did not read: it keeps a SHA-256 of every file as it
//! loaded it, and a write whose file on disk is anything else (a hand edit, valid or not, a
//! half-written file, another process's write, a file removed or created by hand) is refused
//! with [`StoreError::FileChanged`], naming the file, and nothing is written. The digests
//! change only with the policy in force: a reload the store rejects leaves them as they were,
//! so a file whose edit was rejected stays protected until it is fixed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::policy::load::{load_paths_observing, LoadError, LoadErrors, LoadOptions};
use crate::policy::model::{PolicyObject, PolicySet};
use crate::store::documents::{edit_file, FileEdit};
use crate::store::durable::{read_if_exists, remove_stale_temp_files};
use crate::store::journal::{FileWrite, Journal, JournalError};
use crate::store::{
    objects, Backend, Commit, CommitError, ObjectRef, ObjectView, Result, Store, StoreError,
};

/// The policy directory as the store's backend (see the module documentation). Revisions are
/// the directory's own: 1 for the policy read at startup, then one more per commit or reload
/// that changes something; they are not persisted (the directory has none).
pub struct DirectoryBackend {
    files: Arc<Files>,
    /// The revision of the policy last fed to the store: a commit is made only if the store
    /// validated it against this one. Held across the commit or reload and its feeding, so
    /// the feed delivers revisions in order.
    ///
    /// INVARIANT: held by every commit from its first file written to its journal removed, and
    /// by every reload (the watcher's, SIGHUP's) from the journal's recovery to the end of its
    /// read: a reload never reads the directory in the middle of this process's own commit.
    /// (Commits run on the store's committer task, which nothing cancels while the runtime
    /// runs, so the lock is not released while a commit's file work goes on.)
    head: tokio::sync::Mutex<u64>,
}

/// Where the policy's files are, and how they are read and committed.
struct Files {
    paths: Vec<PathBuf>,
    /// Where new objects are created: the first directory among `paths`.
    write_dir: Option<PathBuf>,
    /// The intent journal of commits of several files, in `write_dir` (beside the first
    /// policy file when no directory is given).
    journal: Journal,
    options: LoadOptions,
    /// Why this server only follows the directory, if it does (`--read-only`, a directory it
    /// cannot write; see `store::lock`): it then writes nothing at all, not even the journal's
    /// recovery or the removal of stale temporary files, which are the writer's to do.
    read_only: Option<String>,
    /// The writer's commit journal, which a follower's read waits for (`lock::wait_for_commit`).
    journal_file: PathBuf,
    /// The SHA-256 of every file as the policy in force was loaded from it (by the name the
    /// loader gives it, which is its objects' `source.file`), kept up to date by commits: a
    /// write refuses to replace a file that is anything else.
    loaded: Mutex<Digests>,
}

/// File name -> SHA-256 of its bytes.
type Digests = HashMap<String, [u8; 32]>;

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    out
}

/// One change to the store: an object's new state, `None` once it is gone.
type Change = (ObjectRef, Option<PolicyObject>);

impl DirectoryBackend {
    /// Touches nothing on disk: recovery and the first read are [`Self::recover_and_read`].
    pub fn new(paths: Vec<PathBuf>, options: LoadOptions) -> Self {
        Self::with_read_only(paths, options, None)
    }

    /// [`Self::new`], read-only when `read_only` says why: the directory is followed (read at
    /// startup, on changes and on SIGHUP) and every write refused with that reason.
    pub fn with_read_only(
        paths: Vec<PathBuf>,
        options: LoadOptions,
        read_only: Option<String>,
    ) -> Self {
        let write_dir = paths.iter().find(|p| p.is_dir()).cloned();
        let journal_dir = match (&write_dir, paths.first()) {
            (Some(dir), _) => dir.clone(),
            (None, Some(file)) => file
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
            (None, None) => PathBuf::from("."),
        };
        let journal = Journal::new(&journal_dir, &paths);
        let journal_file = journal_dir.join(crate::store::journal::JOURNAL_NAME);
        Self {
            files: Arc::new(Files {
                paths,
                write_dir,
                journal,
                options,
                read_only,
                journal_file,
                loaded: Mutex::new(Digests::new()),
            }),
            head: tokio::sync::Mutex::new(1),
        }
    }

    pub fn write_dir(&self) -> Option<&Path> {
        self.files.write_dir.as_deref()
    }

    /// Startup: finishes a commit a killed server left (rolled forward or back, logged; a
    /// journal that cannot be read is the error), removes stale temporary files, then reads
    /// the whole policy. Nothing is served before this returns.
    pub fn recover_and_read(&self) -> std::result::Result<PolicySet, LoadErrors> {
        let (policy, digests) = self.files.read_all()?;
        self.files.set_loaded(digests);
        if let (Some(dir), None) = (&self.files.write_dir, &self.files.read_only) {
            remove_stale_temp_files(dir);
        }
        Ok(policy)
    }

    /// The revision the store opens at (the directory read at startup).
    pub fn revision(&self) -> u64 {
        1
    }

    /// Reads the whole policy again and feeds it to `store` if it changed; the caller holds
    /// `head`.
    async fn reload_locked(
        &self,
        head: &mut u64,
        store: &Store,
    ) -> std::result::Result<Option<u64>, LoadErrors> {
        let files = Arc::clone(&self.files);
        let read = off_thread(move || files.read_all())
            .await
            .map_err(|message| {
                LoadErrors(vec![LoadError {
                    file: "policy store".to_string(),
                    line: 0,
                    message,
                }])
            })?;
        let (policy, digests) = read?;
        if *store.policy() == policy {
            // The files may differ (a comment edited) but say the same: they are what the
            // policy in force was loaded from now.
            self.files.set_loaded(digests);
            return Ok(None);
        }
        store.gate_reload(&policy).map_err(|refusal| {
            LoadErrors(vec![LoadError {
                file: "policy store".to_string(),
                line: 0,
                message: format!("the policy read again is rejected: {refusal}"),
            }])
        })?;
        self.files.set_loaded(digests);
        *head += 1;
        store.relisted(policy, *head).await;
        Ok(Some(*head))
    }
}

/// Blocking file work on the blocking pool, so that the async workers serving Authorize never
/// wait for the disk.
async fn off_thread<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> std::result::Result<T, String> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("policy store: {e}"))
}

#[tonic::async_trait]
impl Backend for DirectoryBackend {
    async fn commit(
        &self,
        store: &Store,
        commit: Commit<'_>,
    ) -> std::result::Result<u64, CommitError> {
        // The store refuses writes to a read-only backend before they queue; a backstop.
        if let Some(reason) = &self.files.read_only {
            return Err(CommitError::Failed(StoreError::ReadOnlyStore(
                reason.clone(),
            )));
        }
        let mut head = self.head.lock().await;
        if *head != commit.expected {
            return Err(CommitError::Conflict(*head));
        }
        if self.files.journal.unfinished() {
            // A commit before this one failed half-way and left its journal: recovery
            // finishes it and the policy is read again before any other write, which is then
            // checked again against what that leaves.
            return match self.reload_locked(&mut head, store).await {
                Ok(_) => Err(CommitError::Conflict(*head)),
                Err(errors) => Err(CommitError::Failed(StoreError::Unavailable(format!(
                    "an earlier write left its commit journal unfinished, and finishing it failed: {errors}"
                )))),
            };
        }
        let (files, policy) = (Arc::clone(&self.files), Arc::clone(commit.policy));
        let (upserts, deletes) = (commit.upserts.to_vec(), commit.deletes.to_vec());
        let changes = off_thread(move || files.commit(&policy, &upserts, &deletes))
            .await
            .map_err(|e| {
                CommitError::Failed(StoreError::Io {
                    path: "policy store".into(),
                    source: std::io::Error::other(e),
                })
            })?
            .map_err(CommitError::Failed)?;
        *head += 1;
        store.apply_changes_as(*head, changes, commit.cause).await;
        Ok(*head)
    }

    async fn reload(&self, store: &Store) -> std::result::Result<Option<u64>, LoadErrors> {
        let mut head = self.head.lock().await;
        self.reload_locked(&mut head, store).await
    }

    fn read_only(&self) -> Option<&str> {
        self.files.read_only.as_deref()
    }
}

const MAX_FILE_NAME_PART: usize = 100;

/// A file name for a new object, from characters that are safe everywhere. Each part is cut
/// to [`MAX_FILE_NAME_PART`] characters: object names have no length limit, file names do
/// (255 bytes on most file systems), and a long name must not make a write fail. Objects
/// whose cut names collide share a file, as objects of one file always may.
fn file_name_for(object: &ObjectRef) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .take(MAX_FILE_NAME_PART)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect()
    };
    let kind = object.kind.as_str().to_ascii_lowercase();
    if object.namespace.is_empty() {
        format!("{kind}.{}.yaml", clean(&object.name))
    } else {
        format!(
            "{kind}.{}.{}.yaml",
            clean(&object.namespace),
            clean(&object.name)
        )
    }
}

impl Files {
    /// The whole policy, and the digest of every file it was read from: a commit interrupted
    /// before is finished first (the journal's recovery), so that what is read is never part
    /// of one write.
    fn read_all(&self) -> std::result::Result<(PolicySet, Digests), LoadErrors> {
        // A follower leaves an interrupted commit to the writer (whose lock it does not
        // hold, and whose files it must not write): it reads what the files hold, and the
        // watcher reloads once the writer has finished.
        if self.read_only.is_none() {
            self.journal
                .recover()
                .map_err(JournalError::into_load_errors)?;
        } else {
            crate::store::lock::wait_for_commit(
                &self.journal_file,
                crate::store::lock::FOLLOWER_JOURNAL_WAIT,
            );
        }
        let mut digests = Digests::new();
        // The digest of exactly the text the loader parses: hashing the files again after
        // the load could take in an edit the policy does not hold.
        let loaded = load_paths_observing(&self.paths, &self.options, &mut |name, text| {
            digests.insert(name.to_string(), sha256(text.as_bytes()));
        })?;
        if !loaded.skipped.is_empty() {
            // The load report: what the directory holds besides policy (docs/policy.md §1).
            tracing::info!(
                skipped = loaded.skipped.len(),
                "policy files hold objects of other API groups: {}",
                loaded.skipped
            );
        }
        Ok((loaded.policy, digests))
    }

    fn digests(&self) -> std::sync::MutexGuard<'_, Digests> {
        // The map is replaced or updated whole under the lock; a panic elsewhere while it
        // was held leaves it as consistent as it was.
        self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The policy in force is now the one read from files with these digests.
    fn set_loaded(&self, digests: Digests) {
        *self.digests() = digests;
    }

    /// Refuses to replace `file` unless it holds exactly what the policy in force was loaded
    /// from (`now`: its bytes, `None` when there is no such file).
    fn check_unchanged(&self, file: &str, now: Option<&[u8]>) -> Result<()> {
        let what = match (self.digests().get(file), now) {
            (Some(loaded), Some(now)) if *loaded == sha256(now) => return Ok(()),
            (None, None) => return Ok(()),
            (Some(_), Some(_)) => "was changed on disk since authzd loaded it",
            (Some(_), None) => "was removed since authzd loaded it",
            (None, Some(_)) => "exists on disk but authzd has not loaded it",
        };
        Err(StoreError::FileChanged(format!(
            "`{file}` {what} (a hand edit, a half-written file or another process), and this write would replace it: nothing was written. Finish or fix that edit: once it loads, authzd reloads it (on change or SIGHUP; `authzd status` shows a load error) and the write can be retried. Or undo it"
        )))
    }

    /// Writes `upserts` and `deletes` into the documents that hold them (a new object into
    /// its own file), given the current policy; the changes the store applies: every object
    /// whose stored form changed, the ones written and any whose position moved in an edited
    /// file (explanations carry `file:line`). Nothing is written unless every file is what the
    /// policy was loaded from and every edited file loads back, and the files are written all
    /// or nothing ([`Journal::write_files`]).
    fn commit(
        &self,
        current: &PolicySet,
        upserts: &[PolicyObject],
        deletes: &[ObjectRef],
    ) -> Result<Vec<Change>> {
        let existing = objects(current);
        // file -> what the write does to it.
        let mut edits: BTreeMap<String, FileEdit> = BTreeMap::new();
        for object in deletes {
            let view = existing
                .get(object)
                .ok_or_else(|| StoreError::NotFound(object.clone()))?;
            edits
                .entry(view.file().to_string())
                .or_default()
                .delete
                .push(object.clone());
        }
        for object in upserts {
            let r = ObjectRef::of(object);
            let value = ObjectView::from(object).to_value();
            match existing.get(&r) {
                Some(current) => {
                    edits
                        .entry(current.file().to_string())
                        .or_default()
                        .replace
                        .insert(r, value);
                }
                None => {
                    let dir = self.write_dir.as_ref().ok_or(StoreError::ReadOnly)?;
                    let file = dir.join(file_name_for(&r)).display().to_string();
                    edits.entry(file).or_default().add.push((r, value));
                }
            }
        }

        // Every file read, checked and edited in memory first: nothing is written unless all
        // of them are what the policy was loaded from and load back.
        let mut writes = Vec::with_capacity(edits.len());
        let mut written: Vec<&String> = Vec::with_capacity(edits.len());
        let mut reparsed = PolicySet::default();
        for (file, edit) in &edits {
            let path = PathBuf::from(file);
            let before = read_if_exists(&path)?;
            self.check_unchanged(file, before.as_deref())?;
            let text = match &before {
                // The loader read it as UTF-8, and it is unchanged since.
                Some(bytes) => std::str::from_utf8(bytes)
                    .map_err(|_| StoreError::FileChanged(format!("`{file}` is not UTF-8 text")))?,
                None => "",
            };
            let edited = edit_file(file, text, edit, &self.options)?;
            reparsed.roles.extend(edited.policy.roles);
            reparsed.bindings.extend(edited.policy.bindings);
            reparsed.field_policies.extend(edited.policy.field_policies);
            reparsed.gates.extend(edited.policy.gates);
            if edited.text.as_deref().map(str::as_bytes) == before.as_deref() {
                // Nothing to write (an object applied as it is): the file keeps its bytes and
                // its modification time.
                continue;
            }
            written.push(file);
            writes.push(FileWrite {
                path,
                before,
                after: edited.text,
            });
        }
        self.journal.write_files(&writes)?;
        {
            let mut digests = self.digests();
            for (file, write) in written.into_iter().zip(&writes) {
                match &write.after {
                    Some(text) => digests.insert(file.clone(), sha256(text.as_bytes())),
                    None => digests.remove(file),
                };
            }
        }

        // Every object of the edited files, before and after, whose stored form changed.
        let after = objects(&reparsed);
        let mut touched_refs: Vec<&ObjectRef> = existing
            .iter()
            .filter(|(_, v)| edits.contains_key(v.file()))
            .map(|(r, _)| r)
            .chain(after.keys())
            .collect();
        touched_refs.sort();
        touched_refs.dedup();
        Ok(touched_refs
            .into_iter()
            .filter(|r| existing.get(*r) != after.get(*r))
            .map(|r| ((*r).clone(), after.get(r).map(ObjectView::to_object)))
            .collect())
    }
}
