"""Steady-state fast-forward: an innermost loop whose timing repeats computes its remaining
iterations' values without timing each instruction.

The engine's state is a function of where the fetch unit is and of the times, counts and
clocks it holds, and a step depends on a time only through differences with other times.
So when the fetch unit is about to take the first instruction of iteration i of a loop and
every part of the state the loop's instructions can read equals, relative to "now", what it
was at iteration i - p (every time later by one period P of cycles, every executed
instruction's number later by the p iterations' instructions, every queue's clock entry
later by the instructions that queue ran meanwhile), the p iterations from i repeat the p
before them, and so does every later period of p up to the loop's last iteration: the
loop's instructions address the same on-chip rows on every iteration (a loop whose body
steps an on-chip address is not fast-forwarded), and what differs, their DRAM addresses,
changes values but not times. (p is 1 where the state settles; 2 where, say, an iteration
preloads an odd number of weight tiles into the array's two buffers.)

The engine then skips the whole periods left before the last iteration: each skipped
period's trace records are the last period's, later by its cycles and numbers; the busy,
stall, traffic and instruction counters grow by the period's increments; every time,
count, clock and race record the loop's instructions can read moves on as many periods.
The skipped instructions' values are still computed, in the order they would have run
(:mod:`simulator.batched` where the loop only loads and accumulates, as a few products;
else instruction by instruction), and their DRAM addresses are checked at both ends of the
skipped range first (affine in the iteration, so the extremes are there): a loop that
would fault there runs as before and faults on the instruction that does. The state
compared at each head is only what the loop's instructions read (see :class:`LoopShape`
and :func:`_key`); a part they never touch keeps its value in the plain run as in the
skipped one.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any

import numpy as np

from simulator import batched
from simulator.isa import Gemm, Load, Mem, Nop, Store
from simulator.trace import UNITS

# The engine's machine, queues, words and token queues are typed Any here: this module is
# the engine's (simulator.engine imports it), and reads their fields by name.

LOAD_UNIT, GEMM_UNIT, _VECTOR_UNIT, STORE_UNIT, DRAM_UNIT = range(len(UNITS))
# A loop of fewer iterations gains too little to pay for a snapshot per iteration.
MIN_COUNT = 4
# Snapshots one loop instance takes before it is left to run as it is (a loop whose state
# never repeats, e.g. one whose DMA and compute drift apart, pays for no more than these).
TRIES = 16
# The most iterations a period may have (weight tiles preloaded into alternate buffers
# repeat every second iteration where an iteration preloads an odd number of them).
MAX_PERIOD = 4
# The address fields that name on-chip rows, per kind (the others name DRAM bytes).
_SRAM_FIELDS = {Load: (0,), Store: (0,), Gemm: (0, 1, 2), Nop: ()}


class LoopShape:
    """What the fast-forward knows of one innermost loop: its body's words (in order) and
    depth, and the parts of the state its instructions read. ``queues``: the queues of its
    words (every other must be empty while it runs); ``tokens``: the token queues their
    flags pop or push; ``units``: the units their instructions occupy, but for the DRAM
    port; ``dma`` and ``gemm``: whether the DRAM port, and the array's stream, preload and
    weight buffers, are among them."""

    __slots__ = ("body", "count", "depth", "dma", "gemm", "index", "queues", "tokens", "units")

    def __init__(self, body: Sequence[Any], count: int, depth: int) -> None:
        self.body = tuple(body)
        self.count = count
        self.depth = depth
        self.index = {id(word): n for n, word in enumerate(self.body)}
        queues = []
        tokens = []
        units = set()
        for word in self.body:
            q = word.queue
            if q not in queues:
                queues.append(q)
            for flag, name in ((word.pop_prev, "pop_prev"), (word.pop_next, "pop_next"),
                               (word.push_prev, "push_prev"), (word.push_next, "push_next")):
                token = getattr(q, name)
                if flag and token not in tokens:
                    tokens.append(token)
            kind = type(word.insn)
            if kind is Load:
                units.update((LOAD_UNIT, DRAM_UNIT))
            elif kind is Store:
                units.update((STORE_UNIT, DRAM_UNIT))
            elif kind is Gemm:
                units.add(GEMM_UNIT)
        self.queues = tuple(queues)
        self.tokens = tuple(tokens)
        self.dma = DRAM_UNIT in units
        self.gemm = GEMM_UNIT in units
        # The DRAM port keeps no busy end of its own (its transfers queue on port_free).
        units.discard(DRAM_UNIT)
        self.units = tuple(sorted(units))


def loop_shape(node: Any, words: dict[int, Any], depth: int) -> LoopShape | None:
    """The :class:`LoopShape` of the innermost loop ``node`` (``depth`` loops around it),
    or None where it cannot be fast-forwarded: too few iterations, an instruction other
    than LOAD, GEMM, STORE and NOP (the vector unit's timing reads per-row times), or an
    on-chip address that this loop steps."""
    if node.count < MIN_COUNT:
        return None
    body = [words[id(inner)] for inner in node.body]
    for word in body:
        sram = _SRAM_FIELDS.get(type(word.insn))
        if sram is None:
            return None
        steps = word.node.steps
        if steps and any(steps[0][f] for f in sram):
            return None
    return LoopShape(body, node.count, depth)


class _Mark:
    """The absolute figures at one loop head, from which a period's increments follow:
    ``key``, the state relative to now (compared between heads), and the numbers it is
    relative to."""

    __slots__ = ("counts", "fetched", "i", "key", "records", "seqs", "shape", "stats", "time",
                 "tokens", "traffic")

    def __init__(self, shape: LoopShape, i: int, fetched: int, time: int,
                 seqs: tuple[int, ...], key: tuple[Any, ...], machine: Any) -> None:
        self.shape = shape
        self.i = i
        self.fetched = fetched
        self.time = time
        self.seqs = seqs
        self.key = key
        self.counts = tuple((q.dispatched, q.started) for q in machine.queues)
        self.tokens = tuple((t.pushed, t.popped) for t in shape.tokens)
        self.records = len(machine.records)
        self.stats = tuple((u.busy, u.stall, u.count) for u in machine.units)
        self.traffic = (tuple(machine.traffic), machine.useful_macs, machine.dram_wait)


class FastForward:
    """The engine's fast-forward for one run: :meth:`at_head` is called as the fetch unit
    is about to take the first instruction of an iteration of a loop it knows."""

    def __init__(self, machine: Any, stream: Iterator[Any]) -> None:
        self.machine = machine
        self.stream = stream
        # The loop instance being run (its shape and outer iteration), the rows its
        # instructions access, how many marks it has taken, and its latest marks (of
        # consecutive iterations, newest last).
        self.instance: tuple[LoopShape, tuple[int, ...]] | None = None
        self.touched: list[tuple[Any, list[tuple[int, int]]]] = []
        self.gemm_rows: np.ndarray | None = None
        self.tries = 0
        self.marks: deque[_Mark] = deque(maxlen=MAX_PERIOD)
        self.skipped = 0  # iterations skipped in this run

    def at_head(self, shape: LoopShape, iteration: tuple[int, ...], fetched: int, time: int
                ) -> tuple[int, int, Any] | None:
        """At the head of iteration ``iteration`` of the loop ``shape`` (``fetched``
        instructions fetched, the last dispatched at ``time``): None to go on as usual, or,
        having skipped whole periods of the loop (a period: the fewest iterations after
        which the state repeats, at most MAX_PERIOD), the fetch unit's new (fetched, time,
        upcoming word and iteration)."""
        depth = shape.depth
        i = iteration[depth]
        if i >= shape.count - 1:
            return None
        prefix = iteration[:depth]
        machine = self.machine
        marks = self.marks
        if self.instance is None or self.instance[0] is not shape \
                or self.instance[1] != prefix:
            self.instance = (shape, prefix)
            self.touched = _touched(machine, shape, prefix, i)
            self.gemm_rows = _gemm_rows(machine, shape, prefix, i)
            self.tries = 0
            marks.clear()
        if self.tries >= TRIES:
            return None
        self.tries += 1
        if marks and marks[-1].i != i - 1:
            marks.clear()
        seqs = tuple(q.seq for q in machine.queues)
        key = _key(machine, shape, self.touched, prefix, i, fetched, time, seqs)
        if key is not None and self.gemm_rows is not None:
            key += _scoreboard_key(machine, self.gemm_rows, time)
        if key is None:
            marks.clear()
            return None
        mark = _Mark(shape, i, fetched, time, seqs, key, machine)
        before = next((old for old in reversed(marks) if old.key == key), None)
        marks.append(mark)
        if before is None:
            return None
        iterations = i - before.i
        periods = (shape.count - 1 - i) // iterations
        events = self._events(before, mark) if periods else None
        if events is None or not self._dram_fits(events, prefix, i, periods, iterations):
            return None
        marks.clear()
        self._advance(before, mark, periods)
        self._replay(events, prefix, i, periods, iterations)
        skipped = periods * iterations
        self.skipped += skipped
        upcoming = None
        for upcoming in islice(self.stream, skipped * len(shape.body)):
            pass
        return (fetched + periods * (fetched - before.fetched),
                time + periods * (time - before.time), upcoming)

    def _events(self, before: _Mark, after: _Mark) -> list[tuple[Any, Any, int]] | None:
        """The instructions that executed between the two heads, in order, each as (its
        values' function, its word, its iteration's offset from ``before``'s: the offset
        from ``after``'s of its repeat one period on); None unless the instructions
        fetched between the heads are the loop's iterations between them."""
        machine = self.machine
        shape = after.shape
        body, length = shape.body, len(shape.body)
        if after.fetched - before.fetched != (after.i - before.i) * length:
            return None
        values = {Load: machine.load_values, Gemm: machine.gemm_values,
                  Store: machine.store_values}
        events = []
        rows = machine.records.rows(before.records, after.records).tolist()
        for unit, _, _, number in rows:
            if unit == DRAM_UNIT:
                continue  # a DMA's second record
            offset, n = divmod(number - before.fetched, length)
            word = body[n]
            events.append((values[type(word.insn)], word, offset))
        return events

    def _dram_fits(self, events: list[tuple[Any, Any, int]], prefix: tuple[int, ...], i: int,
                   periods: int, iterations: int) -> bool:
        """Whether every DMA of the skipped periods stays inside DRAM (checked at the first
        and the last of them: its addresses are affine in the iteration)."""
        limit = self.machine.dram_size
        for _, word, offset in events:
            insn = word.insn
            if type(insn) is Gemm or word.fields is None:
                continue
            row_bytes = word.plan[3] if type(insn) is Load else \
                insn.cols * (1 if insn.narrow else 4)
            for inner in (i + offset, i + offset + (periods - 1) * iterations):
                dram = word.fields(prefix + (inner,))[1]
                if dram + (insn.rows - 1) * insn.stride + row_bytes > limit:
                    return False
        return True

    def _replay(self, events: list[tuple[Any, Any, int]], prefix: tuple[int, ...], i: int,
                periods: int, iterations: int) -> None:
        """Compute the values of the skipped periods' instructions, in the order they
        would have executed: each period repeats the events of the last one, its
        iterations ``iterations`` on."""
        if not self.machine.functional or batched.replay(self.machine, events, prefix, i,
                                                         periods, iterations):
            return
        for j in range(periods):
            first = i + j * iterations
            for values, word, offset in events:
                fields = word.base if word.fields is None else \
                    word.fields(prefix + (first + offset,))
                values(word, fields)

    def _advance(self, before: _Mark, after: _Mark, periods: int) -> None:
        """Move every figure and every part of the state the loop reads on by ``periods``
        periods (the increments from ``before`` to ``after``)."""
        machine = self.machine
        shape = after.shape
        period = after.time - before.time
        numbers = periods * (after.fetched - before.fetched)
        later = periods * period
        seqs = tuple(periods * (a - b) for a, b in zip(after.seqs, before.seqs, strict=True))
        machine.records.repeat(before.records, after.records, periods, period,
                               after.fetched - before.fetched)
        for unit, old, new in zip(machine.units, before.stats, after.stats, strict=True):
            unit.busy += periods * (new[0] - old[0])
            unit.stall += periods * (new[1] - old[1])
            unit.count += periods * (new[2] - old[2])
        for unit in shape.units:
            machine.units[unit].covered += later
        old_traffic, old_macs, old_wait = before.traffic
        new_traffic, new_macs, new_wait = after.traffic
        for n, (old, new) in enumerate(zip(old_traffic, new_traffic, strict=True)):
            machine.traffic[n] += periods * (new - old)
        machine.useful_macs += periods * (new_macs - old_macs)
        machine.dram_wait += periods * (new_wait - old_wait)
        if shape.dma:
            machine.port_free += later
        if shape.gemm:
            machine.stream_free += later
            if self.gemm_rows is not None:
                machine.acc_done[self.gemm_rows] += later
            if machine.weight_stationary:
                machine.preload_free += later
                for b in _buffers(machine):
                    machine.buffer_free[b] += later
        for q, old, new in zip(machine.queues, before.counts, after.counts, strict=True):
            if q not in shape.queues:
                continue
            q.dispatched += periods * (new[0] - old[0])
            q.started += periods * (new[1] - old[1])
            _advance_queue(q, shape, later, numbers, seqs,
                           periods * (after.i - before.i))
        for token, old, new in zip(shape.tokens, before.tokens, after.tokens, strict=True):
            token.pushed += periods * (new[0] - old[0])
            token.popped += periods * (new[1] - old[1])
            token.waiting = deque((when + later, _shifted(clock, seqs))
                                  for when, clock in token.waiting)
            token.recent_pops = deque((when + later for when in token.recent_pops),
                                      maxlen=token.recent_pops.maxlen)
        if machine.functional:
            for memory, ranges in self.touched:
                for history in _histories(memory, ranges):
                    _advance_history(history, seqs, numbers)
        for q in machine.queues:
            q.stale = True


def _shifted(clock: Sequence[int], seqs: Sequence[int]) -> tuple[int, ...]:
    return tuple(c + s for c, s in zip(clock, seqs, strict=True))


def _advance_queue(q: Any, shape: LoopShape, later: int, numbers: int, seqs: tuple[int, ...],
                   skip: int) -> None:
    """Move queue q's state on: its entries' numbers, iterations, fields and dispatch
    times, its times, its clock and its pending pushes."""
    depth = shape.depth
    entries = []
    for number, word, _, iteration, dispatched in q.pending:
        moved = iteration[:depth] + (iteration[depth] + skip,)
        fields = word.base if word.fields is None else word.fields(moved)
        entries.append((number + numbers, word, fields, moved, dispatched + later))
    q.pending = deque(entries)
    q.issue_free += later
    q.retired += later
    q.recent_starts = deque((when + later for when in q.recent_starts),
                            maxlen=q.recent_starts.maxlen)
    q.inflight = deque(when + later for when in q.inflight)
    q.seq += seqs[q.kind]
    q.clock[:] = _shifted(q.clock, seqs)
    q.pushes = [(tokens, when + later, _shifted(clock, seqs)) for tokens, when, clock in q.pushes]
    if q.last[0] >= 0:
        q.last = (q.last[0] + numbers, q.last[1])


def _advance_history(history: Any, seqs: tuple[int, ...], numbers: int) -> None:
    """Move one segment's race record on: its writer's and readers' clock entries and
    instruction numbers (an entry of 0, none, stays none)."""
    if history.writer_seq:
        history.writer_seq += seqs[history.writer_queue]
        history.writer_id += numbers
    for k, seen in enumerate(history.reader_seq):
        if seen:
            history.reader_seq[k] = seen + seqs[k]
            history.reader_id[k] += numbers


def _buffers(machine: Any) -> range:
    """The weight buffers the array uses: two when double-buffered, else the first."""
    return range(2 if machine.double_weights else 1)


def _touched(machine: Any, shape: LoopShape, prefix: tuple[int, ...], i: int
             ) -> list[tuple[Any, list[tuple[int, int]]]]:
    """Each memory the loop's instructions access, with the row ranges they access (the
    same on every iteration of the loop)."""
    ranges: dict[Mem, list[tuple[int, int]]] = {}
    for word in shape.body:
        insn = word.insn
        kind = type(insn)
        if kind is Nop:
            continue
        fields = word.base if word.fields is None else word.fields(prefix + (i,))
        if kind is Load:
            ranges.setdefault(insn.mem, []).append((fields[0], fields[0] + insn.rows))
        elif kind is Store:
            ranges.setdefault(Mem.ACC, []).append((fields[0], fields[0] + insn.rows))
        else:
            acc_row, inp_row, wgt_row = fields
            ranges.setdefault(Mem.ACC, []).append((acc_row, acc_row + insn.rows))
            ranges.setdefault(Mem.INP, []).append((inp_row, inp_row + insn.rows))
            ranges.setdefault(Mem.WGT, []).append((wgt_row, wgt_row + insn.k))
    return [(machine.memories[mem], spans) for mem, spans in ranges.items()]


def _histories(memory: Any, ranges: list[tuple[int, int]]) -> list[Any]:
    """The race records of the segments of ``memory`` that meet any of ``ranges``, once
    each, in row order."""
    starts = memory.starts
    segments: set[int] = set()
    for lo, hi in ranges:
        segments.update(range(bisect_right(starts, lo) - 1, bisect_left(starts, hi)))
    return [memory.history[n] for n in sorted(segments)]


def _gemm_rows(machine: Any, shape: LoopShape, prefix: tuple[int, ...], i: int
               ) -> np.ndarray | None:
    """In a program with vector instructions, the accumulator rows the loop's GEMMs write
    (a mask), whose scoreboard times (acc_done, vec_done) a GEMM writes and reads; None in
    a program without (the engine keeps no scoreboard) or a loop without GEMMs."""
    if not machine.vector_used or not shape.gemm:
        return None
    rows = np.zeros(machine.acc_done.shape, bool)
    for word in shape.body:
        if type(word.insn) is Gemm:
            acc_row = (word.base if word.fields is None else word.fields(prefix + (i,)))[0]
            rows[acc_row:acc_row + word.insn.rows] = True
    return rows


def _scoreboard_key(machine: Any, rows: np.ndarray, now: int) -> tuple[Any, ...]:
    """The accumulator scoreboard of the loop's GEMM rows, relative to now: when each row's
    last compute write lands (the GEMMs write it), and when its last vector write landed,
    or None where that is no later than any queued or later instruction's dispatch (as a
    GEMM waits for it and nothing in the loop writes it, it can delay none of them)."""
    earliest = min([now] + [entry[4] for q in machine.queues for entry in q.pending])
    vector = int(machine.vec_done[rows].max())
    return ((machine.acc_done[rows] - now).tobytes(),
            None if vector <= earliest else vector - now)


def _history_key(history: Any, seqs: tuple[int, ...], fetched: int) -> tuple[Any, ...]:
    """One segment's race record relative to the queues' clocks and the fetch count."""
    readers = tuple((seen - seqs[k], history.reader_id[k] - fetched) if seen else None
                    for k, seen in enumerate(history.reader_seq))
    if not history.writer_seq:
        return history.valid, readers
    return (history.valid, history.writer_queue,
            history.writer_seq - seqs[history.writer_queue], history.writer_id - fetched,
            readers)


def _newest(times: deque[int], count: int, now: int) -> tuple[int, ...]:
    """The newest ``count`` of ``times`` relative to now: a queue's start times and a token
    queue's pop times older than these are never read again (a dispatch waits for the start
    ``instruction_depth`` places ahead, a push for the pop ``token_depth`` places ahead)."""
    if count <= 0:
        return ()
    return tuple(when - now for when in islice(times, max(len(times) - count, 0), None))


def _key(machine: Any, shape: LoopShape, touched: list[tuple[Any, list[tuple[int, int]]]],
         prefix: tuple[int, ...], i: int, fetched: int, now: int, seqs: tuple[int, ...]
         ) -> tuple[Any, ...] | None:
    """What the loop's instructions can read of the state, relative to now (times less
    ``now``, numbers less ``fetched``, clock entries less their queue's count, iterations
    as offsets from ``i``); None where a queue outside the loop still has work, or a
    queued instruction is not this loop instance's."""
    depth = shape.depth
    depth_limit = machine.depth
    index = shape.index

    def clock_key(clock: Sequence[int]) -> tuple[int, ...]:
        return tuple(c - s for c, s in zip(clock, seqs, strict=True))

    parts: list[Any] = []
    for q in machine.queues:
        if q not in shape.queues:
            if q.pending or q.pushes:
                return None
            continue
        entries = []
        for number, word, _, iteration, dispatched in q.pending:
            n = index.get(id(word))
            if n is None or iteration[:depth] != prefix:
                return None
            entries.append((number - fetched, n, i - iteration[depth], dispatched - now))
        pushes = []
        for tokens, when, clock in q.pushes:
            if tokens not in shape.tokens:
                return None
            pushes.append((tokens.name, when - now, clock_key(clock)))
        parts.append((tuple(entries), q.issue_free - now, q.retired - now,
                      min(q.dispatched, depth_limit),
                      _newest(q.recent_starts, depth_limit - len(q.pending), now),
                      tuple(when - now for when in q.inflight), tuple(pushes),
                      clock_key(q.clock)))
    token_depth = machine.token_depth
    for tokens in shape.tokens:
        parts.append((tuple((when - now, clock_key(clock)) for when, clock in tokens.waiting),
                      tokens.pushed - tokens.popped,
                      _newest(tokens.recent_pops, token_depth - len(tokens.waiting), now)))
    parts.append(tuple(machine.units[u].covered - now for u in shape.units))
    if shape.dma:
        parts.append(machine.port_free - now)
    if shape.gemm:
        parts.append(machine.stream_free - now)
        if machine.weight_stationary:
            parts.append((machine.preload_free - now, machine.active, tuple(machine.held),
                          tuple(machine.buffer_free[b] - now for b in _buffers(machine))))
    elif machine.weight_stationary:
        parts.append(tuple(machine.held))  # a LOAD into wgt can drop a held tile
    if machine.functional:
        for memory, ranges in touched:
            parts.append((tuple(memory.starts),
                          tuple(_history_key(h, seqs, fetched)
                                for h in _histories(memory, ranges))))
    return tuple(parts)

