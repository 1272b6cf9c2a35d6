"""Does nvJPEG's hardware batched decode still wait for the GPU's queued work when it need not
convert colours? (issue 40; results/gpu-bench/h200-2026-11-28-nvjpeg.txt measured that with
NVJPEG_OUTPUT_RGBI, the output mlperf-run asks for, nvjpegDecodeBatchedEx returns only once its
decode has run, after the SM-filling work queued before it on any stream: about 2/3 of the decode
then lands on a training step.)

For each output format (RGBI, then the engine's own planar YUV, NV12 and Y), with the calls
mlperf-run makes (src/data/imagenet/nvjpeg.rs: a hardware-backend handle, one state, one decode
parameter object per image with the format and a random ROI, nvjpegDecodeBatchedInitialize, then
nvjpegDecodeBatchedEx into device memory on a stream of its own), on baseline 4:2:0 JPEGs made
here (torchvision.io.encode_jpeg, quality 90, 300-800 x 250-600 px):
  alone: the call's host time and until the decode's stream is done, on an idle GPU;
  behind: the call's host time when about 70 ms of fp16 matmuls were queued just before it on
          another stream, and the matmuls' own time, for three kernel lengths: 8192^3 matmuls
          (about 1.7 ms each on an H100, the case measured before), 4096^3 (about 0.2 ms, a
          ResNet-50 step's longer convolutions at batch 256) and 2048^3 (about 0.03 ms, its
          short kernels), each queued at once as a CUDA graph replay so the queue is full when
          the decode is called. If the wait shrinks with the kernel length, the engine's work
          slips in between kernels and a real step (short kernels) hides it better than the
          8192^3 case suggests; if not, the wait is for the whole queue.
One JSON line per format and case; an nvJPEG status other than 0 is reported, not raised. If
"behind" is close to "alone" for some format, the colour conversion is what waited, and the
ragged crop/resize kernel can take that format instead.

  python3 scripts/bench/nvjpeg_overlap_probe.py [--images 128] [--reps 6] [--lib PATH]
"""
import argparse
import ctypes
import glob
import json
import os
import random
import statistics
import time

import torch

FORMATS = {"rgbi": 5, "yuv": 1, "nv12": 8, "y": 2}
HARDWARE = 3


class Image(ctypes.Structure):
    _fields_ = [("channel", ctypes.c_void_p * 4), ("pitch", ctypes.c_size_t * 4)]


def find_lib(explicit):
    if explicit:
        return explicit
    site = os.path.dirname(os.path.dirname(torch.__file__))
    for pat in ("torchvision.libs/libnvjpeg*.so*", "nvidia/cu13/lib/libnvjpeg.so*",
                "nvidia/nvjpeg/lib/libnvjpeg.so*"):
        hits = sorted(glob.glob(os.path.join(site, pat)))
        if hits:
            return hits[0]
    return "libnvjpeg.so.13"


def jpegs(n, seed):
    from torchvision.io import encode_jpeg
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        w, h = rng.randrange(300, 801) & ~1, rng.randrange(250, 601) & ~1
        img = (torch.rand(3, h // 8, w // 8) * 255).to(torch.uint8)
        img = torch.nn.functional.interpolate(img[None].float(), size=(h, w), mode="bilinear")
        img = img[0].clamp(0, 255).to(torch.uint8)
        out.append((bytes(encode_jpeg(img, quality=90).numpy()), w, h))
    return out


def roi(rng, w, h):
    rw, rh = max(2, rng.randrange(w // 4, w + 1) & ~1), max(2, rng.randrange(h // 4, h + 1) & ~1)
    return (rng.randrange(0, w - rw + 1) & ~1, rng.randrange(0, h - rh + 1) & ~1, rw, rh)


def planes(fmt, rw, rh):
    """(bytes, [(offset, pitch)]) of one ROI's output in `fmt`."""
    if fmt == "rgbi":
        return rw * rh * 3, [(0, rw * 3)]
    if fmt == "y":
        return rw * rh, [(0, rw)]
    if fmt == "nv12":
        return rw * rh + rw * (rh // 2), [(0, rw), (rw * rh, rw)]
    cw, ch = rw // 2, rh // 2  # planar YUV 4:2:0
    return rw * rh + 2 * cw * ch, [(0, rw), (rw * rh, cw), (rw * rh + cw * ch, cw)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=128)
    p.add_argument("--reps", type=int, default=6)
    p.add_argument("--lib", default=None)
    a = p.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": "no CUDA device"}))
        return 1
    path = find_lib(a.lib)
    nv = ctypes.CDLL(path)
    vp, ci = ctypes.c_void_p, ctypes.c_int
    handle, state = vp(), vp()
    st = nv.nvjpegCreateEx(HARDWARE, None, None, 0, ctypes.byref(handle))
    print(json.dumps({"lib": path, "gpu": torch.cuda.get_device_name(),
                      "torch": torch.__version__, "create_status": st}), flush=True)
    if st != 0:
        return 1
    nv.nvjpegJpegStateCreate(handle, ctypes.byref(state))
    files = jpegs(a.images, 7)
    rng = random.Random(11)
    rois = [roi(rng, w, h) for _, w, h in files]
    n = len(files)
    data = (ctypes.c_char_p * n)(*[f for f, _, _ in files])
    lengths = (ctypes.c_size_t * n)(*[len(f) for f, _, _ in files])
    params = (vp * n)()
    for i in range(n):
        nv.nvjpegDecodeParamsCreate(handle, ctypes.byref(params, i * ctypes.sizeof(vp)))
    stream = torch.cuda.Stream()
    other = torch.cuda.Stream()
    graphs = {}
    for side in (8192, 4096, 2048):
        x = torch.randn(side, side, device="cuda", dtype=torch.float16)
        y = torch.empty_like(x)
        # about 70 ms of work on an H100 whatever the side: 40 x 8192^3 = 40 x 64 x 4096^3 ...
        count = 40 * (8192 // side) ** 3
        with torch.cuda.stream(other):
            for _ in range(3):
                torch.mm(x, x, out=y)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=other):
            for _ in range(count):
                torch.mm(x, x, out=y)
        graphs[side] = (g, x, y)
    torch.cuda.synchronize()

    def queue_matmuls(side):
        with torch.cuda.stream(other):
            graphs[side][0].replay()

    for fmt, code in FORMATS.items():
        sizes = [planes(fmt, r[2], r[3]) for r in rois]
        arena = torch.empty(sum(s for s, _ in sizes), dtype=torch.uint8, device="cuda")
        images = (Image * n)()
        at = 0
        for i, ((size, pl), r) in enumerate(zip(sizes, rois)):
            for c, (off, pitch) in enumerate(pl):
                images[i].channel[c] = arena.data_ptr() + at + off
                images[i].pitch[c] = pitch
            at += size
            nv.nvjpegDecodeParamsSetOutputFormat(vp(params[i]), code)
            nv.nvjpegDecodeParamsSetROI(vp(params[i]), ci(r[0]), ci(r[1]), ci(r[2]), ci(r[3]))

        def decode():
            s = nv.nvjpegDecodeBatchedInitialize(handle, state, n, 1, code)
            if s == 0:
                s = nv.nvjpegDecodeBatchedEx(handle, state, data, lengths, images, params,
                                             vp(stream.cuda_stream))
            return s

        rec = {"format": fmt, "images": n, "arena_mb": round(arena.numel() / 1e6, 1)}
        status = decode()
        torch.cuda.synchronize()
        if status != 0:
            rec.update(ok=False, status=status)
            print(json.dumps(rec), flush=True)
            continue
        alone_call, alone_done = [], []
        behind_call, matmuls = {k: [] for k in graphs}, {k: [] for k in graphs}
        for _ in range(a.reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            decode()
            t1 = time.perf_counter()
            stream.synchronize()
            alone_call.append((t1 - t0) * 1e3)
            alone_done.append((time.perf_counter() - t0) * 1e3)
        for side in graphs:
            for _ in range(a.reps):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                queue_matmuls(side)
                t1 = time.perf_counter()
                decode()
                t2 = time.perf_counter()
                other.synchronize()
                t3 = time.perf_counter()
                behind_call[side].append((t2 - t1) * 1e3)
                matmuls[side].append((t3 - t0) * 1e3)
        med = lambda v: round(statistics.median(v), 2)  # noqa: E731
        rounds = {"alone_call": [round(v, 2) for v in alone_call]}
        rec.update(ok=True, alone_call_ms=med(alone_call), alone_done_ms=med(alone_done))
        for side in graphs:
            rec[f"behind_{side}_call_ms"] = med(behind_call[side])
            rec[f"behind_{side}_matmuls_ms"] = med(matmuls[side])
            rounds[f"behind_{side}_call"] = [round(v, 2) for v in behind_call[side]]
        rec["rounds"] = rounds
        print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
