#!/usr/bin/env bash
# Benchmark b: a ResNet-50 v1.5 training step on CPU (batch 8, 112 px, SGD momentum, fp32),
# our trainer (examples/resnet_bench_step.rs: engine + workload + MLPerf log to a file) next to
# PyTorch eager Python (scripts/bench/resnet_step.py), the same thread count on both sides.
#
# Side by side: where the machine has 2 x THREADS cores (and taskset), both sides run at the
# same time, each pinned to its own cores, swapping cores every round, so a slow phase of a
# shared machine hits both alike; otherwise they alternate. Prints each round, the per-round
# ratios and their median, and our trainer's overhead.
#   scripts/bench_resnet_step.sh [THREADS=1] [STEPS=20] [ROUNDS=4]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
THREADS=${1:-1}; STEPS=${2:-20}; ROUNDS=${3:-4}
cargo build --release --quiet --example resnet_bench_step
common=(--batch 8 --size 112 --steps "$STEPS" --threads "$THREADS")
# ours: epoch 1 (STEPS steps) is its warm-up, epoch 2 is timed; the peer: 3 warm-up steps
ours() { OMP_NUM_THREADS=$THREADS "$@" ./target/release/examples/resnet_bench_step "${common[@]}"; }
peer() { OMP_NUM_THREADS=$THREADS "$@" python scripts/bench/resnet_step.py "${common[@]}" --warmup 3; }
paired=0
if command -v taskset >/dev/null && [ "$(nproc)" -ge $((2 * THREADS)) ]; then paired=1; fi
out=$(mktemp); o=$(mktemp); p=$(mktemp)
for r in $(seq "$ROUNDS"); do
  if [ $paired = 1 ]; then
    a="0-$((THREADS - 1))"; b="$THREADS-$((2 * THREADS - 1))"
    if [ $((r % 2)) = 0 ]; then t=$a; a=$b; b=$t; fi
    ours taskset -c "$a" >"$o" & pid=$!
    peer taskset -c "$b" >"$p"
    wait $pid
  else
    ours >"$o"; peer >"$p"
  fi
  echo "{\"round\": $r, \"ours\": $(grep '^{' "$o"), \"peer\": $(grep '^{' "$p")}" | tee -a "$out"
done
python - "$out" "$paired" <<'PY'
import json, statistics, sys
rounds = [json.loads(l) for l in open(sys.argv[1])]
how = "at the same time on separate cores" if sys.argv[2] == "1" else "alternating"
o = [r["ours"]["steps_per_s"] for r in rounds]
p = [r["peer"]["steps_per_s"] for r in rounds]
ratios = [a / b for a, b in zip(o, p)]
t = rounds[0]["ours"]["threads"]
print(f"\nResNet-50 train step, batch 8, 112 px, CPU, {t} thread(s) each, {len(rounds)} rounds, {how}")
print(f"  mlperf-run (trainer, logging, hand-off): {statistics.median(o):.3f} steps/s (median)")
print(f"  PyTorch eager Python:                    {statistics.median(p):.3f} steps/s (median)")
print(f"  ratio ours/PyTorch per round: {', '.join(f'{x:.3f}' for x in ratios)}; "
      f"median {statistics.median(ratios):.3f}x  (target >= 1.0x)")
ov = statistics.median(r["ours"]["overhead_pct"] for r in rounds)
print(f"  trainer overhead (hand-off + loop + logging): {ov:.2f}% of step time  (target < 2%)")
print(f"    of which hand-off {statistics.median(r['ours']['handoff_pct'] for r in rounds):.2f}%, "
      f"loop+logging {statistics.median(r['ours']['loop_and_logging_pct'] for r in rounds):.3f}%, "
      f"data wait {statistics.median(r['ours']['data_wait_pct'] for r in rounds):.3f}%")
PY
rm -f "$out" "$o" "$p"
