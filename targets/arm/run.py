"""Running an emitted kernel: under unicorn (an AArch64 emulator, in-process) on any host,
through llvmlite's JIT and ctypes on an AArch64 one.

Under the emulator the object code is loaded (:mod:`.elf`), the buffers, a stack and a stop
address are mapped, and the function runs from its symbol with X0.. pointing at the buffers
and LR at the stop address. Each executed basic block adds its length in instructions (4
bytes each) and its count of dot-product instructions, decoded once per block, so a run
reports exactly what the core executed at the cost of one callback per block.
"""

from __future__ import annotations

import platform
import struct
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from targets.arm.elf import load_object
from intrinsics import feature_names
from targets.arm.emit import ArmKernel
from targets.arm.errors import ArmRunError
from targets.arm.machine import compile

__all__ = ["ArmRun", "can_run", "run"]

# Features the emulator's core (QEMU 5's "max" CPU in unicorn 2.1) executes; SMMLA, UMMLA,
# USMMLA and USDOT (i8mm) raise an undefined-instruction exception there.
EMULATED_FEATURES = frozenset({"neon", "dotprod"})
_CODE, _DATA, _STACK, _STOP = 0x10_0000, 0x1000_0000, 0x7F00_0000, 0x0F00_0000
_STACK_SIZE, _PAGE = 1 << 20, 1 << 12
# SDOT/UDOT (vector) and SDOT/UDOT (by element): fixed bits of the encodings, U and Q free.
_DOT_PATTERNS = ((0x9FE0FC00, 0x0E809400), (0x9FC0F400, 0x0F80E000))


@dataclass(frozen=True)
class ArmRun:
    """Outputs by parameter name; the instructions executed and the SDOT/UDOT among them
    (None when run natively, where nothing counts them); and where it ran."""

    outputs: dict[str, np.ndarray]
    instructions: int | None
    dot_instructions: int | None
    engine: str


def can_run(kernel: ArmKernel) -> tuple[bool, str]:
    """Whether this host can run ``kernel``, and why not: natively on AArch64, or under the
    emulator when its features are ones the emulator executes."""
    if _native():
        return True, ""
    missing = feature_names(kernel.features) - EMULATED_FEATURES
    if missing:
        return False, (f"the emulator (unicorn) does not execute {', '.join(sorted(missing))} "
                       "instructions, and this host is not AArch64")
    return True, ""


def run(kernel: ArmKernel, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]
        ) -> ArmRun:
    """Run ``kernel`` on copies of ``inputs`` (by parameter name, or the first parameters in
    order; others and intermediates start as zeros) and return what it wrote."""
    ok, reason = can_run(kernel)
    if not ok:
        raise ArmRunError(f"cannot run {kernel.symbol}: {reason}")
    arrays = _arrays(kernel, inputs)
    if _native():
        return _run_native(kernel, arrays)
    return _run_emulated(kernel, arrays)


def _native() -> bool:
    return platform.machine().lower() in ("aarch64", "arm64")


def _arrays(kernel: ArmKernel, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]
            ) -> list[np.ndarray]:
    if not isinstance(inputs, Mapping):
        inputs = {b.name: a for b, a in zip(kernel.buffers, inputs)}
    arrays = []
    for buffer in kernel.buffers:
        array = np.zeros(buffer.shape, buffer.dtype.numpy)
        if buffer.name in inputs:
            given = np.asarray(inputs[buffer.name])
            if given.shape != array.shape:
                raise ArmRunError(f"input {buffer.name} requires shape {array.shape}, got "
                                  f"{given.shape}")
            array[...] = given
        arrays.append(array)
    return arrays


def _run_emulated(kernel: ArmKernel, arrays: list[np.ndarray]) -> ArmRun:
    from unicorn import UC_ARCH_ARM64, UC_HOOK_BLOCK, UC_MODE_ARM, Uc, UcError
    from unicorn import arm64_const as regs

    image = load_object(compile(kernel, "obj"), _CODE)  # type: ignore[arg-type]
    uc = Uc(UC_ARCH_ARM64, UC_MODE_ARM)
    uc.ctl_set_cpu_model(regs.UC_CPU_ARM64_MAX)
    uc.reg_write(regs.UC_ARM64_REG_CPACR_EL1, 3 << 20)  # FP/SIMD on at EL0 and EL1
    uc.mem_map(_CODE, _round(len(image.data)))
    uc.mem_write(_CODE, image.data)
    uc.mem_map(_STOP, _PAGE)
    uc.mem_map(_STACK, _STACK_SIZE)
    addresses, at = [], _DATA
    for array in arrays:
        addresses.append(at)
        at += -(-max(array.nbytes, 1) // 64) * 64
    status = at
    uc.mem_map(_DATA, _round(status + 24 - _DATA))
    for address, array in zip(addresses, arrays):
        uc.mem_write(address, np.ascontiguousarray(array).tobytes())
    args = [*addresses, status]
    for index, value in enumerate(args[:8]):
        uc.reg_write(getattr(regs, f"UC_ARM64_REG_X{index}"), value)
    # AAPCS64: arguments past the eighth go on the stack, 8 bytes each, from SP upwards.
    stacked = args[8:]
    sp = _STACK + _STACK_SIZE - 16 - -(-len(stacked) * 8 // 16) * 16
    uc.mem_write(sp, struct.pack(f"<{len(stacked)}Q", *stacked))
    uc.reg_write(regs.UC_ARM64_REG_SP, sp)
    uc.reg_write(regs.UC_ARM64_REG_LR, _STOP)
    blocks: Counter[tuple[int, int]] = Counter()
    uc.hook_add(UC_HOOK_BLOCK, lambda _uc, address, size, _data:
                blocks.update(((address, size),)))
    try:
        uc.emu_start(image.symbols[kernel.symbol], _STOP)
    except UcError as err:
        raise ArmRunError(f"{kernel.symbol} stopped under the emulator at "
                          f"{uc.reg_read(regs.UC_ARM64_REG_PC):#x}: {err}") from None
    _check_status(kernel, bytes(uc.mem_read(status, 24)))
    instructions = sum(size // 4 * n for (_, size), n in blocks.items())
    dots = sum(_dot_count(bytes(uc.mem_read(a, s))) * n for (a, s), n in blocks.items())
    outputs = {}
    for buffer, address, array in zip(kernel.buffers, addresses, arrays):
        if buffer.name in kernel.outputs:
            raw = bytes(uc.mem_read(address, array.nbytes))
            outputs[buffer.name] = np.frombuffer(raw, array.dtype).reshape(array.shape).copy()
    return ArmRun(outputs, instructions, dots, "unicorn")


def _run_native(kernel: ArmKernel, arrays: list[np.ndarray]) -> ArmRun:
    import ctypes

    import llvmlite.binding as llvm

    from targets.arm.machine import optimize

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module, machine = optimize(kernel.llvm_ir, kernel.features)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    address = engine.get_function_address(kernel.symbol)
    status = np.zeros(3, np.int64)
    pointers = [a.ctypes.data_as(ctypes.c_void_p) for a in [*arrays, status]]
    ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(pointers))(address)(*pointers)
    _check_status(kernel, status.tobytes())
    outputs = {b.name: a for b, a in zip(kernel.buffers, arrays) if b.name in kernel.outputs}
    return ArmRun(outputs, None, None, "native")


def _check_status(kernel: ArmKernel, raw: bytes) -> None:
    site, dim, index = struct.unpack("<qqq", raw)
    if site:
        where = kernel.sites[site - 1]
        raise ArmRunError(f"block {where.block}: {where.kind} {where.access()} is out of "
                          f"bounds (index {index} in dimension {dim})")


def _dot_count(code: bytes) -> int:
    words = struct.unpack(f"<{len(code) // 4}I", code[:len(code) // 4 * 4])
    return sum(1 for w in words for mask, bits in _DOT_PATTERNS if w & mask == bits)


def _round(size: int) -> int:
    return -(-size // _PAGE) * _PAGE
