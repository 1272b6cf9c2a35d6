#!/usr/bin/env bash
# Benchmark (not a test): score the four real fixture result sets with our release binary and
# with the official MLCommons result summarizer (mlperf-logging 4.1.68), side by side in one
# run, and print both wall times and the ratio (target: ours at least 20x faster).
#
# Both sides do the same work: three invocations, one per submitter tree
# (v2.0/MosaicML and v2.0/NVIDIA at ruleset 2.0.0, v2.1/MosaicML at 2.1.0), each reading the
# logs, checking them and computing the olympic scores (and the RCP check of the closed set).
# The summarizer writes scaling.json into what it reads, so both run on a temporary copy.
#
# Usage: scripts/bench_score.sh            (OURS_RUNS=20 OFFICIAL_RUNS=3 by default)
# Env:   MLPERF_RESULTS_FIXTURES  the real logs (default ../shared/fixtures/mlperf-results)
#        CARGO_TARGET_DIR         where to build (default target/no-torch, as scripts/test)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fixtures="${MLPERF_RESULTS_FIXTURES:-$root/../shared/fixtures/mlperf-results}"
ours_runs="${OURS_RUNS:-20}"
official_runs="${OFFICIAL_RUNS:-3}"
target="${CARGO_TARGET_DIR:-$root/target/no-torch}"
python="${MLPERF_RUN_PYTHON:-${MLPERF_RUN_VENV:-$HOME/.cache/mlperf-run/venv}/bin/python}"

[ -d "$fixtures" ] || { echo "error: fixtures not found at $fixtures (set MLPERF_RESULTS_FIXTURES)" >&2; exit 2; }
"$python" -c 'import mlperf_logging' 2>/dev/null ||
  { echo "error: $python cannot import mlperf_logging (run scripts/setup.sh or set MLPERF_RUN_PYTHON)" >&2; exit 2; }

echo "building the release binary (no libtorch) in $target ..."
(cd "$root" && cargo build --release --no-default-features --quiet --target-dir "$target")
bin="$target/release/mlperf-run"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$fixtures/v2.0" "$fixtures/v2.1" "$work/"
orgs=("v2.0/MosaicML 2.0.0" "v2.0/NVIDIA 2.0.0" "v2.1/MosaicML 2.1.0")

now() { date +%s.%N; }

ours_once() {
  for entry in "${orgs[@]}"; do
    set -- $entry
    "$bin" score --format csv --ruleset "$2" "$work/$1" > "$work/ours.out"
  done
}

official_once() {
  for entry in "${orgs[@]}"; do
    set -- $entry
    (cd "$work" && "$python" -m mlperf_logging.result_summarizer "$work/$1" training "$2" \
      --csv "$work/official.csv" > /dev/null 2>&1)
  done
}

# Warm-up (file cache, and the summarizer's first pass that writes scaling.json).
ours_once
official_once

t0=$(now)
for _ in $(seq "$ours_runs"); do ours_once; done
t1=$(now)
for _ in $(seq "$official_runs"); do official_once; done
t2=$(now)

ours=$(echo "($t1 - $t0) / $ours_runs" | bc -l)
official=$(echo "($t2 - $t1) / $official_runs" | bc -l)
ratio=$(echo "$official / $ours" | bc -l)

echo
echo "scores (minutes, 4 decimals):"
"$bin" score --format csv "$work" | awk -F, 'NR > 1 { printf "  ours      %-24s %-7s %s\n", $1, $2, $10 }'
for entry in "${orgs[@]}"; do
  set -- $entry
  (cd "$work" && "$python" -m mlperf_logging.result_summarizer "$work/$1" training "$2" \
    --csv "$work/official.csv" > /dev/null 2>&1)
  "$python" - "$work/official.csv" <<'EOF'
import csv, sys
for row in csv.DictReader(open(sys.argv[1])):
    for bench in ("resnet", "bert"):
        if row.get(bench):
            print(f"  official  {row['system']:<24} {bench:<7} {float(row[bench]):.4f}")
EOF
done
echo
printf "four fixture sets, per full pass (3 invocations):\n"
printf "  mlperf-run score (release)      %10.4f s   (mean of %d)\n" "$ours" "$ours_runs"
printf "  official result_summarizer      %10.4f s   (mean of %d)\n" "$official" "$official_runs"
printf "  speed-up                        %10.1fx  (target >= 20x)\n" "$ratio"
