//! ChangeGates offline (docs/policy.md §8): `authzd diff --policy OLD --policy-new NEW` and
//! `authzd test --gate-against OLD --policy NEW` check NEW against OLD's ChangeGates through
//! the real binary: a broken rule is exit 1 naming the rule and its witness on stderr; a
//! change the gate allows passes (exit 0).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};

use crate::support::gate_writes::{binding, ADMINS, GATE, ROLES};

const BIN: &str = env!("CARGO_BIN_EXE_authzd");

const TESTS: &str = "\
cases:
  - name: the admins read secrets
    user: someone
    groups: [platform-admins]
    resource: {namespace: default, verb: get, resource: secrets}
    expect: {decision: allow}
";

/// A policy directory of `files` under `root/name`.
fn policy(root: &Path, name: &str, files: &[(&str, String)]) -> std::path::PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for (file, text) in files {
        std::fs::write(dir.join(file), text).unwrap();
    }
    dir
}

fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

#[test]
fn diff_and_test_check_a_candidate_against_the_gates_in_force() {
    let root = tempfile::tempdir().unwrap();
    let admins = |name: &str| binding(name, None, "admin", &[ADMINS]);
    let old = policy(
        root.path(),
        "old",
        &[
            ("roles.yaml", ROLES.to_string()),
            ("gate.yaml", GATE.to_string()),
            ("a.yaml", admins("admins-a")),
            ("b.yaml", admins("admins-b")),
        ],
    );
    // One admin binding gone: the group keeps its access. Both gone: it loses it.
    let one_gone = policy(
        root.path(),
        "one-gone",
        &[
            ("roles.yaml", ROLES.to_string()),
            ("gate.yaml", GATE.to_string()),
            ("b.yaml", admins("admins-b")),
        ],
    );
    let both_gone = policy(
        root.path(),
        "both-gone",
        &[
            ("roles.yaml", ROLES.to_string()),
            ("gate.yaml", GATE.to_string()),
        ],
    );
    let tests = root.path().join("tests.yaml");
    std::fs::write(&tests, TESTS).unwrap();

    let diff = |new: &Path| {
        run(&[
            "diff".as_ref(),
            "--policy".as_ref(),
            old.as_os_str(),
            "--policy-new".as_ref(),
            new.as_os_str(),
        ])
    };
    let passed = diff(&one_gone);
    assert_eq!(passed.status.code(), Some(0), "{passed:?}");
    let refused = diff(&both_gone);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("guard-rails") && stderr.contains("admins-keep-everything"),
        "{stderr}"
    );
    assert!(stderr.contains("platform-admins"), "the witness: {stderr}");

    let test = |new: &Path| {
        run(&[
            "test".as_ref(),
            "--gate-against".as_ref(),
            old.as_os_str(),
            "--policy".as_ref(),
            new.as_os_str(),
            tests.as_os_str(),
        ])
    };
    let passed = test(&one_gone);
    assert_eq!(passed.status.code(), Some(0), "{passed:?}");
    let refused = test(&both_gone);
    // The case fails too (the admins lost their reads), and so does the gate.
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("admins-keep-everything"), "{stderr}");
    // A candidate whose cases all pass still fails on the gate: the gate alone decides here.
    let mut loosened = TESTS.replace("decision: allow", "decision: no_opinion");
    loosened.push('\n');
    std::fs::write(&tests, loosened).unwrap();
    let gate_only = test(&both_gone);
    assert_eq!(gate_only.status.code(), Some(1), "{gate_only:?}");
    assert!(
        String::from_utf8_lossy(&gate_only.stdout).contains("PASS"),
        "{gate_only:?}"
    );
}
