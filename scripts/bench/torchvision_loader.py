#!/usr/bin/env python3
"""The peer of mlperf-run's ImageNet training pipeline.

Default mode, for scripts/bench_data.sh: torchvision ImageFolder + RandomResizedCrop +
RandomHorizontalFlip + PILToTensor (PIL decode, u8 output as mlperf-run's; --to-tensor float for
ToTensor), DataLoader with --workers worker processes (0: all in this process, on one core).
The first batch is untimed (imports, page cache, worker start); the rest of --epochs epochs is
timed. Prints one line: images, seconds, images/s.

--train mode, the end-to-end peer of `mlperf-run resnet` in scripts/bench_gpu.sh: trains
torchvision ResNet-50 from ImageFolder(DIR/train) with a DataLoader (num_workers = cores - 1
unless --workers, pin_memory, persistent workers, shuffled, whole batches) over
RandomResizedCrop(size, scale=(0.05, 1)) + RandomHorizontalFlip + PILToTensor (u8), normalised
on the device; bf16 autocast (--amp), channels-last (--channels-last), SGD momentum 0.9, wd 5e-5
on non-BN/bias parameters, cuDNN benchmark mode (as ours). Runs --warmup-steps steps, a device sync, then --steps timed steps
(continuing across epochs) and one sync at the end. Prints one JSON line with img_per_s.
"""
import argparse
import json
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def train(a) -> None:
    import json
    import os

    import torch.nn.functional as F
    import torchvision

    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False")
    workers = a.workers if a.workers >= 0 else max(1, (os.cpu_count() or 2) - 1)
    torch.backends.cudnn.benchmark = True  # as ours (system.cudnn_benchmark, default true)
    torch.manual_seed(1)
    tf = transforms.Compose(
        [
            transforms.RandomResizedCrop(a.size, scale=(a.scale_min, 1.0)),
            transforms.RandomHorizontalFlip(),
            transforms.PILToTensor(),
        ]
    )
    ds = datasets.ImageFolder(os.path.join(a.dir, "train"), transform=tf)
    loader = DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=workers, pin_memory=device.type == "cuda",
                        drop_last=True, persistent_workers=workers > 0)
    blocks = [int(b) for b in a.blocks.split(",")]
    model = torchvision.models.resnet.ResNet(torchvision.models.resnet.Bottleneck, blocks,
                                             num_classes=len(ds.classes)).to(device)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    model.train()
    decay = [p for p in model.parameters() if p.ndim > 1]
    flat = [p for p in model.parameters() if p.ndim <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-5}, {"params": flat, "weight_decay": 0.0}],
                          lr=0.1, momentum=0.9)
    mean = torch.tensor([0.485 * 255, 0.456 * 255, 0.406 * 255], device=device).view(1, 3, 1, 1)
    std = torch.tensor([0.229 * 255, 0.224 * 255, 0.225 * 255], device=device).view(1, 3, 1, 1)
    amp = a.amp == "bf16"

    def batches():
        while True:
            for x, y in loader:
                yield x, y

    it = batches()
    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    w0 = t0 = None
    t_start = time.perf_counter()
    for i in range(a.warmup_steps + a.steps):
        if i == a.warmup_steps:
            sync()
            w0, t0 = time.time(), time.perf_counter()
        x, y = next(it)
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        x = ((x.float() - mean) / std).contiguous(memory_format=fmt)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    sync()
    dt = time.perf_counter() - t0
    w1 = time.time()
    loss = float(loss.detach())
    if loss != loss:
        raise SystemExit("non-finite loss")
    print(json.dumps({"impl": "torchvision-dataloader", "device": a.device, "workers": workers,
                      "batch": a.batch_size, "size": a.size, "warmup_steps": a.warmup_steps, "steps": a.steps,
                      "images": len(ds), "img_per_s": a.batch_size * a.steps / dt, "step_ms": 1000 * dt / a.steps,
                      "warmup_s": t0 - t_start, "loss": loss, "window_unix": [w0, w1]}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True, help="an ImageFolder (<class>/<image>.JPEG)")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--scale-min", type=float, default=0.08, help="RandomResizedCrop scale lower bound")
    p.add_argument("--train", action="store_true", help="train ResNet-50 from DIR/train (see above)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda", help="--train: device")
    p.add_argument("--amp", choices=["none", "bf16"], default="bf16", help="--train: autocast")
    p.add_argument("--channels-last", action="store_true", help="--train: channels-last model and input")
    p.add_argument("--workers", type=int, default=-1,
                   help="DataLoader workers (--train default: cores - 1; benchmark default: 0)")
    p.add_argument("--to-tensor", choices=["u8", "float"], default="u8",
                   help="benchmark: PILToTensor (u8, as mlperf-run) or ToTensor (float)")
    p.add_argument("--warmup-steps", type=int, default=20, help="--train: untimed steps")
    p.add_argument("--steps", type=int, default=100, help="--train: timed steps")
    p.add_argument("--blocks", default="3,4,6,3", help="--train: bottlenecks per stage (ResNet-50: 3,4,6,3)")
    p.add_argument("--to-device", choices=["none", "cpu", "cuda"], default="none",
                   help="benchmark: also hand each batch to this device as the training input "
                        "(pinned copy, normalised fp16 channels-last), waited for at the end "
                        "(scripts/bench_gpu.sh part e)")
    p.add_argument("--json", action="store_true", help="benchmark: print one JSON result line")
    a = p.parse_args()
    if a.train:
        train(a)
        return

    torch.set_num_threads(1)
    torch.manual_seed(1)
    workers = max(0, a.workers)
    to_tensor = transforms.PILToTensor() if a.to_tensor == "u8" else transforms.ToTensor()
    tf = transforms.Compose(
        [
            transforms.RandomResizedCrop(a.size, scale=(a.scale_min, 1.0)),
            transforms.RandomHorizontalFlip(),
            to_tensor,
        ]
    )
    ds = datasets.ImageFolder(a.dir, transform=tf)
    to_device = a.to_device != "none"
    dev = torch.device(a.to_device if to_device else "cpu")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--to-device cuda: torch.cuda.is_available() is False")
    loader = DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=workers,
                        persistent_workers=workers > 0, pin_memory=dev.type == "cuda")
    mean = torch.tensor([0.485 * 255, 0.456 * 255, 0.406 * 255], device=dev).view(1, 3, 1, 1)
    std = torch.tensor([0.229 * 255, 0.224 * 255, 0.225 * 255], device=dev).view(1, 3, 1, 1)
    images = 0
    checksum = 0.0
    start = None
    for _ in range(a.epochs):
        for x, y in loader:
            if start is None:  # warm-up batch: imports, page cache, worker start
                start = time.perf_counter()
                w0 = time.time()
                continue
            images += x.shape[0]
            if to_device:
                x = x.to(dev, non_blocking=True)
                x = ((x.float() - mean) / std).half().contiguous(memory_format=torch.channels_last)
            else:
                checksum += float(x[:, :, ::37, ::41].float().sum())
    if dev.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - start
    if a.json:
        print(json.dumps({"impl": "torchvision-dataloader-data", "workers": workers, "to_device": a.to_device,
                          "batch": a.batch_size, "size": a.size, "images": images, "seconds": secs,
                          "img_per_s": images / secs, "window_unix": [w0, time.time()]}))
        return
    kind = "PILToTensor" if a.to_tensor == "u8" else "ToTensor"
    print(
        f"torchvision ImageFolder+RandomResizedCrop+flip+{kind} (PIL, num_workers={workers}): "
        f"{images} images in {secs:.2f}s = {images / secs:.1f} images/s "
        f"(checksum {checksum:.0f})"
    )


if __name__ == "__main__":
    main()
