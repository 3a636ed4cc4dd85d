"""The collective and fused-GEMM samples through the Python package, against PyTorch.

One process per rank (torchrun), the ranks found through the torch.distributed group (gloo), the
processes sharing the GPUs there are:

    torchrun --nproc_per_node 3 python/tests/gpu_samples.py [--launches 2] [--only allgather,...]

For each of allgather, allreduce, reducescatter, gemm_allreduce, allgather_gemm,
gemm_reducescatter, alltoall, moe_dispatch_gemm, moe_ffn_combine, ring_attention and
ring_attention_causal (samples/*.mks at small shapes whose rows divide by 2 and 3 ranks): compile
with group=, then for each launch draw fresh random inputs, put them where the kernel reads them
(bound PyTorch tensors; symmetric ones filled in place through Kernel.symmetric), poison the
outputs, launch on the current stream, and compare with PyTorch's result in fp32 from every
rank's inputs (gathered over the group): relative L2 error at most 1e-2. Prints PASS or FAIL per
sample; exit 1 when any fails on any rank. Needs the mkc package (PYTHONPATH=python with MKC_LIB
naming libmkc.so, or the wheel). Not part of //python:wheel_test (no GPU there).
"""
import argparse
import faulthandler
import os
import sys

import torch
import torch.distributed as dist

import mkc

SAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "samples")
TOL = 1e-2
# Rows divisible by 2 and 3 ranks and, per rank, whole 128-row chunks at both.
M = 768
SHAPES = {
    "allgather": {"M": M, "K": 64},
    "allreduce": {"N": 6144},
    "reducescatter": {"M": M, "N": 64},
    "gemm_allreduce": {"M": 256, "N": 256, "K": 64},
    "allgather_gemm": {"M": M, "N": 256, "K": 128},
    "gemm_reducescatter": {"M": M, "N": 256, "K": 64},
    "alltoall": {"T": 37, "H": 64, "K": 2},
    "moe_dispatch_gemm": {"T": 16, "H": 64, "F": 32, "E": 12, "TOPK": 2},
    "ring_attention": {"B": 1, "H": 2, "S": 1536, "D": 64},
    # 12 experts: 6 or 4 per rank. S: 2R chunks of whole 128-row tiles at 2 and 3 ranks.
    "moe_ffn_combine": {"T": 32, "H": 256, "F": 128, "E": 12, "TOPK": 2},
    "ring_attention_causal": {"B": 2, "H": 2, "S": 1536, "D": 64},
}


def gathered(t):
    """Every rank's `t` (on the CPU, fp32), in rank order."""
    t = t.float().cpu().contiguous()
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t)
    return parts


def rel_err(got, ref):
    got, ref = got.float().cpu(), ref.float().cpu()
    if not torch.isfinite(got).all():
        return float("inf")
    return ((got - ref).norm() / ref.norm()).item()


def poison(t):
    t.fill_(float("nan"))
    return t


def one_launch(name, k, d, rank, R, gen):
    """One launch of sample `name` on fresh inputs; its relative L2 error."""
    def randn(*shape, dtype=torch.bfloat16, scale=1.0):
        return (torch.randn(*shape, device="cuda", generator=gen) * scale).to(dtype)

    # Peers read and write this rank's symmetric tensors during their launches: none is filled
    # or poisoned until every rank's last launch is over, and none launches before every rank
    # has filled and poisoned (the barrier before each launch below).
    torch.cuda.synchronize()
    dist.barrier()

    if name == "allgather":
        x = randn(d["M"] // R, d["K"])
        poison(k.symmetric("Y"))
        dist.barrier()
        k(X=x)
        k.synchronize()
        return rel_err(k.symmetric("Y"), torch.cat(gathered(x)))
    if name == "allreduce":
        x = randn(d["N"])
        k.symmetric("X").copy_(x)
        dist.barrier()
        k.launch()
        k.synchronize()
        return rel_err(k.symmetric("X"), sum(gathered(x)))
    if name == "reducescatter":
        x = randn(d["M"], d["N"], dtype=torch.float32)
        k.symmetric("X").copy_(x)
        y = poison(torch.empty(d["M"] // R, d["N"], device="cuda", dtype=torch.float32))
        dist.barrier()
        k(Y=y)
        k.synchronize()
        rows = d["M"] // R
        return rel_err(y, sum(gathered(x))[rank * rows:(rank + 1) * rows])
    if name == "gemm_allreduce":
        a, b = randn(d["M"], d["K"]), randn(d["K"], d["N"], scale=d["K"] ** -0.5)
        poison(k.symmetric("C"))
        dist.barrier()
        k(A=a, B=b)
        k.synchronize()
        return rel_err(k.symmetric("C"), sum(x @ w for x, w in zip(gathered(a), gathered(b))))
    if name == "allgather_gemm":
        a, b = randn(d["M"] // R, d["K"]), randn(d["K"], d["N"], scale=d["K"] ** -0.5)
        c = poison(torch.empty(d["M"], d["N"], device="cuda", dtype=torch.bfloat16))
        dist.barrier()
        k(A_part=a, B=b, C=c)
        k.synchronize()
        return rel_err(c, torch.cat(gathered(a)) @ b.float().cpu())
    if name == "gemm_reducescatter":
        a, b = randn(d["M"], d["K"]), randn(d["K"], d["N"], scale=d["K"] ** -0.5)
        y = poison(torch.empty(d["M"] // R, d["N"], device="cuda", dtype=torch.bfloat16))
        dist.barrier()
        k(A=a, B=b, Y=y)
        k.synchronize()
        rows = d["M"] // R
        full = sum(x @ w for x, w in zip(gathered(a), gathered(b)))
        return rel_err(y, full[rank * rows:(rank + 1) * rows])
    if name == "alltoall":
        # Each row goes to the K ranks its row of `dest` names; rows arrive by source rank, then
        # in the source's (row, k) order (compiler/oracle/reference.cc), counts[s] from each.
        T, H, K = d["T"], d["H"], d["K"]
        x = randn(T, H)
        dest = torch.randint(0, R, (T, K), device="cuda", dtype=torch.int32, generator=gen)
        poison(k.symmetric("Y"))
        k.symmetric("counts").fill_(-1)
        dist.barrier()
        k(X=x, dest=dest)
        k.synchronize()
        rows, counts = [], []
        for xs, ds in zip(gathered(x), gathered(dest)):
            mine = [xs[t] for t in range(T) for j in range(K) if int(ds[t, j]) == rank]
            rows += mine
            counts.append(len(mine))
        got_counts = k.symmetric("counts").cpu().flatten().tolist()
        if got_counts != counts:
            print(f"gpu_samples[{rank}]: alltoall counts {got_counts}, expected {counts}")
            return float("inf")
        if not rows:
            return 0.0  # nothing came here; the counts said so
        return rel_err(k.symmetric("Y")[:len(rows)], torch.stack(rows))
    if name == "moe_dispatch_gemm":
        # Rows arrive expert-major (this rank's experts), then by source rank, then in the
        # source's (row, k) order; Y = each row times its expert's W1.
        T, H, F, E, TOPK = d["T"], d["H"], d["F"], d["E"], d["TOPK"]
        per = E // R
        x = randn(T, H)
        route = torch.randint(0, E, (T, TOPK), device="cuda", dtype=torch.int32, generator=gen)
        w1 = randn(per, H, F, scale=H ** -0.5)
        y = poison(torch.empty(T * TOPK * R, F, device="cuda", dtype=torch.bfloat16))
        dist.barrier()
        k(X=x, route=route, W1=w1, Y=y)
        k.synchronize()
        xs, routes, w = gathered(x), gathered(route), w1.float().cpu()
        rows = []
        for le in range(per):
            for src in range(R):
                for t in range(T):
                    for j in range(TOPK):
                        if int(routes[src][t, j]) == rank * per + le:
                            rows.append(xs[src][t] @ w[le])
        if not rows:
            return 0.0
        return rel_err(y[:len(rows)], torch.stack(rows))
    if name == "ring_attention":
        # Not causal: this rank's queries against every rank's keys and values, scale 1/sqrt(D).
        B, Hh, S, D = d["B"], d["H"], d["S"], d["D"]
        q = randn(B, Hh, S // R, D)
        kv = randn(2, B, Hh, S // R, D)
        o = poison(torch.empty(B, Hh, S // R, D, device="cuda", dtype=torch.bfloat16))
        dist.barrier()
        k(Q=q, KV=kv, O=o)
        k.synchronize()
        kvs = gathered(kv)
        keys = torch.cat([p[0] for p in kvs], dim=2)
        values = torch.cat([p[1] for p in kvs], dim=2)
        scores = (q.float().cpu() @ keys.transpose(-1, -2)) * D ** -0.5
        return rel_err(o, torch.softmax(scores, dim=-1) @ values)
    if name == "moe_ffn_combine":
        # Y[t] = sum over j of gate_w[t, j] times expert route[t, j]'s FFN of X[t] (expert e on
        # rank e // per as its e % per): (silu(x W1) * (x W3)) W2, with the kernel's bf16
        # intermediates (G, U, A, Yr) rounded where it rounds them.
        T, H, F, E, TOPK = d["T"], d["H"], d["F"], d["E"], d["TOPK"]
        per = E // R
        x = randn(T, H)
        route = torch.randint(0, E, (T, TOPK), device="cuda", dtype=torch.int32, generator=gen)
        gate = torch.rand(T, TOPK, device="cuda", generator=gen)
        w1 = randn(per, H, F, scale=H ** -0.5)
        w3 = randn(per, H, F, scale=H ** -0.5)
        w2 = randn(per, F, H, scale=F ** -0.5)
        poison(k.symmetric("Y"))
        dist.barrier()
        k(X=x, route=route, gate_w=gate, W1=w1, W3=w3, W2=w2)
        k.synchronize()
        # Every rank's experts, in expert order (rank r holds r * per ...).
        W1, W3, W2 = (torch.cat(gathered(w)) for w in (w1, w3, w2))
        bf = lambda t: t.bfloat16().float()  # noqa: E731
        xf, rc, gc = x.float().cpu(), route.cpu().long(), gate.cpu()
        ref = torch.zeros(T, H)
        for t in range(T):
            for j in range(TOPK):
                e = int(rc[t, j])
                g, u = bf(xf[t] @ W1[e]), bf(xf[t] @ W3[e])
                ref[t] += gc[t, j] * bf(bf(g * torch.sigmoid(g) * u) @ W2[e])
        return rel_err(k.symmetric("Y"), ref)
    if name == "ring_attention_causal":
        # Zigzag: rank r holds chunks r and 2R-1-r (of 2R) of the queries, keys and values
        # (Q[c], KV[0, c] keys, KV[1, c] values); causal over the whole sequence's positions,
        # scale 1/sqrt(D); O[c] is chunk c's output.
        B, Hh, S, D = d["B"], d["H"], d["S"], d["D"]
        C = S // (2 * R)
        q = randn(2, B, Hh, C, D)
        kv = randn(2, 2, B, Hh, C, D)
        o = poison(torch.empty(2, B, Hh, C, D, device="cuda", dtype=torch.bfloat16))
        dist.barrier()
        k(Q=q, KV=kv, O=o)
        k.synchronize()
        qs, kvs = gathered(q), gathered(kv)
        at = [None] * (2 * R)  # chunk -> (rank, slot)
        for r in range(R):
            at[r], at[2 * R - 1 - r] = (r, 0), (r, 1)
        queries = torch.cat([qs[r][c] for r, c in at], dim=-2)
        keys = torch.cat([kvs[r][0][c] for r, c in at], dim=-2)
        values = torch.cat([kvs[r][1][c] for r, c in at], dim=-2)
        scores = (queries @ keys.transpose(-1, -2)) * D ** -0.5
        future = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)
        full = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ values
        mine = [rank, 2 * R - 1 - rank]
        return rel_err(o, torch.stack([full[..., c * C:(c + 1) * C, :] for c in mine]))
    raise KeyError(name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=2, help="launches per sample, fresh inputs each")
    ap.add_argument("--only", default=",".join(SHAPES), help="samples, comma-separated")
    ap.add_argument("--watchdog", type=float, default=600, help="seconds before exit 1")
    args = ap.parse_args()
    faulthandler.dump_traceback_later(args.watchdog, exit=True)  # no hang outlives this
    dist.init_process_group("gloo")
    rank, R = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local_rank % torch.cuda.device_count())
    gen = torch.Generator(device="cuda")
    failed = []
    for name in args.only.split(","):
        d = SHAPES[name]
        k = mkc.compile(os.path.join(SAMPLES, name + ".mks"), group=dist.group.WORLD, **d)
        worst = 0.0
        for launch in range(args.launches):
            gen.manual_seed(7919 * launch + 104729 * rank + len(name))
            worst = max(worst, one_launch(name, k, d, rank, R, gen))
        k.close()
        ok = worst <= TOL
        if not ok:
            failed.append(name)
        print(f"gpu_samples[{rank}]: {'PASS' if ok else 'FAIL'} {name} at {R} ranks "
              f"({', '.join(f'{key}={v}' for key, v in d.items())}): {args.launches} launches, "
              f"worst rel. L2 error {worst:.2e}", flush=True)
    all_ok = torch.tensor([0 if failed else 1])
    dist.all_reduce(all_ok, op=dist.ReduceOp.MIN)
    dist.destroy_process_group()
    if rank == 0:
        print(f"gpu_samples: {'PASS' if all_ok.item() else 'FAIL'} at {R} ranks")
    return 0 if all_ok.item() else 1


if __name__ == "__main__":
    sys.exit(main())
