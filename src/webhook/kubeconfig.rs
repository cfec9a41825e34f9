//! The webhook's kubeconfig (kube-apiserver's `--authorization-webhook-config-file`,
//! `connectionInfo.kubeConfigFile`), read as client-go reads it
//! (`staging/src/k8s.io/client-go/tools/clientcmd/client_config.go`, `loader.go`): the
//! current context names a cluster (the webhook: `server`, its CA, `insecure-skip-tls-verify`,
//! `tls-server-name`) and a user (how authzd presents itself: a client certificate, a bearer
//! `token` or `tokenFile`, or basic auth). Relative paths are relative to the kubeconfig's
//! directory, as client-go's `ResolvePaths`; inline `-data` fields win over files.
//!
//! What authzd cannot honour is refused here, at startup, rather than ignored: exec plugins,
//! auth providers, impersonation and proxies.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use http::Uri;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::de::IgnoredAny;
use serde::Deserialize;

/// A kubeconfig with inline certificates is a few KiB; this bounds a wrong path (a log file).
const MAX_KUBECONFIG_BYTES: u64 = 4 << 20;

/// Where Go's `crypto/x509` looks for the system's CA bundle on Linux (`root_linux.go`), for
/// an `https` server without `certificate-authority`; `SSL_CERT_FILE` first, as Go.
const SYSTEM_CA_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The webhook and how to reach it.
pub(super) struct Endpoint {
    /// The exact URL reviews are posted to (client-go posts to the server's path as given).
    pub server: Uri,
    /// For an `https` server; `None` for `http`.
    pub tls: Option<Arc<ClientConfig>>,
    /// `tls-server-name`: the name to verify the certificate against instead of the host.
    pub tls_server_name: Option<ServerName<'static>>,
    pub credentials: Credentials,
    /// Settings read but without effect (TLS settings for an `http` server), for a warning.
    pub unused: Vec<String>,
}

pub(super) enum Credentials {
    None,
    /// `token`.
    Bearer(String),
    /// `tokenFile`: re-read as it rotates; `first` is its content at startup.
    TokenFile {
        path: PathBuf,
        first: String,
    },
    /// `username` / `password`.
    Basic {
        username: String,
        password: String,
    },
}

/// The parts of a kubeconfig authzd reads; other fields (`preferences`, `extensions`, ...) are
/// ignored, as client-go ignores what it does not use. Lists may be `null` (`kubectl config
/// view` writes `users: null`).
#[derive(Deserialize, Default)]
struct Kubeconfig {
    clusters: Option<Vec<NamedCluster>>,
    users: Option<Vec<NamedUser>>,
    contexts: Option<Vec<NamedContext>>,
    #[serde(rename = "current-context")]
    current_context: Option<String>,
}

#[derive(Deserialize)]
struct NamedCluster {
    name: Option<String>,
    cluster: Option<Cluster>,
}

#[derive(Deserialize)]
struct NamedUser {
    name: Option<String>,
    user: Option<User>,
}

#[derive(Deserialize)]
struct NamedContext {
    name: Option<String>,
    context: Option<Context>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: Option<String>,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    insecure_skip_tls_verify: Option<bool>,
    tls_server_name: Option<String>,
    proxy_url: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct User {
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    username: Option<String>,
    password: Option<String>,
    exec: Option<IgnoredAny>,
    auth_provider: Option<IgnoredAny>,
    #[serde(rename = "as")]
    impersonate: Option<String>,
    #[serde(rename = "as-uid")]
    impersonate_uid: Option<String>,
    #[serde(rename = "as-groups")]
    impersonate_groups: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
struct Context {
    cluster: Option<String>,
    user: Option<String>,
}

/// Reads and checks the kubeconfig at `path`; the error is the problem, for the caller to
/// prefix with the webhook's name and the file.
pub(super) fn load(path: &Path) -> Result<Endpoint, String> {
    let text = read_bounded(path, MAX_KUBECONFIG_BYTES)
        .map_err(|error| format!("cannot read it: {error}"))?;
    let text = String::from_utf8(text).map_err(|_| "it is not UTF-8 text".to_string())?;
    let config = parse(&text)?;
    let base = path.parent().unwrap_or(Path::new("."));
    resolve(config, base)
}

fn parse(text: &str) -> Result<Kubeconfig, String> {
    if text.trim().is_empty() {
        return Err("it is empty".to_string());
    }
    let options = serde_saphyr::Options {
        budget: Some(serde_saphyr::Budget {
            max_documents: 1,
            max_depth: 32,
            ..serde_saphyr::Budget::default()
        }),
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
        with_snippet: false,
        ..serde_saphyr::Options::default()
    };
    serde_saphyr::from_str_with_options::<Kubeconfig>(text, options).map_err(|error| {
        format!(
            "it is not a kubeconfig (YAML or JSON): {}",
            error.without_snippet()
        )
    })
}

/// client-go's `DirectClientConfig`: the current context (none named: the empty context,
/// which names the cluster and user called `""`), its cluster and its user.
fn resolve(config: Kubeconfig, base: &Path) -> Result<Endpoint, String> {
    let current = config.current_context.unwrap_or_default();
    let context = match config
        .contexts
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.name.as_deref().unwrap_or_default() == current)
    {
        Some(named) => named.context.unwrap_or_default(),
        None if current.is_empty() => Context::default(),
        None => {
            return Err(format!(
                "current-context `{current}` is not among its contexts"
            ))
        }
    };
    let cluster_name = context.cluster.unwrap_or_default();
    let Some(cluster) = config
        .clusters
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.name.as_deref().unwrap_or_default() == cluster_name)
    else {
        return Err(if current.is_empty() {
            format!(
                "it has no current-context and no cluster named `{cluster_name}`: set \
                 current-context to a context naming the webhook's cluster"
            )
        } else {
            format!("context `{current}` names cluster `{cluster_name}`, which it does not define")
        });
    };
    let cluster = cluster.cluster.unwrap_or_default();
    let user_name = context.user.unwrap_or_default();
    let user = match config
        .users
        .unwrap_or_default()
        .into_iter()
        .find(|u| u.name.as_deref().unwrap_or_default() == user_name)
    {
        Some(named) => named.user.unwrap_or_default(),
        None if user_name.is_empty() => User::default(),
        None => {
            return Err(format!(
                "context `{current}` names user `{user_name}`, which it does not define"
            ))
        }
    };
    endpoint(&cluster_name, cluster, &user_name, user, base)
}

fn endpoint(
    cluster_name: &str,
    cluster: Cluster,
    user_name: &str,
    user: User,
    base: &Path,
) -> Result<Endpoint, String> {
    let in_cluster = |problem: String| format!("cluster `{cluster_name}`: {problem}");
    let in_user = |problem: String| format!("user `{user_name}`: {problem}");

    let server =
        non_empty(cluster.server).ok_or_else(|| in_cluster("`server` is not set".to_string()))?;
    let uri: Uri = server
        .parse()
        .map_err(|e| in_cluster(format!("`server` `{server}` is not a URL: {e}")))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => {
            return Err(in_cluster(format!(
                "`server` `{server}` must start with https:// or http://"
            )))
        }
    };
    if uri.host().is_none_or(str::is_empty) {
        return Err(in_cluster(format!("`server` `{server}` names no host")));
    }
    if let Some(proxy) = non_empty(cluster.proxy_url) {
        return Err(in_cluster(format!(
            "`proxy-url` `{proxy}` is not supported; reach the webhook directly"
        )));
    }
    let insecure = cluster.insecure_skip_tls_verify.unwrap_or(false);
    let ca = pem_source(
        cluster.certificate_authority_data,
        cluster.certificate_authority,
        "certificate-authority",
        base,
    );
    if insecure && ca.is_some() {
        // client-go: "specifying a root certificates file with the insecure flag is not allowed".
        return Err(in_cluster(
            "`insecure-skip-tls-verify` cannot be combined with a certificate authority"
                .to_string(),
        ));
    }
    let tls_server_name = non_empty(cluster.tls_server_name)
        .map(|name| {
            ServerName::try_from(name.clone())
                .map_err(|_| in_cluster(format!("`tls-server-name` `{name}` is not a host name")))
        })
        .transpose()?;

    for (present, what) in [
        (user.exec.is_some(), "exec credential plugins (`exec`)"),
        (
            user.auth_provider.is_some(),
            "auth providers (`auth-provider`)",
        ),
        (
            non_empty(user.impersonate).is_some()
                || non_empty(user.impersonate_uid).is_some()
                || user.impersonate_groups.is_some_and(|g| !g.is_empty()),
            "impersonation (`as`, `as-uid`, `as-groups`)",
        ),
    ] {
        if present {
            return Err(in_user(format!(
                "{what} are not supported by authzd's webhook client; use a client \
                 certificate, `token` or `tokenFile`"
            )));
        }
    }
    let client_cert = pem_source(
        user.client_certificate_data,
        user.client_certificate,
        "client-certificate",
        base,
    );
    let client_key = pem_source(user.client_key_data, user.client_key, "client-key", base);
    let identity = match (client_cert, client_key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some((cert, key)),
        (Some(_), None) => {
            return Err(in_user(
                "`client-certificate` is set without `client-key`".to_string(),
            ))
        }
        (None, Some(_)) => {
            return Err(in_user(
                "`client-key` is set without `client-certificate`".to_string(),
            ))
        }
    };
    let credentials = credentials(
        non_empty(user.token),
        non_empty(user.token_file).map(|f| resolve_path(base, &f)),
        non_empty(user.username),
        non_empty(user.password),
    )
    .map_err(in_user)?;

    // Files are read even for a plain-http server, as client-go builds its TLS configuration
    // from whatever the kubeconfig sets: a wrong path is a startup error either way.
    let tls_settings = ca.is_some() || insecure || identity.is_some() || tls_server_name.is_some();
    let tls = if https || tls_settings {
        let verification = if insecure {
            None
        } else {
            Some(match ca {
                Some(ca) => {
                    roots_from(&ca.read().map_err(in_cluster)?, &ca.name()).map_err(in_cluster)?
                }
                None if https => system_roots().map_err(in_cluster)?,
                None => RootCertStore::empty(),
            })
        };
        let identity = identity
            .map(|(cert, key)| read_identity(&cert, &key))
            .transpose()
            .map_err(in_user)?;
        Some(Arc::new(
            client_config(verification, identity).map_err(in_user)?,
        ))
    } else {
        None
    };
    let mut unused = Vec::new();
    if !https && tls_settings {
        unused.push(format!(
            "the TLS settings of cluster `{cluster_name}` and user `{user_name}` have no \
             effect: `server` `{server}` is plain http"
        ));
    }
    let tls = if https { tls } else { None };
    Ok(Endpoint {
        server: uri,
        tls,
        tls_server_name,
        credentials,
        unused,
    })
}

/// The service account's view of the API server, as client-go's `rest.InClusterConfig`
/// (`staging/src/k8s.io/client-go/rest/config.go`): `KUBERNETES_SERVICE_HOST` and `_PORT`, the
/// mounted token (re-read as it rotates) and CA. `None` outside a cluster (the host unset).
pub(super) fn in_cluster() -> Result<Option<Endpoint>, String> {
    const ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
    let host = std::env::var("KUBERNETES_SERVICE_HOST").unwrap_or_default();
    let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_default();
    if host.is_empty() {
        return Ok(None);
    }
    if port.is_empty() {
        return Err("KUBERNETES_SERVICE_HOST is set but KUBERNETES_SERVICE_PORT is not".into());
    }
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    let cluster = Cluster {
        server: Some(format!("https://{host}:{port}")),
        certificate_authority: Some(format!("{ACCOUNT}/ca.crt")),
        ..Cluster::default()
    };
    let user = User {
        token_file: Some(format!("{ACCOUNT}/token")),
        ..User::default()
    };
    endpoint(
        "in-cluster",
        cluster,
        "service account",
        user,
        Path::new("/"),
    )
    .map(Some)
}

impl Endpoint {
    /// The API server's endpoint for one API path (`/apis/authentication.k8s.io/v1/...`):
    /// a kubeconfig for an API server names its root, where a webhook's names the endpoint.
    pub(super) fn at_api_path(mut self, path: &str) -> Result<Endpoint, String> {
        let base = self.server.path().trim_end_matches('/');
        let mut parts = self.server.clone().into_parts();
        parts.path_and_query = Some(
            format!("{base}{path}")
                .parse()
                .map_err(|e| format!("`{path}` under `{}`: {e}", self.server))?,
        );
        self.server = Uri::from_parts(parts).map_err(|e| e.to_string())?;
        Ok(self)
    }
}

/// One of token, token file and basic auth; client-go refuses a token together with basic
/// auth ("more than one authentication method"). With both `token` and `tokenFile`, the file
/// is used, as client-go does once it has read it.
fn credentials(
    token: Option<String>,
    token_file: Option<PathBuf>,
    username: Option<String>,
    password: Option<String>,
) -> Result<Credentials, String> {
    let basic = username.is_some() || password.is_some();
    if basic && (token.is_some() || token_file.is_some()) {
        return Err(
            "more than one authentication method: a token and a username/password".to_string(),
        );
    }
    if let Some(path) = token_file {
        let first = read_token_file(&path)?;
        return Ok(Credentials::TokenFile { path, first });
    }
    if let Some(token) = token {
        return Ok(Credentials::Bearer(token));
    }
    if basic {
        return Ok(Credentials::Basic {
            username: username.unwrap_or_default(),
            password: password.unwrap_or_default(),
        });
    }
    Ok(Credentials::None)
}

/// A token file's token: its content, trimmed (client-go's `NewCachedFileTokenSource`).
pub(super) fn read_token_file(path: &Path) -> Result<String, String> {
    let bytes = read_bounded(path, 64 << 10)
        .map_err(|e| format!("cannot read `tokenFile` `{}`: {e}", path.display()))?;
    let token = String::from_utf8(bytes)
        .map_err(|_| format!("`tokenFile` `{}` is not UTF-8 text", path.display()))?;
    let token = token.trim();
    if token.is_empty() {
        return Err(format!("`tokenFile` `{}` is empty", path.display()));
    }
    Ok(token.to_string())
}

/// PEM bytes from an inline base64 field or from a file, named for messages.
enum PemSource {
    Inline { field: &'static str, base64: String },
    File { field: &'static str, path: PathBuf },
}

fn pem_source(
    data: Option<String>,
    file: Option<String>,
    field: &'static str,
    base: &Path,
) -> Option<PemSource> {
    // client-go's `dataFromSliceOrFile`: the inline data wins.
    if let Some(base64) = non_empty(data) {
        return Some(PemSource::Inline { field, base64 });
    }
    non_empty(file).map(|file| PemSource::File {
        field,
        path: resolve_path(base, &file),
    })
}

impl PemSource {
    fn read(&self) -> Result<Vec<u8>, String> {
        match self {
            PemSource::Inline { field, base64 } => {
                // Go's base64 decoding of []byte skips line breaks; YAML folding may add them.
                let compact: String = base64.split_ascii_whitespace().collect();
                base64::engine::general_purpose::STANDARD
                    .decode(compact)
                    .map_err(|e| format!("`{field}-data` is not base64: {e}"))
            }
            PemSource::File { field, path } => read_bounded(path, 1 << 20)
                .map_err(|e| format!("cannot read `{field}` `{}`: {e}", path.display())),
        }
    }

    fn name(&self) -> String {
        match self {
            PemSource::Inline { field, .. } => format!("`{field}-data`"),
            PemSource::File { field, path } => format!("`{field}` `{}`", path.display()),
        }
    }
}

/// A client certificate chain and its key.
type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn read_identity(cert: &PemSource, key: &PemSource) -> Result<Identity, String> {
    let chain = certificates(&cert.read()?, &cert.name())?;
    let private = PrivateKeyDer::from_pem_slice(&key.read()?)
        .map_err(|e| format!("{} holds no private key: {e}", key.name()))?;
    Ok((chain, private))
}

/// A TLS client configuration from files: `ca` the CAs a server's certificate must chain to
/// (the system's when `None`), `identity` a client certificate and key to present.
pub fn tls_client_config(
    ca: Option<&Path>,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<ClientConfig>, String> {
    let file = |field, path: &Path| PemSource::File {
        field,
        path: path.to_path_buf(),
    };
    let roots = match ca {
        Some(path) => {
            let ca = file("certificate-authority", path);
            roots_from(&ca.read()?, &ca.name())?
        }
        None => system_roots()?,
    };
    let identity = identity
        .map(|(cert, key)| {
            read_identity(&file("client-certificate", cert), &file("client-key", key))
        })
        .transpose()?;
    client_config(Some(roots), identity).map(Arc::new)
}

/// `roots`: the CAs to verify the webhook's certificate against; `None` verifies nothing
/// (`insecure-skip-tls-verify`).
fn client_config(
    roots: Option<RootCertStore>,
    identity: Option<Identity>,
) -> Result<ClientConfig, String> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?;
    let builder = match roots {
        Some(roots) => builder.with_root_certificates(roots),
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SkipVerification(provider))),
    };
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("the client certificate and key are not a usable pair: {e}"))?,
    };
    // As Go's net/http: HTTP/2 when the webhook offers it, else HTTP/1.1.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificates(pem: &[u8], name: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{name} is not PEM: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{name} holds no certificate"));
    }
    Ok(certs)
}

fn roots_from(pem: &[u8], name: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(pem, name)? {
        roots
            .add(cert)
            .map_err(|e| format!("{name} is not a usable CA certificate: {e}"))?;
    }
    Ok(roots)
}

fn system_roots() -> Result<RootCertStore, String> {
    let from_env = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
    let candidates = from_env
        .into_iter()
        .chain(SYSTEM_CA_FILES.iter().map(PathBuf::from));
    for path in candidates {
        let Ok(pem) = read_bounded(&path, 16 << 20) else {
            continue;
        };
        let mut roots = RootCertStore::empty();
        // A system bundle may hold a certificate rustls cannot use; the others still serve.
        let (_added, _ignored) =
            roots.add_parsable_certificates(CertificateDer::pem_slice_iter(&pem).flatten());
        if !roots.is_empty() {
            return Ok(roots);
        }
    }
    Err(
        "the server is https but neither `certificate-authority` nor `certificate-authority-data` \
         is set, and no system CA bundle was found (SSL_CERT_FILE, /etc/ssl/certs/...)"
            .to_string(),
    )
}

/// `insecure-skip-tls-verify: true`: any certificate is accepted, but the handshake's
/// signatures are still checked (the peer holds the key of the certificate it sent).
#[derive(Debug)]
struct SkipVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for SkipVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

/// client-go's `ResolvePaths`: a relative path is relative to the kubeconfig's directory.
fn resolve_path(base: &Path, file: &str) -> PathBuf {
    let path = Path::new(file);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    }
}

fn read_bounded(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::other(format!("larger than {limit} bytes")));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<Endpoint, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, text).unwrap();
        load(&path)
    }

    fn problem(text: &str) -> String {
        match load_text(text) {
            Ok(_) => panic!("loaded:\n{text}"),
            Err(problem) => problem,
        }
    }

    /// Upstream's `TestV1NewFromConfig`: without a current context, a cluster with a name is
    /// not chosen; with one, its cluster is.
    #[test]
    fn the_current_context_chooses_the_cluster() {
        let no_context =
            "clusters:\n- name: foobar\n  cluster: {server: 'http://authz.example.com'}\n";
        assert!(problem(no_context).contains("no current-context"));
        let unnamed = "clusters:\n- cluster: {server: 'http://authz.example.com/authorize'}\n";
        let endpoint = load_text(unnamed).unwrap();
        assert_eq!(endpoint.server.path(), "/authorize");
        let chosen = "clusters:
- {name: foobar, cluster: {server: 'ftp://wrong'}}
- {name: barfoo, cluster: {server: 'http://authz.example.com'}}
contexts:
- {name: default, context: {cluster: barfoo}}
current-context: default
";
        assert_eq!(
            load_text(chosen).unwrap().server.host(),
            Some("authz.example.com")
        );
    }

    #[test]
    fn problems_are_named() {
        let cases: &[(&str, &str)] = &[
            ("", "it is empty"),
            ("clusters: [", "not a kubeconfig"),
            ("clusters: 3", "not a kubeconfig"),
            ("current-context: nope\n", "`nope` is not among its contexts"),
            (
                "contexts: [{name: c, context: {cluster: x}}]\ncurrent-context: c\n",
                "names cluster `x`, which it does not define",
            ),
            (
                "clusters: [{name: x, cluster: {server: 'http://h'}}]\ncontexts: [{name: c, context: {cluster: x, user: u}}]\ncurrent-context: c\n",
                "names user `u`, which it does not define",
            ),
            ("clusters: [{cluster: {}}]\n", "`server` is not set"),
            ("clusters: [{cluster: {server: 'authz.example.com'}}]\n", "must start with https:// or http://"),
            ("clusters: [{cluster: {server: 'http://h', proxy-url: 'http://p'}}]\n", "`proxy-url`"),
            (
                "clusters: [{cluster: {server: 'https://h', insecure-skip-tls-verify: true, certificate-authority: ca.pem}}]\n",
                "cannot be combined",
            ),
            ("clusters: [{cluster: {server: 'https://h', certificate-authority: missing.pem}}]\n", "cannot read `certificate-authority`"),
            ("clusters: [{cluster: {server: 'https://h', certificate-authority-data: '!!!'}}]\n", "not base64"),
            ("clusters: [{cluster: {server: 'https://h', certificate-authority-data: 'aGVsbG8='}}]\n", "holds no certificate"),
            (
                "clusters: [{cluster: {server: 'http://h'}}]\nusers: [{user: {exec: {command: aws}}}]\n",
                "exec credential plugins",
            ),
            (
                "clusters: [{cluster: {server: 'http://h'}}]\nusers: [{user: {auth-provider: {name: gcp}}}]\n",
                "auth providers",
            ),
            ("clusters: [{cluster: {server: 'http://h'}}]\nusers: [{user: {as: admin}}]\n", "impersonation"),
            ("clusters: [{cluster: {server: 'http://h'}}]\nusers: [{user: {token: t, username: u}}]\n", "more than one authentication method"),
            ("clusters: [{cluster: {server: 'http://h'}}]\nusers: [{user: {tokenFile: missing-token}}]\n", "cannot read `tokenFile`"),
            ("clusters: [{cluster: {server: 'https://h', insecure-skip-tls-verify: true}}]\nusers: [{user: {client-key: k.pem}}]\n", "without `client-certificate`"),
        ];
        for (text, expected) in cases {
            let problem = problem(text);
            assert!(
                problem.contains(expected),
                "{text:?}: {problem:?} does not say {expected:?}"
            );
        }
    }

    #[test]
    fn credentials_are_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "  from-file\n").unwrap();
        let path = dir.path().join("kubeconfig");
        let with = |user: &str| {
            std::fs::write(
                &path,
                format!(
                    "clusters: [{{cluster: {{server: 'http://h'}}}}]\nusers: [{{user: {user}}}]\n"
                ),
            )
            .unwrap();
            load(&path).unwrap().credentials
        };
        assert!(matches!(with("{token: abc}"), Credentials::Bearer(t) if t == "abc"));
        assert!(matches!(
            with("{token: abc, tokenFile: token}"),
            Credentials::TokenFile { path: p, first } if first == "from-file" && p == dir.path().join("token")
        ));
        assert!(matches!(
            with("{username: u, password: p}"),
            Credentials::Basic { username, password } if username == "u" && password == "p"
        ));
        assert!(matches!(with("{}"), Credentials::None));
    }

    #[test]
    fn kubectl_style_nulls_and_json_load() {
        let yaml = "apiVersion: v1\nkind: Config\npreferences: {}\nusers: null\ncontexts: null\nclusters:\n- name: ''\n  cluster:\n    server: http://127.0.0.1:8080\n    extensions: [{name: x, extension: {a: 1}}]\n";
        assert!(load_text(yaml).is_ok());
        let json = r#"{"clusters":[{"name":"","cluster":{"server":"http://127.0.0.1:8080"}}],"users":[{"name":"","user":{"token":"t"}}]}"#;
        assert!(matches!(
            load_text(json).unwrap().credentials,
            Credentials::Bearer(_)
        ));
    }

    #[test]
    fn tls_settings_on_plain_http_are_reported() {
        let endpoint = load_text(
            "clusters: [{cluster: {server: 'http://h', insecure-skip-tls-verify: true}}]\n",
        )
        .unwrap();
        assert!(endpoint.tls.is_none());
        assert_eq!(endpoint.unused.len(), 1);
    }

    #[test]
    fn insecure_https_needs_no_ca() {
        let endpoint = load_text(
            "clusters: [{cluster: {server: 'https://h:8443', insecure-skip-tls-verify: true, tls-server-name: authz.local}}]\n",
        )
        .unwrap();
        assert!(endpoint.tls.is_some());
        assert!(endpoint.unused.is_empty());
        assert_eq!(
            endpoint.tls_server_name,
            Some(ServerName::try_from("authz.local").unwrap())
        );
    }

    #[test]
    fn paths_are_relative_to_the_kubeconfig() {
        assert_eq!(
            resolve_path(Path::new("/etc/authzd"), "ca.pem"),
            PathBuf::from("/etc/authzd/ca.pem")
        );
        assert_eq!(
            resolve_path(Path::new("/etc/authzd"), "/abs/ca.pem"),
            PathBuf::from("/abs/ca.pem")
        );
    }
}
