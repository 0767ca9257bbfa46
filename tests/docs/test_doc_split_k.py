"""docs/cuda_backend.md's split-K table shows what ``bench/bench_cuda_split.py`` prints: the
engine's default kernel, its grid and the cost model's parts and cycles, all deterministic
(no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.doc_tables import DocTable, table_rows, run_bench

ROOT = Path(__file__).resolve().parents[2]
SPLIT = DocTable(ROOT / "docs" / "cuda_backend.md",
                 "| GEMM | intrinsic | block tile | blocks | parts | modelled cycles unsplit | "
                 "split | modelled speed-up |", {})


@pytest.mark.slow
def test_the_documented_split_table_is_what_the_bench_prints():
    out = run_bench(str(ROOT / "bench" / "bench_cuda_split.py"))
    printed = {}
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] != "GEMM":
            printed.setdefault(cells[0], cells)
    rows = table_rows(SPLIT)
    assert rows
    for number, cells in rows:
        documented = list(cells.values())
        assert documented == printed[documented[0]], f"docs/cuda_backend.md:{number}"
