#!/usr/bin/env python3
"""Why fused BN+add+ReLU and the eager chain differ in their gradients, on the CPU.

examples/fused_bn_check on an H200 (2026-11-26) found, for the residual cases only, dx / dz /
dweight of the cuDNN fused op and of the eager chain `relu(bn(x) + z)` apart by a relative L2
of about 3.0e-2 in bf16 and 1.06e-2 in fp16, on every shape. The eager chain rounds bn(x) to the
activation dtype before the add, so its ReLU gate flips where bn(x) + z lies within a rounding
of 0; a gate that flips turns a gradient element on or off. A fused kernel adds in fp32 and
rounds once. This script computes both on the same rounded inputs and an fp64 reference:

  eager      F.relu(F.batch_norm(x) + z) in the low dtype (what PyTorch eager runs)
  fp32 add   BN and the add in fp32, ReLU, one rounding at the end (what a fused kernel does)

and prints the relative L2 of dx and dweight between them and of each against fp64. Expected:
eager vs fp32 add about as far apart as the GPU measured, and the fp32 add far closer to fp64
than the eager chain (so the difference is the eager chain's rounding, not a fused-kernel
error). The fp16 / bf16 ratio (about 1/3) is that of the square roots of their rounding steps.

  python3 scripts/bench/bn_add_relu_rounding.py [--batch 32] [--channels 256] [--size 28]
"""
import argparse

import torch
import torch.nn.functional as F

EPS = 1e-5


def grads(x, z, dy, weight, bias, forward):
    """dx and dweight of sum(forward(x, z) * dy)."""
    x = x.clone().requires_grad_()
    z = z.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    b = bias.clone().requires_grad_()
    y = forward(x, z, w, b)
    y.backward(dy.to(y.dtype))
    return x.grad.double(), w.grad.double()


def eager(x, z, w, b):
    return F.relu(F.batch_norm(x, None, None, w, b, True, 0.1, EPS) + z)


def fp32_add(x, z, w, b):
    s = F.batch_norm(x.float(), None, None, w, b, True, 0.1, EPS) + z.float()
    return F.relu(s).to(x.dtype)


def rel_l2(a, ref):
    return ((a - ref).norm() / ref.norm()).item()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--channels", type=int, default=256)
    p.add_argument("--size", type=int, default=28)
    a = p.parse_args()
    torch.manual_seed(0)
    shape = (a.batch, a.channels, a.size, a.size)
    x = torch.randn(shape).to(memory_format=torch.channels_last)
    z, dy = torch.randn_like(x), torch.randn_like(x)
    weight = torch.rand(a.channels) + 0.5
    bias = torch.randn(a.channels) * 0.1
    print(f"BN + add + ReLU, {list(shape)} channels-last, relative L2 of the gradients")
    for dtype in (torch.bfloat16, torch.float16):
        xl, zl, dyl = x.to(dtype), z.to(dtype), dy.to(dtype)
        ref = grads(xl.double(), zl.double(), dyl.double(), weight.double(), bias.double(), eager)
        e = grads(xl, zl, dyl, weight, bias, eager)
        f = grads(xl, zl, dyl, weight, bias, fp32_add)
        for i, name in enumerate(("dx", "dweight")):
            print(f"  {str(dtype).removeprefix('torch.'):<9} {name:<8} eager vs fp32 add {rel_l2(e[i], f[i]):.2e}   "
                  f"eager vs fp64 {rel_l2(e[i], ref[i]):.2e}   fp32 add vs fp64 {rel_l2(f[i], ref[i]):.2e}")


if __name__ == "__main__":
    main()
