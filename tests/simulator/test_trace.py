"""The Chrome trace: one track per concurrent resource of a unit, so the slices of a track
are nested or disjoint (what Perfetto and chrome://tracing draw), and no slice lost."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from intrinsics import default_registry
from simulator import gemm_program, simulate
from simulator.trace import LANE_NAMES, UNITS, assign_lanes
from targets import npu
from tensorize.engine import auto_tensorize
from tests.tensorize.schedule.kernels import conv2d_nhwc, gemm_int8, random_inputs


def test_each_record_takes_the_first_lane_free_when_it_begins():
    # unit 0: [0, 10) and [2, 5) overlap; [5, 12) begins when [2, 5) ends; [10, 11) when
    # [0, 10) ends. Unit 1 has lanes of its own.
    records = [(0, 0, 10, 0), (0, 2, 5, 1), (0, 5, 12, 2), (0, 10, 11, 3), (1, 3, 4, 4)]
    assert assign_lanes(records) == [0, 1, 1, 0, 0]
    # A record listed before an earlier-beginning one still goes by its begin cycle.
    assert assign_lanes([(0, 4, 8, 0), (0, 0, 6, 1)]) == [1, 0]


def _simulated_gemm(config):
    program = gemm_program(128, 64, 128, config)
    return simulate(program.program, config, np.zeros(program.dram_bytes, np.uint8))


def _simulated_kernel(func, config):
    result = auto_tensorize(func, "npu", registry=default_registry(), config=config)
    inputs = {p.name: a for p, a in zip(func.params, random_inputs(func, 1))}
    run = npu.run(result.func, inputs, config, lookup=default_registry().get)
    return next(s.sim for s in run.stages if s.sim is not None)


REAL = {
    "gemm program": _simulated_gemm,
    "tensorized gemm": lambda config: _simulated_kernel(gemm_int8(128, 64, 96), config),
    "tensorized conv": lambda config: _simulated_kernel(conv2d_nhwc(8, 8, 16, 16), config),
}


@pytest.fixture(scope="module", params=list(REAL))
def written(request, npu, tmp_path_factory):
    """A real run and the trace it writes, read back as JSON."""
    result = REAL[request.param](npu)
    path = tmp_path_factory.mktemp("trace") / "run.json"
    result.write_trace(path)
    return result, json.loads(path.read_text())


def _slices(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def test_slices_of_one_track_are_nested_or_disjoint(written):
    _, trace = written
    tracks: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for event in _slices(trace):
        tracks.setdefault((event["pid"], event["tid"]), []).append(tuple(event["args"]["cycles"]))
    for spans in tracks.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends: list[int] = []  # the ends of the enclosing slices, innermost last
        for begin, end in spans:
            while open_ends and open_ends[-1] <= begin:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], (begin, end, open_ends)
            open_ends.append(end)
    # Some unit overlaps its instructions, so it needed more than one track.
    assert len(tracks) > len({e["cat"] for e in _slices(trace)})


def test_no_slice_is_lost(written):
    result, trace = written
    slices = _slices(trace)
    counts = result.instructions
    dma = counts.get("load", 0) + counts.get("store", 0)
    # One slice per load, gemm, vector op and store on its unit, one per DMA on the port.
    assert len(slices) == dma + counts.get("gemm", 0) + counts.get("vec", 0) + dma
    assert Counter((UNITS.index(e["cat"]), *e["args"]["cycles"], e["args"]["index"])
                   for e in slices) == Counter(result.records)


def test_json_is_what_chrome_tracing_accepts(written):
    result, trace = written
    events = trace["traceEvents"]
    assert isinstance(events, list)
    for event in events:
        assert event["ph"] in ("M", "X") and isinstance(event["pid"], int)
        if event["ph"] == "X":
            assert isinstance(event["name"], str) and isinstance(event["tid"], int)
            assert event["ts"] >= 0 and event["dur"] >= 0
            begin, end = event["args"]["cycles"]
            assert event["ts"] == begin / result.config.clock_mhz
    meta = [e for e in events if e["ph"] == "M"]
    assert {e["name"] for e in meta} == {"process_name", "thread_name", "thread_sort_index"}
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert len(set(names.values())) == len(names)
    assert {e["tid"] for e in _slices(trace)} <= set(names)
    # Each unit's tracks are named after it and numbered from 0, in unit order.
    load = [n for tid, n in sorted(names.items()) if n.startswith("load DMA")]
    assert load == [f"load DMA #{k}" for k in range(len(load))]
    assert 1 < len(load) <= result.config.dma.max_outstanding
    labels = [n.rsplit(" #", 1)[0] for _, n in sorted(names.items())]
    grouped = [label for k, label in enumerate(labels) if k == 0 or labels[k - 1] != label]
    assert grouped == [LANE_NAMES[unit] for unit in UNITS]
