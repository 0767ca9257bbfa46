"""Whole networks, int8 QDQ, run layer by layer by ``tensorize model``'s runner: ResNet-50 v1,
MobileNet-v2 and one BERT-base encoder layer (``tensorize.model.networks``, random weights,
quantised by onnxruntime's quantize_static on random calibration data).

For each network and target it prints: the import time; the run time (tensorize, compile and
run or simulate every layer, host layers included) and below it where that time went; the onnxruntime reference time (one run
with every layer's output exposed, plus reading which nodes it fused); the layers tensorized
of all layers; whether every layer matched onnxruntime (exactly: the outputs are int8); and
by target the NPU's total cycles and network MAC utilisation (the useful MACs of the layers
it ran over the array's peak for their cycles), the AArch64 instructions executed under the
emulator, or for x86 the whole network compiled and called end to end
(``tensorize.model.native``: native kernels, their packing and epilogues and the host
layers) and the tensorized kernels' own native time, next to onnxruntime's run of the
quantised model (default settings), the two taking turns, best of 5: on one thread, and again
on ``--threads`` (default all cores; each convolution's rows split over them, onnxruntime given
as many). Figures, not assertions.

    .venv/bin/python bench/bench_models.py                          # the three, on the NPU
    .venv/bin/python bench/bench_models.py --networks resnet50 --profile 25
    .venv/bin/python bench/bench_models.py --small --targets npu arm x86
    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_models.py --targets x86 --threads 2

``--small`` builds the sizes the tests use (``networks.SMALL``); ``--profile N`` prints the
N costliest functions of the run (cProfile, cumulative).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from intrinsics import default_registry
from ir.onnx import import_model
from tensorize.model import networks, random_inputs, run_model
from tensorize.model.native import best_cpu, compile_network, time_interleaved
from tensorize.model.reference import model_session, reference_session
from tensorize.runners import make_context

NETWORKS = ("resnet50", "mobilenetv2", "bert_layer")


def network_seconds(graph, target: str, threads: int, runs: int = 5):
    """The network compiled for ``target`` (``tensorize.model.native``) on ``threads``
    threads and onnxruntime's session of it (default settings, as many threads), each called
    ``runs`` times taking turns: their timings, after checking the outputs agree."""
    ctx = make_context(default_registry(), target, threads=threads)
    network = compile_network(graph, ctx)
    session = model_session(graph, threads)
    inputs = random_inputs(graph, 0)
    names = [info.name for info in graph.outputs]
    ours = network(inputs)
    for name, expected in zip(names, reference_session(graph).run(names, inputs)):
        if not np.array_equal(ours[name], expected):
            raise SystemExit(f"the compiled network's {name} differs from the reference's")
    timings = time_interleaved({"ours": lambda: network(inputs),
                                "onnxruntime": lambda: session.run(names, inputs)}, runs)
    return timings["ours"], timings["onnxruntime"]


def npu_table(doc: str, header: str, compare) -> None:
    """A bench's table of networks on one NPU: the options (``--networks``, ``--machine``,
    ``--small``, ``--keep``), the command and ``header`` (the table's first line), then
    ``compare(name, path, ctx)`` per network, which prints its row."""
    from targets.npu import load_machine, machine_registry

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--networks", nargs="+", choices=NETWORKS, default=["resnet50"])
    parser.add_argument("--machine", metavar="FILE.yaml",
                        help="the NPU (default: the built-in 16x16)")
    parser.add_argument("--small", action="store_true", help="the tests' small sizes")
    parser.add_argument("--keep", metavar="DIR", help="keep the built models in DIR")
    args = parser.parse_args()
    if args.machine:  # a bench is an edge: the machine file, or the built-in descriptions
        ctx = make_context(machine_registry(args.machine), "npu",
                           machine=load_machine(args.machine))
    else:
        ctx = make_context(default_registry(), "npu")
    print(f"# {' '.join(sys.argv)}")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for name in args.networks:
            compare(name, model_path(name, folder, args.small), ctx)


def model_path(name: str, folder: Path, small: bool) -> Path:
    """The int8 network ``name`` in ``folder``, built and quantised there first if missing."""
    sizes = networks.SMALL[name] if small else {}
    path = folder / f"{name}{'_small' if small else ''}_int8.onnx"
    if not path.exists():
        start = time.perf_counter()
        onnx.save(networks.quantize(getattr(networks, name)(**sizes)), str(path))
        print(f"# built and quantised {name} in {time.perf_counter() - start:.1f} s",
              file=sys.stderr)
    return path


def bench(name: str, target: str, folder: Path, small: bool, profile: int,
          threads: int) -> None:
    """Build, import and run one network on one target; print its line."""
    path = model_path(name, folder, small)
    start = time.perf_counter()
    graph = import_model(path)
    import_s = time.perf_counter() - start
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    run = run_model(graph, make_context(default_registry(), target))
    if profiler:
        profiler.disable()
    totals = run.totals
    detail = ""
    if target == "npu":
        detail = (f"cycles {totals['cycles']:,}, MAC utilisation "
                  f"{100 * (totals['utilisation'] or 0):.1f}%")
    elif totals["instructions"] is not None:
        detail = f"instructions {totals['instructions']:,}"
    elif target == "x86":
        kernels = sum(r["run_s"] or 0 for r in run.records if r["placement"] == "tensorized")
        detail = f"tensorized kernels {kernels * 1e3:.1f} ms (native, one thread)"
        for count in sorted({1, threads}):
            ours, theirs = network_seconds(graph, target, count)
            detail += (f"; {count} thread{'s' if count > 1 else ''}: network "
                       f"{ours.best * 1e3:.1f} ms (CPU {best_cpu(ours) * 1e3:.1f} ms), "
                       f"onnxruntime {theirs.best * 1e3:.1f} ms (CPU "
                       f"{best_cpu(theirs) * 1e3:.1f} ms), best of 5 taking turns")
    print(f"{name:<12} {target:<4} import {import_s:5.2f} s  run {run.timings['run']:6.2f} s  "
          f"reference {run.timings['reference']:5.2f} s  tensorized {totals['tensorized']}/"
          f"{totals['layers']}  MACs {graph.macs:,}  exact {'yes' if run.ok else 'NO'}  "
          f"{detail}")
    parts = ", ".join(f"{kind[5:]} {seconds:.2f} s" for kind, seconds in run.timings.items()
                      if kind.startswith("run: "))
    print(f"{'':<17} run = {parts}")
    if profiler:
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(profile)


def main() -> None:
    """Parse the options and run the benchmarks."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--networks", nargs="+", choices=NETWORKS, default=list(NETWORKS))
    parser.add_argument("--targets", nargs="+", default=["npu"])
    parser.add_argument("--small", action="store_true", help="the tests' small sizes")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="print the N costliest functions of each run")
    parser.add_argument("--keep", metavar="DIR", help="keep the built models in DIR")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="x86: the second round's threads (default: all cores)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"# {' '.join(sys.argv)}")
        for name in args.networks:
            for target in args.targets:
                bench(name, target, folder, args.small, args.profile, args.threads)


if __name__ == "__main__":
    main()
