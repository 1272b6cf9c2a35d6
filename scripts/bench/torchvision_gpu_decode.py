#!/usr/bin/env python3
"""The GPU-decode peer of mlperf-run's data path (scripts/bench_gpu.sh part e).

Reads the JPEG files of an ImageFolder (shuffled, whole batches; a thread pool reads the next
batch's files while the GPU works), decodes each batch on the GPU with
`torchvision.io.decode_jpeg(list, device="cuda")` (nvJPEG, batched), then per image
`torchvision.transforms.v2` RandomResizedCrop(size, scale=(scale_min, 1), antialias) +
RandomHorizontalFlip on the GPU, stacks and normalises to fp16 channels-last: the tensor a
training step takes, as mlperf-run's `data bench-imagenet --augment gpu` produces it. The first
batch is untimed; the rest of --epochs epochs is timed, with one device sync at the end. Prints
one JSON line with img_per_s.
"""
import argparse
import concurrent.futures
import json
import os
import random
import time

import torch
import torchvision
from torchvision.io import ImageReadMode, decode_jpeg, read_file
from torchvision.transforms import v2


def files_of(root):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    out = []
    for c in classes:
        d = os.path.join(root, c)
        out.extend(os.path.join(d, f) for f in sorted(os.listdir(d))
                   if f.lower().endswith((".jpeg", ".jpg")) and not f.startswith("."))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True, help="an ImageFolder (<class>/<image>.JPEG)")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--scale-min", type=float, default=0.05, help="RandomResizedCrop scale lower bound")
    p.add_argument("--device", default="cuda")
    p.add_argument("--threads", type=int, default=4, help="file-reading threads")
    a = p.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False")
    torch.manual_seed(1)
    files = files_of(a.dir)
    if len(files) < a.batch_size:
        raise SystemExit(f"{a.dir}: {len(files)} images, fewer than one batch of {a.batch_size}")
    aug = v2.Compose([v2.RandomResizedCrop(a.size, scale=(a.scale_min, 1.0), antialias=True),
                      v2.RandomHorizontalFlip()])
    mean = torch.tensor([0.485 * 255, 0.456 * 255, 0.406 * 255], device=dev).view(1, 3, 1, 1)
    std = torch.tensor([0.229 * 255, 0.224 * 255, 0.225 * 255], device=dev).view(1, 3, 1, 1)
    pool = concurrent.futures.ThreadPoolExecutor(max(1, a.threads))

    def batches(epoch):
        order = list(files)
        random.Random(epoch).shuffle(order)
        chunks = [order[i:i + a.batch_size] for i in range(0, len(order) - a.batch_size + 1, a.batch_size)]
        pending = pool.submit(lambda c: [read_file(f) for f in c], chunks[0])
        for k in range(len(chunks)):
            data = pending.result()
            if k + 1 < len(chunks):
                pending = pool.submit(lambda c: [read_file(f) for f in c], chunks[k + 1])
            yield data

    def step(data):
        if dev.type == "cuda":
            imgs = decode_jpeg(data, mode=ImageReadMode.RGB, device=dev)
        else:
            imgs = [torchvision.io.decode_jpeg(d, mode=ImageReadMode.RGB) for d in data]
        x = torch.stack([aug(i) for i in imgs])
        return ((x.float() - mean) / std).half().contiguous(memory_format=torch.channels_last)

    images, start, w0 = 0, None, None
    for epoch in range(a.epochs):
        for data in batches(epoch):
            x = step(data)
            if start is None:  # warm-up batch: nvJPEG's start-up, page cache
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                start, w0 = time.perf_counter(), time.time()
                continue
            images += x.shape[0]
    if dev.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - start
    print(json.dumps({"impl": "torchvision-decode_jpeg-gpu", "device": a.device, "batch": a.batch_size,
                      "size": a.size, "images": images, "seconds": secs, "img_per_s": images / secs,
                      "torchvision": torchvision.__version__, "window_unix": [w0, time.time()]}))


if __name__ == "__main__":
    main()
