//! The policy and authorizer-chain flags that `serve` and the offline commands share, and what
//! they become: where and how to read policy ([`PolicySettings`]) and everything an engine is
//! built from ([`EngineSettings`]).

use std::path::{Path, PathBuf};

use clap::Args;

use crate::engine::{EngineConfig, Mode};
use crate::policy::load::LoadOptions;

use super::non_empty;

#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// Policy file or directory (repeatable). Default: for `serve`, the example policy
    /// embedded in the binary, read-only; for the offline commands, `./policy` if it exists,
    /// else the `policy/` directory of the source tree authzd was built from.
    #[arg(long = "policy", value_name = "PATH")]
    pub policy: Vec<PathBuf>,

    /// Seed 003's master namespace: its roles and bindings are cluster-wide.
    #[arg(long, value_name = "NS", default_value = "master")]
    pub master_namespace: String,

    /// Largest policy file read, in bytes (a file over it is refused, saying so); raise it
    /// for a large cluster's export (`kubectl get rolebindings -A -o yaml`).
    #[arg(long, value_name = "BYTES", default_value_t = crate::policy::load::MAX_FILE_BYTES,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_policy_file_bytes: u64,
}

#[derive(Debug, Args)]
pub struct ChainArgs {
    /// Authorizer chain, in order: AlwaysAllow, AlwaysDeny, ABAC, RBAC, and (serve only)
    /// Webhook. Default: RBAC,ABAC.
    #[arg(long, value_name = "MODES", value_parser = parse_chain)]
    pub authorization_mode: Option<ModeChain>,

    /// A user allowed everything and listed in every who-can answer (repeatable).
    #[arg(long = "super-user", value_name = "NAME")]
    pub super_users: Vec<String>,

    /// A group whose members are allowed everything (repeatable). Defaults to
    /// `system:masters`, which kube-apiserver always privileges; giving any --super-group
    /// replaces the default, and `--super-group ''` means none.
    #[arg(
        long = "super-group",
        value_name = "NAME",
        default_value = DEFAULT_SUPER_GROUP
    )]
    pub super_groups: Vec<String>,
}

/// The super-group when none is configured: kube-apiserver always privileges it.
pub const DEFAULT_SUPER_GROUP: &str = "system:masters";

/// `--authorization-mode`, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeChain(pub Vec<Mode>);

pub(super) fn parse_chain(s: &str) -> Result<ModeChain, String> {
    Mode::parse_chain(s).map(ModeChain)
}

/// Where and how to read policy.
#[derive(Clone, Debug)]
pub struct PolicySettings {
    pub paths: Vec<PathBuf>,
    pub load: LoadOptions,
}

/// Policy plus the authorizer chain: everything needed to build an engine.
#[derive(Clone, Debug)]
pub struct EngineSettings {
    pub policy: PolicySettings,
    pub engine: EngineConfig,
}

/// The policy used when no `--policy` is given.
pub fn default_policy_path() -> PathBuf {
    let local = Path::new("policy");
    if local.is_dir() {
        local.to_path_buf()
    } else {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/policy"))
    }
}

impl PolicyArgs {
    pub(super) fn settings(self) -> PolicySettings {
        let paths = if self.policy.is_empty() {
            vec![default_policy_path()]
        } else {
            self.policy
        };
        PolicySettings {
            paths,
            load: LoadOptions {
                master_namespace: self.master_namespace,
                max_file_bytes: self.max_policy_file_bytes,
            },
        }
    }
}

/// The chain `RBAC,ABAC`, used when --authorization-mode is not given.
pub fn default_modes() -> Vec<Mode> {
    vec![Mode::Rbac, Mode::Abac]
}

/// The engine's settings for an offline command. `Webhook` is refused here: a webhook is asked
/// by a running server (`serve` with its webhook flags), never by an offline command answering
/// from local policy.
pub(super) fn engine_settings(
    policy: PolicyArgs,
    mut chain: ChainArgs,
) -> Result<EngineSettings, String> {
    let modes = chain
        .authorization_mode
        .take()
        .map_or_else(default_modes, |chain| chain.0);
    if modes.iter().any(|mode| matches!(mode, Mode::Webhook(_))) {
        return Err(
            "--authorization-mode Webhook needs `serve` with --authorization-webhook-config-file"
                .to_string(),
        );
    }
    Ok(engine_settings_with(policy, chain, modes))
}

/// The engine's settings with the chain's `modes` decided by the caller (`serve` reads them
/// from --authorization-mode and the webhook flags, or --authorization-config).
pub(super) fn engine_settings_with(
    policy: PolicyArgs,
    chain: ChainArgs,
    modes: Vec<Mode>,
) -> EngineSettings {
    EngineSettings {
        policy: policy.settings(),
        engine: EngineConfig {
            modes,
            super_users: non_empty(chain.super_users),
            super_groups: non_empty(chain.super_groups),
        },
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Cli, Settings};
    use clap::Parser;

    #[test]
    fn super_group_replaces_the_default_and_empty_means_none() {
        let cli = Cli::try_parse_from(["authzd", "serve", "--super-group", ""]).unwrap();
        let Settings::Serve(s) = cli.settings().unwrap() else {
            panic!("not serve")
        };
        assert!(s.engine.engine.super_groups.is_empty());
    }

    #[test]
    fn bad_mode_is_a_usage_error() {
        let err = Cli::try_parse_from(["authzd", "serve", "--authorization-mode", "RBAC,Nope"])
            .unwrap_err();
        assert!(err
            .to_string()
            .contains("unknown authorization mode `Nope`"));
    }
}
