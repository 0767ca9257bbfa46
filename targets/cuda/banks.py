"""A model of shared-memory bank conflicts, applied to the accesses an emulated run records.

Shared memory has 32 banks of 4 bytes: word ``address / 4`` lives in bank ``word % 32``. A
warp-wide access is served in phases, and a phase takes as many wavefronts as the most
distinct words any one bank holds among its addresses (lanes reading one word share it).
Phases, as NVIDIA's hardware forms them:

- thread accesses (``ld.shared``/``st.shared``, the shared side of a 16-byte copy or of a
  ``cp.async``): 128 bytes of lanes per phase: all 32 lanes for accesses of up to 4 bytes,
  16 for 8 bytes, 8 for 16 bytes;
- fragment loads (``wmma::load_matrix_sync``, which ptxas turns into ``ldmatrix`` for
  16-bit tiles: ``LDSM`` in the SASS): each phase reads one 16-byte piece of each of 8
  consecutive rows of the tile (pieces of narrower rows: the whole row, 128 bytes' worth
  of rows per phase).

A phase of ``w`` wavefronts has ``w - 1`` conflicts; the figures add them up. Not modelled:
the byte loads ptxas emits for some int8 fragments (``LDS.U8``, whose lane-to-element
distribution is the hardware's), and fragment stores (``store_matrix_sync``).

The trace (:func:`targets.cuda.emulate.emulate` with ``banks=``) covers the first block of
each launch; the other blocks run the same code at other global offsets, and shared
addresses do not depend on the block.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from targets.cuda.emit import CudaKernel
from targets.cuda.emulate import BANK_FIELDS, emulate

__all__ = [
    "BANKS",
    "KINDS",
    "BankCount",
    "bank_conflicts",
    "count_conflicts",
    "phase_wavefronts",
]

BANKS = 32
BANK_BYTES = 4
PHASE_BYTES = BANKS * BANK_BYTES
# The record kinds of the trace (``BankKind`` in emulation/mma.h), by the name the figures use.
KINDS = ("scalar", "copy", "fragment_load")


@dataclass(frozen=True, slots=True)
class BankCount:
    """One kind of access in one kernel: ``instructions`` warp-wide accesses, served in
    ``phases`` phases and ``wavefronts`` wavefronts; ``conflicts`` is the wavefronts beyond
    one per phase."""

    instructions: int
    phases: int
    wavefronts: int

    @property
    def conflicts(self) -> int:
        """Wavefronts beyond one per phase: 0 for a conflict-free access pattern."""
        return self.wavefronts - self.phases


def phase_wavefronts(pieces: Iterable[tuple[int, int]]) -> int:
    """The wavefronts one phase takes to serve ``pieces``, (address, bytes) each: the most
    distinct 4-byte words any bank holds among them."""
    words: dict[int, set[int]] = defaultdict(set)
    for address, size in pieces:
        first = address // BANK_BYTES
        last = (address + max(size, 1) - 1) // BANK_BYTES
        for word in range(first, last + 1):
            words[word % BANKS].add(word)
    return max((len(w) for w in words.values()), default=0)


def _thread_phases(lanes: list[tuple[int, int, int]]) -> list[list[tuple[int, int]]]:
    """One warp-wide thread access, (lane, address, bytes) per lane, split into phases."""
    size = max(b for _, _, b in lanes)
    per_phase = max(PHASE_BYTES // max(size, BANK_BYTES), 1)
    phases: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for lane, address, nbytes in lanes:
        phases[lane // per_phase].append((address, nbytes))
    return list(phases.values())


def _fragment_phases(address: int, row_bytes: int, rows: int, pitch: int
                     ) -> list[list[tuple[int, int]]]:
    """The phases of one fragment load: per 16-byte piece of the rows, groups of rows worth
    128 bytes (8 rows of 16-byte pieces)."""
    piece = min(16, row_bytes)
    per_phase = PHASE_BYTES // piece
    phases = []
    for start in range(0, row_bytes, piece):
        for first in range(0, rows, per_phase):
            phases.append([(address + r * pitch + start, piece)
                           for r in range(first, min(first + per_phase, rows))])
    return phases


def count_conflicts(records: np.ndarray) -> dict[str, BankCount]:
    """The bank figures of one launch's trace (rows of ``BANK_FIELDS``), by kind (KINDS)."""
    field = {name: n for n, name in enumerate(BANK_FIELDS)}
    grouped: dict[tuple[int, ...], list[tuple[int, int, int]]] = defaultdict(list)
    fragments: dict[int, list[list[list[tuple[int, int]]]]] = defaultdict(list)
    for row in records.tolist():
        kind = row[field["kind"]]
        if KINDS[kind] == "fragment_load":
            fragments[kind].append(_fragment_phases(row[field["address"]], row[field["bytes"]],
                                                    row[field["lines"]], row[field["pitch"]]))
            continue
        key = (kind, row[field["warp"]], row[field["barriers"]], row[field["rank"]])
        grouped[key].append((row[field["lane"]], row[field["address"]], row[field["bytes"]]))
    for key, lanes in grouped.items():
        fragments[key[0]].append(_thread_phases(lanes))
    counts = {}
    for n, name in enumerate(KINDS):
        instructions = fragments.get(n, [])
        phases = [p for phase_list in instructions for p in phase_list]
        counts[name] = BankCount(len(instructions), len(phases),
                                 sum(phase_wavefronts(p) for p in phases))
    return counts


def bank_conflicts(kernel: CudaKernel, inputs: Mapping[str, np.ndarray]
                   ) -> dict[str, dict[str, BankCount]]:
    """Run ``kernel`` under the emulation on ``inputs`` and model the bank conflicts of its
    first block's shared accesses: per launched kernel, per kind of access (KINDS)."""
    trace: list[tuple[str, np.ndarray]] = []
    emulate(kernel, inputs, banks=trace)
    return {name: count_conflicts(records) for name, records in trace}
