"""The constraint grammar: parsed here, never evaluated as Python."""

from __future__ import annotations

import pytest

from tensorize.sweep.constraints import ConstraintError, parse_constraint

NAMES = ["pes", "inp.bytes", "sram.bytes", "array.rows", "dram.bytes_per_cycle"]


@pytest.mark.parametrize(("text", "values", "holds"), [
    ("npu.inp bytes <= 512 KiB", {"inp.bytes": 512 * 1024}, True),
    ("npu.inp bytes <= 512 KiB", {"inp.bytes": 512 * 1024 + 1}, False),
    ("inp.bytes < 1 MiB", {"inp.bytes": 1 << 20}, False),
    ("pes * 2 + 1 == 33", {"pes": 16}, True),
    ("(pes + 1) * 2 != 34", {"pes": 16}, False),
    ("sram.bytes / pes >= 1.5 K", {"sram.bytes": 3 << 20, "pes": 1024}, True),
    ("dram.bytes_per_cycle * 2 > array.rows - 1", {"dram.bytes_per_cycle": 0.5,
                                                    "array.rows": 3}, False),
])
def test_constraints_evaluate_by_the_grammar(text, values, holds):
    assert parse_constraint(text, NAMES).holds(values) is holds


@pytest.mark.parametrize(("text", "fragment", "column"), [
    ("pes <=", "requires a value here, got the end", 6),
    ("flops < 3", "requires a machine field or a derived quantity", 0),
    ("pes < 3 < 4", "requires one comparison, got '<'", 8),
    ("pes ? 3", "got '?'", 4),
    ("(pes + 1 < 3", "a '(' requires its ')'", 0),
    ("pes", "requires a comparison", 3),
    ("__import__('os') < 1", "got \"'\"", 11),
])
def test_a_bad_constraint_names_the_column(text, fragment, column):
    with pytest.raises(ConstraintError) as info:
        parse_constraint(text, NAMES)
    assert fragment in info.value.message
    assert info.value.column == column
