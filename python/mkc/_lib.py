"""Loads libmkc.so (the C API, runtime/capi.h) through ctypes, once, on first use.

`import mkc` never loads it, so importing works on any machine; the first compile does. The library
is the one shipped inside the package (beside this file), or $MKC_LIB. It needs NVRTC from the CUDA
Toolkit (libnvrtc.so.13): found the way the dynamic loader finds it, else under $CUDA_HOME/lib64 or
/usr/local/cuda/lib64.
"""
import ctypes
import os

from ._errors import MkcError

# mkc_gather_fn (runtime/capi.h): the caller's all-gather of fixed-size blocks.
GATHER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                             ctypes.c_void_p)

# The C API's version this package speaks (mkc_abi_version); a library of another is refused.
ABI_VERSION = 4

_lib = None


def _preload_nvrtc():
    for name in ("libnvrtc.so.13",):
        candidates = [name]
        for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
            if root:
                candidates.append(os.path.join(root, "lib64", name))
        for c in candidates:
            try:
                ctypes.CDLL(c, mode=ctypes.RTLD_GLOBAL)
                return
            except OSError:
                continue


def lib():
    """The loaded library, with its functions' signatures declared."""
    global _lib
    if _lib is not None:
        return _lib
    path = os.environ.get("MKC_LIB") or os.path.join(os.path.dirname(__file__), "libmkc.so")
    if not os.path.exists(path):
        raise MkcError(f"mkc: no libmkc.so at {path} (set MKC_LIB, or install the mkc wheel: "
                       "tools/wheel.sh builds it)")
    _preload_nvrtc()
    try:
        handle = ctypes.CDLL(path)
    except OSError as e:
        raise MkcError(f"mkc: cannot load {path}: {e} (it needs NVRTC 13 from the CUDA Toolkit: "
                       "put its lib64 on LD_LIBRARY_PATH or set CUDA_HOME)") from None
    c_int, c_char_p, c_void_p = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p
    pp_char = ctypes.POINTER(ctypes.c_char_p)
    sigs = {
        "mkc_abi_version": ([], c_int),
        "mkc_inspect": ([c_char_p, c_char_p, c_char_p, c_int, c_int, ctypes.POINTER(c_void_p)],
                        c_int),
        "mkc_free_string": ([c_void_p], None),
        "mkc_compile_string": ([c_char_p, c_char_p, c_char_p, c_int, c_int,
                                ctypes.POINTER(c_void_p), c_char_p, c_int], c_int),
        "mkc_compile_string_group": ([c_char_p, c_char_p, c_char_p, c_int, c_int, c_int, c_int,
                                      c_int, GATHER_FN, c_void_p, ctypes.POINTER(c_void_p),
                                      c_char_p, c_int], c_int),
        "mkc_bind": ([c_void_p, c_char_p, c_int, c_void_p, c_char_p, c_int], c_int),
        "mkc_data": ([c_void_p, c_char_p, c_int, ctypes.POINTER(c_void_p), c_char_p, c_int], c_int),
        "mkc_launch_async": ([c_void_p, c_void_p, c_char_p, c_int], c_int),
        "mkc_synchronize": ([c_void_p, c_char_p, c_int], c_int),
        "mkc_trace": ([c_void_p, c_char_p, c_char_p, c_int], c_int),
        "mkc_tune": ([c_void_p, c_int, ctypes.c_double, c_int, ctypes.POINTER(ctypes.c_double),
                      c_char_p, c_int, c_char_p, c_int], c_int),
        "mkc_free": ([c_void_p], None),
    }
    del pp_char
    for name, (args, res) in sigs.items():
        try:
            fn = getattr(handle, name)
        except AttributeError:
            raise MkcError(f"mkc: {path} has no `{name}`: it is older than this package "
                           f"(C API version {ABI_VERSION})") from None
        fn.argtypes = args
        fn.restype = res
    version = handle.mkc_abi_version()
    if version != ABI_VERSION:
        raise MkcError(f"mkc: {path} speaks C API version {version}, this package {ABI_VERSION}: "
                       "install the library and the package from one build")
    _lib = handle
    return _lib
