"""A schedule's symmetric tensors as framework tensors, without a copy.

A `symmetric` tensor lives on mkc's heap, where peers read and write it; with one process per
rank it cannot be bound to the caller's memory, so the caller fills and reads it in place.
`Kernel.symmetric(name)` hands it out: a PyTorch tensor when PyTorch is loaded, otherwise an
object with `__cuda_array_interface__` (version 3) that CuPy, Numba or `torch.as_tensor` take.
bf16 and fp8 have no typestr in that interface: they are described as integers of their width,
and `mkc_dtype` says what they are (the PyTorch tensor is viewed back as bf16 or fp8). The array
holds its kernel, so the heap outlives every tensor made from it."""
import sys

from ._errors import TensorError

# mkc's dtype -> (a __cuda_array_interface__ typestr of its width, PyTorch's dtype name).
_LAYOUT = {
    "bf16": ("<i2", "bfloat16"), "f16": ("<f2", "float16"), "f32": ("<f4", "float32"),
    "f64": ("<f8", "float64"), "i32": ("<i4", "int32"), "i64": ("<i8", "int64"),
    "fp8_e4m3": ("|u1", "float8_e4m3fn"), "fp8_e5m2": ("|u1", "float8_e5m2"),
}


def require_symmetric(spec):
    """Raises TensorError naming `spec`'s tensor unless it can be handed out."""
    if not spec.symmetric:
        raise TensorError(spec.name, "it is not symmetric (only the heap's tensors are handed "
                                     "out); pass your own tensor to bind() or the launch")
    if spec.dtype not in _LAYOUT:
        raise TensorError(spec.name, f"its type {spec.dtype} has no framework layout here")


class SymmetricArray:
    """Rank `rank`'s symmetric tensor `spec.name` at device address `ptr` on `owner`'s heap."""

    def __init__(self, spec, ptr, owner, rank):
        require_symmetric(spec)
        if not ptr:
            raise TensorError(spec.name, f"rank {rank} has no memory for it in this process")
        self.spec, self.ptr, self.owner, self.rank = spec, ptr, owner, rank
        self.mkc_dtype = spec.dtype

    @property
    def __cuda_array_interface__(self):
        return {"shape": tuple(self.spec.shape), "typestr": _LAYOUT[self.spec.dtype][0],
                "data": (self.ptr, False), "strides": None, "version": 3}

    def __repr__(self):
        return (f"<mkc.SymmetricArray {self.spec.name} of rank {self.rank}: "
                f"{self.spec.dtype}{list(self.spec.shape)} at {self.ptr:#x}>")


def to_framework(array):
    """`array` as a PyTorch tensor on its GPU when PyTorch is loaded, else `array` itself."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return array
    t = torch.as_tensor(array, device="cuda")
    want = getattr(torch, _LAYOUT[array.mkc_dtype][1])
    return t if t.dtype == want else t.view(want)
