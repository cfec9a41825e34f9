//! What `--listen` accepts: `HOST:PORT` or `unix:///ABSOLUTE/PATH`.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::str::FromStr;

/// Where one listener listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    /// A Unix domain socket at an absolute path.
    Unix(PathBuf),
}

const UNIX_SCHEME: &str = "unix://";

impl FromStr for ListenAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix(UNIX_SCHEME) {
            let path = PathBuf::from(path);
            // A relative path would depend on the working directory the service happens to
            // start in; `unix://` URLs name absolute paths (three slashes).
            if !path.is_absolute() {
                return Err(format!(
                    "`{s}`: a Unix socket needs an absolute path, e.g. unix:///run/authzd.sock"
                ));
            }
            return Ok(ListenAddr::Unix(path));
        }
        if let Ok(addr) = s.parse::<SocketAddr>() {
            return Ok(ListenAddr::Tcp(addr));
        }
        // `localhost:50051` and other names: resolved once, at startup.
        let not_an_address = || format!("`{s}` is neither HOST:PORT nor unix:///ABSOLUTE/PATH");
        let mut resolved = s.to_socket_addrs().map_err(|_| not_an_address())?;
        resolved
            .next()
            .map(ListenAddr::Tcp)
            .ok_or_else(not_an_address)
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(addr) => write!(f, "{addr}"),
            ListenAddr::Unix(path) => write!(f, "{UNIX_SCHEME}{}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms_and_prints_them_back() {
        let tcp: ListenAddr = "127.0.0.1:50051".parse().unwrap();
        assert_eq!(tcp, ListenAddr::Tcp("127.0.0.1:50051".parse().unwrap()));
        assert_eq!(tcp.to_string(), "127.0.0.1:50051");
        let unix: ListenAddr = "unix:///run/authzd.sock".parse().unwrap();
        assert_eq!(unix, ListenAddr::Unix(PathBuf::from("/run/authzd.sock")));
        assert_eq!(unix.to_string(), "unix:///run/authzd.sock");
        let v6: ListenAddr = "[::1]:0".parse().unwrap();
        assert_eq!(v6, ListenAddr::Tcp("[::1]:0".parse().unwrap()));
    }

    #[test]
    fn refuses_relative_socket_paths_and_garbage() {
        let relative = "unix://authzd.sock".parse::<ListenAddr>().unwrap_err();
        assert!(relative.contains("absolute path"), "{relative}");
        let garbage = "not an address".parse::<ListenAddr>().unwrap_err();
        assert!(garbage.contains("neither HOST:PORT"), "{garbage}");
        assert!("127.0.0.1".parse::<ListenAddr>().is_err());
    }
}
