#!/usr/bin/env bash
# Per-rank token imbalance of the BERT loader over one epoch, before (strided split) and after
# token balancing (methods.balance_tokens), on a realistic-length synth-bert set at sequence
# length 512 (about half of the tokens padding, as the reference's phase-2 data).
# Both splits are measured in the same run on the same data; no model, no device: seconds.
# Env: DIR (/tmp/mlperf-run-bert-realistic-512), SAMPLES (17920 = 40 global batches of 8 x 56),
# RANKS (8), BATCH (56: GBS 448 / 8 ranks, configs/bert/open_8xA100.toml), SEEDS ("1 2 3").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
set +u
cd "$root"
DIR=${DIR:-/tmp/mlperf-run-bert-realistic-512}; SAMPLES=${SAMPLES:-17920}
RANKS=${RANKS:-8}; BATCH=${BATCH:-56}; SEEDS=${SEEDS:-1 2 3}
cargo build --release --quiet
mr=target/release/mlperf-run
if ! grep -q "^$SAMPLES training samples" "$DIR/README.txt" 2>/dev/null ||
   ! grep -q "Lengths: Realistic" "$DIR/README.txt"; then
  rm -rf "$DIR"
  "$mr" data synth-bert --out "$DIR" --lengths realistic --seq-len 512 --sentences 40 \
    --train-samples "$SAMPLES" --eval-samples 64 --shards 8 --seed 1
fi
for seed in $SEEDS; do
  "$mr" data bert-balance --dir "$DIR" --ranks "$RANKS" --batch "$BATCH" --seed "$seed"
  echo
done
