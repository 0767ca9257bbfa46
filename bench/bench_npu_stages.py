"""A network on the NPU as a program per layer and as linked programs per stage, side by
side in one process (``tensorize model --programs stage``): consecutive device layers joined
into one program over one DRAM image, each reading the layer before's output where it lies,
its loads starting while that layer drains. Both runs are checked exact against
onnxruntime, every layer.

    .venv/bin/python bench/bench_npu_stages.py                # ResNet-50 on the 16x16 NPU
    .venv/bin/python bench/bench_npu_stages.py --networks resnet50 mobilenetv2 bert_layer
    .venv/bin/python bench/bench_npu_stages.py --machine examples/machines/npu32x32.yaml

Per network: the layers in stages, the stages and how many layers the longest links (a
layer whose program has host stages, an epilogue on the host, runs as a program of its own
and in no stage), the network's simulated cycles both ways and what linking saves, the DRAM bytes (the same: linking moves
transfers, it does not change them), why the stages end (counted by kind), and the tool's
wall time both ways. Figures, not assertions.
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import npu_table

from ir.onnx import import_model
from tensorize.model import run_model


def ends_kind(ends: str | None) -> str:
    """What a stage's end says, in a few words."""
    if ends is None:
        return "the network's end"
    if "needs the host to lay out" in ends:
        return "an input laid out anew"
    if "runs on the host" in ends:
        return "a host layer"
    return "a program of its own"


HEADER = ("| network | machine | layers in stages | stages | longest | cycles, a program "
          "per layer | cycles, a program per stage | saved | DRAM bytes | stages end at | "
          "tool time, per layer / per stage | exact |")


def compare(name: str, path: Path, ctx) -> None:
    """Run the network both ways and print its line."""
    graph = import_model(path)
    start = time.perf_counter()
    alone = run_model(graph, ctx)
    alone_s = time.perf_counter() - start
    start = time.perf_counter()
    staged = run_model(graph, ctx, programs="stage")
    staged_s = time.perf_counter() - start
    # Layers in no stage (a program with host stages) run as programs of their own.
    cycles, linked = (sum(r["cycles"] or 0 for r in run.records) for run in (alone, staged))
    dram = [sum(r["dram_bytes"] or 0 for r in run.records) for run in (alone, staged)]
    sizes = [len(stage.layers) for stage in staged.stages]
    ends = collections.Counter(ends_kind(stage.ends) for stage in staged.stages)
    why = ", ".join(f"{n} {kind}" for kind, n in ends.most_common())
    print(f"| {name} | {ctx.machine.name} | {sum(sizes)} | {len(sizes)} | "
          f"{max(sizes, default=0)} | "
          f"{cycles:,} | {linked:,} | {cycles - linked:,} ({(cycles - linked) / cycles:.3%}) "
          f"| {'same' if dram[0] == dram[1] else f'{dram[0]:,} / {dram[1]:,}'} | {why} | "
          f"{alone_s:.1f} s / {staged_s:.1f} s | "
          f"{'yes' if alone.ok and staged.ok else 'NO'} |", flush=True)


def main() -> None:
    """Parse the options and print the table."""
    npu_table(__doc__, HEADER, compare)


if __name__ == "__main__":
    main()
