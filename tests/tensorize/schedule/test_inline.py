"""compute_inline, inline_update and write_in_place: results unchanged, refusals clear."""

from __future__ import annotations

import pytest

import ir
from ir import ScheduleError, te
from ir.verify import verify
from tensorize.schedule import Schedule, tree
from tests.tensorize.schedule.kernels import assert_same_results, matmul_relu


def scale_then_add(n: int = 16) -> ir.PrimFunc:
    A = te.placeholder((n, n), "int32", "A")
    S = te.compute((n, n), lambda i, j: A[i, j] * 3, "S")
    C = te.compute((n, n), lambda i, j: S[i, j] + S[j, i], "C")
    return te.create_prim_func([A, C], "scale_then_add")


def test_inlined_block_disappears_and_results_match():
    func = scale_then_add()
    sch = Schedule(func)
    sch.compute_inline(sch.get_block("S"))
    assert "S" not in [b.name for b in sch.func.allocs]
    assert str(sch.get(sch.get_block("C")).block.body) == "C[vi, vj] = A[vi, vj] * 3 + A[vj, vi] * 3"
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_a_reduction_cannot_be_inlined():
    sch = Schedule(matmul_relu())
    before = sch.func
    with pytest.raises(ScheduleError, match="block 'Y' is a reduction"):
        sch.compute_inline(sch.get_block("Y"))
    assert sch.func is before


def test_a_block_writing_a_parameter_cannot_be_inlined():
    sch = Schedule(scale_then_add())
    with pytest.raises(ScheduleError, match="parameter"):
        sch.compute_inline(sch.get_block("C"))


def elementwise_chain(n: int = 16) -> ir.PrimFunc:
    A = te.placeholder((n, n), "int32", "A")
    X = te.compute((n, n), lambda i, j: A[i, j] + 1, "X")
    Y = te.compute((n, n), lambda i, j: ir.max_(X[i, j], 0), "Y")
    C = te.compute((n, n), lambda i, j: Y[i, j] * 2, "C")
    return te.create_prim_func([A, C], "chain")


def test_elementwise_block_writes_its_input_in_place():
    func = elementwise_chain()
    sch = Schedule(func)
    sch.write_in_place(sch.get_block("Y"), "X")
    assert [b.name for b in sch.func.allocs] == ["X"]
    assert str(sch.get(sch.get_block("Y")).block.body) == "X[vi, vj] = T.max(X[vi, vj], 0)"
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_in_place_refuses_a_later_reader_of_the_input():
    A = te.placeholder((8,), "int32", "A")
    X = te.compute((8,), lambda i: A[i] + 1, "X")
    Y = te.compute((8,), lambda i: X[i] * 2, "Y")
    C = te.compute((8,), lambda i: Y[i] + X[i], "C")
    sch = Schedule(te.create_prim_func([A, C], "f"))
    before = sch.func
    with pytest.raises(ScheduleError, match="block 'C' uses X after block 'Y'"):
        sch.write_in_place(sch.get_block("Y"), "X")
    assert sch.func is before


def test_in_place_refuses_a_shifted_read():
    A = te.placeholder((8,), "int32", "A")
    X = te.compute((8,), lambda i: A[i] + 1, "X")
    Y = te.compute((8,), lambda i: X[7 - i], "Y")
    C = te.compute((8,), lambda i: Y[i], "C")
    sch = Schedule(te.create_prim_func([A, C], "f"))
    with pytest.raises(ScheduleError, match="reads X at other indices"):
        sch.write_in_place(sch.get_block("Y"), "X")


def shifted_sum(n: int = 16, readers: int = 1) -> ir.PrimFunc:
    """``C = A @ B`` through A shifted by 128, its compensation an update of C in place,
    then ``readers`` blocks reading C: the form x86's operand shift leaves before an
    epilogue."""
    A = te.placeholder((n, n), "int8", "A")
    B = te.placeholder((n, n), "int8", "B")
    k = te.reduce_axis(n, "k")
    C = te.compute((n, n), lambda i, j: te.sum(
        ir.cast("int32", A[i, k]) * ir.cast("int32", B[k, j]), axis=k), "C")
    def reader(r: int) -> te.Tensor:
        return te.compute((n, n), lambda i, j: C[i, j] + (r + 1), f"D{r}")

    outs = [reader(r) for r in range(readers)]
    sch = Schedule(te.create_prim_func([A, B, *outs], "shifted_sum"))
    sch.shift_operand(sch.get_block("C"), "A", 128, "uint8")
    return sch.func


def test_an_update_folds_into_the_block_reading_it_next():
    func = shifted_sum()
    sch = Schedule(func)
    sch.inline_update(sch.get_block("C_compensate"))
    assert "C_compensate" not in tree.block_names(sch.func)
    assert str(sch.get(sch.get_block("D0")).block.body) == \
        "D0[vi, vj] = C[vi, vj] - 128 * B_sum[vj] + 1"
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_an_update_read_by_two_blocks_is_refused():
    sch = Schedule(shifted_sum(readers=2))
    before = sch.func
    with pytest.raises(ScheduleError, match="2 blocks read C after block 'C_compensate'"):
        sch.inline_update(sch.get_block("C_compensate"))
    assert sch.func is before


def test_a_block_that_is_no_update_of_an_intermediate_is_refused():
    sch = Schedule(scale_then_add())
    with pytest.raises(ScheduleError, match="parameter"):
        sch.inline_update(sch.get_block("C"))
