"""Several kernels at once on one set of arrays: each computes a part of the output rows.

``tensorize.engine.cpu_threads`` cuts a kernel's rows into parts and emits one kernel per
part shape; :func:`run_parts` runs them natively, one Python thread each (a ctypes call
releases the GIL, so they run in parallel), on views of the whole arrays: a part's rows of
the parameters its rows index, the whole of the others, and intermediates of its own. A
view that does not start at the target's alignment is replaced by an aligned copy (copied
back when the kernel writes it), since the kernels' aligned loads and stores rely on it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ir import Buffer
from targets.cpu.emit import CpuKernel
from targets.cpu.errors import CpuRunError
from targets.cpu.run import CpuRun, check_status, jit, native_refusal, aligned_zeros

__all__ = ["Part", "run_parts"]


@dataclass(frozen=True)
class Part:
    """``kernel`` computes rows ``start`` to ``start + rows`` of the parameters named in
    ``sliced`` (their first dimension)."""

    kernel: CpuKernel
    start: int
    rows: int


def run_parts(parts: Sequence[Part], params: Sequence[Buffer], sliced: frozenset[str],
              inputs: Mapping[str, np.ndarray], runs: int) -> CpuRun:
    """Run every part at once, ``runs`` times (inputs restored before each), on the whole
    ``params`` (the unsplit kernel's parameters; those not in ``inputs`` start as zeros);
    returns the whole outputs of the first run, each run's wall time (``seconds``) and the
    process's CPU time over it (``cpu_seconds``: all threads)."""
    for part in parts:
        reason = native_refusal(part.kernel)
        if reason is not None:
            raise CpuRunError(f"cannot run {part.kernel.symbol} natively here: {reason}")
    alignment = parts[0].kernel.cpu.alignment
    whole = {p.name: aligned_zeros(p.shape, p.dtype.numpy, alignment) for p in params}
    for name, array in inputs.items():
        if name in whole:
            whole[name][...] = array
    pristine = {name: a.copy() for name, a in whole.items()}
    compiled = {id(k): jit(k) for k in {id(p.kernel): p.kernel for p in parts}.values()}
    calls = [_Call(part, compiled[id(part.kernel)][1], whole, sliced, len(params))
             for part in parts]
    seconds, cpu_seconds = [], []
    outputs: dict[str, np.ndarray] = {}
    with ThreadPoolExecutor(len(calls)) as pool:
        for index in range(runs):
            for name, array in whole.items():
                np.copyto(array, pristine[name])
            for call in calls:
                call.reset()
            wall, cpu = time.perf_counter(), time.process_time()
            for future in [pool.submit(call) for call in calls]:
                future.result()
            seconds.append(time.perf_counter() - wall)
            cpu_seconds.append(time.process_time() - cpu)
            for call in calls:
                call.finish()
            if index == 0:
                written = {n for p in parts for n in p.kernel.outputs}
                outputs = {n: whole[n].copy() for n in written}
    return CpuRun(outputs, "native", seconds=tuple(seconds), cpu_seconds=tuple(cpu_seconds))


class _Call:
    """One part's call: its arrays (views of the whole ones where aligned, else copies) and
    the pointers the kernel takes."""

    def __init__(self, part: Part, function: object, whole: Mapping[str, np.ndarray],
                 sliced: frozenset[str], count: int) -> None:
        self.part = part
        self.function = function
        # (the whole's rows, their aligned copy, whether the kernel writes them)
        self.views: list[tuple[np.ndarray, np.ndarray, bool]] = []
        kernel = part.kernel
        alignment = kernel.cpu.alignment
        arrays = []
        for position, buffer in enumerate(kernel.buffers):
            if position >= count:
                arrays.append(aligned_zeros(buffer.shape, buffer.dtype.numpy, alignment))
                continue
            array = whole[buffer.name]
            if buffer.name in sliced:
                array = array[part.start:part.start + part.rows]
            if array.ctypes.data % alignment:
                copy = aligned_zeros(array.shape, array.dtype, alignment)
                self.views.append((array, copy, buffer.name in kernel.outputs))
                array = copy
            arrays.append(array)
        self.arrays = arrays
        self.intermediates = [(a, a.copy()) for a in arrays[count:]]
        self.status = np.zeros(3, np.int64)
        self.pointers = [a.ctypes.data for a in [*arrays, self.status]]

    def reset(self) -> None:
        """Inputs into the aligned copies, intermediates back to their first values."""
        for view, copy, _ in self.views:
            np.copyto(copy, view)
        for array, start in self.intermediates:
            np.copyto(array, start)

    def __call__(self) -> None:
        self.function(*self.pointers)  # type: ignore[operator]

    def finish(self) -> None:
        """Check the bounds status; copy the aligned copies' rows back into the whole."""
        check_status(self.part.kernel, self.status.tobytes())
        for view, copy, written in self.views:
            if written:
                np.copyto(view, copy)
