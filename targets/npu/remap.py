"""Host copies folded into the NPU's transfers: a gather into its loads, a scatter into its
stores.

A host stage that only rearranges a tensor costs a pass over it on the host and leaves the
rearranged copy in DRAM for the program: a convolution's im2col (``A[h * 56 + w, rh * 192 +
rw * 64 + c] = X[n, h + rh, w + rw, c]``), a weight's reshape, the GEMM's rows unpacked into
the output's pixels (``Y[n, h, w, c] = C[h * 56 + w, c]``). A LOAD or STORE moves rows of
bytes at any DRAM address and row stride, so where each row a transfer moves is one run of
consecutive elements of the other tensor, the program can read ``X`` (write ``Y``)
directly: the tile's rows split into runs of one stride each (an im2col tile crossing an
image row is two), one instruction per run. The copy then never runs and its intermediate
never exists; the DMA moves the bytes the real machine would move, the im2col's included.

Which copies fold (:func:`foldable`): a stage of one block whose body is ``G[...] =
S[...]`` (no cast; or ``select(i < a and j < b, S[...], 0)``, zeros past bounds on whole
indices of ``G``), each index of the intermediate ``G`` a mixed-radix sum of
distinct iterators (``h * 56 + w``), read (a gather) or written (a scatter) by one NPU
stage and touched by no other stage; a scatter's target takes each iterator as a whole
index, so no two elements land on one. Elements of ``G`` past what the copy covers (the
rows the GEMM's padding adds) have no counterpart: a load reads zeros for them from a
zeroed DRAM row (row stride 0), as the copy left them, and a store writes them where
nothing reads them, so the transfers move what they moved with the copy on the host.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ir.arith import mixed_radix, unfused
from ir.buffer import Buffer
from ir.errors import ExecutionError
from ir.evaluate import compile_index
from ir.expr import BinOp, BufferLoad, Expr, IntImm, Select, Var
from ir.stmt import BlockRealize, BufferStore, For, IterKind, Stmt
from ir.visitor import substitute
from simulator.isa import Load, Store
from targets.npu.memory import InDram


class RemapRefused(ExecutionError):
    """A transfer's rows are not runs of the folded copy's other tensor: keep the copy."""

    def __init__(self, buffer: Buffer, reason: str) -> None:
        super().__init__(f"{buffer.name}: {reason}")
        self.buffer = buffer


@dataclass(frozen=True, eq=False)
class Remap:
    """The intermediate ``via`` as elements of ``to``: element ``(d_0, ..)`` of ``via`` is
    element ``offset`` (flat, an expression in ``indices``) of ``to`` where ``d_i <
    covered[i]`` for every i, and has no counterpart elsewhere. ``gather``: the program
    reads ``via`` (``to`` is the copy's source); otherwise it writes it (``to`` is the
    copy's target). ``label`` names the host stage folded away."""

    via: Buffer
    to: Buffer
    gather: bool
    indices: tuple[Var, ...]
    offset: Expr
    covered: tuple[int, ...]
    label: str

    def offset_expr(self, starts: Sequence[Expr]) -> Expr:
        """The flat offset in ``to`` of the element of ``via`` at ``starts``."""
        return substitute(self.offset, dict(zip(self.indices, starts)))

    @functools.cached_property
    def _tables(self) -> tuple[int, tuple[np.ndarray, ...], np.ndarray]:
        """The offset as a sum of one table per index (each iterator of the copy is a digit
        of one index, and the offset is affine in the iterators), the constant apart; and
        for each value of the last index, how many consecutive elements of ``to`` start
        there."""
        evaluate = _elementwise(compile_index(self.offset))
        zeros = {d: np.zeros(1, np.int64) for d in self.indices}
        base = int(evaluate(zeros)[0])
        tables = []
        for dim, size in zip(self.indices, self.via.shape):
            along = dict(zeros)
            along[dim] = np.arange(size, dtype=np.int64)
            tables.append(evaluate(along) - base)
        rng = np.random.default_rng(0)
        probe = {d: rng.integers(0, size, 64) for d, size in zip(self.indices, self.via.shape)}
        summed = base + sum(t[probe[d]] for t, d in zip(tables, self.indices))
        if not np.array_equal(summed, evaluate(probe)):
            raise RemapRefused(self.via, "its offset is not one table per index")
        last = tables[-1]
        consecutive = np.ones(len(last), np.int64)
        for x in range(len(last) - 2, -1, -1):
            if last[x + 1] == last[x] + 1:
                consecutive[x] = consecutive[x + 1] + 1
        return base, tuple(tables), consecutive


def _elementwise(evaluate):
    """``evaluate`` (an index function of scalars) over broadcast arrays of index values:
    at once where its arithmetic takes arrays, else one element at a time (a ``min`` or a
    select in an index)."""

    def over(env: Mapping[Var, np.ndarray]) -> np.ndarray:
        arrays = np.broadcast_arrays(*env.values())
        try:
            return np.broadcast_to(evaluate(env), arrays[0].shape).astype(np.int64)
        except (TypeError, ValueError):
            keys = list(env)
            flat = [a.reshape(-1).tolist() for a in arrays]
            values = [evaluate(dict(zip(keys, point))) for point in zip(*flat)]
            return np.array(values, np.int64).reshape(arrays[0].shape)

    return over


def copy_remaps(stmt: Stmt, label: str) -> list[Remap]:
    """The remaps a host stage's statement can stand for, when it is a foldable copy (module
    docs): the gather (``via`` is the stored buffer) where the store's indices are
    mixed-radix sums, the scatter (``via`` is the loaded one) where the load's are and the
    store writes each element once. Which side is the intermediate is the caller's to
    decide."""
    extents: dict[Var, int] = {}
    while isinstance(stmt, For):
        extents[stmt.var] = stmt.extent
        stmt = stmt.body
    if not isinstance(stmt, BlockRealize) or not _true(stmt.predicate):
        return []
    block = stmt.block
    store = block.body
    if not isinstance(store, BufferStore):
        return []
    load, bounds = _guarded(store.value)
    if (block.init is not None or load is None or load.buffer.dtype != store.buffer.dtype
            or any(iv.kind is IterKind.REDUCE for iv in block.iter_vars)):
        return []
    iterators: dict[Var, int] = {}
    for iv, binding in zip(block.iter_vars, stmt.bindings):
        if not isinstance(binding, Var) or extents.get(binding) != iv.extent:
            return []
        iterators[iv.var] = iv.extent
    found = []
    gathered = _inverse(store.buffer, store.indices, iterators)
    if gathered is not None and all(any(v is i for i in store.indices) for v in bounds):
        values, covered = gathered
        covered = tuple(min([limit] + [bounds[v] for v in bounds if v is index])
                        for limit, index in zip(covered, store.indices))
        found.append(_remap(store.buffer, load.buffer, True, load.indices, values, covered,
                            label))
    scattered = _inverse(load.buffer, load.indices, iterators)
    if scattered is not None and not bounds and _one_to_one(store.indices, iterators):
        values, covered = scattered
        found.append(_remap(load.buffer, store.buffer, False, store.indices, values, covered,
                            label))
    return found


def _guarded(value: Expr) -> tuple[BufferLoad | None, dict[Var, int]]:
    """A copy's value as its load and the bounds guarding it: ``X[...]``, or ``select(i <
    a and j < b, X[...], 0)`` (zeros past ``a`` rows and ``b`` columns) with each bound on
    an iterator. (None, {}) for any other value."""
    if isinstance(value, BufferLoad):
        return value, {}
    if not (isinstance(value, Select) and isinstance(value.true_value, BufferLoad)
            and _zero(value.false_value)):
        return None, {}
    bounds: dict[Var, int] = {}
    terms, pending = [], [value.cond]
    while pending:
        term = pending.pop()
        if isinstance(term, BinOp) and term.op == "and":
            pending += [term.a, term.b]
        else:
            terms.append(term)
    for term in terms:
        if not (isinstance(term, BinOp) and term.op == "lt" and isinstance(term.a, Var)
                and isinstance(term.b, IntImm)):
            return None, {}
        bounds[term.a] = min(bounds.get(term.a, term.b.value), term.b.value)
    return value.true_value, bounds


def _true(expr: Expr) -> bool:
    return isinstance(expr, IntImm) and expr.value == 1


def _remap(via: Buffer, to: Buffer, gather: bool, to_indices: Sequence[Expr],
           values: Mapping[Var, Expr], covered: tuple[int, ...], label: str) -> Remap:
    indices = tuple(Var(f"d{n}") for n in range(len(via.shape)))
    flat: Expr = IntImm(0)
    for index, stride in zip(to_indices, to.effective_strides):
        flat = flat + index * stride
    offset = substitute(substitute(flat, values), dict(zip(_PLACEHOLDERS, indices)))
    return Remap(via, to, gather, indices, offset, covered, label)


# The inverse is built on placeholder variables, one per dimension of the intermediate,
# then renamed to the remap's own.
_PLACEHOLDERS = tuple(Var(f"_dim{n}") for n in range(8))


def _inverse(buffer: Buffer, indices: Sequence[Expr], iterators: Mapping[Var, int]
             ) -> tuple[dict[Var, Expr], tuple[int, ...]] | None:
    """Each iterator as an expression in ``buffer``'s indices, where every index is a
    mixed-radix sum of distinct iterators (``h * 56 + w`` over extents 56, 56) and every
    iterator of extent over 1 is a digit of exactly one; and how far each index is covered
    (the product of its digits' extents). None otherwise."""
    if len(indices) > len(_PLACEHOLDERS):
        return None
    values: dict[Var, Expr] = {}
    covered = []
    for dim, (index, size) in enumerate(zip(indices, buffer.shape)):
        digits = mixed_radix(index, iterators)
        if digits is None or any(var in values for _, var, _ in digits):
            return None
        stride = math.prod(extent for _, _, extent in digits)
        if stride > size:
            return None
        parts = unfused(_PLACEHOLDERS[dim], [(c, extent) for c, _, extent in digits])
        values.update((var, part) for (_, var, _), part in zip(digits, parts))
        covered.append(stride)
    for var, extent in iterators.items():
        if var not in values:
            if extent != 1:
                return None
            values[var] = IntImm(0)
    return values, tuple(covered)


def _one_to_one(indices: Sequence[Expr], iterators: Mapping[Var, int]) -> bool:
    """Each index one distinct iterator, and every iterator of extent over 1 among them:
    the copy writes each element of its target once."""
    used = [i for i in indices if isinstance(i, Var) and i in iterators]
    if len(used) != len(set(used)) or any(
            not (isinstance(i, Var) and i in iterators) and not _zero(i) for i in indices):
        return False
    return all(extent == 1 or var in used for var, extent in iterators.items())


def _zero(expr: Expr) -> bool:
    return isinstance(expr, IntImm) and expr.value == 0


@dataclass(frozen=True, slots=True)
class Run:
    """Rows ``first .. first + rows - 1`` of a transfer: element offset ``start`` of the
    other tensor and ``stride`` elements between rows, or none (``start`` is None: rows the
    copy does not cover)."""

    first: int
    rows: int
    start: int | None
    stride: int


def runs(remap: Remap, flat: int, stride: int, rows: int, cols: int) -> list[Run]:
    """The runs (module docs) of a transfer of ``rows`` rows of ``cols`` elements of
    ``remap.via``, the first at flat element ``flat``, ``stride`` elements apart. Raises
    RemapRefused where a row's elements are not consecutive in ``to``, or only some of
    them have a counterpart."""
    base, tables, consecutive = remap._tables
    shape = remap.via.shape
    index = np.unravel_index(flat + stride * np.arange(rows, dtype=np.int64), shape)
    last = index[-1]
    if (last + cols > shape[-1]).any():
        raise RemapRefused(remap.via, "a transfer's row crosses its last dimension")
    offsets = base + sum(t[i] for t, i in zip(tables, index))
    whole = np.ones(rows, bool)
    for i, limit in zip(index[:-1], remap.covered[:-1]):
        whole &= i < limit
    some = whole & (last < remap.covered[-1])
    whole &= last + cols <= remap.covered[-1]
    if (whole != some).any():
        raise RemapRefused(remap.via, "a transfer's row is partly outside the copy")
    if (whole & (consecutive[last] < cols)).any():
        raise RemapRefused(remap.via, f"a transfer's row is not consecutive in {remap.to.name}")
    # A run ends where the cover changes, or where a row's step from the one before is
    # not the run's stride (the step into its second row).
    steps = np.diff(offsets)
    changes = np.zeros(rows, bool)
    changes[1:] = whole[1:] != whole[:-1]
    changes[2:] |= whole[2:] & (steps[1:] != steps[:-1])
    firsts = [0]
    for row in np.flatnonzero(changes).tolist():
        if whole[row] != whole[row - 1] or row - 1 != firsts[-1]:
            firsts.append(row)
    found = []
    for first, end in zip(firsts, firsts[1:] + [rows]):
        if not whole[first]:
            found.append(Run(first, end - first, None, 0))
        else:
            step = int(steps[first]) if end - first > 1 else 0
            found.append(Run(first, end - first, int(offsets[first]), step))
    return found


def discarded_bytes(remaps: Mapping[Buffer, Remap]) -> int:
    """Room for the rows a scatter's stores do not keep: the most elements a scatter's
    intermediate has past what its copy covers."""
    return max((max(r.via.dtype.bits // 8, 1) * (r.via.size - math.prod(r.covered))
                for r in remaps.values() if not r.gather), default=0)


def expand(items: Sequence, places: Mapping[Buffer, InDram], remaps: Mapping[Buffer, Remap],
           zeros: int, discard: int) -> list:
    """``items`` (instructions and marks) with each transfer of a folded copy's
    intermediate, placed at ``places`` in an address range of its own, as the transfers of
    its runs in the other tensor (placed in ``places`` too). Rows the copy does not cover
    load zeros from a row at ``zeros`` (row stride 0), as the copy left them, and are
    stored at ``discard`` (:func:`discarded_bytes` of room), where nothing reads them: the
    transfers move the bytes they moved with the copy on the host."""
    ranges = sorted((p.base, p.base + p.nbytes, remaps[b]) for b, p in places.items()
                    if b in remaps)
    out = []
    for item in items:
        remap = None
        if isinstance(item, (Load, Store)):
            remap = next((r for lo, hi, r in ranges if lo <= item.dram < hi), None)
        if remap is None:
            out.append(item)
            continue
        width = max(remap.via.dtype.bits // 8, 1)
        flat = (item.dram - places[remap.via].base) // width
        target = places[remap.to].base
        for run in runs(remap, flat, item.stride // width, item.rows, item.cols):
            if run.start is None:
                address, stride = (zeros, 0) if isinstance(item, Load) else (
                    discard, item.cols * width)
                out.append(replace(item, sram=item.sram + run.first, rows=run.rows,
                                   dram=address, stride=stride))
                continue
            out.append(replace(item, sram=item.sram + run.first, rows=run.rows,
                               dram=target + run.start * width, stride=run.stride * width))
    return out


def region_rows(shape: Sequence[int]) -> tuple[int, int]:
    """(rows, columns) of a transfer region of ``shape``: its last two extents, only its
    last dimension wide being one row."""
    wide = [n for n, extent in enumerate(shape) if extent > 1]
    if len(wide) > 2 or (len(wide) == 2 and wide != [len(shape) - 2, len(shape) - 1]):
        raise ExecutionError(f"a transfer region of shape {tuple(shape)} is not rows of "
                             "consecutive columns")
    cols = shape[-1]
    rows = math.prod(shape) // cols
    return rows, cols


def foldable(stages: Sequence, params: Sequence[Buffer]) -> dict[int, dict[Buffer, Remap]]:
    """For each NPU stage (by index in ``stages``), the host copies that fold into its
    transfers (module docs), by intermediate. A copy's intermediate is no parameter and no
    other stage touches it; nothing between the copy and its program touches the other
    tensor, which the program itself does not name."""
    found: dict[int, dict[Buffer, Remap]] = {}
    for index, stage in enumerate(stages):
        if stage.on_npu:
            continue
        for remap in copy_remaps(stage.stmt, stage.label):
            if remap.via in params:
                continue
            users = [n for n, other in enumerate(stages)
                     if n != index and remap.via in other.buffers]
            if len(users) != 1 or not stages[users[0]].on_npu:
                continue
            program = users[0]
            if remap.gather != (program > index) or remap.to in stages[program].buffers:
                continue
            between = range(min(index, program) + 1, max(index, program))
            if any(remap.to in stages[n].buffers for n in between):
                continue
            found.setdefault(program, {})[remap.via] = remap
            break
    return found
