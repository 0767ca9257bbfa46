"""print -> parse gives back a structurally equal function, and printing is a fixpoint."""

from __future__ import annotations

import difflib

from hypothesis import given, settings

import ir
from ir import IRError, PrimFunc
from ir import script as T
from ir.printer import print_node
from tests.ir.strategies import prim_funcs


def smallest_difference(original: PrimFunc, parsed: PrimFunc) -> str:
    """The first mismatching subtree (as assert_structural_equal names it) and a text diff."""
    try:
        ir.assert_structural_equal(original, parsed)
        mismatch = "structurally equal"
    except IRError as err:
        mismatch = err.message
    diff = difflib.unified_diff(print_node(original).splitlines(),
                                print_node(parsed).splitlines(), "printed", "reprinted",
                                lineterm="")
    return mismatch + "\n" + "\n".join(diff)


def check_roundtrip(func: PrimFunc) -> None:
    text = print_node(func)
    parsed = T.parse(text)
    assert isinstance(parsed, PrimFunc)
    assert ir.structural_equal(func, parsed), smallest_difference(func, parsed)
    assert print_node(parsed) == text, smallest_difference(func, parsed)


@settings(max_examples=100)
@given(prim_funcs())
def test_random_functions_roundtrip(func):
    check_roundtrip(func)


@settings(max_examples=30)
@given(prim_funcs(dtype_names=("float16", "bfloat16", "uint8", "int32"), thread_bindings=True))
def test_random_functions_with_other_dtypes_and_threads_roundtrip(func):
    check_roundtrip(func)


@settings(max_examples=30)
@given(prim_funcs())
def test_pretty_form_parses_to_the_same_function(func):
    parsed = T.parse(print_node(func, show_regions=False))
    assert ir.structural_equal(func, parsed), smallest_difference(func, parsed)


def test_kernel_with_every_statement_kind_roundtrips():
    func = T.parse('''
@T.prim_func
def every(A: T.Buffer((8, 8), "float16"), B: T.Buffer((8,), "int8"),
          C: T.Buffer((8, 8), "float32", scope="shared", strides=(16, 1))):
    T.block_attr({"global_symbol": "every", "unroll": 4})
    tmp = T.alloc_buffer((8,), "int32", scope="local")
    for i in T.thread_binding(8, thread="threadIdx.x"):
        with T.block("tmp"):
            vi = T.axis.spatial(8, i)
            tmp[vi] = T.cast(B[vi], "int32") * 3 // 2 % 5
    for io, ii in T.grid(2, 4):
        for j in T.unroll(8):
            with T.block("C"):
                vi = T.axis.spatial(8, io * 4 + ii)
                vj = T.axis.spatial(8, j)
                T.reads(A[vi, vj], tmp[vi])
                T.writes(C[vi, vj])
                T.block_attr({"note": "edge"})
                if tmp[vi] > 0 and not vi == vj:
                    C[vi, vj] = T.exp(T.cast(A[vi, vj], "float32"))
                elif tmp[vi] < -1:
                    C[vi, vj] = T.if_then_else(vi < 4, -1.5, T.float32(T.float16(2.5)))
                else:
                    C[vi, vj] = T.sqrt(T.max(T.cast(A[vi, vj], "float32"), 0.0))
    for k in range(2):
        with T.block("tile"):
            vk = T.axis.spatial(2, k)
            T.reads(A[vk * 4:vk * 4 + 4, 0:8])
            T.writes(C[vk * 4:vk * 4 + 4, 0:8])
            T.call_intrinsic("copy", C[vk * 4:vk * 4 + 4, 0:8], A[vk * 4:vk * 4 + 4, 0:8], vk)
''')
    check_roundtrip(func)


def test_nested_blocks_with_local_buffers_roundtrip():
    func = T.parse('''
@T.prim_func
def nested(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
    for io in range(2):
        with T.block("outer"):
            vo = T.axis.spatial(2, io)
            buf = T.alloc_buffer((4,), "float32", scope="local")
            T.reads(A[vo * 4:vo * 4 + 4], buf[0:4])
            T.writes(B[vo * 4:vo * 4 + 4], buf[0:4])
            for ii in range(4):
                with T.block("load"):
                    vi = T.axis.spatial(8, vo * 4 + ii)
                    buf[vi % 4] = A[vi]
            for ii in range(4):
                with T.block("store"):
                    vi = T.axis.spatial(8, vo * 4 + ii)
                    B[vi] = buf[vi % 4] * 2.0
''')
    check_roundtrip(func)
