#!/usr/bin/env bash
# What an admin write costs end to end on a policy directory: `authzd apply -f` of a small
# manifest against `authzd serve --policy DIR`, each call timed whole (client start, the
# write's fsyncs and journal, the publish); medians of N per binary and kind of write:
#
#   one-file  a ClusterRoleBinding alone (one file rewritten)
#   two-file  the same binding and the ClusterRole it binds, kept in two files (the commit
#             journal's case)
#
# Several binaries may be given (the build before a change and after it): their calls are
# interleaved, so that a noisy machine weighs on each alike.
#
#   scripts/write-cost.sh [-n N] BIN...
set -euo pipefail

runs=100
if [[ "${1:-}" == "-n" ]]; then
  runs=$2
  shift 2
fi
[[ $# -gt 0 ]] || { echo "usage: $0 [-n N] BIN..." >&2; exit 2; }

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

role() { # $1: the verb the role grants
  printf 'apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: wide\nrules:\n- apiGroups: [""]\n  resources: [pods]\n  verbs: [%s]\n' "$1"
}
binding() { # $1: the user it binds
  printf 'apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: wide-users\nsubjects:\n- kind: User\n  name: %s\n  apiGroup: rbac.authorization.k8s.io\nroleRef:\n  kind: ClusterRole\n  name: wide\n  apiGroup: rbac.authorization.k8s.io\n' "$1"
}
# Each write changes what it writes: the one-file write binds user-I, the two-file write
# flips the role's verb and binds other-I.
binding "user-0" >"$work/one-file-0.yaml"
binding "user-1" >"$work/one-file-1.yaml"
{ role "get"; echo "---"; binding "other-0"; } >"$work/two-file-0.yaml"
{ role "list"; echo "---"; binding "other-1"; } >"$work/two-file-1.yaml"

# One server per binary, each on its own copy of a two-file policy directory.
n=0
servers=()
for bin in "$@"; do
  dir="$work/policy-$n"
  mkdir -p "$dir"
  role "get" >"$dir/roles.yaml"
  binding "user-0" >"$dir/bindings.yaml"
  port=$((52100 + n))
  "$bin" serve --policy "$dir" --listen "127.0.0.1:$port" >"$work/server-$n.log" 2>&1 &
  pids+=($!)
  servers+=("http://127.0.0.1:$port")
  n=$((n + 1))
done
for server in "${servers[@]}"; do
  for _ in $(seq 100); do
    "$1" status --server "$server" >/dev/null 2>&1 && break
    sleep 0.1
  done
done

# µs of one call
timed() {
  local start end
  start=$(date +%s%N)
  "$@" >/dev/null
  end=$(date +%s%N)
  echo $(((end - start) / 1000))
}

for ((r = 0; r < runs; r++)); do
  i=$((r % 2))
  n=0
  for bin in "$@"; do
    for kind in one-file two-file; do
      timed "$bin" apply --server "${servers[$n]}" -f "$work/$kind-$i.yaml" >>"$work/times-$n-$kind"
    done
    n=$((n + 1))
  done
done

median() { sort -n "$1" | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f", m/1000}'; }
echo "| binary | one-file apply, median ms | two-file apply, median ms |"
echo "| --- | --- | --- |"
n=0
for bin in "$@"; do
  echo "| $bin | $(median "$work/times-$n-one-file") | $(median "$work/times-$n-two-file") |"
  n=$((n + 1))
done
