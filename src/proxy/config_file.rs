//! kube-rbac-proxy's `--config-file`: its `authorization` section, read as kube-rbac-proxy reads
//! it (`configfile` in `cmd/kube-rbac-proxy/app/kube-rbac-proxy.go`, the types in
//! `pkg/authz/auth.go`, both in brancz/kube-rbac-proxy). It goes YAML → JSON → Go's
//! `encoding/json`, so field names match case-insensitively (`byHTTPHeader` is its
//! `byHttpHeader`) and unknown fields are ignored; both hold here, by lower-casing every key
//! before the typed read.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

/// The most of a config file read: one is a few hundred bytes.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct ConfigFile {
    #[serde(default)]
    pub authorization: Option<Authorization>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Authorization {
    #[serde(default)]
    pub rewrites: Option<Rewrites>,
    #[serde(default, rename = "resourceattributes")]
    pub resource_attributes: Option<ResourceAttributes>,
    #[serde(default, rename = "static")]
    pub static_rules: Vec<StaticRule>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Rewrites {
    #[serde(default, rename = "byqueryparameter")]
    pub by_query_parameter: Option<Named>,
    #[serde(default, rename = "byhttpheader")]
    pub by_http_header: Option<Named>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Named {
    #[serde(default)]
    pub name: String,
}

/// The attributes asked about for every request (templates under rewrites).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct ResourceAttributes {
    #[serde(default)]
    pub namespace: String,
    #[serde(default, rename = "apigroup")]
    pub api_group: String,
    #[serde(default, rename = "apiversion")]
    pub api_version: String,
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub subresource: String,
    #[serde(default)]
    pub name: String,
}

/// One `static` entry: requests it matches are allowed without asking (an empty field matches
/// anything; the user by name only).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct StaticRule {
    #[serde(default)]
    pub user: StaticUser,
    #[serde(default)]
    pub verb: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default, rename = "apigroup")]
    pub api_group: String,
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub subresource: String,
    #[serde(default)]
    pub name: String,
    #[serde(default, rename = "resourcerequest")]
    pub resource_request: bool,
    #[serde(default)]
    pub path: String,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct StaticUser {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

/// Reads and checks the file at `path`.
pub fn load(path: &Path) -> Result<ConfigFile, String> {
    use std::io::Read as _;
    let name = path.display();
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_CONFIG_BYTES).read_to_string(&mut text))
        .map_err(|e| format!("cannot read the config file `{name}`: {e}"))?;
    parse(&text).map_err(|problem| format!("config file `{name}`: {problem}"))
}

pub fn parse(text: &str) -> Result<ConfigFile, String> {
    if text.trim().is_empty() {
        return Ok(ConfigFile::default());
    }
    let options = serde_saphyr::Options {
        budget: Some(serde_saphyr::Budget {
            max_documents: 1,
            max_depth: 32,
            ..serde_saphyr::Budget::default()
        }),
        with_snippet: false,
        ..serde_saphyr::Options::default()
    };
    let document: Value = serde_saphyr::from_str_with_options(text, options)
        .map_err(|error| format!("not YAML or JSON: {}", error.without_snippet()))?;
    let config: ConfigFile =
        crate::kube::from_document(&lower_case_keys(document)).map_err(|e| e.to_string())?;
    if let Some(authorization) = &config.authorization {
        check(authorization)?;
    }
    Ok(config)
}

/// What kube-rbac-proxy refuses at startup (`NewStaticAuthorizer`); templates are checked
/// where they are expanded (`attributes.rs`).
fn check(authorization: &Authorization) -> Result<(), String> {
    for (i, rule) in authorization.static_rules.iter().enumerate() {
        if rule.resource_request != rule.path.is_empty() {
            return Err(format!(
                "authorization.static[{i}]: a resource request must not have a path, and a \
                 non-resource request must have one"
            ));
        }
    }
    Ok(())
}

impl ResourceAttributes {
    pub fn fields(&self) -> [(&'static str, &str); 6] {
        [
            ("namespace", &self.namespace),
            ("apiGroup", &self.api_group),
            ("apiVersion", &self.api_version),
            ("resource", &self.resource),
            ("subresource", &self.subresource),
            ("name", &self.name),
        ]
    }
}

fn lower_case_keys(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k.to_lowercase(), lower_case_keys(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(lower_case_keys).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_match_case_insensitively_and_unknown_fields_are_ignored() {
        let config = parse(
            "authorization:\n  rewrites:\n    byHTTPHeader:\n      name: x-ns\n  \
             resourceAttributes:\n    Namespace: '{{ .Value }}'\n    resource: pods\n  \
             somethingElse: 1\n",
        )
        .unwrap();
        let authorization = config.authorization.unwrap();
        assert_eq!(
            authorization.rewrites.unwrap().by_http_header.unwrap().name,
            "x-ns"
        );
        let attributes = authorization.resource_attributes.unwrap();
        assert_eq!(attributes.namespace, "{{ .Value }}");
        assert_eq!(attributes.resource, "pods");
    }

    #[test]
    fn bad_static_rules_are_refused() {
        let error = parse("authorization:\n  static:\n  - resourceRequest: true\n    path: /x\n")
            .unwrap_err();
        assert!(error.contains("static[0]"), "{error}");
        assert!(parse("authorization: [").is_err());
    }
}
