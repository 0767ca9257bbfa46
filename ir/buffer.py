"""Buffers: named, typed, shaped storage in a memory scope."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ir.dtypes import DType, dtype as to_dtype
from ir.errors import IRError
from ir.node import LocT, Node, loc_field

if TYPE_CHECKING:
    from ir.expr import BufferLoad

# Indices are int32, so one dimension holds at most this many elements.
MAX_EXTENT = 2**31 - 1


@dataclass(frozen=True, slots=True, eq=False)
class Buffer(Node):
    """A multi-dimensional array.

    A buffer is an identity, like a variable: two buffers with the same fields are different
    buffers. ``scope`` is the memory it lives in (``global``, ``shared``, ``wmma.matrix_a``,
    ``npu.inp`` ...). ``strides`` are in elements; ``None`` means dense row-major.
    """

    name: str
    shape: tuple[int, ...]
    dtype: DType
    scope: str = "global"
    strides: tuple[int, ...] | None = None
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", to_dtype(self.dtype))
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        if any(s <= 0 for s in self.shape):
            raise IRError(f"buffer {self.name} requires positive extents, got {self.shape}",
                          self.loc)
        if any(s > MAX_EXTENT for s in self.shape):
            raise IRError(f"buffer {self.name} requires extents of at most {MAX_EXTENT} (indices "
                          f"are int32), got {self.shape}", self.loc)
        if self.strides is not None:
            object.__setattr__(self, "strides", tuple(int(s) for s in self.strides))
            if len(self.strides) != len(self.shape):
                raise IRError(f"buffer {self.name} has {len(self.shape)} dimensions but "
                              f"{len(self.strides)} strides", self.loc)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        total = 1
        for extent in self.shape:
            total *= extent
        return total

    @property
    def effective_strides(self) -> tuple[int, ...]:
        """Strides in elements, dense row-major when none were given."""
        if self.strides is not None:
            return self.strides
        strides = []
        step = 1
        for extent in reversed(self.shape):
            strides.append(step)
            step *= extent
        return tuple(reversed(strides))

    def with_(self, **changes: object) -> Buffer:
        """A new buffer (a new identity) with some fields changed."""
        fields = {"name": self.name, "shape": self.shape, "dtype": self.dtype,
                  "scope": self.scope, "strides": self.strides, "loc": self.loc}
        fields.update(changes)
        return Buffer(**fields)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {self.shape}, {self.dtype}, {self.scope!r})"

    # Index sugar: A[i, j] builds a load (in TE bodies).
    def __getitem__(self, indices: object) -> "BufferLoad":
        from ir.expr import BufferLoad, as_expr

        if not isinstance(indices, tuple):
            indices = (indices,)
        return BufferLoad(self, tuple(as_expr(i) for i in indices))
