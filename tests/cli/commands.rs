//! The offline commands against the sample policy: output and exit codes
//! (check: 0 allowed, 1 not allowed, 2 usage/policy error; lint: 0 clean, 1 problems).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::support::server::{run_bin, sample_policy};

fn authzd(policy: &Path, args: &[&str]) -> Output {
    let mut all: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    all.push(OsStr::new("--policy"));
    all.push(policy.as_os_str());
    run_bin(&all, Duration::from_secs(60))
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

const BROKEN_YAML: &str =
    "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: x\nrules: [\n";

#[test]
fn check_allowed_exits_zero_with_explanation() {
    let policy = sample_policy();
    let out = authzd(
        policy.path(),
        &[
            "check",
            "--user",
            "alice",
            "--verb",
            "get",
            "--resource",
            "pods",
            "-n",
            "default",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    assert!(text.contains("decision: ALLOW (allowed)"), "{text}");
    assert!(
        text.contains(r#"reason: RBAC: allowed by ClusterRoleBinding "read-pods""#),
        "{text}"
    );
    assert!(
        text.contains(
            "allowed by: RBAC ClusterRoleBinding/read-pods -> ClusterRole/pod-reader rule 0 ("
        ),
        "{text}"
    );
    assert!(text.contains("denied by: -"), "{text}");
}

#[test]
fn check_denied_exits_one_naming_the_deny_rule() {
    let policy = sample_policy();
    let out = authzd(
        policy.path(),
        &[
            "check",
            "--user",
            "ivan",
            "--group",
            "devs",
            "--group",
            "interns",
            "--verb",
            "get",
            "--resource",
            "secrets",
            "--namespace",
            "dev",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    assert!(text.contains("decision: DENY (not allowed)"), "{text}");
    assert!(
        text.contains(
            "denied by: RBAC RoleBinding/dev/interns-no-secrets -> Role/dev/no-secrets rule 0"
        ),
        "{text}"
    );
}

#[test]
fn check_no_opinion_exits_one_and_reports_errors() {
    let policy = sample_policy();
    let out = authzd(
        policy.path(),
        &[
            "check",
            "--user",
            "eve",
            "--verb",
            "get",
            "--resource",
            "pods",
            "-n",
            "dev",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("decision: NO_OPINION (not allowed)"),
        "{text}"
    );
    assert!(
        text.contains("errors: ") && text.contains("ghost"),
        "{text}"
    );
}

#[test]
fn check_non_resource_and_super_group() {
    let policy = sample_policy();
    let out = authzd(
        policy.path(),
        &[
            "check",
            "--group",
            "system:masters",
            "--verb",
            "get",
            "--path",
            "/metrics",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("allowed by: SuperUser"),
        "{}",
        stdout(&out)
    );

    // Without the default super-group nothing allows it.
    let out = authzd(
        policy.path(),
        &[
            "check",
            "--group",
            "system:masters",
            "--super-group",
            "",
            "--verb",
            "get",
            "--path",
            "/metrics",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
}

#[test]
fn check_usage_and_policy_errors_exit_two() {
    let policy = sample_policy();
    // No verb.
    let out = authzd(
        policy.path(),
        &["check", "--user", "alice", "--resource", "pods"],
    );
    assert_eq!(out.status.code(), Some(2));
    // Both a resource and a path.
    let out = authzd(
        policy.path(),
        &[
            "check",
            "--user",
            "a",
            "--verb",
            "get",
            "--resource",
            "pods",
            "--path",
            "/x",
        ],
    );
    assert_eq!(out.status.code(), Some(2));

    std::fs::write(policy.path().join("broken.yaml"), BROKEN_YAML).unwrap();
    let out = authzd(
        policy.path(),
        &[
            "check",
            "--user",
            "alice",
            "--verb",
            "get",
            "--resource",
            "pods",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("broken.yaml:"), "{}", stderr(&out));
}

#[test]
fn who_can_lists_users_groups_and_denied() {
    let policy = sample_policy();
    let out = authzd(
        policy.path(),
        &[
            "who-can",
            "--verb",
            "get",
            "--resource",
            "pods",
            "-n",
            "default",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("users: alice\n"), "{text}");
    assert!(text.contains("groups: readers, system:masters\n"), "{text}");

    let out = authzd(
        policy.path(),
        &[
            "who-can",
            "--verb",
            "delete",
            "--resource",
            "secrets",
            "-n",
            "dev",
        ],
    );
    let text = stdout(&out);
    assert!(text.contains("denied groups: interns\n"), "{text}");
    assert!(text.contains("devs"), "{text}");
}

#[test]
fn lint_clean_policy_prints_a_summary() {
    let policy = sample_policy();
    let out = authzd(policy.path(), &["lint"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("3 roles, 4 bindings, 1 ABAC rules"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn lint_reports_file_line_problems_and_exits_one() {
    let policy = sample_policy();
    std::fs::write(policy.path().join("broken.yaml"), BROKEN_YAML).unwrap();
    std::fs::write(
        policy.path().join("more.jsonl"),
        "{\"user\": \"a\", \"resource\": \"pods\"}\nnot json\n",
    )
    .unwrap();
    let out = authzd(policy.path(), &["lint"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    let problem_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("broken.yaml:") || l.contains("more.jsonl:"))
        .collect();
    assert!(
        problem_lines.iter().any(|l| l.contains("more.jsonl:2: ")),
        "{text}"
    );
    assert!(
        problem_lines.iter().any(|l| l.contains("broken.yaml:")),
        "{text}"
    );
    assert!(text.contains("problem(s) in"), "{text}");
}

/// A labels-only rule (docs/policy.md §4), asked offline with the objects in files, a changed-path
/// list, and an object that is not JSON; who-can reads the same content. Lint warns on a typo.
#[test]
fn check_and_who_can_read_content_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: labeler}\n\
         rules:\n- {apiGroups: [apps], resources: [deployments], verbs: [update], fields: [\".metadata.labels\"]}\n\
         ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: bot}\n\
         subjects: [{kind: User, name: bot}]\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: labeler}\n",
    )
    .unwrap();
    let old = dir.path().join("old.json");
    let new = dir.path().join("new.json");
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &old,
        r#"{"metadata":{"labels":{"a":"1"}},"spec":{"replicas":1}}"#,
    )
    .unwrap();
    std::fs::write(
        &new,
        r#"{"metadata":{"labels":{"a":"2"}},"spec":{"replicas":1}}"#,
    )
    .unwrap();
    std::fs::write(&bad, "{not json").unwrap();
    let (old, new, bad) = (
        old.to_str().unwrap(),
        new.to_str().unwrap(),
        bad.to_str().unwrap(),
    );
    let update = [
        "--verb",
        "update",
        "--api-group",
        "apps",
        "--resource",
        "deployments",
        "-n",
        "dev",
    ];
    let ask = |extra: &[&str]| {
        let mut args = vec!["check", "--user", "bot"];
        args.extend_from_slice(&update);
        args.extend_from_slice(extra);
        authzd(&policy, &args)
    };
    let out = ask(&["--old-object", old, "--object", new]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("changed path .metadata.labels.a"),
        "{}",
        stdout(&out)
    );
    let out = ask(&["--changed-path", ".spec.replicas"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("no rule covers changed path .spec.replicas"));
    let out = ask(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("needs the changed fields"),
        "{}",
        stdout(&out)
    );
    let out = ask(&["--old-object", old, "--object", bad]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("`content.object` is not JSON"),
        "{}",
        stderr(&out)
    );
    let out = ask(&["--object", "/nonexistent/object.json"]);
    assert_eq!(out.status.code(), Some(2));

    let mut args = vec!["who-can"];
    args.extend_from_slice(&update);
    args.extend_from_slice(&["--old-object", old, "--object", new]);
    let out = authzd(&policy, &args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("users: bot"), "{}", stdout(&out));

    std::fs::write(
        &policy,
        std::fs::read_to_string(&policy)
            .unwrap()
            .replace(".metadata.labels", ".metdata.labels"),
    )
    .unwrap();
    let out = authzd(&policy, &["lint"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains("`metdata` is not a top-level field"),
        "{}",
        stdout(&out)
    );
}

/// `check` with a CEL condition: the fold by default, the conditions with `--conditions
/// return` (exit 1: not allowed until they are evaluated), and the finished answer with the
/// objects; `who-can` decides every subject against them.
#[test]
fn check_prints_conditions_and_evaluates_them_against_objects() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: keeper}\n\
         rules:\n- apiGroups: [apps]\n  resources: [deployments]\n  verbs: [update]\n  \
         condition: \"object.metadata.labels == oldObject.metadata.labels\"\n\
         ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: bot}\n\
         subjects: [{kind: User, name: bot}]\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: keeper}\n",
    )
    .unwrap();
    let (old, same, relabelled) = (
        dir.path().join("old.json"),
        dir.path().join("same.json"),
        dir.path().join("relabelled.json"),
    );
    std::fs::write(
        &old,
        r#"{"metadata":{"labels":{"a":"1"}},"spec":{"replicas":1}}"#,
    )
    .unwrap();
    std::fs::write(
        &same,
        r#"{"metadata":{"labels":{"a":"1"}},"spec":{"replicas":2}}"#,
    )
    .unwrap();
    std::fs::write(&relabelled, r#"{"metadata":{"labels":{"a":"2"}}}"#).unwrap();
    let (old, same, relabelled) = (
        old.to_str().unwrap(),
        same.to_str().unwrap(),
        relabelled.to_str().unwrap(),
    );
    let ask = |extra: &[&str]| {
        let mut args = vec![
            "check",
            "--user",
            "bot",
            "--verb",
            "update",
            "--api-group",
            "apps",
            "--resource",
            "deployments",
            "-n",
            "dev",
        ];
        args.extend_from_slice(extra);
        authzd(&policy, &args)
    };
    let out = ask(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("decision: NO_OPINION"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("for its condition"),
        "{}",
        stdout(&out)
    );

    let out = ask(&["--conditions", "return"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("decision: CONDITIONAL"), "{text}");
    assert!(
        text.contains(
            "condition 1: ALLOW if k8s.io/cel object.metadata.labels == oldObject.metadata.labels"
        ),
        "{text}"
    );
    assert!(text.contains("ClusterRole/keeper rule 0"), "{text}");
    assert!(text.contains("otherwise: NO_OPINION"), "{text}");

    let out = ask(&["--old-object", old, "--object", same]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = ask(&[
        "--old-object",
        old,
        "--object",
        relabelled,
        "--conditions",
        "return",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("decision: NO_OPINION"),
        "{}",
        stdout(&out)
    );

    let who = |object: &str| {
        authzd(
            &policy,
            &[
                "who-can",
                "--verb",
                "update",
                "--api-group",
                "apps",
                "--resource",
                "deployments",
                "-n",
                "dev",
                "--old-object",
                old,
                "--object",
                object,
            ],
        )
    };
    assert!(stdout(&who(same)).contains("users: bot"));
    let out = authzd(
        &policy,
        &[
            "who-can",
            "--verb",
            "update",
            "--api-group",
            "apps",
            "--resource",
            "deployments",
            "-n",
            "dev",
            "--conditions",
            "return",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("users: -"), "{text}");
    assert!(text.contains("conditional user bot:"), "{text}");
    assert!(
        text.contains(
            "condition 1: ALLOW if k8s.io/cel object.metadata.labels == oldObject.metadata.labels"
        ),
        "{text}"
    );
    assert!(
        stdout(&who(relabelled)).contains("users: -"),
        "{}",
        stdout(&who(relabelled))
    );
}

/// `authzd proxy --help` is help, as every other `--help` is: on stdout, exit 0, no "error:".
#[test]
fn proxy_help_is_help_not_an_error() {
    let out = run_bin(
        &[OsStr::new("proxy"), OsStr::new("--help")],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.starts_with("An authorizing reverse proxy for one upstream"),
        "{text}"
    );
    assert!(text.contains("--token-auth-file"), "{text}");
    assert!(
        !text.contains("error:") && stderr(&out).is_empty(),
        "{out:?}"
    );
}

/// The heading each flag of `authzd serve --help` is listed under.
fn serve_help_headings() -> std::collections::BTreeMap<String, String> {
    let out = run_bin(
        &[OsStr::new("serve"), OsStr::new("--help")],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let mut heading = String::new();
    let mut flags = std::collections::BTreeMap::new();
    for line in stdout(&out).lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            heading = line.trim_end_matches(':').to_string();
        } else if let Some(flag) = line.trim_start().strip_prefix("--") {
            let name = flag.split([' ', '=']).next().unwrap_or_default();
            flags.insert(name.to_string(), heading.clone());
        }
    }
    flags
}

/// TLS, token, audit, etcd and overload flags were once all listed under "Envoy ext_authz:",
/// where a user looking for them would not; each group has its own heading, and Envoy's
/// holds only `--envoy-*`.
#[test]
fn serve_help_files_each_flag_under_its_own_heading() {
    let headings = serve_help_headings();
    for (flag, heading) in [
        ("envoy-subject-from", "Envoy ext_authz"),
        ("token-auth-file", "Caller authentication and TLS"),
        ("tls-cert-file", "Caller authentication and TLS"),
        ("client-ca-file", "Caller authentication and TLS"),
        ("audit-log", "Audit log"),
        ("decision-records", "Decision records"),
        ("etcd-servers", "Policy in etcd (instead of --policy)"),
        ("max-staleness", "Policy in etcd (instead of --policy)"),
        ("max-concurrent-requests", "Limits and overload"),
        ("request-timeout", "Limits and overload"),
        ("authzen-base-url", "AuthZEN"),
        ("listen", "Options"),
    ] {
        assert_eq!(
            headings.get(flag).map(String::as_str),
            Some(heading),
            "--{flag}: {headings:?}"
        );
    }
    for (flag, heading) in &headings {
        assert_eq!(
            heading == "Envoy ext_authz",
            flag.starts_with("envoy-"),
            "--{flag} under {heading:?}"
        );
    }
}

/// `authzd proxy` says at startup which caller authenticators are on, and warns when none is
/// (every request it authorizes would be answered 401). authzd is not reachable here: the
/// line comes before the proxy connects.
#[test]
fn proxy_logs_its_caller_authenticators_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("callers.csv");
    std::fs::write(&tokens, "alice-token,alice,uid-1\n").unwrap();
    let start = |extra: &[&OsStr]| {
        let mut args: Vec<&OsStr> = [
            "proxy",
            "--insecure-listen-address=127.0.0.1:0",
            "--upstream=http://127.0.0.1:9/",
            "--authzd-server=http://127.0.0.1:9",
            "--authzd-timeout=1s",
            "--local-cache=false",
        ]
        .iter()
        .map(OsStr::new)
        .collect();
        args.extend_from_slice(extra);
        let out = run_bin(&args, Duration::from_secs(10));
        format!("{}{}", stdout(&out), stderr(&out))
    };
    let none = start(&[]);
    assert!(
        none.contains("WARN") && none.contains("no caller authenticator is on"),
        "{none}"
    );
    let flag = format!("--token-auth-file={}", tokens.display());
    let some = start(&[OsStr::new(&flag)]);
    assert!(
        some.contains("caller authenticators")
            && some.contains("bearer tokens (--token-auth-file)"),
        "{some}"
    );
    assert!(!some.contains("no caller authenticator"), "{some}");
}
