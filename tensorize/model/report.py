"""The per-layer report of a model run: a text table, CSV, JSON, plots and one HTML page.

Input is data, in the layer record schema :data:`FIELDS` (one plain dict per layer, as the
model runner produces them; the comment above it gives each figure's one meaning), a totals
dict (:func:`compute_totals` makes one) and the machine's data
(:mod:`tensorize.runners.machine`). :func:`format_table` renders the table a terminal shows,
headed by the machine; :func:`write_report` writes ``layers.csv``, ``report.json``, three
plots as PNG and SVG (simulated cycles, instructions or measured run time per layer; MAC
utilisation per layer; a roofline with every layer on it, its outliers labelled) and
``index.html``, a self-contained page with the plots embedded and the table, each naming the
machine. A layer's ``bound`` is the side of the ridge its own roofline point lies on
(:func:`roofline_bound`), and a report refuses a record that says otherwise. matplotlib is
optional: without it the plots are left out and the result's notes say ``skip plots: ...``.

Layer names, shapes and checks come from user files, so the HTML escapes every text it shows
and the text table replaces control characters.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from ir.errors import TensorizeError
from tensorize.runners.machine import machine_line

# The layer record schema agreed with the model runner, in the CSV's column order. Each
# figure has one meaning (docs/models_report.md):
#   macs           useful MACs: the layer's own, padding excluded
#   executed_macs  MACs the intrinsic calls executed, padding included (tensorized layers)
#   pad            1 - macs / executed_macs: the share of the executed work that is padding
#   sim_s          simulated time: cycles at the machine's clock (NPU layers)
#   run_s          measured time of the layer's code on this machine (host code, native CPU)
#   tool_s         the tool's own wall time for the layer (simulating, emulating, checking)
#   utilisation    useful MACs over the array's peak for the layer's cycles
#   intensity      useful MACs per DRAM byte moved: the layer's roofline point
#   bound          which side of the ridge that point lies: memory (left) or compute
FIELDS = ("index", "name", "op", "shape", "macs", "executed_macs", "pad", "placement",
          "intrinsic", "why_not", "calls", "cycles", "sim_s", "instructions", "run_s",
          "tool_s", "utilisation", "dram_bytes", "intensity", "bound", "check")
# Fields a totals dict sums over the layers (None where no layer has the field).
SUMMED = ("macs", "executed_macs", "calls", "cycles", "sim_s", "instructions", "run_s",
          "tool_s", "dram_bytes")
PLACEMENTS = ("tensorized", "host", "fallback")
BOUNDS = ("compute", "memory")
# Which type each field holds; "?" marks a field that may be None.
_TYPES = {
    "index": "int", "name": "str", "op": "str", "shape": "str", "macs": "int",
    "executed_macs": "int?", "pad": "float?", "placement": "str", "intrinsic": "str?",
    "why_not": "str?", "calls": "int?", "cycles": "int?", "sim_s": "float?",
    "instructions": "int?", "run_s": "float?", "tool_s": "float", "utilisation": "float?",
    "dram_bytes": "int?", "intensity": "float?", "bound": "str?", "check": "str",
}
# The per-layer cost columns, in order of preference for the per-layer plot.
COST_FIELDS = (("cycles", "simulated cycles"), ("instructions", "instructions executed"),
               ("run_s", "measured run time (s)"))
# The roofline names the layers farthest below their roof: at most this many, and only
# those achieving less than this share of it.
OUTLIERS = 5
OUTLIER_SHARE = 0.25
# Text-table column limits; longer text is cut with an ellipsis (the CSV keeps it whole).
NAME_WIDTH = 32
WHY_WIDTH = 44
NO_ROOFLINE_POINTS = "skip roofline: no layer has both MACs and DRAM bytes"
PLOTS_SKIPPED = "skip plots: matplotlib not installed (pip install tensorize[report])"
_PLACEMENT_COLOURS = {"tensorized": "#1f77b4", "host": "#8c8c8c", "fallback": "#ff7f0e"}


class ReportError(TensorizeError):
    """Layer records, totals or a roofline that do not follow the schema, or an output
    directory that cannot be written."""


class ReportFiles(list[Path]):
    """The paths :func:`write_report` wrote, in order, plus ``notes``: one line for every
    part it left out and why (``skip plots: matplotlib not installed ...``)."""

    def __init__(self, paths: Sequence[Path], notes: Sequence[str]) -> None:
        super().__init__(paths)
        self.notes = tuple(notes)


def _type_ok(value: object, kind: str) -> bool:
    """Whether ``value`` is of the schema type ``kind`` (bool is not an int here)."""
    if value is None:
        return kind.endswith("?")
    base = kind.rstrip("?")
    if base == "str":
        return isinstance(value, str)
    if isinstance(value, bool):
        return False
    if base == "int":
        return isinstance(value, int)
    return isinstance(value, (int, float)) and math.isfinite(value)


def validate_records(records: Sequence[Mapping[str, object]]) -> None:
    """Check every record against the schema; raise :class:`ReportError` naming the record
    (position and name) and the field at the first problem."""
    for position, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise ReportError(f"layer record {position}: expected a dict, "
                              f"got {type(record).__name__}")
        where = f"layer record {position} ({record.get('name', '?')!r})"
        missing = [field for field in FIELDS if field not in record]
        unknown = sorted(str(key) for key in record if key not in _TYPES)
        if missing or unknown:
            raise ReportError(f"{where}: missing fields {missing}, unknown fields {unknown}")
        for field in FIELDS:
            value = record[field]
            if not _type_ok(value, _TYPES[field]):
                raise ReportError(f"{where}: field {field!r} requires "
                                  f"{_TYPES[field].replace('?', ' or None')}, "
                                  f"got {type(value).__name__} {value!r}")
        _check_values(where, record)


def _check_values(where: str, record: Mapping[str, object]) -> None:
    """The range and vocabulary checks of one well-typed record."""
    if record["placement"] not in PLACEMENTS:
        raise ReportError(f"{where}: field 'placement' requires one of {PLACEMENTS}, "
                          f"got {record['placement']!r}")
    if record["bound"] is not None and record["bound"] not in BOUNDS:
        raise ReportError(f"{where}: field 'bound' requires one of {BOUNDS} or None, "
                          f"got {record['bound']!r}")
    for field in ("utilisation", "pad"):
        value = record[field]
        if value is not None and not 0.0 <= value <= 1.0:
            raise ReportError(f"{where}: field {field!r} requires 0..1, got {value!r}")
    for field in SUMMED:
        value = record[field]
        if value is not None and value < 0:
            raise ReportError(f"{where}: field {field!r} requires >= 0, got {value!r}")


def compute_totals(records: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """Totals over the layers: each :data:`SUMMED` field summed (None when no layer has it),
    ``layers``, ``tensorized`` (layers placed on the target's intrinsics), ``pad``: the
    padding's share of the executed MACs of the layers that have them, and ``utilisation``:
    the network's MAC utilisation over the layers that have cycles and a utilisation, which is
    their cycle-weighted mean (total MACs / (peak x total cycles) for one peak)."""
    validate_records(records)
    totals: dict[str, object] = {}
    for field in SUMMED:
        values = [record[field] for record in records if record[field] is not None]
        totals[field] = sum(values) if values else None
    executed = [(r["macs"], r["executed_macs"]) for r in records if r["executed_macs"]]
    done = sum(e for _, e in executed)
    totals["pad"] = 1.0 - sum(m for m, _ in executed) / done if done else None
    timed = [(r["utilisation"], r["cycles"]) for r in records
             if r["utilisation"] is not None and r["cycles"]]
    cycles = sum(c for _, c in timed)
    totals["utilisation"] = sum(u * c for u, c in timed) / cycles if cycles else None
    totals["layers"] = len(records)
    totals["tensorized"] = sum(1 for r in records if r["placement"] == "tensorized")
    return totals


def _validate_totals(totals: Mapping[str, object]) -> None:
    """Totals need ``layers`` and ``tensorized`` counts; the summed fields and utilisation
    are numbers or None; anything else the runner adds must be plain JSON data."""
    if not isinstance(totals, Mapping):
        raise ReportError(f"totals: expected a dict, got {type(totals).__name__}")
    for field in ("layers", "tensorized"):
        if not _type_ok(totals.get(field), "int"):
            raise ReportError(f"totals: field {field!r} requires int, "
                              f"got {totals.get(field)!r}")
    for field in (*SUMMED, "utilisation", "pad"):
        if not _type_ok(totals.get(field), "float?"):
            raise ReportError(f"totals: field {field!r} requires a number or None, "
                              f"got {totals.get(field)!r}")
    try:
        json.dumps(dict(totals), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ReportError(f"totals: every value must be plain JSON data: {err}") from None


def _validate_roofline(roofline: Mapping[str, object]) -> tuple[float, float]:
    """The roofline's (peak MACs/cycle, DRAM bytes/cycle), both positive numbers."""
    if not isinstance(roofline, Mapping):
        raise ReportError(f"roofline: expected a dict, got {type(roofline).__name__}")
    values = []
    for field in ("peak_macs_per_cycle", "dram_bytes_per_cycle"):
        value = roofline.get(field)
        if not _type_ok(value, "float") or value <= 0:
            raise ReportError(f"roofline: field {field!r} requires a positive number, "
                              f"got {value!r}")
        values.append(float(value))
    return values[0], values[1]


def roofline_bound(macs: int, dram_bytes: int | None, roofline: Mapping[str, object]
                   ) -> str | None:
    """The side of the ridge a layer's roofline point lies on: ``memory`` when its intensity
    (useful MACs per DRAM byte) is below the ridge (peak / bandwidth), else ``compute``; None
    for a layer without MACs or DRAM bytes (it has no point)."""
    peak, bandwidth = _validate_roofline(roofline)
    if not macs or not dram_bytes:
        return None
    return "memory" if macs / dram_bytes < peak / bandwidth else "compute"


def roofline_points(records: Sequence[Mapping[str, object]],
                    roofline: Mapping[str, object]) -> dict[str, object]:
    """Every layer with MACs and DRAM bytes placed on the roofline.

    A layer's arithmetic intensity is its useful MACs per DRAM byte moved; the roof at that
    intensity is ``min(peak, bandwidth * intensity)`` MACs per cycle (``attainable``);
    ``achieved`` is MACs / cycles where the layer has cycles, and ``roof_share`` achieved /
    attainable. The ridge point, ``peak / bandwidth`` MACs per byte, separates memory-bound
    (left) from compute-bound (right) intensities; a record's ``intensity`` and ``bound``
    must say the same (:func:`roofline_bound`), or :class:`ReportError` names the record.
    ``outlier`` marks the points the plot labels: the :data:`OUTLIERS` of smallest roof
    share among those below :data:`OUTLIER_SHARE` of their roof. Layers without MACs or DRAM
    bytes are listed in ``left_out`` with the reason.
    """
    validate_records(records)
    peak, bandwidth = _validate_roofline(roofline)
    points, left_out = [], []
    for record in records:
        macs, dram = record["macs"], record["dram_bytes"]
        _check_point(record, roofline)
        if not macs or not dram:
            reason = "no MACs" if not macs else "no DRAM bytes"
            left_out.append({"index": record["index"], "name": record["name"],
                             "reason": reason})
            continue
        intensity = macs / dram
        cycles = record["cycles"]
        attainable = min(peak, bandwidth * intensity)
        achieved = macs / cycles if cycles else None
        points.append({
            "index": record["index"], "name": record["name"],
            "placement": record["placement"], "intensity": intensity,
            "attainable": attainable, "achieved": achieved,
            "roof_share": None if achieved is None else achieved / attainable,
            "outlier": False,
        })
    below = sorted((p for p in points if p["roof_share"] is not None
                    and p["roof_share"] < OUTLIER_SHARE), key=lambda p: p["roof_share"])
    for point in below[:OUTLIERS]:
        point["outlier"] = True
    return {"peak_macs_per_cycle": peak, "dram_bytes_per_cycle": bandwidth,
            "ridge_intensity": peak / bandwidth, "points": points, "left_out": left_out}


def _check_point(record: Mapping[str, object], roofline: Mapping[str, object]) -> None:
    """A record's ``intensity`` and ``bound`` agree with its own roofline point."""
    where = f"layer record {record['index']} ({record['name']!r})"
    macs, dram = record["macs"], record["dram_bytes"]
    intensity = macs / dram if macs and dram else None
    given = record["intensity"]
    if (given is None) != (intensity is None) or (
            intensity is not None and not math.isclose(given, intensity, rel_tol=1e-9)):
        raise ReportError(f"{where}: field 'intensity' requires macs / dram_bytes "
                          f"({intensity!r}), got {given!r}")
    bound = roofline_bound(macs, dram, roofline)
    if record["bound"] != bound:
        raise ReportError(f"{where}: field 'bound' requires {bound!r}, the side of the ridge "
                          f"its roofline point lies on ({_ratio(intensity)} MACs/byte against "
                          f"a ridge at {_ratio(_ridge(roofline))}), got {record['bound']!r}")


def _ridge(roofline: Mapping[str, object]) -> float:
    peak, bandwidth = _validate_roofline(roofline)
    return peak / bandwidth


def _ratio(value: object) -> str:
    """A ratio with three significant figures, or '-' for None."""
    return "-" if value is None else f"{value:.3g}"


def _one_line(text: str) -> str:
    """Text safe for one table cell: control characters (newlines, escapes) become spaces."""
    return "".join(ch if ch.isprintable() else " " for ch in text)


def _clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the last one an ellipsis when cut."""
    return text if len(text) <= width else text[:width - 1] + "\u2026"


def _count(value: object) -> str:
    """An integer with thousands separators, or '-' for None."""
    return "-" if value is None else f"{value:,}"


def _seconds(value: object) -> str:
    """A duration in s, ms or us with three significant figures, or '-' for None."""
    if value is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def _percent(value: object) -> str:
    """A 0..1 fraction as a percentage, or '-' for None."""
    return "-" if value is None else f"{100.0 * value:.1f}%"


def _placement_text(record: Mapping[str, object]) -> str:
    """The intrinsic a tensorized layer uses, else its placement and the reason why not."""
    if record["placement"] == "tensorized":
        return record["intrinsic"] or "tensorized"
    why = record["why_not"] or "no reason given"
    return f"{record['placement']}: {why}"


def _columns(records: Sequence[Mapping[str, object]],
             totals: Mapping[str, object]) -> list[tuple[str, str, object]]:
    """(header, alignment, cell function) for each table column; the cost columns appear
    only where some layer (or the totals) has a value."""
    def present(field: str) -> bool:
        return any(r[field] is not None for r in records) or totals.get(field) is not None

    columns = [
        ("#", ">", lambda r: str(r["index"])),
        ("layer", "<", lambda r: _clip(_one_line(r["name"]), NAME_WIDTH)),
        ("op", "<", lambda r: _one_line(r["op"])),
        ("shape", "<", lambda r: _one_line(r["shape"])),
        ("intrinsic / why not", "<", lambda r: _clip(_one_line(_placement_text(r)),
                                                     WHY_WIDTH)),
        ("calls", ">", lambda r: _count(r["calls"])),
        ("MACs", ">", lambda r: _count(r["macs"])),
    ]
    optional = [
        ("pad", ">", "pad", lambda r: _percent(r["pad"])),
        ("cycles", ">", "cycles", lambda r: _count(r["cycles"])),
        ("sim time", ">", "sim_s", lambda r: _seconds(r["sim_s"])),
        ("instructions", ">", "instructions", lambda r: _count(r["instructions"])),
        ("run time", ">", "run_s", lambda r: _seconds(r["run_s"])),
    ]
    columns += [(header, align, cell) for header, align, field, cell in optional
                if present(field)]
    columns.append(("tool time", ">", lambda r: _seconds(r["tool_s"])))
    if present("utilisation"):
        columns.append(("util", ">", lambda r: _percent(r["utilisation"])))
    if present("dram_bytes"):
        columns += [
            ("DRAM bytes", ">", lambda r: _count(r["dram_bytes"])),
            ("MACs/byte", ">", lambda r: _ratio(r["intensity"])),
        ]
    if present("bound"):
        columns.append(("bound", "<", lambda r: r["bound"] or "-"))
    columns.append(("check", "<", lambda r: _one_line(r["check"])))
    return columns


def _totals_row(columns: Sequence[tuple[str, str, object]],
                totals: Mapping[str, object]) -> list[str]:
    """The totals line's cells, under the columns they sum."""
    cells = {
        "layer": "total",
        "intrinsic / why not": f"{totals['tensorized']} of {totals['layers']} tensorized",
        "calls": _count(totals.get("calls")),
        "MACs": _count(totals.get("macs")),
        "pad": _percent(totals.get("pad")),
        "cycles": _count(totals.get("cycles")),
        "sim time": _seconds(totals.get("sim_s")),
        "instructions": _count(totals.get("instructions")),
        "run time": _seconds(totals.get("run_s")),
        "tool time": _seconds(totals.get("tool_s")),
        "util": _percent(totals.get("utilisation")),
        "DRAM bytes": _count(totals.get("dram_bytes")),
    }
    return [cells.get(header, "") for header, _, _ in columns]


def format_table(records: Sequence[Mapping[str, object]], totals: Mapping[str, object],
                 machine: Mapping[str, object] | None = None) -> str:
    """The per-layer table as aligned text, headed by the machine it ran on (when given, as
    :func:`~tensorize.runners.machine.machine_line` words it), a totals line at the bottom,
    and below it in full every why-not the table had to cut."""
    validate_records(records)
    _validate_totals(totals)
    columns = _columns(records, totals)
    rows = [[cell(record) for _, _, cell in columns] for record in records]
    total = _totals_row(columns, totals)
    headers = [header for header, _, _ in columns]
    widths = [max(len(row[i]) for row in [headers, total, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        text = "  ".join(f"{cell:{align}{width}}"
                         for cell, (_, align, _), width in zip(cells, columns, widths))
        return text.rstrip()

    rule = "-" * len(line(["-" * w for w in widths]))
    lines = [f"machine: {_one_line(machine_line(machine))}"] if machine is not None else []
    lines += [line(headers), rule, *(line(row) for row in rows), rule, line(total)]
    cut = [r for r in records if len(_one_line(_placement_text(r))) > WHY_WIDTH]
    if cut:
        lines.append("")
        lines.append("why not, in full:")
        lines += [f"  {r['index']} {_one_line(r['name'])}: {_one_line(_placement_text(r))}"
                  for r in cut]
    return "\n".join(lines)


def _csv_cell(value: object) -> str:
    """One CSV cell: empty for None, repr for floats (so they read back exactly)."""
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def _write_csv(path: Path, records: Sequence[Mapping[str, object]], machine: str) -> None:
    """layers.csv: a header of :data:`FIELDS` and ``machine``, then one row per layer, each
    naming the machine it ran on (so a row read alone still says where it was measured)."""
    with path.open("w", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream)
        writer.writerow((*FIELDS, "machine"))
        for record in records:
            writer.writerow([*(_csv_cell(record[field]) for field in FIELDS), machine])


def _cost_field(records: Sequence[Mapping[str, object]]) -> tuple[str, str] | None:
    """The first of cycles, instructions, time that some layer has, as (field, label)."""
    for field, label in COST_FIELDS:
        if any(r[field] is not None for r in records):
            return field, label
    return None


def _bar_plot(records: Sequence[Mapping[str, object]], field: str, label: str,
              title: str, percent: bool = False):
    """A bar per layer (0 where the layer has no value), coloured by placement."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    names = [_clip(_one_line(f"{r['index']} {r['name']}"), 28) for r in records]
    values = [(r[field] or 0) * (100.0 if percent else 1.0) for r in records]
    colours = [_PLACEMENT_COLOURS[r["placement"]] for r in records]
    figure = Figure(figsize=(min(60.0, max(6.0, 0.2 * len(records) + 2.0)), 4.5),
                    layout="constrained")
    axes = figure.subplots()
    axes.bar(range(len(records)), values, color=colours)
    axes.set_xticks(range(len(records)), names, rotation=90, fontsize=7)
    axes.set_xlim(-0.6, len(records) - 0.4)
    axes.set_ylabel(f"{label} (%)" if percent else label)
    if percent:
        axes.set_ylim(0, 100)
    axes.set_title(title)
    # A placement whose layers have no bar here (host layers have no cycles) gets no entry.
    used = [p for p in PLACEMENTS if any(r["placement"] == p and r[field] for r in records)]
    axes.legend(handles=[Patch(color=_PLACEMENT_COLOURS[p], label=p) for p in used],
                fontsize=8)
    return figure


def _roofline_plot(points: Mapping[str, object], title: str):
    """Attainable MACs/cycle against MACs per DRAM byte (log-log), the roof, the ridge point,
    each layer on the roof (filled) and where it measured (hollow, when it has cycles), the
    outliers (``roofline_points``) labelled with their layer."""
    from matplotlib.figure import Figure

    peak = points["peak_macs_per_cycle"]
    bandwidth = points["dram_bytes_per_cycle"]
    ridge = points["ridge_intensity"]
    layers = points["points"]
    intensities = [p["intensity"] for p in layers] + [ridge]
    low, high = min(intensities) / 4.0, max(intensities) * 4.0
    figure = Figure(figsize=(7.0, 5.0), layout="constrained")
    axes = figure.subplots()
    axes.plot([low, ridge, high], [bandwidth * low, peak, peak], color="black",
              label=f"roof: min({peak:g}, {bandwidth:g} x intensity)")
    axes.axvline(ridge, color="grey", linestyle=":", linewidth=1)
    axes.plot([ridge], [peak], marker="D", color="black", linestyle="none",
              label=f"ridge point: {ridge:.3g} MACs/byte")
    for placement in PLACEMENTS:
        chosen = [p for p in layers if p["placement"] == placement]
        if not chosen:
            continue
        colour = _PLACEMENT_COLOURS[placement]
        axes.plot([p["intensity"] for p in chosen], [p["attainable"] for p in chosen],
                  marker="o", linestyle="none", color=colour, label=f"{placement}: attainable")
        measured = [p for p in chosen if p["achieved"]]
        if measured:
            axes.plot([p["intensity"] for p in measured], [p["achieved"] for p in measured],
                      marker="o", linestyle="none", markerfacecolor="none", color=colour,
                      label=f"{placement}: achieved")
    for point in layers:
        if point["outlier"]:
            axes.annotate(_clip(_one_line(f"{point['index']} {point['name']}"), 28),
                          (point["intensity"], point["achieved"]), xytext=(4, -10),
                          textcoords="offset points", fontsize=7)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (useful MACs per DRAM byte moved)")
    axes.set_ylabel("useful MACs per cycle")
    axes.set_title(title)
    axes.legend(fontsize=8)
    return figure


def _validated_machine(machine: Mapping[str, object] | None, target: str
                       ) -> Mapping[str, object]:
    """The machine's data (the target's name alone when None): a dict of plain JSON data
    with a ``name``."""
    if machine is None:
        return {"name": target}
    if not isinstance(machine, Mapping) or not isinstance(machine.get("name"), str):
        raise ReportError(f"report: machine requires a dict with a 'name' string, "
                          f"got {machine!r}")
    try:
        json.dumps(dict(machine), allow_nan=False)
        machine_line(machine)
    except (TypeError, ValueError, KeyError) as err:
        raise ReportError(f"report: machine requires plain JSON data with the fields of its "
                          f"kind (tensorize.runners.machine): {err}") from None
    return machine


def _save(figure, out_dir: Path, stem: str) -> tuple[list[Path], str]:
    """Write ``stem``.png and ``stem``.svg; return their paths and the SVG text."""
    import matplotlib

    png, svg = out_dir / f"{stem}.png", out_dir / f"{stem}.svg"
    figure.savefig(png, dpi=110)
    buffer = io.StringIO()
    # Text as SVG text, not glyph outlines: smaller, quicker to write (a 120-layer report
    # took 5.1 s with outlines, 3.8 s without), and the layer names stay searchable.
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg.write_text(buffer.getvalue(), encoding="utf-8")
    return [png, svg], buffer.getvalue()


def _plots(out_dir: Path, title: str, records: Sequence[Mapping[str, object]],
           roof: Mapping[str, object] | None, roof_skip: str | None
           ) -> tuple[list[Path], list[tuple[str, str]], list[str]]:
    """Draw the three plots where their data exists: (files, (caption, svg) pairs, notes)."""
    try:
        import matplotlib  # noqa: F401  (only to learn whether it is installed)
    except ImportError:
        return [], [], [PLOTS_SKIPPED]
    files, figures, notes = [], [], []
    cost = _cost_field(records)
    if cost is None:
        notes.append("skip cost plot: no layer has cycles, instructions or a measured run "
                     "time")
    else:
        field, label = cost
        caption = f"{label} per layer"
        written, svg = _save(_bar_plot(records, field, label, f"{title}: {caption}"),
                             out_dir, f"{field}_per_layer")
        files += written
        figures.append((caption, svg))
    if not any(r["utilisation"] is not None for r in records):
        notes.append("skip utilisation plot: no layer has a MAC utilisation")
    else:
        caption = "MAC utilisation per layer"
        written, svg = _save(_bar_plot(records, "utilisation", "MAC utilisation",
                                       f"{title}: {caption}", percent=True),
                             out_dir, "utilisation_per_layer")
        files += written
        figures.append((caption, svg))
    if roof_skip is not None:
        notes.append(roof_skip)
    else:
        caption = "roofline"
        written, svg = _save(_roofline_plot(roof, f"{title}: {caption}"), out_dir, "roofline")
        files += written
        figures.append((caption, svg))
    return files, figures, notes


_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 2px 6px; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.total td { font-weight: bold; background: #f0f0f0; }
figure { margin: 1em 0; } figure img { max-width: 100%; }
.note { color: #a15c00; }
"""


def _html(title: str, target: str, machine: str, records: Sequence[Mapping[str, object]],
          totals: Mapping[str, object], figures: Sequence[tuple[str, str]],
          notes: Sequence[str]) -> str:
    """The self-contained page: the machine, summary, plots (SVG as base64 data URLs),
    notes, table."""
    e = html.escape
    columns = _columns(records, totals)
    numeric = {"#", "calls", "MACs", "pad", "cycles", "sim time", "instructions", "run time",
               "tool time", "util", "DRAM bytes", "MACs/byte"}
    head = "".join(f"<th>{e(header)}</th>" for header, _, _ in columns)

    def row(cells: Sequence[str], css: str = "") -> str:
        tds = "".join(f'<td class="num">{e(c)}</td>' if header in numeric else f"<td>{e(c)}</td>"
                      for c, (header, _, _) in zip(cells, columns))
        return f"<tr{css}>{tds}</tr>"

    body_rows = []
    for record in records:
        cells = [cell(record) for _, _, cell in columns]
        # The page has room for the full name and reason that the text table cuts.
        cells[1] = record["name"]
        cells[4] = _placement_text(record)
        body_rows.append(row(cells))
    body_rows.append(row(_totals_row(columns, totals), ' class="total"'))
    plots = "\n".join(
        f'<figure><img alt="{e(caption)}" src="data:image/svg+xml;base64,'
        f'{base64.b64encode(svg.encode()).decode()}"><figcaption>{e(caption)}</figcaption>'
        f"</figure>" for caption, svg in figures)
    note_items = "".join(f'<li class="note">{e(note)}</li>' for note in notes)
    notes_list = f"<ul>{note_items}</ul>" if notes else ""
    summary = f"{totals['tensorized']} of {totals['layers']} layers tensorized"
    for label, field, show in (("MAC utilisation", "utilisation", _percent),
                               ("pad", "pad", _percent),
                               ("cycles", "cycles", _count),
                               ("sim time", "sim_s", _seconds),
                               ("instructions", "instructions", _count),
                               ("run time", "run_s", _seconds),
                               ("tool time", "tool_s", _seconds),
                               ("DRAM bytes", "dram_bytes", _count)):
        if totals.get(field) is not None:
            summary += f"; {label} {show(totals[field])}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>
<style>{_STYLE}</style></head>
<body>
<h1>{e(title)}</h1>
<p>target: {e(target)}<br>machine: {e(machine)}<br>{e(summary)}</p>
<p>Data: <a href="layers.csv">layers.csv</a>, <a href="report.json">report.json</a></p>
{plots}
{notes_list}
<table><thead><tr>{head}</tr></thead><tbody>
{chr(10).join(body_rows)}
</tbody></table>
</body></html>
"""


def write_report(out_dir: Path | str, title: str, target: str,
                 records: Sequence[Mapping[str, object]], totals: Mapping[str, object],
                 roofline: Mapping[str, object] | None = None,
                 machine: Mapping[str, object] | None = None) -> ReportFiles:
    """Write the report of one model run into ``out_dir`` (created if missing).

    Files: ``layers.csv`` (one row per record, columns :data:`FIELDS` and ``machine``),
    ``report.json`` (title, target, machine, layers, totals, roofline points, notes), the
    plots ``<cycles|instructions|run_s>_per_layer``, ``utilisation_per_layer`` and
    ``roofline`` as .png and .svg (each only where its data exists; all left out without
    matplotlib), and ``index.html``. ``roofline`` is ``{"peak_macs_per_cycle",
    "dram_bytes_per_cycle"}`` or None (no roofline plot; the notes and the page say why).
    ``machine`` is the machine's data (:mod:`tensorize.runners.machine`; None: the target's
    name stands for it). Returns the written paths, with ``notes`` naming every part left
    out and why.
    """
    for label, text in (("title", title), ("target", target)):
        if not isinstance(text, str):
            raise ReportError(f"report: {label} requires str, got {type(text).__name__}")
    validate_records(records)
    _validate_totals(totals)
    machine = _validated_machine(machine, target)
    named = machine_line(machine)
    out = Path(out_dir)
    roof, roof_skip = None, "skip roofline: the target gives no peak MACs/cycle and DRAM bandwidth"
    if roofline is not None:
        roof = roofline_points(records, roofline)
        roof_skip = None if roof["points"] else NO_ROOFLINE_POINTS
    try:
        out.mkdir(parents=True, exist_ok=True)
        files, figures, notes = _plots(out, title, records, roof, roof_skip)
        csv_path, json_path, html_path = out / "layers.csv", out / "report.json", out / "index.html"
        _write_csv(csv_path, records, named)
        document = {"title": title, "target": target, "machine": dict(machine),
                    "layers": [dict(r) for r in records], "totals": dict(totals),
                    "roofline": roof, "plots": [p.name for p in files], "notes": notes}
        json_path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        html_path.write_text(_html(title, target, named, records, totals, figures, notes),
                             encoding="utf-8")
    except OSError as err:
        raise ReportError(f"report: cannot write {err.filename or out}: {err.strerror}") from None
    return ReportFiles([csv_path, json_path, *files, html_path], notes)
