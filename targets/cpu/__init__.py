"""The CPU code generator: one for every CPU target a family describes in its ``cpu:``
section (AArch64 with NEON dot products, x86-64 with AVX-512 VNNI, any a vendor adds).

Tensorized IR becomes LLVM IR (llvmlite) for the target's triple, CPU and features, compiled
to assembly or an ELF object, and run here by the first engine of the target's ``run`` list
that can: natively through LLVM's JIT (timed), AArch64 code under an in-process emulator
(instructions counted), or under qemu-user in a child process (i8mm, which that emulator
lacks). ``docs/cpu_targets.md`` explains how to describe a target.

- :func:`emit` turns a function (tensorized for the target by ``tensorize.engine``, or
  plain) into a :class:`CpuKernel`: LLVM IR, symbol, buffer (argument) order, features.
- :func:`compile` gives the -O3 assembly (``"asm"``) or the object (``"obj"``).
- :func:`engine_for` says which engine would run it here, or why none can; :func:`run` runs
  it on numpy arrays; :func:`count_executed` counts the instructions it executes, where an
  engine here can; :func:`run_parts` runs kernels of parts of the output rows at once, one
  thread each (natively only; :func:`native_refusal` says why not here).
- :func:`split_constants` splits a tensorized function into the packing of its constant
  inputs (a network's weights: run once, at load) and the per-call kernel that reads the
  packed buffers.
"""

from targets.cpu.emit import CpuKernel, emit
from targets.cpu.errors import CpuRunError, EmitError
from targets.cpu.machine import compile
from targets.cpu.parallel import Part, run_parts
from targets.cpu.prepack import Prepacked, split_constants
from targets.cpu.run import CpuRun, count_executed, engine_for, native_refusal, run

__all__ = ["CpuKernel", "CpuRun", "CpuRunError", "EmitError", "Part", "Prepacked", "compile",
           "count_executed", "emit", "engine_for", "native_refusal", "run", "run_parts",
           "split_constants"]
