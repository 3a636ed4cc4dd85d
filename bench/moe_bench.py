#!/usr/bin/env python3
"""mkc's MoE kernels against PyTorch (torch._grouped_mm), same process, same tensors, one rank.

samples/moe_dispatch_gemm.mks (dispatch + the experts' first projection in one kernel) against
torch._grouped_mm of FC1 alone on rows already sorted by expert; samples/moe_ffn_combine.mks
(dispatch + SwiGLU FFN + weighted combine) against the PyTorch sequence (sort by expert, gather,
three grouped GEMMs, silu * up, weighted index_add back to the tokens). mkc runs through its C
API (runtime/capi.h, libmkc.so) on PyTorch's tensors and stream. Each case is checked first (mkc's
output against PyTorch's, both against an fp32 reference on a few experts), then timed with CUDA
events: the median of --reps runs of --iters calls. --csv FILE writes one row per case.

  python3 bench/moe_bench.py --lib .device/bin/libmkc.so [--tokens 128,4096] [--routing uniform]
      [--trace DIR]
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

from mkc_capi import Mkc, rel_l2, time_us, write_csv

HERE = os.path.dirname(os.path.abspath(__file__))


def routing(T, E, K, kind, gen):
    """Top-k distinct experts per token: uniform, skewed (a few hot experts) or with a quarter of
    the experts never chosen."""
    if kind == "uniform":
        w = torch.ones(E)
    elif kind == "skewed":
        w = 1.0 / torch.arange(1, E + 1, dtype=torch.float32) ** 1.2
    elif kind == "empty":
        w = torch.ones(E)
        w[torch.randperm(E, generator=gen)[: E // 4]] = 0
    else:
        raise SystemExit(f"moe_bench: unknown routing {kind} (uniform, skewed, empty)")
    route = torch.multinomial(w.expand(T, E), K, replacement=False, generator=gen)
    return route.to(torch.int32)


def sort_by_expert(route, E):
    """The order mkc's dispatch gives at one rank: expert-major, then (token, k) order."""
    flat = route.reshape(-1).long()
    perm = torch.sort(flat, stable=True).indices
    counts = torch.bincount(flat, minlength=E)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    return perm, counts, offs


def grouped_mm(a, w, offs):
    return torch._grouped_mm(a, w, offs=offs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.path.join(HERE, "..", "libmkc.so"))
    ap.add_argument("--samples", default=os.path.join(HERE, "..", "samples"))
    ap.add_argument("--tokens", default="128,4096", help="T values for moe_dispatch_gemm")
    ap.add_argument("--ffn-tokens", default="4096", help="T values for moe_ffn_combine ('' skips)")
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--ffn", type=int, default=2048)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--routing", default="uniform")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--csv", default="")
    ap.add_argument("--trace", default="", help="directory: one traced launch per case, "
                    "<case>_T<T>.json (summarise with tools/trace_summary.py)")
    args = ap.parse_args()
    mkc = Mkc(args.lib)
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    H, Fd, E, K = args.hidden, args.ffn, args.experts, args.topk
    rows = []
    W1 = (torch.randn(E, H, Fd, device="cuda") / H ** 0.5).to(torch.bfloat16)
    print(f"moe_dispatch_gemm (H {H}, F {Fd}, E {E}, top-{K}, {args.routing}), one rank:")
    print(f"{'T':>6} | {'mkc us':>9} | {'FC1 us':>9} {'TB/s':>5} | {'FC1 / mkc':>9} | err vs torch,"
          f" vs fp32")
    for T in (int(t) for t in filter(None, args.tokens.split(","))):
        X = torch.randn(T, H, device="cuda").to(torch.bfloat16)
        route = routing(T, E, K, args.routing, gen).cuda()
        perm, counts, offs = sort_by_expert(route, E)
        Xs = X[perm // K]
        Y = torch.full((T * K, Fd), float("nan"), device="cuda", dtype=torch.bfloat16)
        kern = mkc.compile(os.path.join(args.samples, "moe_dispatch_gemm.mks"),
                           {"T": T, "H": H, "F": Fd, "E": E, "TOPK": K})
        for name, t in (("X", X), ("route", route), ("W1", W1), ("Y", Y)):
            mkc.bind(kern, name, t)
        mkc.launch(kern, stream)
        mkc.sync(kern)
        ref = grouped_mm(Xs, W1, offs)
        # fp32 on the first experts with rows.
        n32 = int(counts[:4].sum().item())
        ref32 = torch.cat([Xs[int(o - c):int(o)].float() @ W1[e].float()
                           for e, (c, o) in enumerate(zip(counts[:4], offs[:4]))]) if n32 else None
        err, err32 = rel_l2(Y, ref), rel_l2(Y[:n32], ref32) if n32 else 0.0
        nan = torch.isnan(Y).sum().item()
        t_mkc = time_us(lambda: mkc.launch(kern, stream), args.iters, args.reps)
        mkc.sync(kern)
        if args.trace:
            mkc.trace(kern, os.path.join(args.trace, f"moe_dispatch_gemm_T{T}.json"))
        t_fc1 = time_us(lambda: grouped_mm(Xs, W1, offs), args.iters, args.reps)
        # Weights of experts that got rows, once, plus the rows in and out.
        nbytes = int((counts > 0).sum().item()) * H * Fd * 2 + T * K * (H + Fd) * 2
        print(f"{T:>6} | {t_mkc:>9.1f} | {t_fc1:>9.1f} {nbytes / t_fc1 / 1e6:>5.2f} | "
              f"{t_fc1 / t_mkc:>9.3f} | {err:.2e}, {err32:.2e} (NaN {nan})", flush=True)
        rows.append(dict(case="moe_dispatch_gemm", T=T, routing=args.routing, mkc_us=t_mkc,
                         torch_us=t_fc1, ratio=t_fc1 / t_mkc, rel_err=err, rel_err_fp32=err32,
                         unwritten=nan, paths=mkc.paths(kern)))
        mkc.free(kern)
        del X, Y, Xs, ref
        torch.cuda.empty_cache()
    ffn = [int(t) for t in filter(None, args.ffn_tokens.split(","))]
    if ffn:
        W3 = (torch.randn(E, H, Fd, device="cuda") / H ** 0.5).to(torch.bfloat16)
        W2 = (torch.randn(E, Fd, H, device="cuda") / Fd ** 0.5).to(torch.bfloat16)
        print(f"moe_ffn_combine (SwiGLU, weighted combine), one rank:")
        print(f"{'T':>6} | {'mkc us':>9} | {'torch us':>9} | {'torch / mkc':>11} | err vs torch")
    for T in ffn:
        X = torch.randn(T, H, device="cuda").to(torch.bfloat16)
        route = routing(T, E, K, args.routing, gen).cuda()
        gate = torch.softmax(torch.randn(T, K, device="cuda"), -1)
        Y = torch.full((T, H), float("nan"), device="cuda", dtype=torch.bfloat16)

        def torch_moe():
            perm, _, offs = sort_by_expert(route, E)
            xs = X[perm // K]
            a = F.silu(grouped_mm(xs, W1, offs)) * grouped_mm(xs, W3, offs)
            y = grouped_mm(a, W2, offs).float() * gate.reshape(-1)[perm, None]
            out = torch.zeros(T, H, device="cuda", dtype=torch.float32)
            out.index_add_(0, perm // K, y)
            return out.to(torch.bfloat16)

        kern = mkc.compile(os.path.join(args.samples, "moe_ffn_combine.mks"),
                           {"T": T, "H": H, "F": Fd, "E": E, "TOPK": K})
        for name, t in (("X", X), ("route", route), ("gate_w", gate), ("W1", W1), ("W3", W3),
                        ("W2", W2), ("Y", Y)):
            mkc.bind(kern, name, t)
        mkc.launch(kern, stream)
        mkc.sync(kern)
        ref = torch_moe()
        err = rel_l2(Y, ref)
        nan = torch.isnan(Y).sum().item()
        t_mkc = time_us(lambda: mkc.launch(kern, stream), args.iters, args.reps)
        mkc.sync(kern)
        if args.trace:
            mkc.trace(kern, os.path.join(args.trace, f"moe_ffn_combine_T{T}.json"))
        t_torch = time_us(torch_moe, args.iters, args.reps)
        print(f"{T:>6} | {t_mkc:>9.1f} | {t_torch:>9.1f} | {t_torch / t_mkc:>11.3f} | {err:.2e}"
              f" (NaN {nan})", flush=True)
        rows.append(dict(case="moe_ffn_combine", T=T, routing=args.routing, mkc_us=t_mkc,
                         torch_us=t_torch, ratio=t_torch / t_mkc, rel_err=err, unwritten=nan,
                         paths=mkc.paths(kern)))
        mkc.free(kern)
        del X, Y, ref
        torch.cuda.empty_cache()
    if args.csv:
        write_csv(args.csv, rows)


if __name__ == "__main__":
    sys.exit(main())
