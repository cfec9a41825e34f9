//! Running cases: each asked of the engine as `check` and `who-can` ask it, its answer held
//! to the case's expectations.
//!
//! Rule references (`allowed_by`, `denied_by`) are written as `check` prints them, with or
//! without the binding's source: `RBAC RoleBinding/NS/NAME -> Role/NS/NAME rule N` or
//! `RBAC ClusterRoleBinding/NAME -> ClusterRole/NAME rule N`, optionally followed by
//! `(file:line)`. For ABAC, super-users and AlwaysAllow the source is the identity —
//! `ABAC file.jsonl:LINE`, `SuperUser NAME`, `AlwaysAllow` — and the file may be named by any
//! trailing part of its path (`ABAC seed001-abac.jsonl:3` matches
//! `ABAC ../policy/seed001-abac.jsonl:3`), so a test file does not depend on where it is run
//! from. The lists are compared in order (the engine reports the first allowing and the first
//! denying rule).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::config::{
    default_modes, default_policy_path, EngineSettings, PolicySettings, TestSettings,
    DEFAULT_SUPER_GROUP,
};
use crate::engine::{AllowedSubjects, Engine, EngineConfig, Response, RuleRef};
use crate::policy::load::LoadErrors;

use super::file::{expand, load_file, Case, DecisionExpect, FileError, TestFile, WhoCanExpect};

/// What became of one case.
#[derive(Clone, Debug)]
pub struct CaseOutcome {
    pub name: String,
    pub line: u64,
    /// One line per expectation that did not hold; empty: the case passed.
    pub problems: Vec<String>,
    /// The engine's answer, when the case failed (to explain the failure).
    pub answer: Vec<String>,
    pub elapsed: Duration,
}

impl CaseOutcome {
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

/// What became of one test file: its cases, or why none ran.
#[derive(Clone, Debug)]
pub struct FileOutcome {
    pub path: String,
    pub result: Result<Vec<CaseOutcome>, Vec<FileError>>,
    /// Loading the file and its policy (when not already compiled for an earlier file) and
    /// running its cases.
    pub elapsed: Duration,
}

impl FileOutcome {
    pub fn failed_cases(&self) -> usize {
        match &self.result {
            Ok(cases) => cases.iter().filter(|c| !c.passed()).count(),
            Err(_) => 0,
        }
    }
}

/// Runs every test file `settings` names, compiling each distinct policy and chain once with
/// `compile` (the composition root's engine builder, the one `check` uses).
pub fn run_files(
    settings: &TestSettings,
    mut compile: impl FnMut(&EngineSettings) -> Result<Engine, LoadErrors>,
) -> Vec<FileOutcome> {
    let mut engines: Vec<(EngineSettings, Result<Engine, LoadErrors>)> = Vec::new();
    let mut outcomes = Vec::new();
    for path in expand(&settings.files) {
        let started = Instant::now();
        let path = match path {
            Ok(path) => path,
            Err(error) => {
                outcomes.push(FileOutcome {
                    path: error.file.clone(),
                    result: Err(vec![error]),
                    elapsed: started.elapsed(),
                });
                continue;
            }
        };
        let shown = path.display().to_string();
        let file = match load_file(&path) {
            Ok(file) => file,
            Err(errors) => {
                outcomes.push(FileOutcome {
                    path: shown,
                    result: Err(errors),
                    elapsed: started.elapsed(),
                });
                continue;
            }
        };
        let wanted = engine_settings(settings, &file);
        let known = engines.iter().position(|(s, _)| same_engine(s, &wanted));
        let index = match known {
            Some(index) => index,
            None => {
                let engine = compile(&wanted);
                engines.push((wanted, engine));
                engines.len() - 1
            }
        };
        let result = match &engines[index].1 {
            Ok(engine) => Ok(file
                .cases
                .iter()
                .map(|case| run_case(engine, case))
                .collect()),
            Err(errors) => Err(policy_errors(&shown, errors)),
        };
        outcomes.push(FileOutcome {
            path: shown,
            result,
            elapsed: started.elapsed(),
        });
    }
    outcomes
}

/// The engine a file is run against: each setting from the command line if given there, else
/// from the file, else `check`'s default.
pub fn engine_settings(settings: &TestSettings, file: &TestFile) -> EngineSettings {
    let paths = if !settings.policy.is_empty() {
        settings.policy.clone()
    } else {
        file.policy
            .clone()
            .unwrap_or_else(|| vec![default_policy_path()])
    };
    let pick = |flag: &Option<Vec<String>>, file: &Option<Vec<String>>, default: Vec<String>| {
        flag.clone().or_else(|| file.clone()).unwrap_or(default)
    };
    EngineSettings {
        policy: PolicySettings {
            paths,
            load: settings.load.clone(),
        },
        engine: EngineConfig {
            modes: settings
                .modes
                .clone()
                .or_else(|| file.modes.clone())
                .unwrap_or_else(default_modes),
            super_users: pick(&settings.super_users, &file.super_users, Vec::new()),
            super_groups: pick(
                &settings.super_groups,
                &file.super_groups,
                vec![DEFAULT_SUPER_GROUP.to_string()],
            )
            .into_iter()
            .filter(|g| !g.is_empty())
            .collect(),
        },
    }
}

/// Files that name the same policy and chain share one engine. `load` is the command line's,
/// the same for every file.
fn same_engine(a: &EngineSettings, b: &EngineSettings) -> bool {
    a.policy.paths == b.policy.paths && a.engine == b.engine
}

/// A policy that does not load, as problems of the test file that names it.
fn policy_errors(test_file: &str, errors: &LoadErrors) -> Vec<FileError> {
    errors
        .0
        .iter()
        .map(|e| FileError {
            file: e.file.clone(),
            line: u64::from(e.line),
            message: format!("{} (the policy of `{test_file}`)", e.message),
        })
        .collect()
}

/// Asks the engine one case: the decision as `authzd check` asks it (the answer folded over
/// the request's content), who can as `authzd who-can` asks it.
pub fn run_case(engine: &Engine, case: &Case) -> CaseOutcome {
    let started = Instant::now();
    let mut problems = Vec::new();
    let mut answer = Vec::new();
    if let Some(expect) = &case.expect.decision {
        match engine.authorize_content(case.request.with_content(case.content.as_ref())) {
            Ok(response) => {
                let before = problems.len();
                check_decision(expect, &response, &mut problems);
                if problems.len() > before {
                    explain_decision(&response, &mut answer);
                }
            }
            Err(refused) => problems.push(format!(
                "decision: the request's content was refused: {refused}"
            )),
        }
    }
    if let Some(expect) = &case.expect.who_can {
        match engine.allowed_subjects_content(&case.request.action, case.content.as_ref()) {
            Ok(subjects) => {
                let before = problems.len();
                check_who_can(expect, &subjects, &mut problems);
                if problems.len() > before {
                    explain_who_can(&subjects, &mut answer);
                }
            }
            Err(refused) => problems.push(format!(
                "who can: the request's content was refused: {refused}"
            )),
        }
    }
    CaseOutcome {
        name: case.name.clone(),
        line: case.line,
        problems,
        answer,
        elapsed: started.elapsed(),
    }
}

fn check_decision(expect: &DecisionExpect, got: &Response, problems: &mut Vec<String>) {
    if got.decision != expect.decision {
        problems.push(format!(
            "decision: expected {}, got {}",
            expect.decision, got.decision
        ));
    }
    for (key, expected, actual) in [
        ("allowed_by", &expect.allowed_by, &got.allowed_by),
        ("denied_by", &expect.denied_by, &got.denied_by),
    ] {
        let Some(expected) = expected else { continue };
        let holds = expected.len() == actual.len()
            && expected.iter().zip(actual).all(|(e, a)| ref_matches(e, a));
        if !holds {
            let actual: Vec<String> = actual.iter().map(short_ref).collect();
            problems.push(format!("{key}: expected {expected:?}, got {actual:?}"));
        }
    }
}

/// A rule reference as a test file writes it: `check`'s form without the binding's source.
pub fn short_ref(r: &RuleRef) -> String {
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

fn ref_matches(expected: &str, got: &RuleRef) -> bool {
    let expected = expected.trim();
    if got.binding.is_empty() {
        let Some(rest) = expected.strip_prefix(got.authorizer) else {
            return false;
        };
        let named = rest.trim_start();
        let source: &str = &got.source;
        // The source's file may be named by any trailing part of its path.
        return named == source
            || (!named.is_empty()
                && source
                    .strip_suffix(named)
                    .is_some_and(|head| head.ends_with('/')));
    }
    expected == short_ref(got) || expected == got.to_string()
}

fn check_who_can(expect: &WhoCanExpect, got: &AllowedSubjects, problems: &mut Vec<String>) {
    for (key, expected, actual) in [
        ("users", &expect.users, &got.users),
        ("groups", &expect.groups, &got.groups),
        ("denied_users", &expect.denied_users, &got.denied_users),
        ("denied_groups", &expect.denied_groups, &got.denied_groups),
    ] {
        let Some(expected) = expected else { continue };
        let expected: BTreeSet<&str> = expected.iter().map(String::as_str).collect();
        let actual: BTreeSet<&str> = actual.iter().map(String::as_str).collect();
        if expected != actual {
            let missing: Vec<&str> = expected.difference(&actual).copied().collect();
            let extra: Vec<&str> = actual.difference(&expected).copied().collect();
            let mut line = format!("{key}: expected exactly {expected:?}");
            if !missing.is_empty() {
                line.push_str(&format!(", missing {missing:?}"));
            }
            if !extra.is_empty() {
                line.push_str(&format!(", not expected {extra:?}"));
            }
            problems.push(line);
        }
    }
    for (key, expected, actual) in [
        ("users_including", &expect.users_including, &got.users),
        ("groups_including", &expect.groups_including, &got.groups),
    ] {
        let actual: BTreeSet<&str> = actual.iter().map(String::as_str).collect();
        let missing: Vec<&str> = expected
            .iter()
            .map(String::as_str)
            .filter(|name| !actual.contains(name))
            .collect();
        if !missing.is_empty() {
            problems.push(format!("{key}: missing {missing:?}"));
        }
    }
}

fn list(items: impl IntoIterator<Item = String>) -> String {
    let items: Vec<String> = items.into_iter().collect();
    if items.is_empty() {
        "-".to_string()
    } else {
        items.join(", ")
    }
}

/// `check`'s explanation, one line per field.
fn explain_decision(response: &Response, out: &mut Vec<String>) {
    let reason = if response.reason.is_empty() {
        "-"
    } else {
        &response.reason
    };
    out.push(format!("got decision: {}", response.decision));
    out.push(format!("reason: {reason}"));
    out.push(format!(
        "allowed by: {}",
        list(response.allowed_by.iter().map(ToString::to_string))
    ));
    out.push(format!(
        "denied by: {}",
        list(response.denied_by.iter().map(ToString::to_string))
    ));
    out.push(format!("errors: {}", list(response.errors.iter().cloned())));
}

/// `who-can`'s answer, one line per list.
fn explain_who_can(subjects: &AllowedSubjects, out: &mut Vec<String>) {
    for (label, items) in [
        ("who can: users", &subjects.users),
        ("groups", &subjects.groups),
        ("denied users", &subjects.denied_users),
        ("denied groups", &subjects.denied_groups),
        ("errors", &subjects.errors),
    ] {
        out.push(format!("{label}: {}", list(items.iter().cloned())));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn rule(authorizer: &'static str, binding: &str, role: &str, source: &str) -> RuleRef {
        RuleRef {
            authorizer,
            binding: Arc::from(binding),
            role: Arc::from(role),
            rule_index: 0,
            source: Arc::from(source),
        }
    }

    #[test]
    fn rule_references_match_with_or_without_their_source() {
        let rbac = rule(
            "RBAC",
            "RoleBinding/default/read-pods",
            "Role/default/pod-reader",
            "policy/seed001-rbac.yaml:26",
        );
        let short = "RBAC RoleBinding/default/read-pods -> Role/default/pod-reader rule 0";
        assert!(ref_matches(short, &rbac));
        assert!(ref_matches(
            &format!("{short} (policy/seed001-rbac.yaml:26)"),
            &rbac
        ));
        assert!(!ref_matches(&format!("{short} (elsewhere.yaml:26)"), &rbac));
        assert!(!ref_matches(
            "RBAC RoleBinding/default/read-pods -> Role/default/pod-reader rule 1",
            &rbac
        ));

        let abac = rule("ABAC", "", "", "../policy/seed001-abac.jsonl:3");
        assert!(ref_matches("ABAC seed001-abac.jsonl:3", &abac));
        assert!(ref_matches("ABAC policy/seed001-abac.jsonl:3", &abac));
        assert!(ref_matches("ABAC ../policy/seed001-abac.jsonl:3", &abac));
        assert!(
            !ref_matches("ABAC 001-abac.jsonl:3", &abac),
            "a whole file name"
        );
        assert!(!ref_matches("ABAC seed001-abac.jsonl:4", &abac));
        assert!(!ref_matches("ABAC", &abac));
        assert!(!ref_matches("RBAC seed001-abac.jsonl:3", &abac));
        assert!(ref_matches("AlwaysAllow", &rule("AlwaysAllow", "", "", "")));
    }

    #[test]
    fn who_can_lists_are_sets_and_including_names_what_is_missing() {
        let got = AllowedSubjects {
            users: vec!["ann".into(), "bob".into()],
            groups: vec!["system:masters".into()],
            ..Default::default()
        };
        let mut problems = Vec::new();
        let expect = WhoCanExpect {
            users: Some(vec!["bob".into(), "ann".into(), "ann".into()]),
            groups_including: vec!["system:masters".into()],
            ..Default::default()
        };
        check_who_can(&expect, &got, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");

        let expect = WhoCanExpect {
            users: Some(vec!["ann".into(), "cid".into()]),
            denied_users: Some(vec![]),
            users_including: vec!["dan".into(), "ann".into()],
            ..Default::default()
        };
        check_who_can(&expect, &got, &mut problems);
        assert_eq!(
            problems,
            [
                r#"users: expected exactly {"ann", "cid"}, missing ["cid"], not expected ["bob"]"#,
                r#"users_including: missing ["dan"]"#,
            ]
        );
    }
}
