"""Stored runs that interleave registers' runs: which a packing copy stores with AArch64's
``st4`` (``st3``, ``st2``) or x86's interleaving stores, and the transposing steps before.

A stored run longer than a register whose element ``f + factor * i`` is element ``i`` of
run ``f`` (2 to 4 runs of half a register or a whole one) is one shuffle of those registers,
which LLVM's InterleavedAccess pass stores with one interleaving store. B's 8 columns x 4 k
rows are one already (byte ``c`` of four rows in turn); A's 8 rows x 4 words become one after
the steps :meth:`targets.cpu.emit._CpuEmitter._transpose` takes (bytes as words, pairs of
rows' words interleaved into 64-bit elements), as four pairs' 64-bit elements in turn.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["InterleavedPlan", "interleaves", "plan"]

# (register, lane) of each element of a stored run.
Lanes = list[tuple[int, int]]


@dataclass(frozen=True)
class InterleavedPlan:
    """``steps``: the transposing steps in order, each None (pairs of lanes of one register
    as one element of twice the width) or the interleaves it makes (``(x, y, half)``, two
    registers' halves element by element, in the order their results are numbered);
    ``bits`` and ``count``: the element width and lanes a register after them; ``segments``:
    each store's first element, (register, first lane) of each of its runs, and their
    length."""

    steps: tuple[dict[tuple[int, int, int], int] | None, ...]
    bits: int
    count: int
    segments: tuple[tuple[int, Lanes, int], ...]


def plan(lanes: Lanes, bits: int, count: int) -> InterleavedPlan | None:
    """The plan that stores ``lanes`` (``bits``-bit elements, ``count`` a register) by
    interleaving stores, after as few transposing steps as make it one (up to 64-bit
    elements); None when none does."""
    steps: list[dict[tuple[int, int, int], int] | None] = []
    current = lanes
    while (segments := interleaves(current, count)) is None:
        if count == 1 or bits >= 64 or len(current) % 2:
            return None
        pairs = [(current[n], current[n + 1]) for n in range(0, len(current), 2)]
        if all(x == y and j % 2 == 0 and k == j + 1 for (x, j), (y, k) in pairs):
            current = [(x, j // 2) for (x, j), _ in pairs]
            steps.append(None)
        elif all(x != y and j == k for (x, j), (y, k) in pairs):
            half = count // 2
            zips: dict[tuple[int, int, int], int] = {}
            current = [(zips.setdefault((x, y, j // half), len(zips)), j % half)
                       for (x, j), (y, _) in pairs]
            steps.append(zips)
        else:
            return None
        bits, count = bits * 2, count // 2
    return InterleavedPlan(tuple(steps), bits, count, tuple(segments))


def interleaves(lanes: Lanes, count: int) -> list[tuple[int, Lanes, int]] | None:
    """``lanes`` (each (register, lane), ``count`` lanes a register) cut into equal stores,
    each longer than a register, that interleave 2 to 4 runs of half a register or a whole
    one: [(first element, [(register, first lane) of each run], run length)]; None when
    they do not. (Runs of other lengths, 12 bytes of 17x33x65's edge columns, became table
    lookups in LLVM: 870 instructions to 900.)"""
    for factor in (4, 3, 2):
        for run in (count, count // 2):
            size = factor * run
            if not run or size <= count or len(lanes) % size:
                continue
            segments = []
            for start in range(0, len(lanes), size):
                firsts = lanes[start:start + factor]
                if len(set(firsts)) < factor or any(j + run > count for _, j in firsts) or any(
                        lanes[start + f + factor * i] != (x, j + i)
                        for f, (x, j) in enumerate(firsts) for i in range(run)):
                    break
                segments.append((start, firsts, run))
            else:
                return segments
    return None
