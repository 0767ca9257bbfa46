"""Expanding a sweep into points, and the point key."""

from __future__ import annotations

import dataclasses

import yaml

from tensorize.sweep import expand, load_sweep, point_key
from tensorize.sweep.machines import area
from tests.tensorize.sweep.conftest import MACHINES, SMALL


def test_points_are_the_grid_times_the_workloads_less_the_constraints(write_sweep):
    sweep = load_sweep(write_sweep(SMALL.replace("array.cols: [8]", "array.cols: [8, 16, 8]")
                                   + "constraints: ['pes < 256']\n"))
    expansion = expand(sweep)
    # rows 8, 16 x cols 8, 16 (8 listed twice is one point): 16x16 is left out.
    assert (expansion.machines, expansion.excluded) == (3, 1)
    fields = [(p.fields["array.rows"], p.fields["array.cols"], p.task.workload.name)
              for p in expansion.points]
    assert fields == [(8, 8, "g"), (8, 8, "c"), (8, 16, "g"), (8, 16, "c"),
                      (16, 8, "g"), (16, 8, "c")]
    assert [p.index for p in expansion.points] == list(range(6))
    assert len({p.key for p in expansion.points}) == 6


def test_a_point_machine_is_the_base_with_its_fields_and_a_fitted_family(write_sweep):
    point = expand(load_sweep(write_sweep())).points[2]
    document = yaml.safe_load(point.task.machine_text)
    machine = document["machine"]
    assert machine["array"]["rows"] == 16 and machine["array"]["cols"] == 8
    assert machine["dram"]["bytes_per_cycle"] == 64  # from the base file
    gemm = document["intrinsics"][0]
    assert [i["extent"] for i in gemm["iterators"]] == [16, 8, 16]
    assert point.area == area(machine) == {"pes": 128,
                                           "sram_bytes": 4096 * 16 + 1024 * 8 + 2048 * 8 * 4}


def test_the_key_changes_with_machine_workload_and_version(write_sweep, monkeypatch):
    first, second = expand(load_sweep(write_sweep())).points[:2]
    text, workload = first.task.machine_text, first.task.workload
    key = point_key(text, workload, "npu")
    assert key == first.key == point_key(text, workload, "npu")
    assert point_key(text.replace("rows: 8", "rows: 9"), workload, "npu") != key
    assert point_key(text, second.task.workload, "npu") != key
    assert point_key(text, dataclasses.replace(workload, spec=(("op", "gemm"), ("m", 33))),
                     "npu") != key
    monkeypatch.setattr("tensorize.sweep.points.__version__", "99.0")
    assert point_key(text, workload, "npu") != key


def test_the_example_sweep_is_112_points():
    sweep = load_sweep(MACHINES.parent / "sweeps" / "npu_arrays.yaml")
    expansion = expand(sweep)
    assert (expansion.machines, expansion.excluded, len(expansion.points)) == (28, 8, 112)
    assert sweep.heatmap == ("array.rows", "array.cols")
