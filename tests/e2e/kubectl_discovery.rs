//! End to end with kubectl's API discovery: `kubectl api-resources` and `kubectl auth can-i`
//! against a real server, which first read `/api` and `/apis` (asking for aggregated
//! discovery, answered with the legacy documents) and then every group version, to map a
//! resource name to its group.
//!
//! kubectl comes from `AUTHZD_E2E_KUBECTL` (set by `scripts/test.sh`), else `kubectl` on
//! PATH. Without one the test is skipped with a message, unless `CI=true`, where a missing
//! kubectl is a failure. `KUBECONFIG` points at an empty file so no user config is read, and
//! every command gets its own `--cache-dir` so that no discovery cache is shared or reused.
//!
//! `kubectl auth can-i` sends its SelfSubjectAccessReview as Kubernetes protobuf; what is
//! asserted is the review kubectl built (read from its `-v=8` request log), which is what
//! discovery decides, not the server's answer to it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use crate::support::tools::{tool_or_skip, KUBECTL};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::server::{run_with_timeout, sample_policy, Server};

/// Resources only the policy names: kubectl can resolve them through discovery alone.
const WIDGETS: &str = "\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: widget-reader}
rules:
- apiGroups: [example.com]
  resources: [widgets, widgets/scale]
  verbs: [get, list]
";

struct Kubectl {
    binary: PathBuf,
    kubeconfig: tempfile::NamedTempFile,
    server: String,
}

impl Kubectl {
    /// `kubectl ARGS --server URL --cache-dir FRESH_TEMP_DIR`.
    fn run(&self, args: &[&str]) -> Output {
        let cache = tempfile::tempdir().unwrap();
        let mut command = Command::new(&self.binary);
        command
            .args(args)
            .args(["--server", &self.server, "--cache-dir"])
            .arg(cache.path())
            .env("KUBECONFIG", self.kubeconfig.path());
        run_with_timeout(command, Duration::from_secs(60))
    }

    /// `kubectl auth can-i VERB RESOURCE -v=8`: the review kubectl sent, and its log.
    fn can_i(&self, verb: &str, resource: &str) -> (ResourceAttributes, String) {
        let output = self.run(&["auth", "can-i", verb, resource, "-v=8"]);
        let log = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            !log.contains("doesn't have a resource type"),
            "discovery did not resolve {resource}:\n{log}"
        );
        let body = posted_review(&log)
            .unwrap_or_else(|| panic!("no SelfSubjectAccessReview body in the log:\n{log}"));
        (ResourceAttributes::of_review(&body), log)
    }
}

/// The body of the SelfSubjectAccessReview POST in a `-v=8` log, where client-go prints a
/// binary body as a hex dump between `"Request Body" body=<` and `>`:
/// `\t00000000  6b 38 73 00 0a 32 ...  |k8s..2...|`.
fn posted_review(log: &str) -> Option<Vec<u8>> {
    let mut lines = log.lines();
    lines.find(|line| line.ends_with("\"Request Body\" body=<"))?;
    let mut bytes = Vec::new();
    for line in lines.take_while(|line| line.trim() != ">") {
        let hex = line.split('|').next().unwrap_or_default();
        // The first token is the offset.
        for pair in hex.split_whitespace().skip(1) {
            bytes.push(u8::from_str_radix(pair, 16).ok()?);
        }
    }
    Some(bytes)
}

/// The first length-delimited field `number` of a protobuf message.
fn field(message: &[u8], number: u64) -> Option<&[u8]> {
    fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *bytes.get(*at)?;
            *at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    let mut at = 0;
    while at < message.len() {
        let key = varint(message, &mut at)?;
        match key & 7 {
            0 => {
                varint(message, &mut at)?;
            }
            1 => at += 8,
            2 => {
                let length = usize::try_from(varint(message, &mut at)?).ok()?;
                let value = message.get(at..at + length)?;
                at += length;
                if key >> 3 == number {
                    return Some(value);
                }
            }
            5 => at += 4,
            _ => return None,
        }
    }
    None
}

/// `spec.resourceAttributes` of a SelfSubjectAccessReview kubectl sent.
#[derive(Debug, PartialEq, Eq)]
struct ResourceAttributes {
    verb: String,
    group: String,
    resource: String,
}

impl ResourceAttributes {
    /// From the Kubernetes protobuf envelope: the magic `k8s\0`, then a `runtime.Unknown`
    /// whose field 2 is the SelfSubjectAccessReview; its `spec` is field 2, the spec's
    /// `resourceAttributes` field 1, and in those `verb` is 2, `group` 3, `resource` 5
    /// (k8s.io/api/authorization/v1/generated.proto).
    fn of_review(body: &[u8]) -> Self {
        let unknown = body
            .strip_prefix(b"k8s\0")
            .unwrap_or_else(|| panic!("not Kubernetes protobuf: {body:?}"));
        let attributes = field(unknown, 2)
            .and_then(|review| field(review, 2))
            .and_then(|spec| field(spec, 1))
            .unwrap_or_else(|| panic!("no spec.resourceAttributes in {body:?}"));
        let text = |number| {
            field(attributes, number)
                .map(|bytes| String::from_utf8(bytes.to_vec()).unwrap())
                .unwrap_or_default()
        };
        Self {
            verb: text(2),
            group: text(3),
            resource: text(5),
        }
    }
}

/// `kubectl api-resources` rows as (name, apiVersion).
fn api_resources(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .skip(1)
        .filter_map(|row| {
            let columns: Vec<&str> = row.split_whitespace().collect();
            // NAME [SHORTNAMES] APIVERSION NAMESPACED KIND: the version is third from the end.
            let version = columns.len().checked_sub(3).map(|at| columns[at])?;
            Some((columns.first()?.to_string(), version.to_string()))
        })
        .collect()
}

#[tokio::test]
async fn kubectl_maps_resources_to_groups_through_discovery() {
    let Some(binary) = tool_or_skip(&KUBECTL) else {
        return;
    };
    let policy = sample_policy();
    std::fs::write(policy.path().join("widgets.yaml"), WIDGETS).unwrap();
    let server = Server::start_serving(policy.path(), &[]).await;
    let kubectl = Kubectl {
        binary,
        kubeconfig: tempfile::NamedTempFile::new().unwrap(),
        server: server.url(),
    };

    let output = kubectl.run(&["api-resources"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    // A group version that failed to load is reported on stderr, and the rest listed.
    assert!(stderr.trim().is_empty(), "{stderr}");
    let rows = api_resources(&stdout);
    for (name, version) in [
        ("deployments", "apps/v1"),
        ("pods", "v1"),
        ("horizontalpodautoscalers", "autoscaling/v2"),
        ("selfsubjectaccessreviews", "authorization.k8s.io/v1"),
        ("widgets", "example.com/v1"),
    ] {
        assert!(
            rows.contains(&(name.to_string(), version.to_string())),
            "no {name} in {version}:\n{stdout}"
        );
    }

    let (review, log) = kubectl.can_i("create", "deployments");
    assert_eq!(
        review,
        ResourceAttributes {
            verb: "create".into(),
            group: "apps".into(),
            resource: "deployments".into(),
        },
        "{log}"
    );
    // kubectl asked for aggregated discovery, got plain JSON, and read the group versions.
    assert!(
        log.contains(
            "Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        ),
        "{log}"
    );
    assert!(!log.contains("Content-Type: application/json;g="), "{log}");
    assert!(log.contains("GET http://"), "{log}");
    assert!(log.contains("/apis/apps/v1?"), "{log}");

    let (review, log) = kubectl.can_i("get", "widgets.example.com");
    assert_eq!(
        (review.group.as_str(), review.resource.as_str()),
        ("example.com", "widgets"),
        "{log}"
    );
    // A short name from the table.
    let (review, log) = kubectl.can_i("list", "deploy");
    assert_eq!(
        (review.group.as_str(), review.resource.as_str()),
        ("apps", "deployments"),
        "{log}"
    );
}
