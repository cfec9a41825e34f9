//! The offline policy commands (`check`, `who-can`, `lint`): what is being asked about
//! ([`ActionArgs`]) and each command's flags.

use std::path::PathBuf;

use clap::{ArgGroup, Args};

use crate::request::{Action, Content, NonResourceAttributes, ResourceAttributes};

use super::{ChainArgs, PolicyArgs};

/// What is being done: resource attributes, or `--path` for a non-resource URL.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args(["resource", "path"])))]
pub struct ActionArgs {
    /// Verb, e.g. get, list, create, delete (for --path: the lower-case HTTP verb).
    #[arg(long)]
    pub verb: String,
    /// Namespace of the resource (empty: cluster scope).
    #[arg(long, short = 'n', default_value = "")]
    pub namespace: String,
    /// API group of the resource (empty: the core group).
    #[arg(long = "api-group", value_name = "GROUP", default_value = "")]
    pub api_group: String,
    /// API version of the resource (informational; rules do not match on it).
    #[arg(long, default_value = "")]
    pub version: String,
    /// Resource, e.g. pods.
    #[arg(long)]
    pub resource: Option<String>,
    /// Subresource, e.g. log for pods/log.
    #[arg(long, default_value = "")]
    pub subresource: String,
    /// Name of the object.
    #[arg(long, default_value = "")]
    pub name: String,
    /// Non-resource URL path, e.g. /healthz (instead of the resource flags).
    #[arg(long, conflicts_with_all = ["namespace", "api_group", "version", "resource", "subresource", "name"])]
    pub path: Option<String>,
    /// A JSON file: the object as it will be stored (create, update, patch), for rules over
    /// object content.
    #[arg(long, value_name = "FILE", conflicts_with = "path")]
    pub object: Option<PathBuf>,
    /// A JSON file: the stored object (update, patch, delete, get).
    #[arg(long, value_name = "FILE", conflicts_with = "path")]
    pub old_object: Option<PathBuf>,
    /// A changed field path (repeatable), instead of the objects:
    /// `.metadata.labels['app']`.
    #[arg(long = "changed-path", value_name = "PATH", conflicts_with_all = ["path", "object", "old_object"])]
    pub changed_paths: Vec<String>,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("subject").required(true).multiple(true).args(["user", "groups"])))]
pub struct CheckArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub chain: ChainArgs,
    /// The user asking.
    #[arg(long)]
    pub user: Option<String>,
    /// A group of the user (repeatable). The API group is --api-group.
    #[arg(long = "group", value_name = "NAME")]
    pub groups: Vec<String>,
    /// `return`: without --object/--old-object/--changed-path, print the conditions the
    /// answer depends on instead of the fold (DECISION_CONDITIONAL); `fold` (the default):
    /// fold them as Authorize does for callers that do not ask.
    #[arg(long, value_name = "MODE", default_value = "fold", value_parser = ["fold", "return"])]
    pub conditions: String,
    #[command(flatten)]
    pub action: ActionArgs,
}

#[derive(Debug, Args)]
pub struct WhoCanArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub chain: ChainArgs,
    /// `return`: without content, also print the subjects whose answer is conditional, with
    /// their conditions; `fold` (the default): who-can's answer alone.
    #[arg(long, value_name = "MODE", default_value = "fold", value_parser = ["fold", "return"])]
    pub conditions: String,
    #[command(flatten)]
    pub action: ActionArgs,
}

#[derive(Debug, Args)]
pub struct LintArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
}

impl ActionArgs {
    /// The content the flags name, read from their files (`None` when none is given); an
    /// unreadable file is a usage error naming it. The JSON is checked where a rule reads it.
    pub(super) fn content(&self) -> Result<Option<Content>, String> {
        let read = |path: &Option<PathBuf>| -> Result<Option<Vec<u8>>, String> {
            path.as_ref()
                .map(|p| {
                    std::fs::read(p).map_err(|e| format!("cannot read `{}`: {e}", p.display()))
                })
                .transpose()
        };
        let mut content = Content::default();
        content.object = read(&self.object)?;
        content.old_object = read(&self.old_object)?;
        content.changed_paths = self.changed_paths.clone();
        let carried = content.has_objects() || !content.changed_paths.is_empty();
        Ok(carried.then_some(content))
    }

    pub(super) fn action(self) -> Action {
        match self.path {
            Some(path) => Action::NonResource(NonResourceAttributes {
                path,
                verb: self.verb,
            }),
            None => Action::Resource(ResourceAttributes {
                namespace: self.namespace,
                verb: self.verb,
                group: self.api_group,
                version: self.version,
                resource: self.resource.unwrap_or_default(),
                subresource: self.subresource,
                name: self.name,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Cli, Settings};
    use clap::Parser;

    #[test]
    fn check_builds_a_request() {
        let cli = Cli::try_parse_from([
            "authzd",
            "check",
            "--user",
            "alice",
            "--group",
            "dev",
            "--verb",
            "get",
            "--resource",
            "pods",
            "-n",
            "ns1",
            "--api-group",
            "apps",
        ])
        .unwrap();
        let Settings::Check { request, .. } = cli.settings().unwrap() else {
            panic!("not check")
        };
        assert_eq!(request.user.groups, vec!["dev"]);
        let Action::Resource(r) = request.action else {
            panic!("not a resource action")
        };
        assert_eq!((r.namespace.as_str(), r.group.as_str()), ("ns1", "apps"));
    }

    #[test]
    fn path_excludes_resource_flags() {
        assert!(Cli::try_parse_from([
            "authzd",
            "who-can",
            "--verb",
            "get",
            "--path",
            "/x",
            "--resource",
            "pods"
        ])
        .is_err());
        assert!(Cli::try_parse_from(["authzd", "who-can", "--verb", "get"]).is_err());
    }
}
