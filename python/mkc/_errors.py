"""The exceptions mkc raises: what the user can fix, located where it can be."""


class MkcError(RuntimeError):
    """mkc failed: the machine (no driver, no NVRTC, a failed CUDA call) or mkc itself."""


class ScheduleError(MkcError, ValueError):
    """The schedule has errors. `diagnostics` holds each one (file, line, column, kind, message,
    hint, notes); str() is the text `mkc check` prints."""

    def __init__(self, text, diagnostics):
        super().__init__(text)
        self.diagnostics = diagnostics
        first = diagnostics[0] if diagnostics else {}
        self.file = first.get("file")
        self.line = first.get("line")
        self.column = first.get("column")
        self.kind = first.get("kind")
        self.hint = first.get("hint")


class TensorError(MkcError, ValueError):
    """A tensor given for a schedule's tensor does not fit it (dtype, shape, device, layout);
    `tensor` names the schedule's tensor."""

    def __init__(self, tensor, message):
        super().__init__(f"tensor `{tensor}`: {message}")
        self.tensor = tensor
