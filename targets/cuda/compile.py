"""Compiling emitted CUDA C++ with nvcc (no GPU needed)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from targets.cuda.emit import CudaKernel
from targets.cuda.errors import CompileError
from targets.cuda.sass import BarrierDrains, barrier_drains, instructions, k_loop

__all__ = ["BarrierDrains", "CompileError", "KernelResources", "SassMix", "compile",
           "cuobjdump_path", "nvcc_path", "parse_ptxas", "parse_sass", "ptxas_path",
           "resource_usage", "sass_drains", "sass_mix", "sass_opcodes"]

# nvcc outside PATH: the toolkit's usual home.
_NVCC_FALLBACKS = ("/usr/local/cuda/bin/nvcc",)


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


@dataclass(frozen=True, slots=True)
class KernelResources:
    """What ptxas reports for one ``__global__`` function compiled for ``arch``: registers
    per thread, static shared memory per block (bytes), spill stores and loads and the stack
    frame (bytes per thread)."""

    kernel: str
    arch: str
    registers: int
    shared_bytes: int
    spill_stores: int
    spill_loads: int
    stack_frame: int


# ptxas -v, per entry function (the properties line may be absent for a function without a
# frame, and "used N barriers" or the smem figure absent when zero):
#   ptxas info    : Compiling entry function 'gemm_int8_k0' for 'sm_80'
#   ptxas info    : Function properties for gemm_int8_k0
#       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
#   ptxas info    : Used 57 registers, used 1 barriers, 4608 bytes smem, 376 bytes cmem[0]
_ENTRY = re.compile(r"Compiling entry function '(?P<kernel>[^']+)' for '(?P<arch>sm_\w+)'")
_FRAME = re.compile(r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, "
                    r"(?P<loads>\d+) bytes spill loads")
_USED = re.compile(r"Used (?P<registers>\d+) registers")
_SMEM = re.compile(r"(?P<smem>\d+) bytes smem")


def parse_ptxas(text: str) -> tuple[KernelResources, ...]:
    """The entry functions in ptxas's verbose output (``-v``, or ``nvcc -Xptxas -v``), in
    order. Raises CompileError when an entry has no "Used N registers" line."""
    found = []
    parts = _ENTRY.split(text)
    for kernel, arch, body in zip(parts[1::3], parts[2::3], parts[3::3]):
        used = _USED.search(body)
        if used is None:
            raise CompileError(f"ptxas reported no register count for {kernel} ({arch})")
        frame = _FRAME.search(body)
        smem = _SMEM.search(body[used.start():].splitlines()[0])
        found.append(KernelResources(
            kernel, arch, int(used["registers"]), int(smem["smem"]) if smem else 0,
            int(frame["stores"]) if frame else 0, int(frame["loads"]) if frame else 0,
            int(frame["stack"]) if frame else 0))
    return tuple(found)


def ptxas_path() -> str | None:
    """The ptxas beside nvcc (or on PATH), or None."""
    nvcc = nvcc_path()
    candidates = [str(Path(nvcc).with_name("ptxas")) if nvcc else None, shutil.which("ptxas")]
    return next((c for c in candidates if c and Path(c).is_file()), None)


def resource_usage(kernel: CudaKernel, arch: str = "sm_80") -> tuple[KernelResources, ...]:
    """What ptxas reports for each ``__global__`` function of ``kernel`` compiled for
    ``arch``: the (cached) PTX of :func:`compile`, assembled by ptxas -v as nvcc would."""
    return _assembled(kernel, arch)[0]


def _assembled(kernel: CudaKernel, arch: str) -> tuple[tuple[KernelResources, ...], bytes]:
    """ptxas's report and cubin for the (cached) PTX of ``kernel``."""
    ptx = compile(kernel, arch)
    ptxas = ptxas_path()
    if ptxas is None:
        raise CompileError("ptxas not found beside nvcc: install the CUDA toolkit")
    return _ptxas(ptxas, kernel.name, ptx, arch)


# Cached as the compile is: the report (and the cubin, for the SASS) belongs to the PTX it
# was assembled from.
@lru_cache(maxsize=256)
def _ptxas(ptxas: str, name: str, ptx: bytes, arch: str
           ) -> tuple[tuple[KernelResources, ...], bytes]:
    with tempfile.TemporaryDirectory(prefix="tz_cuda_") as tmp:
        source = Path(tmp) / f"{name}.ptx"
        cubin = Path(tmp) / f"{name}.cubin"
        source.write_bytes(ptx)
        command = [ptxas, "-v", f"-arch={arch}", "-O3", "-o", str(cubin), str(source)]
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            raise CompileError(f"ptxas -arch={arch} failed on {name}:\n{done.stderr}")
        return parse_ptxas(done.stdout + done.stderr), cubin.read_bytes()


@dataclass(frozen=True, slots=True)
class SassMix:
    """The machine code of one ``__global__`` function: ``mma`` tensor-core instructions
    (HMMA, IMMA...) and ``other`` instructions (NOPs not counted) in ``scope``: ``k loop``,
    the innermost loop holding an MMA, or ``kernel`` when no loop holds one (nvcc unrolled
    the k loop)."""

    kernel: str
    mma: int
    other: int
    scope: str

    @property
    def other_per_mma(self) -> float:
        """Other instructions per MMA instruction (infinite without any)."""
        return self.other / self.mma if self.mma else float("inf")


_FUNCTION = re.compile(r"Function : (\S+)")


def parse_sass(text: str) -> tuple[SassMix, ...]:
    """The instruction mix of each function in ``cuobjdump -sass`` output, in order."""
    return tuple(_mix(name, body) for name, body in _functions(text))


def _functions(text: str) -> list[tuple[str, str]]:
    """Each function of ``cuobjdump -sass`` output: (its name, its text), in order."""
    parts = _FUNCTION.split(text)
    return list(zip(parts[1::2], parts[2::2]))


def _mix(name: str, body: str) -> SassMix:
    code = instructions(body)
    bounds = k_loop(code)
    scope, (start, end) = ("k loop", bounds) if bounds else ("kernel", (0, 1 << 62))
    inside = [i for i in code if start <= i.address <= end and i.opcode != "NOP"]
    mma = sum(i.is_mma for i in inside)
    return SassMix(name, mma, len(inside) - mma, scope)


def cuobjdump_path() -> str | None:
    """cuobjdump from PATH, beside nvcc, or the nvidia-cuda-cuobjdump wheel; or None."""
    wheel = importlib.util.find_spec("nvidia")
    roots = list(wheel.submodule_search_locations or []) if wheel else []
    candidates = [shutil.which("cuobjdump"),
                  *(str(Path(n).with_name("cuobjdump")) for n in [nvcc_path()] if n),
                  *(str(p) for root in roots for p in sorted(Path(root).glob("*/bin/cuobjdump")))]
    return next((c for c in candidates if c and Path(c).is_file()), None)


def sass_mix(kernel: CudaKernel, arch: str = "sm_80") -> tuple[SassMix, ...]:
    """The SASS instruction mix of each ``__global__`` function of ``kernel`` for ``arch``:
    the cubin :func:`resource_usage` assembled, disassembled by cuobjdump (which runs
    nvdisasm, looked for beside it)."""
    return parse_sass(_sass(kernel, arch))


def sass_drains(kernel: CudaKernel, arch: str = "sm_80") -> tuple[BarrierDrains, ...]:
    """Per ``__global__`` function of ``kernel`` for ``arch``, whether the tensor pipe
    drains at the barriers of its k loop: the first MMA after a ``BAR.SYNC`` waiting for an
    ``LDSM`` issued after it (:func:`.sass.barrier_drains`)."""
    return tuple(barrier_drains(name, body) for name, body in _functions(_sass(kernel, arch)))


def sass_opcodes(kernel: CudaKernel, arch: str = "sm_80", modifiers: bool = False
                 ) -> dict[str, dict[str, int]]:
    """Per ``__global__`` function of ``kernel`` for ``arch``, how many instructions of
    each opcode its SASS holds (the opcode without its modifiers: ``HGMMA``, ``UBLKCP``;
    with ``modifiers``, as written: ``UTMALDG.2D.MULTICAST``), NOPs included."""
    counts: dict[str, dict[str, int]] = {}
    for name, body in _functions(_sass(kernel, arch)):
        function = counts.setdefault(name, {})
        for instruction in instructions(body):
            opcode = instruction.opcode if modifiers else instruction.opcode.split(".")[0]
            function[opcode] = function.get(opcode, 0) + 1
    return counts


def _sass(kernel: CudaKernel, arch: str) -> str:
    cuobjdump = cuobjdump_path()
    if cuobjdump is None:
        raise CompileError("cuobjdump not found: install the CUDA toolkit or the "
                           "nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels")
    return _cuobjdump(cuobjdump, kernel.name, _assembled(kernel, arch)[1])


@lru_cache(maxsize=256)
def _cuobjdump(cuobjdump: str, name: str, cubin: bytes) -> str:
    with tempfile.TemporaryDirectory(prefix="tz_cuda_") as tmp:
        path = Path(tmp) / f"{name}.cubin"
        path.write_bytes(cubin)
        env = dict(os.environ, PATH=f"{Path(cuobjdump).parent}{os.pathsep}"
                                    f"{os.environ.get('PATH', '')}")
        done = subprocess.run([cuobjdump, "-sass", str(path)], check=False,
                              capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise CompileError(f"cuobjdump -sass failed on {name}:\n{done.stderr}")
        return done.stdout
