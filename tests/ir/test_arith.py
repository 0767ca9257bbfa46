"""ir.arith: simplification and bounds, checked against brute-force evaluation."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from ir import dtypes
from ir.arith import (Interval, bound, equal, exact_bound, is_affine, linearize, prove, simplify,
                      to_expr)
from ir.evaluate import compile_index
from ir.evaluate import evaluate as interpret
from ir.expr import BinOp, Expr, IntImm, Select, Var, max_, min_

I, J, K = Var("i"), Var("j"), Var("k")
RANGES = {I: Interval(0, 3), J: Interval(0, 7), K: Interval(0, 5)}


def evaluate(expr: Expr, env: dict) -> int:
    """Direct evaluation with Python's floor semantics (the IR's)."""
    if isinstance(expr, Var):
        return env[expr]
    if isinstance(expr, IntImm):
        return expr.value
    if isinstance(expr, Select):
        return evaluate(expr.true_value if evaluate(expr.cond, env) else expr.false_value, env)
    a, b = evaluate(expr.a, env), evaluate(expr.b, env)
    return {
        "add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
        "floordiv": lambda: a // b, "floormod": lambda: a % b,
        "min": lambda: min(a, b), "max": lambda: max(a, b),
        "eq": lambda: int(a == b), "ne": lambda: int(a != b), "lt": lambda: int(a < b),
        "le": lambda: int(a <= b), "gt": lambda: int(a > b), "ge": lambda: int(a >= b),
        "and": lambda: int(a and b), "or": lambda: int(a or b),
    }[expr.op]()


def all_points(ranges):
    names = list(ranges)
    for values in itertools.product(*(range(r.lo, r.hi + 1) for r in ranges.values())):
        yield dict(zip(names, values))


def index_exprs():
    leaves = st.one_of(st.sampled_from([I, J, K]),
                       st.integers(-6, 12).map(lambda v: IntImm(v)))

    def extend(children):
        positive = st.integers(1, 9).map(lambda v: IntImm(v))
        return st.one_of(
            st.tuples(st.sampled_from(["add", "sub", "min", "max"]), children, children)
            .map(lambda t: BinOp(t[0], t[1], t[2])),
            st.tuples(children, st.integers(-4, 9)).map(lambda t: t[0] * t[1]),
            st.tuples(st.sampled_from(["floordiv", "floormod"]), children, positive)
            .map(lambda t: BinOp(t[0], t[1], t[2])),
        )

    return st.recursive(leaves, extend, max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(index_exprs())
def test_simplify_preserves_value_at_every_point(expr):
    simple = simplify(expr, RANGES)
    for env in all_points(RANGES):
        assert evaluate(simple, env) == evaluate(expr, env), (str(expr), str(simple), env)


@settings(max_examples=300, deadline=None)
@given(index_exprs())
def test_bound_holds_every_value(expr):
    span = bound(expr, RANGES)
    values = [evaluate(expr, env) for env in all_points(RANGES)]
    assert span.lo is None or span.lo <= min(values)
    assert span.hi is None or span.hi >= max(values)


@settings(max_examples=300, deadline=None)
@given(index_exprs())
def test_exact_bound_is_reached_at_both_ends(expr):
    span = exact_bound(expr, RANGES)
    values = [evaluate(expr, env) for env in all_points(RANGES)]
    assert span is None or (span.lo, span.hi) == (min(values), max(values))


def test_exact_bound_knows_the_forms_of_indices():
    assert exact_bound(I * 8 + J - 1, RANGES) == Interval(-1, 30)
    assert exact_bound((I * 8 + J) // 4 + K, RANGES) == Interval(0, 12)
    assert exact_bound(J % 3, RANGES) == Interval(0, 2)
    assert exact_bound(BinOp("floordiv", J, IntImm(-2)), RANGES) == Interval(-4, 0)
    assert exact_bound(I + I // 2, RANGES) is None  # i twice: its ends need not meet
    assert exact_bound(I // 1 // 1 - I, RANGES) is None  # always 0, not [-3, 3]
    assert exact_bound(min_(I, J), RANGES) is None


@settings(max_examples=200, deadline=None)
@given(index_exprs(), index_exprs(), st.sampled_from(["lt", "le", "eq", "ne", "gt", "ge"]))
def test_comparisons_fold_only_when_decided(a, b, op):
    cond = BinOp(op, a, b)
    simple = simplify(cond, RANGES)
    truth = {evaluate(cond, env) for env in all_points(RANGES)}
    if isinstance(simple, IntImm):
        assert truth == {simple.value}


def test_split_then_fuse_gives_back_the_loop_variable():
    outer, inner = Var("io"), Var("ii")
    fused = outer * 4 + inner
    ranges = {outer: Interval(0, 7), inner: Interval(0, 3)}
    assert simplify(fused // 4, ranges) is outer
    assert simplify(fused % 4, ranges) is inner


def test_fuse_then_split_gives_back_the_fused_variable():
    f = Var("f")
    expr = (f // 6) * 6 + f % 6
    assert simplify(expr, {f: Interval(0, 23)}) is f


def test_nested_division_merges():
    assert str(simplify((I // 2) // 3)) == "i // 6"
    assert str(simplify((J % 8) % 4)) == "j % 4"


def test_division_by_tile_with_offset():
    # (i*8 + j + 8) // 8 == i + 1 for j in [0, 7]
    assert equal(simplify((I * 8 + J + 8) // 8, RANGES), I + 1)
    assert str(simplify((I * 8 + J + 8) % 8, RANGES)) == "j"


def test_min_max_decided_by_ranges():
    assert simplify(min_(I, J + 4), RANGES) is I
    assert simplify(max_(I, J + 4), RANGES) == J + 4
    assert isinstance(simplify(min_(I, J), RANGES), BinOp)


def test_linear_terms_cancel():
    assert simplify(I * 3 + J - I * 3, RANGES) is J
    assert simplify(I - I) == IntImm(0)


def test_unchanged_expression_is_returned_as_is():
    expr = I * 4 + J
    assert simplify(expr, RANGES) is expr


def test_bound_of_linear_form_is_tight():
    assert bound(I * 8 + J, RANGES) == Interval(0, 31)
    assert bound(I - I, RANGES) == Interval(0, 0)
    assert bound(J % 3, RANGES) == Interval(0, 2)
    assert bound(Var("free"), RANGES) == Interval(None, None)


def test_prove_predicate_of_divisible_split():
    assert prove(I * 8 + J < 32, RANGES)
    assert not prove(I * 8 + J < 30, RANGES)


def test_is_affine_accepts_quasi_affine_forms_only():
    assert is_affine(I * 4 + J - 1)
    assert is_affine((I * 4 + J) // 3 + (J % 2))
    assert not is_affine(I * J)
    assert not is_affine(min_(I, J))
    assert not is_affine(J // I)


def test_linear_form_round_trip():
    form = linearize(I * 4 + J * 2 - I - 5)
    assert form.coeff(I) == 3 and form.coeff(J) == 2 and form.const == -5
    assert str(to_expr(form, dtypes.int32)) == "i * 3 + j * 2 - 5"


def test_three_way_fuse_then_split_gives_back_the_fused_variable():
    # (n, h, w) fused into m over extents (2, 3, 4), then each piece recovered and fused again.
    m = Var("m")
    n, h, w = m // 12, (m // 4) % 3, m % 4
    assert simplify(n * 12 + h * 4 + w, {m: Interval(0, 23)}) is m


def test_division_of_a_tile_offset_factors_the_tile_out():
    # (16*o + n) // 256 with n < 16 is o // 16; the remainder keeps n.
    o, n = Var("o"), Var("n")
    ranges = {o: Interval(0, 63), n: Interval(0, 15)}
    assert str(simplify((o * 16 + n) // 256, ranges)) == "o // 16"
    assert str(simplify((o * 16 + n) % 256, ranges)) == "o % 16 * 16 + n"


def test_a_variable_with_one_value_is_that_value():
    o = Var("o")
    assert simplify(o * 64 + I, {o: Interval(0, 0), **RANGES}) is I


@settings(max_examples=200, deadline=None)
@given(index_exprs())
def test_compiled_index_expressions_evaluate_like_the_interpreter(expr):
    compiled = compile_index(expr)
    for env in all_points(RANGES):
        assert compiled(env) == interpret(expr, env) == evaluate(expr, env)
