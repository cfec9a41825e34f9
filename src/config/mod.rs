//! Command line and typed settings. Flags are parsed by clap into [`Cli`], then turned into
//! validated settings that the rest of the program reads; nothing else looks at flags.
//!
//! This file holds the top: [`Cli`] and its [`Command`]s, [`Settings`], [`Cli::settings`]
//! (which turns the one into the other), and the helpers every command family shares
//! ([`parse_duration`], usage errors). The flags and settings of each family live beside it,
//! and are re-exported here:
//!
//! * `serve.rs`: `serve` (listeners, authentication, Envoy ext_authz, limits, audit log:
//!   [`ServeArgs`] to [`ServeSettings`]);
//! * `client.rs`: the commands against a running server, `apply`, `delete`, `get`, `watch`,
//!   `status` and `replicas` ([`ClientArgs`] to [`ClientSettings`], [`ClientCommand`]);
//! * `offline.rs`: the offline policy commands `check`, `who-can`, `lint` and `test`
//!   ([`ActionArgs`], [`TestSettings`]);
//! * `policy.rs`: the policy and authorizer-chain flags that `serve` and the offline commands
//!   share ([`PolicyArgs`], [`ChainArgs`] to [`EngineSettings`]);
//! * `authorization.rs`: `serve`'s Webhook authorizers, from the webhook flags or an
//!   `--authorization-config` AuthorizationConfiguration ([`authorization::Chain`]).

use std::time::Duration;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};

use crate::cache::CacheConfig;
use crate::request::{Action, Content, Request, UserInfo};
use crate::telemetry::LogFormat;

pub mod authorization;
mod client;
mod offline;
mod policy;
pub mod proxy;
mod serve;

pub use client::{
    parse_server, Ack, ApplyArgs, AskArgs, ClientArgs, ClientCommand, ClientSettings, DeleteArgs,
    GetArgs, ManifestSource, ReplicasArgs, StatusArgs, WatchArgs,
};
pub use offline::{
    ActionArgs, CheckArgs, DiffArgs, DiffOutput, LintArgs, ReplayArgs, TestArgs, TestOutput,
    TestSettings, WhoCanArgs,
};
pub use policy::{
    default_modes, default_policy_path, ChainArgs, EngineSettings, ModeChain, PolicyArgs,
    PolicySettings, DEFAULT_SUPER_GROUP,
};
pub use serve::{
    parse_webhook_path, AuditArgs, AuditSettings, AuthArgs, EnvoyArgs, LimitArgs, RecordArgs,
    RecordSettings, RecordSink, ServeArgs, ServeLimits, ServeSettings,
};

use client::{object_ref, scope};
use policy::{engine_settings, engine_settings_with};
use serve::tcp_first;

/// authzd: Kubernetes-style authorization (RBAC, ABAC, deny rules) as a gRPC service.
#[derive(Debug, Parser)]
#[command(name = "authzd", version, about, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Log format (logs go to stderr; filter with RUST_LOG, e.g. `RUST_LOG=authzd=debug`).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "AUTHZD_LOG_FORMAT")]
    pub log_format: LogFormat,
}

// Built once per process from the command line: the size of the serve variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the gRPC API.
    Serve(ServeArgs),
    /// Decide one request offline and explain the decision (exit 0 allowed, 1 not, 2 error).
    Check(CheckArgs),
    /// List who may perform an action, offline.
    WhoCan(WhoCanArgs),
    /// Validate policy files (exit 0 clean, 1 problems found, 2 usage error).
    Lint(LintArgs),
    /// Run test files of expected decisions and who-can answers against policy, offline
    /// (exit 0 all pass, 1 a case failed, 2 a file or its policy does not load).
    Test(TestArgs),
    /// What a policy change does: the subjects that gain and lose access, per scope and action
    /// (exit 0, or 1 when a --fail-on-gain/--fail-on-loss gate fires; 2 bad input).
    Diff(DiffArgs),
    /// Re-decide recorded decisions (`serve --decision-records`) on a candidate policy and
    /// report every decision that flips, grouped by subject, action and scope (exit 0, or 1
    /// when a --fail-on-gain/--fail-on-loss gate fires; 2 bad input).
    Replay(ReplayArgs),
    /// Create or replace policy objects on a running server from YAML or JSON manifests (etcd
    /// mode: also prints the replicas that acknowledged the write, and those fenced).
    #[command(after_help = CLIENT_EXIT_CODES)]
    Apply(ApplyArgs),
    /// Delete one policy object on a running server (etcd mode: also prints the replicas that
    /// acknowledged it, and those fenced).
    #[command(after_help = CLIENT_EXIT_CODES)]
    Delete(DeleteArgs),
    /// Print one policy object (YAML), or every object of a kind, from a running server.
    #[command(after_help = CLIENT_EXIT_CODES)]
    Get(GetArgs),
    /// Print policy changes on a running server as they happen, until interrupted.
    #[command(after_help = CLIENT_EXIT_CODES)]
    Watch(WatchArgs),
    /// Print a running server's revision, last reload error and cache statistics; in etcd
    /// mode also its replica id, etcd endpoint, freshness, fenced state and the replica table.
    #[command(after_help = CLIENT_EXIT_CODES)]
    Status(StatusArgs),
    /// Print the replica table of an etcd-mode server: each replica's id and applied revision,
    /// this server's own marked, those behind marked (a directory-mode server has none: a note
    /// on stderr, exit 0).
    #[command(after_help = CLIENT_EXIT_CODES)]
    Replicas(ReplicasArgs),
    /// Ask a running server whether users may do things (Authorize): one question from the
    /// command line, or one per line of stdin; with --local-cache through a decision cache in
    /// this process that the server keeps exact (docs/caller-cache.md).
    #[command(after_help = CLIENT_EXIT_CODES)]
    Ask(AskArgs),
    /// An authorizing reverse proxy for one upstream that takes kube-rbac-proxy's flags and
    /// configuration file, deciding with authzd through a local decision cache (docs/proxy.md;
    /// `authzd proxy --help` lists every flag).
    #[command(disable_help_flag = true)]
    Proxy(ProxyArgs),
}

/// `authzd proxy`'s flags are kube-rbac-proxy's, read by `proxy.rs` as its pflag parser reads
/// them (clap's syntax differs: bools take `=false`, lists commas).
#[derive(Debug, clap::Args)]
pub struct ProxyArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0.., value_name = "FLAGS")]
    pub flags: Vec<String>,
}

const EXIT_CODES: &str = "\
Exit codes:
  0  success (check: allowed; test: every case passed)
  1  check: not allowed; lint: problems found; test: a case failed;
     diff, replay: a --fail-on-gain/--fail-on-loss gate fired;
     serve: cannot listen or failed;
     apply, delete, get, watch, status, replicas, ask: the server is
     unreachable, refused or did not answer within --timeout
     (stderr: `error: CODE: MESSAGE`)
  2  usage error; policy that does not load; unreadable -f file; test file that
     does not load (stderr: `FILE:LINE: problem`)";

const CLIENT_EXIT_CODES: &str = "\
Exit codes: 0 done; 1 the server is unreachable, refused or did not answer within --timeout:
stderr says `error: CODE: MESSAGE`
(CODE as gRPC names it, e.g. NotFound, InvalidArgument, Unavailable, DeadlineExceeded);
2 usage error or unreadable -f file (nothing was sent).";

/// `250ms`, `30s`, `5m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{s}` needs a unit: ms, s, m or h"))?;
    let (digits, unit) = s.split_at(split);
    let amount: u64 = digits
        .parse()
        .map_err(|_| format!("`{s}` does not start with a number"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(amount)),
        "s" => Ok(Duration::from_secs(amount)),
        "m" => Ok(Duration::from_secs(amount.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(amount.saturating_mul(3600))),
        _ => Err(format!("`{s}`: unknown unit `{unit}` (use ms, s, m or h)")),
    }
}

/// What the program is asked to do, with validated settings.
// Built once per process: the size of the serve variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Settings {
    Serve(ServeSettings),
    Check {
        engine: EngineSettings,
        request: Request,
        /// The object(s) or changed paths the request carries, for rules over content.
        content: Option<Content>,
        /// `--conditions return`: print the conditions of a conditional answer.
        return_conditions: bool,
    },
    WhoCan {
        engine: EngineSettings,
        action: Action,
        content: Option<Content>,
        /// `--conditions return`: list the conditional subjects too.
        return_conditions: bool,
    },
    Lint(PolicySettings),
    Test(TestSettings),
    Diff(DiffSettings),
    Replay(ReplaySettings),
    /// `authzd proxy`.
    Proxy(Box<proxy::ProxySettings>),
    /// The help of a command whose flags clap does not read (`authzd proxy --help`): printed on
    /// stdout, exit 0, as clap prints its own.
    Help(String),
    /// A command against a running server.
    Client {
        server: ClientSettings,
        command: ClientCommand,
    },
}

/// `authzd diff`'s settings: the old policy and chain, the new policy's paths (read with the
/// old one's load options), and how to report.
#[derive(Clone, Debug)]
pub struct DiffSettings {
    pub old: EngineSettings,
    pub new_paths: Vec<std::path::PathBuf>,
    pub output: DiffOutput,
    pub fail_on_gain: Vec<String>,
    pub fail_on_loss: Vec<String>,
    pub witness: bool,
}

/// `authzd replay`'s settings: the record files, the candidate policy (read with the load
/// options and chain of `engine`), and the old policy when one was given.
#[derive(Clone, Debug)]
pub struct ReplaySettings {
    pub records: Vec<std::path::PathBuf>,
    pub new_paths: Vec<std::path::PathBuf>,
    /// The chain and load options; its policy paths are the old policy's.
    pub engine: EngineSettings,
    /// Whether `--policy` was given (else the recorded answers are the old ones).
    pub old_policy: bool,
    pub output: DiffOutput,
    pub fail_on_gain: Vec<String>,
    pub fail_on_loss: Vec<String>,
}

fn non_empty(names: Vec<String>) -> Vec<String> {
    names.into_iter().filter(|n| !n.is_empty()).collect()
}

/// A usage error of `subcommand`, formatted (and exiting 2) like clap's own.
fn usage_error(subcommand: &str, message: String) -> clap::Error {
    let mut command = Cli::command();
    command.build();
    match command.find_subcommand_mut(subcommand) {
        Some(sub) => sub.error(ErrorKind::ArgumentConflict, message),
        None => command.error(ErrorKind::ArgumentConflict, message),
    }
}

impl Cli {
    /// The validated settings of the chosen subcommand; `Err` is a usage error (exit 2).
    pub fn settings(self) -> Result<Settings, clap::Error> {
        let client = |args: ClientArgs, command| Settings::Client {
            server: args.settings(),
            command,
        };
        Ok(match self.command {
            Command::Serve(mut args) => {
                let explicit_policy = !args.policy.policy.is_empty();
                if args.read_only && !explicit_policy {
                    return Err(usage_error(
                        "serve",
                        "--read-only needs --policy DIR (without --policy the embedded example is served, read-only already; in etcd mode the policy is written through etcd)".to_string(),
                    ));
                }
                let chain = authorization::chain(
                    args.chain.authorization_mode.take().map(|modes| modes.0),
                    args.webhook.clone(),
                )
                .map_err(|message| usage_error("serve", message))?;
                let etcd = args
                    .etcd
                    .clone()
                    .settings(explicit_policy)
                    .map_err(|message| usage_error("serve", message))?;
                let embedded_policy = !explicit_policy && etcd.is_none();
                let mut engine = engine_settings_with(args.policy, args.chain, chain.modes);
                if !explicit_policy {
                    // `serve` never falls back to a directory it was not given (the build
                    // tree's `policy/`, or `./policy`): the embedded example, or etcd.
                    engine.policy.paths.clear();
                }
                Settings::Serve(ServeSettings {
                    etcd,
                    read_only: args.read_only,
                    embedded_policy,
                    engine,
                    webhooks: chain.webhooks,
                    listen: tcp_first(args.listen),
                    unix_socket_mode: args.unix_socket_mode,
                    webhook_path: args.webhook_path,
                    conditional_authorization: args.alpha_conditional_authorization,
                    local_identity: UserInfo {
                        name: args.local_user,
                        groups: non_empty(args.local_groups),
                        ..UserInfo::default()
                    },
                    cache: CacheConfig {
                        capacity: args.cache_size,
                        allow_ttl: args.cache_allow_ttl,
                        deny_ttl: args.cache_deny_ttl,
                    },
                    watch: !args.no_watch,
                    max_revision_wait: args.max_revision_wait,
                    max_staleness: args.etcd.max_staleness,
                    auth: args.auth,
                    otlp_endpoint: args.otlp_endpoint,
                    envoy: crate::api::envoy::EnvoyConfig::new(
                        &args.envoy.envoy_subject_from,
                        &args.envoy.envoy_user_header,
                        &args.envoy.envoy_group_header,
                        args.envoy.envoy_extra_header_prefix.as_deref(),
                        args.envoy.envoy_path_templates,
                        args.envoy.envoy_allowed_by_header,
                        args.envoy.envoy_body_as_object,
                    )
                    .map_err(|message| usage_error("serve", message))?,
                    limits: args.limits.settings()?,
                    records: args.records.settings(args.audit.audit_log.is_some())?,
                    audit: args.audit.settings()?,
                    authzen: args.authzen,
                })
            }
            Command::Check(args) => Settings::Check {
                return_conditions: args.conditions == "return",
                content: args
                    .action
                    .content()
                    .map_err(|message| usage_error("check", message))?,
                engine: engine_settings(args.policy, args.chain)
                    .map_err(|message| usage_error("check", message))?,
                request: Request {
                    user: UserInfo {
                        name: args.user.unwrap_or_default(),
                        groups: args.groups,
                        ..UserInfo::default()
                    },
                    action: args.action.action(),
                },
            },
            Command::WhoCan(args) => Settings::WhoCan {
                return_conditions: args.conditions == "return",
                content: args
                    .action
                    .content()
                    .map_err(|message| usage_error("who-can", message))?,
                engine: engine_settings(args.policy, args.chain)
                    .map_err(|message| usage_error("who-can", message))?,
                action: args.action.action(),
            },
            Command::Lint(args) => Settings::Lint(args.policy.settings()),
            Command::Diff(args) => Settings::Diff(DiffSettings {
                new_paths: args.policy_new,
                output: args.output,
                fail_on_gain: args.fail_on_gain,
                fail_on_loss: args.fail_on_loss,
                witness: args.witness,
                old: engine_settings(args.policy, args.chain)
                    .map_err(|message| usage_error("diff", message))?,
            }),
            Command::Replay(args) => Settings::Replay(ReplaySettings {
                records: args.records,
                new_paths: args.policy_new,
                old_policy: !args.policy.policy.is_empty(),
                output: args.output,
                fail_on_gain: args.fail_on_gain,
                fail_on_loss: args.fail_on_loss,
                engine: engine_settings(args.policy, args.chain)
                    .map_err(|message| usage_error("replay", message))?,
            }),
            Command::Test(args) => Settings::Test(
                args.settings()
                    .map_err(|message| usage_error("test", message))?,
            ),
            Command::Apply(args) => client(
                args.client,
                ClientCommand::Apply {
                    sources: ApplyArgs::sources(args.files)?,
                    dry_run: args.dry_run,
                    witness: args.witness,
                    ack: args.ack,
                },
            ),
            Command::Delete(args) => client(
                args.client,
                ClientCommand::Delete {
                    object: object_ref("delete", args.kind, args.namespace, args.name)?,
                    ack: args.ack,
                },
            ),
            Command::Get(args) => {
                let command = match args.name {
                    Some(name) => {
                        ClientCommand::Get(object_ref("get", args.kind, args.namespace, name)?)
                    }
                    None => ClientCommand::List {
                        kind: args.kind,
                        namespace: scope("get", args.kind, args.namespace)?,
                    },
                };
                client(args.client, command)
            }
            Command::Watch(args) => client(
                args.client,
                ClientCommand::Watch {
                    from_revision: args.from_revision,
                    manifests: args.manifests,
                },
            ),
            Command::Status(args) => client(args.client, ClientCommand::Status),
            Command::Replicas(args) => client(args.client, ClientCommand::Replicas),
            Command::Proxy(args) => {
                match proxy::parse(&args.flags).map_err(|message| usage_error("proxy", message))? {
                    proxy::ProxyCommand::Run(settings) => Settings::Proxy(settings),
                    // Printed as help, not through clap: a raw clap error starts with
                    // "error:" whatever its kind.
                    proxy::ProxyCommand::Help(text) => Settings::Help(text),
                }
            }
            Command::Ask(args) => {
                let question = match args.question.len() {
                    0 => None,
                    3 | 4 => {
                        let mut user = args.question[0].clone();
                        for group in &args.groups {
                            user.push(',');
                            user.push_str(group);
                        }
                        Some(
                            std::iter::once(user)
                                .chain(args.question[1..].iter().cloned())
                                .collect::<Vec<_>>()
                                .join(" "),
                        )
                    }
                    _ => {
                        return Err(usage_error(
                            "ask",
                            "a question is USER VERB RESOURCE [NAMESPACE]".to_string(),
                        ))
                    }
                };
                let local_cache = args.local_cache.then(|| {
                    (
                        args.subscriber_id
                            .unwrap_or_else(|| format!("authzd-ask-{}", std::process::id())),
                        args.max_staleness,
                    )
                });
                client(
                    args.client,
                    ClientCommand::Ask {
                        question,
                        local_cache,
                    },
                )
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
