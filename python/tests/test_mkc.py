"""The mkc package on a machine without a GPU (CI): compile, the kernel's description, schedule
errors with their place, and tensors checked against the schedule. Runs against the installed
wheel (python/tests/wheel_test.sh installs it into a fresh virtual environment)."""
import ctypes
import os
import subprocess
import sys
import types
import unittest
from unittest import mock

import mkc
from mkc._tensors import _DLDataType, _DLDevice  # the package's own DLPack layout

SAMPLES = os.environ.get("MKC_SAMPLES", "samples")

GEMM_AR = os.path.join(SAMPLES, "gemm_allreduce.mks")


class FakeCudaArray:
    """A GPU array as CuPy or Numba present one (__cuda_array_interface__ v3), at an address
    nobody reads: the checks look at the description only."""

    def __init__(self, shape, typestr="<f4", strides=None, ptr=0x7f0000000000):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, False), "strides": strides, "version": 3}


class _DLManaged(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class FakeDLPack:
    """An array exported through DLPack (what JAX and PyTorch hand out), with its own capsule."""

    def __init__(self, shape, code=4, bits=16, device_type=2, ptr=0x7f0000000000):
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._t = _DLManaged(ptr, _DLDevice(device_type, 0), len(shape),
                             _DLDataType(code, bits, 1), self._shape, None, 0, None, None)

    def __dlpack__(self, stream=None):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self._t), b"dltensor", None)


class CompileTest(unittest.TestCase):
    def test_a_sample_compiles_without_a_gpu_and_describes_itself(self):
        k = mkc.compile(GEMM_AR, ranks=2, M=256, N=1024, K=512)
        self.assertIsInstance(k, mkc.Kernel)
        self.assertEqual(k.schedule, "gemm_allreduce")
        self.assertEqual(k.ranks, 2)
        self.assertEqual(set(k.tensors), {"A", "B", "C"})
        self.assertEqual(k.tensors["A"], mkc.TensorSpec("A", "bf16", (256, 512), "input", False))
        self.assertEqual(k.tensors["C"].shape, (256, 1024))
        self.assertTrue(k.tensors["C"].symmetric)
        self.assertIn("tasks", k.summary)
        self.assertTrue(any("gemm_tile" in p for p in k.paths))
        self.assertEqual(k.kernel_name, "mkc_gemm_allreduce")

    def test_parameters_change_the_shapes_and_the_world_changes_the_plan(self):
        a = mkc.compile(GEMM_AR, ranks=1, M=128, N=256, K=64)
        b = mkc.compile(GEMM_AR, ranks=4, M=128, N=256, K=64)
        self.assertEqual(a.tensors["B"].shape, (64, 256))
        self.assertNotEqual(a.summary, b.summary)
        nodes = mkc.compile(GEMM_AR, ranks=4, ranks_per_node=2, M=128, N=256, K=64)
        self.assertEqual(nodes.ranks_per_node, 2)

    def test_source_text_compiles_too(self):
        k = mkc.compile("schedule s {\n  input X : f32[64]\n  output Y : f32[64]\n"
                        "  compute c = copy(X -> Y)\n}\n", name="copy.mks")
        self.assertEqual(k.schedule, "s")
        self.assertEqual(k.source, "copy.mks")
        self.assertEqual(k.tensors["Y"].kind, "output")

    def test_schedule_errors_carry_their_place(self):
        text = "schedule s {\n  input X : f33[4]\n  output Y : f32[4]\n}\n"
        with self.assertRaises(mkc.ScheduleError) as cm:
            mkc.compile(text, name="bad.mks")
        e = cm.exception
        self.assertIsInstance(e, ValueError)
        self.assertEqual((e.file, e.line, e.column, e.kind), ("bad.mks", 2, 13, "unknown-dtype"))
        self.assertIn("f32", e.hint)
        self.assertIn("bad.mks:2:13: error: unknown element type `f33` [unknown-dtype]", str(e))
        self.assertEqual(len(e.diagnostics), 1)
        self.assertEqual(e.diagnostics[0]["severity"], "error")

    def test_every_error_is_reported(self):
        text = ("schedule s {\n  input X : f32[4]\n  output Y : f32[8]\n"
                "  compute c = copy(X -> Y)\n  compute d = copy(Z -> Y)\n}\n")
        with self.assertRaises(mkc.ScheduleError) as cm:
            mkc.compile(text)
        kinds = [d["kind"] for d in cm.exception.diagnostics]
        self.assertIn("shape-mismatch", kinds)
        self.assertIn("undefined-name", kinds)

    def test_bad_parameters_and_worlds(self):
        with self.assertRaises(mkc.ScheduleError) as cm:
            mkc.compile(GEMM_AR, ranks=2, Q=3)
        self.assertIn("Q", str(cm.exception))
        with self.assertRaises(TypeError):
            mkc.compile(GEMM_AR, M="big")
        with self.assertRaises(ValueError):
            mkc.compile(GEMM_AR, ranks=0)
        with self.assertRaises(FileNotFoundError):
            mkc.compile("no/such/file.mks")
        mkc.compile(GEMM_AR, ranks=3, M=256, N=1024, K=512)  # an odd world is fine
        with self.assertRaises(mkc.ScheduleError) as cm:
            mkc.compile("schedule s {\n  ranks R\n  input X : f32[7 / R]\n}\n", ranks=2)
        self.assertIn("inexact-division", str(cm.exception))


class TensorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.k = mkc.compile("schedule s {\n  input X : f32[4, 8]\n  input H : bf16[16]\n"
                            "  output Y : f32[4, 8]\n  output G : bf16[16]\n"
                            "  compute c = copy(X -> Y)\n  compute d = copy(H -> G)\n}\n")

    def assertTensorError(self, name, obj, *words):
        with self.assertRaises(mkc.TensorError) as cm:
            self.k.check(name, obj)
        self.assertEqual(cm.exception.tensor, name)
        self.assertIn(f"tensor `{name}`", str(cm.exception))
        for w in words:
            self.assertIn(w, str(cm.exception))

    def test_a_fitting_array_gives_its_address(self):
        self.assertEqual(self.k.check("X", FakeCudaArray((4, 8))), 0x7f0000000000)
        self.assertEqual(self.k.check("X", FakeCudaArray((4, 8), strides=(32, 4))), 0x7f0000000000)
        self.assertEqual(self.k.check("H", FakeDLPack((16,))), 0x7f0000000000)

    def test_wrong_dtype(self):
        self.assertTensorError("X", FakeCudaArray((4, 8), "<f2"), "f32", "f16")
        self.assertTensorError("H", FakeDLPack((16,), code=2, bits=32), "bf16", "f32")

    def test_wrong_shape(self):
        self.assertTensorError("X", FakeCudaArray((8, 4)), "[4, 8]", "[8, 4]")
        self.assertTensorError("H", FakeDLPack((15,)), "[16]", "[15]")

    def test_not_contiguous(self):
        self.assertTensorError("X", FakeCudaArray((4, 8), strides=(4, 16)), "contiguous")

    def test_host_memory(self):
        self.assertTensorError("H", FakeDLPack((16,), device_type=1), "cpu memory")

    def test_misaligned(self):
        self.assertTensorError("X", FakeCudaArray((4, 8), ptr=0x7f0000000004), "aligned")

    def test_not_an_array(self):
        self.assertTensorError("X", [1.0, 2.0], "list")

    def test_unknown_tensor(self):
        with self.assertRaises(KeyError) as cm:
            self.k.check("Z", FakeCudaArray((4, 8)))
        self.assertIn("X, H, Y, G", str(cm.exception))


class SymmetricTest(unittest.TestCase):
    """Kernel.symmetric's array, at an address nobody reads (the GPU part waits for a GPU)."""

    @classmethod
    def setUpClass(cls):
        cls.k = mkc.compile(GEMM_AR, ranks=2, M=256, N=1024, K=512)

    def test_a_symmetric_tensor_as_an_array_interface(self):
        spec = self.k.tensors["C"]
        self.assertTrue(spec.symmetric)
        a = mkc.SymmetricArray(spec, 0x7f0000001000, self.k, 1)
        cai = a.__cuda_array_interface__
        self.assertEqual(cai["shape"], (256, 1024))
        self.assertEqual(cai["typestr"], "<i2")  # bf16 has no typestr: 16-bit integers
        self.assertEqual(cai["data"], (0x7f0000001000, False))
        self.assertEqual(cai["version"], 3)
        self.assertEqual(a.mkc_dtype, "bf16")
        self.assertIs(a.owner, self.k)  # the heap lives while the array does
        self.assertIn("C of rank 1: bf16[256, 1024]", repr(a))
        # Handed back to the kernel, it is the schedule's C: the checks read mkc_dtype.
        self.assertEqual(self.k.check("C", a), 0x7f0000001000)

    def test_only_symmetric_tensors_are_handed_out(self):
        with self.assertRaises(mkc.TensorError) as cm:
            self.k.symmetric("A")
        self.assertEqual(cm.exception.tensor, "A")
        self.assertIn("not symmetric", str(cm.exception))
        with self.assertRaises(KeyError):
            self.k.symmetric("Z")
        with self.assertRaises(mkc.TensorError):
            mkc.SymmetricArray(self.k.tensors["C"], 0, self.k, 0)  # no memory for that rank


def fake_torch(capturing):
    """A stand-in for the `torch` module, as far as mkc's capture check reads it."""
    cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                 is_current_stream_capturing=lambda: capturing,
                                 current_stream=lambda: types.SimpleNamespace(cuda_stream=0))
    return types.SimpleNamespace(cuda=cuda)


class TorchOpTest(unittest.TestCase):
    """mkc.torch_op's checks, which come before PyTorch is imported (the op itself waits for a
    GPU: python/tests/gpu_torch.py)."""

    @classmethod
    def setUpClass(cls):
        cls.k = mkc.compile(GEMM_AR, ranks=1, M=128, N=256, K=64)

    def assertBad(self, exc, *words, **kwargs):
        kwargs.setdefault("name", "mylib::gemm_ar")
        with self.assertRaises(exc) as cm:
            mkc.torch_op(self.k, **kwargs)
        for w in words:
            self.assertIn(w, str(cm.exception))

    def test_without_torch_it_says_so(self):
        with mock.patch.dict(sys.modules, {"torch": None}):  # `import torch` fails
            for make in (lambda: mkc.torch_op(self.k, "mylib::gemm_ar", outputs=("C",)),
                         lambda: self.k.as_torch_op("mylib::gemm_ar")):
                with self.assertRaises(mkc.MkcError) as cm:
                    make()
                self.assertIn("needs PyTorch", str(cm.exception))

    def test_names_are_namespace_and_op(self):
        for bad in ("tp_linear", "mylib::", "my lib::op", "a::b::c", 3):
            self.assertBad(ValueError, "namespace::op", name=bad)

    def test_outputs_must_be_the_schedules_outputs(self):
        self.assertBad(KeyError, "no tensor `D`", "A, B, C", outputs=("D",))
        self.assertBad(ValueError, "`A`, of kind input", "outputs are C", outputs=("C", "A"))
        self.assertBad(ValueError, "twice", outputs=("C", "C"))
        self.assertBad(ValueError, "no output", outputs=())

    def test_bind_takes_inputs_only(self):
        self.assertBad(ValueError, "bind= names `C`", bind=("C",))
        self.assertBad(KeyError, "no tensor `W`", bind="W")
        k = mkc.compile("schedule s {\n  input X : f32[64] symmetric\n  output Y : f32[64]\n"
                        "  compute c = copy(X -> Y)\n}\n")
        with self.assertRaises(ValueError) as cm:
            mkc.torch_op(k, "mylib::copy", bind=("X",))
        self.assertIn("symmetric", str(cm.exception))

    def test_one_rank_per_process(self):
        k = mkc.compile(GEMM_AR, ranks=2, M=128, N=256, K=64)
        with self.assertRaises(ValueError) as cm:
            mkc.torch_op(k, "mylib::gemm_ar")
        self.assertIn("group=", str(cm.exception))

    def test_the_ops_arguments_are_the_schedules_inputs(self):
        from mkc._torch_op import _arg_names, _plan
        inputs, outputs, bound = _plan(self.k, "mylib::gemm_ar", None, "B")
        self.assertEqual([s.name for s in inputs], ["A", "B"])
        self.assertEqual([s.name for s in outputs], ["C"])
        self.assertEqual(bound, {"B"})
        spec = mkc.TensorSpec
        self.assertEqual(_arg_names([spec("A", "f32", (1,), "input", False),
                                     spec("in", "f32", (1,), "input", False)]), ["A", "in1"])


class CaptureTest(unittest.TestCase):
    """Under CUDA graph capture, the calls that cannot be captured (a first launch, a bind, a
    synchronize, a trace, a first GPU call) refuse before any CUDA call (mkc/_capture.py)."""

    def setUp(self):
        self.k = mkc.compile("schedule s {\n  input X : f32[64]\n  output Y : f32[64]\n"
                             "  compute c = copy(X -> Y)\n}\n")

    def test_graphs_are_supported(self):
        self.assertTrue(mkc.CUDA_GRAPHS)

    def test_every_gpu_call_refuses_a_capture(self):
        with mock.patch.dict(sys.modules, {"torch": fake_torch(capturing=True)}):
            for call in (self.k.launch, self.k.synchronize, lambda: self.k.data_ptr("Y"),
                         lambda: self.k.trace("t.json"),
                         lambda: self.k.launch(stream=0)):
                with self.assertRaises(mkc.MkcError) as cm:
                    call()
                self.assertIn("cannot be captured into a CUDA graph", str(cm.exception))
                self.assertIn("launch once eagerly", str(cm.exception))
        self.assertIsNone(self.k._handle)  # refused before the kernel went to the GPU

    def test_the_same_tensors_again_bind_nothing(self):
        """A launch with the tensors bound already makes no bind (no wait for the launches in
        flight), so it may be captured; a new address binds, and refuses under a capture."""
        calls = []
        fake_lib = types.SimpleNamespace(
            mkc_bind=lambda *a: calls.append("bind") or 0,
            mkc_launch_async=lambda *a: calls.append("launch") or 0)
        self.k._handle = ctypes.c_void_p(1)  # as if launched once (no GPU here)
        x, y = FakeCudaArray((64,), ptr=0x7f0000000000), FakeCudaArray((64,), ptr=0x7f0000001000)
        try:
            with mock.patch.object(mkc._lib, "lib", lambda: fake_lib):
                with mock.patch.dict(sys.modules, {"torch": fake_torch(capturing=False)}):
                    self.k(X=x, Y=y)
                    self.assertEqual(calls, ["bind", "bind", "launch"])
                    self.k(X=FakeCudaArray((64,), ptr=0x7f0000000000), Y=y)  # same memory
                    self.assertEqual(calls[3:], ["launch"])
                with mock.patch.dict(sys.modules, {"torch": fake_torch(capturing=True)}):
                    self.k.launch(stream=None, X=x, Y=y)  # captured: binds nothing
                    self.assertEqual(calls[4:], ["launch"])
                    with self.assertRaises(mkc.MkcError) as cm:
                        self.k.launch(X=FakeCudaArray((64,), ptr=0x7f0000002000))
                    self.assertIn("bind X", str(cm.exception))
                    self.assertIn("cannot be captured into a CUDA graph", str(cm.exception))
                    self.assertEqual(len(calls), 5)  # refused before any call
        finally:
            self.k._handle = None  # nothing for close() to free

    def test_a_bound_torch_tensor_is_rebound_when_its_memory_moves(self):
        """The same tensor object again takes the quick path (its address and shape looked at);
        when its storage moved (a new address under the same object) it binds again."""
        class Tensor:  # as much of a torch.Tensor as mkc reads
            __module__ = "torch"

            def __init__(self, ptr):
                self.ptr, self.shape, self.dtype = ptr, (64,), "torch.float32"
                self.device = types.SimpleNamespace(type="cuda", index=0)

            def data_ptr(self):
                return self.ptr

            def is_contiguous(self):
                return True

        calls = []
        fake_lib = types.SimpleNamespace(
            mkc_bind=lambda *a: calls.append(("bind", a[3].value if hasattr(a[3], "value")
                                              else a[3])) or 0,
            mkc_launch_async=lambda *a: calls.append(("launch",)) or 0)
        self.k._handle = ctypes.c_void_p(1)
        x, y = Tensor(0x7f0000000000), Tensor(0x7f0000001000)
        try:
            with mock.patch.object(mkc._lib, "lib", lambda: fake_lib), \
                    mock.patch.dict(sys.modules, {"torch": fake_torch(capturing=False)}):
                self.k(X=x, Y=y)
                self.k(X=x, Y=y)
                self.assertEqual([c[0] for c in calls], ["bind", "bind", "launch", "launch"])
                x.ptr = 0x7f0000002000  # the same object, its storage elsewhere
                self.k(X=x, Y=y)
                self.assertEqual(calls[4:], [("bind", 0x7f0000002000), ("launch",)])
                x.shape = (32,)  # resized in place: refused by the full check
                with self.assertRaises(mkc.TensorError):
                    self.k(X=x, Y=y)
        finally:
            self.k._handle = None

    def test_tune_passes_its_budget_and_forgets_the_bindings(self):
        seen = []

        def fake_tune(handle, candidates, budget_s, iters, us, progress, plen, err, elen):
            seen.append((candidates, budget_s, iters))
            ctypes.cast(us, ctypes.POINTER(ctypes.c_double))[0] = 12.5 if candidates > 1 else 0
            if candidates == 3:
                ctypes.memmove(err, b"no GPU here\0", 12)
                return 2
            ctypes.memmove(progress, b"mm tile(64, 64, 64) [1/2]: 12.50 us\n\0", 37)
            return 0

        fake_lib = types.SimpleNamespace(mkc_tune=fake_tune)
        self.k._handle = ctypes.c_void_p(1)
        self.k._bound[("X", 0)] = object()
        self.k._bound_ptrs[("X", 0)] = 0x7f0000000000
        try:
            with mock.patch.object(mkc._lib, "lib", lambda: fake_lib), \
                    mock.patch.dict(sys.modules, {"torch": fake_torch(capturing=False)}):
                self.assertEqual(mkc.tune(self.k, candidates=2, budget_s=30, iters=5), self.k)
                self.assertEqual(seen, [(2, 30.0, 5)])
                self.assertIn("12.50 us", self.k.tune_log)
                self.assertEqual(self.k._bound_ptrs, {})  # the rebuilt kernel: bind again
                with self.assertRaises(mkc.MkcError) as cm:
                    self.k.tune(candidates=3)
                self.assertIn("mkc tune: no GPU here", str(cm.exception))
            with mock.patch.dict(sys.modules, {"torch": fake_torch(capturing=True)}):
                with self.assertRaises(mkc.MkcError):
                    self.k.tune()  # not under a capture
        finally:
            self.k._handle = None

    @unittest.skipIf(os.path.exists("/dev/nvidia0"), "a GPU is present")
    def test_no_capture_no_refusal(self):
        with mock.patch.dict(sys.modules, {"torch": fake_torch(capturing=False)}):
            with self.assertRaises(mkc.MkcError) as cm:
                self.k.launch()
            self.assertNotIn("CUDA graph", str(cm.exception))
            self.assertIn("GPU", str(cm.exception))


class LibraryTest(unittest.TestCase):
    def run_python(self, code, **env):
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, **env}, timeout=60)

    def test_import_loads_no_library(self):
        r = self.run_python("import mkc, sys; print(mkc.__version__); "
                            "print('mkc._lib' in sys.modules and mkc._lib._lib is None)",
                            MKC_LIB="/nonexistent/libmkc.so")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), [mkc.__version__, "True"])

    def test_a_missing_library_is_a_clear_error(self):
        r = self.run_python("import mkc\ntry:\n  mkc.compile('schedule s {\\n}\\n')\n"
                            "except mkc.MkcError as e:\n  print(e)",
                            MKC_LIB="/nonexistent/libmkc.so")
        self.assertIn("no libmkc.so at /nonexistent/libmkc.so", r.stdout)

    @unittest.skipIf(os.path.exists("/dev/nvidia0"), "a GPU is present")
    def test_the_first_launch_without_a_gpu_says_so(self):
        k = mkc.compile("schedule s {\n  input X : f32[64]\n  output Y : f32[64]\n"
                        "  compute c = copy(X -> Y)\n}\n")
        with self.assertRaises(mkc.MkcError) as cm:
            k.launch()
        self.assertIn("GPU", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
