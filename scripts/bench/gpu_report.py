#!/usr/bin/env python3
"""Helpers of scripts/bench_gpu.sh (standard library only, except `matmul`, which needs torch).

  record  --part P --side S --round R --kind json|mllog-resnet|mllog-bert --log FILE [--mllog F]
          [--smi CSV] [--flops-spec resnet50:SIZE | bert:LAYERS:HIDDEN:INTER:SEQ] [--device D]
          [--note TEXT] [--error TEXT]
      one result record (a JSON line, printed): the measured rate (img/s or seq/s), the timed
      window(s), the mean GPU busy % of the nvidia-smi samples inside them (see SMI_PERIOD_S),
      FLOPs per sample
  matmul  --device cpu|cuda [--n 8192] [--reps 7]: bf16 N x N x N matmul TFLOP/s (median)
  kernels --side S --csv NCU.csv [--append FILE]: one training step's kernels by class (the last
          step of an ncu log of 2 or more steps), as a record
  report  --out DIR: read DIR/results.jsonl, print the table, write DIR/results.json,
          DIR/results.csv and DIR/table.txt

Model FLOPs per training sample (forward + backward = 3 x forward):
  ResNet-50:  3 x 4.11 GMAC x 2 FLOP/MAC = 24.66 GFLOP per image at 224 px, scaled by (size/224)^2
  BERT:       6 x N x seq + 12 x layers x seq^2 x hidden per sequence, N = the encoder layers'
              parameters (4h^2 + 2hi + 9h + i per layer; embeddings, pooler and heads excluded);
              BERT-Large at seq 512: 1.006 TFLOP per sequence
"""
import argparse
import csv
import datetime
import json
import math
import os
import statistics
import re
import sys

H100_SXM_BF16_DENSE_TFLOPS = 989.0


def flops_per_sample(spec):
    if not spec:
        return None
    kind, *v = spec.split(":")
    if kind == "resnet50":
        size = float(v[0]) if v else 224.0
        return 3 * 4.11e9 * 2 * (size / 224.0) ** 2
    if kind == "bert":
        layers, h, inter, seq = (int(x) for x in v)
        n = layers * (4 * h * h + 2 * h * inter + 9 * h + inter)
        return 6 * n * seq + 12 * layers * seq * seq * h
    raise SystemExit(f"unknown --flops-spec {spec}")


def last_json(path, match=None):
    """The last line of `path` that parses as a JSON object (with match = (key, value): the last
    one whose key holds value)."""
    found = None
    try:
        with open(path, errors="replace") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(obj, dict) and (match is None or str(obj.get(match[0])) == match[1]):
                        found = obj
    except OSError:
        pass
    return found


def mllog_events(path):
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            i = line.find(":::MLLOG ")
            if i >= 0:
                try:
                    out.append(json.loads(line[i + len(":::MLLOG "):]))
                except ValueError:
                    pass
    return out


def mllog_throughput(path, bert):
    """Training samples / block seconds over the blocks after the first (the warm-up), as
    src/runs/progress.rs computes it: block_start to block_stop, evals excluded."""
    ev = mllog_events(path)
    val = {}
    for e in ev:
        if e.get("event_type") == "POINT_IN_TIME" and e["key"] not in val:
            val[e["key"]] = e.get("value")
    gbs = int(val.get("global_batch_size") or 0)
    train = int(val.get("train_samples") or 0)
    # packed sequences (methods.packing): a block's sequences are the epoch_num of the eval after it
    # minus its first_epoch_num (its epoch_count is the nominal steps x global_batch_size)
    factor = float(val.get("packing_factor") or 0) if val.get("method_packing") else 0.0
    blocks, start = [], None
    status = reason = None
    for e in ev:
        k = e["key"]
        if k == "block_start":
            start = e
        elif k == "block_stop" and start is not None:
            count = float(start["metadata"].get("epoch_count", 0))
            samples = count if bert else count * (train // gbs * gbs if gbs else train)
            blocks.append([start["time_ms"] / 1000.0, e["time_ms"] / 1000.0, samples,
                           float(start["metadata"].get("first_epoch_num", 0)), count, None])
            start = None
        elif k == "eval_stop" and blocks and blocks[-1][5] is None:
            blocks[-1][5] = e["time_ms"] / 1000.0
            if bert and factor:
                blocks[-1][2] = float(e["metadata"].get("epoch_num", 0)) - blocks[-1][3]
        elif k == "run_stop":
            status = e.get("metadata", {}).get("status")
            reason = e.get("metadata", {}).get("reason")
    res = {"blocks": len(blocks), "run_stop": status, "global_batch_size": gbs, "train_samples": train}
    if reason:
        res["run_stop_reason"] = reason
    # a block counts once its eval ran: one the run stopped inside (divergence, a failure) was
    # closed early and did not train its epoch_count epochs
    cut = [b for b in blocks[1:] if b[5] is None]
    timed = [b for b in blocks[1:] if b[5] is not None]
    if cut:
        res["cut_blocks"] = len(cut)
    if not timed:
        why = f" ({len(cut)} cut short: {reason or status})" if cut else ""
        res["error"] = (f"{len(blocks) - len(cut)} complete block(s) in the log{why}: need 2 or more "
                        f"(the first is the warm-up)")
        return res
    secs = sum(b[1] - b[0] for b in timed)
    samples = sum(b[2] for b in timed)
    res.update({"rate": samples / secs, "timed_blocks": len(timed), "timed_samples": samples, "timed_s": secs,
                "windows_unix": [[b[0], b[1]] for b in timed],
                "first_block_rate": blocks[0][2] / max(blocks[0][1] - blocks[0][0], 1e-9)})
    # with the evals: the timed blocks' samples over block start to the end of the last one's eval
    res["rate_with_evals"] = samples / max(timed[-1][5] - timed[0][0], 1e-9)
    if bert and factor and gbs:
        # packed rows per second (rows = nominal samples / packing_factor), what a step benchmark
        # of the same rows measures; and the sequences each row held
        rows = sum(b[4] for b in timed) / factor
        res.update({"packing_factor": factor, "row_rate": rows / secs, "sequences_per_row": samples / rows})
    return res


def decoder_split(log):
    """The last "decoder split: N of M images decoded by nvJPEG" line of a run's output (-v), with
    the nvJPEG backend and the mean device arena per batch when the line names them."""
    found = None
    try:
        with open(log, errors="replace") as f:
            for line in f:
                m = re.search(r"decoder split: (\d+) of (\d+) images decoded by nvJPEG", line)
                if m:
                    found = {"nvjpeg_images": int(m.group(1)), "images": int(m.group(2)),
                             "nvjpeg_share": int(m.group(1)) / max(int(m.group(2)), 1)}
                    b = re.search(r"nvJPEG backend: ([^;]+)", line)
                    if b:
                        found["nvjpeg_backend"] = b.group(1).strip()
                    arena = re.search(r"device arena ([0-9.]+) MB per batch", line)
                    if arena:
                        found["arena_mb_per_batch"] = float(arena.group(1))
    except OSError:
        pass
    return found


def data_wait(log):
    """The last "data wait per training step: mean X ms, p95 Y ms, Z% of the step time" line of a
    run's output (-v): the steps since the report before it (with bench_1gpu.toml's cadence, the
    measured block's)."""
    found = None
    try:
        with open(log, errors="replace") as f:
            for line in f:
                m = re.search(r"data wait per training step: mean ([0-9.]+) ms, p95 ([0-9.]+) ms, "
                              r"([0-9.]+)% of the step time \((\d+) steps", line)
                if m:
                    found = {"mean_ms": float(m.group(1)), "p95_ms": float(m.group(2)),
                             "share_pct": float(m.group(3)), "steps": int(m.group(4))}
    except OSError:
        pass
    return found


# nvidia-smi's utilization.gpu is the share of its last sample period (1/6 s to 1 s by product;
# about 1/6 s on H100 / H200) in which a kernel ran: a sample speaks for the period before its
# timestamp. The bench samples every 200 ms, so a sample counts for a window only when the
# 200 ms before it lie inside the window too (one taken just after a window opens would mostly
# measure what came before it: the warm-up, an eval, process start).
SMI_PERIOD_S = 0.2


def smi_busy(path, windows):
    """Mean utilization.gpu of the samples (`timestamp, util` lines) whose period (the
    SMI_PERIOD_S before the sample) lies inside a window."""
    if not path or not os.path.exists(path) or not windows:
        return None, 0
    vals = []
    with open(path, errors="replace") as f:
        for line in f:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) < 2:
                continue
            try:
                t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                u = float(parts[1])
            except ValueError:
                continue
            if any(a + SMI_PERIOD_S <= t <= b for a, b in windows):
                vals.append(u)
    return (statistics.mean(vals) if vals else None), len(vals)


def cmd_record(a):
    rec = {"part": a.part, "side": a.side, "round": a.round, "device": a.device, "log": a.log,
           "value": None, "unit": None, "ok": False}
    if a.note:
        rec["note"] = a.note
    windows = []
    if a.error:
        rec["error"] = a.error
    elif a.kind == "json":
        raw = last_json(a.log, tuple(a.match.split("=", 1)) if a.match else None)
        if raw is None:
            rec["error"] = "no JSON result line in the output" + (f": {a.note}" if a.note else " (see the log)")
        else:
            rec["raw"] = raw
            for key, unit in (("img_per_s", "img/s"), ("seq_per_s", "seq/s"), ("tflops", "TFLOP/s")):
                if key in raw:
                    rec["value"], rec["unit"] = raw[key], unit
                    break
            if raw.get("window_unix"):
                windows = [raw["window_unix"]]
    else:
        bert = a.kind == "mllog-bert"
        try:
            t = mllog_throughput(a.mllog, bert)
        except OSError as e:
            t = {"error": f"cannot read the MLPerf log: {e}"}
        if not bert:
            split = decoder_split(a.log)
            if split:
                t["decoder_split"] = split
            wait = data_wait(a.log)
            if wait:
                t["data_wait"] = wait
        rec["raw"] = t
        if "error" in t:
            rec["error"] = t["error"]
        else:
            rec["value"], rec["unit"] = t["rate"], ("seq/s" if bert else "img/s")
            windows = t["windows_unix"]
    if rec["value"] is not None:
        rec["ok"] = True
    f = flops_per_sample(a.flops_spec)
    if f and rec["value"] is not None:
        rec["flops_per_sample"] = f
        rec["model_tflops"] = rec["value"] * f / 1e12
    busy, n = smi_busy(a.smi, windows)
    rec["gpu_busy_pct"], rec["gpu_samples"] = busy, n
    line = json.dumps(rec)
    if a.append:
        with open(a.append, "a") as f:
            f.write(line + "\n")
    else:
        print(line)
    what = f"{rec['value']:.1f} {rec['unit']}" if rec["ok"] else f"FAILED: {rec.get('error')}"
    busy = f", GPU busy {busy:.0f}%" if busy is not None else ""
    print(f"   -> {what}{busy}", file=sys.stderr)


def cmd_matmul(a):
    import torch

    dev = torch.device(a.device)
    n = a.n
    x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    y = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    inner = 10 if dev.type == "cuda" else 2
    for _ in range(3):
        torch.matmul(x, y)
    times = []
    for _ in range(a.reps):
        if dev.type == "cuda":
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(inner):
                torch.matmul(x, y)
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e) / 1000.0 / inner)
        else:
            import time

            t0 = time.perf_counter()
            for _ in range(inner):
                torch.matmul(x, y)
            times.append((time.perf_counter() - t0) / inner)
    med = statistics.median(times)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(json.dumps({"impl": "torch.matmul bf16", "device": a.device, "gpu": name, "n": n, "reps": a.reps,
                      "tflops": 2 * n ** 3 / med / 1e12, "median_s": med, "all_s": times}))


def fmt(v, nd=1):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:,.{nd}f}"


PARTS = {
    "a": "a) ResNet-50 training step (fixed batch)",
    "b": "b) ResNet-50 end to end (JPEG folder -> GPU)",
    "c": "c) BERT training step (fixed batch)",
    "d": "d) mlperf-run bert run vs its step benchmark",
    "e": "e) the data path alone, JPEG files to the normalised fp16 GPU tensor (no training): per decoder, and torchvision's peers",
    "f": "f) fused BN+ReLU vs unfused, ResNet-50's BN shapes fwd+bwd (img/s = batch / sum of medians)",
    "g": "g) fused epilogue op (dense + dropout + residual + LayerNorm, fwd+bwd): CUDA kernels vs composite vs unfused",
    "k": "k) short batches beside a CUDA graph: ResNet-50 step, the warm-up's batches and one later one image short",
    "h": "h) fused feed-forward op (1024 -> 4096 + bias + GELU -> 1024, fwd+bwd): cuBLASLt epilogues vs composite vs linear + erf GELU + linear",
    "p": "p) mlperf-run bert, packed rows with every closed method (bench_1gpu_packed.toml), realistic-length data: run vs its step benchmark, Hugging Face padded and Hugging Face on the same packed rows (block mask)",
    "q": "q) fp8 linears (_scaled_mm, delayed scaling) at BERT-Large shapes, fwd+bwd TFLOP/s; errors vs bf16 in the log (examples/fp8_check)",
    "v": "v) unpadded attention (56 x 512, half real, fwd+bwd, bf16): FlashAttention varlen vs scatter + SDPA with mask",
    "m": "m) the multi-process paths on one GPU (scripts/bench/multiprocess_check.py: 2 ranks sharing it through Gloo, NCCL in a group of one)",
    "ncu": "ncu) kernels per training step",
    "ncu-kernels": "ncu) one training step's kernels by class (gpu__time_duration.sum at ncu's clocks)",
}


# The targets of the ResNet-50 step (part a) and the BERT-Large step (part c), set for one H100:
# (part, our row, peer row or None, threshold). A peer row makes the target the median over rounds
# of ours / peer; without one it is our median rate. Peers are like for like: our fp16 rows against
# PyTorch's fp16 rows, our bf16 ones against bf16 ones. A row that a run of bench_gpu.sh did not
# measure reads "not measured" (a)'s bf16 all-methods row and its peer run only with --sides all).
# c)'s graph + fused epilogues row leaves out fused bias+GELU, which measured slower on an H200.
TARGETS = [
    ("a", "mlperf-run fp16 all-methods", None, 5000.0),
    ("a", "mlperf-run fp16 all-methods", "pytorch-compile-fp16", 0.9),
    ("a", "mlperf-run all-methods", None, 5000.0),
    ("a", "mlperf-run all-methods", "pytorch-compile", 0.9),
    ("c", "mlperf-run all-methods", None, 360.0),
    ("c", "mlperf-run all-methods", "hf-transformers (sdpa)", 1.4),
    ("c", "mlperf-run cuda-graph fused-epilogues", None, 360.0),
    ("c", "mlperf-run cuda-graph fused-epilogues", "hf-transformers (sdpa)", 1.4),
    ("c", "mlperf-run cuda-graph fused-epilogues fused-qkv bf16-residual", None, 360.0),
    ("c", "mlperf-run cuda-graph fused-epilogues fused-qkv bf16-residual", "hf-transformers (sdpa)", 1.4),
    ("c", "mlperf-run cuda-graph fused-epilogues fused-qkv bf16-residual flash-varlen", None, 360.0),
    ("c", "mlperf-run cuda-graph fused-epilogues fused-qkv bf16-residual flash-varlen", "hf-transformers (sdpa)", 1.4),
]
# ... and the GPU busy share with CUDA graphs on, for every such row of parts a and c
BUSY_TARGET_PCT = 97.0


def median_ratio(by, rounds, ours, peer):
    rs = [by[(ours, x)]["value"] / by[(peer, x)]["value"] for x in rounds
          if by.get((ours, x), {}).get("ok") and by.get((peer, x), {}).get("ok")]
    return (statistics.median(rs), rs) if rs else (None, [])


def losses_of(rec):
    """(first, last) training loss a step benchmark reported, first None where it gives only the last."""
    raw = rec.get("raw") or {}
    fl = raw.get("losses_first_last")
    if fl and len(fl) == 2 and fl[1] is not None:
        return fl[0], fl[1]
    if raw.get("loss") is not None:
        return None, raw["loss"]
    return None


# how far one of our method rows' loss drop (the share of its first loss it shed) may lie from
# our plain row's, as a share of the plain row's drop, before the check names it
LOSS_DROP_TOLERANCE = 0.25


def loss_lines(pr, sides, ours_side):
    """The training check of a step part: each row's loss after its steps, and our method rows
    against our plain row of the same precision. They share the seed, the initial weights and the
    fixed batch, so a method that changes no math (or little) sheds about the same share of its
    first loss; a step that does not train sheds none. (Drops, not final losses: on a fixed batch
    the loss heads for 0, where final losses differ by large factors between rows that all train.)"""
    losses = {}
    for s in sides:
        got = [losses_of(r) for r in pr if r["side"] == s and r.get("ok")]
        got = [g for g in got if g]
        if got:
            first = next((g[0] for g in got if g[0] is not None), None)
            losses[s] = (first, statistics.median(g[1] for g in got))
    if not losses:
        return []
    drop = lambda s: (1 - losses[s][1] / losses[s][0]) if losses[s][0] else None
    out = ["  training check: loss after each row's steps (median over rounds; ours' rows share seed, "
           "init and batch)"]
    for s in sides:
        if s in losses:
            first, last = losses[s]
            d = drop(s)
            out.append(f"    {s:<40}" + (f"{first:8.4f} -> " if first is not None else " " * 12) + f"{last:8.4f}"
                       + (f"  ({100 * d:.0f}% shed)" if d is not None else ""))
    amp = lambda s: next(((r.get("raw") or {}).get("amp") for r in pr if r["side"] == s and r.get("ok")), None)
    for v in [x for x in sides if x.startswith("mlperf-run") and x != ours_side and x in losses]:
        same = [x for x in sides if x.startswith("mlperf-run") and x != v and x in losses
                and amp(x) == amp(v) and not any(m in x for m in ("graph", "fused", "all-methods"))]
        ref = same[0] if same else (ours_side if ours_side in losses else None)
        if ref is None or drop(v) is None or drop(ref) is None or drop(ref) <= 0:
            continue
        if abs(drop(v) - drop(ref)) > LOSS_DROP_TOLERANCE * drop(ref):
            out.append(f"    CHECK: {v} shed {100 * drop(v):.0f}% of its first loss, {ref} "
                       f"{100 * drop(ref):.0f}% (apart by more than {100 * LOSS_DROP_TOLERANCE:.0f}% of "
                       f"the latter): does its step train as the plain one does?")
    return out


def graph_lines(pr, sides):
    """How each CUDA-graph row's steps went (its result line's "graph"): eager, captured, replayed,
    short batches and cold captures, per round."""
    out = []
    for s in sides:
        for r in [r for r in pr if r["side"] == s and (r.get("raw") or {}).get("graph")]:
            g = r["raw"]["graph"]
            out.append(f"  CUDA graph steps, {s} r{r['round']}: {g.get('eager_steps')} eager, "
                       f"{g.get('captures')} capture(s) ({g.get('cold_captures')} cold), {g.get('replays')} "
                       f"replays, {g.get('short_batches')} short batch(es)")
    return out


def gpu_of(recs, out_dir):
    """The name of the GPU the run happened on: torch's, from the matmul record, else the first
    field of the nvidia-smi line bench_gpu.sh wrote to env.txt; None where neither has one."""
    mm = [r for r in recs if r["part"] == "mm" and r.get("ok") and (r.get("raw") or {}).get("gpu")]
    if mm and mm[0]["raw"]["gpu"] != "cpu":
        return mm[0]["raw"]["gpu"]
    try:
        with open(os.path.join(out_dir, "env.txt"), errors="replace") as f:
            for line in f:
                # the nvidia-smi line: "NAME, DRIVER, MEMORY, CLOCK, POWER", not indented
                if "," in line and not line[0].isspace() and not line.startswith("bench_gpu:"):
                    return line.split(",")[0].strip() or None
    except OSError:
        pass
    return None


def targets_heading(what, set_for, gpu, on_gpu):
    """A target block's heading: what it measures, the GPU its thresholds were set for and the GPU
    this run happened on, e.g. "targets: ResNet-50 training step (part a), set for one H100;
    this run: one NVIDIA H200"."""
    if not on_gpu:
        ran = "this run: the CPU (a smoke run: the numbers mean nothing)"
    else:
        ran = f"this run: one {gpu}" if gpu else "this run: one GPU (its name was not recorded)"
    return f"targets: {what}, set for {set_for}; {ran}"


# the step target blocks, one per model: (part, what it measures)
STEP_TARGET_BLOCKS = [("a", "ResNet-50 training step (part a)"), ("c", "BERT-Large training step (part c)")]


def target_lines(recs, on_gpu, gpu=None):
    """The step target blocks, the ResNet-50 step's and the BERT-Large step's: each of TARGETS
    and the GPU busy target, met or missed."""
    out = []
    verdict = lambda v, t: "not measured" if v is None else ("met" if v >= t else "MISSED")
    tw = max([66] + [len(o) + (len(p) + 3 if p else 0) + 1 for _, o, p, _ in TARGETS])
    for block, what in STEP_TARGET_BLOCKS:
        out.extend(["", targets_heading(what, "one H100", gpu, on_gpu)])
        out.extend(step_target_lines(recs, block, tw, verdict))
    return out


def step_target_lines(recs, block, tw, verdict):
    """One step part's lines of TARGETS, then its GPU busy targets."""
    out = []
    for part, ours, peer, t in [x for x in TARGETS if x[0] == block]:
        pr = [r for r in recs if r["part"] == part]
        by = {(r["side"], r["round"]): r for r in pr}
        rounds = sorted({r["round"] for r in pr})
        if peer is None:
            good = [r["value"] for r in pr if r["side"] == ours and r.get("ok")]
            v = statistics.median(good) if good else None
            unit = next((r.get("unit") for r in pr if r["side"] == ours and r.get("unit")), "")
            out.append(f"  {part}) {ours:<{tw}}{fmt(v):>10} {unit:<8} target >= {fmt(t, 0):>6}  {verdict(v, t)}")
        else:
            v, rs = median_ratio(by, rounds, ours, peer)
            what = f"{ours} / {peer}"
            out.append(f"  {part}) {what:<{tw}}{(fmt(v, 3) + 'x') if v else '-':>10} {'':<8} target >= {fmt(t, 1) + 'x':>6}"
                       f"  {verdict(v, t)}" + (f"  (rounds: {', '.join(fmt(x, 3) for x in rs)})" if rs else ""))
    graph_rows = sorted({(r["part"], r["side"]) for r in recs if r["part"] == block
                         and ("cuda-graph" in r["side"] or "all-methods" in r["side"])})
    for part, side in graph_rows:
        busy = [r["gpu_busy_pct"] for r in recs if r["part"] == part and r["side"] == side
                and r.get("ok") and r.get("gpu_busy_pct") is not None]
        v = statistics.mean(busy) if busy else None
        out.append(f"  {part}) GPU busy, {side:<{tw - 10}}{(fmt(v, 0) + '%') if v is not None else '-':>10} {'':<8} "
                   f"target >= {fmt(BUSY_TARGET_PCT, 0) + '%':>6}  {verdict(v, BUSY_TARGET_PCT)}")
    return out


# The packed BERT-Large closed run's targets (part p), set for one H100: the run's sequences per
# second in its training blocks, its ratio to Hugging Face padded measured beside it, its packed rows
# per second against its own step benchmark of the same rows, and GPU busy in the training blocks.
P_TARGETS = {"seq_per_s": 700.0, "over_hf": 2.5, "over_step": 0.95, "busy_pct": 97.0}


def packed_lines(pr, on_gpu=True, gpu=None):
    """Part p's report: the run's seq/s (training blocks; with evals), rows/s against its step
    benchmark, seq/s against Hugging Face padded, GPU busy, the packing, each against its target."""
    out = ["", targets_heading("BERT-Large packed closed run (part p)", "one H100", gpu, on_gpu)]
    run = next((r for r in pr if r["side"].startswith("mlperf-run bert") and r.get("ok")), None)
    step = next((r for r in pr if "step" in r["side"] and r.get("ok")), None)
    hf = next((r for r in pr if r["side"].startswith("hf-transformers padded") and r.get("ok")), None)
    hf_packed = next((r for r in pr if r["side"].startswith("hf-transformers packed") and r.get("ok")), None)
    pack = next((r for r in pr if r["side"] == "bert-pack" and r.get("raw")), None)
    if pack:
        p = pack["raw"]
        out.append(f"  packing (data bert-pack): {p.get('sequences_per_row', 0):.3f} sequences per row, "
                   f"{100 * p.get('padding', 0):.2f}% padding (bound {100 * (1 - p.get('bound_efficiency', 1)):.2f}%; "
                   f"unpacked {100 * (1 - p.get('unpacked_efficiency', 1)):.1f}%): "
                   f"{'met' if p.get('padding', 1) <= 0.03 else 'NOT MET'} (target <= 3%)")
    if not run:
        out.append("  no successful run: the targets are not measured")
        return out
    raw = run.get("raw") or {}
    met = lambda ok: "met" if ok else "NOT MET"
    out.append(f"  run: {run['value']:,.1f} seq/s in training blocks "
               f"({met(run['value'] >= P_TARGETS['seq_per_s'])}, target >= {P_TARGETS['seq_per_s']:.0f}); "
               f"with evals {fmt(raw.get('rate_with_evals'))} seq/s; "
               f"{fmt(raw.get('row_rate'))} rows/s at {fmt(raw.get('sequences_per_row'), 3)} sequences per row")
    busy = run.get("gpu_busy_pct")
    out.append(f"  run GPU busy in training blocks: {fmt(busy, 0) if busy is not None else '-'}% "
               f"({met(busy is not None and busy >= P_TARGETS['busy_pct'])}, target >= {P_TARGETS['busy_pct']:.0f}%)")
    if step and raw.get("row_rate"):
        r = raw["row_rate"] / step["value"]
        out.append(f"  run rows/s / its step benchmark's rows/s: {raw['row_rate']:,.1f} / {step['value']:,.1f} = "
                   f"{r:.3f} ({met(r >= P_TARGETS['over_step'])}, target >= {P_TARGETS['over_step']})")
    else:
        out.append("  run / step benchmark: not measured")

    def over_peer(peer, name, label, target=None):
        """The run's seq/s over a peer row's (None: not measured), against `target` if any."""
        if not peer:
            return f"  run / {name}: not measured"
        r = run["value"] / peer["value"]
        judged = f" ({met(r >= target)}, target >= {target}x)" if target is not None else ""
        return (f"  run seq/s / {name} seq/s{label}: {run['value']:,.1f} / {peer['value']:,.1f} = "
                f"{r:.2f}x{judged}")

    out.append(over_peer(hf, "Hugging Face padded", "", P_TARGETS["over_hf"]))
    # the same work: Hugging Face on packed rows of the same shape (2 sequences per row, SDPA with a
    # block-diagonal mask, its math checked against each sequence alone before timing)
    out.append(over_peer(hf_packed, "Hugging Face packed rows", " (same work)"))
    return out


# The targets of ResNet-50 end to end and its data path, set for one H100 or H200: (part, our row,
# peer row or None, threshold), read as TARGETS are; b)'s step comparison is against a)'s fp16
# all-methods row of the same bench_gpu.sh run, and b)'s CPU-decoder run against e)'s CPU row
DATA_TARGETS = [
    ("e", "decoder nvjpeg", None, 9000.0),
    ("e", "decoder nvjpeg", "torchvision decode_jpeg gpu", 2.0),
]
DATA_BUSY_TARGET_PCT = 95.0
DATA_WAIT_TARGET_PCT = 3.0


def data_path_lines(recs, on_gpu, gpu=None):
    """b) and e): the run's rate in training blocks and with evals, GPU busy, the decoder split,
    the data wait, its ratio to a)'s step, and the targets, met or missed."""
    out = ["", targets_heading("ResNet-50 end to end and its data path (parts b and e)", "one H100 or H200",
                               gpu, on_gpu)]
    verdict = lambda v, t: "not measured" if v is None else ("met" if v >= t else "MISSED")
    at_most = lambda v, t: "not measured" if v is None else ("met" if v <= t else "MISSED")
    med = lambda xs: statistics.median(xs) if xs else None
    step = med([r["value"] for r in recs if r["part"] == "a" and r["side"] == "mlperf-run fp16 all-methods"
                and r.get("ok")])
    for side in ["mlperf-run resnet", "mlperf-run resnet cpu-decoder"]:
        runs = [r for r in recs if r["part"] == "b" and r["side"] == side and r.get("ok")]
        if not runs:
            continue
        blocks = med([r["value"] for r in runs])
        evals = med([r["raw"].get("rate_with_evals") for r in runs if r["raw"].get("rate_with_evals")])
        busy = med([r["gpu_busy_pct"] for r in runs if r.get("gpu_busy_pct") is not None])
        split = [r["raw"].get("decoder_split") for r in runs if r["raw"].get("decoder_split")]
        waits = [r["raw"].get("data_wait") for r in runs if r["raw"].get("data_wait")]
        line = f"  b) {side}: {fmt(blocks)} img/s in training blocks, {fmt(evals)} img/s with evals, GPU busy {fmt(busy, 0)}%"
        if split:
            sp = split[-1]
            line += f", nvJPEG decoded {100 * sp['nvjpeg_share']:.1f}% of {sp['images']} images"
            if sp.get("nvjpeg_backend"):
                line += f" ({sp['nvjpeg_backend']})"
            if sp.get("arena_mb_per_batch"):
                line += f", arena {sp['arena_mb_per_batch']:.0f} MB per batch"
        out.append(line)
        wait_share = med([w["share_pct"] for w in waits])
        if waits:
            out.append(f"  b) {side}: data wait per step mean {fmt(med([w['mean_ms'] for w in waits]), 2)} ms, "
                       f"p95 {fmt(med([w['p95_ms'] for w in waits]), 2)} ms, {fmt(wait_share, 1)}% of the step")
        if side == "mlperf-run resnet":
            ratio = blocks / step if step else None
            out.append(f"  b) {side} / a) mlperf-run fp16 all-methods (step): "
                       f"{(fmt(ratio, 3) + 'x') if ratio else '-'}  target >= 0.95x  {verdict(ratio, 0.95)}")
            out.append(f"  b) GPU busy in training blocks: {fmt(busy, 0)}%  target >= {fmt(DATA_BUSY_TARGET_PCT, 0)}%  "
                       f"{verdict(busy, DATA_BUSY_TARGET_PCT)}")
            out.append(f"  b) data wait, share of the step: {fmt(wait_share, 1)}%  target <= "
                       f"{fmt(DATA_WAIT_TARGET_PCT, 0)}%  {at_most(wait_share, DATA_WAIT_TARGET_PCT)}")
        else:
            cpu_row = med([r["value"] for r in recs if r["part"] == "e" and r["side"] == "decoder cpu" and r.get("ok")])
            ratio = blocks / cpu_row if cpu_row else None
            out.append(f"  b) {side} / e) decoder cpu (the data path alone): "
                       f"{(fmt(ratio, 3) + 'x') if ratio else '-'}  target >= 0.95x  {verdict(ratio, 0.95)}")
    for part, ours, peer, t in DATA_TARGETS:
        pr = [r for r in recs if r["part"] == part]
        if peer is None:
            v = med([r["value"] for r in pr if r["side"] == ours and r.get("ok")])
            out.append(f"  {part}) {ours:<40}{fmt(v):>10} img/s  target >= {fmt(t, 0):>6}  {verdict(v, t)}")
        else:
            by = {(r["side"], r["round"]): r for r in pr}
            v, rs = median_ratio(by, sorted({r["round"] for r in pr}), ours, peer)
            what = f"{ours} / {peer}"
            out.append(f"  {part}) {what:<40}{(fmt(v, 3) + 'x') if v else '-':>10}        target >= {fmt(t, 1) + 'x':>6}"
                       f"  {verdict(v, t)}")
    for r in recs:
        if r["part"] == "e" and r.get("ok") and r["raw"].get("decoded"):
            raw = r["raw"]
            extra = ""
            if raw.get("nvjpeg_backend"):
                extra += f", {raw['nvjpeg_backend']}"
            if raw.get("arena_mb_per_batch"):
                extra += f", arena {raw['arena_mb_per_batch']:.0f} MB per batch"
            if raw.get("psnr_vs_cpu_worst_db"):
                extra += f", worst PSNR vs the CPU decoder {raw['psnr_vs_cpu_worst_db']:.1f} dB"
            out.append(f"  e) {r['side']} round {r['round']}: nvJPEG decoded {raw.get('decoded_on_gpu')} of "
                       f"{raw.get('decoded')} images (hw_decoder_load {raw.get('hw_decoder_load')}{extra})")
    return out


def cmd_report(a):
    path = os.path.join(a.out, "results.jsonl")
    recs = []
    if os.path.exists(path):
        with open(path) as f:
            recs = [json.loads(l) for l in f if l.strip()]
    mm = [r for r in recs if r["part"] == "mm" and r.get("ok")]
    peak = statistics.median(r["value"] for r in mm) if mm else None
    on_gpu = any(r.get("device") == "cuda" for r in recs)
    gpu = gpu_of(recs, a.out) if on_gpu else None
    lines = []
    rows = []
    w = lines.append
    w(f"mlperf-run GPU benchmarks  ({gpu or 'no GPU'}; results in {a.out})")
    if peak:
        n = mm[0]["raw"].get("n")
        w(f"measured bf16 matmul ({n}^3 on {mm[0]['raw'].get('device')}, median of {mm[0]['raw'].get('reps')}): "
          f"{peak:,.1f} TFLOP/s"
          + (f" = {100 * peak / H100_SXM_BF16_DENSE_TFLOPS:.1f}% of the H100 SXM datasheet 989" if on_gpu else ""))
    for part in ("a", "k", "b", "c", "d", "p", "e", "f", "g", "h", "v", "q"):
        # (part p's packing record is no rate: read by packed_lines, not a row of the table)
        pr_all = [r for r in recs if r["part"] == part]
        pr = [r for r in pr_all if r["side"] != "bert-pack"]
        if not pr:
            continue
        w("")
        w(PARTS[part])
        sides = []
        for r in pr:
            if r["side"] not in sides:
                sides.append(r["side"])
        rounds = sorted({r["round"] for r in pr})
        sw = max([30] + [len(x) + 1 for x in sides])  # the side column fits every name
        hdr = f"  {'side':<{sw}}" + "".join(f"{'r' + str(x):>10}" for x in rounds) + \
            f"{'median':>10} {'unit':<6}{'ours/side':>10}{'TFLOP/s':>9}{'MFU':>7}{'MFU989':>8}{'GPU busy':>9}"
        w(hdr)
        # rounds start with a different side each (rotated): the plain row is ours where there is
        # one, and ours comes first
        ours_side = "mlperf-run" if "mlperf-run" in sides else \
            next((x for x in sides if x.startswith("mlperf-run")), sides[0])
        sides.remove(ours_side)
        sides.insert(0, ours_side)
        by = {(r["side"], r["round"]): r for r in pr}
        for s in sides:
            vals = [by.get((s, x)) for x in rounds]
            good = [v["value"] for v in vals if v and v.get("ok")]
            med = statistics.median(good) if good else None
            unit = next((v["unit"] for v in vals if v and v.get("unit")), "")
            ratio = median_ratio(by, rounds, ours_side, s)[0] if s != ours_side else None
            fps = next((v.get("flops_per_sample") for v in vals if v and v.get("flops_per_sample")), None)
            tfl = med * fps / 1e12 if (med and fps) else None
            mfu = 100 * tfl / peak if (tfl and peak and on_gpu) else None
            mfu989 = 100 * tfl / H100_SXM_BF16_DENSE_TFLOPS if (tfl and on_gpu) else None
            busy = [v["gpu_busy_pct"] for v in vals if v and v.get("gpu_busy_pct") is not None]
            busy = statistics.mean(busy) if busy else None
            cells = "".join(f"{(fmt(v['value']) if v and v.get('ok') else ('failed' if v else '')):>10}" for v in vals)
            w(f"  {s:<{sw}}{cells}{fmt(med):>10} {unit:<6}{(fmt(ratio, 3) + 'x') if ratio else '-':>10}"
              f"{fmt(tfl):>9}{(fmt(mfu) + '%') if mfu else '-':>7}{(fmt(mfu989) + '%') if mfu989 else '-':>8}"
              f"{(fmt(busy, 0) + '%') if busy is not None else '-':>9}")
            for v in vals:
                if v and not v.get("ok"):
                    w(f"      {s} round {v['round']} failed: {v.get('error', '?')}  (log: {v.get('log')})")
                elif v and v.get("note"):
                    w(f"      note: {v['note']}")
            rows.append({"part": part, "side": s, "unit": unit, "median": med, "ours_over_side": ratio,
                         "model_tflops": tfl, "mfu_pct_of_measured_matmul": mfu, "mfu_pct_of_989": mfu989,
                         "gpu_busy_pct": busy, **{f"r{x}": (v["value"] if v and v.get("ok") else None)
                                                  for x, v in zip(rounds, vals)}})
        # our other variants (e.g. "mlperf-run cuda-graph"): each against every side, per round
        for v in [x for x in sides if x.startswith("mlperf-run") and x != ours_side]:
            for s in [x for x in sides if x != v]:
                m, rs = median_ratio(by, rounds, v, s)
                if rs:
                    w(f"  {v} / {s}: {fmt(m, 3)}x median "
                      f"(rounds: {', '.join(fmt(x, 3) for x in rs)})")
        if part in ("a", "c", "k"):
            lines.extend(loss_lines(pr, sides, ours_side))
            lines.extend(graph_lines(pr, sides))
        if part == "d":
            run = next((r for r in pr if r["side"].startswith("mlperf-run bert") and r.get("ok")), None)
            step = [r for r in pr if "step" in r["side"] and r.get("ok")]
            shape = lambda r: (r.get("raw", {}).get("batch"), r.get("raw", {}).get("seq"))
            c_ours = [r["value"] for r in recs if r["part"] == "c" and r["side"] == "mlperf-run" and r.get("ok")
                      and step and shape(r) == shape(step[0])]
            for ref, name in [(statistics.median(r["value"] for r in step) if step else None, "its LAMB step benchmark"),
                              (statistics.median(c_ours) if c_ours else None, "c) ours (AdamW step benchmark)")]:
                if run and ref:
                    gap = 100 * (run["value"] / ref - 1)
                    w(f"  run vs {name}: {run['value']:,.1f} / {ref:,.1f} seq/s = {gap:+.1f}% "
                      f"({'within' if abs(gap) <= 5 else 'OUTSIDE'} the 5% target)")
        if part == "p":
            lines.extend(packed_lines(pr_all, on_gpu, gpu))
    checks = [r for r in recs if r["part"] == "m"]
    if checks:
        w("")
        w(PARTS["m"])
        for r in checks:
            w(f"  {'PASS' if r.get('ok') else 'FAIL'} {r['side']}: {r.get('note') or r.get('error')}")
    ncu = [r for r in recs if r["part"] == "ncu"]
    if ncu:
        w("")
        w(PARTS["ncu"])
        for r in ncu:
            if r.get("ok"):
                raw = r["raw"]
                w(f"  {r['side']:<30} {raw['kernels_per_step']:>8.1f} kernels/step {raw['kernel_ms_per_step']:>9.2f} "
                  f"kernel ms/step")
            else:
                w(f"  {r['side']:<30} failed: {r.get('error')}")
    kern = [r for r in recs if r["part"] == "ncu-kernels"]
    if kern:
        w("")
        w(PARTS["ncu-kernels"])
        for r in kern:
            if not r.get("ok"):
                w(f"  {r['side']}: failed: {r.get('error')}")
                continue
            raw = r["raw"]
            total = raw["step_kernel_ms"]
            w(f"  {r['side']}: {raw['kernels']} kernels, {total:.2f} ms (ncu clocks)")
            for cls, n, ms in raw["classes"]:
                w(f"    {cls:<26} {n:>6} {ms:>9.2f} ms {100 * ms / total:>5.1f}%")
            w("    largest kernels: " + "; ".join(f"{k} {ms:.2f} ms ({n})" for k, n, ms in raw["top"][:6]))
    if any(r["part"] in ("a", "c") for r in recs):
        lines.extend(target_lines(recs, on_gpu, gpu))
    if any(r["part"] in ("b", "e") for r in recs):
        lines.extend(data_path_lines(recs, on_gpu, gpu))
    limits = [r["note"] for r in recs if r["part"] == "limit"]
    if limits:
        w("")
        w("left out (--time-limit):")
        for n in limits:
            w(f"  {n}")
    w("")
    w("ours/side: median over rounds of (ours / side) per round; > 1 means ours is faster. "
      "MFU: model TFLOP/s / measured matmul TFLOP/s; MFU989: / 989 (H100 SXM dense bf16). "
      "GPU busy: mean nvidia-smi utilization.gpu over the samples whose 200 ms period lies inside a timed window.")
    w("FLOPs: ResNet-50 3 x 4.11 GMAC x 2 per 224-px image; BERT 6 x N(encoder layers) x seq + "
      "12 x layers x seq^2 x hidden per sequence.")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(a.out, "table.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"matmul_tflops": peak, "gpu": gpu, "rows": rows, "records": recs}, f, indent=1)
    keys = ["part", "side", "unit", "median", "ours_over_side", "model_tflops", "mfu_pct_of_measured_matmul",
            "mfu_pct_of_989", "gpu_busy_pct"]
    extra = sorted({k for r in rows for k in r if k not in keys})
    with open(os.path.join(a.out, "results.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys + extra)
        wr.writeheader()
        for r in rows:
            wr.writerow(r)
    bad = [r for r in recs if not r.get("ok")]
    return 1 if bad else 0


def ncu_parse(path):
    """(kernels, summed kernel ms) of an `ncu --csv --metrics gpu__time_duration.sum` log."""
    scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
             "second": 1e3, "s": 1e3}
    n, ms = 0, 0.0
    with open(path, errors="replace") as f:
        rows = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        n += 1
        ms += float(r["Metric Value"].replace(",", "")) * scale.get(r.get("Metric Unit", "nsecond"), 1e-6)
    return n, ms


# Kernel classes for `kernels` (first match of a lower-cased substring wins).
KERNEL_CLASSES = [
    ("attention", ("flash", "fmha", "sdpa", "dot_do_o", "convert_dq")),
    ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "gemv", "splitkreduce")),
    ("optimizer", ("adammath", "sgdmath", "lpnorm", "multi_tensor")),
    ("fused epilogue (ours)", ("mr_fe_",)),
    ("layer norm", ("layer_norm", "layernorm", "gammabeta")),
    ("batch norm", ("batch_norm", "batchnorm", "bn_fw", "bn_bw", "welford")),
    ("gelu", ("gelu",)),
    ("dropout / rng", ("bernoulli", "dropout", "philox", "distribution")),
    ("embedding / index", ("embedding", "index", "gather", "scatter", "radix", "unique", "segment",
                           "grad_weight", "scan::")),
    ("reduction", ("reduce",)),
    ("copy / cast / cat", ("copy", "catarray", "transpose")),
    ("elementwise", ("elementwise",)),
]
# the update kernels that end a training step: ATen's fused AdamW / SGD (our LAMB and LARS run
# on them too); plain substrings like "lamb" would match the "lambda" in many kernels' names
STEP_END = ("adammath", "sgdmath")


def kernel_class(name):
    low = name.lower()
    for cls, keys in KERNEL_CLASSES:
        if any(k in low for k in keys):
            return cls
    return "other"


def short_kernel_name(name):
    n = name.replace("void ", "")
    for p in ("at::native::", "at::", "(anonymous namespace)::", "<unnamed>::"):
        n = n.replace(p, "")
    cut = min([i for i in (n.find("<"), n.find("(")) if i >= 0] or [len(n)])
    return n[:cut][:60] or name[:60]


def cmd_kernels(a):
    """One training step's kernels by class, from an `ncu --csv --metrics gpu__time_duration.sum`
    log of a run with 2 or more steps: the last step is the kernels after the second-to-last
    optimizer update up to the last one (update kernels at most 3 launches apart form one
    update: a multi-tensor optimizer launches them back to back)."""
    rec = {"part": "ncu-kernels", "side": a.side, "round": 1, "device": "cuda", "ok": False, "log": a.csv}
    scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}
    try:
        with open(a.csv, errors="replace") as f:
            rows = [l for l in f if l.startswith('"')]
        ks = [(r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * scale.get(r.get("Metric Unit", "ns"), 1e-6))
              for r in csv.DictReader(rows) if r.get("Metric Name") == "gpu__time_duration.sum"]
        ends = [i for i, (n, _) in enumerate(ks) if any(k in n.lower() for k in STEP_END)]
        clusters = []
        for i in ends:
            if clusters and i - clusters[-1][-1] <= 3:
                clusters[-1].append(i)
            else:
                clusters.append([i])
        if len(clusters) < 2:
            raise ValueError(f"{len(clusters)} optimizer update(s) among {len(ks)} kernels: need 2 steps")
        step = ks[clusters[-2][-1] + 1: clusters[-1][-1] + 1]
        by_cls, by_name = {}, {}
        for n, ms in step:
            for d, k in ((by_cls, kernel_class(n)), (by_name, short_kernel_name(n))):
                c = d.setdefault(k, [0, 0.0])
                c[0] += 1
                c[1] += ms
        rec["raw"] = {"kernels": len(step), "step_kernel_ms": sum(ms for _, ms in step),
                      "classes": sorted(([k, c, ms] for k, (c, ms) in by_cls.items()), key=lambda x: -x[2]),
                      "top": sorted(([k, c, ms] for k, (c, ms) in by_name.items()), key=lambda x: -x[2])[:12]}
        rec["value"], rec["unit"], rec["ok"] = rec["raw"]["step_kernel_ms"], "ms", True
    except (OSError, ValueError, KeyError) as e:
        rec["error"] = str(e)
    line = json.dumps(rec)
    if a.append:
        with open(a.append, "a") as f:
            f.write(line + "\n")
    print(line)


def cmd_ncu(a):
    """Per-step kernels from two ncu runs of the same program: `small` with S1 steps, `big` with
    S2 steps (init and evals cancel out)."""
    rec = {"part": "ncu", "side": a.side, "round": 1, "device": "cuda", "ok": False, "log": a.big}
    try:
        n1, t1 = ncu_parse(a.small)
        n2, t2 = ncu_parse(a.big)
        d = a.big_steps - a.small_steps
        if n2 <= n1 or d <= 0:
            raise ValueError(f"no kernels measured ({n1} and {n2} kernels)")
        rec["raw"] = {"kernels_per_step": (n2 - n1) / d, "kernel_ms_per_step": (t2 - t1) / d,
                      "kernels": [n1, n2], "steps": [a.small_steps, a.big_steps]}
        rec["value"], rec["unit"], rec["ok"] = (t2 - t1) / d, "ms", True
    except (OSError, ValueError, KeyError) as e:
        rec["error"] = str(e)
    print(json.dumps(rec))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("record")
    p.add_argument("--part", required=True)
    p.add_argument("--side", required=True)
    p.add_argument("--round", type=int, default=1)
    p.add_argument("--kind", choices=["json", "mllog-resnet", "mllog-bert"], default="json")
    p.add_argument("--log", required=True)
    p.add_argument("--mllog")
    p.add_argument("--smi")
    p.add_argument("--flops-spec")
    p.add_argument("--device", default="cuda")
    p.add_argument("--note")
    p.add_argument("--error")
    p.add_argument("--match", help="KEY=VALUE: use the last JSON line whose KEY is VALUE")
    p.add_argument("--append", help="append the record to this file instead of printing it")
    p = sub.add_parser("matmul")
    p.add_argument("--device", default="cuda")
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--reps", type=int, default=7)
    p = sub.add_parser("report")
    p.add_argument("--out", required=True)
    p = sub.add_parser("kernels")
    p.add_argument("--side", required=True)
    p.add_argument("--csv", required=True)
    p.add_argument("--append")
    p = sub.add_parser("ncu")
    p.add_argument("--side", required=True)
    p.add_argument("--small", required=True)
    p.add_argument("--big", required=True)
    p.add_argument("--small-steps", type=int, required=True)
    p.add_argument("--big-steps", type=int, required=True)
    a = ap.parse_args()
    return {"record": cmd_record, "matmul": cmd_matmul, "report": cmd_report, "ncu": cmd_ncu,
            "kernels": cmd_kernels}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
