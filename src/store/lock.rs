//! One writer per policy directory: two servers writing one directory each rewrote files from
//! their own memory, and an acknowledged write of one vanished under the other's.
//!
//! A server that accepts admin writes on a policy directory holds an exclusive `flock(2)` on
//! [`LOCK_NAME`] in every directory it may write (each `--policy` directory, and the directory
//! of each `--policy` file), for as long as it runs. A second server that would write there
//! finds the lock held and refuses to start, naming the holder: the holder records its pid,
//! host and listen addresses in the lock file right after taking the lock.
//!
//! Why `flock` on a file that stays rather than a pid file created with `O_EXCL`: the kernel
//! releases the lock when the holder dies, however it dies (`kill -9`, OOM), so no stale lock
//! ever needs removing by hand, and no pid is ever guessed alive or dead. The file is never
//! removed (removing it while another process opens it would let two processes hold locks on
//! two different inodes); its content is only meaningful while it is locked. The name is a
//! dotfile, so the policy loader and the directory watcher skip it, as they skip the commit
//! journal.
//!
//! A server that cannot write a directory (a ConfigMap volume, a read-only file system, a
//! directory owned by someone else) does not lock: it follows the directory read-only
//! ([`Writability::ReadOnly`]), as does one started with `--read-only`.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use thiserror::Error;

/// The lock file's name, in each locked directory: a dotfile, so that the loader and the
/// watcher never read it as policy.
pub const LOCK_NAME: &str = ".authzd-lock";

/// The directories a store over `paths` may write: each directory named, and the directory of
/// each file named, canonical and without repeats (so that two spellings of one directory
/// are one lock).
pub fn write_dirs(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    // A path that does not exist is the loader's to report; it gets no lock file of its own
    // (a typo must not leave `.authzd-lock` in the working directory).
    for path in paths.iter().filter(|path| path.exists()) {
        let dir = if path.is_dir() {
            path.clone()
        } else {
            match path.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
                _ => PathBuf::from("."),
            }
        };
        let dir = dir.canonicalize().unwrap_or(dir);
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// Whether this process can write a directory, and if not, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Writability {
    Writable,
    /// Why not, in words for the startup log and for the status a refused write gets.
    ReadOnly(String),
}

/// Whether this process may create and replace files in `dir`: `access(2)` with the effective
/// ids (what the store's writes will be checked against). A read-only file system answers
/// `EROFS` whoever asks; a directory owned by someone else (a ConfigMap volume's files are
/// root's), `EACCES`.
pub fn writability(dir: &Path) -> Writability {
    use rustix::fs::{accessat, Access, AtFlags, CWD};
    match accessat(CWD, dir, Access::WRITE_OK, AtFlags::EACCESS) {
        Ok(()) => Writability::Writable,
        Err(rustix::io::Errno::ROFS) => {
            Writability::ReadOnly(format!("`{}` is on a read-only file system", dir.display()))
        }
        Err(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM) => Writability::ReadOnly(format!(
            "`{}` is not writable by this process's user",
            dir.display()
        )),
        Err(errno) => Writability::ReadOnly(format!(
            "`{}` cannot be written: {}",
            dir.display(),
            std::io::Error::from(errno)
        )),
    }
}

/// Who holds a directory's lock, as it recorded itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holder {
    pub pid: Option<u32>,
    pub host: Option<String>,
    pub listen: Vec<String>,
}

impl Holder {
    /// This process, listening on `listen`.
    pub fn this_process(listen: Vec<String>) -> Self {
        Holder {
            pid: Some(std::process::id()),
            host: host_name(),
            listen,
        }
    }

    /// The lock file's text: `key value` lines, one per listener for `listen`.
    fn render(&self) -> String {
        let mut text = String::from("# authzd: the server that writes this policy directory\n");
        if let Some(pid) = self.pid {
            text.push_str(&format!("pid {pid}\n"));
        }
        if let Some(host) = &self.host {
            text.push_str(&format!("host {host}\n"));
        }
        for addr in &self.listen {
            text.push_str(&format!("listen {addr}\n"));
        }
        text
    }

    /// What [`Self::render`] wrote; lines it does not know are skipped (a newer writer's).
    fn parse(text: &str) -> Self {
        let mut holder = Holder::default();
        for line in text.lines() {
            match line.split_once(' ') {
                Some(("pid", pid)) => holder.pid = pid.trim().parse().ok(),
                Some(("host", host)) => holder.host = Some(host.trim().to_string()),
                Some(("listen", addr)) => holder.listen.push(addr.trim().to_string()),
                _ => {}
            }
        }
        holder
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pid {
            Some(pid) => write!(f, "pid {pid}")?,
            // Locked, and not yet recorded: the holder is between its lock and its write.
            None => write!(f, "a process that has not recorded its pid yet")?,
        }
        if let Some(host) = &self.host {
            write!(f, " on host `{host}`")?;
        }
        if !self.listen.is_empty() {
            write!(f, ", listening on {}", self.listen.join(", "))?;
        }
        Ok(())
    }
}

/// The host name, for a holder on another host that shares the directory (NFS): the kernel's
/// (Linux), else `$HOSTNAME`.
fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
}

#[derive(Debug, Error)]
pub enum LockError {
    #[error("another authzd already writes the policy directory `{dir}` ({holder}; lock file `{lock}`): one directory has one writer. Stop it, write through it, or start this server with --read-only to follow the directory without writing")]
    Held {
        dir: PathBuf,
        lock: PathBuf,
        holder: Holder,
    },
    #[error("cannot lock the policy directory `{dir}` (lock file `{lock}`): {source}")]
    Io {
        dir: PathBuf,
        lock: PathBuf,
        source: std::io::Error,
    },
}

/// The locks of a writing server's directories, held until dropped (the process's end).
#[derive(Debug)]
pub struct DirLocks {
    held: Vec<(PathBuf, File)>,
}

impl DirLocks {
    /// Locks every directory of `dirs` for `holder`, or none: the first one held by another
    /// process is the error (the locks taken before it are released on return).
    pub fn acquire(dirs: &[PathBuf], holder: &Holder) -> Result<Self, LockError> {
        let mut held = Vec::with_capacity(dirs.len());
        for dir in dirs {
            held.push((dir.clone(), lock_one(dir, holder)?));
        }
        Ok(DirLocks { held })
    }

    /// Records `holder` in every lock file, replacing what was recorded (the listen
    /// addresses once bound).
    pub fn record(&self, holder: &Holder) -> Result<(), LockError> {
        for (dir, file) in &self.held {
            write_record(dir, file, holder)?;
        }
        Ok(())
    }

    /// The directories locked.
    pub fn dirs(&self) -> impl Iterator<Item = &Path> {
        self.held.iter().map(|(dir, _)| dir.as_path())
    }
}

fn lock_one(dir: &Path, holder: &Holder) -> Result<File, LockError> {
    use rustix::fs::{flock, FlockOperation};
    let lock = dir.join(LOCK_NAME);
    let io = |source: std::io::Error| LockError::Io {
        dir: dir.to_path_buf(),
        lock: lock.clone(),
        source,
    };
    // Not truncated on open: until this process holds the lock, the text is the holder's.
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock)
        .map_err(io)?;
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let mut text = String::new();
            // An unreadable record still names the directory and the lock file.
            let _ = file.read_to_string(&mut text);
            return Err(LockError::Held {
                dir: dir.to_path_buf(),
                lock,
                holder: Holder::parse(&text),
            });
        }
        Err(errno) => return Err(io(errno.into())),
    }
    write_record(dir, &file, holder)?;
    Ok(file)
}

/// Replaces the text of a held lock file with `holder`.
fn write_record(dir: &Path, mut file: &File, holder: &Holder) -> Result<(), LockError> {
    let io = |source: std::io::Error| LockError::Io {
        dir: dir.to_path_buf(),
        lock: dir.join(LOCK_NAME),
        source,
    };
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    file.write_all(holder.render().as_bytes()).map_err(io)?;
    file.flush().map_err(io)
}

/// How long a follower's read waits for the writer's commit journal to go: a write of several
/// files is whole once its journal is removed, and the writer removes it within milliseconds
/// of its last rename (the watcher's debounce already waited for those).
pub const FOLLOWER_JOURNAL_WAIT: Duration = Duration::from_secs(1);

/// A follower's read, before it reads: waits up to `patience` while `journal` (the writer's
/// commit journal) exists, so that it does not read the middle of the writer's commit of
/// several files; whether the journal is gone. A journal that stays (its writer was killed
/// half-way, and recovery is the next writer's) is logged, and the files are read as they are:
/// a follower never writes, so it cannot finish the write itself.
pub fn wait_for_commit(journal: &Path, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    while journal.exists() {
        if Instant::now() >= deadline {
            tracing::warn!(
                journal = %journal.display(),
                "the writer's commit journal is still there: a write of several files is in progress or was interrupted; reading the files as they are (the writer finishes it, at the latest when it starts again)"
            );
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// How a server over a policy directory may use it.
#[derive(Debug)]
pub enum Access {
    /// It writes the directory, and holds its lock until dropped.
    Writer(DirLocks),
    /// It follows the directory without writing it, for this reason.
    Follower(String),
}

impl Access {
    /// A writer records `listen` (the bound addresses) as its own in its lock files.
    pub fn record_listeners(&self, listen: Vec<String>) -> Result<(), LockError> {
        match self {
            Access::Writer(locks) => locks.record(&Holder::this_process(listen)),
            Access::Follower(_) => Ok(()),
        }
    }

    /// Why writes are refused, for a follower.
    pub fn read_only(&self) -> Option<&str> {
        match self {
            Access::Writer(_) => None,
            Access::Follower(reason) => Some(reason),
        }
    }
}

/// Decides how a server over `paths` uses them: a follower if `read_only` (`--read-only`) or
/// if any directory it would write is not writable (it could not keep its promise that an
/// acknowledged write is on disk), else the writer, holding every directory's lock for a
/// holder listening on `listen` — or the error naming the server that already holds one.
pub fn claim(paths: &[PathBuf], read_only: bool, listen: Vec<String>) -> Result<Access, LockError> {
    let follower = |reason: String| {
        tracing::warn!(%reason, "following the policy directory read-only: admin writes are refused");
        Ok(Access::Follower(reason))
    };
    if read_only {
        return follower("started with --read-only".to_string());
    }
    let dirs = write_dirs(paths);
    for dir in &dirs {
        if let Writability::ReadOnly(reason) = writability(dir) {
            return follower(reason);
        }
    }
    let locks = DirLocks::acquire(&dirs, &Holder::this_process(listen))?;
    for dir in locks.dirs() {
        tracing::info!(dir = %dir.display(), lock = LOCK_NAME, "policy directory locked: this server is its writer");
    }
    Ok(Access::Writer(locks))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(addr: &str) -> Holder {
        Holder {
            pid: Some(4242),
            host: Some("node-a".into()),
            listen: vec![addr.into()],
        }
    }

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = write_dirs(&[dir.path().to_path_buf()]);
        let first = DirLocks::acquire(&dirs, &holder("127.0.0.1:50051")).unwrap();
        // flock locks belong to the open file description: a second open in this process
        // conflicts exactly as another process's would.
        let refused = DirLocks::acquire(&dirs, &holder("127.0.0.1:50052")).unwrap_err();
        let message = refused.to_string();
        assert!(message.contains("pid 4242"), "{message}");
        assert!(message.contains("127.0.0.1:50051"), "{message}");
        assert!(message.contains(LOCK_NAME), "{message}");
        drop(first);
        let second = DirLocks::acquire(&dirs, &holder("127.0.0.1:50052")).unwrap();
        let text = std::fs::read_to_string(dir.path().join(LOCK_NAME)).unwrap();
        assert_eq!(Holder::parse(&text), holder("127.0.0.1:50052"), "{text}");
        drop(second);
    }

    #[test]
    fn a_file_and_its_directory_are_one_lock() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rbac.yaml");
        std::fs::write(&file, "").unwrap();
        let dirs = write_dirs(&[dir.path().to_path_buf(), file, dir.path().join(".")]);
        assert_eq!(dirs, vec![dir.path().canonicalize().unwrap()]);
    }

    #[test]
    fn a_follower_waits_for_the_writers_journal_a_bounded_time() {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join(".authzd-commit-journal");
        assert!(wait_for_commit(&journal, Duration::ZERO));
        std::fs::write(&journal, "x").unwrap();
        let started = Instant::now();
        assert!(!wait_for_commit(&journal, Duration::from_millis(100)));
        assert!(started.elapsed() >= Duration::from_millis(100));
        let remover = {
            let journal = journal.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                std::fs::remove_file(journal).unwrap();
            })
        };
        assert!(wait_for_commit(&journal, Duration::from_secs(10)));
        remover.join().unwrap();
    }

    #[test]
    fn every_directory_or_none() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let dirs = write_dirs(&[a.path().to_path_buf(), b.path().to_path_buf()]);
        let only_b = DirLocks::acquire(&dirs[1..], &holder("x")).unwrap();
        assert!(DirLocks::acquire(&dirs, &holder("y")).is_err());
        // a's lock was released when the acquisition failed on b.
        let only_a = DirLocks::acquire(&dirs[..1], &holder("z")).unwrap();
        drop((only_a, only_b));
    }
}
