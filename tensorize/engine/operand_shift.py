"""Blocks whose input dtype an intrinsic accepts only shifted: int8 x int8 on x86's VPDPBUSD.

An intrinsic operand may declare, in its family's YAML, that it accepts a kernel input of
another dtype shifted by a constant (``accepts: {dtype: s8, bias: 128}`` on VPDPBUSD's
uint8 operand: int8 + 128 is uint8). For a block no intrinsic matches as it is, :func:`reshape`
tries each such declaration of the candidates on each factor of that dtype: the schedule
primitive ``shift_operand`` feeds the factor through a shifted copy and subtracts ``bias``
times the sum of the other factor from the output (exact: integer accumulators wrap), and the
block is matched again. The engine's estimate picks among the shifts that match (shifting A
of a GEMM keeps the output's layout; shifting B would transpose it). A family without the
declaration keeps refusing the block with the matcher's reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from intrinsics import Intrinsic, Registry
from ir import BufferLoad, Cast, PrimFunc, ScheduleError
from ir.visitor import post_order_visit
from tensorize.match import Match, match_block
from tensorize.schedule import Schedule

__all__ = ["reshape"]

Estimate = Callable[[PrimFunc, Match, Registry], float]


def reshape(sch: Schedule, block_name: str, candidates: list[Intrinsic],
            options: Mapping[str, Any], estimate: Estimate) -> bool:
    """Shift the factor of ``block_name`` that makes a candidate match, cheapest by
    ``estimate`` (module docs); True when one was shifted, False (``sch`` unchanged) when no
    declared shift makes any candidate match."""
    registry = sch.registry
    if registry is None:
        return False
    best: tuple[float, str, int, str] | None = None
    for intrinsic, buffer, bias, dtype in _shifts(sch, block_name, candidates):
        before = sch.snapshot()
        try:
            sch.shift_operand(sch.get_block(block_name), buffer, bias, dtype)
        except ScheduleError:
            sch.restore(before)
            continue
        found = match_block(sch.func, block_name, intrinsic, registry)
        if isinstance(found, list):
            cost = min(estimate(sch.func, m, registry) for m in found)
            if best is None or cost < best[0]:
                best = (cost, buffer, bias, dtype)
        sch.restore(before)
    if best is None:
        return False
    sch.shift_operand(sch.get_block(block_name), *best[1:])
    return True


def _shifts(sch: Schedule, block_name: str, candidates: list[Intrinsic]
            ) -> list[tuple[Intrinsic, str, int, str]]:
    """``(intrinsic, kernel buffer, bias, operand dtype)`` for every converted load of the
    block whose dtype an input operand of a candidate accepts."""
    block = sch.get(sch.get_block(block_name)).block
    loads: list[BufferLoad] = []
    post_order_visit(block.body, lambda n: loads.append(n.value) if isinstance(n, Cast)
                     and isinstance(n.value, BufferLoad) else None)
    found = []
    for intrinsic in candidates:
        for operand in intrinsic.inputs:
            accepted = operand.accepts
            if accepted is None:
                continue
            for buffer in dict.fromkeys(ld.buffer.name for ld in loads
                                        if ld.buffer.dtype == accepted.dtype):
                found.append((intrinsic, buffer, accepted.bias, operand.dtype.name))
    return found
