"""The documented tables of bench/bench_machines.py (README.md, docs/npu_backend.md) show
what the bench prints: a stale cycle count, utilisation or bound fails the slow pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.doc_tables import DocTable, check_table, table_rows

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
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_machines.py")],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n\n")[0].splitlines()[1:]
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
