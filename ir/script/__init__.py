"""The script front end: kernels written as decorated Python functions.

.. code-block:: python

    from ir import script as T

    @T.prim_func
    def scale(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        for i in range(16):
            with T.block("B"):
                vi = T.axis.spatial(16, i)
                B[vi] = A[vi] * 2.0

The body is parsed from its source, never run. Inside it, ``T.grid``, ``T.block``,
``T.axis.*``, ``T.max``... are syntax, listed in :data:`SCRIPT_FUNCTIONS`; calling one of them
from ordinary Python raises a KernelError saying so.
"""

from __future__ import annotations

from dataclasses import dataclass

from ir import dtypes
from ir.errors import KernelError
from ir.expr import MATH_FUNCTIONS
from ir.script.compute import parse_compute
from ir.script.entry import ir_module, load_file, parse, prim_func
from ir.script.func_parser import STATEMENT_FUNCTIONS

__all__ = ["SCRIPT_FUNCTIONS", "Buffer", "ir_module", "load_file", "parse", "parse_compute",
           "prim_func"]

SCRIPT_FUNCTIONS: tuple[str, ...] = (
    *(name for name in STATEMENT_FUNCTIONS if name != "Buffer" and "." not in name),
    "axis", "cast", "max", "min", "floordiv", "floormod", "if_then_else", *MATH_FUNCTIONS,
    *(d.name for d in dtypes.ALL_DTYPES),
)


@dataclass(frozen=True)
class Buffer:
    """A parameter annotation, ``A: T.Buffer((128, 128), "float32")``.

    Python evaluates annotations when it defines the function, so this is a real value; the
    parser reads the annotation's source instead and builds an :class:`ir.Buffer` from it.
    """

    shape: tuple[int, ...] | int
    dtype: str = "float32"
    scope: str = "global"
    strides: tuple[int, ...] | None = None


def _syntax_only(name: str) -> object:
    def call(*_args: object, **_kwargs: object) -> object:
        raise KernelError(f"T.{name} is kernel syntax: it is meaningful only inside a "
                          "@T.prim_func function, which is parsed, not run")

    call.__name__ = name
    return call


def __getattr__(name: str) -> object:
    """``T.grid``, ``T.block``...: names the parser reads; running them outside a kernel fails."""
    if name in SCRIPT_FUNCTIONS:
        return _syntax_only(name)
    raise AttributeError(f"module 'ir.script' has no attribute {name!r}")
