//! Tests of the loaders through their public API.

use std::collections::BTreeMap;
use std::fs;

use super::*;
use crate::policy::content::Clauses;
use crate::policy::model::{
    Binding, BindingKind, LabelSelector, LabelSelectorRequirement, PolicyObject, PolicyRule, Role,
    RoleKind, SelectorOperator, Subject,
};

fn sources(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}

fn load(files: &[(&str, &str)]) -> PolicySet {
    match load_sources(&sources(files), &LoadOptions::default()) {
        Ok(set) => set,
        Err(e) => panic!("unexpected errors:\n{e}"),
    }
}

fn errors(files: &[(&str, &str)]) -> Vec<String> {
    errors_with(files, &LoadOptions::default())
}

fn errors_with(files: &[(&str, &str)], options: &LoadOptions) -> Vec<String> {
    match load_sources(&sources(files), options) {
        Ok(set) => panic!("expected errors, loaded {set:#?}"),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

fn strs(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn user(name: &str) -> Subject {
    Subject {
        kind: "User".into(),
        api_group: "rbac.authorization.k8s.io".into(),
        name: name.into(),
        namespace: String::new(),
    }
}

fn group(name: &str) -> Subject {
    Subject {
        kind: "Group".into(),
        ..user(name)
    }
}

fn role<'a>(set: &'a PolicySet, kind: RoleKind, ns: &str, name: &str) -> &'a Role {
    match set
        .roles
        .iter()
        .find(|r| r.kind == kind && r.namespace == ns && r.name == name)
    {
        Some(r) => r,
        None => panic!("no {kind:?} {ns}/{name} in {:#?}", set.roles),
    }
}

fn binding<'a>(set: &'a PolicySet, kind: BindingKind, ns: &str, name: &str) -> &'a Binding {
    match set
        .bindings
        .iter()
        .find(|b| b.kind == kind && b.namespace == ns && b.name == name)
    {
        Some(b) => b,
        None => panic!("no {kind:?} {ns}/{name} in {:#?}", set.bindings),
    }
}

// ---- Kubernetes RBAC -------------------------------------------------------------------------

const RBAC_YAML: &str = r#"# leading comment
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: everything
  labels:
    rbac.example.com/aggregate: "true"
  uid: 0d5e0c6a
  resourceVersion: "42"
  creationTimestamp: "2024-01-01T00:00:00Z"
  annotations:
    note: ignored
  managedFields:
    - manager: kubectl
rules:
  - apiGroups: ["", "apps"]
    resources: ["pods", "deployments/scale", "*/status", "*", "-secrets"]
    resourceNames: ["a", "b"]
    verbs: ["get", "-delete", "*"]
  - nonResourceURLs: ["/healthz", "/api/*"]
    verbs: [get]
  - apiGroups: ["*"]
    resources: ["secrets"]
    verbs: ["*"]
    deny: true
    attributeRestrictions: {z: 1, a: [true, null, "x"]}
---
apiVersion: rbac.authorization.k8s.io/v1beta1
kind: ClusterRole
metadata:
  name: aggregate
aggregationRule:
  clusterRoleSelectors:
    - matchLabels:
        rbac.example.com/aggregate: "true"
    - matchExpressions:
        - {key: tier, operator: In, values: [a, b]}
        - {key: tier, operator: NotIn, values: [c]}
        - {key: x, operator: Exists}
        - {key: y, operator: DoesNotExist, values: []}
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: rb
  namespace: ns1
subjects:
  - kind: User
    name: alice
  - kind: Group
    apiGroup: rbac.authorization.k8s.io
    name: devs
  - kind: ServiceAccount
    name: default
  - kind: ServiceAccount
    name: builder
    namespace: ci
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: everything
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: crb
subjects:
  - kind: ServiceAccount
    name: builder
    namespace: ci
roleRef:
  kind: ClusterRole
  name: aggregate
"#;

#[test]
fn rbac_objects_are_read_with_every_field() {
    let set = load(&[("p/rbac.yaml", RBAC_YAML)]);
    assert_eq!((set.roles.len(), set.bindings.len()), (2, 2));

    let everything = role(&set, RoleKind::ClusterRole, "", "everything");
    assert_eq!(everything.source, Source::new("p/rbac.yaml", 2));
    assert_eq!(
        everything.labels,
        BTreeMap::from([("rbac.example.com/aggregate".to_string(), "true".to_string())])
    );
    assert_eq!(
        everything.rules,
        vec![
            PolicyRule {
                verbs: strs(&["get", "-delete", "*"]),
                api_groups: strs(&["", "apps"]),
                resources: strs(&["pods", "deployments/scale", "*/status", "*", "-secrets"]),
                resource_names: strs(&["a", "b"]),
                ..PolicyRule::default()
            },
            PolicyRule {
                verbs: strs(&["get"]),
                non_resource_urls: strs(&["/healthz", "/api/*"]),
                ..PolicyRule::default()
            },
            PolicyRule {
                verbs: strs(&["*"]),
                api_groups: strs(&["*"]),
                resources: strs(&["secrets"]),
                deny: true,
                attribute_restrictions: Some(r#"{"a":[true,null,"x"],"z":1}"#.to_string()),
                // Keys authzd cannot evaluate stay unevaluable: the rule never widens access.
                clauses: Some(std::sync::Arc::new(Clauses {
                    unevaluable: Some(
                        r#"attributeRestrictions {"a":[true,null,"x"],"z":1}, whose z, a authzd cannot evaluate"#
                            .to_string()
                    ),
                    ..Clauses::default()
                })),
                ..PolicyRule::default()
            },
        ]
    );
    assert_eq!(everything.aggregation_rule, None);

    let aggregate = role(&set, RoleKind::ClusterRole, "", "aggregate");
    assert_eq!(aggregate.source.line, 28);
    assert!(aggregate.rules.is_empty());
    let req = |key: &str, operator, values: &[&str]| LabelSelectorRequirement {
        key: key.into(),
        operator,
        values: strs(values),
    };
    assert_eq!(
        aggregate.aggregation_rule,
        Some(vec![
            LabelSelector {
                match_labels: BTreeMap::from([(
                    "rbac.example.com/aggregate".to_string(),
                    "true".to_string()
                )]),
                match_expressions: vec![],
            },
            LabelSelector {
                match_labels: BTreeMap::new(),
                match_expressions: vec![
                    req("tier", SelectorOperator::In, &["a", "b"]),
                    req("tier", SelectorOperator::NotIn, &["c"]),
                    req("x", SelectorOperator::Exists, &[]),
                    req("y", SelectorOperator::DoesNotExist, &[]),
                ],
            },
        ])
    );

    let rb = binding(&set, BindingKind::RoleBinding, "ns1", "rb");
    assert_eq!(rb.source.line, 43);
    assert_eq!(
        rb.subjects,
        vec![
            user("alice"),
            group("devs"),
            Subject {
                kind: "ServiceAccount".into(),
                api_group: String::new(),
                name: "default".into(),
                namespace: String::new(),
            },
            Subject {
                kind: "ServiceAccount".into(),
                api_group: String::new(),
                name: "builder".into(),
                namespace: "ci".into(),
            },
        ]
    );
    assert_eq!(
        rb.role_ref,
        RoleRef {
            kind: RoleKind::ClusterRole,
            name: "everything".into()
        }
    );
    let crb = binding(&set, BindingKind::ClusterRoleBinding, "", "crb");
    assert_eq!(crb.source.line, 64);
    assert_eq!(crb.namespace, "");
}

use crate::policy::model::RoleRef;

#[test]
fn json_files_hold_concatenated_objects_with_their_lines() {
    let text = r#"{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
 "metadata": {"name": "a", "namespace": "n"},
 "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}

    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
     "metadata": {"name": "b", "namespace": "n"},
     "subjects": [{"kind": "User", "name": "u"}],
     "roleRef": {"kind": "Role", "name": "a"}}{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "c"}}
"#;
    let set = load(&[("x.json", text)]);
    assert_eq!(role(&set, RoleKind::Role, "n", "a").source.line, 1);
    assert_eq!(
        binding(&set, BindingKind::RoleBinding, "n", "b")
            .source
            .line,
        5
    );
    assert_eq!(role(&set, RoleKind::ClusterRole, "", "c").source.line, 8);
}

#[test]
fn lists_and_their_item_lines() {
    let text = r#"apiVersion: v1
kind: List
metadata:
  resourceVersion: ""
items:
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: ClusterRole
    metadata: {name: one}
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: ClusterRoleBinding
    metadata: {name: one}
    roleRef: {kind: ClusterRole, name: one}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleList
metadata: {resourceVersion: "7", continue: ""}
items:
  - metadata: {name: r1, namespace: ns}
  - kind: Role
    apiVersion: rbac.authorization.k8s.io/v1beta1
    metadata: {name: r2, namespace: ns}
"#;
    let set = load(&[("lists.yaml", text)]);
    assert_eq!(role(&set, RoleKind::ClusterRole, "", "one").source.line, 6);
    assert_eq!(
        binding(&set, BindingKind::ClusterRoleBinding, "", "one")
            .source
            .line,
        9
    );
    assert_eq!(role(&set, RoleKind::Role, "ns", "r1").source.line, 18);
    assert_eq!(role(&set, RoleKind::Role, "ns", "r2").source.line, 19);
}

#[test]
fn list_errors() {
    let text = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: List
items: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleList
items:
  - kind: ClusterRole
    metadata: {name: x}
---
apiVersion: v1
kind: List
items:
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: RoleList
    items: []
  - kind: Role
    metadata: {name: y, namespace: n}
"#;
    assert_eq!(
        errors(&[("l.yaml", text)]),
        strs(&[
            "l.yaml:1: `List` needs `apiVersion: v1`, found `rbac.authorization.k8s.io/v1`",
            "l.yaml:8: an item of a `RoleList` must be a `Role`, found kind `ClusterRole`",
            "l.yaml:14: `RoleList` inside a list is not supported",
            "l.yaml:17: `Role` `n/y`: unsupported apiVersion none for kind `Role` (expected `rbac.authorization.k8s.io/v1`, `rbac.authorization.k8s.io/v1beta1`, `rbac.authorization.k8s.io/v1alpha1`)",
        ])
    );
}

// ---- objects of other API groups ------------------------------------------------------------

fn load_reporting(files: &[(&str, &str)]) -> Loaded {
    match load_sources_reporting(&sources(files), &LoadOptions::default()) {
        Ok(loaded) => loaded,
        Err(e) => panic!("unexpected errors:\n{e}"),
    }
}

/// (file:line, kind, apiVersion) of each skipped object, in reading order.
fn skipped_at(skipped: &Skipped) -> Vec<(String, &str, &str)> {
    skipped
        .0
        .iter()
        .map(|o| {
            (
                o.source.to_string(),
                o.kind.as_str(),
                o.api_version.as_str(),
            )
        })
        .collect()
}

#[test]
fn objects_of_other_api_groups_are_skipped_and_counted() {
    let chart = r#"---
# Source: app/templates/serviceaccount.yaml
apiVersion: v1
kind: ServiceAccount
metadata: {name: app, namespace: apps}
---
# Source: app/templates/rbac.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: app-reader}
rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: app-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: app-reader}
subjects: [{kind: ServiceAccount, name: app, namespace: apps}]
---
# Source: app/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: apps}
spec: {replicas: 1, template: {spec: {serviceAccountName: app}}}
---
apiVersion: v1
kind: Service
metadata: {name: app, namespace: apps}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: app-worker, namespace: apps}
---
# an empty document, as a template that renders nothing leaves
"#;
    let json = r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"verbs": "x"}}
{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r", "namespace": "apps"}}"#;
    let loaded = load_reporting(&[("chart.yaml", chart), ("more.json", json)]);
    assert_eq!(loaded.policy.roles.len(), 2);
    assert_eq!(loaded.policy.bindings.len(), 1);
    assert_eq!(
        skipped_at(&loaded.skipped),
        vec![
            ("chart.yaml:3".into(), "ServiceAccount", "v1"),
            ("chart.yaml:20".into(), "Deployment", "apps/v1"),
            ("chart.yaml:25".into(), "Service", "v1"),
            (
                "chart.yaml:29".into(),
                "CustomResourceDefinition",
                "apiextensions.k8s.io/v1"
            ),
            ("chart.yaml:33".into(), "ServiceAccount", "v1"),
            ("more.json:1".into(), "ConfigMap", "v1"),
        ]
    );
    assert_eq!(
        loaded.skipped.to_string(),
        "skipped 6 objects of other kinds: 2 ServiceAccount (v1), 1 ConfigMap (v1), 1 CustomResourceDefinition (apiextensions.k8s.io/v1), 1 Deployment (apps/v1), 1 Service (v1)"
    );
    // Nothing skipped in a policy-only load; `load_sources` gives the same policy.
    assert!(
        load_reporting(&[("c.yaml", &CLUSTER_ROLE.replace("NAME", "x"))])
            .skipped
            .is_empty()
    );
    assert_eq!(
        load(&[("chart.yaml", chart), ("more.json", json)]),
        loaded.policy
    );
}

#[test]
fn a_list_skips_its_items_of_other_api_groups() {
    let text = r#"apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: ServiceAccount
    metadata: {name: sa, namespace: ns}
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: Role
    metadata: {name: r, namespace: ns}
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: d, namespace: ns}
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: RoleBinding
    metadata: {name: b, namespace: ns}
    roleRef: {kind: Role, name: r}
"#;
    let loaded = load_reporting(&[("export.yaml", text)]);
    assert_eq!(
        role(&loaded.policy, RoleKind::Role, "ns", "r").source.line,
        7
    );
    assert_eq!(
        binding(&loaded.policy, BindingKind::RoleBinding, "ns", "b")
            .source
            .line,
        13
    );
    assert_eq!(
        skipped_at(&loaded.skipped),
        vec![
            ("export.yaml:4".into(), "ServiceAccount", "v1"),
            ("export.yaml:10".into(), "Deployment", "apps/v1"),
        ]
    );
    // A typo'd policy kind inside the List is still refused.
    let typo = text.replace("kind: RoleBinding", "kind: RoleBindng");
    assert_eq!(
        errors(&[("export.yaml", &typo)]),
        strs(&["export.yaml:13: unknown kind `RoleBindng` for apiVersion `rbac.authorization.k8s.io/v1`"])
    );
}

#[test]
fn misspelt_policy_objects_are_refused_beside_skipped_ones() {
    let text = r#"apiVersion: v1
kind: ServiceAccount
metadata: {name: sa, namespace: ns}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBindng
metadata: {name: b}
---
apiVersion: rbac.authorizaton.k8s.io/v1
kind: ClusterRole
metadata: {name: c}
---
apiVersion: v1
kind: ClusterRole
metadata: {name: c}
---
apiVersion: rbac.authorization.k8s.io
kind: Role
metadata: {name: r, namespace: ns}
---
kind: Deployment
metadata: {name: d}
---
apiVersion: apps/v1
metadata: {name: d}
---
apiVersion: authzd.io/v1alpha1
kind: FieldPolicyy
metadata: {name: f}
---
apiVersion: abac.authorization.kubernetes.io/v1beta1
kind: Policy
spec: {user: alice}
"#;
    assert_eq!(
        errors(&[("t.yaml", text)]),
        strs(&[
            "t.yaml:5: unknown kind `ClusterRoleBindng` for apiVersion `rbac.authorization.k8s.io/v1`",
            "t.yaml:9: unknown API group `rbac.authorizaton.k8s.io` in apiVersion `rbac.authorizaton.k8s.io/v1` of kind `ClusterRole`: did you mean `rbac.authorization.k8s.io`? (objects of other groups are skipped, so a misspelt policy group is refused)",
            "t.yaml:13: `ClusterRole` `c`: unsupported apiVersion `v1` for kind `ClusterRole` (expected `rbac.authorization.k8s.io/v1`, `rbac.authorization.k8s.io/v1beta1`, `rbac.authorization.k8s.io/v1alpha1`)",
            "t.yaml:17: apiVersion `rbac.authorization.k8s.io` of kind `Role` is neither `group/version` nor a core-group version such as `v1`",
            "t.yaml:21: missing `apiVersion` for kind `Deployment` (authzd skips objects of other API groups, and needs the apiVersion to tell them from policy)",
            "t.yaml:24: missing `kind`",
            "t.yaml:27: unknown kind `FieldPolicyy` for apiVersion `authzd.io/v1alpha1`",
            "t.yaml:31: unknown kind `Policy` for apiVersion `abac.authorization.kubernetes.io/v1beta1` (ABAC policies are read from `.jsonl` files, one per line)",
        ])
    );
}

#[test]
fn writes_refuse_objects_of_other_groups_and_files_tell_what_they_hold() {
    let options = LoadOptions::default();
    let manifest = format!(
        "{}---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: sa, namespace: ns}}
",
        CLUSTER_ROLE.replace("NAME", "a")
    );
    assert_eq!(
        parse_manifest("m.yaml", &manifest, &options)
            .unwrap_err()
            .to_string(),
        "m.yaml:5: `ServiceAccount` (apiVersion `v1`) is not a policy object: a write holds only Roles, ClusterRoles, RoleBindings, ClusterRoleBindings and FieldPolicies"
    );
    // What a file holds besides policy, even when its policy does not load.
    let broken = manifest.replace("kind: ClusterRole", "kind: ClusterRol");
    assert_eq!(
        skipped_at(&skipped_in("f.yaml", &broken, &options)),
        vec![("f.yaml:5".into(), "ServiceAccount", "v1")]
    );
    assert!(skipped_in("f.yaml", "a: [", &options).is_empty());
    assert!(skipped_in("f.jsonl", "{}", &options).is_empty());
}

/// One document with a given body after the header, for validation tests.
fn doc(kind: &str, meta: &str, body: &str) -> String {
    format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\nmetadata: {meta}\n{body}")
}

#[test]
fn validation_errors_name_file_line_and_object() {
    let rule = "rules: [{verbs: [get], apiGroups: [''], resources: [pods]}]\n";
    let role_ref = "roleRef: {kind: ClusterRole, name: r}\n";
    let docs = [
        doc("ClusterRole", "{}", rule),
        doc("Role", "{name: r}", rule),
        doc("ClusterRole", "{name: r, namespace: n}", rule),
        doc("RoleBinding", "{name: b, namespace: n}", "roleRef: {kind: Other, name: r}\n"),
        doc("ClusterRoleBinding", "{name: b}", "roleRef: {kind: Role, name: r}\n"),
        doc(
            "RoleBinding",
            "{name: b, namespace: n}",
            &format!("subjects: [{{kind: Robot, name: x}}]\n{role_ref}"),
        ),
        doc(
            "ClusterRoleBinding",
            "{name: c}",
            &format!("subjects: [{{kind: ServiceAccount, name: x}}]\n{role_ref}"),
        ),
        doc(
            "RoleBinding",
            "{name: d, namespace: n}",
            &format!("subjects: [{{kind: User, name: ''}}, {{kind: Group}}]\n{role_ref}"),
        ),
        doc(
            "Role",
            "{name: agg, namespace: n}",
            "aggregationRule: {clusterRoleSelectors: []}\n",
        ),
        doc(
            "ClusterRole",
            "{name: neg}",
            "rules: [{verbs: ['-'], apiGroups: ['', '-apps'], resources: ['-pods', '-secrets']}]\n",
        ),
        doc("RoleBinding", "{name: e, namespace: n}", "subjects: []\n"),
        doc(
            "ClusterRole",
            "{name: typo}",
            "rules: [{verb: [get], apiGroups: [''], resources: [pods]}]\nlabel: {}\n",
        ),
        doc(
            "RoleBinding",
            "{name: f, namespace: n, nickname: x}",
            &format!("subjects: [{{kind: User, name: u, namespce: x}}]\n{role_ref}"),
        ),
        doc(
            "Role",
            "{name: g, namespace: n}",
            "rules: [{verbs: [get], nonResourceURLs: [/x]}, {verbs: [], apiGroups: [], resources: []}]\n",
        ),
        doc(
            "ClusterRole",
            "{name: h}",
            "rules: [{verbs: [get], apiGroups: [''], resources: [pods], nonResourceURLs: [/x]}]\n",
        ),
        doc(
            "ClusterRole",
            "{name: i}",
            "aggregationRule:\n  clusterRoleSelectors:\n    - matchExpressions: [{key: '', operator: Has}, {key: k, operator: In}, {key: k, operator: Exists, values: [v]}]\n",
        ),
        doc(
            "ClusterRole",
            "{name: j}",
            "rules: [{verbs: get, apiGroups: [1], resources: [pods], deny: 'yes'}]\n",
        ),
        doc(
            "ClusterRoleBinding",
            "{name: 'a/b'}",
            // An explicit empty `apiGroup` is defaulted, as upstream does.
            "roleRef: {kind: ClusterRole, name: r, apiGroup: example.com}\nsubjects: [{kind: User, apiGroup: '', name: u}, {kind: ServiceAccount, apiGroup: x, name: s, namespace: n}]\n",
        ),
    ];
    let text = docs.join("---\n");
    let got = errors(&[("v.yaml", &text)]);
    let want = strs(&[
        "v.yaml:1: `ClusterRole` with no name: missing `metadata.name` (authzd never generates names)",
        "v.yaml:6: `Role` `r`: missing `metadata.namespace` (a `Role` is namespaced)",
        "v.yaml:11: `ClusterRole` `n/r`: a `ClusterRole` is cluster-scoped and cannot have `metadata.namespace` (found `n`)",
        "v.yaml:19: `RoleBinding` `n/b`: `roleRef.kind` must be `Role` or `ClusterRole`, found `Other`",
        "v.yaml:24: `ClusterRoleBinding` `b`: a `ClusterRoleBinding` can only reference a `ClusterRole`, found `roleRef.kind: Role`",
        "v.yaml:29: `RoleBinding` `n/b`: `subjects[0].kind` must be `User`, `Group` or `ServiceAccount`, found `Robot`",
        "v.yaml:35: `ClusterRoleBinding` `c`: `subjects[0]`: a `ServiceAccount` subject of a `ClusterRoleBinding` needs a `namespace`",
        "v.yaml:41: `RoleBinding` `n/d`: missing `subjects[0].name`",
        "v.yaml:41: `RoleBinding` `n/d`: missing `subjects[1].name`",
        "v.yaml:47: `Role` `n/agg`: `aggregationRule` is only allowed on a `ClusterRole`",
        "v.yaml:52: `ClusterRole` `neg`: `rules[0].verbs[0]` is a bare `-`, which negates nothing",
        "v.yaml:52: `ClusterRole` `neg`: `rules[0].verbs` has only negated entries, so the rule matches nothing (add `*`)",
        "v.yaml:52: `ClusterRole` `neg`: `rules[0].resources` has only negated entries, so the rule matches nothing (add `*`)",
        "v.yaml:52: `ClusterRole` `neg`: `rules[0].apiGroups[1]` `-apps`: negation is only supported in `verbs` and `resources`",
        "v.yaml:54: `RoleBinding` `n/e`: missing `roleRef`",
        "v.yaml:62: `ClusterRole` `typo`: unknown field `rules[0].verb`",
        "v.yaml:62: `ClusterRole` `typo`: `rules[0].verbs` must list at least one verb",
        "v.yaml:63: `ClusterRole` `typo`: unknown field `label`",
        "v.yaml:67: `RoleBinding` `n/f`: unknown field `metadata.nickname`",
        "v.yaml:68: `RoleBinding` `n/f`: unknown field `subjects[0].namespce`",
        "v.yaml:74: `Role` `n/g`: `rules[0].nonResourceURLs` is not allowed in a namespaced `Role`",
        "v.yaml:74: `Role` `n/g`: `rules[1].verbs` must list at least one verb",
        "v.yaml:74: `Role` `n/g`: `rules[1].apiGroups` must list at least one API group (`\"\"` is the core group)",
        "v.yaml:74: `Role` `n/g`: `rules[1].resources` must list at least one resource",
        "v.yaml:79: `ClusterRole` `h`: `rules[0]` cannot apply to both `resources` and `nonResourceURLs`",
        "v.yaml:86: `ClusterRole` `i`: missing `aggregationRule.clusterRoleSelectors[0].matchExpressions[0].key`",
        "v.yaml:86: `ClusterRole` `i`: `aggregationRule.clusterRoleSelectors[0].matchExpressions[0].operator` must be `In`, `NotIn`, `Exists` or `DoesNotExist`, found `Has`",
        "v.yaml:86: `ClusterRole` `i`: `aggregationRule.clusterRoleSelectors[0].matchExpressions[1].values` must not be empty for operator `In` or `NotIn`",
        "v.yaml:86: `ClusterRole` `i`: `aggregationRule.clusterRoleSelectors[0].matchExpressions[2].values` must be empty for operator `Exists` or `DoesNotExist`",
        "v.yaml:91: `ClusterRole` `j`: `rules[0].verbs` must be a list, found a string",
        "v.yaml:91: `ClusterRole` `j`: `rules[0].apiGroups[0]` must be a string, found a number",
        "v.yaml:91: `ClusterRole` `j`: `rules[0].deny` must be a boolean, found a string",
        "v.yaml:91: `ClusterRole` `j`: `rules[0].verbs` must list at least one verb",
        "v.yaml:91: `ClusterRole` `j`: `rules[0].apiGroups` must list at least one API group (`\"\"` is the core group)",
        "v.yaml:93: `ClusterRoleBinding` `a/b`: `metadata.name` `a/b` may not contain `/` or `%`",
        "v.yaml:97: `ClusterRoleBinding` `a/b`: `subjects[1].apiGroup` must be empty for a `ServiceAccount`, found `x`",
        "v.yaml:96: `ClusterRoleBinding` `a/b`: `roleRef.apiGroup` must be `rbac.authorization.k8s.io`, found `example.com`",
]);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "error {i}");
    }
    assert_eq!(got.len(), want.len(), "{got:#?}");
}

#[test]
fn v1alpha1_role_ref_namespace() {
    let binding = |version: &str, ns: &str| {
        format!(
            "apiVersion: rbac.authorization.k8s.io/{version}\nkind: RoleBinding\nmetadata: {{name: b, namespace: default}}\nroleRef: {{kind: Role, namespace: {ns}, name: r, apiVersion: rbac.authorization.k8s.io/{version}}}\nsubjects: [{{kind: User, name: jane, apiVersion: rbac.authorization.k8s.io/{version}}}]\n"
        )
    };
    let set = load(&[("ok.yaml", &binding("v1alpha1", "default"))]);
    assert_eq!(set.bindings[0].role_ref.name, "r");
    assert_eq!(set.bindings[0].subjects, vec![user("jane")]);
    assert_eq!(
        errors(&[("bad.yaml", &binding("v1alpha1", "other"))]),
        strs(&["bad.yaml:4: `RoleBinding` `default/b`: `roleRef.namespace` `other` differs from the binding's namespace `default` (roles are looked up in the binding's namespace)"])
    );
    assert_eq!(
        errors(&[("v1.yaml", &binding("v1", "default"))]),
        strs(&[
            "v1.yaml:5: `RoleBinding` `default/b`: unknown field `subjects[0].apiVersion`",
            "v1.yaml:4: `RoleBinding` `default/b`: unknown field `roleRef.namespace`",
            "v1.yaml:4: `RoleBinding` `default/b`: unknown field `roleRef.apiVersion`",
        ])
    );
}

#[test]
fn kinds_versions_and_document_shapes() {
    let text = "apiVersion: rbac.authorization.k8s.io/v2\nkind: Role\nmetadata: {name: a, namespace: n}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBindng\n---\nmetadata: {name: x}\n---\n- a\n- b\n---\nplain\n---\nkind: Role\nmetadata: {name: a, namespace: n}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: role\nname: x\n";
    assert_eq!(
        errors(&[("k.yaml", text)]),
        strs(&[
            "k.yaml:1: `Role` `n/a`: unsupported apiVersion `rbac.authorization.k8s.io/v2` for kind `Role` (expected `rbac.authorization.k8s.io/v1`, `rbac.authorization.k8s.io/v1beta1`, `rbac.authorization.k8s.io/v1alpha1`)",
            "k.yaml:5: unknown kind `ClusterRoleBindng` for apiVersion `rbac.authorization.k8s.io/v1`",
            "k.yaml:8: missing `kind`",
            "k.yaml:10: a document must be an object, found a list",
            "k.yaml:13: a document must be an object, found a string",
            "k.yaml:15: `Role` `n/a`: unsupported apiVersion none for kind `Role` (expected `rbac.authorization.k8s.io/v1`, `rbac.authorization.k8s.io/v1beta1`, `rbac.authorization.k8s.io/v1alpha1`)",
            "k.yaml:18: unknown kind `role` for apiVersion `rbac.authorization.k8s.io/v1` (seed-003 documents have no `apiVersion`)",
        ])
    );
}

#[test]
fn syntax_errors_name_the_line_and_every_file_is_checked() {
    let got = errors(&[
        ("a.yaml", "kind: Role\nrules: [\n"),
        (
            "b.json",
            "{\"kind\": \"role\",\n \"name\": \"x\"\n \"namespace\": \"y\"}",
        ),
        ("c.yaml", "a: 1\na: 2\n"),
        ("d.txt", ""),
    ]);
    assert_eq!(got.len(), 4, "{got:#?}");
    assert_eq!(
        got[0],
        "a.yaml:2: invalid yaml: unclosed bracket '[' (column 8)"
    );
    assert_eq!(
        got[1],
        "b.json:3: invalid json: expected `,` or `}` (column 2)"
    );
    assert!(got[2].starts_with("c.yaml:2: invalid yaml: "), "{}", got[2]);
    assert!(got[2].contains("duplicate"), "{}", got[2]);
    assert_eq!(
        got[3],
        "d.txt: unsupported file extension (expected `.yaml`, `.yml`, `.json` or `.jsonl`)"
    );
}

#[test]
fn duplicates_within_and_across_files_name_both_places() {
    let role =
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: view}\n";
    let seed_role = r#"{"kind": "role", "name": "view", "namespace": "master", "rules": []}"#;
    let got = errors(&[
        ("a.yaml", &format!("{role}---\n{role}")),
        ("b.json", seed_role),
    ]);
    assert_eq!(
        got,
        strs(&[
            "a.yaml:5: duplicate `ClusterRole` `view`: already defined at a.yaml:1",
            "b.json:1: duplicate `ClusterRole` `view`: already defined at a.yaml:1",
        ])
    );
    // Same name, different kind or namespace: not duplicates.
    let rb = |ns: &str| {
        format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: view, namespace: {ns}}}\nroleRef: {{kind: ClusterRole, name: view}}\n")
    };
    let set = load(&[("c.yaml", &format!("{role}---\n{}---\n{}", rb("a"), rb("b")))]);
    assert_eq!((set.roles.len(), set.bindings.len()), (1, 2));
}

#[test]
fn canonical_order() {
    let text = r#"{"kind": "role", "name": "z", "namespace": "master", "rules": []}
{"kind": "role", "name": "b", "namespace": "ns2", "rules": []}
{"kind": "role", "name": "a", "namespace": "master", "rules": []}
{"kind": "role", "name": "c", "namespace": "ns1", "rules": []}
"#;
    let set = load(&[("o.json", text)]);
    let names: Vec<_> = set
        .roles
        .iter()
        .map(|r| format!("{:?}/{}/{}", r.kind, r.namespace, r.name))
        .collect();
    assert_eq!(
        names,
        strs(&[
            "ClusterRole//a",
            "ClusterRole//z",
            "Role/ns1/c",
            "Role/ns2/b"
        ])
    );
}

// ---- seed 003 --------------------------------------------------------------------------------

#[test]
fn seed003_documents_map_onto_rbac() {
    let text = r#"{"kind": "role", "name": "view", "namespace": "master",
 "rules": [{"verbs": ["get"], "resourceKinds": ["*", "-roles"]}]}
{"Kind": "role", "Name": "fat", "NameSpace": "hammer",
 "rule": [{"Deny": "true", "Verbs": ["delete"], "ResourceKinds": ["DeploymentConfig"],
           "AttributeRestrictions": {"labelsContain": ["protected"]}},
          {"deny": false, "verbs": ["get"], "resourceKinds": ["pods"]},
          {"DENY": true, "verbs": ["*"], "resourceKinds": ["secrets"]},
          {"deny": "false", "verbs": ["list"], "resourceKinds": ["pods"]}]}
{"kind": "roleBinding", "name": "admins", "namespace": "hammer",
 "roleRef": {"namespace": "master", "name": "admin"}, "userNames": ["Hubert"], "groupNames": ["g"]}
{"kind": "roleBinding", "name": "local", "namespace": "hammer",
 "RoleRef": {"Namespace": "hammer", "Name": "fat"}}
{"kind": "roleBinding", "name": "local2", "namespace": "hammer", "roleRef": {"name": "fat"}}
{"kind": "roleBinding", "name": "Editors", "namespace": "hammer",
 "referencesGlobalRole": true, "roleName": "edit", "userNames": ["Edgar"]}
{"kind": "roleBinding", "name": "byname", "namespace": "hammer", "roleName": "fat"}
{"kind": "roleBinding", "name": "Kubelets", "namespace": "master",
 "roleRef": {"namespace": "master", "name": "kubelet"}, "userNames": ["kubelet-01"]}
{"kind": "roleBinding", "name": "own", "namespace": "master", "roleRef": {"name": "kubelet"}}
{"kind": "Policy", "name": "Policy", "namespace": "hammer", "lastModified": "2015-01-01T00:00:00Z"}
{"kind": "PolicyBinding", "name": "hammer", "namespace": "hammer", "policyRef": {"namespace": "hammer"}}
"#;
    let set = load(&[("s.json", text)]);
    assert_eq!((set.roles.len(), set.bindings.len()), (2, 7));

    let view = role(&set, RoleKind::ClusterRole, "", "view");
    assert_eq!(
        view.rules,
        vec![PolicyRule {
            verbs: strs(&["get"]),
            api_groups: strs(&["*"]),
            resources: strs(&["*", "-roles"]),
            ..PolicyRule::default()
        }]
    );
    let fat = role(&set, RoleKind::Role, "hammer", "fat");
    assert_eq!(fat.source, Source::new("s.json", 3));
    assert_eq!(
        fat.rules.iter().map(|r| r.deny).collect::<Vec<_>>(),
        vec![true, false, true, false]
    );
    assert_eq!(
        fat.rules[0],
        PolicyRule {
            verbs: strs(&["delete"]),
            api_groups: strs(&["*"]),
            resources: strs(&["DeploymentConfig"]),
            deny: true,
            attribute_restrictions: Some(r#"{"labelsContain":["protected"]}"#.into()),
            // Seed 003's `labelsContain: [k]` translates to an object selector `k Exists`.
            clauses: Some(std::sync::Arc::new(Clauses {
                object_selector: Some(LabelSelector {
                    match_expressions: vec![LabelSelectorRequirement {
                        key: "protected".into(),
                        operator: SelectorOperator::Exists,
                        values: Vec::new(),
                    }],
                    ..LabelSelector::default()
                }),
                ..Clauses::default()
            })),
            ..PolicyRule::default()
        }
    );

    let admins = binding(&set, BindingKind::RoleBinding, "hammer", "admins");
    assert_eq!(admins.source.line, 9);
    assert_eq!(admins.subjects, vec![user("Hubert"), group("g")]);
    assert_eq!(
        admins.role_ref,
        RoleRef {
            kind: RoleKind::ClusterRole,
            name: "admin".into()
        }
    );
    for name in ["local", "local2", "byname"] {
        assert_eq!(
            binding(&set, BindingKind::RoleBinding, "hammer", name).role_ref,
            RoleRef {
                kind: RoleKind::Role,
                name: "fat".into()
            },
            "{name}"
        );
    }
    let editors = binding(&set, BindingKind::RoleBinding, "hammer", "Editors");
    assert_eq!(editors.role_ref.kind, RoleKind::ClusterRole);
    assert_eq!(editors.role_ref.name, "edit");
    for name in ["Kubelets", "own"] {
        let b = binding(&set, BindingKind::ClusterRoleBinding, "", name);
        assert_eq!(
            b.role_ref,
            RoleRef {
                kind: RoleKind::ClusterRole,
                name: "kubelet".into()
            }
        );
    }
}

#[test]
fn seed003_master_namespace_is_an_option() {
    let text = r#"{"kind": "role", "name": "r", "namespace": "root", "rules": []}
{"kind": "role", "name": "r", "namespace": "master", "rules": []}
"#;
    let options = LoadOptions {
        master_namespace: "root".into(),
        ..LoadOptions::default()
    };
    let set = load_sources(&sources(&[("m.json", text)]), &options).unwrap();
    // Canonical order puts cluster-scoped objects first.
    assert_eq!(set.roles[0].kind, RoleKind::ClusterRole);
    assert_eq!(set.roles[1].kind, RoleKind::Role);
    assert_eq!(set.roles[1].namespace, "master");
}

#[test]
fn seed003_errors() {
    let text = r#"{"kind": "role", "name": "a", "namespace": "n", "rules": [], "rule": []}
{"kind": "role", "name": "b", "namespace": "n",
 "rules": [{"verbs": ["get"], "resourceKinds": ["pods"], "deny": "yes", "apiGroups": ["x"]}]}
{"kind": "roleBinding", "name": "c", "namespace": "n", "roleRef": {"namespace": "other", "name": "r"}}
{"kind": "roleBinding", "name": "d", "namespace": "n"}
{"kind": "roleBinding", "name": "e", "namespace": "n", "roleRef": {"name": "r"}, "roleName": "s"}
{"kind": "roleBinding", "name": "f", "namespace": "n", "referencesGlobalRole": true}
{"kind": "role", "name": "g", "rules": []}
{"kind": "Policy", "name": "p", "namespace": "n", "roles": {"x": {}}}
{"kind": "role", "name": "h", "namespace": "n", "verbs": [], "Name": "dup"}
{"kind": "roleBinding", "name": "i", "namespace": "n", "userNames": [""], "roleRef": {"name": "r", "kind": "Role"}}
{"kind": "role", "name": "j", "namespace": "n", "rules": [{"verbs": ["-"], "resourceKinds": []}]}
"#;
    assert_eq!(
        errors(&[("e.json", text)]),
        strs(&[
            "e.json:1: `role` `n/a`: both `rules` and its alias `rule` are set",
            "e.json:2: `role` `n/b`: `rules[0].deny` must be `true`, `false`, `\"true\"` or `\"false\"`, found `yes`",
            "e.json:2: `role` `n/b`: unknown field `rules[0].apiGroups`",
            "e.json:4: `roleBinding` `n/c`: `roleRef.namespace` `other` must be the binding's own namespace `n` or the master namespace `master`",
            "e.json:5: `roleBinding` `n/d`: missing `roleRef` (or `referencesGlobalRole: true` with `roleName`)",
            "e.json:6: `roleBinding` `n/e`: set either `roleRef` or `referencesGlobalRole` with `roleName`, not both",
            "e.json:7: `roleBinding` `n/f`: missing `roleName`",
            "e.json:8: `role` `g`: missing `namespace` (cluster-wide objects live in the master namespace `master`)",
            "e.json:9: `Policy` `n/p`: embedded `roles` are not supported; write each as its own `role` document",
            "e.json:10: `role` `n/h`: duplicate field `Name`: also written as `name`",
            "e.json:10: `role` `n/h`: unknown field `verbs`",
            "e.json:11: `roleBinding` `n/i`: `userNames[0]` is empty",
            "e.json:11: `roleBinding` `n/i`: unknown field `roleRef.kind`",
            "e.json:12: `role` `n/j`: `rules[0].verbs[0]` is a bare `-`, which negates nothing",
            "e.json:12: `role` `n/j`: `rules[0].verbs` has only negated entries, so the rule matches nothing (add `*`)",
            "e.json:12: `role` `n/j`: `rules[0].resourceKinds` must list at least one resource",
        ])
    );
}

#[test]
fn seed003_in_yaml() {
    let text = "kind: role\nname: r\nnamespace: master\nrules:\n  - Verbs: [get]\n    ResourceKinds: [pods]\n    Deny: true\n";
    let set = load(&[("s.yml", text)]);
    assert_eq!(set.roles[0].kind, RoleKind::ClusterRole);
    assert!(set.roles[0].rules[0].deny);
}

// ---- ABAC through the public API -------------------------------------------------------------

#[test]
fn abac_files_in_order_with_sources() {
    let set = load(&[
        ("b.jsonl", "{\"user\":\"bob\"}\n"),
        ("a.jsonl", "\n{\"user\":\"alice\"}\n"),
        ("empty.jsonl", ""),
    ]);
    assert_eq!(
        set.abac
            .iter()
            .map(|r| r.source.to_string())
            .collect::<Vec<_>>(),
        strs(&["b.jsonl:1", "a.jsonl:2"])
    );
}

// ---- parse_manifest --------------------------------------------------------------------------

#[test]
fn parse_manifest_reads_yaml_and_json() {
    let options = LoadOptions::default();
    let yaml = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: a}\n---\nkind: role\nname: b\nnamespace: n\nrules: []\n";
    let objects = parse_manifest("request", yaml, &options).unwrap();
    assert_eq!(
        objects
            .iter()
            .map(|o| (o.kind(), o.namespace(), o.name(), o.source().line))
            .collect::<Vec<_>>(),
        vec![("ClusterRole", "", "a", 1), ("Role", "n", "b", 5)]
    );
    let json = r#"{"kind": "roleBinding", "name": "x", "namespace": "master", "roleName": "r"}
{"kind": "role", "name": "r", "namespace": "master", "rules": []}"#;
    let objects = parse_manifest("request", json, &options).unwrap();
    assert!(
        matches!(&objects[0], PolicyObject::Binding(b) if b.kind == BindingKind::ClusterRoleBinding)
    );
    assert!(matches!(&objects[1], PolicyObject::Role(r) if r.kind == RoleKind::ClusterRole));

    let dup = parse_manifest("m.json", &format!("{json}\n{json}"), &options).unwrap_err();
    assert_eq!(
        dup.to_string(),
        "m.json:3: duplicate `ClusterRoleBinding` `x`: already defined at m.json:1\nm.json:4: duplicate `ClusterRole` `r`: already defined at m.json:2"
    );
    let abac = parse_manifest("p.jsonl", "{}", &options).unwrap_err();
    assert_eq!(
        abac.to_string(),
        "p.jsonl: ABAC lines are not a manifest of roles and bindings"
    );
    assert!(parse_manifest("empty.yaml", "", &options)
        .unwrap()
        .is_empty());
}

// ---- files and directories -------------------------------------------------------------------

const CLUSTER_ROLE: &str =
    "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: NAME}\n";

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(path, text).unwrap();
}

#[test]
fn directories_recurse_in_sorted_order_and_skip_dot_and_unrelated_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(&root.join("b.yaml"), &CLUSTER_ROLE.replace("NAME", "b"));
    write(&root.join("a/z.yml"), &CLUSTER_ROLE.replace("NAME", "az"));
    write(&root.join("a/1.jsonl"), "{\"user\":\"first\"}\n");
    write(&root.join("c.jsonl"), "{\"user\":\"second\"}\n");
    write(
        &root.join("d.JSON"),
        r#"{"kind": "role", "name": "d", "namespace": "master"}"#,
    );
    // Skipped: dot files and directories, other extensions.
    write(&root.join(".b.yaml.swp"), "garbage");
    write(&root.join(".tmp-123.yaml"), "garbage: [");
    write(&root.join(".hidden/x.yaml"), "garbage: [");
    write(&root.join("README.md"), "# not policy");
    write(&root.join("a/notes.txt"), "not policy");
    write(&root.join("e.yaml~"), "garbage: [");

    let set = load_paths(&[root.to_path_buf()], &LoadOptions::default()).unwrap();
    let mut names: Vec<_> = set.roles.iter().map(|r| r.name.as_str()).collect();
    names.sort();
    assert_eq!(names, vec!["az", "b", "d"]);
    assert_eq!(
        set.abac.iter().map(|r| r.user.as_str()).collect::<Vec<_>>(),
        vec!["first", "second"]
    );
    let az = set.roles.iter().find(|r| r.name == "az").unwrap();
    assert_eq!(
        &*az.source.file,
        root.join("a/z.yml").display().to_string().as_str()
    );

    // The same file reached twice is read once.
    let twice = load_paths(
        &[root.to_path_buf(), root.join("b.yaml")],
        &LoadOptions::default(),
    )
    .unwrap();
    assert_eq!(twice, set);
}

#[test]
fn path_errors() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let missing = root.join("missing.yaml");
    let notes = root.join("notes.txt");
    write(&notes, "x");
    let big = root.join("big/big.yaml");
    write(&big, &"#".repeat(MAX_FILE_BYTES as usize + 1));
    let bad_utf8 = root.join("bin.yaml");
    fs::write(&bad_utf8, [b'a', b':', b' ', 0xff, b'\n']).unwrap();
    let hidden = root.join(".explicit.yaml");
    write(&hidden, &CLUSTER_ROLE.replace("NAME", "hidden"));

    let err = load_paths(
        &[
            missing.clone(),
            notes.clone(),
            root.join("big"),
            bad_utf8.clone(),
        ],
        &LoadOptions::default(),
    )
    .unwrap_err();
    let show = |p: &Path| p.display().to_string();
    assert_eq!(
        err.0
            .iter()
            .map(|e| (e.file.clone(), e.line, e.message.clone()))
            .collect::<Vec<_>>(),
        vec![
            (
                show(&missing),
                0,
                "cannot read: no such file or directory (os error 2)".to_string()
            ),
            (
                show(&notes),
                0,
                "unsupported file extension (expected `.yaml`, `.yml`, `.json` or `.jsonl`)"
                    .to_string()
            ),
            (
                show(&big),
                0,
                format!(
                    "file is too large ({} bytes; the limit is 16777216 bytes: raise it with --max-policy-file-bytes)",
                    MAX_FILE_BYTES + 1
                )
            ),
            (
                show(&bad_utf8),
                0,
                "file is not valid utf-8 (invalid byte at offset 3)".to_string()
            ),
        ]
    );

    // A dot file named explicitly is read.
    let set = load_paths(&[hidden], &LoadOptions::default()).unwrap();
    assert_eq!(set.roles[0].name, "hidden");
    // An empty directory, an empty file: an empty policy.
    let empty = root.join("empty");
    fs::create_dir(&empty).unwrap();
    write(&empty.join("e.yaml"), "");
    write(&empty.join("e.json"), "\n");
    assert_eq!(
        load_paths(&[empty], &LoadOptions::default()).unwrap(),
        PolicySet::default()
    );
}

#[test]
fn sources_over_the_limit_are_refused() {
    let big = " ".repeat(MAX_FILE_BYTES as usize + 1);
    assert_eq!(
        errors(&[("big.jsonl", &big)]),
        vec![format!(
            "big.jsonl: file is too large ({} bytes; the limit is 16777216 bytes: raise it with --max-policy-file-bytes)",
            MAX_FILE_BYTES + 1
        )]
    );
}

/// `--max-policy-file-bytes` moves the limit both ways, for files and sources alike.
#[test]
fn the_file_size_limit_is_an_option() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("roles.yaml");
    let text = CLUSTER_ROLE.replace("NAME", "r");
    write(&file, &text);
    let small = LoadOptions {
        max_file_bytes: 10,
        ..LoadOptions::default()
    };
    let err = load_paths(std::slice::from_ref(&file), &small).unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "file is too large ({} bytes; the limit is 10 bytes: raise it with --max-policy-file-bytes)",
            text.len()
        )),
        "{err}"
    );
    assert!(load_sources(&sources(&[("m.yaml", &text)]), &small).is_err());
    let large = LoadOptions {
        max_file_bytes: MAX_FILE_BYTES * 4,
        ..LoadOptions::default()
    };
    assert_eq!(load_paths(&[file], &large).unwrap().roles[0].name, "r");
    let padded = format!("{text}{}", "#".repeat(MAX_FILE_BYTES as usize));
    assert_eq!(
        load_sources(&sources(&[("big.yaml", &padded)]), &large)
            .unwrap()
            .roles[0]
            .name,
        "r"
    );
}

// ---- the shipped default policy --------------------------------------------------------------

#[test]
fn shipped_policy_directory_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("policy");
    let set = match load_paths(&[dir], &LoadOptions::default()) {
        Ok(set) => set,
        Err(e) => panic!("policy/ does not load:\n{e}"),
    };
    assert_eq!(set.roles.len(), 10, "{:#?}", set.roles);
    assert_eq!(set.bindings.len(), 8, "{:#?}", set.bindings);
    assert_eq!(set.abac.len(), 10);

    let cluster_roles: Vec<_> = set
        .roles
        .iter()
        .filter(|r| r.kind == RoleKind::ClusterRole)
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(
        cluster_roles,
        vec![
            "admin",
            "cluster-admin",
            "edit",
            "kubelet",
            "secret-reader",
            "view"
        ]
    );
    let fat = role(&set, RoleKind::Role, "hammer", "fatFingeredEditor");
    assert!(fat.rules[0].deny);
    assert_eq!(
        fat.rules[0].attribute_restrictions.as_deref(),
        Some(r#"{"labelsContain":["protected"]}"#)
    );
    let read_pods = binding(&set, BindingKind::RoleBinding, "default", "read-pods");
    assert_eq!(read_pods.subjects, vec![user("jane")]);
    assert_eq!(read_pods.role_ref.kind, RoleKind::Role);
    let editors = binding(&set, BindingKind::RoleBinding, "hammer", "Editors");
    assert_eq!(editors.role_ref.kind, RoleKind::ClusterRole);
    let kubelets = binding(&set, BindingKind::ClusterRoleBinding, "", "Kubelets");
    assert_eq!(
        kubelets.subjects,
        vec![user("kubelet-01"), user("kubelet-02")]
    );

    // ABAC: seed 001 (v1beta1) first, then seed 002 (v0), in line order.
    let abac: Vec<(&str, &str, bool, &str, &str, &str, &str)> = set
        .abac
        .iter()
        .map(|r| {
            (
                r.user.as_str(),
                r.group.as_str(),
                r.readonly,
                r.api_group.as_str(),
                r.namespace.as_str(),
                r.resource.as_str(),
                r.non_resource_path.as_str(),
            )
        })
        .collect();
    assert_eq!(
        abac,
        vec![
            ("alice", "", false, "*", "*", "*", ""),
            ("kubelet", "", true, "", "*", "pods", ""),
            ("kubelet", "", false, "", "*", "events", ""),
            ("bob", "", true, "", "projectCaribou", "pods", ""),
            ("", "system:authenticated", true, "", "", "", "*"),
            (
                "system:serviceaccount:kube-system:default",
                "",
                false,
                "*",
                "*",
                "*",
                ""
            ),
            ("alice", "", false, "*", "*", "*", "*"),
            ("kubelet", "", true, "*", "*", "pods", ""),
            ("kubelet", "", false, "*", "*", "events", ""),
            ("bob", "", true, "*", "projectCaribou", "pods", ""),
        ]
    );
    assert!(set.abac[0].source.file.ends_with("seed001-abac.jsonl"));
    assert_eq!(set.abac[0].source.line, 3);
}

/// A FieldPolicy loads from policy files (docs/policy.md §5) and from an admin manifest (which etcd
/// mode, having no files, needs), and is unique by name.
#[test]
fn field_policies_load_from_files_and_manifests() {
    let text = "apiVersion: authzd.io/v1alpha1\nkind: FieldPolicy\nmetadata: {name: fp}\nspec:\n  ignore: [\".status\"]\n  sets: [\".metadata.finalizers\"]\n  keyedLists: [{path: \".spec.containers\", keys: [name]}]\n";
    let set = load(&[("fp.yaml", text)]);
    assert_eq!(set.field_policies.len(), 1);
    assert_eq!(set.field_policies[0].name, "fp");
    assert_eq!(
        set.field_policies[0].keyed_lists[0].1,
        vec!["name".to_string()]
    );
    let config = set.diff_config();
    assert!(config.ignored.iter().any(|p| p.text() == ".status"));
    assert_eq!(config.lists[0].0.text(), ".metadata.finalizers");
    let objects = parse_manifest("m.yaml", text, &LoadOptions::default()).unwrap();
    match objects.as_slice() {
        [PolicyObject::FieldPolicy(policy)] => assert_eq!(
            crate::policy::model::FieldPolicy {
                source: Default::default(),
                ..policy.clone()
            },
            crate::policy::model::FieldPolicy {
                source: Default::default(),
                ..set.field_policies[0].clone()
            }
        ),
        other => panic!("{other:?}"),
    }
    let slashed = parse_manifest(
        "m.yaml",
        &text.replace("name: fp", "name: a/b"),
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert!(
        slashed.to_string().contains("may not contain `/`"),
        "{slashed}"
    );
    let doubled = parse_manifest(
        "m.yaml",
        &format!("{text}---\n{text}"),
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert!(
        doubled.to_string().contains("duplicate `FieldPolicy` `fp`"),
        "{doubled}"
    );
    let twice = load_sources(
        &[
            ("a.yaml".into(), text.into()),
            ("b.yaml".into(), text.into()),
        ],
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert!(
        twice.to_string().contains("duplicate FieldPolicy `fp`"),
        "{twice}"
    );
}

/// `spec.protected`: a path alone protects it on every resource; `resources` names
/// `resource` (core), `resource.group` or `*`; and a protected path applies to writes only.
#[test]
fn field_policy_protected_paths_load_and_apply_to_writes_of_their_resources() {
    use crate::request::{ActionRef, ResourceRef};
    let text = "apiVersion: authzd.io/v1alpha1\nkind: FieldPolicy\nmetadata: {name: fp}\nspec:\n  protected:\n    - \".metadata.finalizers\"\n    - {path: \".data\", resources: [secrets, \"widgets.example.com\"]}\n";
    let config = load(&[("fp.yaml", text)]).diff_config();
    let action = |verb: &'static str, group: &'static str, resource: &'static str| {
        ActionRef::Resource(ResourceRef {
            namespace: "ns",
            verb,
            group,
            version: "v1",
            resource,
            subresource: "",
            name: "x",
        })
    };
    let texts = |a| -> Vec<&str> { config.protected_for(a).iter().map(|p| p.text()).collect() };
    assert_eq!(
        texts(action("update", "", "secrets")),
        [".metadata.finalizers", ".data"]
    );
    assert_eq!(
        texts(action("create", "example.com", "widgets")),
        [".metadata.finalizers", ".data"]
    );
    assert_eq!(
        texts(action("patch", "", "configmaps")),
        [".metadata.finalizers"]
    );
    assert_eq!(
        texts(action("patch", "apps", "secrets")),
        [".metadata.finalizers"]
    );
    assert!(texts(action("delete", "", "secrets")).is_empty());
    assert!(texts(action("get", "", "secrets")).is_empty());
    assert!(config.protects(action("update", "", "pods")));
    assert!(!config.protects(action("list", "", "pods")));
    assert!(!crate::policy::model::PolicySet::default()
        .diff_config()
        .protects(action("update", "", "pods")));
    let bad = "apiVersion: authzd.io/v1alpha1\nkind: FieldPolicy\nmetadata: {name: fp}\nspec:\n  protected:\n    - {path: \".data\"}\n    - \"data\"\n";
    let err = load_sources(&[("bad.yaml".into(), bad.into())], &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`spec.protected[0].resources` must name at least one resource"),
        "{err}"
    );
    assert!(
        err.contains("`spec.protected[1].path` `data` must start with"),
        "{err}"
    );
}

const CHANGE_GATE: &str = r#"apiVersion: authzd.io/v1alpha1
kind: ChangeGate
metadata: {name: guard-rails}
spec:
  rules:
  - name: admins-keep-everything
    type: NeverRemove
    subjects: [{kind: Group, name: platform-admins}, {kind: ServiceAccount, namespace: vault, name: vault}]
    access: [{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}]
  - name: secrets
    type: NeverGrantOutside
    subjects: [{kind: User, name: breakglass}]
    namespaces: ["", vault]
    access:
    - {apiGroups: [""], resources: [secrets], verbs: [get]}
    - {nonResourceURLs: ["/debug/*"], verbs: [get]}
"#;

/// A ChangeGate is read with every field: rule types, subjects as bindings name them, the
/// namespaces (all by default) and the access rules.
#[test]
fn change_gates_are_read_with_every_field() {
    use crate::policy::model::GateRuleKind;
    let set = load(&[("gate.yaml", CHANGE_GATE)]);
    assert_eq!(set.gates.len(), 1);
    let gate = &set.gates[0];
    assert_eq!(gate.name, "guard-rails");
    assert_eq!(gate.source.line, 1);
    let [keep, secrets] = &gate.rules[..] else {
        panic!("two rules: {:?}", gate.rules)
    };
    assert_eq!(keep.kind, GateRuleKind::NeverRemove);
    assert_eq!(keep.namespaces, strs(&["*"]));
    assert_eq!(keep.subjects[0], group("platform-admins"));
    assert_eq!(
        keep.subjects[1].user_name(""),
        Some("system:serviceaccount:vault:vault".into())
    );
    assert_eq!(secrets.kind, GateRuleKind::NeverGrantOutside);
    assert_eq!(secrets.namespaces, strs(&["", "vault"]));
    assert_eq!(secrets.access.len(), 2);
    assert_eq!(secrets.access[1].non_resource_urls, strs(&["/debug/*"]));
}

/// What a gate cannot mean is refused with its line: an unknown type, a deny or a content
/// clause in `access`, a rule without access, a NeverRemove protecting nobody, two rules of
/// one name, a ServiceAccount without its namespace.
#[test]
fn change_gates_that_mean_nothing_are_refused() {
    let cases = [
        ("type: NeverRemove", "type: NeverRemoved", "`spec.rules[0].type` must be"),
        (
            "access: [{apiGroups: [\"*\"], resources: [\"*\"], verbs: [\"*\"]}]",
            "access: [{apiGroups: [\"*\"], resources: [\"*\"], verbs: [\"*\"], deny: true}]",
            "`spec.rules[0].access[0].deny`",
        ),
        (
            "access: [{apiGroups: [\"*\"], resources: [\"*\"], verbs: [\"*\"]}]",
            "access: []",
            "`spec.rules[0].access` must hold at least one rule",
        ),
        (
            "subjects: [{kind: Group, name: platform-admins}, {kind: ServiceAccount, namespace: vault, name: vault}]",
            "subjects: []",
            "`spec.rules[0].subjects` must name at least one subject",
        ),
        ("name: secrets", "name: admins-keep-everything", "names an earlier rule"),
        (
            "{kind: ServiceAccount, namespace: vault, name: vault}",
            "{kind: ServiceAccount, name: vault}",
            "needs a `namespace`",
        ),
    ];
    for (from, to, expected) in cases {
        let text = CHANGE_GATE.replacen(from, to, 1);
        assert_ne!(text, CHANGE_GATE, "{from}");
        let found = errors(&[("gate.yaml", &text)]);
        assert!(
            found
                .iter()
                .any(|e| e.contains(expected) && e.starts_with("gate.yaml:")),
            "{expected}: {found:?}"
        );
    }
}

/// A ChangeGate renders to a manifest that loads back to itself (the store writes it so).
#[test]
fn change_gates_round_trip() {
    let set = load(&[("gate.yaml", CHANGE_GATE)]);
    let text = crate::policy::render::policy_to_multi_yaml(&set);
    let back = load(&[("back.yaml", &text)]);
    let strip = |g: &crate::policy::model::ChangeGate| crate::policy::model::ChangeGate {
        source: Default::default(),
        ..g.clone()
    };
    assert_eq!(strip(&back.gates[0]), strip(&set.gates[0]));
}

/// A `List` (`kubectl get ... -o yaml`) may hold authzd's own kinds: each is read by its own
/// reader, as at the top of a document.
#[test]
fn lists_hold_change_gates_and_field_policies() {
    let list = format!(
        "apiVersion: v1\nkind: List\nitems:\n{}\n- apiVersion: authzd.io/v1alpha1\n  kind: FieldPolicy\n  metadata: {{name: f}}\n  spec: {{ignore: [\".status\"]}}\n",
        CHANGE_GATE
            .lines()
            .enumerate()
            .map(|(i, l)| if i == 0 { format!("- {l}") } else { format!("  {l}") })
            .collect::<Vec<_>>()
            .join("\n")
    );
    let set = load(&[("list.yaml", &list)]);
    assert_eq!(set.gates.len(), 1, "{list}");
    assert_eq!(set.gates[0].rules.len(), 2);
    assert_eq!(set.field_policies.len(), 1);
    let broken = list.replacen("type: NeverRemove", "type: Nope", 1);
    let found = errors(&[("list.yaml", &broken)]);
    assert!(
        found
            .iter()
            .any(|e| e.starts_with("list.yaml:") && e.contains("`spec.rules[0].type`")),
        "{found:?}"
    );
}
