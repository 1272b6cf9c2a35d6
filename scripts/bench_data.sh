#!/usr/bin/env bash
# Benchmark: the ImageNet training data pipeline against torchvision's, like with like.
#
# Both sides read the same synthetic JPEG files (default 1,200 images of 300-500 px), do
# RandomResizedCrop(224, scale 0.08..1) + horizontal flip and produce u8 images:
#   - mlperf-run's pipeline (`data bench-imagenet`: libjpeg-turbo decoding only the crop's
#     region, fast_image_resize, u8 NHWC batches; --decoder cpu-full for the zune-jpeg
#     whole-image path);
#   - torchvision ImageFolder + RandomResizedCrop + RandomHorizontalFlip + PILToTensor (u8)
#     through a DataLoader (scripts/bench/torchvision_loader.py).
#
# Default (paired) mode: ROUNDS rounds, each running both sides AT THE SAME TIME, one thread /
# no DataLoader workers each, pinned to separate cores (they swap cores every round), so both
# see the same machine state. Prints each round's images/s and ratio and the median ratio
# (target >= 2x). On a 1-core machine the sides run one after the other.
#
# --cores N: the scaling curve for sizing a host per GPU: for n = 1..N, ours with n threads
# and the DataLoader with n workers, each alone on cores 0..n-1 (one after the other).
#
# Usage: scripts/bench_data.sh [--rounds R] [--cores N] [--images N] [--decoder D]
# Environment: BENCH_IMAGES (1200), BENCH_ROUNDS (3), BENCH_EPOCHS (1), BENCH_SCALE_MIN
# (0.08), BENCH_DECODER (cpu), BENCH_DATA_DIR, BENCH_BIN (a built mlperf-run; else built
# without libtorch in CARGO_TARGET_DIR, default target-nt).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=/dev/null
source scripts/setup.sh

IMAGES=${BENCH_IMAGES:-1200}
ROUNDS=${BENCH_ROUNDS:-3}
EPOCHS=${BENCH_EPOCHS:-1}
SCALE_MIN=${BENCH_SCALE_MIN:-0.08}
DECODER=${BENCH_DECODER:-cpu}
CORES=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --cores) CORES=$2; shift 2 ;;
    --images) IMAGES=$2; shift 2 ;;
    --decoder) DECODER=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target-nt}
DATA=${BENCH_DATA_DIR:-$CARGO_TARGET_DIR/bench-data/synth-$IMAGES}
if [ -n "${BENCH_BIN:-}" ]; then
  BIN=$BENCH_BIN
else
  echo "== building the release binary (no libtorch needed)"
  cargo build --release --no-default-features --bin mlperf-run
  BIN=$CARGO_TARGET_DIR/release/mlperf-run
fi

CLASSES=20
PER_CLASS=$(( (IMAGES + CLASSES - 1) / CLASSES ))
if [ ! -f "$DATA/synth-imagenet.json" ]; then
  echo "== writing $((CLASSES * PER_CLASS)) synthetic JPEGs of 300-500 px to $DATA"
  "$BIN" data synth-imagenet --out "$DATA" --classes "$CLASSES" --per-class "$PER_CLASS" \
    --val-per-class 1 --min-size 300 --max-size 500 --seed 7 --force >/dev/null
fi

NCPU=$(nproc)
can_pin() { command -v taskset >/dev/null && taskset -c "$1" true 2>/dev/null; }
# ours CPUS THREADS / peer CPUS WORKERS: one run, prints its result line.
ours() {
  local pin=(); can_pin "$1" && pin=(taskset -c "$1")
  "${pin[@]}" "$BIN" data bench-imagenet --dir "$DATA/train" --threads "$2" --size 224 \
    --batch-size 64 --epochs "$EPOCHS" --scale-min "$SCALE_MIN" --decoder "$DECODER"
}
peer() {
  local pin=(); can_pin "$1" && pin=(taskset -c "$1")
  "${pin[@]}" python3 scripts/bench/torchvision_loader.py --dir "$DATA/train" --size 224 \
    --batch-size 64 --epochs "$EPOCHS" --scale-min "$SCALE_MIN" --workers "$2" --to-tensor u8
}
rate() { sed -E 's/.* = ([0-9.]+) images\/s.*/\1/' <<<"$1"; }

if [ "$CORES" -gt 0 ]; then
  [ "$CORES" -le "$NCPU" ] || { echo "--cores $CORES: this machine has $NCPU" >&2; exit 2; }
  echo "== scaling curve on $DATA/train ($DECODER decoder): each side alone on cores 0..n-1"
  printf '%6s %14s %16s %7s\n' cores "mlperf-run/s" "DataLoader/s" ratio
  for n in $(seq 1 "$CORES"); do
    cpus=0-$((n - 1))
    o=$(rate "$(ours "$cpus" "$n")")
    p=$(rate "$(peer "$cpus" "$n")")
    python3 -c "import sys; n,o,p=sys.argv[1:]; print(f'{int(n):6d} {float(o):14.1f} {float(p):16.1f} {float(o)/float(p):6.2f}x')" "$n" "$o" "$p"
  done
  exit 0
fi

ratios=()
for r in $(seq 1 "$ROUNDS"); do
  if [ "$NCPU" -ge 2 ]; then
    # Alternate cores so a faster core favours neither side.
    if [ $((r % 2)) -eq 1 ]; then co=0; cp=1; else co=1; cp=0; fi
    ours "$co" 1 >"$CARGO_TARGET_DIR/bench-ours.txt" &
    po=$!
    peer "$cp" 0 >"$CARGO_TARGET_DIR/bench-peer.txt" &
    pp=$!
    wait "$po"; wait "$pp"
    o_line=$(cat "$CARGO_TARGET_DIR/bench-ours.txt"); p_line=$(cat "$CARGO_TARGET_DIR/bench-peer.txt")
    how="at the same time, cores $co/$cp"
  else
    o_line=$(ours 0 1); p_line=$(peer 0 0)
    how="one after the other (1 core)"
  fi
  o=$(rate "$o_line"); p=$(rate "$p_line")
  ratio=$(python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.3f}')" "$o" "$p")
  ratios+=("$ratio")
  echo "== round $r ($how): mlperf-run $o images/s, torchvision (PILToTensor, u8) $p images/s, ratio ${ratio}x"
  echo "   $o_line"
  echo "   $p_line"
done
python3 - "${ratios[@]}" <<'PY'
import statistics, sys
r = [float(x) for x in sys.argv[1:]]
m = statistics.median(r)
print(f"== median ratio over {len(r)} paired rounds: {m:.2f}x per core (target >= 2x): "
      + ("PASS" if m >= 2.0 else "BELOW TARGET"))
PY
