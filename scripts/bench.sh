#!/usr/bin/env bash
# Regenerates BENCHMARKS.md on this machine: the criterion benches (medians with 95% intervals),
# the peers run (authzd, the reference evaluator, cedar-policy and casbin on the same policy, 1k to
# 1M bindings, with the scaling plot docs/bench-scaling.svg) and the load generator (authzd and a
# no-op tonic server under the same load, side by side).
# Takes a few minutes on 2 cores. Machines are noisy: compare ratios from one run, not absolute
# times across runs.
#
#   scripts/bench.sh            # everything, then writes BENCHMARKS.md
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo build --release --bins
rm -rf target/criterion target/bench-run.log target/peers.jsonl
for bench in $(sed -n 's/^name = "\(.*\)"$/\1/p' <(awk '/^\[\[bench\]\]/{b=1;next} b&&/^name/{print;b=0}' Cargo.toml)); do
  cargo bench --bench "$bench" 2>&1 | grep -E '^[a-z].*(time:|hit-ratio)|^ +time:|hit-ratio|subjects in the answer' | tee -a target/bench-run.log || true
done

# Peers: a crate of its own (bench-peers/), so `cargo test` never builds cedar or casbin; it
# shares this target directory so authzd and its dependencies are not built twice.
(cd bench-peers && CARGO_TARGET_DIR=../target cargo build --release)
# cedar-policy and casbin stop at 100k bindings to keep the run within 10 minutes
# (`target/release/authzd-bench-peers --sizes 1000000` measures it on its own).
target/release/authzd-bench-peers --max-cedar 100000 | tee target/peers.jsonl

# Load: the default mix (half the Authorize requests hit the cache), all misses, all hits, then
# BatchAuthorize with half misses (the default ratio) and with all hits.
target/release/authzd-loadgen --spawn --bindings 10000 --concurrency 64 --connections 4 \
  --duration 8s --warmup 1s --json > target/loadgen-mix.json
target/release/authzd-loadgen --spawn --bindings 10000 --concurrency 64 --connections 4 \
  --duration 8s --warmup 1s --cache-hit-ratio 0 --mix authorize=100 --json > target/loadgen-miss.json
target/release/authzd-loadgen --spawn --bindings 10000 --concurrency 64 --connections 4 \
  --duration 8s --warmup 1s --cache-hit-ratio 1 --mix authorize=100 --json > target/loadgen-hit.json
target/release/authzd-loadgen --spawn --bindings 10000 --concurrency 64 --connections 4 \
  --duration 8s --warmup 1s --mix batch=100 --batch-size 100 --json > target/loadgen-batch.json
target/release/authzd-loadgen --spawn --bindings 10000 --concurrency 64 --connections 4 \
  --duration 8s --warmup 1s --mix batch=100 --batch-size 100 --cache-hit-ratio 1 --json \
  > target/loadgen-batch-hit.json
# Authorize carrying an update's content (2 KiB per object) that no rule reads: both targets
# decode the same payload.
target/release/authzd-loadgen --spawn --bindings 10000 --concurrency 64 --connections 4 \
  --duration 8s --warmup 1s --cache-hit-ratio 1 --mix authorize=100 --content-bytes 2048 --json \
  > target/loadgen-content.json

BENCH_SECONDS=$SECONDS python3 scripts/benchmarks_md.py > BENCHMARKS.md
echo "wrote BENCHMARKS.md"
