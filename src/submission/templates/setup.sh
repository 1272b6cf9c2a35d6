#!/usr/bin/env bash
# Builds mlperf-run {{VERSION}} with libtorch (see README.md).
# Needs a Rust toolchain and a PyTorch 2.11.0 install whose libtorch the build links against.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/mlperf-run"
if [ -f scripts/setup.sh ]; then
    # The project's own setup: the Python venv with torch (libtorch) and the official tools.
    # shellcheck disable=SC1091
    source scripts/setup.sh
fi
export LIBTORCH_USE_PYTORCH="${LIBTORCH_USE_PYTORCH:-1}"
cargo build --release --locked
echo "setup.sh: built $HERE/mlperf-run/target/release/mlperf-run"
