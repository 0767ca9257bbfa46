"""The ``--target arm`` steps of ``tensorize run``: emit LLVM IR for AArch64, compile it to
assembly and an object, and run the object (under the in-process emulator on any host,
natively on AArch64), counting the instructions it executes.

A run this host cannot make (i8mm instructions, which the emulator does not execute, on a
host that is not AArch64) is reported as skipped with the reason, never as passed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ir import PrimFunc
from targets import arm

# Multiply-accumulates per SDOT/UDOT: 4 lanes of 4-byte dot products.
MACS_PER_DOT = 16


def run_arm(func: PrimFunc, features: str, reference: dict[str, np.ndarray],
            inputs: dict[str, np.ndarray], report: Any, compare: Any, emitted: list[str],
            emit_code: bool) -> dict[str, np.ndarray]:
    """Emit ``func`` (tensorized for arm) for ``features`` and run it where this host can;
    returns the outputs of that run, else ``reference``."""
    kernel = arm.emit(func, features)
    start = time.perf_counter()
    assembly = arm.compile(kernel, "asm")
    instructions = [line.split()[0] for line in assembly.splitlines()
                    if line.startswith("\t") and not line.lstrip().startswith(".")]
    dots = sum(op in ("sdot", "udot", "usdot") for op in instructions)
    mmlas = sum(op.endswith("mmla") for op in instructions)
    report.step("emit", True, f"AArch64 ({features}) through LLVM -O3: "
                              f"{time.perf_counter() - start:.2f} s, {len(instructions)} "
                              f"instructions, {dots} dot product and {mmlas} matrix "
                              "multiply instruction(s)")
    report.data["arm"] = {"features": features, "static_instructions": len(instructions)}
    if emit_code:
        emitted.append(assembly)
    ok, reason = arm.can_run(kernel)
    if not ok:
        report.skip("run", reason)
        return reference
    start = time.perf_counter()
    run = arm.run(kernel, inputs)
    seconds = time.perf_counter() - start
    counted = ""
    if run.instructions is not None:
        macs = MACS_PER_DOT * (run.dot_instructions or 0)
        counted = (f", {run.instructions} instructions executed, {run.dot_instructions} "
                   f"sdot/udot ({macs / run.instructions:.2f} MACs per instruction)")
        report.data["arm"].update({"instructions": run.instructions,
                                   "dot_instructions": run.dot_instructions})
    for name, expected in reference.items():
        ok, detail = compare(run.outputs[name], expected)
        report.step("run", ok, f"{name} on {run.engine} ({seconds:.1f} s{counted}) against the "
                               f"reference executor: {detail}")
    return run.outputs
