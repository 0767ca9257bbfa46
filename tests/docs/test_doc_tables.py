"""Documented tables whose command is stated in the prose beside them show what that command
prints: bench_machines.py's (README.md, docs/npu_backend.md), bench_npu.py's, and the NPU
and arm rows of the README's network table. A stale count (cycles, instructions, words,
layers tensorized, utilisation, bound) fails the slow pass; the tables' timings are
measurements stated beside the command that made them and are not compared."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.docs.doc_tables import DocTable, check_table, run_bench, table_rows

ROOT = Path(__file__).resolve().parents[2]
# bench_machines.py prints: machine, kernel (several words), then cycles, us, MAC util,
# B/cycle, bound, binds, /bound: the last seven fields, counted from the end.
CYCLES, UTIL, BYTES, BINDS, OVER = -7, -5, -4, -2, -1
TABLES = [
    DocTable(ROOT / "README.md",
             "| machine | kernel | cycles | MAC utilisation | DRAM bytes/cycle | binds | "
             "cycles / bound |",
             {"cycles": CYCLES, "MAC utilisation": UTIL, "DRAM bytes/cycle": BYTES,
              "binds": BINDS, "cycles / bound": OVER}),
    DocTable(ROOT / "docs" / "npu_backend.md",
             "| machine | kernel | cycles | MAC util | DRAM bytes/cycle | bound (cycles) | binds "
             "| run / bound |",
             {"cycles": CYCLES, "MAC util": UTIL, "DRAM bytes/cycle": BYTES,
              "bound (cycles)": -3, "binds": BINDS, "run / bound": OVER}),
]


@pytest.fixture(scope="module")
def printed() -> list[list[str]]:
    out = run_bench(str(ROOT / "bench" / "bench_machines.py"))
    lines = out.split("\n\n")[0].splitlines()[1:]
    return [line.split() for line in lines]


@pytest.mark.slow
@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.path.name)
def test_the_documented_bench_table_is_what_the_bench_prints(table, printed):
    assert not check_table(table, printed)


def test_a_stale_cell_is_reported_at_its_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n| machine | cycles | util |\n|---|---|---|\n"
                    "| a | 1,234 | 50.0% |\n| | 99 | 7.5% |\n", encoding="utf-8")
    table = DocTable(page, "| machine | cycles | util |", {"cycles": 1, "util": 2})
    printed = [["a", "1234", "50.01%"], ["a", "98", "7.5%"]]
    findings = check_table(table, printed)
    assert [(f.line, f.message) for f in findings] == [
        (6, "column 'cycles' documents 99 (the bench prints 98)")]
    assert [n for n, _ in table_rows(table)] == [5, 6]


# bench_npu.py prints, per kernel: name (several words), tensorize, compile, simulate, total,
# words, executed, cycles, MAC util, peak RSS: counted from the end.
NPU_TABLE = DocTable(ROOT / "README.md",
                     "| machine | kernel | tensorize | compile | simulate | words | "
                     "instructions run | simulated cycles | MAC utilisation | peak RSS |",
                     {"words": -5, "instructions run": -4, "simulated cycles": -3,
                      "MAC utilisation": -2})


@pytest.mark.slow
def test_the_documented_npu_bench_table_is_what_the_bench_prints():
    rows = []
    for machine in ((), ("--machine", "examples/machines/npu32x32.yaml")):
        out = run_bench(str(ROOT / "bench" / "bench_npu.py"), *machine)
        table = out[out.index("kernel "):].split("\n\n")[0].splitlines()[1:]
        rows += [line.split() for line in table if line.strip()]
    assert not check_table(NPU_TABLE, rows)


MODELS_HEADER = ("| network | target | run (tensorize, compile, simulate or run, host layers) "
                 "| tensorized | figure | every layer exact |")
NETWORKS = {"ResNet-50": "resnet50", "MobileNet-v2": "mobilenetv2", "BERT-base": "bert_layer"}


def _network_rows(target: str):
    """(line, cells, network key) of the README network table's rows for ``target``; a row
    that leaves the network blank continues the one above."""
    network = None
    for number, cells in table_rows(DocTable(ROOT / "README.md", MODELS_HEADER, {})):
        network = next((key for name, key in NETWORKS.items()
                        if cells["network"].startswith(name)), network)
        if cells["target"] == target:
            yield number, cells, network


@pytest.mark.slow
def test_the_documented_npu_figures_of_the_networks_are_what_the_bench_prints():
    # The NPU rows: their counts (cycles, utilisation, layers tensorized) are deterministic;
    # the run times are timings, stated beside the command that made them.
    printed = {line.split()[0]: line for line in run_bench(
        str(ROOT / "bench" / "bench_models.py"), "--targets", "npu").splitlines()
        if not line.startswith(("#", " "))}
    checked = 0
    for number, cells, network in _network_rows("npu"):
        line = printed[network]
        tensorized = cells["tensorized"].replace(" ", "")
        assert f"tensorized {tensorized}" in line, (number, line)
        for figure in re.findall(r"\d[\d,]*(?:\.\d+)?", cells["figure"]):
            assert figure in line, f"README.md:{number}: {figure} is not in: {line}"
        assert ("exact yes" in line) == (cells["every layer exact"] == "yes")
        checked += 1
    assert checked == len(NETWORKS)


@pytest.mark.slow
def test_the_documented_arm_figures_of_the_networks_are_what_the_tool_prints(
        example_models):
    # The arm rows, from `tensorize model MODEL --target arm --json` as the README says:
    # instructions executed under the emulator and the MACs per instruction are counts.
    checked = 0
    for number, cells, network in _network_rows("arm"):
        model = str(example_models / f"{network}_int8.onnx")
        run = json.loads(run_bench("-m", "tensorize", "model", model, "--target", "arm",
                                   "--json"))
        totals = run["totals"]
        assert cells["tensorized"] == f"{totals['tensorized']} / {totals['layers']}", number
        figures = re.findall(r"\d[\d,]*(?:\.\d+)?", cells["figure"])
        assert figures[0] == f"{totals['instructions']:,}", f"README.md:{number}"
        if len(figures) > 1:
            assert figures[1] == f"{totals['macs'] / totals['instructions']:.2f}", number
        assert run["ok"] == (cells["every layer exact"] == "yes")
        checked += 1
    assert checked == len(NETWORKS)
