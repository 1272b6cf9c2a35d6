"""torch._scaled_mm alone, at the shape of mlperf-run's FP8 probe (src/fused/fp8.rs: x and W
16 x 32, so the forward GEMM is m 16 n 16 k 32), in the layouts and dtype pairs methods.fp8 uses
(shim/fp8.cpp): the forward E4M3 x E4M3 -> bf16, the input gradient E5M2 x E4M3 -> bf16, the
weight gradient E5M2 x E4M3 -> fp32, each with its dequantisation scales as tensors of their own
(torchao's way) and as 0-d views at an offset into one [3] tensor (what the shim passed before
2026-11-28; the first H200 run of the probe failed with CUBLAS_STATUS_NOT_SUPPORTED); the forward
also as the shim calls it, with cuBLASLt's fast accumulation and with a bf16 bias. Each --size
in turn (default: the probe's 16,16,32, then a BERT-Large linear's 512,1024,1024), so a failure
of the small shape alone tells the probe shape from the GEMM. One JSON line per case: which work
on this GPU and libtorch, without any mlperf-run code in the way.

  python3 scripts/bench/fp8_peer_probe.py [--size M,N,K ...]
"""
import argparse
import json

import torch


def case(name, a_dtype, b_dtype, out_dtype, views, m, n, k, fast_accum=False, bias=False):
    dev = "cuda"
    a = torch.randn(m, k, device=dev).to(a_dtype)
    b = torch.randn(n, k, device=dev).to(b_dtype)  # row-major [N, K]; .t() is column-major
    if views:
        inv = torch.tensor([0.5, 0.25, 0.125], device=dev)
        sa, sb = inv[1], inv[2]  # 0-d views at byte offsets 4 and 8
    else:
        sa = torch.tensor(0.25, device=dev)
        sb = torch.tensor(0.125, device=dev)
    bv = torch.randn(n, device=dev).to(out_dtype) if bias else None
    rec = {"case": name, "scales": "views" if views else "own", "m": m, "n": n, "k": k,
           "fast_accum": fast_accum, "bias": bias,
           "scale_addr_mod16": [sa.data_ptr() % 16, sb.data_ptr() % 16]}
    try:
        y = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, bias=bv, out_dtype=out_dtype,
                             use_fast_accum=fast_accum)
        ref = (a.float() * float(sa)) @ (b.float() * float(sb)).t()
        if bv is not None:
            ref = ref + bv.float()
        err = ((y.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
        rec.update(ok=True, rel_err=err)
    except Exception as e:  # noqa: BLE001 - the point is to report any failure
        rec.update(ok=False, error=str(e).splitlines()[0][:300])
    print(json.dumps(rec), flush=True)
    return rec["ok"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", nargs="+", default=["16,16,32", "512,1024,1024"],
                   help="M,N,K of the forward GEMM (several: each in turn)")
    sizes = [tuple(int(v) for v in s.split(",")) for s in p.parse_args().size]
    if not torch.cuda.is_available():
        print(json.dumps({"case": "none", "ok": False, "error": "no CUDA device"}))
        return 1
    e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2
    print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
                      "gpu": torch.cuda.get_device_name(),
                      "capability": list(torch.cuda.get_device_capability())}), flush=True)
    ok = True
    for m, n, k in sizes:
        for views in (False, True):
            ok &= case("forward e4m3 x e4m3 -> bf16", e4, e4, torch.bfloat16, views, m, n, k)
            ok &= case("input grad e5m2 x e4m3 -> bf16", e5, e4, torch.bfloat16, views, m, k, n)
            ok &= case("weight grad e5m2 x e4m3 -> fp32", e5, e4, torch.float32, views, n, k, m)
        # the forward as shim/fp8.cpp calls it: fast accumulation, with and without the bias
        ok &= case("forward e4m3 x e4m3 -> bf16", e4, e4, torch.bfloat16, False, m, n, k,
                   fast_accum=True)
        ok &= case("forward e4m3 x e4m3 -> bf16", e4, e4, torch.bfloat16, False, m, n, k,
                   fast_accum=True, bias=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
