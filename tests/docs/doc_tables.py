"""Markdown tables whose figures a bench prints, checked against a run of that bench.

A documented table is found by its header line in a page; its rows are matched, in order,
with the rows the bench prints. Each checked column names the printed field it shows and
how: a count must be the printed count exactly (thousands separators aside), a figure with
decimals the printed figure rounded to the documented number of decimals, a word the printed
word. A blank cell (a row continuing the machine of the row above) is not checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.docs.doc_samples import Finding

_NUMBER = re.compile(r"-?[\d,]*\.?\d+")


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
