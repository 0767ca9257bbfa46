"""Streaming a sweep's rows to disk as they arrive, and reading them back to resume.

Two files in the output directory:

- ``results.jsonl``: one JSON object per finished point, appended, flushed and synced as
  each point arrives, so a crash or Ctrl-C loses no finished point. It is the record a rerun
  resumes from: a point whose key has a valid row without an error is done. A line cut short
  by a crash is dropped (and cut off the file) when the store opens it again; a row that is
  not what a point writes (:func:`row_problem`: a negative or non-numeric measure, a missing
  field) is reported and its point runs again.
- ``results.csv``: the same rows as a table (machine fields, workload, cycles, utilisation,
  DRAM bytes, area proxy, error), appended per point as well, and rewritten in point order
  when the sweep ends.

One sweep at a time writes a directory: the store holds an exclusive lock on its ``.lock``
file while open, and a second sweep on the same directory is refused (two would run every
point twice and interleave their rows).
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ir.errors import TensorizeError
from tensorize.atomic import write_text_atomically

JSONL = "results.jsonl"
CSV = "results.csv"
LOCK = ".lock"
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
        self.jsonl_path = directory / JSONL
        self.csv_path = directory / CSV
        # Lines of results.jsonl that were not a valid row (their points run again).
        self.rejected: list[str] = []
        self._lock = _disk(directory, lambda: _lock(directory))
        try:
            self.done: dict[str, dict[str, Any]] = _disk(self.jsonl_path, self._read)
            self.write_csv(list(self.done.values()))
            self._jsonl = _disk(self.jsonl_path, lambda: self.jsonl_path.open("a",
                                                                               encoding="utf-8"))
            self._csv = _disk(self.csv_path, lambda: self.csv_path.open("a", encoding="utf-8",
                                                                         newline=""))
        except BaseException:
            self._lock.close()
            raise

    def _read(self) -> dict[str, dict[str, Any]]:
        """The valid rows already written; a last line cut short is cut off the file."""
        if not self.jsonl_path.exists():
            return {}
        data = self.jsonl_path.read_bytes()
        complete = data[:data.rfind(b"\n") + 1]
        if len(complete) != len(data):
            with self.jsonl_path.open("r+b") as stream:
                stream.truncate(len(complete))
        rows = {}
        for number, line in enumerate(complete.decode("utf-8", errors="replace").splitlines(),
                                      1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                self.rejected.append(f"line {number}: not a JSON object")
                continue
            problem = row_problem(row)
            if problem is not None:
                self.rejected.append(f"line {number}: {problem}")
                continue
            rows[row["key"]] = row
        return rows

    def is_done(self, key: str) -> bool:
        """Whether the point ran to a result (a row without an error)."""
        row = self.done.get(key)
        return row is not None and not row.get("error")

    def add(self, row: dict[str, Any]) -> None:
        """Append ``row`` to both files, flushed and synced before returning."""
        self.done[row["key"]] = row
        for stream, text in ((self._jsonl, json.dumps(row) + "\n"),
                             (self._csv, self._csv_line(row))):
            _disk(Path(stream.name), lambda: _append(stream, text))

    def write_csv(self, rows: Sequence[dict[str, Any]]) -> None:
        """Rewrite the table with ``rows`` (atomically: a reader never sees half of it); called
        when the store opens, and once more when every point is in, before :meth:`close`."""
        text = ",".join(self.columns) + "\n" + "".join(self._csv_line(r) for r in rows)
        _disk(self.csv_path, lambda: write_text_atomically(self.csv_path, text))

    def _csv_line(self, row: dict[str, Any]) -> str:
        buffer = io.StringIO()
        values = {**row.get("fields", {}), **row}
        csv.writer(buffer, lineterminator="\n").writerow(
            [_cell(values.get(c)) for c in self.columns])
        return buffer.getvalue()

    def close(self) -> None:
        """Close both files, and let another sweep write the directory."""
        try:
            for stream in (self._jsonl, self._csv):
                _disk(Path(stream.name), stream.close)
        finally:
            self._lock.close()


# What a point's row holds, by field: the test a valid value passes, and what it requires.
_MEASURES: dict[str, tuple[Any, str]] = {
    "cycles": (lambda v: _integer(v) and v > 0, "a positive integer"),
    "macs": (lambda v: _integer(v) and v >= 0, "a non-negative integer"),
    "dram_bytes": (lambda v: _integer(v) and v >= 0, "a non-negative integer"),
    "utilisation": (lambda v: _number(v) and 0 <= v <= 1, "a number from 0 to 1"),
}


def row_problem(row: Any) -> str | None:
    """Why ``row`` is not a row a point writes (None: it is). A row with an error needs only
    its key and the error; one without needs every measure, each in its range."""
    if not isinstance(row, dict):
        return "requires a JSON object"
    if not isinstance(row.get("key"), str) or not row["key"]:
        return "requires a 'key' string"
    error = row.get("error")
    if error is not None and not isinstance(error, str):
        return f"'error' requires text or null, got {error!r}"
    if error:
        return None
    for name, (valid, wanted) in _MEASURES.items():
        if not valid(row.get(name)):
            return f"{name!r} requires {wanted}, got {row.get(name)!r}"
    seconds = row.get("seconds")
    if seconds is not None and not (_number(seconds) and seconds >= 0):
        return f"'seconds' requires a non-negative number, got {seconds!r}"
    return None


def _integer(value: Any) -> bool:
    return type(value) is int


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _append(stream: Any, text: str) -> None:
    stream.write(text)
    stream.flush()
    os.fsync(stream.fileno())


def _lock(directory: Path) -> Any:
    """The directory (made if needed), locked for this store: an open file holding an
    exclusive lock, released when closed (or when the process ends, however it ends)."""
    directory.mkdir(parents=True, exist_ok=True)
    stream = (directory / LOCK).open("a")
    try:
        fcntl.flock(stream.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        stream.close()
        raise TensorizeError(f"--out {directory} is in use by another sweep (it holds "
                             f"{directory / LOCK}); wait for that sweep to end, or give "
                             "another --out") from None
    return stream


def _disk(path: Path, action: Any) -> Any:
    """``action()``, with a failure of the disk (full, a file size limit, no permission)
    as an error naming ``path``."""
    try:
        return action()
    except OSError as err:
        raise TensorizeError(f"cannot write the sweep's output {path}: "
                             f"{err.strerror or err}; every row already written is kept, "
                             "and a rerun resumes from them") from None


def _cell(value: Any) -> Any:
    """A table cell: empty for None, a list's items separated by spaces (a model workload's
    layer names)."""
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(map(str, value))
    return value
