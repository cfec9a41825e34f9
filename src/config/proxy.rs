//! `authzd proxy`'s command line: kube-rbac-proxy's flags, as its pflag parser reads them
//! (`--name=value` or `--name value`; a bool as `--name` or `--name=true|false`; a list comma
//! separated or repeated), and authzd's own (`--authzd-*`, the local cache, a token file).
//!
//! One table, [`FLAGS`], lists every flag kube-rbac-proxy v0.21.0 defines
//! (`cmd/kube-rbac-proxy/app/options/options.go` and `deprecated.go` in brancz/kube-rbac-proxy,
//! with the klog `-v` its examples pass) and what authzd proxy does with it: it drives parsing,
//! the refusals (a flag authzd proxy does not honour stops it at startup, by name, rather than
//! being ignored), `--help`, and the table in docs/proxy.md, which a test holds to it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use http::Uri;

use super::parse_duration;
use crate::caller::Endpoint;

/// What authzd proxy does with a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// Honoured as kube-rbac-proxy honours it.
    Yes,
    /// Accepted, with no effect, as kube-rbac-proxy accepts it (the reason is logged).
    NoEffect(&'static str),
    /// Refused at startup, naming the flag and the reason.
    Refused(&'static str),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Value,
    List,
}

/// Where a flag comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    KubeRbacProxy,
    Authzd,
}

#[derive(Clone, Copy, Debug)]
pub struct Flag {
    pub name: &'static str,
    pub kind: Kind,
    pub origin: Origin,
    pub support: Support,
    pub help: &'static str,
}

const fn krp(name: &'static str, kind: Kind, support: Support, help: &'static str) -> Flag {
    Flag {
        name,
        kind,
        origin: Origin::KubeRbacProxy,
        support,
        help,
    }
}

const fn own(name: &'static str, kind: Kind, help: &'static str) -> Flag {
    Flag {
        name,
        kind,
        origin: Origin::Authzd,
        support: Support::Yes,
        help,
    }
}

use Kind::{Bool, List, Value};
use Support::{NoEffect, Refused, Yes};

const REMOVED_LOG_FLAG: Support =
    NoEffect("removed from Kubernetes' logging; kube-rbac-proxy accepts it with no effect too");
const OIDC: Support = Refused(
    "OIDC tokens are not verified by authzd proxy; use client certificates, a token file or \
     TokenReview",
);

/// Every flag, in the order `--help` lists them.
pub const FLAGS: &[Flag] = &[
    krp("insecure-listen-address", Value, Yes, "HOST:PORT to serve plain HTTP (and h2c) on."),
    krp("secure-listen-address", Value, Yes, "HOST:PORT to serve HTTPS on (a self-signed certificate unless --tls-cert-file)."),
    krp("upstream", Value, Yes, "The URL requests are passed to once authenticated and authorized."),
    krp("upstream-force-h2c", Bool, Yes, "Speak HTTP/2 without TLS to the upstream."),
    krp("upstream-ca-file", Value, Yes, "The CA(s) an https upstream's certificate must chain to."),
    krp("config-file", Value, Yes, "kube-rbac-proxy's configuration file: authorization.resourceAttributes, .rewrites, .static."),
    krp("allow-paths", List, Yes, "Only paths matching one of these (Go path.Match) are served; others are 404."),
    krp("ignore-paths", List, Yes, "Paths matching one of these are passed on without authentication or authorization."),
    krp("proxy-endpoints-port", Value, Yes, "A port (on the secure listen host) serving /healthz, and /metrics: the local cache's figures."),
    krp("tls-cert-file", Value, Yes, "The HTTPS certificate (reloaded when it changes)."),
    krp("tls-private-key-file", Value, Yes, "The key of --tls-cert-file."),
    krp("tls-min-version", Value, Yes, "VersionTLS12 (the default) only: authzd proxy serves TLS 1.2 and 1.3."),
    krp("tls-cipher-suites", List, Refused("authzd proxy serves rustls's safe default cipher suites only"), "Cipher suites."),
    krp("tls-reload-interval", Value, NoEffect("certificates are checked for changes every second"), "Deprecated in kube-rbac-proxy."),
    krp("upstream-client-cert-file", Value, Yes, "A client certificate presented to an https upstream."),
    krp("upstream-client-key-file", Value, Yes, "The key of --upstream-client-cert-file."),
    krp("client-ca-file", Value, Yes, "Client certificates signed by these CAs authenticate (CN the user, O the groups)."),
    krp("auth-header-fields-enabled", Bool, Yes, "Tell the upstream who the caller is in headers."),
    krp("auth-header-user-field-name", Value, Yes, "The user header (default x-remote-user)."),
    krp("auth-header-groups-field-name", Value, Yes, "The groups header (default x-remote-groups)."),
    krp("auth-header-groups-field-separator", Value, Yes, "Between groups in the groups header (default |)."),
    krp("auth-token-audiences", List, Yes, "Audiences a token must be for (TokenReview spec.audiences)."),
    krp("oidc-issuer", Value, OIDC, "OIDC issuer."),
    krp("oidc-clientID", Value, OIDC, "OIDC client id."),
    krp("oidc-groups-claim", Value, OIDC, "OIDC groups claim."),
    krp("oidc-username-claim", Value, OIDC, "OIDC user claim."),
    krp("oidc-username-prefix", Value, OIDC, "OIDC user prefix."),
    krp("oidc-groups-prefix", Value, OIDC, "OIDC groups prefix."),
    krp("oidc-sign-alg", List, OIDC, "OIDC signing algorithms."),
    krp("oidc-ca-file", Value, OIDC, "OIDC issuer CA."),
    krp("kubeconfig", Value, Yes, "The API server bearer tokens are checked with (TokenReview); in a cluster, its service account by default."),
    krp("kube-api-qps", Value, Refused("TokenReview answers are cached for 2 minutes; there is no client-side throttle"), "API server QPS."),
    krp("kube-api-burst", Value, Refused("TokenReview answers are cached for 2 minutes; there is no client-side throttle"), "API server burst."),
    krp("http2-disable", Bool, Yes, "Serve HTTP/1.1 only."),
    krp("http2-max-concurrent-streams", Value, Yes, "Streams one HTTP/2 connection may open (default 100)."),
    krp("http2-max-size", Value, Refused("HTTP/2 frame and buffer sizes are hyper's defaults (16 KiB frames)"), "HTTP/2 frame size."),
    krp("v", Value, Yes, "klog verbosity: 0-3 logs at info, 4 and up at debug (RUST_LOG wins when set)."),
    krp("vmodule", Value, Refused("per-file verbosity is not supported; use RUST_LOG"), "klog per-file verbosity."),
    krp("log-flush-frequency", Value, NoEffect("logs are written as they happen"), "klog flush period."),
    krp("logtostderr", Bool, REMOVED_LOG_FLAG, "Removed."),
    krp("alsologtostderr", Bool, REMOVED_LOG_FLAG, "Removed."),
    krp("add-dir-header", Bool, REMOVED_LOG_FLAG, "Removed."),
    krp("log-backtrace-at", Value, REMOVED_LOG_FLAG, "Removed."),
    krp("log-dir", Value, REMOVED_LOG_FLAG, "Removed."),
    krp("log-file", Value, REMOVED_LOG_FLAG, "Removed."),
    krp("log-file-max-size", Value, REMOVED_LOG_FLAG, "Removed."),
    krp("one-output", Bool, REMOVED_LOG_FLAG, "Removed."),
    krp("skip-headers", Bool, REMOVED_LOG_FLAG, "Removed."),
    krp("skip-log-headers", Bool, REMOVED_LOG_FLAG, "Removed."),
    krp("stderrthreshold", Value, REMOVED_LOG_FLAG, "Removed."),
    own("authzd-server", Value, "The authzd server decisions are asked of (default http://127.0.0.1:50051; http://, https:// or unix:///path)."),
    own("authzd-token-file", Value, "A file holding the bearer token presented to authzd (default: $AUTHZD_TOKEN)."),
    own("authzd-ca-file", Value, "For an https authzd: the CA(s) its certificate must chain to."),
    own("authzd-client-cert-file", Value, "For an https authzd that verifies clients: this client certificate."),
    own("authzd-client-key-file", Value, "The key of --authzd-client-cert-file."),
    own("authzd-timeout", Value, "How long connecting to authzd, and each decision asked of it, may take (default 10s); a request authzd has not decided by then is answered 500."),
    own("local-cache", Bool, "Answer from a decision cache in this process, kept exact by authzd's invalidation stream (default true; needs `watch` on `decisioninvalidations`)."),
    own("max-staleness", Value, "The longest the local cache keeps a proof of being current (default 5s)."),
    own("subscriber-id", Value, "The id authzd's Status lists this proxy's cache under (default authzd-proxy-PID)."),
    own("token-auth-file", Value, "Bearer tokens of callers, in authzd serve's --token-auth-file format (asked before TokenReview)."),
];

/// Who the upstream is told the caller is (`--auth-header-*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthHeaders {
    pub user: String,
    pub groups: String,
    pub separator: String,
}

/// `authzd proxy`'s validated settings.
#[derive(Clone, Debug)]
pub struct ProxySettings {
    pub insecure_listen: Option<SocketAddr>,
    pub secure_listen: Option<SocketAddr>,
    pub upstream: Uri,
    pub upstream_h2c: bool,
    pub upstream_ca: Option<PathBuf>,
    pub upstream_client: Option<(PathBuf, PathBuf)>,
    pub config_file: Option<PathBuf>,
    pub allow_paths: Vec<String>,
    pub ignore_paths: Vec<String>,
    pub proxy_endpoints_port: Option<u16>,
    pub tls: Option<(PathBuf, PathBuf)>,
    pub client_ca: Option<PathBuf>,
    pub auth_headers: Option<AuthHeaders>,
    pub audiences: Vec<String>,
    pub kubeconfig: Option<PathBuf>,
    pub http2: bool,
    pub http2_max_concurrent_streams: u32,
    pub verbosity: u32,
    pub authzd: Endpoint,
    /// The local cache's subscriber id and staleness bound; `None`: every decision is asked.
    pub local_cache: Option<(String, Duration)>,
    pub token_auth_file: Option<PathBuf>,
    /// Flags accepted with no effect, for the log.
    pub warnings: Vec<String>,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum ProxyCommand {
    Run(Box<ProxySettings>),
    Help(String),
}

/// Reads `args` (what follows `authzd proxy`); `Err` is the usage error.
pub fn parse(args: &[String]) -> Result<ProxyCommand, String> {
    let mut given: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--help" || arg == "-h" {
            return Ok(ProxyCommand::Help(help()));
        }
        // klog's `-v` is the one shorthand.
        let spelled = if let Some(long) = arg.strip_prefix("--") {
            long
        } else if arg == "-v" || arg.starts_with("-v=") {
            &arg[1..]
        } else {
            return Err(format!("authzd proxy takes no arguments, got `{arg}`"));
        };
        let (name, inline) = match spelled.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (spelled, None),
        };
        let Some(flag) = FLAGS.iter().find(|f| f.name == name) else {
            return Err(format!("unknown flag: --{name}"));
        };
        let value = match (flag.kind, inline) {
            (_, Some(value)) => value,
            (Kind::Bool, None) => "true".to_string(),
            (_, None) => args
                .next()
                .cloned()
                .ok_or_else(|| format!("flag needs an argument: --{name}"))?,
        };
        given.entry(flag.name).or_default().push(value);
    }
    let mut warnings = Vec::new();
    for flag in FLAGS {
        if !given.contains_key(flag.name) {
            continue;
        }
        match flag.support {
            Support::Refused(why) => {
                return Err(format!(
                    "--{} is not supported by authzd proxy: {why}",
                    flag.name
                ))
            }
            Support::NoEffect(why) => {
                warnings.push(format!("--{} has no effect: {why}", flag.name))
            }
            Support::Yes => {}
        }
    }
    Flags { given }
        .settings(warnings)
        .map(|s| ProxyCommand::Run(Box::new(s)))
}

struct Flags {
    given: BTreeMap<&'static str, Vec<String>>,
}

impl Flags {
    /// The last value given (pflag: a later flag overrides an earlier one).
    fn value(&self, name: &str) -> Option<&str> {
        self.given
            .get(name)
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    fn path(&self, name: &str) -> Option<PathBuf> {
        self.value(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }

    fn list(&self, name: &str) -> Vec<String> {
        self.given
            .get(name)
            .into_iter()
            .flatten()
            .flat_map(|v| v.split(','))
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Go's `strconv.ParseBool`.
    fn bool(&self, name: &str, default: bool) -> Result<bool, String> {
        match self.value(name) {
            None => Ok(default),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
            Some(other) => Err(format!(
                "invalid argument \"{other}\" for --{name}: not a boolean"
            )),
        }
    }

    fn number<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, String> {
        self.value(name)
            .map(|v| {
                v.parse()
                    .map_err(|_| format!("invalid argument \"{v}\" for --{name}: not a number"))
            })
            .transpose()
    }

    fn address(&self, name: &str) -> Result<Option<SocketAddr>, String> {
        let Some(value) = self.value(name).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        // Go's `net.Listen` takes `:8443` for every interface.
        let spelled = if value.starts_with(':') {
            format!("0.0.0.0{value}")
        } else {
            value.to_string()
        };
        std::net::ToSocketAddrs::to_socket_addrs(&spelled)
            .ok()
            .and_then(|mut addrs| addrs.next())
            .map(Some)
            .ok_or_else(|| format!("--{name} `{value}` is not HOST:PORT"))
    }

    fn pair(&self, first: &str, second: &str) -> Result<Option<(PathBuf, PathBuf)>, String> {
        match (self.path(first), self.path(second)) {
            (None, None) => Ok(None),
            (Some(a), Some(b)) => Ok(Some((a, b))),
            _ => Err(format!("--{first} and --{second} go together")),
        }
    }

    fn settings(self, warnings: Vec<String>) -> Result<ProxySettings, String> {
        let upstream: Uri = match self.value("upstream").filter(|v| !v.is_empty()) {
            Some(url) => url
                .parse()
                .map_err(|e| format!("--upstream `{url}` is not a URL: {e}"))?,
            None => return Err("--upstream is required".to_string()),
        };
        if !matches!(upstream.scheme_str(), Some("http" | "https")) || upstream.host().is_none() {
            return Err(format!(
                "--upstream `{upstream}` must be an http:// or https:// URL with a host"
            ));
        }
        let insecure_listen = self.address("insecure-listen-address")?;
        let secure_listen = self.address("secure-listen-address")?;
        if insecure_listen.is_none() && secure_listen.is_none() {
            return Err("no listen address provided: --secure-listen-address or \
                        --insecure-listen-address"
                .to_string());
        }
        let allow_paths = self.list("allow-paths");
        let ignore_paths = self.list("ignore-paths");
        if !allow_paths.is_empty() && !ignore_paths.is_empty() {
            return Err("cannot use --allow-paths and --ignore-paths together".to_string());
        }
        match self.value("tls-min-version") {
            None | Some("VersionTLS12") => {}
            Some(other) => {
                return Err(format!(
                    "--tls-min-version {other} is not supported: authzd proxy serves TLS 1.2 \
                     and 1.3 (VersionTLS12)"
                ))
            }
        }
        let auth_headers = self
            .bool("auth-header-fields-enabled", false)?
            .then(|| AuthHeaders {
                user: self
                    .value("auth-header-user-field-name")
                    .unwrap_or("x-remote-user")
                    .to_string(),
                groups: self
                    .value("auth-header-groups-field-name")
                    .unwrap_or("x-remote-groups")
                    .to_string(),
                separator: self
                    .value("auth-header-groups-field-separator")
                    .unwrap_or("|")
                    .to_string(),
            });
        for header in auth_headers.iter().flat_map(|h| [&h.user, &h.groups]) {
            http::HeaderName::try_from(header.as_str())
                .map_err(|_| format!("`{header}` is not an HTTP header name"))?;
        }
        let mut authzd = Endpoint::new(super::parse_server(
            self.value("authzd-server")
                .unwrap_or("http://127.0.0.1:50051"),
        )?);
        authzd.certificate_authority = self.path("authzd-ca-file");
        authzd.client_identity = self.pair("authzd-client-cert-file", "authzd-client-key-file")?;
        authzd.token = match self.path("authzd-token-file") {
            Some(path) => Some(
                std::fs::read_to_string(&path)
                    .map_err(|e| {
                        format!("cannot read --authzd-token-file `{}`: {e}", path.display())
                    })?
                    .trim()
                    .to_string(),
            ),
            None => std::env::var("AUTHZD_TOKEN").ok().filter(|t| !t.is_empty()),
        };
        if let Some(value) = self.value("authzd-timeout") {
            authzd.timeout = parse_duration(value)
                .ok()
                .filter(|timeout| !timeout.is_zero())
                .ok_or_else(|| {
                    format!("--authzd-timeout `{value}` is not a positive duration (`2s`, `500ms`)")
                })?;
        }
        let max_staleness = match self.value("max-staleness") {
            Some(value) => parse_duration(value).map_err(|e| format!("--max-staleness: {e}"))?,
            None => Duration::from_secs(5),
        };
        let local_cache = self.bool("local-cache", true)?.then(|| {
            (
                self.value("subscriber-id")
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("authzd-proxy-{}", std::process::id())),
                max_staleness,
            )
        });
        Ok(ProxySettings {
            insecure_listen,
            secure_listen,
            upstream,
            upstream_h2c: self.bool("upstream-force-h2c", false)?,
            upstream_ca: self.path("upstream-ca-file"),
            upstream_client: self.pair("upstream-client-cert-file", "upstream-client-key-file")?,
            config_file: self.path("config-file"),
            allow_paths,
            ignore_paths,
            proxy_endpoints_port: self.number("proxy-endpoints-port")?.filter(|p| *p != 0),
            tls: self.pair("tls-cert-file", "tls-private-key-file")?,
            client_ca: self.path("client-ca-file"),
            auth_headers,
            audiences: self.list("auth-token-audiences"),
            kubeconfig: self.path("kubeconfig"),
            http2: !self.bool("http2-disable", false)?,
            http2_max_concurrent_streams: self
                .number("http2-max-concurrent-streams")?
                .unwrap_or(100),
            verbosity: self.number("v")?.unwrap_or(0),
            authzd,
            local_cache,
            token_auth_file: self.path("token-auth-file"),
            warnings,
        })
    }
}

/// The flag table of docs/proxy.md: every flag, where it comes from and what authzd proxy does
/// with it.
pub fn flag_table() -> String {
    let mut out = String::from("| flag | from | authzd proxy |\n| --- | --- | --- |\n");
    for flag in FLAGS {
        let origin = match flag.origin {
            Origin::KubeRbacProxy => "kube-rbac-proxy",
            Origin::Authzd => "authzd",
        };
        let support = match flag.support {
            Support::Yes => format!("supported: {}", flag.help),
            Support::NoEffect(why) => format!("accepted, no effect: {why}"),
            Support::Refused(why) => format!("**refused at startup**: {why}"),
        };
        out.push_str(&format!(
            "| `--{}` | {origin} | {} |\n",
            flag.name,
            support.replace('|', "\\|")
        ));
    }
    out
}

fn help() -> String {
    let mut out = String::from(
        "An authorizing reverse proxy for one upstream, taking kube-rbac-proxy's flags and \
         configuration file (docs/proxy.md).\n\nUsage: authzd proxy [FLAGS]\n\n",
    );
    for (origin, title) in [
        (Origin::KubeRbacProxy, "kube-rbac-proxy's flags"),
        (Origin::Authzd, "authzd's flags"),
    ] {
        out.push_str(title);
        out.push_str(":\n");
        for flag in FLAGS.iter().filter(|f| f.origin == origin) {
            let value = match flag.kind {
                Kind::Bool => "",
                Kind::Value => " VALUE",
                Kind::List => " A,B,...",
            };
            let support = match flag.support {
                Support::Yes => String::new(),
                Support::NoEffect(why) => format!(" [no effect: {why}]"),
                Support::Refused(why) => format!(" [refused: {why}]"),
            };
            out.push_str(&format!(
                "  --{}{value}\n      {}{support}\n",
                flag.name, flag.help
            ));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<ProxySettings, String> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        match parse(&args)? {
            ProxyCommand::Run(settings) => Ok(*settings),
            ProxyCommand::Help(_) => Err("help".into()),
        }
    }

    #[test]
    fn docs_proxy_md_lists_every_flag_as_the_table_says() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/proxy.md");
        let docs = std::fs::read_to_string(path).unwrap_or_default();
        let table = flag_table();
        if std::env::var_os("AUTHZD_PRINT_FLAG_TABLE").is_some() {
            print!("{table}");
        }
        assert!(
            docs.contains(&table),
            "docs/proxy.md does not hold the flag table as FLAGS has it; print it with \
             AUTHZD_PRINT_FLAG_TABLE=1 cargo test --lib docs_proxy_md -- --nocapture"
        );
    }

    #[test]
    fn the_examples_flags_parse() {
        // The args of kube-rbac-proxy's examples/resource-attributes/deployment.yaml.
        let settings = run(&[
            "--secure-listen-address=0.0.0.0:8443",
            "--upstream=http://127.0.0.1:8081/",
            "--config-file=/etc/kube-rbac-proxy/config-file.yaml",
            "--logtostderr=true",
            "--v=10",
        ])
        .unwrap();
        assert_eq!(
            settings.secure_listen,
            Some("0.0.0.0:8443".parse().unwrap())
        );
        assert_eq!(settings.verbosity, 10);
        assert_eq!(settings.warnings.len(), 1, "{:?}", settings.warnings);
        assert!(settings.local_cache.is_some());
        assert_eq!(settings.authzd.timeout, crate::caller::DEFAULT_TIMEOUT);
    }

    #[test]
    fn authzd_timeout_is_a_positive_duration() {
        let base = ["--insecure-listen-address=:1", "--upstream=http://u:1"];
        let with = |timeout: &str| {
            let mut args = base.to_vec();
            args.push(timeout);
            run(&args)
        };
        assert_eq!(
            with("--authzd-timeout=2s").unwrap().authzd.timeout,
            Duration::from_secs(2)
        );
        for bad in [
            "--authzd-timeout=0s",
            "--authzd-timeout=2",
            "--authzd-timeout=soon",
        ] {
            assert!(with(bad).unwrap_err().contains("--authzd-timeout"), "{bad}");
        }
    }

    #[test]
    fn values_lists_and_bools_take_pflag_forms() {
        let settings = run(&[
            "--insecure-listen-address",
            ":8080",
            "--upstream",
            "http://u:1",
            "--allow-paths=/a,/b",
            "--allow-paths",
            "/c",
            "--auth-header-fields-enabled",
            "--local-cache=false",
        ])
        .unwrap();
        assert_eq!(settings.allow_paths, ["/a", "/b", "/c"]);
        assert!(settings.auth_headers.is_some());
        assert!(settings.local_cache.is_none());
    }

    #[test]
    fn refusals_name_the_flag() {
        let base = ["--insecure-listen-address=:1", "--upstream=http://u:1"];
        for (flag, named) in [
            ("--oidc-issuer=https://x", "--oidc-issuer"),
            (
                "--tls-cipher-suites=TLS_AES_128_GCM_SHA256",
                "--tls-cipher-suites",
            ),
            ("--kube-api-qps=5", "--kube-api-qps"),
            ("--http2-max-size=1", "--http2-max-size"),
            ("--tls-min-version=VersionTLS13", "--tls-min-version"),
            ("--no-such-flag", "--no-such-flag"),
        ] {
            let mut args = base.to_vec();
            args.push(flag);
            let error = run(&args).unwrap_err();
            assert!(error.contains(named), "{flag}: {error}");
        }
        assert!(run(&["--upstream=http://u:1"])
            .unwrap_err()
            .contains("listen address"));
        assert!(run(&[
            "--insecure-listen-address=:1",
            "--upstream=http://u:1",
            "--allow-paths=/a",
            "--ignore-paths=/b"
        ])
        .is_err());
    }
}
