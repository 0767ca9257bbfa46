"""The host backend: any PrimFunc compiled for this machine by LLVM, run on numpy arrays.

This is the reference executor every transform is checked against, so it must run *any*
function exactly as the IR defines it, and fast enough for real sizes (a 256^3 GEMM, or a
ResNet-50 3x3 convolution layer, in about a second including compilation).

Why an LLVM JIT (llvmlite's IR builder, then MCJIT at -O3) rather than the alternatives:

- Generality. The function is lowered statement by statement, so whatever shape a schedule
  leaves (split and fused loops, predicates, init, selects, casts, blocks inside blocks) runs
  without the executor having to recognise a pattern. Vectorising with numpy, by contrast,
  works only for the loop nests one can map onto array operations.
- Exact semantics. LLVM's integer operations on i8/i16/i32 wrap, so arithmetic runs in each
  expression's own dtype and wraps where numpy's does; floor division, the 16-bit floats and
  float-to-integer conversion are spelled out where LLVM differs (:mod:`.exprs`,
  :mod:`.numerics`).
- Speed. A reduction written with its reduce loops innermost runs with the innermost spatial
  loop moved inside them, so LLVM vectorises it (:mod:`.interchange`; exact for every dtype).
  A Python interpreter of the IR runs a 256^3 GEMM's 16.7 million iterations in
  minutes; emitting C needs a compiler on the machine. LLVM compiles a kernel in tens of
  milliseconds and runs it at native speed.

Every buffer access is checked against its dimension's extent; a schedule that indexes out of
bounds gets an ExecutionError naming the access rather than corrupted memory. The checks cost
little: LLVM removes those it can prove from the loop bounds.

Public API: :func:`compile`, :func:`run`, :func:`emit_llvm`, :class:`CompiledFunction`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence

import numpy as np

from ir.function import PrimFunc
from targets.host.codegen import Generated, generate
from targets.host.executable import CompiledFunction, gather_inputs
from targets.host.interchange import sink_spatial_loops
from targets.host.jit import compile_module
from targets.host.prepare import LowerIntrinsic, lower_intrinsics, storage, written_params

__all__ = ["CompiledFunction", "LowerIntrinsic", "compile", "emit_llvm", "run"]

# Compiled functions by (function, lowering) identity. Holding the function keeps its id from
# being reused; the bound keeps the machine code of many throwaway functions from piling up.
_CACHE: OrderedDict[tuple[int, int], tuple[PrimFunc, object, CompiledFunction]] = OrderedDict()
_CACHE_SIZE = 64


def compile(func: PrimFunc, lower_intrinsic: LowerIntrinsic | None = None) -> CompiledFunction:
    """Compile ``func`` for this machine; the result is called with one array per parameter.

    ``lower_intrinsic`` turns each ``IntrinsicCall`` into plain IR computing its semantics;
    without it, a function that calls an intrinsic raises ExecutionError. Compiling the same
    function object (with the same hook) again returns the cached result.
    """
    key = (id(func), id(lower_intrinsic))
    cached = _CACHE.get(key)
    if cached is not None and cached[0] is func and cached[1] is lower_intrinsic:
        _CACHE.move_to_end(key)
        return cached[2]
    lowered = lower_intrinsics(func, lower_intrinsic)
    generated = _generate(sink_spatial_loops(lowered))
    code = compile_module(str(generated.module), generated.symbol)
    compiled = CompiledFunction(func, generated, code, written_params(lowered))
    _CACHE[key] = (func, lower_intrinsic, compiled)
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return compiled


def run(func: PrimFunc, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray],
        lower_intrinsic: LowerIntrinsic | None = None) -> dict[str, np.ndarray]:
    """Run ``func`` on copies of ``inputs`` and return every parameter it writes, by name.

    ``inputs`` maps parameter names to arrays, or lists arrays for the first parameters in
    order; parameters not given start as zeros. Each input must have its parameter's shape
    and dtype.
    """
    compiled = compile(func, lower_intrinsic)
    arrays = gather_inputs(func, inputs)
    compiled(*arrays)
    written = {id(p) for p in compiled.written}
    return {p.name: a for p, a in zip(func.params, arrays) if id(p) in written}


def emit_llvm(func: PrimFunc, lower_intrinsic: LowerIntrinsic | None = None) -> str:
    """The LLVM IR the host backend generates for ``func``, before optimization."""
    return str(_generate(sink_spatial_loops(lower_intrinsics(func, lower_intrinsic))).module)


def _generate(func: PrimFunc) -> Generated:
    return generate(func, storage(func))
