"""Rows streamed to disk per point, and read back to resume."""

from __future__ import annotations

import csv
import json

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
