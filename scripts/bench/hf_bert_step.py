#!/usr/bin/env python3
"""Hugging Face peer of examples/bert_bench_step.rs: one BERT pre-training step of
`transformers.BertForPreTraining` (attn_implementation="sdpa"), the way a Hugging Face user
trains it: MLM labels at --preds positions per sequence (-100 elsewhere) plus NSP labels, the
model's own loss (MLM + NSP), bf16 autocast around forward + loss (--bf16),
torch.optim.AdamW(fused=True) with weight decay 0.01 excluding LayerNorm and bias,
clip_grad_norm_(1.0). Defaults: BERT-Large (24 x 1024, 16 heads, 4096, vocab 30,528), batch
32 x 512 tokens, every token real, 76 predictions per sequence. Note that Hugging Face's MLM
head runs on every token (then ignores the -100 labels); ours runs on the 76 masked positions.

--packed N: the same work as our packed rows (methods.packing): each row of --seq tokens holds N
sequences (lengths --seq/N, the last takes the remainder), position ids restart and token types
are per sequence, and a 4D block-diagonal boolean mask keeps attention within each sequence (how
a Hugging Face user trains packed rows without a varlen kernel: SDPA with a mask, so not
FlashAttention). Masked-LM positions avoid the sequences' first tokens; the NSP head reads the
row's first [CLS] only (Hugging Face's head has one per row; ours reads each sequence's, a
negligible part of the step). seq_per_s counts sequences (rows x N). --verify (with --packed, a
small fp32 model on the CPU is fine): before timing, the encoder's output of each sequence in a
packed row must equal that sequence run alone within 1e-3, and a control without the block
mask must miss by over 10x as much (exit 1 otherwise; measured on the CPU: 0 to 5e-7, control
0.015 to 0.024).

Timed window: --warmup steps, a device sync, --steps steps, one device sync at the end; the loss
is read only then. Prints one JSON line: seq_per_s, step_ms, window_unix. Runs on the CPU too
(small sizes: --layers 2 --hidden 128 --heads 2 --inter 512 --vocab 1000 --seq 64)."""
import argparse
import json
import sys
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
    ap.add_argument("--packed", type=int, default=0, help="sequences per packed row (0: one per row)")
    ap.add_argument("--verify", action="store_true", help="with --packed: check the packed rows' math first")
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
    position_ids = None
    starts = [0]
    if a.packed:
        rows = packed_rows(s, a.packed)
        starts, seg_row, pos_row, mask_row = rows
        seg = seg_row.expand(b, s).clone()
        position_ids = pos_row.expand(b, s).clone()
        mask = mask_row.expand(b, 1, s, s).clone()
        if a.verify:
            verify_packed(model, cfg, rows, ids[:2], device)
    # masked-LM positions: any token but a sequence's first
    candidates = torch.tensor([t for t in range(s) if t not in starts])
    pos = torch.stack([torch.sort(candidates[torch.randperm(len(candidates), generator=g)[:p]]).values
                       for _ in range(b)])
    labels = torch.full((b, s), -100, dtype=torch.long)
    labels.scatter_(1, pos, ids.gather(1, pos))
    nsp = torch.randint(0, 2, (b,), generator=g)
    ids, mask, seg, labels, nsp = (t.to(device) for t in (ids, mask, seg, labels, nsp))
    if position_ids is not None:
        position_ids = position_ids.to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.bf16):
            out = model(input_ids=ids, attention_mask=mask, token_type_ids=seg, position_ids=position_ids,
                        labels=labels, next_sentence_label=nsp)
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
    per_row = max(a.packed, 1)
    print(json.dumps({"impl": "hf-transformers", "device": a.device, "bf16": a.bf16, "batch": b, "seq": s,
                      "packed": a.packed, "steps": a.steps, "warmup": a.warmup,
                      "seq_per_s": b * per_row * a.steps / dt, "rows_per_s": b * a.steps / dt,
                      "step_ms": 1000 * dt / a.steps, "warmup_s": warm_s, "loss": loss,
                      "params": sum(p.numel() for p in model.parameters()), "window_unix": [w0, w1]}))


def packed_rows(s, n):
    """One packed row of s tokens holding n sequences: the sequences' first tokens, token types
    (each sequence's first half 0, second half 1), position ids (restarting per sequence) and the
    [1, 1, s, s] boolean mask (True: attend) that keeps attention within each sequence."""
    if n < 1 or s < 2 * n:
        raise SystemExit(f"--packed {n}: a row of {s} tokens cannot hold {n} sequences of 2 or more")
    lengths = [s // n] * n
    lengths[-1] += s - sum(lengths)
    starts, sid, seg, pos = [], [], [], []
    for i, length in enumerate(lengths):
        starts.append(len(sid))
        sid += [i] * length
        seg += [0] * (length // 2) + [1] * (length - length // 2)
        pos += list(range(length))
    sid = torch.tensor(sid)
    mask = (sid[:, None] == sid[None, :]).view(1, 1, s, s)
    return starts, torch.tensor(seg).view(1, s), torch.tensor(pos).view(1, s), mask


def verify_packed(model, cfg, rows, ids, device):
    """Each sequence of a packed row computes what it computes alone (the encoder's output, fp32,
    dropout off), and a control without the block mask does not: exit 1 otherwise."""
    starts, seg, pos, mask = rows
    s = seg.shape[1]
    ends = starts[1:] + [s]
    ids, seg, pos, mask = (t.to(device) for t in (ids, seg, pos, mask))
    b = ids.shape[0]
    was_training = model.training
    model.eval()
    with torch.no_grad():
        enc = lambda **kw: model.bert(**kw).last_hidden_state.float()
        packed = enc(input_ids=ids, token_type_ids=seg.expand(b, s), position_ids=pos.expand(b, s),
                     attention_mask=mask.expand(b, 1, s, s))
        crossing = enc(input_ids=ids, token_type_ids=seg.expand(b, s), position_ids=pos.expand(b, s))
        worst, control = 0.0, 0.0
        for lo, hi in zip(starts, ends):
            alone = enc(input_ids=ids[:, lo:hi], token_type_ids=seg[:, lo:hi].expand(b, -1))
            worst = max(worst, (packed[:, lo:hi] - alone).abs().max().item())
            control = max(control, (crossing[:, lo:hi] - alone).abs().max().item())
    model.train(was_training)
    print(json.dumps({"verify": "packed rows vs each sequence alone", "max_abs_diff": worst,
                      "control_without_block_mask": control}), file=sys.stderr)
    if not (worst < 1e-3 and control > 10 * worst):
        raise SystemExit(f"--verify failed: packed rows differ from the sequences alone by {worst:.3g} "
                         f"(control {control:.3g}; want < 1e-3 and the control above 10x that)")


if __name__ == "__main__":
    main()
