"""The NPU's assembly language: one instruction per line, printed and parsed side by side.

A line is ``mnemonic operand, operand, ... | flag, flag`` with ``#`` starting a comment.
Operands are memory references (``inp[0]``, ``acc[256]``, ``dram[0x1000]``) in a fixed order,
destination first, then ``key=value`` fields in any order, then bare words (``reset``,
``int8``, ``bcast``). After ``|`` come the dependency flags. Numbers are decimal or 0x-hex::

    load inp[0], dram[0x0], rows=256, cols=16, stride=1024 | pop_next, push_next
    gemm acc[0], inp[0], wgt[0], rows=256, k=16, reset | pop_prev
    vec.mulshift acc[0], rows=256, mult=1073741824, shift=38
    vec.requant acc[0], rows=256, scale=0x3c23d70a, zp=3, lo=-128, hi=127
    load acc[512], dram[0x8000], rows=256, cols=16, stride=64, int8
    vec.qadd acc[0], acc[512], acc[768], rows=256, lo=-128, hi=127
    store dram[0x40000], acc[0], rows=256, cols=16, stride=1024, int8 | push_prev
    finish

A loop is ``loop count=N, body=B`` followed by its B body words; a step follows the
instruction it advances and names that instruction's address fields, with the loop level
(0, the innermost, by default)::

    loop count=64, body=3
      load inp[0], dram[0x0], rows=16, cols=16, stride=1024
        step sram=16, dram=16384
      gemm acc[0], inp[0], wgt[0], rows=16, k=16
        step acc=16, inp=16

Leading spaces are ignored; :func:`disassemble` indents loop bodies and steps as above. A
step may also give its deltas positionally, ``step d0=16, d1=16384``, which is how
:func:`format_instruction` prints one without the instruction before it.

:func:`disassemble` prints this canonical form and :func:`assemble` reads it back exactly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from ir.errors import SimulatorFault, SourceLoc
from simulator.isa import (
    DEP_NAMES,
    STEP_FIELDS,
    Deps,
    Finish,
    Gemm,
    Instruction,
    Load,
    Loop,
    Mem,
    Nop,
    Operand,
    QAdd,
    Queue,
    Requant,
    Step,
    Store,
    Vec,
    VecOp,
)

_MEMREF = re.compile(r"(inp|wgt|acc|dram)\[([^\]]*)\]$")
_KEYVAL = re.compile(r"([a-z0-9_]+)=(\S+)$")
_WORD = re.compile(r"[a-z0-9_]+$")


class _AsmError(Exception):
    """A problem on the current line, at 1-based ``column`` (the line's start if unknown)."""

    def __init__(self, message: str, column: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.column = column


class _Operands:
    """One line's operands, consumed by the parser of its mnemonic."""

    def __init__(self, mnemonic: str, items: list[tuple[str, int]]) -> None:
        self.mnemonic = mnemonic
        self.refs: list[tuple[str, int, int]] = []
        self.fields: dict[str, tuple[int, int]] = {}
        self.words: dict[str, int] = {}
        for text, col in items:
            if ref := _MEMREF.match(text):
                self.refs.append((ref.group(1), _number(ref.group(2), col), col))
            elif keyval := _KEYVAL.match(text):
                if keyval.group(1) in self.fields:
                    raise _AsmError(f"{mnemonic}: field '{keyval.group(1)}' given twice", col)
                self.fields[keyval.group(1)] = (_number(keyval.group(2), col), col)
            elif _WORD.match(text):
                self.words[text] = col
            else:
                raise _AsmError(f"{mnemonic}: cannot read operand '{text}'", col)

    def ref(self, allowed: tuple[str, ...]) -> tuple[str, int]:
        """Take the next memory reference; its memory must be one of ``allowed``."""
        if not self.refs:
            raise _AsmError(f"{self.mnemonic} requires a {'/'.join(allowed)}[...] operand")
        memory, address, col = self.refs.pop(0)
        if memory not in allowed:
            raise _AsmError(f"{self.mnemonic} requires {'/'.join(allowed)}[...] here, "
                            f"got {memory}[...]", col)
        return memory, address

    def has_ref(self) -> bool:
        """Whether a memory reference is left."""
        return bool(self.refs)

    def field(self, key: str, default: int | None = None) -> int:
        """Take ``key=value``; required unless a default is given."""
        if key in self.fields:
            return self.fields.pop(key)[0]
        if default is None:
            raise _AsmError(f"{self.mnemonic} requires '{key}=...'")
        return default

    def word(self, word: str) -> bool:
        """Take the bare word ``word`` if present."""
        return self.words.pop(word, None) is not None

    def finish(self) -> None:
        """Fault on anything no parser took."""
        if self.refs:
            raise _AsmError(f"{self.mnemonic}: unexpected operand", self.refs[0][2])
        if self.fields:
            key, (_, col) = next(iter(self.fields.items()))
            raise _AsmError(f"{self.mnemonic} has no field '{key}'", col)
        if self.words:
            word, col = next(iter(self.words.items()))
            raise _AsmError(f"{self.mnemonic} has no flag '{word}'", col)


def _number(text: str, col: int) -> int:
    """A decimal or 0x-hex integer, optionally negative."""
    try:
        return int(text, 0)
    except ValueError:
        raise _AsmError(f"'{text}' is not a number", col) from None


def _format_load(insn: Load) -> str:
    widen = ", int8" if insn.widen else ""
    return (f"load {insn.mem.name.lower()}[{insn.sram}], dram[{insn.dram:#x}], "
            f"rows={insn.rows}, cols={insn.cols}, stride={insn.stride}{widen}")


def _parse_load(ops: _Operands, deps: Deps) -> Load:
    memory, sram = ops.ref(("inp", "wgt", "acc"))
    _, dram = ops.ref(("dram",))
    return Load(Mem[memory.upper()], sram, dram, ops.field("rows"), ops.field("cols"),
                ops.field("stride"), deps, ops.word("int8"))


def _format_store(insn: Store) -> str:
    narrow = ", int8" if insn.narrow else ""
    return (f"store dram[{insn.dram:#x}], acc[{insn.sram}], rows={insn.rows}, "
            f"cols={insn.cols}, stride={insn.stride}{narrow}")


def _parse_store(ops: _Operands, deps: Deps) -> Store:
    _, dram = ops.ref(("dram",))
    _, sram = ops.ref(("acc",))
    return Store(sram, dram, ops.field("rows"), ops.field("cols"), ops.field("stride"),
                 ops.word("int8"), deps)


def _format_gemm(insn: Gemm) -> str:
    reset = ", reset" if insn.reset else ""
    return (f"gemm acc[{insn.acc}], inp[{insn.inp}], wgt[{insn.wgt}], rows={insn.rows}, "
            f"k={insn.k}{reset}")


def _parse_gemm(ops: _Operands, deps: Deps) -> Gemm:
    _, acc = ops.ref(("acc",))
    _, inp = ops.ref(("inp",))
    _, wgt = ops.ref(("wgt",))
    return Gemm(acc, inp, wgt, ops.field("rows"), ops.field("k"), ops.word("reset"), deps)


# The names the immediates take in assembly, per vector operation.
_IMM_NAMES = {VecOp.MULSHIFT: ("mult", "shift"), VecOp.CLIP: ("lo", "hi")}


def _format_vec(insn: Vec) -> str:
    text = f"vec.{insn.op.name.lower()} acc[{insn.dst}]"
    if insn.mode is not Operand.IMM:
        text += f", acc[{insn.src}]"
    text += f", rows={insn.rows}"
    if insn.op in _IMM_NAMES:
        first, second = _IMM_NAMES[insn.op]
        text += f", {first}={insn.imm}, {second}={insn.imm2}"
    elif insn.op is not VecOp.RELU and insn.mode is Operand.IMM:
        text += f", imm={insn.imm}"
    if insn.mode is Operand.ROW:
        text += ", bcast"
    return text


def _parse_vec(op: VecOp) -> Callable[[_Operands, Deps], Vec]:
    def parse(ops: _Operands, deps: Deps) -> Vec:
        _, dst = ops.ref(("acc",))
        rows = ops.field("rows")
        if op in _IMM_NAMES:
            first, second = _IMM_NAMES[op]
            return Vec(op, dst, rows, imm=ops.field(first), imm2=ops.field(second), deps=deps)
        if op is VecOp.RELU:
            return Vec(op, dst, rows, deps=deps)
        if ops.has_ref():
            _, src = ops.ref(("acc",))
            mode = Operand.ROW if ops.word("bcast") else Operand.TILE
            return Vec(op, dst, rows, src, mode, deps=deps)
        return Vec(op, dst, rows, imm=ops.field("imm"), deps=deps)
    return parse


def _format_requant(insn: Requant) -> str:
    """Per tensor, the float32 scale's bits in hex; per channel, the acc row of scales."""
    text = f"vec.requant acc[{insn.dst}]"
    if insn.per_channel:
        text += f", acc[{insn.src}], rows={insn.rows}"
    else:
        text += f", rows={insn.rows}, scale={insn.scale:#010x}"
    return text + f", zp={insn.zp}, lo={insn.lo}, hi={insn.hi}"


def _parse_requant(ops: _Operands, deps: Deps) -> Requant:
    _, dst = ops.ref(("acc",))
    per_channel = ops.has_ref()
    src = ops.ref(("acc",))[1] if per_channel else 0
    rows = ops.field("rows")
    scale = 0 if per_channel else ops.field("scale")
    return Requant(dst, rows, ops.field("zp"), ops.field("lo"), ops.field("hi"), scale, src,
                   per_channel, deps)


def _format_qadd(insn: QAdd) -> str:
    return (f"vec.qadd acc[{insn.dst}], acc[{insn.src}], acc[{insn.par}], rows={insn.rows}, "
            f"lo={insn.lo}, hi={insn.hi}")


def _parse_qadd(ops: _Operands, deps: Deps) -> QAdd:
    _, dst = ops.ref(("acc",))
    _, src = ops.ref(("acc",))
    _, par = ops.ref(("acc",))
    return QAdd(dst, src, par, ops.field("rows"), ops.field("lo"), ops.field("hi"), deps)


def _parse_nop(queue: Queue) -> Callable[[_Operands, Deps], Nop]:
    return lambda ops, deps: Nop(queue, deps)


def _format_loop(insn: Loop) -> str:
    return f"loop count={insn.count}, body={insn.body}"


def _parse_loop(ops: _Operands, deps: Deps) -> Loop:
    return Loop(ops.field("count"), ops.field("body"), deps)


_RAW_DELTAS = ("d0", "d1", "d2")


def _format_step(insn: Step, after: Instruction | None = None) -> str:
    """A step, its deltas named by the fields of ``after`` (the instruction it follows)
    where that names them all, else positionally."""
    names = STEP_FIELDS.get(type(after), ())
    if not names or any(insn.deltas[len(names):]):
        names = _RAW_DELTAS
    parts = [f"loop={insn.loop}"] if insn.loop else []
    parts += [f"{name}={d}" for name, d in zip(names, insn.deltas) if d]
    return "step " + ", ".join(parts)


def _parse_step(ops: _Operands, deps: Deps, after: Instruction | None) -> Step:
    level = ops.field("loop", 0)
    if any(name in ops.fields for name in _RAW_DELTAS):
        names: tuple[str, ...] = _RAW_DELTAS
    else:
        names = STEP_FIELDS.get(type(after), ())
        if not names:
            what = type(after).__name__.lower() if after is not None else "nothing"
            raise _AsmError(f"a step names the address fields of the instruction before it, "
                            f"and {what} has none (or write its deltas as d0=, d1=, d2=)")
    return Step(level, *(ops.field(name, 0) for name in names), deps=deps)


_FORMATTERS: dict[type, Callable[..., str]] = {
    Load: _format_load,
    Store: _format_store,
    Gemm: _format_gemm,
    Vec: _format_vec,
    Requant: _format_requant,
    QAdd: _format_qadd,
    Nop: lambda insn: f"nop.{insn.queue.name.lower()}",
    Finish: lambda insn: "finish",
    Loop: _format_loop,
    Step: _format_step,
}
_PARSERS: dict[str, Callable[[_Operands, Deps], Instruction]] = {
    "load": _parse_load,
    "store": _parse_store,
    "gemm": _parse_gemm,
    **{f"vec.{op.name.lower()}": _parse_vec(op) for op in VecOp},
    "vec.requant": _parse_requant,
    "vec.qadd": _parse_qadd,
    **{f"nop.{queue.name.lower()}": _parse_nop(queue) for queue in Queue},
    "finish": lambda ops, deps: Finish(deps),
    "loop": _parse_loop,
}


def format_instruction(insn: Instruction) -> str:
    """One instruction in canonical assembly, without a newline."""
    text = _FORMATTERS[type(insn)](insn)
    flags = insn.deps.names()
    return f"{text} | {', '.join(flags)}" if flags else text


def disassemble(program: Iterable[Instruction]) -> str:
    """A program in canonical assembly, one instruction per line, loop bodies indented two
    spaces per level and steps two more than their instruction."""
    lines = []
    open_loops: list[int] = []  # words left in each open loop's body, innermost last
    after: Instruction | None = None
    for insn in program:
        indent = "  " * len(open_loops)
        if isinstance(insn, Step):
            lines.append(f"{indent}  {_format_step(insn, after)}")
        else:
            lines.append(indent + format_instruction(insn))
            after = insn
        open_loops = [left - 1 for left in open_loops]
        while open_loops and open_loops[-1] <= 0:
            open_loops.pop()
        if isinstance(insn, Loop):
            open_loops.append(insn.body)
    return "".join(line + "\n" for line in lines)


def assemble(text: str, file: str = "<asm>") -> tuple[Instruction, ...]:
    """Parse assembly text into instructions.

    A problem raises :class:`SimulatorFault` (unit ``assembler``) with the index of the
    instruction being read and a location ``file:line:col``.
    """
    program: list[Instruction] = []
    after: Instruction | None = None  # the last instruction that is not a step
    for number, line in enumerate(text.splitlines(), start=1):
        code = line.split("#", 1)[0]
        if not code.strip():
            continue
        try:
            program.append(_parse_line(code, after))
            if not isinstance(program[-1], Step):
                after = program[-1]
        except _AsmError as err:
            raise SimulatorFault(err.message, index=len(program), unit="assembler",
                                 loc=SourceLoc(file, number, err.column)) from None
        except SimulatorFault as err:
            raise SimulatorFault(err.message, index=len(program), unit="assembler",
                                 loc=SourceLoc(file, number, 1)) from None
    return tuple(program)


def _parse_line(code: str, after: Instruction | None) -> Instruction:
    """Parse one instruction (comment already removed); ``after`` is the last instruction
    before it that is not a step (a step names its fields)."""
    body, _, flag_text = code.partition("|")
    head = re.match(r"\s*(\S+)", body)
    if head is None:
        raise _AsmError("expected a mnemonic before '|'", 1)
    mnemonic = head.group(1).lower()
    parser = _PARSERS.get(mnemonic)
    if mnemonic == "step":
        parser = lambda ops, deps: _parse_step(ops, deps, after)
    if parser is None:
        raise _AsmError(f"unknown mnemonic '{head.group(1)}' (known: "
                        f"{', '.join([*_PARSERS, 'step'])})", head.start(1) + 1)
    flags = _split(flag_text, len(body) + 1)
    for name, col in flags:
        if name not in DEP_NAMES:
            raise _AsmError(f"unknown dependency flag '{name}' "
                            f"(flags: {', '.join(DEP_NAMES)})", col)
    ops = _Operands(mnemonic, _split(body[head.end():], head.end()))
    names = {name for name, _ in flags}
    insn = parser(ops, Deps(*(name in names for name in DEP_NAMES)))
    ops.finish()
    return insn


def _split(text: str, offset: int) -> list[tuple[str, int]]:
    """Comma- or space-separated items with their 1-based columns (``offset`` = text start)."""
    return [(m.group(0), offset + m.start() + 1) for m in re.finditer(r"[^,\s]+", text)]
