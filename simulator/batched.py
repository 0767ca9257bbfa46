"""The values of a fast-forwarded loop's skipped periods (simulator.steady) as a few large
products, where the loop only loads int8 tiles and accumulates their products.

Played one instruction at a time, a skipped period loads its tiles into the scratchpads
and each GEMM adds the product of tiles a LOAD wrote before it, in the same period or, where
the loads run ahead of the GEMMs, in the period before. So over all
the skipped periods, a GEMM word adds to its accumulator rows the sum of its operands'
products, period by period, and each operand is a strided block of DRAM whose address is
affine in the period: the GEMM's rows of its LOAD's DRAM rows. The GEMMs that read one
input tile are one product, the input's rows against their weights side by side, for all
the periods at once (in blocks of periods whose sums stay exact in float32:
datapath.FLOAT32_EXACT_TERMS); the sums are added to the accumulator in int32 with
wraparound, as the GEMMs one by one would (addition modulo 2**32 does not depend on the
order). Then the last period's LOADs run, leaving the scratchpads as the plain run would.

:func:`replay` declines (returns False, and changes nothing) for any other loop: a float
array, a STORE, a GEMM that resets its accumulator, a LOAD that widens, fills part of a row
or the accumulator, or a GEMM operand that is not inside the rows of the latest LOAD before
it (in its period or the one before), or whose address falls from period to period.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.datapath import FLOAT32_EXACT_TERMS
from simulator.isa import Gemm, Load, Mem

# A LOAD of the period: (its word, its iteration's offset, its first on-chip row).
_Source = tuple[Any, int, int]


def replay(machine: Any, events: list[tuple[Any, Any, int]], prefix: tuple[int, ...],
           i: int, periods: int, iterations: int) -> bool:
    """Compute the skipped periods' values as :mod:`simulator.steady` describes them
    (``events``: one period's instructions, in order, as (values, word, iteration offset);
    period j's iterations start at i + j * iterations); False, having done nothing, where
    the loop is not of the kind this module computes."""
    plan = _plan(machine, events, prefix, i)
    if plan is None or periods < 2:
        return False
    gemms, loads = plan
    dram = machine.dram.view(np.int8)
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for acc_row, rows, k, inp_source, wgt_source in gemms:
        inp = _operand(dram, inp_source, prefix, i, periods, iterations, rows, k)
        wgt = _operand(dram, wgt_source, prefix, i, periods, iterations, k, None)
        if inp is None or wgt is None:
            return False
        groups.setdefault((id(inp_source[0]), *inp_source[1:], rows, k), []).append(
            (acc_row, inp, wgt))
    machine.products.flush()
    if gemms:
        _accumulate(machine.acc.data, gemms, groups)
    last = i + (periods - 1) * iterations
    for word, offset in loads:
        machine.load_values(word, word.fields(prefix + (last + offset,))
                            if word.fields is not None else word.base)
    return True


def _accumulate(acc: np.ndarray, gemms: list[tuple[Any, ...]],
                groups: dict[tuple[Any, ...], list[tuple[Any, ...]]]) -> None:
    """Add every group's products to the accumulator rows its GEMMs write."""
    lo = min(acc_row for acc_row, *_ in gemms)
    hi = max(acc_row + rows for acc_row, rows, *_ in gemms)
    sums = np.zeros((hi - lo, acc.shape[1]), np.int64)
    for members in groups.values():
        _add_group([(acc_row - lo, inp, wgt) for acc_row, inp, wgt in members], sums)
    # int64 to int32 keeps the low 32 bits: the sum modulo 2**32, as int32 GEMMs wrap.
    np.add(acc[lo:hi], sums.astype(np.int32), out=acc[lo:hi])


def _plan(machine: Any, events: list[tuple[Any, Any, int]], prefix: tuple[int, ...], i: int
          ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, int]]] | None:
    """The period's GEMMs, each as (acc row, rows, k, its input's source, its weights'
    source), and its LOADs as (word, offset); None where the period is not of this
    module's kind."""
    if machine.float_array or not machine.functional:
        return None
    written: list[tuple[int, Mem, int, int, _Source]] = []
    reads = []
    loads = []
    for n, (_, word, offset) in enumerate(events):
        insn = word.insn
        fields = word.base if word.fields is None else word.fields(prefix + (i + offset,))
        if type(insn) is Load:
            memory = machine.memories[insn.mem]
            if insn.mem is Mem.ACC or insn.widen or insn.element_bytes != 1 \
                    or insn.cols != memory.width or insn.stride < insn.cols:
                return None
            written.append((n, insn.mem, fields[0], fields[0] + insn.rows,
                            (word, offset, fields[0])))
            loads.append((word, offset))
        elif type(insn) is Gemm and not insn.reset:
            reads.append((n, insn, fields))
        else:
            return None
    gemms = []
    for n, insn, (acc_row, inp_row, wgt_row) in reads:
        inp = _source(written, n, Mem.INP, inp_row, insn.rows)
        wgt = _source(written, n, Mem.WGT, wgt_row, insn.k)
        if inp is None or wgt is None:
            return None
        gemms.append((acc_row, insn.rows, insn.k, inp, wgt))
    return gemms, loads


def _source(written: list[tuple[int, Mem, int, int, _Source]], n: int, mem: Mem, row: int,
            count: int) -> tuple[Any, int, int, int] | None:
    """Where event ``n``'s operand, rows [row, row + count) of ``mem``, comes from: the
    latest LOAD that writes any of them before it (in its period, else in the period
    before), as (its word, its offset, the operand's first row in its rows, 0 or 1: its
    period's lag); None unless that LOAD writes them all."""
    earlier = [entry for entry in written if entry[0] < n]
    later = [entry for entry in written if entry[0] > n]
    for lag, entries in ((0, earlier), (1, later)):
        for _, written_mem, lo, hi, (word, offset, first) in reversed(entries):
            if written_mem is mem and lo < row + count and row < hi:
                if lo <= row and row + count <= hi:
                    return word, offset, row - first, lag
                return None
    return None


def _operand(dram: np.ndarray, source: tuple[Any, int, int, int], prefix: tuple[int, ...],
             i: int, periods: int, iterations: int, rows: int, cols: int | None
             ) -> np.ndarray | None:
    """One operand over all the periods, (periods, rows, cols) int8 values from DRAM (its
    LOAD's rows from the operand's first row; ``cols``: the first columns, None: all);
    None where its address falls from period to period."""
    word, offset, row, lag = source
    insn = word.insn
    if word.fields is None:
        first = later = word.base[1]
    else:
        first = word.fields(prefix + (i + offset - lag * iterations,))[1]
        later = word.fields(prefix + (i + offset + (1 - lag) * iterations,))[1]
    step = later - first
    if step < 0:
        return None
    start = first + row * insn.stride
    width = insn.cols if cols is None else cols
    return np.lib.stride_tricks.as_strided(dram[start:], shape=(periods, rows, width),
                                           strides=(step, insn.stride, 1), writeable=False)


def _add_group(members: list[tuple[int, np.ndarray, np.ndarray]], sums: np.ndarray) -> None:
    """Add the products of GEMMs that read one input (each: acc row, input (periods, rows,
    k) and weights (periods, k, width)) to ``sums`` (int64, the accumulator's shape), in
    blocks of periods whose dot products stay exact in float32 (in float64, exact for
    2**38 terms, where one GEMM's k is already past float32's)."""
    periods, rows, k = members[0][1].shape
    width = sums.shape[1]
    kind, block = np.float32, FLOAT32_EXACT_TERMS // k
    if block == 0:
        kind, block = np.float64, periods
    weights = np.concatenate([wgt for _, _, wgt in members], axis=2)
    inp = members[0][1]
    total = np.zeros((rows, weights.shape[2]), np.int64)
    for lo in range(0, periods, block):
        hi = min(lo + block, periods)
        a = inp[lo:hi].transpose(1, 0, 2).reshape(rows, -1).astype(kind)
        b = weights[lo:hi].reshape(-1, weights.shape[2]).astype(kind)
        total += (a @ b).astype(np.int64)
    for n, (acc_row, _, _) in enumerate(members):
        sums[acc_row:acc_row + rows] += total[:, n * width:(n + 1) * width]
