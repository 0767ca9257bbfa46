"""The model report: the text table, CSV and JSON against the records, the roofline against
hand-computed roofs, the HTML page's escaping and plots, and the refusals."""

from __future__ import annotations

import base64
import csv
import html
import json
import math
import re
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from ir.errors import TensorizeError
from tensorize.model.report import (
    FIELDS,
    PLOTS_SKIPPED,
    ReportError,
    compute_totals,
    format_table,
    roofline_bound,
    roofline_points,
    write_report,
)

ROOFLINE = {"peak_macs_per_cycle": 256.0, "dram_bytes_per_cycle": 32.0}
MACHINE = {"kind": "npu", "name": "npu-16x16", "rows": 16, "cols": 16,
           "dataflow": "weight_stationary", "clock_mhz": 700.0, "inp_bytes": 32768,
           "wgt_bytes": 16384, "acc_bytes": 131072, "dram_bytes_per_cycle": 32.0}
HOSTILE = '<script>alert("x")</script> & conv\n1'
LONG_WHY = "Softmax has no intrinsic: exp is not a multiply-accumulate, so it runs on the host"


def make_records(count: int = 12, seed: int = 0) -> list[dict]:
    """Records as the runner writes them: tensorized NPU convolutions, host softmaxes (no MACs
    or cycles) and a fallback, with random costs."""
    rng = np.random.default_rng(seed)
    records = []
    for index in range(count):
        placement = ("tensorized", "tensorized", "host", "fallback")[index % 4]
        on_npu = placement == "tensorized"
        macs = int(rng.integers(1, 10**7)) if placement != "host" else 0
        cycles = int(rng.integers(100, 10**5)) if on_npu else None
        calls = int(rng.integers(1, 5000)) if on_npu else None
        executed = max(calls * 4096, macs) if on_npu else None
        dram = int(rng.integers(1000, 10**6)) if placement != "host" else None
        records.append({
            "index": index,
            "name": HOSTILE if index == 1 else f"layer{index}.conv",
            "op": "QDQ Conv" if placement != "host" else "Softmax",
            "shape": "1x64x56x56 -> 1x64x56x56, 3x3 s1",
            "macs": macs,
            "executed_macs": executed,
            "pad": 1 - macs / executed if on_npu else None,
            "placement": placement,
            "intrinsic": "npu_gemm" if on_npu else None,
            "why_not": None if on_npu else LONG_WHY,
            "calls": calls,
            "cycles": cycles,
            "sim_s": cycles / 700e6 if on_npu else None,
            "instructions": None,
            "run_s": float(rng.uniform(1e-6, 1e-2)) if not on_npu else None,
            "tool_s": float(rng.uniform(1e-3, 1.0)),
            "utilisation": float(rng.uniform(0, 1)) if on_npu else None,
            "dram_bytes": dram,
            "intensity": macs / dram if macs and dram else None,
            "bound": roofline_bound(macs, dram, ROOFLINE),
            "check": "exact" if on_npu else "max error 1.00e-06 of the largest value (tolerance 0.0001)",
        })
    return records


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One report with plots and a roofline, written once for the module."""
    pytest.importorskip("matplotlib", reason="matplotlib not installed (tensorize[report])")
    records = make_records()
    out = tmp_path_factory.mktemp("report")
    files = write_report(out, "resnet <small>", "npu & friends", records,
                         compute_totals(records), ROOFLINE, MACHINE)
    return out, records, files


def parse_cell(text: str, kind: type):
    """A CSV cell back to its schema type: empty is None."""
    return None if text == "" else kind(text)


CSV_TYPES = {"index": int, "macs": int, "executed_macs": int, "pad": float, "calls": int,
             "cycles": int, "sim_s": float, "instructions": int, "run_s": float,
             "tool_s": float, "utilisation": float, "dram_bytes": int, "intensity": float}


def test_csv_round_trips_to_the_records(report):
    out, records, _ = report
    with (out / "layers.csv").open(newline="", encoding="utf-8") as stream:
        rows = list(csv.DictReader(stream))
    assert list(rows[0]) == [*FIELDS, "machine"]
    back = [{field: parse_cell(row[field], CSV_TYPES.get(field, str)) for field in FIELDS}
            for row in rows]
    assert back == records


def test_json_holds_the_records_and_totals_equal_the_sums(report):
    out, records, _ = report
    document = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert document["layers"] == records
    assert document["title"] == "resnet <small>" and document["target"] == "npu & friends"
    totals = document["totals"]
    for field in ("macs", "executed_macs", "calls", "cycles", "sim_s", "run_s", "tool_s",
                  "dram_bytes"):
        assert totals[field] == pytest.approx(sum(r[field] or 0 for r in records)), field
    assert totals["instructions"] is None  # no layer has one
    assert totals["layers"] == 12 and totals["tensorized"] == 6
    # Network utilisation: total MACs over total cycles at the peak, on the NPU layers.
    weighted = sum(r["utilisation"] * r["cycles"] for r in records if r["cycles"])
    assert totals["utilisation"] == pytest.approx(
        weighted / sum(r["cycles"] for r in records if r["cycles"]))


def test_roofline_points_sit_on_the_roof(report):
    out, records, _ = report
    points = json.loads((out / "report.json").read_text(encoding="utf-8"))["roofline"]
    peak, bandwidth = 256.0, 32.0
    assert points["ridge_intensity"] == pytest.approx(peak / bandwidth)
    placed = {p["index"]: p for p in points["points"]}
    for record in records:
        if record["placement"] == "host":
            assert record["index"] not in placed
            continue
        point = placed[record["index"]]
        intensity = record["macs"] / record["dram_bytes"]
        assert point["intensity"] == pytest.approx(intensity)
        assert point["attainable"] == pytest.approx(min(peak, bandwidth * intensity))
        expected = record["macs"] / record["cycles"] if record["cycles"] else None
        assert point["achieved"] == pytest.approx(expected) if expected else point["achieved"] is None
    left = {p["index"]: p["reason"] for p in points["left_out"]}
    assert left == {r["index"]: "no MACs" for r in records if r["placement"] == "host"}


def test_roofline_on_both_sides_of_the_ridge():
    # 1 MAC per byte is memory-bound at 32 B/cycle (32 MACs/cycle); 100 is at the peak.
    records = make_records(2)
    records[0].update(macs=1000, dram_bytes=1000, intensity=1.0, bound="memory")
    records[1].update(macs=100_000, dram_bytes=1000, intensity=100.0, bound="compute")
    points = roofline_points(records, ROOFLINE)["points"]
    assert [p["attainable"] for p in points] == [32.0, 256.0]


def test_html_escapes_names_and_embeds_every_plot(report):
    out, records, files = report
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "<script>" not in page
    assert html.escape(HOSTILE) in page
    assert html.escape("npu & friends") in page and html.escape("resnet <small>") in page
    assert html.escape(LONG_WHY) in page  # the page shows the reason whole
    images = re.findall(r'<img alt="([^"]*)" src="data:image/svg\+xml;base64,([^"]+)"', page)
    assert [alt for alt, _ in images] == ["simulated cycles per layer",
                                          "MAC utilisation per layer",
                                          "roofline"]
    texts = []
    for _, data in images:
        root = ET.fromstring(base64.b64decode(data))  # well-formed: names were escaped
        assert root.tag.endswith("svg")
        texts += ["".join(t.itertext()) for t in root.iter() if t.tag.endswith("text")]
    # The bar plots label each bar with its layer (cut to 28 characters).
    assert sum(t.startswith('1 <script>alert("x")') for t in texts) == 2
    assert sum(t == "11 layer11.conv" for t in texts) == 2
    stems = {"cycles_per_layer", "utilisation_per_layer", "roofline"}
    assert {p.name for p in files} == {"layers.csv", "report.json", "index.html"} | {
        f"{s}.{ext}" for s in stems for ext in ("png", "svg")}
    for path in files:
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert files.notes == ()
    # One table row per layer plus the totals row.
    assert page.count("<tr>") == 1 + len(records) and page.count('<tr class="total">') == 1


def test_without_matplotlib_writes_data_and_says_skip(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    records = make_records(4)
    files = write_report(tmp_path, "t", "npu", records, compute_totals(records), ROOFLINE)
    assert [p.name for p in files] == ["layers.csv", "report.json", "index.html"]
    assert files.notes == (PLOTS_SKIPPED,)
    assert "pip install tensorize[report]" in PLOTS_SKIPPED
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert "<img" not in page and html.escape(PLOTS_SKIPPED) in page
    assert json.loads((tmp_path / "report.json").read_text())["notes"] == [PLOTS_SKIPPED]


def test_without_roofline_the_page_says_why(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (tensorize[report])")
    records = make_records(3)
    files = write_report(tmp_path, "t", "arm", records, compute_totals(records))
    assert not (tmp_path / "roofline.svg").exists()
    assert len(files.notes) == 1 and files.notes[0].startswith("skip roofline:")
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert html.escape(files.notes[0]) in page and page.count("<img") == 2


def test_table_is_aligned_and_totals_are_shown():
    records = make_records(8)
    totals = compute_totals(records)
    text = format_table(records, totals)
    lines = text.splitlines()
    header, body = lines[0], lines[2:2 + len(records)]
    assert len(lines[1]) == len(lines[2 + len(records)]) and set(lines[1]) == {"-"}
    # Every row's check starts in the header's check column: the columns line up.
    for row, record in zip(body, records):
        assert row.index(record["check"]) == header.index("check")
        assert row.split()[0] == str(record["index"])
    total = lines[3 + len(records)]
    assert f"{totals['tensorized']} of 8 tensorized" in total
    assert f"{totals['cycles']:,}" in total and f"{totals['dram_bytes']:,}" in total
    # The hostile name's newline became a space (no extra line); the long reason is cut in
    # the table, then given in full below it.
    assert lines[4 + len(records):6 + len(records)] == ["", "why not, in full:"]
    assert body[1].startswith("1  " + HOSTILE.replace("\n", " ")[:31] + "\u2026")
    assert LONG_WHY not in "\n".join(body)
    assert f"2 layer2.conv: host: {LONG_WHY}" in text


def test_table_shows_only_the_cost_columns_present():
    records = make_records(4)
    for record in records:
        record["cycles"], record["sim_s"], record["utilisation"] = None, None, None
        record["instructions"] = 1234 if record["placement"] != "host" else None
    header = format_table(records, compute_totals(records)).splitlines()[0]
    assert "instructions" in header and "cycles" not in header and "sim time" not in header
    assert "run time" in header and "tool time" in header


def with_field(field, value):
    """Records whose second record has ``field`` set to ``value``."""
    records = make_records(3)
    records[1] = dict(records[1], name="conv2", **{field: value})
    return records


@pytest.mark.parametrize("records, fragment", [
    (with_field("macs", "12"), "layer record 1 ('conv2'): field 'macs' requires int, got str"),
    (with_field("macs", True), "field 'macs' requires int, got bool"),
    (with_field("utilisation", 1.5), "field 'utilisation' requires 0..1, got 1.5"),
    (with_field("run_s", math.nan), "field 'run_s' requires float or None, got float nan"),
    (with_field("pad", -0.5), "field 'pad' requires 0..1, got -0.5"),
    (with_field("placement", "gpu"), "field 'placement' requires one of"),
    (with_field("bound", "latency"), "field 'bound' requires one of ('compute', 'memory')"),
    (with_field("cycles", -3), "field 'cycles' requires >= 0, got -3"),
    (with_field("colour", "red"), "unknown fields ['colour']"),
    ([{"name": "x"}], "layer record 0 ('x'): missing fields ['index'"),
    (["conv"], "layer record 0: expected a dict, got str"),
])
def test_bad_records_are_refused_naming_record_and_field(tmp_path, records, fragment):
    for call in (lambda: compute_totals(records),
                 lambda: write_report(tmp_path, "t", "npu", records, {"layers": 0,
                                                                      "tensorized": 0})):
        with pytest.raises(ReportError) as info:
            call()
        assert fragment in str(info.value)
        assert isinstance(info.value, TensorizeError)
    assert not (tmp_path / "layers.csv").exists()


@pytest.mark.parametrize("totals, roofline, fragment", [
    ({"layers": 3}, None, "totals: field 'tensorized' requires int, got None"),
    ({"layers": 3, "tensorized": 1, "cycles": "9"}, None, "field 'cycles' requires a number"),
    ({"layers": 3, "tensorized": 1, "extra": object()}, None, "plain JSON data"),
    ({"layers": 3, "tensorized": 1}, {"peak_macs_per_cycle": 0, "dram_bytes_per_cycle": 1},
     "roofline: field 'peak_macs_per_cycle' requires a positive number, got 0"),
    ({"layers": 3, "tensorized": 1}, {"peak_macs_per_cycle": 1}, "'dram_bytes_per_cycle'"),
])
def test_bad_totals_and_roofline_are_refused(tmp_path, totals, roofline, fragment):
    with pytest.raises(ReportError, match=re.escape(fragment)):
        write_report(tmp_path, "t", "npu", make_records(3), totals, roofline)


def test_title_must_be_text(tmp_path):
    records = make_records(2)
    with pytest.raises(ReportError, match="report: target requires str, got int"):
        write_report(tmp_path, "t", 3, records, compute_totals(records))


def test_unwritable_directory_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    records = make_records(2)
    with pytest.raises(ReportError, match="report: cannot write"):
        write_report(blocker / "report", "t", "npu", records, compute_totals(records))
