"""The zero-filling 16-byte copy (a convolution's halo folded into the GEMM's copy): what the
vector proof accepts (`vector.zero_filled`, `vector_copy`), the clamps it drops from the
address (`vector.without_clamps`), and the emulation's checks of the copy."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

import ir
from ir import (
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    IterKind,
    IterVar,
    Select,
    Var,
    dtypes,
)
from ir.arith import Interval
from targets import cuda
from targets.cuda.vector import vector_copy, without_clamps, zero_filled
from tensorize.engine import auto_tensorize
from tests.targets.cuda.helpers import random_inputs, sized

needs_compiler = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                    reason="no host C++ compiler to build the emulation")

def _clamped(y: ir.Expr) -> ir.Expr:
    return ir.min_(ir.max_(y - 1, 0), 7)


def test_a_zero_padded_load_is_recognised_and_nothing_else():
    x = Buffer("X", (8, 16), dtypes.int8)
    y, c = Var("y"), Var("c")
    load = BufferLoad(x, (y, c))
    inside = ir.const(1, "int32") <= y
    assert zero_filled(Select(inside, load, ir.const(0, "int8"))) == (load, inside)
    assert zero_filled(Select(inside, load, ir.const(1, "int8"))) is None
    assert zero_filled(load) is None


def test_only_the_clamps_the_condition_implies_are_dropped():
    y = Var("y")
    both = ir.and_(ir.const(1, "int32") <= y, y < 9)  # 0 <= y - 1 <= 7
    assert without_clamps((_clamped(y),), both) == (y - 1,)
    # Without the upper bound, y - 1 may pass 7: the clamp stays.
    assert without_clamps((_clamped(y),), ir.const(1, "int32") <= y) == (_clamped(y),)
    assert without_clamps((_clamped(y),), ir.const(True, "bool")) == (_clamped(y),)


def _padding_copy(inside_uses_lane: bool) -> tuple[BlockRealize, Var]:
    """shared S[r, c] = select(inside, X[r, c], 0) over a row of 16 int8 (one lane loop)."""
    x = Buffer("X", (8, 16), dtypes.int8)
    s = Buffer("S", (8, 16), dtypes.int8, "shared")
    r, c = Var("r"), Var("c")
    inside = (c < 8) if inside_uses_lane else (ir.const(1, "int32") <= r)
    body = BufferStore(s, Select(inside, BufferLoad(x, (r, c)), ir.const(0, "int8")), (r, c))
    block = Block("S", (IterVar(r, 8, IterKind.SPATIAL), IterVar(c, 16, IterKind.SPATIAL)),
                  (), (), body)
    row, lane = Var("row"), Var("lane")
    return BlockRealize((row, lane), block), lane


@pytest.mark.parametrize("inside_uses_lane", [False, True])
def test_the_vector_proof_needs_one_condition_over_the_16_bytes(inside_uses_lane):
    realize, lane = _padding_copy(inside_uses_lane)
    ranges = {realize.bindings[0]: Interval(0, 7), lane: Interval(0, 15)}
    _, reason = vector_copy(realize, lane, 16, {}, ranges, {})
    if inside_uses_lane:
        assert reason == "its zero padding's condition changes within the 16 bytes"
    else:
        assert reason is None


@needs_compiler
@pytest.mark.parametrize("pipeline", [pytest.param(False, marks=pytest.mark.slow), True])
def test_a_misaligned_zero_fill_is_reported(pipeline, registry):
    func = sized("conv2d_nhwc_int8", batch=1, height=8, width=8, in_channels=32,
                 out_channels=16)
    kernel = cuda.emit(auto_tensorize(func, "cuda", registry=registry).func, registry,
                       pipeline=pipeline)
    move = "tz_cp_async16_zfill" if pipeline else "tz_copy16_zfill"
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        f"{move}(&pad_reindex_shared[", f"{move}(&pad_reindex_shared[4 + "))
    assert broken.source != kernel.source
    with pytest.raises(cuda.EmulationError, match="not 16-byte aligned"):
        cuda.emulate(broken, random_inputs(func, seed=2))
