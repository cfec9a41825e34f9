//! What the proxy asks about a request, as kube-rbac-proxy's `GetRequestAttributes`
//! (`pkg/proxy/proxy.go` in brancz/kube-rbac-proxy) builds it, and its static authorizer
//! (`pkg/authz/auth.go`):
//!
//! * the verb from the HTTP method: POST `create`, GET `get`, PUT `update`, PATCH `patch`,
//!   DELETE `delete`, any other `*`;
//! * without `resourceAttributes`: the non-resource URL of the request's clean path
//!   (`request_path.rs`: percent-decoded, as Go's `URL.Path` is, and clean);
//! * with them and no `rewrites`: those attributes, as written;
//! * with `rewrites`: one resource request per value of the query parameter and then of the
//!   header, each field a template whose `{{ .Value }}` is that value; no value at all asks
//!   nothing, which the proxy answers 400.
//!
//! A value the proxy cannot read is never skipped, for the upstream may read it: Go's
//! `url.ParseQuery` drops a pair with a bad escape or a `;` and `Header.Values` hands over
//! bytes whatever they are, so kube-rbac-proxy authorizes the values it could read and passes
//! the others on unchecked. Here a header value that is not UTF-8, or, with a rewrite by query
//! parameter, a query pair with a `;` (a separator to some servers), a key that does not
//! decode, or a value of the parameter that does not decode to UTF-8 refuses the request (400).

use http::{HeaderMap, Method};

use super::config_file::{Authorization, ResourceAttributes, StaticRule};
use super::request_path::CleanPath;
use crate::request::{Action, NonResourceAttributes, ResourceAttributes as Resource, UserInfo};

/// A rewrite value the proxy could not read (answered 400 with this text).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnreadableValue {
    #[error("the query pair `{0}` holds a `;`, which some servers read as a separator")]
    QuerySemicolon(String),
    #[error("the query pair `{0}` does not decode to UTF-8 text")]
    QueryPair(String),
    #[error("a value of the header `{0}` is not UTF-8")]
    Header(String),
}

/// kube-rbac-proxy's verb for `method`.
pub fn verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "*",
    }
}

/// The actions asked about for one request (all must be allowed).
#[derive(Clone, Debug, Default)]
pub struct RequestAttributes {
    authorization: Authorization,
    templates: Option<[Template; 6]>,
}

impl RequestAttributes {
    pub fn new(authorization: Authorization) -> Result<Self, String> {
        let templates = match (&authorization.rewrites, &authorization.resource_attributes) {
            (Some(_), Some(attributes)) => Some(templates(attributes)?),
            _ => None,
        };
        Ok(RequestAttributes {
            authorization,
            templates,
        })
    }

    /// The actions asked about for a request for `path` (its clean path) with `query` and
    /// `headers`, or the value that could not be read.
    pub fn actions(
        &self,
        method: &Method,
        path: &CleanPath,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> Result<Vec<Action>, UnreadableValue> {
        let verb = verb(method).to_string();
        let Some(attributes) = &self.authorization.resource_attributes else {
            return Ok(vec![Action::NonResource(NonResourceAttributes {
                path: path.decoded().to_string(),
                verb,
            })]);
        };
        let (Some(rewrites), Some(templates)) = (&self.authorization.rewrites, &self.templates)
        else {
            return Ok(vec![Action::Resource(resource(attributes, verb))]);
        };
        let mut values = Vec::new();
        if let Some(parameter) = rewrites
            .by_query_parameter
            .as_ref()
            .filter(|p| !p.name.is_empty())
        {
            values.extend(query_values(query.unwrap_or_default(), &parameter.name)?);
        }
        if let Some(header) = rewrites
            .by_http_header
            .as_ref()
            .filter(|h| !h.name.is_empty())
        {
            for value in headers.get_all(header.name.as_str()) {
                let text = std::str::from_utf8(value.as_bytes())
                    .map_err(|_| UnreadableValue::Header(header.name.clone()))?;
                values.push(text.to_string());
            }
        }
        Ok(values
            .iter()
            .map(|value| {
                let [namespace, group, version, resource, subresource, name] =
                    templates.each_ref().map(|t| t.expand(value));
                Action::Resource(Resource {
                    namespace,
                    verb: verb.clone(),
                    group,
                    version,
                    resource,
                    subresource,
                    name,
                })
            })
            .collect())
    }

    /// Whether a `static` entry allows `action` for `user` (kube-rbac-proxy asks these before
    /// the authorizer, and an allow here is final).
    pub fn statically_allowed(&self, user: &UserInfo, action: &Action) -> bool {
        self.authorization
            .static_rules
            .iter()
            .any(|rule| static_matches(rule, user, action))
    }
}

fn resource(attributes: &ResourceAttributes, verb: String) -> Resource {
    Resource {
        namespace: attributes.namespace.clone(),
        verb,
        group: attributes.api_group.clone(),
        version: attributes.api_version.clone(),
        resource: attributes.resource.clone(),
        subresource: attributes.subresource.clone(),
        name: attributes.name.clone(),
    }
}

fn templates(attributes: &ResourceAttributes) -> Result<[Template; 6], String> {
    let [a, b, c, d, e, f] = attributes.fields().map(|(field, value)| {
        Template::parse(value)
            .map_err(|problem| format!("authorization.resourceAttributes.{field}: {problem}"))
    });
    Ok([a?, b?, c?, d?, e?, f?])
}

/// `StaticAuthorizationConfig.Matches`: every non-empty field equal, and the request kind.
fn static_matches(rule: &StaticRule, user: &UserInfo, action: &Action) -> bool {
    let any_or = |want: &str, have: &str| want.is_empty() || want == have;
    if !any_or(&rule.user.name, &user.name) || !any_or(&rule.verb, action.verb()) {
        return false;
    }
    match action {
        Action::Resource(r) => {
            rule.resource_request
                && any_or(&rule.namespace, &r.namespace)
                && any_or(&rule.api_group, &r.group)
                && any_or(&rule.resource, &r.resource)
                && any_or(&rule.subresource, &r.subresource)
                && any_or(&rule.name, &r.name)
                && rule.path.is_empty()
        }
        Action::NonResource(n) => {
            !rule.resource_request
                && [
                    &rule.namespace,
                    &rule.api_group,
                    &rule.resource,
                    &rule.subresource,
                    &rule.name,
                ]
                .iter()
                .all(|f| f.is_empty())
                && any_or(&rule.path, &n.path)
        }
    }
}

/// A field of `resourceAttributes` under rewrites: Go `text/template` text in which the only
/// action is `{{ .Value }}` (with `{{-`/`-}}` trimming); anything else is refused at startup.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Value,
}

impl Template {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        let mut trim_next = false;
        while let Some(open) = rest.find("{{") {
            let mut literal = &rest[..open];
            if trim_next {
                literal = literal.trim_start();
            }
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .ok_or_else(|| format!("`{text}`: an action `{{{{` is not closed"))?;
            let mut action = &after[..close];
            if let Some(trimmed) = action.strip_prefix('-') {
                literal = literal.trim_end();
                action = trimmed;
            }
            trim_next = false;
            if let Some(trimmed) = action.strip_suffix('-') {
                trim_next = true;
                action = trimmed;
            }
            if action.trim() != ".Value" {
                return Err(format!(
                    "`{text}`: only `{{{{ .Value }}}}` can be expanded, not `{{{{{action}}}}}`"
                ));
            }
            if !literal.is_empty() {
                pieces.push(Piece::Text(literal.to_string()));
            }
            pieces.push(Piece::Value);
            rest = &after[close + 2..];
        }
        let literal = if trim_next { rest.trim_start() } else { rest };
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal.to_string()));
        }
        Ok(Template(pieces))
    }

    pub fn expand(&self, value: &str) -> String {
        self.0
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) => text.as_str(),
                Piece::Value => value,
            })
            .collect()
    }
}

/// The values of `name` in a query string, as Go's `url.ParseQuery` reads them (`+` is a
/// space, escapes decoded), or the first pair it would drop that could hold one: a pair with
/// a `;`, a key that does not decode, or a value of `name` that does not decode to UTF-8.
fn query_values(query: &str, name: &str) -> Result<Vec<String>, UnreadableValue> {
    let mut values = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        if pair.contains(';') {
            return Err(UnreadableValue::QuerySemicolon(pair.to_string()));
        }
        let unreadable = || UnreadableValue::QueryPair(pair.to_string());
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if try_percent_decode(key, true).ok_or_else(unreadable)? == name {
            values.push(try_percent_decode(value, true).ok_or_else(unreadable)?);
        }
    }
    Ok(values)
}

fn try_percent_decode(text: &str, plus_is_space: bool) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::config_file::parse;

    fn attributes(config: &str) -> RequestAttributes {
        RequestAttributes::new(parse(config).unwrap().authorization.unwrap_or_default()).unwrap()
    }

    fn path(text: &str) -> CleanPath {
        CleanPath::new(text).unwrap()
    }

    #[test]
    fn without_resource_attributes_the_clean_path_is_asked_about() {
        let actions = attributes("")
            .actions(
                &Method::HEAD,
                &path("/x/../me%74rics"),
                Some("x=1"),
                &HeaderMap::new(),
            )
            .unwrap();
        assert_eq!(
            actions,
            [Action::NonResource(NonResourceAttributes {
                path: "/metrics".into(),
                verb: "*".into()
            })]
        );
    }

    #[test]
    fn rewrites_ask_once_per_value_of_the_parameter_then_the_header() {
        let rewrite = attributes(
            "authorization:\n  rewrites:\n    byQueryParameter:\n      name: namespace\n    \
             byHttpHeader:\n      name: x-namespace\n  resourceAttributes:\n    apiVersion: v1\n    \
             resource: namespace\n    subresource: metrics\n    namespace: '{{ .Value }}'\n",
        );
        let mut headers = HeaderMap::new();
        headers.append("X-Namespace", "c".parse().unwrap());
        headers.append(
            "X-Namespace",
            http::HeaderValue::from_bytes("d\u{e9}".as_bytes()).unwrap(),
        );
        let actions = rewrite
            .actions(
                &Method::GET,
                &path("/m"),
                Some("namespace=a&other=%ff&namespace=b+x"),
                &headers,
            )
            .unwrap();
        let namespaces: Vec<_> = actions.iter().map(|a| a.namespace().to_string()).collect();
        assert_eq!(namespaces, ["a", "b x", "c", "d\u{e9}"]);
        assert!(rewrite
            .actions(&Method::GET, &path("/m"), None, &HeaderMap::new())
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_rewrite_value_that_cannot_be_read_refuses_the_request() {
        let rewrite = attributes(
            "authorization:\n  rewrites:\n    byQueryParameter:\n      name: namespace\n    \
             byHttpHeader:\n      name: x-namespace\n  resourceAttributes:\n    apiVersion: v1\n    \
             resource: namespace\n    subresource: metrics\n    namespace: '{{ .Value }}'\n",
        );
        let ask = |query: &str, header: &[u8]| {
            let mut headers = HeaderMap::new();
            headers.append("x-namespace", "default".parse().unwrap());
            headers.append(
                "x-namespace",
                http::HeaderValue::from_bytes(header).unwrap(),
            );
            rewrite.actions(&Method::GET, &path("/m"), Some(query), &headers)
        };
        assert!(ask("namespace=default", b"default").is_ok());
        for (query, header, why) in [
            (
                "namespace=default",
                &b"kube\xff"[..],
                UnreadableValue::Header("x-namespace".into()),
            ),
            (
                "namespace=default&namespace=%ff",
                b"default",
                UnreadableValue::QueryPair("namespace=%ff".into()),
            ),
            (
                "namespace=default&namespace=x%zz",
                b"default",
                UnreadableValue::QueryPair("namespace=x%zz".into()),
            ),
            (
                "namespace=default&name%zz=x",
                b"default",
                UnreadableValue::QueryPair("name%zz=x".into()),
            ),
            (
                "namespace=default&x=1;namespace=kube-system",
                b"default",
                UnreadableValue::QuerySemicolon("x=1;namespace=kube-system".into()),
            ),
        ] {
            assert_eq!(ask(query, header), Err(why), "{query}");
        }
    }

    #[test]
    fn templates_expand_only_the_value() {
        let t = Template::parse("ns-{{- .Value -}} x").unwrap();
        assert_eq!(t.expand("a"), "ns-ax");
        assert_eq!(Template::parse("{{.Value}}").unwrap().expand("v"), "v");
        assert!(Template::parse("{{ .Name }}").is_err());
        assert!(Template::parse("{{ .Value").is_err());
        let config = parse(
            "authorization:\n  rewrites:\n    byQueryParameter:\n      name: ns\n  \
             resourceAttributes:\n    namespace: '{{ .Other }}'\n",
        )
        .unwrap();
        let error = RequestAttributes::new(config.authorization.unwrap()).unwrap_err();
        assert!(error.contains("resourceAttributes.namespace"), "{error}");
    }

    #[test]
    fn static_rules_match_every_set_field_and_the_request_kind() {
        let rules = attributes(
            "authorization:\n  static:\n  - resourceRequest: true\n    resource: namespace\n    \
             subresource: metrics\n  - user:\n      name: probe\n    path: /healthz\n",
        );
        let user = |name: &str| UserInfo {
            name: name.into(),
            ..UserInfo::default()
        };
        let metrics = Action::Resource(Resource {
            namespace: "any".into(),
            verb: "get".into(),
            resource: "namespace".into(),
            subresource: "metrics".into(),
            ..Resource::default()
        });
        assert!(rules.statically_allowed(&user("anyone"), &metrics));
        let health = Action::NonResource(NonResourceAttributes {
            path: "/healthz".into(),
            verb: "get".into(),
        });
        assert!(rules.statically_allowed(&user("probe"), &health));
        assert!(!rules.statically_allowed(&user("other"), &health));
    }
}
