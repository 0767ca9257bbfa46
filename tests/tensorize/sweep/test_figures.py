"""What a sweep's figures mean: a point's machine is named after the fields it varies, the
Pareto front is the set a brute-force comparison over its stated objectives finds, a model's
total counts each kernel once per layer sharing it, and the heat map marks the cells no
machine ran (excluded or failed)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import yaml

from tensorize.sweep import expand, load_sweep
from tensorize.sweep.plots import heatmap_cells, write_plots
from tensorize.sweep.report import OBJECTIVES, machines, pareto_front, summary_text, summarize
from tests.tensorize.sweep.conftest import SMALL


def test_a_point_machine_is_named_after_its_varied_fields(write_sweep):
    sweep = load_sweep(write_sweep(SMALL.replace("array.cols: [8]", "array.cols: [8]\n"
                                                 "  dram.bytes_per_cycle: [16]")))
    names = [yaml.safe_load(p.task.machine_text)["machine"]["name"]
             for p in expand(sweep).points]
    # The base is npu-32x32-os: a point names the array it has, never the base's.
    assert names == ["npu-8x8-os dram.bytes_per_cycle=16"] * 2 + \
        ["npu-16x8-os dram.bytes_per_cycle=16"] * 2


def test_a_point_that_keeps_the_array_keeps_the_base_name(write_sweep):
    sweep = load_sweep(write_sweep(SMALL.replace("  array.rows: [8, 16]\n  array.cols: [8]\n",
                                                 "  inp.rows: [1024, 2048]\n")))
    names = {yaml.safe_load(p.task.machine_text)["machine"]["name"]
             for p in expand(sweep).points}
    assert names == {"npu-32x32-os inp.rows=1024", "npu-32x32-os inp.rows=2048"}


def brute_front(entries, objectives):
    """The entries no other entry dominates, by the definition itself."""
    def dominates(a, b):
        return all(a[o] <= b[o] for o in objectives) and any(a[o] < b[o] for o in objectives)
    return [e for e in entries if not any(dominates(other, e) for other in entries)]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("objectives", [OBJECTIVES, ("cycles", "pes")])
def test_the_front_is_the_brute_force_set(seed, objectives):
    rng = np.random.default_rng(seed)
    # Few distinct values, so ties and equal entries occur.
    entries = [{"machine_file": f"m{i}", "cycles": int(rng.integers(1, 6)),
                "pes": int(rng.choice([64, 128, 256])), "sram_bytes": int(rng.integers(1, 4))}
               for i in range(30)]
    front = pareto_front(entries, objectives)
    expected = brute_front(entries, objectives)
    assert sorted(e["machine_file"] for e in front) == sorted(e["machine_file"]
                                                              for e in expected)


def _row(index, machine, workload, cycles, count=None, error=None):
    row = {"key": f"k{index}", "index": index, "workload": workload, "machine_file": machine,
           "fields": {"array.rows": machine}, "cycles": cycles, "macs": 1000, "pes": 256,
           "sram_bytes": 4096, "utilisation": 0.5, "error": error}
    if count is not None:
        row.update(model="m.onnx", layers=[f"{workload}.{n}" for n in range(count)],
                   count=count)
    return row


def test_a_model_total_counts_each_kernel_once_per_layer():
    # Machine a is faster on the kernel 10 layers share, b on the kernel one layer uses:
    # unweighted, b looks faster (600 < 650); the model runs a's way faster.
    rows = [_row(0, "a", "shared", 50, 10), _row(1, "a", "single", 600, 1),
            _row(2, "b", "shared", 100, 10), _row(3, "b", "single", 500, 1)]
    totals = {m["machine_file"]: m["cycles"] for m in machines(rows, workloads=2)}
    assert totals == {"a": 50 * 10 + 600, "b": 100 * 10 + 500}
    entry = next(m for m in machines(rows, workloads=2) if m["machine_file"] == "a")
    assert entry["utilisation"] == round(11 * 1000 / (1100 * 256), 6)


def test_the_summary_states_the_objectives_of_its_front():
    rows = [_row(0, "a", "g", 50), _row(1, "b", "g", 40)]
    summary = summarize(rows, workloads=1)
    assert summary["pareto_objectives"] == ["cycles", "pes", "sram_bytes"]
    assert "Pareto front over 3 objectives, total cycles over the workloads, PEs and SRAM " \
           "bytes" in summary_text(summary)


def test_heat_map_cells_mark_excluded_and_failed():
    # A 2 x 2 grid: (8, 8) ran twice (other fields vary), (8, 16) failed, (16, 8) ran,
    # (16, 16) was excluded by the constraints (no row at all).
    def row(rows, cols, utilisation, error=None):
        return {"workload": "g", "fields": {"array.rows": rows, "array.cols": cols},
                "utilisation": utilisation, "error": error}
    rows = [row(8, 8, 0.25), row(8, 8, 0.5), row(8, 16, None, "boom"), row(16, 8, 0.75),
            {**row(16, 8, 0.9), "workload": "other"}]
    cells = heatmap_cells(rows, ("array.rows", "array.cols"), "g", [8, 16], [8, 16])
    # A row per array.cols value, a column per array.rows value.
    assert cells == [[50.0, 75.0], ["failed", "excluded"]]


def test_the_plots_are_written_with_excluded_cells(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (tensorize[report])")
    rows = [{"key": f"k{i}", "index": i, "workload": "g", "machine_file": f"m{r}x{c}",
             "fields": {"array.rows": r, "array.cols": c}, "cycles": 1000 // r + c,
             "macs": 1000, "pes": r * c, "sram_bytes": 64 * r, "utilisation": 0.5,
             "error": None}
            for i, (r, c) in enumerate(itertools.product((8, 16), (8, 16))) if r * c < 256]
    complete = machines(rows, workloads=1)
    written = write_plots(rows, complete, pareto_front(complete), ("array.rows", "array.cols"),
                          {"array.rows": (8, 16), "array.cols": (8, 16)}, tmp_path)
    assert [p.name for p in written] == ["pareto.png", "heatmap.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)
