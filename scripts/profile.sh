#!/usr/bin/env bash
# Counts the instructions the server executes per request, with valgrind's callgrind, for
# authzd and for the no-op server under the same load (authzd-loadgen at concurrency 16 over
# 4 connections, 10k-binding synthetic policy):
#
#   Authorize, all cache hits;  Authorize, all misses;  BatchAuthorize(100), half misses.
#
# These counts move by about half a percent between runs of one build (timings here move by
# tens of percent), so they are the measure to compare two builds by (see docs/loadgen.md).
# Takes about two minutes; needs valgrind and curl. Writes target/profile/*.callgrind and
# prints one table.
#
#   scripts/profile.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
for tool in valgrind callgrind_control callgrind_annotate curl python3; do
  command -v "$tool" > /dev/null || { echo "profile.sh: $tool is needed" >&2; exit 1; }
done

cargo build --release --bins
bin=target/release
out=target/profile
rm -rf "$out" && mkdir -p "$out"
"$bin/authzd-loadgen" --write-policy "$out/policy" --bindings 10000 > /dev/null
port=50917

started=""
cleanup() { [ -n "$started" ] && kill "$started" 2> /dev/null || true; }
trap cleanup EXIT

# load HIT_RATIO MIX TARGET: one loadgen run (its own no-op round first, then TARGET).
load() {
  "$bin/authzd-loadgen" --target "$3" --concurrency 16 --connections 4 --rounds 1 \
    --duration 4s --warmup 1s --mix "$2" --batch-size 100 --cache-hit-ratio "$1" \
    > /dev/null 2>&1 || true
}

# Waits until the process under callgrind has written its first line to $1.
wait_for() {
  for _ in $(seq 120); do
    grep -q "$2" "$1" 2> /dev/null && return 0
    sleep 1
  done
  echo "profile.sh: no '$2' in $1" >&2
  exit 1
}

metric() {
  curl -s "http://127.0.0.1:$port/metrics" | awk -v name="$1" '$1 ~ "^"name {s += $2} END {print s + 0}'
}

# authzd NAME HIT_RATIO MIX: a fresh authzd under callgrind, counted over one loadgen run.
# (A fresh server each time: a second loadgen run would repeat the first one's "fresh" names.)
authzd() {
  local log="$out/$1.log"
  valgrind --tool=callgrind --callgrind-out-file="$out/$1.callgrind" \
    "$bin/authzd" serve --policy "$out/policy" --listen "127.0.0.1:$port" > "$log" 2>&1 &
  started=$!
  wait_for "$log" "serving revision"
  local d0 h0
  d0=$(metric authzd_decisions_total)
  h0=$(metric authzd_cache_hits_total)
  callgrind_control -z "$started" > /dev/null 2>&1
  load "$2" "$3" "http://127.0.0.1:$port"
  callgrind_control -d "$started" > /dev/null 2>&1
  local decisions hits requests
  decisions=$(($(metric authzd_decisions_total) - d0))
  hits=$(($(metric authzd_cache_hits_total) - h0))
  kill "$started"
  wait "$started" 2> /dev/null || true
  started=""
  echo "$1 authzd $decisions $hits"
}

# noop NAME HIT_RATIO MIX: the no-op server as its own process, counted the same way.
noop() {
  local log="$out/$1-noop.log"
  valgrind --tool=callgrind --callgrind-out-file="$out/$1-noop.callgrind" \
    "$bin/authzd-loadgen" --serve-noop > "$log" 2> "$out/$1-noop.err" &
  started=$!
  wait_for "$log" "http://"
  callgrind_control -z "$started" > /dev/null 2>&1
  load "$2" "$3" "$(head -1 "$log")"
  callgrind_control -d "$started" > /dev/null 2>&1
  kill "$started"
  wait "$started" 2> /dev/null || true
  started=""
  echo "$1 noop"
}

{
  authzd hit 1 authorize=100
  noop hit 1 authorize=100
  authzd miss 0 authorize=100
  authzd batch 0.5 batch=100
  noop batch 0.5 batch=100
} > "$out/runs.txt"

python3 - "$out" << 'EOF'
import os, re, subprocess, sys
out = sys.argv[1]

def annotate(path, *flags):
    # From `/`: run inside the checkout, callgrind_annotate shortens its paths and leaves
    # some callers out of the tree.
    return subprocess.run(["callgrind_annotate", *flags, os.path.abspath(path)], cwd="/",
                          capture_output=True, text=True, check=True).stdout

def total(path):
    match = re.search(r"([\d,]+) +\(100\.0%\) +PROGRAM TOTALS", annotate(path))
    return int(match.group(1).replace(",", ""))

def calls(path, function):
    """How often `function` was called: the calls from its callers, summed. A function whose
    code is spread over several files (inlined parts) is listed once per file; the most
    called of those entries is the function itself."""
    lines = annotate(path, "--tree=caller", "--threshold=100").split("\n")
    most = 0
    for i, line in enumerate(lines):
        if re.search(r"\*\s+\S+:" + re.escape(function) + r" \[", line):
            count, j = 0, i - 1
            while j >= 0 and "<" in lines[j]:
                found = re.search(r"\(([\d,]+)x\)", lines[j])
                count += int(found.group(1).replace(",", "")) if found else 0
                j -= 1
            most = max(most, count)
    return most

rows = []
for line in open(f"{out}/runs.txt"):
    name, kind, *figures = line.split()
    # `callgrind_control -d` wrote the window as part 1.
    path = f"{out}/{name}.callgrind.1" if kind == "authzd" else f"{out}/{name}-noop.callgrind.1"
    if kind == "authzd":
        decisions, hits = int(figures[0]), int(figures[1])
    else:
        batch = name.startswith("batch")
        function = "authzd::api::wire::BatchAuthorizeCall::decode" if batch \
            else "authzd::api::wire::AuthorizeCall::decode"
        decisions, hits = calls(path, function) * (100 if batch else 1), None
    rows.append((name, kind, decisions, hits, total(path)))

def per(row):
    return row[4] / row[2] if row[2] else float("nan")

# The no-op answers Authorize the same way hit or miss, so both Authorize runs compare with it.
noop = {("batch" if name == "batch" else "authorize"): per(row)
        for row in rows for name, kind in [row[:2]] if kind == "noop"}
print("| run | server | decisions | cache hits | instructions | per decision | no-op ÷ this |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for row in rows:
    name, kind, decisions, hits, instructions = row
    shown = "-" if hits is None else f"{hits:,}"
    ratio = noop.get("batch" if name == "batch" else "authorize", float("nan")) / per(row)
    print(f"| {name} | {kind} | {decisions:,} | {shown} | {instructions:,} | {per(row):,.0f} "
          f"| {ratio:.2f} |")
EOF
