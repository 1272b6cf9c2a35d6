#!/usr/bin/env bash
# Behaviour check for refactors: the tiny presets' logs of two mlperf-run binaries, for the same
# fixed seeds and the same data, must be identical apart from time fields.
#
#   scripts/compare_tiny_logs.sh BEFORE_BIN AFTER_BIN [OUT_DIR] [--official] [--before-root DIR]
#       [--added-key KEY]...
#
# --added-key KEY: events of KEY that only the AFTER logs have (a key the change adds on
# purpose, e.g. tracked_stats) are counted and left out of the comparison.
# --before-root DIR: the BEFORE binary reads its presets from DIR/configs (a checkout of the
# commit it was built from, e.g. `git worktree add /tmp/base REV`), as a refactor may rename
# config keys; default: this checkout.
#
# Runs one seeded run of each tiny preset (resnet tiny_cpu, tiny_cpu_open, tiny_cpu_jpeg; bert
# tiny_cpu, tiny_cpu_open) with each binary, then compares the logs line by line with
# scripts/bench/mllog_diff.py, which drops what a clock sets: time_ms, and the values of the
# keys that are durations or rates (see that script). With --official, also runs the official
# compliance checker (mlperf-logging, from the venv of scripts/setup.sh) on every AFTER log.
# Exit 0: identical; 1: a difference (printed); 2: a run failed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
official=0
before_root="$root"
added=()
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --official) official=1 ;;
    --before-root) before_root="$(realpath "$2")"; shift ;;
    --added-key) added+=(--added-key "$2"); shift ;;
    *) args+=("$1") ;;
  esac
  shift
done
[ ${#args[@]} -ge 2 ] || { echo "usage: $0 BEFORE_BIN AFTER_BIN [OUT_DIR] [--official] [--before-root DIR]" >&2; exit 2; }
# the official checker and the venv's python (scripts/setup.sh, idempotent)
[ $official = 1 ] && source "$root/scripts/setup.sh" >/dev/null
before="$(realpath "${args[0]}")"; after="$(realpath "${args[1]}")"
out="${args[2]:-$(mktemp -d)}"
mkdir -p "$out"
out="$(realpath "$out")"
cd "$root"
seed=20261127
# data both binaries read: made once, by the AFTER binary
if [ ! -f "$out/data/imagenet/.done" ]; then
  # the size the preset's header names
  "$after" data synth-imagenet --out "$out/data/imagenet" --classes 10 --per-class 100 --val-per-class 20 \
    --min-size 64 --max-size 96 >/dev/null
  touch "$out/data/imagenet/.done"
fi
if [ ! -f "$out/data/bert/vocab.txt" ]; then
  "$after" data synth-bert --out "$out/data/bert" --sentences 16 --seq-len 32 >/dev/null
fi
runs=(
  "resnet closed configs/resnet/tiny_cpu.toml"
  "resnet open configs/resnet/tiny_cpu_open.toml"
  "resnet closed configs/resnet/tiny_cpu_jpeg.toml $out/data/imagenet"
  "bert closed configs/bert/tiny_cpu.toml $out/data/bert"
  "bert open configs/bert/tiny_cpu_open.toml $out/data/bert"
)
# logs already in OUT are reused (an interrupted comparison resumes) only when they came from the
# same binary: each side's folder records its binary's sha256, and a different binary starts the
# side afresh
for side in before after; do
  bin=$before; [ $side = after ] && bin=$after
  sum="$(sha256sum "$bin" | cut -d' ' -f1)"
  if [ "$(cat "$out/$side/.binary" 2>/dev/null)" != "$sum" ]; then
    rm -rf "${out:?}/$side"
    mkdir -p "$out/$side"
    echo "$sum" >"$out/$side/.binary"
  fi
done
status=0
for r in "${runs[@]}"; do
  read -r bench division config data <<<"$r"
  name="${bench}_$(basename "$config" .toml)"
  for side in before after; do
    bin=$before; cfg_root=$before_root
    [ $side = after ] && { bin=$after; cfg_root=$root; }
    log="$out/$side/$name.txt"
    mkdir -p "$out/$side"
    [ -f "$log" ] && continue
    cmd=("$bin" "$bench" --division "$division" --config "$cfg_root/$config" --seed "$seed" --log "$log.tmp")
    [ -n "${data:-}" ] && cmd+=(--data "$data")
    if ! "${cmd[@]}" >"$out/$side/$name.stdout" 2>&1; then
      # an aborted run (its own verdict) still writes its log; anything else is a failure
      grep -q ':::MLLOG.*"run_stop"' "$log.tmp" 2>/dev/null || {
        echo "$side $name: the run failed (see $out/$side/$name.stdout)" >&2; exit 2; }
    fi
    mv "$log.tmp" "$log"
  done
  if python3 "$root/scripts/bench/mllog_diff.py" "$out/before/$name.txt" "$out/after/$name.txt" "${added[@]}"; then
    echo "identical apart from time fields: $name"
  else
    status=1
  fi
  if [ $official = 1 ]; then
    ruleset=4.0.0; [ "$bench" = bert ] && ruleset=5.0.0
    # in $out: the checker writes compliance_checker.log into its working folder
    if (cd "$out" && python3 -m mlperf_logging.compliance_checker --usage training --ruleset $ruleset \
      "$out/after/$name.txt") >"$out/after/$name.checker" 2>&1; then
      echo "official checker $ruleset: SUCCESS: $name"
    else
      echo "official checker $ruleset: FAILED: $name (see $out/after/$name.checker)"; status=1
    fi
  fi
done
echo "logs in $out"
exit $status
