"""Rows streamed to disk per point, and read back to resume."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from ir.errors import TensorizeError
from tensorize.sweep.results import ResultStore


def _row(key: str, cycles: int | None, error: str | None = None) -> dict:
    return {"key": key, "index": 0, "workload": "g", "fields": {"array.rows": 8},
            "cycles": cycles, "utilisation": 0.5, "dram_bytes": 10, "macs": 4, "pes": 64,
            "sram_bytes": 100, "error": error}


def test_each_row_is_on_disk_when_add_returns(tmp_path):
    store = ResultStore(tmp_path, ["array.rows"])
    store.add(_row("a", 100))
    # Read by another reader while the store is still open: nothing waits for close().
    assert json.loads((tmp_path / "results.jsonl").read_text())["cycles"] == 100
    table = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert table == [{"key": "a", "workload": "g", "array.rows": "8", "cycles": "100",
                      "utilisation": "0.5", "dram_bytes": "10", "macs": "4", "pes": "64",
                      "sram_bytes": "100", "error": ""}]
    store.close()


def test_a_reopened_store_knows_done_and_failed_points(tmp_path):
    store = ResultStore(tmp_path, ["array.rows"])
    store.add(_row("a", 100))
    store.add(_row("b", None, "not tensorized: C: no intrinsic"))
    store.close()
    again = ResultStore(tmp_path, ["array.rows"])
    assert again.is_done("a") and not again.is_done("b") and not again.is_done("c")
    assert again.done["b"]["error"].startswith("not tensorized")
    again.close()


def test_a_line_cut_short_by_a_crash_is_dropped_and_cut_off(tmp_path):
    store = ResultStore(tmp_path, ["array.rows"])
    store.add(_row("a", 100))
    store.close()
    with (tmp_path / "results.jsonl").open("a") as stream:
        stream.write('{"key": "b", "cyc')
    again = ResultStore(tmp_path, ["array.rows"])
    assert list(again.done) == ["a"]
    again.add(_row("c", 7))
    again.close()
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["key"] for line in lines] == ["a", "c"]


def test_a_second_store_on_the_same_directory_is_refused(tmp_path):
    store = ResultStore(tmp_path, ["array.rows"])
    with pytest.raises(TensorizeError, match="is in use by another sweep") as caught:
        ResultStore(tmp_path, ["array.rows"])
    assert str(tmp_path) in str(caught.value)
    store.close()
    ResultStore(tmp_path, ["array.rows"]).close()  # free again once the first has closed


@pytest.mark.parametrize("field, value", [("cycles", -1), ("cycles", "many"),
                                          ("cycles", None), ("utilisation", 1.5),
                                          ("macs", 2.5), ("dram_bytes", float("nan"))])
def test_a_row_with_an_impossible_measure_is_not_done(tmp_path, field, value):
    store = ResultStore(tmp_path, ["array.rows"])
    store.add(_row("a", 100))
    store.add({**_row("b", 100), field: value})
    store.close()
    again = ResultStore(tmp_path, ["array.rows"])
    assert again.is_done("a") and not again.is_done("b")
    assert len(again.rejected) == 1 and again.rejected[0].startswith(f"line 2: '{field}'")
    again.close()


def test_a_file_size_limit_is_a_clear_error_naming_the_file(tmp_path):
    # A child process whose files may not grow past 1 KiB (ulimit -f); Python ignores
    # SIGXFSZ, so the write fails with EFBIG.
    script = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
from ir.errors import TensorizeError
from tensorize.sweep.results import ResultStore
store = ResultStore(__import__("pathlib").Path({str(tmp_path)!r}), ["array.rows"])
row = {{"key": "a", "cycles": 1, "utilisation": 0.5, "dram_bytes": 1, "macs": 1,
        "error": None, "pad": "x" * 2000}}
try:
    store.add(row)
except TensorizeError as err:
    print(err)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"cannot write the sweep's output {tmp_path / 'results.jsonl'}: File too large" \
        in done.stdout
