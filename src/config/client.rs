//! The commands against a running server (`apply`, `delete`, `get`, `watch`, `status`,
//! `replicas`): where
//! the server is ([`ClientArgs`], validated as [`ClientSettings`]), each command's flags, and
//! what the command asks of the server ([`ClientCommand`]).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::store::{ObjectKind, ObjectRef};

use super::{parse_duration, usage_error};

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

    /// How long to wait for the connection and for each answer (e.g. `10s`, `500ms`); the
    /// server is told it too. For `watch`, the connection and the start of the stream only;
    /// for `ask --local-cache`, also how long its invalidation stream may leave a probe
    /// unanswered.
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

/// `http://host:port` or `https://host:port` as given, `unix:///path` (a Unix socket), or
/// `host:port` made into an `http` URL.
pub fn parse_server(s: &str) -> Result<String, String> {
    if let Some(path) = s.strip_prefix("unix://") {
        return if path.starts_with('/') {
            Ok(s.to_string())
        } else {
            Err(format!("`{s}`: a Unix socket is unix:///ABSOLUTE/PATH"))
        };
    }
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
/// `clusterrolebinding`, `fieldpolicy`, plural forms, any case.
fn parse_kind(s: &str) -> Result<ObjectKind, String> {
    s.parse()
}

/// How far a write must reach before the server answers (etcd mode; a directory-mode server
/// answers once it applied the write, whatever is asked).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Ack {
    /// Every live replica applied the change or fenced itself (answers no allow until it has
    /// caught up); waits at most the server's --max-staleness for a replica that does not
    /// answer.
    #[default]
    Cluster,
    /// The replica asked applied it.
    Local,
    /// etcd committed it (the replica asked applied it too).
    Committed,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub client: ClientArgs,

    /// Manifest file (YAML or JSON, one or more objects) or directory of them (read as the
    /// policy loader reads one; ABAC `.jsonl` files are skipped), repeatable; `-` reads stdin.
    /// Each file is applied as one request, in order.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,

    /// Validate and report what would be applied without changing anything, with the access
    /// delta each file would make to the policy in force (as `authzd diff` prints it; the
    /// files are separate writes, so each is compared with the policy in force, not with the
    /// files before it).
    #[arg(long)]
    pub dry_run: bool,

    /// With --dry-run: print one request per subject of the delta that shows its gain or loss.
    #[arg(long, requires = "dry_run")]
    pub witness: bool,

    /// etcd mode: how far the write must reach before the answer (the output then names the
    /// replicas that confirmed it and those taken as fenced).
    #[arg(long, value_enum, value_name = "SCOPE", default_value_t = Ack::Cluster)]
    pub ack: Ack,
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

    /// etcd mode: how far the deletion must reach before the answer (as for `apply`).
    #[arg(long, value_enum, value_name = "SCOPE", default_value_t = Ack::Cluster)]
    pub ack: Ack,
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
pub struct AskArgs {
    #[command(flatten)]
    pub client: ClientArgs,

    /// Answer from a decision cache in this process, kept exact by the server's invalidation
    /// stream (needs `watch` on `decisioninvalidations`); each answer says `local` or
    /// `remote`.
    #[arg(long)]
    pub local_cache: bool,

    /// With --local-cache: the id the server's Status lists this cache under (default:
    /// `authzd-ask-PID`).
    #[arg(long, value_name = "ID", requires = "local_cache")]
    pub subscriber_id: Option<String>,

    /// With --local-cache: the longest the cache keeps a proof of being current (the
    /// server's --max-staleness bounds it too).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub max_staleness: Duration,

    /// The groups of the user asked about (repeatable), for the question on the command line.
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,

    /// One question: USER VERB RESOURCE [NAMESPACE] (RESOURCE `/path` asks about a
    /// non-resource URL). Without it, questions are read from stdin, one per line in the same
    /// form, groups after the user as `USER,GROUP,...`, and answered in order.
    #[arg(value_name = "QUESTION", num_args = 0..=4)]
    pub question: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ReplicasArgs {
    #[command(flatten)]
    pub client: ClientArgs,
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
        /// With `dry_run`: the delta's witnesses printed too.
        witness: bool,
        ack: Ack,
    },
    Delete {
        object: ObjectRef,
        ack: Ack,
    },
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
    /// The replica table (etcd mode), from `Status`.
    Replicas,
    /// Authorize questions, from the command line or stdin, optionally through a local cache.
    Ask {
        /// The question on the command line (the user with its groups), if any.
        question: Option<String>,
        /// With a local cache: its subscriber id and longest proof.
        local_cache: Option<(String, Duration)>,
    },
}

/// One object named on the command line: namespaced kinds need `-n`, cluster kinds refuse it.
pub(super) fn object_ref(
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
pub(super) fn scope(
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
    pub(super) fn settings(self) -> ClientSettings {
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
    pub(super) fn sources(files: Vec<PathBuf>) -> Result<Vec<ManifestSource>, clap::Error> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Cli, Settings};
    use clap::Parser;

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
        assert_eq!(server.timeout, crate::caller::DEFAULT_TIMEOUT);
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
        assert!(
            matches!(command, ClientCommand::Delete { object, ack: Ack::Cluster } if object.kind == ObjectKind::ClusterRole)
        );
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
                witness: false,
                ack: Ack::Cluster,
            }
        );
        assert!(client(&["apply", "-f", "a.yaml", "--witness"]).is_err());
        assert!(client(&["apply"]).is_err());
        assert!(client(&["apply", "-f", "-", "-f", "-"]).is_err());
    }

    #[test]
    fn writes_take_an_acknowledgement_scope() {
        for (given, ack) in [
            ("cluster", Ack::Cluster),
            ("local", Ack::Local),
            ("committed", Ack::Committed),
        ] {
            let (_, command) = client(&["apply", "-f", "a.yaml", "--ack", given]).unwrap();
            assert!(
                matches!(command, ClientCommand::Apply { ack: a, .. } if a == ack),
                "{given}"
            );
            let (_, command) = client(&["delete", "clusterrole", "x", "--ack", given]).unwrap();
            assert!(
                matches!(command, ClientCommand::Delete { ack: a, .. } if a == ack),
                "{given}"
            );
        }
        assert_eq!(
            client(&["apply", "-f", "a.yaml", "--ack", "everyone"])
                .unwrap_err()
                .exit_code(),
            2
        );
        assert_eq!(client(&["replicas"]).unwrap().1, ClientCommand::Replicas);
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
