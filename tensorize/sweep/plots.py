"""The sweep's pictures, with matplotlib (the optional ``report`` extra, imported only here):

- ``pareto.png``: total cycles over the workloads against PEs, one dot per machine that ran
  every workload, coloured by SRAM bytes. The summary's front is over three objectives
  (cycles, PEs, SRAM bytes), which this plane shows in projection: its members are ringed,
  and the line is the front of the two objectives drawn (cycles against PEs);
- ``heatmap.png``: MAC utilisation over two varied fields, one panel per workload; where
  other fields vary too, a cell shows the best utilisation over them. A cell no machine of
  the grid reaches is hatched, ``excluded`` (by the constraints) or ``failed`` (every point
  there failed), as its legend says.

:func:`write_plots` returns the files written, or raises ImportError without matplotlib.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tensorize.atomic import write_atomically
from tensorize.sweep.report import pareto_front

# How a heat-map cell with no utilisation is drawn, and its legend entry.
_EMPTY_CELLS = {"excluded": ("///", "excluded by the constraints"),
                "failed": ("xx", "every point failed")}


def write_plots(rows: Sequence[dict[str, Any]], machines: Sequence[dict[str, Any]],
                front: Sequence[dict[str, Any]], heatmap: Sequence[str],
                vary: Mapping[str, Sequence[Any]], directory: Path) -> list[Path]:
    """Write the plots of a sweep's rows into ``directory``; the paths written. ``vary`` is
    the sweep's grid (each varied field's values), so the heat map shows every value of its
    two fields, those whose every machine the constraints excluded too."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display is needed or wanted
    from matplotlib import pyplot as plt

    written = []
    if machines:
        written.append(_pareto(plt, machines, front, directory / "pareto.png"))
    if len(heatmap) == 2 and any(not r.get("error") for r in rows):
        written.append(_heatmap(plt, rows, heatmap, vary, directory / "heatmap.png"))
    return written


def _pareto(plt: Any, machines: Sequence[dict[str, Any]], front: Sequence[dict[str, Any]],
            path: Path) -> Path:
    figure, axes = plt.subplots(figsize=(7, 5), layout="constrained")
    dots = axes.scatter([m["pes"] for m in machines], [m["cycles"] for m in machines],
                        c=[m["sram_bytes"] / 1024 for m in machines], cmap="viridis", s=28)
    figure.colorbar(dots, ax=axes, label="SRAM KiB (inp + wgt + acc)")
    axes.scatter([m["pes"] for m in front], [m["cycles"] for m in front], s=90,
                 facecolors="none", edgecolors="red",
                 label=f"front over cycles, PEs and SRAM ({len(front)} machines)")
    plane = pareto_front(machines, ("cycles", "pes"))
    axes.step([m["pes"] for m in plane], [m["cycles"] for m in plane], "r--", where="post",
              linewidth=1, label=f"front over cycles and PEs ({len(plane)} machines)")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("processing elements (R x C)")
    axes.set_ylabel("total cycles over the workloads")
    axes.set_title("cycles against the area proxy (3 objectives, drawn in 2)")
    axes.legend(fontsize=8)
    return _save(plt, figure, path)


def heatmap_cells(rows: Sequence[dict[str, Any]], fields: Sequence[str], workload: str,
                  xs: Sequence[Any], ys: Sequence[Any]) -> list[list[float | str]]:
    """One heat-map panel as data, a row per ``ys`` value and a column per ``xs`` value of
    the two ``fields``: the best MAC utilisation (%) of ``workload``'s rows there; where
    none ran, ``failed`` when some point there failed, else ``excluded`` (the constraints
    left every machine of the cell out, so it has no row)."""
    x_field, y_field = fields
    cells: list[list[float | str]] = [["excluded"] * len(xs) for _ in ys]
    for row in rows:
        if row["workload"] != workload:
            continue
        i, j = ys.index(row["fields"][y_field]), xs.index(row["fields"][x_field])
        if row.get("error"):
            if cells[i][j] == "excluded":
                cells[i][j] = "failed"
            continue
        value = 100 * row["utilisation"]
        current = cells[i][j]
        cells[i][j] = value if isinstance(current, str) else max(current, value)
    return cells


def _heatmap(plt: Any, rows: Sequence[dict[str, Any]], fields: Sequence[str],
             vary: Mapping[str, Sequence[Any]], path: Path) -> Path:
    import numpy as np
    from matplotlib.patches import Patch, Rectangle

    x_field, y_field = fields
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    xs = sorted(vary[x_field], key=_order)
    ys = sorted(vary[y_field], key=_order)
    figure, panels = plt.subplots(1, len(workloads), figsize=(4.5 * len(workloads) + 1, 4),
                                  squeeze=False, layout="constrained")
    empty_kinds: set[str] = set()
    for axes, workload in zip(panels[0], workloads):
        cells = heatmap_cells(rows, fields, workload, xs, ys)
        grid = np.array([[np.nan if isinstance(c, str) else c for c in line]
                         for line in cells], dtype=float)
        image = axes.imshow(grid, origin="lower", cmap="magma", vmin=0, vmax=100,
                            aspect="auto")
        for (i, j), cell in np.ndenumerate(np.array(cells, dtype=object)):
            if isinstance(cell, str):
                empty_kinds.add(cell)
                axes.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False,
                                         hatch=_EMPTY_CELLS[cell][0], edgecolor="grey",
                                         linewidth=0))
        axes.set_xticks(range(len(xs)), [str(x) for x in xs], rotation=45)
        axes.set_yticks(range(len(ys)), [str(y) for y in ys])
        axes.set_xlabel(x_field)
        axes.set_ylabel(y_field)
        axes.set_title(workload, fontsize=9)
        for (i, j), value in np.ndenumerate(grid):
            if not np.isnan(value):
                axes.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=7,
                          color="white" if value < 60 else "black")
    figure.colorbar(image, ax=list(panels[0]), label="MAC utilisation % (best over other "
                                                     "fields)")
    if empty_kinds:
        figure.legend(handles=[Patch(fill=False, hatch=_EMPTY_CELLS[k][0], edgecolor="grey",
                                     label=_EMPTY_CELLS[k][1]) for k in sorted(empty_kinds)],
                      loc="outside lower center", ncols=len(empty_kinds), fontsize=8)
    return _save(plt, figure, path)


def _order(value: Any) -> tuple[int, Any]:
    """Numbers in value order, then everything else by text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return 0, value
    return 1, str(value)


def _save(plt: Any, figure: Any, path: Path) -> Path:
    write_atomically(path, lambda temporary: figure.savefig(temporary, dpi=110, format="png",
                                                            bbox_inches="tight"))
    plt.close(figure)
    return path
