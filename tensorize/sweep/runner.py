"""Running a sweep: expand its points, skip those done in the output directory, hand the
rest to an executor, stream each row to disk as it arrives, then summarise and plot.

Each row (``results.jsonl``) holds the point's ``key`` and ``index``, the ``workload``, the
varied ``fields``, the area proxy (``pes``, ``sram_bytes``), ``machine_file`` (the point's
machine under ``machines/`` in the output directory: ``tensorize run KERNEL --target npu
--machine OUT/machines/FILE`` reproduces the point), and what the point measured
(:func:`tensorize.sweep.task.run_point`); a model's layer also its ``model`` file, the
``layers`` sharing its kernel and their ``count``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tensorize.sweep.model_totals import model_totals
from tensorize.sweep.points import Expansion, expand
from tensorize.sweep.progress import Progress
from tensorize.sweep.report import machines, pareto_front, summarize
from tensorize.sweep.results import ResultStore
from tensorize.sweep.spec import Sweep
from tensorize.sweep.task import machine_file
from tensorize.sweep.workloads import Workload


@dataclass
class SweepOutcome:
    """A finished sweep: its rows in point order, how many points ran now (``executed``)
    and how many were already done (``resumed``), the summary, the plots written, or why
    none were (``plots_skipped``)."""

    rows: list[dict[str, Any]]
    executed: int
    resumed: int
    machines: int
    excluded: int
    summary: dict[str, Any]
    seconds: float
    plots: list[Path] = field(default_factory=list)
    plots_skipped: str | None = None
    # Lines of the output's results.jsonl that were not valid rows; their points ran again.
    rejected: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        """Points whose row has an error."""
        return sum(1 for r in self.rows if r.get("error"))


def run_sweep(sweep: Sweep, out: Path, executor: Any, stream: TextIO | None = None,
              plots: bool = True) -> SweepOutcome:
    """Run ``sweep`` on ``executor``, its rows in ``out``; the outcome."""
    expansion = expand(sweep)
    models = any(w.kind == "model" for w in sweep.workloads)
    store = ResultStore(out, list(sweep.vary), models)
    try:
        outcome = _run(sweep, expansion, store, out, executor, stream)
    finally:
        store.close()
    if plots:
        _plot(outcome, sweep, out)
    return outcome


def _run(sweep: Sweep, expansion: Expansion, store: ResultStore, out: Path, executor: Any,
         stream: TextIO | None) -> SweepOutcome:
    """The points of ``expansion`` not done in ``store``, run on ``executor``; the rows of
    every point in point order."""
    files = _write_machines(expansion, out)
    todo = [p for p in expansion.points if not store.is_done(p.key)]
    resumed = len(expansion.points) - len(todo)
    progress = Progress(len(expansion.points), resumed, stream)
    by_key = {p.key: p for p in todo}
    executed = 0
    for task, measured in executor.run([p.task for p in todo]):
        point = by_key[task.key]
        row = {"key": point.key, "index": point.index, "workload": point.task.workload.name,
               **_described(point.task.workload), "fields": point.fields, **point.area,
               "machine_file": files[point.key], **measured}
        store.add(row)
        executed += 1
        progress.update(bool(row["error"]))
    progress.finish()
    # A resumed row is this sweep's point: its position, fields and workload name as the
    # file now gives them (a renamed layer keeps its key).
    rows = [{**store.done[p.key], "index": p.index, "fields": p.fields,
             "workload": p.task.workload.name, **_described(p.task.workload)}
            for p in expansion.points if p.key in store.done]
    store.write_csv(rows)
    summary = summarize(rows, len(sweep.workloads), model_totals(rows, sweep.workloads))
    return SweepOutcome(rows, executed, resumed, expansion.machines, expansion.excluded,
                        summary, progress.elapsed, rejected=store.rejected)


def _described(workload: Workload) -> dict[str, Any]:
    """What a row says of its workload beside the name: for a model's layer, the model
    file, the layers sharing the kernel and their count."""
    if workload.kind != "model":
        return {}
    info = dict(workload.info)
    return {"model": info["model"], "layers": list(info["layers"]), "count": info["count"]}


def _write_machines(expansion: Expansion, out: Path) -> dict[str, str]:
    """Each point's machine as a file under ``out/machines``; its path relative to ``out``
    by point key."""
    directory = out / "machines"
    paths: dict[str, str] = {}
    written: dict[str, str] = {}
    for point in expansion.points:
        text = point.task.machine_text
        if text not in written:
            written[text] = str(machine_file(text, directory).relative_to(out))
        paths[point.key] = written[text]
    return paths


def _plot(outcome: SweepOutcome, sweep: Sweep, out: Path) -> None:
    try:
        import matplotlib  # noqa: F401  (only to learn whether the extra is installed)
    except ImportError:
        outcome.plots_skipped = ("matplotlib is not installed (pip install "
                                 "'tensorize[report]'); the rows are in results.csv")
        return
    from tensorize.sweep.plots import write_plots

    complete = machines(outcome.rows, len(sweep.workloads))
    outcome.plots = write_plots(outcome.rows, complete, pareto_front(complete), sweep.heatmap,
                                sweep.vary, out)
    if not outcome.plots:
        outcome.plots_skipped = "no point ran, so there is nothing to plot"
