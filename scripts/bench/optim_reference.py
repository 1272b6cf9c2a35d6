#!/usr/bin/env python3
"""Plain-PyTorch reference of the optimizer equations, for tests/numerics/optim_equivalence.rs.

Reads IN.npz (parameters l1.weight, l1.bias, bn.weight, bn.bias, l2.weight, l2.bias; data x
[K, N, D] float32 and y [K, N] int64), trains the small model
    logits = linear(relu(batch_norm(linear(x, l1), bn, training=True)), l2)
with torch's own cross_entropy(label_smoothing=a) for K steps with the optimizer in the JSON
config (argv[3]) and writes the parameters after every step to OUT.npz as "<step>.<name>".

LARS (MLPerf reference / TF LARSOptimizer), no trust ratio or weight decay on BN and bias:
    trust = eta * |w| / (|g| + wd * |w| + eps)   (1 if |w| == 0 or |g| == 0)
    v = m * v + lr * trust * (g + wd * w);  w -= v       (BN/bias: v = m * v + lr * g)
SGD: torch.optim.SGD itself (momentum, nesterov, weight decay only on non-BN/bias params).
With "fp16": {"init_scale", "growth_interval"} in the config: the forward runs under
torch.autocast("cpu", float16) and torch.amp.GradScaler scales the loss, unscales the gradients,
skips the steps that overflowed (torch.optim.SGD, not fused, or the LARS loop above as a
torch.optim.Optimizer: the step is simply not taken) and moves the scale; the loss is then the explicit log_softmax/gather/mean of mlperf-run's
cross_entropy_smoothed (no smoothing), so both sides run the same ops, and the scale after every
step goes to OUT.npz as "<step>.scale".
"""
import contextlib
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F


class Lars(torch.optim.Optimizer):
    """The LARS equations above, one parameter at a time (so GradScaler can drive it)."""

    def __init__(self, named, lr, cfg):
        self.named, self.cfg = named, cfg
        self.velocity = {n: torch.zeros_like(w) for n, w in named}
        super().__init__([w for _, w in named], {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        cfg, lr = self.cfg, self.param_groups[0]["lr"]
        m, wd = cfg["momentum"], cfg["weight_decay"]
        for n, w in self.named:
            g = w.grad
            if w.ndim <= 1:
                scaled = lr * g
            else:
                wn, gn = torch.linalg.vector_norm(w), torch.linalg.vector_norm(g)
                if wn > 0 and gn > 0:
                    trust = cfg["eta"] * wn / (gn + wd * wn + cfg["epsilon"])
                else:
                    trust = torch.tensor(1.0)
                scaled = lr * trust * (g + wd * w)
            self.velocity[n] = m * self.velocity[n] + scaled
            update = m * self.velocity[n] + scaled if cfg["nesterov"] else self.velocity[n]
            w -= update


def main():
    inp, out, cfg = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    torch.use_deterministic_algorithms(True)
    data = np.load(inp)
    names = ["l1.weight", "l1.bias", "bn.weight", "bn.bias", "l2.weight", "l2.bias"]
    p = {n: torch.tensor(data[n], dtype=torch.float32, requires_grad=True) for n in names}
    xs = torch.tensor(data["x"])
    ys = torch.tensor(data["y"]).long()
    lrs = cfg["lrs"]
    m, wd = cfg["momentum"], cfg["weight_decay"]
    decayed = [p[n] for n in names if p[n].ndim > 1]
    flat = [p[n] for n in names if p[n].ndim <= 1]
    if cfg["name"] == "sgd":
        opt = torch.optim.SGD(
            [{"params": decayed, "weight_decay": wd}, {"params": flat, "weight_decay": 0.0}],
            lr=lrs[0], momentum=m, nesterov=cfg["nesterov"], foreach=False,
        )
    else:
        opt = Lars([(n, p[n]) for n in names], lrs[0], cfg)
    fp16 = cfg.get("fp16")
    scaler = None
    if fp16:
        assert cfg["label_smoothing"] == 0.0
        scaler = torch.amp.GradScaler(
            "cpu", init_scale=fp16["init_scale"], growth_interval=fp16["growth_interval"]
        )
    result = {}
    for step, lr in enumerate(lrs):
        for t in p.values():
            t.grad = None
        region = torch.autocast("cpu", dtype=torch.float16) if fp16 else contextlib.nullcontext()
        with region:
            h = F.linear(xs[step], p["l1.weight"], p["l1.bias"])
            h = F.batch_norm(h, None, None, p["bn.weight"], p["bn.bias"], training=True, momentum=0.1, eps=1e-5)
            logits = F.linear(torch.relu(h), p["l2.weight"], p["l2.bias"])
            if fp16:
                logp = logits.log_softmax(-1, dtype=torch.float32)
                loss = (-logp.gather(1, ys[step].unsqueeze(1)).squeeze(1)).mean(dtype=torch.float32)
            else:
                loss = F.cross_entropy(logits, ys[step], label_smoothing=cfg["label_smoothing"])
        for g in opt.param_groups:
            g["lr"] = lr
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            result[f"{step}.scale"] = np.array(scaler.get_scale(), dtype=np.float64)
        else:
            loss.backward()
            opt.step()
        for n in names:
            result[f"{step}.{n}"] = p[n].detach().numpy().copy()
        result[f"{step}.loss"] = np.array(loss.item(), dtype=np.float64)
    np.savez(out, **result)


if __name__ == "__main__":
    main()
