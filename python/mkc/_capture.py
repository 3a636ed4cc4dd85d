"""CUDA graph capture: why an mkc launch cannot be captured, and the check that refuses one.

A launch is not capturable (runtime/local_job_launch.cc). Each launch passes its epoch, the
launch's number, by value in the kernel's arguments, and every wait in the kernel targets
(epoch - lag) * count on counters that only ever grow (nothing is reset between launches). A
captured launch would freeze one epoch into the graph: its first replay would run, every later
replay would find its counters already past their targets and race through its waits (wrong
results, no error), and the eager launches after it would run with counters ahead of their epochs.
Around the kernel, a bind, a synchronize, a trace and the first launch (JIT compile, module load,
heap setup) make calls that capture forbids (cuStreamSynchronize, synchronous copies, allocations).

So the package refuses, before any CUDA call, every launch on a stream that is capturing and
every other GPU call while PyTorch's current stream is capturing: MkcError, the capture left
intact. Making launches capturable needs the epoch read from device memory and advanced by the
graph itself, a change to the kernel's ABI (templates/mkc), not made here."""
import ctypes
import sys

from ._errors import MkcError

CUDA_GRAPHS = False  # whether a launch may be captured into a CUDA graph

_REASON = ("mkc launches cannot be captured into a CUDA graph: each launch passes its own epoch "
           "(launch number) to the kernel, and a replayed graph would repeat a stale one, so its "
           "waits would pass early and its results would be wrong; launch outside the capture "
           "(for torch.compile: not mode='reduce-overhead' around an mkc op)")

_cuda = None  # libcuda through ctypes, False when there is none


def _driver():
    global _cuda
    if _cuda is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            fn = lib.cuStreamIsCapturing
            fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
            fn.restype = ctypes.c_int
            _cuda = fn
        except (OSError, AttributeError):
            _cuda = False
    return _cuda


def stream_capturing(handle):
    """Whether the CUDA stream `handle` is capturing (or its capture was invalidated); None when
    the driver cannot say (no driver, none initialised, a handle it refuses)."""
    fn = _driver()
    if not fn:
        return None
    status = ctypes.c_int(0)
    if fn(ctypes.c_void_p(handle), ctypes.byref(status)) != 0:
        return None
    return status.value != 0  # CU_STREAM_CAPTURE_STATUS_ACTIVE or _INVALIDATED


def torch_capturing():
    """Whether PyTorch (when it is loaded and has started CUDA) captures on its current stream."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return False
    return bool(torch.cuda.is_current_stream_capturing())


def refuse(what, stream_handle=None):
    """Raises MkcError for `what` (a launch on `stream_handle`, or another GPU call) during a
    capture."""
    capturing = stream_capturing(stream_handle) if stream_handle is not None else None
    if capturing is None:
        capturing = torch_capturing()
    if capturing:
        raise MkcError(f"mkc {what}: {_REASON}")
