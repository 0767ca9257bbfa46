"""Block semantics and storage: predicates, init, poisoned intermediates, strided buffers,
bounds checks, loop kinds."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from ir import BufferLoad, BufferStore, ForKind, Var
from targets import host
from tests.targets.host.kernels import block, function, loop_nest

RNG = np.random.default_rng(3)


def _split_copy(n: int, factor: int, kind: ForKind = ForKind.SERIAL) -> ir.PrimFunc:
    """B[v] = A[v] * 2 over a loop split by ``factor``; a predicate guards the overrun."""
    A = ir.Buffer("A", (n,), "int32")
    B = ir.Buffer("B", (n,), "int32")
    outer, inner, v = Var("io"), Var("ii"), Var("v")
    binding = outer * factor + inner
    body = BufferStore(B, BufferLoad(A, (v,)) * 2, (v,))
    realize = block("B", [(v, n, "S")], [binding], body, predicate=binding < n)
    return function([A, B], loop_nest([(outer, -(-n // factor)), (inner, factor)], realize, kind))


def test_predicate_skips_instances_past_the_end() -> None:
    a = RNG.integers(-100, 100, 17).astype(np.int32)
    out = host.run(_split_copy(17, 5), [a])["B"]
    np.testing.assert_array_equal(out, a * 2)


@pytest.mark.parametrize("kind", [ForKind.PARALLEL, ForKind.VECTORIZED, ForKind.UNROLLED,
                                  ForKind.THREAD_BINDING])
def test_every_loop_kind_runs_all_iterations(kind: ForKind) -> None:
    a = RNG.integers(-100, 100, 31).astype(np.int32)
    np.testing.assert_array_equal(host.run(_split_copy(31, 4, kind), [a])["B"], a * 2)


def _row_sums(reduce_outside: bool) -> ir.PrimFunc:
    """C[i] = sum over (k0, k1) of A[i, 4 * k0 + k1], with an init; the reduce loops go
    outside the spatial one when ``reduce_outside``."""
    A = ir.Buffer("A", (5, 12), "int32")
    C = ir.Buffer("C", (5,), "int32")
    i, k0, k1 = Var("i"), Var("k0"), Var("k1")
    vi, vk0, vk1 = Var("vi"), Var("vk0"), Var("vk1")
    body = BufferStore(C, BufferLoad(C, (vi,)) + BufferLoad(A, (vi, vk0 * 4 + vk1)), (vi,))
    init = BufferStore(C, ir.const(7, "int32"), (vi,))
    realize = block("C", [(vi, 5, "S"), (vk0, 3, "R"), (vk1, 4, "R")], [i, k0, k1], body, init)
    order = [(k0, 3), (k1, 4), (i, 5)] if reduce_outside else [(i, 5), (k0, 3), (k1, 4)]
    return function([A, C], loop_nest(order, realize))


@pytest.mark.parametrize("reduce_outside", [False, True])
def test_init_runs_once_when_every_reduce_iterator_is_zero(reduce_outside: bool) -> None:
    a = RNG.integers(-100, 100, (5, 12)).astype(np.int32)
    c = np.full(5, 1000, np.int32)  # overwritten by init, never added to
    out = host.run(_row_sums(reduce_outside), {"A": a, "C": c})["C"]
    np.testing.assert_array_equal(out, 7 + a.sum(axis=1))


def _reads_unwritten(dt: str) -> ir.PrimFunc:
    """C[i] = T[i] + A[i] where the intermediate T is written only where A[i] > 0."""
    A, C = ir.Buffer("A", (6,), dt), ir.Buffer("C", (6,), dt)
    T = ir.Buffer("T", (6,), dt)
    i, j, vi, vj = Var("i"), Var("j"), Var("vi"), Var("vj")
    zero = ir.const(0, dt)
    fill = ir.IfThenElse(BufferLoad(A, (vi,)) > zero,
                         BufferStore(T, BufferLoad(A, (vi,)), (vi,)))
    use = BufferStore(C, BufferLoad(T, (vj,)) + BufferLoad(A, (vj,)), (vj,))
    return function([A, C], loop_nest([(i, 6)], block("T", [(vi, 6, "S")], [i], fill)),
                    loop_nest([(j, 6)], block("C", [(vj, 6, "S")], [j], use)), allocs=(T,))


def test_unwritten_float_intermediate_reads_as_nan() -> None:
    a = np.array([1, -1, 2, 0, 3, -5], np.float32)
    out = host.run(_reads_unwritten("float32"), [a])["C"]
    np.testing.assert_array_equal(np.isnan(out), a <= 0)
    np.testing.assert_array_equal(out[a > 0], 2 * a[a > 0])


def test_unwritten_int_intermediate_reads_as_0x5a_bytes() -> None:
    a = np.array([1, -1, 2, 0, 3, -5], np.int16)
    out = host.run(_reads_unwritten("int16"), [a])["C"]
    np.testing.assert_array_equal(out, np.where(a > 0, 2 * a, 0x5A5A + a))


def test_every_call_starts_from_poison() -> None:
    compiled = host.compile(_reads_unwritten("float32"))
    out = np.zeros(6, np.float32)
    compiled(np.ones(6, np.float32), out)
    compiled(-np.ones(6, np.float32), out)
    assert np.isnan(out).all()


def test_block_local_buffer_is_storage_of_its_own() -> None:
    A, C = ir.Buffer("A", (4, 3), "float32"), ir.Buffer("C", (4,), "float32")
    S = ir.Buffer("S", (3,), "float32", scope="shared")
    i, j, k, vi, vj, vk = (Var(n) for n in ("i", "j", "k", "vi", "vj", "vk"))
    ui, wi = Var("ui"), Var("wi")
    copy = loop_nest([(j, 3)], block("S", [(ui, 4, "S"), (vj, 3, "S")], [vi, j],
                                     BufferStore(S, BufferLoad(A, (ui, vj)) * 2.0, (vj,))))
    total = loop_nest([(k, 3)], block("sum", [(wi, 4, "S"), (vk, 3, "R")], [vi, k],
                                      BufferStore(C, BufferLoad(C, (wi,)) + BufferLoad(S, (vk,)),
                                                  (wi,)),
                                      init=BufferStore(C, ir.const(0, "float32"), (wi,))))
    outer = block("row", [(vi, 4, "S")], [i], ir.seq(copy, total), allocs=(S,))
    a = RNG.standard_normal((4, 3)).astype(np.float32)
    out = host.run(function([A, C], loop_nest([(i, 4)], outer)), [a])["C"]
    np.testing.assert_allclose(out, 2 * a.sum(axis=1), rtol=1e-6)


def _transpose(strides_a: tuple[int, int] | None, strides_t: tuple[int, int] | None
               ) -> ir.PrimFunc:
    """B[i, j] = T[j, i] + 1 where T[j, i] = A[i, j]; A and T may have strides."""
    A = ir.Buffer("A", (3, 5), "int32", strides=strides_a)
    T = ir.Buffer("T", (5, 3), "int32", strides=strides_t)
    B = ir.Buffer("B", (3, 5), "int32")
    i, j, vi, vj = Var("i"), Var("j"), Var("vi"), Var("vj")
    i2, j2, wi, wj = Var("i"), Var("j"), Var("wi"), Var("wj")
    fill = block("T", [(vi, 3, "S"), (vj, 5, "S")], [i, j],
                 BufferStore(T, BufferLoad(A, (vi, vj)), (vj, vi)))
    use = block("B", [(wi, 3, "S"), (wj, 5, "S")], [i2, j2],
                BufferStore(B, BufferLoad(T, (wj, wi)) + 1, (wi, wj)))
    return function([A, B], loop_nest([(i, 3), (j, 5)], fill),
                    loop_nest([(i2, 3), (j2, 5)], use), allocs=(T,))


def test_strided_parameter_is_addressed_through_its_strides() -> None:
    backing = RNG.integers(-50, 50, (3, 8)).astype(np.int32)
    view = backing[:, :5]
    out = np.zeros((3, 5), np.int32)
    host.compile(_transpose((8, 1), None))(view, out)
    np.testing.assert_array_equal(out, view + 1)


def test_run_copies_inputs_into_strided_storage() -> None:
    a = RNG.integers(-50, 50, (3, 5)).astype(np.int32)
    np.testing.assert_array_equal(host.run(_transpose((1, 3), (1, 5)), [a])["B"], a + 1)


def test_strides_mismatch_is_refused_naming_the_parameter() -> None:
    compiled = host.compile(_transpose((8, 1), None))
    with pytest.raises(ir.ExecutionError, match=r"parameter A requires element strides \(8, 1\)"):
        compiled(np.zeros((3, 5), np.int32), np.zeros((3, 5), np.int32))


def test_out_of_bounds_access_is_reported_not_performed() -> None:
    A, B = ir.Buffer("A", (8,), "float32"), ir.Buffer("B", (8,), "float32")
    i, vi = Var("i"), Var("vi")
    body = BufferStore(B, BufferLoad(A, (vi + 1,)), (vi,))
    func = function([A, B], loop_nest([(i, 8)], block("shift", [(vi, 8, "S")], [i], body)))
    with pytest.raises(ir.ExecutionError) as info:
        host.run(func, [np.zeros(8, np.float32)])
    message = str(info.value)
    assert "block 'shift'" in message
    assert "requires index 0 of A in [0, 8), got 8" in message
