"""Markdown tables whose figures a bench prints, checked against a run of that bench.

A documented table is found by its header line in a page; its rows are matched, in order,
with the rows the bench prints. Each checked column names the printed field it shows and
how: a count must be the printed count exactly (thousands separators aside), a figure with
decimals the printed figure rounded to the documented number of decimals, a word the printed
word. A blank cell (a row continuing the machine of the row above) is not checked.

A cell of several figures in words (``1.14 (218 / 192)``, ``0 of 1,536 fragment-load and 576
copy phases``) is compared figure by figure (:func:`figures_agree`) with the values a test
reads from the bench's output; :func:`run_bench` runs each bench once a test session.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.docs.doc_samples import Finding

ROOT = Path(__file__).resolve().parents[2]
_NUMBER = re.compile(r"-?[\d,]*\.?\d+")
# A figure within a cell's text: not part of a word or a name (``m16n8k16``, ``IMMA.16832``).
_FIGURE = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.])")


@dataclass(frozen=True)
class DocTable:
    """A page's table: ``path``, its ``header`` line, and per documented column (by header
    name) the index of the printed field it shows."""

    path: Path
    header: str
    columns: dict[str, int]


def table_rows(table: DocTable) -> list[tuple[int, dict[str, str]]]:
    """The table's rows as (line number, {column: cell}), below its header and rule."""
    lines = table.path.read_text(encoding="utf-8").splitlines()
    start = next((n for n, line in enumerate(lines) if line.strip() == table.header), None)
    if start is None:
        raise AssertionError(f"{table.path.name}: no table with header {table.header!r}")
    names = _cells(lines[start])
    rows = []
    for number in range(start + 2, len(lines)):
        if not lines[number].startswith("|"):
            break
        rows.append((number + 1, dict(zip(names, _cells(lines[number])))))
    return rows


def check_table(table: DocTable, printed: list[list[str]]) -> list[Finding]:
    """Every checked cell of ``table`` against the bench's ``printed`` rows (fields split
    on whitespace), row by row."""
    rows = table_rows(table)
    if len(rows) != len(printed):
        return [Finding(table.path, rows[0][0] if rows else 0,
                        f"the table has {len(rows)} rows, the bench prints {len(printed)}")]
    findings = []
    for (number, cells), fields in zip(rows, printed):
        for column, index in table.columns.items():
            want = fields[index]
            got = cells.get(column, "")
            if got and not _agrees(got, want):
                findings.append(Finding(table.path, number,
                                        f"column {column!r} documents {got} (the bench "
                                        f"prints {want})"))
    return findings


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _agrees(documented: str, printed: str) -> bool:
    """Whether a documented cell shows the printed field (module docs)."""
    number = _NUMBER.fullmatch(documented.rstrip("%"))
    if number is None:
        return documented == printed
    value = printed.rstrip("%").replace(",", "")
    text = documented.rstrip("%").replace(",", "")
    decimals = len(text.split(".")[1]) if "." in text else 0
    try:
        return f"{float(value):.{decimals}f}" == f"{float(text):.{decimals}f}"
    except ValueError:
        return False


@functools.cache
def run_bench(*args: str, tools: bool = False) -> str:
    """What ``python ARGS`` prints, run once per session from the repository root; with
    ``tools`` the caller's PATH is kept (nvcc, g++), else no program outside Python is
    found."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {"PYTHONPATH": os.pathsep.join(paths), "PATH": os.environ["PATH"] if tools else ""}
    # The test session's own tile cache (tests/conftest.py), not the user's.
    env.update((k, os.environ[k]) for k in ("TENSORIZE_CACHE_DIR",) if k in os.environ)
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=900, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def figures(cell: str) -> list[str]:
    """The figures a cell's text states, in order (thousands separators dropped)."""
    return [m.group().replace(",", "") for m in _FIGURE.finditer(cell)]


def figures_agree(cell: str, values: tuple[float, ...]) -> bool:
    """Whether the cell states exactly ``values``, in order, each rounded to the decimals
    (or, in ``6.55e5`` form, the significant digits) the cell gives it; a value half way
    between two roundings agrees with either."""
    stated = figures(cell)
    return len(stated) == len(values) and all(map(_rounds_to, stated, values))


def _rounds_to(stated: str, value: float) -> bool:
    mantissa = stated.split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    scale = 10 ** int(stated.split("e")[1]) if "e" in stated else 1
    return abs(float(stated) - value) <= 0.5 * 10 ** -decimals * scale * (1 + 1e-9)
