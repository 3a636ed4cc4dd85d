#!/usr/bin/env python3
"""mkc's attention against PyTorch SDPA (cuDNN and flash backends), same process, same tensors.

mkc's kernel (bench/attention.mks, and samples/ring_attention.mks and the zigzag causal ring
samples/ring_attention_causal.mks at one rank) is driven through
its C API (runtime/capi.h, libmkc.so) on the Q, K, V and O that PyTorch allocated, on PyTorch's
stream. Each case is checked first (mkc's O against SDPA's, and both against an fp32 reference on
a slice of heads), then timed with CUDA events: the median of --reps runs of --iters launches.
Prints µs, TFLOP/s and the ratios; --csv FILE writes one row per case.

  python3 bench/attention_bench.py --lib .device/bin/libmkc.so [--shapes 4096x128x0,...]
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from mkc_capi import Mkc, rel_l2, time_us, write_csv

# B x H x S of the shapes training runs (issue 37), each at head dims 64 and 128, causal and not.
SUITE = [f"{bhs}x{d}x{c}" for bhs in ("1x32x4096", "1x32x16384", "1x32x32768", "4x32x4096",
                                      "16x16x2048", "2x32x8192")
         for d in (64, 128) for c in (0, 1)]


def parse_shape(spec, heads):
    """BxHxSxDxCAUSAL or SxDxCAUSAL (batch 1, `heads` heads) -> (B, H, S, D, causal)."""
    f = [int(x) for x in spec.split("x")]
    if len(f) == 3:
        return (1, heads, *f)
    if len(f) == 5:
        return tuple(f)
    raise SystemExit(f"attention_bench: shape `{spec}` is neither BxHxSxDxCAUSAL nor SxDxCAUSAL")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "libmkc.so"))
    ap.add_argument("--schedule", default=os.path.join(os.path.dirname(__file__), "attention.mks"))
    ap.add_argument("--ring", default=os.path.join(os.path.dirname(__file__), "..", "samples",
                                                   "ring_attention.mks"))
    ap.add_argument("--shapes", default=",".join(SUITE),
                    help="BxHxSxDxCAUSAL,... or SxDxCAUSAL,... (batch 1, --heads heads); the "
                         "default is issue 37's set: every shape at D 64 and 128, causal and not")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ring-shapes", default="16384x128", help="SxD,... for the ring at R = 1")
    ap.add_argument("--causal-ring", default=os.path.join(os.path.dirname(__file__), "..",
                                                          "samples", "ring_attention_causal.mks"))
    ap.add_argument("--causal-ring-shapes", default="16384x128",
                    help="SxD,... for the zigzag causal ring at R = 1")
    ap.add_argument("--csv", default="")
    args = ap.parse_args()
    mkc = Mkc(args.lib)
    torch.manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    rows = []
    print(f"{'B':>3} {'H':>3} {'S':>6} {'D':>4} {'causal':>6} | {'mkc us':>9} {'TF/s':>6} | {'cuDNN us':>9} {'TF/s':>6}"
          f" | {'flash us':>9} {'TF/s':>6} | {'vs cuDNN':>8} {'vs flash':>8} | err vs cuDNN")
    for spec in args.shapes.split(","):
        B, H, S, D, causal = parse_shape(spec, args.heads)
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o = torch.full_like(q, float("nan"))
        kern = mkc.compile(args.schedule, {"B": B, "H": H, "S": S, "D": D, "MASK": causal + 1})
        for name, t in (("Q", q), ("K", k), ("V", v), ("O", o)):
            mkc.bind(kern, name, t)
        mkc.launch(kern, stream)
        mkc.sync(kern)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            ref_cudnn = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        # fp32 reference on two heads (the math backend, upcast inputs).
        with sdpa_kernel([SDPBackend.MATH]):
            ref32 = F.scaled_dot_product_attention(q[:1, :2].float(), k[:1, :2].float(),
                                                   v[:1, :2].float(), is_causal=bool(causal))
        nan = torch.isnan(o).sum().item()
        err_cudnn, err32 = rel_l2(o, ref_cudnn), rel_l2(o[:1, :2], ref32)
        err32_cudnn = rel_l2(ref_cudnn[:1, :2], ref32)
        flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)

        def run_mkc():
            mkc.launch(kern, stream)

        t_mkc = time_us(run_mkc, args.iters, args.reps)
        mkc.sync(kern)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            t_cudnn = time_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)),
                              args.iters, args.reps)
        try:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                t_flash = time_us(
                    lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)),
                    args.iters, args.reps)
        except RuntimeError:
            t_flash = float("nan")
        tf = lambda t: flops / t / 1e6
        print(f"{B:>3} {H:>3} {S:>6} {D:>4} {causal:>6} | {t_mkc:>9.1f} {tf(t_mkc):>6.0f} | {t_cudnn:>9.1f} "
              f"{tf(t_cudnn):>6.0f} | {t_flash:>9.1f} {tf(t_flash):>6.0f} | "
              f"{t_cudnn / t_mkc:>8.3f} {t_flash / t_mkc:>8.3f} | {err_cudnn:.2e} "
              f"(vs fp32 {err32:.2e}, cuDNN vs fp32 {err32_cudnn:.2e}, NaN {nan})", flush=True)
        rows.append(dict(case="attention", B=B, H=H, S=S, D=D, causal=causal, mkc_us=t_mkc, cudnn_us=t_cudnn,
                         flash_us=t_flash, mkc_tflops=tf(t_mkc), cudnn_tflops=tf(t_cudnn),
                         ratio_cudnn=t_cudnn / t_mkc, ratio_flash=t_flash / t_mkc,
                         rel_err_fp32=err32, unwritten=nan, paths=mkc.paths(kern)))
        mkc.free(kern)
        del q, k, v, o
        torch.cuda.empty_cache()
    # The ring schedule at one rank (a copy into the ring's slot, then attention with the f32
    # state) against the attention alone on the same data.
    for spec in filter(None, args.ring_shapes.split(",")):
        S, D = (int(x) for x in spec.split("x"))
        H = args.heads
        q = torch.randn(1, H, S, D, device="cuda", dtype=torch.bfloat16)
        kv = torch.randn(2, 1, H, S, D, device="cuda", dtype=torch.bfloat16)
        o = torch.full_like(q, float("nan"))
        ring = mkc.compile(args.ring, {"B": 1, "H": H, "S": S, "D": D})
        for name, t in (("Q", q), ("KV", kv), ("O", o)):
            mkc.bind(ring, name, t)
        alone = mkc.compile(args.schedule, {"B": 1, "H": H, "S": S, "D": D, "MASK": 1})
        o2 = torch.full_like(q, float("nan"))
        for name, t in (("Q", q), ("K", kv[0]), ("V", kv[1]), ("O", o2)):
            mkc.bind(alone, name, t.contiguous() if name in ("K", "V") else t)
        mkc.launch(ring, stream)
        mkc.launch(alone, stream)
        mkc.sync(ring)
        mkc.sync(alone)
        err = rel_l2(o, o2)
        t_ring = time_us(lambda: mkc.launch(ring, stream), args.iters, args.reps)
        t_alone = time_us(lambda: mkc.launch(alone, stream), args.iters, args.reps)
        mkc.sync(ring)
        mkc.sync(alone)
        print(f"ring R=1 S={S} D={D}: {t_ring:.1f} us, attention alone {t_alone:.1f} us, "
              f"ring / alone {t_ring / t_alone:.3f}, outputs differ by {err:.2e}", flush=True)
        rows.append(dict(case="ring_r1", S=S, D=D, causal=0, mkc_us=t_ring, alone_us=t_alone,
                         ratio_alone=t_ring / t_alone, rel_err_fp32=err))
        mkc.free(ring)
        mkc.free(alone)
    # The zigzag causal ring at one rank: the sequence in two chunks (the rank holds chunks 0 and
    # 1), four attentions placed by q_start / k_start (one of them fully masked), against the
    # causal attention alone and cuDNN's on the same sequence.
    for spec in filter(None, args.causal_ring_shapes.split(",")):
        S, D = (int(x) for x in spec.split("x"))
        H, C = args.heads, S // 2
        q, k, v = (torch.randn(1, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        # [1, H, S, D] -> [2, 1, H, C, D]: chunk a of the sequence first.
        chunks = lambda t: t.view(1, H, 2, C, D).permute(2, 0, 1, 3, 4).contiguous()
        qz = chunks(q)
        kvz = torch.stack([chunks(k), chunks(v)]).contiguous()
        oz = torch.full_like(qz, float("nan"))
        ring = mkc.compile(args.causal_ring, {"B": 1, "H": H, "S": S, "D": D})
        for name, t in (("Q", qz), ("KV", kvz), ("O", oz)):
            mkc.bind(ring, name, t)
        alone = mkc.compile(args.schedule, {"B": 1, "H": H, "S": S, "D": D, "MASK": 2})
        o2 = torch.full_like(q, float("nan"))
        for name, t in (("Q", q), ("K", k), ("V", v), ("O", o2)):
            mkc.bind(alone, name, t)
        mkc.launch(ring, stream)
        mkc.launch(alone, stream)
        mkc.sync(ring)
        mkc.sync(alone)
        o_ring = oz.permute(1, 2, 0, 3, 4).reshape(1, H, S, D)
        nan = torch.isnan(oz).sum().item()
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            ref_cudnn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        err_alone, err_cudnn = rel_l2(o_ring, o2), rel_l2(o_ring, ref_cudnn)
        t_ring = time_us(lambda: mkc.launch(ring, stream), args.iters, args.reps)
        t_alone = time_us(lambda: mkc.launch(alone, stream), args.iters, args.reps)
        mkc.sync(ring)
        mkc.sync(alone)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            t_cudnn = time_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                              args.iters, args.reps)
        print(f"causal ring (zigzag) R=1 S={S} D={D}: {t_ring:.1f} us, causal attention alone "
              f"{t_alone:.1f} us, cuDNN {t_cudnn:.1f} us; ring / alone {t_ring / t_alone:.3f}, "
              f"cuDNN / ring {t_cudnn / t_ring:.3f}; O vs alone {err_alone:.2e}, vs cuDNN "
              f"{err_cudnn:.2e}, NaN {nan}", flush=True)
        rows.append(dict(case="causal_ring_r1", S=S, D=D, causal=1, mkc_us=t_ring,
                         alone_us=t_alone, cudnn_us=t_cudnn, ratio_alone=t_ring / t_alone,
                         ratio_cudnn=t_cudnn / t_ring, rel_err_fp32=err_cudnn, unwritten=nan))
        mkc.free(ring)
        mkc.free(alone)
        del q, k, v, qz, kvz, oz, o2
        torch.cuda.empty_cache()
    ratios = [r["ratio_cudnn"] for r in rows if r["case"] == "attention"]
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"attention vs cuDNN over {len(ratios)} shapes: min {min(ratios):.3f}, "
              f"geometric mean {geo:.3f}", flush=True)
    if args.csv:
        write_csv(args.csv, rows)


if __name__ == "__main__":
    sys.exit(main())
