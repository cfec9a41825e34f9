//! Unix-socket listeners whose file has the mode asked for (`--unix-socket-mode`, 0600 by
//! default), whatever the process's umask, from the moment it exists.
//!
//! Why it matters: connecting to a Unix socket needs write permission on its file (unix(7)),
//! and without authentication every caller on a local listener is the local identity, by
//! default `system:admin`. A socket bound with the umask's mode is open to every local user
//! under `umask 000`, and to the socket's group under the usual 002.
//!
//! How, without a window in which the file is wider than asked:
//!
//! 1. The socket is created first and its own inode given the mode (`fchmod` on the unbound
//!    socket). Linux creates the file of a bound socket with that inode's mode less the umask
//!    (`unix_bind_bsd` in torvalds/linux `net/unix/af_unix.c`), so the file that appears is
//!    never wider than asked; the umask can only narrow it.
//! 2. The file is checked (`lstat`): a socket, with no permission bit beyond the mode. A kernel
//!    that ignored step 1 would fail this, and the listener is refused rather than served.
//! 3. The bits the umask removed are put back (`chmod`), widening to exactly the mode asked for.
//!
//! Not the umask itself: it is one value for the whole process, and the runtime's other threads
//! may be creating files (logs, records) while a listener binds. Not a private directory
//! renamed into place: the socket would keep reporting the private path as its address, and
//! the longer path can exceed `sun_path` where the real one fits. Like every Unix socket, this
//! one is only as private as its directory: a user who may write there can replace the file
//! whatever its mode.

use std::fmt;
use std::io;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::Path;
use std::str::FromStr;

/// The permission bits of a Unix socket's file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketMode(u32);

impl SocketMode {
    /// Owner only: the user authzd runs as (a sidecar in the same pod shares its uid).
    pub const DEFAULT: SocketMode = SocketMode(0o600);

    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether any user of the machine may connect (write permission for others).
    pub fn lets_any_user_connect(self) -> bool {
        self.0 & 0o002 != 0
    }
}

impl Default for SocketMode {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Octal permission bits, as chmod takes them: `600`, `0660`, `0o660`.
impl FromStr for SocketMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let digits = s.strip_prefix("0o").unwrap_or(s);
        let bits = u32::from_str_radix(digits, 8)
            .ok()
            .filter(|_| !digits.is_empty() && !digits.starts_with(['+', '-']))
            .ok_or_else(|| format!("`{s}` is not an octal mode like 0600"))?;
        if bits > 0o777 {
            return Err(format!(
                "`{s}`: a socket's mode is permission bits only (at most 0777)"
            ));
        }
        Ok(SocketMode(bits))
    }
}

impl fmt::Display for SocketMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04o}", self.0)
    }
}

/// Connections a socket queues before they are accepted (tokio's for TCP listeners).
const BACKLOG: i32 = 1024;

/// Binds and listens on `path`, whose socket file then has exactly `mode` (see the module's
/// steps). The path must be free: the caller removes a stale socket first.
pub(super) fn bind(path: &Path, mode: SocketMode) -> io::Result<tokio::net::UnixListener> {
    use socket2::{Domain, SockAddr, Socket, Type};

    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    rustix::fs::fchmod(&socket, rustix::fs::Mode::from_raw_mode(mode.bits()))?;
    socket.bind(&SockAddr::unix(path)?)?;
    if let Err(error) = settle_mode(path, mode) {
        // Ours to remove only if it is still a socket; anything else was put there by someone
        // else, and is never deleted.
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(path);
        }
        return Err(error);
    }
    socket.listen(BACKLOG)?;
    socket.set_nonblocking(true)?;
    tokio::net::UnixListener::from_std(std::os::unix::net::UnixListener::from(socket))
}

/// Steps 2 and 3: the file just bound is a socket no wider than `mode`; then exactly `mode`.
fn settle_mode(path: &Path, mode: SocketMode) -> io::Result<()> {
    let metadata = std::fs::symlink_metadata(path)?;
    if !metadata.file_type().is_socket() {
        return Err(io::Error::other(format!(
            "{} is no longer the socket just bound there",
            path.display()
        )));
    }
    let found = metadata.permissions().mode() & 0o777;
    if found & !mode.bits() != 0 {
        return Err(io::Error::other(format!(
            "{} was created with mode {found:04o}, wider than --unix-socket-mode {mode}: \
             this system does not create sockets with the mode of the unbound socket, so \
             authzd cannot bind it without a moment in which others could connect",
            path.display()
        )));
    }
    if found != mode.bits() {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode.bits()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_as_octal_permission_bits() {
        let mode = |s: &str| s.parse::<SocketMode>().map(SocketMode::bits);
        assert_eq!(mode("600"), Ok(0o600));
        assert_eq!(mode("0660"), Ok(0o660));
        assert_eq!(mode("0o666"), Ok(0o666));
        assert_eq!(mode("0"), Ok(0));
        for bad in ["", "0o", "8", "06x0", "+600", "-600", "rw-------"] {
            let error = mode(bad).unwrap_err();
            assert!(error.contains("octal mode"), "{bad}: {error}");
        }
        assert!(mode("4755").unwrap_err().contains("at most 0777"));
        assert_eq!(SocketMode::DEFAULT.to_string(), "0600");
        assert_eq!("0o660".parse::<SocketMode>().unwrap().to_string(), "0660");
    }

    #[test]
    fn only_write_for_others_lets_any_user_connect() {
        for (mode, anyone) in [
            (0o600, false),
            (0o660, false),
            (0o644, false),
            (0o602, true),
        ] {
            assert_eq!(SocketMode(mode).lets_any_user_connect(), anyone, "{mode:o}");
        }
    }

    /// In this process the umask is whatever the test runner inherited (tests share it, so it
    /// is not changed here; the server under `umask 000` is tests/api/unix_socket.rs's): the
    /// file gets exactly the mode, narrower or wider than the umask would give.
    #[tokio::test]
    async fn the_socket_file_gets_exactly_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        for bits in [0o600, 0o660, 0o640] {
            let path = dir.path().join(format!("{bits:o}.sock"));
            let _listener = bind(&path, SocketMode(bits)).unwrap();
            let metadata = std::fs::symlink_metadata(&path).unwrap();
            assert!(metadata.file_type().is_socket());
            assert_eq!(metadata.permissions().mode() & 0o777, bits);
            // And it listens.
            tokio::net::UnixStream::connect(&path).await.unwrap();
        }
    }

    #[test]
    fn a_file_wider_than_the_mode_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let listener = std::os::unix::net::UnixListener::bind(dir.path().join("s")).unwrap();
        let path = dir.path().join("s");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let error = settle_mode(&path, SocketMode::DEFAULT).unwrap_err();
        assert!(error.to_string().contains("mode 0666, wider"), "{error}");
        drop(listener);
        // Narrower is widened to the mode.
        let path = dir.path().join("t");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        settle_mode(&path, SocketMode(0o600)).unwrap();
        let mode = std::fs::symlink_metadata(&path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Not a socket: refused whatever its mode.
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let error = settle_mode(&file, SocketMode::DEFAULT).unwrap_err();
        assert!(
            error.to_string().contains("no longer the socket"),
            "{error}"
        );
    }
}
