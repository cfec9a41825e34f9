//! `authzd test` over 10,000 cases (docs/cli.md §5; the target: 10k cases in ≤ 1 s), timed as a user
//! runs it: the real binary (the bench profile's build), started once per iteration on a
//! generated test file, its report read to the end through a pipe.
//!
//! The policy is the synthetic one of 10,000 bindings (`authzd::synth`, seed 42, written as
//! YAML the way `authzd-loadgen --write-policy` writes it). Most cases ask for a subject of a
//! random binding in its namespace, the rest for random users and groups (and now and then
//! synth's probe user), with random verbs and resources; each expects the decision with its
//! `allowed_by` and `denied_by`, and one in ten also who can do its action (`users_including`,
//! `groups_including`). The expectations are the engine's own answers, computed in-process on
//! the same files before anything is timed; the binary must then pass every case (exit 0,
//! `ok: 10000 cases passed`) or the bench stops.
//!
//! * `policy_test/binary_10k-cases`, `policy_test/binary_10k-cases_junit`: the figure, with the
//!   text report and with `-o junit`.
//! * `policy_test/binary_1-case`: the same command on a file of one case — starting the
//!   process, loading and compiling the policy — so the 10k cases' own share is the difference.
//! * `policy_test/check_1-request`: `authzd check` of one request on the same policy, the floor
//!   every offline command stands on.
//!
//! Under `cargo test --all-targets` (a smoke run on a debug build) the file has 500 cases over
//! 1,000 bindings.
//!
//! What the cases are (how many allow, deny, no opinion; the file's size) is written to
//! `policy_test-cases.json` beside criterion's own output.
//!
//! Run: `cargo bench --bench policy_test`.

// Bench setup: a panic is a failed bench, which is what we want.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use authzd::app::build_engine;
use authzd::config::{default_modes, EngineSettings, PolicySettings, DEFAULT_SUPER_GROUP};
use authzd::engine::{Engine, EngineConfig, RuleRef};
use authzd::policy::load::LoadOptions;
use authzd::policy::model::Binding;
use authzd::request::{Action, Request, ResourceAttributes, UserInfo};
use authzd::synth::{self, Rng, Shape};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};

const BIN: &str = env!("CARGO_BIN_EXE_authzd");
const BINDINGS: usize = 10_000;
const CASES: usize = 10_000;
/// `cargo test --all-targets` runs each bench once as a smoke test, on a debug build: a file of
/// this many cases over `SMOKE_BINDINGS` bindings keeps that short while going through every
/// step (a debug build takes seconds to load 10,000 bindings from YAML).
const SMOKE_CASES: usize = 500;
const SMOKE_BINDINGS: usize = 1_000;
/// One case in this many also asks who can.
const WHO_CAN_EVERY: usize = 10;

/// A YAML scalar: JSON's double-quoted string is YAML's too.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

fn quoted_list(items: impl IntoIterator<Item = String>) -> String {
    let items: Vec<String> = items.into_iter().map(|i| quoted(&i)).collect();
    format!("[{}]", items.join(", "))
}

/// A rule reference as a test file writes it (no source).
fn short_ref(r: &RuleRef) -> String {
    if r.binding.is_empty() {
        format!("{} {}", r.authorizer, r.source)
            .trim_end()
            .to_string()
    } else {
        format!(
            "{} {} -> {} rule {}",
            r.authorizer, r.binding, r.role, r.rule_index
        )
    }
}

/// A request of a subject some binding names, in that binding's namespace, most of the time
/// (so the answers are allows and denies as well as no opinion); a random pair otherwise, and
/// now and then the probe user of `authzd::synth`.
fn random_request(rng: &mut Rng, shape: &Shape, bindings: &[std::sync::Arc<Binding>]) -> Request {
    const VERBS: &[&str] = &["get", "list", "watch", "create", "update", "delete"];
    const RESOURCES: &[(&str, &str, &str)] = &[
        ("", "pods", ""),
        ("", "pods", "log"),
        ("", "secrets", ""),
        ("", "configmaps", ""),
        ("apps", "deployments", ""),
        ("apps", "deployments", "scale"),
        ("rbac.authorization.k8s.io", "roles", ""),
    ];
    let mut namespace = synth::namespace(rng.below(shape.namespaces));
    let user = match rng.below(20) {
        0 => UserInfo {
            name: synth::PROBE_USER.to_string(),
            groups: synth::probe_groups(shape),
            ..UserInfo::default()
        },
        1..=7 => UserInfo {
            name: format!("user-{}", rng.below(shape.users)),
            groups: vec![format!("group-{}", rng.below(shape.groups))],
            ..UserInfo::default()
        },
        _ => {
            let binding = &bindings[rng.below(bindings.len())];
            if !binding.namespace.is_empty() {
                namespace = binding.namespace.clone();
            }
            let mut user = UserInfo {
                name: format!("user-{}", rng.below(shape.users)),
                ..UserInfo::default()
            };
            for subject in &binding.subjects {
                match subject.kind.as_str() {
                    "User" if rng.below(2) == 0 => user.name = subject.name.clone(),
                    "Group" => user.groups.push(subject.name.clone()),
                    _ => {}
                }
            }
            user
        }
    };
    let (group, resource, subresource) = RESOURCES[rng.below(RESOURCES.len())];
    Request {
        user,
        action: Action::Resource(ResourceAttributes {
            namespace,
            verb: VERBS[rng.below(VERBS.len())].to_string(),
            group: group.to_string(),
            version: String::new(),
            resource: resource.to_string(),
            subresource: subresource.to_string(),
            name: String::new(),
        }),
    }
}

/// One case as YAML, its expectations the engine's answers.
fn write_case(out: &mut String, index: usize, request: &Request, engine: &Engine) {
    let Action::Resource(r) = &request.action else {
        unreachable!("resource requests only")
    };
    let response = engine.authorize_content(request.as_borrowed()).unwrap();
    let _ = writeln!(out, "  - name: case {index}");
    let _ = writeln!(out, "    user: {}", quoted(&request.user.name));
    let _ = writeln!(
        out,
        "    groups: {}",
        quoted_list(request.user.groups.iter().cloned())
    );
    let _ = writeln!(
        out,
        "    resource: {{namespace: {}, verb: {}, group: {}, resource: {}, subresource: {}}}",
        quoted(&r.namespace),
        quoted(&r.verb),
        quoted(&r.group),
        quoted(&r.resource),
        quoted(&r.subresource)
    );
    let _ = writeln!(out, "    expect:");
    let _ = writeln!(out, "      decision: {}", response.decision);
    let _ = writeln!(
        out,
        "      allowed_by: {}",
        quoted_list(response.allowed_by.iter().map(short_ref))
    );
    let _ = writeln!(
        out,
        "      denied_by: {}",
        quoted_list(response.denied_by.iter().map(short_ref))
    );
    if index.is_multiple_of(WHO_CAN_EVERY) {
        let subjects = engine
            .allowed_subjects_content(&request.action, None)
            .unwrap();
        let _ = writeln!(
            out,
            "      users_including: {}",
            quoted_list(subjects.users.iter().take(3).cloned())
        );
        let _ = writeln!(
            out,
            "      groups_including: {}",
            quoted_list(subjects.groups.iter().take(3).cloned())
        );
    }
}

/// The synthetic policy in `dir`, a file of `cases` cases and a file of one case; returns the
/// two test files.
fn setup(dir: &Path, cases: usize, bindings: usize) -> (PathBuf, PathBuf) {
    let shape = Shape::with_bindings(bindings);
    let policy_dir = dir.join("policy");
    std::fs::create_dir_all(&policy_dir).unwrap();
    authzd::loadgen::spawn::write_policy(&policy_dir, &shape, 42).unwrap();
    // The engine the binary will build: the same files, loader and chain (`build_engine`
    // is what `check` and `test` compile with).
    let engine = build_engine(&EngineSettings {
        policy: PolicySettings {
            paths: vec![policy_dir.clone()],
            load: LoadOptions::default(),
        },
        engine: EngineConfig {
            modes: default_modes(),
            super_users: Vec::new(),
            super_groups: vec![DEFAULT_SUPER_GROUP.to_string()],
        },
    })
    .unwrap();

    let header = format!(
        "description: {cases} generated cases over {bindings} synthetic bindings\npolicy: {}\ncases:\n",
        quoted(&policy_dir.display().to_string())
    );
    let policy = synth::policy(&shape, 42);
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    let mut many = header.clone();
    let mut decisions = [0usize; 3];
    for index in 0..cases {
        let request = random_request(&mut rng, &shape, &policy.bindings);
        let decision = engine.authorize(&request).decision;
        decisions[decision as usize] += 1;
        write_case(&mut many, index, &request, &engine);
    }
    // Every decision is represented, so the cases are not all one path.
    assert!(decisions.iter().all(|&n| n > cases / 100), "{decisions:?}");
    // What the cases are, beside criterion's figures (read by scripts/benchmarks_md.py).
    let report = serde_json::json!({
        "cases": cases,
        "bindings": bindings,
        "allow": decisions[0],
        "deny": decisions[1],
        "no_opinion": decisions[2],
        "who_can": cases.div_ceil(WHO_CAN_EVERY),
        "bytes": many.len(),
    });
    eprintln!("policy_test: {report}");
    // A smoke run's cases are not the bench's: it leaves the bench's description alone.
    if cases == CASES {
        write_description(&report);
    }
    let mut one = header;
    write_case(&mut one, 0, &synth::allowed_request(&shape), &engine);

    let many_path = dir.join(format!("{cases}-cases.yaml"));
    let one_path = dir.join("1-case.yaml");
    std::fs::write(&many_path, many).unwrap();
    std::fs::write(&one_path, one).unwrap();
    (many_path, one_path)
}

/// Beside criterion's own output: `CRITERION_HOME`, else the target directory's `criterion`.
fn write_description(report: &serde_json::Value) {
    let criterion_dir = std::env::var_os("CRITERION_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR").map(|t| PathBuf::from(t).join("criterion"))
        })
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/criterion"));
    std::fs::create_dir_all(&criterion_dir).unwrap();
    std::fs::write(
        criterion_dir.join("policy_test-cases.json"),
        report.to_string(),
    )
    .unwrap();
}

fn run(args: &[&str], file: Option<&Path>) -> Output {
    let mut command = Command::new(BIN);
    command.args(args);
    if let Some(file) = file {
        command.arg(file);
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn policy_test(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this as a smoke test.
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    let (cases, bindings) = if benchmarking {
        (CASES, BINDINGS)
    } else {
        (SMOKE_CASES, SMOKE_BINDINGS)
    };
    let (many, one) = setup(dir.path(), cases, bindings);
    let policy_dir = dir.path().join("policy");
    let probe = synth::allowed_request(&Shape::with_bindings(bindings));
    let mut check_args: Vec<String> = vec![
        "check".into(),
        "--policy".into(),
        policy_dir.display().to_string(),
        "--user".into(),
        probe.user.name.clone(),
    ];
    for group in &probe.user.groups {
        check_args.extend(["--group".to_string(), group.clone()]);
    }
    check_args.extend(
        ["--verb", "get", "--resource", "pods", "-n", "ns-0"]
            .iter()
            .map(|s| s.to_string()),
    );
    let check_args: Vec<&str> = check_args.iter().map(String::as_str).collect();

    // Each must give its expected answer before anything is timed.
    let out = run(&["test"], Some(&many));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        text.lines()
            .filter(|l| !l.starts_with("PASS"))
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.ends_with(&format!("\nok: {cases} cases passed (1 file)\n")),
        "{}",
        text.lines().last().unwrap_or_default()
    );
    let out = run(&["test", "-o", "junit"], Some(&many));
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains(&format!("tests=\"{cases}\" failures=\"0\" errors=\"0\"")));
    let out = run(&["test"], Some(&one));
    assert_eq!(out.status.code(), Some(0));
    let out = run(&check_args, None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let mut group = c.benchmark_group("policy_test");
    // Each iteration is a whole run of the binary (about a second): flat sampling gives every
    // sample the same number of runs, so the median is a run's time.
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(8));
    group.warm_up_time(Duration::from_secs(1));
    group.bench_function("binary_10k-cases", |b| {
        b.iter(|| run(&["test"], Some(&many)))
    });
    group.bench_function("binary_10k-cases_junit", |b| {
        b.iter(|| run(&["test", "-o", "junit"], Some(&many)))
    });
    group.bench_function("binary_1-case", |b| b.iter(|| run(&["test"], Some(&one))));
    group.bench_function("check_1-request", |b| b.iter(|| run(&check_args, None)));
    group.finish();
}

criterion_group!(benches, policy_test);
criterion_main!(benches);
