"""The event-driven engine: three instruction queues, four token queues, one DRAM port.

Time advances from instruction to instruction, never cycle by cycle. Each step takes the
queue whose head instruction can leave it earliest (dispatched, its tokens pushed, its unit
free), computes when the instruction begins and finishes from the availability times of the
resources it needs, applies its effect to the memories, and records its tokens. Steps happen
in non-decreasing start order, so the shared DRAM port serves requests first come, first
served. docs/simulator.md derives every formula used here.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence

import numpy as np

from ir.errors import SimulatorFault
from simulator import datapath, timing
from simulator.config import MachineConfig
from simulator.isa import (
    Finish,
    Gemm,
    Instruction,
    Load,
    Mem,
    Nop,
    Operand,
    Queue,
    Store,
    Vec,
    decode,
)
from simulator.memory import QUEUE_NAMES, OnChipMemory
from simulator.result import SimResult, UnitStats
from simulator.trace import UNITS, Record

LOAD_UNIT, GEMM_UNIT, VECTOR_UNIT, STORE_UNIT, DRAM_UNIT = range(len(UNITS))


class _Tokens:
    """One token queue: push times and the pusher's vector clock per token, pop times."""

    __slots__ = ("clocks", "name", "pops", "pushes")

    def __init__(self, name: str) -> None:
        self.name = name
        self.pushes: list[int] = []
        self.clocks: list[np.ndarray] = []
        self.pops: list[int] = []


class _Queue:
    """One instruction queue's state.

    ``issue_free``: when the next instruction may leave the queue; ``retired``: when the last
    one retired (in order); ``seq`` and ``clock``: the vector clock (see memory.py);
    ``inflight``: done times of a DMA engine's outstanding requests; ``pending``: pushes
    waiting for room in a full token queue.
    """

    __slots__ = (
        "clock",
        "inflight",
        "insns",
        "issue_free",
        "kind",
        "name",
        "pending",
        "pop_next",
        "pop_prev",
        "pos",
        "push_next",
        "push_prev",
        "retired",
        "seq",
    )

    def __init__(self, kind: Queue, insns: list[int]) -> None:
        self.kind = kind
        self.name = QUEUE_NAMES[kind]
        self.insns = insns
        self.pos = 0
        self.issue_free = 0
        self.retired = 0
        self.seq = 0
        self.clock = np.zeros(len(Queue), np.int64)
        self.inflight: deque[int] = deque()
        self.pending: list[tuple[_Tokens, int, np.ndarray]] = []
        self.pop_prev: _Tokens | None = None
        self.pop_next: _Tokens | None = None
        self.push_prev: _Tokens | None = None
        self.push_next: _Tokens | None = None

    def head(self) -> int | None:
        """The program index of the next instruction, or None when the queue is done."""
        return self.insns[self.pos] if self.pos < len(self.insns) else None


class _UnitTime:
    """Busy/stall accumulation for one unit: ``covered`` is the end of its busy time so far."""

    __slots__ = ("busy", "count", "covered", "stall")

    def __init__(self) -> None:
        self.covered = 0
        self.busy = 0
        self.stall = 0
        self.count = 0


def unit_name(insn: Instruction) -> str:
    """The unit that executes ``insn``, as fault messages name it."""
    if isinstance(insn, Gemm):
        return "gemm"
    if isinstance(insn, Vec):
        return "vector"
    return QUEUE_NAMES[insn.queue]


def simulate(program: Sequence[Instruction] | bytes, config: MachineConfig, dram: np.ndarray,
             *, functional: bool = True) -> SimResult:
    """Run ``program`` on the machine ``config`` with ``dram`` (a 1-D uint8 array) as memory.

    The program (instructions, or their binary encoding) must end with its only FINISH.
    ``dram`` is copied; the result carries the final image. With ``functional=False`` only
    time is simulated: no values are computed, and reads of unwritten rows and races go
    unchecked (address checks remain). Faults raise :class:`SimulatorFault`.
    """
    insns = decode(bytes(program)) if isinstance(program, bytes | bytearray) else tuple(program)
    image = np.asarray(dram)
    if image.dtype != np.uint8 or image.ndim != 1:
        raise TypeError(f"simulate requires dram as a 1-D uint8 array, got {image.dtype} "
                        f"with shape {image.shape}")
    machine = _Machine(insns, config, image.copy(), functional)
    machine.run()
    return machine.result()


def _check_program(program: tuple[Instruction, ...]) -> None:
    """Fault unless the program ends with its one FINISH."""
    if not program or not isinstance(program[-1], Finish):
        raise SimulatorFault("a program requires FINISH as its last instruction",
                             index=max(len(program) - 1, 0), unit="fetch")
    for index, insn in enumerate(program[:-1]):
        if isinstance(insn, Finish):
            raise SimulatorFault("FINISH before the end of the program", index=index,
                                 unit="fetch")


class _Machine:
    """One run's whole state; :meth:`run` executes the program, :meth:`result` reports."""

    def __init__(self, program: tuple[Instruction, ...], config: MachineConfig,
                 dram: np.ndarray, functional: bool) -> None:
        _check_program(program)
        self.program = program
        self.config = config
        self.dram = dram
        self.functional = functional
        self.queue_of = [insn.queue for insn in program]
        by_queue: list[list[int]] = [[] for _ in Queue]
        self.pos_in_queue = []
        for index, queue in enumerate(self.queue_of):
            self.pos_in_queue.append(len(by_queue[queue]))
            by_queue[queue].append(index)
        self.queues = [_Queue(kind, by_queue[kind]) for kind in Queue]
        self._connect_tokens()
        self.dispatch_t = [0] * len(program)
        self.start_t = [-1] * len(program)
        self.dispatched = 0
        array = config.array
        self.memories = {
            Mem.INP: OnChipMemory("inp", config.inp.rows, array.rows, np.int8, config.inp.banks),
            Mem.WGT: OnChipMemory("wgt", config.wgt.rows, array.cols, np.int8, config.wgt.banks),
            Mem.ACC: OnChipMemory("acc", config.acc.rows, array.cols, np.int32,
                                  config.acc.banks),
        }
        # Accumulator scoreboard: when each row's last compute write lands (any unit), and
        # when its last vector-unit write lands (the GEMM waits only for those; GEMMs into
        # the same rows are ordered by the array's pipeline).
        self.acc_done = np.zeros(config.acc.rows, np.int64)
        self.vec_done = np.zeros(config.acc.rows, np.int64)
        self.port_free = 0
        self.dram_wait = 0
        self.stream_free = 0
        self.preload_free = 0
        self.vec_free = 0
        self.held: list[tuple[int, int] | None] = [None, None]
        self.buffer_free = [0, 0]
        self.active = 0
        self.units = [_UnitTime() for _ in UNITS]
        self.records: list[Record] = []
        self.useful_macs = 0
        self.traffic: Counter[str] = Counter()
        # Each handler: (instruction, index, ready time, queue, avail) -> (begin, done).
        self.handlers: dict[type, Callable[..., tuple[int, int]]] = {
            Load: self._load, Store: self._store, Gemm: self._gemm, Vec: self._vec,
            Nop: self._sync, Finish: self._sync,
        }

    def _connect_tokens(self) -> None:
        """Create the four token queues and wire each instruction queue's flags to them."""
        load, compute, store = self.queues
        for src, dst in ((load, compute), (compute, load), (compute, store), (store, compute)):
            tokens = _Tokens(f"{src.name}->{dst.name}")
            if src.kind < dst.kind:
                src.push_next, dst.pop_prev = tokens, tokens
            else:
                src.push_prev, dst.pop_next = tokens, tokens

    # -- the event loop ------------------------------------------------------------------

    def run(self) -> None:
        """Execute instructions in start order until every queue is done, or fault."""
        queues = self.queues
        self._dispatch()
        while True:
            best: _Queue | None = None
            best_t = 0
            for q in queues:
                if q.pending and not self._flush(q):
                    continue
                t = self._ready(q)
                if t is not None and (best is None or t < best_t):
                    best, best_t = q, t
            if best is None:
                break
            self._execute(best, best_t)
            self._dispatch()
        if any(q.pending or q.pos < len(q.insns) for q in queues):
            raise self._deadlock()

    def _dispatch(self) -> None:
        """Fetch instructions in program order into their queues while there is room.

        Instruction j enters its queue fetch_cycles after j - 1, and not before the one
        ``instruction_depth`` places ahead of it in that queue has left.
        """
        depth = self.config.queues.instruction_depth
        fetch = self.config.queues.fetch_cycles
        n = len(self.program)
        while self.dispatched < n:
            j = self.dispatched
            t = self.dispatch_t[j - 1] + fetch if j else 0
            k = self.pos_in_queue[j]
            if k >= depth:
                ahead = self.start_t[self.queues[self.queue_of[j]].insns[k - depth]]
                if ahead < 0:
                    return
                t = max(t, ahead)
            self.dispatch_t[j] = t
            self.dispatched = j + 1

    def _ready(self, q: _Queue) -> int | None:
        """When q's head can leave the queue, or None while it cannot (or q is done)."""
        if q.pending or q.pos == len(q.insns):
            return None
        j = q.insns[q.pos]
        if j >= self.dispatched:
            return None
        t = max(q.issue_free, self.dispatch_t[j])
        deps = self.program[j].deps
        for wanted, tokens in ((deps.pop_prev, q.pop_prev), (deps.pop_next, q.pop_next)):
            if wanted:
                taken = len(tokens.pops)
                if taken >= len(tokens.pushes):
                    return None
                t = max(t, tokens.pushes[taken])
        if len(q.inflight) >= self.config.dma.max_outstanding:
            t = max(t, q.inflight[0])
        return t

    def _execute(self, q: _Queue, t: int) -> None:
        """Run q's head instruction, whose operands allow it to leave the queue at ``t``."""
        j = q.insns[q.pos]
        q.pos += 1
        insn = self.program[j]
        deps = insn.deps
        avail = max(q.issue_free, self.dispatch_t[j])
        q.seq += 1
        clock = q.clock
        clock[q.kind] = q.seq
        popped = [tokens for wanted, tokens in ((deps.pop_prev, q.pop_prev),
                                                (deps.pop_next, q.pop_next)) if wanted]
        for tokens in popped:
            np.maximum(clock, tokens.clocks[len(tokens.pops)], out=clock)
        start, done = self.handlers[type(insn)](insn, j, t, q, avail)
        for tokens in popped:
            tokens.pops.append(start)
        self.start_t[j] = start
        q.retired = max(done, q.retired)
        for wanted, tokens in ((deps.push_prev, q.push_prev), (deps.push_next, q.push_next)):
            if wanted:
                q.pending.append((tokens, q.retired, clock.copy()))
        if q.pending:
            self._flush(q)

    def _flush(self, q: _Queue) -> bool:
        """Push q's pending tokens; False while one waits for room in a full token queue.

        A push into a full queue waits for the pop that frees its slot, and holds q: none of
        its later instructions leaves before that push.
        """
        depth = self.config.queues.token_depth
        while q.pending:
            tokens, when, clock = q.pending[0]
            slot = len(tokens.pushes) - depth
            if slot >= 0:
                if slot >= len(tokens.pops):
                    return False
                if tokens.pops[slot] > when:
                    when = tokens.pops[slot]
                    q.issue_free = max(q.issue_free, when)
            tokens.pushes.append(when)
            tokens.clocks.append(clock)
            q.retired = max(q.retired, when)
            q.pending.pop(0)
        return True

    def _account(self, unit: int, j: int, avail: int, begin: int, done: int) -> None:
        """Add one instruction's busy interval [begin, done) and its stall to ``unit``.

        Stall is the wait between the instruction being ready in its queue (``avail``) and
        its beginning, while the unit had nothing else in flight.
        """
        stats = self.units[unit]
        waited_from = max(avail, stats.covered)
        if begin > waited_from:
            stats.stall += begin - waited_from
        if done > stats.covered:
            stats.busy += done - max(begin, stats.covered)
            stats.covered = done
        stats.count += 1
        self.records.append((unit, begin, done, j))

    # -- units ---------------------------------------------------------------------------

    def _dram_access(self, addr: int, rows: int, row_bytes: int, stride: int, verb: str,
                     j: int, unit: str) -> None:
        """Fault unless the strided DRAM region lies inside DRAM."""
        end = datapath.dram_extent(addr, rows, row_bytes, stride)
        if end > self.dram.size:
            raise SimulatorFault(f"{verb} DRAM bytes {addr:#x}..{end - 1:#x}, past the end of "
                                 f"DRAM ({self.dram.size:#x} bytes)", index=j, unit=unit)

    def _transfer(self, j: int, t: int, q: _Queue, nbytes: int, unit: int,
                  avail: int) -> tuple[int, int]:
        """A DMA's timing: request at t, data on the shared port after the latency."""
        config = self.config
        arrival = t + config.dram.latency
        data = max(arrival, self.port_free)
        done = data + timing.dma_transfer_cycles(nbytes, config)
        port = self.units[DRAM_UNIT]
        port.busy += done - data
        port.count += 1
        self.dram_wait += data - arrival
        self.records.append((DRAM_UNIT, data, done, j))
        self.port_free = done
        q.issue_free = t + config.dma.issue_cycles
        q.inflight.append(done)
        if len(q.inflight) > config.dma.max_outstanding:
            q.inflight.popleft()
        self._account(unit, j, avail, t, done)
        return t, done

    def _load(self, insn: Load, j: int, t: int, q: _Queue, avail: int) -> tuple[int, int]:
        """LOAD: check, then DRAM -> whole on-chip rows (zero past cols)."""
        memory = self.memories[insn.mem]
        if insn.cols > memory.width:
            raise SimulatorFault(f"load of {insn.cols} columns into {memory.name}, whose rows "
                                 f"hold {memory.width}", index=j, unit="load")
        memory.check_bounds(insn.sram, insn.rows, "writes", j, "load")
        width = 4 if insn.mem is Mem.ACC else 1
        row_bytes = insn.cols * width
        self._dram_access(insn.dram, insn.rows, row_bytes, insn.stride, "reads", j, "load")
        lo, hi = insn.sram, insn.sram + insn.rows
        nbytes = insn.rows * row_bytes
        self.traffic["dram.read"] += nbytes
        self.traffic[f"{memory.name}.write"] += insn.rows * memory.width * width
        if insn.mem is Mem.WGT:
            self._invalidate_weights(lo, hi)
        if self.functional:
            memory.write(lo, hi, q.kind, q.clock, j, "load")
            rows = datapath.dram_rows(self.dram, insn.dram, insn.rows, row_bytes, insn.stride)
            target = memory.data[lo:hi]
            target[:, :insn.cols] = rows.view("<i4") if width == 4 else rows.view(np.int8)
            target[:, insn.cols:] = 0
        return self._transfer(j, t, q, nbytes, LOAD_UNIT, avail)

    def _store(self, insn: Store, j: int, t: int, q: _Queue, avail: int) -> tuple[int, int]:
        """STORE: check, then acc rows -> DRAM, narrowed to int8 if asked."""
        acc = self.memories[Mem.ACC]
        if insn.cols > acc.width:
            raise SimulatorFault(f"store of {insn.cols} columns from acc, whose rows hold "
                                 f"{acc.width}", index=j, unit="store")
        acc.check_bounds(insn.sram, insn.rows, "reads", j, "store")
        row_bytes = insn.cols * (1 if insn.narrow else 4)
        if insn.rows > 1 and insn.stride < row_bytes:
            raise SimulatorFault(f"store rows of {row_bytes} bytes overlap in DRAM: stride "
                                 f"{insn.stride} < {row_bytes}", index=j, unit="store")
        self._dram_access(insn.dram, insn.rows, row_bytes, insn.stride, "writes", j, "store")
        lo, hi = insn.sram, insn.sram + insn.rows
        nbytes = insn.rows * row_bytes
        self.traffic["acc.read"] += insn.rows * insn.cols * 4
        self.traffic["dram.write"] += nbytes
        if self.functional:
            acc.read(lo, hi, q.kind, q.clock, j, "store")
            values = acc.data[lo:hi, :insn.cols]
            data = datapath.narrow(values) if insn.narrow else values.astype("<i4")
            target = datapath.dram_rows(self.dram, insn.dram, insn.rows, row_bytes, insn.stride)
            target[...] = data.view(np.uint8)
        return self._transfer(j, t, q, nbytes, STORE_UNIT, avail)

    def _invalidate_weights(self, lo: int, hi: int) -> None:
        """Forget weights held in the array whose scratchpad rows [lo, hi) now overwrites."""
        for b, tag in enumerate(self.held):
            if tag is not None and tag[0] < hi and lo < tag[0] + tag[1]:
                self.held[b] = None

    def _gemm(self, insn: Gemm, j: int, t: int, q: _Queue, avail: int) -> tuple[int, int]:
        """GEMM: check, time it on the array, accumulate the tile product."""
        config = self.config
        array = config.array
        if insn.k > array.rows:
            raise SimulatorFault(f"gemm with k = {insn.k} requires k <= the array's "
                                 f"{array.rows} rows", index=j, unit="gemm")
        inp, wgt, acc = self.memories[Mem.INP], self.memories[Mem.WGT], self.memories[Mem.ACC]
        inp.check_bounds(insn.inp, insn.rows, "reads", j, "gemm")
        wgt.check_bounds(insn.wgt, insn.k, "reads", j, "gemm")
        acc.check_bounds(insn.acc, insn.rows, "writes", j, "gemm")
        lo, hi = insn.acc, insn.acc + insn.rows
        ready = max(t, int(self.vec_done[lo:hi].max()))
        if array.dataflow == "weight_stationary":
            begin, stream_start = self._weights(insn, ready)
        else:
            begin = stream_start = max(ready, self.stream_free)
            self.traffic["wgt.read"] += insn.k * array.cols
        stream_end = stream_start + timing.stream_cycles(insn.rows, insn.k, config)
        if array.dataflow == "weight_stationary":
            self.buffer_free[self.active] = max(self.buffer_free[self.active],
                                                stream_end + timing.weight_release_cycles(config))
        done = stream_end + timing.drain_cycles(insn.k, config)
        self.stream_free = stream_end
        self.acc_done[lo:hi] = done
        q.issue_free = begin
        self.useful_macs += insn.rows * insn.k * array.cols
        self.traffic["inp.read"] += insn.rows * insn.k
        self.traffic["acc.write"] += insn.rows * array.cols * 4
        if not insn.reset:
            self.traffic["acc.read"] += insn.rows * array.cols * 4
        if self.functional:
            inp.read(insn.inp, insn.inp + insn.rows, q.kind, q.clock, j, "gemm")
            wgt.read(insn.wgt, insn.wgt + insn.k, q.kind, q.clock, j, "gemm")
            if not insn.reset:
                acc.read(lo, hi, q.kind, q.clock, j, "gemm")
            acc.write(lo, hi, q.kind, q.clock, j, "gemm")
            datapath.gemm(acc.data[lo:hi], inp.data[insn.inp:insn.inp + insn.rows, :insn.k],
                          wgt.data[insn.wgt:insn.wgt + insn.k], insn.reset)
        self._account(GEMM_UNIT, j, avail, begin, done)
        return begin, done

    def _weights(self, insn: Gemm, ready: int) -> tuple[int, int]:
        """Weight-stationary: (begin, stream start), preloading the weights unless held.

        A weight tile already in a buffer (same rows, not rewritten since) is reused. Else it
        preloads into the idle buffer (or the only one) once that buffer's last user has
        passed, taking R cycles; streaming starts when both preload and input port are free.
        """
        config = self.config
        tag = (insn.wgt, insn.k)
        if tag in self.held:
            self.active = self.held.index(tag)
            start = max(ready, self.stream_free)
            return start, start
        self.traffic["wgt.read"] += insn.k * config.array.cols
        buffer = 1 - self.active if config.array.double_buffered_weights else 0
        preload = max(ready, self.preload_free, self.buffer_free[buffer])
        self.preload_free = preload + timing.preload_cycles(config)
        self.held[buffer] = tag
        self.active = buffer
        return preload, max(self.preload_free, self.stream_free)

    def _vec(self, insn: Vec, j: int, t: int, q: _Queue, avail: int) -> tuple[int, int]:
        """VEC: check, time it on the vector unit, apply it to the acc rows."""
        acc = self.memories[Mem.ACC]
        unit = "vector"
        acc.check_bounds(insn.dst, insn.rows, "writes", j, unit)
        lo, hi = insn.dst, insn.dst + insn.rows
        src_rows = {Operand.TILE: insn.rows, Operand.ROW: 1, Operand.IMM: 0}[insn.mode]
        start = max(t, self.vec_free, int(self.acc_done[lo:hi].max()))
        if src_rows:
            acc.check_bounds(insn.src, src_rows, "reads", j, unit)
            start = max(start, int(self.acc_done[insn.src:insn.src + src_rows].max()))
        self.vec_free = start + timing.vector_issue_cycles(insn.rows, self.config)
        done = self.vec_free + self.config.vector.latency
        self.acc_done[lo:hi] = done
        self.vec_done[lo:hi] = done
        q.issue_free = start
        row_bytes = acc.width * 4
        self.traffic["acc.read"] += (insn.rows + src_rows) * row_bytes
        self.traffic["acc.write"] += insn.rows * row_bytes
        if self.functional:
            if src_rows:
                acc.read(insn.src, insn.src + src_rows, q.kind, q.clock, j, unit)
            acc.read(lo, hi, q.kind, q.clock, j, unit)
            acc.write(lo, hi, q.kind, q.clock, j, unit)
            other = datapath.second_operand(insn.mode, acc.data, insn.src, insn.rows, insn.imm)
            datapath.vector(insn.op, acc.data[lo:hi], other, insn.imm2)
        self._account(VECTOR_UNIT, j, avail, start, done)
        return start, done

    def _sync(self, insn: Nop | Finish, j: int, t: int, q: _Queue,
              avail: int) -> tuple[int, int]:
        """NOP and FINISH: only their tokens; they take no time."""
        q.issue_free = t
        return t, t

    # -- reporting -----------------------------------------------------------------------

    def _deadlock(self) -> SimulatorFault:
        """Describe why no queue can move, blaming the earliest instruction waiting on a pop."""
        states = []
        blamed: int | None = None
        for q in self.queues:
            j = q.head()
            if q.pending:
                tokens = q.pending[0][0]
                states.append(f"{q.name} waits for room to push into {tokens.name} "
                              f"(full: token_depth {self.config.queues.token_depth})")
            elif j is None:
                states.append(f"{q.name} has finished")
            elif j >= self.dispatched:
                states.append(f"{q.name} waits for instruction {j} to be dispatched "
                              f"(instruction {self.dispatched}'s queue is full)")
            else:
                deps = self.program[j].deps
                for wanted, tokens in ((deps.pop_prev, q.pop_prev),
                                       (deps.pop_next, q.pop_next)):
                    if wanted and len(tokens.pops) >= len(tokens.pushes):
                        states.append(f"{q.name} (instruction {j}) waits to pop from "
                                      f"{tokens.name} ({len(tokens.pushes)} pushed, "
                                      f"{len(tokens.pops)} popped)")
                        blamed = j if blamed is None else min(blamed, j)
                        break
        if blamed is None:
            # No pop is starved: blame the earliest instruction that is stuck.
            blamed = min(q.insns[q.pos - 1] if q.pending else q.insns[q.pos]
                         for q in self.queues if q.pending or q.pos < len(q.insns))
        return SimulatorFault("deadlock: no queue can proceed; " + "; ".join(states),
                              index=blamed, unit=unit_name(self.program[blamed]))

    def result(self) -> SimResult:
        """The run's report."""
        cycles = max([q.retired for q in self.queues] + [self.port_free])
        units = {}
        for name, stats in zip(UNITS, self.units, strict=True):
            units[name] = UnitStats(name, stats.busy, stats.stall,
                                    cycles - stats.busy - stats.stall, stats.count)
        kinds = Counter(type(insn).__name__.lower() for insn in self.program)
        names = ("dram.read", "dram.write", "inp.read", "inp.write", "wgt.read", "wgt.write",
                 "acc.read", "acc.write")
        return SimResult(
            config=self.config, program=self.program, cycles=cycles, units=units,
            useful_macs=self.useful_macs, bytes={k: self.traffic[k] for k in names},
            instructions=dict(kinds), dram_wait=self.dram_wait, dram=self.dram,
            functional=self.functional,
            records=tuple(self.records))
