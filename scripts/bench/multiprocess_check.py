#!/usr/bin/env python3
"""The multi-process paths of `mlperf-run` run on one device, with checks (scripts/bench_gpu.sh
part m; on a CPU with --device cpu, the same checks over Gloo, which CI's tests also cover).

On a GPU the ranks share it in the test mode MLPERF_RUN_TEST_SHARE_GPU=1 (Gloo over CUDA
tensors: NCCL refuses two ranks on one device), so the overlapped all-reduce, the per-rank batch
hand-off, stop agreement, shutdown and rank-failure abort execute on the GPU; the all-reduce
captured inside a CUDA graph runs with NCCL in a group of one (MLPERF_RUN_TEST_GROUP_OF_ONE=1).

Checks (each one record in --append, part "m"; exit 1 if any fails):
  dp-equals-accumulating   2 ranks x 1 micro-batch end with the same parameters as 1 process
                           accumulating the same 2 micro-batches (--emulate-world 2): the ranks
                           bit for bit equal to each other, the process within --tol (bit for bit
                           is the design's promise only where the kernels are deterministic: on a
                           CPU; cuDNN's weight-gradient kernels are not); a control, 1 process on
                           the whole batch, must differ by more than --tol
  overlap-equals-blocking  the all-reduce overlapped with the backward vs after it
                           (MLPERF_RUN_GRAD_OVERLAP=0): within --tol (0 on a CPU)
  rank-failure-abort       rank 1 killed (SIGKILL) mid-block: rank 0 ends, aborted, within 60 s
  graph-group-of-one       (CUDA graph, or its CPU twin on a CPU) the step with its all-reduce
                           captured in a group of one equals the step with no group, within --tol
  graph-refused-sharing    (GPU only) methods.cuda_graph with ranks sharing a GPU is refused,
                           naming the key
  second-rank-refused      (GPU only, one GPU) without the test mode, two ranks on a one-GPU
                           node are refused before the first run (each sees the one GPU, so
                           both would use it), naming both ranks and the GPU
  clean-shutdown           no process printed a panic or a destroy_process_group warning
"""
import argparse
import json
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time

DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "BF16": None, "I64": "<i8", "I32": "<i4"}


def read_safetensors(path):
    """{name: (dtype, shape, bytes)} of a safetensors file (its format: u64 header length, JSON
    header, raw little-endian data), without the safetensors package."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        out[name] = (meta["dtype"], meta["shape"], data[a:b])
    return out


def as_floats(dtype, raw):
    import torch
    t = torch.frombuffer(bytearray(raw), dtype={"F32": torch.float32, "F64": torch.float64,
                                                "F16": torch.float16, "BF16": torch.bfloat16,
                                                "I64": torch.int64, "I32": torch.int32}[dtype])
    return t.to(torch.float64)


def compare(a_path, b_path):
    """(bit-identical, largest relative difference by norm per tensor) of two dumps."""
    a, b = read_safetensors(a_path), read_safetensors(b_path)
    if sorted(a) != sorted(b):
        raise ValueError(f"{a_path} and {b_path} hold different tensors")
    identical, worst = True, 0.0
    for k in a:
        if a[k] != b[k]:
            identical = False
            x, y = as_floats(a[k][0], a[k][2]), as_floats(b[k][0], b[k][2])
            d = float((x - y).norm()) / max(float(y.norm()), 1e-12)
            worst = max(worst, d)
    return identical, worst


class Checks:
    def __init__(self, a):
        self.a = a
        self.records = []
        self.outputs = []  # (what, text) of every process, for clean-shutdown
        self.env = dict(os.environ)
        if a.ld_library_path:
            self.env["LD_LIBRARY_PATH"] = a.ld_library_path
        self.env.setdefault("MLPERF_RUN_DIST_TIMEOUT_S", "120")
        self.env["RUST_LOG"] = "info"

    def record(self, name, ok, note):
        rec = {"part": "m", "side": name, "round": 1, "device": self.a.device, "ok": bool(ok),
               "value": None, "unit": None, "note": note}
        if not ok:
            rec["error"] = note
        self.records.append(rec)
        print(f"{'PASS' if ok else 'FAIL'} {name}: {note}", flush=True)
        if self.a.append:
            with open(self.a.append, "a") as f:
                f.write(json.dumps(rec) + "\n")

    def run(self, what, args, env=None, timeout=600):
        e = dict(self.env)
        e.update(env or {})
        t0 = time.time()
        p = subprocess.run(args, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=timeout)
        text = p.stdout.decode(errors="replace")
        self.outputs.append((what, text))
        with open(os.path.join(self.a.work, what + ".out"), "w") as f:
            f.write(f"$ {' '.join(args)}\n{text}")
        print(f"  {what}: exit {p.returncode} after {time.time() - t0:.1f} s", flush=True)
        return p.returncode, text

    def config(self, name, train_per_class, epochs, cuda_graph=False, reachable=True):
        """configs/resnet/tiny_cpu.toml with `train_per_class` images per class, `epochs` epochs
        (one eval each), optionally methods.cuda_graph (edits as the distributed tests make);
        reachable=False: a target it cannot reach, so the run is still training when a rank dies."""
        with open(os.path.join(self.a.configs, "resnet", "tiny_cpu.toml")) as f:
            base = f.read()
        text = (base.replace("train_per_class = 128", f"train_per_class = {train_per_class}")
                .replace("max_epochs = 24", f"max_epochs = {epochs}")
                .replace("eval_period = 4", "eval_period = 1")
                .replace("schedule_epochs = 24.0", f"schedule_epochs = {epochs}.0"))
        if not reachable:
            text = text.replace("target = 0.80", "target = 0.999")
        if text == base or (not reachable and "target = 0.999" not in text):
            raise SystemExit("configs/resnet/tiny_cpu.toml changed: update multiprocess_check.py's edits")
        if cuda_graph and self.a.device == "cuda":
            text = re.sub(r"^\[methods\]\n", "[methods]\ncuda_graph = true\n", text, flags=re.M)
        path = os.path.join(self.a.work, name + ".toml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def resnet(self, cfg, name, extra=()):
        return ["resnet", "--division", "open", "--config", cfg, "--device", self.a.device,
                "--seed", "4242", "--log", os.path.join(self.a.work, name + ".txt"),
                "--dump-params", self.dump(name), *extra]

    def dump(self, name):
        return os.path.join(self.a.work, name + ".safetensors")

    def launch(self, n):
        return [self.a.bin, "launch", "--nproc-per-node", str(n), "--master-port", "0", "--"]

    def share(self):
        return {"MLPERF_RUN_TEST_SHARE_GPU": "1"} if self.a.device == "cuda" else {}

    # ---- the checks ---------------------------------------------------------------------------
    def dp_equals_accumulating(self):
        cfg = self.config("tiny_dp", 32, 2)
        rc, t = self.run("dp", self.launch(2) + self.resnet(cfg, "dp"), self.share())
        ends = all(f"[rank {r}] run aborted: epoch limit reached" in t for r in range(2))
        if not ends:
            return self.record("dp-equals-accumulating", False, f"the 2-rank run did not end at its epoch limit (exit {rc}); see dp.out")
        self.run("em", [self.a.bin] + self.resnet(cfg, "em", ["--emulate-world", "2"]))
        self.run("one", [self.a.bin] + self.resnet(cfg, "one"))
        same_ranks, ranks = compare(self.dump("dp"), self.dump("dp") + ".rank1")
        bits, diff = compare(self.dump("dp"), self.dump("em"))
        _, control = compare(self.dump("dp"), self.dump("one"))
        ok = same_ranks and diff <= self.a.tol and control > self.a.tol
        self.record("dp-equals-accumulating", ok,
                    f"rank 0 vs rank 1 {'bit-identical' if same_ranks else f'differ ({ranks:.3e})'}; "
                    f"2 ranks vs 1 process accumulating: {'bit-identical' if bits else f'{diff:.3e}'} "
                    f"(tolerance {self.a.tol:g}); control, 1 process on the whole batch: {control:.3e} "
                    f"(must exceed the tolerance)")

    def overlap_equals_blocking(self):
        cfg = os.path.join(self.a.work, "tiny_dp.toml")
        rc, t = self.run("blocking", self.launch(2) + self.resnet(cfg, "blocking"),
                         {**self.share(), "MLPERF_RUN_GRAD_OVERLAP": "0"})
        if not os.path.exists(self.dump("blocking")):
            return self.record("overlap-equals-blocking", False, f"the blocking run wrote no parameters (exit {rc}); see blocking.out")
        bits, diff = compare(self.dump("dp"), self.dump("blocking"))
        tol = 0.0 if self.a.device == "cpu" else self.a.tol
        self.record("overlap-equals-blocking", diff <= tol,
                    f"overlapped vs blocking all-reduce: {'bit-identical' if bits else f'{diff:.3e}'} (tolerance {tol:g})")

    def rank_failure_abort(self):
        cfg = self.config("tiny_long", 128, 24, reachable=False)
        log = os.path.join(self.a.work, "kill_rank0.txt")
        port = free_port()
        procs = []
        for r in range(2):
            e = dict(self.env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                     WORLD_SIZE="2", LOCAL_RANK=str(r), MLPERF_RUN_DIST_TIMEOUT_S="30", **self.share())
            out = open(os.path.join(self.a.work, f"kill_rank{r}.out"), "w")
            procs.append((subprocess.Popen([self.a.bin, "resnet", "--division", "open", "--config", cfg,
                                            "--device", self.a.device, "--seed", "7", "--log",
                                            log if r == 0 else os.path.join(self.a.work, "kill_unused.txt")],
                                           env=e, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL), out))
        (p0, o0), (p1, o1) = procs
        t0 = time.time()
        while True:
            s = open(log).read() if os.path.exists(log) else ""
            if '"block_start"' in s:
                break
            if time.time() - t0 > 180 or p0.poll() is not None:
                p1.kill(), p0.kill()
                return self.record("rank-failure-abort", False, "training never started; see kill_rank0.out")
            time.sleep(0.1)
        time.sleep(1.5)
        p1.send_signal(signal.SIGKILL)
        killed = time.time()
        p1.wait()
        while p0.poll() is None and time.time() - killed < 60:
            time.sleep(0.05)
        secs = time.time() - killed
        if p0.poll() is None:
            p0.kill()
            p0.wait()
            o0.close(), o1.close()
            return self.record("rank-failure-abort", False, "rank 0 still running 60 s after rank 1 was killed")
        o0.close(), o1.close()
        text = open(os.path.join(self.a.work, "kill_rank0.out")).read()
        self.outputs.append(("kill_rank0", text))
        last = [json.loads(l.split(":::MLLOG", 1)[1]) for l in open(log) if ":::MLLOG" in l][-1]
        aborted = last.get("key") == "run_stop" and last.get("metadata", {}).get("status") == "aborted"
        self.record("rank-failure-abort", p0.returncode != 0 and aborted,
                    f"rank 0 ended {secs:.1f} s after rank 1 was killed, exit {p0.returncode}, "
                    f"its log's last event {last.get('key')} ({last.get('metadata', {}).get('status')})")

    def graph_group_of_one(self):
        cfg = self.config("tiny_graph", 32, 2, cuda_graph=True)
        twin = ["--emulate-cuda-graph", "2"] if self.a.device == "cpu" else []
        rc, t = self.run("graph_group", self.launch(1) + self.resnet(cfg, "graph_group", twin),
                         {"MLPERF_RUN_TEST_GROUP_OF_ONE": "1"})
        backend = "nccl" if self.a.device == "cuda" else "gloo"
        joined = f"joined the {backend} process group" in t
        self.run("graph_alone", [self.a.bin] + self.resnet(cfg, "graph_alone", twin))
        if not (os.path.exists(self.dump("graph_group")) and os.path.exists(self.dump("graph_alone"))):
            return self.record("graph-group-of-one", False, "a run wrote no parameters; see graph_group.out, graph_alone.out")
        graphs = [l[l.index("CUDA graphs"):].strip() for l in re.sub(r"\x1b\[[0-9;]*m", "", t).splitlines()
                  if "CUDA graphs" in l][:1]
        bits, diff = compare(self.dump("graph_group"), self.dump("graph_alone"))
        tol = 0.0 if self.a.device == "cpu" else self.a.tol
        self.record("graph-group-of-one", joined and diff <= tol,
                    f"{'joined' if joined else 'did NOT join'} a {backend} group of one; with vs without the "
                    f"group: {'bit-identical' if bits else f'{diff:.3e}'} (tolerance {tol:g}); "
                    f"{graphs[0] if graphs else 'no graph summary in the output'}")

    def graph_refused_sharing(self):
        cfg = os.path.join(self.a.work, "tiny_graph.toml")
        rc, t = self.run("graph_shared", self.launch(2) + self.resnet(cfg, "graph_shared"), self.share())
        self.record("graph-refused-sharing", rc != 0 and "methods.cuda_graph cannot run with" in t,
                    f"exit {rc}; " + (next((l.strip() for l in t.splitlines() if "cuda_graph cannot" in l), "no refusal in the output")[:240]))

    def second_rank_refused(self):
        cfg = os.path.join(self.a.work, "tiny_dp.toml")
        rc, t = self.run("no_test_mode", self.launch(2) + self.resnet(cfg, "no_test_mode"))
        # "rank 1 uses GPU <bus id> on host <host>, as rank 0 does: ..." (or 0 and 1 the other
        # way round: whichever claimed the GPU second)
        said = re.search(r"rank [01] uses GPU \S+ on host \S+, as rank [01] does: each rank needs a GPU of its own", t)
        self.record("second-rank-refused", rc != 0 and said is not None,
                    f"exit {rc}; " + (next((l.strip() for l in t.splitlines() if "GPU of its own" in l), "no refusal in the output")[:240]))

    def clean_shutdown(self):
        bad = [(w, l.strip()) for w, t in self.outputs for l in t.splitlines()
               if "panicked" in l or "destroy_process_group" in l]
        self.record("clean-shutdown", not bad,
                    f"{len(self.outputs)} process outputs read; " +
                    ("no panic, no destroy_process_group warning" if not bad else
                     "; ".join(f"{w}: {l[:160]}" for w, l in bad[:3])))


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="the mlperf-run binary")
    p.add_argument("--configs", required=True, help="the configs/ folder")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--work", help="scratch folder for configs, logs and dumps (default: a temporary one)")
    p.add_argument("--ld-library-path", help="LD_LIBRARY_PATH for our binary")
    p.add_argument("--tol", type=float, default=None,
                   help="relative tolerance of the 2-rank vs accumulating comparison (default 1e-5 on a CPU, 2e-3 on a GPU; on a GPU also of the overlap and graph checks, which are 0 on a CPU)")
    p.add_argument("--append", help="append one JSON record per check to this file")
    a = p.parse_args()
    if a.tol is None:
        a.tol = 1e-5 if a.device == "cpu" else 2e-3
    a.work = a.work or tempfile.mkdtemp(prefix="mp-check-")
    os.makedirs(a.work, exist_ok=True)
    c = Checks(a)
    steps = [c.dp_equals_accumulating, c.overlap_equals_blocking, c.rank_failure_abort, c.graph_group_of_one]
    if a.device == "cuda":
        steps.append(c.graph_refused_sharing)
        try:
            import torch
            if torch.cuda.device_count() == 1:
                steps.append(c.second_rank_refused)
        except ImportError:
            pass
    for s in steps:
        try:
            s()
        except Exception as e:  # a check that breaks is a failed check, and the others still run
            c.record(s.__name__.replace("_", "-"), False, f"{type(e).__name__}: {e}")
    c.clean_shutdown()
    failed = [r["side"] for r in c.records if not r["ok"]]
    print(f"multiprocess checks: {len(c.records) - len(failed)} passed, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else "") + f"; outputs in {a.work}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
