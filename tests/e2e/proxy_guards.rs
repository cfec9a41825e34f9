//! `authzd proxy`'s guards against hostile clients (docs/proxy.md §2), with a real authzd, real
//! upstreams and curl sending raw request targets:
//!
//! * paths: in front of upstreams that clean paths themselves, Python's `http.server`
//!   (`proxy_peers.py files`) and nginx, no dot segment, `%2e%2e`, `..%2f` or repeated slash
//!   reaches anything but what `--allow-paths`, `--ignore-paths` and authzd let through;
//! * identity headers: a client's own `X-Remote-User`/`X-Remote-Groups` never reaches the
//!   upstream, and a `Connection` header cannot remove the proxy's;
//! * rewrites: a value the proxy cannot read refuses the request.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::proxy::{upstream_saw, Fixture, Process, HEADER_REWRITE_CONFIG, REWRITES_CONFIG, SA};
use crate::support::tools::{tool_or_skip, NGINX};

/// `get` on every non-resource URL under `/metrics/` for the service account the callers' `SA`
/// token names (nothing else: `/secret/flag` and `/` are not granted).
const METRICS_SUBPATHS: &str = "\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: metrics-subpaths
rules:
- nonResourceURLs: [\"/metrics/*\"]
  verbs: [\"get\"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: metrics-subpaths
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: metrics-subpaths
subjects:
- kind: ServiceAccount
  name: default
  namespace: default
";

/// What the cleaning upstreams hold, as each answers it: `{"received": target, "content": …}`.
const SECRET: &str = "SECRET-FLAG";
const ROOT: &str = "ROOT-INDEX";
const METRICS_DATA: &str = "METRICS-DATA";
const PUBLIC: &str = "PUBLIC-README";

/// nginx answering the same paths as `proxy_peers.py files`, after its own cleaning (it
/// decodes `%XX`, `%2F` included, then resolves dot segments and merges slashes).
const NGINX_CONF: &str = r#"daemon off;
master_process off;
worker_processes 1;
pid nginx.pid;
error_log stderr;
events { worker_connections 64; }
http {
  access_log off;
  default_type application/json;
  server {
    listen 127.0.0.1:PORT;
    location = / { return 200 '{"received": "$request_uri", "content": "ROOT-INDEX"}'; }
    location = /secret/flag { return 200 '{"received": "$request_uri", "content": "SECRET-FLAG"}'; }
    location = /metrics/data { return 200 '{"received": "$request_uri", "content": "METRICS-DATA"}'; }
    location = /public/readme { return 200 '{"received": "$request_uri", "content": "PUBLIC-README"}'; }
    location / { return 404 '{"received": "$request_uri", "content": null}'; }
  }
}
"#;

/// An upstream process that cleans paths itself (one of the two), and its URL.
struct CleaningUpstream {
    _python: Option<Process>,
    _nginx: Option<Nginx>,
    url: String,
}

struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn python_files(fixture: &Fixture) -> CleaningUpstream {
    let root = fixture.dir.path().join("files");
    let mut command = Command::new(&fixture.python);
    command.arg(super::proxy::peers()).arg("files").arg(&root);
    let process = Process::start(command, true);
    let url = format!("http://{}/", process.addr);
    CleaningUpstream {
        _python: Some(process),
        _nginx: None,
        url,
    }
}

fn nginx(fixture: &Fixture) -> Option<CleaningUpstream> {
    let nginx = tool_or_skip(&NGINX)?;
    let prefix = fixture.dir.path().join("nginx");
    std::fs::create_dir_all(&prefix).unwrap();
    // nginx cannot announce a port it chose: take a free one, then let nginx bind it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        prefix.join("nginx.conf"),
        NGINX_CONF.replace("PORT", &port.to_string()),
    )
    .unwrap();
    let mut prefix_arg = prefix.clone().into_os_string();
    prefix_arg.push("/");
    let mut child = Command::new(nginx)
        .arg("-p")
        .arg(prefix_arg)
        .args(["-c", "nginx.conf", "-e", "stderr"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nginx");
    let addr = format!("127.0.0.1:{port}");
    crate::support::wait::eventually_blocking(
        Duration::from_secs(20),
        || format!("nginx listens on {addr}"),
        || {
            if let Ok(Some(status)) = child.try_wait() {
                let mut log = String::new();
                if let Some(mut stderr) = child.stderr.take() {
                    use std::io::Read as _;
                    let _ = stderr.read_to_string(&mut log);
                }
                panic!("nginx exited ({status}): {log}");
            }
            std::net::TcpStream::connect(&addr).ok()
        },
    );
    Some(CleaningUpstream {
        _python: None,
        _nginx: Some(Nginx(child)),
        url: format!("http://{addr}/"),
    })
}

/// The target's answer through the proxy at `addr`, sent as it is written (`--path-as-is`).
fn raw_get(fixture: &Fixture, addr: &str, target: &str, token: Option<&str>) -> (u16, String) {
    let url = format!("http://{addr}{target}");
    let header = token.map(|t| format!("Authorization: Bearer {t}"));
    let mut args = vec!["--path-as-is", url.as_str()];
    if let Some(header) = &header {
        args.extend(["-H", header.as_str()]);
    }
    fixture.curl(&args)
}

fn reached_nothing_hidden(target: &str, body: &str) {
    for hidden in [SECRET, ROOT] {
        assert!(
            !body.contains(hidden),
            "`{target}` reached the upstream's {hidden}: {body}"
        );
    }
}

/// Every way the hostile trial found out of `/metrics/` and `/public/`, and more of them,
/// against three proxies in front of `upstream`: authzd alone (it grants `/metrics/*`),
/// `--allow-paths=/metrics/*`, and `--ignore-paths=/public/*` asked without credentials.
/// Each answer is the status the clean path earns (or 400), and never the upstream's secret
/// or its root.
async fn hostile_paths_reach_only_what_was_let_through(
    fixture: &Fixture,
    upstream: &CleaningUpstream,
) {
    let to_upstream = format!("--upstream={}", upstream.url);
    let proxy = |flags: &[&str]| {
        let mut all = vec![
            "--insecure-listen-address=127.0.0.1:0",
            to_upstream.as_str(),
        ];
        all.extend_from_slice(flags);
        fixture.proxy(&all)
    };
    let authorized = proxy(&[]);
    let allowed = proxy(&["--allow-paths=/metrics/*"]);
    let ignored = proxy(&["--ignore-paths=/public/*"]);

    // (target, through authzd alone, through --allow-paths)
    for (target, authorized_status, allowed_status) in [
        ("/metrics/../secret/flag", 403, 404),
        ("/metrics/x/../../secret/flag", 403, 404),
        ("/metrics//../secret/flag", 403, 404),
        ("/metrics/..", 403, 404),
        ("/metrics/%2e%2e/secret/flag", 400, 400),
        ("/metrics/%2E%2E/secret/flag", 400, 400),
        ("/metrics/.%2e/secret/flag", 400, 400),
        ("/metrics/%2e%2e", 400, 400),
        ("/metrics/..%2fsecret/flag", 400, 400),
        ("/metrics/..%2Fsecret%2Fflag", 400, 400),
        ("/metrics/%2e%2e%2fsecret%2fflag", 400, 400),
        ("/metrics/..;/secret/flag", 400, 400),
    ] {
        for (proxy, want) in [(&authorized, authorized_status), (&allowed, allowed_status)] {
            let (status, body) = raw_get(fixture, &proxy.addr, target, Some(SA));
            reached_nothing_hidden(target, &body);
            assert_eq!(status, want, "{target}: {body}");
            if want == 400 {
                assert!(
                    body.starts_with("Bad Request: the path"),
                    "{target}: {body}"
                );
            }
        }
    }

    let (status, body) = raw_get(fixture, &ignored.addr, "/public/readme", None);
    assert_eq!(status, 200, "{body}\n{}", ignored.log());
    assert_eq!(upstream_saw(&body)["content"], PUBLIC);
    for (target, want) in [
        ("/public/%2e%2e", 400),
        ("/public/%2E%2E/", 400),
        ("/public/.%2e/secret/flag", 400),
        ("/public/..%2fsecret%2fflag", 400),
        ("/public/..", 401),
        ("/public/../secret/flag", 401),
        ("/public//..//", 401),
    ] {
        let (status, body) = raw_get(fixture, &ignored.addr, target, None);
        reached_nothing_hidden(target, &body);
        assert_eq!(status, want, "{target} without credentials: {body}");
    }

    // A path that can be cleaned is passed on clean, and what the upstream serves there is
    // what was authorized.
    for proxy in [&authorized, &allowed] {
        for target in ["/metrics/data", "/metrics/x/../data", "/metrics//./data"] {
            let (status, body) = raw_get(fixture, &proxy.addr, target, Some(SA));
            assert_eq!(status, 200, "{target}: {body}\n{}", proxy.log());
            let seen = upstream_saw(&body);
            assert_eq!(seen["content"], METRICS_DATA, "{target}: {seen}");
            assert_eq!(seen["received"], "/metrics/data", "{target}: {seen}");
        }
    }
}

#[tokio::test]
async fn hostile_paths_reach_only_what_was_let_through_behind_http_server() {
    let Some(fixture) = Fixture::start_with(&[("metrics-subpaths.yaml", METRICS_SUBPATHS)]).await
    else {
        return;
    };
    let upstream = python_files(&fixture);
    hostile_paths_reach_only_what_was_let_through(&fixture, &upstream).await;
}

#[tokio::test]
async fn hostile_paths_reach_only_what_was_let_through_behind_nginx() {
    let Some(fixture) = Fixture::start_with(&[("metrics-subpaths.yaml", METRICS_SUBPATHS)]).await
    else {
        return;
    };
    let Some(upstream) = nginx(&fixture) else {
        return;
    };
    hostile_paths_reach_only_what_was_let_through(&fixture, &upstream).await;
}

/// The identity header lines the upstream received (names folded as CGI folds them: lower
/// case, `_` for `-`), with their values.
fn identity_lines(seen: &serde_json::Value, names: &[&str]) -> Vec<(String, String)> {
    seen["header_lines"]
        .as_array()
        .unwrap_or_else(|| panic!("no header lines: {seen}"))
        .iter()
        .map(|line| {
            (
                line[0]
                    .as_str()
                    .unwrap()
                    .to_ascii_lowercase()
                    .replace('_', "-"),
                line[1].as_str().unwrap().to_string(),
            )
        })
        .filter(|(name, _)| names.contains(&name.as_str()))
        .collect()
}

/// A client claiming an identity in every spelling of the configured names (and the default
/// ones, when others are configured).
const CLAIMS: [&str; 8] = [
    "X-Remote-User: root",
    "x-remote-groups: system:masters",
    "X_Remote_User: root",
    "X-REMOTE-GROUPS: system:masters",
    "X-Auth-User: root",
    "x_auth_groups: system:masters",
    "X-AUTH-USER: root",
    "X-Auth-Groups: system:masters",
];

#[tokio::test]
async fn clients_cannot_claim_an_identity_on_any_path() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    for (names, flags) in [
        (
            ["x-remote-user", "x-remote-groups"],
            &["--auth-header-fields-enabled"][..],
        ),
        (
            ["x-auth-user", "x-auth-groups"],
            &[
                "--auth-header-fields-enabled",
                "--auth-header-user-field-name=X-Auth-User",
                "--auth-header-groups-field-name=x-auth-groups",
            ][..],
        ),
    ] {
        let mut all = vec!["--ignore-paths=/healthz"];
        all.extend_from_slice(flags);
        let proxy = fixture.plain_proxy(&all);
        let claims: Vec<&str> = CLAIMS.iter().flat_map(|claim| ["-H", *claim]).collect();

        // An ignored path: nobody is authenticated, and nobody is named.
        let url = format!("http://{}/healthz", proxy.addr);
        let mut args = vec![url.as_str()];
        args.extend(&claims);
        let (status, body) = fixture.curl(&args);
        assert_eq!(status, 200, "{body}\n{}", proxy.log());
        let seen = upstream_saw(&body);
        assert_eq!(
            identity_lines(&seen, &names),
            [],
            "{flags:?}: an ignored path passed a claimed identity on: {seen}"
        );

        // An authorized path: the caller, once, whatever the client claimed.
        let url = format!("http://{}/metrics", proxy.addr);
        let auth = format!("Authorization: Bearer {SA}");
        let mut args = vec![url.as_str(), "-H", auth.as_str()];
        args.extend(&claims);
        let (status, body) = fixture.curl(&args);
        assert_eq!(status, 200, "{body}\n{}", proxy.log());
        let seen = upstream_saw(&body);
        assert_eq!(
            identity_lines(&seen, &names),
            [
                (
                    names[0].to_string(),
                    "system:serviceaccount:default:default".to_string()
                ),
                (
                    names[1].to_string(),
                    "system:serviceaccounts|system:authenticated".to_string()
                ),
            ],
            "{flags:?}: {seen}"
        );
    }
}

#[tokio::test]
async fn a_connection_header_cannot_remove_the_proxys_identity() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let proxy = fixture.plain_proxy(&["--auth-header-fields-enabled"]);
    let url = format!("http://{}/metrics", proxy.addr);
    let auth = format!("Authorization: Bearer {SA}");
    for connection in [
        "Connection: X-Remote-User, X-Remote-Groups",
        "Connection: keep-alive, x-remote-user",
        "Connection: x-remote-groups",
    ] {
        let (status, body) = fixture.curl(&[&url, "-H", &auth, "-H", connection]);
        assert_eq!(status, 200, "{connection}: {body}\n{}", proxy.log());
        let seen = upstream_saw(&body);
        assert_eq!(
            identity_lines(&seen, &["x-remote-user", "x-remote-groups"]),
            [
                (
                    "x-remote-user".to_string(),
                    "system:serviceaccount:default:default".to_string()
                ),
                (
                    "x-remote-groups".to_string(),
                    "system:serviceaccounts|system:authenticated".to_string()
                ),
            ],
            "{connection}: {seen}"
        );
    }
}

#[tokio::test]
async fn a_rewrite_value_the_proxy_cannot_read_refuses_the_request() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let auth = format!("Authorization: Bearer {SA}");

    let config = fixture.config("header.yaml", HEADER_REWRITE_CONFIG);
    let by_header = fixture.plain_proxy(&[&format!("--config-file={config}")]);
    let url = format!("http://{}/metrics", by_header.addr);
    let ask = |values: &[&[u8]]| {
        let headers: Vec<Vec<u8>> = values
            .iter()
            .map(|value| [&b"X-Namespace: "[..], value].concat())
            .collect();
        let mut args: Vec<&OsStr> = vec![OsStr::new(&url), OsStr::new("-H"), OsStr::new(&auth)];
        for header in &headers {
            args.extend([OsStr::new("-H"), OsStr::from_bytes(header)]);
        }
        fixture.curl_bytes(&args)
    };
    let (status, body) = ask(&[b"default"]);
    assert_eq!(status, 200, "{body}\n{}", by_header.log());
    // The value authzd would refuse rides beside one it allows, in bytes that are not UTF-8.
    let (status, body) = ask(&[b"default", b"kube-system\xff"]);
    assert_eq!(
        (status, body.trim()),
        (
            400,
            "Bad Request: a value of the header `x-namespace` is not UTF-8"
        )
    );

    let config = fixture.config("query.yaml", REWRITES_CONFIG);
    let by_query = fixture.plain_proxy(&[&format!("--config-file={config}")]);
    let base = format!("http://{}/metrics", by_query.addr);
    let (status, body) = fixture.get(&format!("{base}?namespace=default"), Some(SA));
    assert_eq!(status, 200, "{body}\n{}", by_query.log());
    for query in [
        "namespace=default&namespace=kube-system%ff",
        "namespace=default&namespace=kube-system%zz",
        "namespace=default&namespac%zze=kube-system",
        "namespace=default&x=1;namespace=kube-system",
    ] {
        let (status, body) = fixture.get(&format!("{base}?{query}"), Some(SA));
        assert_eq!(status, 400, "{query}: {body}");
        assert!(
            body.starts_with("Bad Request: the query pair"),
            "{query}: {body}"
        );
    }
}
