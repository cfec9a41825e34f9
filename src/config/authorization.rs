//! The authorizer chain's remote part, configured both ways kube-apiserver configures it:
//!
//! * flags: `--authorization-mode …,Webhook` with `--authorization-webhook-config-file`
//!   (a kubeconfig), `--authorization-webhook-version` (default `v1beta1`) and
//!   `--authorization-webhook-cache-{authorized,unauthorized}-ttl` (default `5m`, `30s`; `0`
//!   turns that cache off);
//! * `--authorization-config FILE`: an `AuthorizationConfiguration`
//!   (`apiserver.config.k8s.io/v1`, `v1beta1` or `v1alpha1`) listing the authorizers in order —
//!   `RBAC`, `ABAC`, `AlwaysAllow`, `AlwaysDeny` and any number of `Webhook`s, each with its own
//!   TTLs, timeout, failure policy, SubjectAccessReview version and kubeconfig — validated as
//!   upstream validates it. The two ways exclude each other, as in kube-apiserver.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use crate::engine::Mode;
use crate::webhook::{FailurePolicy, WebhookSettings, WebhookVersion};

#[derive(Debug, Args, Clone, Default)]
pub struct WebhookArgs {
    /// kubeconfig of the Webhook authorizer (needs `Webhook` in --authorization-mode): the
    /// remote SubjectAccessReview endpoint and authzd's credentials for it.
    #[arg(long, value_name = "FILE")]
    pub authorization_webhook_config_file: Option<PathBuf>,

    /// SubjectAccessReview version sent to the webhook: `v1` or `v1beta1` (the default, as
    /// kube-apiserver's).
    #[arg(long, value_name = "VERSION", value_parser = parse_version)]
    pub authorization_webhook_version: Option<WebhookVersion>,

    /// How long the webhook's allows are cached (default `5m`; `0` caches none).
    #[arg(long, value_name = "DURATION", value_parser = parse_go_duration)]
    pub authorization_webhook_cache_authorized_ttl: Option<Duration>,

    /// How long the webhook's denies and no-opinions are cached (default `30s`; `0` caches
    /// none).
    #[arg(long, value_name = "DURATION", value_parser = parse_go_duration)]
    pub authorization_webhook_cache_unauthorized_ttl: Option<Duration>,

    /// An AuthorizationConfiguration file (`apiserver.config.k8s.io/v1`): the authorizers in
    /// order, webhooks included. Excludes --authorization-mode and the webhook flags.
    #[arg(long, value_name = "FILE")]
    pub authorization_config: Option<PathBuf>,
}

/// The chain and the webhooks its `Webhook(n)` entries name.
#[derive(Clone, Debug, Default)]
pub struct Chain {
    pub modes: Vec<Mode>,
    pub webhooks: Vec<WebhookSettings>,
}

/// The chain from `--authorization-mode` (`None`: not given, `RBAC,ABAC`) and the webhook
/// flags, or from `--authorization-config`.
pub fn chain(mode: Option<Vec<Mode>>, args: WebhookArgs) -> Result<Chain, String> {
    let WebhookArgs {
        authorization_webhook_config_file: kubeconfig,
        authorization_webhook_version: version,
        authorization_webhook_cache_authorized_ttl: authorized_ttl,
        authorization_webhook_cache_unauthorized_ttl: unauthorized_ttl,
        authorization_config: config,
    } = args;
    let webhook_flags = kubeconfig.is_some()
        || version.is_some()
        || authorized_ttl.is_some()
        || unauthorized_ttl.is_some();
    if let Some(file) = config {
        if mode.is_some() || webhook_flags {
            return Err(
                "--authorization-config cannot be combined with --authorization-mode or the --authorization-webhook-* flags"
                    .to_string(),
            );
        }
        return configuration_file(&file);
    }
    let modes = mode.unwrap_or_else(|| vec![Mode::Rbac, Mode::Abac]);
    let uses_webhook = modes.iter().any(|m| matches!(m, Mode::Webhook(_)));
    match (uses_webhook, kubeconfig) {
        (false, None) if !webhook_flags => Ok(Chain {
            modes,
            webhooks: Vec::new(),
        }),
        (false, _) => Err(
            "the --authorization-webhook-* flags need Webhook in --authorization-mode".to_string(),
        ),
        (true, None) => Err(
            "--authorization-mode Webhook needs --authorization-webhook-config-file".to_string(),
        ),
        (true, Some(kubeconfig)) => {
            let mut webhook = WebhookSettings::flag_defaults(kubeconfig);
            if let Some(version) = version {
                webhook.version = version;
            }
            // As kube-apiserver: a zero TTL turns that half of the cache off.
            if let Some(ttl) = authorized_ttl {
                webhook.authorized_ttl = ttl;
                webhook.cache_authorized = !ttl.is_zero();
            }
            if let Some(ttl) = unauthorized_ttl {
                webhook.unauthorized_ttl = ttl;
                webhook.cache_unauthorized = !ttl.is_zero();
            }
            Ok(Chain {
                modes,
                webhooks: vec![webhook],
            })
        }
    }
}

fn parse_version(text: &str) -> Result<WebhookVersion, String> {
    match text {
        "v1" => Ok(WebhookVersion::V1),
        "v1beta1" => Ok(WebhookVersion::V1beta1),
        other => Err(format!("`{other}`: expected v1 or v1beta1")),
    }
}

/// A Go duration as Kubernetes writes them: `30s`, `5m`, `1m30s`, `5m0s`, `500ms`, `1h`.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    if rest.is_empty() {
        return Err("an empty duration".to_string());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let amount: u64 = rest
            .get(..digits)
            .and_then(|d| d.parse().ok())
            .ok_or_else(|| format!("`{text}` is not a duration (e.g. 30s, 5m, 1m30s)"))?;
        rest = rest.get(digits..).unwrap_or("");
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = rest.get(..unit_len).unwrap_or("");
        rest = rest.get(unit_len..).unwrap_or("");
        let part = match unit {
            "ms" => Duration::from_millis(amount),
            "s" => Duration::from_secs(amount),
            "m" => Duration::from_secs(amount.saturating_mul(60)),
            "h" => Duration::from_secs(amount.saturating_mul(3600)),
            _ => {
                return Err(format!(
                    "`{text}`: unknown unit `{unit}` (use ms, s, m or h)"
                ))
            }
        };
        total = total.saturating_add(part);
    }
    Ok(total)
}

/// The most an AuthorizationConfiguration file may hold: a real one is a few hundred bytes.
const MAX_CONFIGURATION_BYTES: u64 = 1024 * 1024;

const API_VERSIONS: [&str; 3] = [
    "apiserver.config.k8s.io/v1",
    "apiserver.config.k8s.io/v1beta1",
    "apiserver.config.k8s.io/v1alpha1",
];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AuthorizationConfiguration {
    api_version: String,
    kind: String,
    #[serde(default)]
    authorizers: Vec<AuthorizerConfiguration>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AuthorizerConfiguration {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    name: String,
    webhook: Option<WebhookConfiguration>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WebhookConfiguration {
    #[serde(rename = "authorizedTTL")]
    authorized_ttl: Option<String>,
    cache_authorized_requests: Option<bool>,
    #[serde(rename = "unauthorizedTTL")]
    unauthorized_ttl: Option<String>,
    cache_unauthorized_requests: Option<bool>,
    timeout: Option<String>,
    #[serde(default)]
    subject_access_review_version: String,
    #[serde(default)]
    match_condition_subject_access_review_version: String,
    #[serde(default)]
    failure_policy: String,
    connection_info: Option<ConnectionInfo>,
    #[serde(default)]
    match_conditions: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConnectionInfo {
    #[serde(rename = "type", default)]
    kind: String,
    kube_config_file: Option<String>,
}

/// Upstream's ceiling on a webhook's timeout.
const MAX_WEBHOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads and validates an AuthorizationConfiguration file. Errors name the file and the field
/// (`authorizers[1].webhook.timeout`).
pub fn configuration_file(file: &Path) -> Result<Chain, String> {
    let at = |problem: String| format!("--authorization-config {}: {problem}", file.display());
    let size = std::fs::metadata(file)
        .map_err(|e| at(format!("cannot read it: {e}")))?
        .len();
    if size > MAX_CONFIGURATION_BYTES {
        return Err(at(format!(
            "is larger than {MAX_CONFIGURATION_BYTES} bytes"
        )));
    }
    let text = std::fs::read_to_string(file).map_err(|e| at(format!("cannot read it: {e}")))?;
    let parsed: AuthorizationConfiguration =
        serde_saphyr::from_str(&text).map_err(|e| at(format!("is not valid: {e}")))?;
    configuration(parsed).map_err(at)
}

fn configuration(config: AuthorizationConfiguration) -> Result<Chain, String> {
    if !API_VERSIONS.contains(&config.api_version.as_str()) {
        return Err(format!(
            "apiVersion: must be one of {} (got `{}`)",
            API_VERSIONS.join(", "),
            config.api_version
        ));
    }
    if config.kind != "AuthorizationConfiguration" {
        return Err(format!(
            "kind: must be AuthorizationConfiguration (got `{}`)",
            config.kind
        ));
    }
    if config.authorizers.is_empty() {
        return Err("authorizers: at least one authorizer is required".to_string());
    }
    let mut chain = Chain::default();
    let mut names: Vec<&str> = Vec::new();
    for (i, authorizer) in config.authorizers.iter().enumerate() {
        let field = format!("authorizers[{i}]");
        if authorizer.name.is_empty() {
            return Err(format!("{field}.name: is required"));
        }
        if !is_dns_label(&authorizer.name) {
            return Err(format!(
                "{field}.name: `{}` must be a DNS-1123 label (lower-case letters, digits and `-`, at most 63)",
                authorizer.name
            ));
        }
        if names.contains(&authorizer.name.as_str()) {
            return Err(format!("{field}.name: `{}` is used twice", authorizer.name));
        }
        names.push(&authorizer.name);
        let mode = match authorizer.kind.as_str() {
            "Node" => {
                return Err(format!(
                    "{field}.type: Node is not an authzd authorizer (authzd has no nodes to authorize; write the node rules as RBAC)"
                ))
            }
            "" => return Err(format!("{field}.type: is required")),
            kind => match Mode::named(kind) {
                Some(Mode::Webhook(_)) => {
                    let n = u16::try_from(chain.webhooks.len())
                        .map_err(|_| format!("{field}: too many webhooks"))?;
                    Mode::Webhook(n)
                }
                Some(mode) => mode,
                None => {
                    let names: Vec<&str> = [
                        Mode::Rbac,
                        Mode::Abac,
                        Mode::AlwaysAllow,
                        Mode::AlwaysDeny,
                        Mode::Webhook(0),
                    ]
                    .iter()
                    .map(|mode| mode.as_str())
                    .collect();
                    return Err(format!(
                        "{field}.type: `{kind}` is not one of {}",
                        names.join(", ")
                    ));
                }
            },
        };
        match (&mode, &authorizer.webhook) {
            (Mode::Webhook(_), Some(webhook)) => {
                let settings = webhook_settings(&field, &authorizer.name, webhook)?;
                chain.webhooks.push(settings);
            }
            (Mode::Webhook(_), None) => {
                return Err(format!("{field}.webhook: is required for type Webhook"))
            }
            (_, Some(_)) => {
                return Err(format!("{field}.webhook: may be set only for type Webhook"))
            }
            (_, None) => {}
        }
        if !matches!(mode, Mode::Webhook(_)) && chain.modes.contains(&mode) {
            return Err(format!(
                "{field}.type: {} may appear only once",
                authorizer.kind
            ));
        }
        chain.modes.push(mode);
    }
    Ok(chain)
}

fn webhook_settings(
    field: &str,
    name: &str,
    webhook: &WebhookConfiguration,
) -> Result<WebhookSettings, String> {
    let field = format!("{field}.webhook");
    let duration = |value: &Option<String>, which: &str| -> Result<Option<Duration>, String> {
        value
            .as_deref()
            .map(|text| parse_go_duration(text).map_err(|e| format!("{field}.{which}: {e}")))
            .transpose()
    };
    let timeout = duration(&webhook.timeout, "timeout")?
        .ok_or_else(|| format!("{field}.timeout: is required"))?;
    if timeout.is_zero() || timeout > MAX_WEBHOOK_TIMEOUT {
        return Err(format!(
            "{field}.timeout: must be more than 0s and at most 30s"
        ));
    }
    let version = match webhook.subject_access_review_version.as_str() {
        "" => return Err(format!("{field}.subjectAccessReviewVersion: is required")),
        text => {
            parse_version(text).map_err(|e| format!("{field}.subjectAccessReviewVersion: {e}"))?
        }
    };
    match webhook
        .match_condition_subject_access_review_version
        .as_str()
    {
        "v1" => {}
        "" => {
            return Err(format!(
                "{field}.matchConditionSubjectAccessReviewVersion: is required"
            ))
        }
        other => {
            return Err(format!(
                "{field}.matchConditionSubjectAccessReviewVersion: `{other}`: expected v1"
            ))
        }
    }
    if !webhook.match_conditions.is_empty() {
        return Err(format!(
            "{field}.matchConditions: need CEL, which authzd does not evaluate yet; remove them or send every request to this webhook"
        ));
    }
    let failure_policy = match webhook.failure_policy.as_str() {
        "NoOpinion" => FailurePolicy::NoOpinion,
        "Deny" => FailurePolicy::Deny,
        "" => return Err(format!("{field}.failurePolicy: is required")),
        other => {
            return Err(format!(
                "{field}.failurePolicy: `{other}`: expected NoOpinion or Deny"
            ))
        }
    };
    let connection = webhook
        .connection_info
        .as_ref()
        .ok_or_else(|| format!("{field}.connectionInfo: is required"))?;
    let kubeconfig = match (connection.kind.as_str(), &connection.kube_config_file) {
        ("KubeConfigFile", Some(path)) if Path::new(path).is_absolute() => PathBuf::from(path),
        ("KubeConfigFile", Some(path)) => {
            return Err(format!(
                "{field}.connectionInfo.kubeConfigFile: `{path}` must be an absolute path"
            ))
        }
        ("KubeConfigFile", None) => {
            return Err(format!(
                "{field}.connectionInfo.kubeConfigFile: is required for type KubeConfigFile"
            ))
        }
        ("InClusterConfig", _) => {
            return Err(format!(
                "{field}.connectionInfo.type: InClusterConfig needs a Kubernetes API server to call; authzd supports KubeConfigFile"
            ))
        }
        ("", _) => return Err(format!("{field}.connectionInfo.type: is required")),
        (other, _) => {
            return Err(format!(
                "{field}.connectionInfo.type: `{other}`: expected KubeConfigFile"
            ))
        }
    };
    let defaults = WebhookSettings::flag_defaults(kubeconfig);
    // Upstream's defaulting: an unset (or zero) TTL is 5m / 30s; both caches on.
    let authorized_ttl = duration(&webhook.authorized_ttl, "authorizedTTL")?
        .filter(|ttl| !ttl.is_zero())
        .unwrap_or(defaults.authorized_ttl);
    let unauthorized_ttl = duration(&webhook.unauthorized_ttl, "unauthorizedTTL")?
        .filter(|ttl| !ttl.is_zero())
        .unwrap_or(defaults.unauthorized_ttl);
    Ok(WebhookSettings {
        name: name.to_string(),
        version,
        authorized_ttl,
        unauthorized_ttl,
        cache_authorized: webhook.cache_authorized_requests.unwrap_or(true),
        cache_unauthorized: webhook.cache_unauthorized_requests.unwrap_or(true),
        timeout,
        failure_policy,
        ..defaults
    })
}

fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Chain, String> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("authz.yaml");
        std::fs::write(&file, text).unwrap();
        configuration_file(&file)
    }

    const GOOD: &str = r#"
apiVersion: apiserver.config.k8s.io/v1
kind: AuthorizationConfiguration
authorizers:
- type: Webhook
  name: first
  webhook:
    timeout: 3s
    authorizedTTL: 1m30s
    cacheUnauthorizedRequests: false
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    failurePolicy: Deny
    connectionInfo: {type: KubeConfigFile, kubeConfigFile: /etc/authz/first.kubeconfig}
- type: RBAC
  name: rbac
- type: Webhook
  name: second
  webhook:
    timeout: 30s
    subjectAccessReviewVersion: v1beta1
    matchConditionSubjectAccessReviewVersion: v1
    failurePolicy: NoOpinion
    connectionInfo: {type: KubeConfigFile, kubeConfigFile: /etc/authz/second.kubeconfig}
"#;

    #[test]
    fn an_authorization_configuration_becomes_the_chain_in_order() {
        let chain = load(GOOD).unwrap();
        assert_eq!(
            chain.modes,
            [Mode::Webhook(0), Mode::Rbac, Mode::Webhook(1)]
        );
        let first = &chain.webhooks[0];
        assert_eq!(first.name, "first");
        assert_eq!(first.timeout, Duration::from_secs(3));
        assert_eq!(first.authorized_ttl, Duration::from_secs(90));
        assert_eq!(first.unauthorized_ttl, Duration::from_secs(30));
        assert!(first.cache_authorized && !first.cache_unauthorized);
        assert!(matches!(first.failure_policy, FailurePolicy::Deny));
        assert!(matches!(first.version, WebhookVersion::V1));
        let second = &chain.webhooks[1];
        assert_eq!(second.authorized_ttl, Duration::from_secs(300));
        assert!(matches!(second.version, WebhookVersion::V1beta1));
        assert_eq!(
            second.kubeconfig,
            PathBuf::from("/etc/authz/second.kubeconfig")
        );
    }

    #[test]
    fn invalid_configurations_name_the_field() {
        let cases = [
            (
                GOOD.replace("timeout: 3s", "timeout: 31s"),
                "authorizers[0].webhook.timeout",
            ),
            (
                GOOD.replace("name: rbac", "name: first"),
                "authorizers[1].name: `first` is used twice",
            ),
            (
                GOOD.replace("failurePolicy: Deny", "failurePolicy: Maybe"),
                "authorizers[0].webhook.failurePolicy",
            ),
            (
                GOOD.replace("/etc/authz/first.kubeconfig", "first.kubeconfig"),
                "must be an absolute path",
            ),
            (
                GOOD.replace("type: RBAC", "type: Node"),
                "Node is not an authzd authorizer",
            ),
            (
                GOOD.replace("type: RBAC", "type: Webhook"),
                "authorizers[1].webhook: is required",
            ),
            (
                GOOD.replace("kind: AuthorizationConfiguration", "kind: Nope"),
                "kind: must be",
            ),
            (
                GOOD.replace(
                    "    timeout: 3s\n",
                    "    timeout: 3s\n    matchConditions: [{expression: 'true'}]\n",
                ),
                "matchConditions: need CEL",
            ),
            (
                GOOD.replace("    timeout: 3s\n", "    timeout: 3s\n    bogus: 1\n"),
                "is not valid",
            ),
        ];
        for (text, expected) in cases {
            let error = load(&text).unwrap_err();
            assert!(error.contains(expected), "{expected}: {error}");
        }
    }

    #[test]
    fn flags_follow_kube_apiserver() {
        let file = PathBuf::from("/k.yaml");
        let with = |mode: Option<Vec<Mode>>, args: WebhookArgs| chain(mode, args);
        let webhook_flags = WebhookArgs {
            authorization_webhook_config_file: Some(file.clone()),
            authorization_webhook_cache_authorized_ttl: Some(Duration::ZERO),
            ..WebhookArgs::default()
        };
        let built = with(
            Some(vec![Mode::Rbac, Mode::Webhook(0)]),
            webhook_flags.clone(),
        )
        .unwrap();
        assert!(!built.webhooks[0].cache_authorized);
        assert!(built.webhooks[0].cache_unauthorized);
        assert!(matches!(built.webhooks[0].version, WebhookVersion::V1beta1));
        assert!(with(Some(vec![Mode::Rbac]), webhook_flags.clone())
            .unwrap_err()
            .contains("need Webhook"));
        assert!(with(Some(vec![Mode::Webhook(0)]), WebhookArgs::default())
            .unwrap_err()
            .contains("needs --authorization-webhook-config-file"));
        let both = WebhookArgs {
            authorization_config: Some(file),
            ..WebhookArgs::default()
        };
        assert!(with(Some(vec![Mode::Rbac]), both)
            .unwrap_err()
            .contains("cannot be combined"));
        assert_eq!(
            with(None, WebhookArgs::default()).unwrap().modes,
            [Mode::Rbac, Mode::Abac]
        );
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("5m0s").unwrap(), Duration::from_secs(300));
        assert_eq!(
            parse_go_duration("1h2m3s").unwrap(),
            Duration::from_secs(3723)
        );
        assert_eq!(
            parse_go_duration("250ms").unwrap(),
            Duration::from_millis(250)
        );
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_go_duration("5").is_err());
        assert!(parse_go_duration("5d").is_err());
        assert!(parse_go_duration("").is_err());
    }
}
