"""Kernels tensorized for the NPU, end to end: tensorize, compile the programs, simulate them.

For each kernel, prints the wall time to tensorize, to compile its NPU programs (emit, merge,
tokens, loops) and to simulate them (functional and timed), each with the CPU time the
process spent on it beside (on a shared machine the wall time counts other jobs' turns
too; the simulator runs its BLAS calls on one thread), the program's size in words and
the instructions it executes, the simulated cycles and MAC utilisation, and the peak resident
memory of the process that did the work (each kernel runs in a process of its own). Kernels:
int8 GEMMs 256^3, 1024^3 and 4096^3, and the ResNet-50 3x3 layer (1x56x56x64 -> 64). The
machine is the built-in one (intrinsics/npu.yaml) unless ``--machine`` names a YAML file
with a ``machine:`` section and an NPU family. Figures, not assertions.

With ``--end-to-end`` it prints instead the three figures of the NPU path as a user meets
them, each a command run in a process of its own, with its wall time and the CPU time of
that process and its children beside (BLAS is not pinned here: the commands run as users
run them): ``tensorize run`` of the int8 GEMM at 4096^3 on the built-in machine (tensorize,
validate on the host, compile, simulate, check against the reference executor and the
file's numpy reference), ``tensorize model`` of the int8 ResNet-50 on it (import,
tensorize, compile, simulate, check every layer against onnxruntime; the model built first,
as bench_sweep.py builds it, unless ``--model`` names one) and a network sweep of 64 points
(ResNet-50's four 3x3 convolution kernels on the 16 array shapes of bench_sweep.py's grid,
8 to 64 rows and columns, on two local workers), in points per second of the sweep's own
wall time, with the seconds the workers spent in the points (the pool's processes are not
this one's children, so their CPU time is not counted), and the 1-minute load average as
each run starts (other jobs' share of the cores). Each runs ``--repeat`` times
(default 1); every run is printed. ``--figures`` picks some of the three (``gemm``,
``model``, ``sweep``); ``--before DIR`` runs each figure also with the source tree in DIR
(a checkout of an earlier commit, put first on the import path), alternating with this one,
so a change is measured against its base on the same machine under the same load.

    .venv/bin/python bench/bench_npu.py [--quick] [--machine FILE]
    .venv/bin/python bench/bench_npu.py --end-to-end [--model FILE.onnx] [--repeat N]
        [--figures gemm,model,sweep] [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KERNELS = {
    "GEMM 256^3 int8": ("gemm_int8", {"m": 256, "n": 256, "k": 256}),
    "GEMM 1024^3 int8": ("gemm_int8", {"m": 1024, "n": 1024, "k": 1024}),
    "GEMM 4096^3 int8": ("gemm_int8", {"m": 4096, "n": 4096, "k": 4096}),
    "ResNet-50 conv 3x3 56x56x64": ("conv2d_nhwc_int8", {
        "batch": 1, "height": 56, "width": 56, "in_channels": 64, "out_channels": 64}),
}
QUICK = ("GEMM 256^3 int8", "ResNet-50 conv 3x3 56x56x64")


def measure(label: str, machine: str | None) -> dict[str, object]:
    """Tensorize, compile and simulate one kernel in this process; its figures."""
    import numpy as np
    import suite_kernels  # bench/ is on the path: the benchmarks run as scripts

    from intrinsics import default_registry
    from simulator import load_machine, simulate
    from targets import npu
    from tensorize.engine import auto_tensorize

    name, sizes = KERNELS[label]
    func = suite_kernels.builders()[name](**sizes)
    if machine:
        config, registry = npu.load_machine(machine), npu.machine_registry(machine)
    else:
        config, registry = load_machine(), default_registry()
    start = time.perf_counter()
    result = auto_tensorize(func, "npu", registry=registry, config=config)
    tensorize_s = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    # The plan's programs, with the host copies their transfers do folded in
    # (targets/npu/remap.py), as a run compiles them.
    planned = npu.plan(result.func, config, lookup=registry.get)
    compiled = [s.compiled for s in planned.stages if s.compiled is not None]
    compile_s, compile_cpu = time.perf_counter() - start, time.process_time() - cpu
    images = [np.zeros(c.dram_bytes, np.uint8) for c in compiled]
    start, cpu = time.perf_counter(), time.process_time()
    runs = [simulate(c.program, config, image) for c, image in zip(compiled, images)]
    simulate_s, simulate_cpu = time.perf_counter() - start, time.process_time() - cpu
    cycles = sum(r.cycles for r in runs)
    peak = cycles * config.array.rows * config.array.cols
    return {
        "kernel": label, "machine": config.name, "tensorize": tensorize_s,
        "compile": compile_s, "compile_cpu": compile_cpu, "simulate": simulate_s,
        "simulate_cpu": simulate_cpu,
        "words": sum(len(c.program) for c in compiled),
        "executed": sum(sum(r.instructions.values()) for r in runs), "cycles": cycles,
        "utilisation": sum(r.useful_macs for r in runs) / peak if peak else 0.0,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# The GEMM of the end-to-end figure: the README's example kernel file at this size.
GEMM_EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "script" / "gemm_int8.py"
GEMM_SIZE = 4096
# The network sweep: bench_sweep.py's grid with its other two fields fixed, so 16 machines.
SWEEP_FIXED = {"inp.rows: [2048, 8192]": "inp.rows: [8192]",
               "dram.bytes_per_cycle: [8, 32]": "dram.bytes_per_cycle: [32]"}
SWEEP_WORKERS = 2


def timed(command: list[str], tree: str | None = None) -> tuple[float, float, str]:
    """Run ``command`` to its end (with the source tree ``tree`` first on the import path,
    if given): its wall seconds, the CPU seconds of it and its children, and its standard
    output; raises when it fails."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): "
                           f"{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def run_sweep_points(directory: str) -> None:
    """The 64-point network sweep in ``directory`` (the model file is there): print its
    points and failures as JSON."""
    import io

    import bench_sweep  # bench/ is on the path: the benchmarks run as scripts

    from tensorize.sweep import LocalExecutor, load_sweep, run_sweep

    text = bench_sweep.SWEEP.format(base=bench_sweep.MACHINES / "npu32x32.yaml",
                                    workloads=bench_sweep.RESNET_MODEL)
    for wide, narrow in SWEEP_FIXED.items():
        text = text.replace(wide, narrow)
    path = Path(directory) / "sweep.yaml"
    path.write_text(text)
    # A fresh output directory: in one a run has filled, every point would be done already.
    out = Path(tempfile.mkdtemp(prefix="out-", dir=directory))
    start = time.perf_counter()
    outcome = run_sweep(load_sweep(path), out, LocalExecutor(SWEEP_WORKERS),
                        stream=io.StringIO(), plots=False)
    wall = time.perf_counter() - start
    compute = sum(row["seconds"] or 0.0 for row in outcome.rows)
    print(json.dumps({"points": len(outcome.rows), "failed": outcome.failed,
                      "wall": wall, "compute": compute}))


FIGURES = ("gemm", "model", "sweep")


def end_to_end(model: str | None, repeat: int, figures: tuple[str, ...],
               before: str | None) -> None:
    """Print the chosen end-to-end figures, ``repeat`` runs each (with ``before``, each
    run of this tree follows one of that tree, the rows marked ``before`` and ``after``)."""
    import bench_sweep

    tool = str(Path(sys.executable).parent / "tensorize")
    trees: list[tuple[str, str | None]] = [("", None)]
    if before is not None:
        trees = [("before ", str(Path(before).resolve())), ("after ", None)]
    with tempfile.TemporaryDirectory() as directory:
        kernel = Path(directory) / "gemm_int8_4096.py"
        kernel.write_text(GEMM_EXAMPLE.read_text().replace("256", str(GEMM_SIZE)))
        onnx_file = Path(directory) / "resnet50_int8.onnx"
        if "model" in figures or "sweep" in figures:
            if model is None:
                bench_sweep.write_resnet50(onnx_file)
            else:
                os.symlink(Path(model).resolve(), onnx_file)
        # The load: the 1-minute load average as each run starts (other jobs' share of the
        # cores, which the wall time includes and the CPU time does not).
        print(f"{'figure':<51}{'wall s':>8}{'cpu s':>8}{'load':>6}  result")
        # Both commands exit 0 only when every check passed: exact against the references.
        for _ in range(repeat if "gemm" in figures else 0):
            for mark, tree in trees:
                load = os.getloadavg()[0]
                wall, cpu, _ = timed([tool, "run", str(kernel), "--target", "npu", "--quiet"],
                                     tree)
                label = f"{mark}GEMM {GEMM_SIZE}^3 int8, tensorize run --target npu"
                print(f"{label:<51}{wall:>8.1f}{cpu:>8.1f}{load:>6.1f}  exact", flush=True)
        for _ in range(repeat if "model" in figures else 0):
            for mark, tree in trees:
                load = os.getloadavg()[0]
                wall, cpu, out = timed([tool, "model", str(onnx_file), "--target", "npu",
                                        "--json"], tree)
                cycles = json.loads(out)["totals"]["cycles"]
                label = f"{mark}ResNet-50 int8, tensorize model --target npu"
                print(f"{label:<51}{wall:>8.1f}{cpu:>8.1f}{load:>6.1f}  {cycles:,} cycles, "
                      "every layer exact", flush=True)
        for _ in range(repeat if "sweep" in figures else 0):
            for mark, tree in trees:
                _, _, out = timed([sys.executable, __file__, "--sweep-in", directory], tree)
                row = json.loads(out.strip().splitlines()[-1])
                label = f"{mark}network sweep, {row['points']} points, {SWEEP_WORKERS} workers"
                # The sweep's own wall time (not the child's start-up). The pool's workers
                # are the forkserver's children, not this process's, so their CPU time is
                # not counted: the points' own time in the workers is.
                print(f"{label:<51}{row['wall']:>8.1f}{'-':>8}{'-':>6}  "
                      f"{row['points'] / row['wall']:.2f} points/s, {row['failed']} failed, "
                      f"{row['compute']:.1f} s in the points", flush=True)


def main() -> None:
    """Print one row per kernel, each measured in a fresh process (or, with
    ``--end-to-end``, the three end-to-end figures)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip the 1024^3 and 4096^3 GEMMs")
    parser.add_argument("--machine", help="a YAML file describing the NPU (default: built-in)")
    parser.add_argument("--end-to-end", action="store_true",
                        help="the 4096^3 GEMM, ResNet-50 and a 64-point sweep, end to end")
    parser.add_argument("--model", help="the int8 ResNet-50 for --end-to-end (default: "
                                        "built here)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each end-to-end figure")
    parser.add_argument("--figures", default=",".join(FIGURES),
                        help="the end-to-end figures to run, of gemm, model, sweep")
    parser.add_argument("--before", metavar="DIR",
                        help="an earlier source tree to run each end-to-end figure with too")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process's kernel
    parser.add_argument("--sweep-in", help=argparse.SUPPRESS)  # the child's sweep directory
    args = parser.parse_args()
    if args.sweep_in:
        run_sweep_points(args.sweep_in)
        return
    if args.end_to_end:
        figures = tuple(f for f in args.figures.split(",") if f)
        unknown = sorted(set(figures) - set(FIGURES))
        if unknown:
            parser.error(f"--figures requires names of {', '.join(FIGURES)}, got "
                         f"{', '.join(unknown)}")
        end_to_end(args.model, args.repeat, figures, args.before)
        return
    if args.one:
        print(json.dumps(measure(args.one, args.machine)))
        return
    labels = [k for k in KERNELS if not args.quick or k in QUICK]
    print(f"{'kernel':<30}{'tensorize':>10}{'compile':>9}{'(cpu)':>8}{'simulate':>9}{'(cpu)':>8}"
          f"{'total':>8}{'words':>7}{'executed':>10}{'cycles':>12}{'MAC util':>9}"
          f"{'peak RSS':>10}")
    for label in labels:
        command = [sys.executable, __file__, "--one", label]
        if args.machine:
            command += ["--machine", args.machine]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        total = row["compile"] + row["simulate"]
        print(f"{label:<30}{row['tensorize']:>9.2f}s{row['compile']:>8.2f}s"
              f"{row['compile_cpu']:>7.2f}s{row['simulate']:>8.2f}s{row['simulate_cpu']:>7.2f}s"
              f"{total:>7.2f}s{row['words']:>7}{row['executed']:>10}"
              f"{row['cycles']:>12,}{100 * row['utilisation']:>8.1f}%"
              f"{row['rss_mb']:>8.0f}MB")


if __name__ == "__main__":
    main()
