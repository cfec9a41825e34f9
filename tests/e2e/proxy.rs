//! `authzd proxy` as a kube-rbac-proxy user runs it: kube-rbac-proxy's published example
//! configurations (`examples/*/deployment.yaml` and `client-rbac.yaml` in brancz/kube-rbac-proxy
//! v0.21.0: resource attributes, rewrites by query parameter, static authorization, a
//! non-resource URL, a token with an audience checked by TokenReview) with their flags, each
//! proxy deciding with a real authzd, in front of a real HTTP upstream, asked with curl.
//! The upstream and the API server's TokenReview endpoint are `proxy_peers.py`, beside this
//! file.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::support::server::{http_get_with, Server, BIN};
use crate::support::tools::{tool_or_skip, Tool, CURL};

pub(super) const PYTHON: Tool = Tool {
    what: "Python 3",
    env: "AUTHZD_E2E_PYTHON",
    fallback: "python3",
    probe: &["-c", "import http.server, json"],
    probe_env: &[],
};

/// The proxy's own token to authzd (a super-user: it asks about others and watches the
/// invalidation stream), and the callers'.
const AUTHZD_TOKENS: &str = "proxy-token,authzd-proxy,uid-p,system:masters\n";
const CALLER_TOKENS: &str =
    "sa-token,system:serviceaccount:default:default,uid-sa,system:serviceaccounts\n\
                             other-token,someone-else,uid-o,system:serviceaccounts\n";
pub(super) const SA: &str = "sa-token";
pub(super) const OTHER: &str = "other-token";

// The policy of each example's client-rbac.yaml (the namespaced ones in `default`, where
// `kubectl apply` puts them).
const SERVICES_PROXY: &str = "\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: kube-rbac-proxy-client
rules:
- apiGroups: [\"\"]
  resources: [\"services/proxy\"]
  verbs: [\"get\"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kube-rbac-proxy-client
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: kube-rbac-proxy-client
subjects:
- kind: ServiceAccount
  name: default
  namespace: default
";

const NAMESPACE_METRICS: &str = "\
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: namespace-metrics
  namespace: default
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: namespace-metrics
subjects:
- kind: ServiceAccount
  name: default
  namespace: default
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: namespace-metrics
  namespace: default
rules:
- apiGroups: [\"\"]
  resources:
  - namespace/metrics
  verbs: [\"get\"]
";

/// kube-rbac-proxy's non-resource-url example policy (shared with benches/proxy.rs).
const METRICS_URL: &str = include_str!("../fixtures/metrics-url.yaml");

// The `config-file.yaml` of each example's ConfigMap.
const RESOURCE_ATTRIBUTES_CONFIG: &str = "\
authorization:
  resourceAttributes:
    namespace: default
    apiVersion: v1
    resource: services
    subresource: proxy
    name: kube-rbac-proxy
";

pub(super) const REWRITES_CONFIG: &str = "\
authorization:
  rewrites:
    byQueryParameter:
      name: \"namespace\"
  resourceAttributes:
    apiVersion: v1
    resource: namespace
    subresource: metrics
    namespace: \"{{ .Value }}\"
";

const STATIC_CONFIG: &str = "\
authorization:
  rewrites:
    byQueryParameter:
      name: \"namespace\"
  resourceAttributes:
    apiVersion: v1
    resource: namespace
    subresource: metrics
    namespace: \"{{ .Value }}\"
  static:
    - resourceRequest: true
      resource: namespace
      subresource: metrics
";

/// The same rewrite by a header (`authorization.rewrites.byHttpHeader`).
pub(super) const HEADER_REWRITE_CONFIG: &str = "\
authorization:
  rewrites:
    byHttpHeader:
      name: \"x-namespace\"
  resourceAttributes:
    apiVersion: v1
    resource: namespace
    subresource: metrics
    namespace: \"{{ .Value }}\"
";

/// A process that prints `listening on PORT` (the peers) or `authzd proxy listening on ADDR`.
pub(super) struct Process {
    child: Child,
    pub(super) addr: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Process {
    pub(super) fn start(mut command: Command, stdout_announces: bool) -> Process {
        command.stdin(Stdio::null());
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("start");
        let (tx, rx) = mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let streams: [Box<dyn std::io::Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for (i, stream) in streams.into_iter().enumerate() {
            let (tx, log) = (tx.clone(), std::sync::Arc::clone(&log));
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let announced = if stdout_announces == (i == 0) {
                        line.strip_prefix("listening on ")
                            .map(|port| format!("127.0.0.1:{port}"))
                            .or_else(|| {
                                line.strip_prefix("authzd proxy listening on ")
                                    .map(str::to_string)
                            })
                    } else {
                        None
                    };
                    if let Some(addr) = announced {
                        let _ = tx.send(addr);
                    }
                    let mut log = log.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        let Ok(addr) = rx.recv_timeout(Duration::from_secs(30)) else {
            let _ = child.kill();
            panic!("no address announced; output:\n{}", log.lock().unwrap());
        };
        Process { child, addr, log }
    }

    pub(super) fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// authzd with the examples' policies, the upstream, and what the proxies need.
pub(super) struct Fixture {
    pub(super) dir: tempfile::TempDir,
    pub(super) python: PathBuf,
    curl: PathBuf,
    authzd: Server,
    pub(super) upstream: Process,
}

impl Fixture {
    pub(super) async fn start() -> Option<Fixture> {
        Self::start_with(&[]).await
    }

    /// [`Self::start`] with `policies` (file name, text) beside the examples'.
    pub(super) async fn start_with(policies: &[(&str, &str)]) -> Option<Fixture> {
        let curl = tool_or_skip(&CURL)?;
        let python = tool_or_skip(&PYTHON)?;
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy");
        std::fs::create_dir(&policy).unwrap();
        for &(name, text) in [
            ("services-proxy.yaml", SERVICES_PROXY),
            ("namespace-metrics.yaml", NAMESPACE_METRICS),
            ("metrics-url.yaml", METRICS_URL),
        ]
        .iter()
        .chain(policies)
        {
            std::fs::write(policy.join(name), text).unwrap();
        }
        let tokens = write(dir.path(), "authzd-tokens.csv", AUTHZD_TOKENS);
        write(dir.path(), "callers.csv", CALLER_TOKENS);
        let authzd = Server::start_serving(
            &policy,
            &["--token-auth-file", tokens.to_str().unwrap(), "--no-watch"],
        )
        .await;
        let mut command = Command::new(&python);
        command.arg(peers()).arg("upstream");
        let upstream = Process::start(command, true);
        Some(Fixture {
            dir,
            python,
            curl,
            authzd,
            upstream,
        })
    }

    pub(super) fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_string()
    }

    /// `authzd proxy` with `flags` (kube-rbac-proxy's) and the fixture's authzd.
    pub(super) fn proxy(&self, flags: &[&str]) -> Process {
        let mut command = Command::new(BIN);
        command
            .arg("proxy")
            .args(flags)
            .arg(format!("--authzd-server={}", self.authzd.url()))
            .arg(format!("--token-auth-file={}", self.path("callers.csv")))
            .env("AUTHZD_TOKEN", "proxy-token")
            .env("RUST_LOG", "info");
        Process::start(command, false)
    }

    /// [`Self::proxy`] on plain HTTP, in front of the upstream.
    pub(super) fn plain_proxy(&self, flags: &[&str]) -> Process {
        let upstream = format!("--upstream={}", self.upstream_url());
        let mut all = vec!["--insecure-listen-address=127.0.0.1:0", upstream.as_str()];
        all.extend_from_slice(flags);
        self.proxy(&all)
    }

    pub(super) fn upstream_url(&self) -> String {
        format!("http://{}/", self.upstream.addr)
    }

    pub(super) fn config(&self, name: &str, text: &str) -> String {
        write(self.dir.path(), name, text)
            .to_str()
            .unwrap()
            .to_string()
    }

    /// curl's answer: (status, body).
    pub(super) fn curl(&self, args: &[&str]) -> (u16, String) {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
        self.curl_bytes(&args)
    }

    /// [`Self::curl`] with arguments that need not be UTF-8 (raw header bytes).
    pub(super) fn curl_bytes(&self, args: &[&std::ffi::OsStr]) -> (u16, String) {
        let output = Command::new(&self.curl)
            .args(["-s", "-k", "--max-time", "10", "-w", "\n%{http_code}"])
            .args(args)
            .output()
            .expect("run curl");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        (status.trim().parse().unwrap_or(0), body.to_string())
    }

    pub(super) fn get(&self, url: &str, token: Option<&str>) -> (u16, String) {
        let header = token.map(|t| format!("Authorization: Bearer {t}"));
        let mut args = vec![url];
        if let Some(header) = &header {
            args.extend(["-H", header.as_str()]);
        }
        self.curl(&args)
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Every decision authzd has made (`authzd_decisions_total`, summed over its labels), scraped
/// with the proxy's token: with a token file, `/metrics` needs `get` on it (a super-user has it).
async fn decisions(fixture: &Fixture) -> f64 {
    let bearer = format!("Bearer {}", AUTHZD_TOKENS.split(',').next().unwrap());
    let (code, text) = http_get_with(
        fixture.authzd.addr,
        "/metrics",
        &[("Authorization", bearer.as_str())],
    )
    .await;
    assert_eq!(code, 200, "{text}");
    text.lines()
        .filter(|line| line.starts_with("authzd_decisions_total"))
        .filter_map(|line| line.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .sum()
}

pub(super) fn peers() -> PathBuf {
    crate::support::repo().join("tests/e2e/proxy_peers.py")
}

pub(super) fn upstream_saw(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not the upstream's answer ({e}): {body}"))
}

#[tokio::test]
async fn resource_attributes_example() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let config = fixture.config("config.yaml", RESOURCE_ATTRIBUTES_CONFIG);
    // The example's args, TLS on a self-signed certificate as there.
    let proxy = fixture.proxy(&[
        "--secure-listen-address=127.0.0.1:0",
        &format!("--upstream={}", fixture.upstream_url()),
        &format!("--config-file={config}"),
        "--logtostderr=true",
        "--v=10",
    ]);
    let url = format!("https://{}/metrics", proxy.addr);
    let (status, body) = fixture.get(&url, Some(SA));
    assert_eq!(status, 200, "{body}\n{}", proxy.log());
    let seen = upstream_saw(&body);
    assert_eq!(seen["path"], "/metrics");
    assert!(
        seen["headers"].get("authorization").is_none(),
        "the caller's token reached the upstream: {seen}"
    );
    let (status, body) = fixture.get(&url, Some(OTHER));
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body.trim(),
        "Forbidden (user=someone-else, verb=get, resource=services, subresource=proxy)"
    );
    assert_eq!(fixture.get(&url, None).0, 401);
    assert_eq!(fixture.get(&url, Some("wrong-token")).0, 401);
    // POST is `create`, which the ClusterRole does not grant.
    assert_eq!(
        fixture
            .curl(&["-X", "POST", &url, "-H", "Authorization: Bearer sa-token"])
            .0,
        403
    );
    assert!(
        proxy.log().contains("--logtostderr has no effect"),
        "{}",
        proxy.log()
    );
}

#[tokio::test]
async fn rewrites_example_by_query_parameter_and_by_header() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let config = fixture.config("config.yaml", REWRITES_CONFIG);
    let proxy = fixture.plain_proxy(&[&format!("--config-file={config}")]);
    let base = format!("http://{}/metrics", proxy.addr);
    let (status, body) = fixture.get(&format!("{base}?namespace=default"), Some(SA));
    assert_eq!(status, 200, "{body}");
    assert_eq!(upstream_saw(&body)["query"], "namespace=default");
    let (status, body) = fixture.get(&format!("{base}?namespace=kube-system"), Some(SA));
    assert_eq!(status, 403, "{body}");
    // Every value is asked about: one namespace not granted refuses the request.
    assert_eq!(
        fixture
            .get(
                &format!("{base}?namespace=default&namespace=kube-system"),
                Some(SA)
            )
            .0,
        403
    );
    let (status, body) = fixture.get(&base, Some(SA));
    assert_eq!(status, 400, "{body}");

    let config = fixture.config("header.yaml", HEADER_REWRITE_CONFIG);
    let by_header = fixture.plain_proxy(&[&format!("--config-file={config}")]);
    let url = format!("http://{}/metrics", by_header.addr);
    let auth = format!("Authorization: Bearer {SA}");
    assert_eq!(
        fixture
            .curl(&[&url, "-H", &auth, "-H", "X-Namespace: default"])
            .0,
        200
    );
    assert_eq!(
        fixture
            .curl(&[&url, "-H", &auth, "-H", "X-Namespace: other"])
            .0,
        403
    );
    assert_eq!(fixture.curl(&[&url, "-H", &auth]).0, 400);
}

#[tokio::test]
async fn static_authorization_example() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let config = fixture.config("config.yaml", STATIC_CONFIG);
    let proxy = fixture.plain_proxy(&[&format!("--config-file={config}")]);
    // The static entry allows namespace/metrics in every namespace, whoever asks: no RBAC
    // grants kube-system.
    let url = format!("http://{}/metrics?namespace=kube-system", proxy.addr);
    assert_eq!(fixture.get(&url, Some(OTHER)).0, 200);
    // Only for `get` on namespace/metrics: a PUT is `update`... which the entry (no verb)
    // allows too, as kube-rbac-proxy's matching does.
    let auth = format!("Authorization: Bearer {OTHER}");
    assert_eq!(fixture.curl(&["-X", "PUT", &url, "-H", &auth]).0, 200);
    // Authentication still comes first.
    assert_eq!(fixture.get(&url, None).0, 401);
}

#[tokio::test]
async fn non_resource_url_example_with_paths_and_identity_headers() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let proxy = fixture.plain_proxy(&[
        "--ignore-paths=/healthz,/static/*",
        "--auth-header-fields-enabled",
        "--auth-header-groups-field-separator=,",
    ]);
    let base = format!("http://{}", proxy.addr);
    let (status, body) = fixture.get(&format!("{base}/metrics"), Some(SA));
    assert_eq!(status, 200, "{body}");
    let seen = upstream_saw(&body);
    assert_eq!(
        seen["headers"]["x-remote-user"],
        "system:serviceaccount:default:default"
    );
    assert_eq!(
        seen["headers"]["x-remote-groups"],
        "system:serviceaccounts,system:authenticated"
    );
    assert_eq!(fixture.get(&format!("{base}/other"), Some(SA)).0, 403);
    // Ignored paths pass unauthenticated; `*` stops at a slash, as Go's path.Match.
    assert_eq!(fixture.get(&format!("{base}/healthz"), None).0, 200);
    assert_eq!(fixture.get(&format!("{base}/static/app.js"), None).0, 200);
    assert_eq!(fixture.get(&format!("{base}/static/a/b.js"), None).0, 401);

    let allowed = fixture.plain_proxy(&["--allow-paths=/metrics"]);
    let (status, body) = fixture.get(&format!("http://{}/other", allowed.addr), Some(SA));
    assert_eq!((status, body.trim()), (404, "404 page not found"));
    assert_eq!(
        fixture
            .get(&format!("http://{}/metrics", allowed.addr), Some(SA))
            .0,
        200
    );
}

/// examples/non-resource-url-token-request: the token is checked by the API server's
/// TokenReview, for the audience the proxy names.
#[tokio::test]
async fn token_request_example_checks_tokens_with_token_review() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let tokens = fixture.config(
        "reviews.json",
        r#"{
          "projected-token": {"user": {"username": "system:serviceaccount:default:default",
                                       "groups": ["system:serviceaccounts"]},
                              "audiences": ["kube-rbac-proxy.default.svc"]},
          "api-token": {"user": {"username": "system:serviceaccount:default:default"},
                        "audiences": ["https://kubernetes.default.svc"]}
        }"#,
    );
    let mut command = Command::new(&fixture.python);
    command.arg(peers()).args(["apiserver", &tokens]);
    let apiserver = Process::start(command, true);
    let kubeconfig = fixture.config(
        "kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: \
             http://{}\nusers:\n- name: u\n  user:\n    token: proxy-sa-token\ncontexts:\n- \
             name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
            apiserver.addr
        ),
    );
    let proxy = fixture.proxy(&[
        "--secure-listen-address=127.0.0.1:0",
        &format!("--upstream={}", fixture.upstream_url()),
        "--auth-token-audiences=kube-rbac-proxy.default.svc",
        &format!("--kubeconfig={kubeconfig}"),
        "--logtostderr=true",
        "--v=10",
    ]);
    let url = format!("https://{}/metrics", proxy.addr);
    let (status, body) = fixture.get(&url, Some("projected-token"));
    assert_eq!(status, 200, "{body}\n{}", proxy.log());
    // A token for another audience is not authenticated here.
    assert_eq!(fixture.get(&url, Some("api-token")).0, 401);
    assert_eq!(fixture.get(&url, Some("unknown")).0, 401);
}

/// A revocation through authzd's PolicyAdmin reaches the proxy's local cache before the
/// write returns; meanwhile the cache answers: authzd is asked far less often than the proxy.
#[tokio::test]
async fn a_revoked_binding_is_refused_by_the_proxy_as_soon_as_the_write_returns() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let proxy = fixture.plain_proxy(&[]);
    let url = format!("http://{}/metrics", proxy.addr);
    // Until the proxy's cache has subscribed, answers come from authzd.
    crate::support::wait::eventually(
        Duration::from_secs(20),
        || "the proxy's cache subscribes".into(),
        || async {
            let served = decisions(&fixture).await;
            let before = served;
            for _ in 0..5 {
                assert_eq!(fixture.get(&url, Some(SA)).0, 200);
            }
            let after = decisions(&fixture).await;
            (after - before < 5.0).then_some(())
        },
    )
    .await;
    let before = decisions(&fixture).await;
    for _ in 0..20 {
        assert_eq!(fixture.get(&url, Some(SA)).0, 200);
    }
    let after = decisions(&fixture).await;
    assert_eq!(before, after, "20 allowed requests asked authzd");

    let deleted = crate::support::server::run_bin(
        &[
            "delete".as_ref(),
            "--server".as_ref(),
            fixture.authzd.url().as_ref(),
            "--token".as_ref(),
            "proxy-token".as_ref(),
            "clusterrolebinding".as_ref(),
            "metrics".as_ref(),
        ],
        Duration::from_secs(30),
    );
    assert!(deleted.status.success(), "{:?}", deleted);
    let (status, body) = fixture.get(&url, Some(SA));
    assert_eq!(status, 403, "the revoked binding still allowed: {body}");
}

#[test]
fn unsupported_flags_are_refused_by_name() {
    for flag in [
        "--oidc-issuer=https://issuer.example",
        "--tls-cipher-suites=TLS_AES_128_GCM_SHA256",
        "--kube-api-qps=50",
    ] {
        let output = crate::support::server::run_bin(
            &[
                "proxy".as_ref(),
                "--insecure-listen-address=127.0.0.1:0".as_ref(),
                "--upstream=http://127.0.0.1:1/".as_ref(),
                flag.as_ref(),
            ],
            Duration::from_secs(30),
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        let name = flag.split('=').next().unwrap();
        assert_eq!(output.status.code(), Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!("{name} is not supported by authzd proxy")),
            "{flag}: {stderr}"
        );
    }
}

/// Identity from a client certificate verified against `--client-ca-file` (CN the user, O the
/// groups), on the proxy's own certificate (`--tls-cert-file`), upstream told who it was.
#[tokio::test]
async fn client_certificates_authenticate_over_tls() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let ca = crate::support::ca::Ca::new("proxy-test-ca");
    let server = ca.leaf(&["127.0.0.1"], "proxy", &[]);
    let client = ca.leaf(
        &[],
        "system:serviceaccount:default:default",
        &["system:serviceaccounts"],
    );
    let stranger = ca.leaf(&[], "stranger", &[]);
    let files = |name: &str, leaf: &crate::support::ca::Leaf| {
        (
            fixture.config(&format!("{name}.crt"), &leaf.pem),
            fixture.config(&format!("{name}.key"), &leaf.key_pem),
        )
    };
    let (cert, key) = files("server", &server);
    let (client_cert, client_key) = files("client", &client);
    let (stranger_cert, stranger_key) = files("stranger", &stranger);
    let ca_file = fixture.config("ca.crt", &ca.pem);
    let endpoints_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let proxy = fixture.proxy(&[
        &format!("--proxy-endpoints-port={endpoints_port}"),
        "--secure-listen-address=127.0.0.1:0",
        &format!("--upstream={}", fixture.upstream_url()),
        &format!("--tls-cert-file={cert}"),
        &format!("--tls-private-key-file={key}"),
        &format!("--client-ca-file={ca_file}"),
        "--auth-header-fields-enabled",
    ]);
    let url = format!("https://{}/metrics", proxy.addr);
    let (status, body) = fixture.curl(&[
        "--cacert",
        &ca_file,
        "--cert",
        &client_cert,
        "--key",
        &client_key,
        &url,
    ]);
    assert_eq!(status, 200, "{body}\n{}", proxy.log());
    assert_eq!(
        upstream_saw(&body)["headers"]["x-remote-user"],
        "system:serviceaccount:default:default"
    );
    let (status, _) = fixture.curl(&[
        "--cacert",
        &ca_file,
        "--cert",
        &stranger_cert,
        "--key",
        &stranger_key,
        &url,
    ]);
    assert_eq!(
        status, 403,
        "a verified certificate the policy does not grant"
    );
    assert_eq!(fixture.curl(&["--cacert", &ca_file, &url]).0, 401);
    // The proxy's own endpoints: health, and the local cache's figures.
    let endpoints = format!("https://127.0.0.1:{endpoints_port}");
    let (status, body) = fixture.curl(&["--cacert", &ca_file, &format!("{endpoints}/healthz")]);
    assert_eq!((status, body.as_str()), (200, "ok"));
    let (status, body) = fixture.curl(&["--cacert", &ca_file, &format!("{endpoints}/metrics")]);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.lines()
            .any(|l| l.starts_with("authzd_client_local_cache_misses_total ") && !l.ends_with(" 0")),
        "{body}"
    );
}
