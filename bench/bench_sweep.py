"""Sweep throughput: 64 NPU machines x the matching suite's int8 kernels (or, with --resnet,
the four stride-1 3x3 convolution layers of ResNet-50 given by shape; with --resnet-model,
the same layers taken from the generated int8 ResNet-50, a ``model:`` workload), run by the
local process pool with 1 and 2 workers and by a local Dask cluster of 2 worker processes.

Prints, per executor, the points, the wall time, points per second, the mean compute time
of a point (what its worker spent in it), and the overhead per point: wall x workers / points
minus that compute time (dispatch, pickling, result transport, idle workers at the end).
The last line compares Dask's overhead with the pool's at the same number of workers. With
--resnet-model the model is built first (``tensorize.model.networks``: ResNet-50 v1, random
weights, quantized to int8 QDQ), and the table is followed by the model's total over its 16
3x3 layers (each shape's cycles times the layers sharing it) on the best machines.
Figures, not assertions; every run starts from an empty output directory.

    .venv/bin/python bench/bench_sweep.py [--kernels N | --resnet | --resnet-model]
                                          [--skip-dask]
"""

from __future__ import annotations

import argparse
import io
import platform
import sys
import tempfile
import time
from pathlib import Path

from tensorize.sweep import DaskExecutor, LocalExecutor, load_sweep, run_sweep
from tensorize.sweep.model_totals import model_totals, model_totals_text

SUITE = Path(__file__).resolve().parents[1] / "examples" / "te" / "suite.py"
MACHINES = Path(__file__).resolve().parents[1] / "examples" / "machines"
# The suite's int8 kernels that the NPU runs (the others are float, or not a GEMM).
KERNELS = ("gemm_int8", "gemm_int8_odd", "dense_int8", "batch_matmul_int8",
           "conv2d_nhwc_int8", "conv1x1_int8")

# ResNet-50's 3x3 stride-1 layers (padding 1, so the input is 2 larger): 56x56x64, 28x28x128,
# 14x14x256 and 7x7x512, as layer workloads.
RESNET = "\n".join(
    f"      - {{name: res3x3_{size}x{size}x{channels}, conv2d: {{height: {size + 2}, "
    f"width: {size + 2}, channels: {channels}, out_channels: {channels}, kernel: 3}}}}"
    for size, channels in ((56, 64), (28, 128), (14, 256), (7, 512)))

KERNEL_FILE = '''import importlib.util

_spec = importlib.util.spec_from_file_location("suite", {suite!r})
suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite)


def build():
    return suite.{name}()
'''

# ResNet-50's 3x3 layers as the model gives them: every 3x3 convolution of the int8 model.
RESNET_MODEL = """\
  - model: resnet50_int8.onnx
    select: {op: Conv, window: 3x3}"""
# Calibration inputs for the quantizer: the scales do not change a layer's cycles.
SAMPLES = 2

SWEEP = """\
name: bench
base: {base}
vary:                       # 4 x 4 x 2 x 2 = 64 machines
  array.rows: [8, 16, 32, 64]
  array.cols: [8, 16, 32, 64]
  inp.rows: [2048, 8192]
  dram.bytes_per_cycle: [8, 32]
workloads:
{workloads}
"""


def write_sweep(directory: Path, kernels: int, resnet: bool, resnet_model: bool) -> Path:
    """The sweep file and one kernel file per suite kernel (or the ResNet-50 layers, or the
    int8 ResNet-50 model), in ``directory``."""
    entries = []
    for name in KERNELS[:kernels]:
        path = directory / f"{name}.py"
        path.write_text(KERNEL_FILE.format(suite=str(SUITE), name=name))
        entries.append(f"  - kernel: {path.name}")
    workloads = "  - layers:\n" + RESNET if resnet else "\n".join(entries)
    if resnet_model:
        write_resnet50(directory / "resnet50_int8.onnx")
        workloads = RESNET_MODEL
    sweep = directory / "bench.yaml"
    sweep.write_text(SWEEP.format(base=MACHINES / "npu32x32.yaml", workloads=workloads))
    return sweep


def write_resnet50(path: Path) -> None:
    """The int8 QDQ ResNet-50 the model command takes, built here; prints the time taken."""
    import onnx

    from tensorize.model import networks

    start = time.perf_counter()
    onnx.save(networks.quantize(networks.resnet50(0), samples=SAMPLES), path)
    print(f"# built and quantized ResNet-50 in {time.perf_counter() - start:.1f} s")


def measure(label: str, sweep_path: Path, executor, workers: int, out: Path):
    """Run the sweep once; print its row; return the overhead per point in ms and the
    outcome."""
    sweep = load_sweep(sweep_path)
    start = time.perf_counter()
    outcome = run_sweep(sweep, out, executor, stream=io.StringIO(), plots=False)
    wall = time.perf_counter() - start
    points = len(outcome.rows)
    compute = sum(r["seconds"] or 0.0 for r in outcome.rows) / points
    overhead = wall * workers / points - compute
    print(f"{label:<22}{points:>7}{outcome.failed:>7}{wall:>9.1f}{points / wall:>10.2f}"
          f"{1e3 * compute:>12.0f}{1e3 * overhead:>12.0f}", flush=True)
    return overhead, outcome


def print_model_totals(outcome, sweep_path: Path, shown: int = 5) -> None:
    """The model's total cycles over its swept layers on the ``shown`` fastest machines
    that ran them all."""
    totals = model_totals(outcome.rows, load_sweep(sweep_path).workloads)
    print()
    print(model_totals_text(totals, shown))


def main() -> None:
    """Run the three executors and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=len(KERNELS),
                        help=f"how many of the suite's int8 kernels (1..{len(KERNELS)})")
    parser.add_argument("--resnet", action="store_true",
                        help="the ResNet-50 3x3 layers instead of the suite's kernels")
    parser.add_argument("--resnet-model", action="store_true",
                        help="the 3x3 layers of the generated int8 ResNet-50 model")
    parser.add_argument("--skip-dask", action="store_true", help="only the process pool")
    args = parser.parse_args()
    print(f"# {' '.join(sys.argv)}  ({platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()})")
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(temporary)
        sweep = write_sweep(directory, args.kernels, args.resnet, args.resnet_model)
        print(f"{'executor':<22}{'points':>7}{'failed':>7}{'wall s':>9}{'points/s':>10}"
              f"{'compute ms':>12}{'overhead ms':>12}")
        measure("local pool, 1 worker", sweep, LocalExecutor(1), 1, directory / "pool1")
        pool, outcome = measure("local pool, 2 workers", sweep, LocalExecutor(2), 2,
                                directory / "pool2")
        if not args.skip_dask:
            dask, _ = measure("dask local, 2 workers", sweep, DaskExecutor(None, 2), 2,
                              directory / "dask2")
            print(f"Dask's overhead per point over the pool's (2 workers each): "
                  f"{1e3 * (dask - pool):+.0f} ms")
        if args.resnet_model:
            print_model_totals(outcome, sweep)


if __name__ == "__main__":
    main()
