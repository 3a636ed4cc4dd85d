"""mkc's PyTorch parts on a GPU: the custom op under torch.compile, CUDA graph capture, and the
Python launch's overhead against the C API's. Not part of //python:wheel_test (no GPU there):

    torchrun --nproc_per_node 2 python/tests/gpu_torch.py

Every process is one rank of samples/gemm_allreduce.mks (a row-parallel linear layer, as
samples/python/tp_linear.py runs it), found through a gloo group; all use cuda:0 (they share one
GPU) unless --device-per-rank. Parts, each ending in one PASS or FAIL line on rank 0:
  a. mkc.torch_op under torch.compile(fullgraph=True) of a small module, eager too, against
     torch.matmul + all_reduce (rel. L2 error <= 1e-2), fresh random inputs at every step;
  b. CUDA graphs: with mkc.CUDA_GRAPHS true (since 2026-12-05), a launch captured with
     torch.cuda.graph and replayed 200 times with fresh inputs copied into the bound tensors,
     each result checked (with it false: a launch and the op under capture raise MkcError, the
     capture ends cleanly, and the next eager launch is right);
  c. 1,000 launches through Kernel.launch() against 1,000 through mkc_launch_async (ctypes, the
     same handle and stream): host time per launch to enqueue, and the difference in µs.
Needs the mkc package (tools/wheel.sh; or PYTHONPATH=python and MKC_LIB=bazel-bin/runtime/
libmkc.so). Every wait has a bound: the kernel's own wait timeout, gloo's timeout, and a watchdog
that ends the process (exit 1) after --watchdog seconds. Exit status 0 only when every part passes.
"""
import argparse
import ctypes
import datetime
import faulthandler
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

import mkc
from mkc import _lib

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEDULE = os.path.join(HERE, "..", "..", "samples", "gemm_allreduce.mks")
TOL = 1e-2


def log(msg, everyone=False):
    if everyone or dist.get_rank() == 0:
        print(f"gpu_torch[{dist.get_rank()}]: {msg}", flush=True)


def agreed(ok):
    """True when `ok` holds on every rank."""
    t = torch.tensor([1 if ok else 0])
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def reference(x, w):
    """sum over ranks of x_r @ w_r, in fp32 on the CPU."""
    ref = (x.float() @ w.float()).cpu()
    dist.all_reduce(ref)
    return ref


def rel_err(y, ref):
    y = y.float().cpu()
    return ((y - ref).norm() / ref.norm()).item()


def inputs(gen, m, n, k):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=gen) / k ** 0.5
    return x, w


class TPLinear(torch.nn.Module):
    """A layer around the op: bf16 arithmetic that is exact (scaling by powers of two), so the
    reference stays x @ w."""

    def __init__(self, op, w):
        super().__init__()
        self.op = op
        self.register_buffer("w", w)

    def forward(self, x):
        y = self.op(x * 2, self.w)
        return y.float() * 0.5


def part_a(k, args, gen):
    """The custom op, eagerly and compiled."""
    op = mkc.torch_op(k, "mkc_gpu_test::tp_linear", outputs=("C",), bind=("B",))
    worst = 0.0
    m, n, kk = args.m, args.n, args.k
    _, w = inputs(gen, m, n, kk)
    ref_w = w.clone()
    # Eager: two calls before any host wait, then both checked (the op's outputs are copies).
    x1, _ = inputs(gen, m, n, kk)
    x2, _ = inputs(gen, m, n, kk)
    y1 = op(x1, w)
    y2 = op(x2, w)
    torch.cuda.synchronize()
    for x, y in ((x1, y1), (x2, y2)):
        if y.shape != (m, n) or y.dtype != torch.bfloat16:
            raise AssertionError(f"eager op returned {y.dtype}{list(y.shape)}")
        worst = max(worst, rel_err(y, reference(x, ref_w)))
    if y1.data_ptr() == k.data_ptr("C"):
        raise AssertionError("the op's output aliases mkc's heap")
    log(f"a: eager op, 2 calls: worst rel. L2 error {worst:.2e}")
    # Compiled, with the whole forward in one graph.
    layer = TPLinear(op, w).cuda()
    compiled = torch.compile(layer, fullgraph=True, backend=args.backend)
    for step in range(args.steps):
        x, _ = inputs(gen, m, n, kk)
        y = compiled(x)
        err = rel_err(y, reference(x, ref_w))
        worst = max(worst, err)
        log(f"a: compiled step {step}: rel. L2 error {err:.2e}", everyone=True)
    # A new weight: the op binds its new address.
    _, w2 = inputs(gen, m, n, kk)
    layer2 = torch.compile(TPLinear(op, w2).cuda(), fullgraph=True, backend=args.backend)
    x, _ = inputs(gen, m, n, kk)
    err = rel_err(layer2(x), reference(x, w2))
    worst = max(worst, err)
    log(f"a: compiled, a second weight: rel. L2 error {err:.2e}", everyone=True)
    return worst <= TOL, f"worst rel. L2 error {worst:.2e} (limit {TOL:.0e})", op


def part_b(k, op, args, gen):
    """CUDA graph capture: replayed and checked where supported; refused cleanly where not."""
    m, n, kk = args.m, args.n, args.k
    x, w = inputs(gen, m, n, kk)
    if not mkc.CUDA_GRAPHS:
        refusals = []
        for what, call in (("Kernel.launch", lambda: k.launch(A=x, B=w)),
                           ("the op", lambda: op(x, w))):
            g = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(g):
                    call()
                refusals.append(f"{what}: captured without an error")
            except Exception as e:  # noqa: BLE001 (the type is what is checked)
                if isinstance(e, mkc.MkcError) and "CUDA graph" in str(e):
                    continue  # refused, and the capture ended cleanly (else capture_end raised)
                refusals.append(f"{what}: {type(e).__name__}: {e}")
            del g
        if refusals:
            return False, "; ".join(refusals)
        # The refused launches left the kernel's epochs in step: an eager launch is right.
        k.launch(A=x, B=w)
        k.synchronize()
        err = rel_err(k.symmetric("C"), reference(x, w))
        log(f"b: refused under capture as designed; the next eager launch: rel. L2 error "
            f"{err:.2e}")
        return err <= TOL, f"graphs refused with MkcError as designed (mkc.CUDA_GRAPHS false); " \
                           f"eager launch after: rel. L2 error {err:.2e}"
    # Supported: capture once with static inputs, replay with fresh ones copied in.
    x_s, w_s = x.clone(), w.clone()
    k.bind("A", x_s)
    k.bind("B", w_s)
    k.launch()  # warm up outside the capture
    k.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        k.launch()
    c = k.symmetric("C")
    worst = 0.0
    for _ in range(200):
        x, w = inputs(gen, m, n, kk)
        x_s.copy_(x)
        w_s.copy_(w)
        g.replay()
        torch.cuda.synchronize()
        worst = max(worst, rel_err(c, reference(x, w)))
    return worst <= TOL, f"200 replays, worst rel. L2 error {worst:.2e}"


def part_c(k, args, gen):
    """Host time to enqueue a launch: Kernel.launch() against mkc_launch_async through ctypes."""
    m, n, kk = args.m, args.n, args.k
    x, w = inputs(gen, m, n, kk)
    k.bind("A", x)
    k.bind("B", w)
    lib = _lib.lib()
    handle = k._gpu()
    stream = torch.cuda.current_stream().cuda_stream
    err = ctypes.create_string_buffer(16384)
    launch_c = lib.mkc_launch_async
    stream_p = ctypes.c_void_p(stream)

    def c_api():
        if launch_c(handle, stream_p, err, len(err)) != 0:
            raise mkc.MkcError(err.value.decode(errors="replace"))

    py_api = k.launch

    def py_tensors():  # the same tensors at every launch: no bind (no wait for the GPU)
        k(A=x, B=w)

    total = {"python": 0.0, "c": 0.0, "tensors": 0.0}
    per_batch = {"python": [], "c": [], "tensors": []}
    batch = args.batch
    rounds = args.launches // batch
    paths = (("python", py_api), ("c", c_api), ("tensors", py_tensors))
    for name, fn in paths:  # warm each
        fn()
        k.synchronize()
    for r in range(rounds):
        order = paths[r % 3:] + paths[:r % 3]
        for name, fn in order:
            t0 = time.perf_counter()
            for _ in range(batch):
                fn()
            dt = time.perf_counter() - t0
            k.synchronize()  # untimed: the GPU's time is not the host's overhead
            total[name] += dt
            per_batch[name].append(dt / batch * 1e6)
    n_each = rounds * batch
    py_us = total["python"] / n_each * 1e6
    c_us = total["c"] / n_each * 1e6
    t_us = total["tensors"] / n_each * 1e6
    med = {key: sorted(v)[len(v) // 2] for key, v in per_batch.items()}
    err_ = rel_err(k.symmetric("C"), reference(x, w))
    log(f"c: {n_each} launches each, in batches of {batch}: Kernel.launch() {py_us:.2f} µs, "
        f"mkc_launch_async {c_us:.2f} µs per launch (medians of batches {med['python']:.2f} / "
        f"{med['c']:.2f}); Python adds {py_us - c_us:.2f} µs; k(A=x, B=w) with the bound tensors "
        f"{t_us:.2f} µs (median {med['tensors']:.2f})", everyone=True)
    return err_ <= TOL, (f"Python launch overhead over the C API: {py_us - c_us:+.2f} µs per "
                         f"launch ({py_us:.2f} vs {c_us:.2f} µs on rank 0; with the bound "
                         f"tensors passed again {t_us:.2f} µs); result after: rel. L2 error "
                         f"{err_:.2e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schedule", default=SCHEDULE)
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--k", type=int, default=512, help="this process's slice of K")
    ap.add_argument("--steps", type=int, default=5, help="compiled steps in part a")
    ap.add_argument("--backend", default="inductor", help="torch.compile's backend")
    ap.add_argument("--launches", type=int, default=1000, help="launches per path in part c")
    ap.add_argument("--batch", type=int, default=50, help="launches enqueued between waits")
    ap.add_argument("--device-per-rank", action="store_true",
                    help="rank r on cuda:(LOCAL_RANK mod GPUs) instead of all on cuda:0")
    ap.add_argument("--watchdog", type=float, default=900, help="seconds before exit 1")
    args = ap.parse_args()
    faulthandler.dump_traceback_later(args.watchdog, exit=True)  # no hang outlives this

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank = dist.get_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local_rank % torch.cuda.device_count() if args.device_per_rank else 0)
    k = mkc.compile(args.schedule, group=dist.group.WORLD, M=args.m, N=args.n, K=args.k)
    log(f"{k.schedule} on {k.ranks} processes, PyTorch {torch.__version__}, "
        f"{torch.cuda.get_device_name()}: {k.summary}")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234 + 7919 * rank)

    results = []
    op = None
    parts = (("a torch.compile(fullgraph=True) of the custom op", lambda: part_a(k, args, gen)),
             ("b CUDA graph capture", lambda: part_b(k, op, args, gen)),
             ("c launch overhead, Python against the C API", lambda: part_c(k, args, gen)))
    failed = False
    for title, run in parts:
        if failed:
            results.append((title, None, "not run: an earlier part failed"))
            continue
        try:
            out = run()
            ok, detail = out[0], out[1]
            if len(out) > 2:
                op = out[2]
        except Exception as e:  # noqa: BLE001 (reported, then the process ends)
            traceback.print_exc()
            ok, detail = False, f"{type(e).__name__}: {e}"
        try:
            ok = agreed(ok)
        except Exception:  # noqa: BLE001 (a peer died: this rank cannot agree)
            ok = False
        results.append((title, ok, detail))
        failed = failed or not ok
    for title, ok, detail in results:
        verdict = "SKIP" if ok is None else ("PASS" if ok else "FAIL")
        log(f"{verdict} part {title}: {detail}", everyone=not ok)
    all_ok = all(ok for _, ok, _ in results)
    log("PASS" if all_ok else "FAIL")
    sys.stdout.flush()
    if not all_ok:
        os._exit(1)  # a broken job's teardown may wait for peers that are gone
    k.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
