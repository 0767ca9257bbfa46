"""A run's report: the Chrome trace, the summary table and the counters."""

from __future__ import annotations

import json

import numpy as np

from simulator import gemm_program, simulate


def test_trace_is_chrome_json_with_one_named_track_per_unit(npu, tmp_path):
    program = gemm_program(64, 64, 64, npu, requant=(1, 8))
    result = simulate(program.program, npu, np.zeros(program.dram_bytes, np.uint8))
    path = tmp_path / "run.trace.json"
    result.write_trace(path)
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {n.rsplit(" #", 1)[0] for n in names.values()} == {
        "load DMA", "gemm pipeline", "vector pipeline", "store DMA", "dram port"}
    spans = [e for e in events if e["ph"] == "X"]
    # One span per load/gemm/vec/store on its unit's track, one per DMA on the port's.
    counts = result.instructions
    dma = counts["load"] + counts["store"]
    assert len(spans) == dma + counts["gemm"] + counts["vec"] + dma
    for event in spans:
        begin, end = event["args"]["cycles"]
        assert event["ts"] == begin / npu.clock_mhz
        assert event["dur"] == (end - begin) / npu.clock_mhz >= 0
        assert 0 <= end <= result.cycles
    gemm = next(e for e in spans if e["name"] == "gemm")
    assert names[gemm["tid"]].startswith("gemm pipeline #")
    assert gemm["args"]["insn"].startswith("gemm acc[")


def test_summary_and_counters(npu):
    program = gemm_program(32, 32, 32, npu)
    result = simulate(program.program, npu, np.zeros(program.dram_bytes, np.uint8))
    text = result.summary()
    assert f"{result.cycles} cycles" in text
    assert "MAC utilisation" in text
    for unit in ("load", "gemm", "vector", "store", "dram"):
        assert f"\n{unit} " in text
    assert result.bytes["dram.read"] == 32 * 32 + 32 * 32
    assert result.bytes["dram.write"] == 32 * 32 * 4
    assert result.useful_macs == 32 ** 3
    assert result.instructions == {"load": 6, "gemm": 4, "store": 2, "finish": 1}
    assert result.functional
    timing_only = simulate(program.program, npu, np.zeros(program.dram_bytes, np.uint8),
                           functional=False)
    assert timing_only.cycles == result.cycles
    assert not timing_only.dram.any()


def test_simulate_leaves_the_callers_dram_alone(npu):
    program = gemm_program(8, 8, 8, npu)
    dram = program.dram(np.ones((8, 8), np.int8), np.ones((8, 8), np.int8))
    before = dram.copy()
    result = simulate(program.program, npu, dram)
    assert np.array_equal(dram, before)
    assert (program.output(result.dram) == 8).all()
