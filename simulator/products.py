"""The values of a run's GEMMs, computed a few at a time.

A tiled program issues its GEMMs in groups that read one input tile, each with another
weight tile, into consecutive accumulator tiles (the column blocks of an output tile): the
4096^3 GEMM runs a million GEMMs, in groups of four. The engine checks, times and records
each GEMM as it runs (nothing here changes when or whether a fault is raised), and hands
its values here: a GEMM that extends the group waiting here joins it, and the group is
computed as one stacked product (one BLAS call per tile, but one Python call and one
conversion and addition for all of them) before anything else touches its rows.

Every value is the one the GEMMs computed one by one would give: no GEMM of a group writes
rows another reads (their accumulator tiles are disjoint); a LOAD calls
:meth:`Products.before_write`, which computes the group first where the LOAD writes rows the
group reads or writes (a LOAD elsewhere, the next step's tiles loading while this step's
GEMMs run, leaves it waiting); every other instruction that reads or writes a memory calls
:meth:`Products.flush` first, and so does the end of the run.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# acc (+)= inp @ wgt in place (datapath.TileProduct, datapath.gemm_float); operands of two
# dimensions, or stacked along a first one.
Product = Callable[[np.ndarray, np.ndarray, np.ndarray, bool], None]
# How many groups' operand views are kept (a tiled program computes a few groups again and
# again, each taking three views); 0: none.
_MAX_VIEWS = 4096


class Products:
    """The GEMMs waiting to be computed on the memories' ``acc``, ``inp`` and ``wgt``
    arrays, at most ``limit`` of them (1: each is computed at once).

    A group: GEMMs of ``rows`` rows and depth ``k`` reading input rows from ``inp_row``,
    the j-th reading weight rows from ``wgt_row + j * wgt_stride`` and writing accumulator
    rows from ``acc_row + j * rows``, all with the same ``reset``.
    """

    def __init__(self, product: Product, acc: np.ndarray, inp: np.ndarray, wgt: np.ndarray,
                 limit: int) -> None:
        self.product = product
        self.acc, self.inp, self.wgt = acc, inp, wgt
        self.limit = limit
        self.count = 0
        self.group = (0, 0, 0, 0, 0, False)  # acc_row, inp_row, wgt_row, rows, k, reset
        self.wgt_stride = 0
        # The acc, inp and wgt views of each group computed, by (group, count, stride).
        self.views: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def add(self, acc_row: int, inp_row: int, wgt_row: int, rows: int, k: int,
            reset: bool) -> None:
        """GEMM acc[acc_row + r] (+)= inp[inp_row + r, :k] @ wgt[wgt_row:wgt_row + k] for
        r < rows: joins the waiting group where it extends it, else the group is computed
        and this one starts the next."""
        if self.count:
            first_acc, first_inp, first_wgt, group_rows, group_k, group_reset = self.group
            stride = self.wgt_stride if self.count > 1 else wgt_row - first_wgt
            extends = (inp_row == first_inp and rows == group_rows and k == group_k
                       and reset == group_reset and self.count < self.limit
                       and acc_row == first_acc + self.count * rows
                       and stride >= k and wgt_row == first_wgt + self.count * stride
                       and first_wgt + (self.count + 1) * stride <= self.wgt.shape[0])
            if extends:
                self.wgt_stride = stride
                self.count += 1
                return
            self.flush()
        self.group = (acc_row, inp_row, wgt_row, rows, k, reset)
        self.count = 1
        if self.limit == 1:
            self.flush()

    def before_write(self, data: np.ndarray, lo: int, hi: int) -> None:
        """Compute the waiting group first if it reads or writes any of rows [lo, hi) of
        ``data`` (the ``acc``, ``inp`` or ``wgt`` array), which are about to be written."""
        if not self.count:
            return
        acc_row, inp_row, wgt_row, rows, k, _ = self.group
        if data is self.inp:
            first, end = inp_row, inp_row + rows
        elif data is self.wgt:
            first, end = wgt_row, wgt_row + (self.count - 1) * self.wgt_stride + k
        else:
            first, end = acc_row, acc_row + self.count * rows
        if lo < end and first < hi:
            self.flush()

    def flush(self) -> None:
        """Compute the waiting group, if any."""
        count = self.count
        if not count:
            return
        self.count = 0
        key = (self.group, count, self.wgt_stride if count > 1 else 0)
        views = self.views.get(key)
        if views is None:
            views = self._views(count)
            if len(self.views) >= _MAX_VIEWS:
                self.views.clear()
            if _MAX_VIEWS:
                self.views[key] = views
        acc, inp, wgt = views
        self.product(acc, inp, wgt, self.group[5])

    def _views(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The operands of the waiting group's ``count`` GEMMs: its accumulator tiles, its
        input tile and its weight tiles (the tiles stacked along a first dimension when
        count > 1)."""
        acc_row, inp_row, wgt_row, rows, k, _ = self.group
        inp = self.inp[inp_row:inp_row + rows]
        if k != inp.shape[1]:
            inp = inp[:, :k]
        if count == 1:
            return self.acc[acc_row:acc_row + rows], inp, self.wgt[wgt_row:wgt_row + k]
        stride = self.wgt_stride
        cols = self.wgt.shape[1]
        weights = self.wgt[wgt_row:wgt_row + count * stride].reshape(count, stride, cols)
        accs = self.acc[acc_row:acc_row + count * rows].reshape(count, rows, cols)
        return accs, inp, weights[:, :k]
