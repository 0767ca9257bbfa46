"""Running emitted CUDA C++ on the host: the same source, compiled by g++ against
``emulation/mma.h``, ``cuda_fp16.h``, ``cuda_bf16.h`` and ``cuda_fp8.h`` (which stand in
for the CUDA headers), loaded with ctypes and run on numpy arrays.

The headers emulate the thread model (blocks in turn; a block's threads as coroutines that
switch at barriers), the warp matrix API (each lane holds whole tiles) and the mma.sync
family's ``ldmatrix`` and ``mma.sync`` (each lane holds only its registers, exchanged with
the warp's other lanes at each instruction, as the PTX ISA distributes them), and check shared
memory: a race between threads (an access after another thread's write, or a write after
its read, with no barrier between) is reported with the buffer, the element and both
threads, and so is a read of an element no thread of the block wrote; an access outside a
shared array, or a copy or WMMA operation outside a global buffer, is reported with the
buffer, the element and the thread. Asynchronous copies land at their thread's wait, or, with
``copies="at_issue"``, when issued. See the header's comment and ``docs/cuda_backend.md`` for
what a run proves.

The builds go to a temporary directory made on the first build and removed when the process
exits.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import shutil
import string
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import numpy as np

from targets.cuda.cexpr import ctype, device_numpy
from targets.cuda.emit import CudaKernel, Launch
from targets.cuda.errors import EmulationError
from targets.cuda.writer import CppWriter

__all__ = ["BANK_FIELDS", "COPY_MODES", "EmulationError", "emulate"]

# When an asynchronous copy lands: at its thread's wait (a stage read before the wait is
# stale), or at its issue (a stage still being read when the prefetch overwrites it is
# spoilt). Each catches by its numbers a misplaced barrier or wait that the other misses.
COPY_MODES = ("at_wait", "at_issue")

HEADERS = Path(__file__).resolve().parent / "emulation"
_COMPILED: dict[str, ctypes.CDLL] = {}
ALIGNMENT = 256


@functools.cache
def _build_dir() -> Path:
    """The directory of this process's builds: made on first use, removed at exit."""
    path = Path(tempfile.mkdtemp(prefix="tz_cuda_emulation_"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _c_string(text: str) -> str:
    """``text`` as a C string literal: letters, digits, ``_`` and spaces as they are, every
    other byte as a three-digit octal escape (which cannot run into the next character, nor
    form a trigraph or end a comment)."""
    safe = {ord(c) for c in string.ascii_letters + string.digits + "_ "}
    return '"' + "".join(chr(b) if b in safe else f"\\{b:03o}" for b in text.encode()) + '"'


def _launcher(kernel: CudaKernel) -> str:
    """C entry points, one per launch:
    ``tz_launch_<kernel>(void** args, int reverse, int at_issue)``; each declares the
    global buffers for the bounds checks and encodes the launch's tensor maps."""
    out = CppWriter()
    out.line('extern "C" const char* tz_error() { return tz::error_text; }')
    casts = ", ".join(f"({ctype(b.dtype)}*)args[{n}]" for n, b in enumerate(kernel.buffers))
    for launch in kernel.launches:
        with out.block(f'extern "C" int tz_launch_{launch.kernel}(void** args, int reverse, '
                       "int at_issue)"):
            out.line("tz::global_buffers.clear();")
            for n, b in enumerate(kernel.buffers):
                size = b.dtype.numpy.itemsize
                out.line(f"tz_global_declare(args[{n}], {max(int(np.prod(b.shape)), 1) * size}, "
                         f"{size}, {_c_string(b.name)});")
            grid = "tz_dim3{%d, %d, %d}" % launch.grid
            block = "tz_dim3{%d, %d, %d}" % launch.block
            maps = _encode_maps(out, kernel, launch)
            out.line(f"return tz::launch([&] {{ {launch.kernel}({casts}{maps}); }}, "
                     f"{grid}, {block}, reverse, at_issue, {launch.cluster});")
    return out.text() + "\n"


def _encode_maps(out: CppWriter, kernel: CudaKernel, launch: Launch) -> str:
    """Lines encoding ``launch``'s tensor maps on the host, by the emulation's own encoder
    (``emulation/wgmma.h``, standing in for the driver's), returning 1 from the entry point
    when one fails; the arguments that pass them, after the buffers."""
    if not launch.tensor_maps:
        return ""
    out.line("tz::error_text[0] = 0;")
    for n, tensor_map in enumerate(launch.tensor_maps):
        index = kernel.params.index(tensor_map.buffer)
        size = kernel.buffers[index].dtype.numpy.itemsize
        (dim0, dim1), (box0, box1) = tensor_map.dims, tensor_map.box
        out.line(f"CUtensorMap tz_map_{n};")
        out.line(f"tz_tensor_map_encode_tiled(&tz_map_{n}, {size}, args[{index}], {dim0}, {dim1}, "
                 f"{tensor_map.stride}, {box0}, {box1}, {tensor_map.swizzle});")
    out.line("if (tz::error_text[0]) return 1;")
    return "".join(f", tz_map_{n}" for n in range(len(launch.tensor_maps)))


def _library(kernel: CudaKernel) -> ctypes.CDLL:
    text = kernel.source + "\n" + _launcher(kernel)
    key = hashlib.sha256(text.encode()).hexdigest()[:24]
    if key in _COMPILED:
        return _COMPILED[key]
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise EmulationError("no host C++ compiler (g++) to build the emulation")
    source = _build_dir() / f"{key}.cpp"
    library = _build_dir() / f"{key}.so"
    source.write_text(text)
    command = [compiler, "-std=c++17", "-O1", "-fwrapv", "-w", "-shared", "-fPIC",
               f"-I{HEADERS}", "-o", str(library), str(source)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise EmulationError(f"the host build of {kernel.name} failed:\n{done.stderr[-4000:]}")
    _COMPILED[key] = ctypes.CDLL(str(library))
    return _COMPILED[key]


def _no_phase(what: str) -> AbstractContextManager[object]:
    return nullcontext()


def _aligned(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A zeroed array whose data starts at a multiple of ALIGNMENT bytes (as cudaMalloc's)."""
    nbytes = max(int(np.prod(shape)) * dtype.itemsize, 1)
    raw = np.zeros(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + nbytes].view(dtype)[:int(np.prod(shape))].reshape(shape)


# The fields of one record of the bank trace (``BankRecord`` in emulation/mma.h).
BANK_FIELDS = ("kind", "warp", "barriers", "rank", "lane", "address", "bytes", "lines", "pitch")


def _bank_records(library: ctypes.CDLL) -> np.ndarray:
    """The bank trace of the last launch, one row of BANK_FIELDS per record."""
    library.tz_bank_count.restype = ctypes.c_size_t
    library.tz_bank_data.restype = ctypes.c_void_p
    count = library.tz_bank_count()
    if count == 0:
        return np.zeros((0, len(BANK_FIELDS)), np.uint64)
    words = (ctypes.c_uint64 * (count * len(BANK_FIELDS))).from_address(library.tz_bank_data())
    return np.ctypeslib.as_array(words).reshape(count, len(BANK_FIELDS)).copy()


def emulate(kernel: CudaKernel, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray], *,
            reverse: bool = False, copies: str = "at_wait",
            banks: list[tuple[str, np.ndarray]] | None = None,
            phase: Callable[[str], AbstractContextManager[object]] | None = None
            ) -> dict[str, np.ndarray]:
    """Run ``kernel`` under the host emulation and return the parameters it writes, by name.

    ``inputs`` maps parameter names to arrays (or lists them in parameter order); others
    start as zeros, as do the intermediates. ``reverse`` runs each block's threads in
    decreasing order between barriers. ``copies`` (one of COPY_MODES) says when an
    asynchronous copy lands: at its thread's wait, or at its issue. Raises EmulationError
    when the build or a run fails, naming the race or the uninitialised read for a missing
    barrier, and the buffer, element and thread of an out-of-bounds access. With a list
    as ``banks``, each launch appends (kernel name, the shared accesses of its first block as
    rows of BANK_FIELDS) for the bank model of :mod:`.banks`. ``phase`` (a progress hook, as
    :mod:`tensorize.cli.progress` makes) wraps the host build and each launch: a large GEMM's
    emulation takes seconds to minutes with nothing else to show.
    """
    phase = phase or _no_phase
    if copies not in COPY_MODES:
        raise ValueError(f"emulate: argument 'copies': expected one of "
                         f"{', '.join(COPY_MODES)}, got {copies!r}")
    if not isinstance(inputs, Mapping):
        inputs = {b.name: a for b, a in zip(kernel.buffers, inputs)}
    arrays = []
    for buffer in kernel.buffers:
        array = _aligned(buffer.shape, device_numpy(buffer.dtype))
        if buffer.name in inputs:
            given = np.asarray(inputs[buffer.name])
            if given.shape != buffer.shape or given.dtype != buffer.dtype.numpy:
                raise ValueError(f"input {buffer.name} must be {buffer.dtype} {buffer.shape}, "
                                 f"got {given.dtype} {given.shape}")
            array[...] = given.astype(array.dtype)
        arrays.append(array)
    with phase(f"building the host emulation of {kernel.name}"):
        library = _library(kernel)
    library.tz_error.restype = ctypes.c_char_p
    args = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    for launch in kernel.launches:
        entry = getattr(library, f"tz_launch_{launch.kernel}")
        library.tz_bank_trace(int(banks is not None))
        with phase(f"emulating {launch.kernel}, asynchronous copies landing "
                   f"{copies.replace('_', ' ')}"):
            failed = entry(args, int(reverse), int(copies == "at_issue")) != 0
        if failed:
            raise EmulationError(f"{launch.kernel}: {library.tz_error().decode()}")
        if banks is not None:
            banks.append((launch.kernel, _bank_records(library)))
    by_name = {b.name: a for b, a in zip(kernel.buffers, arrays)}
    dtypes = {b.name: b.dtype.numpy for b in kernel.buffers}
    return {name: by_name[name].astype(dtypes[name]) for name in kernel.outputs}
