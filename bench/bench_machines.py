"""What limits a layer on each NPU: kernels tensorized, emitted and simulated on machines
described in YAML, with the roofline the run reports.

For each int8 machine (default: the built-in intrinsics/npu.yaml and every
examples/machines/*.yaml whose array multiplies int8; a float array runs no int8 kernel) and
kernel, prints the simulated cycles and time at the machine's clock, MAC utilisation, the
DRAM bandwidth achieved, the roofline bound (the larger of MACs / (R * C) and the layer's
tensors over the DRAM port), which of the two binds, and the run's cycles over the bound; then
the tile search's model against the simulator for the tile heights it simulates. Figures, not
assertions.

    .venv/bin/python bench/bench_machines.py [MACHINE.yaml ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from intrinsics import default_registry
from targets import npu
from tensorize.engine import auto_tensorize
from tensorize.engine.tune import tune_npu
from tensorize.runners.npu import simulate_and_measure

import suite_kernels  # bench/ is on the path: the benchmarks run as scripts

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "machines"


def main() -> None:
    """Print one row per machine and kernel, then the tile search of the GEMM."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("machines", nargs="*", type=Path, help="machine files (YAML)")
    args = parser.parse_args()
    machines = args.machines or [None, *sorted(EXAMPLES.glob("*.yaml"))]
    builders = suite_kernels.builders()
    kernels = [("GEMM 256^3 int8", builders["gemm_int8"](m=256, n=256, k=256)),
               ("ResNet-50 conv 3x3 56x56x64", builders["conv2d_nhwc_int8"](
                   batch=1, height=56, width=56, in_channels=64, out_channels=64))]
    print(f"{'machine':<16}{'kernel':<30}{'cycles':>10}{'us':>9}{'MAC util':>9}"
          f"{'B/cycle':>9}{'bound':>10}{'binds':>11}{'/bound':>8}")
    tuned, skipped = [], []
    for path in machines:
        config = npu.load_machine(path)
        if config.is_float:
            skipped.append(config.name)
            continue
        registry = npu.machine_registry(path) if path else default_registry()
        for label, func in kernels:
            result = auto_tensorize(func, "npu", registry=registry, config=config)
            run = simulate_and_measure(result.func, {}, config, registry)
            roof = run.roofline
            print(f"{config.name:<16}{label:<30}{run.cycles:>10}"
                  f"{run.cycles / config.clock_mhz:>9.1f}{100 * run.utilisation:>8.1f}%"
                  f"{run.bytes_per_cycle:>9.2f}{roof.bound_cycles:>10.0f}"
                  f"{roof.binds:>11}{run.cycles / roof.bound_cycles:>8.2f}")
        tuned.append((config.name, tune_npu(kernels[0][1], config, registry)[1]))
    for name, trials in tuned:
        print(f"\n{name}, {kernels[0][0]}, tile search:")
        for trial in trials:
            print(f"  {trial.describe()}")
    for name in skipped:
        print(f"\n{name}: skip: a float array, and these kernels are int8")


if __name__ == "__main__":
    main()
