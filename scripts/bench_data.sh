#!/usr/bin/env bash
# Benchmark a): the ImageNet training data pipeline, images per second per core.
#
# Side by side in one run, on the same synthetic JPEG files (default 2,000 images of 300-500 px)
# and pinned to the same single CPU core:
#   - mlperf-run's pipeline (zune-jpeg decode, RandomResizedCrop + flip + resize to 224 with
#     fast_image_resize, u8 NHWC batches) on 1 worker thread;
#   - torchvision ImageFolder + RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor (PIL)
#     with DataLoader num_workers=0.
# Both use crop scale 0.08..1 (torchvision's default) so they do the same work. Target: >= 2x.
#
# Environment: BENCH_IMAGES (2000), BENCH_EPOCHS (1), BENCH_CORE (0), BENCH_DATA_DIR
# (target-nt/bench-data/synth), CARGO_TARGET_DIR (target-nt).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=/dev/null
source scripts/setup.sh

IMAGES=${BENCH_IMAGES:-2000}
EPOCHS=${BENCH_EPOCHS:-1}
CORE=${BENCH_CORE:-0}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target-nt}
DATA=${BENCH_DATA_DIR:-$CARGO_TARGET_DIR/bench-data/synth-$IMAGES}

echo "== building the release binary (no libtorch needed)"
cargo build --release --no-default-features --bin mlperf-run
BIN=$CARGO_TARGET_DIR/release/mlperf-run

CLASSES=20
PER_CLASS=$(( (IMAGES + CLASSES - 1) / CLASSES ))
if [ ! -f "$DATA/synth-imagenet.json" ]; then
  echo "== writing $((CLASSES * PER_CLASS)) synthetic JPEGs of 300-500 px to $DATA"
  "$BIN" data synth-imagenet --out "$DATA" --classes "$CLASSES" --per-class "$PER_CLASS" \
    --val-per-class 1 --min-size 300 --max-size 500 --seed 7 --force
fi

PIN=()
if command -v taskset >/dev/null && taskset -c "$CORE" true 2>/dev/null; then
  PIN=(taskset -c "$CORE")
  echo "== both pinned to CPU core $CORE"
fi

echo "== mlperf-run pipeline, 1 thread"
ours=$("${PIN[@]}" "$BIN" data bench-imagenet --dir "$DATA/train" --threads 1 --size 224 \
  --batch-size 64 --epochs "$EPOCHS" --scale-min 0.08)
echo "$ours"
echo "== torchvision, num_workers=0"
peer=$("${PIN[@]}" python3 scripts/bench/torchvision_loader.py --dir "$DATA/train" --size 224 \
  --batch-size 64 --epochs "$EPOCHS" --scale-min 0.08)
echo "$peer"

ours_rate=$(sed -E 's/.* ([0-9.]+) images\/s per core.*/\1/' <<<"$ours")
peer_rate=$(sed -E 's/.* ([0-9.]+) images\/s per core.*/\1/' <<<"$peer")
python3 - "$ours_rate" "$peer_rate" <<'PY'
import sys
ours, peer = float(sys.argv[1]), float(sys.argv[2])
ratio = ours / peer
print(f"== images/s per core: mlperf-run {ours:.1f}, torchvision {peer:.1f}, ratio {ratio:.2f}x (target >= 2x): "
      + ("PASS" if ratio >= 2.0 else "BELOW TARGET"))
PY
