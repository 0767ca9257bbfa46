"""A kernel compiled here once and called many times, as a network's layer is: LLVM's JIT
runs once, the kernel's arrays are allocated once at the target's alignment, and each call
copies its inputs in, runs the native code and hands back the outputs.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping

import numpy as np

from targets.cpu.emit import CpuKernel
from targets.cpu.errors import CpuRunError
from targets.cpu.run import aligned_zeros, check_status, jit, native_refusal

__all__ = ["LoadedKernel"]


class LoadedKernel:
    """``kernel`` compiled for this host (CpuRunError when it cannot run natively here)."""

    def __init__(self, kernel: CpuKernel) -> None:
        reason = native_refusal(kernel)
        if reason is not None:
            raise CpuRunError(f"cannot run {kernel.symbol} natively here: {reason}")
        self.kernel = kernel
        self._engine, self._function = jit(kernel)
        alignment = kernel.cpu.alignment
        self._arrays = {b.name: aligned_zeros(b.shape, b.dtype.numpy, alignment)
                        for b in kernel.buffers}
        self._status = np.zeros(3, np.int64)
        # The read-only arrays last copied in, by buffer name.
        self._constant: dict[str, np.ndarray] = {}
        self._pointers = [ctypes.c_void_p(a.ctypes.data)
                          for a in [*self._arrays.values(), self._status]]

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run on ``inputs`` (by buffer name): the outputs by name, valid until the next
        call. The other arrays keep what the last call left: a kernel writes every element
        of an output or intermediate before it reads it (a function's semantics; a
        reduction starts from its init), so nothing is cleared between calls. A read-only
        input given again as the same array as last time (a layer's constant weights) is
        not copied again: read-only, it cannot have changed; nor is the kernel's own array
        (:meth:`array`), written in place."""
        for name, given in inputs.items():
            if given is self._constant.get(name) or given is self._arrays[name]:
                continue
            self._arrays[name][...] = given
            if isinstance(given, np.ndarray) and not given.flags.writeable:
                self._constant[name] = given
            else:
                self._constant.pop(name, None)
        self._function(*self._pointers)
        check_status(self.kernel, self._status.tobytes())
        return {name: self._arrays[name] for name in self.kernel.outputs}

    def array(self, name: str) -> np.ndarray:
        """The kernel's own array for buffer ``name``: a caller that writes an input into
        it in place and passes it back to the call saves the copy."""
        return self._arrays[name]
