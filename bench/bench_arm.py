"""MACs per executed AArch64 instruction: the arm target's kernel (packing included) against
LLVM's own -O3 vectorisation of the untouched kernel, same target features, both run under
the emulator (unicorn), which counts every instruction executed.

    .venv/bin/python bench/bench_arm.py

The inner-loop figure is the k loop's body from the assembly: its sdot count times 16 MACs
over its instruction count. The +i8mm column is the same kernel tensorized with i8mm on (the
intrinsic the engine's estimate picks), the smmla column with SMMLA named (its register-blocked
schedule); both run exactly under qemu-user where it is installed and are counted under
unicorn with every i8mm instruction replaced by SDOT on the same registers.
"""

from __future__ import annotations

import re
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import suite_kernels  # noqa: E402  (bench/ is on the path: these run as scripts)

from targets import cpu  # noqa: E402
from targets.arm.unicorn import emulate  # noqa: E402
from targets.cpu.run import aligned_zeros  # noqa: E402
from tensorize.engine import auto_tensorize  # noqa: E402


def inner_loop(asm: str) -> tuple[int, int]:
    """(sdot count, instruction count) of the basic block holding the most sdot."""
    best, current = (0, 1), []
    for line in (l.strip() for l in asm.splitlines()):
        if re.match(r"^\.LBB\d+_\d+:", line) or not line or line.startswith((".", "//")):
            if re.match(r"^\.LBB", line):
                current = []
            continue
        current.append(line)
        if line.startswith(("b.", "b\t", "cbz", "cbnz", "tbz", "tbnz", "ret")):
            dots = sum(i.startswith(("sdot", "udot")) for i in current)
            best = max(best, (dots, len(current)))
            current = []
    return best


I8MM = "+neon,+dotprod,+i8mm"
# SMMLA, UMMLA, USMMLA and USDOT (vector): their fixed bits with the registers cleared.
_I8MM = (0x4E80A400, 0x6E80A400, 0x4E80AC00, 0x4E809C00)
_SDOT_VECTOR = 0x4E809400


def i8mm_instructions(kernel: cpu.CpuKernel, inputs: dict[str, np.ndarray]) -> int:
    """Instructions an i8mm kernel executes, counted under unicorn (which does not execute
    i8mm) with each i8mm instruction replaced by SDOT (vector) on the same registers: one
    instruction for one, and no branch of these kernels depends on the values computed."""
    obj = bytearray(cpu.compile(kernel, "obj"))
    code = _text(bytes(obj))
    for at in range(code[0], code[0] + code[1], 4):
        word, = struct.unpack_from("<I", obj, at)
        if word & 0xFFE0FC00 in _I8MM:
            struct.pack_into("<I", obj, at, _SDOT_VECTOR | word & 0x001F03FF)
    arrays = []
    for buffer in kernel.buffers:
        array = aligned_zeros(buffer.shape, buffer.dtype.numpy, kernel.cpu.alignment)
        if buffer.name in inputs:
            array[...] = inputs[buffer.name]
        arrays.append(array)
    return emulate(bytes(obj), kernel.symbol, arrays, kernel.cpu.alignment).instructions


def _text(obj: bytes) -> tuple[int, int]:
    """(offset, size) of the object's .text section."""
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
    names = struct.unpack_from("<IIQQQQ", obj, shoff + shstrndx * shentsize)[4]
    for index in range(shnum):
        name, _, _, _, offset, size = struct.unpack_from("<IIQQQQ", obj, shoff + index * shentsize)
        if obj[names + name:obj.index(b"\0", names + name)] == b".text":
            return offset, size
    raise SystemExit("the kernel object has no .text section")


def main() -> None:
    rng = np.random.default_rng(0)
    kernels = suite_kernels.builders()
    cases = [("int8 GEMM 64^3", kernels["gemm_int8"](64, 64, 64), 64 ** 3),
             ("int8 GEMM 256^3", kernels["gemm_int8"](256, 256, 256), 256 ** 3),
             ("conv2d NHWC 1x28x28x64, 3x3x64 -> 64", kernels["conv2d_nhwc_int8"](1, 28, 28, 64, 64),
              28 * 28 * 64 * 3 * 3 * 64),
             ("int8 GEMM 17x33x65 (edge tiles)", kernels["gemm_int8"](17, 33, 65), 17 * 33 * 65),
             ("int8 GEMM 100x37x50 (edge tiles)", kernels["gemm_int8"](100, 37, 50),
              100 * 37 * 50)]
    print(f"{'kernel':36} {'ours':>8} {'llvm -O3':>9} {'ratio':>6} {'inner loop':>11} "
          f"{'+i8mm':>7} {'smmla':>7}")
    for label, func, count in cases:
        inputs = {p.name: rng.integers(-128, 128, p.shape).astype(p.dtype.numpy)
                  for p in func.params[:2]}
        ours = cpu.emit(auto_tensorize(func, "arm").func, "arm")
        mine = cpu.run(ours, inputs)
        # The untouched kernel through the same emitter (the same facts, such as the
        # buffers not aliasing): what LLVM's own -O3 vectorisation makes of it.
        base = cpu.run(cpu.emit(func, "arm"), inputs)
        out = ours.outputs[0]
        if not np.array_equal(mine.outputs[out], base.outputs[out]):
            raise SystemExit(f"{label}: the tensorized kernel's output differs")
        dots, body = inner_loop(cpu.compile(ours, "asm"))
        # The same kernel with +i8mm: the intrinsic the engine's estimate picks, and SMMLA
        # named; each checked exactly where qemu-user runs it, counted under unicorn with
        # i8mm swapped for SDOT.
        figures = []
        for intrinsic in (None, "arm_smmla"):
            chosen = auto_tensorize(func, "arm", features=I8MM, intrinsic=intrinsic)
            kernel = cpu.emit(chosen.func, "arm", I8MM)
            if cpu.engine_for(kernel)[0] is not None and not np.array_equal(
                    cpu.run(kernel, inputs).outputs[out], base.outputs[out]):
                raise SystemExit(f"{label}: the +i8mm kernel's output differs")
            figures.append(count / i8mm_instructions(kernel, inputs))
        print(f"{label:36} {count / mine.instructions:8.2f} {count / base.instructions:9.2f} "
              f"{base.instructions / mine.instructions:6.2f} {16 * dots / body:11.2f} "
              f"{figures[0]:7.2f} {figures[1]:7.2f}")


if __name__ == "__main__":
    main()
