"""The AArch64 target machine: LLVM IR text to optimized IR, assembly or an ELF object."""

from __future__ import annotations

from functools import cache

import llvmlite.binding as llvm

from targets.arm.emit import ArmKernel
from targets.arm.errors import EmitError

__all__ = ["TRIPLE", "compile", "optimize", "target_machine"]

TRIPLE = "aarch64-unknown-linux-gnu"


@cache
def _target() -> llvm.Target:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm.Target.from_triple(TRIPLE)


def target_machine(features: str) -> llvm.TargetMachine:
    """An -O3 AArch64 machine with ``features`` (``+neon,+dotprod``). Static relocation and
    the small code model keep the object's relocations to the few the loader applies."""
    return _target().create_target_machine(cpu="generic", features=features, opt=3,
                                           reloc="static", codemodel="small")


def optimize(text: str, features: str) -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    """Parse, verify and optimize (LLVM's -O3 pipeline, vectorizers on) IR ``text`` for
    AArch64 with ``features``."""
    machine = target_machine(features)
    try:
        module = llvm.parse_assembly(text)
        module.verify()
    except RuntimeError as err:
        raise EmitError(f"the arm backend produced invalid LLVM IR ({err}); please report "
                        "it") from None
    module.triple = TRIPLE
    module.data_layout = str(machine.target_data)
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)
    return module, machine


def compile(kernel: ArmKernel, output: str = "obj") -> bytes | str:
    """The kernel as AArch64 assembly text (``output="asm"``) or an ELF relocatable object
    (``"obj"``, bytes), optimized at -O3 for the kernel's features."""
    if output not in ("asm", "obj"):
        raise EmitError(f"compile requires output 'asm' or 'obj', got {output!r}")
    module, machine = optimize(kernel.llvm_ir, kernel.features)
    if output == "asm":
        return machine.emit_assembly(module)
    return machine.emit_object(module)
