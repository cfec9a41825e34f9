//! The one file that knows cel-rust (`cel`, pinned in Cargo.toml): parsing, the subset check,
//! the inputs as CEL values and evaluation.
//!
//! Inputs are CEL values that borrow from the decoded JSON (no string is copied), and only
//! the parts of `object` and `oldObject` the expression can reach are built: a chain of field
//! selections (`object.metadata.labels`) builds the maps on its way and the value at its end,
//! nothing beside them. What an expression reads is found once, at compile time.
//!
//! **Shortcuts.** A comparison whose operands are all content paths, string fields of
//! `request` or literals (`object.metadata.labels == oldObject.metadata.labels`,
//! `request.verb == 'update'`, `'g' in request.userInfo.groups`) is answered from the decoded
//! JSON and the request directly, without building CEL values: building two maps to compare
//! them allocates every key and value, and costs more than the rest of an evaluation. The
//! answer is CEL's by construction: scalars are compared by cel-rust's own `equals` (so `1 ==
//! 1.0` is what cel-rust says it is), lists and maps as cel-rust compares them. Where a path
//! does not reach a value (an absent field, a selection from null or from a list) CEL's own
//! evaluation of the original comparison runs, and raises its error.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU8, Ordering};
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
/// The environment an AuthZEN caller sends (its request's `context`, docs/authzen.md §2).
const CONTEXT: &str = "context";
const ROOTS: [&str; 5] = [OBJECT, OLD_OBJECT, REQUEST, CHANGED_PATHS, CONTEXT];

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
    context: Need,
    reads: Reads,
    /// The comparisons answered without CEL values, by their index in the names the
    /// expression now reads them by ([`DECIDED`], [`ANSWER`]).
    shortcuts: Vec<Shortcut>,
}

impl CelProgram {
    /// Parses and checks `text` on a thread of its own with a large stack: cel-rust's parser
    /// recurses per link of a chain (`a.b.c…`, `a[0][0]…`) before any depth limit applies,
    /// and a 4 KiB text can chain 2,000 of them. Only loading pays for the thread; what loads
    /// is at most [`MAX_TREE_DEPTH`] deep, which evaluation on any thread can afford.
    pub fn compile(text: &str) -> Result<CelProgram, String> {
        Self::compile_on_thread(text, true)
    }

    /// The same program with every comparison left to cel-rust: what the shortcuts are held
    /// to in tests.
    #[cfg(test)]
    pub fn compile_without_shortcuts(text: &str) -> Result<CelProgram, String> {
        Self::compile_on_thread(text, false)
    }

    /// How many comparisons are answered as shortcuts.
    #[cfg(test)]
    pub fn shortcut_count(&self) -> usize {
        self.shortcuts.len()
    }

    fn compile_on_thread(text: &str, with_shortcuts: bool) -> Result<CelProgram, String> {
        let text = text.to_string();
        std::thread::Builder::new()
            .name("cel-compile".into())
            .stack_size(PARSE_STACK)
            .spawn(move || Self::compile_here(&text, with_shortcuts))
            .map_err(|e| format!("cannot be compiled: no thread to parse it on ({e})"))?
            .join()
            .unwrap_or_else(|_| Err("could not be parsed (the CEL parser failed)".into()))
    }

    fn compile_here(text: &str, with_shortcuts: bool) -> Result<CelProgram, String> {
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
        // After the check: what the expression reads (and so what the fallbacks build) is
        // that of the text as written.
        let mut shortcuts = Vec::new();
        if with_shortcuts {
            rewrite_shortcuts(&mut expr, &mut shortcuts);
        }
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
            context: check.context.any(),
        };
        Ok(CelProgram {
            expr,
            object: check.object,
            old_object: check.old_object,
            request: check.request,
            context: check.context,
            reads,
            shortcuts,
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
            context: OnceLock::new(),
            answers: Default::default(),
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
    context: OnceLock<Box<dyn Val + 'a>>,
    /// Each shortcut's answer, found on its first use ([`Answer`]). Atomic only because a
    /// resolver must be `Sync`: one evaluation runs on one thread, and an answer found twice
    /// is the same answer.
    answers: [AtomicU8; MAX_SHORTCUTS],
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
            CONTEXT => self
                .context
                .get_or_init(|| object(&program.context, input.context)),
            CHANGED_PATHS => self.changed_paths.get_or_init(|| {
                Box::new(CelList::from(
                    input
                        .changed_paths
                        .iter()
                        .map(|p| string(p))
                        .collect::<Vec<_>>(),
                ))
            }),
            _ => return self.shortcut(variable),
        };
        Some(CowVal::Borrowed(&**value))
    }
}

static TRUE: CelBool = CelBool::TRUE;
static FALSE: CelBool = CelBool::FALSE;

impl Variables<'_> {
    /// [`DECIDED`] or [`ANSWER`] of a shortcut; `None` for any other name.
    fn shortcut<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        let (index, decided) = match variable.strip_prefix(DECIDED) {
            Some(index) => (index, true),
            None => (variable.strip_prefix(ANSWER)?, false),
        };
        let index: usize = index.parse().ok()?;
        let shortcut = self.program.shortcuts.get(index)?;
        let slot = self.answers.get(index)?;
        let answer = match slot.load(Ordering::Relaxed) {
            Answer::NOT_YET => {
                let answer = shortcut.answer(self.input);
                slot.store(Answer::encode(answer), Ordering::Relaxed);
                answer
            }
            known => Answer::decode(known),
        };
        // An undecided answer is never read: its name is only reached when `DECIDED` is true
        // (and a shortcut without content paths is always decided).
        let value = if decided { answer.is_some() } else { answer? };
        Some(CowVal::Borrowed(if value { &TRUE } else { &FALSE }))
    }
}

/// A shortcut's answer in one byte: not yet found, or what [`Shortcut::answer`] found.
struct Answer;

impl Answer {
    const NOT_YET: u8 = 0;
    const UNDECIDED: u8 = 1;
    const FALSE: u8 = 2;
    const TRUE: u8 = 3;

    fn encode(answer: Option<bool>) -> u8 {
        match answer {
            None => Answer::UNDECIDED,
            Some(false) => Answer::FALSE,
            Some(true) => Answer::TRUE,
        }
    }

    fn decode(byte: u8) -> Option<bool> {
        match byte {
            Answer::TRUE => Some(true),
            Answer::FALSE => Some(false),
            _ => None,
        }
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
    if let Some(scalar) = Scalar::of(value) {
        return scalar.boxed();
    }
    match value {
        Json::Array(items) => Box::new(CelList::from(
            items.iter().map(whole).collect::<Vec<Box<dyn Val>>>(),
        )),
        Json::Object(map) => Box::new(CelMap::from(
            map.iter()
                .map(|(k, v)| (CelMapKey::from(k.as_str()), whole(v)))
                .collect::<HashMap<_, _>>(),
        )),
        // Scalars are handled above.
        _ => Box::new(CelNull),
    }
}

/// A JSON scalar as the CEL value [`whole`] makes of it, on the stack.
enum Scalar<'a> {
    Null(CelNull),
    Bool(CelBool),
    Int(CelInt),
    UInt(CelUInt),
    Double(CelDouble),
    String(CelString<'a>),
}

impl<'a> Scalar<'a> {
    /// `None` for a list or a map.
    fn of(value: &'a Json) -> Option<Scalar<'a>> {
        Some(match value {
            Json::Null => Scalar::Null(CelNull),
            Json::Bool(b) => Scalar::Bool(CelBool::from(*b)),
            Json::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Scalar::Int(CelInt::from(i)),
                (None, Some(u)) => Scalar::UInt(CelUInt::from(u)),
                // serde_json numbers are finite: as_f64 is always Some here.
                _ => Scalar::Double(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
            },
            Json::String(s) => Scalar::String(CelString::from(s.as_str())),
            Json::Array(_) | Json::Object(_) => return None,
        })
    }

    fn as_val(&self) -> &(dyn Val + 'a) {
        match self {
            Scalar::Null(v) => v,
            Scalar::Bool(v) => v,
            Scalar::Int(v) => v,
            Scalar::UInt(v) => v,
            Scalar::Double(v) => v,
            Scalar::String(v) => v,
        }
    }

    fn boxed(self) -> Box<dyn Val + 'a> {
        match self {
            Scalar::Null(v) => Box::new(v),
            Scalar::Bool(v) => Box::new(v),
            Scalar::Int(v) => Box::new(v),
            Scalar::UInt(v) => Box::new(v),
            Scalar::Double(v) => Box::new(v),
            Scalar::String(v) => Box::new(v),
        }
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
    context: Need,
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
            CONTEXT => self.context.add(path),
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

/// How many comparisons of one expression are answered as shortcuts; the rest are left to
/// cel-rust (each evaluation keeps one answer per shortcut).
const MAX_SHORTCUTS: usize = 16;

/// `@authzd_decided_N`: whether shortcut N has an answer without CEL values.
const DECIDED: &str = "@authzd_decided_";
/// `@authzd_answer_N`: shortcut N's answer (read only when it is decided).
const ANSWER: &str = "@authzd_answer_";

/// A comparison answered from the JSON and the request (see the module's documentation).
#[derive(Debug)]
enum Shortcut {
    Equal(Operand, Operand),
    NotEqual(Operand, Operand),
    /// `operand in request.userInfo.groups`.
    InGroups(Operand),
}

/// One side of a shortcut comparison.
#[derive(Debug)]
enum Operand {
    /// `object` or `oldObject` (`old`), then a chain of field selections and literal keys.
    Content {
        old: bool,
        path: Vec<String>,
    },
    Request(RequestField),
    Literal(LiteralValue),
}

/// The string fields of `request` (every request has them all).
#[derive(Clone, Copy, Debug)]
enum RequestField {
    Verb,
    ApiGroup,
    ApiVersion,
    Resource,
    Subresource,
    Name,
    Namespace,
    Username,
}

impl RequestField {
    fn of(path: &[String]) -> Option<RequestField> {
        Some(match path {
            [field] => match field.as_str() {
                "verb" => RequestField::Verb,
                "apiGroup" => RequestField::ApiGroup,
                "apiVersion" => RequestField::ApiVersion,
                "resource" => RequestField::Resource,
                "subresource" => RequestField::Subresource,
                "name" => RequestField::Name,
                "namespace" => RequestField::Namespace,
                _ => return None,
            },
            [user, field] if user == "userInfo" && field == "username" => RequestField::Username,
            _ => return None,
        })
    }

    /// The field as [`request`] gives it to CEL.
    fn of_request<'a>(self, r: &RequestInput<'a>) -> &'a str {
        match self {
            RequestField::Verb => r.verb,
            RequestField::ApiGroup => r.api_group,
            RequestField::ApiVersion => r.api_version,
            RequestField::Resource => r.resource,
            RequestField::Subresource => r.subresource,
            RequestField::Name => r.name,
            RequestField::Namespace => r.namespace,
            RequestField::Username => r.username,
        }
    }
}

/// `null`: the value of an object the request does not carry.
static NULL_JSON: Json = Json::Null;

impl Operand {
    /// `e` as an operand: a literal, a content path without a presence test, or a string
    /// field of `request`.
    fn of(e: &IdedExpr) -> Option<Operand> {
        if let Expr::Literal(literal) = &e.expr {
            return Some(Operand::Literal(literal.clone()));
        }
        if matches!(&e.expr, Expr::Select(select) if select.test) {
            return None;
        }
        let (name, path) = chain(e)?;
        match name {
            OBJECT | OLD_OBJECT => Some(Operand::Content {
                old: name == OLD_OBJECT,
                path,
            }),
            REQUEST => RequestField::of(&path).map(Operand::Request),
            _ => None,
        }
    }

    fn is_content(&self) -> bool {
        matches!(self, Operand::Content { .. })
    }

    /// The operand's value; `None` when a content path does not reach one (CEL's evaluation
    /// of the path raises an error there).
    fn value<'a>(&'a self, input: &Input<'a>) -> Option<Side<'a>> {
        Some(match self {
            Operand::Literal(literal) => Side::Literal(literal),
            Operand::Request(field) => Side::String(field.of_request(&input.request)),
            Operand::Content { old, path } => {
                let root = if *old { input.old_object } else { input.object };
                let Some(mut value) = root else {
                    // An absent object is null, and selecting from null is an error.
                    return path.is_empty().then_some(Side::Json(&NULL_JSON));
                };
                for step in path {
                    value = field(value.as_object()?, step)?;
                }
                Side::Json(value)
            }
        })
    }
}

/// The widest map a field is looked up in by comparing keys rather than by hashing the name:
/// objects' own maps (`metadata`, a few labels) are small, and hashing a name costs more than
/// comparing it with a handful of keys.
const SCANNED_MAP: usize = 8;

/// `map`'s value at `key` (keys are unique: the first equal key is the only one).
fn field<'a>(map: &'a serde_json::Map<String, Json>, key: &str) -> Option<&'a Json> {
    if map.len() <= SCANNED_MAP {
        map.iter().find_map(|(k, v)| (k == key).then_some(v))
    } else {
        map.get(key)
    }
}

/// An operand's value for one evaluation.
enum Side<'a> {
    Json(&'a Json),
    String(&'a str),
    Literal(&'a LiteralValue),
}

impl Side<'_> {
    /// A scalar side as a CEL value (a JSON list or map is not one).
    fn scalar_with<R>(&self, f: impl FnOnce(Option<&dyn Val>) -> R) -> R {
        match self {
            Side::Json(json) => f(Scalar::of(json).as_ref().map(Scalar::as_val)),
            Side::String(s) => f(Some(&CelString::from(*s))),
            Side::Literal(literal) => f(Some(literal.to_val().as_ref())),
        }
    }
}

impl Shortcut {
    /// `e` as a shortcut: `a == b` or `a != b` between operands, not both literals, or
    /// `a in request.userInfo.groups`.
    fn of(e: &IdedExpr) -> Option<Shortcut> {
        let Expr::Call(call) = &e.expr else {
            return None;
        };
        let ([left, right], None) = (call.args.as_slice(), &call.target) else {
            return None;
        };
        let comparison = |left: &IdedExpr, right: &IdedExpr| {
            let (left, right) = (Operand::of(left)?, Operand::of(right)?);
            let literals =
                matches!(left, Operand::Literal(_)) && matches!(right, Operand::Literal(_));
            (!literals).then_some((left, right))
        };
        match call.func_name.as_str() {
            "_==_" => comparison(left, right).map(|(l, r)| Shortcut::Equal(l, r)),
            "_!=_" => comparison(left, right).map(|(l, r)| Shortcut::NotEqual(l, r)),
            "@in" => match chain(right)? {
                (REQUEST, path) if path == ["userInfo", "groups"] => {
                    Operand::of(left).map(Shortcut::InGroups)
                }
                _ => None,
            },
            _ => None,
        }
    }

    fn reads_content(&self) -> bool {
        match self {
            Shortcut::Equal(left, right) | Shortcut::NotEqual(left, right) => {
                left.is_content() || right.is_content()
            }
            Shortcut::InGroups(needle) => needle.is_content(),
        }
    }

    /// The comparison's value, as CEL would give it; `None` when CEL's evaluation must
    /// decide (it raises an error there).
    fn answer(&self, input: &Input<'_>) -> Option<bool> {
        Some(match self {
            Shortcut::Equal(left, right) => equals(&left.value(input)?, &right.value(input)?),
            Shortcut::NotEqual(left, right) => !equals(&left.value(input)?, &right.value(input)?),
            Shortcut::InGroups(needle) => needle.value(input)?.scalar_with(|needle| {
                // `in` on a list asks each element whether it equals the needle; no string
                // equals a list or a map.
                needle.is_some_and(|needle| {
                    input
                        .request
                        .groups
                        .iter()
                        .any(|group| CelString::from(*group).equals(needle))
                })
            }),
        })
    }
}

/// `left == right` as cel-rust answers it for the values [`whole`] and [`request`] build.
fn equals(left: &Side<'_>, right: &Side<'_>) -> bool {
    if let (Side::Json(left), Side::Json(right)) = (left, right) {
        return json_equals(left, right);
    }
    // A list or a map equals only a list or a map (cel-rust's lists and maps downcast the
    // other side; its scalars compare only with scalars), and only JSON holds either.
    left.scalar_with(|left| {
        right.scalar_with(|right| match (left, right) {
            (Some(left), Some(right)) => left.equals(right),
            _ => false,
        })
    })
}

/// `left == right` between two JSON values, as cel-rust compares the values [`whole`] makes of
/// them: lists element by element, maps by size and then each of the left's keys looked up in
/// the right, scalars by cel-rust's own `equals` (which compares numbers across int, uint and
/// double).
fn json_equals(left: &Json, right: &Json) -> bool {
    match (left, right) {
        (Json::Object(left), Json::Object(right)) => {
            // Keys are unique, so where the right's key in the same position is the left's,
            // its value is the one a lookup finds: maps written in the same order (an update
            // keeps its object's order) are compared without hashing a key.
            left.len() == right.len()
                && left
                    .iter()
                    .zip(right)
                    .all(|((key, value), (right_key, at))| {
                        let right_value = if key == right_key {
                            Some(at)
                        } else {
                            field(right, key)
                        };
                        right_value.is_some_and(|r| json_equals(value, r))
                    })
        }
        (Json::Array(left), Json::Array(right)) => {
            left.len() == right.len() && left.iter().zip(right).all(|(l, r)| json_equals(l, r))
        }
        _ => match (Scalar::of(left), Scalar::of(right)) {
            (Some(left), Some(right)) => left.as_val().equals(right.as_val()),
            // A list and a map, or either and a scalar.
            _ => false,
        },
    }
}

/// Every comparison of `e` that [`Shortcut::of`] accepts is read from the variables the
/// evaluation answers it with: `@authzd_answer_N` when it reads no content, and `@authzd_decided_N
/// ? @authzd_answer_N : (the comparison)` when it does, so that CEL evaluates it (and raises
/// its error) where a path does not reach a value.
fn rewrite_shortcuts(e: &mut IdedExpr, shortcuts: &mut Vec<Shortcut>) {
    if shortcuts.len() < MAX_SHORTCUTS {
        if let Some(shortcut) = Shortcut::of(e) {
            let index = shortcuts.len();
            let reads_content = shortcut.reads_content();
            shortcuts.push(shortcut);
            let ident = |prefix: &str| IdedExpr {
                id: e.id,
                expr: Expr::Ident(format!("{prefix}{index}")),
            };
            let answer = ident(ANSWER);
            e.expr = if reads_content {
                let decided = ident(DECIDED);
                let original = IdedExpr {
                    id: e.id,
                    expr: std::mem::take(&mut e.expr),
                };
                Expr::Call(cel::common::ast::CallExpr {
                    func_name: "_?_:_".to_string(),
                    target: None,
                    args: vec![decided, answer, original],
                })
            } else {
                answer.expr
            };
            return;
        }
    }
    match &mut e.expr {
        Expr::Call(call) => {
            if let Some(target) = &mut call.target {
                rewrite_shortcuts(target, shortcuts);
            }
            for arg in &mut call.args {
                rewrite_shortcuts(arg, shortcuts);
            }
        }
        Expr::Select(select) => rewrite_shortcuts(&mut select.operand, shortcuts),
        Expr::List(list) => {
            for element in &mut list.elements {
                rewrite_shortcuts(element, shortcuts);
            }
        }
        Expr::Map(map) => {
            for entry in &mut map.entries {
                if let EntryExpr::MapEntry(entry) = &mut entry.expr {
                    rewrite_shortcuts(&mut entry.key, shortcuts);
                    rewrite_shortcuts(&mut entry.value, shortcuts);
                }
            }
        }
        Expr::Comprehension(c) => {
            rewrite_shortcuts(&mut c.iter_range, shortcuts);
            rewrite_shortcuts(&mut c.loop_step, shortcuts);
        }
        Expr::Literal(_) | Expr::Ident(_) | Expr::Struct(_) | Expr::Unspecified => {}
    }
}
