#!/usr/bin/env python3
"""mkc's attention over packed sequences against PyTorch's, same process, same tensors.

samples/attention_varlen.mks (Q, K, V [H, T, D] holding N sequences, cumulative lengths L) runs
through mkc's C API on tensors PyTorch allocated. The baselines get the same packing:
  flash  torch.ops.aten._flash_attention_forward with cum_seq_q = cum_seq_k = L (FlashAttention-2's
         variable-length kernel, PyTorch's own), on the same data as [T, H, D];
  cuDNN  where every sequence has the same length S = T / N: SDPA's cuDNN backend on [N, H, S, D],
         the same work as a batch.
Each case is checked first (mkc's O against flash's and against an fp32 reference, sequence by
sequence, on two heads), then timed with CUDA events (median of --reps runs of --iters launches).
Packings: `equal` (T / N each) or `random` (N - 1 random cuts, seeded). Prints µs and ratios
(library µs / mkc µs: above 1 mkc is faster), the minimum and the geometric mean.

  python3 bench/attention_varlen_bench.py --lib .device/bin/libmkc.so [--cases HxTxDxNxCAUSALxPACK,...]
"""
import argparse
import math
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from mkc_capi import Mkc, rel_l2, time_us, write_csv

CASES = [f"{h}x{t}x{d}x{n}x{c}x{p}" for (h, t, n) in ((16, 16384, 8), (16, 16384, 32), (32, 8192, 4))
         for d in (64, 128) for c in (1, 0) for p in ("equal", "random")]


def packing(T, N, mode, gen):
    if mode == "equal":
        if T % N:
            raise SystemExit(f"attention_varlen_bench: equal packing needs N | T ({N}, {T})")
        cu = [i * (T // N) for i in range(N + 1)]
    elif mode == "random":
        cuts = sorted(torch.randint(0, T + 1, (N - 1,), generator=gen).tolist())
        cu = [0] + cuts + [T]
    else:
        raise SystemExit(f"attention_varlen_bench: packing `{mode}` is neither equal nor random")
    return cu


def reference32(q, k, v, cu, causal, heads):
    """fp32 attention sequence by sequence on the first `heads` heads, [heads, T, D]."""
    out = torch.zeros(heads, q.shape[1], v.shape[2], device=q.device, dtype=torch.float32)
    for a, b in zip(cu[:-1], cu[1:]):
        if b <= a:
            continue
        with sdpa_kernel([SDPBackend.MATH]):
            out[:, a:b] = F.scaled_dot_product_attention(
                q[:heads, a:b].float().unsqueeze(0), k[:heads, a:b].float().unsqueeze(0),
                v[:heads, a:b].float().unsqueeze(0), is_causal=bool(causal))[0]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "libmkc.so"))
    ap.add_argument("--schedule", default=os.path.join(os.path.dirname(__file__), "..", "samples",
                                                       "attention_varlen.mks"))
    ap.add_argument("--cases", default=",".join(CASES), help="HxTxDxNxCAUSALxPACK,...")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--csv", default="")
    args = ap.parse_args()
    mkc = Mkc(args.lib)
    gen = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    stream = torch.cuda.current_stream().cuda_stream
    rows, ratios = [], []
    print(f"{'H':>3} {'T':>6} {'D':>4} {'N':>4} {'causal':>6} {'pack':>6} | {'mkc us':>9} | "
          f"{'flash us':>9} {'cuDNN us':>9} | {'vs flash':>8} {'vs cuDNN':>8} | err vs fp32 (flash's)")
    for spec in args.cases.split(","):
        f = spec.split("x")
        if len(f) != 6:
            raise SystemExit(f"attention_varlen_bench: case `{spec}` is not HxTxDxNxCAUSALxPACK")
        H, T, D, N, causal = (int(x) for x in f[:5])
        cu = packing(T, N, f[5], gen)
        q, k, v = (torch.randn(H, T, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        lens = torch.tensor(cu, device="cuda", dtype=torch.int32)
        o = torch.full_like(q, float("nan"))
        kern = mkc.compile(args.schedule, {"H": H, "T": T, "D": D, "N": N, "MASK": causal + 1})
        for name, t in (("Q", q), ("K", k), ("V", v), ("L", lens), ("O", o)):
            mkc.bind(kern, name, t)
        mkc.launch(kern, stream)
        mkc.sync(kern)
        # FlashAttention-2's varlen through PyTorch: [T, H, D].
        qt, kt, vt = (x.transpose(0, 1).contiguous() for x in (q, k, v))
        maxlen = max(b - a for a, b in zip(cu[:-1], cu[1:]))

        def run_flash():
            return torch.ops.aten._flash_attention_forward(qt, kt, vt, lens, lens, maxlen, maxlen,
                                                           0.0, bool(causal), False)[0]

        o_flash = run_flash().transpose(0, 1)
        ref = reference32(q, k, v, cu, causal, 2)
        err, err_flash = rel_l2(o[:2], ref), rel_l2(o_flash[:2], ref)
        nan = torch.isnan(o).sum().item()
        t_mkc = time_us(lambda: mkc.launch(kern, stream), args.iters, args.reps)
        mkc.sync(kern)
        t_flash = time_us(run_flash, args.iters, args.reps)
        t_cudnn = float("nan")
        if f[5] == "equal":
            S = T // N
            qb, kb, vb = (x.view(H, N, S, D).transpose(0, 1) for x in (q, k, v))
            qb, kb, vb = (x.contiguous() for x in (qb, kb, vb))
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                t_cudnn = time_us(
                    lambda: F.scaled_dot_product_attention(qb, kb, vb, is_causal=bool(causal)),
                    args.iters, args.reps)
        r_flash, r_cudnn = t_flash / t_mkc, t_cudnn / t_mkc
        ratios.append(r_flash)
        print(f"{H:>3} {T:>6} {D:>4} {N:>4} {causal:>6} {f[5]:>6} | {t_mkc:>9.1f} | {t_flash:>9.1f} "
              f"{t_cudnn:>9.1f} | {r_flash:>8.3f} {r_cudnn:>8.3f} | {err:.2e} ({err_flash:.2e}), "
              f"NaN {nan}", flush=True)
        rows.append(dict(H=H, T=T, D=D, N=N, causal=causal, packing=f[5], mkc_us=t_mkc,
                         flash_us=t_flash, cudnn_us=t_cudnn, ratio_flash=r_flash,
                         ratio_cudnn=r_cudnn, rel_err_fp32=err, unwritten=nan,
                         paths=mkc.paths(kern)))
        mkc.free(kern)
        del q, k, v, o, qt, kt, vt
        torch.cuda.empty_cache()
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"packed attention vs flash varlen over {len(ratios)} cases: min {min(ratios):.3f}, "
              f"geometric mean {geo:.3f}")
    if args.csv:
        write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
