//! Golden cases for every accepted construct, and a refusal for every construct outside the
//! subset (issue 19).

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
    })
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
