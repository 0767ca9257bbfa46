"""The event-driven engine: three instruction queues, four token queues, one DRAM port.

Time advances from instruction to instruction, never cycle by cycle. Each step takes the
queue whose head instruction can leave it earliest (dispatched, its tokens pushed, its unit
free), computes when the instruction begins and finishes from the availability times of the
resources it needs, applies its effect to the memories, and records its tokens. Steps happen
in non-decreasing start order, so the shared DRAM port serves requests first come, first
served. docs/simulator.md derives every formula used here.

Loop words are expanded as instructions are fetched (:mod:`simulator.loops`): each iteration's
instructions enter their queues exactly as the straight-line program spelling them out would,
and each is checked, timed and recorded on its own, but where an innermost loop's timing
settles into a period that repeats: the periods left are then skipped, their figures and
records worked out from the last one and their values still computed (simulator.steady).
The state kept per instruction lasts only while it is in a queue, so a run's memory does
not grow with its length (but for the trace records).
"""

from __future__ import annotations

import math
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from ir.errors import SimulatorFault
from simulator import datapath, steady, timing
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
from simulator.loops import LoopNode, Node, Placed, placed, structure, walk
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
# How many views of DRAM as rows of one stride from one offset the engine keeps (a tiled
# program's loads use a few); 0: loads take DRAM through datapath.dram_rows.
_MAX_VIEWS = 4096
# Whether a queue's ready time is kept until something it depends on changes (else it is
# worked out on every step, as before the cache).
_KEEP_READY = True
# How many GEMMs of a group (simulator.products) are computed in one stacked product.
_GROUP = 8
# Whether an innermost loop whose timing settles into a repeating period skips the whole
# periods left before its last iteration (simulator.steady); their values are computed all
# the same.
_FAST_FORWARD = True

# One instruction on its way through a queue: (its number among executed instructions, its
# word, its address fields, its loop iteration, its dispatch time).
_Entry = tuple[int, "_Word", tuple[int, ...], tuple[int, ...], int]


class _Word:
    """One instruction word of the program with what the engine asks of it on every
    execution, worked out once (a loop body's words execute up to millions of times):
    its queue, its handler, its four dependency flags, how its address fields are found
    (``fields`` of the iteration where a step advances them, else ``base``), its
    handler's ``plan``, and the loop it is the first instruction of (``head``)."""

    __slots__ = ("base", "fields", "handler", "head", "insn", "node", "plan", "pop_next",
                 "pop_prev", "push_next", "push_prev", "queue")

    def __init__(self, node: Placed, queue: _Queue,
                 handler: Callable[..., tuple[int, int, int]]) -> None:
        self.node = node
        self.insn = node.insn
        self.queue = queue
        self.handler = handler
        deps = node.insn.deps
        self.pop_prev, self.pop_next = deps.pop_prev, deps.pop_next
        self.push_prev, self.push_next = deps.push_prev, deps.push_next
        self.base = node.base
        self.fields = node.fields_function() if node.steps else None
        # What its handler works out of the word alone, on its first execution (which
        # raises any fault the word itself causes, as every execution would).
        self.plan: tuple[Any, ...] | None = None
        # The loop this word begins, where it may be fast-forwarded (simulator.steady).
        self.head: steady.LoopShape | None = None


def _mark_heads(nodes: Sequence[Node], words: dict[int, _Word], depth: int) -> None:
    """Give the first word of each innermost loop that may be fast-forwarded its
    :class:`~simulator.steady.LoopShape` (``depth``: the loops around ``nodes``)."""
    for node in nodes:
        if type(node) is not LoopNode:
            continue
        if any(type(inner) is not Placed for inner in node.body):
            _mark_heads(node.body, words, depth + 1)
            continue
        shape = steady.loop_shape(node, words, depth)
        if shape is not None:
            shape.body[0].head = shape


def _stream(nodes: Sequence[Node], words: dict[int, _Word], iteration: tuple[int, ...] = ()
            ) -> Iterator[tuple[_Word, tuple[int, ...]]]:
    """:func:`simulator.loops.walk` as the engine's words: each executed instruction's word
    with its iteration, in fetch order. The body of an innermost loop is listed once and
    repeated, rather than walked again on every iteration."""
    for node in nodes:
        if type(node) is Placed:
            yield words[id(node)], iteration
            continue
        body = node.body  # type: ignore[union-attr]
        if any(type(inner) is not Placed for inner in body):
            for i in range(node.count):  # type: ignore[union-attr]
                yield from _stream(body, words, iteration + (i,))
            continue
        leaves = [words[id(inner)] for inner in body]
        for i in range(node.count):  # type: ignore[union-attr]
            inner_iteration = iteration + (i,)
            for word in leaves:
                yield word, inner_iteration


class _Tokens:
    """One token queue: the tokens pushed and not yet popped (push time, pusher's vector
    clock), how many were pushed and popped, and the times of the last pops (a push into a
    full queue waits for the pop that frees its slot)."""

    __slots__ = ("consumer", "name", "popped", "pushed", "recent_pops", "waiting")

    def __init__(self, name: str, depth: int, consumer: _Queue) -> None:
        self.name = name
        self.consumer = consumer  # the queue that pops these tokens
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


def _ready(q: _Queue, max_outstanding: int) -> int:
    """When q's head can leave it: when it was dispatched, its queue may issue, each token
    it pops has been pushed, and (DMA) one of ``max_outstanding`` request slots is free; -1
    while it cannot (no head, or a token not yet pushed)."""
    if not q.pending:
        return -1
    entry = q.pending[0]
    ready = entry[4] if entry[4] > q.issue_free else q.issue_free
    word = entry[1]
    if word.pop_prev:
        waiting = q.pop_prev.waiting  # type: ignore[union-attr]
        if not waiting:
            return -1
        if waiting[0][0] > ready:
            ready = waiting[0][0]
    if word.pop_next:
        waiting = q.pop_next.waiting  # type: ignore[union-attr]
        if not waiting:
            return -1
        if waiting[0][0] > ready:
            ready = waiting[0][0]
    inflight = q.inflight
    if len(inflight) >= max_outstanding and inflight[0] > ready:
        ready = inflight[0]
    return ready


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
    requests; ``pushes``: pushes waiting for room in a full token queue; ``ready``: when its
    head can leave it (-1: it cannot, or there is none), worked out again only where
    ``stale`` says that may have changed (its head, its issue time, its DMA requests, or
    the token its head waits for).
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
        "ready",
        "recent_starts",
        "retired",
        "seq",
        "stale",
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
        self.ready = -1
        self.stale = False


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


# Checked programs and their trees, by identity: a network's layers of one shape simulate
# one program each, and a program's words are checked and parsed in time proportional to
# them (its whole length where its loops did not fold).
_STRUCTURES: OrderedDict[int, tuple[tuple[Instruction, ...], tuple]] = OrderedDict()
_STRUCTURES_SIZE = 64
_STRUCTURES_LOCK = threading.Lock()  # a sweep's worker may simulate on several threads


def _structure(program: tuple[Instruction, ...]) -> tuple:
    """:func:`_check_program`, then the program's :func:`~simulator.loops.structure`, once
    per program object (kept with it, so its identity stays its own)."""
    with _STRUCTURES_LOCK:
        cached = _STRUCTURES.get(id(program))
        if cached is not None and cached[0] is program:
            _STRUCTURES.move_to_end(id(program))
            return cached[1]
    _check_program(program)
    nodes = structure(program)
    if isinstance(program, tuple):
        with _STRUCTURES_LOCK:
            _STRUCTURES[id(program)] = (program, nodes)
            if len(_STRUCTURES) > _STRUCTURES_SIZE:
                _STRUCTURES.popitem(last=False)
    return nodes


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
        self.program = program
        self.nodes = _structure(program)
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
        self.fetched = 0  # instructions dispatched so far (kept by run, for _deadlock)
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
        dram = config.dram
        self.latency = dram.latency
        self.bandwidth = dram.bytes_per_cycle
        self.issue_cycles = config.dma.issue_cycles
        self.weight_stationary = array.dataflow == "weight_stationary"
        self.double_weights = array.double_buffered_weights
        self.preload_cycles = timing.preload_cycles(config)
        self.dram_size = self.dram.size
        # The weight-stationary GEMM's constant costs (timing.weight_release_cycles and
        # drain_cycles, which depend only on the array there).
        self.release_cycles = timing.weight_release_cycles(config)
        self.drain_cycles = timing.drain_cycles(array.rows, config)
        self.int8_rows: dict[tuple[int, int, int], np.ndarray] = {}  # see _int8_rows
        # GEMM operand placements whose bounds have been checked: a program repeats a few.
        self.gemm_fits: set[tuple[int, ...]] = set()
        self.inp, self.wgt, self.acc = (self.memories[m] for m in (Mem.INP, Mem.WGT, Mem.ACC))
        self.wgt_row_bytes = array.cols * self.element_bytes[Mem.WGT]
        # Per memory a load fills: the traffic counter of its writes, and the bytes of a row.
        self.load_targets = {mem: (_WRITTEN_BY_LOAD[mem], memory.width * self.element_bytes[mem])
                             for mem, memory in self.memories.items()}
        # A float array's products are computed one GEMM at a time (gemm_float walks k).
        self.products = Products(
            datapath.gemm_float if self.float_array else datapath.TileProduct(),
            self.acc.data, self.inp.data, self.wgt.data, 1 if self.float_array else _GROUP)
        # Each handler: (word, address fields, its number, ready time, queue)
        # -> (begin, done, the unit whose busy time it is; -1: none).
        self.handlers: dict[type, Callable[..., tuple[int, int, int]]] = {
            Load: self._load, Store: self._store, Gemm: self._gemm, Vec: self._vec,
            Requant: self._requant, QAdd: self._qadd, Nop: self._sync, Finish: self._sync,
        }
        words = {id(node): _Word(node, self.queues[node.insn.queue],
                                 self.handlers[type(node.insn)])
                 for node in placed(self.nodes)}
        self.stream: Iterator[tuple[_Word, tuple[int, ...]]] = _stream(self.nodes, words)
        self.next: tuple[_Word, tuple[int, ...]] | None = next(self.stream, None)
        self.fast_forward = steady.FastForward(self, self.stream)
        if _FAST_FORWARD:
            _mark_heads(self.nodes, words, 0)

    def load_values(self, word: _Word, fields: tuple[int, ...]) -> None:
        """A checked LOAD's values: DRAM rows into on-chip rows."""
        sram, dram = fields
        memory, rows, _, row_bytes = word.plan[:4]  # type: ignore[index]
        self.products.before_write(memory.data, sram, sram + rows)
        self._copy_in(word.insn, memory, sram, dram, row_bytes)  # type: ignore[arg-type]

    def gemm_values(self, word: _Word, fields: tuple[int, ...]) -> None:
        """A checked GEMM's values: the tile product into (or onto) the accumulator rows."""
        rows, k, reset = word.plan[:3]  # type: ignore[index]
        acc_row, inp_row, wgt_row = fields
        self.products.add(acc_row, inp_row, wgt_row, rows, k, reset)

    def store_values(self, word: _Word, fields: tuple[int, ...]) -> None:
        """A checked STORE's values: accumulator rows into DRAM, narrowed to int8 if
        asked."""
        insn: Store = word.insn  # type: ignore[assignment]
        sram, dram = fields
        rows = insn.rows
        self.products.flush()
        values = self.acc.data[sram:sram + rows, :insn.cols]
        data = (datapath.narrow(values) if insn.narrow
                else values.astype("<f4" if self.float_array else "<i4"))
        row_bytes = insn.cols * (1 if insn.narrow else 4)
        target = datapath.dram_rows(self.dram, dram, rows, row_bytes, insn.stride)
        target[...] = data.view(np.uint8)

    def _connect_tokens(self) -> None:
        """Create the four token queues and wire each instruction queue's flags to them."""
        load, compute, store = self.queues
        depth = self.config.queues.token_depth
        for src, dst in ((load, compute), (compute, load), (compute, store), (store, compute)):
            tokens = _Tokens(f"{src.name}->{dst.name}", depth, dst)
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

        Each step fetches what it can, takes the head of the queue that can leave it
        earliest, merges the clocks of the tokens it pops, runs its handler, adds the
        unit's busy and stall time, takes its tokens and pushes its own. The step is
        written out here, not called: it runs millions of times, where a call and the
        look-ups it repeats cost more than the work. For the same reason it compares with
        ``if``, not ``max()``.
        """
        queues = self.queues
        max_outstanding = self.max_outstanding
        depth = self.depth
        units = self.units
        record = self.records.add
        stream = self.stream
        fetch_cycles = self.fetch
        upcoming = self.next
        fetched = 0
        dispatched_at = 0
        keep_ready = _KEEP_READY
        fast_forward = self.fast_forward
        while True:
            # Fetch: instructions enter their queues in program order while there is room,
            # instruction j fetch_cycles after j - 1, and not before the one
            # instruction_depth places ahead of it in its queue has left.
            while upcoming is not None:
                word, iteration = upcoming
                q = word.queue
                pending = q.pending
                if len(pending) >= depth:
                    break
                if word.head is not None:
                    jump = fast_forward.at_head(word.head, iteration, fetched, dispatched_at)
                    if jump is not None:
                        fetched, dispatched_at, upcoming = jump
                        continue
                if not pending:
                    q.stale = True  # a new head
                if fetched:
                    dispatched_at += fetch_cycles
                k = q.dispatched
                if k >= depth:
                    ahead = q.recent_starts[k - depth - (q.started - len(q.recent_starts))]
                    if ahead > dispatched_at:
                        dispatched_at = ahead
                pending.append((fetched, word,
                                word.base if word.fields is None else word.fields(iteration),
                                iteration, dispatched_at))
                q.dispatched = k + 1
                fetched += 1
                upcoming = next(stream, None)
            # The queue whose head can leave earliest: when it is dispatched, its queue may
            # issue, each token it pops has been pushed, and (DMA) a request slot is free.
            best: _Queue | None = None
            t = 0
            for q in queues:
                if q.pushes and not self._flush(q):
                    continue
                if q.stale or not keep_ready:
                    q.stale = False
                    q.ready = ready = _ready(q, max_outstanding)
                else:
                    ready = q.ready
                if ready >= 0 and (best is None or ready < t):
                    best, t = q, ready
            if best is None:
                break
            q = best
            number, word, fields, iteration, dispatched = q.pending.popleft()
            q.started += 1
            q.stale = True
            avail = q.issue_free if q.issue_free > dispatched else dispatched
            q.seq += 1
            clock = q.clock
            clock[q.kind] = q.seq
            if word.pop_prev:
                _merge_clock(clock, q.pop_prev.waiting[0][1])  # type: ignore[union-attr]
            if word.pop_next:
                _merge_clock(clock, q.pop_next.waiting[0][1])  # type: ignore[union-attr]
            try:
                start, done, unit = word.handler(word, fields, number, t, q)
            except (_Fault, MemoryFault) as err:
                raise self._fault(err, word, iteration) from None
            if unit >= 0:
                # The unit's busy interval [start, done), and its stall: the wait between
                # the instruction being ready in its queue (avail) and its start, while the
                # unit had nothing else in flight.
                stats = units[unit]
                covered = stats.covered
                waited_from = avail if avail > covered else covered
                if start > waited_from:
                    stats.stall += start - waited_from
                if done > covered:
                    stats.busy += done - (start if start > covered else covered)
                    stats.covered = done
                stats.count += 1
                record((unit, start, done, number))
            if word.pop_prev:
                q.pop_prev.take(start)  # type: ignore[union-attr]
            if word.pop_next:
                q.pop_next.take(start)  # type: ignore[union-attr]
            q.recent_starts.append(start)
            q.last = (number, word.node.index)
            if done > q.retired:
                q.retired = done
            if word.push_prev:
                q.pushes.append((q.push_prev, q.retired, tuple(clock)))  # type: ignore[arg-type]
            if word.push_next:
                q.pushes.append((q.push_next, q.retired, tuple(clock)))  # type: ignore[arg-type]
            if q.pushes:
                self._flush(q)
        self.next, self.fetched = upcoming, fetched
        if upcoming is not None or any(q.pushes or q.pending for q in queues):
            raise self._deadlock()
        self.products.flush()

    @staticmethod
    def _fault(err: _Fault | MemoryFault, word: _Word, iteration: tuple[int, ...]
               ) -> SimulatorFault:
        """The running instruction's fault, naming its word, unit and loop iteration."""
        unit = err.unit if isinstance(err, _Fault) else unit_name(word.insn)
        where = f"on loop iteration {iteration}: " if iteration else ""
        return SimulatorFault(where + err.message, index=word.node.index, unit=unit)

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
                    q.stale = True
            if not tokens.waiting:
                tokens.consumer.stale = True  # its head may now pop
            tokens.waiting.append((when, clock))
            tokens.pushed += 1
            if when > q.retired:
                q.retired = when
            q.pushes.pop(0)
        return True

    # -- units ---------------------------------------------------------------------------

    def _dram_access(self, addr: int, rows: int, row_bytes: int, stride: int, verb: str,
                     unit: str) -> None:
        """Fault unless the strided DRAM region lies inside DRAM."""
        end = datapath.dram_extent(addr, rows, row_bytes, stride)
        if end > self.dram.size:
            raise _Fault(f"{verb} DRAM bytes {addr:#x}..{end - 1:#x}, past the end of "
                         f"DRAM ({self.dram.size:#x} bytes)", unit)

    def _transfer(self, number: int, t: int, q: _Queue, cycles: int, unit: int
                  ) -> tuple[int, int, int]:
        """A DMA's timing: request at t, data on the shared port after the latency, for
        ``cycles`` (timing.dma_transfer_cycles of its bytes)."""
        arrival = t + self.latency
        data = arrival if arrival > self.port_free else self.port_free
        done = data + cycles
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
        return t, done, unit

    def _load(self, word: _Word, fields: tuple[int, ...], number: int, t: int, q: _Queue
              ) -> tuple[int, int, int]:
        """LOAD: check, then DRAM -> whole on-chip rows (zero past cols)."""
        sram, dram = fields
        plan = word.plan or self._load_plan(word)
        memory, rows, stride, row_bytes, nbytes, cycles, counter, written, into_wgt = plan
        hi = sram + rows
        bank_rows = memory.bank_rows
        if hi > memory.rows or (hi - 1) // bank_rows != sram // bank_rows:
            memory.check_bounds(sram, rows, "writes")
        if dram + (rows - 1) * stride + row_bytes > self.dram_size:  # dram_extent
            self._dram_access(dram, rows, row_bytes, stride, "reads", "load")
        traffic = self.traffic
        traffic[DRAM_READ] += nbytes
        traffic[counter] += written
        if into_wgt:
            self._invalidate_weights(sram, hi)
        if self.functional:
            memory.write(sram, hi, q.kind, q.clock, number)
            self.load_values(word, fields)
        return self._transfer(number, t, q, cycles, LOAD_UNIT)

    def _load_plan(self, word: _Word) -> tuple[Any, ...]:
        """A LOAD word's plan: its memory, rows, stride, row and transfer bytes, the
        transfer's cycles on the DRAM port, the traffic counter of its on-chip writes and
        their bytes, and whether it fills the weights; faults unless its columns fit the
        memory's rows."""
        insn: Load = word.insn  # type: ignore[assignment]
        memory = self.memories[insn.mem]
        if insn.cols > memory.width:
            raise _Fault(f"load of {insn.cols} columns into {memory.name}, whose rows hold "
                         f"{memory.width}", "load")
        width = self.element_bytes[insn.mem] if self.float_array else insn.element_bytes
        row_bytes = insn.cols * width
        # On-chip bytes written: a row is its width in elements, int32 (or float32) in acc
        # (widened or not), int8 (or bfloat16) in inp and wgt (which the simulator holds as
        # float32 for BLAS).
        counter, memory_row_bytes = self.load_targets[insn.mem]
        nbytes = insn.rows * row_bytes
        word.plan = (memory, insn.rows, insn.stride, row_bytes, nbytes,
                     math.ceil(nbytes / self.bandwidth),  # timing.dma_transfer_cycles
                     counter, insn.rows * memory_row_bytes, insn.mem is Mem.WGT)
        return word.plan

    def _copy_in(self, insn: Load, memory: OnChipMemory, sram: int, dram: int,
                 row_bytes: int) -> None:
        """A LOAD's values: DRAM rows from byte ``dram`` into ``memory``'s rows from
        ``sram``, zero past its columns."""
        rows, cols = insn.rows, insn.cols
        target = memory.data[sram:sram + rows]
        if (not self.float_array and insn.element_bytes == 1 and cols == memory.width
                and insn.stride >= row_bytes and _MAX_VIEWS):
            # The common int8 tile: its DRAM rows as a slice of int8 rows ``stride`` apart.
            source = self._int8_rows(dram, rows, insn.stride, cols)
            if source is not None:
                target[...] = source
                return
        width = self.element_bytes[insn.mem] if self.float_array else insn.element_bytes
        source = datapath.dram_rows(self.dram, dram, rows, row_bytes, insn.stride)
        source = _dram_elements(source, width, self.float_array)
        # A widening load's int8 values sign-extend as numpy assigns them to int32 rows.
        if cols == memory.width:
            target[...] = source
        else:
            target[:, :cols] = source
            target[:, cols:] = 0

    def _int8_rows(self, dram: int, rows: int, stride: int, cols: int) -> np.ndarray | None:
        """``rows`` rows of ``cols`` int8 values, ``stride`` bytes apart from DRAM byte
        ``dram``: rows [dram // stride, + rows) of the view of DRAM as such rows from byte
        dram % stride (views kept per stride, offset and columns: a tiled program reads a
        few); None where the rows run past DRAM's end."""
        start = dram % stride
        key = (stride, start, cols)
        view = self.int8_rows.get(key)
        if view is None:
            if len(self.int8_rows) >= _MAX_VIEWS:
                self.int8_rows.clear()
            usable = (self.dram_size - start) // stride * stride
            view = self.dram.view(np.int8)[start:start + usable].reshape(-1, stride)[:, :cols]
            self.int8_rows[key] = view
        first = dram // stride
        if first + rows > view.shape[0]:
            return None
        return view[first:first + rows]

    def _store(self, word: _Word, fields: tuple[int, ...], number: int, t: int, q: _Queue
               ) -> tuple[int, int, int]:
        """STORE: check, then acc rows -> DRAM, narrowed to int8 if asked."""
        insn: Store = word.insn  # type: ignore[assignment]
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
            acc.read(sram, sram + rows, q.kind, q.clock, number)
            self.store_values(word, fields)
        return self._transfer(number, t, q, math.ceil(nbytes / self.bandwidth), STORE_UNIT)

    def _invalidate_weights(self, lo: int, hi: int) -> None:
        """Forget weights held in the array whose scratchpad rows [lo, hi) now overwrites."""
        for b, tag in enumerate(self.held):
            if tag is not None and tag[0] < hi and lo < tag[0] + tag[1]:
                self.held[b] = None

    def _gemm(self, word: _Word, fields: tuple[int, ...], number: int, t: int, q: _Queue
              ) -> tuple[int, int, int]:
        """GEMM: check, time it on the array, accumulate the tile product."""
        acc_row, inp_row, wgt_row = fields
        plan = word.plan or self._gemm_plan(word)
        rows, k, reset, stream, drain, wgt_bytes, inp_bytes, acc_bytes, macs = plan
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
        self.useful_macs += macs
        traffic = self.traffic
        traffic[INP_READ] += inp_bytes
        traffic[ACC_WRITE] += acc_bytes
        if not reset:
            traffic[ACC_READ] += acc_bytes
        if self.functional:
            clock, kind = q.clock, q.kind
            inp.read(inp_row, inp_row + rows, kind, clock, number)
            wgt.read(wgt_row, wgt_row + k, kind, clock, number)
            if reset:
                acc.write(lo, hi, kind, clock, number)
            else:
                acc.modify(lo, hi, kind, clock, number)
            self.products.add(lo, inp_row, wgt_row, rows, k, reset)
        return begin, done, GEMM_UNIT

    def _gemm_plan(self, word: _Word) -> tuple[Any, ...]:
        """A GEMM word's plan: its rows, k and reset, its stream and drain cycles, the
        bytes it reads of the weights (output-stationary: every GEMM; weight-stationary
        counts them at preload), of the inputs and of (and writes to) the accumulator, and
        its MACs; faults unless k fits the array."""
        insn: Gemm = word.insn  # type: ignore[assignment]
        rows, k = insn.rows, insn.k
        config = self.config
        array = config.array
        if k > array.rows:
            raise _Fault(f"gemm with k = {k} requires k <= the array's {array.rows} rows",
                         "gemm")
        drain = (self.drain_cycles if self.weight_stationary
                 else timing.drain_cycles(k, config))
        word.plan = (rows, k, insn.reset, timing.stream_cycles(rows, k, config), drain,
                     k * array.cols * self.element_bytes[Mem.WGT],
                     rows * k * self.element_bytes[Mem.INP], rows * array.cols * 4,
                     rows * k * array.cols)
        return word.plan

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

    def _vec(self, word: _Word, fields: tuple[int, ...], number: int, t: int, q: _Queue
             ) -> tuple[int, int, int]:
        """VEC: check, time it on the vector unit, apply it to the acc rows."""
        insn: Vec = word.insn  # type: ignore[assignment]
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
        return start, done, VECTOR_UNIT

    def _requant(self, word: _Word, fields: tuple[int, ...], number: int, t: int, q: _Queue
                 ) -> tuple[int, int, int]:
        """VEC.REQUANT: check the machine has the stage, time it on the vector unit, apply it
        to the acc rows (with the scale row, when per channel)."""
        insn: Requant = word.insn  # type: ignore[assignment]
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
        return start, done, VECTOR_UNIT

    def _qadd(self, word: _Word, fields: tuple[int, ...], number: int, t: int, q: _Queue
              ) -> tuple[int, int, int]:
        """VEC.QADD: check the machine has the float32 stage, time it there like a
        requantisation, add the tile at src to the rows at dst by the three parameter rows."""
        insn: QAdd = word.insn  # type: ignore[assignment]
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
        return start, done, VECTOR_UNIT

    def _sync(self, word: _Word, fields: tuple[int, ...], number: int, t: int,
              q: _Queue) -> tuple[int, int, int]:
        """NOP and FINISH: only their tokens; they take no time."""
        q.issue_free = t
        return t, t, -1

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
                number, word = q.pending[0][:2]
                node = word.node
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
                blocker = self.next[0].node.index  # type: ignore[index]
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
