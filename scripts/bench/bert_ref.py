#!/usr/bin/env python3
"""Plain-PyTorch peer of mlperf-run's BERT: the test oracle and the benchmark's baseline.

A BertForPreTraining-like module written from the published architecture with the reference
checkpoint's parameter names (bert.embeddings.word_embeddings.weight,
bert.encoder.layer.N.attention.self.query.weight, cls.predictions.transform.dense.weight,
cls.predictions.bias, cls.seq_relationship.weight, ...), attention as the reference computes it
(explicit softmax with an additive -10000 padding mask), and LAMB/AdamW written out from the
equations in src/optim/lamb.rs.

Subcommands (run with the venv's python, see scripts/setup.sh):
  count      --config JSON [--config JSON ...]     print parameter counts, one a line
  make-ckpt  --config JSON --seed N --out X.pt     random init, saved as {'model': state_dict}
  forward    --config JSON --ckpt X.pt --inputs IN.safetensors --out OUT.safetensors
  lamb       --inputs IN.safetensors --out OUT.safetensors --hparams JSON
  bench      --config JSON --batch B --seq S --steps N [--warmup W] [--pad-fraction F] [--sdpa]
             [--device cpu|cuda] [--bf16]: AdamW (foreach) + clip 1.0 training steps; the window
             is W warm-up steps, a device sync, N steps, one sync at the end (seq_per_s, step_ms)
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def cfg_from(js):
    c = dict(max_position=512, type_vocab_size=2, hidden_dropout=0.1, attention_dropout=0.1, layer_norm_eps=1e-12)
    c.update(json.loads(js))
    return c


class SelfAttention(nn.Module):
    def __init__(self, c, sdpa):
        super().__init__()
        h = c["hidden_size"]
        self.nh = c["num_heads"]
        self.query = nn.Linear(h, h)
        self.key = nn.Linear(h, h)
        self.value = nn.Linear(h, h)
        self.dropout = nn.Dropout(c["attention_dropout"])
        self.sdpa = sdpa

    def split(self, x):
        b, s, h = x.shape
        return x.view(b, s, self.nh, h // self.nh).permute(0, 2, 1, 3)

    def forward(self, x, add_mask, bool_mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        if self.sdpa:
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask,
                                                 dropout_p=self.dropout.p if self.training else 0.0)
        else:
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + add_mask
            ctx = torch.matmul(self.dropout(F.softmax(scores, dim=-1)), v)
        b, nh, s, d = ctx.shape
        return ctx.permute(0, 2, 1, 3).reshape(b, s, nh * d)


class DenseLN(nn.Module):
    def __init__(self, c, inp):
        super().__init__()
        self.dense = nn.Linear(inp, c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.dropout = nn.Dropout(c["hidden_dropout"])

    def forward(self, x, residual):
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class Attention(nn.Module):
    def __init__(self, c, sdpa):
        super().__init__()
        self.self = SelfAttention(c, sdpa)
        self.output = DenseLN(c, c["hidden_size"])

    def forward(self, x, add_mask, bool_mask):
        return self.output(self.self(x, add_mask, bool_mask), x)


class Intermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["intermediate_size"])

    def forward(self, x):
        return F.gelu(self.dense(x))


class Layer(nn.Module):
    def __init__(self, c, sdpa):
        super().__init__()
        self.attention = Attention(c, sdpa)
        self.intermediate = Intermediate(c)
        self.output = DenseLN(c, c["intermediate_size"])

    def forward(self, x, add_mask, bool_mask):
        a = self.attention(x, add_mask, bool_mask)
        return self.output(self.intermediate(a), a)


class Encoder(nn.Module):
    def __init__(self, c, sdpa):
        super().__init__()
        self.layer = nn.ModuleList([Layer(c, sdpa) for _ in range(c["num_layers"])])

    def forward(self, x, add_mask, bool_mask):
        for l in self.layer:
            x = l(x, add_mask, bool_mask)
        return x


class Embeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.word_embeddings = nn.Embedding(c["vocab_size"], h)
        self.position_embeddings = nn.Embedding(c["max_position"], h)
        self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], h)
        self.LayerNorm = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.dropout = nn.Dropout(c["hidden_dropout"])

    def forward(self, ids, seg):
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        e = self.word_embeddings(ids) + self.position_embeddings(pos) + self.token_type_embeddings(seg)
        return self.dropout(self.LayerNorm(e))


class Pooler(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])

    def forward(self, x):
        return torch.tanh(self.dense(x[:, 0]))


class BertModel(nn.Module):
    def __init__(self, c, sdpa):
        super().__init__()
        self.embeddings = Embeddings(c)
        self.encoder = Encoder(c, sdpa)
        self.pooler = Pooler(c)

    def forward(self, ids, seg, mask):
        add_mask = (1.0 - mask[:, None, None, :].float()) * -10000.0
        bool_mask = mask[:, None, None, :] != 0
        seq = self.encoder(self.embeddings(ids, seg), add_mask, bool_mask)
        return seq, self.pooler(seq)


class Transform(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, x):
        return self.LayerNorm(F.gelu(self.dense(x)))


class LMHead(nn.Module):
    def __init__(self, c, emb_weight):
        super().__init__()
        self.transform = Transform(c)
        self.decoder = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        self.decoder.weight = emb_weight  # tied, as in the reference
        self.bias = nn.Parameter(torch.zeros(c["vocab_size"]))

    def forward(self, x):
        return self.decoder(self.transform(x)) + self.bias


class Heads(nn.Module):
    def __init__(self, c, emb_weight):
        super().__init__()
        self.predictions = LMHead(c, emb_weight)
        self.seq_relationship = nn.Linear(c["hidden_size"], 2)


class BertForPreTraining(nn.Module):
    def __init__(self, c, sdpa=False):
        super().__init__()
        self.bert = BertModel(c, sdpa)
        self.cls = Heads(c, self.bert.embeddings.word_embeddings.weight)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, ids, seg, mask, positions=None):
        seq, pooled = self.bert(ids, seg, mask)
        if positions is not None:
            seq = torch.gather(seq, 1, positions.unsqueeze(-1).expand(-1, -1, seq.shape[-1]))
        return self.cls.predictions(seq), self.cls.seq_relationship(pooled)


def cmd_count(a):
    for js in a.config:  # one count per line
        with torch.device("meta"):  # shapes only: no memory, no init time
            m = BertForPreTraining(cfg_from(js))
        print(sum(p.numel() for p in m.parameters()))


def cmd_make_ckpt(a):
    torch.manual_seed(a.seed)
    m = BertForPreTraining(cfg_from(a.config))
    with torch.no_grad():  # non-trivial LayerNorm and bias values, so a wrong mapping shows
        for n, p in m.named_parameters():
            if "LayerNorm" in n or n.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    torch.save({"model": m.state_dict()}, a.out)


def cmd_forward(a):
    from safetensors.torch import load_file, save_file
    c = cfg_from(a.config)
    m = BertForPreTraining(c)
    sd = torch.load(a.ckpt, map_location="cpu", weights_only=True)["model"]
    m.load_state_dict(sd)
    m.eval()
    x = load_file(a.inputs)
    with torch.no_grad():
        mlm, nsp = m(x["input_ids"].long(), x["segment_ids"].long(), x["input_mask"].long())
    save_file({"mlm": mlm.contiguous(), "nsp": nsp.contiguous()}, a.out)


def lamb_steps(params, grads_per_step, h):
    """params: dict name -> tensor (updated in place); grads_per_step: list of dicts."""
    names = sorted(params)
    m = {n: torch.zeros_like(params[n]) for n in names}
    v = {n: torch.zeros_like(params[n]) for n in names}
    for i, grads in enumerate(grads_per_step):
        step = i  # 0-based update index for the schedule
        t = i + 1
        base, total, warm, start = h["base_lr"], h["total_steps"], h["warmup_steps"], h["start_warmup_step"]
        s = min(step, total)
        lr = (base - h["end_lr"]) * (1 - s / total) ** h["power"] + h["end_lr"]
        if warm > 0 and step - start < warm:
            lr = base * max(step - start, 0) / warm
        gn = torch.sqrt(sum((grads[n].double() ** 2).sum() for n in names)).float()
        coef = h["max_grad_norm"] / max(gn, torch.tensor(h["max_grad_norm"])) if h["max_grad_norm"] else 1.0
        for n in names:
            w = params[n]
            g = grads[n] * coef
            m[n] = h["beta1"] * m[n] + (1 - h["beta1"]) * g
            v[n] = h["beta2"] * v[n] + (1 - h["beta2"]) * g * g
            mh = m[n] / (1 - h["beta1"] ** t)
            vh = v[n] / (1 - h["beta2"] ** t)
            u = mh / (vh.sqrt() + h["eps"])
            excluded = "LayerNorm" in n or "layer_norm" in n or n.endswith("bias")
            if not excluded:
                u = u + h["weight_decay"] * w
            r = 1.0
            if h["trust_ratio"] and not excluded:
                wn, un = w.norm(), u.norm()
                r = (wn / un) if (wn > 0 and un > 0) else 1.0
            params[n] = w - lr * r * u
    return params


def cmd_lamb(a):
    from safetensors.torch import load_file, save_file
    h = json.loads(a.hparams)
    x = load_file(a.inputs)
    params = {k[len("param/"):]: v.double() for k, v in x.items() if k.startswith("param/")}
    nsteps = h["steps"]
    grads = [{n: x[f"grad{i}/{n}"].double() for n in params} for i in range(nsteps)]
    out = lamb_steps(params, grads, h)
    save_file({n: t.float().contiguous() for n, t in out.items()}, a.out)


def cmd_bench(a):
    torch.set_num_threads(a.threads) if a.threads else None
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False")
    torch.manual_seed(0)
    c = cfg_from(a.config)
    with torch.device(device):  # initialise on the device (BERT-Large on the CPU takes seconds)
        m = BertForPreTraining(c, sdpa=a.sdpa)
    m.train()
    decay = [p for n, p in m.named_parameters() if not ("LayerNorm" in n or n.endswith("bias"))]
    nodecay = [p for n, p in m.named_parameters() if ("LayerNorm" in n or n.endswith("bias"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=1e-4, eps=1e-6, foreach=True)
    b, s, p = a.batch, a.seq, a.predictions
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, c["vocab_size"], (b, s), generator=g)
    # every sequence has round(S * (1 - pad_fraction)) real tokens, the rest padding
    lengths = torch.full((b,), int(round(s * (1 - a.pad_fraction))))
    mask = (torch.arange(s)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    seg = torch.zeros_like(ids)
    pos = torch.stack([torch.sort(torch.randperm(int(l) - 1, generator=g)[:p] + 1).values for l in lengths])
    mids = torch.gather(ids, 1, pos)
    nsp = torch.randint(0, 2, (b,), generator=g)
    ids, mask, seg, pos, mids, nsp = (t.to(device) for t in (ids, mask, seg, pos, mids, nsp))
    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    # per-step phase times are host times: only meaningful on the CPU (CUDA runs asynchronously,
    # and syncing every step would distort the window), so they are reported for the CPU only
    times = []  # (step, forward+loss, backward, clip+optimizer) seconds
    w0 = t_window = None
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            sync()
            w0, t_window = time.time(), time.perf_counter()
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.bf16):
            mlm_logits, nsp_logits = m(ids, seg, mask, pos)
            loss = F.cross_entropy(mlm_logits.reshape(-1, c["vocab_size"]).float(), mids.reshape(-1)) + \
                F.cross_entropy(nsp_logits.float(), nsp)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= a.warmup:
            t3 = time.perf_counter()
            times.append((t3 - t0, t1 - t0, t2 - t1, t3 - t2))
    sync()
    window = time.perf_counter() - t_window
    w1 = time.time()
    med = [sorted(t[k] for t in times)[len(times) // 2] for k in range(4)]
    out = {"impl": "pytorch-eager", "device": a.device, "bf16": a.bf16, "batch": b, "seq": s, "steps": a.steps,
           "warmup": a.warmup, "seq_per_s": b * a.steps / window, "step_ms": 1000 * window / a.steps,
           "window_unix": [w0, w1], "loss": float(loss.detach())}
    if not cuda:
        out.update({"median_step_s": med[0], "forward_s": med[1], "backward_s": med[2], "optimizer_s": med[3]})
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("count"); p.add_argument("--config", required=True, action="append")
    p = sub.add_parser("make-ckpt"); p.add_argument("--config", required=True); p.add_argument("--seed", type=int, default=0); p.add_argument("--out", required=True)
    p = sub.add_parser("forward")
    for k in ("--config", "--ckpt", "--inputs", "--out"):
        p.add_argument(k, required=True)
    p = sub.add_parser("lamb")
    for k in ("--inputs", "--out", "--hparams"):
        p.add_argument(k, required=True)
    p = sub.add_parser("bench"); p.add_argument("--config", required=True)
    p.add_argument("--batch", type=int, default=16); p.add_argument("--seq", type=int, default=128)
    p.add_argument("--predictions", type=int, default=20); p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1); p.add_argument("--pad-fraction", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=0); p.add_argument("--sdpa", action="store_true")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast around forward + loss")
    a = ap.parse_args()
    {"count": cmd_count, "make-ckpt": cmd_make_ckpt, "forward": cmd_forward, "lamb": cmd_lamb, "bench": cmd_bench}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
