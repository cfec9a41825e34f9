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
    ("policy and the Kubernetes objects", &["policy", "kube"]),
    ("engine", &["engine"]),
    (
        "cache, store and their instruments",
        &["cache", "store", "telemetry", "records", "webhook"],
    ),
    ("the serving core", &["serving"]),
    ("wire and transport", &["proto", "proto_codec", "transport"]),
    ("protocol adapters", &["api"]),
    ("the callers' library", &["caller"]),
    ("settings and synthetic policy", &["config", "synth"]),
    (
        "commands",
        &["client", "loadgen", "policy_test", "proxy", "replay"],
    ),
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
    let mut files = Vec::new();
    rust_files(&src.join("request"), &mut files);
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

/// The module path of a file of `src/` (`api/http/mod.rs` -> `api::http`, `serving.rs` ->
/// `serving`), `None` for the crate root and the binaries.
fn module_path(relative: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if parts
        .first()
        .is_some_and(|p| p == "lib" || p == "main" || p == "bin")
    {
        return None;
    }
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    Some(parts)
}

/// Every module path the code names: `crate::a::b::c` and `super::x::y` (resolved against
/// `module`), as long as the path goes, with `{a, b::c}` groups expanded one level.
fn named_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    fn segment(s: &str) -> &str {
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        &s[..end]
    }
    /// The path in `rest` after `base`, and the paths of a group that follows it.
    fn walk(mut base: Vec<String>, mut rest: &str, out: &mut Vec<Vec<String>>) {
        loop {
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                for item in group.split(',') {
                    walk(base.clone(), item.trim(), out);
                }
                return;
            }
            let name = segment(rest);
            if name.is_empty() || name == "self" {
                break;
            }
            rest = &rest[name.len()..];
            base.push(name.to_string());
            match rest.strip_prefix("::") {
                Some(more) => rest = more,
                None => break,
            }
        }
        out.push(base);
    }
    let mut named = Vec::new();
    for line in code.lines() {
        for (at, _) in line.match_indices("crate::") {
            walk(Vec::new(), &line[at + "crate::".len()..], &mut named);
        }
        for (at, _) in line.match_indices("super::") {
            // Only a path's first `super`, with every `super` that follows it.
            if line[..at].ends_with("super::") {
                continue;
            }
            let mut base: Vec<String> = module.to_vec();
            let mut rest = &line[at..];
            while let Some(more) = rest.strip_prefix("super::") {
                base.pop();
                rest = more;
            }
            walk(base, rest, &mut named);
        }
    }
    named
}

/// No circle between files: a file whose code names another (through `crate::` or `super::`,
/// in a `use` or inline) is never named back, directly or through others. A module and its
/// own submodules are one unit (a parent declares, re-exports and serves its children, who
/// use what it holds), so arrows between them are not counted; between any other two files
/// they are. Comments are not code here: a doc link to a neighbour explains, it does not
/// depend.
#[test]
fn no_file_imports_in_a_circle() {
    let src = src();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let modules: Vec<(PathBuf, Vec<String>)> = files
        .iter()
        .filter_map(|path| {
            let relative = path.strip_prefix(&src).unwrap();
            module_path(relative).map(|m| (relative.to_path_buf(), m))
        })
        .collect();
    let index_of = |path: &[String]| -> Option<usize> {
        // The longest prefix of the path that is a file's module.
        (1..=path.len())
            .rev()
            .find_map(|n| modules.iter().position(|(_, m)| m.as_slice() == &path[..n]))
    };
    let related = |a: &[String], b: &[String]| a.starts_with(b) || b.starts_with(a);
    let mut edges: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); modules.len()];
    for (from, (relative, module)) in modules.iter().enumerate() {
        let code: String = serving_code(&src.join(relative))
            .lines()
            .map(|line| line.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        for path in named_paths(&code, module) {
            if let Some(to) = index_of(&path) {
                if to != from && !related(module, &modules[to].1) {
                    edges[from].insert(to);
                }
            }
        }
    }
    // Tarjan's strongly connected components: any with two files or more is a circle.
    struct Tarjan<'e> {
        edges: &'e [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        circles: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in self.edges[v].clone().iter() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(i) if self.on_stack[w] => self.low[v] = self.low[v].min(i),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.circles.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        edges: &edges,
        index: vec![None; modules.len()],
        low: vec![0; modules.len()],
        on_stack: vec![false; modules.len()],
        stack: Vec::new(),
        next: 0,
        circles: Vec::new(),
    };
    for v in 0..modules.len() {
        if tarjan.index[v].is_none() {
            tarjan.visit(v);
        }
    }
    let circles: Vec<String> = tarjan
        .circles
        .iter()
        .map(|c| {
            c.iter()
                .map(|&i| modules[i].0.display().to_string())
                .collect::<Vec<_>>()
                .join(" <-> ")
        })
        .collect();
    assert!(
        modules.len() > 100 && edges.iter().map(BTreeSet::len).sum::<usize>() > 200,
        "the scan found too few files or arrows to be looking"
    );
    assert!(
        circles.is_empty(),
        "files in a circle:\n{}",
        circles.join("\n")
    );
}

/// The circle finder itself: paths resolve against the file's module, and `super::super`
/// climbs twice.
#[test]
fn named_paths_resolve_crate_and_super() {
    let module = vec!["api".to_string(), "http".to_string(), "reviews".to_string()];
    let named = named_paths(
        "use super::conditional::x;\nuse super::super::grpc::Review;\nuse crate::serving::{Call, call::Question};",
        &module,
    );
    let path = |parts: &[&str]| parts.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    assert_eq!(
        named,
        vec![
            path(&["api", "http", "conditional", "x"]),
            path(&["api", "grpc", "Review"]),
            path(&["serving", "Call"]),
            path(&["serving", "call", "Question"]),
        ]
    );
    assert_eq!(
        module_path(Path::new("api/http/mod.rs")),
        Some(vec!["api".to_string(), "http".to_string()])
    );
}
