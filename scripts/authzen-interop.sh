#!/usr/bin/env bash
# Runs the AuthZEN working group's Todo interop runner, unchanged, against a fresh authzd
# (docs/authzen.md §8).
#
#   scripts/authzen-interop.sh RUNNER_DIR [SPEC_VERSION...]
#
# RUNNER_DIR holds the runner as openid/authzen publishes it: runner.ts and its
# decisions-*.json (the repository's interop/authzen-todo-backend/test/). It is on no package
# registry, so it is not fetched here: obtain a checkout of openid/authzen and pass that
# directory. SPEC_VERSION defaults to authorization-api-1_0-01 (the runner's default) and
# authorization-api-1_0-02 (-00 resolves ownership from the backend's own store, which a PDP
# is not given). The runner's dependency (cli-color) and tsx come from npm, pinned, into
# .e2e-node/ (never global). authzd is the debug build unless AUTHZD_BIN names another. Exits
# non-zero unless every decision of every version passes.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
runner_dir=$(cd "${1:?usage: scripts/authzen-interop.sh RUNNER_DIR [SPEC_VERSION...]}" && pwd)
shift
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(authorization-api-1_0-01 authorization-api-1_0-02)
[ -f "$runner_dir/runner.ts" ] || { echo "no runner.ts in $runner_dir" >&2; exit 2; }

cli_color_version=2.0.4
tsx_version=4.23.15
node_prefix="$repo/.e2e-node"
if [ ! -d "$node_prefix/node_modules/cli-color" ] || [ ! -x "$node_prefix/node_modules/.bin/tsx" ]; then
  npm install --prefix "$node_prefix" --no-audit --no-fund --silent \
    "cli-color@$cli_color_version" "tsx@$tsx_version"
fi

bin="${AUTHZD_BIN:-}"
if [ -z "$bin" ]; then
  (cd "$repo" && cargo build --quiet --bin authzd)
  bin="${CARGO_TARGET_DIR:-$repo/target}/debug/authzd"
fi

work=$(mktemp -d)
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/policy"
cp "$repo/tests/fixtures/authzen-interop.yaml" "$work/policy/"
# The runner sends AUTHZEN_PDP_API_KEY as its Authorization header: a bearer token of a
# caller allowed to ask (system:masters).
token="interop-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
echo "$token,authzen-interop-runner,uid-interop,system:masters" > "$work/tokens.csv"
RUST_LOG=warn,authzd=info "$bin" serve --listen 127.0.0.1:0 --policy "$work/policy" \
  --token-auth-file "$work/tokens.csv" 2> "$work/authzd.log" &
server=$!
addr=""
for _ in $(seq 1 300); do
  addr=$(sed -n 's/.*authzd listening on \([0-9.:]*\).*/\1/p' "$work/authzd.log" | head -n1)
  [ -n "$addr" ] && curl -sf "http://$addr/readyz" > /dev/null && break
  addr=""
  sleep 0.1
done
[ -n "$addr" ] || { echo "authzd did not start:" >&2; cat "$work/authzd.log" >&2; exit 1; }

failed=0
for version in "${versions[@]}"; do
  echo "== $version against http://$addr"
  output=$(cd "$runner_dir" && NODE_PATH="$node_prefix/node_modules" \
    AUTHZEN_PDP_API_KEY="Bearer $token" \
    "$node_prefix/node_modules/.bin/tsx" runner.ts "http://$addr" "$version" console 2>&1) || true
  printf '%s\n' "$output"
  passed=$(printf '%s\n' "$output" | grep -c '^[^ ]*PASS' || true)
  bad=$(printf '%s\n' "$output" | grep -cE '^[^ ]*(FAIL|ERROR)' || true)
  echo "$version: $passed passed, $bad failed"
  if [ "$bad" -ne 0 ] || [ "$passed" -eq 0 ]; then failed=1; fi
done
exit "$failed"
