#!/usr/bin/env bash
# Benchmark b: a ResNet-50 v1.5 training step on CPU (batch 8, 112 px, SGD momentum, fp32),
# our trainer (examples/resnet_bench_step.rs: engine + workload + MLPerf log to a file) next to
# PyTorch eager Python (scripts/bench/resnet_step.py), the same thread count on both sides,
# alternating ROUNDS times; prints each round, the medians and best rounds (the best is the
# steadier figure on a loaded machine), the ratio and our trainer overhead.
#   scripts/bench_resnet_step.sh [THREADS=2] [STEPS=20] [ROUNDS=3]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
THREADS=${1:-2}; STEPS=${2:-20}; ROUNDS=${3:-3}
cargo build --release --quiet --example resnet_bench_step
common=(--batch 8 --size 112 --steps "$STEPS" --warmup 3 --threads "$THREADS")
out=$(mktemp)
for r in $(seq "$ROUNDS"); do
  OMP_NUM_THREADS=$THREADS ./target/release/examples/resnet_bench_step "${common[@]}" | tee -a "$out"
  OMP_NUM_THREADS=$THREADS python scripts/bench/resnet_step.py "${common[@]}" | tee -a "$out"
done
python - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ours = [r for r in rows if r["impl"] == "mlperf-run"]
peer = [r for r in rows if r["impl"] == "pytorch-eager"]
o = statistics.median(r["steps_per_s"] for r in ours)
p = statistics.median(r["steps_per_s"] for r in peer)
ob = max(r["steps_per_s"] for r in ours)
pb = max(r["steps_per_s"] for r in peer)
ov = statistics.median(r["overhead_pct"] for r in ours)
print(f"\nResNet-50 train step, batch 8, 112 px, CPU, {ours[0]['threads']} threads, medians of {len(ours)} rounds")
print(f"  mlperf-run (trainer, logging, hand-off): {o:.3f} steps/s")
print(f"  PyTorch eager Python:                    {p:.3f} steps/s")
print(f"  ratio ours/PyTorch: {o / p:.3f}x of medians, {ob / pb:.3f}x of best rounds "
      f"({ob:.3f} vs {pb:.3f} steps/s)  (target >= 1.0x)")
print(f"  trainer overhead (hand-off + loop + logging): {ov:.2f}% of step time  (target < 2%)")
print(f"    of which hand-off {statistics.median(r['handoff_pct'] for r in ours):.2f}%, "
      f"loop+logging {statistics.median(r['loop_and_logging_pct'] for r in ours):.3f}%, "
      f"data wait {statistics.median(r['data_wait_pct'] for r in ours):.3f}%")
PY
rm -f "$out"
