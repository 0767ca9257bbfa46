"""IndexMap: built from lambdas or text, printed as replayable Python, inverted exactly."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import ScheduleError, Var
from tensorize.schedule.index_map import IndexMap, as_index_map

TILE = "lambda i, j: (i // 16, j // 16, i % 16, j % 16)"


def points(shape):
    return itertools.product(*(range(n) for n in shape))


def test_lambda_and_text_build_equal_maps():
    traced = IndexMap.from_func(lambda i, j: (i // 16, j // 16, i % 16, j % 16))
    assert traced == IndexMap.parse(TILE)
    assert traced.text == TILE


def test_maps_with_renamed_parameters_are_equal():
    assert IndexMap.parse("lambda a, b: (b, a)") == IndexMap.parse("lambda x, y: (y, x)")
    assert IndexMap.parse("lambda a, b: (b, a)") != IndexMap.parse("lambda a, b: (a, b)")


def test_repr_evaluates_to_an_equal_map_in_a_replay_namespace():
    index_map = IndexMap.parse("lambda n, h, w: (n * 64 + (h - 0) * 8 + w, -w + 7)")
    namespace = {"__builtins__": __builtins__}
    exec("from tensorize.schedule import Schedule", namespace)
    assert eval(repr(index_map), namespace) == index_map


def test_single_target_prints_without_a_tuple():
    index_map = IndexMap.from_func(lambda n, h, w: n * 64 + h * 8 + w)
    assert index_map.text == "lambda n, h, w: n * 64 + h * 8 + w"
    assert IndexMap.parse(index_map.text) == index_map


def test_evaluate_matches_python_arithmetic():
    index_map = IndexMap.parse(TILE)
    for i, j in [(0, 0), (17, 33), (31, 47)]:
        assert index_map.evaluate((i, j)) == (i // 16, j // 16, i % 16, j % 16)


def test_apply_simplifies_under_ranges():
    i, j = Var("i"), Var("j")
    index_map = IndexMap.parse("lambda a, b: (a * 16 + b) // 16")
    from ir.arith import Interval
    (result,) = index_map.apply([i, j], {i: Interval(0, 3), j: Interval(0, 15)})
    assert result is i


def test_target_shape_of_a_tiling():
    assert IndexMap.parse(TILE).target_shape([32, 48]) == (2, 3, 16, 16)


def test_target_shape_refuses_negative_indices():
    with pytest.raises(ScheduleError, match=r"i - 4 .* ranges over \[-4, 3\]"):
        IndexMap.parse("lambda i: i - 4").target_shape([8])


def test_inverse_of_a_tiling():
    inverse = IndexMap.parse(TILE).inverse([32, 48])
    assert inverse == IndexMap.parse("lambda a, b, c, d: (a * 16 + c, b * 16 + d)")


def test_inverse_of_a_fusion_splits_it_again():
    inverse = IndexMap.parse("lambda n, h, w: n * 64 + h * 8 + w").inverse([2, 8, 8])
    assert inverse == IndexMap.parse("lambda f: (f // 64, f // 8 % 8, f % 8)")


def test_inverse_of_a_split_of_a_fusion():
    # (i * 3 + j) over 2 x 3 is split by 2, which divides neither i's nor j's extent.
    index_map = IndexMap.parse("lambda i, j: ((i * 3 + j) // 2, (i * 3 + j) % 2)")
    inverse = index_map.inverse([2, 3])
    for point in points([2, 3]):
        assert inverse.evaluate(index_map.evaluate(point)) == point


def test_inverse_when_simplification_splits_a_fusion_differently():
    # x1 * 12 + x2 is cut at 3 and 24; the simplifier writes its lowest piece as x2 % 3.
    index_map = IndexMap.parse("lambda x0, x1, x2: (x0 * 6 + (x1 * 12 + x2) // 24, "
                               "(x1 * 12 + x2) % 24 // 3, (x1 * 12 + x2) % 24 % 3)")
    shape = [2, 12, 12]
    assert index_map.target_shape(shape) == (12, 8, 3)
    inverse = index_map.inverse(shape)
    for point in points(shape):
        assert inverse.evaluate(index_map.evaluate(point)) == point


@pytest.mark.parametrize("text, shape, reason", [
    ("lambda i: (i // 4, i % 4)", [10], "i // 4 takes 3 values but i has 10"),
    ("lambda i, j: (i, i)", [4, 4], "uses i in two places"),
    ("lambda i, j: (i,)", [4, 4], "never uses j"),
    ("lambda i, j: (i + 1, j)", [4, 4], "adds the constant 1"),
    ("lambda i, j: (i * 2 + j,)", [4, 4], "coefficient 2 where a dense fusion needs 4"),
    ("lambda i, j: (i * j,)", [4, 4], "is not a split or fusion"),
    ("lambda i: (i % 3 // 2, i % 3 % 2)", [6], "divides i % 3 by 2"),
    ("lambda i: (i // 2, i % 4)", [8], "uses (i // 2) % 2 in two places"),
    ("lambda i: (i // 4, i % 3)", [12], "cut it at 3 and 4"),
])
def test_maps_that_are_not_bijections_say_why(text, shape, reason):
    index_map = IndexMap.parse(text)
    assert reason in index_map.why_not_bijective(shape)
    assert not index_map.is_bijective(shape)
    with pytest.raises(ScheduleError, match="IndexMap: ") as info:
        index_map.inverse(shape)
    assert reason in str(info.value)


@pytest.mark.parametrize("text, message", [
    ("i + 1", "expected a lambda"),
    ("lambda i: (j, i)", "unknown index j"),
    ("lambda i: min(i, 3)", "unknown function min"),
    ("lambda i: i < 3", "+ - * // % and integers, got lt"),
    ("lambda i, *rest: i", "plain indices"),
    ("lambda i: (i,", "invalid Python syntax"),
])
def test_bad_text_is_refused(text, message):
    with pytest.raises(ScheduleError, match="IndexMap: ") as info:
        IndexMap.parse(text)
    assert message in str(info.value)


def test_bad_functions_are_refused():
    with pytest.raises(ScheduleError, match="index map function failed: '/' requires float"):
        IndexMap.from_func(lambda i: i / 2)
    with pytest.raises(ScheduleError, match="plain indices"):
        IndexMap.from_func(lambda i, j=2: i)
    outside = Var("k")
    with pytest.raises(ScheduleError, match="uses k, which is not one of its parameters"):
        IndexMap.from_func(lambda i: i + outside)


def test_as_index_map_names_the_primitive_and_argument():
    assert as_index_map(TILE, "p") == IndexMap.parse(TILE)
    assert as_index_map(lambda i: i, "p") == IndexMap.parse("lambda x: x")
    with pytest.raises(ScheduleError, match=r"^p: argument 'index_map': expected an IndexMap"):
        as_index_map(3, "p")
    with pytest.raises(ScheduleError, match=r"^p: argument 'index_map': .*unknown index z"):
        as_index_map("lambda i: z", "p")


@st.composite
def split_fuse_maps(draw):
    """A random composition of splits (by divisors), fusions of neighbours and swaps, with the
    shape it is a bijection onto."""
    shape = draw(st.lists(st.sampled_from([1, 2, 3, 4, 6, 8]), min_size=1, max_size=3))
    source = tuple(Var(f"x{k}") for k in range(len(shape)))
    dims = list(zip(source, shape))
    for _ in range(draw(st.integers(0, 5))):
        action = draw(st.sampled_from(["split", "fuse", "swap"]))
        d = draw(st.integers(0, len(dims) - 1))
        expr, extent = dims[d]
        factors = [f for f in range(2, extent) if extent % f == 0]
        if action == "split" and factors:
            f = draw(st.sampled_from(factors))
            dims[d:d + 1] = [(expr // f, extent // f), (expr % f, f)]
        elif action == "fuse" and d + 1 < len(dims):
            (a, ea), (b, eb) = dims[d], dims[d + 1]
            dims[d:d + 2] = [(a * eb + b, ea * eb)]
        elif action == "swap" and d + 1 < len(dims):
            dims[d], dims[d + 1] = dims[d + 1], dims[d]
    return IndexMap(source, tuple(e for e, _ in dims)), shape, tuple(n for _, n in dims)


@settings(max_examples=60, deadline=None)
@given(split_fuse_maps())
def test_random_split_fuse_maps_invert_exactly(case):
    index_map, shape, target_shape = case
    assert index_map.why_not_bijective(shape) is None
    assert index_map.target_shape(shape) == target_shape
    inverse = index_map.inverse(shape)
    assert inverse.target_shape(list(target_shape)) == tuple(shape)
    for point in points(target_shape):
        assert index_map.evaluate(inverse.evaluate(point)) == point
    for point in points(shape):
        assert inverse.evaluate(index_map.evaluate(point)) == point
    assert IndexMap.parse(index_map.text) == index_map
