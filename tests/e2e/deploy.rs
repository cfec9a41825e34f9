//! deploy/ is documentation that runs: every manifest and config parses, names only flags the
//! binary has, and agrees with itself (ports, selectors, socket paths, the webhook path), and
//! the shipped policy grants the callers the manifests configure the privileges they need.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::server::{run_with_timeout, BIN};
use serde_json::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn load(relative: &str) -> Value {
    let path = deploy_dir().join(relative);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// Every long flag `authzd serve --help` documents.
fn serve_flags() -> BTreeSet<String> {
    let mut command = Command::new(BIN);
    command.args(["serve", "--help"]);
    let output = run_with_timeout(command, Duration::from_secs(30));
    assert!(output.status.success());
    String::from_utf8(output.stdout)
        .unwrap()
        .split_whitespace()
        .filter_map(|word| word.strip_prefix("--"))
        .map(|flag| {
            flag.trim_end_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-')
                .to_string()
        })
        .collect()
}

/// `--name=value` / `--name value` arguments as (name, value) pairs; the flag names must be
/// real.
fn check_args(args: &[String], flags: &BTreeSet<String>, what: &str) -> Vec<(String, String)> {
    assert_eq!(args.first().map(String::as_str), Some("serve"), "{what}");
    let mut pairs = Vec::new();
    let mut rest = args[1..].iter().peekable();
    while let Some(arg) = rest.next() {
        let flag = arg
            .strip_prefix("--")
            .unwrap_or_else(|| panic!("{what}: `{arg}` is not a flag"));
        let (name, value) = match flag.split_once('=') {
            Some((name, value)) => (name.to_string(), value.to_string()),
            None if rest.peek().is_some_and(|next| !next.starts_with("--")) => {
                (flag.to_string(), rest.next().unwrap().clone())
            }
            None => (flag.to_string(), String::new()),
        };
        assert!(
            flags.contains(&name),
            "{what}: `--{name}` is not a flag of `authzd serve`"
        );
        pairs.push((name, value));
    }
    pairs
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn container<'a>(pod_spec: &'a Value, name: &str) -> &'a Value {
    pod_spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn flag_values<'a>(pairs: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    pairs
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

fn port_of(listen: &str) -> u64 {
    listen.rsplit_once(':').unwrap().1.parse().unwrap()
}

#[test]
fn deployment_runs_real_flags_on_consistent_ports_and_locked_down() {
    let flags = serve_flags();
    let deployment = load("kubernetes/deployment.yaml");
    assert_eq!(deployment["kind"], "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let authzd = container(pod, "authzd");
    let args = check_args(&strings(&authzd["args"]), &flags, "deployment");
    let listen = flag_values(&args, "listen");
    assert_eq!(listen.len(), 1);
    let port = port_of(listen[0]);
    let ports = authzd["ports"].as_array().unwrap();
    assert!(ports.iter().any(|p| p["containerPort"] == port));
    for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
        let get = &authzd[probe]["httpGet"];
        assert_eq!(get["port"], port, "{probe}");
        assert!(
            ["/healthz", "/readyz"].contains(&get["path"].as_str().unwrap()),
            "{probe}"
        );
        // TLS is on (--tls-cert-file), so the probes must speak it.
        assert_eq!(get["scheme"], "HTTPS", "{probe}");
    }
    assert!(!flag_values(&args, "tls-cert-file").is_empty());
    let security = &authzd["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    for resource in ["cpu", "memory"] {
        assert!(authzd["resources"]["limits"][resource].is_string());
    }
    // Every file flag points into a mounted volume.
    let mounts: Vec<String> = authzd["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap().to_string())
        .collect();
    for flag in [
        "policy",
        "tls-cert-file",
        "tls-private-key-file",
        "client-ca-file",
        "token-auth-file",
    ] {
        for value in flag_values(&args, flag) {
            assert!(
                mounts.iter().any(|m| value.starts_with(m.as_str())),
                "--{flag}={value} is not under a mounted volume"
            );
        }
    }

    let service = load("kubernetes/service.yaml");
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_eq!(&service["spec"]["selector"], labels);
    let service_port = &service["spec"]["ports"][0];
    assert_eq!(service_port["port"], port);
    let target = service_port["targetPort"].as_str().unwrap();
    assert!(ports.iter().any(|p| p["name"] == target));

    let budget = load("kubernetes/poddisruptionbudget.yaml");
    assert_eq!(&budget["spec"]["selector"]["matchLabels"], labels);
    assert!(budget["spec"]["minAvailable"].as_u64().unwrap() < 3);
}

/// The policy ConfigMap is a policy authzd accepts, and it lets the callers the manifests
/// configure (the kube-apiserver's token user, the Envoy group, the metrics scraper) ask their
/// questions.
#[test]
fn shipped_policy_loads_and_admits_the_configured_callers() {
    let configmap = load("kubernetes/policy-configmap.yaml");
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in configmap["data"].as_object().unwrap() {
        std::fs::write(dir.path().join(name), content.as_str().unwrap()).unwrap();
    }
    let policy = dir.path().to_str().unwrap();
    let mut lint = Command::new(BIN);
    lint.args(["lint", "--policy", policy]);
    let output = run_with_timeout(lint, Duration::from_secs(30));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );

    // The kubeconfig's token belongs to a user in the token file...
    let kubeconfig = load("kube-apiserver/webhook-kubeconfig.yaml");
    let token = kubeconfig["users"][0]["user"]["token"].as_str().unwrap();
    let secret = load("kubernetes/tokens-secret.example.yaml");
    let csv = secret["stringData"]["tokens.csv"].as_str().unwrap();
    let line = csv
        .lines()
        .find(|l| l.starts_with(&format!("{token},")))
        .expect("the kubeconfig's token is in the token file");
    let apiserver_user = line.split(',').nth(1).unwrap();
    let envoy_group = csv
        .lines()
        .find_map(|l| l.split_once('"').map(|(_, g)| g.trim_end_matches('"')))
        .expect("a token with groups");
    // ...and that user and the Envoy group may create subjectaccessreviews.
    for subject in [
        vec!["--user", apiserver_user],
        vec!["--user", "envoy", "--group", envoy_group],
    ] {
        let mut check = Command::new(BIN);
        check
            .args(["check", "--policy", policy])
            .args(&subject)
            .args([
                "--verb",
                "create",
                "--api-group",
                "authorization.k8s.io",
                "--resource",
                "subjectaccessreviews",
            ]);
        let output = run_with_timeout(check, Duration::from_secs(30));
        assert!(
            output.status.success(),
            "{subject:?} may not create subjectaccessreviews:\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
    }
    // The scraper's token belongs to a user who may read /metrics (a token file makes it
    // authorized, docs/observability.md §1).
    let scraper = csv
        .lines()
        .map(|l| l.trim().split(',').collect::<Vec<_>>())
        .find(|fields| fields.get(1) == Some(&"prometheus"))
        .expect("a token for the prometheus user");
    let mut check = Command::new(BIN);
    check.args(["check", "--policy", policy, "--user", scraper[1]]);
    check.args(["--verb", "get", "--path", "/metrics"]);
    let output = run_with_timeout(check, Duration::from_secs(30));
    assert!(
        output.status.success(),
        "prometheus may not get /metrics:\n{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn kube_apiserver_webhook_points_at_the_service_and_the_webhook_path() {
    let config = load("kube-apiserver/authorization-config.yaml");
    assert_eq!(config["kind"], "AuthorizationConfiguration");
    let webhook = config["authorizers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == "Webhook")
        .expect("a Webhook authorizer");
    assert_eq!(webhook["webhook"]["subjectAccessReviewVersion"], "v1");
    let kubeconfig_path = webhook["webhook"]["connectionInfo"]["kubeConfigFile"]
        .as_str()
        .unwrap();
    assert!(kubeconfig_path.ends_with("/webhook-kubeconfig.yaml"));
    let kubeconfig = load("kube-apiserver/webhook-kubeconfig.yaml");
    let server = kubeconfig["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap();
    let (authority, path) = server
        .strip_prefix("https://")
        .expect("TLS, as the Deployment serves")
        .split_once('/')
        .unwrap();
    // The default --webhook-path, as `authzd serve --help` states it.
    let mut help = Command::new(BIN);
    help.args(["serve", "--help"]);
    let help = String::from_utf8(run_with_timeout(help, Duration::from_secs(30)).stdout).unwrap();
    assert!(help.contains(&format!("[default: /{path}]")), "{help}");
    let (host, port) = authority.split_once(':').unwrap();
    assert!(host.starts_with("authzd.authzd.svc"));
    let service = load("kubernetes/service.yaml");
    assert_eq!(
        service["spec"]["ports"][0]["port"],
        port.parse::<u64>().unwrap()
    );
}

#[test]
fn sidecar_shares_the_socket_it_listens_on() {
    let flags = serve_flags();
    let pod = load("sidecar/exec-proxy.yaml");
    let spec = &pod["spec"];
    let authzd = container(spec, "authzd");
    let args = check_args(&strings(&authzd["args"]), &flags, "sidecar");
    let listen = flag_values(&args, "listen");
    assert_eq!(listen.len(), 1);
    let socket = listen[0].strip_prefix("unix://").expect("a Unix socket");
    let socket_dir = Path::new(socket).parent().unwrap().to_str().unwrap();
    let proxy = container(spec, "exec-proxy");
    let address = proxy["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "AUTHZD_ADDRESS")
        .unwrap();
    assert_eq!(address["value"], listen[0]);
    let volume_at = |c: &Value| {
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"] == socket_dir)
            .map(|m| m["name"].as_str().unwrap().to_string())
    };
    let shared = volume_at(authzd).expect("authzd mounts the socket directory");
    assert_eq!(volume_at(proxy), Some(shared));
    assert_eq!(authzd["securityContext"]["readOnlyRootFilesystem"], true);
}

#[test]
fn dockerfile_runs_real_flags_as_non_root() {
    let flags = serve_flags();
    let text = std::fs::read_to_string(deploy_dir().join("Dockerfile")).unwrap();
    let line = |instruction: &str| {
        text.lines()
            .find(|l| l.starts_with(instruction))
            .unwrap_or_else(|| panic!("no {instruction} line"))
            .to_string()
    };
    let cmd: Vec<String> = serde_json::from_str(line("CMD ").trim_start_matches("CMD ")).unwrap();
    let args = check_args(&cmd, &flags, "Dockerfile CMD");
    let expose: u64 = line("EXPOSE ")
        .trim_start_matches("EXPOSE ")
        .trim()
        .parse()
        .unwrap();
    assert_eq!(port_of(flag_values(&args, "listen")[0]), expose);
    let user = line("USER ");
    let uid: u32 = user
        .trim_start_matches("USER ")
        .split(':')
        .next()
        .unwrap()
        .trim()
        .parse()
        .expect("a numeric user, so runAsNonRoot can verify it");
    assert_ne!(uid, 0);
    assert!(text.matches("FROM ").count() >= 2, "multi-stage build");
}

#[test]
fn envoy_example_speaks_http2_to_authzd() {
    let template = std::fs::read_to_string(deploy_dir().join("envoy/envoy.yaml")).unwrap();
    // A template: filled as envsubst would (tests/e2e/envoy.rs runs it with a real Envoy).
    let mut text = template.clone();
    for (placeholder, value) in [
        ("${LISTEN_PORT}", "10000"),
        ("${UPSTREAM_HOST}", "127.0.0.1"),
        ("${UPSTREAM_PORT}", "8080"),
        ("${AUTHZD_HOST}", "127.0.0.1"),
        ("${AUTHZD_PORT}", "50051"),
        ("${ADMIN_PORT}", "9901"),
    ] {
        text = text.replace(placeholder, value);
    }
    assert!(!text.contains("${"), "an undocumented placeholder is left");
    let config: Value = serde_saphyr::from_str(&text).unwrap();
    let clusters = config["static_resources"]["clusters"].as_array().unwrap();
    let authzd = clusters
        .iter()
        .find(|c| c["name"] == "authzd")
        .expect("an authzd cluster");
    assert!(authzd["typed_extension_protocol_options"]
        ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["explicit_http_config"]
        .get("http2_protocol_options")
        .is_some());
    assert!(text.contains("envoy.filters.http.ext_authz"));
}
