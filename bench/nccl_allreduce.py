"""NCCL all-reduce (bf16, sum) through PyTorch, captured in a CUDA graph: the baseline of
bench/allreduce.sh. Run under torchrun, one process per GPU. Prints, on rank 0, one line per size:
"nccl BYTES US" with the median time of one all-reduce (a graph of 20, replayed 20 times)."""
import os
import sys

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    per_graph, replays = 20, 20
    for nbytes in (int(s) for s in sys.argv[1:]):
        x = torch.randn(nbytes // 2, dtype=torch.bfloat16, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                dist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(per_graph):
                dist.all_reduce(x)
        graph.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(replays):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) * 1000.0 / per_graph)
        times.sort()
        if rank == 0:
            print(f"nccl {nbytes} {times[len(times) // 2]:.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
