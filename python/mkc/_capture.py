"""CUDA graph capture: what may be captured, and the check that refuses the rest.

A launch may be captured (runtime/local_job_launch.cc). The kernel numbers its launches itself,
on the GPU (abi.h, KernelArgs::launches: every CTA reads the count at its start, the last to
leave advances it), and every wait targets (number - lag) * count on counters that only grow; so
each replay of a captured launch is the next launch, as an eager one would be. What the graph
holds is the kernel and its arguments: the tensors bound at the capture stay bound at every
replay (copy fresh inputs into them before a replay).

Around the kernel, a bind, a synchronize, a trace and the first launch (JIT compile, module load,
heap setup) make calls that capture forbids (cuStreamSynchronize, synchronous copies,
allocations). So the package refuses, before any CUDA call, those while PyTorch's current stream
(or the launch's stream) is capturing: MkcError, the capture left intact. Launch once before
capturing."""
import ctypes
import sys

from ._errors import MkcError

CUDA_GRAPHS = True  # a launch may be captured into a CUDA graph (after a first, eager one)

_REASON = ("this call cannot be captured into a CUDA graph (it synchronizes, copies or allocates); "
           "make it before the capture: bind the tensors and launch once eagerly, then capture "
           "launches only, and copy fresh inputs into the bound tensors between replays")

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
    """Raises MkcError for `what` (a call on `stream_handle`, or another GPU call) during a
    capture."""
    capturing = stream_capturing(stream_handle) if stream_handle is not None else None
    if capturing is None:
        capturing = torch_capturing()
    if capturing:
        raise MkcError(f"mkc {what}: {_REASON}")
