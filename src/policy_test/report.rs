//! The outcome of a run, written for a person ([`text`]) or for a CI system ([`junit`]).

use std::fmt::Write;

use super::run::FileOutcome;

/// Counts over a whole run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub files: usize,
    pub cases: usize,
    pub failed: usize,
    /// Files that did not load (or whose policy did not), so none of their cases ran.
    pub not_loaded: usize,
}

impl Totals {
    pub fn of(outcomes: &[FileOutcome]) -> Self {
        let mut totals = Totals {
            files: outcomes.len(),
            ..Totals::default()
        };
        for outcome in outcomes {
            match &outcome.result {
                Ok(cases) => {
                    totals.cases += cases.len();
                    totals.failed += outcome.failed_cases();
                }
                Err(_) => totals.not_loaded += 1,
            }
        }
        totals
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// ```text
/// PASS  tests/policy.yaml:12  jane reads pods in default
/// FAIL  tests/policy.yaml:20  dave reads secrets everywhere
///         decision: expected ALLOW, got NO_OPINION
///         | got decision: NO_OPINION
///         | reason: -
///         ...
/// ERROR tests/broken.yaml: did not load (2 problems; on stderr)
///
/// FAILED: 1 of 2 cases failed; 1 file did not load (2 files)
/// ```
pub fn text(outcomes: &[FileOutcome]) -> String {
    let mut out = String::new();
    for outcome in outcomes {
        match &outcome.result {
            Ok(cases) => {
                for case in cases {
                    let verdict = if case.passed() { "PASS " } else { "FAIL " };
                    let _ = writeln!(
                        out,
                        "{verdict} {}:{}  {}",
                        outcome.path,
                        case.line,
                        one_line(&case.name)
                    );
                    for problem in &case.problems {
                        let _ = writeln!(out, "        {}", one_line(problem));
                    }
                    for line in &case.answer {
                        let _ = writeln!(out, "        | {}", one_line(line));
                    }
                }
            }
            Err(errors) => {
                let _ = writeln!(
                    out,
                    "ERROR {}: did not load ({}; on stderr)",
                    outcome.path,
                    plural(errors.len(), "problem", "problems")
                );
            }
        }
    }
    let totals = Totals::of(outcomes);
    let files = plural(totals.files, "file", "files");
    let _ = writeln!(out);
    if totals.failed == 0 && totals.not_loaded == 0 {
        let _ = writeln!(
            out,
            "ok: {} passed ({files})",
            plural(totals.cases, "case", "cases")
        );
    } else {
        let mut parts = Vec::new();
        if totals.failed > 0 {
            parts.push(format!(
                "{} of {} failed",
                totals.failed,
                plural(totals.cases, "case", "cases")
            ));
        } else {
            parts.push(format!("{} passed", plural(totals.cases, "case", "cases")));
        }
        if totals.not_loaded > 0 {
            parts.push(format!(
                "{} did not load",
                plural(totals.not_loaded, "file", "files")
            ));
        }
        let _ = writeln!(out, "FAILED: {} ({files})", parts.join("; "));
    }
    out
}

/// A name or message on one line of the report (a YAML block scalar may hold newlines).
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// JUnit XML as Jenkins, GitLab and GitHub's test reporters read it: one `testsuite` per
/// file, one `testcase` per case (`classname` the file, `file` and `line` where the case is),
/// a `failure` per failed case whose message is its first problem and whose text is the whole
/// explanation; a file that did not load is a suite with one `error`.
pub fn junit(outcomes: &[FileOutcome]) -> String {
    let totals = Totals::of(outcomes);
    let total_time: f64 = outcomes.iter().map(|o| o.elapsed.as_secs_f64()).sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"authzd test\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{total_time:.6}\">",
        totals.cases + totals.not_loaded,
        totals.failed,
        totals.not_loaded
    );
    for outcome in outcomes {
        let path = attribute(&outcome.path);
        let time = outcome.elapsed.as_secs_f64();
        match &outcome.result {
            Ok(cases) => {
                let _ = writeln!(
                    out,
                    "  <testsuite name=\"{path}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" time=\"{time:.6}\">",
                    cases.len(),
                    outcome.failed_cases()
                );
                for case in cases {
                    let _ = write!(
                        out,
                        "    <testcase name=\"{}\" classname=\"{path}\" file=\"{path}\" line=\"{}\" time=\"{:.6}\"",
                        attribute(&case.name),
                        case.line,
                        case.elapsed.as_secs_f64()
                    );
                    if case.passed() {
                        out.push_str("/>\n");
                        continue;
                    }
                    let message = case.problems.first().map(String::as_str).unwrap_or("");
                    let mut body = case.problems.join("\n");
                    for line in &case.answer {
                        body.push('\n');
                        body.push_str(line);
                    }
                    let _ = writeln!(
                        out,
                        ">\n      <failure message=\"{}\" type=\"expectation\">{}</failure>\n    </testcase>",
                        attribute(message),
                        element_text(&body)
                    );
                }
            }
            Err(errors) => {
                let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
                let message = lines.first().map(String::as_str).unwrap_or("");
                let _ = writeln!(
                    out,
                    "  <testsuite name=\"{path}\" tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\" time=\"{time:.6}\">"
                );
                let _ = writeln!(
                    out,
                    "    <testcase name=\"load\" classname=\"{path}\" file=\"{path}\" time=\"{time:.6}\">\n      <error message=\"{}\" type=\"load\">{}</error>\n    </testcase>",
                    attribute(message),
                    element_text(&lines.join("\n"))
                );
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

/// Text as XML 1.0 can hold it: a character XML 1.0 forbids (most control characters, and
/// the noncharacters U+FFFE and U+FFFF) is written `\u{..}` instead, since no escape can
/// carry it.
fn xml_chars(text: &str, mut each: impl FnMut(char, &mut String)) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let allowed =
            matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}');
        if allowed {
            each(c, &mut out);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
    out
}

/// An attribute value (between double quotes): newlines and tabs as character references, so
/// a parser's attribute normalization keeps them.
fn attribute(text: &str) -> String {
    xml_chars(text, |c, out| match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        '"' => out.push_str("&quot;"),
        '\'' => out.push_str("&apos;"),
        '\n' => out.push_str("&#10;"),
        '\r' => out.push_str("&#13;"),
        '\t' => out.push_str("&#9;"),
        c => out.push(c),
    })
}

/// Element content.
fn element_text(text: &str) -> String {
    xml_chars(text, |c, out| match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        // `\r` would be read back as `\n` (end-of-line normalization).
        '\r' => out.push_str("&#13;"),
        c => out.push(c),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::policy_test::{CaseOutcome, FileError};

    fn case(name: &str, problems: &[&str]) -> CaseOutcome {
        CaseOutcome {
            name: name.to_string(),
            line: 7,
            problems: problems.iter().map(|p| p.to_string()).collect(),
            answer: if problems.is_empty() {
                vec![]
            } else {
                vec!["got decision: DENY".to_string()]
            },
            elapsed: Duration::from_micros(3),
        }
    }

    fn outcomes() -> Vec<FileOutcome> {
        vec![
            FileOutcome {
                path: "a.yaml".into(),
                result: Ok(vec![
                    case("passes", &[]),
                    case("fails", &["decision: expected ALLOW, got DENY"]),
                ]),
                elapsed: Duration::from_millis(2),
            },
            FileOutcome {
                path: "b.yaml".into(),
                result: Err(vec![FileError {
                    file: "b.yaml".into(),
                    line: 3,
                    message: "unknown field `usr`".into(),
                }]),
                elapsed: Duration::from_millis(1),
            },
        ]
    }

    #[test]
    fn text_has_a_line_per_case_the_explanation_and_a_summary() {
        let report = text(&outcomes());
        assert_eq!(
            report,
            "PASS  a.yaml:7  passes\n\
             FAIL  a.yaml:7  fails\n        decision: expected ALLOW, got DENY\n        | got decision: DENY\n\
             ERROR b.yaml: did not load (1 problem; on stderr)\n\
             \nFAILED: 1 of 2 cases failed; 1 file did not load (2 files)\n"
        );
        let all_pass = vec![FileOutcome {
            path: "a.yaml".into(),
            result: Ok(vec![case("passes", &[])]),
            elapsed: Duration::ZERO,
        }];
        assert!(text(&all_pass).ends_with("\nok: 1 case passed (1 file)\n"));
    }

    #[test]
    fn junit_counts_and_escapes() {
        let mut outcomes = outcomes();
        if let Ok(cases) = &mut outcomes[0].result {
            cases[1].name = "a \"<tricky>\" & 'odd'\u{1b} name\n".to_string();
        }
        let xml = junit(&outcomes);
        assert!(
            xml.contains(r#"<testsuites name="authzd test" tests="3" failures="1" errors="1" "#)
        );
        assert!(xml.contains(
            r#"<testcase name="a &quot;&lt;tricky&gt;&quot; &amp; &apos;odd&apos;\u{1b} name&#10;""#
        ), "{xml}");
        assert!(xml.contains(
            "<failure message=\"decision: expected ALLOW, got DENY\" type=\"expectation\">decision: expected ALLOW, got DENY\ngot decision: DENY</failure>"
        ), "{xml}");
        assert!(
            xml.contains("<error message=\"b.yaml:3: unknown field `usr`\" type=\"load\">"),
            "{xml}"
        );
    }

    #[test]
    fn forbidden_characters_never_reach_the_xml() {
        assert_eq!(element_text("a\u{0}b\u{FFFF}<"), "a\\u{0}b\\u{ffff}&lt;");
        assert_eq!(attribute("\t\r"), "&#9;&#13;");
    }
}
