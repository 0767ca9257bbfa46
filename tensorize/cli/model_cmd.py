"""``tensorize model MODEL.onnx --target T``: import an ONNX model, tensorize every layer for
the target, run the network layer by layer and check every layer against onnxruntime.

Steps: the model is imported (ir.onnx.import_model: one layer per operator, the QDQ
pattern of onnxruntime's static quantization as one integer layer; operators the importer has
no function for run on the host through onnxruntime and say so); random inputs are made
(--seed); onnxruntime runs the model once with every layer's output exposed; then each layer
runs on the target, on the outputs of our earlier layers:

- host: every layer on the host (PrimFunc layers on the LLVM JIT reference executor);
- npu: convolutions and matrix products tensorized and simulated on the built-in NPU, or the
  one --machine FILE describes (cycles, MAC utilisation, DRAM bytes, roofline bound), each
  with its bias and requantisation on the vector unit in the same program; a residual add
  joins the convolution before it in one program; max pools and quantised adds run on the
  vector unit and global average pools on the array, each as a program of its own
  (--unfused: every epilogue and add a program of its own, the figures without fusion;
  --programs stage: the consecutive device layers linked into one program per stage, each
  layer reading the one before's output where it lies in DRAM, a stage ending where the host
  must lay an input out anew, and said why);
- arm, x86 (a CPU target): tensorized, compiled by LLVM and run (arm: instructions executed
  under the AArch64 emulator; x86: time, natively), with the target's features changed by
  --features (arm +fp16fml: float16 layers on FMLAL);

and its output is compared with onnxruntime's: exactly for integer tensors, within a named
tolerance for float ones (float16: 4 * 2**-10 of the largest value). A float layer's kernel
on an intrinsic that states its accumulation is also checked bit for bit against the
hardware-order reference of its block. Layers the target cannot tensorize run on the host
(placement "fallback", with the engine's reason). A line per layer goes to stderr as it
finishes; the per-layer table goes to stdout (--json: the records, totals and notes as JSON
instead), and --report DIR writes the CSV, JSON, plots and HTML page.

Exit status 0 when every layer matches onnxruntime and some layer is tensorized (or the
target is host); 1 when a layer does not match, or when a target with intrinsics tensorized
nothing; 2 for a bad model or bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tensorize.cli import argtypes
from tensorize.cli.errors import UsageError
from tensorize.cli.outputs import check_output_path
from tensorize.cli.progress import phase_printer
from tensorize.cli.registry_args import add_registry_arguments
from tensorize.model.runner import PROGRAMS

if TYPE_CHECKING:
    from tensorize.runners.context import RunContext

EXIT_OK, EXIT_FAILED = 0, 1

_EXAMPLES = """
examples:
  tensorize model resnet50_int8.onnx --target npu               # per-layer table
  tensorize model resnet50_int8.onnx --target npu --report out  # + CSV, JSON, plots, HTML
  tensorize model resnet50_int8.onnx --target npu --trace t.json # network timeline (Perfetto)
  tensorize model resnet50_int8.onnx --target npu --programs stage  # linked, one per stage
  tensorize model model.onnx --target host --json               # every layer vs onnxruntime
  tensorize model model.onnx --target arm                       # instructions, emulated
  tensorize model model_fp16.onnx --target arm --features +fp16fml   # float16 on FMLAL
"""


def register(subparsers: Any) -> None:
    """Add the ``model`` command."""
    parser = subparsers.add_parser(
        "model", help="tensorize every layer of an ONNX model, run it and check it against "
                      "onnxruntime",
        description=__doc__.split("\n\n", 1)[1] + _EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", metavar="MODEL.onnx", help="the ONNX model to run")
    parser.add_argument("--target", metavar="NAME", default="host",
                        help="host (default), npu, or a CPU target (arm, x86, or one of "
                             "--intrinsics-dir)")
    parser.add_argument("--machine", metavar="FILE.yaml",
                        help="NPU: the machine to run on (default: intrinsics/npu.yaml)")
    parser.add_argument("--features", metavar="+X,-Y",
                        help="a CPU target (arm, x86, ...): change the target features, which "
                             "choose the intrinsics tried, as for tensorize run: +x adds x to "
                             "the description's cpu.features, -x removes it (write "
                             "--features=-x); e.g. --target arm --features +fp16fml runs a "
                             "float16 model's convolutions and matrix products on FMLAL")
    parser.add_argument("--json", action="store_true",
                        help="print the records, totals and notes as JSON instead of the table")
    parser.add_argument("--report", metavar="DIR",
                        help="write the report (CSV, JSON, plots, HTML page) into DIR")
    parser.add_argument("--unfused", action="store_true",
                        help="NPU: run each layer's bias and requantisation as a program of "
                             "its own after its GEMM's, which stores its int32 sums (the "
                             "network's figures without fusion, to compare)")
    parser.add_argument("--programs", choices=PROGRAMS, default="layer",
                        help="NPU: layer (default) runs each layer as a program of its own; "
                             "stage links consecutive device layers into one program per "
                             "stage over one DRAM image (a layer reads the one before's "
                             "output where it lies; its loads start while that one drains), "
                             "every layer still checked, on what it left in DRAM")
    parser.add_argument("--trace", metavar="FILE",
                        help="NPU: write the network's timeline to FILE (Chrome trace JSON "
                             "for ui.perfetto.dev: a slice per layer, each unit's busy "
                             "spans, host layers as markers)")
    parser.add_argument("--bench", type=argtypes.positive, metavar="N",
                        help="a CPU target run natively (x86): after the checks, the whole "
                             "network compiled and timed end to end, N calls taking turns "
                             "with onnxruntime's (its default settings) on one thread and "
                             "then on --threads (best and median, wall and CPU time), its "
                             "outputs checked against the reference's")
    parser.add_argument("--threads", type=argtypes.threads, default=None,
                        metavar="N",
                        help="with --bench: the second round's threads, each layer's rows "
                             "split over them, onnxruntime given as many (default: all "
                             f"cores, here {os.cpu_count() or 1})")
    parser.add_argument("--seed", type=argtypes.seed, default=0,
                        help="random seed for the inputs, a non-negative integer (0)")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress lines on stderr")
    add_registry_arguments(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    """Import, run, check and report; returns the exit status."""
    from ir.onnx import import_model
    from tensorize.model import run_model
    from tensorize.model.report import format_table, write_report
    from tensorize.model.timeline import write_network_trace

    ctx = _context(args)
    if args.report and Path(args.report).exists() and not Path(args.report).is_dir():
        raise UsageError(f"--report requires a directory, got the file {args.report}")
    trace = _trace_path(args)
    start = time.perf_counter()
    graph = import_model(args.model)
    import_s = time.perf_counter() - start
    if not args.quiet:
        print(f"imported {args.model}: {len(graph.layers)} layers, {graph.macs:,} MACs "
              f"({import_s:.2f} s)", file=sys.stderr)
    progress = None if args.quiet else _progress
    run = run_model(graph, ctx, progress, phase_printer(not (args.quiet or args.json)),
                    fusion=not args.unfused, programs=args.programs)
    run.timings["import"] = import_s
    failures = [f"layer {r['index']} {r['name']}: {r['check']}" for r in run.records
                if not _passed(r["check"])]
    nothing = args.target != "host" and run.tensorized == 0
    if nothing:
        failures.append(f"not tensorized: no layer of {args.model} ran on an intrinsic of "
                        f"{args.target}")
    if trace is not None:
        write_network_trace(trace, run.records, run.timelines, ctx.machine.name,
                            Path(args.model).name, ctx.machine.clock_mhz)
    threads = args.threads or os.cpu_count() or 1
    bench = _bench(graph, ctx, args.bench, threads) if args.bench else None
    if bench is not None and bench.get("outputs_ok") is False:
        failures.append(f"bench: the compiled network's outputs against onnxruntime: "
                        f"{bench['outputs']}")
    files = None
    if args.report:
        files = write_report(args.report, Path(args.model).name, args.target, run.records,
                             run.totals, run.roofline, run.machine)
    if args.json:
        data = run.to_dict()
        data["ok"] = run.ok and not nothing
        if failures:
            data["errors"] = failures
        if files is not None:
            data["report"] = {"files": [str(f) for f in files], "notes": list(files.notes)}
        if trace is not None:
            data["trace"] = str(trace)
        if bench is not None:
            data["bench"] = bench
        print(json.dumps(data, indent=2))
    else:
        print(format_table(run.records, run.totals, run.machine))
        _print_summary(run, files, trace)
        if bench is not None:
            _print_bench(bench)
    for failure in failures:
        print(f"error: {failure}", file=sys.stderr)
    return EXIT_FAILED if failures else EXIT_OK


def _bench(graph: Any, ctx: RunContext, runs: int, threads: int) -> dict[str, Any]:
    """The whole network compiled for the CPU target and timed beside onnxruntime
    (:mod:`tensorize.model.native`) on one thread and, with ``threads`` above one, again
    with both on ``threads`` threads; or why it was skipped."""
    from dataclasses import replace

    from targets.cpu import CpuRunError
    from tensorize.model import random_inputs
    from tensorize.model.check import compare
    from tensorize.model.native import best_cpu, compile_network, time_interleaved
    from tensorize.model.reference import model_session, reference_session

    inputs = random_inputs(graph, ctx.seed)
    names = [info.name for info in graph.outputs]
    theirs = dict(zip(names, reference_session(graph).run(names, inputs)))
    rounds, checks = [], []
    for count in sorted({1, threads}):
        try:
            network = compile_network(graph, replace(ctx, threads=count))
        except CpuRunError as err:
            return {"skip": str(err)}
        ours = network(inputs)
        checks += [compare(ours[name], theirs[name]) for name in names]
        session = model_session(graph, count)
        timings = time_interleaved({"tensorize": lambda: network(inputs),
                                    "onnxruntime": lambda: session.run(names, inputs)}, runs)
        rounds.append({"threads": count, "layers_split": len(network.split), **{
            name: {"best_ms": round(t.best * 1e3, 3), "median_ms": round(t.median * 1e3, 3),
                   "best_cpu_ms": round(best_cpu(t) * 1e3, 3)}
            for name, t in timings.items()}})
    return {"runs": runs, "native_layers": network.native, "layers": len(network.graph.layers),
            "outputs": "; ".join(sorted({text for _, text in checks})),
            "outputs_ok": all(ok for ok, _ in checks), "rounds": rounds}


def _print_bench(bench: dict[str, Any]) -> None:
    if "skip" in bench:
        print(f"bench: skip: {bench['skip']}")
        return
    print(f"\nthe network compiled, {bench['runs']} calls each, taking turns with onnxruntime "
          f"on as many threads ({bench['native_layers']} of {bench['layers']} layers native "
          "kernels, the rest host functions):")
    for round_ in bench["rounds"]:
        split = (f", {round_['layers_split']} layers' rows split over them"
                 if round_["threads"] > 1 else "")
        print(f"  {round_['threads']} thread{'s' if round_['threads'] > 1 else ''}{split}:")
        for name in ("tensorize", "onnxruntime"):
            t = round_[name]
            print(f"    {name:<12} best {t['best_ms']:8.2f} ms (CPU {t['best_cpu_ms']:.2f} ms), "
                  f"median {t['median_ms']:.2f} ms")
        ratio = round_["onnxruntime"]["best_ms"] / round_["tensorize"]["best_ms"]
        print(f"    onnxruntime's best over ours: {ratio:.2f}x (above 1: ours is faster)")
    print(f"  outputs against onnxruntime: {bench['outputs']}")


def _trace_path(args: argparse.Namespace) -> Path | None:
    """The --trace file, checked writable before the run (None without --trace)."""
    if args.trace is None:
        return None
    if args.target != "npu":
        raise UsageError("--trace applies to --target npu only (the timeline is the "
                         "simulated NPU's)")
    return check_output_path("--trace", args.trace, Path(args.model))


def _passed(check: str) -> bool:
    return "MISMATCH" not in check


def _context(args: argparse.Namespace) -> RunContext:
    """The run context from the options: the registry (with --intrinsics-dir, and the
    --machine file's own family), the target, the machine and the seed."""
    from intrinsics import default_registry
    from ir.errors import TensorizeError
    from tensorize.runners.context import make_context

    for option, given in (("--machine", args.machine), ("--unfused", args.unfused),
                          ("--programs stage", args.programs == "stage")):
        if given and args.target != "npu":
            raise UsageError(f"{option} applies to --target npu only")
    if args.unfused and args.programs == "stage":
        raise UsageError("--programs stage links the fused layers' programs: it does not "
                         "apply with --unfused")
    if args.threads and not args.bench:
        raise UsageError("--threads applies with --bench (the compiled network's timing)")
    if args.bench and args.target in ("host", "npu"):
        raise UsageError(f"--bench applies to a CPU target (x86, arm, ...), got {args.target}: "
                         "the NPU's figures are simulated cycles, the host's the reference")
    machine = None
    if args.machine:
        from targets.npu import load_machine, machine_registry

        registry = machine_registry(args.machine, args.intrinsics_dir)
        machine = load_machine(args.machine)
    else:
        registry = default_registry(args.intrinsics_dir)
    try:
        return make_context(registry, args.target, features=args.features, machine=machine,
                            seed=args.seed)
    except TensorizeError as err:
        raise UsageError(str(err)) from None


def _progress(index: int, total: int, layer: Any, record: dict[str, Any]) -> None:
    where = record["intrinsic"] or record["placement"]
    print(f"[{index + 1}/{total}] {layer.name} ({layer.op}): {where}, {record['check']}",
          file=sys.stderr, flush=True)


def _print_summary(run: Any, files: Any, trace: Path | None) -> None:
    timings = ", ".join(f"{k} {v:.2f} s" for k, v in run.timings.items())
    print(f"\n{run.tensorized} of {len(run.records)} layers tensorized on {run.target}; "
          f"every layer against onnxruntime: {'ok' if run.ok else 'MISMATCH'}; the tool's "
          f"own time: {timings}")
    if files is not None:
        print(f"report: {len(files)} files written, open {files[-1]}")
        for note in files.notes:
            print(f"  {note}")
    if trace is not None:
        print(f"timeline: {trace} (open in ui.perfetto.dev)")
    if run.stages:
        _print_stages(run)


def _print_stages(run: Any) -> None:
    """The stages of a run with programs per stage: a row each, and the network's cycles."""
    names = {r["index"]: r["name"] for r in run.records}
    cycles = sum(stage.cycles for stage in run.stages)
    print(f"\n{len(run.stages)} stages, one NPU program each ({cycles:,} cycles in all); "
          "the host works between them:")
    print(f"  {'stage':>5}  {'layers':<44} {'cycles':>12}  why it ends")
    for stage in run.stages:
        first, last = names[stage.layers[0]], names[stage.layers[-1]]
        span = first if len(stage.layers) == 1 else f"{first} .. {last} ({len(stage.layers)})"
        print(f"  {stage.number:>5}  {span[:44]:<44} {stage.cycles:>12,}  "
              f"{stage.ends or 'the network ends'}")
