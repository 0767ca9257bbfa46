"""The CPU code generator's errors, in the project's hierarchy (``ir.errors``)."""

from ir.errors import TensorizeError

__all__ = ["CpuRunError", "EmitError"]


class EmitError(TensorizeError):
    """The CPU code generator cannot emit a function: names the block or buffer and why."""


class CpuRunError(TensorizeError):
    """Code could not be loaded or run: no engine here runs it (the reason says why), an
    unknown relocation, a fault, an index out of bounds reported by the kernel's checks."""
