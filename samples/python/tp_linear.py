"""A row-parallel linear layer whose GEMM and all-reduce are one mkc kernel.

Each process holds a K-slice of the activations and the matching rows of the weight; the layer's
output is the sum over processes of x_r @ w_r (samples/gemm_allreduce.mks). The processes find
each other through their own torch.distributed group (no port or server of mkc's), one rank each:

    torchrun --nproc_per_node 2 samples/python/tp_linear.py [--steps 3] [--m 256 --n 1024 --k 512]

With fewer GPUs than processes, the processes share them. Each step draws fresh inputs, runs the
kernel on PyTorch's current stream, and checks the output against torch.matmul and
dist.all_reduce in fp32 (relative L2 error at most 1e-2); the exit status is 1 on a mismatch.
Needs the mkc package (tools/wheel.sh, or PYTHONPATH=python with MKC_LIB naming libmkc.so).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

import mkc

SCHEDULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gemm_allreduce.mks")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--k", type=int, default=512, help="this process's slice of K")
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local_rank % torch.cuda.device_count())
    m, n, k = args.m, args.n, args.k

    layer = mkc.compile(SCHEDULE, group=dist.group.WORLD, M=m, N=n, K=k)
    if rank == 0:
        print(f"tp_linear: {layer.schedule} on {layer.ranks} processes: {layer.summary}")
    gen = torch.Generator(device="cuda")
    worst = 0.0
    for step in range(args.steps):
        gen.manual_seed(1000 * step + rank)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=gen) / k ** 0.5
        layer(A=x, B=w)
        layer.synchronize()
        # C is symmetric: it lives on mkc's heap, read in place as a bf16 tensor.
        y = layer.symmetric("C").float().cpu()
        ref = (x.float() @ w.float()).cpu()
        dist.all_reduce(ref)
        err = ((y - ref).norm() / ref.norm()).item()
        worst = max(worst, err)
        print(f"tp_linear: rank {rank} step {step}: rel. L2 error {err:.2e}")
    layer.close()
    ok = torch.tensor([1 if worst <= 1e-2 else 0])
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    dist.destroy_process_group()
    if rank == 0:
        print("tp_linear: " + ("ok" if ok.item() else "MISMATCH") + f" (worst {worst:.2e})")
    return 0 if ok.item() else 1


if __name__ == "__main__":
    sys.exit(main())
