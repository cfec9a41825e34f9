//! ABAC policy files (JSON lines), as upstream's `pkg/auth/authorizer/abac` reads them, with
//! the conversions of `pkg/apis/abac/{v0,v1beta1}/conversion.go` (see
//! `docs/semantics.md` §3).
//!
//! Each line is trimmed; empty lines and lines starting with `#` are skipped. A line is:
//!
//! * `{"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy", "spec": {…}}`;
//! * `{"apiVersion": "abac.authorization.kubernetes.io/v0", "kind": "Policy", "user": …}`;
//! * an unversioned (v0) line `{user, group, readonly, resource, namespace}`, plus seed 002's
//!   early keys `kind` (= `resource`) and `ns` (= `namespace`).
//!
//! Unlike upstream, which falls back to v0 whenever a line fails to decode and ignores unknown
//! fields, any unknown field, apiVersion or kind is an error: in v0 an unset field means "all",
//! so a typo'd `usr` would grant every authenticated user what was meant for one.

use crate::policy::model::{AbacRule, Source};

use super::node::{parse_json_value, Fields, Node, Problems};
use super::{Cx, LoadError};

/// The group every authenticated user has; what v0's "anyone" converts to.
pub(crate) const ALL_AUTHENTICATED: &str = "system:authenticated";
const V1BETA1: &str = "abac.authorization.kubernetes.io/v1beta1";
const V0: &str = "abac.authorization.kubernetes.io/v0";

/// The fields of a v0 policy as written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct V0Policy {
    pub user: String,
    pub group: String,
    pub readonly: bool,
    pub resource: String,
    pub namespace: String,
}

/// Upstream `Convert_v0_Policy_To_abac_Policy`.
pub(crate) fn convert_v0(p: &V0Policy, source: Source) -> AbacRule {
    let mut rule = AbacRule {
        user: p.user.clone(),
        group: p.group.clone(),
        readonly: p.readonly,
        namespace: p.namespace.clone(),
        resource: p.resource.clone(),
        source,
        ..AbacRule::default()
    };
    // Unset user and group match all authenticated subjects.
    if p.user.is_empty() && p.group.is_empty() {
        rule.group = ALL_AUTHENTICATED.to_owned();
    }
    // A user or group of `*` matches all authenticated subjects.
    if p.user == "*" || p.group == "*" {
        rule.group = ALL_AUTHENTICATED.to_owned();
        rule.user.clear();
    }
    if p.namespace.is_empty() {
        rule.namespace = "*".to_owned();
    }
    if p.resource.is_empty() {
        rule.resource = "*".to_owned();
    }
    // Every v0 rule matches all API groups.
    rule.api_group = "*".to_owned();
    // Namespace and resource both unset also allow non-resource paths.
    if p.namespace.is_empty() && p.resource.is_empty() {
        rule.non_resource_path = "*".to_owned();
    }
    rule
}

/// Upstream v1beta1 conversion: verbatim, except that a user or group of `*` becomes the group
/// `system:authenticated` with the user cleared.
pub(crate) fn convert_v1beta1(mut rule: AbacRule) -> AbacRule {
    if rule.user == "*" || rule.group == "*" {
        rule.group = ALL_AUTHENTICATED.to_owned();
        rule.user.clear();
    }
    rule
}

/// Reads every line of an ABAC file into `cx`.
pub(super) fn parse_lines(text: &str, cx: &mut Cx<'_>) {
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
    for (i, raw) in text.lines().enumerate() {
        let line_no = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut p = Problems::default();
        match parse_json_value(line) {
            Ok(node) => {
                if let Some(rule) = parse_policy(&node, cx.source(line_no), &mut p) {
                    if p.0.is_empty() {
                        cx.abac.push(rule);
                    }
                }
            }
            Err(e) => p.push(line_no, e.message),
        }
        for (_, message) in p.0 {
            cx.errors.push(LoadError {
                file: cx.file.to_string(),
                line: line_no,
                message,
            });
        }
    }
}

fn check_kind(f: &mut Fields<'_>, line: u32, p: &mut Problems) {
    let kind = f.string("kind", p);
    if kind.is_empty() {
        p.push(line, "missing `kind` (must be `Policy`)");
    } else if kind != "Policy" {
        p.push(line, format!("`kind` must be `Policy`, found `{kind}`"));
    }
}

fn parse_policy(node: &Node, source: Source, p: &mut Problems) -> Option<AbacRule> {
    let mut f = Fields::new(node, "", false, p)?;
    let line = node.line;
    let api_version = f.string("apiVersion", p);
    let rule = match api_version.as_str() {
        V1BETA1 => {
            check_kind(&mut f, line, p);
            let spec = f.take("spec", p);
            let rule = match spec {
                None => {
                    p.push(line, "missing `spec`");
                    None
                }
                Some(spec) => {
                    let mut s = Fields::new(spec, "spec", false, p)?;
                    let rule = AbacRule {
                        user: s.string("user", p),
                        group: s.string("group", p),
                        readonly: s.boolean("readonly", p),
                        api_group: s.string("apiGroup", p),
                        namespace: s.string("namespace", p),
                        resource: s.string("resource", p),
                        non_resource_path: s.string("nonResourcePath", p),
                        source,
                    };
                    s.finish(p);
                    Some(convert_v1beta1(rule))
                }
            };
            f.finish(p);
            rule
        }
        V0 | "" => {
            if api_version == V0 {
                check_kind(&mut f, line, p);
            }
            let mut v0 = V0Policy {
                user: f.string("user", p),
                group: f.string("group", p),
                readonly: f.boolean("readonly", p),
                resource: f.string("resource", p),
                namespace: f.string("namespace", p),
            };
            if api_version.is_empty() {
                // Seed 002's early keys.
                for (early, current, value) in [
                    ("kind", "resource", &mut v0.resource),
                    ("ns", "namespace", &mut v0.namespace),
                ] {
                    if f.has(early) {
                        if f.has(current) {
                            p.push(
                                line,
                                format!(
                                    "`{early}` and `{current}` are the same field; set only one"
                                ),
                            );
                        }
                        *value = f.string(early, p);
                    }
                }
            }
            f.finish(p);
            Some(convert_v0(&v0, source))
        }
        other => {
            p.push(
                line,
                format!("unsupported apiVersion `{other}` (expected `{V1BETA1}` or `{V0}`)"),
            );
            None
        }
    };
    rule
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::load::LoadOptions;

    fn v0(user: &str, group: &str, readonly: bool, resource: &str, namespace: &str) -> V0Policy {
        V0Policy {
            user: user.into(),
            group: group.into(),
            readonly,
            resource: resource.into(),
            namespace: namespace.into(),
        }
    }

    /// (user, group, readonly, apiGroup, namespace, resource, nonResourcePath)
    fn expect(r: &AbacRule) -> (&str, &str, bool, &str, &str, &str, &str) {
        (
            &r.user,
            &r.group,
            r.readonly,
            &r.api_group,
            &r.namespace,
            &r.resource,
            &r.non_resource_path,
        )
    }

    const AUTH: &str = ALL_AUTHENTICATED;

    /// Upstream `v0/conversion_test.go`, plus the combinations the rules imply.
    #[test]
    fn v0_conversion_table() {
        let s = Source::default;
        let cases = [
            (
                "empty",
                v0("", "", false, "", ""),
                ("", AUTH, false, "*", "*", "*", "*"),
            ),
            (
                "user",
                v0("bob", "", false, "", ""),
                ("bob", "", false, "*", "*", "*", "*"),
            ),
            (
                "group",
                v0("", "dev", false, "", ""),
                ("", "dev", false, "*", "*", "*", "*"),
            ),
            (
                "user *",
                v0("*", "", false, "", ""),
                ("", AUTH, false, "*", "*", "*", "*"),
            ),
            (
                "group *",
                v0("", "*", false, "", ""),
                ("", AUTH, false, "*", "*", "*", "*"),
            ),
            (
                "user * with group",
                v0("*", "dev", false, "", ""),
                ("", AUTH, false, "*", "*", "*", "*"),
            ),
            (
                "user with group *",
                v0("bob", "*", false, "", ""),
                ("", AUTH, false, "*", "*", "*", "*"),
            ),
            (
                "user and group",
                v0("bob", "dev", false, "", ""),
                ("bob", "dev", false, "*", "*", "*", "*"),
            ),
            (
                "namespace",
                v0("", "", false, "", "foo"),
                ("", AUTH, false, "*", "foo", "*", ""),
            ),
            (
                "resource",
                v0("", "", false, "pods", ""),
                ("", AUTH, false, "*", "*", "pods", ""),
            ),
            (
                "both",
                v0("", "", false, "pods", "foo"),
                ("", AUTH, false, "*", "foo", "pods", ""),
            ),
            (
                "readonly",
                v0("", "", true, "", ""),
                ("", AUTH, true, "*", "*", "*", "*"),
            ),
        ];
        for (name, input, want) in cases {
            assert_eq!(expect(&convert_v0(&input, s())), want, "{name}");
        }
    }

    #[test]
    fn v1beta1_conversion_only_rewrites_stars() {
        let rule = |user: &str, group: &str| AbacRule {
            user: user.into(),
            group: group.into(),
            ..AbacRule::default()
        };
        let cases = [
            ("empty", rule("", ""), ("", "")),
            ("user", rule("bob", ""), ("bob", "")),
            ("user *", rule("*", ""), ("", AUTH)),
            ("group *", rule("", "*"), ("", AUTH)),
            ("user * group", rule("*", "dev"), ("", AUTH)),
            ("user group *", rule("bob", "*"), ("", AUTH)),
        ];
        for (name, input, (user, group)) in cases {
            let out = convert_v1beta1(input);
            assert_eq!(
                (out.user.as_str(), out.group.as_str()),
                (user, group),
                "{name}"
            );
            assert_eq!(
                (
                    out.api_group.as_str(),
                    out.namespace.as_str(),
                    out.resource.as_str()
                ),
                ("", "", ""),
                "{name}: empty fields stay empty"
            );
        }
    }

    fn load(text: &str) -> Result<Vec<AbacRule>, Vec<String>> {
        let options = LoadOptions::default();
        let mut cx = Cx::new("p.jsonl", &options);
        parse_lines(text, &mut cx);
        if cx.errors.is_empty() {
            Ok(cx.abac)
        } else {
            Err(cx.errors.iter().map(|e| e.to_string()).collect())
        }
    }

    #[test]
    fn lines_skip_blank_and_comments_and_keep_line_numbers() {
        let text = "\n# comment\n   \n  {\"user\":\"alice\"}  \r\n\t# indented comment\n{\"apiVersion\":\"abac.authorization.kubernetes.io/v1beta1\",\"kind\":\"Policy\",\"spec\":{\"user\":\"*\",\"readonly\":true,\"nonResourcePath\":\"*\"}}\n";
        let rules = load(text).unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].source, Source::new("p.jsonl", 4));
        assert_eq!(expect(&rules[0]), ("alice", "", false, "*", "*", "*", "*"));
        assert_eq!(rules[1].source.line, 6);
        assert_eq!(expect(&rules[1]), ("", AUTH, true, "", "", "", "*"));
        assert_eq!(load("").unwrap(), vec![]);
        assert_eq!(load("\n\n# only comments\n").unwrap(), vec![]);
    }

    #[test]
    fn v1beta1_fields() {
        let rules = load(r#"{"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy","spec":{"user":"bob","group":"g","readonly":true,"apiGroup":"apps","namespace":"ns","resource":"deployments","nonResourcePath":"/x"}}"#).unwrap();
        assert_eq!(
            expect(&rules[0]),
            ("bob", "g", true, "apps", "ns", "deployments", "/x")
        );
    }

    #[test]
    fn seed002_early_keys() {
        let rules = load(
            "{\"user\":\"bob\", \"kind\": \"pods\", \"readonly\": true, \"ns\": \"projectCaribou\"}\n{\"kind\":\"Policy\"}",
        )
        .unwrap();
        assert_eq!(
            expect(&rules[0]),
            ("bob", "", true, "*", "projectCaribou", "pods", "")
        );
        assert_eq!(expect(&rules[1]), ("", AUTH, false, "*", "*", "Policy", ""));
    }

    #[test]
    fn explicit_v0() {
        let rules = load(r#"{"apiVersion":"abac.authorization.kubernetes.io/v0","kind":"Policy","user":"bob","namespace":"ns"}"#).unwrap();
        assert_eq!(expect(&rules[0]), ("bob", "", false, "*", "ns", "*", ""));
    }

    #[test]
    fn errors_name_the_line_and_all_are_reported() {
        let text = [
            r#"{"usr":"alice"}"#,
            r#"{"user":"bob","kind":"pods","resource":"pods"}"#,
            r#"{"user":"bob","ns":"a","namespace":"a"}"#,
            r#"{"apiVersion":"abac.authorization.kubernetes.io/v2","kind":"Policy","spec":{}}"#,
            r#"{"apiVersion":"abac.authorization.kubernetes.io/v1beta1","spec":{"user":"a"}}"#,
            r#"{"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy","spec":{"user":"a","verb":"get"}}"#,
            r#"{"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy"}"#,
            r#"{"user":"a","readonly":"yes"}"#,
            r#"{"user":"a",}"#,
            r#"["user"]"#,
            r#"{"apiVersion":"abac.authorization.kubernetes.io/v0","kind":"Policy","ns":"x"}"#,
            r#"{"apiVersion":"abac.authorization.kubernetes.io/v0","user":"x"}"#,
            r#"{"user":"a","user":"b"}"#,
        ]
        .join("\n");
        let errors = load(&text).unwrap_err();
        assert_eq!(
            errors,
            vec![
                "p.jsonl:1: unknown field `usr`",
                "p.jsonl:2: `kind` and `resource` are the same field; set only one",
                "p.jsonl:3: `ns` and `namespace` are the same field; set only one",
                "p.jsonl:4: unsupported apiVersion `abac.authorization.kubernetes.io/v2` (expected `abac.authorization.kubernetes.io/v1beta1` or `abac.authorization.kubernetes.io/v0`)",
                "p.jsonl:5: missing `kind` (must be `Policy`)",
                "p.jsonl:6: unknown field `spec.verb`",
                "p.jsonl:7: missing `spec`",
                "p.jsonl:8: `readonly` must be a boolean, found a string",
                "p.jsonl:9: invalid json: trailing comma (column 13)",
                "p.jsonl:10: a document must be an object, found a list",
                "p.jsonl:11: unknown field `ns`",
                "p.jsonl:12: missing `kind` (must be `Policy`)",
                "p.jsonl:13: invalid json: duplicate field `user` (column 18)",
            ]
        );
    }
}
