"""Scalar data types: the element types of buffers and the result types of expressions."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import ml_dtypes
import numpy as np

from ir.errors import IRError


@dataclass(frozen=True, slots=True)
class DType:
    """A scalar type: ``kind`` is one of ``int``, ``uint``, ``float``, ``bfloat``, ``bool``.

    The narrow types (int4, uint4, float8_e4m3, float8_e5m2) are held by numpy one value to a
    byte (ml_dtypes; a 4-bit integer in the low nibble, sign-extended when read).
    """

    name: str
    kind: str
    bits: int

    def __str__(self) -> str:
        return self.name

    @property
    def is_int(self) -> bool:
        """True for signed and unsigned integers (not bool)."""
        return self.kind in ("int", "uint")

    @property
    def is_float(self) -> bool:
        """True for the float types (float8 to float64, bfloat16)."""
        return self.kind in ("float", "bfloat")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that holds values of this type (ml_dtypes for bfloat16, the 4-bit
        integers and the float8 types)."""
        return _NUMPY[self.name]

    @property
    def min(self) -> int | float:
        """The smallest representable value."""
        return _limits(self)[0]

    @property
    def max(self) -> int | float:
        """The largest representable value."""
        return _limits(self)[1]


# Every expression node checks its constants against these, so they are looked up once per
# type: ml_dtypes.iinfo builds a new object on each call (7% of ResNet-50's run on the NPU,
# in a profile).
@lru_cache(maxsize=None)
def _limits(dt: DType) -> tuple[int, int] | tuple[float, float]:
    """(smallest, largest) value of ``dt``."""
    if dt.is_int:
        info = ml_dtypes.iinfo(dt.numpy)
        return int(info.min), int(info.max)
    if dt.is_bool:
        return 0, 1
    largest = float(ml_dtypes.finfo(dt.numpy).max)
    return -largest, largest


bool_ = DType("bool", "bool", 1)
int4 = DType("int4", "int", 4)
uint4 = DType("uint4", "uint", 4)
int8 = DType("int8", "int", 8)
int16 = DType("int16", "int", 16)
int32 = DType("int32", "int", 32)
int64 = DType("int64", "int", 64)
uint8 = DType("uint8", "uint", 8)
uint16 = DType("uint16", "uint", 16)
uint32 = DType("uint32", "uint", 32)
# The two 8-bit floats of NVIDIA's tensor cores (sm_89+): e4m3 has no infinity and one NaN
# pattern (ml_dtypes' float8_e4m3fn, CUDA's __nv_fp8_e4m3); e5m2 is IEEE-like.
float8_e4m3 = DType("float8_e4m3", "float", 8)
float8_e5m2 = DType("float8_e5m2", "float", 8)
float16 = DType("float16", "float", 16)
bfloat16 = DType("bfloat16", "bfloat", 16)
float32 = DType("float32", "float", 32)
float64 = DType("float64", "float", 64)

ALL_DTYPES: tuple[DType, ...] = (
    bool_, int8, int16, int32, int64, uint8, uint16, uint32, float16, bfloat16, float32, float64,
    int4, uint4, float8_e4m3, float8_e5m2,
)
_BY_NAME = {d.name: d for d in ALL_DTYPES}
# Short spellings accepted wherever a dtype is named (kernels and intrinsic semantics).
_ALIASES = {
    "i8": int8, "i16": int16, "i32": int32, "i64": int64,
    "u8": uint8, "u16": uint16, "u32": uint32,
    "f16": float16, "bf16": bfloat16, "f32": float32, "f64": float64,
    "s8": int8, "s32": int32, "half": float16, "float": float32,
    "i4": int4, "s4": int4, "u4": uint4, "e4m3": float8_e4m3, "e5m2": float8_e5m2,
}
_NUMPY = {
    "bool": np.dtype(np.bool_), "int8": np.dtype(np.int8), "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32), "int64": np.dtype(np.int64), "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16), "uint32": np.dtype(np.uint32),
    "float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32), "float64": np.dtype(np.float64),
    "int4": np.dtype(ml_dtypes.int4), "uint4": np.dtype(ml_dtypes.uint4),
    "float8_e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
}


def dtype(value: DType | str | np.dtype) -> DType:
    """Coerce a dtype name (``"int8"``, ``"f32"``...), a numpy dtype or a DType to a DType."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        found = _BY_NAME.get(value) or _ALIASES.get(value)
        if found is None:
            known = ", ".join(_BY_NAME)
            raise IRError(f"unknown dtype {value!r}; expected one of {known}")
        return found
    as_numpy = np.dtype(value)
    for name, candidate in _NUMPY.items():
        if candidate == as_numpy:
            return _BY_NAME[name]
    raise IRError(f"numpy dtype {as_numpy} has no tensorize equivalent")


def is_dtype_name(name: str) -> bool:
    """True when ``name`` spells a dtype (full name or alias)."""
    return name in _BY_NAME or name in _ALIASES


def narrow_array(values: np.ndarray, dt: DType | str) -> np.ndarray:
    """``values`` as an array of ``dt``, refusing what ``dt`` cannot hold: an integer out of
    its range (numpy's cast would wrap it silently) or, for a float type, a finite value whose
    magnitude exceeds its largest (the cast would give NaN or infinity)."""
    dt = dtype(dt)
    given = np.asarray(values)
    if dt.is_int and given.size:
        low, high = int(given.min()), int(given.max())
        if low < dt.min or high > dt.max:
            raise IRError(f"{dt} holds {dt.min}..{dt.max}, got values in {low}..{high}")
    if dt.is_float and given.size:
        finite = np.abs(given[np.isfinite(given)].astype(np.float64))
        if finite.size and finite.max() > dt.max:
            raise IRError(f"{dt} holds magnitudes up to {dt.max}, got {finite.max()}")
    return given.astype(dt.numpy)
