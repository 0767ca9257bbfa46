"""Compiling emitted CUDA C++ with nvcc (no GPU needed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from targets.cuda.emit import CudaKernel

__all__ = ["CompileError", "compile", "nvcc_path"]

# nvcc outside PATH: the toolkit's usual home.
_NVCC_FALLBACKS = ("/usr/local/cuda/bin/nvcc",)


class CompileError(RuntimeError):
    """nvcc rejected a source (the message holds its diagnostics) or is not installed."""


def nvcc_path() -> str | None:
    """The nvcc executable (``$NVCC``, then PATH, then /usr/local/cuda), or None."""
    candidates = [os.environ.get("NVCC"), shutil.which("nvcc"), *_NVCC_FALLBACKS]
    return next((c for c in candidates if c and Path(c).is_file()), None)


def compile(kernel: CudaKernel, arch: str = "sm_80", output: str = "ptx") -> bytes:
    """Compile ``kernel.source`` for ``arch`` (``sm_80``, ``sm_90``...) to ``output``:
    ``ptx`` (text) or ``cubin``. Returns the file's bytes; raises CompileError with nvcc's
    diagnostics when it fails."""
    if output not in ("ptx", "cubin"):
        raise ValueError(f"compile: output must be 'ptx' or 'cubin', got {output!r}")
    nvcc = nvcc_path()
    if nvcc is None:
        raise CompileError("nvcc not found: install the CUDA toolkit or set NVCC")
    return _nvcc(nvcc, kernel.name, kernel.source, arch, output)


# A run compiles its kernel for each architecture once, but tests, the tuner and the bench
# hand the same source to nvcc again (a second or more each time): compile each (source,
# architecture, output) once per process. Bytes are immutable, so sharing them is safe.
@lru_cache(maxsize=256)
def _nvcc(nvcc: str, name: str, source_text: str, arch: str, output: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="tz_cuda_") as tmp:
        source = Path(tmp) / f"{name}.cu"
        target = Path(tmp) / f"{name}.{output}"
        source.write_text(source_text)
        # 177: a block iterator the body does not use (declared for every block).
        command = [nvcc, f"-arch={arch}", f"--{output}", "-O3", "-std=c++17",
                   "-diag-suppress=177", "-o", str(target), str(source)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise CompileError(f"nvcc -arch={arch} failed on {name}:\n{done.stderr}")
        return target.read_bytes()
