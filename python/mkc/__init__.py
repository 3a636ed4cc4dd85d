"""mkc from Python: a .mks schedule compiled into one persistent multi-GPU kernel, launched on a
framework's tensors (PyTorch, or any GPU array with __cuda_array_interface__ or DLPack).

    import mkc
    k = mkc.compile("samples/gemm_allreduce.mks", M=256, N=1024, K=512)
    k.tensors["C"]                   # TensorSpec(name='C', dtype='bf16', shape=(256, 1024), ...)
    k(A=a, B=b, C=c)                 # on the current stream, no host synchronisation
    op = mkc.torch_op(k, "mylib::gemm_ar")  # a torch.library custom op, for torch.compile

docs/PYTHON.md says what is built and what is not yet.
"""
from ._capture import CUDA_GRAPHS
from ._errors import MkcError, ScheduleError, TensorError
from ._kernel import Kernel, TensorSpec, compile, tune
from ._symmetric import SymmetricArray
from ._torch_op import torch_op

__version__ = "0.1.0"
__all__ = ["compile", "tune", "Kernel", "TensorSpec", "SymmetricArray", "torch_op", "CUDA_GRAPHS",
           "MkcError", "ScheduleError", "TensorError"]
