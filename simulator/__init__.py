"""The simulated NPU: a systolic-array machine in the style of VTA and Gemmini.

Load, compute and store queues run concurrently and synchronise through dependency tokens;
a weight-stationary (or output-stationary) R x C array, int8 scratchpads, an int32
accumulator (or, as ``machine.datapath`` states, bfloat16 and float32) and a vector unit
compute; two DMA engines share one DRAM port. Every run is
exact and timed: it reports cycles, per-unit busy and stall time, MAC utilisation, bytes
moved and a Chrome trace, and faults on what hardware would silently get wrong. Programs
keep their size in proportion to their loop nests, not their work: loop and step words
repeat instructions with affine addresses, expanded as they are fetched (``simulator.loops``).

    config = load_machine()
    result = simulate(assemble(text), config, dram)
    print(result.summary())

docs/simulator.md is the reference: ISA, assembly, timing formulas, config fields, faults.
"""

from simulator.assembler import assemble, disassemble, format_instruction
from simulator.config import MachineConfig, RequantConfig, default_machine_path, load_machine
from simulator.engine import simulate
from simulator.isa import (
    Deps,
    Finish,
    Gemm,
    Instruction,
    Load,
    Loop,
    Mem,
    Nop,
    Operand,
    QAdd,
    Queue,
    Requant,
    Step,
    Store,
    Vec,
    VecOp,
    decode,
    encode,
)
from simulator.loops import expand, expanded
from simulator.programs import GemmProgram, gemm_program
from simulator.result import Roofline, SimResult, UnitStats, gigabytes_per_second

__all__ = [
    "Deps",
    "Finish",
    "Gemm",
    "GemmProgram",
    "Instruction",
    "Load",
    "Loop",
    "MachineConfig",
    "Mem",
    "Nop",
    "Operand",
    "QAdd",
    "Queue",
    "Requant",
    "RequantConfig",
    "Roofline",
    "SimResult",
    "Step",
    "Store",
    "UnitStats",
    "Vec",
    "VecOp",
    "assemble",
    "decode",
    "default_machine_path",
    "disassemble",
    "encode",
    "expand",
    "expanded",
    "format_instruction",
    "gemm_program",
    "gigabytes_per_second",
    "load_machine",
    "simulate",
]
