"""Kernels tensorized for the NPU, end to end: tensorize, emit the programs, simulate them.

For each kernel, prints the time to tensorize and to emit, the simulated cycles and MAC
utilisation on the built-in machine (intrinsics/npu.yaml), the wall time of the functional
simulation, and the simulator's speed in simulated cycles and instructions per wall second.
Kernels: int8 GEMMs 256^3 and 1024^3, and the ResNet-50 3x3 layer (1x56x56x64 -> 64).
Figures, not assertions.

    .venv/bin/python bench/bench_npu.py [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from intrinsics import default_registry
from simulator import load_machine, simulate
from targets import npu
from tensorize.engine import auto_tensorize

import suite_kernels  # bench/ is on the path: the benchmarks run as scripts


def main() -> None:
    """Print one row per kernel."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip the 1024^3 GEMM")
    args = parser.parse_args()
    builders = suite_kernels.builders()
    kernels = [("GEMM 256^3 int8", builders["gemm_int8"](m=256, n=256, k=256))]
    if not args.quick:
        kernels.append(("GEMM 1024^3 int8", builders["gemm_int8"](m=1024, n=1024, k=1024)))
    kernels.append(("ResNet-50 conv 3x3 56x56x64", builders["conv2d_nhwc_int8"](
        batch=1, height=56, width=56, in_channels=64, out_channels=64)))
    config, registry = load_machine(), default_registry()
    print(f"{'kernel':<30}{'tensorize':>10}{'emit':>8}{'insns':>8}{'cycles':>11}{'MAC util':>9}"
          f"{'sim wall':>9}{'Mcycles/s':>10}{'insns/s':>9}")
    for label, func in kernels:
        start = time.perf_counter()
        result = auto_tensorize(func, "npu", registry=registry, config=config)
        tensorize_s = time.perf_counter() - start
        stages = [s for s in npu.split_stages(result.func, registry.get) if s.on_npu]
        start = time.perf_counter()
        compiled = [npu.compile_stage(s, config, registry.get) for s in stages]
        emit_s = time.perf_counter() - start
        cycles = macs = insns = 0
        start = time.perf_counter()
        for program in compiled:
            image = np.zeros(program.dram_bytes, np.uint8)
            run = simulate(program.program, config, image)
            cycles, macs, insns = cycles + run.cycles, macs + run.useful_macs, insns + len(
                program.program)
        sim_s = time.perf_counter() - start
        peak = cycles * config.array.rows * config.array.cols
        print(f"{label:<30}{tensorize_s:>9.2f}s{emit_s:>7.1f}s{insns:>8}{cycles:>11}"
              f"{100 * macs / peak:>8.1f}%{sim_s:>8.2f}s{cycles / sim_s / 1e6:>10.1f}"
              f"{insns / sim_s:>9.0f}")


if __name__ == "__main__":
    main()
