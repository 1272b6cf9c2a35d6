#!/usr/bin/env bash
# BERT training-step throughput on CPU, side by side in one run: mlperf-run (Rust, libtorch via
# tch) vs the same model and optimizer in PyTorch eager Python (scripts/bench/bert_ref.py), for a
# BERT-base-sized model (12 layers, hidden 768, 12 heads, intermediate 3072, vocab 30,522) at
# sequence length 128; then with half-padded batches, ours with unpadding vs PyTorch padded.
# Step = forward, MLM+NSP loss, backward, global clip 1.0, AdamW (LayerNorm/bias excluded).
# Both sides use SDPA attention and the same thread count.
# Env: BATCH (4), STEPS (3), THREADS (1; more threads on a shared machine distort both sides), PREDS (20),
# ROUNDS (3). Where the machine has 2 x THREADS cores (and taskset) both sides run at the same
# time, each pinned to its own cores, swapping cores every round, so a slow phase of a shared
# machine hits both alike; otherwise they alternate.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
set +u
cd "$root"
BATCH=${BATCH:-4}; STEPS=${STEPS:-3}; THREADS=${THREADS:-1}; PREDS=${PREDS:-20}; ROUNDS=${ROUNDS:-3}
cargo build --release --quiet --example bert_bench_step
ours=target/release/examples/bert_bench_step
cfg='{"vocab_size":30522,"hidden_size":768,"num_layers":12,"num_heads":12,"intermediate_size":3072}'
run_pair() {  # PAD_FRACTION UNPAD LABEL: ROUNDS alternating rounds of each side
  local out; out=$(mktemp)
  for r in $(seq "$ROUNDS"); do
    local a=() b=()
    if [ "$paired" = 1 ]; then  # both at once, each on its own cores, swapping every round
      a=(taskset -c "0-$((THREADS - 1))"); b=(taskset -c "$THREADS-$((2 * THREADS - 1))")
      if [ $((r % 2)) = 0 ]; then local t=("${a[@]}"); a=("${b[@]}"); b=("${t[@]}"); fi
    fi
    local unpad=(); [ "$2" = 1 ] && unpad=(--methods unpad)
    "${a[@]}" "$ours" --layers 12 --hidden 768 --heads 12 --inter 3072 --vocab 30522 --batch "$BATCH" \
      --seq 128 --preds "$PREDS" --steps "$STEPS" --warmup 1 --pad "$1" "${unpad[@]}" --threads "$THREADS" >>"$out" &
    local pid=$!
    [ "$paired" = 1 ] || wait $pid
    "${b[@]}" python "$root/scripts/bench/bert_ref.py" bench --config "$cfg" --batch "$BATCH" --seq 128 \
      --predictions "$PREDS" --steps "$STEPS" --pad-fraction "$1" --threads "$THREADS" --sdpa >>"$out"
    wait $pid
  done
  cat "$out"
  python - "$out" "$3" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
side = {k: [r for r in rows if r["impl"] == k] for k in ("mlperf-run", "pytorch-eager")}
med = {k: statistics.median(r["median_step_s"] for r in v) for k, v in side.items()}
best = {k: min(r["median_step_s"] for r in v) for k, v in side.items()}
phase = lambda k, p: statistics.median(r[p] for r in side[k])
o, p = med["mlperf-run"], med["pytorch-eager"]
print(f"{sys.argv[2]}: ours {o:.3f} s/step, PyTorch eager {p:.3f} s/step (medians of {len(side['mlperf-run'])} rounds): "
      f"ratio {p / o:.2f}x (best rounds {best['pytorch-eager'] / best['mlperf-run']:.2f}x)")
print("    forward+loss / backward / clip+optimizer, s: ours " +
      " / ".join(f"{phase('mlperf-run', x):.3f}" for x in ("forward_s", "backward_s", "optimizer_s")) +
      ", PyTorch " + " / ".join(f"{phase('pytorch-eager', x):.3f}" for x in ("forward_s", "backward_s", "optimizer_s")))
PY
  rm -f "$out"
}
paired=0
if command -v taskset >/dev/null && [ "$(nproc)" -ge $((2 * THREADS)) ]; then paired=1; fi
how=$([ $paired = 1 ] && echo "both sides at the same time on separate cores" || echo "alternating")
echo "BERT-base step, batch $BATCH, seq 128, $THREADS threads, median of $STEPS steps per round, $ROUNDS rounds, $how"
run_pair 0.0 0 "full batches (no padding)      "
run_pair 0.5 1 "half-padded, ours unpadded     "
