"""The on-chip memories' bookkeeping gives the same verdicts however its segments are kept,
and whether a read-modify-write is checked in one pass or two.

A write over a few segments updates them in place instead of merging them into one (so a
tile loaded whole and read in parts is not split again at every read), and a GEMM that
accumulates checks its rows with ``modify`` rather than ``read`` then ``write``. These tests
run random access sequences both ways, with every write merging (``_MERGE_ABOVE = 0``, the
earlier behaviour) and with the default, and with ``modify`` or its two calls, and require the
same fault messages and the same history for every row.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import memory
from simulator.memory import MemoryFault, OnChipMemory

ROWS = 64
KEEP_ABOVE = memory._MERGE_ABOVE  # the default, read before any test patches it
# Tile-like row ranges: a few sizes at aligned starts, as programs access them.
RANGES = [(lo, lo + size) for size in (4, 8, 16, 32) for lo in range(0, ROWS, size)]

accesses = st.lists(
    st.tuples(st.sampled_from(["read", "write", "modify"]), st.sampled_from(RANGES),
              st.integers(0, 2),
              st.lists(st.integers(0, 3), min_size=3, max_size=3)),
    min_size=1, max_size=40)


def replay(steps: list, merge_above: int, monkeypatch: pytest.MonkeyPatch,
           one_pass: bool = True) -> list[object]:
    """Apply ``steps`` to a fresh memory (a modify as one call, or as a read and a write);
    what each step did (None, or its fault message), then each row's history."""
    monkeypatch.setattr(memory, "_MERGE_ABOVE", merge_above)
    mem = OnChipMemory("inp", ROWS, 4, np.float32, 1)
    outcome: list[object] = []
    for n, (kind, (lo, hi), queue, lags) in enumerate(steps):
        # Step n is the newest instruction of its queue, and knows the others up to a few
        # steps back: an access races only with the last few.
        clock = [n + 1 - lag for lag in lags]
        clock[queue] = n + 1
        try:
            if kind == "modify" and not one_pass:
                mem.read(lo, hi, queue, clock, n)
                mem.write(lo, hi, queue, clock, n)
            else:
                getattr(mem, kind)(lo, hi, queue, clock, n)
            outcome.append(None)
        except MemoryFault as fault:
            outcome.append(fault.message)
    for row in range(ROWS):
        seg = mem.history[np.searchsorted(mem.starts, row, side="right") - 1]
        outcome.append((seg.valid, seg.writer_queue, seg.writer_seq, seg.writer_id,
                        tuple(seg.reader_seq)))
    return outcome


@settings(max_examples=150, deadline=None)
@given(steps=accesses)
def test_in_place_writes_give_the_verdicts_of_merging_ones(steps):
    with pytest.MonkeyPatch.context() as monkeypatch:
        merged = replay(steps, 0, monkeypatch)
        kept = replay(steps, KEEP_ABOVE, monkeypatch)
    assert kept == merged


@settings(max_examples=150, deadline=None)
@given(steps=accesses)
def test_modify_gives_the_verdicts_of_a_read_and_a_write(steps):
    with pytest.MonkeyPatch.context() as monkeypatch:
        two = replay(steps, KEEP_ABOVE, monkeypatch, one_pass=False)
        one = replay(steps, KEEP_ABOVE, monkeypatch)
    assert one == two


def test_a_tile_read_in_parts_keeps_its_segments(monkeypatch):
    """Loading 32 rows again and reading them in 8-row parts splits nothing after the
    first round (the churn the in-place write removes), and a race there still names the
    first row of the part read."""
    mem = OnChipMemory("wgt", ROWS, 4, np.float32, 1)
    for round_ in range(3):
        mem.write(0, 32, 0, [3 * round_ + 1, 3 * round_, 0], 2 * round_)
        for lo in range(0, 32, 8):
            mem.read(lo, lo + 8, 1, [3 * round_ + 1, 3 * round_ + 1, 0], 2 * round_ + 1)
        if round_ == 0:
            starts = list(mem.starts)
    assert mem.starts == starts == [0, 8, 16, 24, 32]
    with pytest.raises(MemoryFault, match="reads wgt rows 16..23 while instruction 6 "
                                          r"\(load\) may still write row 16"):
        mem.write(0, 32, 0, [10, 9, 0], 6)
        mem.read(16, 24, 1, [9, 10, 0], 7)
