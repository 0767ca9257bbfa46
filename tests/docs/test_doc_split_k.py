"""docs/cuda_backend.md's split-K table shows what ``bench/bench_cuda_split.py`` prints: the
engine's default kernel, its grid, the split chosen after the default tiling and the tiling
and split chosen together, with the cost model's cycles, all deterministic (no GPU); and the
note it quotes is the engine's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tensorize.engine import auto_tensorize
from tests.docs.doc_tables import DocTable, table_rows, run_bench
from tests.targets.cuda.helpers import sized

ROOT = Path(__file__).resolve().parents[2]
SPLIT = DocTable(ROOT / "docs" / "cuda_backend.md",
                 "| GEMM | intrinsic | default block tile | blocks | split after the tiling | "
                 "its modelled cycles | tiling and split together | their modelled cycles | "
                 "modelled speed-up |", {})


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


def test_the_quoted_note_is_the_engines_for_the_int8_gemv(registry):
    text = " ".join(SPLIT.path.read_text(encoding="utf-8").split())
    quoted = re.search(r"`(split-K in [^`]*)` for the int8 1 x 4096 x 4096", text)
    assert quoted is not None, "docs/cuda_backend.md quotes the int8 1 x 4096 x 4096 note"
    (outcome,) = auto_tensorize(sized("gemm_int8", m=1, n=4096, k=4096), "cuda",
                                registry=registry).tensorized
    assert outcome.mapping.endswith(f"; {quoted[1]}")
