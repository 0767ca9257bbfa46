"""Dependency tokens: ordering the three queues exactly where the data requires it.

Each instruction's reads and writes (rows of inp/wgt/acc, bytes of DRAM) come from its
fields. An instruction depends on the latest earlier instruction of another queue that
writes what it reads or writes, or reads what it writes. Tokens pass only between
neighbouring queues (load <-> compute <-> store) and pair up in order (the n-th pop takes
the n-th push), so for each channel the emitter marks the dependency's source to push and
the dependent to pop, skipping dependencies an earlier pop already covers (queues retire in
order). A dependency between the load and store queues goes through a compute-queue NOP.

Every wait is on an instruction earlier in program order, so with unbounded channels the
program could not deadlock; a channel holds only ``token_depth`` tokens, though, and a push
into a full one waits, as does the fetch unit for a full instruction queue. Pushing one token
for a whole run of a queue's instructions (:class:`Merge`) keeps the tokens outstanding
few, and :func:`stuck` checks that the program runs to its end.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TypeVar

import numpy as np

from simulator.config import FloatDatapathConfig, element_bytes
from simulator.isa import (
    Deps,
    Finish,
    Gemm,
    Instruction,
    Load,
    Nop,
    Operand,
    QAdd,
    Queue,
    Requant,
    Store,
    Vec,
    VecOp,
)
from simulator.loops import Placed

DRAM_CHUNK = 64  # DRAM hazards are tracked per 64-byte chunk (conservative, and small)

Access = tuple[str, int, int]  # (memory, first row or chunk, end)
T = TypeVar("T")
_INSTRUCTIONS = (Load, Store, Gemm, Vec, Requant, QAdd, Nop, Finish)


def accesses(insn: Instruction, datapath: FloatDatapathConfig | None = None
             ) -> tuple[list[Access], list[Access]]:
    """(reads, writes) of an instruction, as row ranges of inp/wgt/acc and DRAM chunks, on
    a machine whose float array is ``datapath`` (None: int8)."""
    if isinstance(insn, Load):
        mem = insn.mem.name.lower()
        return ([_dram(insn.dram, (insn.rows - 1) * insn.stride + row_bytes(insn, datapath))],
                [(mem, insn.sram, insn.sram + insn.rows)])
    if isinstance(insn, Store):
        return ([("acc", insn.sram, insn.sram + insn.rows)],
                [_dram(insn.dram, (insn.rows - 1) * insn.stride + row_bytes(insn, datapath))])
    if isinstance(insn, Gemm):
        acc = ("acc", insn.acc, insn.acc + insn.rows)
        return ([("inp", insn.inp, insn.inp + insn.rows), ("wgt", insn.wgt, insn.wgt + insn.k),
                 acc], [acc])
    if isinstance(insn, Vec):
        dst = ("acc", insn.dst, insn.dst + insn.rows)
        reads = [] if insn.op is VecOp.FILL else [dst]
        if insn.mode is Operand.TILE:
            reads.append(("acc", insn.src, insn.src + insn.rows))
        elif insn.mode is Operand.ROW:
            reads.append(("acc", insn.src, insn.src + 1))
        return reads, [dst]
    if isinstance(insn, Requant):
        dst = ("acc", insn.dst, insn.dst + insn.rows)
        scales = [("acc", insn.src, insn.src + 1)] if insn.per_channel else []
        return [dst, *scales], [dst]
    if isinstance(insn, QAdd):
        dst = ("acc", insn.dst, insn.dst + insn.rows)
        return [dst, ("acc", insn.src, insn.src + insn.rows),
                ("acc", insn.par, insn.par + 3)], [dst]
    return [], []


def row_bytes(insn: Load | Store, datapath: FloatDatapathConfig | None = None) -> int:
    """The DRAM bytes of one row a load or store moves, on a machine whose float array is
    ``datapath`` (None: int8): a store's int32 or narrowed int8 elements, a load's of its
    memory's width."""
    if isinstance(insn, Store):
        return insn.cols * (1 if insn.narrow else 4)
    if datapath is None:
        return insn.cols * insn.element_bytes
    return insn.cols * element_bytes(datapath, insn.mem.name.lower())


def _dram(start: int, nbytes: int) -> Access:
    return ("dram", start // DRAM_CHUNK, (start + nbytes - 1) // DRAM_CHUNK + 1)


class _LastAccess:
    """Per memory and queue, the index of the last instruction that read / wrote each unit."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.write = {m: np.full((3, n), -1, np.int64) for m, n in sizes.items()}
        self.read = {m: np.full((3, n), -1, np.int64) for m, n in sizes.items()}

    def conflict(self, reads: list[Access], writes: list[Access], queue: int) -> list[int]:
        """For each queue, the latest conflicting instruction (-1: none; the queue's own
        entry is always -1)."""
        # One reduction over every range, all queues at once: an instruction's few ranges
        # cost more in numpy calls than in elements.
        parts = [self.write[mem][:, lo:hi] for mem, lo, hi in reads]
        for mem, lo, hi in writes:
            parts += (self.write[mem][:, lo:hi], self.read[mem][:, lo:hi])
        if not parts:
            return [-1, -1, -1]
        latest = (np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]).max(axis=1)
        found: list[int] = latest.tolist()
        found[queue] = -1
        return found

    def record(self, reads: list[Access], writes: list[Access], queue: int, index: int) -> None:
        for mem, lo, hi in reads:
            self.read[mem][queue, lo:hi] = index
        for mem, lo, hi in writes:
            self.write[mem][queue, lo:hi] = index


class Merge(enum.Enum):
    """Which dependencies on a run of one queue's instructions (:func:`_run_end`) share one
    token, pushed by the run's last instruction; fewer tokens, later starts."""

    NONE = "none"    # each dependency its own token: a dependent starts soonest
    LATER = "later"  # those whose dependent comes after the queue has begun a later run
    ALL = "all"      # every one


def insert_tokens(program: Sequence[Instruction | T], sizes: dict[str, int],
                  merge: Merge = Merge.NONE,
                  datapath: FloatDatapathConfig | None = None) -> list[Instruction | T]:
    """``program`` with dependency flags set (and NOPs added where the load and store queues
    must wait for each other), ending with FINISH. ``sizes`` gives the rows of inp/wgt/acc
    and the DRAM bytes; ``datapath`` the machine's float array, if it has one (its DMA
    elements are bfloat16 and float32, not int8 and int32). Items that are not instructions (the emitter's loop marks) stay in
    place and take part in no hazard.

    ``merge`` picks the dependencies whose token the run's last instruction pushes: that
    token covers the whole run, since a queue retires in order. With ``Merge.LATER`` a
    tile's stores that the tile after next overwrites cost one token, not one per column
    block, while a dependent right after a run (a GEMM on the DMA just before it) keeps its
    own token, so it starts before the run ends."""
    sizes = dict(sizes)
    sizes["dram"] = sizes["dram"] // DRAM_CHUNK + 1
    out: list[Instruction] = []
    flags: list[dict[str, bool]] = []
    last = _LastAccess(sizes)
    covered = {}  # (from queue, to queue) -> highest source index a pop has covered
    newest = [-1, -1, -1]  # per queue, the index of its latest instruction so far

    def depend(src: int, dst: int) -> None:
        src_q, dst_q = int(out[src].queue), int(out[dst].queue)
        if covered.get((src_q, dst_q), -1) >= src:
            return
        if merge is not Merge.NONE and newest[src_q] > src:
            end = _run_end(out, src)
            if merge is Merge.ALL or newest[src_q] > end:
                src = end
        flags[src]["push_next" if dst_q > src_q else "push_prev"] = True
        flags[dst]["pop_prev" if src_q < dst_q else "pop_next"] = True
        covered[(src_q, dst_q)] = src

    for insn in program:
        if not isinstance(insn, _INSTRUCTIONS):
            out.append(insn)
            flags.append({})
            continue
        reads, writes = accesses(insn, datapath)
        queue = int(insn.queue)
        latest = last.conflict(reads, writes, queue)
        far = [q for q in range(3) if latest[q] >= 0 and abs(q - queue) == 2]
        if far and covered.get((far[0], queue), -1) < latest[far[0]]:
            # load <-> store: a compute NOP takes the token and passes it on.
            out.append(Nop(Queue.COMPUTE))
            flags.append({})
            newest[int(Queue.COMPUTE)] = len(out) - 1
            depend(latest[far[0]], len(out) - 1)
            covered[(far[0], queue)] = covered[(far[0], int(Queue.COMPUTE))]
            latest[int(Queue.COMPUTE)] = len(out) - 1
        out.append(insn)
        flags.append({})
        index = len(out) - 1
        newest[queue] = index
        for other in range(3):
            if latest[other] >= 0 and abs(other - queue) == 1:
                depend(latest[other], index)
        last.record(reads, writes, queue, index)
    out.append(Finish())
    flags.append({})
    return [insn if not f else dataclasses.replace(insn, deps=Deps(**{**_flags(insn), **f}))
            for insn, f in zip(out, flags)]


def balance(nodes: Iterable[Placed]) -> Counter[tuple[int, int]]:
    """Per channel (from queue, to queue), the tokens ``nodes`` (a program's instructions,
    :func:`simulator.loops.placed`) push less those they pop, each loop's iterations counted:
    all zero for a program whose every push is popped."""
    counted: Counter[tuple[int, int]] = Counter()
    for node in nodes:
        deps, q = node.insn.deps, int(node.insn.queue)
        times = math.prod(node.counts)
        counted[(q, q - 1)] += deps.push_prev * times
        counted[(q, q + 1)] += deps.push_next * times
        counted[(q - 1, q)] -= deps.pop_prev * times
        counted[(q + 1, q)] -= deps.pop_next * times
    return counted


def stuck(program: Sequence[Instruction | T], token_depth: int, instruction_depth: int
          ) -> str | None:
    """None when ``program`` runs to its end with ``token_depth`` tokens per channel and
    ``instruction_depth`` instructions waiting in each queue, else what each queue is stuck on.

    Runs the program on its tokens alone, without data or time (:class:`_Tokens`). Each
    party (the fetch unit and the three queues) waits on one channel at a time, so whether
    they stick does not depend on the timing (a Kahn network with bounded channels): this
    run sticks exactly when the simulator's does. Loop marks are skipped, so a program with
    a gap in a folded loop is checked on the iterations it shows."""
    run = _Tokens(program, token_depth, instruction_depth)
    moved = True
    while moved:
        moved = run.fetch()
        for q in range(3):
            while run.step(q):
                moved = True
    return run.stuck()


class _Tokens:
    """A program's fetch unit and queues, moved on their tokens alone: the fetch unit
    dispatches instructions in program order, each into its queue, waiting while that queue
    holds ``instruction_depth`` not yet started; a queue starts its next dispatched
    instruction once each channel it pops from holds a token, then pushes each token it
    gives in turn, waiting while that channel holds ``token_depth``."""

    def __init__(self, program: Sequence[Instruction | T], token_depth: int,
                 instruction_depth: int) -> None:
        self.order = [int(i.queue) for i in program if isinstance(i, _INSTRUCTIONS)]
        self.queues = [[i for i in program if isinstance(i, _INSTRUCTIONS) and i.queue == q]
                       for q in Queue]
        self.token_depth, self.instruction_depth = token_depth, instruction_depth
        self.held = {(a, b): 0 for a in range(3) for b in range(3) if abs(a - b) == 1}
        self.fetched = 0
        self.dispatched = [0, 0, 0]
        self.started = [0, 0, 0]
        self.pushing: list[list[tuple[int, int]]] = [[], [], []]

    def fetch(self) -> bool:
        """Dispatch while there is room; whether any instruction was."""
        before = self.fetched
        while self.fetched < len(self.order):
            q = self.order[self.fetched]
            if self.dispatched[q] - self.started[q] >= self.instruction_depth:
                break
            self.dispatched[q] += 1
            self.fetched += 1
        return self.fetched > before

    def step(self, q: int) -> bool:
        """Move queue ``q`` one push or one instruction on; False when it cannot."""
        pushing = self.pushing[q]
        if pushing:
            if self.held[pushing[0]] >= self.token_depth:
                return False
            self.held[pushing.pop(0)] += 1
            return True
        if self.started[q] == self.dispatched[q]:
            return False
        pops, pushes = _channels(self.queues[q][self.started[q]], q)
        if any(self.held[c] == 0 for c in pops):
            return False
        for c in pops:
            self.held[c] -= 1
        pushing.extend(pushes)
        self.started[q] += 1
        return True

    def stuck(self) -> str | None:
        """None when every instruction has run and pushed its tokens, else why not."""
        if self.fetched == len(self.order) and not any(self.pushing) and \
                self.started == [len(insns) for insns in self.queues]:
            return None
        return "; ".join(self._waits(q) for q in range(3))

    def _waits(self, q: int) -> str:
        name = Queue(q).name.lower()
        if self.pushing[q]:
            return f"{name} waits to push into {_channel(self.pushing[q][0])}"
        if self.started[q] == len(self.queues[q]):
            return f"{name} has finished"
        if self.started[q] == self.dispatched[q]:
            full = Queue(self.order[self.fetched]).name.lower()
            return f"{name} waits for its next instruction (fetch waits on the full {full} queue)"
        pops, _ = _channels(self.queues[q][self.started[q]], q)
        return f"{name} (its instruction {self.started[q]}) waits to pop from " + \
            " and ".join(_channel(c) for c in pops)


def _channels(insn: Instruction, q: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(The channels ``insn`` of queue ``q`` pops from, those it pushes into, in order)."""
    deps = insn.deps
    pops = [(q - 1, q)] * deps.pop_prev + [(q + 1, q)] * deps.pop_next
    pushes = [(q, q - 1)] * deps.push_prev + [(q, q + 1)] * deps.push_next
    return pops, pushes


def _channel(channel: tuple[int, int]) -> str:
    return "->".join(Queue(q).name.lower() for q in channel)


def _run_end(program: Sequence[Instruction | T], index: int) -> int:
    """The last instruction of the run holding ``program[index]``: the instructions of its
    queue that follow it with nothing in between (no other queue's instruction, no loop
    mark)."""
    queue = program[index].queue
    while index + 1 < len(program) and isinstance(program[index + 1], _INSTRUCTIONS) \
            and program[index + 1].queue == queue:
        index += 1
    return index


def _flags(insn: Instruction) -> dict[str, bool]:
    deps = insn.deps
    return {"pop_prev": deps.pop_prev, "pop_next": deps.pop_next,
            "push_prev": deps.push_prev, "push_next": deps.push_next}
