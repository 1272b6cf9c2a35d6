#!/usr/bin/env python3
"""PyTorch peer of examples/resnet_bench_step.rs: torchvision ResNet-50 (v1.5), SGD with momentum
0.9 and weight decay 5e-5 on all but BN/bias (torch's default implementation: foreach on CUDA),
cross-entropy, on the same kind of input: a fixed u8 NHWC batch in host memory (pinned on CUDA,
as a DataLoader with pin_memory=True hands it over), copied to the device (non-blocking) and
normalised with the ImageNet mean/std there every step, as our hand-off does. cuDNN benchmark
mode on, as ours (system.cudnn_benchmark, default true); --no-cudnn-benchmark turns it off.

Options as ours (ours take the methods as `--methods amp=...,channels_last`): --device cpu|cuda,
--amp none|bf16|fp16 (torch.autocast around forward + loss;
fp16 with torch.amp.GradScaler as PyTorch's AMP recipe has it: scale, backward, scaler.step
(which reads the overflow flag back to the host), scaler.update),
--channels-last (model and input in channels-last memory format), plus --mode eager|compile|both
(--compile = --mode compile): eager PyTorch, torch.compile of the model, or eager then compiled
in one process (one interpreter start-up instead of two; the compiled model continues from the
eager steps' weights). --blocks and --classes shrink the model for smoke tests.

Timed window: --warmup steps, a device sync, --steps steps, one device sync at the end; the loss
is read only after that. Prints one JSON line per mode: impl (pytorch-eager, pytorch-compile),
img_per_s, step_ms, steps_per_s and the window's wall-clock bounds (window_unix) for
GPU-utilisation sampling."""
import argparse
import json
import time

import torch
import torch.nn.functional as F
import torchvision


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=112)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads (0: torch's default)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--amp", choices=["none", "bf16", "fp16"], default="none")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--mode", choices=["eager", "compile", "both"], default="eager")
    ap.add_argument("--compile", action="store_true", help="the same as --mode compile")
    ap.add_argument("--no-cudnn-benchmark", action="store_true")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--blocks", default="3,4,6,3", help="bottlenecks per stage (ResNet-50: 3,4,6,3)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False")
    torch.backends.cudnn.benchmark = not a.no_cudnn_benchmark
    torch.manual_seed(1)
    blocks = [int(b) for b in a.blocks.split(",")]
    model = torchvision.models.resnet.ResNet(torchvision.models.resnet.Bottleneck, blocks, num_classes=a.classes)
    model = model.to(device)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    decay = [p for p in model.parameters() if p.ndim > 1]
    flat = [p for p in model.parameters() if p.ndim <= 1]
    opt = torch.optim.SGD(
        [{"params": decay, "weight_decay": 5e-5}, {"params": flat, "weight_decay": 0.0}], lr=0.1, momentum=0.9
    )
    mode = "compile" if a.compile else a.mode
    g = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (a.batch, a.size, a.size, 3), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, a.classes, (a.batch,), generator=g)
    if device.type == "cuda":
        images, labels = images.pin_memory(), labels.pin_memory()
    mean = torch.tensor([0.485 * 255, 0.456 * 255, 0.406 * 255], device=device)
    std = torch.tensor([0.229 * 255, 0.224 * 255, 0.225 * 255], device=device)
    amp = a.amp != "none"
    amp_dtype = torch.float16 if a.amp == "fp16" else torch.bfloat16
    scaler = torch.amp.GradScaler(device.type) if a.amp == "fp16" else None

    def step(net):
        x = images.to(device, non_blocking=True)  # the host -> device hand-off, every step (as ours)
        y = labels.to(device, non_blocking=True)
        x = ((x.float() - mean) / std).permute(0, 3, 1, 2).contiguous(memory_format=fmt)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
            loss = F.cross_entropy(net(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss.detach()

    def window(net, impl):
        t_build = time.perf_counter()
        for _ in range(a.warmup):
            step(net)
        sync(device)
        warm_s = time.perf_counter() - t_build
        w0 = time.time()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step(net)
        sync(device)
        dt = time.perf_counter() - t0
        w1 = time.time()
        loss = float(loss)
        if loss != loss:
            raise SystemExit("non-finite loss")
        print(json.dumps({"impl": impl, "device": a.device, "amp": a.amp, "channels_last": a.channels_last,
                          "steps": a.steps, "warmup": a.warmup, "threads": a.threads, "batch": a.batch,
                          "size": a.size, "img_per_s": a.batch * a.steps / dt, "step_ms": 1000 * dt / a.steps,
                          "steps_per_s": a.steps / dt, "warmup_s": warm_s, "last_loss": loss,
                          "window_unix": [w0, w1]}), flush=True)

    if mode in ("eager", "both"):
        window(model, "pytorch-eager")
    if mode in ("compile", "both"):
        window(torch.compile(model), "pytorch-compile")


if __name__ == "__main__":
    main()
