"""One meaning per figure in the model report: a layer's bound is the side of the ridge its
own roofline point lies on, in the table, CSV, JSON and HTML alike; the machine is named
with its parameters in every form; the roofline labels its outliers; a legend names only
what its plot draws; the totals' padding is the executed MACs' share."""

from __future__ import annotations

import base64
import csv
import json
import re
import xml.etree.ElementTree as ET

import pytest

from tensorize.model.report import (
    OUTLIER_SHARE,
    OUTLIERS,
    ReportError,
    compute_totals,
    format_table,
    roofline_points,
    write_report,
)
from tests.tensorize.model.test_report import MACHINE, ROOFLINE, make_records

# The figures the machine's line must show, whatever the form.
MACHINE_WORDS = ("npu-16x16", "16x16 weight_stationary array", "700 MHz", "inp 32 KiB",
                 "wgt 16 KiB", "acc 128 KiB", "DRAM port 32 bytes/cycle")


def fc_like(records: list[dict]) -> list[dict]:
    """``records`` with record 0 shaped like ResNet-50's fc on the NPU: 0.49 MACs per byte
    (the ridge is at 8), at 1.1% utilisation, which the old table called compute-bound."""
    records[0].update(macs=490, dram_bytes=1000, intensity=0.49, bound="memory",
                      utilisation=0.011)
    return records


def svg_texts(svg: str) -> list[str]:
    """Every text element's content in an SVG document."""
    root = ET.fromstring(svg)
    return ["".join(t.itertext()) for t in root.iter() if t.tag.endswith("text")]


def page_svgs(page: str) -> dict[str, str]:
    """The page's embedded plots by caption."""
    images = re.findall(r'<img alt="([^"]*)" src="data:image/svg\+xml;base64,([^"]+)"', page)
    return {alt: base64.b64decode(data).decode() for alt, data in images}


def test_left_of_the_ridge_is_memory_bound_in_every_form(tmp_path):
    records = fc_like(make_records(4))
    totals = compute_totals(records)
    write_report(tmp_path, "t", "npu", records, totals, ROOFLINE, MACHINE)
    table = format_table(records, totals, MACHINE).splitlines()
    header, row = table[1], table[3]
    assert row[header.index("bound"):].split()[0] == "memory"
    with (tmp_path / "layers.csv").open(newline="", encoding="utf-8") as stream:
        assert next(csv.DictReader(stream))["bound"] == "memory"
    document = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert document["layers"][0]["bound"] == "memory"
    point = next(p for p in document["roofline"]["points"] if p["index"] == 0)
    assert point["intensity"] == pytest.approx(0.49)
    assert point["intensity"] < document["roofline"]["ridge_intensity"] == 8
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    first_row = page.split("<tbody>")[1].split("</tr>")[0]
    assert "<td>memory</td>" in first_row and "<td>compute</td>" not in first_row


def test_a_bound_its_roofline_point_contradicts_is_refused(tmp_path):
    records = fc_like(make_records(4))
    records[0]["bound"] = "compute"
    with pytest.raises(ReportError, match=re.escape(
            "layer record 0 ('layer0.conv'): field 'bound' requires 'memory', the side of the "
            "ridge its roofline point lies on (0.49 MACs/byte against a ridge at 8), got "
            "'compute'")):
        write_report(tmp_path, "t", "npu", records, compute_totals(records), ROOFLINE)


def test_an_intensity_other_than_macs_per_byte_is_refused():
    records = fc_like(make_records(4))
    records[0]["intensity"] = 8.5
    with pytest.raises(ReportError, match="field 'intensity' requires macs / dram_bytes"):
        roofline_points(records, ROOFLINE)


def test_the_machine_is_named_in_every_form(tmp_path):
    records = make_records(4)
    totals = compute_totals(records)
    write_report(tmp_path, "t", "npu", records, totals, ROOFLINE, MACHINE)
    with (tmp_path / "layers.csv").open(newline="", encoding="utf-8") as stream:
        machines = {row["machine"] for row in csv.DictReader(stream)}
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    forms = {"table": format_table(records, totals, MACHINE).splitlines()[0],
             "csv": machines.pop(), "html": page.split("<table>")[0]}
    assert not machines
    for form, text in forms.items():
        for words in MACHINE_WORDS:
            assert words in text, (form, words)
    document = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert document["machine"] == MACHINE


def test_a_machine_without_its_fields_is_refused(tmp_path):
    records = make_records(2)
    with pytest.raises(ReportError, match="report: machine requires plain JSON data"):
        write_report(tmp_path, "t", "npu", records, compute_totals(records),
                     machine={"kind": "npu", "name": "half"})


def test_the_roofline_marks_and_labels_its_outliers(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (tensorize[report])")
    records = make_records(24, seed=5)
    # Shares of the roof from 2% to 46%: some above the outlier line, more below it than
    # the plot labels.
    for n, record in enumerate(r for r in records if r["cycles"]):
        attainable = min(256.0, 32.0 * record["intensity"])
        record["cycles"] = max(1, round(record["macs"] / (attainable * (0.02 + 0.04 * n))))
    points = roofline_points(records, ROOFLINE)["points"]
    shares = {p["index"]: p["achieved"] / p["attainable"] for p in points if p["achieved"]}
    below = sorted((i for i, share in shares.items() if share < OUTLIER_SHARE),
                   key=shares.__getitem__)
    assert len(below) > OUTLIERS and len(below) < len(shares)
    assert {p["index"] for p in points if p["outlier"]} == set(below[:OUTLIERS])
    write_report(tmp_path, "t", "npu", records, compute_totals(records), ROOFLINE)
    texts = svg_texts((tmp_path / "roofline.svg").read_text(encoding="utf-8"))
    # A label is the layer's index and name (cut to fit): "1 <script>alert(...".
    labelled = {int(t.split(" ", 1)[0]) for t in texts if re.fullmatch(r"\d+ \D.*", t)}
    assert labelled == set(below[:OUTLIERS])


def test_legends_name_only_the_placements_a_plot_draws(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (tensorize[report])")
    records = make_records(8)
    write_report(tmp_path, "t", "npu", records, compute_totals(records), ROOFLINE)
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    svgs = page_svgs(page)
    for caption in ("simulated cycles per layer", "MAC utilisation per layer"):
        texts = svg_texts(svgs[caption])
        # Only the tensorized layers have cycles and a utilisation.
        assert "tensorized" in texts and "host" not in texts and "fallback" not in texts


def test_total_padding_is_the_share_of_the_executed_macs():
    records = make_records(8)
    executed = [r for r in records if r["executed_macs"]]
    expected = 1 - sum(r["macs"] for r in executed) / sum(r["executed_macs"] for r in executed)
    assert compute_totals(records)["pad"] == pytest.approx(expected)
    assert compute_totals([r for r in records if not r["executed_macs"]])["pad"] is None
