"""Hand-scheduled programs for the simulator's own tests and bench: a tiled int8 GEMM.

The schedule keeps an output tile of ``tile_rows`` x (``col_blocks`` * C) in the accumulator
and walks K in steps of R. Each step loads one input tile (tile_rows x R) and ``col_blocks``
weight tiles (R x C) and runs one GEMM per weight tile, so each input tile is reused
``col_blocks`` times and each weight tile ``tile_rows`` times. Double-buffering alternates
two halves of each memory, with VTA-style tokens:

- load -> compute: a step's inputs and weights are in (pushed by its last LOAD);
- compute -> load: a step's buffers are free again (pushed by its last GEMM);
- compute -> store: an output tile is final (pushed by its last compute instruction);
- store -> compute: an accumulator buffer is free again (pushed by the tile's last STORE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulator.config import MachineConfig, MemoryConfig
from simulator.isa import (
    Deps,
    Finish,
    Gemm,
    Instruction,
    Load,
    Mem,
    Store,
    Vec,
    VecOp,
)

ALIGN = 64  # DRAM byte alignment of each matrix
MAX_TILE_ROWS = (1 << 16) - 1  # an instruction's rows field


@dataclass(frozen=True, slots=True)
class GemmProgram:
    """A GEMM program and its DRAM layout: A (M x K int8, row-major) at ``a_addr``, B (K x N
    int8) at ``b_addr``, C (M x N, int32 or int8 when requantised) at ``c_addr``."""

    program: tuple[Instruction, ...]
    m: int
    n: int
    k: int
    a_addr: int
    b_addr: int
    c_addr: int
    dram_bytes: int
    out_dtype: type
    tile_rows: int
    col_blocks: int

    def dram(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """A DRAM image holding A and B where the program reads them."""
        if a.shape != (self.m, self.k) or b.shape != (self.k, self.n):
            raise ValueError(f"GemmProgram.dram requires A {self.m}x{self.k} and B "
                             f"{self.k}x{self.n}, got {a.shape} and {b.shape}")
        image = np.zeros(self.dram_bytes, np.uint8)
        image[self.a_addr:self.a_addr + a.size] = a.astype(np.int8).reshape(-1).view(np.uint8)
        image[self.b_addr:self.b_addr + b.size] = b.astype(np.int8).reshape(-1).view(np.uint8)
        return image

    def output(self, dram: np.ndarray) -> np.ndarray:
        """C, read back from a final DRAM image."""
        size = self.m * self.n * np.dtype(self.out_dtype).itemsize
        raw = dram[self.c_addr:self.c_addr + size]
        return raw.view("<i4" if self.out_dtype is np.int32 else np.int8).reshape(
            self.m, self.n).astype(self.out_dtype)


def _align(x: int) -> int:
    return (x + ALIGN - 1) // ALIGN * ALIGN


def _buffers(memory: MemoryConfig, count: int) -> tuple[list[int], int]:
    """Base rows of ``count`` buffers in ``memory``, and the rows each may use.

    Buffers start on bank boundaries when there are enough banks, and a buffer's tiles never
    cross a bank, since an instruction's tile must lie in one bank.
    """
    if memory.banks >= count:
        per = memory.banks // count * memory.bank_rows
        return [b * per for b in range(count)], memory.bank_rows
    per = memory.rows // count
    return [b * per for b in range(count)], per


def choose_tiles(m: int, n: int, config: MachineConfig,
                 double_buffer: bool = True) -> tuple[int, int]:
    """(tile_rows, col_blocks) for an M x N output on ``config``.

    Among the shapes that fit the buffers, take the fewest column blocks (hence the tallest
    GEMMs and the fewest instructions) whose load traffic needs at most half the DRAM
    bandwidth, leaving the rest for stores and latency; else the least traffic.
    """
    count = 2 if double_buffer else 1
    r, c = config.array.rows, config.array.cols
    _, inp_rows = _buffers(config.inp, count)
    _, wgt_rows = _buffers(config.wgt, count)
    _, acc_rows = _buffers(config.acc, count)
    if wgt_rows < r:
        raise ValueError(f"gemm_program requires a weight buffer of R = {r} rows, but "
                         f"{config.source} gives {wgt_rows}")
    options = []
    for blocks in range(1, min(math.ceil(n / c), wgt_rows // r) + 1):
        rows = min(m, inp_rows, acc_rows // blocks, MAX_TILE_ROWS)
        if rows < 1:
            break
        traffic = (rows * r + blocks * r * c) / (blocks * rows)
        options.append((blocks, rows, traffic))
    budget = config.dram.bytes_per_cycle / 2
    within = [o for o in options if o[2] <= budget]
    blocks, rows, _ = within[0] if within else min(options, key=lambda o: o[2])
    return rows, blocks


def gemm_program(m: int, n: int, k: int, config: MachineConfig, double_buffer: bool = True,
                 requant: tuple[int, int] | None = None, relu: bool = False,
                 tiles: tuple[int, int] | None = None) -> GemmProgram:
    """A tiled program for C = A[m, k] @ B[k, n], int8 inputs, int32 accumulation.

    ``requant=(mult, shift)`` requantises each output with ``vec.mulshift`` and stores int8
    (saturating); otherwise C is int32. ``relu`` applies ``vec.relu`` before the store.
    ``tiles=(tile_rows, col_blocks)`` overrides :func:`choose_tiles`. Any m, n, k >= 1:
    edge tiles are partial, padded with zeros on chip.
    """
    if min(m, n, k) < 1:
        raise ValueError(f"gemm_program requires m, n, k >= 1, got {m}, {n}, {k}")
    count = 2 if double_buffer else 1
    r, c = config.array.rows, config.array.cols
    tile_rows, col_blocks = tiles or choose_tiles(m, n, config, double_buffer)
    inp_base, inp_rows = _buffers(config.inp, count)
    wgt_base, wgt_rows = _buffers(config.wgt, count)
    acc_base, acc_rows = _buffers(config.acc, count)
    if tile_rows > inp_rows or col_blocks * r > wgt_rows or tile_rows * col_blocks > acc_rows:
        raise ValueError(f"gemm_program: tiles ({tile_rows} rows, {col_blocks} column blocks) "
                         f"do not fit the buffers of {config.source}")
    out_dtype = np.int8 if requant else np.int32
    out_size = np.dtype(out_dtype).itemsize
    a_addr = 0
    b_addr = _align(a_addr + m * k)
    c_addr = _align(b_addr + k * n)
    dram_bytes = _align(c_addr + m * n * out_size)
    if dram_bytes > 1 << 32:
        raise ValueError(f"gemm_program: {dram_bytes} bytes of DRAM exceed 32-bit addresses")

    tiles_m = range(0, m, tile_rows)
    tiles_n = range(0, n, col_blocks * c)
    k_steps = math.ceil(k / r)
    total_tiles = len(tiles_m) * len(tiles_n)
    total_steps = total_tiles * k_steps
    program: list[Instruction] = []
    step = 0
    post_ops = [(VecOp.MULSHIFT, *requant)] if requant else []
    post_ops += [(VecOp.RELU, 0, 0)] if relu else []
    for tile, (m0, n0) in enumerate((m0, n0) for m0 in tiles_m for n0 in tiles_n):
        rows = min(tile_rows, m - m0)
        widths = [min(c, n - n1) for n1 in range(n0, min(n, n0 + col_blocks * c), c)]
        last = len(widths) - 1
        acc0 = acc_base[tile % count]
        for k0 in range(0, k, r):
            depth = min(r, k - k0)
            buffer = step % count
            tile_done = k0 + r >= k and not post_ops
            # Wait for this step's buffers to be free; say when they are full.
            program.append(Load(Mem.INP, inp_base[buffer], a_addr + m0 * k + k0, rows, depth, k,
                                Deps(pop_next=step >= count)))
            program += [Load(Mem.WGT, wgt_base[buffer] + j * r, b_addr + k0 * n + n0 + j * c,
                             depth, width, n, Deps(push_next=j == last))
                        for j, width in enumerate(widths)]
            # Wait for the inputs (and, starting a tile, for its accumulator buffer); free the
            # step's buffers after the last GEMM, and hand a finished tile to the store queue.
            program += [Gemm(acc0 + j * rows, inp_base[buffer], wgt_base[buffer] + j * r, rows,
                             depth, reset=k0 == 0,
                             deps=Deps(pop_prev=j == 0,
                                       pop_next=j == 0 and k0 == 0 and tile >= count,
                                       push_prev=j == last and step + count < total_steps,
                                       push_next=j == last and tile_done))
                        for j in range(len(widths))]
            step += 1
        program += [Vec(op, acc0, rows * len(widths), imm=imm, imm2=imm2,
                        deps=Deps(push_next=i == len(post_ops) - 1))
                    for i, (op, imm, imm2) in enumerate(post_ops)]
        # Free the accumulator buffer for the tile `count` ahead, or for FINISH after the last.
        frees = tile + count < total_tiles or tile == total_tiles - 1
        program += [Store(acc0 + j * rows, c_addr + (m0 * n + n0 + j * c) * out_size, rows,
                          width, n * out_size, narrow=requant is not None,
                          deps=Deps(pop_prev=j == 0, push_prev=j == last and frees))
                    for j, width in enumerate(widths)]
    program.append(Finish(Deps(pop_next=True)))
    return GemmProgram(tuple(program), m, n, k, a_addr, b_addr, c_addr, dram_bytes, out_dtype,
                       tile_rows, col_blocks)
