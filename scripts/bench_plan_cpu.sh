#!/usr/bin/env bash
# Benchmark (not a test) of `mlperf-run plan`'s projection on this machine: a tiny preset's run
# set on 1 Gloo rank, projected to 2 ranks by `plan --config --from-log`, against the same set
# measured on 2 ranks (one process per core, one thread each: a core stands for a GPU).
#
# Per round: the gradient all-reduce of the preset's model is measured on 2 ranks
# (`dist-selftest --mode overlap --model tiny`: the median "all-reduce in flight") and given to
# plan as the link's bandwidth; then the 1-rank set and the 2-rank set run with the same seeds;
# plan projects 1 and 2 ranks from the 1-rank logs twice: with no per-step overhead (plan
# --config's default) and with the overhead measured (--batch-effect-log: one 1-rank run of the
# preset at half its global batch, so the per-GPU batch the 2-rank run has). Printed per round:
# the measured time to train of each set (mean of run_start..run_stop over its runs), the
# measured overhead, both projections and their errors, and a naive control (the 1-rank time
# halved: everything scales, nothing is fixed). Run it on an otherwise idle machine.
#
# Usage: scripts/bench_plan_cpu.sh [--rounds 3] [--runs 5] [--config configs/resnet/tiny_cpu.toml]
#                                  [--out runs/bench/plan_cpu]
# Needs the release binary (cargo build --release) and python3.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds=3 runs=5 config=configs/resnet/tiny_cpu.toml out=runs/bench/plan_cpu
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "bench_plan_cpu.sh: unknown argument $1 (see the header for usage)" >&2; exit 2 ;;
  esac
done
cd "$root"
# shellcheck disable=SC1091
source scripts/setup.sh >/dev/null 2>&1 || true
bin="${MLPERF_RUN_BIN:-$root/target/release/mlperf-run}"
[ -x "$bin" ] || { echo "bench_plan_cpu.sh: no $bin: run cargo build --release" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || echo "bench_plan_cpu.sh: warning: $(nproc) core(s); 2 ranks share them" >&2
rm -rf "$out" && mkdir -p "$out"
export MLPERF_RUN_THREADS=1
seeds="$(seq -s, 11 $((10 + runs)))"

# The preset's gradients, all-reduced over 2 Gloo ranks: bytes and median seconds -> GB/s.
link_gbps() {
  local log="$1" params="$2"
  "$bin" launch --nproc-per-node 2 --master-port 0 -- dist-selftest --mode overlap \
    --model tiny --batch 32 --steps 40 >"$log" 2>&1
  python3 - "$log" "$params" <<'EOF'
import re, statistics, sys
secs = [float(m) for m in re.findall(r"all-reduce in flight ([0-9.]+) s", open(sys.argv[1]).read())]
t = statistics.median(secs)
# a ring all-reduce over 2 ranks moves (2 (n-1) / n) x bytes = the bytes themselves
print(f"{float(sys.argv[2]) * 4 / t / 1e9:.4f}")
EOF
}

# Mean run_start..run_stop (s) of a set's logs, and how many succeeded.
set_time() {
  python3 - "$@" <<'EOF'
import json, sys
ts, ok = [], 0
for p in sys.argv[1:]:
    ev = {}
    for line in open(p):
        if line.startswith(":::MLLOG "):
            e = json.loads(line[9:])
            ev.setdefault(e["key"], e)
            if e["key"] == "run_stop":
                ev["run_stop"] = e
    ts.append((ev["run_stop"]["time_ms"] - ev["run_start"]["time_ms"]) / 1000)
    ok += ev["run_stop"]["metadata"].get("status") == "success"
print(f"{sum(ts) / len(ts):.3f} {ok}")
EOF
}

printf '%-6s %9s %8s %9s %9s %9s %8s %9s %8s %9s %8s %s\n' round "link GB/s" "ovh ms" \
  "1 rank s" "2 ranks s" "proj o=0" error "proj o" error "control" error \
  "converged (1 / 2 ranks)" | tee "$out/table.txt"
for r in $(seq 1 "$rounds"); do
  d="$out/round$r"
  mkdir -p "$d"
  for n in 1 2; do
    "$bin" launch --nproc-per-node "$n" --master-port 0 -- resnet --division closed \
      --config "$config" --runs "$runs" --seeds "$seeds" --results "$d/n$n" --system cpu \
      >"$d/n$n.log" 2>&1
  done
  # the model's parameter count, as plan reads it from the config
  params="$("$bin" plan resnet --config "$config" --from-log "$d"/n1/cpu/resnet/result_*.txt \
    --gpus 1 --out "$d/plan" | sed -n 's/.*model \([0-9]*\) parameters.*/\1/p')"
  gbps="$(link_gbps "$d/allreduce.log" "$params")"
  # the per-GPU batch effect: one 1-rank run of the preset at half its global batch
  half="$d/half_batch.toml"
  gbs="$(sed -n 's/^global_batch_size = \([0-9]*\)$/\1/p' "$config")"
  sed "s/^global_batch_size = $gbs\$/global_batch_size = $((gbs / 2))/" "$config" >"$half"
  "$bin" resnet --division closed --config "$half" --seed 11 --log "$d/half_batch.txt" \
    >"$d/half_batch.log" 2>&1
  common=(--config "$config" --from-log "$d"/n1/cpu/resnet/result_*.txt --measured-gpus 1
    --gpus 1,2 --gpus-per-node 2 --intra "$gbps" --overlap 0)
  "$bin" plan resnet "${common[@]}" --out "$d/plan" >"$d/plan.txt"
  "$bin" plan resnet "${common[@]}" --batch-effect-log "$d/half_batch.txt" \
    --out "$d/plan_batch_effect" >"$d/plan_batch_effect.txt"
  read -r t1 ok1 < <(set_time "$d"/n1/cpu/resnet/result_*.txt)
  read -r t2 ok2 < <(set_time "$d"/n2/cpu/resnet/result_*.txt)
  python3 - "$r" "$gbps" "$t1" "$t2" "$d" "$ok1/$runs" "$ok2/$runs" <<'EOF' | tee -a "$out/table.txt"
import json, re, sys
r, gbps, t1, t2, d, ok1, ok2 = sys.argv[1:]
t1, t2 = float(t1), float(t2)
proj = lambda name: json.load(open(f"{d}/{name}/resnet_plan.json"))[1]["projection"]["minutes"] * 60
p0, p1 = proj("plan"), proj("plan_batch_effect")
ovh = float(re.search(r"step overhead ([0-9.]+) ms", open(f"{d}/plan_batch_effect.txt").read()).group(1))
ctrl = t1 / 2
print(f"{r:<6} {float(gbps):>9.3f} {ovh:>8.2f} {t1:>9.3f} {t2:>9.3f} {p0:>9.3f} {p0 / t2 - 1:>+8.1%} "
      f"{p1:>9.3f} {p1 / t2 - 1:>+8.1%} {ctrl:>9.3f} {ctrl / t2 - 1:>+8.1%} {ok1} / {ok2}")
EOF
done
echo "logs and plans: $out (plan's table: $out/round*/plan.txt)"
