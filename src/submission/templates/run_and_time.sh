#!/usr/bin/env bash
# A timed result set of {{BENCHMARK}} with mlperf-run {{VERSION}} (see README.md).
# mlperf-run draws a fresh seed from the OS for every run, logs it, and clears the page cache
# before each run (logged as cache_clear; dropping caches needs root).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MLPERF_RUN="${MLPERF_RUN:-$HERE/mlperf-run/target/release/mlperf-run}"
DATADIR="${DATADIR:-/data/{{BENCHMARK}}}"
LOGDIR="${LOGDIR:-$HERE/results}"
CONFIG="${CONFIG:-$HERE/mlperf-run/configs/{{BENCHMARK}}/{{DIVISION}}_8xA100.toml}"
NEXP="${NEXP:-{{RUNS}}}"
start=$(date +%s)
# EXTRA_ARGS stays unquoted on purpose (several arguments).
# shellcheck disable=SC2086
"$MLPERF_RUN" {{BENCHMARK}} --division {{DIVISION}} --config "$CONFIG" --data "$DATADIR" \
    --runs "$NEXP" --results "$LOGDIR" --system {{SYSTEM}} ${EXTRA_ARGS:-}
end=$(date +%s)
echo "RESULT,{{BENCHMARK}},${NEXP} runs,$((end - start)) s,$(date -u +%FT%TZ)"
