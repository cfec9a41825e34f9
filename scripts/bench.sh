#!/usr/bin/env bash
# Regenerates BENCHMARKS.md on this machine: the criterion benches (medians with 95% intervals)
# and the load generator (authzd and a no-op tonic server under the same load, side by side).
# Takes a few minutes on 2 cores. Machines are noisy: compare ratios from one run, not absolute
# times across runs.
#
#   scripts/bench.sh            # everything, then writes BENCHMARKS.md
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo build --release --bins
rm -rf target/criterion target/bench-run.log
for bench in $(sed -n 's/^name = "\(.*\)"$/\1/p' <(awk '/^\[\[bench\]\]/{b=1;next} b&&/^name/{print;b=0}' Cargo.toml)); do
  cargo bench --bench "$bench" 2>&1 | grep -E '^[a-z].*(time:|hit-ratio)|^ +time:|hit-ratio|subjects in the answer' | tee -a target/bench-run.log || true
done

# Load: the default mix (half the Authorize requests hit the cache), then all misses.
target/release/authzd-loadgen --spawn --bindings 10000 --concurrency 64 --connections 4 \
  --duration 10s --warmup 2s --json > target/loadgen-mix.json
target/release/authzd-loadgen --spawn --bindings 10000 --concurrency 64 --connections 4 \
  --duration 10s --warmup 2s --cache-hit-ratio 0 --mix authorize=100 --json > target/loadgen-miss.json
target/release/authzd-loadgen --spawn --bindings 10000 --concurrency 64 --connections 4 \
  --duration 10s --warmup 2s --cache-hit-ratio 1 --mix authorize=100 --json > target/loadgen-hit.json
target/release/authzd-loadgen --spawn --bindings 10000 --concurrency 64 --connections 4 \
  --duration 10s --warmup 2s --mix batch=100 --batch-size 100 --json > target/loadgen-batch.json

python3 scripts/benchmarks_md.py > BENCHMARKS.md
echo "wrote BENCHMARKS.md"
