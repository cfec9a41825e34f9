//! Citations a reader can open: code, tests and docs cite the project's documentation by its
//! path in the repository and a section number (`docs/security.md §2`, `docs/semantics.md §4`,
//! or with the path in backticks, `docs/api.md` §8), and every section they cite is a `## N.`
//! heading of that Markdown file under `docs/`. Nothing cites the copies of the specification
//! and of upstream documents the repository used to keep under `docs/` (see `forbidden`): the
//! repository holds only the project's own words, and upstream documents are cited by their
//! upstream location (docs/semantics.md §9).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where the removed copies lived, spelled out at run time so that this file does not cite it.
fn forbidden() -> String {
    format!("docs/{}/", "spec")
}

/// Every text file under `dir` the project writes (code, tests, docs, manifests, scripts).
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if !["target", ".git", "node_modules"].contains(&name.as_str())
                && !name.starts_with(".e2e")
            {
                text_files(&path, out);
            }
        } else if [
            ".rs", ".md", ".yaml", ".yml", ".sh", ".proto", ".toml", ".py",
        ]
        .iter()
        .any(|ext| name.ends_with(ext))
        {
            out.push(path);
        }
    }
}

/// The files whose citations are checked.
fn scanned_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in [
        "src", "tests", "benches", "docs", "deploy", "scripts", "proto", "policy",
    ] {
        text_files(&root.join(dir), &mut files);
    }
    for file in ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "build.rs"] {
        files.push(root.join(file));
    }
    files
}

/// The section numbers of a Markdown document's `## N.` headings (`## 9b. ...` gives `9b`).
fn sections(document: &str) -> Vec<String> {
    document
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .filter_map(|title| title.split_once(". ").map(|(n, _)| n.to_string()))
        .filter(|n| n.starts_with(|c: char| c.is_ascii_digit()))
        .filter(|n| n.chars().all(|c| c.is_ascii_alphanumeric()))
        .collect()
}

/// Every Markdown file under `docs/`, by its path from the repository root, with its sections.
fn documents(root: &Path) -> BTreeMap<String, Vec<String>> {
    let mut files = Vec::new();
    text_files(&root.join("docs"), &mut files);
    files
        .into_iter()
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| {
            let text = fs::read_to_string(&path).unwrap();
            let name = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (name, sections(&text))
        })
        .collect()
}

/// Each citation in `text` of a Markdown file under `docs/`, as (the file's path, the section
/// cited). The path may stand in backticks before the section sign. The section is cut at its
/// first character that is not a letter or a digit: `§2.1` is item 1 of section 2, cited as `2`.
fn citations(text: &str) -> Vec<(&str, &str)> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("docs/") {
        let rest = &text[at..];
        let Some(end) = rest.find(".md") else {
            continue;
        };
        let document = &rest[..end + 3];
        let name = &document["docs/".len()..end];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
        {
            continue;
        }
        let after = &rest[end + 3..];
        let after = after.strip_prefix('`').unwrap_or(after);
        let Some(section) = after.strip_prefix(" §") else {
            continue;
        };
        let len = section
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(section.len());
        found.push((document, &section[..len]));
    }
    found
}

/// How often `text` cites the page `document` (a path under `docs/`) by its file name alone,
/// without the path a reader opens it by. A name that is part of a longer path or word (the
/// page's own path, another file whose name ends the same way) is not such a citation.
fn bare_citations(text: &str, document: &str) -> usize {
    let name = document.strip_prefix("docs/").unwrap();
    [format!("{name} §"), format!("{name}` §")]
        .iter()
        .map(|form| {
            text.match_indices(form.as_str())
                .filter(|(at, _)| {
                    !text[..*at]
                        .ends_with(|c: char| c.is_ascii_alphanumeric() || "_-./".contains(c))
                })
                .count()
        })
        .sum()
}

#[test]
fn every_cited_section_exists() {
    let root = root();
    let documents = documents(&root);
    assert!(
        documents.len() >= 5,
        "only {} Markdown files under docs/: is the scan looking?",
        documents.len()
    );
    let forbidden = forbidden();
    assert!(
        !root.join(&forbidden).exists(),
        "{forbidden} is back: the repository keeps no copies of the specification or of \
         upstream documents; say it in docs/ in the project's own words, or cite the upstream \
         location"
    );
    let mut wrong = Vec::new();
    for (document, known) in &documents {
        if known.is_empty() {
            wrong.push(format!("{document}: no numbered `## N.` sections to cite"));
        }
    }
    let mut cited = 0;
    for path in scanned_files(&root) {
        let text = fs::read_to_string(&path).unwrap();
        let shown = path.strip_prefix(&root).unwrap().display().to_string();
        for (document, section) in citations(&text) {
            if document.starts_with(&forbidden) {
                continue; // reported once below
            }
            cited += 1;
            match documents.get(document) {
                None => wrong.push(format!(
                    "{shown}: cites {document}, which is not a Markdown file under docs/"
                )),
                Some(known) if !known.iter().any(|k| k == section) => {
                    wrong.push(format!("{shown}: {document} has no section §{section}"));
                }
                Some(_) => {}
            }
        }
        // A bare citation names a file that is not where the reader looks.
        for document in documents.keys() {
            if bare_citations(&text, document) > 0 {
                wrong.push(format!("{shown}: cites {document} without its path"));
            }
        }
        if text.contains(&forbidden) {
            wrong.push(format!(
                "{shown}: cites {forbidden}, which the repository no longer holds: cite the \
                 section of docs/ that says it, or the upstream location (docs/semantics.md §9)"
            ));
        }
    }
    assert!(
        cited > 20,
        "only {cited} citations found: is the scan looking?"
    );
    assert!(wrong.is_empty(), "citations to fix:\n{}", wrong.join("\n"));
}

#[test]
fn citations_are_read_as_sections() {
    // The last citation is assembled so that this file's own text does not cite it.
    let text = format!(
        "as docs/security.md §2 says, and docs/policy.md §4.1; `docs/{}.md` §9b. Not \
         docs/api.md#8-limits, nor docs/ alone.",
        "api"
    );
    assert_eq!(
        citations(&text),
        [
            ("docs/security.md", "2"),
            ("docs/policy.md", "4"),
            ("docs/api.md", "9b")
        ]
    );
    assert_eq!(
        sections("# t\n## 1. One\n### x\n## 9b. Nine\n## Notes. None\n"),
        ["1", "9b"]
    );
    let bare = format!("see {} §2, and docs/api.md §2", "api.md");
    assert_eq!(bare_citations(&bare, "docs/api.md"), 1);
    assert_eq!(
        bare_citations(
            "not the-semantics.md §2 of another file",
            "docs/semantics.md"
        ),
        0
    );
}
