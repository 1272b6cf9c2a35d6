#!/usr/bin/env python3
"""Hugging Face peer of examples/bert_bench_step.rs: one BERT pre-training step of
`transformers.BertForPreTraining` (attn_implementation="sdpa"), the way a Hugging Face user
trains it: MLM labels at --preds positions per sequence (-100 elsewhere) plus NSP labels, the
model's own loss (MLM + NSP), bf16 autocast around forward + loss (--bf16),
torch.optim.AdamW(fused=True) with weight decay 0.01 excluding LayerNorm and bias,
clip_grad_norm_(1.0). Defaults: BERT-Large (24 x 1024, 16 heads, 4096, vocab 30,528), batch
32 x 512 tokens, every token real, 76 predictions per sequence. Note that Hugging Face's MLM
head runs on every token (then ignores the -100 labels); ours runs on the 76 masked positions.

Timed window: --warmup steps, a device sync, --steps steps, one device sync at the end; the loss
is read only then. Prints one JSON line: seq_per_s, step_ms, window_unix. Runs on the CPU too
(small sizes: --layers 2 --hidden 128 --heads 2 --inter 512 --vocab 1000 --seq 64)."""
import argparse
import json
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--inter", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=30528)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--preds", type=int, default=76)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast around forward + loss")
    a = ap.parse_args()
    from transformers import BertConfig, BertForPreTraining

    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=a.vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
                     num_attention_heads=a.heads, intermediate_size=a.inter, max_position_embeddings=max(512, a.seq),
                     hidden_act="gelu", type_vocab_size=2)
    with torch.device(device):  # initialise on the device (BERT-Large on the CPU takes seconds)
        model = BertForPreTraining._from_config(cfg, attn_implementation="sdpa")
    model.train()
    excluded = lambda n: "LayerNorm" in n or "layer_norm" in n or n.endswith("bias")
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    opt = torch.optim.AdamW([{"params": [p for n, p in params if not excluded(n)], "weight_decay": 0.01},
                             {"params": [p for n, p in params if excluded(n)], "weight_decay": 0.0}],
                            lr=1e-4, eps=1e-6, fused=True)
    b, s, p = a.batch, a.seq, a.preds
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, a.vocab, (b, s), generator=g)
    mask = torch.ones(b, s, dtype=torch.long)  # every token real
    seg = torch.zeros(b, s, dtype=torch.long)
    pos = torch.stack([torch.sort(torch.randperm(s - 1, generator=g)[:p] + 1).values for _ in range(b)])
    labels = torch.full((b, s), -100, dtype=torch.long)
    labels.scatter_(1, pos, ids.gather(1, pos))
    nsp = torch.randint(0, 2, (b,), generator=g)
    ids, mask, seg, labels, nsp = (t.to(device) for t in (ids, mask, seg, labels, nsp))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.bf16):
            out = model(input_ids=ids, attention_mask=mask, token_type_ids=seg, labels=labels,
                        next_sentence_label=nsp)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return out.loss.detach()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    t_w = time.perf_counter()
    for _ in range(a.warmup):
        step()
    sync()
    warm_s = time.perf_counter() - t_w
    w0 = time.time()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    sync()
    dt = time.perf_counter() - t0
    w1 = time.time()
    loss = float(loss)
    if loss != loss:
        raise SystemExit("non-finite loss")
    print(json.dumps({"impl": "hf-transformers", "device": a.device, "bf16": a.bf16, "batch": b, "seq": s,
                      "steps": a.steps, "warmup": a.warmup, "seq_per_s": b * a.steps / dt,
                      "step_ms": 1000 * dt / a.steps, "warmup_s": warm_s, "loss": loss,
                      "params": sum(p.numel() for p in model.parameters()), "window_unix": [w0, w1]}))


if __name__ == "__main__":
    main()
