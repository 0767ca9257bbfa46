"""The arm backend's errors, in the project's hierarchy (``ir.errors``)."""

from ir.errors import TensorizeError

__all__ = ["ArmRunError", "EmitError"]


class EmitError(TensorizeError):
    """The arm backend cannot emit a function: names the block or buffer and why."""


class ArmRunError(TensorizeError):
    """Object code could not be loaded or run (an unknown relocation, a fault, an index out
    of bounds reported by the kernel's checks)."""
