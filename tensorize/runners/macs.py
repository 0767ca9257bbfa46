"""Useful and executed multiply-accumulates of a tensorized function, the two figures every
report names apart.

*Useful* MACs are the kernel's own: one per point of a tensorized block's iteration space in
the untouched function. *Executed* MACs are those the intrinsics perform: each executed call
of a compute intrinsic times the points of its iteration space, so the padding a schedule
adds (to the intrinsic's shape, to a register tile, to an array's rows) is included. Their
difference is the padding: ``pad = 1 - useful / executed`` of the executed work.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from intrinsics import Registry
from ir import BlockRealize, PrimFunc
from tensorize.engine import Tensorized, count_calls
from tensorize.schedule import tree


@dataclass(frozen=True, slots=True)
class MacFigures:
    """The tensorized blocks' ``useful`` MACs, the ``executed`` MACs of the compute calls
    that do their work, and those calls' count."""

    useful: int
    executed: int
    calls: int

    @property
    def pad(self) -> float:
        """The share of the executed MACs that is padding (0 with nothing executed)."""
        return 1.0 - self.useful / self.executed if self.executed else 0.0

    def to_dict(self) -> dict[str, object]:
        """The JSON record: useful, executed, calls and pad (a 0..1 fraction)."""
        return {"useful": self.useful, "executed": self.executed, "calls": self.calls,
                "pad": round(self.pad, 4)}


def intrinsic_macs(registry: Registry, name: str) -> int:
    """The MACs one call of the compute intrinsic ``name`` performs: the points of its
    iteration space."""
    return math.prod(iv.extent for iv in registry.get(name).iter_vars)


def block_macs(func: PrimFunc, block: str) -> int:
    """The useful MACs of ``block`` in ``func``: the points of its iteration space."""
    for stmt, _ in tree.walk_stmts(func):
        if isinstance(stmt, BlockRealize) and stmt.block.name == block:
            return math.prod(iv.extent for iv in stmt.block.iter_vars)
    raise ValueError(f"block_macs requires a block named {block!r} in {func.name}, got none")


def mac_figures(result: Tensorized, registry: Registry,
                blocks: Iterable[str] | None = None) -> MacFigures:
    """Useful and executed MACs of ``result``'s blocks tensorized with a reducing (MAC)
    intrinsic (only those of ``blocks`` when given). A compute call counts for the block whose intrinsic (or a variant of it,
    ``npu_gemm_reset`` of ``npu_gemm``) it is, so blocks sharing one intrinsic are counted
    together: give all of them, or the executed figure covers more than ``blocks``."""
    # Only products count: an epilogue block on a vector or store instruction (a bias add,
    # a requantisation) multiplies and accumulates nothing.
    chosen = [b for b in result.blocks if b.intrinsic is not None
              and registry.get(b.intrinsic).reduce_vars()
              and (blocks is None or b.block in set(blocks))]
    intrinsics = {b.intrinsic for b in chosen}
    useful = sum(block_macs(result.original, b.block) for b in chosen)
    executed = calls = 0
    for name, count in count_calls(result.func).items():
        if registry.get(name).kind != "compute":
            continue
        if any(name.startswith(intrinsic) for intrinsic in intrinsics):
            executed += count * intrinsic_macs(registry, name)
            calls += count
    return MacFigures(useful, executed, calls)
