"""The README's AArch64 table (bench_arm.py) and the NPU fusion tables of the README and
docs/models.md (bench_npu_fusion.py) show what their benches print: instruction counts per
MAC under the emulator, simulated cycles and DRAM bytes, all deterministic. The ratio
columns ("27.4x") are the other columns' quotients and are not compared."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.doc_tables import DocTable, check_table, run_bench

ROOT = Path(__file__).resolve().parents[2]

# bench_arm.py prints a row per kernel: its name (several words), then ours, llvm -O3,
# ratio, inner loop, +i8mm, smmla: counted from the end.
ARM = DocTable(ROOT / "README.md",
               "| kernel | ours | LLVM -O3 | ratio | k loop | +i8mm | smmla named |",
               {"ours": -6, "LLVM -O3": -5, "k loop": -3, "+i8mm": -2, "smmla named": -1})

# bench_npu_fusion.py prints a markdown row per network: network, machine, layers with the
# epilogue in the program, cycles fused, unfused, their ratio, DRAM bytes fused, unfused,
# bytes saved, saved bytes as port cycles, cycles saved, exact.
FUSION = [
    DocTable(ROOT / "README.md",
             "| network | cycles, fused | cycles, unfused | unfused / fused | DRAM bytes, fused | "
             "DRAM bytes, unfused | saved bytes at the port's 32 B/cycle | cycles saved |",
             {"cycles, fused": 3, "cycles, unfused": 4, "DRAM bytes, fused": 6,
              "DRAM bytes, unfused": 7, "saved bytes at the port's 32 B/cycle": 9,
              "cycles saved": 10}),
    DocTable(ROOT / "docs" / "models.md",
             "| network | cycles, fused | cycles, unfused | DRAM bytes, fused | DRAM bytes, "
             "unfused | saved bytes / 32 B per cycle | cycles saved |",
             {"cycles, fused": 3, "cycles, unfused": 4, "DRAM bytes, fused": 6,
              "DRAM bytes, unfused": 7, "saved bytes / 32 B per cycle": 9,
              "cycles saved": 10}),
]


@pytest.mark.slow
def test_the_documented_arm_table_is_what_the_bench_prints():
    out = run_bench(str(ROOT / "bench" / "bench_arm.py"), tools=True)
    lines = out[out.index("\nkernel ") + 1:].split("\n\n")[0].splitlines()[1:]
    assert not check_table(ARM, [line.split() for line in lines if line.strip()])


@pytest.mark.slow
@pytest.mark.parametrize("table", FUSION, ids=lambda t: t.path.name)
def test_the_documented_fusion_table_is_what_the_bench_prints(table, example_models):
    out = run_bench(str(ROOT / "bench" / "bench_npu_fusion.py"), "--keep", str(example_models),
                    "--networks", "resnet50", "mobilenetv2", "bert_layer")
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in out.splitlines() if line.startswith("| ") and "npu-" in line]
    assert rows and all(row[-1] == "yes" for row in rows)
    assert not check_table(table, rows)
