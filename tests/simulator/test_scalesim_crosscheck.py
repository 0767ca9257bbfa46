"""The pure pieces of bench/bench_scalesim.py, which needs no SCALE-Sim for them: the
topology and config it writes for SCALE-Sim, SCALE-Sim's closed form and our array's floor
against cycles worked out by hand, and reading SCALE-Sim's compute report."""

from __future__ import annotations

import configparser
import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from simulator import load_machine

# The bench imports the model path, which reads ONNX.
pytest.importorskip("onnx", reason="onnx not installed (pip install tensorize[models])")

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "bench_scalesim.py"


@pytest.fixture(scope="module")
def bench():
    """The bench script as a module."""
    spec = importlib.util.spec_from_file_location("bench_scalesim", BENCH)
    module = importlib.util.module_from_spec(spec)
    # Its dataclasses look their module up by name while they are built.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def gemm(bench, m, n, k, tile=(16, 16, 16), padded=(0, 0, 0)):
    """A GemmLayer of that shape (the closed form reads M, N, K; our floor the tiles)."""
    return bench.GemmLayer("layer", m, n, k, tile, padded)


def test_topology_rows_read_back_as_scalesim_reads_them(bench):
    layers = [bench.GemmLayer("conv1", 12544, 64, 147, (16, 16, 16), (12544, 64, 160)),
              bench.GemmLayer("a,b", 1, 1000, 2048, (16, 16, 16), (16, 1008, 2048))]
    text = bench.topology_csv(layers)
    assert text == "Layer, M, N, K,\nlayer0, 12544, 64, 147,\nlayer1, 1, 1000, 2048,\n"
    # SCALE-Sim keeps the fields before each row's last comma (topology_utils).
    rows = [line.split(",")[:-1] for line in text.splitlines()[1:]]
    assert [[f.strip() for f in row] for row in rows] == [
        ["layer0", "12544", "64", "147"], ["layer1", "1", "1000", "2048"]]


def test_config_of_the_builtin_machine(bench):
    array = bench.array_of(load_machine())
    # 2048 input rows of 16 int8, 1024 weight rows of 16 int8, 2048 acc rows of 16 int32.
    assert array == bench.Array(16, 16, "ws", 32, 16, 128, 4)
    config = configparser.ConfigParser()
    config.read_string(bench.config_text(array))
    preset = config["architecture_presets"]
    assert (preset["ArrayHeight"], preset["ArrayWidth"], preset["Dataflow"]) == ("16", "16", "ws")
    assert (preset["ifmapsramszkB"], preset["filtersramszkB"], preset["ofmapsramszkB"]) == (
        "32", "16", "128")
    assert config["run_presets"]["InterfaceBandwidth"] == "CALC"
    assert config["sparsity"]["SparsitySupport"] == "false"


def test_config_of_an_output_stationary_machine(bench):
    machine = load_machine(ROOT / "examples" / "machines" / "npu32x32.yaml")
    # 4096 input rows of 32 int8, 1024 weight rows of 32 int8, 2048 acc rows of 32 int32.
    assert bench.array_of(machine) == bench.Array(32, 32, "os", 128, 32, 256, 4)


def test_a_dataflow_scalesim_lacks_is_refused(bench):
    machine = load_machine()
    machine = replace(machine, array=replace(machine.array, dataflow="input_stationary"))
    with pytest.raises(bench.BenchError, match="got input_stationary on machine npu-16x16"):
        bench.array_of(machine)


@pytest.mark.parametrize("array, shape, cycles", [
    # ceil(33/16) * ceil(17/16) = 6 folds of 2*16 + 16 + 20 - 2 = 66 (SCALE-Sim 3.0.0: 395).
    ((16, 16, "ws"), (20, 17, 33), 396),
    # 36 * 4 = 144 folds of 32 + 16 + 3136 - 2 = 3182 (SCALE-Sim 3.0.0: 458,207).
    ((16, 16, "ws"), (3136, 64, 576), 458_208),
    # R != C: ceil(9/8) * ceil(65/64) = 4 folds of 2*8 + 64 + 5 - 2 = 83.
    ((8, 64, "ws"), (5, 65, 9), 332),
    # ceil(256/32) * ceil(4/32) = 8 folds of 32 + 32 + 147 - 2 = 209 (SCALE-Sim 3.0.0: 1,671).
    ((32, 32, "os"), (256, 4, 147), 1672),
    # R != C: ceil(30/24) * ceil(13/12) = 4 folds of 24 + 12 + 7 - 2 = 41.
    ((24, 12, "os"), (30, 13, 7), 164),
])
def test_closed_form_against_hand_counts(bench, array, shape, cycles):
    rows, cols, dataflow = array
    assert bench.closed_form(gemm(bench, *shape),
                             bench.Array(rows, cols, dataflow, 1, 1, 1, 4)) == cycles


def test_our_floor_weight_stationary(bench):
    # (32/16) * (48/16) * (32/16) = 12 calls of 16 rows, one preload of 16, the drain
    # 16 + 16 - 2 and 4 cycles into the accumulator: 192 + 16 + 30 + 4.
    layer = gemm(bench, 20, 17, 33, padded=(32, 32, 48))
    assert bench.our_floor(layer, bench.Array(16, 16, "ws", 1, 1, 1, 4)) == 242


def test_our_floor_output_stationary(bench):
    # (64/32) * (64/32) * (32/32) = 4 calls of one 32-row sub-tile every max(32, 32) = 32
    # cycles; the last one ends 32 + 2*32 + 32 - 2 + 4 = 130 after it starts: 3 * 32 + 130.
    layer = gemm(bench, 40, 30, 50, tile=(32, 32, 32), padded=(64, 32, 64))
    assert bench.our_floor(layer, bench.Array(32, 32, "os", 1, 1, 1, 4)) == 226


def test_compute_report_total_cycles_column(bench):
    report = ("LayerID, Total Cycles (incl. prefetch), Total Cycles, Stall Cycles, "
              "Overall Util %, Mapping Efficiency %, Compute Util %,\n"
              "0, 557, 395, 0, 11.09, 36.52, 9.01,\n"
              "1, 462890, 458207, 0, 98.55, 100.0, 98.09,\n")
    assert bench.parse_compute_report(report) == [395, 458207]


def test_without_scalesim_it_says_how_to_install_and_succeeds(bench, monkeypatch, capsys):
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: None)
    assert bench.main([]) == 0
    assert "pip install scalesim" in capsys.readouterr().out
