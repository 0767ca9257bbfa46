"""The network timeline's unit spans: the union of a unit's instruction intervals, whose
length is the busy time the simulator accounts for each unit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorize.engine import auto_tensorize
from tensorize.model.timeline import _union, layer_timeline
from tensorize.runners.npu import simulate_and_measure
from tests.tensorize.schedule.kernels import gemm_int8


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)), max_size=30))
def test_union_covers_exactly_the_cycles_of_the_intervals(pairs):
    intervals = np.array([(b, b + n) for b, n in pairs], dtype=np.int64).reshape(-1, 2)
    covered = np.zeros(80, dtype=bool)
    for begin, end in intervals:
        covered[begin:end] = True
    spans = _union(intervals)
    from_spans = np.zeros(80, dtype=bool)
    for begin, end in spans:
        from_spans[begin:end] = True
    assert np.array_equal(from_spans, covered)
    # Disjoint, in order, and not touching (touching spans are one span).
    assert all(a_end < b_begin for (_, a_end), (b_begin, _) in zip(spans, spans[1:]))


def test_unit_spans_add_up_to_the_simulated_busy_cycles(registry, machine):
    func = auto_tensorize(gemm_int8(64, 96, 80), "npu", registry=registry, config=machine).func
    rng = np.random.default_rng(0)
    inputs = {"A": rng.integers(-128, 128, (64, 80), dtype=np.int8),
              "B": rng.integers(-128, 128, (80, 96), dtype=np.int8)}
    measure = simulate_and_measure(func, inputs, machine, registry)
    timeline = layer_timeline(measure.sims)
    assert timeline.cycles == measure.cycles
    for unit, stats in measure.run.units.items():
        spans = timeline.busy[unit]
        assert int((spans[:, 1] - spans[:, 0]).sum()) == stats.busy, unit
        assert spans.size == 0 or (spans.min() >= 0 and spans.max() <= measure.cycles)
