"""Linking compiled NPU programs into one: a network's layers as a single program.

Each layer's program was compiled on its own, its DRAM laid out from address 0 and its
queues synchronised by its own dependency tokens (:mod:`.tokens`). :func:`link` joins them
in order:

- DRAM: each program's transfers are moved to where its regions lie in the joined image
  (:class:`Region`): a layer's output region is the next layer's input region where the two
  agree byte for byte, so the activation stays in the device's layout between layers and no
  host work stands between them.
- Seams: a program's queues start where the queues of the programs before it allow, not
  after they have all drained. Tokens pair in order on each channel, and every program is
  balanced on its own, so at a seam the linker adds NOPs whose tokens say "the programs
  before are done with this unit": the next program's loads begin once the earlier compute
  has finished and the earlier stores (all but the final run of plain stores, whose tile is
  still draining) have landed, so its first weights and rows come in while the last tile of
  the program before is requantised and stored (double buffering across the layer
  boundary). A next program that touches what that final run reads or writes (its
  accumulator rows, its DRAM bytes) waits for the run too, where it touches it: its loads,
  or its compute.

The joined program is checked to run to its end on its tokens (:func:`.tokens.stuck`) and
to pair every token (each program's count plus the seams'), and the simulator checks every
access it makes.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ir.errors import ExecutionError
from simulator.config import FloatDatapathConfig, MachineConfig
from simulator.isa import STEP_FIELDS, Deps, Finish, Gemm, Instruction, Load, Nop, Queue, Store
from simulator.loops import Placed, placed, span, structure
from targets.npu.tokens import Access, accesses, balance, row_bytes, stuck


class LinkError(ExecutionError):
    """Programs that cannot be joined (a transfer outside every region of its program)."""


@dataclass(frozen=True, slots=True)
class Region:
    """Bytes ``[old, old + nbytes)`` of a program's own DRAM image lie at ``new`` in the
    joined image."""

    old: int
    nbytes: int
    new: int


@dataclass(frozen=True, slots=True)
class Part:
    """One program to join (its words, FINISH last) and where its DRAM regions go. Every
    transfer of the program must lie inside one region."""

    program: tuple[Instruction, ...]
    regions: tuple[Region, ...]


@dataclass(frozen=True, slots=True)
class Linked:
    """The joined program, and per part the number of instructions it executes, seam NOPs
    included (instructions execute numbered in fetch order, so part ``i``'s are those
    numbered from the sum of the counts before it)."""

    program: tuple[Instruction, ...]
    executed: tuple[int, ...]


def link(parts: Sequence[Part], config: MachineConfig) -> Linked:
    """The parts joined into one program, in order, on the machine ``config`` (its queue
    depths bound the tokens outstanding; its float datapath sizes DMA elements). Raises
    LinkError for a transfer outside its part's regions, and ExecutionError when the joined
    program would not run to its end on its tokens."""
    if not parts:
        raise LinkError("link requires at least one program, got none")
    datapath = config.datapath
    words: list[Instruction] = []
    executed: list[int] = []
    paired: Counter[tuple[int, int]] = Counter()
    last: list[Placed] = []  # the previous part's instructions, at their words here
    for number, part in enumerate(parts):
        program, nodes = _relocated(part, datapath)
        if not program or not isinstance(program[-1], Finish):
            raise LinkError("a program to link must end with FINISH")
        finish, nodes = program[-1], nodes[:-1]
        if words:
            seam = _seam(words, last, nodes, datapath)
            executed[-1] += len(seam)
            paired.update(balance(Placed(0, insn, (), (), ()) for insn in seam))
        offset = len(words)
        words += program[:-1]
        last = [node._replace(index=node.index + offset) for node in nodes]
        paired.update(balance(nodes))
        paired.update(balance([Placed(0, finish, (), (), ())]))
        # The last part keeps its FINISH; another's becomes a compute NOP where it holds
        # tokens (they pair with the program's own), else goes.
        kept = number == len(parts) - 1 or bool(finish.deps.bits)
        if number == len(parts) - 1:
            words.append(finish)
        elif kept:
            words.append(Nop(Queue.COMPUTE, finish.deps))
        executed.append(sum(math.prod(node.counts) for node in nodes) + kept)
    if any(paired.values()):
        raise ExecutionError(f"internal error: the linked NPU program pairs tokens unevenly "
                             f"({dict(paired)})")
    depths = (config.queues.token_depth, config.queues.instruction_depth)
    why = stuck(words, *depths)
    if why is not None:
        raise ExecutionError(f"the linked NPU program deadlocks on its dependency tokens "
                             f"(token_depth {depths[0]}, instruction_depth {depths[1]}): {why}")
    return Linked(tuple(words), tuple(executed))


def relocate(part: Part, datapath: FloatDatapathConfig | None = None
             ) -> tuple[Instruction, ...]:
    """``part``'s program with every load's and store's DRAM address moved to its region's
    place in the joined image (steps advance within a region, so they stay); on a machine
    whose float array is ``datapath``, DMA elements are its widths. Raises LinkError for a
    transfer that lies in no one region."""
    return _relocated(part, datapath)[0]


def _relocated(part: Part, datapath: FloatDatapathConfig | None
               ) -> tuple[list[Instruction], list[Placed]]:
    """:func:`relocate`'s program, and its instructions as :func:`simulator.loops.placed`
    gives them (moved as the program is)."""
    program = list(part.program)
    nodes = list(placed(structure(part.program)))
    for n, node in enumerate(nodes):
        insn = node.insn
        if not isinstance(insn, Load | Store):
            continue
        low, high = _dram_extent(node, datapath)
        region = next((r for r in part.regions if r.old <= low and high <= r.old + r.nbytes),
                      None)
        if region is None:
            raise LinkError(f"the {type(insn).__name__.lower()} at word {node.index} moves "
                            f"DRAM bytes {low}..{high}, which lie in no one region of its "
                            f"program")
        if region.new != region.old:
            moved = dataclasses.replace(insn, dram=insn.dram + region.new - region.old)
            program[node.index] = moved
            nodes[n] = node._replace(insn=moved, base=(node.base[0], moved.dram))
    return program, nodes


def _dram_extent(node: Placed, datapath: FloatDatapathConfig | None) -> tuple[int, int]:
    """The DRAM bytes ``[low, high)`` a load or store touches over all its iterations."""
    insn = node.insn
    low = high = insn.dram
    if node.steps:
        (low, _), (high, _) = span(node, STEP_FIELDS[type(insn)].index("dram"))
    return low, high + (insn.rows - 1) * insn.stride + row_bytes(insn, datapath)


def _seam(words: list[Instruction], last: list[Placed], after: list[Placed],
          datapath: FloatDatapathConfig | None) -> list[Instruction]:
    """The seam to the part whose instructions are ``after``, put into ``words`` (the
    program so far, whose last part's instructions are ``last``): its store NOPs among
    the words, then the NOPs that follow them, which are returned, all of them. Together
    they start ``after``'s queues as early as the data allows.

    The store NOP pushed before the final run of the program's stores says the stores before
    it have landed; a compute NOP, after every earlier compute instruction, takes that and
    lets ``after``'s loads begin. Where ``after`` touches what the run reads or writes, a
    second store NOP after the run and a second compute NOP hold ``after``'s compute until
    the run has drained; its loads then wait for the run by its own tokens: every load from
    its first that waits on its compute does so after that compute NOP. The loads before
    that one must not touch the run, so the run starts after the last store they touch.
    Each NOP pops or pushes where every earlier token of its channel is already paired."""
    covered = next((n for n, node in enumerate(after)
                    if node.insn.queue is Queue.LOAD and node.insn.deps.pop_next), len(after))
    early = [_footprint([node], datapath) for node in after[:covered]
             if node.insn.queue is Queue.LOAD]
    run = _final_store_run(last)
    touched = [n for n, store in enumerate(run)
               if _touches(early, _footprint([store], datapath))]
    if touched:
        run = run[touched[-1] + 1:]
    later = [node for node in after if node.insn.queue is Queue.COMPUTE] + \
        [node for node in after[covered:] if node.insn.queue is Queue.LOAD]
    drained = bool(run) and _touches((_footprint([node], datapath) for node in later),
                                     _footprint(run, datapath))
    landed = Nop(Queue.STORE, Deps(push_prev=True))
    seam: list[Instruction] = [landed]
    if run:
        words.insert(run[0].index, landed)
    else:
        words.append(landed)
    follow: list[Instruction] = [Nop(Queue.COMPUTE, Deps(pop_next=True, push_prev=True))]
    if drained:
        seam.append(Nop(Queue.STORE, Deps(push_prev=True)))
        words.append(seam[-1])
        follow.append(Nop(Queue.COMPUTE, Deps(pop_next=True)))
    follow.append(Nop(Queue.LOAD, Deps(pop_next=True)))
    words += follow
    return seam + follow


def _final_store_run(nodes: Sequence[Placed]) -> list[Placed]:
    """The last store-queue instructions of ``nodes`` (a program's, in order) that lie
    outside every loop and push no token to the compute queue (after its last one that
    does, or that a loop repeats): the run a seam lets the next program overlap."""
    run: list[Placed] = []
    for node in reversed(nodes):
        if node.insn.queue is not Queue.STORE:
            continue
        if node.counts or node.insn.deps.push_prev:
            break
        run.append(node)
    return run[::-1]


def _touches(footprints: Iterable[tuple[list[Access], list[Access]]],
             stores: tuple[list[Access], list[Access]]) -> bool:
    """Whether any of ``footprints`` (instructions' reads and writes, :func:`_footprint`)
    writes what ``stores`` (a footprint too) read or write, or reads what they write."""
    store_reads, store_writes = stores
    return any(_overlap(writes, store_reads + store_writes) or _overlap(reads, store_writes)
               for reads, writes in footprints)


def _footprint(nodes: Sequence[Placed], datapath: FloatDatapathConfig | None
               ) -> tuple[list[Access], list[Access]]:
    """The rows and DRAM chunks ``nodes`` read and write over all their iterations: each
    range the union of its ranges at the iteration box's corners where some field is least
    or greatest (fields are affine in the iteration)."""
    reads: list[Access] = []
    writes: list[Access] = []
    for node in nodes:
        if isinstance(node.insn, Nop | Finish):
            continue
        corners = {corner for f in range(len(node.base)) for _, corner in span(node, f)} \
            if node.steps else {()}
        ranges = [accesses(node.instruction_at(corner), datapath) for corner in corners]
        for side, out in ((0, reads), (1, writes)):
            for parts in zip(*(r[side] for r in ranges)):
                out.append((parts[0][0], min(p[1] for p in parts), max(p[2] for p in parts)))
    return reads, writes


def _overlap(ours: Sequence[Access], theirs: Sequence[Access]) -> bool:
    return any(m == n and lo < hi2 and lo2 < hi for m, lo, hi in ours for n, lo2, hi2 in theirs)


@dataclass(frozen=True, slots=True)
class Counts:
    """What a program moves and multiplies, which its timing does not change: DRAM bytes
    read and written, and MACs the array executes (padded tiles included, as
    :attr:`simulator.SimResult.useful_macs` counts them)."""

    dram_bytes: int
    macs: int


def counts(program: Sequence[Instruction], config: MachineConfig) -> Counts:
    """The :class:`Counts` of ``program`` on the machine ``config``, every loop iteration
    counted (a part of a linked program has its own, which its simulation sums)."""
    dram = macs = 0
    for node in placed(structure(program)):
        insn, times = node.insn, math.prod(node.counts)
        if isinstance(insn, Load | Store):
            dram += times * insn.rows * row_bytes(insn, config.datapath)
        elif isinstance(insn, Gemm):
            macs += times * insn.rows * insn.k * config.array.cols
    return Counts(dram, macs)
