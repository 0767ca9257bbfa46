"""DRAM traffic and cycles of the NPU's GEMM schedule on ResNet-50's matrix layers, with the
narrow tile choice and the one the schedule takes.

Each convolution is the implicit GEMM the NPU runs (M = batch x output pixels, N = output
channels, K = input channels x kernel area), the classifier a GEMM of one row; extents are
padded to the GEMM intrinsic's tile as the schedule pads them, operands int8, the output
int32. For the built-in 16x16 machine and the 32x32 one (examples/machines/npu32x32.yaml),
prints per distinct layer shape the bytes the schedule moves over the minimum (each operand
read once, the output written once), by the traffic model (tensorize/engine/npu_traffic.py):

- ``narrow``: the first step of the choice, and the whole of it before tiles spanned banks
  and grew wider: among tiles of at most ``token_depth / 2`` column blocks, each staged
  copy within one bank (``npu_cycles.choose_narrow``);
- ``now``: the schedule's choice (tensorize/engine/npu_cycles.py), which may take a larger
  tile, one accumulator copy, or rows padded up to its row tile for the traffic it saves;

then the whole network's totals, the shapes within 1.2x, and the least traffic of any
fitting tiling of each layer (any width, whatever its cycles), summed. With ``--simulate``, each
layer's kernel as ``tensorize model`` runs it (on a machine with a requantisation stage the
GEMM with its bias and requantisation on the vector unit, elsewhere the GEMM alone) is
simulated for time under both tilings, and the 54 layers' cycles are summed: the network's
cycles of ``tensorize model resnet50_int8.onnx --target npu`` (its DRAM port, latency and
epilogues included). Figures, not assertions.

    .venv/bin/python bench/bench_npu_traffic.py [--simulate]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import onnx
from onnx import numpy_helper

from intrinsics import default_registry
from ir.onnx.kernels import Requantisation, matmul_requantised
from simulator import load_machine
from targets import npu
from tensorize.engine import auto_tensorize
from tensorize.engine.npu_cycles import choose_narrow
from tensorize.engine.npu_schedule import choose_tiling, gemm_axes, gemm_shape
from tensorize.engine.npu_traffic import (GemmShape, NpuTiling, in_banks, padded_m, ranked,
                                          traffic)
from tensorize.engine.tune import timed_runs
from tensorize.model.networks import resnet50

import suite_kernels  # bench/ is on the path: the benchmarks run as scripts

ROOT = Path(__file__).resolve().parents[1]
MACHINES = {"16x16": None, "32x32": ROOT / "examples" / "machines" / "npu32x32.yaml"}


def resnet50_gemms() -> Counter[tuple[int, int, int]]:
    """(M, N, K) of every Conv and Gemm of ResNet-50 at 224 x 224, with its count."""
    model = onnx.shape_inference.infer_shapes(resnet50())
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in (*model.graph.value_info, *model.graph.output)}
    weights = {w.name: numpy_helper.to_array(w).shape for w in model.graph.initializer}
    gemms: Counter[tuple[int, int, int]] = Counter()
    for node in model.graph.node:
        if node.op_type == "Conv":
            n, cout, h, w = shapes[node.output[0]]
            _, cin, kh, kw = weights[node.input[1]]
            gemms[(n * h * w, cout, cin * kh * kw)] += 1
        elif node.op_type == "Gemm":
            rows, cols = shapes[node.output[0]]
            gemms[(rows, cols, weights[node.input[1]][1])] += 1
    return gemms


def narrow_choice(shape: GemmShape, config) -> NpuTiling:
    """The first step of the schedule's choice: the narrow choice among the tilings whose
    staged copies each fit one bank."""
    return choose_narrow(shape, config, [t for t in ranked(shape, config)
                                         if in_banks(shape, t, config)])


def padded(m: int, n: int, k: int, registry, config) -> GemmShape:
    """The GEMM as the schedule sees it: extents padded to the GEMM intrinsic's tile, with
    the bias and scale vectors of :func:`layer_kernel`'s epilogue beside the sums on a
    machine with a requantisation stage."""
    gemm = next(i for i in registry.for_target("npu") if i.kind == "compute" and i.reduce_vars()
                and not i.resets)
    ti, tj, tk = gemm_axes(gemm).extents
    up = lambda x, t: -(-x // t) * t  # noqa: E731
    shape = gemm_shape(gemm, (up(m, ti), up(n, tj), up(k, tk)))
    return replace(shape, acc_vectors=2 if config.requant is not None else 0)


def layer_kernel(shape: GemmShape, config, rows: int):
    """The layer's kernel as the model path runs it, its rows padded to ``rows`` (the
    schedule's row tile, in the kernel as ``tensorize model`` pads them, so that the
    epilogue stays in the program): the GEMM with its bias and requantisation when the
    machine has a requantisation stage, else the GEMM alone."""
    if config.requant is not None:
        return matmul_requantised(rows, shape.k, shape.n, Requantisation(0))
    return suite_kernels.builders()["gemm_int8"](rows, shape.n, shape.k)


def simulated_cycles(shape: GemmShape, tiling: NpuTiling, config, registry) -> int:
    """Cycles of the layer's kernel under ``tiling``, simulated for time only (every
    stage on the NPU: none is left on the host)."""
    func = auto_tensorize(layer_kernel(shape, config, padded_m(shape, tiling)), "npu",
                          registry=registry, config=config, tiling=tiling).func
    if not all(stage.on_npu for stage in npu.split_stages(func, registry.get)):
        raise SystemExit(f"{shape.m} x {shape.n} x {shape.k} under {tiling.describe()}: a "
                         "stage runs on the host, whose time the figure would leave out")
    return sum(run.cycles for run in timed_runs(func, config, registry))


def report(label: str, path: Path | None, simulate: bool) -> None:
    """Print the table of one machine."""
    config = load_machine() if path is None else npu.load_machine(path)
    registry = default_registry() if path is None else npu.machine_registry(path)
    print(f"\n{label} ({config.name}): bytes moved / minimum bytes")
    header = (f"{'M x N x K':>20} {'count':>5} {'narrow':>8} {'now':>6}  "
              f"{'narrow tiling':>16} {'now tiling':>16}")
    print(header + ("   cycles narrow -> now" if simulate else ""))
    totals: Counter[str] = Counter()
    start, cpu = time.perf_counter(), time.process_time()
    for (m, n, k), count in sorted(resnet50_gemms().items()):
        shape = padded(m, n, k, registry, config)
        before = narrow_choice(shape, config)
        now = choose_tiling(shape, config)
        least = shape.minimum
        for name, tiling in (("narrow", before), ("now", now)):
            totals.update({name: count * traffic(shape, tiling),
                           f"{name} within": int(traffic(shape, tiling) <= 1.2 * least)})
        totals.update({"min": count * least, "shapes": 1,
                       "fitting": count * traffic(shape, ranked(shape, config)[0])})
        line = (f"{f'{m} x {n} x {k}':>20} {count:>5} {traffic(shape, before) / least:>8.2f} "
                f"{traffic(shape, now) / least:>6.2f}  "
                f"{before.describe():>16} {now.describe():>16}")
        if simulate:
            old = simulated_cycles(shape, before, config, registry)
            new = old if now == before else simulated_cycles(shape, now, config, registry)
            totals.update({"cycles narrow": count * old, "cycles now": count * new})
            line += f"   {old:,} -> {new:,}"
        print(line)
    print(f"{'network':>20} {'':>5} {totals['narrow'] / totals['min']:>8.2f} "
          f"{totals['now'] / totals['min']:>6.2f}  "
          f"({totals['now']:,} of {totals['min']:,} bytes at least)")
    print(f"{'within 1.2x':>20} {'':>5} {totals['narrow within']:>8} "
          f"{totals['now within']:>6}  of {totals['shapes']} shapes")
    print(f"{'least fitting':>20} {'':>5} {'':>8} {totals['fitting'] / totals['min']:>6.2f}  "
          f"(each layer's least-traffic tiling that fits)")
    if simulate:
        print(f"{'network cycles':>20}: {totals['cycles narrow']:,} -> "
              f"{totals['cycles now']:,} ({time.perf_counter() - start:.0f} s wall, "
              f"{time.process_time() - cpu:.0f} s CPU)")


def main() -> None:
    """Print both machines' tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulate", action="store_true",
                        help="also simulate each layer's kernel and sum the network's cycles")
    args = parser.parse_args()
    for label, path in MACHINES.items():
        report(label, path, args.simulate)


if __name__ == "__main__":
    main()
