"""The CUDA backend: tensorized IR to CUDA C++ with ``nvcuda::wmma``, compiled by nvcc, checked
on the host by an emulation of the warp matrix API, and run on a GPU through CuPy.

- :func:`emit` turns a function (tensorized for ``cuda`` by ``tensorize.engine``, or plain)
  into a :class:`CudaKernel`: the source, one :class:`Launch` (grid, block) per kernel, and
  the argument order.
- :func:`compile` compiles the source with nvcc for an architecture (``sm_80``, ``sm_90``),
  to PTX or a cubin; no GPU needed.
- :func:`emulate` compiles the same source for the host against ``emulation/``'s headers
  and runs it on numpy arrays: blocks in turn, threads as coroutines that switch at
  ``__syncthreads()``, fragments as whole tiles (``docs/cuda_backend.md`` says what that
  proves).
- :func:`run` runs it on a GPU (CuPy, imported only when called).
"""

from targets.cuda.compile import compile, nvcc_path
from targets.cuda.emit import CudaKernel, Launch, emit
from targets.cuda.emulate import emulate
from targets.cuda.errors import CompileError, EmitError, EmulationError
from targets.cuda.run import run

__all__ = ["CompileError", "CudaKernel", "EmitError", "EmulationError", "Launch", "compile",
           "emit", "emulate", "nvcc_path", "run"]
