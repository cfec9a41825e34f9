//! What the upstream is told about the caller (`--auth-header-fields-enabled`): the user in one
//! header and the groups, joined, in another, as kube-rbac-proxy's `WithAuthHeaders`
//! (`pkg/authn/identityheaders/identityheaders.go`) sets them.
//!
//! An upstream that reads these headers trusts whoever set them, so only the proxy may: every
//! header a client sent under either name is removed, on every path (ignored ones too), before
//! the proxy sets its own. Names match whatever their case (header names are case-insensitive,
//! RFC 9110 §5.1) and whatever `_` stands in for `-`: CGI and WSGI servers turn both
//! `X_Remote_User` and `X-Remote-User` into `HTTP_X_REMOTE_USER` (RFC 3875 §4.1.18; PEP 3333's
//! `environ`).

use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::config::proxy::AuthHeaders;
use crate::request::UserInfo;

/// The two header names and the groups' separator.
#[derive(Clone, Debug)]
pub struct IdentityHeaders {
    user: HeaderName,
    groups: HeaderName,
    separator: String,
}

impl IdentityHeaders {
    /// The headers `settings` name; a name the upstream would never receive (hop-by-hop) or
    /// both names the same is refused at startup.
    pub fn new(settings: &AuthHeaders) -> Result<Self, String> {
        let name = |flag: &str, value: &str| {
            let name = HeaderName::try_from(value)
                .map_err(|_| format!("--{flag}: `{value}` is not an HTTP header name"))?;
            if super::forward::is_hop_by_hop(&name) {
                return Err(format!(
                    "--{flag}: `{value}` is a hop-by-hop header, which is never passed upstream"
                ));
            }
            Ok(name)
        };
        let user = name("auth-header-user-field-name", &settings.user)?;
        let groups = name("auth-header-groups-field-name", &settings.groups)?;
        if same_variable(user.as_str(), groups.as_str()) {
            return Err(format!(
                "--auth-header-user-field-name and --auth-header-groups-field-name both name \
                 `{user}`"
            ));
        }
        Ok(IdentityHeaders {
            user,
            groups,
            separator: settings.separator.clone(),
        })
    }

    /// Removes every header in `headers` that claims an identity under either name.
    pub fn remove_claimed(&self, headers: &mut HeaderMap) {
        headers.remove(&self.user);
        headers.remove(&self.groups);
        let spelled_otherwise: Vec<HeaderName> = headers
            .keys()
            .filter(|name| {
                same_variable(name.as_str(), self.user.as_str())
                    || same_variable(name.as_str(), self.groups.as_str())
            })
            .cloned()
            .collect();
        for name in spelled_otherwise {
            headers.remove(name);
        }
    }

    /// Sets the headers telling the upstream who `user` is, replacing any value; a name or a
    /// group that cannot be a header value (a control character) is an error, for the proxy
    /// must not pass the request on without the identity it was asked to tell.
    pub fn tell(&self, user: &UserInfo, headers: &mut HeaderMap) -> Result<(), String> {
        let value = |what: &str, text: &str| {
            HeaderValue::from_bytes(text.as_bytes())
                .map_err(|_| format!("the caller's {what} cannot be sent in a header"))
        };
        let name = value("name", &user.name)?;
        let groups = value("groups", &user.groups.join(&self.separator))?;
        headers.insert(self.user.clone(), name);
        headers.insert(self.groups.clone(), groups);
        Ok(())
    }
}

/// Whether two lower-case header names are one CGI variable (`_` and `-` alike).
fn same_variable(a: &str, b: &str) -> bool {
    let fold = |c: u8| if c == b'_' { b'-' } else { c };
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| fold(x) == fold(y))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers() -> IdentityHeaders {
        IdentityHeaders::new(&AuthHeaders {
            user: "X-Remote-User".into(),
            groups: "x-remote-groups".into(),
            separator: "|".into(),
        })
        .unwrap()
    }

    #[test]
    fn every_spelling_of_either_name_is_removed() {
        let mut map = HeaderMap::new();
        for (name, value) in [
            ("x-remote-user", "root"),
            ("X-REMOTE-USER", "root2"),
            ("x_remote_user", "root3"),
            ("X_Remote-Groups", "system:masters"),
            ("x-remote-groups", "system:masters"),
            ("x-remote-user-agent", "kept"),
            ("x-other", "kept"),
        ] {
            map.append(HeaderName::try_from(name).unwrap(), value.parse().unwrap());
        }
        headers().remove_claimed(&mut map);
        let mut left: Vec<_> = map.keys().map(|k| k.as_str().to_string()).collect();
        left.sort();
        assert_eq!(left, ["x-other", "x-remote-user-agent"]);
    }

    #[test]
    fn the_callers_identity_replaces_any_value() {
        let mut map = HeaderMap::new();
        map.append("x-remote-user", "root".parse().unwrap());
        let user = UserInfo {
            name: "jane".into(),
            groups: vec!["a".into(), "b".into()],
            ..UserInfo::default()
        };
        headers().tell(&user, &mut map).unwrap();
        assert_eq!(map.get_all("x-remote-user").iter().count(), 1);
        assert_eq!(map["x-remote-user"], "jane");
        assert_eq!(map["x-remote-groups"], "a|b");
        let control = UserInfo {
            name: "jane\nx-remote-groups: system:masters".into(),
            ..UserInfo::default()
        };
        assert!(headers().tell(&control, &mut map).is_err());
    }

    #[test]
    fn names_the_upstream_would_not_receive_are_refused() {
        let settings = |user: &str, groups: &str| AuthHeaders {
            user: user.into(),
            groups: groups.into(),
            separator: "|".into(),
        };
        for (user, groups) in [
            ("connection", "x-remote-groups"),
            ("x-remote-user", "Upgrade"),
            ("x-remote", "X_Remote"),
        ] {
            assert!(
                IdentityHeaders::new(&settings(user, groups)).is_err(),
                "{user} {groups}"
            );
        }
    }
}
