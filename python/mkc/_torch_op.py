"""A compiled kernel as a PyTorch custom operator (torch.library), with a fake implementation,
so that torch.compile(fullgraph=True) traces a model that calls it.

    op = mkc.torch_op(k, "mylib::tp_linear", outputs=("C",))
    y = op(x, w)                  # the schedule's inputs in its order; returns new tensors

Semantics (functional: the op mutates none of its arguments and returns fresh tensors):
- Arguments are the schedule's `input` tensors, in the schedule's order, positional or by name.
  Each is checked against the schedule (dtype, shape, a CUDA tensor): TensorError, also while
  torch.compile traces (the fake implementation checks too).
- An input is copied, on the current stream, into the op's own tensor the kernel is bound to once
  (a symmetric input: into its place on mkc's heap). An input named in `bind=` is bound in place
  instead (no copy): for weights, whose address stays the same from call to call; binding a new
  address waits for the launches in flight (a host wait), so activations are better copied.
- The kernel is launched on the current stream, then each output in `outputs` (default: every
  `output` tensor of the schedule, in its order) is copied into a new tensor on the same stream.
  For a symmetric output (on mkc's heap, where peers write it) that copy is what makes the result
  the caller's: the next launch rewrites the heap. The copy is stream-ordered after this rank's
  launch, and peers write a rank's heap only after that rank's next launch has begun (the
  compiler's race check), so no host wait is needed.
- The op owns the kernel's bindings: a bind or a launch with tensors outside it is undone (the
  op's own tensors bound again) at the op's next call.
- Every process of the kernel's group calls the op the same number of times, as with any
  collective. No autograd formula is registered. The op is tagged cudagraph_unsafe where
  PyTorch has that tag (its first call binds, which a capture cannot hold; a rebind too): to
  replay mkc in a CUDA graph, capture Kernel.launch itself (mkc/_capture.py).
PyTorch is imported only when an op is made."""
import inspect
import keyword

from ._errors import MkcError, TensorError
from ._symmetric import _LAYOUT


_REGISTERED = {}  # name -> the op this process made under it


def _split_name(name):
    parts = name.split("::") if isinstance(name, str) else []
    if len(parts) != 2 or not all(p.isidentifier() for p in parts):
        raise ValueError(f"mkc.torch_op: name={name!r}; give \"namespace::op\" (two Python "
                         "identifiers), e.g. \"mylib::tp_linear\"")
    return parts


def _plan(kernel, name, outputs, bind):
    """The op's inputs and outputs (TensorSpecs), checked; needs no PyTorch."""
    _split_name(name)
    if name in _REGISTERED:
        raise ValueError(f"mkc.torch_op: `{name}` is registered already in this process (PyTorch "
                         "keeps an operator until the process ends); give another name, or use "
                         "the op made then")
    specs = list(kernel.tensors.values())
    inputs = [s for s in specs if s.kind == "input"]
    if outputs is None:
        outputs = [s.name for s in specs if s.kind == "output"]
    elif isinstance(outputs, str):
        outputs = [outputs]
    outputs = list(outputs)
    if not outputs:
        raise ValueError(f"mkc.torch_op: schedule `{kernel.schedule}` has no output tensor for "
                         "the op to return")
    out_specs = []
    for n in outputs:
        s = kernel.spec(n)  # KeyError listing the schedule's tensors
        if s.kind != "output":
            raise ValueError(f"mkc.torch_op: outputs= names `{n}`, of kind {s.kind} in "
                             f"`{kernel.schedule}`; its outputs are "
                             f"{', '.join(x.name for x in specs if x.kind == 'output')}")
        if n in (o.name for o in out_specs):
            raise ValueError(f"mkc.torch_op: outputs= names `{n}` twice")
        out_specs.append(s)
    bind = [bind] if isinstance(bind, str) else list(bind)
    for n in bind:
        s = kernel.spec(n)
        if s.kind != "input":
            raise ValueError(f"mkc.torch_op: bind= names `{n}`, of kind {s.kind}; only inputs "
                             "are bound in place (outputs are copied out)")
        if s.symmetric:
            raise ValueError(f"mkc.torch_op: bind= names `{n}`, which is symmetric: peers reach "
                             "it only on mkc's heap, so the op copies it there")
    for s in inputs + out_specs:
        if s.dtype not in _LAYOUT:
            raise TensorError(s.name, f"its type {s.dtype} has no PyTorch dtype here")
    if kernel._group is None and kernel.ranks > 1:
        raise ValueError(f"mkc.torch_op: the kernel runs {kernel.ranks} ranks in this process; "
                         "an op takes one rank's tensors: compile with group= (one process per "
                         "rank) or ranks=1")
    return inputs, out_specs, set(bind)


def _arg_names(inputs):
    """The schema's argument names: the schedule's, where they are usable as such."""
    names = []
    for i, s in enumerate(inputs):
        ok = s.name.isidentifier() and not keyword.iskeyword(s.name) and s.name not in names
        names.append(s.name if ok else f"in{i}")
    return names


def torch_op(kernel, name, *, outputs=None, bind=()):
    """Registers `kernel` as the PyTorch custom operator `name` ("namespace::op") and returns it
    (a torch.library CustomOpDef; also reachable as torch.ops.namespace.op). Raises ValueError or
    KeyError for bad arguments (before importing PyTorch), MkcError without PyTorch. A name is
    registered once per process (ValueError the second time)."""
    inputs, out_specs, bound = _plan(kernel, name, outputs, bind)
    try:
        import torch
    except ImportError as e:
        raise MkcError(f"mkc.torch_op needs PyTorch (torch.library), which is not importable "
                       f"here: {e}") from None
    if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
        raise MkcError(f"mkc.torch_op needs torch.library.custom_op (PyTorch 2.4 or later); "
                       f"this is PyTorch {torch.__version__}")
    dtypes = {s.name: getattr(torch, _LAYOUT[s.dtype][1]) for s in inputs + out_specs}
    names = _arg_names(inputs)
    ret = "Tensor" if len(out_specs) == 1 else f"({', '.join(['Tensor'] * len(out_specs))})"
    schema = f"({', '.join(f'Tensor {n}' for n in names)}) -> {ret}"

    def checked(args):
        if len(args) != len(inputs):
            raise TypeError(f"{name} takes {len(inputs)} tensor(s) "
                            f"({', '.join(s.name for s in inputs)}), got {len(args)}")
        for s, t in zip(inputs, args):
            if t.dtype != dtypes[s.name]:
                raise TensorError(s.name, f"the schedule's tensor is {s.dtype}, this one is "
                                          f"{t.dtype}")
            if tuple(t.shape) != tuple(s.shape):
                raise TensorError(s.name, f"the schedule's tensor is {s.dtype}{list(s.shape)}, "
                                          f"this one has shape {list(t.shape)}")
            if t.device.type != "cuda":
                raise TensorError(s.name, f"it is on {t.device}; the op takes CUDA tensors")

    def device_of(args):
        return args[0].device if args else torch.device("cuda", torch.cuda.current_device())

    def fake(*args):
        checked(args)
        dev = device_of(args)
        outs = tuple(torch.empty(s.shape, dtype=dtypes[s.name], device=dev) for s in out_specs)
        return outs[0] if len(outs) == 1 else outs

    place = {}  # schedule name -> the tensor the kernel reads or writes (made at the first call)

    def places(dev):
        if not place:
            for s in inputs + out_specs:
                if s.name in bound:
                    continue
                if s.symmetric:
                    t = kernel.symmetric(s.name)
                    if not isinstance(t, torch.Tensor):
                        raise MkcError(f"{name}: symmetric `{s.name}` is not a PyTorch tensor "
                                       "(no CUDA in this PyTorch?)")
                else:
                    t = torch.empty(s.shape, dtype=dtypes[s.name], device=dev)
                    kernel.bind(s.name, t)  # once: the kernel keeps it alive
                place[s.name] = t
        return place

    def real(*args):
        checked(args)
        p = places(device_of(args))
        for s, t in zip(inputs, args):
            if s.name in bound:
                if not t.is_contiguous() or t.data_ptr() % 16:
                    t = t.contiguous() if not t.is_contiguous() else t.clone()
                held = kernel._bound.get((s.name, kernel.rank))
                if held is None or held.data_ptr() != t.data_ptr():
                    kernel.bind(s.name, t)  # waits for the launches in flight
                else:
                    kernel._bound[(s.name, kernel.rank)] = t  # same address: keep the newest
            else:
                p[s.name].copy_(t)
        for s in inputs + out_specs:  # a bind outside the op (k.launch(A=...)) is undone
            if not s.symmetric and s.name not in bound and \
                    kernel._bound.get((s.name, kernel.rank)) is not p[s.name]:
                kernel.bind(s.name, p[s.name])
        kernel.launch()
        outs = tuple(p[s.name].clone() for s in out_specs)
        return outs[0] if len(outs) == 1 else outs

    # Both take the schema's arguments by their names (what the dispatcher and kwargs see).
    sig = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=torch.Tensor)
         for n in names])
    real.__signature__ = fake.__signature__ = sig
    kwargs = {"mutates_args": (), "device_types": "cuda", "schema": schema}
    unsafe = getattr(getattr(torch, "Tag", None), "cudagraph_unsafe", None)
    if unsafe is not None:
        kwargs["tags"] = (unsafe,)
    try:
        op = torch.library.custom_op(name, real, **kwargs)
    except TypeError:  # a PyTorch whose custom_op takes no tags
        kwargs.pop("tags", None)
        op = torch.library.custom_op(name, real, **kwargs)
    op.register_fake(fake)
    _REGISTERED[name] = op
    return op
