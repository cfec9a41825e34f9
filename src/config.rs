//! Command line and typed settings. Flags are parsed by clap into [`Cli`], then turned into
//! validated settings that the rest of the program reads; nothing else looks at flags.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{ArgGroup, Args, CommandFactory, Parser, Subcommand};

use crate::cache::CacheConfig;
use crate::engine::{EngineConfig, Mode};
use crate::policy::load::LoadOptions;
use crate::request::{Action, NonResourceAttributes, Request, ResourceAttributes, UserInfo};
use crate::store::{ObjectKind, ObjectRef};
use crate::telemetry::LogFormat;
use crate::transport::ListenAddr;

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
    /// Create or replace policy objects on a running server from YAML or JSON manifests.
    #[command(after_help = CLIENT_EXIT_CODES)]
    Apply(ApplyArgs),
    /// Delete one policy object on a running server.
    #[command(after_help = CLIENT_EXIT_CODES)]
    Delete(DeleteArgs),
    /// Print one policy object (YAML), or every object of a kind, from a running server.
    #[command(after_help = CLIENT_EXIT_CODES)]
    Get(GetArgs),
    /// Print policy changes on a running server as they happen, until interrupted.
    #[command(after_help = CLIENT_EXIT_CODES)]
    Watch(WatchArgs),
    /// Print a running server's revision, last reload error and cache statistics.
    #[command(after_help = CLIENT_EXIT_CODES)]
    Status(StatusArgs),
}

const EXIT_CODES: &str = "\
Exit codes:
  0  success (check: allowed)
  1  check: not allowed; lint: problems found; serve: cannot listen or failed;
     apply, delete, get, watch, status: the server is unreachable or refused
     (stderr: `error: CODE: MESSAGE`)
  2  usage error; policy that does not load; unreadable -f file";

const CLIENT_EXIT_CODES: &str = "\
Exit codes: 0 done; 1 the server is unreachable or refused: stderr says `error: CODE: MESSAGE`
(CODE as gRPC names it, e.g. NotFound, InvalidArgument, Unavailable, DeadlineExceeded);
2 usage error or unreadable -f file (nothing was sent).";

/// Where the client commands find the server.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// The server's gRPC address (`http://HOST:PORT`; a bare `HOST:PORT` means http).
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:50051",
        env = "AUTHZD_SERVER",
        value_parser = parse_server
    )]
    pub server: String,

    /// How long to wait for the connection and for each answer (e.g. `10s`, `500ms`); for
    /// `watch`, for the connection and the start of the stream only.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Bearer token for a server with --token-auth-file (prefer the environment variable: a
    /// command line is visible to other local users).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "AUTHZD_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,

    /// For an `https://` server: the PEM CA(s) its certificate must chain to (no system roots
    /// are used).
    #[arg(long, value_name = "FILE")]
    pub certificate_authority: Option<PathBuf>,

    /// For an `https://` server that verifies clients: this PEM client certificate (CN = user,
    /// each O = a group).
    #[arg(long, value_name = "FILE", requires = "client_key")]
    pub client_certificate: Option<PathBuf>,

    /// The PEM private key of --client-certificate.
    #[arg(long, value_name = "FILE", requires = "client_certificate")]
    pub client_key: Option<PathBuf>,
}

/// `http://host:port` or `https://host:port` as given, or `host:port` made into an `http` URL.
pub fn parse_server(s: &str) -> Result<String, String> {
    let url = if s.contains("://") {
        s.to_string()
    } else {
        format!("http://{s}")
    };
    let uri: tonic::transport::Uri = url
        .parse()
        .map_err(|e| format!("`{s}` is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => {
            return Err(format!(
            "`{s}`: scheme `{other}` is not supported (use http://HOST:PORT or https://HOST:PORT)"
        ))
        }
        None => return Err(format!("`{s}` is not a URL")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("`{s}` names no host"));
    }
    Ok(url)
}

/// A policy object kind as kubectl spells it: `role`, `clusterrole`, `rolebinding`,
/// `clusterrolebinding`, plural forms, any case.
fn parse_kind(s: &str) -> Result<ObjectKind, String> {
    s.parse()
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub client: ClientArgs,

    /// Manifest file (YAML or JSON, one or more objects), repeatable; `-` reads stdin. Each
    /// file is applied as one request, in order.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,

    /// Validate and report what would be applied without changing anything.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// role, clusterrole, rolebinding or clusterrolebinding (plural forms too).
    #[arg(value_name = "KIND", value_parser = parse_kind)]
    pub kind: ObjectKind,
    /// Name of the object.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Namespace of a Role or RoleBinding (required for those, refused for cluster kinds).
    #[arg(long, short = 'n', value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// role, clusterrole, rolebinding or clusterrolebinding (plural forms too).
    #[arg(value_name = "KIND", value_parser = parse_kind)]
    pub kind: ObjectKind,
    /// Name of the object; without it, every object of KIND is listed.
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// Namespace of a Role or RoleBinding: required with NAME; when listing, only that
    /// namespace (default: every namespace).
    #[arg(long, short = 'n', value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Start with every kept change after this revision (0: only changes from now on).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub from_revision: u64,
    /// Print each event's manifest too (indented, under the event line).
    #[arg(long)]
    pub manifests: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// Policy file or directory (repeatable). Default: `./policy` if it exists, else the
    /// `policy/` directory shipped in the source tree.
    #[arg(long = "policy", value_name = "PATH")]
    pub policy: Vec<PathBuf>,

    /// Seed 003's master namespace: its roles and bindings are cluster-wide.
    #[arg(long, value_name = "NS", default_value = "master")]
    pub master_namespace: String,
}

#[derive(Debug, Args)]
pub struct ChainArgs {
    /// Authorizer chain, in order: AlwaysAllow, AlwaysDeny, ABAC, RBAC.
    #[arg(long, value_name = "MODES", default_value = "RBAC,ABAC", value_parser = parse_chain)]
    pub authorization_mode: ModeChain,

    /// A user allowed everything and listed in every who-can answer (repeatable).
    #[arg(long = "super-user", value_name = "NAME")]
    pub super_users: Vec<String>,

    /// A group whose members are allowed everything (repeatable). Defaults to
    /// `system:masters`, which kube-apiserver always privileges; giving any --super-group
    /// replaces the default, and `--super-group ''` means none.
    #[arg(
        long = "super-group",
        value_name = "NAME",
        default_value = "system:masters"
    )]
    pub super_groups: Vec<String>,
}

/// `--authorization-mode`, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeChain(pub Vec<Mode>);

fn parse_chain(s: &str) -> Result<ModeChain, String> {
    Mode::parse_chain(s).map(ModeChain)
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub chain: ChainArgs,

    /// Address to listen on: `HOST:PORT` (port 0 picks a free port; the bound address is
    /// printed) or `unix:///ABSOLUTE/PATH`. Repeatable: gRPC and HTTP on every listener.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:50051",
        env = "AUTHZD_LISTEN"
    )]
    pub listen: Vec<ListenAddr>,

    /// Path of the Kubernetes authorization webhook endpoint (SubjectAccessReview in, the
    /// same object with `status` out).
    #[arg(long, value_name = "PATH", default_value = "/authorize", value_parser = parse_webhook_path)]
    pub webhook_path: String,

    /// The caller identity every request gets while no authentication is configured.
    #[arg(long, value_name = "NAME", default_value = "system:admin")]
    pub local_user: String,

    /// Groups of the local caller identity (repeatable).
    #[arg(
        long = "local-group",
        value_name = "NAME",
        default_value = "system:masters"
    )]
    pub local_groups: Vec<String>,

    /// Decision cache size in entries; 0 disables the cache.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub cache_size: usize,

    /// Optional lifetime of cached allows (e.g. `5m`, `30s`, `250ms`). Defence in depth only:
    /// invalidation on policy change does not depend on it.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub cache_allow_ttl: Option<Duration>,

    /// Optional lifetime of cached denies and no-opinions.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub cache_deny_ttl: Option<Duration>,

    /// Do not watch the policy files for changes (SIGHUP still reloads).
    #[arg(long)]
    pub no_watch: bool,

    /// The longest a request with `min_revision` waits for the server to reach it (less if
    /// the request's own deadline is shorter).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub max_revision_wait: Duration,

    /// Export traces over OTLP/gRPC to this collector (e.g. `http://127.0.0.1:4317`). Without
    /// it, the standard `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
    /// turn export on; with neither, no spans are exported.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    #[command(flatten)]
    pub envoy: EnvoyArgs,
    #[command(flatten)]
    pub limits: LimitArgs,

    #[command(flatten)]
    pub audit: AuditArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
}

/// How callers authenticate (docs/spec/SPEC.md §3). Without any of these, only a local listener
/// (loopback or Unix socket) serves, and every caller is the local identity.
#[derive(Debug, Args, Clone, Default)]
pub struct AuthArgs {
    /// Bearer tokens, in kube-apiserver's CSV format: `token,user,uid[,"group1,group2"]`.
    /// Callers send `authorization: Bearer <token>`.
    #[arg(long, value_name = "FILE")]
    pub token_auth_file: Option<PathBuf>,

    /// Serve a non-loopback listener without authentication, every caller acting as the local
    /// identity. Only for networks where every client is trusted.
    #[arg(long)]
    pub insecure_allow_unauthenticated_remote: bool,

    /// Serve TLS on TCP listeners with this PEM certificate (chain); reloaded when it changes.
    #[arg(long, value_name = "FILE", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// The PEM private key of --tls-cert-file; reloaded when it changes.
    #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,

    /// Verify client certificates against these PEM CAs; a verified certificate is the caller
    /// (CN = user, each O = a group). Needs --tls-cert-file.
    #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
    pub client_ca_file: Option<PathBuf>,
}

/// TCP listeners before Unix sockets, each group in the order given (stable), so the first
/// `authzd listening on` line is a TCP address whenever there is one.
fn tcp_first(mut listen: Vec<ListenAddr>) -> Vec<ListenAddr> {
    listen.sort_by_key(|addr| matches!(addr, ListenAddr::Unix(_)));
    listen
}

/// An absolute URL path, `/authorize` by default, that no other endpoint answers (the fixed
/// routes would win, and the webhook would silently never be called).
pub fn parse_webhook_path(s: &str) -> Result<String, String> {
    if !s.starts_with('/') || s.contains(['?', '#', ' ']) || s.len() < 2 {
        return Err(format!("`{s}` is not an absolute URL path like /authorize"));
    }
    const TAKEN: [&str; 4] = ["/apis/", "/authz.", "/grpc.", "/healthz"];
    if s == "/readyz" || TAKEN.iter().any(|taken| s.starts_with(taken)) {
        return Err(format!("`{s}` is already served by another endpoint"));
    }
    Ok(s.to_string())
}

/// How the Envoy ext_authz service (`envoy.service.auth.v3.Authorization`) reads a request.
#[derive(Debug, Args)]
#[command(next_help_heading = "Envoy ext_authz")]
pub struct EnvoyArgs {
    /// Where the subject comes from: `headers` (set by the mesh's authentication) or
    /// `peer-principal` (the authenticated peer Envoy reports, as the user name).
    #[arg(long, value_name = "SOURCE", default_value = "headers",
          value_parser = [crate::api::envoy::SUBJECT_FROM_HEADERS, crate::api::envoy::SUBJECT_FROM_PEER_PRINCIPAL])]
    pub envoy_subject_from: String,

    /// Request header naming the user.
    #[arg(long, value_name = "HEADER", default_value = "x-remote-user")]
    pub envoy_user_header: String,

    /// Request header naming the groups (repeated headers or comma-separated values).
    #[arg(long, value_name = "HEADER", default_value = "x-remote-group")]
    pub envoy_group_header: String,

    /// Prefix of request headers carrying extra user attributes (e.g. `x-remote-extra-`).
    #[arg(long, value_name = "PREFIX")]
    pub envoy_extra_header_prefix: Option<String>,

    /// A path shape that makes a request a resource request (repeatable, first match wins),
    /// e.g. `/api/v1/namespaces/{namespace}/{resource}/{name}`. Other paths are non-resource
    /// requests.
    #[arg(long = "envoy-path-template", value_name = "TEMPLATE",
          value_parser = crate::api::envoy::PathTemplate::parse)]
    pub envoy_path_templates: Vec<crate::api::envoy::PathTemplate>,

    /// Add `x-authzd-allowed-by` (the deciding rule) to allowed requests sent upstream.
    #[arg(long)]
    pub envoy_allowed_by_header: bool,
}

/// Overload protection of `serve` (README "Limits"): what one server takes on at once and how
/// long anyone may hold it.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// Requests worked on at once, across all connections; one more is refused at once with
    /// RESOURCE_EXHAUSTED (never queued). Streams count only while being set up.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_concurrent_requests: usize,

    /// The longest one request may take, from its arrival to its answer; then it is abandoned
    /// with DEADLINE_EXCEEDED. Bounds slow handlers and clients that send slowly.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// HTTP/2 streams (concurrent requests) one connection may open.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub http2_max_concurrent_streams: u32,

    /// Largest header list (all request headers and metadata, in bytes) one request may send.
    #[arg(long, value_name = "BYTES", default_value_t = 16 * 1024)]
    pub http2_max_header_list_size: u32,

    /// Optional: how often an HTTP/2 ping checks that an idle connection's client is still
    /// there (for clients behind proxies that answer TCP keepalive themselves). Off by
    /// default: TCP keepalive finds vanished clients at no cost per request.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub http2_keepalive_interval: Option<Duration>,

    /// How long a ping may go unanswered before the connection is closed.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub http2_keepalive_timeout: Duration,

    /// Silence on a TCP connection before the kernel starts keepalive probes (every 10 s; three
    /// unanswered close the connection), so a client that vanished without closing is found.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub tcp_keepalive: Duration,

    /// Watch streams open at once (they hold no request slot while streaming); one more is
    /// refused with RESOURCE_EXHAUSTED.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_watches: usize,

    /// Open connections, across all listeners; one more is closed as soon as it is accepted,
    /// so idle or slow clients cannot exhaust file descriptors and memory.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_connections: usize,

    /// Optional: close every connection after this long (gracefully: in-flight requests get
    /// 10 s to finish, clients reconnect). Off by default because it also ends watch streams.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_connection_age: Option<Duration>,
}

/// The audit log of `serve` (README "Audit log").
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Append one JSON line per review call and policy write to PATH (created if missing).
    #[arg(long, value_name = "PATH")]
    pub audit_log: Option<PathBuf>,

    /// Audit entries waiting for the writer; when full, new entries are dropped and counted
    /// (PolicyAdmin Status `audit_dropped`) rather than slowing requests down.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub audit_queue: usize,
}

/// Validated [`LimitArgs`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeLimits {
    pub max_concurrent_requests: usize,
    pub request_timeout: Duration,
    pub http2_max_concurrent_streams: u32,
    pub http2_max_header_list_size: u32,
    pub http2_keepalive_interval: Option<Duration>,
    pub http2_keepalive_timeout: Duration,
    pub tcp_keepalive: Duration,
    pub max_connection_age: Option<Duration>,
    pub max_watches: usize,
    pub max_connections: usize,
}

/// Validated [`AuditArgs`]: present when `--audit-log` is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditSettings {
    pub path: PathBuf,
    pub queue: usize,
}

impl LimitArgs {
    fn settings(self) -> Result<ServeLimits, clap::Error> {
        let positive = |flag: &str, value: u64| {
            if value == 0 {
                Err(usage_error("serve", format!("--{flag} must be at least 1")))
            } else {
                Ok(())
            }
        };
        positive(
            "max-concurrent-requests",
            self.max_concurrent_requests as u64,
        )?;
        positive("max-watches", self.max_watches as u64)?;
        positive("max-connections", self.max_connections as u64)?;
        positive(
            "http2-max-concurrent-streams",
            u64::from(self.http2_max_concurrent_streams),
        )?;
        let millis = |duration: Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        positive("request-timeout", millis(self.request_timeout))?;
        if let Some(interval) = self.http2_keepalive_interval {
            positive("http2-keepalive-interval", millis(interval))?;
        }
        // The kernel counts keepalive idle time in whole seconds.
        if self.tcp_keepalive.as_secs() == 0 {
            return Err(usage_error(
                "serve",
                "--tcp-keepalive must be at least 1s".to_string(),
            ));
        }
        Ok(ServeLimits {
            max_concurrent_requests: self.max_concurrent_requests,
            request_timeout: self.request_timeout,
            http2_max_concurrent_streams: self.http2_max_concurrent_streams,
            http2_max_header_list_size: self.http2_max_header_list_size,
            http2_keepalive_interval: self.http2_keepalive_interval,
            http2_keepalive_timeout: self.http2_keepalive_timeout,
            tcp_keepalive: self.tcp_keepalive,
            max_connection_age: self.max_connection_age,
            max_connections: self.max_connections,
            max_watches: self.max_watches,
        })
    }
}

impl AuditArgs {
    fn settings(self) -> Result<Option<AuditSettings>, clap::Error> {
        if self.audit_queue == 0 {
            return Err(usage_error(
                "serve",
                "--audit-queue must be at least 1".to_string(),
            ));
        }
        Ok(self.audit_log.map(|path| AuditSettings {
            path,
            queue: self.audit_queue,
        }))
    }
}

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
    #[command(flatten)]
    pub action: ActionArgs,
}

#[derive(Debug, Args)]
pub struct WhoCanArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub chain: ChainArgs,
    #[command(flatten)]
    pub action: ActionArgs,
}

#[derive(Debug, Args)]
pub struct LintArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
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

#[derive(Clone, Debug)]
pub struct ServeSettings {
    pub engine: EngineSettings,
    /// Every listener, TCP first (the order the startup lines are printed in).
    pub listen: Vec<ListenAddr>,
    pub webhook_path: String,
    /// The identity of every caller while no authentication is configured.
    pub local_identity: UserInfo,
    pub cache: CacheConfig,
    /// Watch the policy files and reload on change.
    pub watch: bool,
    pub max_revision_wait: Duration,
    pub auth: AuthArgs,
    /// `--otlp-endpoint`; the standard OTLP environment variables also turn export on.
    pub otlp_endpoint: Option<String>,
    /// How `envoy.service.auth.v3.Authorization/Check` reads a request.
    pub envoy: crate::api::envoy::EnvoyConfig,
    pub limits: ServeLimits,
    pub audit: Option<AuditSettings>,
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
    },
    WhoCan {
        engine: EngineSettings,
        action: Action,
    },
    Lint(PolicySettings),
    /// A command against a running server.
    Client {
        server: ClientSettings,
        command: ClientCommand,
    },
}

/// How to reach the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientSettings {
    /// `http://HOST:PORT`.
    pub url: String,
    /// For the connection and each answer (for `watch`, the start of the stream).
    pub timeout: Duration,
    /// Sent as `authorization: Bearer TOKEN`.
    pub token: Option<String>,
    /// For `https://`: the server's CA, and the client certificate and key, if any.
    pub certificate_authority: Option<PathBuf>,
    pub client_identity: Option<(PathBuf, PathBuf)>,
}

/// Where one manifest comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManifestSource {
    Stdin,
    File(PathBuf),
}

impl std::fmt::Display for ManifestSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ManifestSource::Stdin => f.write_str("stdin"),
            ManifestSource::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// What a client command asks of the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientCommand {
    Apply {
        sources: Vec<ManifestSource>,
        dry_run: bool,
    },
    Delete(ObjectRef),
    Get(ObjectRef),
    /// Every object of `kind` in `namespace` (every namespace when empty).
    List {
        kind: ObjectKind,
        namespace: String,
    },
    Watch {
        from_revision: u64,
        manifests: bool,
    },
    Status,
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

fn non_empty(names: Vec<String>) -> Vec<String> {
    names.into_iter().filter(|n| !n.is_empty()).collect()
}

impl PolicyArgs {
    fn settings(self) -> PolicySettings {
        let paths = if self.policy.is_empty() {
            vec![default_policy_path()]
        } else {
            self.policy
        };
        PolicySettings {
            paths,
            load: LoadOptions {
                master_namespace: self.master_namespace,
            },
        }
    }
}

fn engine_settings(policy: PolicyArgs, chain: ChainArgs) -> EngineSettings {
    EngineSettings {
        policy: policy.settings(),
        engine: EngineConfig {
            modes: chain.authorization_mode.0,
            super_users: non_empty(chain.super_users),
            super_groups: non_empty(chain.super_groups),
        },
    }
}

impl ActionArgs {
    fn action(self) -> Action {
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

/// A usage error of `subcommand`, formatted (and exiting 2) like clap's own.
fn usage_error(subcommand: &str, message: String) -> clap::Error {
    let mut command = Cli::command();
    command.build();
    match command.find_subcommand_mut(subcommand) {
        Some(sub) => sub.error(ErrorKind::ArgumentConflict, message),
        None => command.error(ErrorKind::ArgumentConflict, message),
    }
}

/// One object named on the command line: namespaced kinds need `-n`, cluster kinds refuse it.
fn object_ref(
    subcommand: &str,
    kind: ObjectKind,
    namespace: Option<String>,
    name: String,
) -> Result<ObjectRef, clap::Error> {
    let namespace = scope(subcommand, kind, namespace)?;
    if kind.is_namespaced() && namespace.is_empty() {
        return Err(usage_error(
            subcommand,
            format!(
                "a {} is namespaced: give its namespace with -n NAMESPACE",
                kind.as_str()
            ),
        ));
    }
    Ok(ObjectRef {
        kind,
        namespace,
        name,
    })
}

/// The namespace given for `kind`, empty when none; refused for a cluster-scoped kind.
fn scope(
    subcommand: &str,
    kind: ObjectKind,
    namespace: Option<String>,
) -> Result<String, clap::Error> {
    match namespace {
        Some(ns) if !kind.is_namespaced() => Err(usage_error(
            subcommand,
            format!(
                "a {} is cluster-scoped: -n {ns} does not apply",
                kind.as_str()
            ),
        )),
        Some(ns) if ns.is_empty() => Err(usage_error(
            subcommand,
            "-n needs a non-empty namespace".to_string(),
        )),
        namespace => Ok(namespace.unwrap_or_default()),
    }
}

impl ClientArgs {
    fn settings(self) -> ClientSettings {
        ClientSettings {
            url: self.server,
            timeout: self.timeout,
            token: self.token,
            certificate_authority: self.certificate_authority,
            client_identity: self.client_certificate.zip(self.client_key),
        }
    }
}

impl ApplyArgs {
    fn sources(files: Vec<PathBuf>) -> Result<Vec<ManifestSource>, clap::Error> {
        let stdin_count = files.iter().filter(|f| f.as_os_str() == "-").count();
        if stdin_count > 1 {
            return Err(usage_error(
                "apply",
                "`-f -` (stdin) can be given only once".to_string(),
            ));
        }
        Ok(files
            .into_iter()
            .map(|f| {
                if f.as_os_str() == "-" {
                    ManifestSource::Stdin
                } else {
                    ManifestSource::File(f)
                }
            })
            .collect())
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
            Command::Serve(args) => Settings::Serve(ServeSettings {
                engine: engine_settings(args.policy, args.chain),
                listen: tcp_first(args.listen),
                webhook_path: args.webhook_path,
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
                auth: args.auth,
                otlp_endpoint: args.otlp_endpoint,
                envoy: crate::api::envoy::EnvoyConfig::new(
                    &args.envoy.envoy_subject_from,
                    &args.envoy.envoy_user_header,
                    &args.envoy.envoy_group_header,
                    args.envoy.envoy_extra_header_prefix.as_deref(),
                    args.envoy.envoy_path_templates,
                    args.envoy.envoy_allowed_by_header,
                )
                .map_err(|message| usage_error("serve", message))?,
                limits: args.limits.settings()?,
                audit: args.audit.settings()?,
            }),
            Command::Check(args) => Settings::Check {
                engine: engine_settings(args.policy, args.chain),
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
                engine: engine_settings(args.policy, args.chain),
                action: args.action.action(),
            },
            Command::Lint(args) => Settings::Lint(args.policy.settings()),
            Command::Apply(args) => client(
                args.client,
                ClientCommand::Apply {
                    sources: ApplyArgs::sources(args.files)?,
                    dry_run: args.dry_run,
                },
            ),
            Command::Delete(args) => client(
                args.client,
                ClientCommand::Delete(object_ref("delete", args.kind, args.namespace, args.name)?),
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn listen_is_repeatable_tcp_first_and_webhook_paths_are_checked() {
        let cli = Cli::try_parse_from([
            "authzd",
            "serve",
            "--listen",
            "unix:///run/a.sock",
            "--listen",
            "127.0.0.1:0",
            "--listen",
            "127.0.0.1:0",
            "--webhook-path",
            "/webhook/authz",
        ])
        .unwrap();
        let Settings::Serve(s) = cli.settings().unwrap() else {
            panic!("not serve")
        };
        let listen: Vec<String> = s.listen.iter().map(ToString::to_string).collect();
        assert_eq!(listen, ["127.0.0.1:0", "127.0.0.1:0", "unix:///run/a.sock"]);
        assert_eq!(s.webhook_path, "/webhook/authz");
        for taken in [
            "/healthz",
            "/readyz",
            "/apis/x",
            "/authz.v1.Authorizer/Authorize",
            "x",
            "/",
        ] {
            assert!(parse_webhook_path(taken).is_err(), "{taken}");
        }
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_defaults() {
        let cli = Cli::try_parse_from(["authzd", "serve"]).unwrap();
        let Settings::Serve(s) = cli.settings().unwrap() else {
            panic!("not serve")
        };
        assert_eq!(
            s.listen,
            vec!["127.0.0.1:50051".parse::<ListenAddr>().unwrap()]
        );
        assert_eq!(s.webhook_path, "/authorize");
        assert_eq!(s.engine.engine.modes, vec![Mode::Rbac, Mode::Abac]);
        assert_eq!(s.engine.engine.super_groups, vec!["system:masters"]);
        assert!(s.engine.engine.super_users.is_empty());
        assert_eq!(s.engine.policy.load.master_namespace, "master");
        assert_eq!(s.local_identity.name, "system:admin");
        assert_eq!(s.local_identity.groups, vec!["system:masters"]);
        assert_eq!(s.engine.policy.paths, vec![default_policy_path()]);
    }

    #[test]
    fn limit_and_audit_flags() {
        let cli = Cli::try_parse_from(["authzd", "serve"]).unwrap();
        let Settings::Serve(s) = cli.settings().unwrap() else {
            panic!("not serve")
        };
        assert_eq!(s.limits.max_concurrent_requests, 1024);
        assert_eq!(s.limits.request_timeout, Duration::from_secs(30));
        assert_eq!(s.limits.http2_keepalive_interval, None);
        assert_eq!(s.limits.tcp_keepalive, Duration::from_secs(30));
        assert_eq!(s.audit, None);

        let cli = Cli::try_parse_from([
            "authzd",
            "serve",
            "--max-concurrent-requests",
            "3",
            "--request-timeout",
            "250ms",
            "--audit-log",
            "/tmp/a.jsonl",
            "--http2-keepalive-interval",
            "20s",
            "--tcp-keepalive",
            "2m",
        ])
        .unwrap();
        let Settings::Serve(s) = cli.settings().unwrap() else {
            panic!("not serve")
        };
        assert_eq!(s.limits.max_concurrent_requests, 3);
        assert_eq!(s.limits.request_timeout, Duration::from_millis(250));
        assert_eq!(
            s.limits.http2_keepalive_interval,
            Some(Duration::from_secs(20))
        );
        assert_eq!(s.limits.tcp_keepalive, Duration::from_secs(120));
        assert_eq!(
            s.audit,
            Some(AuditSettings {
                path: "/tmp/a.jsonl".into(),
                queue: 10_000
            })
        );

        for bad in [
            ["--max-concurrent-requests", "0"],
            ["--request-timeout", "0s"],
            ["--audit-queue", "0"],
            ["--http2-keepalive-interval", "0s"],
            ["--tcp-keepalive", "500ms"],
        ] {
            let cli = Cli::try_parse_from(["authzd", "serve", bad[0], bad[1]]).unwrap();
            let err = cli.settings().unwrap_err();
            assert!(err.to_string().contains(bad[0]), "{err}");
        }
    }

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

    fn client(args: &[&str]) -> Result<(ClientSettings, ClientCommand), clap::Error> {
        let mut all = vec!["authzd"];
        all.extend_from_slice(args);
        match Cli::try_parse_from(all)?.settings()? {
            Settings::Client { server, command } => Ok((server, command)),
            other => panic!("not a client command: {other:?}"),
        }
    }

    #[test]
    fn client_defaults_and_server_forms() {
        let (server, command) = client(&["status"]).unwrap();
        assert_eq!(server.timeout, Duration::from_secs(10));
        assert_eq!(command, ClientCommand::Status);
        // The default URL, unless AUTHZD_SERVER is set in this environment.
        if std::env::var_os("AUTHZD_SERVER").is_none() {
            assert_eq!(server.url, "http://127.0.0.1:50051");
        }
        let (server, _) =
            client(&["status", "--server", "10.0.0.1:9000", "--timeout", "250ms"]).unwrap();
        assert_eq!(server.url, "http://10.0.0.1:9000");
        assert_eq!(server.timeout, Duration::from_millis(250));
        assert!(client(&["status", "--server", "ftp://x:1"]).is_err());
        assert_eq!(
            client(&["status", "--server", "https://x:1"])
                .unwrap()
                .0
                .url,
            "https://x:1"
        );
        assert!(client(&["status", "--timeout", "10"]).is_err());
    }

    #[test]
    fn kinds_are_spelled_like_kubectl_and_scope_is_checked() {
        let (_, command) = client(&["get", "rolebindings", "b", "-n", "dev"]).unwrap();
        assert_eq!(
            command,
            ClientCommand::Get(ObjectRef {
                kind: ObjectKind::RoleBinding,
                namespace: "dev".into(),
                name: "b".into(),
            })
        );
        let (_, command) = client(&["delete", "ClusterRole", "admin"]).unwrap();
        assert!(matches!(command, ClientCommand::Delete(r) if r.kind == ObjectKind::ClusterRole));
        let (_, command) = client(&["get", "roles"]).unwrap();
        assert_eq!(
            command,
            ClientCommand::List {
                kind: ObjectKind::Role,
                namespace: String::new()
            }
        );
        for bad in [
            &["get", "role", "x"][..],
            &["delete", "rolebinding", "x"],
            &["get", "clusterrole", "x", "-n", "dev"],
            &["get", "clusterroles", "-n", "dev"],
            &["get", "role", "x", "-n", ""],
            &["get", "widgets"],
        ] {
            let error = client(bad).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad:?}: {error}");
        }
    }

    #[test]
    fn apply_takes_files_and_stdin_once() {
        let (_, command) = client(&["apply", "-f", "a.yaml", "-f", "-", "--dry-run"]).unwrap();
        assert_eq!(
            command,
            ClientCommand::Apply {
                sources: vec![
                    ManifestSource::File(PathBuf::from("a.yaml")),
                    ManifestSource::Stdin
                ],
                dry_run: true,
            }
        );
        assert!(client(&["apply"]).is_err());
        assert!(client(&["apply", "-f", "-", "-f", "-"]).is_err());
    }

    #[test]
    fn watch_flags() {
        let (_, command) = client(&["watch", "--from-revision", "7", "--manifests"]).unwrap();
        assert_eq!(
            command,
            ClientCommand::Watch {
                from_revision: 7,
                manifests: true
            }
        );
    }
}
