"""Packing stores that interleave registers' runs (targets/cpu/interleave.py):
B's four k rows of 8 columns as one st4 of bytes, A's rows, transposed into pairs of words,
as one st4 of 64-bit elements; the kernels' exactness is tests/targets/arm/test_run.py's."""

import re

from targets.cpu.interleave import interleaves, plan
from tests.targets.arm.conftest import assembly


def test_the_gemm_packs_a_and_b_with_interleaving_stores() -> None:
    asm = assembly("gemm_int8")
    assert re.search(r"st4\t\{ v\d+\.8b, v\d+\.8b, v\d+\.8b, v\d+\.8b \}", asm)
    assert re.search(r"st4\t\{ v\d+\.2d, v\d+\.2d, v\d+\.2d, v\d+\.2d \}", asm)
    assert not re.search(r"\bst2\b", asm)


def test_a_run_is_cut_into_interleaves_of_half_or_whole_registers() -> None:
    # B's 8 columns x 4 k rows: byte i of rows 0-3 in turn, half a 16-lane register each.
    rows = [(r, c) for c in range(8) for r in range(4)]
    assert interleaves(rows, 16) == [(0, [(0, 0), (1, 0), (2, 0), (3, 0)], 8)]
    # The second 8 columns of the same registers, twice over: two stores.
    upper = [(r, 8 + c) for c in range(8) for r in range(4)]
    assert interleaves(upper + upper, 16) == [(0, [(0, 8), (1, 8), (2, 8), (3, 8)], 8),
                                               (32, [(0, 8), (1, 8), (2, 8), (3, 8)], 8)]


def test_other_runs_are_left_to_the_register_at_a_time_path() -> None:
    # A plain copy of two registers, runs that leave their register, and one register's
    # worth (a zip does that) are no interleaving store.
    assert interleaves([(0, n) for n in range(16)] + [(1, n) for n in range(16)], 16) is None
    assert interleaves([(r, 12 + c) for c in range(8) for r in range(4)], 16) is None
    assert interleaves([(r, c) for c in range(8) for r in range(2)], 16) is None


def test_a_rows_become_an_interleave_once_their_words_are_paired() -> None:
    # A's 8 rows x 4 words (one register a row), stored step by step: word g of rows 0-7.
    rows = [(r, 4 * g + b) for g in range(4) for r in range(8) for b in range(4)]
    planned = plan(rows, 8, 16)
    assert planned is not None
    # Bytes to 16-bit to words, then pairs of rows' words into 64-bit elements: 8
    # interleaves (rows 0-1, 2-3, 4-5, 6-7, each half), stored four at a time.
    assert planned.steps[:2] == (None, None) and len(planned.steps[2]) == 8
    assert (planned.bits, planned.count) == (64, 2)
    assert [(start, run) for start, _, run in planned.segments] == [(0, 2), (8, 2)]
