//! What a server serves, said once at startup: where the policy comes from
//! (a directory and its path, the embedded example, or etcd), how many objects of each kind
//! it holds, and whether the server accepts writes. Before, the log named neither the
//! directory nor what was loaded, so a server serving the wrong policy looked like any other.

use std::fmt;
use std::path::PathBuf;

use crate::policy::model::{BindingKind, PolicySet, RoleKind};

/// Where the served policy comes from.
#[derive(Clone, Debug)]
pub enum Source {
    /// `--policy` paths, as given (made absolute for the log, so that it names them whatever
    /// the working directory).
    Directory(Vec<PathBuf>),
    /// The example built into the binary (`serve` without `--policy`).
    Embedded,
    /// etcd, under a key prefix.
    Etcd { prefix: String, replica: String },
}

impl Source {
    fn kind(&self) -> &'static str {
        match self {
            Source::Directory(_) => "directory",
            Source::Embedded => "embedded",
            Source::Etcd { .. } => "etcd",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Directory(paths) => {
                let paths: Vec<String> = paths
                    .iter()
                    .map(|path| {
                        std::path::absolute(path)
                            .unwrap_or_else(|_| path.clone())
                            .display()
                            .to_string()
                    })
                    .collect();
                write!(f, "the policy directory {}", paths.join(", "))
            }
            Source::Embedded => write!(f, "the example policy embedded in the binary"),
            Source::Etcd { prefix, replica } => {
                write!(f, "etcd as replica {replica} (prefix `{prefix}`)")
            }
        }
    }
}

/// How many objects of each kind a policy holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub cluster_roles: usize,
    pub roles: usize,
    pub cluster_role_bindings: usize,
    pub role_bindings: usize,
    pub field_policies: usize,
    pub change_gates: usize,
    pub abac_lines: usize,
}

impl Counts {
    pub fn of(policy: &PolicySet) -> Self {
        let cluster_roles = policy
            .roles
            .iter()
            .filter(|role| role.kind == RoleKind::ClusterRole)
            .count();
        let cluster_role_bindings = policy
            .bindings
            .iter()
            .filter(|binding| binding.kind == BindingKind::ClusterRoleBinding)
            .count();
        Counts {
            cluster_roles,
            roles: policy.roles.len() - cluster_roles,
            cluster_role_bindings,
            role_bindings: policy.bindings.len() - cluster_role_bindings,
            field_policies: policy.field_policies.len(),
            change_gates: policy.gates.len(),
            abac_lines: policy.abac.len(),
        }
    }
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ClusterRoles, {} Roles, {} ClusterRoleBindings, {} RoleBindings, {} FieldPolicies, {} ChangeGates, {} ABAC lines",
            self.cluster_roles,
            self.roles,
            self.cluster_role_bindings,
            self.role_bindings,
            self.field_policies,
            self.change_gates,
            self.abac_lines
        )
    }
}

/// The startup line: on stderr for people (`authzd serving revision R from SOURCE: COUNTS;
/// WRITES`, beside `authzd listening on …`), and as one event whose fields a log pipeline reads. `read_only` is why writes are
/// refused, `None` when they are accepted.
pub fn log_startup(source: &Source, policy: &PolicySet, revision: u64, read_only: Option<&str>) {
    let counts = Counts::of(policy);
    let writes = match read_only {
        None => "accepts writes".to_string(),
        Some(reason) => format!("read-only, refuses writes: {reason}"),
    };
    eprintln!("authzd serving revision {revision} from {source}: {counts}; {writes}");
    tracing::info!(
        source = source.kind(),
        from = %source,
        revision,
        cluster_roles = counts.cluster_roles,
        roles = counts.roles,
        cluster_role_bindings = counts.cluster_role_bindings,
        role_bindings = counts.role_bindings,
        field_policies = counts.field_policies,
        change_gates = counts.change_gates,
        abac_lines = counts.abac_lines,
        writes = read_only.is_none(),
        read_only = read_only.unwrap_or(""),
        "policy loaded; serving"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_kind() {
        let policy =
            crate::store::embedded::load(&crate::policy::load::LoadOptions::default()).unwrap();
        let counts = Counts::of(&policy);
        assert_eq!(
            counts.cluster_roles + counts.roles,
            policy.roles.len(),
            "{counts}"
        );
        assert!(counts.cluster_roles > 0 && counts.role_bindings > 0 && counts.abac_lines > 0);
        let text = counts.to_string();
        assert!(text.contains(&format!("{} ClusterRoles", counts.cluster_roles)));
        assert!(text.contains(&format!("{} ABAC lines", counts.abac_lines)));
    }
}
