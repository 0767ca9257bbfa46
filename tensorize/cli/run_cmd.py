"""``tensorize run KERNEL.py``: load a kernel, print it, check it, run it and validate it.

The steps, each reported on one line as it finishes:

1. parse the file's ``@T.prim_func`` kernel (``--func NAME`` picks one of several);
2. print it in script syntax and parse the print again: the two must be structurally equal;
3. compile it for this machine and run it on random inputs (``--seed``);
4. when the file defines ``reference(...)``, a numpy function taking the kernel's input arrays
   in parameter order and returning its output(s), compare: exactly for integer outputs,
   to a relative tolerance for floats.

Exit status 0 when every check passes, 1 when one fails, 2 for a bad kernel or bad usage.
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

from ir import PrimFunc
from ir import script as T
from ir.errors import KernelError
from ir.printer import print_node
from ir.structural import structural_equal
from targets import host

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

# Float outputs are compared to a float64 numpy reference with this relative tolerance per
# dtype (accumulation order differs, so exact equality would be wrong for floats).
_RTOL = {"float16": 2e-2, "bfloat16": 5e-2, "float32": 1e-4, "float64": 1e-10}


def register(subparsers: Any) -> None:
    """Add the ``run`` command."""
    parser = subparsers.add_parser(
        "run", help="parse, print, run and validate a kernel file",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel", metavar="KERNEL.py", help="a Python file of @T.prim_func kernels")
    parser.add_argument("--func", help="the kernel to run when the file defines several")
    parser.add_argument("--seed", type=int, default=0, help="random seed for the inputs (0)")
    parser.add_argument("--quiet", action="store_true", help="do not print the kernel")
    parser.add_argument("--json", action="store_true", help="print a JSON report instead")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    """Run the steps; returns the exit status."""
    path = Path(args.kernel)
    report: dict[str, Any] = {"kernel": str(path)}
    func = _pick(T.load_file(path), args.func, path)
    report["func"] = func.name
    text = print_node(func)
    if not (args.quiet or args.json):
        print(text)

    steps: list[tuple[str, bool, str]] = []

    def step(name: str, ok: bool, detail: str) -> None:
        steps.append((name, ok, detail))
        if not args.json:
            print(f"{'ok  ' if ok else 'FAIL'} {name:<11} {detail}", file=sys.stderr)

    reparsed = T.parse(text, filename=f"<printed {func.name}>")
    step("round-trip", structural_equal(func, reparsed),
         "print -> parse gives a structurally equal function")

    rng = np.random.default_rng(args.seed)
    inputs = {p.name: random_array(p.shape, p.dtype, rng) for p in func.params}
    start = time.perf_counter()
    compiled = host.compile(func)
    compile_s = time.perf_counter() - start
    arrays = {name: a.copy() for name, a in inputs.items()}
    start = time.perf_counter()
    compiled(*arrays.values())
    run_s = time.perf_counter() - start
    outputs = [p.name for p in compiled.written]
    step("execute", True, f"host LLVM JIT: compile {compile_s * 1e3:.0f} ms, "
                          f"run {run_s * 1e3:.1f} ms, outputs {', '.join(outputs)}")
    report["timing_ms"] = {"compile": round(compile_s * 1e3, 2), "run": round(run_s * 1e3, 3)}

    reference = _reference(path)
    if reference is None:
        step("validate", True, "skipped: the file defines no reference(...) function")
    else:
        given = [inputs[p.name] for p in func.params if p.name not in outputs]
        expected = reference(*given)
        expected = expected if isinstance(expected, tuple) else (expected,)
        if len(expected) != len(outputs):
            raise KernelError(f"{path}: reference(...) returned {len(expected)} arrays for "
                              f"{len(outputs)} outputs ({', '.join(outputs)})")
        for name, want in zip(outputs, expected):
            ok, detail = compare(arrays[name], np.asarray(want))
            step("validate", ok, f"{name} against numpy reference(...): {detail}")

    report["steps"] = [{"step": n, "ok": ok, "detail": d} for n, ok, d in steps]
    report["ok"] = all(ok for _, ok, _ in steps)
    if args.json:
        print(json.dumps(report, indent=2))
    return EXIT_OK if report["ok"] else EXIT_FAILED


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
        mismatched = int(np.count_nonzero(got != want.astype(got.dtype)))
        if mismatched:
            where = tuple(int(x) for x in np.argwhere(got != want.astype(got.dtype))[0])
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
