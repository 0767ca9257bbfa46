"""How a cooperative loop nest's iterations are dealt out to a fixed number of threads.

The nest's spread loops (extents ``E_0 .. E_n``, the last varying fastest) are fused into one
index ``flat`` in ``[0, total)``; thread ``tid`` of ``threads`` takes ``flat = tid + s *
threads`` for each step ``s`` of an unrolled loop. Each loop variable is a sum of **digits**
of ``flat`` in a mixed radix, a digit being ``(flat / stride) % extent``. Rows of a copy into
shared memory may be *interleaved* (:mod:`.memory`): the last two loops (rows ``R``, pieces
``C``) then use the digits (``R / 8``, ``C``, ``8``), so 8 consecutive threads take one piece
of 8 consecutive rows.

The digits are written so that a step adds a constant (strength reduction): with ``threads``
a multiple of the digit's stride, ``flat / stride`` is ``tid / stride + s * threads /
stride``; the digit is then free of ``s`` when ``threads / stride`` is a multiple of its
extent, and needs no ``%`` when it is the most significant (``flat < total``). nvcc then folds
each step's offset into the addresses' immediates. All arithmetic is unsigned: divisions and
remainders by powers of two are shifts and masks.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Deal", "deal"]


@dataclass(frozen=True, slots=True)
class Deal:
    """The unrolled loop a thread runs: ``steps`` iterations, the last guarded by
    ``flat < total`` when ``guarded``; ``values`` holds each spread loop's value as C text in
    the thread index and the step variable."""

    steps: int
    guarded: bool
    values: tuple[str, ...]


def _digit(extent: int, stride: int, total: int, threads: int, tid: str, step: str) -> str:
    """``(flat / stride) % extent`` for ``flat = tid + step * threads``, strength-reduced
    where the divisibility allows (module docs)."""
    top = stride * extent >= total
    if threads % stride == 0:
        per_step = threads // stride
        base = f"({tid} / {stride}u)" if stride > 1 else f"{tid}"
        if per_step % extent == 0:
            return f"{base} % {extent}u" if not top else base
        if top:
            return f"({base} + {step} * {per_step}u)"
    flat = f"({tid} + {step} * {threads}u)"
    quotient = f"({flat} / {stride}u)" if stride > 1 else flat
    return quotient if top else f"{quotient} % {extent}u"


def deal(extents: list[int], threads: int, tid: str, step: str, interleave: bool) -> Deal:
    """The values of the loops of ``extents`` for thread ``tid`` (C text, unsigned) of
    ``threads`` at step ``step`` of the unrolled loop (module docs). ``interleave`` deals
    the last two loops row first, 8 rows at a time (their first extent a multiple of 8)."""
    total = 1
    for extent in extents:
        total *= extent
    steps = -(-total // threads)
    if steps == 1:
        step = "0u"
    strides = []
    stride = total
    for extent in extents:
        stride //= extent
        strides.append(stride)
    values = [_digit(e, s, total, threads, tid, step) for e, s in zip(extents, strides)]
    if interleave:
        rows, pieces = extents[-2:]
        high = _digit(rows // 8, 8 * pieces, total, threads, tid, step)
        low = _digit(8, 1, total, threads, tid, step)
        values[-2] = f"{high} * 8u + {low}"
        values[-1] = _digit(pieces, 8, total, threads, tid, step)
    return Deal(steps, total % threads != 0, tuple(values))
