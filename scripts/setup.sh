#!/usr/bin/env bash
# Idempotent set-up for building and testing mlperf-run. Safe to source or run; a second run
# on the same machine takes about a second.
#
#   - Debian packages needed by the build (C/C++ toolchain bits, HDF5, gloo and libjpeg-turbo
#     headers)
#   - a Python venv OUTSIDE the work tree with torch==2.11.0 (libtorch for tch 0.24.0) and
#     mlperf-logging==4.1.68 (the official MLCommons checkers, our test oracle)
#
#   - the CUDA headers that the default build's `nccl` and `cuda` features (ProcessGroupNCCL,
#     CUDA graphs, the fused kernels) compile against, beside the venv's NCCL (torch's CUDA
#     wheel brings nccl.h and the CUDA runtime headers; the pip packages nvidia-cuda-crt and
#     nvidia-cuda-cccl, pinned to the runtime's CUDA version, complete them). The same on a
#     machine with or without a GPU: the wheel is the CUDA build either way.
#
# Environment: MLPERF_RUN_VENV (default ~/.cache/mlperf-run/venv). Set MLPERF_RUN_NCCL=0 to skip
# the CUDA headers (only for the lite build, `cargo build --no-default-features`).
# Usage: `source scripts/setup.sh` (`--nccl` and `--cuda` are accepted and change nothing).
# After sourcing: the venv's python first on PATH, LIBTORCH_USE_PYTORCH=1 for torch-sys.
# Sourcing leaves the caller's shell options alone: the installing runs in a subshell.

MLPERF_RUN_VENV=${MLPERF_RUN_VENV:-$HOME/.cache/mlperf-run/venv}
export MLPERF_RUN_VENV
MLPERF_RUN_SETUP_NCCL=${MLPERF_RUN_NCCL:-1}
(
set -euo pipefail
TORCH_VERSION=2.11.0
MLPERF_LOGGING_VERSION=4.1.68
PY_EXTRA=(pillow torchvision==0.26.0 h5py safetensors)
APT_PACKAGES=(pkg-config libhdf5-dev libgloo-dev libjpeg62-turbo-dev)
# the two-node tests (tests/distributed/two_nodes.rs): network namespaces, tc, and nft for a
# lossy link where the kernel has no netem
APT_PACKAGES+=(iproute2 nftables)

log() { printf '[setup] %s\n' "$*" >&2; }

# synth-bert's default English text is Python's LICENSE.txt from Debian's libpython3.X-stdlib
compgen -G "/usr/lib/python3*/LICENSE.txt" >/dev/null || APT_PACKAGES+=(libpython3-stdlib)
missing_apt=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing_apt+=("$p")
done
if [ ${#missing_apt[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing_apt[*]} (about a minute)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing_apt[@]}" >/dev/null
fi

stamp="$MLPERF_RUN_VENV/.mlperf-run-setup-torch$TORCH_VERSION-mlperflogging$MLPERF_LOGGING_VERSION-$(printf '%s' "${PY_EXTRA[*]}" | sha256sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  log "creating venv $MLPERF_RUN_VENV (torch==$TORCH_VERSION, mlperf-logging==$MLPERF_LOGGING_VERSION; ~5 GB, 1-3 minutes)"
  [ -x "$MLPERF_RUN_VENV/bin/python" ] || python3 -m venv "$MLPERF_RUN_VENV"
  "$MLPERF_RUN_VENV/bin/pip" install -q --disable-pip-version-check \
    "torch==$TORCH_VERSION" "mlperf-logging==$MLPERF_LOGGING_VERSION" "${PY_EXTRA[@]}"
  "$MLPERF_RUN_VENV/bin/python" -c "import torch, mlperf_logging" 
  touch "$stamp"
fi

if [ "$MLPERF_RUN_SETUP_NCCL" = "1" ] && ! compgen -G "$MLPERF_RUN_VENV/.mlperf-run-setup-nccl-cuda*" >/dev/null; then
  # the CUDA version of torch's wheel, from its runtime package (e.g. nvidia-cuda-runtime 13.0.96)
  installed=$("$MLPERF_RUN_VENV/bin/pip" list --disable-pip-version-check 2>/dev/null)
  cuda_rt=$(printf '%s\n' "$installed" | awk '$1 == "nvidia-cuda-runtime" || $1 == "nvidia-cuda-runtime-cu12" { print $2; exit }')
  if [ -z "$cuda_rt" ]; then
    log "torch in $MLPERF_RUN_VENV is not a CUDA wheel (no nvidia-cuda-runtime): no NCCL to build against"
    exit 1
  fi
  if ! printf '%s\n' "$installed" | grep -q '^nvidia-nccl'; then
    log "torch's CUDA wheel brought no nvidia-nccl package"
    exit 1
  fi
  cuda_mm=$(printf '%s' "$cuda_rt" | cut -d. -f1,2)
  nccl_stamp="$MLPERF_RUN_VENV/.mlperf-run-setup-nccl-cuda$cuda_mm"
  if [ ! -f "$nccl_stamp" ]; then
    log "installing the CUDA $cuda_mm headers the default build compiles against (nvidia-cuda-crt, nvidia-cuda-cccl; under a minute)"
    case "$cuda_mm" in
      # CUDA 12 wheels: crt/ comes with the nvcc package
      12.*) pkgs=("nvidia-cuda-nvcc-cu12==$cuda_mm.*" "nvidia-cuda-cccl-cu12==$cuda_mm.*") ;;
      *) pkgs=("nvidia-cuda-crt==$cuda_mm.*" "nvidia-cuda-cccl==$cuda_mm.*") ;;
    esac
    "$MLPERF_RUN_VENV/bin/pip" install -q --disable-pip-version-check "${pkgs[@]}"
    touch "$nccl_stamp"
  fi
  # libnvjpeg for data.decoder = "nvjpeg", where a GPU is present (torchvision's wheel carries a
  # copy too, which the decoder also finds; a failure here only means that copy is used)
  nvjpeg_stamp="$MLPERF_RUN_VENV/.mlperf-run-setup-nvjpeg-cuda$cuda_mm"
  if [ ! -f "$nvjpeg_stamp" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    case "$cuda_mm" in
      12.*) nvjpeg_pkg="nvidia-nvjpeg-cu12==$cuda_mm.*" ;;
      *) nvjpeg_pkg="nvidia-nvjpeg==$cuda_mm.*" ;;
    esac
    log "a GPU is present: installing libnvjpeg ($nvjpeg_pkg) for data.decoder = \"nvjpeg\""
    if "$MLPERF_RUN_VENV/bin/pip" install -q --disable-pip-version-check "$nvjpeg_pkg"; then
      touch "$nvjpeg_stamp"
    else
      log "could not install $nvjpeg_pkg: nvJPEG will use torchvision's copy, or MLPERF_RUN_NVJPEG"
    fi
  fi
fi
) || { unset MLPERF_RUN_SETUP_NCCL; echo "[setup] failed" >&2; return 1 2>/dev/null || exit 1; }
unset MLPERF_RUN_SETUP_NCCL

export PATH="$MLPERF_RUN_VENV/bin:$PATH"
export LIBTORCH_USE_PYTORCH=1
# The official checkers, for tests that compare verdicts.
export MLPERF_RUN_PYTHON="$MLPERF_RUN_VENV/bin/python"
