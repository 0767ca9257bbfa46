"""On-chip memories: their contents, and the bookkeeping that catches what hardware would not.

Each row remembers whether anything has written it, and which instruction of which queue last
wrote it and last read it (one reader per queue). Queues order their accesses only through
dependency tokens, tracked as vector clocks: ``clock[q]`` is how many of queue q's
instructions the accessing queue knows have retired (its own entry is the instruction now
running). An access conflicting with one another queue made that the clock does not cover is a
race, whatever the timing happened to be: other latencies would have reordered it.

The bookkeeping is kept per run of rows with the same history (a segment), not per row:
programs move whole tiles, so a memory holds a handful of segments, and an access checks and
updates the few it covers. A write leaves its rows with no readers: a later write ordered
after it is ordered after every read that it was ordered after, since clocks only grow and
tokens pass them on. A write over a few segments updates each in place rather than merging
them: programs load a tile and read it in parts (a 64-row weight load, 16-row GEMM reads),
and merging would split the tile again at every read. A segment boundary between rows of the
same history changes no check and no message (a message names the first offending row).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

import numpy as np

QUEUE_NAMES = ("load", "compute", "store")
# A write over more segments than this merges them into one.
_MERGE_ABOVE = 8

# Names an earlier access for a message: (its number among executed instructions, the name of
# its queue) -> "instruction 3 (load)".
Describe = Callable[[int, str], str]


class MemoryFault(Exception):
    """An access the memory refuses; the engine adds the instruction, unit and iteration."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def rows_text(lo: int, hi: int) -> str:
    """``rows lo..hi-1`` (or ``row lo``) for messages."""
    return f"row {lo}" if hi - lo == 1 else f"rows {lo}..{hi - 1}"


class _History:
    """What a segment's rows have seen: written at all; the last write's queue, clock entry
    (1-based position in its queue; 0 = none) and instruction number; per queue, the last
    read's clock entry and instruction number."""

    __slots__ = ("reader_id", "reader_seq", "valid", "writer_id", "writer_queue",
                 "writer_seq")

    def __init__(self, valid: bool = False, writer_queue: int = 0, writer_seq: int = 0,
                 writer_id: int = 0) -> None:
        self.valid = valid
        self.writer_queue = writer_queue
        self.writer_seq = writer_seq
        self.writer_id = writer_id
        self.reader_seq = [0] * len(QUEUE_NAMES)
        self.reader_id = [0] * len(QUEUE_NAMES)

    def copy(self) -> _History:
        other = _History(self.valid, self.writer_queue, self.writer_seq, self.writer_id)
        other.reader_seq = list(self.reader_seq)
        other.reader_id = list(self.reader_id)
        return other


class OnChipMemory:
    """One scratchpad or the accumulator: ``rows`` rows of ``width`` elements of ``dtype``.

    ``data`` holds the values. The history is a list of segments: ``starts`` (sorted; the
    first is 0) and the :class:`_History` of the rows from each start to the next.
    ``describe`` names an earlier instruction in race messages.
    """

    def __init__(self, name: str, rows: int, width: int, dtype: type, banks: int,
                 describe: Describe | None = None) -> None:
        self.name = name
        self.rows = rows
        self.width = width
        self.bank_rows = rows // banks
        self.banks = banks
        self.data: np.ndarray = np.zeros((rows, width), dtype)
        self.starts = [0]
        self.history = [_History()]
        self.describe = describe or (lambda n, queue: f"instruction {n} ({queue})")
        # The segments each row range covers, while the segments stay as they are: a program
        # accesses the same tiles again and again.
        self.covers: dict[tuple[int, int], tuple[int, int]] = {}
        # The same, as the segments' histories: what the common, fault-free access walks.
        self.spans: dict[tuple[int, int], tuple[_History, ...]] = {}

    def check_bounds(self, lo: int, count: int, verb: str) -> None:
        """Fault unless rows [lo, lo + count) exist and lie inside one bank."""
        hi = lo + count
        if hi > self.rows:
            raise MemoryFault(f"{verb} {self.name} {rows_text(lo, hi)}, past the end of "
                              f"{self.name} ({self.rows} rows)")
        if (hi - 1) // self.bank_rows != lo // self.bank_rows:
            edge = (lo // self.bank_rows + 1) * self.bank_rows
            raise MemoryFault(
                f"{verb} {self.name} {rows_text(lo, hi)}, across the bank boundary at row "
                f"{edge} ({self.name} has {self.banks} banks of {self.bank_rows} rows)")

    def _split(self, row: int) -> int:
        """The index of the segment starting at ``row``, splitting the one holding it."""
        starts = self.starts
        if row >= self.rows:
            return len(starts)
        n = bisect_right(starts, row) - 1
        if starts[n] == row:
            return n
        starts.insert(n + 1, row)
        self.history.insert(n + 1, self.history[n].copy())
        self.covers.clear()
        self.spans.clear()
        return n + 1

    def _segments(self, lo: int, hi: int) -> tuple[int, int]:
        """(first, last): segments first..last-1 cover rows [lo, hi) exactly."""
        span = self.covers.get((lo, hi))
        if span is None:
            first = self._split(lo)
            span = self.covers[(lo, hi)] = (first, self._split(hi))
        return span

    def _span(self, lo: int, hi: int) -> tuple[_History, ...]:
        """The histories of the segments covering rows [lo, hi) exactly."""
        first, last = self._segments(lo, hi)
        span = self.spans[(lo, hi)] = tuple(self.history[first:last])
        return span

    def _end(self, n: int) -> int:
        return self.starts[n + 1] if n + 1 < len(self.starts) else self.rows

    def read(self, lo: int, hi: int, queue: int, clock: list[int], ident: int) -> None:
        """Check and record a read of rows [lo, hi) by instruction number ``ident`` of
        ``queue``."""
        span = self.spans.get((lo, hi)) or self._span(lo, hi)
        own = clock[queue]
        for seg in span:
            if not seg.valid or seg.writer_seq > clock[seg.writer_queue]:
                self._check_read(lo, hi, clock)  # raises: the readers recorded do not matter
            seg.reader_seq[queue] = own
            seg.reader_id[queue] = ident

    def _check_read(self, lo: int, hi: int, clock: list[int]) -> None:
        """Fault for a read of [lo, hi) that :meth:`read` found wrong, naming the first
        unwritten rows, else the first row whose writer the clock does not cover."""
        first, last = self._segments(lo, hi)
        history = self.history
        for n in range(first, last):
            if not history[n].valid:
                end = n
                while end < last and not history[end].valid:
                    end += 1
                rows = rows_text(self.starts[n], self._end(end - 1))
                raise MemoryFault(f"reads {self.name} {rows}, which no completed instruction "
                                  "wrote")
        for n in range(first, last):
            seg = history[n]
            if seg.writer_seq > clock[seg.writer_queue]:
                self._unordered_writer(n, lo, hi, "reads")

    def write(self, lo: int, hi: int, queue: int, clock: list[int], ident: int) -> None:
        """Check and record a write of rows [lo, hi) by instruction number ``ident`` of
        ``queue``."""
        span = self.spans.get((lo, hi)) or self._span(lo, hi)
        load, compute, store = clock
        for seg in span:
            seen = seg.reader_seq
            if seg.writer_seq > clock[seg.writer_queue] or seen[0] > load or \
                    seen[1] > compute or seen[2] > store:
                self._check_write(lo, hi, clock)
        self._record_write(span, lo, hi, queue, clock[queue], ident)

    def modify(self, lo: int, hi: int, queue: int, clock: list[int], ident: int) -> None:
        """:meth:`read` and then :meth:`write` of rows [lo, hi) by one instruction (a GEMM
        accumulating into them), in one pass where neither faults: the write's checks
        cannot fail on the writer the read has just checked, nor on the read it records."""
        span = self.spans.get((lo, hi)) or self._span(lo, hi)
        load, compute, store = clock
        for seg in span:
            seen = seg.reader_seq
            if not seg.valid or seg.writer_seq > clock[seg.writer_queue] or \
                    seen[0] > load or seen[1] > compute or seen[2] > store:
                self.read(lo, hi, queue, clock, ident)
                self.write(lo, hi, queue, clock, ident)
                return
        self._record_write(span, lo, hi, queue, clock[queue], ident)

    def _record_write(self, span: tuple[_History, ...], lo: int, hi: int, queue: int,
                      own: int, ident: int) -> None:
        """Rows [lo, hi), covered by ``span``, were last written by instruction ``ident``
        of ``queue`` (clock entry ``own``), and not read since."""
        if len(span) > _MERGE_ABOVE:
            self._merge(lo, hi)
            span = self._span(lo, hi)
        for seg in span:
            seg.valid = True
            seg.writer_queue = queue
            seg.writer_seq = own
            seg.writer_id = ident
            readers = seg.reader_seq
            readers[0] = readers[1] = readers[2] = 0

    def _check_write(self, lo: int, hi: int, clock: list[int]) -> None:
        """Fault for a write of [lo, hi) that :meth:`write` found unordered, naming the first
        row whose writer, else whose reader (queue by queue), the clock does not cover."""
        first, last = self._segments(lo, hi)
        history = self.history
        for n in range(first, last):
            seg = history[n]
            if seg.writer_seq > clock[seg.writer_queue]:
                self._unordered_writer(n, lo, hi, "writes")
        for reader, seen in enumerate(clock):
            for n in range(first, last):
                if history[n].reader_seq[reader] > seen:
                    self._unordered_reader(n, reader, lo, hi)

    def _merge(self, lo: int, hi: int) -> None:
        """Make rows [lo, hi) one segment (their histories are about to be the same)."""
        first, last = self._segments(lo, hi)
        del self.history[first + 1:last]
        del self.starts[first + 1:last]
        self.covers.clear()
        self.spans.clear()

    def _unordered_reader(self, n: int, reader: int, lo: int, hi: int) -> None:
        """Fault: segment n's last read by queue ``reader`` is not ordered before this write
        of [lo, hi)."""
        who = self.describe(self.history[n].reader_id[reader], QUEUE_NAMES[reader])
        raise MemoryFault(f"writes {self.name} {rows_text(lo, hi)} while {who} may still read "
                          f"row {self.starts[n]}: no dependency token orders the two")

    def _unordered_writer(self, n: int, lo: int, hi: int, verb: str) -> None:
        """Fault: segment n's last write is not ordered before this access of [lo, hi)."""
        seg = self.history[n]
        who = self.describe(seg.writer_id, QUEUE_NAMES[seg.writer_queue])
        raise MemoryFault(f"{verb} {self.name} {rows_text(lo, hi)} while {who} may still write "
                          f"row {self.starts[n]}: no dependency token orders the two")
