"""mkc.compile and the Kernel it returns."""
import ctypes
import json
import os
import sys
from dataclasses import dataclass

from . import _capture, _lib, _symmetric, _tensors
from ._errors import MkcError, ScheduleError


@dataclass(frozen=True)
class TensorSpec:
    """One of the schedule's tensors, as the compile fixed it."""
    name: str
    dtype: str        # "bf16", "f16", "f32", "f64", "fp8_e4m3", "fp8_e5m2", "i32", "i64"
    shape: tuple
    kind: str         # "input", "output" or "scratch"
    symmetric: bool   # on mkc's symmetric heap: peers read or write it


def _defines_text(defines):
    items = []
    for name, value in defines.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"mkc.compile: parameter {name}={value!r} is not an integer")
        items.append(f"{name}={value}")
    return ",".join(items)


def _world(group, ranks, ranks_per_node):
    """(ranks, ranks_per_node, rank) from the arguments, a torch.distributed group, or one
    process alone."""
    rank = 0
    if group is not None:
        dist = sys.modules.get("torch.distributed")
        if dist is None:
            raise TypeError("mkc.compile: group= takes a torch.distributed process group")
        if ranks not in (None, dist.get_world_size(group)):
            raise ValueError(f"mkc.compile: ranks={ranks}, but the group has "
                             f"{dist.get_world_size(group)}")
        ranks, rank = dist.get_world_size(group), dist.get_rank(group)
        if ranks_per_node is None and os.environ.get("LOCAL_WORLD_SIZE"):
            ranks_per_node = int(os.environ["LOCAL_WORLD_SIZE"])
    if ranks is None:
        ranks = 1
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"mkc.compile: ranks={ranks!r}; give a world size of at least 1")
    return ranks, ranks_per_node or 0, rank


def _group_gather(group):
    """mkc_gather_fn over a torch.distributed process group (its own backend: CPU tensors for
    gloo, the current GPU's for nccl), and the list where a failure's exception is kept."""
    import torch
    dist = sys.modules["torch.distributed"]
    size = dist.get_world_size(group)
    device = (torch.device("cuda", torch.cuda.current_device())
              if dist.get_backend(group) == "nccl" else torch.device("cpu"))
    failures = []

    def gather(_ctx, mine, nbytes, out):
        try:
            src = torch.frombuffer(bytearray(ctypes.string_at(mine, nbytes)), dtype=torch.uint8)
            blocks = [torch.empty(nbytes, dtype=torch.uint8, device=device) for _ in range(size)]
            dist.all_gather(blocks, src.to(device), group=group)
            host = torch.cat(blocks).cpu().contiguous()
            ctypes.memmove(out, host.data_ptr(), size * nbytes)
            return 0
        except Exception as e:  # noqa: BLE001 (raised again after the C call returns)
            failures.append(e)
            return 1

    return _lib.GATHER_FN(gather), failures


def compile(schedule, *, ranks=None, ranks_per_node=None, group=None, name=None, **params):
    """Compiles a schedule: a .mks file's path, or its text (anything holding a newline or a `{`).

    `params` set the schedule's parameters (-D NAME=VALUE); the world is `ranks` (and
    `ranks_per_node`), or `group`'s (a torch.distributed process group), else one rank. Needs no
    GPU: the kernel is JIT-compiled for the GPU at its first launch. Raises ScheduleError, with
    each diagnostic's place, when the schedule has errors."""
    if not isinstance(schedule, str):
        raise TypeError("mkc.compile: the schedule is a path or the text of a .mks file")
    if "\n" in schedule or "{" in schedule:
        text, source = schedule, name or "<string>.mks"
    else:
        try:
            with open(schedule, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise FileNotFoundError(f"mkc.compile: cannot read {schedule}: {e.strerror}") from None
        source = name or schedule
    nranks, per_node, rank = _world(group, ranks, ranks_per_node)
    defines = _defines_text(params)
    lib = _lib.lib()
    out = ctypes.c_void_p()
    rc = lib.mkc_inspect(source.encode(), text.encode(), defines.encode(), nranks, per_node,
                         ctypes.byref(out))
    try:
        info = json.loads(ctypes.string_at(out.value).decode()) if out.value else {}
    finally:
        if out.value:
            lib.mkc_free_string(out)
    if rc != 0 and "error" in info:
        if rc == 1:
            raise ScheduleError(info["error"], [])
        raise MkcError(info["error"])
    if not info.get("ok"):
        raise ScheduleError(info.get("rendered", "the schedule has errors"),
                            info.get("diagnostics", []))
    return Kernel(info, source, text, defines, nranks, per_node, rank, group)


def tune(schedule, *, candidates=6, budget_s=600.0, iters=20, **compile_args):
    """`mkc tune` from Python: `schedule` (a Kernel, or what mkc.compile takes, with its keyword
    arguments) tuned on this process's GPUs (Kernel.tune); returns the kernel, rebuilt with the
    winner. The measurements are in its `tune_log`."""
    k = schedule if isinstance(schedule, Kernel) else compile(schedule, **compile_args)
    k.tune(candidates=candidates, budget_s=budget_s, iters=iters)
    return k


class Kernel:
    """A compiled schedule: its tensors, its compile summary, and (on a GPU) its launches.

    k(A=a, B=b, C=c) binds the tensors given (checked against the schedule: dtype, shape, device,
    layout) and launches on the framework's current stream, without waiting."""

    def __init__(self, info, source, text, defines, ranks, ranks_per_node, rank, group):
        self.schedule = info["schedule"]
        self.source = source
        self.ranks = ranks
        self.ranks_per_node = ranks_per_node
        self.rank = rank
        self.summary = info.get("summary", "")
        self.paths = info.get("paths", [])
        self.kernel_name = info.get("kernel_name", "")
        self.tensors = {t["name"]: TensorSpec(t["name"], t["dtype"], tuple(t["shape"]), t["kind"],
                                              t["symmetric"]) for t in info["tensors"]}
        self._text, self._defines, self._group = text, defines, group
        self._handle = None
        self._bound = {}
        self._bound_ptrs = {}  # (name, rank) -> the address mkc_bind last set
        self.tune_log = ""  # the last tune()'s lines, one per measurement
        self._err = ctypes.create_string_buffer(16384)  # each call's error text (one per kernel)

    def __repr__(self):
        return (f"<mkc.Kernel {self.schedule} for {self.ranks} rank(s): "
                f"{', '.join(self.tensors)}>")

    def spec(self, name):
        try:
            return self.tensors[name]
        except KeyError:
            raise KeyError(f"schedule `{self.schedule}` has no tensor `{name}` (it has "
                           f"{', '.join(self.tensors)})") from None

    def check(self, name, tensor):
        """The device address the kernel would use for `tensor` as the schedule's `name`, after
        checking it; raises TensorError naming `name` when it does not fit."""
        return _tensors.check(tensor, self.spec(name))

    # ---- on a GPU ----------------------------------------------------------------------------
    def _gpu(self):
        if self._handle is None:
            lib = _lib.lib()
            err = ctypes.create_string_buffer(16384)
            handle = ctypes.c_void_p()
            if self._group is not None and self.ranks > 1:
                # One rank per process: the processes find each other through the group.
                gather, failures = _group_gather(self._group)
                local_size = int(os.environ.get("LOCAL_WORLD_SIZE", self.ranks))
                local_rank = int(os.environ.get("LOCAL_RANK", self.rank % local_size))
                rc = lib.mkc_compile_string_group(
                    self.source.encode(), self._text.encode(), self._defines.encode(), self.rank,
                    self.ranks, local_rank, local_size, self.ranks_per_node, gather, None,
                    ctypes.byref(handle), err, len(err))
                self._gather = gather  # launches may gather again (traces)
                if rc != 0 and failures:
                    raise MkcError(f"{err.value.decode(errors='replace')}: {failures[0]!r}")
            else:
                rc = lib.mkc_compile_string(self.source.encode(), self._text.encode(),
                                            self._defines.encode(), self.ranks,
                                            self.ranks_per_node, ctypes.byref(handle), err,
                                            len(err))
            if rc != 0:
                raise MkcError(err.value.decode(errors="replace"))
            self._handle = handle
        return self._handle

    def _call(self, fn, *args, what):
        err = self._err
        if fn(*args, err, len(err)) != 0:
            raise MkcError(f"mkc {what}: {err.value.decode(errors='replace')}")

    def bind(self, name, tensor, rank=None):
        """The kernel reads and writes `tensor` as the schedule's `name` (of `rank`, default this
        process's) from the next launch on; no copy."""
        self._bind(name, tensor, self.rank if rank is None else rank, None)

    def _bind(self, name, tensor, rank, stream_handle):
        key = (name, rank)
        if self._bound.get(key) is tensor and self._handle is not None:
            # The very tensor bound already: its address and shape looked at again, the rest of
            # the check (type, device, layout) stands from its bind. A few µs of each launch.
            ptr = _tensors.quick_address(tensor)
            if ptr is not None and ptr == self._bound_ptrs.get(key) and \
                    tuple(tensor.shape) == self.tensors[name].shape:
                return
        ptr = self.check(name, tensor)
        if self._handle is not None and self._bound_ptrs.get(key) == ptr:
            # The memory bound already (the same tensors at every launch): nothing changes, no
            # wait for the launches in flight, nothing a CUDA graph capture forbids.
            self._bound[key] = tensor
            return
        _capture.refuse(f"bind {name} (a bind waits for the launches in flight)", stream_handle)
        lib = _lib.lib()
        self._call(lib.mkc_bind, self._gpu(), name.encode(), rank, ctypes.c_void_p(ptr),
                   what=f"bind {name}")
        self._bound[key] = tensor  # kept alive while bound
        self._bound_ptrs[key] = ptr

    def launch(self, stream=None, **tensors):
        """Binds `tensors` (by the schedule's names) and enqueues one launch of every local rank on
        `stream` (a CUDA stream handle, a torch.cuda.Stream; default the framework's current
        stream). Tensors bound already (the same memory as the last launch's) cost no bind. May be
        captured into a CUDA graph once the kernel has launched eagerly, with tensors bound before
        the capture; mkc/_capture.py says what is refused and why."""
        handle = _stream_handle(stream)
        if self._handle is None:
            # The first launch compiles, loads and sets the heap up: not under a capture.
            _capture.refuse("launch (the first: JIT compile, module load, heap set-up)", handle)
        for name, t in tensors.items():
            self._bind(name, t, self.rank, handle)
        # The C call straight (its argtypes take the integers): a launch's host time is the
        # package's overhead over the C API, a few µs at most (python/tests/gpu_torch.py, part c).
        err = self._err
        if _lib.lib().mkc_launch_async(self._handle or self._gpu(), handle, err, len(err)) != 0:
            raise MkcError(f"mkc launch: {err.value.decode(errors='replace')}")

    __call__ = launch

    def synchronize(self):
        _capture.refuse("synchronize")
        lib = _lib.lib()
        self._call(lib.mkc_synchronize, self._gpu(), what="synchronize")

    def trace(self, path):
        """One traced launch (waits for it), written to `path` as Chrome/Perfetto JSON."""
        _capture.refuse("trace")
        lib = _lib.lib()
        self._call(lib.mkc_trace, self._gpu(), path.encode(), what="trace")

    def tune(self, candidates=6, budget_s=600.0, iters=20):
        """Measures the cost model's best `candidates` tiles and splits for each GEMM without
        tile(...) on this process's GPUs (at most `budget_s` seconds, `iters` launches each),
        stores the fastest in the tuning database (docs/TUNING.md) and rebuilds the kernel with
        it, as `mkc tune` does. Returns the winner's µs per launch (0.0: nothing to tune); the
        measurements' lines are in `self.tune_log`. Bindings do not survive: bind again. Every
        rank must be in this process (a kernel compiled with group= is refused)."""
        _capture.refuse("tune")
        lib = _lib.lib()
        us = ctypes.c_double(0.0)
        progress = ctypes.create_string_buffer(65536)
        rc = lib.mkc_tune(self._gpu(), int(candidates), float(budget_s), int(iters),
                          ctypes.byref(us), progress, len(progress), self._err, len(self._err))
        self.tune_log = progress.value.decode(errors="replace")
        if rc != 0:
            # The bound tensors stay held: the kernel may still point at them.
            raise MkcError(f"mkc tune: {self._err.value.decode(errors='replace')}")
        self._bound.clear()  # the rebuilt kernel starts on its own heap
        self._bound_ptrs.clear()
        return us.value

    def data_ptr(self, name, rank=None):
        """The device address of `name` (of `rank`) the kernel uses: for symmetric tensors the
        job's heap."""
        self.spec(name)
        if self._handle is None:
            _capture.refuse(f"data {name}")  # the first GPU call sets the kernel up there
        lib = _lib.lib()
        out = ctypes.c_void_p()
        self._call(lib.mkc_data, self._gpu(), name.encode(), self.rank if rank is None else rank,
                   ctypes.byref(out), what=f"data {name}")
        return out.value or 0

    def symmetric(self, name, rank=None):
        """Rank `rank`'s (default this process's) symmetric tensor `name` where the kernel keeps
        it, mkc's heap, as a framework tensor (mkc/_symmetric.py): fill it before a launch and
        read it after, in place; peers see it. It keeps this kernel alive."""
        spec = self.spec(name)
        rank = self.rank if rank is None else rank
        _symmetric.require_symmetric(spec)
        return _symmetric.to_framework(
            _symmetric.SymmetricArray(spec, self.data_ptr(name, rank), self, rank))

    def as_torch_op(self, name, *, outputs=None, bind=()):
        """This kernel as a PyTorch custom operator `name` ("namespace::op"), for torch.compile:
        mkc.torch_op(self, ...) (mkc/_torch_op.py says what it does)."""
        from ._torch_op import torch_op
        return torch_op(self, name, outputs=outputs, bind=bind)

    def close(self):
        if self._handle is not None:
            _lib.lib().mkc_free(self._handle)
            self._handle = None
            self._bound.clear()
            self._bound_ptrs.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


_current_stream = None  # () -> PyTorch's current stream handle, once PyTorch with CUDA was found


def _stream_handle(stream):
    global _current_stream
    if stream is None:
        if _current_stream is not None:
            return _current_stream()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            # PyTorch's raw-stream query (what its compiled code calls), found once: no Stream
            # object and no availability check per launch, a few µs of each; the public call
            # where it has none.
            c = getattr(torch, "_C", None)
            raw = getattr(c, "_cuda_getCurrentRawStream", None)
            device = getattr(c, "_cuda_getDevice", None)
            if raw is not None and device is not None:
                torch.cuda.current_device()  # PyTorch's CUDA initialised, as its public calls do
                _current_stream = lambda: raw(device())
                return _current_stream()
            return torch.cuda.current_stream().cuda_stream
        return 0
    if isinstance(stream, int):
        return stream
    handle = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream
    if handle is None:
        handle = getattr(stream, "ptr", None)  # cupy.cuda.Stream
    if handle is None:
        raise TypeError(f"mkc: stream={stream!r} is neither a handle nor a CUDA stream object")
    return int(handle)
