"""A compiled function, called with numpy arrays: argument checks, intermediate storage filled
with poison, and the translation of a failed bounds check into an error."""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence

import numpy as np

from ir.buffer import Buffer
from ir.dtypes import DType
from ir.errors import ExecutionError
from ir.function import PrimFunc
from targets.host.codegen import Generated
from targets.host.exprs import BoundsSite
from targets.host.jit import MachineCode

# The bit patterns intermediates start with: a quiet NaN for floats, 0x5A bytes otherwise,
# so reading storage nobody wrote gives visibly wrong results rather than plausible zeros.
_POISON_BITS = {"float16": ("uint16", 0x7E00), "bfloat16": ("uint16", 0x7FC0),
                "float32": ("uint32", 0x7FC00000), "float64": ("uint64", 0x7FF8000000000000)}


class CompiledFunction:
    """A PrimFunc compiled for this machine.

    Call it with one numpy array per parameter, in order; it runs in place. Each array must
    have its parameter's shape and dtype, and its strides (in elements) must be those of the
    buffer (row-major unless the buffer declares strides).

    ``func`` is the function as given; ``written`` the parameters it stores to (after
    intrinsic lowering); ``optimized_llvm_ir`` the LLVM IR that was compiled, for inspection.
    """

    def __init__(self, func: PrimFunc, generated: Generated, code: MachineCode,
                 written: tuple[Buffer, ...]) -> None:
        self.func = func
        self.written = written
        self.optimized_llvm_ir = code.optimized_ir
        self._code = code
        self._intermediates = generated.buffers[len(func.params):]
        self._sites = generated.sites
        signature = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (len(generated.buffers) + 1)))
        self._entry = signature(code.address)

    @property
    def params(self) -> tuple[Buffer, ...]:
        """The parameters, in call order."""
        return self.func.params

    def __call__(self, *arrays: np.ndarray) -> None:
        """Run the function on ``arrays`` (one per parameter), writing its outputs in place."""
        params = self.func.params
        if len(arrays) != len(params):
            raise ExecutionError(f"function {self.func.name} requires {len(params)} arrays "
                                 f"({', '.join(p.name for p in params)}), got {len(arrays)}")
        pointers = []
        for param, array in zip(params, arrays):
            check_array(self.func.name, param, array)
            pointers.append(array.ctypes.data)
        # Allocated per call, so a compiled function can be called from several threads.
        scratch = [allocate(buffer, poison=True) for buffer in self._intermediates]
        pointers.extend(array.ctypes.data for array in scratch)
        status = np.zeros(3, dtype=np.int64)
        self._entry(*pointers, status.ctypes.data)
        if status[0]:
            raise _bounds_error(self.func.name, self._sites[int(status[0]) - 1],
                                int(status[1]), int(status[2]))


def check_array(func_name: str, param: Buffer, array: object) -> None:
    """Raise ExecutionError naming ``param`` unless ``array`` can be passed for it."""
    who = f"function {func_name}: parameter {param.name}"
    if not isinstance(array, np.ndarray):
        raise ExecutionError(f"{who} requires a numpy array, got {type(array).__name__}")
    if array.dtype != param.dtype.numpy:
        raise ExecutionError(f"{who} requires dtype {param.dtype}, got {array.dtype}")
    if array.shape != param.shape:
        raise ExecutionError(f"{who} requires shape {param.shape}, got {array.shape}")
    expected = param.effective_strides
    # A dimension of extent 1 is never stepped along, so its stride does not matter.
    if any(n > 1 and got != want * array.itemsize
           for n, got, want in zip(param.shape, array.strides, expected)):
        strides = tuple(s // array.itemsize for s in array.strides)
        raise ExecutionError(f"{who} requires element strides {expected}, got {strides}")
    if not array.flags.writeable:
        raise ExecutionError(f"{who} requires a writeable array")


def allocate(buffer: Buffer, poison: bool = False) -> np.ndarray:
    """An array of ``buffer``'s shape and dtype laid out with its strides: zeroed, or every
    byte set to the poison pattern."""
    dt: DType = buffer.dtype
    strides = buffer.effective_strides
    low = sum((n - 1) * s for n, s in zip(buffer.shape, strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(buffer.shape, strides) if s > 0)
    backing = np.zeros(high - low + 1, dtype=dt.numpy)
    if poison:
        bits_dtype, value = _POISON_BITS.get(dt.name, ("uint8", 0x5A))
        backing.view(bits_dtype)[...] = value
    itemsize = backing.itemsize
    # Strided through unsigned integers of the element's size: numpy's as_strided cannot
    # rebuild the ml_dtypes types (bfloat16, float8, int4) from their array interface.
    raw = backing.view(np.dtype(f"u{itemsize}"))
    return np.lib.stride_tricks.as_strided(
        raw[-low:], shape=buffer.shape, strides=tuple(s * itemsize for s in strides)
    ).view(dt.numpy)


def _bounds_error(func_name: str, site: BoundsSite, dim: int, index: int) -> ExecutionError:
    extent = site.buffer.shape[dim]
    return ExecutionError(f"function {func_name}, block {site.block!r}: the {site.kind} "
                          f"{site.access()} requires index {dim} of {site.buffer.name} in "
                          f"[0, {extent}), got {index}")


def gather_inputs(func: PrimFunc,
                  inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> list[np.ndarray]:
    """Fresh arrays for every parameter: a copy of the input given for it, else zeros."""
    if isinstance(inputs, Mapping):
        names = {p.name for p in func.params}
        for name in inputs:
            if name not in names:
                raise ExecutionError(f"function {func.name} has no parameter {name}; it has "
                                     f"{', '.join(p.name for p in func.params)}")
        given = dict(inputs)
    else:
        if len(inputs) > len(func.params):
            raise ExecutionError(f"function {func.name} requires at most {len(func.params)} "
                                 f"inputs, got {len(inputs)}")
        given = {p.name: value for p, value in zip(func.params, inputs)}
    arrays = []
    for param in func.params:
        array = allocate(param)
        if param.name in given:
            value = given[param.name]
            check_value(func.name, param, value)
            array[...] = value
        arrays.append(array)
    return arrays


def check_value(func_name: str, param: Buffer, value: object) -> None:
    """Raise ExecutionError naming ``param`` unless ``value`` has its shape and dtype."""
    who = f"function {func_name}: input {param.name}"
    if not isinstance(value, np.ndarray):
        raise ExecutionError(f"{who} requires a numpy array, got {type(value).__name__}")
    if value.dtype != param.dtype.numpy:
        raise ExecutionError(f"{who} requires dtype {param.dtype}, got {value.dtype}")
    if value.shape != param.shape:
        raise ExecutionError(f"{who} requires shape {param.shape}, got {value.shape}")
