//! The policy directory as a store backend: the directory is the single source of truth.
//!
//! An admin write rewrites the files that hold its objects (re-rendering each file's roles,
//! bindings and FieldPolicies as manifests; comments in a rewritten file are lost)
//! or, for a new object, creates `KIND.NAMESPACE.NAME.yaml` in the first directory given with
//! `--policy`. The new content of every file is parsed in memory before anything touches the
//! disk, so a write that would not load back changes nothing. The files are then written by
//! one commit, all or nothing: each atomically and durably ([`super::durable`]), and a write of
//! several files under an intent journal rolled forward after a crash ([`super::journal`]).
//!
//! A file that also holds objects the loader skips (a Helm chart's ServiceAccount or Deployment
//! beside its RBAC objects) is never rewritten, since the rewrite would drop them: a write that
//! would touch one is refused, naming the file.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::policy::load::{
    load_paths_reporting, load_sources, skipped_in, Format, LoadError, LoadErrors, LoadOptions,
};
use crate::policy::model::{PolicyObject, PolicySet};
use crate::policy::render;
use crate::store::durable::remove_stale_temp_files;
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
        let policy = self.files.read_all()?;
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
        let policy = read?;
        if *store.policy() == policy {
            return Ok(None);
        }
        store.gate_reload(&policy).map_err(|refusal| {
            LoadErrors(vec![LoadError {
                file: "policy store".to_string(),
                line: 0,
                message: format!("the policy read again is rejected: {refusal}"),
            }])
        })?;
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

/// The text of a policy file holding exactly these objects, in the file's format.
fn render_file(file: &str, objects: &[ObjectView<'_>]) -> String {
    let values: Vec<serde_json::Value> = objects.iter().map(ObjectView::to_value).collect();
    match Format::from_name(file) {
        Some(Format::Json) => {
            let mut out = String::new();
            for value in &values {
                out.push_str(&serde_json::to_string_pretty(value).unwrap_or_default());
                out.push('\n');
            }
            out
        }
        _ => render::to_multi_yaml(&values),
    }
}

impl Files {
    /// The whole policy: a commit interrupted before is finished first (the journal's
    /// recovery), so that what is read is never part of one write.
    fn read_all(&self) -> std::result::Result<PolicySet, LoadErrors> {
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
        let loaded = load_paths_reporting(&self.paths, &self.options)?;
        if !loaded.skipped.is_empty() {
            // The load report: what the directory holds besides policy (docs/policy.md §1).
            tracing::info!(
                skipped = loaded.skipped.len(),
                "policy files hold objects of other API groups: {}",
                loaded.skipped
            );
        }
        Ok(loaded.policy)
    }

    /// Refuses to rewrite `file` if it holds objects the loader skips: the rewritten file
    /// would hold the policy objects only. A file that cannot be read is not checked (a new
    /// file, or one the write removes or replaces anyway).
    fn check_rewritable(&self, file: &str) -> Result<()> {
        let Ok(text) = fs::read_to_string(file) else {
            return Ok(());
        };
        let skipped = skipped_in(file, &text, &self.options);
        match skipped.0.first() {
            None => Ok(()),
            Some(first) => Err(StoreError::Invalid(LoadErrors(vec![LoadError {
                file: file.to_string(),
                line: first.source.line,
                message: format!(
                    "the write would rewrite this file, which also holds objects authzd does not read and would drop ({skipped}): move its policy objects to a file of their own, or edit it by hand"
                ),
            }]))),
        }
    }

    /// Rewrites the files that hold `upserts` and `deletes` (or creates one for a new object),
    /// given the current policy; the changes the store applies: every object whose stored
    /// form changed, the ones written and any whose position moved in a rewritten file
    /// (explanations carry `file:line`). Nothing is written unless every rewritten file loads
    /// back, and the files are written all or nothing ([`Journal::write_files`]).
    fn commit(
        &self,
        current: &PolicySet,
        upserts: &[PolicyObject],
        deletes: &[ObjectRef],
    ) -> Result<Vec<Change>> {
        let existing = objects(current);
        // file -> the objects it will hold, in their current order.
        let mut files: BTreeMap<String, Vec<(ObjectRef, ObjectView<'_>)>> = BTreeMap::new();
        let mut touched: Vec<String> = Vec::new();
        let mut add_file = |file: &str, files: &mut BTreeMap<String, Vec<_>>| {
            if !files.contains_key(file) {
                let mut held: Vec<(ObjectRef, ObjectView<'_>)> = existing
                    .iter()
                    .filter(|(_, v)| v.file() == file)
                    .map(|(r, v)| (r.clone(), *v))
                    .collect();
                held.sort_by_key(|(_, v)| v.source().line);
                files.insert(file.to_string(), held);
                touched.push(file.to_string());
            }
        };

        for object in deletes {
            let view = existing
                .get(object)
                .ok_or_else(|| StoreError::NotFound(object.clone()))?;
            add_file(view.file(), &mut files);
            if let Some(held) = files.get_mut(view.file()) {
                held.retain(|(r, _)| r != object);
            }
        }
        for object in upserts {
            let r = ObjectRef::of(object);
            let view = ObjectView::from(object);
            let file = match existing.get(&r) {
                Some(current) => current.file().to_string(),
                None => {
                    let dir = self.write_dir.as_ref().ok_or(StoreError::ReadOnly)?;
                    dir.join(file_name_for(&r)).display().to_string()
                }
            };
            add_file(&file, &mut files);
            if let Some(held) = files.get_mut(&file) {
                match held.iter_mut().find(|(held_ref, _)| *held_ref == r) {
                    Some(slot) => slot.1 = view,
                    None => held.push((r, view)),
                }
            }
        }

        for file in &touched {
            self.check_rewritable(file)?;
        }

        // Render and parse every touched file in memory first: nothing is written unless all
        // of them load back.
        let mut rendered: Vec<(String, Option<String>)> = Vec::new();
        let mut reparsed = PolicySet::default();
        for file in &touched {
            let held = files.get(file).map(Vec::as_slice).unwrap_or_default();
            if held.is_empty() {
                rendered.push((file.clone(), None));
                continue;
            }
            let views: Vec<ObjectView<'_>> = held.iter().map(|(_, v)| *v).collect();
            let text = render_file(file, &views);
            let loaded = load_sources(&[(file.clone(), text.clone())], &self.options)
                .map_err(StoreError::Invalid)?;
            reparsed.roles.extend(loaded.roles);
            reparsed.bindings.extend(loaded.bindings);
            reparsed.field_policies.extend(loaded.field_policies);
            reparsed.gates.extend(loaded.gates);
            rendered.push((file.clone(), Some(text)));
        }

        // What every file holds now beside what the write makes of it; checks of what a
        // file holds belong here, before the one call that writes them all.
        let writes = rendered
            .into_iter()
            .map(|(file, text)| FileWrite::read(PathBuf::from(file), text))
            .collect::<Result<Vec<_>>>()?;
        self.journal.write_files(&writes)?;

        // Every object of the rewritten files, before and after, whose stored form changed.
        let after = objects(&reparsed);
        let mut touched_refs: Vec<&ObjectRef> = existing
            .iter()
            .filter(|(_, v)| touched.iter().any(|t| t == v.file()))
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
