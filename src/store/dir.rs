//! The policy directory as a store backend: the directory is the single source of truth.
//!
//! An admin write rewrites the file that holds the object (re-rendering that file's roles,
//! bindings and FieldPolicies as manifests; comments in a rewritten file are lost)
//! or, for a new object, creates `KIND.NAMESPACE.NAME.yaml` in the first directory given with
//! `--policy`. Every file is written atomically and durably: content goes to a hidden temporary
//! file in the same directory (the loader skips dotfiles, so a half-written file is never
//! read), which is fsynced, renamed over the target, and the directory is fsynced. The new
//! content is parsed in memory before anything touches the disk, so a write that would not load
//! back changes nothing.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::policy::load::{load_paths, load_sources, Format, LoadErrors, LoadOptions};
use crate::policy::model::{PolicyObject, PolicySet};
use crate::policy::render;
use crate::store::{objects, Backend, ObjectRef, ObjectView, Result, StoreError};

pub struct DirectoryBackend {
    paths: Vec<PathBuf>,
    /// Where new objects are created: the first directory among `paths`.
    write_dir: Option<PathBuf>,
    options: LoadOptions,
}

impl DirectoryBackend {
    pub fn new(paths: Vec<PathBuf>, options: LoadOptions) -> Self {
        let write_dir = paths.iter().find(|p| p.is_dir()).cloned();
        if let Some(dir) = &write_dir {
            remove_stale_temp_files(dir);
        }
        Self {
            paths,
            write_dir,
            options,
        }
    }

    pub fn write_dir(&self) -> Option<&Path> {
        self.write_dir.as_deref()
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

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Whether a file name is one of [`write_atomically`]'s temporary files.
fn is_temp_file(name: &str) -> bool {
    name.starts_with('.') && name.contains(".tmp-")
}

/// Removes temporary files a crashed writer left behind (the loader never reads them; this
/// only keeps the directory tidy). Best effort: failures are logged.
fn remove_stale_temp_files(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_temp_file(&name) {
            match fs::remove_file(entry.path()) {
                Ok(()) => {
                    tracing::info!(file = %entry.path().display(), "removed a stale temporary policy file")
                }
                Err(error) => {
                    tracing::warn!(file = %entry.path().display(), %error, "cannot remove a stale temporary policy file")
                }
            }
        }
    }
}

fn io_error(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, e))
}

/// Writes `content` to `path` atomically and durably (temp file, fsync, rename, fsync dir).
pub fn write_atomically(path: &Path, content: &str) -> Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = fs::File::create(&temp).map_err(|e| io_error(&temp, e))?;
        file.write_all(content.as_bytes())
            .map_err(|e| io_error(&temp, e))?;
        file.sync_all().map_err(|e| io_error(&temp, e))?;
        fs::rename(&temp, path).map_err(|e| io_error(path, e))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

fn remove_durably(path: &Path) -> Result<()> {
    fs::remove_file(path).map_err(|e| io_error(path, e))?;
    sync_dir(path.parent().unwrap_or_else(|| Path::new(".")))
}

impl Backend for DirectoryBackend {
    fn read_all(&self) -> std::result::Result<PolicySet, LoadErrors> {
        load_paths(&self.paths, &self.options)
    }

    fn commit(
        &self,
        current: &PolicySet,
        upserts: &[PolicyObject],
        deletes: &[ObjectRef],
    ) -> Result<PolicySet> {
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
            rendered.push((file.clone(), Some(text)));
        }

        for (file, text) in &rendered {
            let path = Path::new(file);
            match text {
                Some(text) => write_atomically(path, text)?,
                None => remove_durably(path)?,
            }
        }

        // The new policy: everything from untouched files, plus the touched files as parsed.
        let untouched = |file: &str| !touched.iter().any(|t| t == file);
        let mut next = PolicySet {
            roles: current
                .roles
                .iter()
                .filter(|r| untouched(&r.source.file))
                .cloned()
                .collect(),
            bindings: current
                .bindings
                .iter()
                .filter(|b| untouched(&b.source.file))
                .cloned()
                .collect(),
            abac: current.abac.clone(),
            field_policies: current
                .field_policies
                .iter()
                .filter(|f| untouched(&f.source.file))
                .cloned()
                .collect(),
        };
        next.roles.extend(reparsed.roles);
        next.bindings.extend(reparsed.bindings);
        next.field_policies.extend(reparsed.field_policies);
        next.canonicalize();
        Ok(next)
    }
}
