"""What a framework's tensor is, without importing the framework: PyTorch tensors by their
attributes, and any other GPU array through `__cuda_array_interface__` or DLPack (`__dlpack__`).
Each is checked against the schedule's tensor (dtype, shape, device, a dense row-major layout, the
16-byte alignment the kernel's vector loads need) with an error naming it."""
import ctypes
from dataclasses import dataclass

from ._errors import TensorError

_TORCH_DTYPES = {
    "torch.bfloat16": "bf16", "torch.float16": "f16", "torch.float32": "f32",
    "torch.float64": "f64", "torch.int32": "i32", "torch.int64": "i64",
    "torch.float8_e4m3fn": "fp8_e4m3", "torch.float8_e5m2": "fp8_e5m2",
}
# __cuda_array_interface__ typestr (NumPy's) -> mkc's dtype. bf16 and fp8 have none.
_TYPESTRS = {"<f2": "f16", "<f4": "f32", "<f8": "f64", "<i4": "i32", "<i8": "i64"}
# DLPack (code, bits) -> mkc's dtype; codes: 0 int, 2 float, 4 bfloat.
_DLPACK_DTYPES = {(2, 16): "f16", (2, 32): "f32", (2, 64): "f64", (4, 16): "bf16", (0, 32): "i32",
                  (0, 64): "i64"}
_DLPACK_DEVICES = {1: "cpu", 2: "cuda", 3: "cuda_host", 13: "cuda_managed"}


@dataclass
class Described:
    ptr: int
    dtype: str        # mkc's name ("bf16", ...) or what the framework called it
    shape: tuple
    contiguous: bool
    device: str       # "cuda" or what else it is
    device_index: int  # -1 when the protocol does not say


def _contiguous(shape, strides_elems):
    if strides_elems is None:
        return True
    expect = 1
    for dim, stride in zip(reversed(shape), reversed(strides_elems)):
        if dim != 1 and stride != expect:
            return False
        expect *= dim
    return True


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


# Python's capsule calls, typed once (ctypes.pythonapi's functions are shared objects).
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack_capsule(capsule, name):
    if not _capsule_valid(capsule, b"dltensor"):
        raise TensorError(name, "its __dlpack__() did not return an unused DLPack capsule")
    # DLManagedTensor starts with its DLTensor. The capsule stays unconsumed: its producer frees
    # it when it is collected.
    t = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None
    code, bits = t.dtype.code, t.dtype.bits
    dtype = _DLPACK_DTYPES.get((code, bits), f"DLPack type code {code} of {bits} bits")
    if t.dtype.lanes != 1:
        dtype = f"a vector type of {t.dtype.lanes} lanes"
    device = _DLPACK_DEVICES.get(t.device.device_type, f"DLPack device {t.device.device_type}")
    return Described((t.data or 0) + t.byte_offset, dtype, shape, _contiguous(shape, strides),
                     device, t.device.device_id)


def describe(obj, name):
    """The tensor behind `obj` (PyTorch, CuPy, JAX, Numba, ...)."""
    cls = type(obj)
    if cls.__module__.split(".")[0] == "torch" and hasattr(obj, "data_ptr"):
        dtype = _TORCH_DTYPES.get(str(obj.dtype), str(obj.dtype))
        return Described(obj.data_ptr(), dtype, tuple(obj.shape), obj.is_contiguous(),
                         obj.device.type, obj.device.index if obj.device.index is not None else -1)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        shape = tuple(cai["shape"])
        typestr = cai["typestr"]
        # mkc's own arrays (Kernel.symmetric) say their type where the interface has no name.
        dtype = getattr(obj, "mkc_dtype", None) or _TYPESTRS.get(typestr, f"typestr {typestr!r}")
        strides = cai.get("strides")
        if strides is not None:
            itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 1
            if any(s % itemsize for s in strides):
                return Described(cai["data"][0], dtype, shape, False, "cuda", -1)
            strides = tuple(s // itemsize for s in strides)
        return Described(cai["data"][0], dtype, shape, _contiguous(shape, strides), "cuda", -1)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack_capsule(obj.__dlpack__(), name)
    raise TensorError(name, f"a {cls.__module__}.{cls.__name__} is not a GPU tensor mkc can read "
                            "(a PyTorch tensor, or an object with __cuda_array_interface__ or "
                            "__dlpack__)")


def quick_address(obj):
    """The data address of a PyTorch tensor without the rest of its description (a tensor seen
    before: a launch with the tensors bound already), else None."""
    if type(obj).__module__.split(".")[0] == "torch" and hasattr(obj, "data_ptr"):
        return obj.data_ptr()
    return None


def check(obj, spec):
    """The device address of `obj` after checking it against `spec` (a TensorSpec)."""
    d = describe(obj, spec.name)
    if d.device != "cuda":
        raise TensorError(spec.name, f"it is in {d.device} memory; the kernel reads GPU memory "
                                     "(move it with .cuda() / .to('cuda'))")
    if d.dtype != spec.dtype:
        raise TensorError(spec.name, f"the schedule's tensor is {spec.dtype}, this one is "
                                     f"{d.dtype}")
    if tuple(d.shape) != tuple(spec.shape):
        raise TensorError(spec.name, f"the schedule's tensor is {spec.dtype}{list(spec.shape)}, "
                                     f"this one has shape {list(d.shape)}")
    if not d.contiguous:
        raise TensorError(spec.name, "it is not contiguous (a view with strides); pass "
                                     ".contiguous() or a dense copy")
    if d.ptr % 16:
        raise TensorError(spec.name, f"its data at {d.ptr:#x} is not 16-byte aligned")
    return d.ptr
