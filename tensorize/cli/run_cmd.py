"""``tensorize run KERNEL.py``: tensorize a kernel for a target, check it, run it.

Each step prints one line as it finishes (``ok``, ``FAIL``, or ``skip`` with the reason when
this machine lacks what the step needs):

1. parse the file's ``@T.prim_func`` kernel (``--func NAME`` picks one of several), print it,
   and check that print -> parse gives back a structurally equal function;
2. with ``--target npu|arm|cuda``: tensorize every block an intrinsic of the target can
   compute, one line per block saying which intrinsic and mapping, or why not;
3. validate: run the tensorized IR on the host, each intrinsic executed by its semantics,
   against the untouched kernel on random inputs (``--seed``): exactly for integers;
4. run the target's code and compare it with the reference executor:
   - npu: emit the programs, simulate them, report cycles and MAC utilisation (``--trace
     FILE`` writes the timeline for Perfetto);
   - arm: emit LLVM IR for AArch64 (``--features``), compile it at -O3, run the object under
     the AArch64 emulator (natively on AArch64), report the instructions it executed;
   - cuda: emit CUDA C++ with WMMA, compile it with nvcc for sm_80 and sm_90, run it under
     the host's emulation of WMMA and the thread model, and on a GPU where pycuda finds one;
   - host (the default): the kernel runs on the reference executor;
5. when the file defines ``reference(...)``, a numpy function taking the kernel's inputs in
   parameter order and returning its output(s), compare the outputs with it as well.

A table then lists, per block, each intrinsic and how many calls of it executed.

Exit status 0 when every check passes; 1 when one fails, or when ``--intrinsic`` /
``--require-tensorized`` is given and some reduction is not tensorized (the reason is
printed); 2 for a bad kernel or bad usage.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from intrinsics import default_registry, feature_names, lowerer
from ir import BlockRealize, IterKind, PrimFunc
from ir import script as T
from ir.errors import KernelError
from ir.printer import print_node
from ir.structural import structural_equal
from simulator import load_machine
from targets import arm, host, npu
from tensorize.cli.arm_steps import run_arm
from tensorize.cli.cuda_steps import run_cuda
from tensorize.engine import Tensorized, auto_tensorize, count_calls
from tensorize.engine.count import count_calls_by_block
from tensorize.engine.tune import tune_npu
from tensorize.schedule import tree

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
TARGETS = ("host", "npu", "arm", "cuda")

_EXAMPLES = """
examples:
  tensorize run examples/script/gemm_int8.py                  # host: parse, run, check
  tensorize run examples/script/conv2d_nhwc.py --target npu   # tensorize, simulate, check
  tensorize run KERNEL.py --target npu --emit code -o prog.s  # the NPU program
  tensorize run KERNEL.py --target cuda --explain             # why each block maps or not
  tensorize run KERNEL.py --target arm --emit code            # AArch64 assembly with sdot
  tensorize run KERNEL.py --target cuda --emit code -o k.cu   # the CUDA C++ and its launches
"""

# Float outputs are compared to a float64 numpy reference with this relative tolerance per
# dtype (accumulation order differs, so exact equality would be wrong for floats).
_RTOL = {"float16": 2e-2, "bfloat16": 5e-2, "float32": 1e-4, "float64": 1e-10}


def register(subparsers: Any) -> None:
    """Add the ``run`` command."""
    parser = subparsers.add_parser(
        "run", help="tensorize a kernel for a target, validate it and run it",
        description=__doc__.split("\n\n", 1)[1].replace("``", "") + _EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel", metavar="KERNEL.py", help="a Python file of @T.prim_func kernels")
    parser.add_argument("--func", help="the kernel to run when the file defines several")
    parser.add_argument("--target", choices=TARGETS, default="host",
                        help="where to run: host (reference executor, default), npu "
                             "(tensorize and simulate), arm (AArch64, emulated) or cuda (WMMA)")
    parser.add_argument("--intrinsic", metavar="NAME",
                        help="use only this intrinsic, and fail if it does not fire")
    parser.add_argument("--require-tensorized", action="store_true",
                        help="fail unless every reduction block is tensorized")
    parser.add_argument("--explain", action="store_true",
                        help="print, for every block and intrinsic, the mapping or why not")
    parser.add_argument("--emit", choices=("ir", "code", "trace"), action="append", default=[],
                        help="print the tensorized IR, the target code (NPU or AArch64 "
                             "assembly, CUDA C++) or the "
                             "replayable schedule trace (repeatable)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write what --emit selects to FILE instead of the terminal")
    parser.add_argument("--tune", action="store_true",
                        help="NPU: simulate every tile height that fits and keep the fastest")
    parser.add_argument("--trace", metavar="FILE",
                        help="NPU: write the simulated timeline (Chrome trace JSON) to FILE")
    parser.add_argument("--features", default=arm.DEFAULT_FEATURES,
                        help="arm: the target features, which choose the intrinsics tried "
                             f"(default {arm.DEFAULT_FEATURES}; add +i8mm for smmla/usdot)")
    parser.add_argument("--seed", type=int, default=0, help="random seed for the inputs (0)")
    parser.add_argument("--quiet", action="store_true", help="do not print the kernel")
    parser.add_argument("--json", action="store_true", help="print a JSON report instead")
    parser.set_defaults(handler=handle)


class _Report:
    """The steps of one run, printed as they finish and kept for --json."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.steps: list[dict[str, Any]] = []
        self.data: dict[str, Any] = {}

    def step(self, name: str, ok: bool, detail: str) -> bool:
        self.steps.append({"step": name, "ok": ok, "detail": detail})
        if not self.quiet:
            print(f"{'ok  ' if ok else 'FAIL'} {name:<11} {detail}")
        return ok

    def skip(self, name: str, reason: str) -> None:
        """A step this machine cannot take (a missing compiler or device), and why."""
        self.steps.append({"step": name, "ok": True, "skipped": True, "detail": reason})
        if not self.quiet:
            print(f"skip {name:<11} {reason}")

    @property
    def ok(self) -> bool:
        return all(s["ok"] for s in self.steps)


def handle(args: argparse.Namespace) -> int:
    """Run the steps; returns the exit status."""
    if args.target != "npu" and (args.tune or args.trace):
        raise KernelError("--tune and --trace apply to --target npu only")
    if args.features != arm.DEFAULT_FEATURES and args.target != "arm":
        raise KernelError("--features applies to --target arm only")
    if args.intrinsic and args.target == "host":
        raise KernelError("--intrinsic needs a --target with intrinsics (npu, arm, cuda)")
    path = Path(args.kernel)
    func = _pick(T.load_file(path), args.func, path)
    report = _Report(quiet=args.json)
    report.data.update({"kernel": str(path), "func": func.name, "target": args.target})
    if not (args.quiet or args.json):
        print(print_node(func))
    reparsed = T.parse(print_node(func), filename=f"<printed {func.name}>")
    report.step("round-trip", structural_equal(func, reparsed),
                "print -> parse gives a structurally equal function")

    rng = np.random.default_rng(args.seed)
    inputs = {p.name: random_array(p.shape, p.dtype, rng) for p in func.params}
    registry = default_registry()
    emitted: list[str] = []
    if args.target == "host":
        outputs = _run_host(func, inputs, report)
    else:
        result = _tensorize(func, args, registry, report)
        outputs = _validate(func, result, inputs, registry, report)
        if args.target == "npu":
            outputs = _simulate(func, result, inputs, outputs, args, registry, report,
                                emitted)
        elif args.target == "arm":
            outputs = run_arm(result.func, args.features, outputs, inputs, report, compare,
                              emitted, "code" in args.emit)
        elif args.target == "cuda":
            outputs = run_cuda(result.func, outputs, inputs, report, compare, emitted,
                               "code" in args.emit)
        _calls_table(result, report, args.json)
        if "ir" in args.emit:
            emitted.insert(0, print_node(result.func))
        if "trace" in args.emit:
            emitted.append(result.schedule.replay_trace())
    _check_reference(path, func, inputs, outputs, report)
    _write_emitted(emitted, args.output)
    report.data["steps"] = report.steps
    report.data["ok"] = report.ok
    if args.json:
        print(json.dumps(report.data, indent=2))
    if args.intrinsic or args.require_tensorized:
        missing = report.data.get("not_tensorized", [])
        if missing:
            for block, reason in missing:
                print(f"error: block {block!r} is not tensorized: {reason}", file=sys.stderr)
            return EXIT_FAILED
    return EXIT_OK if report.ok else EXIT_FAILED


def _run_host(func: PrimFunc, inputs: dict[str, np.ndarray], report: _Report
              ) -> dict[str, np.ndarray]:
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


def _tensorize(func: PrimFunc, args: argparse.Namespace, registry, report: _Report
               ) -> Tensorized:
    if args.tune:
        result, trials = tune_npu(func, load_machine(), registry, args.intrinsic)
        for trial in trials:
            report.step("tune", True, f"tile {trial.tiling.rows} rows: {trial.cycles} cycles")
        report.data["tune"] = [{"rows": t.tiling.rows, "cycles": t.cycles} for t in trials]
    else:
        features = args.features if args.target == "arm" else None
        _check_named_intrinsic(args.intrinsic, features, registry)
        result = auto_tensorize(func, args.target, registry=registry, intrinsic=args.intrinsic,
                                features=features)
    reductions = _reduction_blocks(func)
    missing = []
    for outcome in result.blocks:
        if outcome.intrinsic is not None:
            report.step("tensorize", True, f"{outcome.block}: {outcome.intrinsic}  "
                                           f"{outcome.mapping}")
        else:
            needed = outcome.block in reductions
            if needed:
                missing.append((outcome.block, outcome.reason))
            must = bool(args.intrinsic or args.require_tensorized) and needed
            report.step("tensorize", not must,
                        f"{outcome.block}: not tensorized ({outcome.reason}); runs as is")
    if args.explain:
        for line in result.explain:
            print(f"     explain     {line}", file=sys.stderr if args.json else sys.stdout)
    report.data["tensorize_seconds"] = round(result.seconds, 4)
    report.data["blocks"] = [{"block": b.block, "intrinsic": b.intrinsic, "mapping": b.mapping,
                              "reason": b.reason} for b in result.blocks]
    report.data["explain"] = list(result.explain)
    report.data["not_tensorized"] = missing
    report.data["trace"] = result.schedule.replay_trace()
    return result


def _check_named_intrinsic(name: str | None, features: str | None, registry) -> None:
    """Refuse, before any work, an ``--intrinsic`` that ``--features`` does not provide."""
    if name is None or features is None:
        return
    intrinsic = registry.get(name)
    if not intrinsic.available(feature_names(features)):
        raise KernelError(f"--intrinsic {name} requires target feature +{intrinsic.feature}, "
                          f"got --features {features}; use --features "
                          f"{features},+{intrinsic.feature}")


def _validate(func: PrimFunc, result: Tensorized, inputs: dict[str, np.ndarray], registry,
              report: _Report) -> dict[str, np.ndarray]:
    want = host.run(func, inputs)
    got = host.run(result.func, inputs, lowerer(registry.get))
    for name, expected in want.items():
        ok, detail = compare(got[name], expected)
        report.step("validate", ok, f"{name}: tensorized IR (intrinsics run as their "
                                    f"semantics) against the untouched kernel: {detail}")
    return want


def _simulate(func: PrimFunc, result: Tensorized, inputs: dict[str, np.ndarray],
              reference: dict[str, np.ndarray], args: argparse.Namespace, registry,
              report: _Report, emitted: list[str]) -> dict[str, np.ndarray]:
    config = load_machine()
    run = npu.run(result.func, inputs, config, registry.get)
    on_host = [s.label for s in run.stages if not s.on_npu]
    sims = [s for s in run.stages if s.sim is not None]
    macs = sum(s.sim.useful_macs for s in sims)
    peak = run.cycles * config.array.rows * config.array.cols
    utilisation = macs / peak if peak else 0.0
    report.step("simulate", True,
                f"{config.name}: {run.cycles} cycles ({run.cycles / config.clock_mhz:.1f} us "
                f"at {config.clock_mhz:g} MHz), MAC utilisation {100 * utilisation:.1f}%, "
                f"{len(sims)} NPU program(s)"
                + (f"; on the host: {', '.join(on_host)}" if on_host else ""))
    for name, expected in reference.items():
        ok, detail = compare(run.outputs[name], expected)
        report.step("check", ok, f"{name} from the simulator against the reference "
                                 f"executor: {detail}")
    report.data["npu"] = {"cycles": run.cycles, "mac_utilisation": round(utilisation, 4),
                          "programs": len(sims), "host_stages": on_host,
                          "instructions": sum(len(s.compiled.program) for s in sims)}
    if args.trace and sims:
        sims[0].sim.write_trace(args.trace)
        report.step("trace", True, f"timeline of the first NPU program written to {args.trace}")
    if "code" in args.emit:
        emitted.extend(s.compiled.assembly for s in sims)
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


def _check_reference(path: Path, func: PrimFunc, inputs: dict[str, np.ndarray],
                     outputs: dict[str, np.ndarray], report: _Report) -> None:
    reference = _reference(path)
    if reference is None:
        report.step("reference", True, "skipped: the file defines no reference(...) function")
        return
    names = list(outputs)
    given = [inputs[p.name] for p in func.params if p.name not in names]
    expected = reference(*given)
    expected = expected if isinstance(expected, tuple) else (expected,)
    if len(expected) != len(names):
        raise KernelError(f"{path}: reference(...) returned {len(expected)} arrays for "
                          f"{len(names)} outputs ({', '.join(names)})")
    for name, want in zip(names, expected):
        ok, detail = compare(outputs[name], np.asarray(want))
        report.step("reference", ok, f"{name} against numpy reference(...): {detail}")


def _write_emitted(emitted: list[str], output: str | None) -> None:
    if not emitted:
        return
    text = "\n\n".join(e.rstrip("\n") for e in emitted) + "\n"
    if output:
        Path(output).write_text(text)
    else:
        print(text, end="")


def _reduction_blocks(func: PrimFunc) -> set[str]:
    return {s.block.name for s, _ in tree.walk_stmts(func) if isinstance(s, BlockRealize)
            and any(iv.kind is IterKind.REDUCE for iv in s.block.iter_vars)}


def random_array(shape: tuple[int, ...], dtype: Any, rng: np.random.Generator) -> np.ndarray:
    """Random values over an integer dtype's whole range, or standard normal floats."""
    if dtype.is_int:
        return rng.integers(dtype.min, dtype.max + 1, shape).astype(dtype.numpy)
    return rng.standard_normal(shape).astype(dtype.numpy)


def compare(got: np.ndarray, want: np.ndarray) -> tuple[bool, str]:
    """Exact comparison for integers, relative tolerance for floats; (ok, one-line detail)."""
    if got.shape != want.shape:
        return False, f"shape {got.shape} but the reference gives {want.shape}"
    if got.dtype.kind in "iub":
        wrong = got != want.astype(got.dtype)
        mismatched = int(np.count_nonzero(wrong))
        if mismatched:
            where = tuple(int(x) for x in np.argwhere(wrong)[0])
            return False, (f"{mismatched} of {got.size} elements differ, first at {where}: "
                           f"{got[where]} vs {want[where]}")
        return True, f"all {got.size} elements equal (exact)"
    rtol = _RTOL.get(got.dtype.name, 1e-4)
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    scale = max(float(np.max(np.abs(want64))), 1e-30)
    error = float(np.max(np.abs(got64 - want64))) / scale
    return error <= rtol, f"max error {error:.2e} of the largest value (tolerance {rtol:g})"


def _pick(kernels: dict[str, PrimFunc], name: str | None, path: Path) -> PrimFunc:
    if not kernels:
        raise KernelError(f"{path}: no @T.prim_func kernel found")
    if name is None:
        if len(kernels) > 1:
            raise KernelError(f"{path} defines {len(kernels)} kernels ({', '.join(kernels)}); "
                              "choose one with --func")
        return next(iter(kernels.values()))
    if name not in kernels:
        raise KernelError(f"{path}: --func {name} names no kernel; found {', '.join(kernels)}")
    return kernels[name]


def _reference(path: Path) -> Callable[..., Any] | None:
    """The file's ``reference`` function, importing the file as a module."""
    spec = importlib.util.spec_from_file_location(f"_tensorize_kernel_{path.stem}", path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reference = getattr(module, "reference", None)
    return reference if callable(reference) else None
