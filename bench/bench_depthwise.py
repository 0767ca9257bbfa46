"""Depthwise 3x3 convolution: on the host, or on the NPU as the tensorizer runs it, grouped
GEMMs of diagonal weight tiles.

A depthwise layer matches no GEMM intrinsic (its channel indexes input, weight and output
alike); the NPU schedule first rewrites it (``diagonalize``): with T the GEMM's columns,
G = C / T groups, and D[g, rh, rw, ci, co] = W[rh, rw, g*T + co] if ci == co else 0,

    O[0, h, w, g*T + co] = sum over rh, rw, ci of P[0, h + rh, w + rw, g*T + ci] * D[g, rh, rw, ci, co]

a GEMM per group with K = 9 T, of which one term in T is not zero. For each layer, prints the
host's time (the reference executor's LLVM JIT, best of 5 runs) and, for the NPU, the host
stages the tensorized layer keeps (building D, unpacking the output; best of 5 each: the
program's loads gather the input windows and the diagonal tiles themselves,
``targets/npu/remap.py``), the simulated NPU time on the built-in machine, its MAC
utilisation and the share of those MACs that are not zero, and whether the result is exact.
Figures, not assertions.

    .venv/bin/python bench/bench_depthwise.py
"""

from __future__ import annotations

import time

import numpy as np

import ir
from intrinsics import default_registry
from ir import te
from simulator import load_machine
from targets import host, npu
from targets.npu.stages import host_function
from tensorize.engine import auto_tensorize
from tensorize.runners.npu import simulate_and_measure

LAYERS = [(112, 32), (56, 64), (56, 128), (14, 512)]  # (height = width, channels)


def _i32(x: ir.Expr) -> ir.Expr:
    return ir.cast("int32", x)


def depthwise(size: int, channels: int) -> ir.PrimFunc:
    """O[0, h, w, c] = sum over rh, rw of I[0, h + rh, w + rw, c] * W[rh, rw, c] (the input
    is given padded)."""
    I = te.placeholder((1, size + 2, size + 2, channels), "int8", "I")
    W = te.placeholder((3, 3, channels), "int8", "W")
    rh, rw = te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw")
    O = te.compute((1, size, size, channels), lambda n, h, w, c: te.sum(
        _i32(I[n, h + rh, w + rw, c]) * _i32(W[rh, rw, c]), axis=[rh, rw]), "O")
    return te.create_prim_func([I, W, O], "depthwise")


def best_of(runs: int, call, *args) -> float:
    """The shortest of ``runs`` timed calls of ``call(*args)``, in seconds."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        call(*args)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    """Print one row per layer."""
    config, registry = load_machine(), default_registry()
    tile = config.array.cols
    rng = np.random.default_rng(0)
    print(f"{'layer (3x3 depthwise)':<24}{'host':>9}{'NPU':>9}{'packing':>9}{'NPU+pack':>9}"
          f"{'cycles':>9}{'MAC util':>9}{'non-zero':>9}{'DRAM x':>8}  exact")
    for size, channels in LAYERS:
        I = rng.integers(-128, 128, (1, size + 2, size + 2, channels)).astype(np.int8)
        W = rng.integers(-128, 128, (3, 3, channels)).astype(np.int8)
        compiled = host.compile(depthwise(size, channels))
        want = np.zeros((1, size, size, channels), np.int32)
        host_s = best_of(5, compiled, I, W, want)
        result = auto_tensorize(depthwise(size, channels), "npu", registry=registry,
                                config=config, intrinsic="npu_gemm")
        run = simulate_and_measure(result.func, {"I": I, "W": W}, config, registry)
        got = run.run.outputs["O"]
        packing_s = 0.0
        # The host stages the plan still runs: the copies its loads and stores do instead
        # (targets/npu/remap.py) cost the host nothing.
        for planned in npu.plan(result.func, config, lookup=registry.get).stages:
            if planned.compiled is None:
                sub = host_function(result.func, planned.stage)
                arrays = [np.zeros(p.shape, p.dtype.numpy) for p in sub.params]
                packed = host.compile(sub)
                packing_s += best_of(5, packed, *arrays)
        npu_s = run.cycles / config.clock_mhz / 1e6
        tensors = I.nbytes + W.nbytes + want.nbytes
        label = f"{size}x{size}x{channels}"
        print(f"{label:<24}{host_s * 1e3:>7.2f}ms{npu_s * 1e3:>7.2f}ms{packing_s * 1e3:>7.2f}ms"
              f"{(npu_s + packing_s) * 1e3:>7.2f}ms{run.cycles:>9}{100 * run.utilisation:>8.1f}%"
              f"{100 / tile:>8.1f}%{run.dram_bytes / tensors:>7.1f}x  {np.array_equal(got, want)}")


if __name__ == "__main__":
    main()
