"""The sweep's pictures, with matplotlib (the optional ``report`` extra, imported only here):

- ``pareto.png``: total cycles over the workloads against PEs, one dot per machine that ran
  every workload, coloured by SRAM bytes; the Pareto front (cycles against PEs and SRAM
  bytes) drawn as a line through its machines;
- ``heatmap.png``: MAC utilisation over two varied fields, one panel per workload; where
  other fields vary too, a cell shows the best utilisation over them.

:func:`write_plots` returns the files written, or raises ImportError without matplotlib.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tensorize.atomic import write_atomically


def write_plots(rows: Sequence[dict[str, Any]], machines: Sequence[dict[str, Any]],
                front: Sequence[dict[str, Any]], heatmap: Sequence[str], directory: Path
                ) -> list[Path]:
    """Write the plots of a sweep's rows into ``directory``; the paths written."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display is needed or wanted
    from matplotlib import pyplot as plt

    written = []
    if machines:
        written.append(_pareto(plt, machines, front, directory / "pareto.png"))
    ok = [r for r in rows if not r.get("error")]
    if len(heatmap) == 2 and ok:
        written.append(_heatmap(plt, ok, heatmap, directory / "heatmap.png"))
    return written


def _pareto(plt: Any, machines: Sequence[dict[str, Any]], front: Sequence[dict[str, Any]],
            path: Path) -> Path:
    figure, axes = plt.subplots(figsize=(7, 5))
    dots = axes.scatter([m["pes"] for m in machines], [m["cycles"] for m in machines],
                        c=[m["sram_bytes"] / 1024 for m in machines], cmap="viridis", s=28)
    figure.colorbar(dots, ax=axes, label="SRAM KiB (inp + wgt + acc)")
    axes.plot([m["pes"] for m in front], [m["cycles"] for m in front], "r.--",
              label=f"Pareto front ({len(front)} machines)")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("processing elements (R x C)")
    axes.set_ylabel("total cycles over the workloads")
    axes.set_title("cycles against the area proxy")
    axes.legend()
    return _save(plt, figure, path)


def _heatmap(plt: Any, rows: Sequence[dict[str, Any]], fields: Sequence[str], path: Path
             ) -> Path:
    import numpy as np

    x_field, y_field = fields
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    xs = sorted({r["fields"][x_field] for r in rows}, key=_order)
    ys = sorted({r["fields"][y_field] for r in rows}, key=_order)
    figure, panels = plt.subplots(1, len(workloads), figsize=(4.5 * len(workloads), 4),
                                  squeeze=False)
    for axes, workload in zip(panels[0], workloads):
        grid = np.full((len(ys), len(xs)), np.nan)
        for row in rows:
            if row["workload"] != workload:
                continue
            at = ys.index(row["fields"][y_field]), xs.index(row["fields"][x_field])
            grid[at] = np.fmax(grid[at], 100 * row["utilisation"])
        image = axes.imshow(grid, origin="lower", cmap="magma", vmin=0, vmax=100,
                            aspect="auto")
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
