//! The one file that knows cel-rust (`cel`, pinned in Cargo.toml): parsing, the subset check,
//! the inputs as CEL values and evaluation.
//!
//! Inputs are CEL values that borrow from the decoded JSON (no string is copied), and only
//! the parts of `object` and `oldObject` the expression can reach are built: a chain of field
//! selections (`object.metadata.labels`) builds the maps on its way and the value at its end,
//! nothing beside them. What an expression reads is found once, at compile time.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, OnceLock, RwLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::common::traits::Indexer;
use cel::common::types::{self, Type};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::ExecutionError;
use cel::{Context, Env};
use regex::{Regex, RegexBuilder};
use serde_json::Value as Json;

use super::{Input, Program, Reads, RequestInput, SUBSET};

/// The variables a condition may name.
const OBJECT: &str = "object";
const OLD_OBJECT: &str = "oldObject";
const REQUEST: &str = "request";
const CHANGED_PATHS: &str = "changedPaths";
const ROOTS: [&str; 4] = [OBJECT, OLD_OBJECT, REQUEST, CHANGED_PATHS];

/// How deep the parser may nest (cel-rust's default is 96).
const MAX_DEPTH: u16 = 32;

/// The stack a condition is parsed on (reserved, not committed: only what the parser uses
/// is touched).
const PARSE_STACK: usize = 256 << 20;

/// How deep brackets and `?:` may nest in a condition's text.
const MAX_NESTING: usize = 24;

/// How deep an expression tree may be (a chain of `&&` is as deep as it is long): evaluation
/// recurses per level, on a serving thread's stack.
const MAX_TREE_DEPTH: usize = 64;

/// The deepest nesting of brackets in `text`, plus its `?` (each `?:` nests what follows),
/// outside string literals.
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest, mut conditionals) = (0usize, 0usize, 0usize);
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(_), '\\') => {
                chars.next();
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(' | '[' | '{') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (None, ')' | ']' | '}') => depth = depth.saturating_sub(1),
            (None, '?') => conditionals += 1,
            (None, _) => {}
        }
    }
    deepest + conditionals
}

/// The largest compiled regular expression a `matches` pattern may make.
const MAX_REGEX_BYTES: usize = 1 << 20;

/// The standard environment plus [`MATCHES`], built once: every evaluation's context refers
/// to it.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    if let Err(e) = cel::add_member_overload!(env, fn matches_compiled: (CelString, CelString) -> Result<CelBool>, name = MATCHES)
    {
        // Cannot happen (the name is new); were it to, `matches()` would fail at evaluation,
        // which grants nothing.
        tracing::error!("CEL conditions: `matches()` is unavailable: {e}");
    }
    Arc::new(env)
});

/// The function `s.matches('p')` is compiled to: cel-rust's own compiles the pattern at
/// every call, which a macro over a long list would repeat per element.
const MATCHES: &str = "authzd.matches";

/// `matches()` patterns, compiled when their condition is.
static PATTERNS: LazyLock<RwLock<HashMap<String, Arc<Regex>>>> =
    LazyLock::new(|| RwLock::new(HashMap::new()));

fn pattern_regex(pattern: &str) -> Result<Arc<Regex>, String> {
    if let Some(regex) = PATTERNS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(pattern)
    {
        return Ok(Arc::clone(regex));
    }
    let regex = RegexBuilder::new(pattern)
        .size_limit(MAX_REGEX_BYTES)
        .build()
        .map_err(|e| format!("has a `matches()` pattern that does not compile: {e}"))?;
    let regex = Arc::new(regex);
    PATTERNS
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(pattern.to_string(), Arc::clone(&regex));
    Ok(regex)
}

fn matches_compiled(
    this: &CelString<'_>,
    pattern: &CelString<'_>,
) -> Result<CelBool, cel::ExecutionError> {
    let regex = pattern_regex(pattern.inner())
        .map_err(|e| cel::ExecutionError::function_error("matches", e))?;
    Ok(CelBool::from(regex.is_match(this.inner())))
}

/// The part of an object an expression can reach.
#[derive(Clone, Debug, Default, PartialEq)]
enum Need {
    /// Not read at all.
    #[default]
    Nothing,
    /// Only these fields (a map on the way to them).
    Fields(BTreeMap<String, Need>),
    /// All of it.
    Whole,
}

impl Need {
    fn add(&mut self, path: &[String]) {
        match (path.split_first(), &mut *self) {
            (_, Need::Whole) => {}
            (None, _) => *self = Need::Whole,
            (Some((first, rest)), Need::Fields(fields)) => {
                fields.entry(first.clone()).or_default().add(rest)
            }
            (Some((first, rest)), Need::Nothing) => {
                let mut fields = BTreeMap::new();
                let mut child = Need::Nothing;
                child.add(rest);
                fields.insert(first.clone(), child);
                *self = Need::Fields(fields);
            }
        }
    }

    fn any(&self) -> bool {
        *self != Need::Nothing
    }
}

#[derive(Debug)]
pub struct CelProgram {
    expr: IdedExpr,
    object: Need,
    old_object: Need,
    request: Need,
    reads: Reads,
}

impl CelProgram {
    /// Parses and checks `text` on a thread of its own with a large stack: cel-rust's parser
    /// recurses per link of a chain (`a.b.c…`, `a[0][0]…`) before any depth limit applies,
    /// and a 4 KiB text can chain 2,000 of them. Only loading pays for the thread; what loads
    /// is at most [`MAX_TREE_DEPTH`] deep, which evaluation on any thread can afford.
    pub fn compile(text: &str) -> Result<CelProgram, String> {
        let text = text.to_string();
        std::thread::Builder::new()
            .name("cel-compile".into())
            .stack_size(PARSE_STACK)
            .spawn(move || Self::compile_here(&text))
            .map_err(|e| format!("cannot be compiled: no thread to parse it on ({e})"))?
            .join()
            .unwrap_or_else(|_| Err("could not be parsed (the CEL parser failed)".into()))
    }

    fn compile_here(text: &str) -> Result<CelProgram, String> {
        // The parser also recurses per level of nesting: a deeply nested text is refused
        // before it is parsed.
        let nesting = nesting(text);
        if nesting > MAX_NESTING {
            return Err(format!(
                "nests {nesting} levels deep (brackets and `?:`); a condition may nest at most {MAX_NESTING}"
            ));
        }
        let expr = ENV
            .parser()
            .max_recursion_depth(MAX_DEPTH)
            .parse(text)
            .map_err(|errors| {
                let message = errors.to_string();
                format!("does not parse: {}", message.trim())
            })?;
        let mut expr = expr;
        let mut check = Check::default();
        check.expr(&expr, false)?;
        compiled_matches(&mut expr);
        let selectors = match &check.request {
            Need::Nothing => false,
            Need::Whole => true,
            Need::Fields(fields) => {
                fields.contains_key("fieldSelector") || fields.contains_key("labelSelector")
            }
        };
        let reads = Reads {
            object: check.object.any(),
            old_object: check.old_object.any(),
            changed_paths: check.changed_paths,
            request: check.request.any(),
            selectors,
        };
        Ok(CelProgram {
            expr,
            object: check.object,
            old_object: check.old_object,
            request: check.request,
            reads,
        })
    }
}

impl Program for CelProgram {
    fn evaluate(&self, input: &Input<'_>) -> Result<bool, String> {
        let variables = Variables {
            program: self,
            input,
            object: OnceLock::new(),
            old_object: OnceLock::new(),
            request: OnceLock::new(),
            changed_paths: OnceLock::new(),
        };
        let mut context = Context::with_env(Arc::clone(&ENV));
        context.set_variable_resolver(&variables);
        match cel::Value::resolve(&self.expr, &context) {
            Ok(cel::Value::Bool(value)) => Ok(value),
            Ok(other) => Err(format!(
                "the condition evaluated to a {}, not a bool",
                other.type_of()
            )),
            Err(error) => Err(error.to_string()),
        }
    }

    fn reads(&self) -> Reads {
        self.reads
    }
}

/// The variables of one evaluation, each built on its first use (`a || b` may never read
/// `b`'s), and only as far as the expression reaches into it.
struct Variables<'a> {
    program: &'a CelProgram,
    input: &'a Input<'a>,
    object: OnceLock<Box<dyn Val + 'a>>,
    old_object: OnceLock<Box<dyn Val + 'a>>,
    request: OnceLock<Box<dyn Val + 'a>>,
    changed_paths: OnceLock<Box<dyn Val + 'a>>,
}

impl VariableResolver for Variables<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        let (program, input) = (self.program, self.input);
        let value = match variable {
            OBJECT => self
                .object
                .get_or_init(|| object(&program.object, input.object)),
            OLD_OBJECT => self
                .old_object
                .get_or_init(|| object(&program.old_object, input.old_object)),
            REQUEST => self
                .request
                .get_or_init(|| request(&input.request, &program.request)),
            CHANGED_PATHS => self.changed_paths.get_or_init(|| {
                Box::new(CelList::from(
                    input
                        .changed_paths
                        .iter()
                        .map(|p| string(p))
                        .collect::<Vec<_>>(),
                ))
            }),
            _ => return None,
        };
        Some(CowVal::Borrowed(&**value))
    }
}

/// An object variable: null when the request does not carry it.
fn object<'a>(need: &'a Need, value: Option<&'a Json>) -> Box<dyn Val + 'a> {
    match (need, value) {
        (_, None) => Box::new(CelNull),
        (Need::Fields(fields), Some(Json::Object(map))) => Box::new(PathMap { map, fields }),
        (_, Some(value)) => whole(value),
    }
}

/// A JSON object on the way to the paths an expression reads: by the compile-time analysis
/// ([`Need::Fields`]), it is only ever selected from (`.f`, `['f']`, `has()`), never compared,
/// iterated or sized, so it is a view that builds nothing until a selection reaches a value
/// the expression uses whole. What a selection answers is what the same selection on the
/// whole object, built as CEL values, answers.
#[derive(Debug)]
struct PathMap<'a> {
    map: &'a serde_json::Map<String, Json>,
    fields: &'a BTreeMap<String, Need>,
}

impl Val for PathMap<'_> {
    fn get_type(&self) -> &Type {
        &types::MAP_TYPE
    }

    fn cel_type() -> &'static Type
    where
        Self: Sized,
    {
        &types::MAP_TYPE
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(PathMap {
            map: self.map,
            fields: self.fields,
        })
    }
}

impl<'a> Indexer for PathMap<'a> {
    fn get<'b, 'v>(&'b self, key: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let Some(name) = key.downcast_ref::<CelString>() else {
            return Err(ExecutionError::UnexpectedType {
                got: key.get_type().name().to_owned(),
                want: "map key".to_owned(),
            });
        };
        let name: &str = name.inner();
        match self.map.get(name) {
            None => Err(ExecutionError::NoSuchKey(Arc::new(name.to_string()))),
            Some(value) => {
                let need = self.fields.get(name).unwrap_or(&Need::Whole);
                Ok(CowVal::Owned(object(need, Some(value))))
            }
        }
    }

    fn steal<'v>(self: Box<Self>, key: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(key).map(CowVal::into_owned)
    }
}

/// All of `value` as a CEL value borrowing its strings.
fn whole(value: &Json) -> Box<dyn Val + '_> {
    match value {
        Json::Null => Box::new(CelNull),
        Json::Bool(b) => Box::new(CelBool::from(*b)),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Box::new(CelInt::from(i)),
            (None, Some(u)) => Box::new(CelUInt::from(u)),
            // serde_json numbers are finite: as_f64 is always Some here.
            _ => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        Json::String(s) => Box::new(CelString::from(s.as_str())),
        Json::Array(items) => Box::new(CelList::from(
            items.iter().map(whole).collect::<Vec<Box<dyn Val>>>(),
        )),
        Json::Object(map) => Box::new(CelMap::from(
            map.iter()
                .map(|(k, v)| (CelMapKey::from(k.as_str()), whole(v)))
                .collect::<HashMap<_, _>>(),
        )),
    }
}

fn string(s: &str) -> Box<dyn Val + '_> {
    Box::new(CelString::from(s))
}

fn map<'a>(entries: impl IntoIterator<Item = (&'a str, Box<dyn Val + 'a>)>) -> Box<dyn Val + 'a> {
    Box::new(CelMap::from(
        entries
            .into_iter()
            .map(|(k, v)| (CelMapKey::from(k), v))
            .collect::<HashMap<_, _>>(),
    ))
}

fn selectors(list: &[crate::request::SelectorRequirement]) -> Box<dyn Val + '_> {
    Box::new(CelList::from(
        list.iter()
            .map(|r| {
                map([
                    ("key", string(&r.key)),
                    ("operator", string(r.operator.as_str())),
                    (
                        "values",
                        Box::new(CelList::from(
                            r.values.iter().map(|v| string(v)).collect::<Vec<_>>(),
                        )) as Box<dyn Val>,
                    ),
                ])
            })
            .collect::<Vec<_>>(),
    ))
}

/// The fields of `request` a condition may read.
const REQUEST_FIELDS: [&str; 10] = [
    "verb",
    "apiGroup",
    "apiVersion",
    "resource",
    "subresource",
    "name",
    "namespace",
    "userInfo",
    "fieldSelector",
    "labelSelector",
];

/// A path into `request` names fields it has: anything else is refused at load rather than
/// failing every evaluation. `userInfo.uid` and `userInfo.extra` are not offered: no decision
/// reads them, so answers are not keyed on them.
fn request_path(path: &[String]) -> Result<(), String> {
    match path {
        [] => Ok(()),
        [field, ..] if !REQUEST_FIELDS.contains(&field.as_str()) => Err(format!(
            "reads `request.{field}`, which a request does not have ({})",
            REQUEST_FIELDS.join(", ")
        )),
        [user, field, ..] if user == "userInfo" && field != "username" && field != "groups" => {
            Err(format!(
                "reads `request.userInfo.{field}`; a condition may read `username` and `groups` (no answer is keyed on the rest)"
            ))
        }
        _ => Ok(()),
    }
}

/// `request`, as ValidatingAdmissionPolicy names its fields: only the fields `need` reaches.
fn request<'a>(r: &RequestInput<'a>, need: &Need) -> Box<dyn Val + 'a> {
    let wanted = |field: &str| match need {
        Need::Fields(fields) => fields.contains_key(field),
        _ => true,
    };
    let mut entries: Vec<(&'static str, Box<dyn Val + 'a>)> = Vec::new();
    for (field, value) in [
        ("verb", r.verb),
        ("apiGroup", r.api_group),
        ("apiVersion", r.api_version),
        ("resource", r.resource),
        ("subresource", r.subresource),
        ("name", r.name),
        ("namespace", r.namespace),
    ] {
        if wanted(field) {
            entries.push((field, string(value)));
        }
    }
    if wanted("userInfo") {
        let groups: Vec<Box<dyn Val + 'a>> = r.groups.iter().map(|g| string(g)).collect();
        entries.push((
            "userInfo",
            map([
                ("username", string(r.username)),
                ("groups", Box::new(CelList::from(groups)) as Box<dyn Val>),
            ]),
        ));
    }
    if wanted("fieldSelector") {
        entries.push(("fieldSelector", selectors(r.field_selector)));
    }
    if wanted("labelSelector") {
        entries.push(("labelSelector", selectors(r.label_selector)));
    }
    map(entries)
}

/// The subset check, and what the expression reads.
#[derive(Default)]
struct Check {
    object: Need,
    old_object: Need,
    request: Need,
    changed_paths: bool,
    /// The macro variable in scope (one level of comprehension at most).
    variable: Option<String>,
    /// How deep the walk is in the expression tree.
    depth: usize,
}

/// `name` as the user wrote it: `_+_` is `+`, `-_` is unary `-`.
fn spelled(name: &str) -> String {
    match name {
        "_[?_]" | "_?._" => "optional selection (`.?` and `[?]`)".into(),
        "-_" => "unary `-`".into(),
        _ if name.starts_with('_') || name.ends_with('_') => {
            format!("`{}`", name.trim_matches('_'))
        }
        _ => format!("`{name}()`"),
    }
}

fn outside(what: String) -> String {
    format!("uses {what}, which is outside the accepted subset ({SUBSET})")
}

impl Check {
    /// Checks `e`; `in_body`: inside a macro's body, where only the macro's variable,
    /// literals and `request` may be read (so the body's work does not grow with the object).
    fn expr(&mut self, e: &IdedExpr, in_body: bool) -> Result<(), String> {
        if self.depth >= MAX_TREE_DEPTH {
            return Err(self.too_deep());
        }
        self.depth += 1;
        let checked = self.node(e, in_body);
        self.depth -= 1;
        checked
    }

    fn node(&mut self, e: &IdedExpr, in_body: bool) -> Result<(), String> {
        match &e.expr {
            Expr::Literal(_) => Ok(()),
            Expr::Ident(name) => self.variable_path(name, &[], in_body),
            Expr::Select(select) => {
                // A chain of selections from a variable reads one path; `has(a.b)` reads `b`
                // of `a` (its presence).
                if let Some((name, path)) = chain(e) {
                    return self.chained(name, &path, in_body);
                }
                self.expr(&select.operand, in_body)
            }
            Expr::List(list) => {
                if !list.optional_indices.is_empty() {
                    return Err(outside("optional list elements".into()));
                }
                list.elements.iter().try_for_each(|x| self.expr(x, in_body))
            }
            Expr::Map(map) => map.entries.iter().try_for_each(|entry| match &entry.expr {
                EntryExpr::MapEntry(entry) if !entry.optional => {
                    self.expr(&entry.key, in_body)?;
                    self.expr(&entry.value, in_body)
                }
                _ => Err(outside("an optional map entry".into())),
            }),
            Expr::Struct(s) => Err(outside(format!(
                "a message literal (`{}{{…}}`)",
                s.type_name
            ))),
            Expr::Unspecified => Err("is not an expression".into()),
            Expr::Call(call) => {
                let name = call.func_name.as_str();
                let (target, arity) = (call.target.is_some(), call.args.len());
                let accepted = match name {
                    "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" | "@in" | "_&&_" | "_||_"
                    | "_[_]" => !target && arity == 2,
                    "!_" => !target && arity == 1,
                    "_?_:_" => !target && arity == 3,
                    "size" => (!target && arity == 1) || (target && arity == 0),
                    "startsWith" | "endsWith" | "contains" => target && arity == 1,
                    "matches" => {
                        if !(target && arity == 1) {
                            false
                        } else {
                            Self::pattern(&call.args[0])?;
                            true
                        }
                    }
                    _ => false,
                };
                if !accepted {
                    return Err(outside(if name == "matches" {
                        "`matches()` other than `s.matches('pattern')`".into()
                    } else {
                        spelled(name)
                    }));
                }
                // `a.b['k']`, a literal key: one more step of a path.
                if let Some((name, path)) = chain(e) {
                    return self.chained(name, &path, in_body);
                }
                if let Some(target) = &call.target {
                    self.expr(target, in_body)?;
                }
                call.args.iter().try_for_each(|x| self.expr(x, in_body))
            }
            Expr::Comprehension(c) => {
                if self.variable.is_some() {
                    return Err(outside(
                        "a macro inside a macro's body (one level of all/exists/exists_one/filter/map)"
                            .into(),
                    ));
                }
                if c.iter_var2.is_some() {
                    return Err(outside("a two-variable macro".into()));
                }
                if ROOTS.contains(&c.iter_var.as_str()) {
                    return Err(format!(
                        "names a macro variable `{}`, which is one of the condition's variables ({})",
                        c.iter_var,
                        ROOTS.join(", ")
                    ));
                }
                let parts = macro_body(c).ok_or_else(|| outside("an unknown macro".into()))?;
                self.expr(&c.iter_range, in_body)?;
                self.variable = Some(c.iter_var.clone());
                let checked = parts.into_iter().try_for_each(|x| self.expr(x, true));
                self.variable = None;
                checked
            }
        }
    }

    /// A variable read at `path`, as [`chain`] found it.
    fn chained(&mut self, name: &str, path: &[String], in_body: bool) -> Result<(), String> {
        // Evaluation recurses per step, as per any operation.
        if self.depth + path.len() > MAX_TREE_DEPTH {
            return Err(self.too_deep());
        }
        self.variable_path(name, path, in_body)
    }

    fn too_deep(&self) -> String {
        format!("is more than {MAX_TREE_DEPTH} operations deep (each selection, index and operator nests one)")
    }

    /// A variable read at `path` (`object.metadata.labels`: `object`, [metadata, labels]).
    fn variable_path(&mut self, name: &str, path: &[String], in_body: bool) -> Result<(), String> {
        if self.variable.as_deref() == Some(name) {
            return Ok(());
        }
        if in_body && name != REQUEST && ROOTS.contains(&name) {
            return Err(format!(
                "reads `{name}` inside a macro's body; the body may read only its own variable, literals and `request` (so its work does not grow with the object)"
            ));
        }
        match name {
            OBJECT => self.object.add(path),
            OLD_OBJECT => self.old_object.add(path),
            REQUEST => {
                request_path(path)?;
                self.request.add(path)
            }
            CHANGED_PATHS => self.changed_paths = true,
            _ => {
                return Err(format!(
                    "names `{name}`, which is not a variable of a condition ({})",
                    ROOTS.join(", ")
                ))
            }
        }
        Ok(())
    }

    /// `matches`' pattern: a string literal that compiles, within a size limit.
    fn pattern(arg: &IdedExpr) -> Result<(), String> {
        let Expr::Literal(LiteralValue::String(pattern)) = &arg.expr else {
            return Err(outside(
                "`matches()` with a pattern that is not a string literal".into(),
            ));
        };
        pattern_regex(pattern.as_ref()).map(|_| ())
    }
}

/// The variable and path `e` reads when it is a chain of field selections and literal string
/// indexes from a variable (`object.metadata.labels['app']`: `object`, [metadata, labels,
/// app]); the outermost step may be a presence test (`has()`). `None` for anything else.
fn chain(e: &IdedExpr) -> Option<(&str, Vec<String>)> {
    let mut path = Vec::new();
    let mut at = e;
    loop {
        match &at.expr {
            Expr::Select(select) if !select.test || std::ptr::eq(at, e) => {
                path.push(select.field.clone());
                at = &select.operand;
            }
            Expr::Call(call) if call.func_name == "_[_]" && call.target.is_none() => {
                let [operand, key] = call.args.as_slice() else {
                    return None;
                };
                let Expr::Literal(LiteralValue::String(key)) = &key.expr else {
                    return None;
                };
                let key: &str = key.as_ref();
                path.push(key.to_string());
                at = operand;
            }
            Expr::Ident(name) => {
                path.reverse();
                return Some((name.as_str(), path));
            }
            _ => return None,
        }
    }
}

/// Every `s.matches('p')` in `e` calls [`MATCHES`] instead (its pattern compiled once).
fn compiled_matches(e: &mut IdedExpr) {
    match &mut e.expr {
        Expr::Call(call) => {
            if call.func_name == "matches" && call.target.is_some() {
                call.func_name = MATCHES.to_string();
            }
            if let Some(target) = &mut call.target {
                compiled_matches(target);
            }
            call.args.iter_mut().for_each(compiled_matches);
        }
        Expr::Select(select) => compiled_matches(&mut select.operand),
        Expr::List(list) => list.elements.iter_mut().for_each(compiled_matches),
        Expr::Map(map) => {
            for entry in &mut map.entries {
                if let EntryExpr::MapEntry(entry) = &mut entry.expr {
                    compiled_matches(&mut entry.key);
                    compiled_matches(&mut entry.value);
                }
            }
        }
        Expr::Comprehension(c) => {
            compiled_matches(&mut c.iter_range);
            compiled_matches(&mut c.loop_step);
        }
        Expr::Literal(_) | Expr::Ident(_) | Expr::Struct(_) | Expr::Unspecified => {}
    }
}

/// The user's parts of a macro's expansion (its predicate, its transform), recognised by the
/// shapes cel-rust's standard macros expand to; `None` for any other comprehension.
fn macro_body<'e>(c: &'e cel::common::ast::ComprehensionExpr) -> Option<Vec<&'e IdedExpr>> {
    fn call<'e>(e: &'e IdedExpr, name: &str) -> Option<Vec<&'e IdedExpr>> {
        match &e.expr {
            Expr::Call(call) if call.func_name == name && call.target.is_none() => {
                Some(call.args.iter().collect())
            }
            _ => None,
        }
    }
    let is_result = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if *n == c.accu_var);
    let appended = |e: &'e IdedExpr| -> Option<&'e IdedExpr> {
        // `@result + [x]`
        match call(e, "_+_")?.as_slice() {
            [r, list] if is_result(r) => match &list.expr {
                Expr::List(l) if l.elements.len() == 1 => l.elements.first(),
                _ => None,
            },
            _ => None,
        }
    };
    match &c.accu_init.expr {
        // all: `@result && p`; exists: `@result || p`
        Expr::Literal(LiteralValue::Boolean(_)) => {
            let args = call(&c.loop_step, "_&&_").or_else(|| call(&c.loop_step, "_||_"))?;
            match args.as_slice() {
                [r, p] if is_result(r) => Some(vec![*p]),
                _ => None,
            }
        }
        // exists_one: `p ? @result + 1 : @result`
        Expr::Literal(LiteralValue::Int(_)) => match call(&c.loop_step, "_?_:_")?.as_slice() {
            [p, _, r] if is_result(r) => Some(vec![*p]),
            _ => None,
        },
        // map(x, f): `@result + [f]`; map(x, p, f) and filter(x, p): `p ? @result + [f] : @result`
        Expr::List(l) if l.elements.is_empty() => {
            if let Some(f) = appended(&c.loop_step) {
                return Some(vec![f]);
            }
            match call(&c.loop_step, "_?_:_")?.as_slice() {
                [p, then, r] if is_result(r) => Some(vec![*p, appended(then)?]),
                _ => None,
            }
        }
        _ => None,
    }
}
