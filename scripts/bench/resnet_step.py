#!/usr/bin/env python3
"""PyTorch eager peer of examples/resnet_bench_step.rs: torchvision ResNet-50 (v1.5), SGD with
momentum 0.9 and weight decay 5e-5 on all but BN/bias, cross-entropy, fp32, NCHW, on the same
kind of input: a u8 NHWC batch normalised with the ImageNet mean/std each step.
Prints one JSON line with steps/s (after warm-up steps)."""
import argparse
import json
import time

import torch
import torch.nn.functional as F
import torchvision


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=112)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = torchvision.models.resnet50(num_classes=1000)
    model.train()
    decay = [p for p in model.parameters() if p.ndim > 1]
    flat = [p for p in model.parameters() if p.ndim <= 1]
    opt = torch.optim.SGD(
        [{"params": decay, "weight_decay": 5e-5}, {"params": flat, "weight_decay": 0.0}], lr=0.1, momentum=0.9
    )
    images = torch.randint(0, 256, (a.batch, a.size, a.size, 3), dtype=torch.uint8)
    labels = torch.randint(0, 1000, (a.batch,))
    mean = torch.tensor([0.485 * 255, 0.456 * 255, 0.406 * 255])
    std = torch.tensor([0.229 * 255, 0.224 * 255, 0.225 * 255])

    def step():
        x = ((images.float() - mean) / std).permute(0, 3, 1, 2).contiguous()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), labels)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    dt = time.perf_counter() - t0
    print(json.dumps({"impl": "pytorch-eager", "steps": a.steps, "threads": a.threads, "batch": a.batch,
                      "size": a.size, "steps_per_s": a.steps / dt, "last_loss": loss}))


if __name__ == "__main__":
    main()
