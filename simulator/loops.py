"""Programs with loops: the tree of loop words, and the instructions they stand for.

A program is a sequence of words. A :class:`~simulator.isa.Loop` word repeats the ``body``
words after it; a :class:`~simulator.isa.Step` word after an instruction advances that
instruction's address fields on every iteration of one enclosing loop. :func:`structure`
checks the words and builds the tree (:class:`Placed` instructions and :class:`LoopNode`
loops); :func:`expand` walks it, giving each executed instruction with its iteration and
fields, in the order the fetch unit hands them to the queues. A program without loops
expands to itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

from ir.errors import SimulatorFault
from simulator.isa import (
    ADDRESS_RANGES,
    LOOP_DEPTH,
    STEP_FIELDS,
    Finish,
    Instruction,
    Loop,
    Nop,
    Operand,
    Requant,
    Step,
    Vec,
)


class Placed(NamedTuple):
    """An executable instruction at word ``index``, inside ``counts`` loops (outermost first).

    ``base`` holds its address fields (:data:`~simulator.isa.STEP_FIELDS`) as written;
    ``steps[l]`` their deltas per iteration of loop level ``l`` (0: the innermost), zeros
    where no Step word gives one. (A named tuple: the simulator builds one per word of a
    straight-line program, so it must be cheap.)
    """

    index: int
    insn: Instruction
    base: tuple[int, ...]
    steps: tuple[tuple[int, ...], ...]
    counts: tuple[int, ...]

    def fields_at(self, iteration: tuple[int, ...]) -> tuple[int, ...]:
        """The address fields on ``iteration`` (one index per enclosing loop, outermost
        first)."""
        values = list(self.base)
        depth = len(iteration)
        for level, deltas in enumerate(self.steps):
            i = iteration[depth - 1 - level]
            for f, delta in enumerate(deltas):
                values[f] += delta * i
        return tuple(values)

    def fields_function(self) -> Callable[[tuple[int, ...]], tuple[int, ...]]:
        """:meth:`fields_at` as one compiled expression per field, for the simulator's fetch
        unit, which evaluates it for every iteration."""
        depth = len(self.counts)
        terms = []
        for f, base in enumerate(self.base):
            parts = [str(base)] + [f"{deltas[f]} * it[{depth - 1 - level}]"
                                   for level, deltas in enumerate(self.steps) if deltas[f]]
            terms.append(" + ".join(parts))
        return eval(f"lambda it: ({''.join(t + ', ' for t in terms)})")

    def instruction_at(self, iteration: tuple[int, ...]) -> Instruction:
        """The instruction this one stands for on ``iteration``."""
        if not self.steps:
            return self.insn
        names = STEP_FIELDS[type(self.insn)]
        return dataclasses.replace(self.insn, **dict(zip(names, self.fields_at(iteration))))


class LoopNode(NamedTuple):
    """The loop word at ``index``: ``body`` runs ``count`` times."""

    index: int
    count: int
    body: tuple[Placed | LoopNode, ...]


Node = Placed | LoopNode

# Each instruction class's address fields (two or three), read as a tuple.
_BASE: dict[type, Callable[[Instruction], tuple[int, ...]]] = {
    cls: attrgetter(*names) for cls, names in STEP_FIELDS.items()}
_BASE.update({Nop: lambda insn: (), Finish: lambda insn: ()})


@dataclass
class _Open:
    """A loop being read: its word, where its body ends, and the nodes read so far."""

    index: int
    count: int
    end: int
    body: list[Node]


def structure(program: Sequence[Instruction]) -> tuple[Node, ...]:
    """The program's tree; faults (unit ``fetch``, at the word) on a malformed one.

    A loop body must lie inside the program and inside the body of any loop around it, and
    loops nest at most LOOP_DEPTH deep. A step must follow an instruction with address fields
    (or another step of it), name a loop around it, give deltas only for fields the
    instruction has, and be the only step of that instruction for its loop. No iteration may
    take an address field outside its range, and FINISH may not repeat.
    """
    if not any(isinstance(insn, Loop | Step) for insn in program):
        # Straight-line code: every word an instruction run once.
        return tuple(Placed(j, insn, _BASE[type(insn)](insn), (), ())
                     for j, insn in enumerate(program))
    top = _Open(-1, 1, len(program), [])
    stack = [top]
    last_word = -2  # the last word of the newest Placed: its instruction or one of its steps
    for j, insn in enumerate(program):
        while stack[-1].end == j:
            _close(stack)
        current = stack[-1]
        if isinstance(insn, Loop):
            end = j + 1 + insn.body
            if end > current.end:
                where = "the program" if current is top else f"the loop at word {current.index}"
                raise SimulatorFault(f"loop body of {insn.body} words runs past the end of "
                                     f"{where} (word {current.end - 1})", index=j, unit="fetch")
            if len(stack) > LOOP_DEPTH:
                raise SimulatorFault(f"loops nest at most {LOOP_DEPTH} deep", index=j,
                                     unit="fetch")
            stack.append(_Open(j, insn.count, end, []))
        elif isinstance(insn, Step):
            last_word = _add_step(current, insn, j, last_word, len(stack) - 1)
        else:
            if isinstance(insn, Finish) and len(stack) > 1:
                raise SimulatorFault("FINISH inside a loop", index=j, unit="fetch")
            current.body.append(Placed(j, insn, _BASE[type(insn)](insn), (),
                                       tuple(o.count for o in stack[1:])))
            last_word = j
    while len(stack) > 1:
        _close(stack)
    for node in placed(top.body):
        _check_ranges(node)
    return tuple(top.body)


def _close(stack: list[_Open]) -> None:
    done = stack.pop()
    stack[-1].body.append(LoopNode(done.index, done.count, tuple(done.body)))


def _add_step(current: _Open, step: Step, j: int, last_word: int, depth: int) -> int:
    """Attach ``step`` (word j) to the instruction it follows; the new last word."""
    node = current.body[-1] if current.body else None
    if not isinstance(node, Placed) or last_word != j - 1:
        raise SimulatorFault("a step must follow the instruction it advances (or another "
                             "step of it)", index=j, unit="fetch")
    names = STEP_FIELDS.get(type(node.insn), ())
    kind = type(node.insn).__name__.lower()
    if not names:
        raise SimulatorFault(f"a step cannot follow {kind}, which has no address fields",
                             index=j, unit="fetch")
    if step.loop >= depth:
        raise SimulatorFault(f"step of loop level {step.loop} requires {step.loop + 1} loops "
                             f"around it, got {depth}", index=j, unit="fetch")
    extra = [d for d in step.deltas[len(names):] if d]
    if extra:
        raise SimulatorFault(f"{kind} has {len(names)} address fields ({', '.join(names)}), so "
                             f"a step of it gives at most {len(names)} deltas", index=j,
                             unit="fetch")
    insn = node.insn
    if isinstance(insn, Vec) and insn.mode is Operand.IMM and step.d1:
        raise SimulatorFault("a step of a vec with an immediate operand cannot advance src",
                             index=j, unit="fetch")
    if isinstance(insn, Requant) and not insn.per_channel and step.d1:
        raise SimulatorFault("a step of a vec.requant with an immediate scale cannot advance "
                             "src", index=j, unit="fetch")
    steps = list(node.steps) + [(0,) * len(names)] * (step.loop + 1 - len(node.steps))
    if any(steps[step.loop]):
        raise SimulatorFault(f"a second step of the instruction at word {node.index} for loop "
                             f"level {step.loop}", index=j, unit="fetch")
    steps[step.loop] = step.deltas[:len(names)]
    current.body[-1] = node._replace(steps=tuple(steps))
    return j


def placed(nodes: Sequence[Node]) -> Iterator[Placed]:
    """Every instruction of a :func:`structure`, once each, in program order."""
    for node in nodes:
        if isinstance(node, Placed):
            yield node
        else:
            yield from placed(node.body)


def span(node: Placed, field: int) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """The least and the greatest value address field ``field`` takes over the node's
    iterations, each with an iteration taking it: (least, its iteration), (greatest, its)."""
    depth = len(node.counts)
    out = []
    for sign in (-1, 1):
        # An affine field takes its extremes at corners of the iteration box: the last
        # iteration of each loop whose delta moves it that way, the first of the others.
        corner = []
        for p, count in enumerate(node.counts):
            level = depth - 1 - p
            delta = node.steps[level][field] if level < len(node.steps) else 0
            corner.append(count - 1 if sign * delta > 0 else 0)
        out.append((node.fields_at(tuple(corner))[field], tuple(corner)))
    return tuple(out)


def _check_ranges(node: Placed) -> None:
    """Fault unless every iteration keeps every stepped field inside its range."""
    if not node.steps:
        return
    for f, name in enumerate(STEP_FIELDS[type(node.insn)]):
        lo, hi = ADDRESS_RANGES[name]
        for value, iteration in span(node, f):
            if not lo <= value <= hi:
                kind = type(node.insn).__name__.lower()
                raise SimulatorFault(f"{kind} {name} is {value} on loop iteration "
                                     f"{iteration}, outside {lo}..{hi}", index=node.index,
                                     unit="fetch")


def expand(program: Sequence[Instruction]) -> Iterator[tuple[Placed, tuple[int, ...]]]:
    """Each instruction the program executes (its :class:`Placed` node) with its iteration
    (one index per enclosing loop, outermost first), in fetch order."""
    return walk(structure(program))


def walk(nodes: Sequence[Node], iteration: tuple[int, ...] = ()
         ) -> Iterator[tuple[Placed, tuple[int, ...]]]:
    """:func:`expand` of a program's :func:`structure` (inside loops at ``iteration``)."""
    for node in nodes:
        if type(node) is Placed:
            yield node, iteration
        else:
            for i in range(node.count):  # type: ignore[union-attr]
                yield from walk(node.body, iteration + (i,))  # type: ignore[union-attr]


def expanded(program: Sequence[Instruction]) -> list[Instruction]:
    """The straight-line program a program with loops stands for (loop and step words gone,
    every iteration's instruction spelled out)."""
    return [node.instruction_at(iteration) for node, iteration in expand(program)]
