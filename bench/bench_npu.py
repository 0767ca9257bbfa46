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

    .venv/bin/python bench/bench_npu.py [--quick] [--machine FILE]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

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
    stages = [s for s in npu.split_stages(result.func, registry.get) if s.on_npu]
    start, cpu = time.perf_counter(), time.process_time()
    compiled = [npu.compile_stage(s, config, registry.get) for s in stages]
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


def main() -> None:
    """Print one row per kernel, each measured in a fresh process."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip the 1024^3 and 4096^3 GEMMs")
    parser.add_argument("--machine", help="a YAML file describing the NPU (default: built-in)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process's kernel
    args = parser.parse_args()
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
