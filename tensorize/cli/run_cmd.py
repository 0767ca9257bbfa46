"""``tensorize run KERNEL.py``: tensorize a kernel for a target, check it, run it.

Before any work, the command checks what it was given: the options (conflicts, ranges,
--features against the known ones), the output files (-o, --trace: writable, not the
kernel), --intrinsic (an intrinsic of the target), the kernel file (imported once, for its
reference() or build(); every failure names the file), the size of the kernel's buffers
(--max-bytes) and the reference: it is called on the inputs, and must return one array per
output, of the output's shape (it runs on a thread beside the steps, whose lines wait
until it has returned: a failing reference ends the run as if it had come first). Then each
step prints one line as it finishes (ok, FAIL, or skip with the reason when this machine
lacks what the step needs):

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
   - cuda: emit CUDA C++ with WMMA or mma.sync, compile it with nvcc for sm_80 and sm_90
     (and for the architecture its instruction needs: sm_89 for fp8), failing if ptxas
     spills a register, run it under the host's emulation of the warp matrix instructions
     and the thread model, and on a GPU where CuPy finds one; --arch ARCH compiles for that
     one architecture, and --arch sm_90a gives a kernel that is one GEMM Hopper's
     warp-specialised wgmma kernel fed by TMA tensor copies (anything else: the reason, and
     the other families);
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
import json
import math
import os
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from intrinsics import Registry, default_registry, feature_names
from ir import Block, Node, PrimFunc, TensorizeError, post_order_visit
from ir import script as T
from ir.printer import print_node
from ir.structural import structural_equal
from targets.host import written_params
from tensorize.cli import argtypes
from tensorize.cli.errors import UsageError
from tensorize.atomic import write_atomically, write_text_atomically
from tensorize.cli.outputs import check_output_path
from tensorize.cli.progress import phase_printer
from tensorize.cli.registry_args import add_registry_arguments
from tensorize.engine import named_intrinsic
from tensorize.kernel_file import (KernelFile, call_reference, check_reference_arguments,
                                   read_kernel_file)
from tensorize.runners import (MAX_BYTES, Note, RunContext, RunOptions, RunReport, Step,
                               cpu_targets, make_context, run_kernel)
from tensorize.runners.npu import NO_PROGRAM
from tensorize.validate import compare, random_array

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
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
  tensorize run KERNEL.py --target cuda --arch sm_90a         # Hopper: wgmma fed by TMA
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
                             "(AArch64, emulated), x86 (AVX-512 VNNI, native), cuda (tensor cores "
                             "through WMMA or mma.sync), "
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
                        help="print the tensorized IR, the target code (NPU assembly, the "
                             "CPU target's assembly for arm, x86 or a described CPU, CUDA "
                             "C++) or the "
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
    parser.add_argument("--arch", metavar="SM",
                        help="cuda: schedule and compile for this architecture alone (one of "
                             "the gpu: section's, sm_80 and sm_90, or sm_90a, where a kernel "
                             "that is one GEMM takes Hopper's wgmma fed by TMA); default: "
                             "every architecture of the gpu: section")
    parser.add_argument("--threads", type=argtypes.threads, default=None,
                        metavar="N",
                        help="a CPU target run natively: split the kernel's output rows over "
                             "at most N threads, each a whole number of register tiles, none "
                             "for small kernels (default: all cores, here "
                             f"{os.cpu_count() or 1}); emulated runs use one")
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


def handle(args: argparse.Namespace) -> int:
    """Check the options and the kernel, run it through its target's runner, print what it
    reports; returns the exit status."""
    _check_options(args)
    path = Path(args.kernel)
    output = check_output_path("-o", args.output, path) if args.output else None
    trace = check_output_path("--trace", args.trace, path) if args.trace else None
    if output is not None and trace is not None and output.resolve() == trace.resolve():
        raise UsageError(f"-o and --trace require two different files, got {args.output} "
                         "for both")
    ctx = _context(args)
    if args.tune and args.arch:
        raise UsageError(f"--tune searches the tilings of the gpu: section's architectures, "
                         f"got --arch {args.arch} as well; give one of them")
    if args.tune and ctx.kind not in ("npu", "cpu", "cuda"):
        raise UsageError(f"--tune requires --target npu, cuda or a CPU target "
                         f"({cpu_targets(ctx.registry)}), got --target {args.target}")
    if args.intrinsic:
        _check_named_intrinsic(args.intrinsic, args.target, ctx.features, ctx.registry)
    kernel = read_kernel_file(path, args.func)
    func = kernel.func
    _check_size(func, args.max_bytes, path)
    report = RunReport(listener=_printer(args.json, args.explain),
                       phase=phase_printer(not args.json))
    report.data.update({"kernel": str(path), "func": func.name, "target": args.target})
    if not (args.quiet or args.json):
        print(print_node(func))
    try:
        return _run(args, ctx, kernel, report, output, trace)
    except TensorizeError as err:
        if not args.json:
            raise
        # The steps that passed stay in the JSON report, beside the error that ended it.
        print(json.dumps(report.to_dict([str(err)]), indent=2))
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE


def _run(args: argparse.Namespace, ctx: RunContext, kernel: KernelFile, report: RunReport,
         output: Path | None, trace: Path | None) -> int:
    """The steps, printed as they finish; the exit status."""
    func = kernel.func
    inputs, reference = _inputs_and_reference(kernel, ctx.seed, report)
    with reference:
        reparsed = T.parse(print_node(func), filename=f"<printed {func.name}>")
        report.step("round-trip", structural_equal(func, reparsed),
                    "print -> parse gives a structurally equal function")
        opts = RunOptions(intrinsic=args.intrinsic, require_tensorized=args.require_tensorized,
                          allow_fallback=args.allow_fallback, tune=args.tune,
                          emit=frozenset(args.emit))
        outcome = run_kernel(ctx, func, inputs, opts, report)
        expected = reference.result()
    if outcome.refusal:
        return _finish(report, args.json, outcome.refusal)
    if trace is not None and outcome.timeline is not None:
        write_atomically(trace, outcome.timeline)
        report.step("trace", True, f"timeline of the first NPU program written to {trace}")
    elif trace is not None:
        report.step("trace", False, f"{NO_PROGRAM}, so there is no timeline to write to "
                                    f"{trace}")
    _check_reference(expected, outcome.outputs or {}, report)
    if outcome.emitted:
        text = "\n\n".join(e.rstrip("\n") for e in outcome.emitted) + "\n"
        if output is not None:
            write_text_atomically(output, text)
        else:
            print(text, end="")
    return _finish(report, args.json)


def _context(args: argparse.Namespace) -> RunContext:
    """The run context from the options: the registry (with --intrinsics-dir, and the
    --machine file's own family), the target, its features, the machine, seed and limit."""
    machine = None
    if args.machine:
        from targets.npu import load_machine, machine_registry

        machine = load_machine(args.machine)
        registry = machine_registry(args.machine, args.intrinsics_dir)
    else:
        registry = default_registry(args.intrinsics_dir)
    try:
        return make_context(registry, args.target, features=args.features, machine=machine,
                            seed=args.seed, max_bytes=args.max_bytes, threads=args.threads,
                            arch=args.arch)
    except TensorizeError as err:
        raise UsageError(str(err)) from None


def _printer(as_json: bool, explain: bool) -> Callable[[Step | Note], None]:
    """What prints each step and note as it arrives: with ``explain`` the explanations too
    (with --json on stderr, and nothing else: stdout holds the JSON report)."""

    def show(item: Step | Note) -> None:
        if isinstance(item, Note) and item.kind == "explain":
            if explain:
                print(f"     explain     {item.text}",
                      file=sys.stderr if as_json else sys.stdout)
        elif as_json:
            return
        elif isinstance(item, Step):
            print(f"{item.status:<4} {item.name:<11} {item.detail}")
        else:
            print(item.text)

    return show


def _finish(report: RunReport, as_json: bool, errors: list[str] | None = None) -> int:
    """Print the errors (and the JSON report with --json); returns the exit status."""
    data = report.to_dict(errors)
    if as_json:
        print(json.dumps(data, indent=2))
    for error in errors or ():
        print(f"error: {error}", file=sys.stderr)
    return EXIT_OK if data["ok"] else EXIT_FAILED


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


def _inputs_and_reference(kernel: KernelFile, seed: int, report: RunReport
                          ) -> tuple[dict[str, np.ndarray], ReferenceBeside]:
    """Random inputs (every parameter; outputs start random too), and the file's reference
    called on them beside the run (:class:`ReferenceBeside`), its arguments checked first."""
    func = kernel.func
    outputs = written_params(func)  # an IR walk: nothing is compiled to learn it
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
    # The reference gets copies: the run may write its own inputs' arrays meanwhile.
    arguments = [inputs[p.name].copy() for p in given]
    return inputs, ReferenceBeside(kernel, arguments, outputs, report)


class ReferenceBeside:
    """The file's ``reference(...)`` on a thread of its own while the run goes on (numpy's
    products release the interpreter lock: a large kernel's reference costs the run
    nothing where a core is free), with the command's output as if it had come first.

    Until it has returned, the report's lines wait (the steps are still recorded); then
    they print, and the later ones as they come. Where it fails, the run ends as it did
    when the reference was called before any step: with the reference's error, no line
    printed and the report as it was (a ``--json`` report has no step). Used as a context
    manager around the run: an error the run raises meanwhile gives way to the
    reference's, which came first.
    """

    def __init__(self, kernel: KernelFile, arguments: list[np.ndarray],
                 outputs: list[Any], report: RunReport) -> None:
        self._report = report
        self._listener = report.listener
        self._lock = threading.Lock()  # the two threads' hands on the lines
        self._held: list[Step | Note] | None = []  # None once the lines flow
        self._steps, self._data = list(report.steps), dict(report.data)
        self._expected: dict[str, np.ndarray] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._running = False  # started, and not yet waited for
        if kernel.reference is not None:
            self._thread = threading.Thread(
                target=self._call, args=(kernel.reference, kernel.path, arguments, outputs),
                name="reference", daemon=True)  # a run that fails elsewhere does not wait

    def _call(self, reference: Callable[..., Any], path: Path, arguments: list[np.ndarray],
              outputs: list[Any]) -> None:
        try:
            self._expected = call_reference(reference, path, arguments, outputs)
        except BaseException as err:  # handed to the thread that waits in result()
            self._error = err
            return
        with self._lock:
            held, self._held = self._held, None
            for item in held or ():
                self._show(item)

    def _show(self, item: Step | Note) -> None:
        if self._listener is not None:
            self._listener(item)

    def _hold(self, item: Step | Note) -> None:
        with self._lock:
            if self._held is None:
                self._show(item)
            else:
                self._held.append(item)

    def __enter__(self) -> ReferenceBeside:
        if self._thread is not None:
            self._report.listener = self._hold
            self._running = True
            self._thread.start()
        return self

    def result(self) -> dict[str, np.ndarray] | None:
        """Wait for the reference: what it returned (None: the file has none); its error,
        with the report as it was and no line printed."""
        if self._thread is None:
            return None
        self._thread.join()
        self._running = False
        report = self._report
        report.listener = self._listener
        if self._error is not None:
            report.steps[:] = self._steps
            report.data.clear()
            report.data.update(self._data)
            raise self._error
        return self._expected

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: Any) -> None:
        if self._running:
            self.result()


def _check_reference(expected: dict[str, np.ndarray] | None, outputs: dict[str, np.ndarray],
                     report: RunReport) -> None:
    if expected is None:
        report.step("reference", True, "skipped: the file defines no reference(...) function")
        return
    for name, want in expected.items():
        ok, detail = compare(outputs[name], want)
        report.step("reference", ok, f"{name} against numpy reference(...): {detail}")
