"""Where a kernel's buffers live in CUDA memory: global and shared layouts, and the per-warp
fragment arrays that stand for ``wmma.*`` buffers.

Shared memory. A 2-D shared buffer read by fragment loads of tiles ``W`` columns wide is
stored row-major when every tile column starts 32 bytes aligned (``W`` a multiple of 32
bytes: 16 halves), else in **column panels** one tile wide (int8 tiles of 16 or 8 bytes):
element ``(r, c)`` at ``(c / W) * panel_stride + r * P + c % W``. The row pitch ``P`` is the
row (of the buffer, or of a panel) rounded up to an *odd* number of 16-byte units
(:func:`padded_pitch`: 32-byte rows get 48, 64-byte rows 80, 16-byte rows stay 16). Each
fragment tile is then one block with ``ldm = P``, 32-byte aligned, ``ldm`` a multiple of 16
bytes, as ``load_matrix_sync`` requires. An odd pitch is what makes the accesses free of
bank conflicts: a fragment load (``ldmatrix``) reads, per phase, one 16-byte piece of each of
8 consecutive rows, and rows an odd number of 16-byte units apart fall on 8 different
4-bank groups of the 32 banks; the cooperative copies into these buffers deal their 16-byte
pieces so that 8 consecutive threads take one piece of 8 consecutive rows
(``emit._cooperative``), the same pattern. ``tests/targets/cuda/test_banks.py`` checks both on
the emitted kernels with the bank model of :mod:`.banks`. Leading dimensions (the stages of
a double buffer) select whole sets of panels, each 128-byte aligned. Other shared buffers are
row-major with their rows padded by 16 bytes where that keeps the row size a multiple of 16
bytes.

Transposed buffers. A buffer whose copy moves 16 bytes down a column (the int8 B operand,
``k x n``, copied from a global buffer of ``n`` rows of ``k``) is stored with its last two
dimensions swapped, in panels of the fragment tile's ``k`` extent: its 16 k values of one
column are one 16-byte panel row. Its row-major ``k x n`` tiles are then column-major in
memory, loaded as ``col_major`` fragments with ``ldm`` the panel pitch: the layout the
tensor cores read B in, so ptxas loads it with ``ldmatrix`` instead of byte by byte.

Fragments. A ``wmma.*`` buffer is a tile grid; each warp keeps only the fragments it touches.
An access region's start, as an affine function of the loop variables, splits into the terms
in thread-bound variables (the warp's offset, the same in every access) and the rest (the
fragment within the warp). Where the warp offsets differ or an index is not affine, every
thread holds the whole grid (correct, but large).
"""

from __future__ import annotations

from dataclasses import dataclass

from ir import Buffer, Expr, Var
from ir.arith import Interval, LinearForm, bound_form, linearize, simplify
from targets.cuda.errors import EmitError

__all__ = ["FragmentLayout", "SharedLayout", "dense_offset", "padded_pitch", "panel_width",
           "shared_layout", "warp_split"]


def dense_offset(strides: tuple[int, ...], indices: list[str]) -> str:
    """``sum(index * stride)`` as text."""
    terms = [idx if s == 1 else f"({idx}) * {s}" for idx, s in zip(indices, strides)]
    return " + ".join(terms) if terms else "0"


@dataclass(frozen=True, slots=True)
class SharedLayout:
    """A shared buffer's placement: ``panel`` columns per panel (None: row-major with
    ``strides``), ``pitch`` elements between a panel's rows, ``panel_stride`` elements between
    panels, ``size`` elements in all."""

    buffer: Buffer
    panel: int | None
    pitch: int
    panel_stride: int
    strides: tuple[int, ...]
    size: int
    stage_strides: tuple[int, ...] = ()
    transposed: bool = False

    def offset(self, indices: list[str]) -> str:
        """The element offset of ``buffer[indices]``."""
        if self.panel is None:
            return dense_offset(self.strides, indices)
        r, c = indices[-2:]
        if self.transposed:
            r, c = c, r
        w = self.panel
        if w == self.buffer.shape[-2 if self.transposed else -1]:
            text = f"({r}) * {self.pitch} + ({c})"
        else:
            text = f"(({c}) / {w}) * {self.panel_stride} + ({r}) * {self.pitch} + ({c}) % {w}"
        stages = [i for i, s in zip(indices, self.stage_strides) if s]
        if not stages:
            return text
        return f"{dense_offset(tuple(s for s in self.stage_strides if s), stages)} + {text}"

    def leading(self, layout: str) -> int:
        """ldm of a tile in ``layout`` (row_major: the row stride; col_major: the column
        stride). A row-major tile of a transposed buffer is stored column-major, ``pitch``
        elements from one column to the next: its fragment is loaded as col_major."""
        if self.panel is not None:
            if layout != "row_major":
                raise EmitError(f"shared buffer {self.buffer.name} is stored in column panels; "
                                "a col_major tile cannot be read from it")
            return self.pitch
        return self.strides[-2] if layout == "row_major" else self.strides[-1]


def padded_pitch(row_bytes: int) -> int:
    """The bytes between rows of ``row_bytes`` that fragment loads read: an odd number of
    16-byte units, so 8 consecutive rows start on 8 different groups of 4 banks."""
    return 16 * (-(-row_bytes // 16) | 1)


def panel_width(tile_width: int, cols: int, elem: int) -> int:
    """The columns of a panel: all ``cols`` (row-major) when every tile's first column is
    32-byte aligned in a row, else one tile's ``tile_width``."""
    return cols if (tile_width * elem) % 32 == 0 else tile_width


def shared_layout(buffer: Buffer, tile: tuple[int, int] | None,
                  transposed: bool = False) -> SharedLayout:
    """The layout of shared ``buffer`` (module docs); ``tile`` is the shape of the fragment
    tiles loaded from it, None when no fragment load reads it. In the panel layout, leading
    dimensions (stages) select whole 128-byte-aligned panel sets. ``transposed`` (only with
    ``tile``) stores the last two dimensions swapped: the panels then hold the buffer's
    columns as rows, so copies that move 16 bytes down a column stay 16-byte moves."""
    elem = max(buffer.dtype.bits // 8, 1)
    shape = buffer.shape
    rows, cols = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, 1)
    tile_width = None
    if tile is not None:
        tile_width = tile[0] if transposed else tile[1]
        if transposed:
            rows, cols = cols, rows
    if tile_width is not None and len(shape) >= 2 and cols % tile_width == 0:
        width = panel_width(tile_width, cols, elem)
        pitch = padded_pitch(width * elem) // elem
        if (rows * pitch * elem) % 32 == 0:
            stride = rows * pitch
            size = stride * (cols // width)
            # Leading dimensions (the stages of a double buffer) index whole panel sets,
            # each starting 128 bytes aligned.
            whole = -(-size * elem // 128) * 128 // elem
            stage_strides = tuple(whole * _product(shape[d + 1:-2]) if shape[d] > 1 else 0
                                  for d in range(len(shape) - 2))
            return SharedLayout(buffer, width, pitch, stride, (),
                                whole * _product(shape[:-2]), stage_strides, transposed)
    if transposed:
        raise EmitError(f"shared buffer {buffer.name} {shape}: a transposed layout needs "
                        f"fragment tiles {tile} that panels of whole 16-byte rows hold")
    strides = list(buffer.effective_strides)
    if len(shape) >= 2 and (shape[-1] * elem) % 16 == 0:
        row = shape[-1] + 16 // elem
        strides = [row * _product(shape[d + 1:-1]) for d in range(len(shape) - 1)] + [1]
    size = strides[0] * shape[0] if shape else 1
    return SharedLayout(buffer, None, 0, 0, tuple(strides), size)


def _product(values: tuple[int, ...]) -> int:
    total = 1
    for v in values:
        total *= v
    return total


def warp_split(start: Expr, threads: dict[Var, str], ranges: dict[Var, Interval]
               ) -> tuple[tuple[tuple[str, int], ...], LinearForm] | None:
    """Split an index into (warp offset as ((thread tag, coefficient), ...), local form), or
    None when it is not affine in plain variables."""
    form = linearize(simplify(start, ranges))
    warp: list[tuple[str, int]] = []
    local = []
    for atom, coeff in form.terms:
        if not isinstance(atom, Var):
            return None
        if atom in threads:
            warp.append((threads[atom], coeff))
        else:
            local.append((atom, coeff))
    return tuple(sorted(warp)), LinearForm(tuple(local), form.const)


@dataclass
class FragmentLayout:
    """A fragment buffer as an array of ``wmma::fragment`` per thread: ``tile`` elements per
    fragment along each dimension, ``counts`` fragments along each, and ``per_warp`` whether
    indices drop the warp's offset (see :func:`warp_split`)."""

    buffer: Buffer
    tile: tuple[int, int]
    counts: tuple[int, int]
    per_warp: bool
    type_text: str

    @staticmethod
    def plan(buffer: Buffer, tile: tuple[int, int], type_text: str,
             accesses: list[tuple[tuple[Expr, Expr], dict[Var, str], dict[Var, Interval]]]
             ) -> FragmentLayout:
        """Decide the array for ``buffer`` from every access: (region starts in loop
        variables, thread variables, loop ranges)."""
        if any(extent != 1 for extent in buffer.shape[:-2]):
            raise EmitError(f"fragment buffer {buffer.name} {buffer.shape} is not one tile grid: "
                            "its dimensions before the last two must have extent 1")
        whole = (buffer.shape[-2] // tile[0], buffer.shape[-1] // tile[1])
        warps: set = set()
        highs = [0, 0]
        for starts, threads, ranges in accesses:
            for d, start in enumerate(starts):
                split = warp_split(start, threads, ranges)
                if split is None or not _tile_multiple(split[1], tile[d]):
                    return FragmentLayout(buffer, tile, whole, False, type_text)
                warps.add((d, split[0]))
                high = bound_form(split[1], ranges).hi
                low = bound_form(split[1], ranges).lo
                if high is None or low is None or low < 0:
                    return FragmentLayout(buffer, tile, whole, False, type_text)
                highs[d] = max(highs[d], high // tile[d] + 1)
        if len(warps) != 2:
            return FragmentLayout(buffer, tile, whole, False, type_text)
        return FragmentLayout(buffer, tile, (highs[0], highs[1]), True, type_text)


def _tile_multiple(form: LinearForm, tile: int) -> bool:
    return form.const % tile == 0 and all(c % tile == 0 for _, c in form.terms)
