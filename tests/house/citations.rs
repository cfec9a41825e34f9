//! Citations a reader can open: comments and docs cite the specification by its path in the
//! repository (`docs/spec/SPEC.md §3`, `docs/spec/kubernetes-semantics.md §2`), and every
//! section they cite exists there.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every text file the project writes (code, tests, docs, manifests), not the specification
/// itself.
fn cited_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if !["target", ".git", "spec", "node_modules"].contains(&name.as_str())
                && !name.starts_with(".e2e")
            {
                cited_files(&path, out);
            }
        } else if [".rs", ".md", ".yaml", ".yml", ".sh", ".proto", ".toml"]
            .iter()
            .any(|ext| name.ends_with(ext))
        {
            out.push(path);
        }
    }
}

/// The section numbers of a Markdown document's `## N.` headings (`## 9b. ...` gives `9b`).
fn sections(document: &str) -> Vec<String> {
    document
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .filter_map(|title| title.split_once(". ").map(|(n, _)| n.to_string()))
        .collect()
}

/// Each `DOC §N` in `text`: the section cited, up to its first `.` (`§2.1` is item 1 of
/// section 2).
fn citations<'t>(text: &'t str, doc: &str) -> Vec<&'t str> {
    let marker = format!("{doc} §");
    text.match_indices(&marker)
        .map(|(at, _)| {
            let rest = &text[at + marker.len()..];
            let end = rest
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[test]
fn every_cited_section_exists() {
    let root = root();
    let mut files = Vec::new();
    for dir in [
        "src", "tests", "benches", "docs", "deploy", "scripts", "proto", "policy",
    ] {
        cited_files(&root.join(dir), &mut files);
    }
    for file in ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "build.rs"] {
        files.push(root.join(file));
    }
    let mut wrong = Vec::new();
    let mut cited = 0;
    for doc in ["SPEC.md", "kubernetes-semantics.md"] {
        let known = sections(&fs::read_to_string(root.join("docs/spec").join(doc)).unwrap());
        assert!(known.len() > 5, "docs/spec/{doc} has no numbered sections");
        for path in &files {
            let text = fs::read_to_string(path).unwrap();
            for section in citations(&text, &format!("docs/spec/{doc}")) {
                cited += 1;
                if !known.iter().any(|k| k == section) {
                    wrong.push(format!("{}: §{section} of {doc}", path.display()));
                }
            }
            // A bare citation names a file that is not where the reader looks.
            let bare = format!(" {doc} §");
            if text.contains(&bare) || text.contains(&format!("({doc} §")) {
                wrong.push(format!(
                    "{}: cites `{doc}` without its path",
                    path.display()
                ));
            }
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
    let text = "as docs/spec/SPEC.md §3 says, and docs/spec/SPEC.md §2.1; docs/spec/SPEC.md §9b.";
    assert_eq!(citations(text, "docs/spec/SPEC.md"), ["3", "2", "9b"]);
    assert_eq!(
        sections("# t\n## 1. One\n### x\n## 9b. Nine\n"),
        ["1", "9b"]
    );
}
