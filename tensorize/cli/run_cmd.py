"""``tensorize run KERNEL.py``: tensorize a kernel for a target, check it, run it.

Before any work, the command checks what it was given: the options (conflicts, ranges,
--features against the known ones), the output files (-o, --trace: writable, not the
kernel), --intrinsic (an intrinsic of the target), the kernel file (imported once, for its
reference() or build(); every failure names the file), the size of the kernel's buffers
(--max-bytes) and the reference: it is called on the inputs, and must return one array per
output, of the output's shape. Then each step prints one line as it finishes (ok, FAIL, or
skip with the reason when this machine lacks what the step needs):

1. read the kernel: the file's @T.prim_func function (--func NAME picks one of several), or,
   in a file without one, what its build() returns (or its module-level PrimFunc values);
   print it, and check that print -> parse gives back a structurally equal function;
2. with --target NAME (any target the loaded descriptions declare: npu, arm, x86, cuda, and
   those of --intrinsics-dir): tensorize every block an intrinsic of the target can
   compute, one line per block saying which intrinsic and mapping, or why not;
3. validate: run the tensorized IR on the host, each intrinsic executed by its semantics,
   against the untouched kernel on random inputs (--seed): exactly for integers;
4. run the target's code and compare it with the reference executor:
   - npu: emit the programs, simulate them on the built-in machine or the one --machine
     FILE describes, report cycles, MAC utilisation, per-unit busy and stall cycles, DRAM
     traffic and bandwidth, and the roofline bound with what binds it (--trace FILE writes
     the timeline for Perfetto);
   - a CPU target (arm, x86, any family with a cpu: section): emit LLVM IR for its triple
     and features (--features), compile it at -O3, and run it natively (x86 here: best and
     median time of several runs) or under the AArch64 emulator (the instructions it
     executed); a kernel no engine here can run (a feature the host lacks) fails, with
     the reason, and is never run;
   - cuda: emit CUDA C++ with WMMA or mma.sync, compile it with nvcc for sm_80 and sm_90,
     run it under the host's emulation of the warp matrix instructions and the thread model,
     and on a GPU where CuPy finds one;
   - host (the default): the kernel runs on the reference executor;
5. when the file defines reference(...), a numpy function taking the kernel's inputs in
   parameter order and returning its output(s), compare the outputs with it as well
   (integers exactly, whatever dtype the reference returns).

A table then lists, per block, each intrinsic and how many calls of it executed.

A run on a target with intrinsics in which no block is tensorized stops after step 2 and fails
("not tensorized: REASON"), unless --allow-fallback is given: the kernel then runs on the
target untensorized (on the NPU target, on the host). When some block is tensorized, blocks
no intrinsic computes (an epilogue, a padding copy) run as they are. --intrinsic and
--require-tensorized also stop after step 2 when a reduction is not tensorized.

Exit status 0 when every check passes; 1 when one fails or the kernel is not tensorized
as asked (the reason is printed); 2 for a bad kernel or bad usage.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from intrinsics import Registry, default_registry, feature_names, lowerer
from ir import Block, BlockRealize, IterKind, Node, PrimFunc, post_order_visit
from ir import script as T
from ir.printer import print_node
from ir.structural import structural_equal
from tensorize.cli import argtypes
from tensorize.cli.errors import UsageError
from tensorize.cli.outputs import check_output_path, write_atomically, write_text_atomically
from tensorize.cli.registry_args import add_registry_arguments
from tensorize.engine import (Tensorized, auto_tensorize, count_calls, named_intrinsic,
                              target_features)
from tensorize.engine.count import count_calls_by_block
from tensorize.kernel_file import (KernelFile, call_reference, check_reference_arguments,
                                   read_kernel_file)
from tensorize.schedule import tree
from tensorize.validate import compare, random_array

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# The most the kernel's buffers (parameters and intermediates) may take together unless
# --max-bytes says otherwise: the run holds several copies of each.
MAX_BYTES = 4 << 30
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

_EXAMPLES = """
examples:
  tensorize run examples/script/gemm_int8.py                  # host: parse, run, check
  tensorize run examples/script/conv2d_nhwc.py --target npu   # tensorize, simulate, check
  tensorize run examples/te/gemm_int8.py --target npu         # a kernel built by build()
  tensorize run KERNEL.py --target npu --emit code -o prog.s  # the NPU program
  tensorize run KERNEL.py --target npu --machine my_npu.yaml  # a machine you describe
  tensorize run KERNEL.py --target cuda --explain             # why each block maps or not
  tensorize run KERNEL.py --target arm --emit code            # AArch64 assembly with sdot
  tensorize run KERNEL.py --target arm --features +i8mm       # also smmla/usdot
  tensorize run KERNEL.py --target x86                        # AVX-512 VNNI, run natively
  tensorize run KERNEL.py --target x86 --tune                 # time register tiles, cache
  tensorize run KERNEL.py --target cuda --tune                # search tiles and stages
  tensorize run KERNEL.py --target mine --intrinsics-dir DIR  # a target you describe
  tensorize run KERNEL.py --target cuda --emit code -o k.cu   # the CUDA C++ and its launches
"""


def register(subparsers: Any) -> None:
    """Add the ``run`` command."""
    parser = subparsers.add_parser(
        "run", help="tensorize a kernel for a target, validate it and run it",
        description=__doc__.split("\n\n", 1)[1] + _EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel", metavar="KERNEL.py",
                        help="a Python file of @T.prim_func kernels, or whose build() "
                             "returns a PrimFunc")
    parser.add_argument("--func", help="the kernel to run when the file defines several")
    parser.add_argument("--target", metavar="NAME", default="host",
                        help="where to run: host (reference executor, default) or any target "
                             "the descriptions declare: npu (tensorize and simulate), arm "
                             "(AArch64, emulated), x86 (AVX-512 VNNI, native), cuda (WMMA), "
                             "and those of --intrinsics-dir")
    parser.add_argument("--intrinsic", metavar="NAME",
                        help="use only this compute intrinsic of the target, and fail (before "
                             "running anything) if it does not fire")
    parser.add_argument("--require-tensorized", action="store_true",
                        help="fail, before running anything, unless every reduction block is "
                             "tensorized")
    parser.add_argument("--allow-fallback", action="store_true",
                        help="when no block is tensorized, run the kernel on the target "
                             "untensorized instead of failing")
    parser.add_argument("--explain", action="store_true",
                        help="print, for every block and intrinsic, the mapping or why not")
    parser.add_argument("--emit", choices=("ir", "code", "trace"), action="append", default=[],
                        help="print the tensorized IR, the target code (NPU or AArch64 "
                             "assembly, CUDA C++) or the "
                             "replayable schedule trace (repeatable)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write what --emit selects to FILE instead of the terminal")
    parser.add_argument("--tune", action="store_true",
                        help="NPU: rank every tile height that fits by the cost model, simulate "
                             "the best few, keep the fastest; a CPU target: rank the register "
                             "tiles that fit by the estimate, run the best few, keep the one "
                             "that executes the fewest instructions (emulated) or runs fastest "
                             "(native), and cache it for later runs; cuda: search block tile, "
                             "warp tile, k tile and cp.async stages with the static cost model, "
                             "compile the best few, keep the cheapest")
    parser.add_argument("--machine", metavar="FILE.yaml",
                        help="NPU: the machine to run on, a YAML file with a machine: section "
                             "(and, optionally, its own NPU family of intrinsics, which then "
                             "replaces the built-in one); default: intrinsics/npu.yaml")
    parser.add_argument("--trace", metavar="FILE",
                        help="NPU: write the simulated timeline (Chrome trace JSON) to FILE")
    parser.add_argument("--features", metavar="+X,-Y",
                        help="a CPU target (arm, x86, ...): change the target features, which "
                             "choose the intrinsics tried: +x adds x to the defaults (the "
                             "description's cpu.features; arm: +neon,+dotprod), -x removes it "
                             "(write --features=-x); e.g. --target arm --features +i8mm adds "
                             "smmla/usdot")
    parser.add_argument("--seed", type=argtypes.seed, default=0,
                        help="random seed for the inputs, a non-negative integer (0)")
    parser.add_argument("--max-bytes", type=_byte_size, default=MAX_BYTES, metavar="SIZE",
                        help="refuse a kernel whose buffers take more than SIZE bytes together "
                             f"(suffixes K, M, G, T; default {MAX_BYTES >> 30}G)")
    parser.add_argument("--quiet", action="store_true", help="do not print the kernel")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON report instead of the step lines (on a refusal, "
                             "one with \"ok\": false and the error)")
    add_registry_arguments(parser)
    parser.set_defaults(handler=handle)


def _byte_size(text: str) -> int:
    match = re.fullmatch(r"(\d+)\s*([kmgt]?)(i?b)?", text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"requires a size in bytes such as 4G or 512M, got "
                                         f"{text!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


class _Report:
    """The steps of one run, printed as they finish and kept for --json."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.steps: list[dict[str, Any]] = []
        self.data: dict[str, Any] = {}

    def step(self, name: str, ok: bool, detail: str) -> bool:
        """A step taken: passed or failed, and what it found."""
        self.steps.append({"step": name, "ok": ok, "detail": detail})
        if not self.as_json:
            print(f"{'ok  ' if ok else 'FAIL'} {name:<11} {detail}")
        return ok

    def skip(self, name: str, reason: str, fails: bool = False) -> None:
        """A step this machine cannot take (a missing compiler or device), and why;
        ``fails``: the run cannot pass without it (code emitted but never run)."""
        self.steps.append({"step": name, "ok": not fails, "skipped": True, "detail": reason})
        if not self.as_json:
            print(f"skip {name:<11} {reason}")

    @property
    def ok(self) -> bool:
        """True when no step failed."""
        return all(s["ok"] for s in self.steps)

    def finish(self, errors: Sequence[str] = ()) -> int:
        """Print the errors (and the JSON report with --json); returns the exit status."""
        self.data["steps"] = self.steps
        self.data["ok"] = self.ok and not errors
        if errors:
            self.data["error"] = "; ".join(errors)
        if self.as_json:
            print(json.dumps(self.data, indent=2))
        for error in errors:
            print(f"error: {error}", file=sys.stderr)
        return EXIT_OK if self.data["ok"] else EXIT_FAILED


def handle(args: argparse.Namespace) -> int:
    """Run the steps; returns the exit status."""
    _check_options(args)
    path = Path(args.kernel)
    output = check_output_path("-o", args.output, path) if args.output else None
    trace = check_output_path("--trace", args.trace, path) if args.trace else None
    if output is not None and trace is not None and output.resolve() == trace.resolve():
        raise UsageError(f"-o and --trace require two different files, got {args.output} "
                         "for both")
    machine = None
    if args.machine:
        from targets.npu import load_machine, machine_registry

        machine = load_machine(args.machine)
        registry = machine_registry(args.machine, args.intrinsics_dir)
    else:
        registry = default_registry(args.intrinsics_dir)
    kind = _target_kind(args.target, args.features, registry)
    if args.tune and kind not in ("npu", "cpu", "cuda"):
        raise UsageError(f"--tune requires --target npu, cuda or a CPU target "
                         f"({_cpu_targets(registry)}), got --target {args.target}")
    features = _features(args.features, args.target, registry) if kind == "cpu" else None
    if args.intrinsic:
        _check_named_intrinsic(args.intrinsic, args.target, features, registry)
    kernel = read_kernel_file(path, args.func)
    func = kernel.func
    _check_size(func, args.max_bytes, path)
    report = _Report(as_json=args.json)
    report.data.update({"kernel": str(path), "func": func.name, "target": args.target})
    if not (args.quiet or args.json):
        print(print_node(func))
    inputs, expected = _inputs_and_reference(kernel, args.seed)
    reparsed = T.parse(print_node(func), filename=f"<printed {func.name}>")
    report.step("round-trip", structural_equal(func, reparsed),
                "print -> parse gives a structurally equal function")

    emitted: list[str] = []
    if args.target == "host":
        outputs = _run_host(func, inputs, report)
    else:
        reductions = _reduction_blocks(func)
        result = _tensorize(func, args, features, registry, report, reductions, machine)
        refusal = _tensorize_failures(result, args, reductions)
        if refusal:
            return report.finish(refusal)
        outputs = _run_target(func, result, inputs, args, features, trace, registry, report,
                              emitted, machine)
    _check_reference(expected, outputs, report)
    if emitted:
        text = "\n\n".join(e.rstrip("\n") for e in emitted) + "\n"
        if output is not None:
            write_text_atomically(output, text)
        else:
            print(text, end="")
    return report.finish()


def _check_options(args: argparse.Namespace) -> None:
    """Refuse options that conflict or do not apply to the target, before any work."""
    if args.target != "npu" and (args.trace or args.machine):
        raise UsageError("--trace and --machine apply to --target npu only")
    if args.target == "host":
        needs_intrinsics = {"--intrinsic": args.intrinsic, "--explain": args.explain,
                            "--emit": args.emit, "--require-tensorized": args.require_tensorized,
                            "--allow-fallback": args.allow_fallback}
        given = [name for name, value in needs_intrinsics.items() if value]
        if given:
            raise UsageError(f"{given[0]} requires a --target with intrinsics (npu, arm, "
                             "x86, cuda or one a description declares), got --target host")
    if args.allow_fallback and (args.intrinsic or args.require_tensorized):
        other = "--intrinsic" if args.intrinsic else "--require-tensorized"
        raise UsageError(f"--allow-fallback contradicts {other}, which fails when a block is "
                         "not tensorized; give one of them")
    if args.json and args.emit and not args.output:
        raise UsageError("--emit with --json requires -o FILE, got no -o (stdout holds the "
                         "JSON report)")
    if args.output and not args.emit:
        raise UsageError(f"-o {args.output} requires --emit ir|code|trace to say what to "
                         "write, got no --emit")


def _target_kind(target: str, features: str | None, registry: Registry) -> str:
    """The kind of ``target`` (``Registry.target_kind``), after refusing a target no loaded
    description declares and --features on a target that is not a CPU."""
    if target == "host":
        kind = "host"
    elif target in registry.targets:
        kind = registry.target_kind(target)
    else:
        known = ", ".join(sorted(registry.targets))
        close = difflib.get_close_matches(target, list(registry.targets), n=1)
        hint = f"; did you mean {close[0]}?" if close else \
            "; describe it in a family file and pass its directory with --intrinsics-dir"
        raise UsageError(f"--target requires host or a target a description declares "
                         f"({known}), got {target!r}{hint}")
    if features is not None and kind != "cpu":
        raise UsageError(f"--features applies to a CPU target ({_cpu_targets(registry)}), "
                         f"got --target {target}")
    return kind


def _cpu_targets(registry: Registry) -> str:
    """The CPU targets the loaded descriptions declare, for a message."""
    return ", ".join(t for t in registry.targets if registry.target_kind(t) == "cpu")


def _features(spec: str | None, target: str, registry: Registry) -> str:
    """The CPU target's features: its description's defaults, with ``spec``'s ``+x`` added
    and ``-x`` removed; a feature neither the defaults nor an intrinsic of the target names
    is refused."""
    defaults = target_features(target, registry) or ""
    if spec is None:
        return defaults
    chosen = [f for f in defaults.split(",") if f]
    known = sorted(feature_names(defaults)
                   | {i.feature for i in registry.for_target(target) if i.feature})
    for item in (f.strip() for f in spec.split(",")):
        name = item[1:]
        if item[:1] not in ("+", "-") or name not in known:
            raise UsageError(f"--features requires +name or -name of a known feature "
                             f"({', '.join(known)}), got {item!r}")
        at = next((n for n, f in enumerate(chosen) if f[1:] == name), None)
        if at is None:
            chosen.append(item)
        else:
            chosen[at] = item
    return ",".join(chosen)


def _check_named_intrinsic(name: str, target: str, features: str | None,
                           registry: Registry) -> None:
    """Refuse, before any work, an ``--intrinsic`` that is not a compute intrinsic of the
    target, or that ``--features`` does not provide."""
    intrinsic = named_intrinsic(registry, target, name, "--intrinsic")
    if features is not None and not intrinsic.available(feature_names(features)):
        raise UsageError(f"--intrinsic {name} requires target feature +{intrinsic.feature}, "
                         f"got features {features}; add it with --features "
                         f"+{intrinsic.feature}")


def _check_size(func: PrimFunc, limit: int, path: Path) -> None:
    """Refuse a kernel whose buffers together take more than ``limit`` bytes."""
    buffers = list(func.params)

    def allocated(node: Node) -> None:
        if isinstance(node, Block):
            buffers.extend(node.alloc_buffers)

    post_order_visit(func.body, allocated)
    sizes = sorted(((math.prod(b.shape) * b.dtype.numpy.itemsize, b) for b in buffers),
                   key=lambda pair: -pair[0])
    total = sum(size for size, _ in sizes)
    if total <= limit:
        return
    largest = ", ".join(f"{b.name} {b.shape} {b.dtype.name}: {_bytes_text(size)}"
                        for size, b in sizes[:3])
    raise UsageError(f"{path}: kernel {func.name} requires its buffers to fit in "
                     f"{_bytes_text(limit)} (--max-bytes), got {_bytes_text(total)} "
                     f"({largest}); shrink its extents or raise --max-bytes")


def _bytes_text(size: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def _inputs_and_reference(kernel: KernelFile, seed: int
                          ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    """Random inputs (every parameter; outputs start random too), and what the file's
    reference returns for them (None without one), checked before any work."""
    from targets import host

    func = kernel.func
    outputs = host.compile(func).written
    given = [p for p in func.params if all(p is not o for o in outputs)]
    if kernel.reference is not None:
        check_reference_arguments(kernel.reference, kernel.path, given)
    rng = np.random.default_rng(seed)
    try:
        inputs = {p.name: random_array(p.shape, p.dtype, rng) for p in func.params}
    except MemoryError:
        raise UsageError(f"{kernel.path}: kernel {func.name} requires memory for its inputs, "
                         "got none left on this machine; shrink its extents or lower "
                         "--max-bytes") from None
    if kernel.reference is None:
        return inputs, None
    return inputs, call_reference(kernel.reference, kernel.path,
                                  [inputs[p.name] for p in given], outputs)


def _run_host(func: PrimFunc, inputs: dict[str, np.ndarray], report: _Report
              ) -> dict[str, np.ndarray]:
    from targets import host

    start = time.perf_counter()
    compiled = host.compile(func)
    compile_s = time.perf_counter() - start
    arrays = {name: a.copy() for name, a in inputs.items()}
    start = time.perf_counter()
    compiled(*arrays.values())
    run_s = time.perf_counter() - start
    outputs = [p.name for p in compiled.written]
    report.step("execute", True, f"host LLVM JIT: compile {compile_s * 1e3:.0f} ms, "
                                 f"run {run_s * 1e3:.1f} ms, outputs {', '.join(outputs)}")
    report.data["timing_ms"] = {"compile": round(compile_s * 1e3, 2),
                                "run": round(run_s * 1e3, 3)}
    return {name: arrays[name] for name in outputs}


def _tensorize(func: PrimFunc, args: argparse.Namespace, features: str | None,
               registry: Registry, report: _Report, reductions: set[str],
               machine: Any = None) -> Tensorized:
    tiles: dict[str, str] = {}
    if features is not None:
        from tensorize.cli.cpu_steps import tensorize_cpu

        result, tiles = tensorize_cpu(func, args.target, features, registry, args.intrinsic,
                                      args.tune, report)
    elif args.tune and args.target == "cuda":
        from tensorize.cli.cuda_steps import tensorize_tuned

        result, args.cuda_stages = tensorize_tuned(func, registry, report)
    elif args.tune:
        from simulator import load_machine
        from tensorize.engine.tune import tune_npu

        result, trials = tune_npu(func, machine or load_machine(), registry, args.intrinsic)
        for trial in trials:
            report.step("tune", True, trial.describe())
        report.data["tune"] = [trial.to_dict() for trial in trials]
    else:
        result = auto_tensorize(func, args.target, registry=registry, intrinsic=args.intrinsic,
                                features=features, config=machine)
    strict = bool(args.intrinsic or args.require_tensorized)
    fails = not result.tensorized and not args.allow_fallback
    for outcome in result.blocks:
        if outcome.intrinsic is not None:
            tile = f"  ({tiles[outcome.block]})" if outcome.block in tiles else ""
            report.step("tensorize", True, f"{outcome.block}: {outcome.intrinsic}  "
                                           f"{outcome.mapping}{tile}")
        elif outcome.folded:
            report.step("tensorize", True, f"{outcome.block}: not tensorized "
                                           f"({outcome.reason}); folded into a tensorized "
                                           "block's copies, no kernel of its own")
        else:
            ok = not fails and not (strict and outcome.block in reductions)
            report.step("tensorize", ok,
                        f"{outcome.block}: not tensorized ({outcome.reason}); runs as is")
    if args.explain:
        for line in result.explain:
            print(f"     explain     {line}", file=sys.stderr if args.json else sys.stdout)
    report.data["tensorize_seconds"] = round(result.seconds, 4)
    report.data["blocks"] = [{"block": b.block, "intrinsic": b.intrinsic, "mapping": b.mapping,
                              "reason": b.reason} for b in result.blocks]
    report.data["explain"] = list(result.explain)
    report.data["not_tensorized"] = [(b.block, b.reason) for b in result.blocks
                                     if b.intrinsic is None and b.block in reductions]
    report.data["trace"] = result.schedule.replay_trace()
    return result


def _tensorize_failures(result: Tensorized, args: argparse.Namespace, reductions: set[str]
                        ) -> list[str]:
    """Why the run must stop right after tensorizing (empty: it goes on): a reduction (of
    ``reductions``) not tensorized under --intrinsic / --require-tensorized, or no block
    tensorized at all without --allow-fallback."""
    untouched = [b for b in result.blocks if b.intrinsic is None]
    if args.intrinsic or args.require_tensorized:
        missing = [f"block {b.block!r} is not tensorized: {b.reason}" for b in untouched
                   if b.block in reductions]
        if missing:
            return missing
    if result.tensorized or args.allow_fallback:
        return []
    blocks = [b for b in untouched if b.block in reductions] or untouched
    reasons = "; ".join(f"{b.block}: {b.reason}" for b in blocks) or "the kernel has no block"
    message = (f"not tensorized: {reasons}; pass --allow-fallback to run it on {args.target} "
               "untensorized")
    return [message]


def _run_target(func: PrimFunc, result: Tensorized, inputs: dict[str, np.ndarray],
                args: argparse.Namespace, features: str | None, trace: Path | None,
                registry: Registry, report: _Report, emitted: list[str], machine: Any = None
                ) -> dict[str, np.ndarray]:
    """Steps 3 and 4 on the tensorized ``result``, and the calls table; the outputs of the
    most faithful run."""
    outputs = _validate(func, result, inputs, registry, report)
    if args.target == "npu":
        outputs = _simulate(result, inputs, outputs, args, trace, registry, report, emitted,
                            machine)
    elif features is not None:
        from tensorize.cli.cpu_steps import run_cpu

        outputs = run_cpu(result.func, args.target, features, registry, outputs, inputs,
                          report, compare, emitted, "code" in args.emit)
    elif args.target == "cuda":
        from tensorize.cli.cuda_steps import run_cuda

        outputs = run_cuda(result.func, outputs, inputs, report, compare, emitted,
                           "code" in args.emit, registry=registry, **_cuda_stages(args))
    else:
        report.skip("run", f"no code generator serves target {args.target} (kind "
                           f"{registry.target_kind(args.target)}); only its tensorized IR "
                           "was validated", fails=True)
    _calls_table(result, report, args.json)
    if not result.tensorized:
        reasons = "; ".join(f"{b.block}: {b.reason}" for b in result.blocks)
        report.skip("tensorize", f"not tensorized: {reasons}; it ran untensorized "
                                 "(--allow-fallback)")
    if "ir" in args.emit:
        emitted.insert(0, print_node(result.func))
    if "trace" in args.emit:
        emitted.append(result.schedule.replay_trace())
    return outputs


def _validate(func: PrimFunc, result: Tensorized, inputs: dict[str, np.ndarray],
              registry: Registry, report: _Report) -> dict[str, np.ndarray]:
    from targets import host

    want = host.run(func, inputs)
    got = host.run(result.func, inputs, lowerer(registry.get))
    for name, expected in want.items():
        ok, detail = compare(got[name], expected)
        report.step("validate", ok, f"{name}: tensorized IR (intrinsics run as their "
                                    f"semantics) against the untouched kernel: {detail}")
    return want


def _simulate(result: Tensorized, inputs: dict[str, np.ndarray],
              reference: dict[str, np.ndarray], args: argparse.Namespace, trace: Path | None,
              registry: Registry, report: _Report, emitted: list[str], machine: Any = None
              ) -> dict[str, np.ndarray]:
    from simulator import gigabytes_per_second, load_machine
    from targets import npu

    config = machine or load_machine()
    run = npu.run(result.func, inputs, config, registry.get)
    on_host = [s.label for s in run.stages if not s.on_npu]
    sims = run.sims
    peak = run.cycles * config.array.rows * config.array.cols
    utilisation = run.macs / peak if peak else 0.0
    report.step("simulate", True,
                f"{config.name}: {run.cycles} cycles ({run.cycles / config.clock_mhz:.1f} us "
                f"at {config.clock_mhz:g} MHz), MAC utilisation {100 * utilisation:.1f}%, "
                f"{len(sims)} NPU program(s)"
                + (f"; on the host: {', '.join(on_host)}" if on_host else ""))
    per_cycle = run.dram_bytes / run.cycles if run.cycles else 0.0
    gbps = gigabytes_per_second(per_cycle, config)
    roofline = run.roofline(config)
    if sims:
        report.step("units", True, "busy/stall cycles: " + ", ".join(
            f"{u.name} {u.busy}/{u.stall}" for u in run.units.values()))
        report.step("dram", True, f"{run.dram_bytes} bytes moved: {per_cycle:.2f} bytes/cycle "
                                  f"= {gbps:.2f} GB/s (port "
                                  f"{config.dram.bytes_per_cycle:g} bytes/cycle)")
        report.step("roofline", True, roofline.describe(run.cycles))
    for name, expected in reference.items():
        ok, detail = compare(run.outputs[name], expected)
        report.step("check", ok, f"{name} from the simulator against the reference "
                                 f"executor: {detail}")
    report.data["npu"] = {
        "machine": config.name, "array": [config.array.rows, config.array.cols],
        "dataflow": config.array.dataflow, "clock_mhz": config.clock_mhz,
        "cycles": run.cycles, "mac_utilisation": round(utilisation, 4), "macs": run.macs,
        "programs": len(sims), "host_stages": on_host,
        "instructions": sum(len(s.compiled.program) for s in run.stages if s.compiled),
        "units": {u.name: {"busy": u.busy, "stall": u.stall, "idle": u.idle,
                           "instructions": u.instructions} for u in run.units.values()},
        "dram": {"bytes": run.dram_bytes,
                 "read": sum(s.bytes["dram.read"] for s in sims),
                 "write": sum(s.bytes["dram.write"] for s in sims),
                 "bytes_per_cycle": round(per_cycle, 4), "gb_per_s": round(gbps, 4),
                 "port_bytes_per_cycle": config.dram.bytes_per_cycle},
        "roofline": {"compute_cycles": round(roofline.compute_cycles, 1),
                     "bandwidth_cycles": round(roofline.bandwidth_cycles, 1),
                     "min_dram_bytes": roofline.min_dram_bytes,
                     "bound_cycles": round(roofline.bound_cycles, 1),
                     "binds": roofline.binds,
                     "run_over_bound": round(run.cycles / roofline.bound_cycles, 4)
                     if roofline.bound_cycles else None}}
    nothing = "no NPU program ran (every stage ran on the host)"
    if trace is not None and sims:
        write_atomically(trace, sims[0].write_trace)
        report.step("trace", True, f"timeline of the first NPU program written to {trace}")
    elif trace is not None:
        report.step("trace", False, f"{nothing}, so there is no timeline to write to {trace}")
    if "code" in args.emit and sims:
        emitted.extend(s.compiled.assembly for s in run.stages if s.compiled is not None)
    elif "code" in args.emit:
        report.step("emit", False, f"{nothing}, so there is no NPU code to emit")
    return run.outputs


def _calls_table(result: Tensorized, report: _Report, as_json: bool) -> None:
    by_block = count_calls_by_block(result.func)
    report.data["calls"] = [{"block": b, "intrinsic": i, "executed": n}
                            for (b, i), n in by_block.items()]
    report.data["calls_total"] = count_calls(result.func)
    if as_json or not by_block:
        return
    width = max(len(b) for b, _ in by_block) + 2
    iwidth = max(len(i) for _, i in by_block) + 2
    print(f"\n{'block':<{width}}{'intrinsic':<{iwidth}}{'calls executed':>14}")
    for (block, name), count in by_block.items():
        print(f"{block:<{width}}{name:<{iwidth}}{count:>14}")


def _check_reference(expected: dict[str, np.ndarray] | None, outputs: dict[str, np.ndarray],
                     report: _Report) -> None:
    if expected is None:
        report.step("reference", True, "skipped: the file defines no reference(...) function")
        return
    for name, want in expected.items():
        ok, detail = compare(outputs[name], want)
        report.step("reference", ok, f"{name} against numpy reference(...): {detail}")


def _reduction_blocks(func: PrimFunc) -> set[str]:
    return {s.block.name for s, _ in tree.walk_stmts(func) if isinstance(s, BlockRealize)
            and any(iv.kind is IterKind.REDUCE for iv in s.block.iter_vars)}


def _cuda_stages(args: argparse.Namespace) -> dict[str, int]:
    """The cp.async stages ``--tune`` chose for cuda (none: the emitter's default)."""
    stages = getattr(args, "cuda_stages", None)
    return {} if stages is None else {"stages": stages}
