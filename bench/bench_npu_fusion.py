"""A network on the NPU with and without fusion, side by side in one process: with fusion
each integer layer's bias and requantisation run on the vector unit in the GEMM's own
program, so the int32 sums never leave the accumulator memory; without (``tensorize model
--unfused``) the GEMM stores its int32 sums and a second program loads them back,
requantises and stores the int8 result. Both runs are checked exact against onnxruntime.

    .venv/bin/python bench/bench_npu_fusion.py                 # ResNet-50 on the 16x16 NPU
    .venv/bin/python bench/bench_npu_fusion.py --networks resnet50 mobilenetv2 --small
    .venv/bin/python bench/bench_npu_fusion.py --machine examples/machines/npu32x32.yaml

Per network: the simulated cycles and the DRAM bytes with and without fusion, the bytes
fusion saves, those bytes as cycles of the DRAM port (bytes / the port's bytes per cycle:
the time the port spends moving them), and the cycles fusion saves. Figures, not
assertions.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import npu_table

from ir.onnx import import_model
from tensorize.model import run_model


HEADER = ("| network | machine | layers with the epilogue in the GEMM's program | cycles, "
          "fused | cycles, unfused | unfused / fused | DRAM bytes, fused | DRAM bytes, "
          "unfused | bytes saved | saved bytes as port cycles | cycles saved | exact |")


def compare(name: str, path: Path, ctx) -> None:
    """Run the network both ways and print its line."""
    graph = import_model(path)
    fused = run_model(graph, ctx)
    unfused = run_model(graph, ctx, fusion=False)
    rows = []
    for run in (fused, unfused):
        simulated = [r for r in run.records if r["cycles"]]
        rows.append((sum(r["cycles"] for r in simulated),
                     sum(r["dram_bytes"] or 0 for r in simulated), run.ok))
    (cycles, dram, ok), (cycles_u, dram_u, ok_u) = rows
    fused_layers = sum("in the program" in (n or "") for n in fused.notes)
    port = ctx.machine.dram.bytes_per_cycle
    saved = dram_u - dram
    print(f"| {name} | {ctx.machine.name} | {fused_layers} | {cycles:,} | {cycles_u:,} | "
          f"{cycles_u / cycles:.3f}x | {dram:,} | {dram_u:,} | {saved:,} | "
          f"{saved / port:,.0f} | {cycles_u - cycles:,} | "
          f"{'yes' if ok and ok_u else 'NO'} |", flush=True)


def main() -> None:
    """Parse the options and print the table."""
    npu_table(__doc__, HEADER, compare)


if __name__ == "__main__":
    main()
