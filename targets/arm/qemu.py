"""AArch64 object code run under qemu-user (``qemu-aarch64-static``) in a child process: the
CPU code generator's ``qemu-user`` engine, for the instructions unicorn does not execute
(i8mm's SMMLA, UMMLA, USMMLA and USDOT).

The object becomes a static executable here, without a cross toolchain: one ELF segment holds
the kernel (laid out and relocated by :mod:`.elf`), an entry stub and every buffer, inputs
included, each at a multiple of the target's alignment. The stub passes the buffers' addresses
as the kernel's arguments (X0.., the stack past the eighth), calls it, writes the segment's
buffer region to standard output with ``write`` and leaves with ``exit(0)``. The parent reads
the buffers back from that output. qemu's default CPU for AArch64 (``max``) executes i8mm;
no instruction counts are kept, and the run is not timed.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from targets.arm.elf import buffer_addresses, load_object
from targets.cpu.errors import CpuRunError

__all__ = ["QEMU", "qemu_binary", "run_qemu"]

# The emulators tried, in order: Debian's qemu-user-static, then qemu-user's.
QEMU = ("qemu-aarch64-static", "qemu-aarch64")
_BASE, _HEADER = 0x40_0000, 0x1000
_SYS_WRITE, _SYS_EXIT = 64, 93
_TIMEOUT_S = 600


def qemu_binary() -> str | None:
    """The path of the first qemu-user AArch64 emulator on PATH, or None."""
    return next((path for path in map(shutil.which, QEMU) if path), None)


def run_qemu(obj: bytes, symbol: str, arrays: list[np.ndarray], alignment: int
             ) -> tuple[list[np.ndarray], bytes]:
    """Run function ``symbol`` of ELF object ``obj`` on ``arrays`` and a status word (three
    int64s) under qemu-user; returns every buffer's contents after the run and the status.
    CpuRunError when qemu is absent, or the program faults or writes too little."""
    binary = qemu_binary()
    if binary is None:
        raise CpuRunError(f"qemu-user is not installed (none of {', '.join(QEMU)} on PATH)")
    executable, offsets = build_executable(obj, symbol, arrays, alignment)
    start, size = offsets[0], offsets[-1] + 24 - offsets[0]
    with tempfile.TemporaryDirectory(prefix="tensorize-qemu-") as tmp:
        program = Path(tmp) / "kernel"
        program.write_bytes(executable)
        program.chmod(0o700)
        output = Path(tmp) / "buffers"
        with output.open("wb") as sink:
            done = subprocess.run([binary, str(program)], stdout=sink,
                                  stderr=subprocess.PIPE, timeout=_TIMEOUT_S, check=False)
        raw = output.read_bytes()
    if done.returncode != 0 or len(raw) != size:
        why = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        raise CpuRunError(f"{symbol} under qemu-user ({binary}) stopped: {why}; it wrote "
                          f"{len(raw)} of {size} bytes")
    results = []
    for array, offset in zip(arrays, offsets):
        data = raw[offset - start:offset - start + array.nbytes]
        results.append(np.frombuffer(data, array.dtype).reshape(array.shape).copy())
    status_at = offsets[-1] - start
    return results, raw[status_at:status_at + 24]


def build_executable(obj: bytes, symbol: str, arrays: list[np.ndarray], alignment: int
                     ) -> tuple[bytes, list[int]]:
    """A static AArch64 ELF executable that runs ``symbol`` on ``arrays`` and writes them
    and the status word out, in that order: (its bytes, the address of each array and, last,
    of the status word)."""
    code_at = _BASE + _HEADER
    image = load_object(obj, code_at)
    if symbol not in image.symbols:
        raise CpuRunError(f"the kernel object defines no symbol {symbol}")
    stub_at = _round(code_at + len(image.data), 16)
    # The stub's length does not depend on the addresses it loads (each is four moves), so
    # it is laid out once with placeholder addresses to find where the buffers start.
    stub_size = len(_stub(symbol, image.symbols[symbol], stub_at, [0] * (len(arrays) + 1),
                          0, 0))
    data_at = _round(stub_at + stub_size, max(alignment, 16))
    offsets = buffer_addresses(arrays, alignment, data_at)
    size = offsets[-1] + 24 - data_at
    stub = _stub(symbol, image.symbols[symbol], stub_at, offsets, data_at, size)
    body = bytearray(image.data)
    body.extend(b"\0" * (stub_at - code_at - len(body)))
    body.extend(stub)
    body.extend(b"\0" * (data_at - code_at - len(body)))
    for array, offset in zip(arrays, offsets):
        body.extend(b"\0" * (offset - code_at - len(body)))
        body.extend(np.ascontiguousarray(array).tobytes())
    body.extend(b"\0" * (offsets[-1] + 24 - code_at - len(body)))
    return _elf(bytes(body), stub_at), offsets


def _stub(symbol: str, kernel_at: int, at: int, arguments: list[int], region: int,
          size: int) -> bytes:
    """The entry: the kernel's arguments (X0-X7, then 8 bytes each from SP upwards), a call,
    ``write(1, region, size)`` and ``exit(0)``."""
    words: list[int] = []
    stacked = arguments[8:]
    frame = _round(len(stacked) * 8, 16)
    if frame > 0xFFF:
        raise CpuRunError(f"{symbol} takes {len(arguments)} arguments; the qemu-user entry "
                          "passes at most 519")
    if frame:
        words.append(0xD1000000 | frame << 10 | 31 << 5 | 31)         # sub sp, sp, #frame
    for index, value in enumerate(stacked):
        words += _move(9, value)
        words.append(0xF9000000 | index << 10 | 31 << 5 | 9)          # str x9, [sp, #8i]
    for register, value in enumerate(arguments[:8]):
        words += _move(register, value)
    words.append(0x94000000 | ((kernel_at - (at + 4 * len(words))) >> 2) & 0x3FFFFFF)  # bl
    words += _move(0, 1) + _move(1, region) + _move(2, size) + _move(8, _SYS_WRITE)
    words.append(0xD4000001)                                          # svc #0
    words += _move(0, 0) + _move(8, _SYS_EXIT)
    words.append(0xD4000001)                                          # svc #0
    return struct.pack(f"<{len(words)}I", *words)


def _move(register: int, value: int) -> list[int]:
    """MOVZ then three MOVKs: ``value`` (64 bits) into X``register``, always four words."""
    return [(0xD2800000 if part == 0 else 0xF2800000) | part << 21
            | ((value >> (16 * part)) & 0xFFFF) << 5 | register for part in range(4)]


def _elf(body: bytes, entry: int) -> bytes:
    """An ELF64 AArch64 executable: the header page, then ``body`` from ``_BASE +
    _HEADER``, all in one readable, writable, executable segment."""
    header = struct.pack("<4sBBBBB7xHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0, 0, 2, 183, 1,
                         entry, 64, 0, 0, 64, 56, 1, 0, 0, 0)
    segment = struct.pack("<IIQQQQQQ", 1, 7, 0, _BASE, _BASE, _HEADER + len(body),
                          _HEADER + len(body), 0x1000)
    return (header + segment).ljust(_HEADER, b"\0") + body


def _round(size: int, multiple: int = 0x1000) -> int:
    return -(-size // multiple) * multiple
