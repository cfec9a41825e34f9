//! `serve`: its flags (listeners, webhook path, local identity, cache, authentication, Envoy
//! ext_authz, limits, audit log) and what they become once validated ([`ServeSettings`]).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::api::limits::{ContentLimits, DEFAULT_MAX_CONTENT_BYTES, MAX_REQUEST_BYTES};
use crate::cache::CacheConfig;
use crate::request::UserInfo;
use crate::transport::{ListenAddr, SocketMode};

use super::{parse_duration, usage_error, ChainArgs, EngineSettings, PolicyArgs};

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub chain: ChainArgs,
    #[command(flatten)]
    pub webhook: super::authorization::WebhookArgs,

    /// Address to listen on: `HOST:PORT` (port 0 picks a free port; the bound address is
    /// printed) or `unix:///ABSOLUTE/PATH`. Repeatable: gRPC and HTTP on every listener.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:50051",
        env = "AUTHZD_LISTEN"
    )]
    pub listen: Vec<ListenAddr>,

    /// Mode of every `unix://` listener's socket file, in octal, whatever the umask.
    /// Connecting needs write permission, so the default lets only authzd's own user in;
    /// `0660` admits the socket's group too. A mode with write for others lets every local
    /// user connect, so without authentication it is refused as a remote listener is (unless
    /// --insecure-allow-unauthenticated-remote).
    #[arg(long, value_name = "MODE", default_value = "0600")]
    pub unix_socket_mode: SocketMode,

    /// Path of the Kubernetes authorization webhook endpoint (SubjectAccessReview in, the
    /// same object with `status` out).
    #[arg(long, value_name = "PATH", default_value = "/authorize", value_parser = parse_webhook_path)]
    pub webhook_path: String,

    /// Alpha: Kubernetes' conditional authorization (KEP-5681) on the webhook path. A
    /// SubjectAccessReview with `spec.conditionalAuthorization.mode` may be answered with
    /// `status.conditionSetChain`, and
    /// `/apis/authorization.k8s.io/v1alpha1/authorizationconditionsreviews` evaluates them.
    /// Follows upstream's shapes, which may still change.
    #[arg(long)]
    pub alpha_conditional_authorization: bool,

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

    /// Follow the --policy directory without writing it: no lock is taken (another server
    /// may be its writer), changes on disk are still loaded, and admin writes (Apply,
    /// Delete) are refused with FAILED_PRECONDITION. A directory this process cannot write
    /// (a ConfigMap volume, a read-only file system) is followed read-only without it.
    #[arg(long)]
    pub read_only: bool,

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
    pub records: RecordArgs,
    #[command(flatten)]
    pub authzen: AuthzenArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
    #[command(flatten)]
    pub etcd: EtcdArgs,
}

/// The policy in etcd instead of a directory (docs/etcd.md §2), flags as kube-apiserver names them.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Policy in etcd (instead of --policy)")]
pub struct EtcdArgs {
    /// etcd endpoints (`http://HOST:PORT` or `https://…`), comma-separated or repeated: the
    /// policy is read from and written to etcd, shared by every replica, instead of --policy.
    #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',')]
    pub etcd_servers: Vec<String>,

    /// The key prefix authzd keeps its policy under (an empty prefix starts as an empty
    /// policy; importing is explicit: `authzd apply -f FILE`).
    #[arg(long, value_name = "PREFIX", default_value = "/authzd/")]
    pub etcd_prefix: String,

    /// PEM CA that signs the etcd servers' certificates.
    #[arg(long, value_name = "FILE")]
    pub etcd_cafile: Option<PathBuf>,

    /// PEM client certificate for etcd (with --etcd-keyfile).
    #[arg(long, value_name = "FILE", requires = "etcd_keyfile")]
    pub etcd_certfile: Option<PathBuf>,

    /// PEM private key of --etcd-certfile.
    #[arg(long, value_name = "FILE", requires = "etcd_certfile")]
    pub etcd_keyfile: Option<PathBuf>,

    /// How old a proof of being current may be: in etcd mode this replica's, before it stops
    /// answering allows; in both modes a caller's cache's (WatchInvalidations), before it
    /// stops answering from memory. Also how long a write waits, at most, for a replica or a
    /// caller's cache that is gone.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub max_staleness: Duration,

    /// etcd mode: what a replica that cannot prove itself current does with an allow:
    /// `unavailable` (refuse it; denies are still answered), `deny-allows`, or `serve-stale`.
    #[arg(long, value_name = "MODE", default_value = "unavailable")]
    pub on_stale: crate::store::etcd::OnStale,

    /// etcd mode: this replica's id in the replica table (default: host name and process id).
    #[arg(long, value_name = "ID")]
    pub replica_id: Option<String>,

    /// etcd mode: ABAC policy lines (a `.jsonl` file), as kube-apiserver reads ABAC from a
    /// file beside the RBAC objects it keeps in etcd. Read once at startup, by each replica.
    #[arg(long, value_name = "FILE")]
    pub authorization_policy_file: Option<PathBuf>,
}

/// etcd mode, validated.
#[derive(Clone, Debug)]
pub struct EtcdSettings {
    pub client: crate::store::etcd::EtcdConfig,
    pub prefix: String,
    pub replication: crate::store::etcd::ReplicationConfig,
    /// `--authorization-policy-file`: ABAC lines read at startup, beside etcd's objects.
    pub abac_file: Option<PathBuf>,
}

impl EtcdArgs {
    /// `None` without `--etcd-servers`.
    pub fn settings(self, explicit_policy: bool) -> Result<Option<EtcdSettings>, String> {
        if self.max_staleness < Duration::from_millis(100) {
            return Err("--max-staleness must be at least 100ms".into());
        }
        if self.etcd_servers.is_empty() {
            return match self.authorization_policy_file {
                Some(_) => Err("--authorization-policy-file is for etcd mode: in directory mode ABAC files go in --policy".into()),
                None => Ok(None),
            };
        }
        if let Some(file) = &self.authorization_policy_file {
            if file.extension().and_then(|e| e.to_str()) != Some("jsonl") {
                return Err(format!(
                    "--authorization-policy-file `{}` must be a `.jsonl` file of ABAC lines",
                    file.display()
                ));
            }
        }
        if explicit_policy {
            return Err("--etcd-servers and --policy exclude each other: in etcd mode the policy is read from etcd (import files with `authzd apply -f FILE...`)".into());
        }
        for url in &self.etcd_servers {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!(
                    "--etcd-servers: `{url}` must be an http:// or https:// URL"
                ));
            }
        }
        let id = self.replica_id.unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "authzd".into());
            format!("{host}-{}", std::process::id())
        });
        if id.is_empty() || id.contains('/') {
            return Err(format!(
                "--replica-id `{id}` must be non-empty and contain no `/`"
            ));
        }
        Ok(Some(EtcdSettings {
            client: crate::store::etcd::EtcdConfig {
                endpoints: self.etcd_servers,
                ca_file: self.etcd_cafile,
                cert_file: self.etcd_certfile,
                key_file: self.etcd_keyfile,
                timeout: (self.max_staleness / 2).min(Duration::from_secs(2)),
            },
            prefix: self.etcd_prefix,
            replication: crate::store::etcd::ReplicationConfig {
                id,
                max_staleness: self.max_staleness,
                on_stale: self.on_stale,
                abac: Vec::new(),
            },
            abac_file: self.authorization_policy_file,
        }))
    }
}

/// How callers authenticate (docs/security.md §1). Without any of these, only a local listener
/// (loopback or Unix socket) serves, and every caller is the local identity.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Caller authentication and TLS")]
pub struct AuthArgs {
    /// Bearer tokens, in kube-apiserver's CSV format: `token,user,uid[,"group1,group2"]`.
    /// Callers send `authorization: Bearer <token>`.
    #[arg(long, value_name = "FILE")]
    pub token_auth_file: Option<PathBuf>,

    /// Serve a non-loopback listener (or a Unix socket whose --unix-socket-mode lets every user
    /// connect) without authentication, every caller acting as the local identity. Only for
    /// networks and machines where every client is trusted.
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
pub(super) fn tcp_first(mut listen: Vec<ListenAddr>) -> Vec<ListenAddr> {
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

    /// Take the body of a POST, PUT or PATCH (Envoy's `with_request_body`) as the object the
    /// request acts on, for rules over object content; bounded by --max-content-bytes.
    #[arg(long)]
    pub envoy_body_as_object: bool,
}

/// Overload protection of `serve` (README "Limits"): what one server takes on at once and how
/// long anyone may hold it.
#[derive(Debug, Args)]
#[command(next_help_heading = "Limits and overload")]
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

    /// Callers' caches following this server at once (WatchInvalidations); one more is
    /// refused with RESOURCE_EXHAUSTED.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_subscribers: usize,

    /// Open connections, across all listeners; one more is closed as soon as it is accepted,
    /// so idle or slow clients cannot exhaust file descriptors and memory.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_connections: usize,

    /// Optional: close every connection after this long (gracefully: in-flight requests get
    /// 10 s to finish, clients reconnect). Off by default because it also ends watch streams.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_connection_age: Option<Duration>,

    /// Largest object (`content.object`, `content.old_object`, an Envoy body taken as the
    /// object) one request may carry, in bytes; a larger one is refused with INVALID_ARGUMENT.
    /// At most 4194304, the largest request authzd reads.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_CONTENT_BYTES)]
    pub max_content_bytes: usize,
}

/// The audit log of `serve` (README "Audit log").
#[derive(Debug, Args)]
#[command(next_help_heading = "Audit log")]
pub struct AuditArgs {
    /// Append one JSON line per review call and policy write to PATH (created if missing).
    #[arg(long, value_name = "PATH")]
    pub audit_log: Option<PathBuf>,

    /// Audit entries waiting for the writer; when full, new entries are dropped and counted
    /// (PolicyAdmin Status `audit_dropped`) rather than slowing requests down.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub audit_queue: usize,
}

/// The AuthZEN endpoints (docs/authzen.md).
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "AuthZEN")]
pub struct AuthzenArgs {
    /// The URL clients reach this server by (`https://pdp.example.com`, behind a load balancer
    /// or gateway): the base of every endpoint URL in /.well-known/authzen-configuration.
    /// Default: the address of the listener the request came in on. Never the request's Host.
    #[arg(long, value_name = "URL")]
    pub authzen_base_url: Option<crate::api::http::BaseUrl>,

    /// The key AuthZEN page tokens are sealed with (HMAC-SHA256): the file's bytes, at least
    /// 32, surrounding whitespace removed. Give every replica behind one load balancer the
    /// same file, so a search's pages may land on any of them. Default: a random key per
    /// process (tokens verify only on the server that issued them).
    #[arg(long, value_name = "FILE")]
    pub authzen_page_token_key_file: Option<PathBuf>,
}

/// Decision records (docs/records.md): one JSON line per decision taken.
#[derive(Debug, Args)]
#[command(next_help_heading = "Decision records")]
pub struct RecordArgs {
    /// Record every decision: `file:PATH` appends to PATH (rotated by size), `audit` writes
    /// into the audit log (needs --audit-log). Recording never slows a decision: what the
    /// sink cannot take is dropped, counted (`authzd_decision_records_dropped_total`) and
    /// marked in the stream.
    #[arg(long, value_name = "SINK", value_parser = parse_record_sink)]
    pub decision_records: Option<RecordSinkArg>,

    /// Rotate the decision record file once it would grow past BYTES.
    #[arg(long, value_name = "BYTES", default_value_t = 100 << 20,
          value_parser = clap::value_parser!(u64).range(4096..))]
    pub decision_records_max_bytes: u64,

    /// Rotated decision record files kept (`PATH.1` the newest); older ones are removed.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub decision_records_keep: usize,

    /// Decision records waiting for the writer; when full, new ones are dropped and counted.
    #[arg(long, value_name = "N", default_value_t = 65_536,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub decision_records_queue: u64,
}

/// `--decision-records`, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordSinkArg {
    File(PathBuf),
    Audit,
}

fn parse_record_sink(value: &str) -> Result<RecordSinkArg, String> {
    match value.split_once(':') {
        _ if value == "audit" => Ok(RecordSinkArg::Audit),
        Some(("file", path)) if !path.is_empty() => Ok(RecordSinkArg::File(PathBuf::from(path))),
        _ => Err(format!("expected `file:PATH` or `audit`, found `{value}`")),
    }
}

/// Validated [`RecordArgs`]: present when `--decision-records` is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordSettings {
    pub sink: RecordSink,
    pub queue: usize,
}

/// Where decision records go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordSink {
    File(crate::records::writer::Destination),
    /// Into the audit log, through its queue.
    Audit,
}

impl RecordArgs {
    /// `audit` needs the audit log: whether there is one is `audit_log`.
    pub(super) fn settings(self, audit_log: bool) -> Result<Option<RecordSettings>, clap::Error> {
        let Some(sink) = self.decision_records else {
            return Ok(None);
        };
        let sink = match sink {
            RecordSinkArg::Audit if !audit_log => {
                return Err(usage_error(
                    "serve",
                    "--decision-records audit needs --audit-log".to_string(),
                ))
            }
            RecordSinkArg::Audit => RecordSink::Audit,
            RecordSinkArg::File(path) => RecordSink::File(crate::records::writer::Destination {
                path,
                max_bytes: Some(self.decision_records_max_bytes),
                keep: self.decision_records_keep,
            }),
        };
        Ok(Some(RecordSettings {
            sink,
            queue: usize::try_from(self.decision_records_queue).unwrap_or(usize::MAX),
        }))
    }
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
    pub max_subscribers: usize,
    pub max_connections: usize,
    /// What requests may carry (`--max-content-bytes`).
    pub content: ContentLimits,
}

/// Validated [`AuditArgs`]: present when `--audit-log` is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditSettings {
    pub path: PathBuf,
    pub queue: usize,
}

impl LimitArgs {
    pub(super) fn settings(self) -> Result<ServeLimits, clap::Error> {
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
        positive("max-subscribers", self.max_subscribers as u64)?;
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
        positive("max-content-bytes", self.max_content_bytes as u64)?;
        if self.max_content_bytes > MAX_REQUEST_BYTES {
            return Err(usage_error(
                "serve",
                format!(
                    "--max-content-bytes must be at most {MAX_REQUEST_BYTES}, the largest \
                     request authzd reads (a larger object could never arrive)"
                ),
            ));
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
            max_subscribers: self.max_subscribers,
            content: ContentLimits {
                max_object_bytes: self.max_content_bytes,
            },
        })
    }
}

impl AuditArgs {
    pub(super) fn settings(self) -> Result<Option<AuditSettings>, clap::Error> {
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

#[derive(Clone, Debug)]
pub struct ServeSettings {
    pub engine: EngineSettings,
    /// Every listener, TCP first (the order the startup lines are printed in).
    pub listen: Vec<ListenAddr>,
    /// `--unix-socket-mode`: the mode of every Unix socket's file.
    pub unix_socket_mode: SocketMode,
    pub webhook_path: String,
    /// `--alpha-conditional-authorization`.
    pub conditional_authorization: bool,
    /// The identity of every caller while no authentication is configured.
    pub local_identity: UserInfo,
    pub cache: CacheConfig,
    /// Watch the policy files and reload on change.
    pub watch: bool,
    /// `--read-only`: follow the policy directory without its lock, refusing writes.
    pub read_only: bool,
    /// No `--policy` (and not etcd mode): the example policy embedded in the binary is
    /// served, read-only; `engine.policy.paths` is then empty.
    pub embedded_policy: bool,
    pub max_revision_wait: Duration,
    /// `--max-staleness`: how long a replica's proof of being current, and a caller's
    /// cache's (WatchInvalidations), lasts.
    pub max_staleness: Duration,
    pub auth: AuthArgs,
    /// `--otlp-endpoint`; the standard OTLP environment variables also turn export on.
    pub otlp_endpoint: Option<String>,
    /// How `envoy.service.auth.v3.Authorization/Check` reads a request.
    pub envoy: crate::api::envoy::EnvoyConfig,
    pub limits: ServeLimits,
    pub audit: Option<AuditSettings>,
    pub records: Option<RecordSettings>,
    /// The AuthZEN metadata's base URL and the page token key's file.
    pub authzen: AuthzenArgs,
    /// etcd mode (`--etcd-servers`), instead of the policy directory.
    pub etcd: Option<EtcdSettings>,
    /// The webhooks the chain's `Webhook(n)` entries name, in order.
    pub webhooks: Vec<crate::webhook::WebhookSettings>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Cli, Settings};
    use crate::engine::Mode;
    use clap::Parser;

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

    /// `--etcd-servers` turns on etcd mode, refuses `--policy` beside it and non-URLs; the
    /// policy-file size limit is a flag.
    #[test]
    fn etcd_and_policy_file_size_flags() {
        let settings = |args: &[&str]| {
            let mut all = vec!["authzd", "serve"];
            all.extend_from_slice(args);
            Cli::try_parse_from(all).and_then(|cli| cli.settings())
        };
        let Ok(Settings::Serve(s)) = settings(&[]) else {
            panic!("serve")
        };
        assert!(s.etcd.is_none());
        assert_eq!(
            s.engine.policy.load.max_file_bytes,
            crate::policy::load::MAX_FILE_BYTES
        );
        let Ok(Settings::Serve(s)) = settings(&["--max-policy-file-bytes", "100000000"]) else {
            panic!("serve")
        };
        assert_eq!(s.engine.policy.load.max_file_bytes, 100_000_000);
        let Ok(Settings::Serve(s)) = settings(&[
            "--etcd-servers",
            "http://a:2379,http://b:2379",
            "--max-staleness",
            "2s",
            "--replica-id",
            "r1",
            "--on-stale",
            "deny-allows",
        ]) else {
            panic!("serve")
        };
        let etcd = s.etcd.expect("etcd mode");
        assert_eq!(etcd.client.endpoints, ["http://a:2379", "http://b:2379"]);
        assert_eq!(etcd.prefix, "/authzd/");
        assert_eq!(etcd.replication.id, "r1");
        assert_eq!(etcd.replication.max_staleness, Duration::from_secs(2));
        assert_eq!(
            etcd.replication.on_stale,
            crate::store::etcd::OnStale::DenyAllows
        );
        for bad in [
            &["--etcd-servers", "http://a:2379", "--policy", "policy"][..],
            &["--etcd-servers", "a:2379"][..],
            &["--etcd-servers", "http://a:2379", "--max-staleness", "10ms"][..],
            // ABAC beside etcd comes from a `.jsonl` file, and only in etcd mode.
            &["--authorization-policy-file", "abac.jsonl"][..],
            &[
                "--etcd-servers",
                "http://a:2379",
                "--authorization-policy-file",
                "abac.yaml",
            ][..],
        ] {
            assert!(settings(bad).is_err(), "{bad:?}");
        }
        let Ok(Settings::Serve(s)) = settings(&[
            "--etcd-servers",
            "http://a:2379",
            "--authorization-policy-file",
            "/etc/authzd/abac.jsonl",
        ]) else {
            panic!("serve")
        };
        assert_eq!(
            s.etcd.expect("etcd mode").abac_file,
            Some(std::path::PathBuf::from("/etc/authzd/abac.jsonl"))
        );
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
        // No --policy: the embedded example, read-only, never a directory nobody named.
        assert!(s.engine.policy.paths.is_empty());
        assert!(s.embedded_policy && s.etcd.is_none());
        assert_eq!(s.unix_socket_mode, SocketMode::DEFAULT);
    }

    /// `--read-only` follows a named directory; without `--policy` the embedded example is
    /// read-only already, and etcd is written through etcd: a usage error, saying so.
    #[test]
    fn read_only_needs_a_policy_directory() {
        let cli = Cli::try_parse_from(["authzd", "serve", "--policy", "p", "--read-only"]).unwrap();
        let Settings::Serve(s) = cli.settings().unwrap() else {
            panic!("not serve")
        };
        assert!(s.read_only && !s.embedded_policy);
        assert_eq!(s.engine.policy.paths, vec![PathBuf::from("p")]);
        for args in [
            &["authzd", "serve", "--read-only"][..],
            &[
                "authzd",
                "serve",
                "--read-only",
                "--etcd-servers",
                "http://a:2379",
            ][..],
        ] {
            let err = Cli::try_parse_from(args)
                .unwrap()
                .settings()
                .unwrap_err()
                .to_string();
            assert!(err.contains("--read-only needs --policy DIR"), "{err}");
        }
    }

    #[test]
    fn unix_socket_modes_are_octal_permission_bits() {
        let mode = |value: &str| {
            Cli::try_parse_from(["authzd", "serve", "--unix-socket-mode", value])
                .map_err(|e| e.to_string())
                .and_then(|cli| cli.settings().map_err(|e| e.to_string()))
                .map(|settings| match settings {
                    Settings::Serve(s) => s.unix_socket_mode.bits(),
                    _ => panic!("not serve"),
                })
        };
        assert_eq!(mode("0660"), Ok(0o660));
        assert!(mode("rw").unwrap_err().contains("octal mode"));
        assert!(mode("1777").unwrap_err().contains("at most 0777"));
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
        assert_eq!(s.limits.content.max_object_bytes, 3 * 1024 * 1024);
        assert!(!s.envoy.body_as_object);
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
            "--max-content-bytes",
            "1024",
            "--envoy-body-as-object",
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
        assert_eq!(s.limits.content.max_object_bytes, 1024);
        assert!(s.envoy.body_as_object);
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
            ["--max-content-bytes", "0"],
            ["--max-content-bytes", "4194305"],
        ] {
            let cli = Cli::try_parse_from(["authzd", "serve", bad[0], bad[1]]).unwrap();
            let err = cli.settings().unwrap_err();
            assert!(err.to_string().contains(bad[0]), "{err}");
        }
    }
}
