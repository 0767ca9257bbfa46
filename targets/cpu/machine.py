"""A CPU target's LLVM machine: LLVM IR text to optimized IR, assembly or an ELF object, for
the triple, CPU and features its description names."""

from __future__ import annotations

from functools import cache

import llvmlite.binding as llvm

from intrinsics import CpuTarget
from targets.cpu.emit import CpuKernel
from targets.cpu.errors import EmitError

__all__ = ["compile", "optimize", "target_machine"]


@cache
def _target(triple: str) -> llvm.Target:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    try:
        return llvm.Target.from_triple(triple)
    except RuntimeError as err:
        raise EmitError(f"LLVM requires a triple it has a backend for, got {triple!r} "
                        f"({str(err).strip()})") from None


def target_machine(cpu: CpuTarget, features: str, jit: bool = False) -> llvm.TargetMachine:
    """An -O3 machine for ``cpu`` with ``features``. For an object: static relocation and
    the small code model, which keep its relocations to the few a loader applies; for the JIT
    (``jit``), the code model the JIT lays code out for."""
    if jit:
        return _target(cpu.triple).create_target_machine(cpu=cpu.cpu, features=features,
                                                         opt=3, codemodel="jitdefault")
    return _target(cpu.triple).create_target_machine(cpu=cpu.cpu, features=features, opt=3,
                                                     reloc="static", codemodel="small")


def optimize(kernel: CpuKernel, jit: bool = False
             ) -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    """Parse, verify and optimize (LLVM's -O3 pipeline, vectorizers on) the kernel's IR for
    its target and features."""
    machine = target_machine(kernel.cpu, kernel.features, jit)
    try:
        module = llvm.parse_assembly(kernel.llvm_ir)
        module.verify()
    except RuntimeError as err:
        raise EmitError(f"the CPU code generator produced invalid LLVM IR ({err}); please "
                        "report it") from None
    module.triple = kernel.cpu.triple
    module.data_layout = str(machine.target_data)
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)
    return module, machine


def compile(kernel: CpuKernel, output: str = "obj") -> bytes | str:
    """The kernel as assembly text (``output="asm"``) or an ELF relocatable object (``"obj"``,
    bytes), optimized at -O3 for its target and features."""
    if output not in ("asm", "obj"):
        raise EmitError(f"compile requires output 'asm' or 'obj', got {output!r}")
    module, machine = optimize(kernel)
    if output == "asm":
        return machine.emit_assembly(module)
    return machine.emit_object(module)
