//! `authzd diff` (docs/cli.md §6) on hand-written changes, through the real binary: each
//! directory of `tests/diff/` holds `old.yaml`, `new.yaml` and the delta expected, checked by
//! hand (a binding added; a subject removed from a group binding; a ClusterRole rule narrowed
//! with a negation; a deny rule added; an aggregated ClusterRole's label changed); the gates'
//! exit codes; JSON; witnesses replayed with `authzd check`; bad input; and the same delta
//! from `authzd apply --dry-run` against a running server, which changes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_authzd");

fn case(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/diff")
        .join(name)
}

fn diff(name: &str, extra: &[&str]) -> Output {
    let dir = case(name);
    Command::new(BIN)
        .arg("diff")
        .arg("--policy")
        .arg(dir.join("old.yaml"))
        .arg("--policy-new")
        .arg(dir.join("new.yaml"))
        .args(extra)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn hand_written_changes_give_the_exact_delta() {
    for name in ["add", "rm", "neg", "deny", "agg"] {
        let output = diff(name, &[]);
        assert_eq!(output.status.code(), Some(0), "{name}: {output:?}");
        let expected = std::fs::read_to_string(case(name).join("expected.txt")).unwrap();
        assert_eq!(stdout(&output), expected, "{name}");
    }
}

#[test]
fn the_reverse_change_reverses_the_delta() {
    let dir = case("add");
    let output = Command::new(BIN)
        .args(["diff", "--policy"])
        .arg(dir.join("new.yaml"))
        .arg("--policy-new")
        .arg(dir.join("old.yaml"))
        .output()
        .unwrap();
    let reversed = std::fs::read_to_string(dir.join("expected.txt"))
        .unwrap()
        .replace("  + ", "  - ");
    assert_eq!(stdout(&output), reversed);
}

#[test]
fn gates_fire_on_matching_subjects_only() {
    let fired = diff("add", &["--fail-on-gain", "system:serviceaccount:*"]);
    assert_eq!(fired.status.code(), Some(1), "{fired:?}");
    let stderr = String::from_utf8(fired.stderr).unwrap();
    assert!(
        stderr.contains(
            "--fail-on-gain system:serviceaccount:*: system:serviceaccount:ci:robot gains get"
        ),
        "{stderr}"
    );
    let quiet = diff(
        "add",
        &[
            "--fail-on-gain",
            "system:unauthenticated",
            "--fail-on-loss",
            "*",
        ],
    );
    assert_eq!(quiet.status.code(), Some(0), "{quiet:?}");
    let lost = diff("agg", &["--fail-on-loss", "ve?a"]);
    assert_eq!(lost.status.code(), Some(1), "{lost:?}");
    let unchanged = diff("deny", &["--fail-on-gain", "*"]);
    assert_eq!(unchanged.status.code(), Some(0), "{unchanged:?}");
}

#[test]
fn json_rows_name_scope_action_and_subjects() {
    let output = diff("add", &["-o", "json"]);
    assert_eq!(output.status.code(), Some(0));
    let value: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    let rows = value["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{value}");
    assert_eq!(rows[0]["scope"], serde_json::json!({"namespace": "prod"}));
    assert_eq!(rows[0]["action"]["verb"], "get");
    assert_eq!(rows[0]["action"]["resource"], "pods");
    assert_eq!(
        rows[0]["action"]["name"],
        serde_json::json!({"any": true, "except": []})
    );
    assert_eq!(
        rows[0]["gains"],
        serde_json::json!({"users": [], "groups": ["ops"],
                           "serviceAccounts": ["system:serviceaccount:ci:robot"]})
    );
    let neg = diff("neg", &["-o", "json"]);
    let value: serde_json::Value = serde_json::from_str(&stdout(&neg)).unwrap();
    assert_eq!(
        value["rows"][0]["scope"],
        serde_json::json!({"clusterWide": true, "exceptNamespaces": []}),
        "a cluster-wide change is one row"
    );
}

/// `authzd check` of `witness` against `policy`: allowed?
fn allowed(policy: &Path, witness: &serde_json::Value) -> bool {
    let action = &witness["action"];
    let mut command = Command::new(BIN);
    command
        .arg("check")
        .arg("--policy")
        .arg(policy)
        .args(["--user", witness["user"].as_str().unwrap()])
        .args(["--verb", action["verb"].as_str().unwrap()])
        .args(["--namespace", action["namespace"].as_str().unwrap()])
        .args(["--api-group", action["apiGroup"].as_str().unwrap()])
        .args(["--resource", action["resource"].as_str().unwrap()])
        .args(["--subresource", action["subresource"].as_str().unwrap()])
        .args(["--name", action["name"].as_str().unwrap()]);
    for group in witness["groups"].as_array().unwrap() {
        command.args(["--group", group.as_str().unwrap()]);
    }
    let output = command.output().unwrap();
    match output.status.code() {
        Some(0) => true,
        Some(1) => false,
        _ => panic!("check failed: {output:?}"),
    }
}

#[test]
fn every_witness_changes_as_its_row_says() {
    let mut replayed = 0;
    for name in ["add", "rm", "neg", "deny", "agg"] {
        let output = diff(name, &["-o", "json", "--witness"]);
        let value: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
        for row in value["rows"].as_array().unwrap() {
            let subjects = |key: &str| {
                ["users", "groups", "serviceAccounts"]
                    .iter()
                    .map(|k| row[key][k].as_array().unwrap().len())
                    .sum::<usize>()
            };
            let witnesses = row["witnesses"].as_array().unwrap();
            assert_eq!(
                witnesses.len(),
                subjects("gains") + subjects("losses"),
                "{row}"
            );
            for witness in witnesses {
                let gain = witness["gain"].as_bool().unwrap();
                let dir = case(name);
                assert_eq!(
                    allowed(&dir.join("old.yaml"), witness),
                    !gain,
                    "{name}: {witness}"
                );
                assert_eq!(
                    allowed(&dir.join("new.yaml"), witness),
                    gain,
                    "{name}: {witness}"
                );
                replayed += 1;
            }
        }
    }
    assert!(replayed >= 8, "{replayed} witnesses");
}

#[test]
fn bad_input_exits_2_and_says_why() {
    let output = Command::new(BIN)
        .args(["diff", "--policy", "/nonexistent/old.yaml", "--policy-new"])
        .arg(case("add").join("new.yaml"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    // A change the delta does not analyse is refused, saying what it is: a FieldPolicy that
    // protects a path (it changes every plain allow on writes).
    let field_policy = |spec: &str| {
        format!("apiVersion: authzd.io/v1alpha1\nkind: FieldPolicy\nmetadata: {{name: f}}\nspec: {spec}\n")
    };
    let dir = tempfile::tempdir().unwrap();
    let old_file = dir.path().join("old.yaml");
    let new_file = dir.path().join("new.yaml");
    std::fs::write(&old_file, field_policy("{}")).unwrap();
    std::fs::write(&new_file, field_policy("{protected: [\".data\"]}")).unwrap();
    let output = Command::new(BIN)
        .args(["diff", "--policy"])
        .arg(&old_file)
        .arg("--policy-new")
        .arg(&new_file)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("protect different paths"), "{stderr}");
}

/// Every file of `dir`, by name, with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        // The writer's lock (docs/policy.md §2), taken when the server started.
        .filter(|(name, _)| name != authzd::store::lock::LOCK_NAME)
        .collect();
    files.sort();
    files
}

/// `authzd apply --dry-run -f new.yaml` against a server serving `old.yaml` prints, after the
/// objects and the revision, exactly what `authzd diff` prints for the two (witnesses too),
/// then its traffic impact (tests/api/traffic_impact.rs holds it to a real server), and
/// leaves the server as it was: same revision, same answers, the policy directory byte for byte.
#[tokio::test]
async fn apply_dry_run_shows_the_delta_diff_shows_and_changes_nothing() {
    use crate::support::server::{run_bin, Server};
    use std::ffi::OsStr;
    let timeout = std::time::Duration::from_secs(60);
    for name in ["add", "rm", "neg", "deny", "agg"] {
        let policy = tempfile::tempdir().unwrap();
        std::fs::copy(case(name).join("old.yaml"), policy.path().join("old.yaml")).unwrap();
        let before = snapshot(policy.path());
        let server = Server::start_serving(policy.path(), &["--no-watch"]).await;
        let url = server.url();
        let new = case(name).join("new.yaml");
        let status = |server: &str| {
            let out = run_bin(
                &[OsStr::new("status"), "--server".as_ref(), server.as_ref()],
                timeout,
            );
            assert_eq!(out.status.code(), Some(0), "{out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        let revision_before = status(&url);
        for extra in [&[][..], &["--witness"][..]] {
            let mut args: Vec<&OsStr> = ["apply", "--dry-run", "-f"].map(OsStr::new).to_vec();
            args.push(new.as_os_str());
            args.extend(extra.iter().map(OsStr::new));
            args.extend([OsStr::new("--server"), OsStr::new(&url)]);
            let applied = run_bin(&args, timeout);
            assert_eq!(applied.status.code(), Some(0), "{name}: {applied:?}");
            let applied = stdout(&applied);
            let (report, delta) = applied
                .split_once("revision 1 (dry run)\n")
                .unwrap_or_else(|| panic!("{name}: no revision line in {applied}"));
            assert!(
                report.lines().all(|l| l.ends_with(" applied (dry run)")),
                "{name}: {report}"
            );
            // Then the traffic impact: nothing was asked of this server, so nothing is cached.
            let (delta, traffic) = delta
                .rsplit_once("traffic: ")
                .unwrap_or_else(|| panic!("{name}: no traffic line in {applied}"));
            assert_eq!(traffic, "0 of 0 cached requests would flip\n", "{name}");
            assert_eq!(delta, stdout(&diff(name, extra)), "{name} {extra:?}");
        }
        // The text above is the expected delta checked by hand (the first test).
        assert_ne!(
            std::fs::read_to_string(case(name).join("expected.txt")).unwrap(),
            "no access changes\n",
            "{name}"
        );
        assert_eq!(status(&url), revision_before, "{name}: the server moved");
        assert_eq!(
            snapshot(policy.path()),
            before,
            "{name}: the directory changed"
        );
    }
}

/// Copies the shipped `policy/` into `dir` (created), file by file.
fn shipped_policy_into(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let shipped = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("policy");
    for entry in std::fs::read_dir(shipped).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
}

fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// ABAC lines are compared by what they say. Two byte-identical copies of the
/// shipped policy in different directories are no change, for `diff` and for `test
/// --gate-against` under a ChangeGate (which fails closed on a change it cannot judge); so is
/// a copy whose ABAC lines moved to another file, in another order.
#[test]
fn copies_of_the_shipped_policy_are_no_change_wherever_they_are() {
    let root = tempfile::tempdir().unwrap();
    let (old, copy, moved) = (
        root.path().join("main/policy"),
        root.path().join("pr/deeper/policy"),
        root.path().join("moved"),
    );
    for dir in [&old, &copy, &moved] {
        shipped_policy_into(dir);
    }
    // `moved`: both ABAC files' lines in one file of another name, last line first.
    let mut lines = Vec::new();
    for name in ["seed001-abac.jsonl", "seed002-abac.jsonl"] {
        let text = std::fs::read_to_string(moved.join(name)).unwrap();
        lines.extend(text.lines().map(str::to_string));
        std::fs::remove_file(moved.join(name)).unwrap();
    }
    lines.reverse();
    std::fs::write(moved.join("all.jsonl"), lines.join("\n") + "\n").unwrap();

    for new in [&copy, &moved] {
        let output = run(&[
            "diff".as_ref(),
            "--policy".as_ref(),
            old.as_os_str(),
            "--policy-new".as_ref(),
            new.as_os_str(),
        ]);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        assert_eq!(stdout(&output), "no access changes\n");
    }

    // Under a ChangeGate in force, `test --gate-against` passes as its cases do (it exited 1,
    // the gate refusing an "ABAC change" it could not judge).
    let gate = crate::support::gate_writes::GATE;
    for dir in [&old, &copy] {
        std::fs::write(dir.join("gate.yaml"), gate).unwrap();
    }
    let tests = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/policy-test.yaml");
    let output = run(&[
        "test".as_ref(),
        "--gate-against".as_ref(),
        old.as_os_str(),
        "--policy".as_ref(),
        copy.as_os_str(),
        tests.as_os_str(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(stdout(&output).contains("cases passed"), "{output:?}");
    let output = run(&[
        "diff".as_ref(),
        "--policy".as_ref(),
        old.as_os_str(),
        "--policy-new".as_ref(),
        copy.as_os_str(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

/// A changed ABAC line gets its exact delta, as an RBAC object does: alice's line made
/// read-only loses her every other verb (unless another line still grants it); alice's line
/// given to bob moves it. Each witness replayed with `authzd check` changes as its row says.
#[test]
fn a_changed_abac_line_gets_its_exact_delta() {
    let root = tempfile::tempdir().unwrap();
    let old = root.path().join("old");
    shipped_policy_into(&old);
    let text = std::fs::read_to_string(old.join("seed001-abac.jsonl")).unwrap();
    // Line 3 is alice's line (every resource, every namespace).
    let line = text.lines().nth(2).unwrap();
    assert!(line.contains(r#""user": "alice""#), "{line}");
    let readonly = line.replace(r#""apiGroup": "*""#, r#""apiGroup": "*", "readonly": true"#);
    let bob = line.replace(r#""user": "alice""#, r#""user": "bob""#);
    // seed002's v0 line `{"user":"alice"}` grants alice everything too: her seed001 line
    // made read-only changes nothing, and the delta says so.
    let full = root.path().join("full");
    shipped_policy_into(&full);
    std::fs::write(
        full.join("seed001-abac.jsonl"),
        text.replace(line, &readonly),
    )
    .unwrap();
    let output = run(&[
        "diff".as_ref(),
        "--policy".as_ref(),
        old.as_os_str(),
        "--policy-new".as_ref(),
        full.as_os_str(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(stdout(&output), "no access changes\n");
    // Without seed002's lines, line 3 is alice's only grant.
    std::fs::remove_file(old.join("seed002-abac.jsonl")).unwrap();
    for (name, changed) in [("readonly", &readonly), ("bob", &bob)] {
        let new = root.path().join(name);
        shipped_policy_into(&new);
        std::fs::remove_file(new.join("seed002-abac.jsonl")).unwrap();
        std::fs::write(new.join("seed001-abac.jsonl"), text.replace(line, changed)).unwrap();
        let output = run(&[
            "diff".as_ref(),
            "--policy".as_ref(),
            old.as_os_str(),
            "--policy-new".as_ref(),
            new.as_os_str(),
        ]);
        assert_eq!(output.status.code(), Some(0), "{name}: {output:?}");
        let report = stdout(&output);
        let rows: Vec<&str> = report.lines().filter(|l| l.starts_with("  ")).collect();
        let (losses, gains): (Vec<&str>, Vec<&str>) =
            rows.iter().partition(|l| l.starts_with("  - "));
        assert!(!losses.is_empty(), "{name}: {report}");
        assert!(
            losses.iter().all(|l| l.ends_with(": user alice")),
            "{name}: only alice loses: {report}"
        );
        if name == "readonly" {
            assert!(gains.is_empty(), "{name}: nobody gains: {report}");
            // She keeps what a read-only line allows: no read verb is lost.
            for verb in ["get", "list", "watch"] {
                assert!(
                    !losses
                        .iter()
                        .any(|l| l.starts_with(&format!("  - {verb} "))),
                    "{name}: {report}"
                );
            }
        } else {
            assert!(!gains.is_empty(), "{name}: {report}");
            assert!(
                gains.iter().all(|l| l.ends_with(": user bob")),
                "{name}: only bob gains: {report}"
            );
        }
        let output = run(&[
            "diff".as_ref(),
            "--policy".as_ref(),
            old.as_os_str(),
            "--policy-new".as_ref(),
            new.as_os_str(),
            "-o".as_ref(),
            "json".as_ref(),
            "--witness".as_ref(),
        ]);
        let value: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
        let mut replayed = 0;
        for row in value["rows"].as_array().unwrap() {
            for witness in row["witnesses"].as_array().unwrap() {
                if witness["action"]["resource"].is_null() {
                    continue; // a non-resource witness; `allowed` asks resource requests
                }
                let gain = witness["gain"].as_bool().unwrap();
                assert_eq!(allowed(&old, witness), !gain, "{name}: {witness}");
                assert_eq!(allowed(&new, witness), gain, "{name}: {witness}");
                replayed += 1;
            }
        }
        assert!(replayed >= 1, "{name}: {value}");
    }
}
