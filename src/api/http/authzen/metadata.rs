//! Where the AuthZEN metadata document (AuthZEN 1.0 §10, docs/authzen.md §1) says this PDP
//! is: the base of every endpoint URL it names.
//!
//! Never the request's `Host` (or its URI's authority): the document is public and cacheable,
//! and a cache in front of the server would keep and serve to everyone whatever host one
//! caller wrote there (web cache poisoning:
//! <https://portswigger.net/research/practical-web-cache-poisoning>). The base is configured (`--authzen-base-url`, the URL clients reach the
//! server by, behind a load balancer or a gateway), or else the address of the listener the
//! request came in on — the accept loop's, not the caller's words.

use std::str::FromStr;

use crate::transport::{ConnectionInfo, ListenAddr};

/// `--authzen-base-url`: `http[s]://HOST[:PORT][/PATH]`, without a query, a fragment or a
/// trailing `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseUrl(String);

impl BaseUrl {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for BaseUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| format!("`{s}` {why}: expected http[s]://HOST[:PORT][/PATH]");
        let uri: http::Uri = s.parse().map_err(|_| bad("is not a URL"))?;
        match uri.scheme_str() {
            Some("http" | "https") => {}
            _ => return Err(bad("is not an http or https URL")),
        }
        let authority = uri.authority().ok_or_else(|| bad("has no host"))?;
        if authority.host().is_empty() || authority.as_str().contains('@') {
            return Err(bad("needs a host (and no user)"));
        }
        if uri.query().is_some() || s.contains('#') {
            return Err(bad("has a query or a fragment"));
        }
        Ok(BaseUrl(s.trim_end_matches('/').to_string()))
    }
}

/// The base URL the metadata names: the configured one, else the address of the listener the
/// request arrived on. A listener bound to every address (`0.0.0.0`, `[::]`) is named by the
/// address of this host the connection reached; a Unix socket, which has no URL, by
/// `http://localhost`.
pub fn base_url(
    configured: Option<&BaseUrl>,
    connection: Option<&ConnectionInfo>,
    https: bool,
) -> String {
    if let Some(base) = configured {
        return base.as_str().to_string();
    }
    let scheme = if https { "https" } else { "http" };
    match connection {
        Some(connection) => match &*connection.listener {
            ListenAddr::Tcp(bound) => {
                let addr = match connection.local_addr {
                    Some(local) if bound.ip().is_unspecified() => local,
                    _ => *bound,
                };
                format!("{scheme}://{addr}")
            }
            ListenAddr::Unix(_) => "http://localhost".to_string(),
        },
        None => format!("{scheme}://localhost"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn connection(listener: &str, local: Option<&str>) -> ConnectionInfo {
        ConnectionInfo {
            listener: Arc::new(listener.parse().unwrap()),
            remote_addr: Some("10.0.0.9:40000".parse().unwrap()),
            local_addr: local.map(|l| l.parse().unwrap()),
            client_identity: None,
        }
    }

    #[test]
    fn the_base_is_configured_or_the_listeners_own() {
        let configured: BaseUrl = "https://pdp.example.com/authz/".parse().unwrap();
        let tcp = connection("127.0.0.1:50051", Some("127.0.0.1:50051"));
        assert_eq!(
            base_url(Some(&configured), Some(&tcp), false),
            "https://pdp.example.com/authz"
        );
        assert_eq!(base_url(None, Some(&tcp), false), "http://127.0.0.1:50051");
        assert_eq!(base_url(None, Some(&tcp), true), "https://127.0.0.1:50051");
        let any = connection("0.0.0.0:50051", Some("10.0.0.5:50051"));
        assert_eq!(base_url(None, Some(&any), false), "http://10.0.0.5:50051");
        let v6 = connection("[::]:8443", Some("[fd00::5]:8443"));
        assert_eq!(base_url(None, Some(&v6), true), "https://[fd00::5]:8443");
        let unix = connection("unix:///run/authzd.sock", None);
        assert_eq!(base_url(None, Some(&unix), true), "http://localhost");
    }

    #[test]
    fn base_urls_are_http_urls_with_a_host() {
        for good in [
            "http://pdp:8080",
            "https://pdp.example.com",
            "https://[::1]:443/x",
        ] {
            assert!(good.parse::<BaseUrl>().is_ok(), "{good}");
        }
        for bad in [
            "pdp.example.com",
            "ftp://pdp",
            "https://",
            "https://user@pdp",
            "https://pdp/?q=1",
            "https://pdp/#top",
            "/relative",
        ] {
            assert!(bad.parse::<BaseUrl>().is_err(), "{bad}");
        }
    }
}
