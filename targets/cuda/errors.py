"""The CUDA backend's errors, in the project's hierarchy (``ir.errors``): each is a
:class:`~ir.errors.TensorizeError`, so the command line prints it as ``error: ...`` (exit
status 2), never as an internal error."""

from ir.errors import ExecutionError, TensorizeError

__all__ = ["CompileError", "EmitError", "EmulationError"]


class EmitError(TensorizeError):
    """The CUDA backend cannot emit a function: names the statement or buffer and why."""


class CompileError(ExecutionError):
    """nvcc (or ptxas, or cuobjdump) rejected a source, the message holding its
    diagnostics, or is not installed."""


class EmulationError(ExecutionError):
    """The emulated kernel failed: a compile error, a misaligned or non-uniform WMMA
    operation, threads that diverge at a barrier, a race on shared memory, a read of
    shared memory nothing wrote, or an access outside a buffer."""
