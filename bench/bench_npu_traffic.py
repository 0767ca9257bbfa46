"""DRAM traffic of the NPU's GEMM schedule on ResNet-50's matrix layers, before and after the
traffic model chose the tiles.

Each convolution is the implicit GEMM the NPU runs (M = batch x output pixels, N = output
channels, K = input channels x kernel area), the classifier a GEMM of one row; extents are
padded to the GEMM intrinsic's tile as the schedule pads them, operands int8, the output
int32. For the built-in 16x16 machine and the 32x32 one (examples/machines/npu32x32.yaml),
prints per distinct layer shape the bytes the schedule moves over the minimum (each operand
read once, the output written once): ``before`` with the old choice (the tallest row tile
that fits, one call's columns, one call's depth, row tiles outside), ``after`` with the
least-traffic tiling (tensorize/engine/npu_traffic.py), then the whole network's totals.
With ``--simulate``, each layer's GEMM also runs on the simulator under the chosen tiling and
its measured bytes are printed beside the model's. Figures, not assertions.

    .venv/bin/python bench/bench_npu_traffic.py [--simulate]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import onnx
from onnx import numpy_helper

from intrinsics import default_registry
from simulator import load_machine
from targets import npu
from tensorize.engine import auto_tensorize
from tensorize.engine.npu_schedule import gemm_axes, gemm_shape
from tensorize.engine.npu_traffic import GemmShape, NpuTiling, best, traffic
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


def old_choice(shape: GemmShape, config) -> NpuTiling:
    """The schedule's choice before the traffic model: the tallest row tile dividing M that
    fits one bank of the input and accumulator memories."""
    limit = min(config.inp.bank_rows, config.acc.bank_rows)
    rows = [t for t in range(shape.ti, shape.m + 1, shape.ti) if shape.m % t == 0 and t <= limit]
    return NpuTiling(max(rows) if rows else shape.ti)


def padded(m: int, n: int, k: int, registry) -> GemmShape:
    """The GEMM as the schedule sees it: extents padded to the GEMM intrinsic's tile."""
    gemm = next(i for i in registry.for_target("npu") if i.kind == "compute" and i.reduce_vars()
                and not i.resets)
    ti, tj, tk = gemm_axes(gemm).extents
    up = lambda x, t: -(-x // t) * t  # noqa: E731
    return gemm_shape(gemm, (up(m, ti), up(n, tj), up(k, tk)))


def simulated_bytes(m: int, n: int, k: int, config, registry) -> int:
    """DRAM bytes of the GEMM's NPU program, simulated for time only."""
    func = auto_tensorize(suite_kernels.builders()["gemm_int8"](m, n, k), "npu",
                          registry=registry, config=config).func
    return sum(run.dram_bytes for run in timed_runs(func, config, registry))


def report(label: str, path: Path | None, simulate: bool) -> None:
    """Print the table of one machine."""
    config = load_machine() if path is None else npu.load_machine(path)
    registry = default_registry() if path is None else npu.machine_registry(path)
    print(f"\n{label} ({config.name}): bytes moved / minimum bytes")
    header = f"{'M x N x K':>20} {'count':>5} {'before':>7} {'after':>7}  tiling"
    print(header + ("   simulated bytes (model)" if simulate else ""))
    totals = Counter()
    for (m, n, k), count in sorted(resnet50_gemms().items()):
        shape = padded(m, n, k, registry)
        before, chosen = old_choice(shape, config), best(shape, config)
        old, new = traffic(shape, before), traffic(shape, chosen)
        totals.update({"min": count * shape.minimum, "before": count * old,
                       "after": count * new})
        line = (f"{f'{m} x {n} x {k}':>20} {count:>5} {old / shape.minimum:>7.2f} "
                f"{new / shape.minimum:>7.2f}  {chosen.describe()}")
        if simulate:
            start = time.perf_counter()
            measured = simulated_bytes(m, n, k, config, registry)
            line += (f"   {measured:,} ({new:,}) "
                     f"{time.perf_counter() - start:.1f} s")
        print(line)
    print(f"{'network':>20} {'':>5} {totals['before'] / totals['min']:>7.2f} "
          f"{totals['after'] / totals['min']:>7.2f}  ({totals['after']:,} of "
          f"{totals['min']:,} bytes at least)")


def main() -> None:
    """Print both machines' tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulate", action="store_true",
                        help="also simulate each layer's GEMM and print its measured bytes")
    args = parser.parse_args()
    for label, path in MACHINES.items():
        report(label, path, args.simulate)


if __name__ == "__main__":
    main()
