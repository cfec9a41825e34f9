#!/usr/bin/env bash
# Replicas on etcd, locally (README "Replicas on etcd"): a 3-member etcd cluster on loopback
# (data in a temporary directory, on tmpfs when /dev/shm is there) and three authzd replicas in
# etcd mode sharing one prefix. Prints how to try it, then runs until Ctrl-C; every process it
# started and its data are removed on exit.
#
#   scripts/etcd-demo.sh            # start, print the walkthrough, wait for Ctrl-C
#   scripts/etcd-demo.sh --check    # start, run the walkthrough itself, stop (exit 1 on a failure)
#
# Needs etcd (Debian: `apt-get install etcd-server`), curl and a built authzd
# (`cargo build --release`, or `cargo build`). Override with ETCD=/path/to/etcd and
# AUTHZD=/path/to/authzd. Ports: etcd clients 2379/22379/32379 and peers 2380/22380/32380
# (etcd's own local-cluster convention), authzd 50051/50052/50053; each range starts at
# ETCD_CLIENT_PORT, ETCD_PEER_PORT and AUTHZD_PORT when set (then +1, +2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

check=false
case "${1:-}" in
  --check) check=true ;;
  "") ;;
  *) echo "usage: scripts/etcd-demo.sh [--check]" >&2; exit 2 ;;
esac

# --- what it runs ------------------------------------------------------------------------------
etcd_bin="${ETCD:-$(command -v etcd || true)}"
if [ -z "$etcd_bin" ] || ! "$etcd_bin" --version > /dev/null 2>&1; then
  echo "etcd-demo.sh: no etcd found (Debian: apt-get install etcd-server; or set ETCD=PATH)" >&2
  exit 1
fi
authzd="${AUTHZD:-}"
if [ -z "$authzd" ]; then
  for candidate in target/release/authzd target/debug/authzd; do
    if [ -x "$candidate" ]; then authzd="$PWD/$candidate"; break; fi
  done
fi
if [ -z "$authzd" ] || [ ! -x "$authzd" ]; then
  echo "etcd-demo.sh: no authzd binary: run \`cargo build --release\` (or set AUTHZD=PATH)" >&2
  exit 1
fi
command -v curl > /dev/null || { echo "etcd-demo.sh: curl is needed" >&2; exit 1; }

if [ -n "${ETCD_CLIENT_PORT:-}" ]; then
  client_ports=("$ETCD_CLIENT_PORT" $((ETCD_CLIENT_PORT + 1)) $((ETCD_CLIENT_PORT + 2)))
else
  client_ports=(2379 22379 32379)
fi
if [ -n "${ETCD_PEER_PORT:-}" ]; then
  peer_ports=("$ETCD_PEER_PORT" $((ETCD_PEER_PORT + 1)) $((ETCD_PEER_PORT + 2)))
else
  peer_ports=(2380 22380 32380)
fi
base="${AUTHZD_PORT:-50051}"
authzd_ports=("$base" $((base + 1)) $((base + 2)))

all_ports=("${client_ports[@]}" "${peer_ports[@]}" "${authzd_ports[@]}")
if [ "$(printf '%s\n' "${all_ports[@]}" | sort -u | wc -l)" -ne 9 ]; then
  echo "etcd-demo.sh: the port ranges overlap: ${all_ports[*]}" >&2
  exit 1
fi
# A port already taken would make a member or replica fail later with a less obvious message.
for port in "${all_ports[@]}"; do
  if (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null; then
    echo "etcd-demo.sh: 127.0.0.1:$port is in use (set ETCD_CLIENT_PORT, ETCD_PEER_PORT or AUTHZD_PORT)" >&2
    exit 1
  fi
done

# --- cleanup: only the processes started here, by pid, and the data directory ------------------
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  work="$(mktemp -d /dev/shm/authzd-etcd-demo.XXXXXX)"
else
  work="$(mktemp -d -t authzd-etcd-demo.XXXXXX)"
fi
pids=() # etcd members first, then the replicas
stop() { # stop PID...: SIGTERM, up to 5 s to exit, then SIGKILL
  local pid i
  for pid in "$@"; do kill -TERM "$pid" 2> /dev/null || true; done
  for pid in "$@"; do
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2> /dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2> /dev/null || true
  done
}
cleanup() {
  local pid
  trap - EXIT
  # A second Ctrl-C (or `timeout`, which signals the process and its group) must not end the
  # script halfway through its cleanup and leave etcd running.
  trap '' INT TERM
  # Replicas before etcd: a replica leaving revokes its lease, which needs etcd.
  stop "${pids[@]:3}"
  # Members one at a time: a leader stopping hands leadership to a member still running (it
  # would otherwise wait seconds for a transfer that cannot happen).
  for pid in "${pids[@]:0:3}"; do stop "$pid"; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- etcd: three members on loopback ------------------------------------------------------------
initial=""
for i in 0 1 2; do
  initial+="${initial:+,}m$i=http://127.0.0.1:${peer_ports[$i]}"
done
endpoints=()
for i in 0 1 2; do
  endpoints+=("http://127.0.0.1:${client_ports[$i]}")
  # Short heartbeat and election timeout: loopback, and a killed leader is replaced in ~0.5 s.
  "$etcd_bin" --name "m$i" --data-dir "$work/m$i" \
    --listen-client-urls "${endpoints[$i]}" --advertise-client-urls "${endpoints[$i]}" \
    --listen-peer-urls "http://127.0.0.1:${peer_ports[$i]}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${peer_ports[$i]}" \
    --initial-cluster "$initial" --initial-cluster-state new \
    --initial-cluster-token authzd-etcd-demo \
    --heartbeat-interval 50 --election-timeout 500 \
    > "$work/m$i.log" 2>&1 < /dev/null &
  pids+=($!)
done

wait_for() { # wait_for WHAT SECONDS COMMAND...: polls COMMAND every 0.1 s
  local what="$1" seconds="$2" pid
  shift 2
  local tries=$((seconds * 10))
  until "$@" > /dev/null 2>&1; do
    tries=$((tries - 1))
    # A process that already exited (a port taken, a bad flag) will not come up: say so now.
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2> /dev/null || tries=0
    done
    if [ "$tries" -le 0 ]; then
      echo "etcd-demo.sh: $what did not come up within ${seconds}s, or a process exited; logs:" >&2
      tail -n 5 "$work"/*.log >&2 || true
      return 1
    fi
    sleep 0.1
  done
}
for i in 0 1 2; do
  # /health is true once the member has a leader (the cluster has quorum).
  wait_for "etcd member m$i" 20 sh -c "curl -sf '${endpoints[$i]}/health' | grep -q '\"health\":\"true\"'"
done

# --- authzd: three replicas on one prefix -------------------------------------------------------
for i in 0 1 2; do
  # Each replica lists a different member first, so the three do not all talk to one member;
  # the others are its failover order.
  order=("${endpoints[$i]}" "${endpoints[$(((i + 1) % 3))]}" "${endpoints[$(((i + 2) % 3))]}")
  servers="$(IFS=,; echo "${order[*]}")"
  "$authzd" serve --listen "127.0.0.1:${authzd_ports[$i]}" \
    --etcd-servers "$servers" --etcd-prefix /authzd-demo/ --replica-id "r$((i + 1))" \
    > "$work/r$((i + 1)).log" 2>&1 < /dev/null &
  pids+=($!)
done
for i in 0 1 2; do
  wait_for "authzd replica r$((i + 1))" 30 curl -sf "http://127.0.0.1:${authzd_ports[$i]}/readyz"
done

# --- the walkthrough ------------------------------------------------------------------------------
cat > "$work/grant.yaml" << 'YAML'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: pod-reader}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: frank-reads-pods}
subjects: [{kind: User, name: frank}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-reader}
YAML
review='{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"frank","resourceAttributes":{"namespace":"default","verb":"get","resource":"pods"}}}'

r1="http://127.0.0.1:${authzd_ports[0]}"
r2="http://127.0.0.1:${authzd_ports[1]}"
r3="http://127.0.0.1:${authzd_ports[2]}"
ask() { # ask URL: frank's review as JSON
  curl -sS -H 'content-type: application/json' -d "$review" \
    "$1/apis/authorization.k8s.io/v1/subjectaccessreviews"
}

if $check; then
  fail() { echo "etcd-demo.sh --check: $*" >&2; exit 1; }
  echo "== etcd ${endpoints[*]}; replicas $r1 $r2 $r3"
  ask "$r2" | grep -q '"allowed":false' || fail "an empty prefix is not an empty policy on r2"
  "$authzd" apply -f "$work/grant.yaml" --server "$r1" || fail "apply on r1"
  for replica in "$r2" "$r3"; do
    ask "$replica" | grep -q '"allowed":true' || fail "the grant applied on r1 is not an allow on $replica"
  done
  "$authzd" delete clusterrolebinding frank-reads-pods --server "$r3" || fail "delete on r3"
  for replica in "$r1" "$r2"; do
    ask "$replica" | grep -q '"allowed":false' || fail "the revocation on r3 is not a deny on $replica"
  done
  "$authzd" status --server "$r2" | sed -n 1p
  echo "== ok: a grant on r1 held on r2 and r3 at once, a revocation on r3 on r1 and r2"
  exit 0
fi

cat << EOF
etcd:    ${endpoints[*]}   (data in $work)
authzd:  r1 $r1   r2 $r2   r3 $r3   (prefix /authzd-demo/, logs in $work)

The prefix starts empty: nobody is allowed anything. Grant on r1, ask r2 and r3 at once:

  $authzd apply -f $work/grant.yaml --server $r1
  curl -s -H 'content-type: application/json' \\
    -d '$review' \\
    $r2/apis/authorization.k8s.io/v1/subjectaccessreviews

Revoke on r3; r1 and r2 deny the very next request (no min_revision, no sleep):

  $authzd delete clusterrolebinding frank-reads-pods --server $r3

Grant again, freeze r2 and revoke on r1: the write waits for r2 at most --max-staleness (5s),
then takes it as fenced. Woken, r2 never gives the stale allow: its first answer is the deny (it
caught up) or a 503 (UNAVAILABLE: fenced until it has proved itself current again).

  $authzd apply -f $work/grant.yaml --server $r1
  kill -STOP ${pids[4]}    # r2
  time $authzd delete clusterrolebinding frank-reads-pods --server $r1
  kill -CONT ${pids[4]}; curl -s -H 'content-type: application/json' -d '$review' \\
    $r2/apis/authorization.k8s.io/v1/subjectaccessreviews

Ctrl-C stops everything and removes $work.
EOF
# Ends when a process ends on its own (then the trap stops the rest) or on Ctrl-C.
wait -n "${pids[@]}" || true
echo "etcd-demo.sh: a process exited; logs:" >&2
tail -n 5 "$work"/*.log >&2 || true
exit 1
