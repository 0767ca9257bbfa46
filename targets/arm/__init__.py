"""The AArch64 backend: tensorized IR to LLVM IR (llvmlite) for ``aarch64`` with the
dot-product extension, compiled to assembly or an ELF object, and run in-process under an
AArch64 emulator (unicorn) on any host, or natively on an AArch64 one.

- :func:`emit` turns a function (tensorized for ``arm`` by ``tensorize.engine``, or plain)
  into an :class:`ArmKernel`: LLVM IR, symbol, buffer (argument) order, features.
- :func:`compile` gives the -O3 assembly (``"asm"``) or the object (``"obj"``).
- :func:`run` runs the object on numpy arrays and reports the outputs, the instructions
  executed and the dot-product instructions among them (``docs/arm_backend.md``).
"""

from targets.arm.emit import DEFAULT_FEATURES, ArmKernel, emit
from targets.arm.errors import ArmRunError, EmitError
from targets.arm.machine import compile
from targets.arm.run import ArmRun, can_run, run

__all__ = ["DEFAULT_FEATURES", "ArmKernel", "ArmRun", "ArmRunError", "EmitError", "can_run",
           "compile", "emit", "run"]
