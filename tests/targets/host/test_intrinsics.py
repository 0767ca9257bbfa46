"""Intrinsic calls: run through a lowering hook, refused without one."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from ir import BufferLoad, BufferRegion, BufferStore, IntrinsicCall, Range, Var
from targets import host
from tests.targets.host.kernels import block, function, loop_nest


def _vadd4_kernel(n_chunks: int) -> ir.PrimFunc:
    """C = A + B over ``4 * n_chunks`` int8 elements, four at a time by intrinsic ``vadd4``."""
    n = 4 * n_chunks
    A, B, C = (ir.Buffer(name, (n,), "int8") for name in "ABC")
    o, vo = Var("o"), Var("vo")
    regions = tuple(BufferRegion(buf, (Range(vo * 4, ir.const(4, "int32")),))
                    for buf in (A, B, C))
    call = IntrinsicCall("vadd4", regions)
    return function([A, B, C], loop_nest([(o, n_chunks)], block("chunk", [(vo, n_chunks, "S")],
                                                                  [o], call)))


def _lower_vadd4(call: IntrinsicCall) -> ir.Stmt:
    """vadd4's semantics: out[t] = a[t] + b[t] for t in 0..3, at each region's start."""
    a, b, out = call.args
    assert isinstance(a, BufferRegion) and isinstance(b, BufferRegion)
    assert isinstance(out, BufferRegion)
    t = Var("t")

    def at(region: BufferRegion) -> tuple[ir.Expr]:
        return (region.ranges[0].start + t,)

    value = BufferLoad(a.buffer, at(a)) + BufferLoad(b.buffer, at(b))
    return ir.For(t, 4, BufferStore(out.buffer, value, at(out)))


def test_intrinsic_runs_through_its_lowering() -> None:
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, 12).astype(np.int8)
    b = rng.integers(-128, 128, 12).astype(np.int8)
    out = host.run(_vadd4_kernel(3), [a, b], lower_intrinsic=_lower_vadd4)["C"]
    np.testing.assert_array_equal(out, a + b)


def test_intrinsic_without_lowering_is_refused_by_name() -> None:
    with pytest.raises(ir.ExecutionError,
                       match="no lowering for intrinsic 'vadd4'; pass lower_intrinsic="):
        host.compile(_vadd4_kernel(2))


def test_lowering_that_returns_no_statement_is_refused() -> None:
    with pytest.raises(ir.ExecutionError, match="lower_intrinsic requires a Stmt for intrinsic "
                                                "'vadd4', got NoneType"):
        host.compile(_vadd4_kernel(2), lower_intrinsic=lambda call: None)  # type: ignore


def test_lowering_that_never_stops_calling_intrinsics_is_refused() -> None:
    with pytest.raises(ir.ExecutionError, match="stop calling intrinsics"):
        host.compile(_vadd4_kernel(2), lower_intrinsic=lambda call: call)


class _CallOuter(ir.Mutator):
    """Renames every vadd4 call to vadd4_outer, whose lowering calls vadd4."""

    def visit_IntrinsicCall(self, call: IntrinsicCall) -> ir.Stmt:
        return IntrinsicCall("vadd4_outer", call.args)


def test_lowering_may_call_further_intrinsics() -> None:
    def lower(call: IntrinsicCall) -> ir.Stmt:
        if call.intrinsic == "vadd4_outer":
            return IntrinsicCall("vadd4", call.args)
        return _lower_vadd4(call)

    a = np.arange(8, dtype=np.int8)
    func = _CallOuter().visit(_vadd4_kernel(2))
    out = host.run(func, [a, a], lower_intrinsic=lower)["C"]
    np.testing.assert_array_equal(out, 2 * a)
