//! The example policy built into the binary: what `authzd serve` serves
//! without `--policy`, read-only.
//!
//! Before, `serve` without `--policy` served `./policy` if it existed, else the build tree's
//! `policy/` directory, as a writable store: a binary started anywhere served (and one
//! `authzd delete` rewrote) git-tracked files of its source checkout, or failed elsewhere. The
//! example is now compiled in (`include_str!`), so the binary serves the same thing whatever
//! its working directory and wherever it was built; and since nobody named a directory,
//! nothing is written: a writable store is always a directory the user named.
//!
//! The files are listed by hand; a unit test holds the list to the `policy/` directory, so a
//! file added there and not here fails the build's tests rather than going missing.

use crate::policy::load::{load_sources_reporting, LoadErrors, LoadOptions};
use crate::policy::model::PolicySet;
use crate::store::{Backend, Commit, CommitError, Store, StoreError};

/// The prefix of the embedded files' names, as explanations (`file:line`) and the load log
/// show them: never mistaken for a path on disk.
pub const NAME_PREFIX: &str = "embedded:policy/";

/// `policy/`'s policy files (its README is not policy), by name within the directory, in the
/// loader's (sorted) order.
const FILES: [(&str, &str); 4] = [
    (
        "seed001-abac.jsonl",
        include_str!("../../policy/seed001-abac.jsonl"),
    ),
    (
        "seed001-rbac.yaml",
        include_str!("../../policy/seed001-rbac.yaml"),
    ),
    (
        "seed002-abac.jsonl",
        include_str!("../../policy/seed002-abac.jsonl"),
    ),
    (
        "seed003-roles.json",
        include_str!("../../policy/seed003-roles.json"),
    ),
];

/// Why the embedded policy refuses writes, for the startup log and the refused write's status.
pub const READ_ONLY_REASON: &str = "it serves the example policy built into the binary (no --policy was given); to accept writes, start authzd with --policy DIR naming a directory it may write";

/// The embedded example, parsed with `options` (the master namespace, the file-size limit).
pub fn load(options: &LoadOptions) -> Result<PolicySet, LoadErrors> {
    let sources: Vec<(String, String)> = FILES
        .iter()
        .map(|(name, text)| (format!("{NAME_PREFIX}{name}"), (*text).to_string()))
        .collect();
    load_sources_reporting(&sources, options).map(|loaded| loaded.policy)
}

/// The store's backend for the embedded example: nothing to reload, nothing to write.
pub struct EmbeddedBackend;

#[tonic::async_trait]
impl Backend for EmbeddedBackend {
    async fn commit(&self, _: &Store, _: Commit<'_>) -> Result<u64, CommitError> {
        // The store refuses writes before they queue (`Backend::read_only`); this is the
        // backstop should one get here.
        Err(CommitError::Failed(StoreError::ReadOnlyStore(
            READ_ONLY_REASON.to_string(),
        )))
    }

    async fn reload(&self, _: &Store) -> Result<Option<u64>, LoadErrors> {
        Ok(None)
    }

    fn read_only(&self) -> Option<&str> {
        Some(READ_ONLY_REASON)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_the_policy_directory() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policy");
        let on_disk: Vec<(std::path::PathBuf, crate::policy::load::Format)> =
            crate::policy::load::policy_files(&dir).unwrap();
        let names: Vec<String> = on_disk
            .iter()
            .map(|(path, _)| path.strip_prefix(&dir).unwrap().display().to_string())
            .collect();
        let listed: Vec<&str> = FILES.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, listed);
        for (name, text) in FILES {
            assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), text);
        }
    }

    #[test]
    fn the_embedded_policy_is_the_policy_directory() {
        let options = LoadOptions::default();
        let embedded = load(&options).unwrap();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policy");
        let on_disk = crate::policy::load::load_paths(&[dir], &options).unwrap();
        assert!(!embedded.roles.is_empty() && !embedded.abac.is_empty());
        assert_eq!(embedded.roles.len(), on_disk.roles.len());
        assert_eq!(embedded.bindings.len(), on_disk.bindings.len());
        assert_eq!(embedded.abac.len(), on_disk.abac.len());
    }
}
