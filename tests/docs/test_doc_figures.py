"""The documented tables not checked elsewhere, against the command the page states beside
each: docs/npu_backend.md's tile search (model against simulator) and depthwise layers here,
the CUDA static figures in test_doc_cuda_figures.py.

Inventory of the tables and figure blocks of README.md and docs/*.md (issue 27), by command:

- README "Figures": bench_executor.py (compile, run): timings only, not compared.
- README, bench_npu.py; README and npu_backend.md, bench_machines.py's first table; README's
  network table (npu and arm rows): test_doc_tables.py. Its x86 rows, and docs/models.md's
  bench_models.py table, are timings beside counts the README's rows already hold.
- README, bench_arm.py's table, and docs/arm_backend.md, simulator.md, sweeps.md: their
  own owners' (bench_arm, bench_simulator, bench_sweep); not checked here.
- README, bench_x86.py (ms, GMAC/s, ratios) and docs/cpu_targets.md's bench_x86.py blocks:
  timings only, not compared.
- README's two CUDA static tables; cuda_backend.md's static figures, search per family,
  mma.sync 4096^3 table (the rows in the engine's default tiling), ResNet-50 3x3 (the current
  row), the k loop across its barrier and grouped convolutions: test_doc_cuda_figures.py
  (nvcc and g++; the SASS figures also need cuobjdump, the `sass` extra). Not checked: the
  rows that record an earlier state ("before this round", "explicit im2col"), the mma.sync
  rows in a tiling no bench prints (BK 32 int8 and u8 x s8, WMMA int8), the ResNet row's
  bank phases (no bench prints them).
- README's GPU table (cuBLAS comparison): measured on a lent H200, no GPU here to rerun it;
  test_doc_cuda_figures.py checks it against the run's record, docs/figures/cuda_suite.json.
- Command samples (`$ tensorize run ...` blocks) of every page: test_doc_samples.py.
- npu_backend.md: tile search and depthwise tables, here.
- cpu_targets.md's skinny-GEMM table: the arm counts of the current state ("arm now"), here,
  on the page's copies of examples/script/gemm_int8.py with the sizes changed; "before" and
  the x86 columns are an earlier state and timings. The 15^3 i8mm figures in its prose are
  checked by tests/targets/cpu/test_tune.py.
- models.md's arm table (`tensorize model MODEL --target arm --json`) and models_report.md's
  machine line (`tensorize model MODEL --target npu`): here, on the full-size networks.
- models.md's float16 table and check line (the tests' float16 network, `--target arm
  --features +fp16fml`): tests/tensorize/model/test_float16.py, on the run its tests share.
- models_report.md's other tables, intrinsics.md, schedule.md: fields and primitives, no
  figures a command prints (intrinsics.md's one sample is in test_doc_samples.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.docs.doc_tables import (DocTable, check_table, figures, figures_agree, run_bench,
                                   table_rows)

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "npu_backend.md"

# bench_depthwise.py prints per layer: layer, host, NPU, packing, NPU+pack (times, "0.38ms"),
# cycles, MAC util, non-zero, DRAM x, exact: counted from the end. The host and packing
# times are measured; the NPU's is its cycles at the clock.
DEPTHWISE = DocTable(
    PAGE, "| 3x3 depthwise layer | host | NPU (simulated) | NPU cycles | host packing | "
          "NPU + packing | NPU MAC util | MACs not zero | DRAM traffic / tensors | exact |",
    {"NPU (simulated)": -8, "NPU cycles": -5, "NPU MAC util": -4, "MACs not zero": -3,
     "DRAM traffic / tensors": -2, "exact": -1})
TILE_SEARCH = DocTable(PAGE, "| machine | tile (rows x cols x depth, order) | model | "
                             "simulated | model error |", {})


def _as_documented(field: str) -> str:
    """A printed field in the page's words: ``0.38ms`` as ``0.38 ms``, ``True`` as ``yes``."""
    if field in ("True", "False"):
        return "yes" if field == "True" else "no"
    return field.removesuffix("ms") + " ms" if field.endswith("ms") else field


@pytest.mark.slow
def test_the_documented_depthwise_figures_are_what_the_bench_prints():
    out = run_bench(str(ROOT / "bench" / "bench_depthwise.py"))
    printed = [[_as_documented(f) for f in line.split()] for line in out.splitlines()[1:]]
    assert not check_table(DEPTHWISE, printed)


def tile_search(output: str) -> dict[str, dict[str, str]]:
    """bench_machines.py's tile search: machine name -> tile and order (``256x64x32 mn``)
    -> the rest of its line."""
    found: dict[str, dict[str, str]] = {}
    machine = None
    for line in output.splitlines():
        if line.endswith(", tile search:"):
            machine = line.split(",")[0]
            found[machine] = {}
        elif machine and line.startswith("  tile "):
            tile, rest = line.strip().removeprefix("tile ").split(": ", 1)
            found[machine][tile] = rest
    return found


def check_tile_search(table: DocTable, output: str) -> list[str]:
    """Each documented row against the printed trial of its machine (named by its array,
    ``16x16 WS`` for ``npu-16x16``) and tile: simulated, with the same model and simulated
    cycles and the same model error."""
    search = tile_search(output)
    problems = []
    machine = None
    for number, cells in table_rows(table):
        if cells["machine"]:
            array = cells["machine"].split()[0]
            machine = next((m for m in search if m.split("-")[1] == array), None)
        trials = search.get(machine, {})
        tile = cells["tile (rows x cols x depth, order)"]
        line = trials.get(tile, "")
        documented = f"{cells['model']} {cells['simulated']} {cells['model error']}"
        if "simulated " not in line:
            problems.append(f"{table.path.name}:{number}: {machine} prints no simulated "
                            f"tile {tile}")
        elif not figures_agree(documented, tuple(map(float, figures(line)))):
            problems.append(f"{table.path.name}:{number}: documented {documented} "
                            f"(the bench prints {line})")
    return problems


@pytest.mark.slow
def test_the_documented_tile_search_is_what_the_bench_prints():
    out = run_bench(str(ROOT / "bench" / "bench_machines.py"))
    assert not check_tile_search(TILE_SEARCH, out)


SEARCH_OUTPUT = """\
npu-16x16, GEMM 256^3 int8, tile search:
  tile 256x64x64 mn: model 74,618 cycles (not simulated)
  tile 256x64x32 mn: model 74,298 cycles, simulated 67,338 (model +10.3%)

npu-8x64-ws, GEMM 256^3 int8, tile search:
  tile 256x128x16 mn: model 66,544 cycles, simulated 65,424 (model +1.7%)
"""


def test_a_stale_or_unsimulated_tile_is_reported_at_its_line(tmp_path):
    page = tmp_path / "page.md"
    header = "| machine | tile (rows x cols x depth, order) | model | simulated | model error |"
    page.write_text(f"{header}\n|---|---|---|---|---|\n"
                    "| 16x16 WS | 256x64x32 mn | 74,298 | 67,338 | +10.3% |\n"
                    "| | 256x64x64 mn | 74,618 | 1 | +0.0% |\n"
                    "| 8x64 WS | 256x128x16 mn | 66,544 | 65,425 | +1.7% |\n", encoding="utf-8")
    problems = check_tile_search(DocTable(page, header, {}), SEARCH_OUTPUT)
    assert [p.split(": ", 1)[0] for p in problems] == ["page.md:4", "page.md:5"]
    assert "no simulated tile 256x64x64 mn" in problems[0]
    assert "documented 66,544 65,425 +1.7%" in problems[1]


def test_a_printed_field_reads_in_the_page_s_words():
    assert [_as_documented(f) for f in ("0.38ms", "True", "False", "2.6x")] == [
        "0.38 ms", "yes", "no", "2.6x"]


NETWORKS = {"ResNet-50": "resnet50", "MobileNet-v2": "mobilenetv2", "BERT-base": "bert_layer"}
ARM_MODELS = DocTable(ROOT / "docs" / "models.md", "| network | run | tensorized | "
                      "instructions | useful MACs per instruction |", {})


def _model(models: Path, network: str, *args: str) -> str:
    """What ``tensorize model NETWORK_int8.onnx ARGS`` prints."""
    return run_bench("-m", "tensorize", "model", str(models / f"{network}_int8.onnx"), *args)


@pytest.mark.slow
def test_the_documented_arm_runs_of_the_networks_are_what_the_tool_prints(example_models):
    # Instructions are those the emulator executed, and MACs are the layers' own: counts.
    problems = []
    for number, cells in table_rows(ARM_MODELS):
        network = next(key for name, key in NETWORKS.items()
                       if cells["network"].startswith(name))
        totals = json.loads(_model(example_models, network, "--target", "arm",
                                   "--json"))["totals"]
        printed = {"tensorized": (totals["tensorized"], totals["layers"]),
                   "instructions": (totals["instructions"],),
                   "useful MACs per instruction": (totals["macs"] / totals["instructions"],)}
        problems += [f"models.md:{number}: {column} documents {cells[column]}, the tool "
                     f"prints {want}" for column, want in printed.items()
                     if not figures_agree(cells[column], want)]
    assert not problems
    assert len(table_rows(ARM_MODELS)) == len(NETWORKS)


def _block_after(page: Path, text: str) -> list[str]:
    """The lines of the first fenced block after the line that ends with ``text``."""
    lines = page.read_text(encoding="utf-8").splitlines()
    start = next(n for n, line in enumerate(lines) if line.endswith(text))
    fence = next(n for n in range(start, len(lines)) if lines[n].startswith("```"))
    end = next(n for n in range(fence + 1, len(lines)) if lines[n].startswith("```"))
    return lines[fence + 1:end]


@pytest.mark.slow
def test_the_documented_machine_line_is_what_the_report_prints(example_models):
    (documented,) = _block_after(ROOT / "docs" / "models_report.md", "all give it:")
    printed = _model(example_models, "bert_layer", "--target", "npu").splitlines()
    assert documented in printed


SKINNY = DocTable(ROOT / "docs" / "cpu_targets.md",
                  "| kernel | arm before | arm now | x86 before | x86 now |", {})
EXAMPLE = ROOT / "examples" / "script" / "gemm_int8.py"


def sized_example(m: int, n: int, k: int, path: Path) -> Path:
    """``examples/script/gemm_int8.py`` (256^3) with its sizes changed to m x n x k, the copy
    the page describes (``/tmp/gemv.py``), written to ``path``."""
    text = EXAMPLE.read_text(encoding="utf-8")
    edits = [("A: T.Buffer((256, 256)", f"A: T.Buffer(({m}, {k})"),
             ("B: T.Buffer((256, 256)", f"B: T.Buffer(({k}, {n})"),
             ("C: T.Buffer((256, 256)", f"C: T.Buffer(({m}, {n})"),
             ("T.grid(256, 256, 256)", f"T.grid({m}, {n}, {k})")]
    for old, new in edits:
        assert text.count(old) == 1, f"{EXAMPLE.name} no longer reads {old!r}"
        text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")
    return path


def _arm_run(kernel: Path) -> tuple[float, float]:
    """Instructions the emulator executed for ``kernel`` on arm, and useful MACs per one."""
    out = run_bench("-m", "tensorize", "run", str(kernel), "--target", "arm", "--quiet")
    run = re.search(r"(\d+) instructions executed.*MACs per instruction: ([\d.]+) useful", out)
    assert run is not None, out
    return float(run.group(1)), float(run.group(2))


@pytest.mark.slow
def test_the_documented_skinny_gemms_on_arm_are_what_the_tool_prints(tmp_path):
    problems = []
    for number, cells in table_rows(SKINNY):
        if "gemm_int8.py" in cells["kernel"]:
            kernel = EXAMPLE
        else:
            m, n, k = (int(f) for f in figures(cells["kernel"]))
            kernel = sized_example(m, n, k, tmp_path / f"gemm_{m}x{n}x{k}.py")
        printed = _arm_run(kernel)
        if not figures_agree(cells["arm now"], printed):
            problems.append(f"cpu_targets.md:{number}: arm now documents {cells['arm now']}, "
                            f"the tool prints {printed}")
    assert not problems


def test_a_cell_s_figures_agree_with_values_rounded_as_written():
    cell = "4.25 (102 / 24 IMMA.16832) / 4.21: 2.13 per m16n8k16, 0 of 1,536 phases"
    assert figures(cell) == ["4.25", "102", "24", "4.21", "2.13", "0", "1536"]
    assert figures_agree("2.13 / 6.55e5", (2.125, 6.554e5))
    assert figures_agree("2.12", (2.125,))
    assert not figures_agree("2.13", (2.136,))
    assert not figures_agree("6.55e5", (6.56e5,))
    assert not figures_agree("1 / 2", (1.0,))
