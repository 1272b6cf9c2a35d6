#!/usr/bin/env bash
# GPU benchmarks of mlperf-run on one GPU, each side by side with a PyTorch peer in the same
# run: several rounds, alternating ours and the peers (one process on the GPU at a time), then
# a table (rate per side per round, median ratio ours/peer, model TFLOP/s, MFU, GPU busy %).
#
#   a) ResNet-50 training step, batch 256, 224 px, bf16, channels-last, SGD, fixed batch:
#      examples/resnet_bench_step vs scripts/bench/resnet_step.py (PyTorch eager, torch.compile)
#   b) ResNet-50 end to end from JPEGs (100-class synthetic ImageFolder shaped like ImageNet
#      train: `data synth-imagenet --sizes imagenet`, about 400x350, quality 90; 16,000 images):
#      `mlperf-run -v resnet --division closed` of the one-GPU closed preset
#      (configs/resnet/bench_1gpu.toml: LARS, batch 400, fp16, channels-last, fused BN+ReLU,
#      CUDA graph, nvJPEG + crops resized on the GPU), img/s from its log in the training blocks
#      after the warm-up epoch and with their evals, GPU busy, the decoder split, nvJPEG's
#      backend and the device arena per batch (its -v line "decoder split: ..."), and the data
#      wait per step (its -v line "data wait per training step: ..."), against a)'s `mlperf-run
#      fp16 all-methods` step of the same call when a) ran; the same run with `decoder = "cpu"`
#      (`mlperf-run resnet cpu-decoder`, against e)'s `decoder cpu` row); vs torchvision
#      ImageFolder + DataLoader(cores - 1 workers) training (scripts/bench/torchvision_loader.py
#      --train, the same steps)
#   c) BERT-Large training step, batch 32 x 512, bf16: examples/bert_bench_step vs Hugging Face
#      BertForPreTraining (scripts/bench/hf_bert_step.py) and the reference-equations PyTorch
#      BERT (scripts/bench/bert_ref.py bench)
#   d) a `mlperf-run bert` run (configs/bert/bench_1gpu.toml, seq/s of block 2 from its log)
#      against the same step benchmark with LAMB (and against c); target: within 5%
#   p) a `mlperf-run bert` run with every closed-legal method (configs/bert/bench_1gpu_packed.toml:
#      packed rows of 512, 48 per step at packing factor 2, CUDA graph, fused epilogues and QKV,
#      bf16, FP8 linears with delayed scaling), beside the same run without methods.fp8 (`mlperf-run
#      bert packed bf16 (run)`: the fp8 target is >= 1.3x it, >= 1,000 seq/s on an H200, >= 950 on
#      an H100), on realistic-length shards (`data synth-bert --lengths realistic --seq-len 512`):
#      seq/s from its log (training blocks 2-3; and with their evals), GPU busy, rows/s against
#      its own step benchmark of the same rows (bert_bench_step, 48 x 512, the same methods,
#      LAMB: dense attention over each row, where the run's varlen attention stays within each
#      sequence) and seq/s against Hugging Face BertForPreTraining padded (SDPA, batch 32 x 512:
#      one sequence per 512-token row, as the data comes) and, the same work, Hugging Face on
#      packed rows (2 sequences per 512-token row, position ids and token types per sequence, a
#      block-diagonal mask with SDPA; checked against each sequence alone first); plus
#      `data bert-pack`'s packing efficiency. Its targets, set for one H100: >= 700 seq/s, >= 2.5x
#      Hugging Face padded, run / step >= 0.95, GPU busy >= 97%, padding <= 3%
#   q) (only with --only q or --only ...,q; once) first scripts/bench/fp8_peer_probe.py (torch's own
#      _scaled_mm at the probe's 16 x 32 shape in methods.fp8's dtype pairs, scales as tensors of
#      their own and as views; its lines on stderr and in logs/q-fp8-peer-probe.log), then
#      examples/fp8_check: methods.fp8's linears
#      (_scaled_mm, delayed scaling, E4M3 x/W, E5M2 gradients) vs bf16 linear at BERT-Large shapes
#      (16,384 tokens; QKV 1024->3072, attention out 1024->1024, FFN 1024->4096 and 4096->1024):
#      relative error of the output and the x/W/bias gradients (pass: < 0.1), the emulated path vs
#      the kernel (< 2e-2), a control with the amax history off by 16x that must fail, and the
#      median fwd+bwd time of each (about a minute on an H100); then, in the log only, the FP8
#      attention probe: one line per libtorch attention op on E4M3 q/k/v, runs or refused
#      (docs/gpu.md, "FP8 attention"), and the bf16 SDPA's time; the cast kernels against ATen's
#      casts (bytes, amax, time); then examples/fp8_train_check: BERT-Large trained 300 steps
#      (16 x 128 tokens, LAMB, bf16 autocast) in bf16, in fp8 and in fp8 with the amax history
#      off by 16x, from one init and one data order: fp8's loss within 2% of bf16's at every
#      step after 50 and its masked-LM accuracy within 0.005; the control must miss; beside
#      them bf16 from weights perturbed by 1e-6 (how far bf16 drifts from itself)
#      (logs/q-fp8-training.log; its verdict on stderr)
#   c) also has `mlperf-run cuda-graph fused-epilogues fused-qkv bf16-residual fp8` (the fast row
#   with methods.fp8), in --sides all and targets, and (--sides all) the same with
#   `casts-unfused` (each FP8 linear casting its own input instead of the fused ops:
#   --no-fp8-fused-cast);
#   a) and c) also run ours with methods.cuda_graph (`mlperf-run cuda-graph`: the step captured
#   once and replayed; in the default build; a lite or CPU-only build fails those rows with
#   the reason), reported against ours without it and against every peer;
#   c) also runs ours with methods.fused_epilogues (`mlperf-run fused-epilogues`) and with
#   methods.fused_bias_gelu (`mlperf-run fused-bias-gelu`, open division: tanh GELU);
#   a) and c) end with `mlperf-run all-methods`: every method of the row above at once (a: CUDA
#   graph + fused BN+ReLU; c: CUDA graph + fused epilogues + fused QKV + bf16 residual stream +
#   fused bias+GELU), the row that
#   answers the step targets set for one H100 (ResNet-50: >= 5,000 img/s and >= 0.9x
#   torch.compile; BERT-Large: >= 360 seq/s and >= 1.4x Hugging Face; GPU busy >= 97%), which the
#   table's target blocks read off, met or not;
#   c) also has `mlperf-run cuda-graph fused-epilogues`, the methods that measured faster
#   (fused bias+GELU measured slower on an H200), and `... fused-epilogues fused-qkv
#   bf16-residual` (methods.fused_qkv: query/key/value as one matmul; methods.bf16_residual: the
#   residual stream in bf16), whose targets the BERT-Large target block reads too; with --sides all also
#   `... fused-epilogues fused-qkv` alone, to split the two new methods' shares;
#   c)'s batches have no padding, so ours attends without a mask (FlashAttention), as Hugging
#   Face does for an all-ones mask; with --sides all, `... fused-epilogues mask-kept` passes the
#   all-ones mask anyway (the memory-efficient kernel): the difference the mask makes;
#   `... bf16-residual flash-varlen` attends through FlashAttention-2's varlen kernel (every
#   sequence full length) instead of SDPA, which picks cuDNN's attention on an H100 / H200;
#   `... fused-epilogues-ln-only fused-qkv bf16-residual` is the fast row with only the
#   LayerNorm epilogues fused (--no-gelu-epilogue): the bias + GELU epilogue's share;
#   a)'s fp16 rows have fp16 peers: PyTorch eager with GradScaler and its torch.compile; with
#   --sides all, a) also has `mlperf-run all-methods` in bf16, against the bf16 peers;
#   g) (only with --only g or --only ...,g) examples/fused_epilogue_check: the fused
#      dense + dropout + residual + LayerNorm op's CUDA kernels vs its composite ATen path at
#      BERT-Large shapes (56 x 512 tokens, H 1024, bf16 autocast, the same dropout mask): max
#      abs/rel diffs of the output and every gradient, and median fwd+bwd time per side (needs a
#      default build; the table's rate is 512-token sequences per second of the op)
#   h) (only with --only h or --only ...,h) examples/fused_bias_gelu_check: the fused
#      feed-forward op gelu_tanh(x W1^T + b1) W2^T with cuBLASLt's GELU_AUX_BIAS (forward) and
#      DGELU_BGRAD (backward) epilogues vs its composite ATen path and vs the unfused linear +
#      erf GELU + linear (BERT-Large: 56 x 512 tokens, 1024 -> 4096 -> 1024, bf16 autocast): max
#      abs/rel diffs of the output and every gradient, and median fwd+bwd time per side (needs a
#      default build)
#   v) (only with --only v or --only ...,v) examples/varlen_attention_check: unpadded attention
#      (methods.unpad) with FlashAttention's varlen kernel vs the scatter path (q/k/v scattered
#      to [B, S], SDPA with the key-padding mask) at BERT-Large shapes (56 x 512, half the tokens
#      real, 16 heads of 64, bf16, no dropout): max abs/rel diffs of the output and the q/k/v
#      gradients, and median fwd+bwd time per side
#   e) (only with --only e or --only ...,e) the data path alone on b)'s images, JPEG files to
#      the normalised fp16 channels-last tensor on the GPU (`mlperf-run data bench-imagenet
#      --augment gpu --device cuda`: cores - 1 decode threads, batch 256, MLPerf crops), per
#      decoder: `decoder cpu` (libjpeg-turbo region decoder), `decoder nvjpeg` (every image to
#      nvJPEG: data.hw_decoder_load 1), `nvjpeg engine alone` (the same, stopping at the batch's
#      arena: nvJPEG's batched ROI decode into device memory, no crop/resize kernels: the
#      ceiling on this GPU for these images), `decoder hybrid` (half to nvJPEG, half to the CPU
#      decoder at the same time: 0.5), `decoder nvjpeg default-split` (the GPU model's default
#      split); nvjpeg needs libnvjpeg (pip nvidia-nvjpeg, torchvision's copy, or
#      MLPERF_RUN_NVJPEG=path; otherwise those sides fail, saying why); peers: torchvision's
#      DataLoader with PIL decode to the same GPU tensor (scripts/bench/torchvision_loader.py
#      --to-device cuda) and torchvision.io.decode_jpeg(device="cuda") batched +
#      transforms.v2 on the GPU (scripts/bench/torchvision_gpu_decode.py)
#   f) (only with --only f or --only ...,f) fused BN+ReLU (methods.fused_bn_relu) alone:
#      examples/fused_bn_check, fused vs unfused forward + backward on ResNet-50's BN shapes
#      (batch 256, channels-last, bf16 and fp16): which path ran (cuDNN or composite and why),
#      max differences, and rows fused-bf16 / unfused-bf16 / fused-fp16 / unfused-fp16 whose
#      img/s is batch / (sum of the per-shape medians); a) also has a `mlperf-run fused-bn-relu`
#      row (the whole step with the fused_bn_relu method). The cuDNN path is in the default build.
#   k) (only with --only ...,k; once) short batches beside a CUDA graph: a) mlperf-run's step with
#      --methods ...,cuda_graph --short-warmup (the warm-up's and the capture step's batches, and one in the
#      timed epoch, one image short): the graph is captured cold on the full shape with cuDNN
#      benchmark mode off, the short batches run eagerly beside it; the row fails unless the
#      graph's counts are exactly that (the report prints them)
#   m) (only with --only m or --only ...,m; once) the multi-process paths executed on the one GPU
#      (scripts/bench/multiprocess_check.py, about 2 minutes): 2 ranks of `mlperf-run launch` share the
#      GPU in the test mode MLPERF_RUN_TEST_SHARE_GPU=1 (Gloo over CUDA tensors; NCCL refuses two
#      ranks on one device) and must end with the same parameters as 1 process accumulating the
#      same 2 micro-batches (ranks bit for bit; the process within 2e-3, cuDNN's weight gradients
#      being nondeterministic), the overlapped all-reduce equal to the blocking one, a killed rank
#      must end the other (aborted) within 60 s; NCCL in a group of one
#      (MLPERF_RUN_TEST_GROUP_OF_ONE=1) with the all-reduce captured in the CUDA graph equals no
#      group; a CUDA graph with GPU-sharing ranks and a second rank without the test mode are
#      refused, naming the fix; no output shows a panic or a destroy_process_group warning.
#      A PASS/FAIL line per check under the table (with --smoke: the same checks over Gloo on the CPU)
#   plus a bf16 8192^3 matmul (torch) for MFU, nvidia-smi utilization.gpu sampled every 200 ms
#   (the mean inside each timed window is reported), and with --ncu kernels per step (ncu).
#
# Usage: scripts/bench_gpu.sh [--rounds N] [--first-round K] [--time-limit S] [--only a,b,c,d,ncu]
#                             [--sides all|targets] [--ncu] [--out DIR] [--data DIR] [--smoke]
#   --rounds N   rounds of a), b), c), e), f), h) (default 3); d), p), g), k) and v) run once
#   --first-round K  number the rounds from K (default 1): a later call that adds rounds to an
#                earlier call's (merge their results.jsonl, then `gpu_report.py report`)
#   --time-limit S  start no round (and no once-only part) that would end more than S seconds
#                after the start, judged by the longest round of that part so far (a part's
#                first round starts while less than S seconds have passed); what was left out
#                is listed under the table. The table and the packed logs are written after
#                every round, so a call cut off by a harder limit keeps its finished rounds
#   --only LIST  parts to run (default a,b,c,d,p; `ncu` = the --ncu part), in the order m, a, k, b,
#                e, f, g, h, v, q, c, d, p, ncu: the fused ops' checks before the BERT step that uses them
#   --sides SET  `all` (default) or `targets`: in a), b), c) and e) only the rows the targets
#                block reads (a: mlperf-run, mlperf-run fp16 all-methods, PyTorch eager+compile
#                fp16; b: the run with nvJPEG and with the CPU decoder; c: mlperf-run, mlperf-run
#                cuda-graph fused-epilogues, ... fused-qkv bf16-residual, the same with the
#                LayerNorm epilogues only, mlperf-run all-methods, Hugging Face; e: decoder cpu,
#                decoder nvjpeg, the engine alone, torchvision decode_jpeg gpu), to measure the
#                targets in a few minutes; `data`: the ResNet data path's targets alone (a: only
#                mlperf-run fp16 all-methods, the step b) is compared with; b and e as targets);
#                `run`: a) as in `data`, b) the nvJPEG run alone, e) decoder nvjpeg alone
#   --ncu        add the ncu part: kernel count and summed kernel ms per step, ours vs eager
#                (ResNet-50), and one BERT-Large step's kernels by class, ours vs Hugging Face
#   --out DIR    results: table.txt, results.json, results.csv, results.jsonl, env.txt, and the
#                raw logs in logs/ and smi/ (default: $OUT if set, else runs/bench-gpu; in $OUT
#                the raw logs come packed as logs.tar.gz, updated after every round)
#   --data DIR   where the synthetic data sets are made, or reused when present
#                (default: $BENCH_DATA or ${TMPDIR:-/tmp}/mlperf-run-bench-data)
#   --smoke      every part on the CPU with tiny models and data, 1 round unless --rounds says
#                otherwise: proves the plumbing
#
# Works from the repository (binaries in target/release, after cargo build --release --bins
# --examples) and from a bundle made by scripts/bundle.sh (binaries in bin/, libraries in lib/),
# with no Rust toolchain and no mlperf-logging. Our binaries: $MLPERF_RUN_BIN (the mlperf-run
# binary; the examples beside it or in examples/ beside it), else bin/ next to this script or
# one level up, else target/release. Python: ${PYTHON:-python3} with torch, torchvision and
# transformers (c's Hugging Face side is skipped without it). LD_LIBRARY_PATH is set for our binaries only: that python's
# torch/lib, plus the bundle's lib/. Exit status: 0 when every measurement succeeded, 1 if any
# failed (the table names them), 2 on a set-up error.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
PYTHON=${PYTHON:-python3}
rounds=3
first_round=1
time_limit=0
only="a,b,c,d,p"
sides=all
smoke=0
ncu_flag=0
out="${OUT:-runs/bench-gpu}"
data="${BENCH_DATA:-${TMPDIR:-/tmp}/mlperf-run-bench-data}"

die() { echo "bench_gpu: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; rounds_given=1; shift 2 ;;
    --first-round) first_round="$2"; shift 2 ;;
    --time-limit) time_limit="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --sides) sides="$2"; shift 2 ;;
    --ncu) ncu_flag=1; shift ;;
    --out) out="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --smoke) smoke=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[ "$ncu_flag" = 1 ] && only="$only,ncu"
for p in ${only//,/ }; do
  case "$p" in a|b|c|d|e|f|g|h|k|m|p|q|v|ncu) ;; *) die "--only takes a, b, c, d, e, f, g, h, k, m, p, q, v and ncu, not $p" ;; esac
done
case "$rounds" in ''|*[!0-9]*|0) die "--rounds needs a positive number" ;; esac
case "$first_round" in ''|*[!0-9]*|0) die "--first-round needs a positive number" ;; esac
case "$time_limit" in ''|*[!0-9]*) die "--time-limit needs a number of seconds (0: none)" ;; esac
# the rows of a) and c), in round 1's order
case "$sides" in
  all) A_SIDES=(mlperf-run graph all-bf16 fp16 fused all pytorch pytorch-fp16); C_SIDES=(mlperf-run graph fused gelu graph-fused qkv fast fast-fp8 fast-fp8-cast fast-ln fast-fa2 mask all hf ref)
    B_SIDES=(mlperf-run mlperf-run-cpu torchvision); E_SIDES=(cpu nvjpeg engine hybrid default tv-loader tv-gpu) ;;
  targets) A_SIDES=(mlperf-run all pytorch-fp16); C_SIDES=(mlperf-run graph-fused fast fast-fp8 fast-ln all hf)
    B_SIDES=(mlperf-run mlperf-run-cpu); E_SIDES=(cpu nvjpeg engine tv-gpu) ;;
  data) A_SIDES=(all); C_SIDES=(mlperf-run); B_SIDES=(mlperf-run mlperf-run-cpu); E_SIDES=(cpu nvjpeg engine tv-gpu) ;;
  run) A_SIDES=(all); C_SIDES=(mlperf-run); B_SIDES=(mlperf-run); E_SIDES=(nvjpeg) ;;
  *) die "--sides is all, targets, data or run, not $sides" ;;
esac
want() { case ",$only," in *",$1,"*) return 0 ;; esac; return 1; }
[ "$smoke" = 1 ] && [ -z "${rounds_given:-}" ] && rounds=1

# ---- our binaries and their libraries ----------------------------------------------------
find_bin() {
  local n="$1" d c
  if [ -n "${MLPERF_RUN_BIN:-}" ]; then
    d="$(dirname "$MLPERF_RUN_BIN")"
    [ "$n" = mlperf-run ] && { echo "$MLPERF_RUN_BIN"; return 0; }
    for c in "$d/$n" "$d/examples/$n"; do [ -x "$c" ] && { echo "$c"; return 0; }; done
  fi
  for c in "$here/bin/$n" "$root/bin/$n" "$root/target/release/$n" "$root/target/release/examples/$n"; do
    [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}
MR="$(find_bin mlperf-run)" || die "no mlperf-run binary (set MLPERF_RUN_BIN, use a bundle, or cargo build --release --bins --examples)"
RSTEP="$(find_bin resnet_bench_step)" || die "no resnet_bench_step binary next to $MR"
BSTEP="$(find_bin bert_bench_step)" || die "no bert_bench_step binary next to $MR"
command -v "$PYTHON" >/dev/null || die "no $PYTHON (set PYTHON)"
torchlib="$("$PYTHON" -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')" ||
  die "$PYTHON cannot import torch"
ours_ld="$torchlib"
for l in "$here/lib" "$root/lib"; do [ -d "$l" ] && ours_ld="$l:$ours_ld"; done
ours_ld="$ours_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ours() { LD_LIBRARY_PATH="$ours_ld" "$@"; }
if ! ours "$MR" --version >/dev/null 2>&1; then
  echo "bench_gpu: $MR does not start with LD_LIBRARY_PATH=$ours_ld:" >&2
  ours "$MR" --version >&2
  LD_LIBRARY_PATH="$ours_ld" ldd "$MR" | grep -i "not found" >&2
  exit 2
fi

# configs: from the repository or the bundle (same layout)
cfg_dir="$root/configs"
[ -d "$cfg_dir" ] || die "no configs/ next to $here"
bench_py="$here/bench"

# ---- where results go ----------------------------------------------------------------------
mkdir -p "$out" || die "cannot create $out"
out="$(cd "$out" && pwd)"
# raw logs and GPU samples: in DIR/logs and DIR/smi; when DIR is the device tool's $OUT (which
# brings back only a few files) in a scratch folder, packed into DIR/logs.tar.gz after each part
raw="$out"
if [ -n "${OUT:-}" ] && [ -d "$OUT" ] && [ "$(cd "$OUT" && pwd)" = "$out" ]; then
  raw="$(mktemp -d "${TMPDIR:-/tmp}/bench-gpu-raw.XXXXXX")"
fi
mkdir -p "$raw/logs" "$raw/smi" || die "cannot create $raw"
: > "$out/results.jsonl"
# after each part: the table so far (table.txt, results.json/csv) and the packed raw logs
checkpoint() {
  "$PYTHON" "$bench_py/gpu_report.py" report --out "$out" >/dev/null 2>&1
  if [ "$raw" != "$out" ]; then tar -czf "$out/logs.tar.gz" -C "$raw" logs smi 2>/dev/null; fi
  return 0
}
mkdir -p "$data" || die "cannot create $data"
cores=$(nproc 2>/dev/null || echo 2)
workers=$((cores > 1 ? cores - 1 : 1))

if [ "$smoke" = 1 ]; then
  dev=cpu
else
  dev=cuda
  "$PYTHON" -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
    die "$PYTHON sees no CUDA device (use --smoke on a machine without a GPU)"
fi
have_smi=0
[ "$dev" = cuda ] && command -v nvidia-smi >/dev/null && have_smi=1

t_start=$(date +%s)
{
  echo "bench_gpu: $(date -u +%FT%TZ) on $(hostname), $cores cores, device $dev, rounds $rounds, parts $only"
  echo "  mlperf-run: $MR ($(ours "$MR" --version 2>&1))"
  echo "  python: $PYTHON ($("$PYTHON" -c 'import torch,torchvision;print("torch",torch.__version__,"torchvision",torchvision.__version__)' 2>&1))"
  [ "$have_smi" = 1 ] && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader
} | tee "$out/env.txt"

# ---- running one side ------------------------------------------------------------------------
smi_pid=""
smi_start() {  # FILE: sample utilization.gpu every 200 ms until smi_stop
  smi_pid=""
  [ "$have_smi" = 1 ] || return 0
  nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 200 >"$1" 2>/dev/null &
  smi_pid=$!
}
smi_stop() {
  [ -n "$smi_pid" ] || return 0
  kill "$smi_pid" 2>/dev/null
  wait "$smi_pid" 2>/dev/null
  smi_pid=""
}
trap 'smi_stop; [ "$raw" != "$out" ] && rm -rf "$raw"' EXIT

# measure PART SIDE ROUND KIND FLOPS_SPEC -- COMMAND...: run COMMAND (output to logs/), sample
# the GPU meanwhile, append a result record. KIND json: the command prints a JSON result line
# (with $split = "SIDE2:KEY=VALUE ...", one record per SIDE2 from the JSON line whose KEY is
# VALUE: one process measuring several sides); mllog-resnet / mllog-bert: the rate comes from
# the MLPerf log $mllog (set by the caller).
measure() {
  local part="$1" side="$2" round="$3" kind="$4" flops="$5"; shift 6
  local tag; tag="$part-$(echo "$side" | tr -c 'A-Za-z0-9._\n-' '_')-r$round"
  local log="$raw/logs/$tag.log" smi="$raw/smi/$tag.csv" rc t0 t1 err=() one
  echo "== $part round $round: $side" >&2
  echo "\$ $*" >"$log"
  t0=$(date +%s)
  smi_start "$smi"
  "$@" >>"$log" 2>&1
  rc=$?
  smi_stop
  t1=$(date +%s)
  echo "   exit $rc after $((t1 - t0)) s; log $log" >&2
  # json: a side whose result line is missing failed (the tail of the log says why); a
  # mlperf-run training run that reaches its (unreachable) limit ends aborted with exit 1
  if [ "$kind" = json ] && [ $rc -ne 0 ]; then
    note="exit status $rc: $(grep -v '^{' "$log" | tail -n 3 | tr '\n' ' ' | cut -c1-300)"
  elif [ "$kind" != json ] && [ $rc -gt 1 ]; then
    err=(--error "exit status $rc: $(tail -n 3 "$log" | tr '\n' ' ' | cut -c1-300)")
  fi
  local entries=() match=()
  if [ -n "${split:-}" ]; then read -ra entries <<<"$split"; else entries=("$side:"); fi
  for one in "${entries[@]}"; do
    match=()
    [ -n "${one#*:}" ] && match=(--match "${one#*:}")
    "$PYTHON" "$bench_py/gpu_report.py" record --part "$part" --side "${one%%:*}" --round "$round" \
      --kind "$kind" --log "$log" ${mllog:+--mllog "$mllog"} --smi "$smi" ${flops:+--flops-spec "$flops"} \
      --device "$dev" "${match[@]}" ${note:+--note "$note"} "${err[@]}" --append "$out/results.jsonl"
  done
  note=""
}
mllog=""
note=""
split=""

# order of the sides in round r: rotated every round so drift hits every side alike
rotate() {  # ROUND ITEMS...
  local r="$1"; shift
  local n=$# k=$(( (r - 1) % $# ))
  local items=("$@")
  local i
  for ((i = 0; i < n; i++)); do echo "${items[$(( (i + k) % n ))]}"; done
}

# ---- rounds, and the time limit ----------------------------------------------------------------
round_numbers() { seq "$first_round" $((first_round + rounds - 1)); }
round_max=0  # the longest round of the current part so far, in seconds
round_t0=0
# round_start PART ROUND [LAST]: false, with a note in results.jsonl, when --time-limit leaves no
# room for this round (the caller then starts none of the part's later rounds, up to LAST, either;
# LAST = ROUND for a part that runs once)
round_start() {
  local part="$1" r="$2" last="${3:-$((first_round + rounds - 1))}" used what why
  [ "$r" = "$first_round" ] && round_max=0
  used=$(( $(date +%s) - t_start ))
  if [ "$time_limit" -gt 0 ] && [ $((used + round_max)) -ge "$time_limit" ]; then
    [ "$r" -lt "$last" ] && what="rounds $r-$last" || what="round $r"
    [ "$r" = "$first_round" ] && why="$used s had passed" ||
      why="$used s had passed and its longest round took $round_max s"
    limit_note "$part" "$r" "part $part, $what: not started, $why (--time-limit $time_limit)"
    return 1
  fi
  round_t0=$(date +%s)
}
# round_end: the round's duration counts for the next round_start; the table and logs so far are
# written out (a call cut off later keeps them)
round_end() {
  local took=$(( $(date +%s) - round_t0 ))
  [ "$took" -gt "$round_max" ] && round_max=$took
  checkpoint
}
limit_note() {  # PART ROUND TEXT: a record the report lists under the table (not a failure)
  echo "== $3" >&2
  "$PYTHON" -c 'import json,sys; print(json.dumps({"part": "limit", "side": sys.argv[1], "round": int(sys.argv[2]), "ok": True, "note": sys.argv[3]}))' \
    "$1" "$2" "$3" >>"$out/results.jsonl"
}

# ---- sizes -------------------------------------------------------------------------------------
if [ "$smoke" = 1 ]; then
  R_SHAPE=(--device cpu --batch 4 --size 32 --classes 10 --threads 1 --blocks 1,1,1,1)
  R_OURS=("${R_SHAPE[@]}" --width 8 --opt sgd --steps 2)
  R_PEER=("${R_SHAPE[@]}" --amp bf16 --channels-last --steps 2 --warmup 1)
  R_FLOPS=""
  B_SYNTH=(--classes 4 --per-class 24 --val-per-class 2 --min-size 48 --max-size 64 --sizes imagenet)
  B_CFG="$cfg_dir/resnet/bench_smoke_cpu.toml"
  B_SET="$data/smoke-imagenet"
  B_PEER=(--device cpu --size 32 --batch-size 16 --blocks 1,1,1,1 --amp bf16 --channels-last --workers 1)
  B_BATCH=16
  E_SIZE=32
  E_BATCH=8
  C_SHAPE=(--layers 2 --hidden 128 --heads 2 --inter 512 --vocab 1000 --batch 2 --seq 64 --preds 10)
  C_REF_CFG='{"vocab_size":1000,"hidden_size":128,"num_layers":2,"num_heads":2,"intermediate_size":512}'
  C_REF=(--batch 2 --seq 64 --predictions 10)
  C_COMMON=(--steps 2 --warmup 1 --threads 1 --device cpu)
  # methods.fp8 on a CPU: the emulated FP8 path (the test mode; refused without it)
  export MLPERF_RUN_TEST_EMULATE_FP8=1
  C_REF_RUN=(--steps 2 --warmup 1 --threads 1 --device cpu --bf16 --sdpa)
  C_FLOPS=""
  D_SYNTH=(--seq-len 64 --train-samples 256 --eval-samples 64 --shards 2)
  D_CFG="$cfg_dir/bert/bench_smoke_cpu.toml"
  D_SET="$data/smoke-bert"
  D_STEP=(--layers 2 --hidden 128 --heads 2 --inter 512 --vocab 1000 --batch 8 --seq 64 --preds 10)
  P_SYNTH=(--lengths realistic --seq-len 64 --train-samples 600 --eval-samples 32 --shards 2)
  P_SET="$data/smoke-bert-realistic"
  P_CFG="$D_CFG"  # made packed below
  P_STEP=(--layers 2 --hidden 128 --heads 2 --inter 512 --vocab 1000 --batch 4 --seq 64 --preds 16)
  P_HF=(--layers 2 --hidden 128 --heads 2 --inter 512 --vocab 1000 --batch 8 --seq 64 --preds 10)
  P_M="amp=bf16,fused_epilogues,fused_qkv,fp8"
  D_M="amp=bf16"
  MM=(--device cpu --n 256 --reps 3)
else
  R_SHAPE=(--device cuda --batch 256 --size 224 --threads 0)
  # 60 timed steps (~2-3 s): enough 200 ms nvidia-smi samples whose period lies inside the window
  R_OURS=("${R_SHAPE[@]}" --opt sgd --steps 60)
  R_PEER=("${R_SHAPE[@]}" --amp bf16 --channels-last --steps 60 --warmup 10)
  R_FLOPS="resnet50:224"
  # shaped like ImageNet train: about 400x350 on average, JPEG quality 90
  B_SYNTH=(--classes 100 --per-class 160 --val-per-class 10 --sizes imagenet --min-size 120 --max-size 800 --quality 90)
  B_CFG="$cfg_dir/resnet/bench_1gpu.toml"
  B_SET="$data/synth-imagenet-like-100x160"
  B_PEER=(--device cuda --size 224 --batch-size 400 --amp bf16 --channels-last --workers "$workers")
  B_BATCH=400
  E_SIZE=224
  E_BATCH=256
  C_SHAPE=(--layers 24 --hidden 1024 --heads 16 --inter 4096 --vocab 30528 --batch 32 --seq 512 --preds 76)
  C_REF_CFG='{"vocab_size":30528,"hidden_size":1024,"num_layers":24,"num_heads":16,"intermediate_size":4096}'
  C_REF=(--batch 32 --seq 512 --predictions 76)
  C_COMMON=(--steps 20 --warmup 5 --device cuda)
  C_REF_RUN=(--steps 20 --warmup 5 --device cuda --bf16 --sdpa)
  C_FLOPS="bert:24:1024:4096:512"
  D_SYNTH=(--seq-len 512 --train-samples 6400 --eval-samples 256 --shards 4)
  D_CFG="$cfg_dir/bert/bench_1gpu.toml"
  D_SET="$data/synth-bert-512"
  D_STEP=("${C_SHAPE[@]}")
  P_SYNTH=(--lengths realistic --seq-len 512 --train-samples 40000 --eval-samples 1000 --shards 8)
  P_CFG="$cfg_dir/bert/bench_1gpu_packed.toml"
  P_SET="$data/synth-bert-512-realistic"
  P_STEP=(--layers 24 --hidden 1024 --heads 16 --inter 4096 --vocab 30528 --batch 48 --seq 512 --preds 88)
  P_HF=("${C_SHAPE[@]}")
  P_M="amp=bf16,cuda_graph,fused_epilogues,fused_qkv,fp8"
  # the methods of configs/bert/bench_1gpu.toml
  D_M="amp=bf16,cuda_graph,fused_epilogues,fused_qkv"
  MM=(--device cuda --n 8192 --reps 7)
fi
[ "$smoke" = 1 ] && C_FLOPS_SMOKE="bert:2:128:512:64" || C_FLOPS_SMOKE="$C_FLOPS"
# the peers' flags (bf16 autocast); ours take the same as methods (`--methods`, the names of a
# config's [methods] table): every row of ours starts from these and adds its own
C_RUN=("${C_COMMON[@]}" --bf16)
R_M="amp=bf16,channels_last"
C_M="amp=bf16"

# ---- matmul peak (for MFU) -----------------------------------------------------------------------
measure mm torch-matmul-bf16 1 json "" -- "$PYTHON" "$bench_py/gpu_report.py" matmul "${MM[@]}"

# ---- m) the multi-process paths on the one GPU (opt-in, once) -----------------------------------
if want m; then
  if round_start m "$first_round" "$first_round"; then
    echo "== m: the multi-process checks (scripts/bench/multiprocess_check.py)" >&2
    "$PYTHON" "$bench_py/multiprocess_check.py" --bin "$MR" --configs "$cfg_dir" --device "$dev" \
      --work "$raw/logs/m" --ld-library-path "$ours_ld" --append "$out/results.jsonl" >&2
    round_end
  fi
fi

# ---- a) ResNet-50 step -------------------------------------------------------------------------
if want a; then
  for r in $(round_numbers); do
    round_start a "$r" || break
    while read -r side; do
      case "$side" in
        mlperf-run) measure a mlperf-run "$r" json "$R_FLOPS" -- ours "$RSTEP" "${R_OURS[@]}" --methods "$R_M" ;;
        graph) measure a "mlperf-run cuda-graph" "$r" json "$R_FLOPS" -- ours "$RSTEP" "${R_OURS[@]}" --methods "$R_M,cuda_graph" ;;
        fp16) measure a "mlperf-run fp16" "$r" json "$R_FLOPS" -- ours "$RSTEP" "${R_OURS[@]}" --methods "$R_M,amp=fp16" ;;
        fused) measure a "mlperf-run fp16 fused-bn-relu" "$r" json "$R_FLOPS" -- ours "$RSTEP" "${R_OURS[@]}" --methods "$R_M,amp=fp16,fused_bn_relu" ;;
        all) measure a "mlperf-run fp16 all-methods" "$r" json "$R_FLOPS" -- ours "$RSTEP" "${R_OURS[@]}" --methods "$R_M,amp=fp16,cuda_graph,fused_bn_relu" ;;
        all-bf16) measure a "mlperf-run all-methods" "$r" json "$R_FLOPS" -- ours "$RSTEP" "${R_OURS[@]}" --methods "$R_M,cuda_graph,fused_bn_relu" ;;
        pytorch-fp16)  # the peers of our fp16 rows: eager with GradScaler, then compiled
          split="pytorch-eager-fp16:impl=pytorch-eager pytorch-compile-fp16:impl=pytorch-compile" \
            measure a "pytorch eager+compile fp16" "$r" json "$R_FLOPS" -- "$PYTHON" "$bench_py/resnet_step.py" \
            "${R_PEER[@]}" --amp fp16 --mode both ;;
        pytorch)  # eager, then compiled, in one process (one interpreter start-up)
          split="pytorch-eager:impl=pytorch-eager pytorch-compile:impl=pytorch-compile" \
            measure a "pytorch eager+compile" "$r" json "$R_FLOPS" -- "$PYTHON" "$bench_py/resnet_step.py" \
            "${R_PEER[@]}" --mode both ;;
      esac
    done < <(rotate "$r" "${A_SIDES[@]}")
    round_end
  done
fi

# ---- k) short batches beside a CUDA graph (opt-in, once) ------------------------------------------
if want k; then
  if round_start k "$first_round" "$first_round"; then
    measure k "mlperf-run cuda-graph short-warmup" "$first_round" json "$R_FLOPS" -- ours "$RSTEP" "${R_OURS[@]}" \
      --methods "$R_M,cuda_graph" --short-warmup
    round_end
  fi
fi

# ---- b) ResNet-50 end to end ---------------------------------------------------------------------
if want b; then
  if [ ! -f "$B_SET/synth-imagenet.json" ]; then
    echo "== b: writing the synthetic ImageFolder $B_SET (${B_SYNTH[*]})" >&2
    t0=$(date +%s)
    ours "$MR" data synth-imagenet --out "$B_SET" "${B_SYNTH[@]}" --seed 7 --force >"$raw/logs/b-synth-imagenet.log" 2>&1 ||
      die "synth-imagenet failed: $(tail -n 3 "$raw/logs/b-synth-imagenet.log")"
    echo "   $(tail -n 1 "$raw/logs/b-synth-imagenet.log") ($(( $(date +%s) - t0 )) s)" >&2
  else
    echo "== b: reusing $B_SET" >&2
  fi
  n_train=$(find "$B_SET/train" -type f | wc -l)
  spe=$((n_train / B_BATCH))  # steps per epoch, as ours counts them (whole batches)
  # this machine's decode workers: cores - 1
  b_cfg="$raw/logs/$(basename "$B_CFG")"
  sed -E "s/^workers = .*/workers = $workers/" "$B_CFG" >"$b_cfg"
  b_cfg_cpu="$raw/logs/cpu-decoder-$(basename "$B_CFG")"
  sed -E 's/^decoder = .*/decoder = "cpu"/' "$b_cfg" >"$b_cfg_cpu"
  for r in $(round_numbers); do
    round_start b "$r" || break
    while read -r side; do
      case "$side" in
        mlperf-run)
          mllog="$raw/logs/b-mlperf-run-r$r.mllog"; rm -f "$mllog"
          # -v: the run's "decoder split" lines (nvJPEG's share of the images), which the
          # report reads from this side's output
          measure b "mlperf-run resnet" "$r" mllog-resnet "$R_FLOPS" -- ours "$MR" -v resnet --division closed \
            --config "$b_cfg" --data "$B_SET" --device "$dev" --seed "$r" --log "$mllog"
          mllog="" ;;
        mlperf-run-cpu)
          # the same run with every image decoded by the CPU region decoder (data.decoder = "cpu"):
          # its regions reach the GPU as one ragged pinned copy
          mllog="$raw/logs/b-mlperf-run-cpu-decoder-r$r.mllog"; rm -f "$mllog"
          measure b "mlperf-run resnet cpu-decoder" "$r" mllog-resnet "$R_FLOPS" -- ours "$MR" -v resnet --division closed \
            --config "$b_cfg_cpu" --data "$B_SET" --device "$dev" --seed "$r" --log "$mllog"
          mllog="" ;;
        torchvision)
          measure b "torchvision DataLoader" "$r" json "$R_FLOPS" -- "$PYTHON" "$bench_py/torchvision_loader.py" \
            --train --dir "$B_SET" --scale-min 0.05 "${B_PEER[@]}" --warmup-steps $((spe < 20 ? spe : 20)) --steps "$spe" ;;
      esac
    done < <(rotate "$r" "${B_SIDES[@]}")
    round_end
  done
fi

# ---- e) the data path alone: JPEG files to the GPU tensor, per decoder, and the peers ---------------
if want e; then
  [ -f "$B_SET/synth-imagenet.json" ] || ours "$MR" data synth-imagenet --out "$B_SET" "${B_SYNTH[@]}" \
    --seed 7 --force >"$raw/logs/e-synth-imagenet.log" 2>&1 || die "synth-imagenet failed (see $raw/logs)"
  E_COMMON=(--dir "$B_SET/train" --threads "$workers" --batch-size "$E_BATCH" --size "$E_SIZE" --scale-min 0.05
    --epochs 1 --augment gpu --device "$dev" --json)
  for r in $(round_numbers); do
    round_start e "$r" || break
    while read -r side; do
      case "$side" in
        cpu) measure e "decoder cpu" "$r" json "" -- ours "$MR" data bench-imagenet "${E_COMMON[@]}" --decoder cpu ;;
        nvjpeg) measure e "decoder nvjpeg" "$r" json "" -- ours "$MR" data bench-imagenet "${E_COMMON[@]}" \
          --decoder nvjpeg --hw-decoder-load 1 --require-decoder ;;
        engine) measure e "nvjpeg engine alone" "$r" json "" -- ours "$MR" data bench-imagenet "${E_COMMON[@]}" \
          --decoder nvjpeg --hw-decoder-load 1 --require-decoder --engine-only --check-batches 0 ;;
        hybrid) measure e "decoder hybrid" "$r" json "" -- ours "$MR" data bench-imagenet "${E_COMMON[@]}" \
          --decoder nvjpeg --hw-decoder-load 0.5 --require-decoder ;;
        default) measure e "decoder nvjpeg default-split" "$r" json "" -- ours "$MR" data bench-imagenet \
          "${E_COMMON[@]}" --decoder nvjpeg --require-decoder ;;
        tv-loader) measure e "torchvision DataLoader to gpu" "$r" json "" -- "$PYTHON" "$bench_py/torchvision_loader.py" \
          --dir "$B_SET/train" --workers "$workers" --batch-size "$E_BATCH" --size "$E_SIZE" --scale-min 0.05 \
          --epochs 1 --to-device "$dev" --json ;;
        tv-gpu) measure e "torchvision decode_jpeg gpu" "$r" json "" -- "$PYTHON" "$bench_py/torchvision_gpu_decode.py" \
          --dir "$B_SET/train" --batch-size "$E_BATCH" --size "$E_SIZE" --scale-min 0.05 --epochs 1 \
          --device "$dev" --threads "$workers" ;;
      esac
    done < <(rotate "$r" "${E_SIDES[@]}")
    round_end
  done
fi

# ---- f) fused BN+ReLU op: fused vs unfused on ResNet-50's BN shapes ------------------------------
if want f; then
  if FCHECK="$(find_bin fused_bn_check)"; then
    [ "$smoke" = 1 ] && F_ARGS=(--device cpu --batch 4 --size 32 --rounds 2) || F_ARGS=(--device cuda --batch 256 --size 224 --rounds 20)
    for r in $(round_numbers); do
      round_start f "$r" || break
      split="fused-bf16:impl=fused-bf16 unfused-bf16:impl=unfused-bf16 fused-fp16:impl=fused-fp16 unfused-fp16:impl=unfused-fp16" \
        measure f "fused_bn_check" "$r" json "" -- ours "$FCHECK" "${F_ARGS[@]}" --dtypes bf16,fp16
      round_end
    done
  else
    measure f "fused_bn_check" 1 json "" -- sh -c 'echo "no fused_bn_check binary (cargo build --release --examples, or a bundle)"; exit 1'
  fi
  checkpoint
fi

# ---- g) fused epilogue op: CUDA kernels vs composite (opt-in) --------------------------------------
if want g; then
  FECHECK="$(find_bin fused_epilogue_check)" || die "no fused_epilogue_check binary next to $MR"
  if [ "$smoke" = 1 ]; then G_ARGS=(--device cpu --tokens 64 --hidden 32 --inner 32 --rounds 2)
  else G_ARGS=(--device cuda --tokens 28672 --hidden 1024 --rounds 20); fi
  if round_start g "$first_round" "$first_round"; then
    for inner in 1024 4096; do
      [ "$smoke" = 1 ] && [ "$inner" = 4096 ] && continue
      split="fused-kernel-i$inner:side=kernel fused-composite-i$inner:side=composite unfused-i$inner:side=unfused"
      measure g "fused-epilogue-check-i$inner" "$first_round" json "" -- ours "$FECHECK" "${G_ARGS[@]}" \
        $([ "$smoke" = 1 ] || echo --inner "$inner")
      split=""
    done
    round_end
  fi
fi

# ---- h) fused bias + GELU op: cuBLASLt epilogue vs composite (opt-in) ------------------------------
if want h; then
  HCHECK="$(find_bin fused_bias_gelu_check)" || die "no fused_bias_gelu_check binary next to $MR"
  if [ "$smoke" = 1 ]; then H_ARGS=(--device cpu --tokens 64 --hidden 32 --inner 64 --rounds 2)
  else H_ARGS=(--device cuda --tokens 28672 --hidden 1024 --inner 4096 --rounds 20); fi
  for r in $(round_numbers); do
    round_start h "$r" || break
    split="fused-bias-gelu-cublaslt:side=cublaslt fused-bias-gelu-composite:side=composite unfused-linear-erf-gelu:side=unfused_erf"
    measure h "fused-bias-gelu-check" "$r" json "" -- ours "$HCHECK" "${H_ARGS[@]}"
    split=""
    round_end
  done
fi

# ---- v) unpadded attention: FlashAttention varlen vs scatter (opt-in, once) -------------------
if want v; then
  VCHECK="$(find_bin varlen_attention_check)" || die "no varlen_attention_check binary next to $MR"
  if [ "$smoke" = 1 ]; then V_ARGS=(--device cpu --batch 4 --seq 64 --heads 2 --head-dim 16 --rounds 2)
  else V_ARGS=(--device cuda --batch 56 --seq 512 --heads 16 --head-dim 64 --fill 0.5 --rounds 20); fi
  if round_start v "$first_round" "$first_round"; then
    # on a CPU the varlen kernel cannot run: the smoke run times the scatter side only
    [ "$smoke" = 1 ] && split="scatter-sdpa:side=scatter" || split="varlen-flash:side=varlen scatter-sdpa:side=scatter"
    measure v "varlen-attention-check" "$first_round" json "" -- ours "$VCHECK" "${V_ARGS[@]}"
    split=""
    round_end
  fi
fi

# ---- q) fp8 linears vs bf16 at BERT-Large shapes (opt-in, once) ---------------------------------
if want q; then
  QCHECK="$(find_bin fp8_check)" || die "no fp8_check binary next to $MR"
  if [ "$smoke" = 1 ]; then Q_ARGS=(--device cpu --tokens 64 --rounds 1)
  else Q_ARGS=(--device cuda --tokens 16384 --rounds 10); fi
  if [ "$smoke" = 0 ]; then
    # torch._scaled_mm alone at the probe's shape, in methods.fp8's dtype pairs, scales as
    # tensors of their own and as views: whether this GPU and libtorch run them at all
    "$PYTHON" "$here/bench/fp8_peer_probe.py" >"$raw/logs/q-fp8-peer-probe.log" 2>&1 || true
    sed 's/^/   fp8 peer probe: /' "$raw/logs/q-fp8-peer-probe.log" >&2
  fi
  if round_start q "$first_round" "$first_round"; then
    # one row per shape: the fp8 side's TFLOP/s (the errors, bf16's time and ok in the log's lines)
    split="fp8-qkv:shape=qkv fp8-attention-out:shape=attention_out fp8-ffn-in:shape=ffn_in fp8-ffn-out:shape=ffn_out" \
      measure q "fp8-check" "$first_round" json "" -- ours "$QCHECK" "${Q_ARGS[@]}"
    round_end
  fi
  # the training numerics: BERT-Large 300 steps bf16 vs fp8 vs the broken control from one init
  # and one data order (examples/fp8_train_check; about a minute on an H100); its lines in
  # logs/q-fp8-training.log, its verdict here
  TCHECK="$(find_bin fp8_train_check)" || die "no fp8_train_check binary next to $MR"
  if [ "$smoke" = 1 ]; then T_ARGS=(--device cpu --layers 2 --hidden 64 --heads 4 --inter 128 --vocab 1200 --states 64 --seq 32 --preds 4 --steps 21 --from 20)
  else T_ARGS=(--device cuda --perturbed 1e-6); fi
  "$TCHECK" "${T_ARGS[@]}" >"$raw/logs/q-fp8-training.log" 2>&1 || true
  echo "== q: fp8 training check: $(grep '"check"' "$raw/logs/q-fp8-training.log" | tail -1 || echo 'no verdict: see logs/q-fp8-training.log')" >&2
fi

# ---- c) BERT step --------------------------------------------------------------------------------
has_hf=1
"$PYTHON" -c 'import transformers' 2>/dev/null || has_hf=0
if want c; then
  for r in $(round_numbers); do
    round_start c "$r" || break
    while read -r side; do
      case "$side" in
        mlperf-run) measure c mlperf-run "$r" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${C_SHAPE[@]}" "${C_COMMON[@]}" --methods "$C_M" ;;
        graph) measure c "mlperf-run cuda-graph" "$r" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${C_SHAPE[@]}" "${C_COMMON[@]}" --methods "$C_M,cuda_graph" ;;
        fused) measure c "mlperf-run fused-epilogues" "$r" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${C_SHAPE[@]}" "${C_COMMON[@]}" --methods "$C_M,fused_epilogues" ;;
        gelu) measure c "mlperf-run fused-bias-gelu" "$r" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${C_SHAPE[@]}" "${C_COMMON[@]}" --methods "$C_M,fused_bias_gelu" ;;
        graph-fused) measure c "mlperf-run cuda-graph fused-epilogues" "$r" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${C_SHAPE[@]}" "${C_COMMON[@]}" --methods "$C_M,cuda_graph,fused_epilogues" ;;
        mask) measure c "mlperf-run cuda-graph fused-epilogues mask-kept" "$r" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${C_SHAPE[@]}" "${C_COMMON[@]}" --methods "$C_M,cuda_graph,fused_epilogues" --keep-mask ;;
        qkv) measure c "mlperf-run cuda-graph fused-epilogues fused-qkv" "$r" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${C_SHAPE[@]}" "${C_COMMON[@]}" --methods "$C_M,cuda_graph,fused_epilogues,fused_qkv" ;;
        fast) measure c "mlperf-run cuda-graph fused-epilogues fused-qkv bf16-residual" "$r" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${C_SHAPE[@]}" "${C_COMMON[@]}" --methods "$C_M,cuda_graph,fused_epilogues,fused_qkv,bf16_residual" ;;
        fast-fp8) measure c "mlperf-run cuda-graph fused-epilogues fused-qkv bf16-residual fp8" "$r" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${C_SHAPE[@]}" "${C_COMMON[@]}" --methods "$C_M,cuda_graph,fused_epilogues,fused_qkv,bf16_residual,fp8" ;;
        fast-fp8-cast) measure c "mlperf-run cuda-graph fused-epilogues fused-qkv bf16-residual fp8 casts-unfused" "$r" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${C_SHAPE[@]}" "${C_COMMON[@]}" --methods "$C_M,cuda_graph,fused_epilogues,fused_qkv,bf16_residual,fp8" --no-fp8-fused-cast ;;
        fast-ln) measure c "mlperf-run cuda-graph fused-epilogues-ln-only fused-qkv bf16-residual" "$r" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${C_SHAPE[@]}" "${C_COMMON[@]}" --methods "$C_M,cuda_graph,fused_epilogues,fused_qkv,bf16_residual" --no-gelu-epilogue ;;
        fast-fa2) measure c "mlperf-run cuda-graph fused-epilogues fused-qkv bf16-residual flash-varlen" "$r" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${C_SHAPE[@]}" "${C_COMMON[@]}" --methods "$C_M,cuda_graph,fused_epilogues,fused_qkv,bf16_residual" --flash-varlen ;;
        all) measure c "mlperf-run all-methods" "$r" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${C_SHAPE[@]}" "${C_COMMON[@]}" --methods "$C_M,cuda_graph,fused_epilogues,fused_qkv,bf16_residual,fused_bias_gelu" ;;
        hf)
          if [ "$has_hf" = 1 ]; then
            measure c "hf-transformers (sdpa)" "$r" json "$C_FLOPS_SMOKE" -- "$PYTHON" "$bench_py/hf_bert_step.py" \
              "${C_SHAPE[@]}" "${C_RUN[@]}"
          else
            echo "== c: skipping hf-transformers: $PYTHON cannot import transformers" >&2
          fi ;;
        ref) measure c "pytorch-eager bert_ref.py" "$r" json "$C_FLOPS_SMOKE" -- "$PYTHON" "$bench_py/bert_ref.py" bench \
               --config "$C_REF_CFG" "${C_REF[@]}" "${C_REF_RUN[@]}" ;;
      esac
    done < <(rotate "$r" "${C_SIDES[@]}")
    round_end
  done
fi

# BERT shards for part PART in SET (`data synth-bert` with the given flags), written once: a SET
# with train/.done and eval/ is reused
synth_bert_set() {  # PART SET SYNTH-FLAGS...
  local part="$1" set="$2" t
  shift 2
  [ -f "$set/train/.done" ] && [ -d "$set/eval" ] && return 0
  echo "== $part: writing BERT shards $set ($*)" >&2
  local text=()
  if ! compgen -G "/usr/lib/python3*/LICENSE.txt" >/dev/null; then
    for t in "$root/data/corpus.txt" "$here/../data/corpus.txt"; do [ -f "$t" ] && { text=(--source "$t"); break; }; done
    [ ${#text[@]} = 0 ] && die "synth-bert needs English text: no /usr/lib/python3*/LICENSE.txt and no data/corpus.txt (scripts/bundle.sh ships one)"
  fi
  rm -rf "$set"
  ours "$MR" data synth-bert --out "$set" "$@" "${text[@]}" >"$raw/logs/$part-synth-bert.log" 2>&1 ||
    die "synth-bert failed: $(tail -n 3 "$raw/logs/$part-synth-bert.log")"
  touch "$set/train/.done"
}

# ---- d) mlperf-run bert vs its step benchmark ----------------------------------------------------
if want d && round_start d "$first_round" "$first_round"; then
  synth_bert_set d "$D_SET" "${D_SYNTH[@]}"
  mllog="$raw/logs/d-mlperf-run-bert.mllog"; rm -f "$mllog"
  measure d "mlperf-run bert (run)" "$first_round" mllog-bert "$C_FLOPS_SMOKE" -- ours "$MR" bert --division open --config "$D_CFG" \
    --data "$D_SET" --device "$dev" --seed 1 --log "$mllog"
  mllog=""
  measure d "bert_bench_step --lamb (step)" "$first_round" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${D_STEP[@]}" "${C_COMMON[@]}" --methods "$D_M" --lamb
  round_end
fi

# ---- p) mlperf-run bert with packed rows and every closed method, on realistic-length data -------
if want p && round_start p "$first_round" "$first_round"; then
  synth_bert_set p "$P_SET" "${P_SYNTH[@]}"
  # the packing of one epoch (what the run's loader does), recorded beside the rows
  if ours "$MR" data bert-pack --dir "$P_SET" --json >"$raw/logs/p-bert-pack.json" 2>"$raw/logs/p-bert-pack.log"; then
    "$PYTHON" -c 'import json, sys; print(json.dumps({"part": "p", "side": "bert-pack", "round": int(sys.argv[2]),
      "ok": True, "value": None, "unit": "", "raw": json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])}))' \
      "$raw/logs/p-bert-pack.json" "$first_round" >>"$out/results.jsonl"
    echo "   packing: $(tail -n 1 "$raw/logs/p-bert-pack.json" | cut -c1-200)" >&2
  else
    echo "== p: data bert-pack failed: $(tail -n 3 "$raw/logs/p-bert-pack.log")" >&2
  fi
  p_cfg="$P_CFG"
  if [ "$smoke" = 1 ]; then
    # the smoke config with packed rows (no CUDA graph on a CPU): 4 rows x 2 per step
    p_cfg="$raw/logs/bench_smoke_cpu_packed.toml"
    sed -E 's/^global_batch_size = .*/global_batch_size = 8\npacking_factor = 2/' "$D_CFG" >"$p_cfg"
    printf 'packing = true\nfused_epilogues = true\nfused_qkv = true\nfp8 = true\n' >>"$p_cfg"
  fi
  # the same run without methods.fp8 (bf16 matmuls), beside the preset's fp8 run
  p_cfg_bf16="$raw/logs/bf16-$(basename "$p_cfg")"
  grep -v '^fp8 = ' "$p_cfg" >"$p_cfg_bf16"
  mllog="$raw/logs/p-mlperf-run-bert.mllog"; rm -f "$mllog"
  # no FLOP spec for the run: its sequences average about half of a 512-token row
  measure p "mlperf-run bert packed (run)" "$first_round" mllog-bert "" -- ours "$MR" bert --division open \
    --config "$p_cfg" --data "$P_SET" --device "$dev" --seed 1 --log "$mllog"
  mllog="$raw/logs/p-mlperf-run-bert-bf16.mllog"; rm -f "$mllog"
  measure p "mlperf-run bert packed bf16 (run)" "$first_round" mllog-bert "" -- ours "$MR" bert --division open \
    --config "$p_cfg_bf16" --data "$P_SET" --device "$dev" --seed 1 --log "$mllog"
  mllog=""
  measure p "bert_bench_step --lamb 48x512 rows (step)" "$first_round" json "$C_FLOPS_SMOKE" -- ours "$BSTEP" "${P_STEP[@]}" \
    "${C_COMMON[@]}" --methods "$P_M" --lamb
  if "$PYTHON" -c 'import transformers' 2>/dev/null; then
    measure p "hf-transformers padded (sdpa)" "$first_round" json "$C_FLOPS_SMOKE" -- "$PYTHON" "$bench_py/hf_bert_step.py" \
      "${P_HF[@]}" "${C_RUN[@]}"
    # the same work as ours: rows of 2 sequences, a block-diagonal mask (checked against each
    # sequence alone first, --verify); seq/s counts sequences
    measure p "hf-transformers packed rows (sdpa, block mask)" "$first_round" json "$C_FLOPS_SMOKE" -- "$PYTHON" \
      "$bench_py/hf_bert_step.py" "${P_HF[@]}" "${C_RUN[@]}" --packed 2 --verify
  else
    echo "== p: skipping hf-transformers: $PYTHON cannot import transformers" >&2
  fi
  round_end
fi

# ---- ncu: kernels per step ----------------------------------------------------------------------
if want ncu && round_start ncu "$first_round" "$first_round"; then
  if [ "$dev" != cuda ] || ! command -v ncu >/dev/null; then
    echo "== ncu: skipped (needs CUDA and ncu on PATH)" >&2
    echo '{"part": "ncu", "side": "ncu", "round": 1, "ok": false, "error": "skipped: needs CUDA and ncu on PATH"}' >>"$out/results.jsonl"
  else
    # two runs per side, S1 and S2 training steps; (S2 - S1) steps' kernels per step
    nc=(ncu --metrics gpu__time_duration.sum --csv --target-processes all)
    ncu_side() {  # SIDE S1 S2 CMD-FOR-S1 -- CMD-FOR-S2
      local side="$1" s1="$2" s2="$3"; shift 3
      local a=() b=() seen=0 x
      for x in "$@"; do
        if [ "$x" = "--" ] && [ $seen = 0 ]; then seen=1; continue; fi
        if [ $seen = 0 ]; then a+=("$x"); else b+=("$x"); fi
      done
      local tag; tag="ncu-$(echo "$side" | tr -c 'A-Za-z0-9._\n-' '_')"
      echo "== ncu: $side ($s1 and $s2 steps)" >&2
      "${nc[@]}" --log-file "$raw/logs/$tag-s$s1.csv" "${a[@]}" >"$raw/logs/$tag-s$s1.log" 2>&1
      "${nc[@]}" --log-file "$raw/logs/$tag-s$s2.csv" "${b[@]}" >"$raw/logs/$tag-s$s2.log" 2>&1
      "$PYTHON" "$bench_py/gpu_report.py" ncu --side "$side" --small "$raw/logs/$tag-s$s1.csv" \
        --big "$raw/logs/$tag-s$s2.csv" --small-steps "$s1" --big-steps "$s2" | tee -a "$out/results.jsonl" >&2
    }
    # ours: 2 epochs of K steps = 2K training steps (plus init and 2 evals, which cancel out)
    ncu_side mlperf-run 2 6 env LD_LIBRARY_PATH="$ours_ld" "$RSTEP" "${R_SHAPE[@]}" --methods "$R_M" --opt sgd --steps 1 -- \
      env LD_LIBRARY_PATH="$ours_ld" "$RSTEP" "${R_SHAPE[@]}" --methods "$R_M" --opt sgd --steps 3
    ncu_side pytorch-eager 2 6 "$PYTHON" "$bench_py/resnet_step.py" "${R_SHAPE[@]}" --amp bf16 --channels-last --warmup 1 --steps 1 -- \
      "$PYTHON" "$bench_py/resnet_step.py" "${R_SHAPE[@]}" --amp bf16 --channels-last --warmup 1 --steps 5
    # BERT: one eager step of ours (the fast methods, no graph: ncu times each kernel) and of
    # Hugging Face, by kernel class (the second of 2 steps)
    kernels_side() {  # SIDE CMD...
      local side="$1" tag; shift
      tag="ncu-$(echo "$side" | tr -c 'A-Za-z0-9._\n-' '_')"
      echo "== ncu: $side (kernels by class)" >&2
      "${nc[@]}" --log-file "$raw/logs/$tag.csv" "$@" >"$raw/logs/$tag.log" 2>&1
      "$PYTHON" "$bench_py/gpu_report.py" kernels --side "$side" --csv "$raw/logs/$tag.csv" \
        --append "$out/results.jsonl" >/dev/null
    }
    kernels_side "bert mlperf-run fused-epilogues fused-qkv bf16-residual" env LD_LIBRARY_PATH="$ours_ld" \
      "$BSTEP" "${C_SHAPE[@]}" --device cuda --methods amp=bf16,fused_epilogues,fused_qkv,bf16_residual --warmup 1 --steps 1
    [ "$has_hf" = 1 ] && kernels_side "bert hf-transformers (sdpa)" "$PYTHON" "$bench_py/hf_bert_step.py" \
      "${C_SHAPE[@]}" --device cuda --bf16 --warmup 1 --steps 1
  fi
fi

echo "== done in $(( $(date +%s) - t_start )) s" >&2
checkpoint
echo
"$PYTHON" "$bench_py/gpu_report.py" report --out "$out"
