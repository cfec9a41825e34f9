//! Golden cases for every accepted construct, and a refusal for every construct outside the
//! subset (docs/policy.md §6).

use serde_json::json;

use super::*;
use crate::request::SelectorOperator;

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-1",
            "namespace": "dev",
            "labels": {"app": "web", "tier": "frontend"},
            "annotations": {"owner": "alice"}
        },
        "spec": {
            "nodeName": "node-1",
            "replicas": 3,
            "containers": [
                {"name": "web", "image": "registry.example.com/web:1.2"},
                {"name": "log", "image": "registry.example.com/log:0.9"}
            ]
        }
    })
}

fn old_pod() -> Value {
    let mut old = pod();
    old["spec"]["replicas"] = json!(2);
    old
}

const GROUPS: &[&str] = &["dev", "system:authenticated"];

fn selector() -> Vec<SelectorRequirement> {
    vec![SelectorRequirement {
        key: "spec.nodeName".into(),
        operator: SelectorOperator::In,
        values: vec!["node-1".into()],
    }]
}

fn eval_with(text: &str, object: Option<&Value>, old: Option<&Value>) -> Result<bool, String> {
    let condition = Condition::compile(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    let fields = selector();
    let changed = vec![".spec.replicas".to_string()];
    condition.evaluate(&Input {
        object,
        old_object: old,
        request: RequestInput {
            verb: "update",
            api_group: "",
            api_version: "v1",
            resource: "pods",
            subresource: "",
            name: "web-1",
            namespace: "dev",
            username: "alice",
            groups: GROUPS,
            field_selector: &fields,
            label_selector: &[],
        },
        changed_paths: &changed,
        context: None,
    })
}

/// `context` reads the AuthZEN request's environment: null (so a comparison on it fails, and
/// the rule is skipped) when the request carries none.
#[test]
fn context_is_the_authzen_environment() {
    let condition =
        Condition::compile("context.purpose == 'audit' && size(context.tags) > 1").unwrap();
    assert!(condition.reads().context && !condition.reads().content());
    assert!(condition.reads().depends_on_content());
    let evaluate = |context: Option<&Value>| {
        condition.evaluate(&Input {
            object: None,
            old_object: None,
            request: RequestInput::default(),
            changed_paths: &[],
            context,
        })
    };
    let audit = serde_json::json!({"purpose": "audit", "tags": ["a", "b"]});
    let other = serde_json::json!({"purpose": "export", "tags": ["a", "b"]});
    assert_eq!(evaluate(Some(&audit)), Ok(true));
    assert_eq!(evaluate(Some(&other)), Ok(false));
    assert!(evaluate(None).is_err());
    // Inside a macro's body, as the objects, it may not be read.
    assert!(Condition::compile("[1].all(x, context.a == x)").is_err());
}

fn eval(text: &str) -> Result<bool, String> {
    let (new, old) = (pod(), old_pod());
    eval_with(text, Some(&new), Some(&old))
}

/// Every accepted construct, with the value it must have on `pod()` (updated from `old_pod()`
/// by alice).
#[test]
fn accepted_constructs_evaluate_as_cel_says() {
    let golden: &[(&str, bool)] = &[
        // seed 004's example, with its `admissionReview.resourceRoles.labeleditor` as a request field
        (
            "object.metadata.labels == oldObject.metadata.labels || 'label-editors' in request.userInfo.groups",
            true,
        ),
        ("object.metadata.labels != oldObject.metadata.labels", false),
        // field selection, index
        ("object.metadata.name == 'web-1'", true),
        ("object.metadata.labels['app'] == 'web'", true),
        ("object.spec.containers[1].name == 'log'", true),
        // has()
        ("has(object.metadata.labels)", true),
        ("has(object.metadata.finalizers)", false),
        ("has(object.metadata.labels.app)", true),
        // comparisons
        ("object.spec.replicas > oldObject.spec.replicas", true),
        ("object.spec.replicas >= 3", true),
        ("object.spec.replicas < 3", false),
        ("object.spec.replicas <= 2", false),
        // in, on lists and on maps (keys)
        ("'dev' in request.userInfo.groups", true),
        ("'app' in object.metadata.labels", true),
        ("object.metadata.namespace in ['prod', 'staging']", false),
        // logic, conditional
        ("!(object.metadata.name == 'web-2') && true", true),
        ("false || request.verb == 'update'", true),
        ("request.verb == 'create' ? false : object.spec.nodeName == 'node-1'", true),
        // size
        ("size(object.spec.containers) == 2", true),
        ("object.metadata.labels.size() == 2", true),
        ("size(object.metadata.name) == 5", true),
        // strings
        ("object.metadata.name.startsWith('web-')", true),
        ("object.metadata.name.endsWith('-2')", false),
        ("object.metadata.annotations.owner.contains('lic')", true),
        ("object.metadata.name.matches('^web-[0-9]+$')", true),
        // list and map literals
        ("[1, 2, 3] == [1, 2, 3]", true),
        ("{'app': 'web', 'tier': 'frontend'} == object.metadata.labels", true),
        // one level of macros
        (
            "object.spec.containers.all(c, c.image.startsWith('registry.example.com/'))",
            true,
        ),
        ("object.spec.containers.exists(c, c.name == 'log')", true),
        ("object.spec.containers.exists_one(c, c.name.startsWith('w'))", true),
        ("object.spec.containers.filter(c, c.name == 'web').size() == 1", true),
        ("object.spec.containers.map(c, c.name) == ['web', 'log']", true),
        // a macro's body may read `request`
        (
            "object.spec.containers.all(c, c.name != request.userInfo.username)",
            true,
        ),
        // request, changedPaths and selectors
        (
            "request.resource == 'pods' && request.namespace == 'dev' && request.apiVersion == 'v1' && request.apiGroup == ''",
            true,
        ),
        ("request.name == 'web-1' && request.subresource == ''", true),
        ("changedPaths == ['.spec.replicas']", true),
        ("request.fieldSelector.exists(r, r.key == 'spec.nodeName' && 'node-1' in r.values)", true),
        ("request.labelSelector.size() == 0", true),
    ];
    for (text, expected) in golden {
        assert_eq!(eval(text), Ok(*expected), "{text}");
    }
}

/// `oldObject` (or `object`) is null when the request does not carry it.
#[test]
fn an_absent_object_is_null() {
    let new = pod();
    assert_eq!(eval_with("oldObject == null", Some(&new), None), Ok(true));
    assert_eq!(eval_with("object == null", None, Some(&new)), Ok(true));
    // Selecting from null is an error (which the fold turns into "grants nothing").
    let error = eval_with("oldObject.metadata.name == 'x'", Some(&new), None).unwrap_err();
    assert!(!error.is_empty());
}

/// CEL's own errors come back as messages (the rule's evaluation error names them).
#[test]
fn runtime_errors_are_messages() {
    let missing = eval("object.metadata.labels['nope'] == 'x'").unwrap_err();
    assert!(missing.contains("nope"), "{missing}");
    let not_bool = eval("object.metadata.name").unwrap_err();
    assert!(not_bool.contains("not a bool"), "{not_bool}");
    let mismatch = eval("object.metadata.name > 3").unwrap_err();
    assert!(!mismatch.is_empty());
}

/// Every construct outside the subset is refused when it loads, saying what it used.
#[test]
fn constructs_outside_the_subset_are_refused() {
    let refused: &[(&str, &str)] = &[
        ("object.spec.replicas + 1 > 3", "`+`"),
        ("object.spec.replicas - 1 > 3", "`-`"),
        ("object.spec.replicas * 2 > 3", "`*`"),
        ("object.spec.replicas / 2 > 3", "`/`"),
        ("object.spec.replicas % 2 == 1", "`%`"),
        ("-object.spec.replicas < 0", "unary `-`"),
        ("int(object.spec.replicas) > 3", "`int()`"),
        ("string(object.spec.replicas) == '3'", "`string()`"),
        ("type(object) == map", "`type()`"),
        (
            "object.metadata.name.lowerAscii() == 'web-1'",
            "`lowerAscii()`",
        ),
        (
            "matches(object.metadata.name, 'web')",
            "`matches()` other than",
        ),
        (
            "object.metadata.name.matches(object.metadata.namespace)",
            "not a string literal",
        ),
        (
            "object.spec.containers.all(c, object.spec.containers.exists(d, d == c))",
            "a macro inside a macro's body",
        ),
        (
            "object.spec.containers.all(c, [1, 2].exists(d, d == 1))",
            "a macro inside a macro's body",
        ),
        (
            "object.spec.containers.all(c, c == object.spec.containers[0])",
            "reads `object` inside a macro's body",
        ),
        (
            "object.spec.containers.all(c, c.name in oldObject.spec.containers)",
            "reads `oldObject` inside a macro's body",
        ),
        ("object.metadata.all(k, v, v == 'x')", "`all()`"),
        (
            "[1].all(object, object == 1)",
            "one of the condition's variables",
        ),
        (
            "params.allowed == true",
            "`params`, which is not a variable",
        ),
        ("request.userInfo.uid == 'u'", "`request.userInfo.uid`"),
        ("has(request.userInfo.extra)", "`request.userInfo.extra`"),
        ("request.operation == 'CREATE'", "`request.operation`"),
        (
            "admissionReview.resourceRoles.labeleditor",
            "not a variable",
        ),
        (
            "google.protobuf.Int64Value{value: 1} == 1",
            "message literal",
        ),
        ("object.?metadata == null", "optional"),
    ];
    for (text, says) in refused {
        let error = Condition::compile(text).expect_err(text);
        assert!(error.contains(says), "{text}: {error}");
    }
    for (text, says) in [
        ("object.metadata.name ==", "does not parse"),
        ("object.metadata.name.matches('(')", "does not compile"),
        ("", "empty"),
    ] {
        let error = Condition::compile(text).expect_err(text);
        assert!(error.contains(says), "{text}: {error}");
    }
    let long = format!("{}true", "true && ".repeat(MAX_LENGTH / 8));
    assert!(Condition::compile(&long)
        .expect_err("too long")
        .contains("at most"));
}

/// One program per text: a second compile of the same text shares the first's program.
#[test]
fn conditions_are_interned_by_text() {
    let a = Condition::compile("request.verb == 'get' && true").unwrap();
    let b = Condition::compile("request.verb == 'get' && true").unwrap();
    let c = Condition::compile("request.verb == 'get' && false").unwrap();
    assert!(a.same_program(&b));
    assert!(!a.same_program(&c));
    assert_eq!(a, b);
    assert_ne!(a, c);
}

/// What a condition reads decides whether it needs content.
#[test]
fn reads_are_found_at_compile_time() {
    let reads = |t: &str| Condition::compile(t).unwrap().reads();
    assert!(!reads("request.verb == 'get'").content());
    assert!(reads("request.verb == 'get'").request);
    assert!(reads("has(object.metadata)").object);
    assert!(reads("oldObject == null").old_object);
    assert!(reads("size(changedPaths) == 1").changed_paths);
    assert!(!reads("[1].all(x, x == 1)").content());
}

/// Only what an expression reaches of an object is built, and the answers are those of the
/// whole object.
#[test]
fn a_partial_object_answers_as_the_whole() {
    for text in [
        "object.metadata.labels == oldObject.metadata.labels",
        "size(object.metadata) == 4",
        "object.metadata == oldObject.metadata",
        "has(object.spec.nodeName) && !has(object.spec.priority)",
        "object.spec.containers.map(c, c.name).size() == 2",
        "object == oldObject",
    ] {
        let (new, old) = (pod(), old_pod());
        let expected = text != "object == oldObject";
        assert_eq!(
            eval_with(text, Some(&new), Some(&old)),
            Ok(expected),
            "{text}"
        );
    }
}

/// However a condition is written within the length limit, loading it never overflows the
/// stack (the parser recurses per nesting level): deep nesting is refused before parsing.
#[test]
fn deep_nesting_is_refused_not_overflowed() {
    let fill = |unit: &str, close: &str| {
        let n = (MAX_LENGTH - 8) / (unit.len() + close.len());
        format!("{}true{}", unit.repeat(n), close.repeat(n))
    };
    for text in [
        fill("(", ")"),
        fill("[", "]"),
        fill("{'a':", "}"),
        fill("true ? ", " : false"),
        fill("size(", ")"),
    ] {
        assert!(text.len() <= MAX_LENGTH);
        let error = Condition::compile(&text).expect_err(&text[..40]);
        assert!(!error.is_empty());
    }
    // Long chains the parser keeps shallow (it balances `&&` and `||`, and folds `!!x` to
    // `x`) or the tree-depth limit refuses: loading either way, never overflowing (a stack
    // overflow aborts this test).
    for text in [
        format!("{}true", "!".repeat(MAX_LENGTH - 8)),
        format!("{}1", "-".repeat(MAX_LENGTH - 8)),
        format!("true{}", " && true".repeat((MAX_LENGTH - 8) / 8)),
        format!("true{}", " || true".repeat((MAX_LENGTH - 8) / 8)),
        format!("request{} == 1", ".a".repeat((MAX_LENGTH - 16) / 2)),
        format!("request.a{} == 1", "[0]".repeat((MAX_LENGTH - 16) / 3)),
        format!("1{}", " < 1".repeat((MAX_LENGTH - 8) / 4)),
    ] {
        assert!(text.len() <= MAX_LENGTH);
        if let Ok(condition) = Condition::compile(&text) {
            // What loads also evaluates without overflowing.
            let _ = eval(condition.text());
        }
    }
    // Within the limits, nesting loads.
    assert!(Condition::compile(&format!("{}true{}", "(".repeat(16), ")".repeat(16))).is_ok());
}

/// `text` compiled with its comparisons answered as shortcuts (at least `shortcuts` of them),
/// and with all of it left to cel-rust.
struct BothWays {
    text: &'static str,
    fast: cel_rust::CelProgram,
    plain: cel_rust::CelProgram,
}

impl BothWays {
    fn compile(text: &'static str, shortcuts: usize) -> BothWays {
        let fast = cel_rust::CelProgram::compile(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let plain = cel_rust::CelProgram::compile_without_shortcuts(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!(
            fast.shortcut_count() >= shortcuts,
            "{text}: {} shortcuts",
            fast.shortcut_count()
        );
        assert_eq!(plain.shortcut_count(), 0);
        assert_eq!(fast.reads(), plain.reads(), "{text}");
        BothWays { text, fast, plain }
    }

    /// Both programs' values (fast, plain).
    fn evaluate(
        &self,
        object: Option<&Value>,
        old: Option<&Value>,
        groups: &[&str],
    ) -> (Result<bool, String>, Result<bool, String>) {
        let input = Input {
            object,
            old_object: old,
            request: RequestInput {
                verb: "update",
                api_group: "apps",
                api_version: "v1",
                resource: "deployments",
                subresource: "",
                name: "web",
                namespace: "dev",
                username: "alice",
                groups,
                field_selector: &[],
                label_selector: &[],
            },
            changed_paths: &[],
            context: None,
        };
        (self.fast.evaluate(&input), self.plain.evaluate(&input))
    }
}

fn both_ways(
    text: &'static str,
    object: Option<&Value>,
    old: Option<&Value>,
    groups: &[&str],
    shortcuts: usize,
) -> (Result<bool, String>, Result<bool, String>) {
    BothWays::compile(text, shortcuts).evaluate(object, old, groups)
}

/// The shortcuts answer what cel-rust answers, errors included, on the edge cases of CEL's
/// equality: equal and different maps, numbers of different types (1 and 1.0), nested lists,
/// nulls, absent fields and objects, lists and maps against scalars, `!=` and `in`.
#[test]
fn shortcuts_answer_as_cel_does() {
    let new = json!({
        "metadata": {"name": "web", "labels": {"app": "web", "tier": "fe"}, "owner": "alice",
            "nothing": null},
        "spec": {"replicas": 1, "ratio": 1.0, "big": 18446744073709551615u64,
            "huge": 9007199254740993i64, "nested": [[1, 2], [3, {"a": [4]}]], "empty": {},
            "list": [], "flag": true, "neg": -0.0, "zero": 0},
    });
    let old = json!({
        "metadata": {"name": "web", "labels": {"tier": "fe", "app": "web"}, "owner": "bob",
            "nothing": null},
        "spec": {"replicas": 1.0, "ratio": 1, "big": 18446744073709551615.0,
            "huge": 9007199254740992.0, "nested": [[1.0, 2], [3, {"a": [4.0]}]], "empty": [],
            "list": {}, "flag": "true", "neg": 0, "zero": 0.0},
    });
    let different_labels = json!({"metadata": {"labels": {"app": "web", "tier": "be"}}});
    let more_labels = json!({"metadata": {"labels": {"app": "web", "tier": "fe", "x": "y"}}});
    // (condition, its value on (new, old), when it has one)
    let cases: &[(&'static str, Option<bool>)] = &[
        ("object.metadata.labels == oldObject.metadata.labels", Some(true)),
        ("object.metadata.labels != oldObject.metadata.labels", Some(false)),
        ("object.metadata == oldObject.metadata", Some(false)),
        ("object.metadata.name == oldObject.metadata.name", Some(true)),
        ("object.metadata.owner != oldObject.metadata.owner", Some(true)),
        ("object.metadata.nothing == oldObject.metadata.nothing", Some(true)),
        ("object.metadata.nothing == null", Some(true)),
        ("null == object.metadata.labels", Some(false)),
        ("object.metadata.labels == null", Some(false)),
        ("object.metadata.labels['app'] == 'web'", Some(true)),
        ("'web' == object.metadata.labels.app", Some(true)),
        // numbers across int, uint and double: whatever cel-rust says
        ("object.spec.replicas == oldObject.spec.replicas", None),
        ("object.spec.ratio == oldObject.spec.ratio", None),
        ("object.spec.big == oldObject.spec.big", None),
        ("object.spec.huge == oldObject.spec.huge", None),
        ("object.spec.neg == oldObject.spec.neg", None),
        ("object.spec.zero == oldObject.spec.zero", None),
        ("object.spec.replicas == 1.0", None),
        ("object.spec.replicas == 1u", None),
        ("1.0 != object.spec.replicas", None),
        ("object.spec.nested == oldObject.spec.nested", None),
        ("object.spec == oldObject.spec", Some(false)),
        ("object.spec.nested != oldObject.spec.nested", Some(false)),
        // lists, maps and scalars against each other
        ("object.spec.empty == oldObject.spec.empty", Some(false)),
        ("object.spec.list == oldObject.spec.list", Some(false)),
        ("object.spec.flag == oldObject.spec.flag", Some(false)),
        ("object.spec.list == 1", Some(false)),
        ("1 == object.spec.list", Some(false)),
        ("object.spec.empty == 'x'", Some(false)),
        ("b'x' == object.spec.empty", Some(false)),
        ("object.metadata.name == b'web'", Some(false)),
        ("object.spec.list != true", Some(true)),
        ("object.spec.list == null", Some(false)),
        ("object == oldObject", Some(false)),
        ("object == object", Some(true)),
        // absent fields, selections from scalars and lists: CEL's errors
        ("object.metadata.missing == oldObject.metadata.name", None),
        ("object.metadata.name == oldObject.metadata.missing", None),
        ("object.metadata.labels['nope'] != 'x'", None),
        ("object.metadata.nothing.x == 1", None),
        ("object.metadata.name.x == 1", None),
        ("object.spec.nested.x == 1", None),
        // request fields and groups
        ("request.verb == 'update'", Some(true)),
        ("'deployments' != request.resource", Some(false)),
        ("request.userInfo.username == object.metadata.owner", Some(true)),
        ("request.userInfo.username == oldObject.metadata.owner", Some(false)),
        ("request.apiGroup == 1", Some(false)),
        ("request.subresource == ''", Some(true)),
        ("'label-editors' in request.userInfo.groups", Some(true)),
        ("'nobody' in request.userInfo.groups", Some(false)),
        ("object.metadata.owner in request.userInfo.groups", Some(false)),
        ("oldObject.metadata.owner in request.userInfo.groups", Some(true)),
        ("object.metadata.labels in request.userInfo.groups", Some(false)),
        ("1 in request.userInfo.groups", Some(false)),
        ("object.metadata.missing in request.userInfo.groups", None),
        // inside logic, conditionals and macros
        (
            "object.metadata.labels == oldObject.metadata.labels || 'label-editors' in request.userInfo.groups",
            Some(true),
        ),
        (
            "object.metadata.missing == oldObject.metadata.labels || 'label-editors' in request.userInfo.groups",
            Some(true),
        ),
        (
            "object.metadata.missing == oldObject.metadata.labels && 'label-editors' in request.userInfo.groups",
            None,
        ),
        (
            "request.verb == 'update' ? object.metadata.name != 'web' : true",
            Some(false),
        ),
        ("object.spec.nested.exists(x, request.verb == 'update')", Some(true)),
        ("[request.verb == 'update', 'bob' in request.userInfo.groups] == [true, true]", Some(true)),
    ];
    let groups = ["bob", "label-editors"];
    for (text, expected) in cases {
        let (fast, plain) = both_ways(text, Some(&new), Some(&old), &groups, 1);
        assert_eq!(fast, plain, "{text}");
        if let Some(expected) = expected {
            assert_eq!(fast, Ok(*expected), "{text}");
        }
    }
    // The errors are CEL's own, and the numbers compare as cel-rust compares them.
    let (fast, _) = both_ways(
        "object.metadata.labels['nope'] != 'x'",
        Some(&new),
        Some(&old),
        &groups,
        1,
    );
    assert!(fast.unwrap_err().contains("nope"));
    for text in [
        "object.spec.replicas == oldObject.spec.replicas",
        "object.spec.nested == oldObject.spec.nested",
    ] {
        assert_eq!(
            both_ways(text, Some(&new), Some(&old), &groups, 1).0,
            Ok(true),
            "{text}"
        );
    }
    // Maps that differ in a value, or in size.
    for other in [&different_labels, &more_labels] {
        for (text, expected) in [
            ("object.metadata.labels == oldObject.metadata.labels", false),
            ("oldObject.metadata.labels == object.metadata.labels", false),
            ("object.metadata.labels != oldObject.metadata.labels", true),
        ] {
            let (fast, plain) = both_ways(text, Some(&new), Some(other), &groups, 1);
            assert_eq!(fast, plain, "{text}");
            assert_eq!(fast, Ok(expected), "{text}");
        }
    }
    // An absent object is null: compared whole it is null, selected from it is an error.
    for (text, expected) in [
        ("oldObject == null", Some(true)),
        ("object == oldObject", Some(false)),
        ("oldObject != object", Some(true)),
        ("object.metadata.labels == oldObject.metadata.labels", None),
        ("oldObject.metadata in request.userInfo.groups", None),
    ] {
        let (fast, plain) = both_ways(text, Some(&new), None, &groups, 1);
        assert_eq!(fast, plain, "{text}");
        match expected {
            Some(expected) => assert_eq!(fast, Ok(expected), "{text}"),
            None => assert!(fast.is_err(), "{text}"),
        }
    }
}

/// A comparison the shortcuts do not take is left as it was.
#[test]
fn other_comparisons_are_left_to_cel() {
    for text in [
        "1 == 1",
        "object.metadata.labels == {'app': 'web'}",
        "has(object.metadata.labels) == true",
        "object.spec.containers[0] == oldObject.spec.containers[0]",
        "request.userInfo == request.userInfo",
        "'x' in object.metadata.labels",
        "object.metadata.name < oldObject.metadata.name",
        "size(object.metadata.labels) == 2",
    ] {
        let program = cel_rust::CelProgram::compile(text).unwrap();
        assert_eq!(program.shortcut_count(), 0, "{text}");
    }
    let (new, old) = (pod(), old_pod());
    for (text, expected) in [
        (
            "object.metadata.labels == {'app': 'web', 'tier': 'frontend'}",
            true,
        ),
        ("size(object.metadata.labels) == 2", true),
        ("has(object.metadata.missing) == false", true),
        (
            "object.spec.containers[0] == oldObject.spec.containers[0]",
            true,
        ),
    ] {
        let (fast, plain) = both_ways(text, Some(&new), Some(&old), GROUPS, 0);
        assert_eq!(fast, plain, "{text}");
        assert_eq!(fast, Ok(expected), "{text}");
    }
}

/// Small JSON values with the shapes CEL's equality treats apart: numbers of each kind
/// (including 1 and 1.0, -0.0 and 0, values beyond i64), nulls, nested lists and maps.
fn small_json() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-2i64..3).prop_map(Value::from),
        prop_oneof![Just(-1.0f64), Just(-0.0), Just(0.0), Just(1.0), Just(2.5)]
            .prop_map(Value::from),
        prop_oneof![Just(u64::MAX), Just(1u64 << 63)].prop_map(Value::from),
        Just(json!(1.8446744073709552e19)),
        prop_oneof![Just("a"), Just("b"), Just("1"), Just("")].prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("a".to_string()),
                    Just("b".to_string()),
                    Just("c".to_string())
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The comparisons the property below holds to cel-rust, compiled once.
static RANDOM_CASES: std::sync::LazyLock<Vec<BothWays>> = std::sync::LazyLock::new(|| {
    [
        "object == oldObject",
        "object.a == oldObject.a",
        "object.a != oldObject.a",
        "oldObject.a == object.a",
        "object.a.a == oldObject.a.a",
        "object.a.b != oldObject.a['a']",
        "object.a == oldObject.b",
        "object.a.a == oldObject.b.a",
        "object.a == 1",
        "1.0 == object.a",
        "object.a == 18446744073709551615u",
        "object.a == 'a'",
        "object.a == null",
        "object.a == true",
        "object.a['c'] == request.verb",
        "object.a in request.userInfo.groups",
        "oldObject.b.a in request.userInfo.groups",
        "object.a == oldObject.a || 'b' in request.userInfo.groups",
    ]
    .into_iter()
    .map(|text| BothWays::compile(text, 1))
    .collect()
});

proptest::proptest! {
    /// On random objects, every shortcut comparison answers what cel-rust answers, error
    /// messages included.
    #[test]
    fn shortcuts_answer_as_cel_on_random_objects(
        a in small_json(),
        b in small_json(),
        old_present in proptest::prelude::any::<bool>(),
    ) {
        let (a, b) = (json!({"a": a, "c": "a"}), json!({"a": b, "b": {"a": "b"}}));
        let old = old_present.then_some(&b);
        for case in RANDOM_CASES.iter() {
            let (fast, plain) = case.evaluate(Some(&a), old, &["a", "1"]);
            proptest::prop_assert_eq!(fast, plain, "{}", case.text);
        }
    }
}
