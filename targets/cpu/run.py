"""Running an emitted kernel here, by the first engine of its target's ``run`` list that can:

- ``native``: on a host of the target's architecture that has every feature the kernel was
  compiled with, through llvmlite's JIT (MCJIT) and ctypes, timed over several runs;
- ``unicorn``: AArch64 code under the in-process emulator (:mod:`targets.arm.unicorn`), when
  it executes every feature the kernel was compiled with; it counts the instructions
  executed, and those the target's ``macs`` table names;
- ``qemu-user``: AArch64 code as a static executable under ``qemu-aarch64-static`` in a
  child process (:mod:`targets.arm.qemu`), when it is installed and executes every feature
  the kernel was compiled with (i8mm, which unicorn does not); nothing is counted or timed.

A kernel no engine can run is refused with every engine's reason, never run: a feature the
host lacks would fault (SIGILL) or, under an emulator, stop with an undefined instruction.
Every buffer starts at a multiple of the target's ``alignment``, which the code generator
relies on for the aligned loads and stores its templates ask for.
"""

from __future__ import annotations

import ctypes
import statistics
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from intrinsics import feature_names
from targets.cpu.emit import CpuKernel
from targets.cpu.errors import CpuRunError
from targets.cpu.host import host_arch, missing_features
from targets.cpu.machine import compile, optimize

__all__ = ["CpuRun", "aligned_zeros", "engine_for", "run"]


@dataclass(frozen=True)
class CpuRun:
    """Outputs by parameter name and the ``engine`` that ran; under an emulator the
    instructions it executed and, by mnemonic, those of the target's ``macs`` table
    (``counted``); natively the wall time of each run (``seconds``) and the process's CPU
    time over it (``cpu_seconds``)."""

    outputs: dict[str, np.ndarray]
    engine: str
    instructions: int | None = None
    counted: Mapping[str, int] | None = None
    seconds: tuple[float, ...] = ()
    # The process's CPU time over each native run (several threads add theirs: twice the
    # wall time on two busy cores).
    cpu_seconds: tuple[float, ...] = ()

    @property
    def best(self) -> float:
        """The fastest run's seconds."""
        return min(self.seconds)

    @property
    def median(self) -> float:
        """The median run's seconds."""
        return statistics.median(self.seconds)


def engine_for(kernel: CpuKernel) -> tuple[str | None, str]:
    """The first engine of the target's ``run`` list that can run ``kernel`` here, or None
    and why each cannot."""
    reasons = []
    for engine in kernel.cpu.engines:
        reason = _REFUSALS[engine](kernel)
        if reason is None:
            return engine, ""
        reasons.append(f"{engine}: {reason}")
    return None, "; ".join(reasons)


def run(kernel: CpuKernel, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray],
        runs: int = 1) -> CpuRun:
    """Run ``kernel`` on copies of ``inputs`` (by parameter name, or the first parameters in
    order; others and intermediates start as zeros) and return what it wrote. Natively it
    runs ``runs`` times, each on fresh copies, and the first run's outputs are returned."""
    engine, reason = engine_for(kernel)
    if engine is None:
        raise CpuRunError(f"cannot run {kernel.symbol} ({kernel.cpu.target}, "
                          f"{kernel.features}) here: {reason}")
    if runs < 1:
        raise CpuRunError(f"run requires runs >= 1, got {runs}")
    return _RUNNERS[engine](kernel, _arrays(kernel, inputs), runs)


def count_executed(kernel: CpuKernel, inputs: Mapping[str, np.ndarray]) -> int | None:
    """Instructions ``kernel`` executes on ``inputs`` (by parameter name; others start as
    zeros) where an engine here counts them; None
    where none does (natively, under qemu-user, or no engine at all). AArch64 code whose
    only features the counting emulator lacks are i8mm or bf16 is counted there with those
    instructions as SDOT (``targets.arm.i8mm_count``: one instruction for one; the values
    it computes are then wrong, so exactness is checked by :func:`run`)."""
    engine = engine_for(kernel)[0]
    lacking = _needed(kernel) - kernel.cpu.emulated.get("unicorn", frozenset())
    if engine != "native" and kernel.cpu.arch == "aarch64" and lacking:
        # Imported here: the counter needs unicorn, which only this path runs.
        from targets.arm.i8mm_count import COUNTED_AS_SDOT, count_i8mm

        if lacking <= COUNTED_AS_SDOT:
            return count_i8mm(kernel, inputs)
    if engine is None:
        return None
    return run(kernel, inputs).instructions


def aligned_zeros(shape: tuple[int, ...], dtype: np.dtype, alignment: int) -> np.ndarray:
    """A zeroed array whose data starts at a multiple of ``alignment`` bytes."""
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.zeros(count * np.dtype(dtype).itemsize + alignment, np.uint8)
    skip = -raw.ctypes.data % alignment
    return raw[skip:skip + count * np.dtype(dtype).itemsize].view(dtype).reshape(shape)


def _needed(kernel: CpuKernel) -> frozenset[str]:
    return feature_names(kernel.features)


def native_refusal(kernel: CpuKernel) -> str | None:
    """Why ``kernel`` cannot run natively here (another architecture, a missing feature),
    or None."""
    cpu = kernel.cpu
    if host_arch() != cpu.arch:
        return f"this host is {host_arch()}, the code is {cpu.arch}"
    missing = missing_features(cpu, _needed(kernel))
    if missing:
        return (f"the host CPU lacks {', '.join(missing)} (found through {cpu.detect}), "
                "which the code is compiled for")
    return None


def _unicorn_refusal(kernel: CpuKernel) -> str | None:
    if kernel.cpu.arch != "aarch64":
        return f"the in-process emulator runs aarch64 code only, got {kernel.cpu.arch}"
    missing = sorted(_needed(kernel) - kernel.cpu.emulated.get("unicorn", frozenset()))
    if missing:
        return f"the emulator (unicorn) does not execute {', '.join(missing)} instructions"
    return None


def _qemu_refusal(kernel: CpuKernel) -> str | None:
    from targets.arm.qemu import QEMU, qemu_binary

    if kernel.cpu.arch != "aarch64":
        return f"qemu-user runs aarch64 code only here, got {kernel.cpu.arch}"
    missing = sorted(_needed(kernel) - kernel.cpu.emulated.get("qemu-user", frozenset()))
    if missing:
        return f"qemu-user does not execute {', '.join(missing)} instructions"
    if qemu_binary() is None:
        return (f"qemu-user is not installed (none of {', '.join(QEMU)} on PATH; Debian: "
                "apt-get install qemu-user-static)")
    return None


def _arrays(kernel: CpuKernel, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]
            ) -> list[np.ndarray]:
    if not isinstance(inputs, Mapping):
        inputs = {b.name: a for b, a in zip(kernel.buffers, inputs)}
    arrays = []
    for buffer in kernel.buffers:
        array = aligned_zeros(buffer.shape, buffer.dtype.numpy, kernel.cpu.alignment)
        if buffer.name in inputs:
            given = np.asarray(inputs[buffer.name])
            if given.shape != array.shape:
                raise CpuRunError(f"input {buffer.name} requires shape {array.shape}, got "
                                  f"{given.shape}")
            array[...] = given
        arrays.append(array)
    return arrays


def jit(kernel: CpuKernel) -> tuple[object, Callable[..., None]]:
    """The kernel compiled here by LLVM's JIT: the engine (kept alive while the function is
    called) and the function, taking one pointer per buffer and the status pointer."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module, machine = optimize(kernel, jit=True)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    function = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(kernel.buffers) + 1))(
        engine.get_function_address(kernel.symbol))
    return engine, function


def _run_native(kernel: CpuKernel, arrays: list[np.ndarray], runs: int) -> CpuRun:
    _engine, function = jit(kernel)
    pristine = [a.copy() for a in arrays]
    status = np.zeros(3, np.int64)
    pointers = [ctypes.c_void_p(a.ctypes.data) for a in [*arrays, status]]
    seconds, cpu_seconds = [], []
    outputs: dict[str, np.ndarray] = {}
    for index in range(runs):
        for array, start in zip(arrays, pristine):
            np.copyto(array, start)
        start_time, start_cpu = time.perf_counter(), time.process_time()
        function(*pointers)
        seconds.append(time.perf_counter() - start_time)
        cpu_seconds.append(time.process_time() - start_cpu)
        if index == 0:
            check_status(kernel, status.tobytes())
            outputs = {name: a.copy() for name, a in _outputs(kernel, arrays).items()}
    return CpuRun(outputs, "native", seconds=tuple(seconds), cpu_seconds=tuple(cpu_seconds))


def _run_unicorn(kernel: CpuKernel, arrays: list[np.ndarray], runs: int) -> CpuRun:
    from targets.arm.unicorn import emulate

    result = emulate(compile(kernel, "obj"), kernel.symbol, arrays,  # type: ignore[arg-type]
                     kernel.cpu.alignment)
    check_status(kernel, result.status)
    counted = {m: n for m, n in result.counted.items() if m in kernel.cpu.macs}
    return CpuRun(_outputs(kernel, result.arrays), "unicorn", result.instructions, counted)


def _run_qemu(kernel: CpuKernel, arrays: list[np.ndarray], runs: int) -> CpuRun:
    from targets.arm.qemu import run_qemu

    results, status = run_qemu(compile(kernel, "obj"), kernel.symbol,  # type: ignore[arg-type]
                               arrays, kernel.cpu.alignment)
    check_status(kernel, status)
    return CpuRun(_outputs(kernel, results), "qemu-user")


def _outputs(kernel: CpuKernel, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The kernel's outputs among ``arrays`` (one per buffer, in order), by name."""
    return {b.name: a for b, a in zip(kernel.buffers, arrays) if b.name in kernel.outputs}


def check_status(kernel: CpuKernel, raw: bytes) -> None:
    """CpuRunError naming the access when the kernel's bounds-check status (``raw``, three
    int64s: site, dimension, index) records one out of bounds."""
    site, dim, index = struct.unpack("<qqq", raw)
    if site:
        where = kernel.sites[site - 1]
        raise CpuRunError(f"block {where.block}: {where.kind} {where.access()} is out of "
                          f"bounds (index {index} in dimension {dim})")


_REFUSALS: dict[str, Callable[[CpuKernel], str | None]] = {
    "native": native_refusal, "unicorn": _unicorn_refusal, "qemu-user": _qemu_refusal}
_RUNNERS: dict[str, Callable[[CpuKernel, list[np.ndarray], int], CpuRun]] = {
    "native": _run_native, "unicorn": _run_unicorn, "qemu-user": _run_qemu}
