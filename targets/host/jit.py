"""LLVM module text to machine code for this machine, through llvmlite's MCJIT.

The target machine is the host CPU with all its features, so LLVM may use the widest vectors
it has; no fast-math flag is ever set, so floating-point results stay those of the IR.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import llvmlite.binding as llvm

from ir.errors import ExecutionError

_OPT_LEVEL = 3


@cache
def _host_target() -> tuple[llvm.Target, str, str]:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target, llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def _target_machine() -> llvm.TargetMachine:
    """A target machine for this CPU. Each engine gets its own: MCJIT takes ownership of the
    machine it is given and destroys it with the engine."""
    target, cpu, features = _host_target()
    return target.create_target_machine(cpu=cpu, features=features, opt=_OPT_LEVEL,
                                        codemodel="jitdefault")


def _converts_half() -> bool:
    """True when LLVM converts half <-> float inline here. Otherwise it calls compiler-rt
    functions that the JIT cannot find in this process, and the code would crash."""
    _, _, features = _host_target()
    return not llvm.get_process_triple().startswith("x86_64") or "+f16c" in features.split(",")


@dataclass
class MachineCode:
    """A JIT-compiled module; ``address`` is the entry point. Keep this object alive while
    the code may run: dropping it frees the code."""

    engine: llvm.ExecutionEngine
    address: int
    optimized_ir: str


def compile_module(text: str, symbol: str) -> MachineCode:
    """Parse, verify, optimize (-O3) and JIT-compile LLVM IR ``text``; return ``symbol``."""
    if " half" in text and not _converts_half():
        raise ExecutionError("float16 on the host backend requires a CPU with half-precision "
                             "conversion instructions (F16C on x86-64); this one has none")
    machine = _target_machine()
    try:
        module = llvm.parse_assembly(text)
        module.verify()
    except RuntimeError as err:
        raise ExecutionError(f"the host backend produced invalid LLVM IR ({err}); please "
                             "report it") from None
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    _optimize(module, machine)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    return MachineCode(engine, engine.get_function_address(symbol), str(module))


def _optimize(module: llvm.ModuleRef, machine: llvm.TargetMachine) -> None:
    tuning = llvm.create_pipeline_tuning_options(speed_level=_OPT_LEVEL)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)
