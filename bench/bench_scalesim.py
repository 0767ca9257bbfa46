"""Cross-check of the simulated NPU's cycles against SCALE-Sim, layer by layer, on a whole
int8 network (ResNet-50 v1 by default; MobileNet-v2 or any model with ``--model``).

Each matrix layer the NPU runs (a convolution as an implicit GEMM: M = N*OH*OW output pixels,
K = C*KH*KW window, N = output channels; a dense layer as it is) is taken with the GEMM shape
the engine's match gives it (``tensorize.match``: the product of the layer's iterators fused
onto the intrinsic's M, N and K), written as a SCALE-Sim GEMM topology, with a SCALE-Sim
config for the same array (rows x cols, ``ws`` or ``os`` from the machine's dataflow, SRAM
sizes from its scratchpads, bandwidth mode CALC: stall-free). Beside SCALE-Sim's cycles the
script prints:

- SCALE-Sim's closed form (:func:`closed_form`): ws ``ceil(K/R) * ceil(N/C)`` folds of
  ``2R + C + M - 2`` cycles, os ``ceil(M/R) * ceil(N/C)`` folds of ``R + C + K - 2``; its
  report gives the index of its last cycle, counted from 0, so it must equal the closed form
  minus 1 on every layer: a check on how the layers were fed to it;
- our cycles for the layer in ``tensorize model``'s run (``tensorize.model.run_model``:
  the DRAM port, its latency and each layer's round trip through DRAM included), their
  ratio to SCALE-Sim's, our roofline bound and DRAM bytes;
- our array's floor for the same layer, by our own timing rules with every stall removed
  (ws: the input rows of the GEMM padded to the intrinsic's tile, streamed back to back,
  plus one weight preload and one drain; :func:`our_floor`): the figure to set beside
  SCALE-Sim's, which pays a preload and a drain on every fold.

SCALE-Sim (``pip install scalesim``, or this project's ``[scalesim]`` extra) runs in one of
two ways:

- ``--scalesim compute`` (default): in this process, SCALE-Sim's own operand matrices and
  systolic-array model for the dataflow, counting the cycles of the demand matrices it
  builds, without the cycle-by-cycle SRAM model it runs after them (which in CALC mode adds
  no stall); ResNet-50 takes half a minute (16x16 weight-stationary) to two minutes
  (32x32 output-stationary).
- ``--scalesim full``: its whole run (``scalesim.scale_sim``), in a subprocess of
  ``--scalesim-python`` in a temporary directory, reading ``COMPUTE_REPORT.csv``; its SRAM
  model steps through every cycle in Python, 8,000 to 12,000 cycles a second, so ResNet-50
  takes half an hour or more: use ``--layers`` to pick a few. SCALE-Sim 3.0.0 fails under
  numpy >= 2.4 (scalesim-project/SCALE-Sim issue 160), so give it an interpreter of its own
  with an older numpy: ``python -m venv /tmp/ss && /tmp/ss/bin/pip install scalesim
  'numpy<2.4'``.

Figures, not assertions; ``--json FILE`` writes them as data.

    .venv/bin/python bench/bench_scalesim.py
    .venv/bin/python bench/bench_scalesim.py --machine examples/machines/npu32x32.yaml
    .venv/bin/python bench/bench_scalesim.py --network mobilenetv2 --json out.json
    .venv/bin/python bench/bench_scalesim.py --scalesim full --scalesim-python \\
        /tmp/ss/bin/python --layers 0 1 2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import onnx

from intrinsics import Registry, default_registry
from intrinsics.runnable import gemm_axes
from ir import BlockRealize, IterKind
from ir.onnx import Graph, import_model
from simulator import MachineConfig
from targets.npu import load_machine, machine_registry
from tensorize.match import Mismatch, match_block
from tensorize.model import networks, run_model
from tensorize.runners import make_context
from tensorize.schedule import tree

class BenchError(Exception):
    """A cross-check this script cannot complete: a bad ``--layers``, a layer the match
    cannot map, or SCALE-Sim's own failure."""


# SCALE-Sim's names for the two dataflows our machines have.
DATAFLOWS = {"weight_stationary": "ws", "output_stationary": "os"}
INSTALL = "pip install scalesim   (or: pip install -e '.[scalesim]')"


@dataclass(frozen=True)
class GemmLayer:
    """One matrix layer as the NPU computes it: its name, the GEMM's M, N and K, the
    intrinsic's tile (ti, tj, tk: the M, N, K of one call) and M, N, K padded to it."""

    name: str
    m: int
    n: int
    k: int
    tile: tuple[int, int, int]
    padded: tuple[int, int, int]


@dataclass(frozen=True)
class Array:
    """The systolic array and scratchpads SCALE-Sim is configured with: ``rows`` x ``cols``
    PEs, ``dataflow`` (``ws`` or ``os``), the input, weight and output SRAM sizes in KiB,
    and ``latency``, our array's cycles from its last output to the accumulator."""

    rows: int
    cols: int
    dataflow: str
    ifmap_kb: int
    filter_kb: int
    ofmap_kb: int
    latency: int


def array_of(config: MachineConfig) -> Array:
    """The :class:`Array` of an NPU ``MachineConfig``: its PE grid and dataflow, and its
    scratchpads in KiB (input rows of R int8, weight rows of C int8, accumulator rows of C
    int32)."""
    a = config.array
    if a.dataflow not in DATAFLOWS:
        raise BenchError(f"SCALE-Sim models dataflows {', '.join(DATAFLOWS)}, got "
                         f"{a.dataflow} on machine {config.name}")
    return Array(a.rows, a.cols, DATAFLOWS[a.dataflow],
                 math.ceil(config.inp.rows * a.rows / 1024),
                 math.ceil(config.wgt.rows * a.cols / 1024),
                 math.ceil(config.acc.rows * a.cols * 4 / 1024), a.latency)


def topology_csv(layers: list[GemmLayer]) -> str:
    """SCALE-Sim's GEMM topology (``-i gemm``): a header, then ``name, M, N, K,`` per layer.
    SCALE-Sim drops the text after each row's last comma, so every row ends with one; the
    layers are named by position (``layer0`` ...), as ONNX names may hold commas."""
    rows = ["Layer, M, N, K,"]
    rows += [f"layer{i}, {g.m}, {g.n}, {g.k}," for i, g in enumerate(layers)]
    return "\n".join(rows) + "\n"


def config_text(array: Array, run_name: str = "tensorize") -> str:
    """SCALE-Sim's config file for ``array``: bandwidth mode CALC (no DRAM stall), no
    custom layout, no sparsity; the offsets are SCALE-Sim's defaults. CALC mode reads no
    bandwidth, request buffer or bank setting, but SCALE-Sim's reader requires every key."""
    return "\n".join([
        "[general]", f"run_name = {run_name}", "",
        "[architecture_presets]",
        f"ArrayHeight = {array.rows}", f"ArrayWidth = {array.cols}",
        f"ifmapsramszkB = {array.ifmap_kb}", f"filtersramszkB = {array.filter_kb}",
        f"ofmapsramszkB = {array.ofmap_kb}",
        "IfmapOffset = 0", "FilterOffset = 10000000", "OfmapOffset = 20000000",
        f"Dataflow = {array.dataflow}", "Bandwidth = 10",
        "ReadRequestBuffer = 32", "WriteRequestBuffer = 32", "",
        "[layout]",
        "IfmapCustomLayout = False", "IfmapSRAMBankBandwidth = 10", "IfmapSRAMBankNum = 10",
        "IfmapSRAMBankPort = 2", "FilterCustomLayout = False", "FilterSRAMBankBandwidth = 10",
        "FilterSRAMBankNum = 10", "FilterSRAMBankPort = 2", "",
        "[sparsity]",
        "SparsitySupport = false", "SparseRep = ellpack_block", "OptimizedMapping = false",
        "BlockSize = 8", "RandomNumberGeneratorSeed = 40", "",
        "[run_presets]", "InterfaceBandwidth = CALC", "UseRamulatorTrace = False", ""])


# SCALE-Sim reads a layout file even when no layer uses a custom layout: a header only.
LAYOUT_CSV = "Layer name, unused,\n"


def closed_form(g: GemmLayer, array: Array) -> int:
    """SCALE-Sim's stall-free cycles for ``g`` on ``array``, summed over its folds. A fold
    maps an R x C block of the stationary operand onto the array and streams T rows past
    it. Weight-stationary: the block is K x N weights, T = M, and a fold takes
    ``2R + C + M - 2``: R to load the weights, then M rows skewed across R rows and C
    columns. Output-stationary: the block is M x N outputs, T = K, and a fold takes
    ``R + C + K - 2``: K steps skewed across the array, the outputs read out as it drains.
    SCALE-Sim waits for each fold to drain before the next begins."""
    r, c = array.rows, array.cols
    if array.dataflow == "ws":
        return math.ceil(g.k / r) * math.ceil(g.n / c) * (2 * r + c + g.m - 2)
    return math.ceil(g.m / r) * math.ceil(g.n / c) * (r + c + g.k - 2)


def our_floor(g: GemmLayer, array: Array) -> int:
    """Our array's cycles for ``g`` with every stall removed (the GEMM timing rules of
    docs/simulator.md), over the padded GEMM in the intrinsic's tiles: ``steps`` = (padded
    M / ti) * (padded K / tk) * (padded N / tj) calls. Weight-stationary: one weight preload
    (R), each call's ti input rows back to back (the next tile's preload overlaps the
    current streaming), then one drain through the array (R + C - 2) and into the
    accumulator (``latency``). Output-stationary: each call's ceil(ti / R) sub-tiles start
    every max(tk, R) cycles, and the last one finishes tk + 2R + C - 2 + latency after it
    starts."""
    r, c = array.rows, array.cols
    (m, n, k), (ti, tj, tk) = g.padded, g.tile
    steps = (m // ti) * (k // tk) * (n // tj)
    if array.dataflow == "ws":
        return steps * ti + 2 * r + c - 2 + array.latency
    period = max(tk, r)
    return steps * math.ceil(ti / r) * period - period + tk + 2 * r + c - 2 + array.latency


def parse_compute_report(text: str) -> list[int]:
    """The per-layer ``Total Cycles`` column of SCALE-Sim's ``COMPUTE_REPORT.csv`` (the
    stall-free compute cycles; the column before it adds the prefetch from DRAM)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = [h.strip() for h in lines[0].split(",")]
    column = header.index("Total Cycles")
    return [int(float(line.split(",")[column])) for line in lines[1:]]


def write_inputs(folder: Path, layers: list[GemmLayer], array: Array) -> tuple[Path, ...]:
    """Write the topology, config and layout files into ``folder``; their paths."""
    paths = folder / "topology.csv", folder / "scale.cfg", folder / "layout.csv"
    for path, text in zip(paths, (topology_csv(layers), config_text(array), LAYOUT_CSV)):
        path.write_text(text)
    return paths


def scalesim_compute(folder: Path, layers: list[GemmLayer], array: Array) -> list[int]:
    """SCALE-Sim's cycles from its compute model alone (module docs), in this process: for
    each layer its operand matrices and the dataflow's demand matrices, one row per cycle;
    reported as COMPUTE_REPORT reports them (the last cycle's index)."""
    from scalesim.compute.operand_matrix import operand_matrix
    from scalesim.compute.systolic_compute_os import systolic_compute_os
    from scalesim.compute.systolic_compute_ws import systolic_compute_ws
    from scalesim.layout_utils import layouts
    from scalesim.scale_config import scale_config
    from scalesim.topology_utils import topologies

    topology, cfg_path, layout_path = write_inputs(folder, layers, array)
    config = scale_config()
    config.read_conf_file(str(cfg_path))
    topo = topologies()
    topo.load_arrays(topofile=str(topology), mnk_inputs=True)
    layout = layouts()
    layout.load_arrays(layoutfile=str(layout_path))
    cycles = []
    for index in range(topo.get_num_layers()):
        operands = operand_matrix()
        operands.set_params(config_obj=config, topoutil_obj=topo, layoututil_obj=layout,
                            layer_id=index)
        matrices = {"ifmap_op_mat": operands.get_ifmap_matrix()[1],
                    "filter_op_mat": operands.get_filter_matrix()[1],
                    "ofmap_op_mat": operands.get_ofmap_matrix()[1]}
        if array.dataflow == "ws":
            compute = systolic_compute_ws()
            compute.set_params(config_obj=config, **matrices,
                               ifmap_op_mat_original=operands.ifmap_addr_matrix_original,
                               sparsity_filter_array=operands.sparse_filter_array)
        else:
            compute = systolic_compute_os()
            compute.set_params(config_obj=config, **matrices)
        ofmap_demand = compute.get_demand_matrices()[2]
        cycles.append(ofmap_demand.shape[0] - 1)
    return cycles


# The whole SCALE-Sim run, without its per-cycle trace files (its command line always
# writes them: gigabytes for a network).
FULL_RUN = """
import sys
from scalesim.scale_sim import scalesim
topology, config, layout, out = sys.argv[1:]
run = scalesim(save_disk_space=True, verbose=False, config=config, topology=topology,
               layout=layout, input_type_gemm=True)
run.run_scale(top_path=out)
"""


def scalesim_full(folder: Path, layers: list[GemmLayer], array: Array, python: str) -> list[int]:
    """SCALE-Sim's whole run in a subprocess of ``python``; COMPUTE_REPORT's cycles."""
    paths = write_inputs(folder, layers, array)
    out = folder / "out"
    done = subprocess.run([python, "-c", FULL_RUN, *map(str, paths), str(out)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchError(f"SCALE-Sim ({python}) failed (its 3.0.0 requires numpy < 2.4; "
                         f"see --scalesim-python):\n{done.stderr[-2000:]}")
    return parse_compute_report((out / "tensorize" / "COMPUTE_REPORT.csv").read_text())


class Ours(NamedTuple):
    """Our side of the check: the imported network, its run on the NPU (a ``ModelRun``),
    the machine and the registry it ran with."""

    graph: Graph
    run: Any
    config: MachineConfig
    registry: Registry


def run_ours(model: Path, machine: str | None) -> Ours:
    """Import ``model`` and run it on the NPU of ``machine`` (a file; None: the built-in
    one) as ``tensorize model`` does."""
    graph = import_model(model)
    config = load_machine(machine)
    registry = machine_registry(machine) if machine else default_registry()
    return Ours(graph, run_model(graph, make_context(registry, "npu", machine=config)),
                config, registry)


def gemm_layers(ours: Ours) -> list[tuple[GemmLayer, dict[str, Any]]]:
    """Each layer the NPU ran as a :class:`GemmLayer`, with its record (our cycles, DRAM
    bytes, roofline bound): the shape the engine's best match of the layer's reduction block
    onto the intrinsic the layer ran with gives."""
    by_name = {layer.name: layer for layer in ours.graph.layers}
    found = []
    for record in ours.run.records:
        # A convolution that took the residual add after it is the record "conv + add":
        # its GEMM is the convolution's, its cycles include the add's few on the vector
        # unit. Layers without a PrimFunc of their own (pools, adds) are no matrix layers.
        layer = by_name[record["name"].split(" + ")[0]]
        if record["placement"] != "tensorized" or layer.func is None:
            continue
        func = layer.func
        block = next(s.block.name for s, _ in tree.walk_stmts(func)
                     if isinstance(s, BlockRealize)
                     and any(iv.kind is IterKind.REDUCE for iv in s.block.iter_vars))
        intrinsic = ours.registry.get(record["intrinsic"])
        matches = match_block(func, block, intrinsic, ours.registry)
        if isinstance(matches, Mismatch):
            raise BenchError(f"layer {record['name']}: {matches.reason}")
        best, axes = matches[0], gemm_axes(intrinsic)
        names = [iv.var.name for iv in intrinsic.iter_vars]
        m, n, k = (best.extents[names[p]] for p in axes.positions)
        padded = tuple(best.padded_extents[names[p]] for p in axes.positions)
        found.append((GemmLayer(record["name"], m, n, k, axes.extents, padded), record))
    return found


def build(network: str, folder: Path, small: bool) -> Path:
    """Build and quantise ``network`` (``tensorize.model.networks``; ``small``: the size the
    tests use) into ``folder``."""
    path = folder / f"{network}_int8.onnx"
    start = time.perf_counter()
    onnx.save(networks.quantize(networks.build(network, small=small)), str(path))
    print(f"# built and quantised {network} in {time.perf_counter() - start:.1f} s",
          file=sys.stderr)
    return path


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run both simulators and print the table; the exit status."""
    args = _parser().parse_args(argv)
    if args.scalesim == "compute" and importlib.util.find_spec("scalesim") is None:
        print(f"SCALE-Sim is not installed here; install it with\n    {INSTALL}")
        return 0
    print(f"# {' '.join(sys.argv)}")
    try:
        rows, config, array, seconds = cross_check(args)
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    _print(rows, config, array, args.scalesim, seconds)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"machine": config.name, "array": asdict(array), "scalesim_mode": args.scalesim,
             "layers": rows, "totals": _totals(rows), "seconds": seconds}, indent=1))
    return 0


def cross_check(args: argparse.Namespace):
    """Run the network on our NPU and its matrix layers (``args.layers`` of them) on
    SCALE-Sim: the rows of :func:`side_by_side`, our machine, its :class:`Array`, and the
    seconds each side took."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = Path(args.model) if args.model else build(args.network, folder, args.small)
        start = _clocks()
        ours = run_ours(model, args.machine)
        ours_s = _elapsed(start)
        pairs = gemm_layers(ours)
        chosen = args.layers if args.layers is not None else range(len(pairs))
        if any(not 0 <= i < len(pairs) for i in chosen):
            raise BenchError(f"--layers requires indices from 0 to {len(pairs) - 1} (the NPU "
                             f"ran {len(pairs)} matrix layers), got "
                             f"{' '.join(map(str, chosen))}")
        pairs = [pairs[i] for i in chosen]
        layers = [g for g, _ in pairs]
        array = array_of(ours.config)
        start = _clocks()
        if args.scalesim == "compute":
            theirs = scalesim_compute(folder, layers, array)
        else:
            theirs = scalesim_full(folder, layers, array, args.scalesim_python)
        theirs_s = _elapsed(start)
    return (side_by_side(pairs, theirs, array), ours.config, array,
            {"ours": ours_s, "scalesim": theirs_s})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--network", choices=("resnet50", "mobilenetv2"), default="resnet50")
    parser.add_argument("--small", action="store_true", help="the network at the tests' size")
    parser.add_argument("--model", metavar="PATH", help="an int8 ONNX model instead")
    parser.add_argument("--machine", metavar="FILE.yaml", help="default: intrinsics/npu.yaml")
    parser.add_argument("--scalesim", choices=("compute", "full"), default="compute")
    parser.add_argument("--scalesim-python", default=sys.executable, metavar="PYTHON",
                        help="the interpreter of --scalesim full (default: this one)")
    parser.add_argument("--layers", type=int, nargs="+", metavar="I",
                        help="only these matrix layers (0 = the first the NPU ran)")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    return parser


def side_by_side(pairs: list[tuple[GemmLayer, dict[str, Any]]], theirs: list[int],
                 array: Array) -> list[dict[str, Any]]:
    """One row per layer: its GEMM, SCALE-Sim's cycles and closed form, our cycles, floor,
    roofline bound and DRAM bytes."""
    return [{"layer": g.name, "m": g.m, "n": g.n, "k": g.k, "scalesim": cycles,
             "closed_form": closed_form(g, array), "ours": record["cycles"],
             "ours_floor": our_floor(g, array), "ours_bound": record["bound"],
             "ours_dram_bytes": record["dram_bytes"]}
            for (g, record), cycles in zip(pairs, theirs)]


def _clocks() -> tuple[float, float]:
    """Wall time, and CPU time of this process and its finished children (SCALE-Sim's full
    run is one)."""
    times = os.times()
    cpu = time.process_time() + times.children_user + times.children_system
    return time.perf_counter(), cpu


def _elapsed(start: tuple[float, float]) -> dict[str, float]:
    wall, cpu = _clocks()
    return {"wall": round(wall - start[0], 2), "cpu": round(cpu - start[1], 2)}


def _totals(rows: list[dict]) -> dict[str, int]:
    return {key: sum(r[key] for r in rows)
            for key in ("scalesim", "closed_form", "ours", "ours_floor")}


def _print(rows, config: MachineConfig, array: Array, mode: str,
           seconds: dict[str, dict[str, float]]) -> None:
    ours_s, theirs_s = seconds["ours"], seconds["scalesim"]
    print(f"# {config.name}: {array.rows}x{array.cols} {array.dataflow}, SCALE-Sim "
          f"{mode}; ours {ours_s['wall']} s wall ({ours_s['cpu']} s CPU, the whole "
          f"network with its onnxruntime check), SCALE-Sim {theirs_s['wall']} s wall "
          f"({theirs_s['cpu']} s CPU)")
    print(f"{'layer':<22}{'M':>7}{'N':>6}{'K':>6}{'SCALE-Sim':>12}{'closed':>12}"
          f"{'ours':>12}{'ours/SS':>8}{'our floor':>12}  our bound")
    for r in rows:
        print(f"{r['layer']:<22}{r['m']:>7}{r['n']:>6}{r['k']:>6}{r['scalesim']:>12,}"
              f"{r['closed_form']:>12,}{r['ours']:>12,}{r['ours'] / r['scalesim']:>8.3f}"
              f"{r['ours_floor']:>12,}  {r['ours_bound']}")
    t = _totals(rows)
    print(f"{'total (' + str(len(rows)) + ' layers)':<41}{t['scalesim']:>12,}"
          f"{t['closed_form']:>12,}{t['ours']:>12,}{t['ours'] / t['scalesim']:>8.3f}"
          f"{t['ours_floor']:>12,}")
    astray = [r["layer"] for r in rows if r["closed_form"] - r["scalesim"] != 1]
    if astray:
        print(f"# SCALE-Sim DISAGREES with its closed form on {len(astray)} layer(s): "
              f"{', '.join(astray)}")
    else:
        print("# SCALE-Sim = closed form - 1 on every layer (it reports its last cycle's "
              "index, counted from 0)")


if __name__ == "__main__":
    sys.exit(main())
