#!/usr/bin/env bash
# Make a self-contained folder for running the GPU benchmarks (scripts/bench_gpu.sh) on a
# machine with PyTorch 2.11 (+ torchvision, transformers) but no Rust toolchain, no network and
# no mlperf-logging:
#
#   scripts/bundle.sh DIR
#
# builds the release binaries (cargo build --release --bins --examples), then writes
#   DIR/bin/      mlperf-run and every example of examples/ (resnet_bench_step,
#                 bert_bench_step, fp8_check, the fused kernels' checks, ...), stripped
#   DIR/lib/      their shared libraries that neither torch nor the C/C++ runtime provides
#                 (HDF5 and its dependencies, from ldd); libtorch/libc10/CUDA come from the
#                 target's own torch (python3 -c 'import torch' ...), glibc and libstdc++ from
#                 its system
#   DIR/scripts/  bench_gpu.sh and the Python peers and helpers it runs (scripts/bench/)
#   DIR/configs/  the benchmark configs (and the rest of configs/, small)
#   DIR/benchmarks/  the benchmark definitions (also embedded in the binary)
#   DIR/data/corpus.txt  English text for `mlperf-run data synth-bert` on systems without
#                 /usr/lib/python3*/LICENSE.txt (it is that file: Python's licence and history)
#   DIR/env.sh    `source DIR/env.sh` to run DIR/bin/* by hand (PATH, LD_LIBRARY_PATH from
#                 ${PYTHON:-python3}'s torch); bench_gpu.sh does not need it
#   DIR/REQUIREMENTS.txt  the glibc / libstdc++ versions the binaries need
# On the GPU machine:  cd DIR && scripts/bench_gpu.sh [--rounds 3] [--out OUTDIR]
#
# BUNDLE_FEATURES="..." builds with those cargo features into target/bundle-<features>, so the
# default build in target/ is not rebuilt. Not needed for the GPU: the default build already has
# NCCL, CUDA graphs and the fused kernels.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: scripts/bundle.sh DIR" >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$1"
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"
case "$dest" in "$root"|/) echo "bundle.sh: refusing to write into $dest" >&2; exit 2 ;; esac

# shellcheck source=/dev/null
source "$root/scripts/setup.sh"
features="${BUNDLE_FEATURES:-}"
if [ -n "$features" ]; then
  target="${CARGO_TARGET_DIR:-$root/target/bundle-$(echo "$features" | tr ' ,' '--')}"
  (cd "$root" && CARGO_TARGET_DIR="$target" cargo build --release --bins --examples --features "$features")
else
  target="${CARGO_TARGET_DIR:-$root/target}"
  (cd "$root" && cargo build --release --bins --examples)
fi

rm -rf "$dest/bin" "$dest/lib" "$dest/scripts" "$dest/configs" "$dest/benchmarks" "$dest/data"
mkdir -p "$dest/bin" "$dest/lib" "$dest/scripts/bench" "$dest/data"
# every example: bench_gpu.sh finds its binaries by name (a list here once left fp8_check out)
bins=("$target/release/mlperf-run")
for ex in "$root"/examples/*.rs; do
  bins+=("$target/release/examples/$(basename "$ex" .rs)")
done
for b in "${bins[@]}"; do
  install -m 755 "$b" "$dest/bin/"
  strip "$dest/bin/$(basename "$b")"
done

# shared libraries: everything ldd resolves for our binaries, except what the target's torch
# (its lib/ and the nvidia-* wheels beside it) and its C/C++ runtime provide
torchlib="$(python -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')"
site="$(dirname "$(dirname "$torchlib")")"
skip_re='^(linux-vdso|libtorch|libc10|libgomp|libc\.so|libm\.so|libmvec|libpthread|libdl\.so|librt\.so|ld-linux|libresolv|libutil\.so|libanl|libnsl|libnss_|libBrokenLocale|libstdc\+\+|libgcc_s)'
for b in "${bins[@]}"; do
  LD_LIBRARY_PATH="$torchlib" ldd "$b"
done | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u | while read -r name path; do
  case "$path" in "$site"/*) continue ;; esac
  [[ "$name" =~ $skip_re ]] && continue
  cp -L "$path" "$dest/lib/$name"
done
if LD_LIBRARY_PATH="$dest/lib:$torchlib" ldd "$dest/bin/mlperf-run" | grep -q "not found"; then
  echo "bundle.sh: unresolved libraries:" >&2
  LD_LIBRARY_PATH="$dest/lib:$torchlib" ldd "$dest/bin/mlperf-run" | grep "not found" >&2
  exit 1
fi

cp "$root/scripts/bench_gpu.sh" "$dest/scripts/"
cp "$root/scripts/bench/"*.py "$dest/scripts/bench/"
cp -r "$root/configs" "$dest/configs"
cp -r "$root/benchmarks" "$dest/benchmarks"
corpus="$(compgen -G "/usr/lib/python3*/LICENSE.txt" | head -n 1 || true)"
if [ -n "$corpus" ]; then
  cp "$corpus" "$dest/data/corpus.txt"
else
  echo "bundle.sh: warning: no /usr/lib/python3*/LICENSE.txt to ship as data/corpus.txt" >&2
fi

cat >"$dest/env.sh" <<'EOF'
# Source me to run the bundle's binaries by hand: bin/ on PATH, and LD_LIBRARY_PATH = the
# bundle's lib/ + the torch/lib of ${PYTHON:-python3} (libtorch 2.11, which the binaries link).
# scripts/bench_gpu.sh sets this up by itself (for our binaries only) and does not need it.
_mr_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_mr_torchlib="$("${PYTHON:-python3}" -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')" &&
  export LD_LIBRARY_PATH="$_mr_here/lib:$_mr_torchlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" &&
  export PATH="$_mr_here/bin:$PATH"
unset _mr_here _mr_torchlib
EOF

ver() { objdump -T "$@" 2>/dev/null | grep -o "$V[0-9.]*" | sort -uV | tail -n 1; }
{
  echo "mlperf-run GPU benchmark bundle, built $(date -u +%FT%TZ) from $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "needs: x86_64 Linux with glibc >= $(V=GLIBC_ ver "$dest"/bin/* "$dest"/lib/* | sed 's/GLIBC_//')," \
    "libstdc++ with $(V=GLIBCXX_ ver "$dest"/bin/*), and python3 with torch 2.11 (libtorch for tch 0.24)," \
    "torchvision, transformers (for the Hugging Face peer)"
  echo "run:   cd $(basename "$dest") && scripts/bench_gpu.sh [--rounds 3] [--only a,b,c,d] [--out DIR]"
} >"$dest/REQUIREMENTS.txt"
cat "$dest/REQUIREMENTS.txt"
du -sh "$dest" | awk '{ print "bundle size: " $1 }'
