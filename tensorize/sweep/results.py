"""Streaming a sweep's rows to disk as they arrive, and reading them back to resume.

Two files in the output directory:

- ``results.jsonl``: one JSON object per finished point, appended, flushed and synced as
  each point arrives, so a crash or Ctrl-C loses no finished point. It is the record a rerun
  resumes from: a point whose key has a row without an error is done. A line cut short by a
  crash is dropped (and cut off the file) when the store opens it again.
- ``results.csv``: the same rows as a table (machine fields, workload, cycles, utilisation,
  DRAM bytes, area proxy, error), appended per point as well, and rewritten in point order
  when the sweep ends.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tensorize.cli.outputs import write_text_atomically

JSONL = "results.jsonl"
CSV = "results.csv"
MEASURES = ("cycles", "utilisation", "dram_bytes", "macs", "pes", "sram_bytes")


# What a model's workload adds to its rows: the model file, the layers sharing the kernel.
MODEL_COLUMNS = ("model", "layers", "count")


def csv_columns(fields: Sequence[str], models: bool = False) -> list[str]:
    """The table's columns: the point's key and workload (with ``models``, the model file,
    the layers sharing the workload's kernel and their count), the varied machine fields,
    the measures, the error."""
    return ["key", "workload", *(MODEL_COLUMNS if models else ()), *fields, *MEASURES,
            "error"]


class ResultStore:
    """The rows of one sweep's output directory; ``done`` holds the finished rows by key
    (the last row of a key wins: a failed point that later ran replaces its failure);
    ``models``: the table has the model columns."""

    def __init__(self, directory: Path, fields: Sequence[str], models: bool = False) -> None:
        self.directory = directory
        self.columns = csv_columns(fields, models)
        directory.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = directory / JSONL
        self.csv_path = directory / CSV
        self.done: dict[str, dict[str, Any]] = self._read()
        self.write_csv(list(self.done.values()))
        self._jsonl = self.jsonl_path.open("a", encoding="utf-8")
        self._csv = self.csv_path.open("a", encoding="utf-8", newline="")

    def _read(self) -> dict[str, dict[str, Any]]:
        """The rows already written; a last line cut short is cut off the file."""
        if not self.jsonl_path.exists():
            return {}
        data = self.jsonl_path.read_bytes()
        complete = data[:data.rfind(b"\n") + 1]
        if len(complete) != len(data):
            with self.jsonl_path.open("r+b") as stream:
                stream.truncate(len(complete))
        rows = {}
        for line in complete.decode("utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line damaged outside a crash's cut: that point runs again
            if isinstance(row, dict) and isinstance(row.get("key"), str):
                rows[row["key"]] = row
        return rows

    def is_done(self, key: str) -> bool:
        """Whether the point ran to a result (a row without an error)."""
        row = self.done.get(key)
        return row is not None and not row.get("error")

    def add(self, row: dict[str, Any]) -> None:
        """Append ``row`` to both files, flushed and synced before returning."""
        self.done[row["key"]] = row
        self._jsonl.write(json.dumps(row) + "\n")
        self._csv.write(self._csv_line(row))
        for stream in (self._jsonl, self._csv):
            stream.flush()
            os.fsync(stream.fileno())

    def write_csv(self, rows: Sequence[dict[str, Any]]) -> None:
        """Rewrite the table with ``rows`` (atomically: a reader never sees half of it);
        called while the store is closed (opening, and after :meth:`close`)."""
        text = ",".join(self.columns) + "\n" + "".join(self._csv_line(r) for r in rows)
        write_text_atomically(self.csv_path, text)

    def _csv_line(self, row: dict[str, Any]) -> str:
        buffer = io.StringIO()
        values = {**row.get("fields", {}), **row}
        csv.writer(buffer, lineterminator="\n").writerow(
            [_cell(values.get(c)) for c in self.columns])
        return buffer.getvalue()

    def close(self) -> None:
        """Close both files."""
        self._jsonl.close()
        self._csv.close()


def _cell(value: Any) -> Any:
    """A table cell: empty for None, a list's items separated by spaces (a model workload's
    layer names)."""
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(map(str, value))
    return value
