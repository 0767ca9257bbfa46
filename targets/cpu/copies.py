"""A packing stage's unrolled tile as vectors: which contiguous runs to load, and where each
element of the one vector stored comes from.

The packing stages walk each register tile in its packed order with the tile's loops
unrolled (``tensorize.engine.cpu_schedule``), so one tile is one contiguous run of the packed
buffer, gathered from a few contiguous runs of the input (a tile of B is 4 rows of 12 bytes,
transposed). Copied element by element it costs a load and a store a byte; planned here, it is
one vector load per run, a shuffle, and one vector store, which is what LLVM lowers to the
target's loads and permutes (zip, tbl on AArch64; unpack, permute on x86).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from ir.buffer import Buffer
from targets.cpu.static import Form

__all__ = ["CopyPlan", "Element", "plan_copy"]

# A tile larger than this (in bytes) is left to the element-wise path: its vector would
# spill, and the packing tiles are at most a few registers.
_MAX_BYTES = 512


@dataclass(frozen=True, slots=True)
class Element:
    """One element of a tile copy: stored at ``dest`` (its form in the destination's flat
    elements), its value the constant ``value`` or ``source``'s element at ``at``."""

    dest: Form
    value: int = 0
    source: Buffer | None = None
    at: Form | None = None


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """``runs``: (buffer, form of the first element, length) of each contiguous run read;
    ``stores``: for each contiguous run stored, the form of its first element and, for each
    element in order, (run index, lane) or the constant stored."""

    runs: tuple[tuple[Buffer, Form, int], ...]
    stores: tuple[tuple[Form, tuple[tuple[int, int] | int, ...]], ...]


def plan_copy(elements: list[Element], size: int) -> CopyPlan | None:
    """The plan that copies ``elements`` (each ``size`` bytes) a vector a contiguous run,
    or None when they store to one place twice, are too many, or store a run so short that
    vectors gain nothing (one element per run)."""
    if len(elements) < 2 or len(elements) * size > _MAX_BYTES:
        return None
    runs, where = _runs([e for e in elements if e.source is not None])
    stores = []
    for members in _group(elements, lambda e: _key(e.dest)):
        consts = [m.dest.const for m in members]
        if len(set(consts)) != len(consts):
            return None
        by_const = {m.dest.const: m for m in members}
        for start, length in _spans(sorted(consts)):
            lanes: list[tuple[int, int] | int] = []
            for const in range(start, start + length):
                element = by_const[const]
                lanes.append(element.value if element.source is None else where[
                    (id(element.source), _key(element.at), element.at.const)])  # type: ignore[union-attr]
            stores.append((Form(start, dict(members[0].dest.terms)), tuple(lanes)))
    if len(stores) == len(elements):
        return None
    return CopyPlan(tuple(runs), tuple(stores))


def _group(elements: list[Element], key: Callable[[Element], Hashable]
           ) -> list[list[Element]]:
    """Elements grouped by ``key``, in order of first appearance."""
    groups: dict[Hashable, list[Element]] = {}
    for element in elements:
        groups.setdefault(key(element), []).append(element)
    return list(groups.values())


def _spans(consts: list[int]) -> list[tuple[int, int]]:
    """(start, length) of each maximal run of consecutive values in sorted ``consts``."""
    spans: list[tuple[int, int]] = []
    for const in consts:
        if spans and spans[-1][0] + spans[-1][1] == const:
            spans[-1] = (spans[-1][0], spans[-1][1] + 1)
        else:
            spans.append((const, 1))
    return spans


def _key(form: Form | None) -> tuple[tuple[int, int], ...]:
    """The variable part of a form, hashable: two elements whose addresses share it are a
    constant apart."""
    terms = form.terms if form is not None else {}
    return tuple(sorted((id(v), c) for v, c in terms.items()))


def _runs(loads: list[Element]
          ) -> tuple[list[tuple[Buffer, Form, int]], dict[tuple[int, tuple, int], tuple[int, int]]]:
    """The maximal runs of consecutive source elements, and for each element read the run
    and lane holding it."""
    runs: list[tuple[Buffer, Form, int]] = []
    where: dict[tuple[int, tuple, int], tuple[int, int]] = {}
    for members in _group(loads, lambda e: (id(e.source), _key(e.at))):
        sample = members[0]
        key = (id(sample.source), _key(sample.at))
        for start, length in _spans(sorted({m.at.const for m in members})):  # type: ignore[union-attr]
            for lane in range(length):
                where[(*key, start + lane)] = (len(runs), lane)
            runs.append((sample.source, Form(start, dict(sample.at.terms)), length))  # type: ignore
    return runs, where
