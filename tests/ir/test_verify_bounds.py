"""verify() proves buffer accesses in bounds: it rejects, at the access, an index that some
point of its loops provably takes outside the buffer, and nothing a guard may keep inside."""

from __future__ import annotations

import itertools
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import KernelError
from ir import script as T

_INTERNALS = ("ir/", "verify.py", "Traceback", "IRError")


def check(body: str, fragment: str, line: int, col: int) -> None:
    """``body`` (lines 4 on, indented 4) under a header declaring A (16, 16) and C (16, 16),
    both float32; expect a KernelError with ``fragment`` at (line, col)."""
    with pytest.raises(KernelError) as info:
        parse(body)
    err = info.value
    assert fragment in err.message
    assert (err.loc.file, err.loc.line, err.loc.col) == ("k.py", line, col)
    assert not any(name in err.message for name in _INTERNALS)


def parse(body: str) -> object:
    source = ('@T.prim_func\n'
              'def k(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):\n'
              '    """Line 3."""\n' + textwrap.indent(textwrap.dedent(body).lstrip("\n"), "    "))
    return T.parse(source, filename="k.py")


def test_an_iterator_longer_than_the_dimension_it_indexes():
    check("""
        for i, k in T.grid(16, 17):
            with T.block("C"):
                vi, vk = T.axis.remap("SR", [i, k])
                C[vi, 0] = C[vi, 0] + A[vi, vk]
    """, "A[vi, vk]: index 1 ranges over [0, 16] but A has extent 16 in dimension 1", 7, 35)


def test_a_store_past_the_last_row():
    check("""
        for i, j in T.grid(16, 16):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi + 1, vj] = A[vi, vj]
    """, "C[vi + 1, vj]: index 0 ranges over [1, 16] but C has extent 16 in dimension 0; keep it "
         "in [0, 15] (fix the extent, or guard the access with an if)", 7, 13)


def test_an_init_past_the_last_column():
    check("""
        for i, j, k in T.grid(16, 16, 16):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj + 1] = 0.0
                C[vi, vj] = C[vi, vj] + A[vi, vk]
    """, "C[vi, vj + 1]: index 1 ranges over [1, 16]", 8, 17)


def test_an_init_runs_where_the_reduce_iterators_are_0():
    # The init reads A[vi, vk] only at vk = 0, so A's 1 column is enough there.
    source = textwrap.dedent("""
        @T.prim_func
        def k(A: T.Buffer((16, 1), "float32"), B: T.Buffer((16, 16), "float32"),
              C: T.Buffer((16,), "float32")):
            for i, k in T.grid(16, 16):
                with T.block("C"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    with T.init():
                        C[vi] = A[vi, vk]
                    C[vi] = C[vi] + B[vi, vk]
    """)
    T.parse(source)
    with pytest.raises(KernelError, match=r"B\[vi, vk\]: index 1 ranges over \[0, 15\]"):
        T.parse(source.replace("(16, 16), \"float32\")", "(16, 8), \"float32\")"))


def test_plain_loops_are_checked_too():
    check("""
        for i in range(16):
            for j in range(4):
                C[i, 4 * j + 4] = A[i, j]
    """, "index 1 ranges over [4, 16] but C has extent 16", 6, 13)


def test_an_exact_division_is_judged_and_a_clamp_is_not():
    check("""
        for i in range(16):
            C[i, i // 2 + 9] = 0.0
    """, "C[i, i // 2 + 9]: index 1 ranges over [9, 16]", 5, 9)
    parse("""
        for i in range(16):
            C[i, T.min(i + 1, 15)] = 0.0
    """)


def test_an_if_guards_its_branches():
    parse("""
        for i in range(16):
            if i < 15:
                C[i + 1, 0] = A[i, 0]
            else:
                C[i, 0] = A[i - 15, 0]
    """)
    check("""
        for i in range(16):
            if 2 * i + 1 < 31:
                C[i + 1, 0] = A[i, 0]
            else:
                C[i + 1, 0] = A[i, 0]
    """, "C[i + 1, 0]: index 0 ranges over [16, 16]", 8, 13)


def test_an_unreadable_guard_is_trusted():
    parse("""
        for i, j in T.grid(16, 16):
            if i + j < 16:
                C[i + j, 0] = A[i, j]
            if i * i < 200:
                C[i + 1, 0] = A[i, j]
    """)


def test_a_block_predicate_narrows_its_iterators():
    parse("""
        for i in range(16):
            with T.block("C"):
                vi = T.axis.spatial(16, i)
                T.where(i < 15)
                C[vi + 1, 0] = A[vi, 0]
    """)
    check("""
        for i in range(16):
            with T.block("C"):
                vi = T.axis.spatial(16, i)
                T.where(i < 16)
                C[vi + 1, 0] = A[vi, 0]
    """, "C[vi + 1, 0]: index 0 ranges over [1, 16]", 8, 13)


def test_a_split_guard_is_trusted():
    parse("""
        for io, ii in T.grid(4, 5):
            with T.block("C"):
                vi = T.axis.spatial(16, io * 5 + ii)
                T.where(io * 5 + ii < 16)
                C[vi, 0] = A[vi, 0]
    """)


def test_a_predicate_must_keep_the_binding_in_the_extent():
    check("""
        for i in range(32):
            with T.block("C"):
                vi = T.axis.spatial(16, i)
                T.where(i < 20)
                C[vi, 0] = A[vi, 0]
    """, "iterator vi requires its binding to stay in [0, 15], got i ranging over [0, 19] where "
         "the predicate holds", 6, 18)


def test_if_then_else_guards_nothing():
    check("""
        for i in range(16):
            C[i, 0] = T.if_then_else(i < 15, A[i + 1, 0], 0.0)
    """, "A[i + 1, 0]: index 0 ranges over [1, 16] but A has extent 16 in dimension 0; keep it in "
         "[0, 15] (T.if_then_else evaluates both branches", 5, 42)


def test_an_intrinsic_operand_region():
    check("""
        for i in range(16):
            T.call_intrinsic("fill", C[i, 8:24])
    """, "C[i, 8:24]: dimension 1 covers [8, 23] but C has extent 16 in dimension 1", 5, 34)


def access(a: int, b: int, op: str, c: int) -> tuple[str, object]:
    """An index over loop variable ``i`` as script text and as a Python function of ``i``."""
    base = f"{a} * i + {b}"
    if op == "//":
        return f"({base}) // {c}", lambda i: (a * i + b) // c
    if op == "%":
        return f"({base}) % {c}", lambda i: (a * i + b) % c
    return base, lambda i: a * i + b


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 12), st.integers(-3, 3), st.integers(-4, 12),
       st.sampled_from(["", "//", "%"]), st.sampled_from([-3, 2, 3, 5]), st.integers(1, 14),
       st.one_of(st.none(), st.integers(0, 13)), st.integers(0, 4))
def test_rejected_exactly_when_some_executed_point_is_outside(n, a, b, op, c, extent, guard,
                                                              j_extent):
    text, index = access(a, b, op, c)
    cond = f"if i < {guard}:" if guard is not None else "if True:"
    source = textwrap.dedent(f"""
        @T.prim_func
        def k(A: T.Buffer(({extent}, 5), "int32")):
            for i, j in T.grid({n}, {j_extent + 1}):
                {cond}
                    A[{text}, j] = 1
    """)
    executed = [i for i in range(n) if guard is None or i < guard]
    outside = bool(executed) and (any(not 0 <= index(i) < extent for i in executed)
                                  or j_extent >= 5)
    # Exact forms: affine, a division, or a remainder of one step per iteration or no wrap.
    steps_by_one = abs(a) == 1 or op != "%"
    values = [a * i + b for i in executed]
    wraps = op == "%" and len({v // c for v in values}) > 1
    try:
        T.parse(source, filename="k.py")
        rejected = False
    except KernelError as err:
        assert "ranges over" in err.message
        rejected = True
    if rejected or steps_by_one or not wraps:
        assert rejected == outside, source


def test_a_box_of_loops_is_judged_at_its_corners():
    # Every point of a 3-D box against every small buffer: the verdict matches enumeration.
    for extent in (5, 6, 7):
        source = textwrap.dedent(f"""
            @T.prim_func
            def k(A: T.Buffer(({extent},), "int32")):
                for i, j, k in T.grid(2, 3, 2):
                    A[2 * i - j + k + 2] = 1
        """)
        points = itertools.product(range(2), range(3), range(2))
        outside = any(not 0 <= 2 * i - j + k + 2 < extent for i, j, k in points)
        try:
            T.parse(source)
            assert not outside
        except KernelError:
            assert outside
