"""The event-driven engine: three instruction queues, four token queues, one DRAM port.

Time advances from instruction to instruction, never cycle by cycle. Each step takes the
queue whose head instruction can leave it earliest (dispatched, its tokens pushed, its unit
free), computes when the instruction begins and finishes from the availability times of the
resources it needs, applies its effect to the memories, and records its tokens. Steps happen
in non-decreasing start order, so the shared DRAM port serves requests first come, first
served. docs/simulator.md derives every formula used here.

Loop words are expanded as instructions are fetched (:mod:`simulator.loops`): each iteration's
instructions enter their queues exactly as the straight-line program spelling them out would,
and each is checked, timed and recorded on its own. The state kept per instruction lasts only
while it is in a queue, so a run's memory does not grow with its length (but for the trace
records).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from ir.errors import SimulatorFault
from simulator import datapath, timing
from simulator.config import MachineConfig, element_bytes
from simulator.isa import (
    Finish,
    Gemm,
    Instruction,
    Load,
    Mem,
    Nop,
    Operand,
    QAdd,
    Queue,
    Requant,
    Store,
    Vec,
    VecOp,
    decode,
)
from simulator.loops import Placed, placed, structure, walk
from simulator.memory import QUEUE_NAMES, MemoryFault, OnChipMemory
from simulator.products import Products
from simulator.result import SimResult, UnitStats
from simulator.trace import UNITS, Records

LOAD_UNIT, GEMM_UNIT, VECTOR_UNIT, STORE_UNIT, DRAM_UNIT = range(len(UNITS))
# Traffic counters, by index: bytes read from and written to DRAM and each memory.
TRAFFIC = ("dram.read", "dram.write", "inp.read", "inp.write", "wgt.read", "wgt.write",
           "acc.read", "acc.write")
(DRAM_READ, DRAM_WRITE, INP_READ, INP_WRITE, WGT_READ, WGT_WRITE, ACC_READ,
 ACC_WRITE) = range(len(TRAFFIC))
_WRITTEN_BY_LOAD = {Mem.INP: INP_WRITE, Mem.WGT: WGT_WRITE, Mem.ACC: ACC_WRITE}
# How many checked GEMM placements (operand rows and sizes) the engine remembers, so as not
# to check them again: a tiled program repeats a few; the others are checked every time.
_MAX_FITS = 4096
# How many GEMMs of a group (simulator.products) are computed in one stacked product.
_GROUP = 8

# One instruction on its way through a queue: (its number among executed instructions, its
# node, its address fields, its loop iteration, its dispatch time).
_Entry = tuple[int, Placed, tuple[int, ...], tuple[int, ...], int]


class _Tokens:
    """One token queue: the tokens pushed and not yet popped (push time, pusher's vector
    clock), how many were pushed and popped, and the times of the last pops (a push into a
    full queue waits for the pop that frees its slot)."""

    __slots__ = ("name", "popped", "pushed", "recent_pops", "waiting")

    def __init__(self, name: str, depth: int) -> None:
        self.name = name
        self.waiting: deque[tuple[int, tuple[int, ...]]] = deque()
        self.pushed = 0
        self.popped = 0
        self.recent_pops: deque[int] = deque(maxlen=depth)

    def take(self, when: int) -> None:
        """Pop the oldest token at ``when``."""
        self.waiting.popleft()
        self.popped += 1
        self.recent_pops.append(when)

    def pop_time(self, n: int) -> int:
        """When the n-th pop (0-based) happened; it must be among the last ``depth``."""
        return self.recent_pops[n - (self.popped - len(self.recent_pops))]


def _merge_clock(clock: list[int], other: tuple[int, ...]) -> None:
    """``clock`` becomes the element-wise maximum of itself and ``other``."""
    for k, value in enumerate(other):
        if value > clock[k]:
            clock[k] = value


class _Queue:
    """One instruction queue's state.

    ``pending``: dispatched instructions not yet started, in order; ``dispatched`` and
    ``started`` count them; ``recent_starts``: start times of the last started ones (a full
    queue holds up dispatch until the one ``instruction_depth`` ahead has left);
    ``issue_free``: when the next instruction may leave the queue; ``retired``: when the last
    one retired (in order); ``last``: its (number, program index); ``seq`` and ``clock``: the
    vector clock (see memory.py); ``inflight``: done times of a DMA engine's outstanding
    requests; ``pushes``: pushes waiting for room in a full token queue.
    """

    __slots__ = (
        "clock",
        "dispatched",
        "inflight",
        "issue_free",
        "kind",
        "last",
        "name",
        "pending",
        "pop_next",
        "pop_prev",
        "push_next",
        "push_prev",
        "pushes",
        "recent_starts",
        "retired",
        "seq",
        "started",
    )

    def __init__(self, kind: Queue, depth: int) -> None:
        self.kind = kind
        self.name = QUEUE_NAMES[kind]
        self.pending: deque[_Entry] = deque()
        self.dispatched = 0
        self.started = 0
        self.recent_starts: deque[int] = deque(maxlen=depth)
        self.issue_free = 0
        self.retired = 0
        self.last = (-1, -1)
        self.seq = 0
        self.clock = [0] * len(Queue)
        self.inflight: deque[int] = deque()
        self.pushes: list[tuple[_Tokens, int, tuple[int, ...]]] = []
        self.pop_prev: _Tokens | None = None
        self.pop_next: _Tokens | None = None
        self.push_prev: _Tokens | None = None
        self.push_next: _Tokens | None = None


class _UnitTime:
    """Busy/stall accumulation for one unit: ``covered`` is the end of its busy time so far."""

    __slots__ = ("busy", "count", "covered", "stall")

    def __init__(self) -> None:
        self.covered = 0
        self.busy = 0
        self.stall = 0
        self.count = 0


class _Fault(Exception):
    """A fault of the running instruction; the engine adds its index and iteration."""

    def __init__(self, message: str, unit: str) -> None:
        super().__init__(message)
        self.message = message
        self.unit = unit


def unit_name(insn: Instruction) -> str:
    """The unit that executes ``insn``, as fault messages name it."""
    if isinstance(insn, Gemm):
        return "gemm"
    if isinstance(insn, Vec | Requant | QAdd):
        return "vector"
    return QUEUE_NAMES[insn.queue]


def simulate(program: Sequence[Instruction] | bytes, config: MachineConfig, dram: np.ndarray,
             *, functional: bool = True) -> SimResult:
    """Run ``program`` on the machine ``config`` with ``dram`` (a 1-D uint8 array) as memory.

    The program (instructions, or their binary encoding) must end with its only FINISH, and
    its loop words must be well formed (:func:`simulator.loops.structure`). ``dram`` is
    copied; the result carries the final image. With ``functional=False`` only time is
    simulated: no values are computed, and reads of unwritten rows and races go unchecked
    (address checks remain). Faults raise :class:`SimulatorFault`.
    """
    insns = decode(bytes(program)) if isinstance(program, bytes | bytearray) else tuple(program)
    image = np.asarray(dram)
    if image.dtype != np.uint8 or image.ndim != 1:
        raise TypeError(f"simulate requires dram as a 1-D uint8 array, got {image.dtype} "
                        f"with shape {image.shape}")
    machine = _Machine(insns, config, image.copy(), functional)
    # The tile products are small BLAS calls, one after another: BLAS threads would only
    # spin beside them (on a loaded machine a 1024^3 GEMM took 8.5 CPU-s instead of 1.5).
    with threadpool_limits(1, user_api="blas"):
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


# What a float array's vector unit does: FILL (zeroing a tile before its first GEMM). The
# other operations, REQUANT, QADD and the int8 DMA forms compute on int32 and are refused.
_FLOAT_VEC_OPS = (VecOp.FILL,)


def _check_float_program(program: tuple[Instruction, ...]) -> None:
    """Fault at the first instruction a float (bfloat16 x bfloat16 -> float32) array lacks."""
    for index, insn in enumerate(program):
        what = None
        if isinstance(insn, Requant | QAdd):
            what = type(insn).__name__.lower()
        elif isinstance(insn, Vec) and insn.op not in _FLOAT_VEC_OPS:
            what = f"vec.{insn.op.name.lower()}"
        elif isinstance(insn, Load) and insn.widen:
            what = "load with widen (int8 to int32)"
        elif isinstance(insn, Store) and insn.narrow:
            what = "store with narrow (int32 to int8)"
        if what is not None:
            raise SimulatorFault(f"a float array (bfloat16 x bfloat16 -> float32) has no "
                                 f"{what}; its vector unit runs vec.fill only",
                                 index=index, unit=unit_name(insn))


def _dram_elements(raw: np.ndarray, width: int, float_array: bool) -> np.ndarray:
    """DRAM bytes (rows x row bytes, uint8) as the elements a load moves: int8 or int32 on
    an int8 array; bfloat16 (as the float32 whose upper half it is) or float32 on a float
    array."""
    if not float_array:
        return raw.view("<i4") if width == 4 else raw.view(np.int8)
    if width == 4:
        return raw.view("<f4")
    # A bfloat16 is the upper 16 bits of the float32 with the same value.
    return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)


class _Machine:
    """One run's whole state; :meth:`run` executes the program, :meth:`result` reports."""

    def __init__(self, program: tuple[Instruction, ...], config: MachineConfig,
                 dram: np.ndarray, functional: bool) -> None:
        _check_program(program)
        self.program = program
        self.nodes = structure(program)
        self.looped = len(self.nodes) != len(program)
        self.config = config
        self.dram = dram
        self.functional = functional
        queues = config.queues
        self.depth = queues.instruction_depth
        self.token_depth = queues.token_depth
        self.fetch = queues.fetch_cycles
        self.max_outstanding = config.dma.max_outstanding
        self.queues = [_Queue(kind, self.depth) for kind in Queue]
        self._connect_tokens()
        self.stream: Iterator[tuple[Placed, tuple[int, ...]]] = walk(self.nodes)
        self.next: tuple[Placed, tuple[int, ...]] | None = next(self.stream, None)
        self.fetched = 0  # instructions dispatched so far
        self.last_dispatch = 0
        array = config.array
        describe = self.describe
        # The scratchpads hold int8 values as float32 (exact), the form the array's product
        # takes them in (datapath.TileProduct), so a GEMM does not convert its operands.
        # A float array's bfloat16 operands are float32 values too (exact: bfloat16 is
        # float32's upper half), beside a float32 accumulator.
        self.float_array = config.is_float
        if self.float_array:
            _check_float_program(program)
        self.element_bytes = {mem: element_bytes(config.datapath, mem.name.lower())
                              for mem in (Mem.INP, Mem.WGT, Mem.ACC)}
        self.memories = {
            Mem.INP: OnChipMemory("inp", config.inp.rows, array.rows, np.float32,
                                  config.inp.banks, describe),
            Mem.WGT: OnChipMemory("wgt", config.wgt.rows, array.cols, np.float32,
                                  config.wgt.banks, describe),
            Mem.ACC: OnChipMemory("acc", config.acc.rows, array.cols,
                                  np.float32 if self.float_array else np.int32,
                                  config.acc.banks, describe),
        }
        # Accumulator scoreboard, kept only for programs with vector instructions: when each
        # row's last compute write lands (any unit), and when its last vector-unit write
        # lands (the GEMM waits only for those; GEMMs into the same rows are ordered by the
        # array's pipeline).
        self.vector_used = any(isinstance(insn, Vec | Requant | QAdd) for insn in program)
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
        self.records = Records()
        self.useful_macs = 0
        self.traffic = [0] * len(TRAFFIC)
        self.fields = {id(node): node.fields_function() for node in placed(self.nodes)
                       if node.steps}
        dram = config.dram
        self.latency = dram.latency
        self.bandwidth = dram.bytes_per_cycle
        self.issue_cycles = config.dma.issue_cycles
        self.weight_stationary = array.dataflow == "weight_stationary"
        self.array_cols = array.cols
        self.double_weights = array.double_buffered_weights
        self.preload_cycles = timing.preload_cycles(config)
        self.dram_size = self.dram.size
        # The weight-stationary GEMM's constant costs (timing.weight_release_cycles and
        # drain_cycles, which depend only on the array there).
        self.release_cycles = timing.weight_release_cycles(config)
        self.drain_cycles = timing.drain_cycles(array.rows, config)
        # GEMM operand placements whose bounds have been checked: a program repeats a few.
        self.gemm_fits: set[tuple[int, ...]] = set()
        # Per GEMM shape (rows, k): its stream and drain cycles and operand bytes, worked out
        # once (a program has a few shapes and runs each up to millions of times).
        self.gemm_costs: dict[tuple[int, int], tuple[int, int, int, int, int]] = {}
        self.inp, self.wgt, self.acc = (self.memories[m] for m in (Mem.INP, Mem.WGT, Mem.ACC))
        self.wgt_row_bytes = array.cols * self.element_bytes[Mem.WGT]
        # Per memory a load fills: the traffic counter of its writes, and the bytes of a row.
        self.load_targets = {mem: (_WRITTEN_BY_LOAD[mem], memory.width * self.element_bytes[mem])
                             for mem, memory in self.memories.items()}
        # A float array's products are computed one GEMM at a time (gemm_float walks k).
        self.products = Products(
            datapath.gemm_float if self.float_array else datapath.TileProduct(),
            self.acc.data, self.inp.data, self.wgt.data, 1 if self.float_array else _GROUP)
        # Each handler: (instruction, address fields, entry, ready time, queue, avail)
        # -> (begin, done).
        self.handlers: dict[type, Callable[..., tuple[int, int]]] = {
            Load: self._load, Store: self._store, Gemm: self._gemm, Vec: self._vec,
            Requant: self._requant, QAdd: self._qadd, Nop: self._sync, Finish: self._sync,
        }

    def _connect_tokens(self) -> None:
        """Create the four token queues and wire each instruction queue's flags to them."""
        load, compute, store = self.queues
        depth = self.config.queues.token_depth
        for src, dst in ((load, compute), (compute, load), (compute, store), (store, compute)):
            tokens = _Tokens(f"{src.name}->{dst.name}", depth)
            if src.kind < dst.kind:
                src.push_next, dst.pop_prev = tokens, tokens
            else:
                src.push_prev, dst.pop_next = tokens, tokens

    def describe(self, number: int, queue: str) -> str:
        """Name executed instruction ``number`` for a message: ``instruction 3 (load)``, with
        its loop iteration in a program with loops."""
        if not self.looped:
            return f"instruction {number} ({queue})"
        for n, (node, iteration) in enumerate(walk(self.nodes)):
            if n == number:
                where = f", loop iteration {iteration}" if iteration else ""
                return f"instruction {node.index} ({queue}{where})"
        raise ValueError(f"no instruction number {number}")

    # -- the event loop ------------------------------------------------------------------

    def run(self) -> None:
        """Execute instructions in start order until every queue is done, or fault.

        This loop and the methods it calls per instruction compare with ``if`` rather than
        ``max()``: they run millions of times, and the call costs more than the comparison.
        """
        queues = self.queues
        max_outstanding = self.max_outstanding
        depth = self.depth
        self._dispatch()
        while True:
            # The queue whose head can leave earliest: when it is dispatched, its queue may
            # issue, each token it pops has been pushed, and (DMA) a request slot is free.
            best: _Queue | None = None
            best_t = 0
            for q in queues:
                if q.pushes and not self._flush(q):
                    continue
                if not q.pending:
                    continue
                entry = q.pending[0]
                t = entry[4] if entry[4] > q.issue_free else q.issue_free
                deps = entry[1].insn.deps
                if deps.pop_prev:
                    waiting = q.pop_prev.waiting  # type: ignore[union-attr]
                    if not waiting:
                        continue
                    if waiting[0][0] > t:
                        t = waiting[0][0]
                if deps.pop_next:
                    waiting = q.pop_next.waiting  # type: ignore[union-attr]
                    if not waiting:
                        continue
                    if waiting[0][0] > t:
                        t = waiting[0][0]
                if len(q.inflight) >= max_outstanding and q.inflight[0] > t:
                    t = q.inflight[0]
                if best is None or t < best_t:
                    best, best_t = q, t
            if best is None:
                break
            self._execute(best, best_t)
            # Fetch goes on unless the next instruction's queue is still full (the first
            # thing _dispatch checks, and what holds it most of the time: it runs ahead).
            upcoming = self.next
            if upcoming is not None and len(queues[upcoming[0].insn.queue].pending) < depth:
                self._dispatch()
        if self.next is not None or any(q.pushes or q.pending for q in queues):
            raise self._deadlock()
        self.products.flush()

    def _dispatch(self) -> None:
        """Fetch instructions in program order into their queues while there is room.

        Instruction j enters its queue fetch_cycles after j - 1, and not before the one
        ``instruction_depth`` places ahead of it in that queue has left.
        """
        depth = self.depth
        queues = self.queues
        stream = self.stream
        fields = self.fields
        fetched = self.fetched
        t = self.last_dispatch
        nxt = self.next
        while nxt is not None:
            node, iteration = nxt
            q = queues[node.insn.queue]
            pending = q.pending
            if len(pending) >= depth:
                break
            if fetched:
                t += self.fetch
            k = q.dispatched
            if k >= depth:
                ahead = q.recent_starts[k - depth - (q.started - len(q.recent_starts))]
                if ahead > t:
                    t = ahead
            pending.append((fetched, node,
                            fields[id(node)](iteration) if node.steps else node.base,
                            iteration, t))
            q.dispatched = k + 1
            fetched += 1
            nxt = next(stream, None)
        self.next = nxt
        self.fetched = fetched
        self.last_dispatch = t

    def _execute(self, q: _Queue, t: int) -> None:
        """Run q's head instruction, whose operands allow it to leave the queue at ``t``."""
        number, node, fields, iteration, dispatched = q.pending.popleft()
        q.started += 1
        insn = node.insn
        deps = insn.deps
        avail = q.issue_free if q.issue_free > dispatched else dispatched
        q.seq += 1
        clock = q.clock
        clock[q.kind] = q.seq
        if deps.pop_prev:
            _merge_clock(clock, q.pop_prev.waiting[0][1])  # type: ignore[union-attr]
        if deps.pop_next:
            _merge_clock(clock, q.pop_next.waiting[0][1])  # type: ignore[union-attr]
        try:
            start, done = self.handlers[type(insn)](insn, fields, number, t, q, avail)
        except (_Fault, MemoryFault) as err:
            unit = err.unit if isinstance(err, _Fault) else unit_name(insn)
            where = f"on loop iteration {iteration}: " if iteration else ""
            raise SimulatorFault(where + err.message, index=node.index, unit=unit) from None
        if deps.pop_prev:
            q.pop_prev.take(start)  # type: ignore[union-attr]
        if deps.pop_next:
            q.pop_next.take(start)  # type: ignore[union-attr]
        q.recent_starts.append(start)
        q.last = (number, node.index)
        if done > q.retired:
            q.retired = done
        if deps.push_prev:
            q.pushes.append((q.push_prev, q.retired, tuple(clock)))  # type: ignore[arg-type]
        if deps.push_next:
            q.pushes.append((q.push_next, q.retired, tuple(clock)))  # type: ignore[arg-type]
        if q.pushes:
            self._flush(q)

    def _flush(self, q: _Queue) -> bool:
        """Push q's pending tokens; False while one waits for room in a full token queue.

        A push into a full queue waits for the pop that frees its slot, and holds q: none of
        its later instructions leaves before that push.
        """
        depth = self.token_depth
        while q.pushes:
            tokens, when, clock = q.pushes[0]
            slot = tokens.pushed - depth
            if slot >= 0:
                if slot >= tokens.popped:
                    return False
                freed = tokens.pop_time(slot)
                if freed > when:
                    when = freed
                    q.issue_free = max(q.issue_free, when)
            tokens.waiting.append((when, clock))
            tokens.pushed += 1
            if when > q.retired:
                q.retired = when
            q.pushes.pop(0)
        return True

    def _account(self, unit: int, number: int, avail: int, begin: int, done: int) -> None:
        """Add one instruction's busy interval [begin, done) and its stall to ``unit``.

        Stall is the wait between the instruction being ready in its queue (``avail``) and
        its beginning, while the unit had nothing else in flight.
        """
        stats = self.units[unit]
        covered = stats.covered
        waited_from = avail if avail > covered else covered
        if begin > waited_from:
            stats.stall += begin - waited_from
        if done > covered:
            stats.busy += done - (begin if begin > covered else covered)
            stats.covered = done
        stats.count += 1
        self.records.add((unit, begin, done, number))

    # -- units ---------------------------------------------------------------------------

    def _dram_access(self, addr: int, rows: int, row_bytes: int, stride: int, verb: str,
                     unit: str) -> None:
        """Fault unless the strided DRAM region lies inside DRAM."""
        end = datapath.dram_extent(addr, rows, row_bytes, stride)
        if end > self.dram.size:
            raise _Fault(f"{verb} DRAM bytes {addr:#x}..{end - 1:#x}, past the end of "
                         f"DRAM ({self.dram.size:#x} bytes)", unit)

    def _transfer(self, number: int, t: int, q: _Queue, nbytes: int, unit: int,
                  avail: int) -> tuple[int, int]:
        """A DMA's timing: request at t, data on the shared port after the latency."""
        arrival = t + self.latency
        data = arrival if arrival > self.port_free else self.port_free
        done = data + math.ceil(nbytes / self.bandwidth)  # timing.dma_transfer_cycles
        port = self.units[DRAM_UNIT]
        port.busy += done - data
        port.count += 1
        self.dram_wait += data - arrival
        self.records.add((DRAM_UNIT, data, done, number))
        self.port_free = done
        q.issue_free = t + self.issue_cycles
        q.inflight.append(done)
        if len(q.inflight) > self.max_outstanding:
            q.inflight.popleft()
        self._account(unit, number, avail, t, done)
        return t, done

    def _load(self, insn: Load, fields: tuple[int, ...], number: int, t: int, q: _Queue,
              avail: int) -> tuple[int, int]:
        """LOAD: check, then DRAM -> whole on-chip rows (zero past cols)."""
        sram, dram = fields
        rows, cols = insn.rows, insn.cols
        memory = self.memories[insn.mem]
        if cols > memory.width:
            raise _Fault(f"load of {cols} columns into {memory.name}, whose rows hold "
                         f"{memory.width}", "load")
        memory.check_bounds(sram, rows, "writes")
        mem = insn.mem
        width = self.element_bytes[mem] if self.float_array else insn.element_bytes
        row_bytes = cols * width
        if dram + (rows - 1) * insn.stride + row_bytes > self.dram_size:  # dram_extent
            self._dram_access(dram, rows, row_bytes, insn.stride, "reads", "load")
        nbytes = rows * row_bytes
        traffic = self.traffic
        traffic[DRAM_READ] += nbytes
        # On-chip bytes written: a row is its width in elements, int32 (or float32) in acc
        # (widened or not), int8 (or bfloat16) in inp and wgt (which the simulator holds as
        # float32 for BLAS).
        counter, memory_row_bytes = self.load_targets[mem]
        traffic[counter] += rows * memory_row_bytes
        if mem is Mem.WGT:
            self._invalidate_weights(sram, sram + rows)
        if self.functional:
            self.products.before_write(memory.data, sram, sram + rows)
            memory.write(sram, sram + rows, q.kind, q.clock, number)
            source = datapath.dram_rows(self.dram, dram, rows, row_bytes, insn.stride)
            source = _dram_elements(source, width, self.float_array)
            # A widening load's int8 values sign-extend as numpy assigns them to int32 rows.
            target = memory.data[sram:sram + rows]
            if cols == memory.width:
                target[...] = source
            else:
                target[:, :cols] = source
                target[:, cols:] = 0
        return self._transfer(number, t, q, nbytes, LOAD_UNIT, avail)

    def _store(self, insn: Store, fields: tuple[int, ...], number: int, t: int, q: _Queue,
               avail: int) -> tuple[int, int]:
        """STORE: check, then acc rows -> DRAM, narrowed to int8 if asked."""
        sram, dram = fields
        rows = insn.rows
        acc = self.memories[Mem.ACC]
        if insn.cols > acc.width:
            raise _Fault(f"store of {insn.cols} columns from acc, whose rows hold "
                         f"{acc.width}", "store")
        acc.check_bounds(sram, rows, "reads")
        row_bytes = insn.cols * (1 if insn.narrow else 4)
        if rows > 1 and insn.stride < row_bytes:
            raise _Fault(f"store rows of {row_bytes} bytes overlap in DRAM: stride "
                         f"{insn.stride} < {row_bytes}", "store")
        if dram + (rows - 1) * insn.stride + row_bytes > self.dram_size:  # dram_extent
            self._dram_access(dram, rows, row_bytes, insn.stride, "writes", "store")
        nbytes = rows * row_bytes
        self.traffic[ACC_READ] += rows * insn.cols * 4
        self.traffic[DRAM_WRITE] += nbytes
        if self.functional:
            self.products.flush()
            acc.read(sram, sram + rows, q.kind, q.clock, number)
            values = acc.data[sram:sram + rows, :insn.cols]
            data = (datapath.narrow(values) if insn.narrow
                    else values.astype("<f4" if self.float_array else "<i4"))
            target = datapath.dram_rows(self.dram, dram, rows, row_bytes, insn.stride)
            target[...] = data.view(np.uint8)
        return self._transfer(number, t, q, nbytes, STORE_UNIT, avail)

    def _invalidate_weights(self, lo: int, hi: int) -> None:
        """Forget weights held in the array whose scratchpad rows [lo, hi) now overwrites."""
        for b, tag in enumerate(self.held):
            if tag is not None and tag[0] < hi and lo < tag[0] + tag[1]:
                self.held[b] = None

    def _gemm(self, insn: Gemm, fields: tuple[int, ...], number: int, t: int, q: _Queue,
              avail: int) -> tuple[int, int]:
        """GEMM: check, time it on the array, accumulate the tile product."""
        acc_row, inp_row, wgt_row = fields
        rows, k = insn.rows, insn.k
        costs = self.gemm_costs.get((rows, k))
        if costs is None:
            costs = self._gemm_costs(rows, k)
        stream, drain, wgt_bytes, inp_bytes, acc_bytes = costs
        inp, wgt, acc = self.inp, self.wgt, self.acc
        placement = (inp_row, rows, acc_row, wgt_row, k)
        if placement not in self.gemm_fits:
            inp.check_bounds(inp_row, rows, "reads")
            wgt.check_bounds(wgt_row, k, "reads")
            acc.check_bounds(acc_row, rows, "writes")
            if len(self.gemm_fits) < _MAX_FITS:
                self.gemm_fits.add(placement)
        lo, hi = acc_row, acc_row + rows
        ready = t
        if self.vector_used:
            ready = max(t, int(self.vec_done[lo:hi].max()))
        if self.weight_stationary:
            begin, stream_start = self._weights(wgt_row, k, ready)
            stream_end = stream_start + stream
            active = self.active
            released = stream_end + self.release_cycles
            if released > self.buffer_free[active]:
                self.buffer_free[active] = released
        else:
            begin = stream_start = ready if ready > self.stream_free else self.stream_free
            self.traffic[WGT_READ] += wgt_bytes
            stream_end = stream_start + stream
        done = stream_end + drain
        self.stream_free = stream_end
        if self.vector_used:
            self.acc_done[lo:hi] = done
        q.issue_free = begin
        self.useful_macs += rows * k * self.array_cols
        traffic = self.traffic
        traffic[INP_READ] += inp_bytes
        traffic[ACC_WRITE] += acc_bytes
        if not insn.reset:
            traffic[ACC_READ] += acc_bytes
        if self.functional:
            clock, kind = q.clock, q.kind
            inp.read(inp_row, inp_row + rows, kind, clock, number)
            wgt.read(wgt_row, wgt_row + k, kind, clock, number)
            if insn.reset:
                acc.write(lo, hi, kind, clock, number)
            else:
                acc.modify(lo, hi, kind, clock, number)
            self.products.add(lo, inp_row, wgt_row, rows, k, insn.reset)
        self._account(GEMM_UNIT, number, avail, begin, done)
        return begin, done

    def _gemm_costs(self, rows: int, k: int) -> tuple[int, int, int, int, int]:
        """A GEMM shape's stream and drain cycles, and the bytes it reads of the weights
        (output-stationary: every GEMM; weight-stationary counts them at preload), of the
        inputs and of (and writes to) the accumulator; faults unless k fits the array."""
        config = self.config
        array = config.array
        if k > array.rows:
            raise _Fault(f"gemm with k = {k} requires k <= the array's {array.rows} rows",
                         "gemm")
        drain = (self.drain_cycles if self.weight_stationary
                 else timing.drain_cycles(k, config))
        costs = (timing.stream_cycles(rows, k, config), drain,
                 k * array.cols * self.element_bytes[Mem.WGT],
                 rows * k * self.element_bytes[Mem.INP], rows * array.cols * 4)
        self.gemm_costs[(rows, k)] = costs
        return costs

    def _weights(self, wgt_row: int, k: int, ready: int) -> tuple[int, int]:
        """Weight-stationary: (begin, stream start), preloading the weights unless held.

        A weight tile already in a buffer (same rows, not rewritten since) is reused. Else it
        preloads into the idle buffer (or the only one) once that buffer's last user has
        passed, taking R cycles; streaming starts when both preload and input port are free.
        """
        tag = (wgt_row, k)
        held = self.held
        if tag == held[0] or tag == held[1]:
            self.active = 0 if tag == held[0] else 1
            start = ready if ready > self.stream_free else self.stream_free
            return start, start
        self.traffic[WGT_READ] += k * self.wgt_row_bytes
        buffer = 1 - self.active if self.double_weights else 0
        preload = ready if ready > self.preload_free else self.preload_free
        if self.buffer_free[buffer] > preload:
            preload = self.buffer_free[buffer]
        self.preload_free = preload + self.preload_cycles  # timing.preload_cycles
        held[buffer] = tag
        self.active = buffer
        start = self.preload_free
        return preload, start if start > self.stream_free else self.stream_free

    def _vec(self, insn: Vec, fields: tuple[int, ...], number: int, t: int, q: _Queue,
             avail: int) -> tuple[int, int]:
        """VEC: check, time it on the vector unit, apply it to the acc rows."""
        dst, src = fields
        acc = self.memories[Mem.ACC]
        acc.check_bounds(dst, insn.rows, "writes")
        lo, hi = dst, dst + insn.rows
        src_rows = {Operand.TILE: insn.rows, Operand.ROW: 1, Operand.IMM: 0}[insn.mode]
        start = max(t, self.vec_free, int(self.acc_done[lo:hi].max()))
        if src_rows:
            acc.check_bounds(src, src_rows, "reads")
            start = max(start, int(self.acc_done[src:src + src_rows].max()))
        self.vec_free = start + timing.vector_issue_cycles(insn.rows, self.config)
        done = self.vec_free + self.config.vector.latency
        self.acc_done[lo:hi] = done
        self.vec_done[lo:hi] = done
        q.issue_free = start
        row_bytes = acc.width * 4
        reads_dst = insn.op is not VecOp.FILL  # fill writes its rows without reading them
        self.traffic[ACC_READ] += (insn.rows * reads_dst + src_rows) * row_bytes
        self.traffic[ACC_WRITE] += insn.rows * row_bytes
        if self.functional:
            self.products.flush()
            if src_rows:
                acc.read(src, src + src_rows, q.kind, q.clock, number)
            if reads_dst:
                acc.read(lo, hi, q.kind, q.clock, number)
            acc.write(lo, hi, q.kind, q.clock, number)
            other = datapath.second_operand(insn.mode, acc.data, src, insn.rows, insn.imm)
            datapath.vector(insn.op, acc.data[lo:hi], other, insn.imm2)
        self._account(VECTOR_UNIT, number, avail, start, done)
        return start, done

    def _requant(self, insn: Requant, fields: tuple[int, ...], number: int, t: int, q: _Queue,
                 avail: int) -> tuple[int, int]:
        """VEC.REQUANT: check the machine has the stage, time it on the vector unit, apply it
        to the acc rows (with the scale row, when per channel)."""
        stage = self.config.requant
        if stage is None:
            raise _Fault(f"vec.requant requires a machine with a requantisation stage "
                         f"(machine.requant), and {self.config.name} has none", "vector")
        dst, src = fields
        acc = self.memories[Mem.ACC]
        acc.check_bounds(dst, insn.rows, "writes")
        lo, hi = dst, dst + insn.rows
        start = max(t, self.vec_free, int(self.acc_done[lo:hi].max()))
        if insn.per_channel:
            acc.check_bounds(src, 1, "reads")
            start = max(start, int(self.acc_done[src]))
        self.vec_free = start + timing.requant_issue_cycles(insn.rows, self.config, stage)
        done = self.vec_free + stage.latency
        self.acc_done[lo:hi] = done
        self.vec_done[lo:hi] = done
        q.issue_free = start
        row_bytes = acc.width * 4
        self.traffic[ACC_READ] += (insn.rows + insn.per_channel) * row_bytes
        self.traffic[ACC_WRITE] += insn.rows * row_bytes
        if self.functional:
            self.products.flush()
            if insn.per_channel:
                acc.read(src, src + 1, q.kind, q.clock, number)
            acc.read(lo, hi, q.kind, q.clock, number)
            acc.write(lo, hi, q.kind, q.clock, number)
            scale = (acc.data[src].view(np.float32) if insn.per_channel
                     else datapath.bits_float(insn.scale))
            acc.data[lo:hi] = datapath.requantise_float(acc.data[lo:hi], scale, insn.zp,
                                                        insn.lo, insn.hi)
        self._account(VECTOR_UNIT, number, avail, start, done)
        return start, done

    def _qadd(self, insn: QAdd, fields: tuple[int, ...], number: int, t: int, q: _Queue,
              avail: int) -> tuple[int, int]:
        """VEC.QADD: check the machine has the float32 stage, time it there like a
        requantisation, add the tile at src to the rows at dst by the three parameter rows."""
        stage = self.config.requant
        if stage is None:
            raise _Fault(f"vec.qadd requires a machine with a requantisation stage "
                         f"(machine.requant), and {self.config.name} has none", "vector")
        dst, src, par = fields
        rows = insn.rows
        acc = self.memories[Mem.ACC]
        acc.check_bounds(dst, rows, "writes")
        acc.check_bounds(src, rows, "reads")
        acc.check_bounds(par, 3, "reads")
        done_rows = self.acc_done
        start = max(t, self.vec_free, int(done_rows[dst:dst + rows].max()),
                    int(done_rows[src:src + rows].max()), int(done_rows[par:par + 3].max()))
        self.vec_free = start + timing.requant_issue_cycles(rows, self.config, stage)
        done = self.vec_free + stage.latency
        done_rows[dst:dst + rows] = done
        self.vec_done[dst:dst + rows] = done
        q.issue_free = start
        row_bytes = acc.width * 4
        self.traffic[ACC_READ] += (2 * rows + 3) * row_bytes
        self.traffic[ACC_WRITE] += rows * row_bytes
        if self.functional:
            self.products.flush()
            acc.read(src, src + rows, q.kind, q.clock, number)
            acc.read(par, par + 3, q.kind, q.clock, number)
            acc.read(dst, dst + rows, q.kind, q.clock, number)
            acc.write(dst, dst + rows, q.kind, q.clock, number)
            ratio_a, ratio_b, offset = acc.data[par:par + 3].view(np.float32)
            acc.data[dst:dst + rows] = datapath.quantised_add(
                acc.data[dst:dst + rows], acc.data[src:src + rows], ratio_a, ratio_b, offset,
                insn.lo, insn.hi)
        self._account(VECTOR_UNIT, number, avail, start, done)
        return start, done

    def _sync(self, insn: Nop | Finish, fields: tuple[int, ...], number: int, t: int,
              q: _Queue, avail: int) -> tuple[int, int]:
        """NOP and FINISH: only their tokens; they take no time."""
        q.issue_free = t
        return t, t

    # -- reporting -----------------------------------------------------------------------

    def _upcoming(self, q: _Queue) -> Placed | None:
        """The next instruction of q that has not been dispatched yet (None: q has no more)."""
        rest = walk(self.nodes)
        for _ in range(self.fetched):
            next(rest)
        return next((node for node, _ in rest if node.insn.queue == q.kind), None)

    def _deadlock(self) -> SimulatorFault:
        """Describe why no queue can move, blaming the earliest instruction waiting on a pop."""
        states = []
        starved: list[tuple[int, int]] = []  # (number, program index) of each starved head
        stuck: list[tuple[int, int]] = []  # the same for each queue that cannot move
        for q in self.queues:
            upcoming = None if q.pending or q.pushes else self._upcoming(q)
            if q.pushes:
                tokens = q.pushes[0][0]
                states.append(f"{q.name} waits for room to push into {tokens.name} "
                              f"(full: token_depth {self.config.queues.token_depth})")
                stuck.append(q.last)
            elif q.pending:
                number, node = q.pending[0][:2]
                stuck.append((number, node.index))
                deps = node.insn.deps
                for wanted, tokens in ((deps.pop_prev, q.pop_prev),
                                       (deps.pop_next, q.pop_next)):
                    if wanted and not tokens.waiting:  # type: ignore[union-attr]
                        states.append(f"{q.name} (instruction {node.index}) waits to pop "
                                      f"from {tokens.name} ({tokens.pushed} pushed, "
                                      f"{tokens.popped} popped)")
                        starved.append((number, node.index))
                        break
            elif upcoming is None:
                states.append(f"{q.name} has finished")
            else:
                blocker = self.next[0].index  # type: ignore[index]
                states.append(f"{q.name} waits for instruction {upcoming.index} to be "
                              f"dispatched (instruction {blocker}'s queue is full)")
                stuck.append((self.fetched, upcoming.index))
        # Blame the earliest starved pop, else the earliest instruction that is stuck.
        index = min(starved or stuck)[1]
        return SimulatorFault("deadlock: no queue can proceed; " + "; ".join(states),
                              index=index, unit=unit_name(self.program[index]))

    def _executed(self) -> dict[str, int]:
        """How many instructions of each kind ran (every iteration of a loop counts), in the
        order the program first names the kinds."""
        kinds: Counter[str] = Counter()
        for node in placed(self.nodes):
            kinds[type(node.insn).__name__.lower()] += math.prod(node.counts)
        return dict(kinds)

    def result(self) -> SimResult:
        """The run's report."""
        cycles = max([q.retired for q in self.queues] + [self.port_free])
        units = {}
        for name, stats in zip(UNITS, self.units, strict=True):
            units[name] = UnitStats(name, stats.busy, stats.stall,
                                    cycles - stats.busy - stats.stall, stats.count)
        return SimResult(
            config=self.config, program=self.program, cycles=cycles, units=units,
            useful_macs=self.useful_macs, bytes=dict(zip(TRAFFIC, self.traffic)),
            instructions=self._executed(), dram_wait=self.dram_wait, dram=self.dram,
            functional=self.functional, records=self.records)
