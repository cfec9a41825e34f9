//! The floor plan, guarded: every module of `src/` stands on a floor, and names (`crate::x`)
//! only modules of the floors below it, so the import graph has no circle and no arrow that
//! runs back up. Kubernetes guards its imports the same way (`import-restrictions.yaml`).
//!
//! ```text
//! request  <-  policy  <-  engine  <-  cache / store  <-  serving  <-  api (adapters)  <-  app / cli
//! ```
//!
//! The table below is the one ARCHITECTURE.md shows. Unit-test code (a file's `#[cfg(test)]`
//! module, `tests.rs` files) may reach further, to build its fixtures; a comment's mention of
//! a module counts like an import, as `grep` would find it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The floors, lowest first. A module may name modules of lower floors only; two modules on
/// one floor never name each other.
const FLOORS: &[(&str, &[&str])] = &[
    ("the question", &["request", "counter"]),
    ("policy", &["policy"]),
    ("engine", &["engine"]),
    (
        "cache, store and their instruments",
        &["cache", "store", "telemetry", "audit", "webhook"],
    ),
    ("the serving core", &["serving"]),
    ("wire and transport", &["proto", "proto_codec", "transport"]),
    ("protocol adapters", &["api"]),
    ("settings and synthetic policy", &["config", "synth"]),
    ("commands", &["client", "loadgen", "policy_test"]),
    ("composition root", &["app"]),
];

fn floor_of(module: &str) -> Option<usize> {
    FLOORS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`src/api/http/mod.rs` -> `api`), or
/// `None` for the crate root and the binaries, which may name anything.
fn module_of(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "main.rs" | "bin" => None,
        file => Some(file.trim_end_matches(".rs").to_string()),
    }
}

/// The serving code of a file: everything before its unit-test module, none of a `tests.rs`.
fn serving_code(path: &Path) -> String {
    if path.file_name().is_some_and(|name| name == "tests.rs") {
        return String::new();
    }
    let text = fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// Every `crate::NAME` the code mentions, with the line it is on.
fn named_modules(code: &str) -> Vec<(usize, String)> {
    let mut named = Vec::new();
    for (number, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                named.push((number + 1, name));
            }
            rest = after;
        }
    }
    named
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_module_names_only_the_floors_below_it() {
    let src = src();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut wrong = Vec::new();
    let mut unplaced = BTreeSet::new();
    for path in &files {
        let relative = path.strip_prefix(&src).unwrap();
        let Some(module) = module_of(relative) else {
            continue;
        };
        let Some(floor) = floor_of(&module) else {
            unplaced.insert(module);
            continue;
        };
        for (line, named) in named_modules(&serving_code(path)) {
            if named == module {
                continue;
            }
            match floor_of(&named) {
                Some(below) if below < floor => {}
                Some(other) => wrong.push(format!(
                    "src/{}:{line}: `{module}` ({}) names `crate::{named}` ({}), which is not below it",
                    relative.display(),
                    FLOORS[floor].0,
                    FLOORS[other].0,
                )),
                None => {
                    unplaced.insert(named);
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules with no floor in tests/layering.rs (place them, and in ARCHITECTURE.md): {unplaced:?}"
    );
    assert!(
        wrong.is_empty(),
        "arrows that run up or sideways:\n{}",
        wrong.join("\n")
    );
}

/// The question and the policy stand on nothing above them: the issue's own check
/// (`grep -rn "crate::engine" src/policy` prints nothing), made for every higher module.
#[test]
fn the_question_and_the_policy_name_no_higher_module() {
    let src = src();
    let mut files = vec![src.join("request.rs")];
    rust_files(&src.join("policy"), &mut files);
    for path in files {
        // Tests included: not even a fixture of policy may reach up.
        let text = fs::read_to_string(&path).unwrap();
        for (line, named) in named_modules(&text) {
            assert!(
                named == "policy" || named == "request",
                "{}:{line} names `crate::{named}`",
                path.display()
            );
        }
    }
}

/// The Kubernetes and seed-003 readers share their rule checks through `load/rules.rs`;
/// neither names the other.
#[test]
fn the_loaders_do_not_import_each_other() {
    let load = src().join("policy/load");
    for (file, other) in [("kube.rs", "seed003"), ("seed003.rs", "kube")] {
        let text = fs::read_to_string(load.join(file)).unwrap();
        for pattern in [format!("super::{other}"), format!("load::{other}")] {
            assert!(
                !text.contains(&pattern),
                "policy/load/{file} names `{pattern}`"
            );
        }
    }
}

/// The guard itself: an arrow up is found, with its line.
#[test]
fn an_arrow_up_is_found() {
    let named = named_modules("use crate::request::Request;\n/// see [`crate::engine::Engine`]\n");
    assert_eq!(
        named,
        vec![(1, "request".to_string()), (2, "engine".to_string())]
    );
    assert!(floor_of("engine") > floor_of("policy"));
    assert_eq!(
        module_of(Path::new("api/http/mod.rs")).as_deref(),
        Some("api")
    );
    assert_eq!(module_of(Path::new("lib.rs")), None);
}
