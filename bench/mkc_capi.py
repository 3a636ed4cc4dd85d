"""mkc's C API (runtime/capi.h, libmkc.so) from Python, and the timing the Python benches share.

Used by bench/attention_bench.py and bench/moe_bench.py: compile a schedule with -D values, bind
PyTorch tensors by name, launch on a stream; time a callable with CUDA events; write the rows
as a --csv table.
"""
import csv
import ctypes
import statistics

import torch


class Mkc:
    def __init__(self, lib):
        self.lib = ctypes.CDLL(lib)
        self.err = ctypes.create_string_buffer(8192)

    def check(self, rc, what):
        if rc != 0:
            raise RuntimeError(f"mkc {what}: {self.err.value.decode(errors='replace')}")

    def compile(self, path, defines):
        k = ctypes.c_void_p()
        text = ",".join(f"{n}={v}" for n, v in defines.items()).encode()
        self.check(self.lib.mkc_compile_file(path.encode(), text, 1, ctypes.byref(k), self.err,
                                             len(self.err)), f"compile {path} {defines}")
        return k

    def bind(self, k, name, tensor):
        self.check(self.lib.mkc_bind(k, name.encode(), 0, ctypes.c_void_p(tensor.data_ptr()),
                                     self.err, len(self.err)), f"bind {name}")

    def launch(self, k, stream):
        self.check(self.lib.mkc_launch_async(k, ctypes.c_void_p(stream), self.err,
                                             len(self.err)), "launch")

    def sync(self, k):
        self.check(self.lib.mkc_synchronize(k, self.err, len(self.err)), "synchronize")

    def trace(self, k, path):
        """One traced launch of `k`, written to `path` (Chrome/Perfetto JSON)."""
        self.check(self.lib.mkc_trace(k, path.encode(), self.err, len(self.err)), "trace")

    def paths(self, k):
        out = ctypes.create_string_buffer(4096)
        self.lib.mkc_paths(k, out, len(out))
        return out.value.decode().strip().replace("\n", "; ")

    def free(self, k):
        self.lib.mkc_free(k)


def time_us(fn, iters, reps):
    """Median over `reps` of the mean µs per call of `iters` back-to-back calls."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) * 1000.0 / iters)
    return statistics.median(times)


def rel_l2(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def write_csv(path, rows):
    """The bench's rows (dicts) as a CSV table, every column any row has, sorted by name."""
    keys = sorted({k for r in rows for k in r})
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
