"""verify() accepts well-formed functions and rejects each broken rule at the node's place."""

from __future__ import annotations

import pytest

from ir import (
    BinOp,
    Block,
    BlockRealize,
    Buffer,
    BufferStore,
    For,
    IntImm,
    IterKind,
    IterVar,
    KernelError,
    PrimFunc,
    SourceLoc,
    Var,
    make_root,
    seq,
)
from ir.verify import verify

HERE = SourceLoc("k.py", 7, 5)


def block_nest(A: Buffer, binding, extent: int = 8, kind: IterKind = IterKind.SPATIAL,
               body=None, loop_extent: int = 8, predicate=None):
    """``for i in range(loop_extent)`` around a block binding one iterator to ``binding(i)``."""
    i, v = Var("i"), Var("v")
    store = body(i, v) if body is not None else BufferStore(A, IntImm(0), (v,), HERE)
    block = Block("b", (IterVar(v, extent, kind),), (), (), store)
    realize = BlockRealize((binding(i),), block, *(() if predicate is None else (predicate(i),)))
    return PrimFunc("f", (A,), make_root(For(i, loop_extent, realize)))


def located(op: str, a, b) -> BinOp:
    """A binary operation carrying a source location, as a parsed one would."""
    return BinOp(op, a, b, HERE)


def expect(func: PrimFunc, fragment: str, loc: SourceLoc | None = HERE) -> None:
    with pytest.raises(KernelError) as info:
        verify(func)
    assert fragment in info.value.message
    if loc is not None:
        assert info.value.loc == loc


def test_well_formed_function_passes():
    A = Buffer("A", (8,), "int32")
    verify(block_nest(A, lambda i: i))


def test_split_binding_guarded_by_predicate_passes():
    A = Buffer("A", (10,), "int32")
    io, ii, v = Var("io"), Var("ii"), Var("v")
    binding = io * 4 + ii
    block = Block("b", (IterVar(v, 10),), (), (), BufferStore(A, IntImm(0), (v,)))
    nest = For(io, 3, For(ii, 4, BlockRealize((binding,), block, binding < 10)))
    verify(PrimFunc("f", (A,), make_root(nest)))


def test_non_affine_binding():
    A = Buffer("A", (8,), "int32")
    expect(block_nest(A, lambda i: located("mul", i, i), extent=64),
           "requires an affine expression")


def test_binding_beyond_extent():
    A = Buffer("A", (8,), "int32")
    expect(block_nest(A, lambda i: located("add", i, IntImm(1))),
           "requires its binding to stay in [0, 7], got i + 1 ranging over [1, 8]")


def test_reduce_iterator_indexes_a_store():
    A = Buffer("A", (8,), "int32")
    expect(block_nest(A, lambda i: i, kind=IterKind.REDUCE),
           "got reduce iterator v")


def test_block_uses_outer_loop_variable():
    A = Buffer("A", (8,), "int32")
    expect(block_nest(A, lambda i: i, body=lambda i, v: BufferStore(A, IntImm(0), (i,), HERE)),
           "block 'b' requires only its own iterators, got i, a loop variable")


def test_store_to_undeclared_buffer():
    A, stray = Buffer("A", (8,), "int32"), Buffer("S", (8,), "int32")
    expect(block_nest(A, lambda i: i, body=lambda i, v: BufferStore(stray, IntImm(0), (v,), HERE)),
           "buffer S requires a declaration")


def test_block_allocated_buffer_is_visible_only_inside():
    A, tmp = Buffer("A", (8,), "int32"), Buffer("tmp", (8,), "int32")
    v = Var("v")
    inner = Block("b", (IterVar(v, 8),), (), (), BufferStore(tmp, IntImm(0), (v,)),
                  alloc_buffers=(tmp,))
    i = Var("i")
    after = BufferStore(tmp, IntImm(1), (IntImm(0),), HERE)
    outer_v = Var("w")
    reader = Block("c", (IterVar(outer_v, 1),), (), (), after)
    func = PrimFunc("f", (A,), make_root(seq(For(i, 8, BlockRealize((i,), inner)),
                                             BlockRealize((IntImm(0),), reader))))
    expect(func, "buffer tmp requires a declaration")


def test_variable_bound_twice():
    A = Buffer("A", (8,), "int32")
    i, v, w = Var("i"), Var("v"), Var("w")
    first = BlockRealize((i,), Block("b", (IterVar(v, 8),), (), (),
                                     BufferStore(A, IntImm(0), (v,))))
    second = BlockRealize((i,), Block("c", (IterVar(w, 8),), (), (),
                                      BufferStore(A, IntImm(1), (w,))))
    loop_loc = SourceLoc("k.py", 9, 1)
    func = PrimFunc("f", (A,), make_root(seq(For(i, 8, first), For(i, 8, second, loc=loop_loc))))
    expect(func, "variable i requires one binding", loop_loc)
