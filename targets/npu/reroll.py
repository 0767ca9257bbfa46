"""Folding a sampled program back into loop instructions.

The emitter (:mod:`.emit`) runs a long loop only on some iterations: a prefix, then, once the
emitter's state repeats with a period, it skips whole periods (a gap) and runs a suffix. It
marks where each loop opens and closes, where each iteration starts, and where the gap is.
After merging and dependency tokens, :func:`reroll` turns every marked loop back into a
:class:`~simulator.isa.Loop`: it looks for a steady run of iterations whose code repeats with
period Q (1, 2 or 4 iterations: double buffering alternates copies, so bodies often repeat
every second iteration) and whose address fields advance by the same amount per period;
that run becomes one loop whose body is one period, with :class:`~simulator.isa.Step` words
for the advancing fields. The iterations before and after the run (the pipeline's prologue
and epilogue: the first loads pop no tokens, the last GEMMs push none) stay as they are. A
loop with a gap must be covered: every skipped iteration must lie inside the steady run, or
the loop cannot be folded (:class:`RerollFailed`, and the emitter runs it whole).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from ir.errors import SimulatorFault
from ir.stmt import For
from simulator.isa import LOOP_DEPTH, STEP_FIELDS, Instruction, Loop, Step

PERIODS = (1, 2, 4)
MAX_BODY = (1 << 16) - 1  # words in a loop body (the LOOP word's 16-bit field)
# Per instruction class, the fields _line_delta compares (see _fixed_fields).
_FIXED: dict[type, tuple[str, ...]] = {}


@dataclass(eq=False)
class Fold:
    """One execution of a loop the emitter samples: the loop and its extent."""

    loop: For
    extent: int


@dataclass(frozen=True, slots=True)
class Mark:
    """A position in the emitted stream: where a fold opens or closes (``open``, ``close``),
    where its iteration ``iteration`` starts (``iter``), or where the iterations it skipped
    would be (``gap``)."""

    kind: str
    fold: Fold
    iteration: int = 0


class RerollFailed(Exception):
    """A sampled loop has no steady run covering the iterations the emitter skipped."""

    def __init__(self, loop: For) -> None:
        super().__init__(loop.var.name)
        self.loop = loop


@dataclass(frozen=True, slots=True)
class Line:
    """An instruction in rerolled code, with its address-field deltas per enclosing loop
    (``steps[0]``: the innermost)."""

    insn: Instruction
    steps: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Block:
    """A loop in rerolled code: ``body`` runs ``count`` times."""

    count: int
    body: tuple[Line | Block, ...]


Code = list[Line | Block]


def reroll(items: Sequence[Instruction | Mark]) -> list[Instruction]:
    """The program's words: every marked loop folded (or spelled out), marks gone."""
    code, pos = _parse(items, 0)
    if pos != len(items):
        raise ValueError(f"unbalanced mark at item {pos}")
    return words(code)


def _parse(items: Sequence[Instruction | Mark], pos: int) -> tuple[Code, int]:
    """The code from ``pos`` up to the next mark of an enclosing fold."""
    code: Code = []
    while pos < len(items):
        item = items[pos]
        if not isinstance(item, Mark):
            code.append(Line(item))
            pos += 1
        elif item.kind == "open":
            iterations, pos = _parse_fold(items, pos + 1)
            code.extend(_fold(item.fold, iterations))
        else:
            break
    return code, pos


def _parse_fold(items: Sequence[Instruction | Mark], pos: int) -> tuple[dict[int, Code], int]:
    """The code of each sampled iteration of the fold opened just before ``pos``."""
    iterations: dict[int, Code] = {}
    while True:
        mark = items[pos]
        if not isinstance(mark, Mark):
            raise TypeError(f"item {pos} lies in a fold outside any iteration")
        if mark.kind == "close":
            return iterations, pos + 1
        if mark.kind == "gap":
            pos += 1
        else:
            iterations[mark.iteration], pos = _parse(items, pos + 1)


def _fold(fold: Fold, iterations: dict[int, Code]) -> Code:
    """One loop's code: prologue iterations, a Block for the steady run, epilogue."""
    n = fold.extent
    sampled = sorted(iterations)
    missing = next((i for i, s in enumerate(sampled) if i != s), len(sampled))
    gap = len(sampled) < n
    # Anchor the steady run on the last period before the gap (or mid-loop without one).
    end = missing if gap else n // 2 + 1
    best: tuple[int, int, int, list[tuple[tuple[int, ...], ...]]] | None = None
    for q in PERIODS:
        if end < q:
            continue
        run = _steady(iterations, n, q, end - q)
        if run is None:
            continue
        start, stop, incs = run
        covers = not gap or (start <= missing and stop >= _first_after_gap(sampled, missing))
        if covers and (best is None or stop - start > best[1] - best[0]):
            best = (start, stop, q, incs)
    if best is None or (best[1] - best[0]) // best[2] < 2:
        return _unfolded(fold, iterations, gap)
    start, stop, q, incs = best
    body: Code = []
    for c in range(q):
        body.extend(_add_level(iterations[start + c], incs[c]))
    if not _encodable(body):
        return _unfolded(fold, iterations, gap)
    before = [line for i in range(start) for line in iterations[i]]
    after = [line for i in range(stop, n) for line in iterations[i]]
    return before + [Block((stop - start) // q, tuple(body))] + after


def _unfolded(fold: Fold, iterations: dict[int, Code], gap: bool) -> Code:
    """The loop's iterations one after another, or RerollFailed when some were skipped."""
    if gap:
        raise RerollFailed(fold.loop)
    return [line for i in sorted(iterations) for line in iterations[i]]


def _encodable(body: Code) -> bool:
    """True when a loop of ``body`` fits the ISA: at most 65535 words, loops at most
    LOOP_DEPTH deep (this one included), every step a signed 32-bit delta."""
    try:
        return len(words(body, 1)) <= MAX_BODY
    except (ValueError, SimulatorFault):
        return False


def _first_after_gap(sampled: list[int], missing: int) -> int:
    return sampled[missing] if missing < len(sampled) else len(sampled)


def _steady(iterations: dict[int, Code], n: int, q: int, anchor: int
            ) -> tuple[int, int, list[tuple[tuple[int, ...], ...]]] | None:
    """The steady run around the period starting at ``anchor``: (first iteration, end,
    per class its address deltas per period), or None when the anchor period cannot even be
    compared. Unsampled iterations count as steady (the emitter skipped whole periods only
    where its state repeated); the run ends at the first sampled iteration that differs."""
    incs: list[tuple[tuple[int, ...], ...]] = []
    for c in range(q):
        x = anchor + c
        # The deltas per period, from the period before or else the nearest one after.
        later = sorted(i for i in iterations if i > x and (i - x) % q == 0)
        inc = None
        for y in [x - q, *later]:
            if y in iterations:
                inc = _per_period(delta(iterations[x], iterations[y]), (y - x) // q)
                if inc is not None:
                    break
        if inc is None:
            return None
        incs.append(inc)

    def steady(p: int) -> bool:
        for c in range(q):
            y = anchor + p * q + c
            if y not in iterations:
                continue
            diff = delta(iterations[anchor + c], iterations[y])
            if diff is None or _per_period(diff, p) != incs[c]:
                return False
        return True

    lo = 0
    while anchor + (lo - 1) * q >= 0 and steady(lo - 1):
        lo -= 1
    hi = 0
    while anchor + (hi + 2) * q <= n and steady(hi + 1):
        hi += 1
    return anchor + lo * q, anchor + (hi + 1) * q, incs


def _per_period(diff: tuple[tuple[int, ...], ...] | None, periods: int
                ) -> tuple[tuple[int, ...], ...] | None:
    """``diff`` divided by ``periods`` (nonzero) when it divides exactly."""
    if diff is None or any(v % periods for d in diff for v in d):
        return None
    return tuple(tuple(v // periods for v in d) for d in diff)


def delta(a: Code | tuple[Line | Block, ...], b: Code | tuple[Line | Block, ...]
          ) -> tuple[tuple[int, ...], ...] | None:
    """How ``b``'s address fields differ from ``a``'s, line by line (in order), where the two
    are the same code otherwise: the same instructions, flags, loops and steps. None when
    they are not."""
    if len(a) != len(b):
        return None
    out: list[tuple[int, ...]] = []
    for x, y in zip(a, b):
        if isinstance(x, Block) and isinstance(y, Block):
            inner = delta(x.body, y.body) if x.count == y.count else None
            if inner is None:
                return None
            out.extend(inner)
        elif isinstance(x, Line) and isinstance(y, Line):
            diff = _line_delta(x, y)
            if diff is None:
                return None
            out.append(diff)
        else:
            return None
    return tuple(out)


def _line_delta(x: Line, y: Line) -> tuple[int, ...] | None:
    kind = type(x.insn)
    if kind is not type(y.insn) or x.steps != y.steps:
        return None
    for name in _fixed_fields(kind):
        if getattr(x.insn, name) != getattr(y.insn, name):
            return None
    return tuple(getattr(y.insn, n) - getattr(x.insn, n) for n in STEP_FIELDS.get(kind, ()))


def _fixed_fields(kind: type) -> tuple[str, ...]:
    """The fields of an instruction class that its equality compares and no step moves:
    two instructions equal in these differ at most in their address fields."""
    names = _FIXED.get(kind)
    if names is None:
        moved = set(STEP_FIELDS.get(kind, ()))
        names = _FIXED[kind] = tuple(f.name for f in dataclasses.fields(kind)
                                     if f.compare and f.name not in moved)
    return names


def _add_level(code: Code | tuple[Line | Block, ...], incs: tuple[tuple[int, ...], ...],
               depth: int = 0, at: list[int] | None = None) -> Code:
    """``code`` as the body of a new loop outside its own loops: each line gets the new
    loop's deltas (``incs``, one per line in order) at its nesting depth."""
    counter = at if at is not None else [0]
    out: Code = []
    for item in code:
        if isinstance(item, Block):
            out.append(Block(item.count, tuple(_add_level(item.body, incs, depth + 1, counter))))
            continue
        inc = incs[counter[0]]
        counter[0] += 1
        width = len(inc)
        steps = item.steps + ((0,) * width,) * (depth - len(item.steps))
        out.append(Line(item.insn, steps + (inc,)))
    return out


def words(code: Code | tuple[Line | Block, ...], depth: int = 0) -> list[Instruction]:
    """Code as program words: each loop as a Loop word and its body, each line as its
    instruction and a Step word per loop that moves it."""
    out: list[Instruction] = []
    for item in code:
        if isinstance(item, Block):
            if depth >= LOOP_DEPTH:
                raise ValueError(f"loops nest deeper than {LOOP_DEPTH}")
            body = words(item.body, depth + 1)
            out.append(Loop(item.count, len(body)))
            out.extend(body)
            continue
        out.append(item.insn)
        for level, deltas in enumerate(item.steps):
            if any(deltas):
                out.append(Step(level, *deltas))
    return out
