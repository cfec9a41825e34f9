//! Live policy: reload when the policy files change (debounced) and on SIGHUP.
//!
//! Events only say "something changed"; the reload re-reads the backend and publishes a new
//! revision only if the policy differs, so the store's own atomic writes (which the watcher also
//! sees) cost one re-read and no new revision. A rejected reload keeps the last good policy.
//! A reload never reads the middle of the store's own commit of several files: it waits for a
//! commit in progress, and first finishes one a kill or a failure left unfinished
//! (`dir::DirectoryBackend`'s `head` lock; `journal`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::store::Store;

/// Quiet period after the last file event before reloading: editors and `kubectl cp` write
/// files in several steps.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(200);

/// Keeps the watcher alive; dropping it stops watching.
pub struct Reloader {
    _watcher: Option<notify::RecommendedWatcher>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Reloader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether an event can concern a policy file (dotfiles are the store's temporary files, its
/// commit journal and editors' swap files; the loader skips them).
fn relevant(event: &notify::Event) -> bool {
    if matches!(event.kind, notify::EventKind::Access(_)) {
        return false;
    }
    event.paths.is_empty()
        || event.paths.iter().any(|p| {
            !p.file_name()
                .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."))
        })
}

/// Watches `paths` and reloads `store` on changes and on SIGHUP. Watching is best effort: if
/// the platform watcher cannot be set up the error is logged and SIGHUP still works.
pub fn spawn(store: Arc<Store>, paths: &[PathBuf], debounce: Duration) -> Reloader {
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let watcher_tx = tx.clone();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        match event {
            // A full channel already holds a pending reload; nothing is lost.
            Ok(event) if relevant(&event) => {
                let _ = watcher_tx.try_send(());
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "policy watcher error; reloading to be safe");
                let _ = watcher_tx.try_send(());
            }
        }
    });
    let watcher = match watcher {
        Ok(mut watcher) => {
            for path in paths {
                if let Err(error) = watcher.watch(path, RecursiveMode::Recursive) {
                    tracing::warn!(path = %path.display(), %error, "cannot watch policy path");
                }
            }
            Some(watcher)
        }
        Err(error) => {
            tracing::warn!(%error, "cannot start the policy watcher; reload with SIGHUP");
            None
        }
    };

    spawn_sighup(tx);
    let task = tokio::spawn(async move {
        while rx.recv().await.is_some() {
            // Debounce: wait for a quiet period, swallowing events that arrive meanwhile.
            loop {
                match tokio::time::timeout(debounce, rx.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return,
                    Err(_elapsed) => break,
                }
            }
            // Errors are logged and kept for Status by the store.
            let _ = store.reload().await;
        }
    });
    Reloader {
        _watcher: watcher,
        task,
    }
}

#[cfg(unix)]
fn spawn_sighup(tx: mpsc::Sender<()>) {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::hangup()) {
        Ok(mut hangups) => {
            tokio::spawn(async move {
                while hangups.recv().await.is_some() {
                    tracing::info!("SIGHUP: reloading policy");
                    if tx.send(()).await.is_err() {
                        return;
                    }
                }
            });
        }
        Err(error) => tracing::warn!(%error, "cannot listen for SIGHUP"),
    }
}

#[cfg(not(unix))]
fn spawn_sighup(_tx: mpsc::Sender<()>) {}
