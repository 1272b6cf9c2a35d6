#!/usr/bin/env bash
# BERT training-step throughput on CPU, side by side in one run: mlperf-run (Rust, libtorch via
# tch) vs the same model and optimizer in PyTorch eager Python (scripts/bench/bert_ref.py), for a
# BERT-base-sized model (12 layers, hidden 768, 12 heads, intermediate 3072, vocab 30,522) at
# sequence length 128; then with half-padded batches, ours with unpadding vs PyTorch padded.
# Step = forward, MLM+NSP loss, backward, global clip 1.0, AdamW (LayerNorm/bias excluded).
# Both sides use SDPA attention and the same thread count.
# Env: BATCH (4), STEPS (3), THREADS (1; more threads on a shared machine distort both sides), PREDS (20).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
set +u
cd "$root"
BATCH=${BATCH:-4}; STEPS=${STEPS:-3}; THREADS=${THREADS:-1}; PREDS=${PREDS:-20}
cargo build --release --quiet --example bert_bench_step
ours=target/release/examples/bert_bench_step
cfg='{"vocab_size":30522,"hidden_size":768,"num_layers":12,"num_heads":12,"intermediate_size":3072}'
run_pair() {  # PAD_FRACTION UNPAD
  local o p
  o=$("$ours" 12 768 12 3072 30522 "$BATCH" 128 "$PREDS" "$STEPS" "$1" "$2" "$THREADS")
  p=$(python "$root/scripts/bench/bert_ref.py" bench --config "$cfg" --batch "$BATCH" --seq 128 \
      --predictions "$PREDS" --steps "$STEPS" --pad-fraction "$1" --threads "$THREADS" --sdpa)
  echo "ours:    $o"; echo "pytorch: $p"
  python - "$o" "$p" "$3" <<'PY'
import json, sys
o, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"{sys.argv[3]}: ours {o['seq_per_s']:.2f} seq/s, PyTorch eager {p['seq_per_s']:.2f} seq/s, ratio {o['seq_per_s']/p['seq_per_s']:.2f}x")
PY
}
echo "BERT-base step, batch $BATCH, seq 128, $THREADS threads, median of $STEPS steps"
run_pair 0.0 0 "full batches (no padding)      "
run_pair 0.5 1 "half-padded, ours unpadded     "
