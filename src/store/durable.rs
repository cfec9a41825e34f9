//! One file replaced or removed durably: the primitives the directory store's commit
//! ([`super::journal`]) and its journal are made of.
//!
//! A file is replaced atomically and durably: its content goes to a hidden temporary file in
//! the same directory (the loader skips dotfiles, so a half-written file is never read, and the
//! directory watcher ignores them), which is fsynced, renamed over the target, and then the
//! directory is fsynced so that the rename itself survives a power loss (rename(2) is atomic,
//! but durable only once its directory is; see fsync(2), "Calling fsync() does not necessarily
//! ensure that the entry in the directory containing the file has also reached disk").

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::{Result, StoreError};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Whether a file name is one of [`write_atomically`]'s temporary files (`.NAME.tmp-PID-N`).
pub(super) fn is_temp_file(name: &str) -> bool {
    name.starts_with('.') && name.contains(".tmp-")
}

/// The prefix of [`write_atomically`]'s temporary files for `name`.
pub(super) fn temp_prefix(name: &str) -> String {
    format!(".{name}.tmp-")
}

/// Removes temporary files a killed writer left behind in `dir` (the loader never reads them;
/// this only keeps the directory tidy). Best effort: failures are logged.
pub(super) fn remove_stale_temp_files(dir: &Path) {
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

pub(super) fn io_error(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// fsyncs a directory, so that the renames and removals made in it are durable.
pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, e))
}

/// Writes `content` to `path` atomically and durably (temp file, fsync, rename, fsync dir).
pub(super) fn write_atomically(path: &Path, content: &[u8]) -> Result<()> {
    write_atomically_over(path, content, None)
}

/// Refuses when `path` no longer holds `expected` (its bytes; `None`: no such file).
fn check_still(path: &Path, expected: Option<&[u8]>) -> Result<()> {
    if read_if_exists(path)?.as_deref() == expected {
        return Ok(());
    }
    Err(StoreError::FileChanged(format!(
        "`{}` was changed on disk while this write was being made (a hand edit or another process), and the write would replace it: nothing was written. Let that change finish (authzd reloads it once it loads), then retry the write",
        path.display()
    )))
}

/// [`write_atomically`], replacing `path` only if it still holds `expected` (`Some(None)`:
/// only if there is no such file) once the new content is durable: the last check before the
/// rename, so that a file saved by someone else while the write was prepared and fsynced is
/// not overwritten (the window left is between this read and the rename).
pub(super) fn write_atomically_over(
    path: &Path,
    content: &[u8],
    expected: Option<Option<&[u8]>>,
) -> Result<()> {
    let dir = parent(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(
        "{}{}-{}",
        temp_prefix(&name),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = fs::File::create(&temp).map_err(|e| io_error(&temp, e))?;
        file.write_all(content).map_err(|e| io_error(&temp, e))?;
        file.sync_all().map_err(|e| io_error(&temp, e))?;
        if let Some(expected) = expected {
            check_still(path, expected)?;
        }
        fs::rename(&temp, path).map_err(|e| io_error(path, e))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

/// [`remove_durably`], only if `path` still holds `expected`.
pub(super) fn remove_durably_if(path: &Path, expected: Option<&[u8]>) -> Result<()> {
    check_still(path, expected)?;
    remove_durably(path)
}

/// Removes `path` durably (the removal, then its directory fsynced). A file already gone is
/// removed.
pub(super) fn remove_durably(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(path, e)),
    }
    sync_dir(parent(path))
}

/// The bytes of `path`, `None` when there is no such file.
pub(super) fn read_if_exists(path: &Path) -> Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(path, e)),
    }
}
