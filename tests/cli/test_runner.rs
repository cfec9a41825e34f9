//! `authzd test`, the real binary: the shipped example passes; a broken expectation fails
//! with its explanation (exit 1); a file that does not load exits 2 naming `file:line`; the
//! command line overrides a file's policy and chain; and `-o junit` is read back by a real
//! JUnit XML parser (Python's `junitparser`).
//!
//! The parser's interpreter comes from `AUTHZD_E2E_PYTHON` (set by `scripts/test.sh`, which
//! installs `tests/e2e/requirements.txt`), else `.e2e-venv/bin/python`. Without one that can
//! import `junitparser` the JUnit test is skipped with a message — unless `CI=true`, where a
//! missing parser is a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use crate::support::tools::{tool_or_skip, PYTHON_JUNIT};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::server::{run_bin, run_with_timeout, sample_policy};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn example() -> PathBuf {
    repo().join("examples/policy-test.yaml")
}

fn authzd(args: &[&OsStr]) -> Output {
    run_bin(args, Duration::from_secs(60))
}

fn test_cmd(args: &[&str], files: &[&Path]) -> Output {
    let mut all: Vec<&OsStr> = vec![OsStr::new("test")];
    all.extend(args.iter().map(OsStr::new));
    all.extend(files.iter().map(|f| f.as_os_str()));
    authzd(&all)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn both(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        stdout(output),
        stderr(output)
    )
}

/// The example's case names, in order, read from the file (so a case added to it is held to
/// passing too).
fn example_case_names() -> Vec<String> {
    std::fs::read_to_string(example())
        .unwrap()
        .lines()
        .filter_map(|line| line.strip_prefix("  - name: "))
        .map(str::to_string)
        .collect()
}

/// The example with the `old` text replaced by `new`, written into `dir`, with its policy
/// named absolutely (the file no longer sits beside `policy/`).
fn edited_example(dir: &Path, old: &str, new: &str) -> PathBuf {
    let text = std::fs::read_to_string(example()).unwrap();
    assert!(text.contains(old), "the example no longer holds {old:?}");
    let policy = repo().join("policy");
    let text = text.replacen(old, new, 1).replacen(
        "policy: ../policy ",
        &format!("policy: {} ", policy.display()),
        1,
    );
    assert!(text.contains(&policy.display().to_string()));
    let path = dir.join("edited.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_shipped_example_passes() {
    let out = test_cmd(&[], &[&example()]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let text = stdout(&out);
    let names = example_case_names();
    assert!(names.len() >= 20, "{names:?}");
    let pass_lines: Vec<&str> = text.lines().filter(|l| l.starts_with("PASS ")).collect();
    assert_eq!(pass_lines.len(), names.len(), "{text}");
    for (line, name) in pass_lines.iter().zip(&names) {
        assert!(line.ends_with(&format!("  {name}")), "{line} / {name}");
        assert!(line.contains("examples/policy-test.yaml:"), "{line}");
    }
    assert!(!text.contains("FAIL"), "{text}");
    assert!(
        text.ends_with(&format!("\nok: {} cases passed (1 file)\n", names.len())),
        "{text}"
    );
}

#[test]
fn a_broken_expectation_fails_with_the_explanation() {
    let dir = tempfile::tempdir().unwrap();
    // jane is allowed to read pods in default; this copy expects a deny.
    let edited = edited_example(
        dir.path(),
        "    expect:\n      decision: allow\n      allowed_by: RBAC RoleBinding/default/read-pods",
        "    expect:\n      decision: deny\n      allowed_by: RBAC RoleBinding/default/read-pods",
    );
    let out = test_cmd(&[], &[&edited]);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    let text = stdout(&out);
    let shown = edited.display().to_string();
    let expected_block = format!(
        "FAIL  {shown}:14  jane reads pods in default (RoleBinding read-pods)\n\
         \x20       decision: expected DENY, got ALLOW\n\
         \x20       | got decision: ALLOW\n\
         \x20       | reason: RBAC: allowed by RoleBinding \"read-pods/default\" of Role \"pod-reader\" to User \"jane\"\n\
         \x20       | allowed by: RBAC RoleBinding/default/read-pods -> Role/default/pod-reader rule 0 ("
    );
    assert!(text.contains(&expected_block), "{text}");
    let total = example_case_names().len();
    assert_eq!(
        text.lines().filter(|l| l.starts_with("PASS ")).count(),
        total - 1,
        "{text}"
    );
    assert!(
        text.ends_with(&format!("\nFAILED: 1 of {total} cases failed (1 file)\n")),
        "{text}"
    );

    // A who-can list that is wrong names what is missing and what was not expected.
    let edited = edited_example(
        dir.path(),
        "users: [alice, dave, \"system:serviceaccount:kube-system:default\"]",
        "users: [alice, zoe, \"system:serviceaccount:kube-system:default\"]",
    );
    let out = test_cmd(&[], &[&edited]);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "        users: expected exactly {\"alice\", \"system:serviceaccount:kube-system:default\", \"zoe\"}, missing [\"zoe\"], not expected [\"dave\"]\n\
             \x20       | who can: users: alice, dave, system:serviceaccount:kube-system:default\n"
        ),
        "{text}"
    );
}

#[test]
fn a_file_that_does_not_load_exits_two_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let policy = repo().join("policy");
    let typo = dir.path().join("typo.yaml");
    std::fs::write(
        &typo,
        format!(
            "policy: {}\ncases:\n  - name: jane reads pods\n    resource: {{namespace: default, verb: get, resource: pods}}\n    usr: jane\n    expect: {{decision: allow}}\n",
            policy.display()
        ),
    )
    .unwrap();
    let bad_decision = dir.path().join("bad-decision.yaml");
    std::fs::write(
        &bad_decision,
        "cases:\n  - name: a\n    user: jane\n    resource: {verb: get, resource: pods}\n    expect: {decision: allowed}\n",
    )
    .unwrap();
    let syntax = dir.path().join("syntax.yaml");
    std::fs::write(&syntax, "cases:\n  - name: a\n    user: [jane\n").unwrap();

    // The good file still runs; the three bad ones are each named with their line.
    let out = test_cmd(&[], &[&typo, &example(), &bad_decision, &syntax]);
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    let err = stderr(&out);
    assert!(
        err.contains("authzd: 3 test file(s) did not load:"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{}:5: unknown field `usr`, expected one of",
            typo.display()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{}:2: case `a`: decision `allowed` is not one of allow, deny, no_opinion",
            bad_decision.display()
        )),
        "{err}"
    );
    assert!(err.contains(&format!("{}:", syntax.display())), "{err}");
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "ERROR {}: did not load (1 problem; on stderr)",
            typo.display()
        )),
        "{text}"
    );
    let total = example_case_names().len();
    assert_eq!(
        text.lines().filter(|l| l.starts_with("PASS ")).count(),
        total,
        "{text}"
    );
    assert!(
        text.ends_with(&format!(
            "\nFAILED: {total} cases passed; 3 files did not load (4 files)\n"
        )),
        "{text}"
    );

    // A policy that does not load is named by its own file and line.
    let broken_policy = sample_policy();
    std::fs::write(
        broken_policy.path().join("broken.yaml"),
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: x\nrules: [\n",
    )
    .unwrap();
    let out = test_cmd(
        &["--policy", broken_policy.path().to_str().unwrap()],
        &[&example()],
    );
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    let err = stderr(&out);
    assert!(
        err.contains("broken.yaml:5: invalid yaml") && err.contains("(the policy of `"),
        "{err}"
    );

    // Nothing to read, and no file at all.
    let out = test_cmd(&[], &[&dir.path().join("missing.yaml")]);
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert!(stderr(&out).contains("missing.yaml: cannot read it"));
    let out = authzd(&[OsStr::new("test")]);
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
}

#[test]
fn the_command_line_overrides_the_files_policy_and_chain() {
    let dir = tempfile::tempdir().unwrap();
    // The file names a policy directory that does not exist; --policy replaces it.
    let file = dir.path().join("t.yaml");
    std::fs::write(
        &file,
        "policy: no-such-dir\ncases:\n\
         - name: jane reads pods\n  user: jane\n  resource: {namespace: default, verb: get, resource: pods}\n  expect: {decision: allow}\n\
         - name: alice, through ABAC\n  user: alice\n  resource: {verb: get, resource: nodes}\n  expect: {decision: allow}\n\
         - name: a master\n  user: root\n  groups: [\"system:masters\"]\n  resource: {verb: get, resource: nodes}\n  expect: {decision: allow}\n",
    )
    .unwrap();
    let out = test_cmd(&[], &[&file]);
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert!(stderr(&out).contains("no-such-dir"), "{}", both(&out));

    let policy = repo().join("policy");
    let policy = policy.to_str().unwrap();
    let out = test_cmd(&["--policy", policy], &[&file]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));

    // The chain without ABAC, and no super-group: alice and root lose their answers.
    let out = test_cmd(
        &[
            "--policy",
            policy,
            "--authorization-mode",
            "RBAC",
            "--super-group",
            "",
        ],
        &[&file],
    );
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    let text = stdout(&out);
    assert!(text.contains(":3  jane reads pods\n"), "{text}");
    assert!(
        text.contains("alice, through ABAC\n        decision: expected ALLOW, got NO_OPINION"),
        "{text}"
    );
    assert!(
        text.contains("a master\n        decision: expected ALLOW, got NO_OPINION"),
        "{text}"
    );

    // Webhook is refused as for `check`.
    let out = test_cmd(&["--authorization-mode", "RBAC,Webhook"], &[&file]);
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
}

/// Reads a JUnit file with junitparser and prints what it understood, as JSON.
const READ_JUNIT: &str = r#"
import json, sys
from junitparser import JUnitXml, Failure, Error
xml = JUnitXml.fromfile(sys.argv[1])
suites = []
for suite in xml:
    cases = []
    for case in suite:
        results = [{"kind": type(r).__name__, "message": r.message, "type": r.type, "text": r.text}
                   for r in case.result]
        cases.append({"name": case.name, "classname": case.classname,
                      "passed": case.is_passed, "results": results})
    suites.append({"name": suite.name, "tests": suite.tests, "failures": suite.failures,
                   "errors": suite.errors, "cases": cases})
print(json.dumps({"tests": xml.tests, "failures": xml.failures, "errors": xml.errors,
                  "suites": suites}))
"#;

#[test]
fn junit_output_is_read_back_by_a_junit_parser() {
    let Some(python) = tool_or_skip(&PYTHON_JUNIT) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let broken = edited_example(
        dir.path(),
        "    expect:\n      decision: allow\n      allowed_by: RBAC RoleBinding/default/read-pods",
        "    expect:\n      decision: deny\n      allowed_by: RBAC RoleBinding/default/read-pods",
    );
    // A case name XML must escape, with a control character XML 1.0 cannot hold at all.
    let tricky_name = "quotes \" & <angle> 'apos' ]]> and an escape \u{1b} char";
    let tricky = dir.path().join("tricky.yaml");
    std::fs::write(
        &tricky,
        format!(
            "policy: {}\ncases:\n  - name: \"quotes \\\" & <angle> 'apos' ]]> and an escape \\e char\"\n    user: jane\n    resource: {{namespace: default, verb: get, resource: pods}}\n    expect: {{decision: no_opinion}}\n",
            repo().join("policy").display()
        ),
    )
    .unwrap();
    let not_loading = dir.path().join("typo.yaml");
    std::fs::write(&not_loading, "cases:\n  - name: a\n    usr: jane\n").unwrap();

    let out = test_cmd(&["-o", "junit"], &[&broken, &tricky, &not_loading]);
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    let xml_path = dir.path().join("report.xml");
    std::fs::write(&xml_path, &out.stdout).unwrap();

    let mut command = Command::new(&python);
    command.args(["-c", READ_JUNIT]).arg(&xml_path);
    let parsed = run_with_timeout(command, Duration::from_secs(60));
    assert!(
        parsed.status.success(),
        "junitparser could not read the report: {}\n{}",
        stderr(&parsed),
        stdout(&out)
    );
    let report: serde_json::Value = serde_json::from_slice(&parsed.stdout).unwrap();

    let total = example_case_names().len() as u64;
    assert_eq!(report["tests"], total + 2, "{report}");
    assert_eq!(report["failures"], 2, "{report}");
    assert_eq!(report["errors"], 1, "{report}");
    let suites = report["suites"].as_array().unwrap();
    assert_eq!(suites.len(), 3, "{report}");

    let example_suite = &suites[0];
    assert_eq!(example_suite["name"], broken.display().to_string());
    assert_eq!(example_suite["tests"], total);
    assert_eq!(example_suite["failures"], 1);
    let cases = example_suite["cases"].as_array().unwrap();
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, example_case_names());
    let failed: Vec<&serde_json::Value> = cases.iter().filter(|c| c["passed"] == false).collect();
    assert_eq!(failed.len(), 1, "{report}");
    assert_eq!(
        failed[0]["name"],
        "jane reads pods in default (RoleBinding read-pods)"
    );
    let failure = &failed[0]["results"][0];
    assert_eq!(failure["kind"], "Failure");
    assert_eq!(failure["message"], "decision: expected DENY, got ALLOW");
    assert!(
        failure["text"].as_str().unwrap().contains(
            "\nallowed by: RBAC RoleBinding/default/read-pods -> Role/default/pod-reader rule 0 ("
        ),
        "{failure}"
    );

    // The special characters come back as written; the control character as `\u{1b}`.
    let tricky_case = &suites[1]["cases"][0];
    assert_eq!(
        tricky_case["name"],
        tricky_name.replace('\u{1b}', "\\u{1b}"),
        "{report}"
    );
    assert_eq!(tricky_case["passed"], false);
    assert_eq!(
        tricky_case["results"][0]["message"],
        "decision: expected NO_OPINION, got ALLOW"
    );

    let load_suite = &suites[2];
    assert_eq!(load_suite["errors"], 1, "{report}");
    let error = &load_suite["cases"][0]["results"][0];
    assert_eq!(error["kind"], "Error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{}:3: unknown field `usr`", not_loading.display())),
        "{error}"
    );
}
