"""A packing stage's unrolled tile planned as vector moves (targets/cpu/copies.py): the runs
read, the runs stored, and where each stored element comes from."""

from ir import Buffer
from ir.expr import Var
from targets.cpu.copies import Element, plan_copy
from targets.cpu.static import Form

A = Buffer("A", (4, 8), "int8")
i = Var("i")


def _transpose(rows: int, cols: int) -> list[Element]:
    """dest[c * rows + r] = A[r, c]: a tile transposed, as the dot products pack B."""
    return [Element(Form(c * rows + r, {i: 32}), source=A, at=Form(r * 8 + c, {i: 4}))
            for r in range(rows) for c in range(cols)]


def test_a_transposed_tile_is_one_stored_run_gathered_from_its_rows() -> None:
    plan = plan_copy(_transpose(4, 4), 1)
    assert plan is not None
    # One contiguous run a row of A, each 4 elements long.
    assert [(run[1].const, run[2]) for run in plan.runs] == [(0, 4), (8, 4), (16, 4), (24, 4)]
    assert all(run[1].terms == {i: 4} for run in plan.runs)
    (start, lanes), = plan.stores
    assert start == Form(0, {i: 32})
    # Stored element c * 4 + r is row r's lane c.
    assert lanes == tuple((r, c) for c in range(4) for r in range(4))


def test_constants_fill_their_lanes() -> None:
    elements = [Element(Form(0)), Element(Form(1), source=A, at=Form(5)), Element(Form(2), 7)]
    plan = plan_copy(elements, 1)
    assert plan is not None and plan.stores[0][1] == (0, (0, 0), 7)


def test_separate_destination_runs_are_stored_separately() -> None:
    # Two rows of an output 36 elements apart (a register tile stored into C).
    elements = [Element(Form(row * 36 + col), source=A, at=Form(row * 8 + col))
                for row in range(2) for col in range(4)]
    plan = plan_copy(elements, 4)
    assert plan is not None
    assert [(start.const, len(lanes)) for start, lanes in plan.stores] == [(0, 4), (36, 4)]


def test_what_vectors_cannot_help_is_refused() -> None:
    twice = [Element(Form(0), 1), Element(Form(0), 2)]
    scattered = [Element(Form(0), 1), Element(Form(9), 2)]
    assert plan_copy(twice, 1) is None
    assert plan_copy(scattered, 1) is None
    assert plan_copy([Element(Form(0), 1)], 1) is None
