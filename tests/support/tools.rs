//! The external programs the end-to-end and etcd tests drive, found one way: the path in the
//! tool's `AUTHZD_E2E_*` variable (`scripts/test.sh` sets them all), else its usual place (on
//! PATH, or where `scripts/test.sh` installs it in the repository). A tool that is missing (or
//! does not pass its probe) skips the test, saying why — except under `CI=true`, where it fails
//! the test.

use std::path::PathBuf;
use std::process::Command;

/// Where a tool is looked for, and how it is known to work.
pub struct Tool {
    /// What the skip message calls it.
    pub what: &'static str,
    /// The variable naming its path.
    pub env: &'static str,
    /// Without the variable: a program name (found on PATH) or a path relative to the
    /// repository (containing a `/`).
    pub fallback: &'static str,
    /// Arguments of a run that succeeds when the tool is usable.
    pub probe: &'static [&'static str],
    /// Environment of the probe run.
    pub probe_env: &'static [(&'static str, &'static str)],
}

pub const KUBECTL: Tool = Tool {
    what: "kubectl",
    env: "AUTHZD_E2E_KUBECTL",
    fallback: "kubectl",
    probe: &["version", "--client"],
    probe_env: &[("KUBECONFIG", "/dev/null")],
};

pub const CURL: Tool = Tool {
    what: "curl",
    env: "AUTHZD_E2E_CURL",
    fallback: "curl",
    probe: &["--version"],
    probe_env: &[],
};

pub const ETCD: Tool = Tool {
    what: "etcd",
    env: "AUTHZD_E2E_ETCD",
    fallback: "etcd",
    probe: &["--version"],
    probe_env: &[("ETCDCTL_API", "3")],
};

pub const ETCDCTL: Tool = Tool {
    what: "etcdctl",
    env: "AUTHZD_E2E_ETCDCTL",
    fallback: "etcdctl",
    probe: &["version"],
    probe_env: &[("ETCDCTL_API", "3")],
};

/// Debian's nginx: an upstream that cleans paths itself, behind `authzd proxy`.
pub const NGINX: Tool = Tool {
    what: "nginx",
    env: "AUTHZD_E2E_NGINX",
    fallback: "nginx",
    probe: &["-v"],
    probe_env: &[],
};

pub const ENVOY: Tool = Tool {
    what: "Envoy",
    env: "AUTHZD_E2E_ENVOY",
    fallback: ".e2e-venv/bin/envoy",
    probe: &["--version"],
    probe_env: &[],
};

pub const BUF: Tool = Tool {
    what: "buf",
    env: "AUTHZD_E2E_BUF",
    fallback: ".e2e-node/node_modules/.bin/buf",
    probe: &["--version"],
    probe_env: &[],
};

/// Python with the gRPC client stack of `tests/e2e/requirements.txt`.
pub const PYTHON_GRPC: Tool = Tool {
    what: "Python with grpcio/grpcio-reflection/protobuf",
    env: "AUTHZD_E2E_PYTHON",
    fallback: ".e2e-venv/bin/python",
    probe: &["-c", "import grpc, grpc_reflection, google.protobuf"],
    probe_env: &[],
};

/// Python with junitparser (`tests/e2e/requirements.txt`).
pub const PYTHON_JUNIT: Tool = Tool {
    what: "Python with junitparser",
    env: "AUTHZD_E2E_PYTHON",
    fallback: ".e2e-venv/bin/python",
    probe: &["-c", "import junitparser"],
    probe_env: &[],
};

impl Tool {
    /// The path this tool is looked for at.
    pub fn candidate(&self) -> PathBuf {
        match std::env::var_os(self.env) {
            Some(path) => PathBuf::from(path),
            None if self.fallback.contains('/') => super::repo().join(self.fallback),
            None => PathBuf::from(self.fallback),
        }
    }
}

/// The tool's path, if it is usable. Otherwise `None` after printing
/// `SKIPPED <test>: no <tool> at <path> (run scripts/test.sh, or set <VAR>)` — or, under
/// `CI=true`, a panic with that reason.
pub fn tool_or_skip(tool: &Tool) -> Option<PathBuf> {
    let candidate = tool.candidate();
    let usable = Command::new(&candidate)
        .args(tool.probe)
        .envs(tool.probe_env.iter().copied())
        .output()
        .is_ok_and(|output| output.status.success());
    if usable {
        return Some(candidate);
    }
    let why = format!(
        "no {} at {} (run scripts/test.sh, or set {})",
        tool.what,
        candidate.display(),
        tool.env
    );
    if super::ci() {
        panic!("{why}");
    }
    eprintln!("SKIPPED {}: {why}", super::test_name());
    None
}
