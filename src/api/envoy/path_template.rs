//! The path language of `--envoy-path-template`, and kube-apiserver's method-to-verb mapping:
//! how the path and method of the HTTP request Envoy describes become resource attributes.
//! The service (`mod.rs`) only asks a template whether a path matches and which verb the
//! method means.

use std::fmt;

use crate::request;

/// One segment of a [`PathTemplate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placeholder {
    Namespace,
    Group,
    Version,
    Resource,
    Subresource,
    Name,
}

impl Placeholder {
    const ALL: [(&'static str, Placeholder); 6] = [
        ("namespace", Placeholder::Namespace),
        ("group", Placeholder::Group),
        ("version", Placeholder::Version),
        ("resource", Placeholder::Resource),
        ("subresource", Placeholder::Subresource),
        ("name", Placeholder::Name),
    ];
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Capture(Placeholder),
}

/// A path shape that makes a request a resource request, e.g.
/// `/api/v1/namespaces/{namespace}/{resource}/{name}` or
/// `/apis/{group}/{version}/namespaces/{namespace}/{resource}`. Every segment is either literal
/// or one whole placeholder (`{namespace}`, `{group}`, `{version}`, `{resource}`,
/// `{subresource}`, `{name}`, each at most once; `{resource}` required). A path matches when it
/// has exactly as many segments (leading and trailing `/` ignored, as kube-apiserver does),
/// the literals are equal and every placeholder captures a non-empty segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathTemplate {
    text: String,
    segments: Vec<Segment>,
}

impl fmt::Display for PathTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PathTemplate {
    /// Parses `--envoy-path-template`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let fail = |why: String| Err(format!("path template `{text}`: {why}"));
        if !text.starts_with('/') {
            return fail("must start with `/`".into());
        }
        let mut segments = Vec::new();
        for part in split_path(text) {
            if part.is_empty() {
                return fail("has an empty segment (`//`)".into());
            }
            let segment = match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                Some(name) => match Placeholder::ALL.iter().find(|(n, _)| *n == name) {
                    Some((_, placeholder)) => {
                        if segments.contains(&Segment::Capture(*placeholder)) {
                            return fail(format!("`{{{name}}}` appears twice"));
                        }
                        Segment::Capture(*placeholder)
                    }
                    None => {
                        return fail(format!(
                            "unknown placeholder `{{{name}}}` (use namespace, group, version, \
                             resource, subresource, name)"
                        ))
                    }
                },
                None if part.contains(['{', '}']) => {
                    return fail(format!(
                        "segment `{part}` mixes text and a placeholder; a placeholder must be a \
                         whole segment"
                    ))
                }
                None => Segment::Literal(part.to_string()),
            };
            segments.push(segment);
        }
        if !segments.contains(&Segment::Capture(Placeholder::Resource)) {
            return fail("needs a `{resource}` segment".into());
        }
        Ok(Self {
            text: text.to_string(),
            segments,
        })
    }

    /// The resource attributes (all but the verb) `path` (no query) names, if it matches.
    pub(super) fn capture(&self, path: &str) -> Option<request::ResourceAttributes> {
        let parts: Vec<&str> = split_path(path).collect();
        if parts.len() != self.segments.len() {
            return None;
        }
        let mut attributes = request::ResourceAttributes::default();
        for (segment, part) in self.segments.iter().zip(parts) {
            match segment {
                Segment::Literal(literal) if literal == part => {}
                Segment::Literal(_) => return None,
                Segment::Capture(_) if part.is_empty() => return None,
                Segment::Capture(placeholder) => {
                    let field = match placeholder {
                        Placeholder::Namespace => &mut attributes.namespace,
                        Placeholder::Group => &mut attributes.group,
                        Placeholder::Version => &mut attributes.version,
                        Placeholder::Resource => &mut attributes.resource,
                        Placeholder::Subresource => &mut attributes.subresource,
                        Placeholder::Name => &mut attributes.name,
                    };
                    *field = part.to_string();
                }
            }
        }
        Some(attributes)
    }
}

/// Path segments with leading and trailing `/` ignored (kube-apiserver's `splitPath`).
fn split_path(path: &str) -> impl Iterator<Item = &str> {
    let trimmed = path.trim_matches('/');
    trimmed.split('/').filter(move |_| !trimmed.is_empty())
}

/// The verb kube-apiserver's `RequestInfoFactory` derives for a resource request: POST
/// `create`, GET/HEAD `get` (`list` without a name, `watch` when `?watch` is true), PUT
/// `update`, PATCH `patch`, DELETE `delete` (`deletecollection` without a name). Upstream gives
/// other methods an empty verb, which only a `*` rule matches; here they keep their lower-case
/// method name instead, since an empty verb is invalid input to the engine.
pub fn resource_verb(method: &str, has_name: bool, query: &str) -> String {
    let verb = match method.to_ascii_uppercase().as_str() {
        "POST" => "create",
        "GET" | "HEAD" if has_name => "get",
        "GET" | "HEAD" if watch_requested(query) => "watch",
        "GET" | "HEAD" => "list",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if has_name => "delete",
        "DELETE" => "deletecollection",
        _ => return method.to_ascii_lowercase(),
    };
    verb.to_string()
}

/// Whether the query's first `watch` parameter is true: Go's `strconv.ParseBool` when it
/// parses, else anything but `false`/`0` (upstream's fallback when list options do not decode).
fn watch_requested(query: &str) -> bool {
    let first = query
        .split('&')
        .find_map(|pair| match pair.split_once('=') {
            Some(("watch", value)) => Some(value),
            None if pair == "watch" => Some(""),
            _ => None,
        });
    match first {
        None => false,
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => true,
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => false,
        Some(other) => !matches!(other.to_ascii_lowercase().as_str(), "false" | "0"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verb_mapping_matches_kube_apiserver() {
        let table = [
            ("GET", true, "", "get"),
            ("HEAD", true, "", "get"),
            ("GET", false, "", "list"),
            ("GET", false, "watch=true", "watch"),
            ("GET", false, "limit=5&watch=1", "watch"),
            ("GET", false, "watch=false", "list"),
            ("GET", false, "watch=0", "list"),
            ("GET", false, "watch=yes", "watch"),
            ("GET", true, "watch=true", "get"),
            ("POST", false, "", "create"),
            ("POST", true, "", "create"),
            ("PUT", true, "", "update"),
            ("PATCH", true, "", "patch"),
            ("DELETE", true, "", "delete"),
            ("DELETE", false, "", "deletecollection"),
            ("get", true, "", "get"),
            ("OPTIONS", false, "", "options"),
        ];
        for (method, has_name, query, want) in table {
            assert_eq!(
                resource_verb(method, has_name, query),
                want,
                "{method} name={has_name} ?{query}"
            );
        }
    }

    #[test]
    fn templates_capture_resource_attributes() {
        let core = PathTemplate::parse("/api/v1/namespaces/{namespace}/{resource}/{name}").unwrap();
        let got = core.capture("/api/v1/namespaces/dev/pods/web-1/").unwrap();
        assert_eq!(
            (
                got.namespace.as_str(),
                got.resource.as_str(),
                got.name.as_str()
            ),
            ("dev", "pods", "web-1")
        );
        assert_eq!(got.group, "");
        assert!(core.capture("/api/v1/namespaces/dev/pods").is_none());
        assert!(core.capture("/api/v2/namespaces/dev/pods/web-1").is_none());

        let grouped = PathTemplate::parse(
            "/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}/{subresource}",
        )
        .unwrap();
        let got = grouped
            .capture("/apis/apps/v1/namespaces/prod/deployments/api/scale")
            .unwrap();
        assert_eq!(
            (
                got.group.as_str(),
                got.version.as_str(),
                got.namespace.as_str(),
                got.resource.as_str(),
                got.name.as_str(),
                got.subresource.as_str()
            ),
            ("apps", "v1", "prod", "deployments", "api", "scale")
        );
    }

    #[test]
    fn bad_templates_are_rejected_with_a_reason() {
        for (text, why) in [
            ("api/{resource}", "start with `/`"),
            ("/api/{resource}/{resource}", "appears twice"),
            ("/api/{kind}", "unknown placeholder"),
            ("/api/x{name}/{resource}", "whole segment"),
            ("/api//{resource}", "empty segment"),
            ("/api/v1/{name}", "needs a `{resource}`"),
        ] {
            let error = PathTemplate::parse(text).unwrap_err();
            assert!(error.contains(why), "{text}: {error}");
        }
    }
}
