"""On-chip memories: their contents, and the bookkeeping that catches what hardware would not.

Each row remembers whether anything has written it, and which instruction of which queue last
wrote it and last read it (one reader per queue). Queues order their accesses only through
dependency tokens, tracked as vector clocks: ``clock[q]`` is how many of queue q's
instructions the accessing queue knows have retired (its own entry is the instruction now
running). An access conflicting with one another queue made that the clock does not cover is a
race, whatever the timing happened to be: other latencies would have reordered it.
"""

from __future__ import annotations

import numpy as np

from ir.errors import SimulatorFault

QUEUE_NAMES = ("load", "compute", "store")


def rows_text(lo: int, hi: int) -> str:
    """``rows lo..hi-1`` (or ``row lo``) for messages."""
    return f"row {lo}" if hi - lo == 1 else f"rows {lo}..{hi - 1}"


class OnChipMemory:
    """One scratchpad or the accumulator: ``rows`` rows of ``width`` elements of ``dtype``.

    ``data`` holds the values; ``valid`` marks rows something wrote; the writer/reader arrays
    hold, per row, the last access's position in its queue (1-based; 0 = none), queue and
    program index.
    """

    def __init__(self, name: str, rows: int, width: int, dtype: type, banks: int) -> None:
        self.name = name
        self.rows = rows
        self.width = width
        self.bank_rows = rows // banks
        self.banks = banks
        self.data: np.ndarray = np.zeros((rows, width), dtype)
        self.valid = np.zeros(rows, bool)
        self.writer_seq = np.zeros(rows, np.int64)
        self.writer_queue = np.zeros(rows, np.intp)
        self.writer_index = np.zeros(rows, np.int64)
        self.reader_seq = np.zeros((len(QUEUE_NAMES), rows), np.int64)
        self.reader_index = np.zeros((len(QUEUE_NAMES), rows), np.int64)

    def check_bounds(self, lo: int, count: int, verb: str, index: int, unit: str) -> None:
        """Fault unless rows [lo, lo + count) exist and lie inside one bank."""
        hi = lo + count
        if hi > self.rows:
            raise SimulatorFault(
                f"{verb} {self.name} {rows_text(lo, hi)}, past the end of {self.name} "
                f"({self.rows} rows)", index=index, unit=unit)
        if (hi - 1) // self.bank_rows != lo // self.bank_rows:
            edge = (lo // self.bank_rows + 1) * self.bank_rows
            raise SimulatorFault(
                f"{verb} {self.name} {rows_text(lo, hi)}, across the bank boundary at row "
                f"{edge} ({self.name} has {self.banks} banks of {self.bank_rows} rows)",
                index=index, unit=unit)

    def read(self, lo: int, hi: int, queue: int, clock: np.ndarray, index: int,
             unit: str) -> None:
        """Check and record a read of rows [lo, hi) by instruction ``index`` of ``queue``."""
        valid = self.valid[lo:hi]
        if not valid.all():
            bad = lo + int(np.argmin(valid))
            end = bad + int(np.argmax(np.append(valid[bad - lo:], True)))
            raise SimulatorFault(
                f"reads {self.name} {rows_text(bad, end)}, which no completed instruction "
                "wrote", index=index, unit=unit)
        self._check_writer(lo, hi, clock, "reads", index, unit)
        self.reader_seq[queue, lo:hi] = clock[queue]
        self.reader_index[queue, lo:hi] = index

    def write(self, lo: int, hi: int, queue: int, clock: np.ndarray, index: int,
              unit: str) -> None:
        """Check and record a write of rows [lo, hi) by instruction ``index`` of ``queue``."""
        self._check_writer(lo, hi, clock, "writes", index, unit)
        unordered = self.reader_seq[:, lo:hi] > clock[:, None]
        if unordered.any():
            reader, row = (int(i[0]) for i in np.nonzero(unordered))
            raise SimulatorFault(
                f"writes {self.name} {rows_text(lo, hi)} while instruction "
                f"{self.reader_index[reader, lo + row]} ({QUEUE_NAMES[reader]}) may still "
                f"read row {lo + row}: no dependency token orders the two",
                index=index, unit=unit)
        self.valid[lo:hi] = True
        self.writer_seq[lo:hi] = clock[queue]
        self.writer_queue[lo:hi] = queue
        self.writer_index[lo:hi] = index

    def _check_writer(self, lo: int, hi: int, clock: np.ndarray, verb: str, index: int,
                      unit: str) -> None:
        """Fault if the last write of any row is not ordered before this access."""
        unordered = self.writer_seq[lo:hi] > clock[self.writer_queue[lo:hi]]
        if unordered.any():
            row = lo + int(np.argmax(unordered))
            raise SimulatorFault(
                f"{verb} {self.name} {rows_text(lo, hi)} while instruction "
                f"{self.writer_index[row]} ({QUEUE_NAMES[self.writer_queue[row]]}) may still "
                f"write row {row}: no dependency token orders the two", index=index, unit=unit)
