"""``tensorize sweep SWEEP.yaml``: simulate workloads on a grid of NPU machines.

The sweep file (docs/sweeps.md) names a base machine, the fields to vary, constraints, the
workloads and the target. Each (machine, workload) point tensorizes, compiles, simulates and
checks its workload as an independent task: on a local process pool (the default), or with
--executor dask on a Dask cluster (--address HOST:PORT; without it, a local cluster of -j
worker processes). Rows stream to OUT/results.jsonl and OUT/results.csv as points finish;
a rerun skips the points already done. A progress line (done, failed, ETA) goes to stderr;
then a summary (the best machine per workload, the Pareto front over total cycles, PEs and
SRAM bytes, the failed points), and the plots OUT/pareto.png and OUT/heatmap.png (with
matplotlib; otherwise a skip line says why). Each point's machine is named after the fields
it varies (npu-16x64-os).

Exit status 0 when every point ran, 1 when some point failed (its row holds the error), 2
for a bad sweep file or bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from tensorize.cli.errors import UsageError

EXIT_OK, EXIT_FAILED = 0, 1

_EXAMPLES = """
examples:
  tensorize sweep examples/sweeps/npu_arrays.yaml                  # local process pool
  tensorize sweep examples/sweeps/npu_arrays.yaml -j 2 --out runs/a  # resumes runs/a
  tensorize sweep SWEEP.yaml --executor dask                       # a local Dask cluster
  tensorize sweep SWEEP.yaml --executor dask --address tcp://10.0.0.5:8786
"""


def register(subparsers: Any) -> None:
    """Add the ``sweep`` command."""
    parser = subparsers.add_parser(
        "sweep", help="simulate workloads on a grid of NPU machines, locally or on a Dask "
                      "cluster",
        description=__doc__.split("\n\n", 1)[1] + _EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", metavar="SWEEP.yaml", help="the sweep description")
    parser.add_argument("--executor", choices=("local", "dask"), default="local",
                        help="where points run: a local process pool (default) or Dask")
    parser.add_argument("--address", metavar="ADDRESS",
                        help="dask: the scheduler's address (default: start a local cluster)")
    parser.add_argument("-j", "--jobs", type=_jobs, default=None, metavar="N",
                        help="worker processes of the pool or local cluster (default: the "
                             "CPUs this process may use)")
    parser.add_argument("--out", metavar="DIR",
                        help="output directory (default: sweep-NAME, NAME the sweep's name, in "
                             "the current directory); "
                             "points already in it are skipped")
    parser.add_argument("--no-plots", action="store_true", help="write no plots")
    parser.add_argument("--json", action="store_true",
                        help="print the summary as JSON instead of the table")
    parser.set_defaults(handler=handle)


def _jobs(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"requires a positive integer, got {text!r}")
    return int(text)


def handle(args: argparse.Namespace) -> int:
    """Run the sweep; returns the exit status."""
    from tensorize.sweep import load_sweep, make_executor, run_sweep

    if args.address and args.executor != "dask":
        raise UsageError("--address requires --executor dask, got --executor local")
    if args.address and args.jobs:
        raise UsageError("-j sizes the pool or the local Dask cluster; with --address the "
                         "cluster's own workers run the points")
    sweep = load_sweep(args.sweep)
    out = Path(args.out) if args.out else Path(f"sweep-{sweep.name}")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out requires a directory, got the file {out}")
    jobs = args.jobs or len(os.sched_getaffinity(0))
    executor = make_executor(args.executor, args.address, jobs)
    outcome = run_sweep(sweep, out, executor, plots=not args.no_plots)
    if args.json:
        print(json.dumps(_json(outcome, sweep, out, args.executor), indent=2, default=str))
    else:
        _print(outcome, out)
    return EXIT_FAILED if outcome.failed else EXIT_OK


def _print(outcome: Any, out: Path) -> None:
    from tensorize.sweep.report import summary_text

    excluded = f", {outcome.excluded} left out by constraints" if outcome.excluded else ""
    rate = outcome.executed / outcome.seconds if outcome.seconds > 0 else 0.0
    print(f"{len(outcome.rows)} points: {outcome.machines} machines{excluded}; "
          f"{outcome.executed} ran now ({rate:.2f} points/s), {outcome.resumed} were done, "
          f"{outcome.failed} failed")
    print(f"rows: {out / 'results.csv'}, {out / 'results.jsonl'}")
    if outcome.rejected:
        print(f"warn {len(outcome.rejected)} line(s) of {out / 'results.jsonl'} were not valid "
              f"rows, and their points ran again: {'; '.join(outcome.rejected[:3])}"
              f"{'; ...' if len(outcome.rejected) > 3 else ''}", file=sys.stderr)
    text = summary_text(outcome.summary)
    if text:
        print()
        print(text)
    print()
    for path in outcome.plots:
        print(f"ok   plot  {path}")
    if outcome.plots_skipped:
        print(f"skip plots  {outcome.plots_skipped}")


def _json(outcome: Any, sweep: Any, out: Path, executor: str) -> dict[str, Any]:
    return {"ok": not outcome.failed, "sweep": str(sweep.path), "executor": executor,
            "out": str(out), "points": len(outcome.rows), "machines": outcome.machines,
            "excluded": outcome.excluded, "executed": outcome.executed,
            "resumed": outcome.resumed, "failed": outcome.failed,
            "rejected_rows": outcome.rejected,
            "seconds": round(outcome.seconds, 3), "summary": outcome.summary,
            "plots": [str(p) for p in outcome.plots], "plots_skipped": outcome.plots_skipped}
