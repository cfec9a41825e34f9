//! The offline policy commands (`check`, `who-can`, `lint`, `test`): what is being asked about
//! ([`ActionArgs`]) and each command's flags.

use std::path::PathBuf;

use clap::{ArgGroup, Args};

use crate::engine::Mode;
use crate::policy::load::LoadOptions;
use crate::request::{Action, Content, NonResourceAttributes, ResourceAttributes};

use super::{ChainArgs, ModeChain, PolicyArgs};

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

/// `authzd test`'s flags. The policy and chain flags are those of `check`, but each is
/// optional: a flag given on the command line overrides what a test file says, and a file
/// that says nothing gets `check`'s defaults.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Policy file or directory (repeatable), instead of each test file's own `policy` list.
    /// Without it, a test file's `policy` (relative to the test file) is used, and without that
    /// `./policy` if it exists, else the `policy/` directory shipped in the source tree.
    #[arg(long = "policy", value_name = "PATH")]
    pub policy: Vec<PathBuf>,

    /// The policy in force (file or directory, repeatable): the change from it to `--policy`
    /// is checked against its ChangeGates, as a server would check the write (docs/policy.md
    /// §7); a broken rule fails the run. Needs `--policy`.
    #[arg(long = "gate-against", value_name = "PATH", requires = "policy")]
    pub gate_against: Vec<PathBuf>,

    /// Seed 003's master namespace: its roles and bindings are cluster-wide.
    #[arg(long, value_name = "NS", default_value = "master")]
    pub master_namespace: String,

    /// Largest policy file read, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = crate::policy::load::MAX_FILE_BYTES,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_policy_file_bytes: u64,

    /// Authorizer chain, in order: AlwaysAllow, AlwaysDeny, ABAC, RBAC; overrides a test
    /// file's `modes`. Default: RBAC,ABAC.
    #[arg(long, value_name = "MODES", value_parser = super::policy::parse_chain)]
    pub authorization_mode: Option<ModeChain>,

    /// A user allowed everything (repeatable); overrides a test file's `super_users`.
    #[arg(long = "super-user", value_name = "NAME")]
    pub super_users: Vec<String>,

    /// A group whose members are allowed everything (repeatable); overrides a test file's
    /// `super_groups`. Default: `system:masters`; `--super-group ''` means none.
    #[arg(long = "super-group", value_name = "NAME")]
    pub super_groups: Vec<String>,

    /// `text`: PASS/FAIL per case and a summary, for a person; `junit`: JUnit XML, for CI.
    #[arg(long, short = 'o', value_enum, default_value_t = TestOutput::Text)]
    pub output: TestOutput,

    /// Test files (YAML), or directories whose `*.yaml` / `*.yml` files are test files.
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
}

/// How `authzd test` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TestOutput {
    Text,
    Junit,
}

/// `authzd test`'s settings: the test files, and what the command line overrides in them.
#[derive(Clone, Debug)]
pub struct TestSettings {
    pub files: Vec<PathBuf>,
    /// `--policy`: replaces every file's `policy` list (empty: not given).
    pub policy: Vec<PathBuf>,
    /// `--gate-against`: the policy in force whose ChangeGates `--policy` is checked against
    /// (empty: not given).
    pub gate_against: Vec<PathBuf>,
    pub load: LoadOptions,
    /// `--authorization-mode`, when given.
    pub modes: Option<Vec<Mode>>,
    /// `--super-user`, when given.
    pub super_users: Option<Vec<String>>,
    /// `--super-group`, when given (`''` alone: none).
    pub super_groups: Option<Vec<String>>,
    pub output: TestOutput,
}

impl TestArgs {
    /// `Err`: a usage error (a Webhook in the chain: offline commands never ask one).
    pub(super) fn settings(self) -> Result<TestSettings, String> {
        let modes = self.authorization_mode.map(|chain| chain.0);
        if modes
            .iter()
            .flatten()
            .any(|mode| matches!(mode, Mode::Webhook(_)))
        {
            return Err(
                "--authorization-mode Webhook needs `serve` with --authorization-webhook-config-file"
                    .to_string(),
            );
        }
        let given = |names: Vec<String>| (!names.is_empty()).then(|| super::non_empty(names));
        Ok(TestSettings {
            files: self.files,
            policy: self.policy,
            gate_against: self.gate_against,
            load: LoadOptions {
                master_namespace: self.master_namespace,
                max_file_bytes: self.max_policy_file_bytes,
            },
            modes,
            super_users: given(self.super_users),
            super_groups: given(self.super_groups),
            output: self.output,
        })
    }
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

/// `authzd diff`: the access delta between two policies.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The policy before the change (repeatable), as `check` takes it.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// The policy after the change: a file or directory (repeatable).
    #[arg(long = "policy-new", value_name = "PATH", required = true)]
    pub policy_new: Vec<PathBuf>,
    #[command(flatten)]
    pub chain: ChainArgs,
    /// `text`: grouped by scope, `+` for a gain and `-` for a loss, like a code diff; `json`:
    /// the rows, for tools.
    #[arg(long, short = 'o', value_enum, default_value_t = DiffOutput::Text)]
    pub output: DiffOutput,
    /// Exit 1 when a subject matching this glob (`*` any run, `?` one character; users,
    /// groups and service accounts as `system:serviceaccount:NS:NAME`) gains access
    /// (repeatable).
    #[arg(long = "fail-on-gain", value_name = "PATTERN")]
    pub fail_on_gain: Vec<String>,
    /// Exit 1 when a subject matching this glob loses access (repeatable).
    #[arg(long = "fail-on-loss", value_name = "PATTERN")]
    pub fail_on_loss: Vec<String>,
    /// Print one concrete request per subject and row that shows the gain or loss.
    #[arg(long)]
    pub witness: bool,
}

/// How `authzd diff` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffOutput {
    Text,
    Json,
}

/// `authzd replay`: recorded decisions re-decided on a candidate policy (docs/records.md §3).
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Decision record files (`serve --decision-records`), read in order (repeatable; several
    /// after one flag).
    #[arg(long = "records", value_name = "FILE", required = true, num_args = 1..)]
    pub records: Vec<PathBuf>,
    /// The candidate policy: a file or directory (repeatable).
    #[arg(long = "policy-new", value_name = "PATH", required = true)]
    pub policy_new: Vec<PathBuf>,
    /// The policy before the change, to re-decide the old answers on (repeatable). Without
    /// it, the recorded answers are the old ones.
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub chain: ChainArgs,
    /// `text`: one line per flipped request, `+` a gain and `-` a loss; `json`: the totals
    /// and every flipped request, for tools.
    #[arg(long, short = 'o', value_enum, default_value_t = DiffOutput::Text)]
    pub output: DiffOutput,
    /// Exit 1 when a request of a subject matching this glob (its user or one of its groups)
    /// flips to allowed (repeatable).
    #[arg(long = "fail-on-gain", value_name = "PATTERN")]
    pub fail_on_gain: Vec<String>,
    /// Exit 1 when a request of a subject matching this glob flips to refused (repeatable).
    #[arg(long = "fail-on-loss", value_name = "PATTERN")]
    pub fail_on_loss: Vec<String>,
}
