"""The NPU's instruction set: instructions as values, and their 128-bit binary encoding.

Eight instructions, each a frozen dataclass: :class:`Load`, :class:`Store`, :class:`Gemm`,
:class:`Vec`, :class:`Requant`, :class:`QAdd`, :class:`Nop` and :class:`Finish`. Each carries
:class:`Deps`, the four dependency-token flags of the queue it runs in. Two more words drive
the fetch unit's loop sequencer rather than a queue: :class:`Loop` repeats the words after
it, and :class:`Step` advances the address fields of the instruction it follows on every
iteration of an enclosing loop (affine addressing per loop level, as VTA's GEMM and ALU
micro-op loops have). A word is 128 bits, little-endian: bits 0-3 the opcode, bits 4-7 the
flags (pop_prev, pop_next, push_prev, push_next), then the fields in the order of
:data:`LAYOUTS`, packed from bit 8 upwards; every bit above them is reserved and zero.
Building an instruction checks every field against its width and meaning, so a value that
exists always encodes; decoding checks the same, so a malformed word faults.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from ir.errors import SimulatorFault

E = TypeVar("E", bound=enum.IntEnum)

WORD_BYTES = 16
ADDRESS_BITS = 16
DRAM_BITS = 32
IMM_BITS = 32
MAX_SHIFT = 62  # (x * mult) fits int64 with room for the rounding term up to this shift
# REQUANT's zero point and bounds: 13-bit signed fields, room for 8- to 12-bit outputs.
REQUANT_BITS = 13


class Opcode(enum.IntEnum):
    """The 4-bit opcode. 0 is not an opcode, so a zeroed word faults."""

    LOAD = 1
    STORE = 2
    GEMM = 3
    VEC = 4
    NOP = 5
    FINISH = 6
    LOOP = 7
    STEP = 8
    REQUANT = 9
    QADD = 10


class Queue(enum.IntEnum):
    """The three instruction queues, in pipeline order: each one's prev and next neighbour."""

    LOAD = 0
    COMPUTE = 1
    STORE = 2


class Mem(enum.IntEnum):
    """The on-chip memories a LOAD can fill."""

    INP = 0
    WGT = 1
    ACC = 2


class VecOp(enum.IntEnum):
    """Vector-unit operations on accumulator rows."""

    ADD = 0
    MIN = 1
    MAX = 2
    MULSHIFT = 3
    CLIP = 4
    RELU = 5
    FILL = 6


class Operand(enum.IntEnum):
    """Where ADD/MIN/MAX take their second operand from."""

    TILE = 0  # ``rows`` acc rows starting at ``src``
    ROW = 1  # the one acc row ``src``, broadcast to every destination row
    IMM = 2  # the immediate ``imm``


@dataclass(frozen=True, slots=True)
class Deps:
    """Dependency-token flags, as in VTA.

    ``pop_prev``/``pop_next`` wait for and take a token from the previous/next queue before the
    instruction starts; ``push_prev``/``push_next`` give one to that queue once it retires.
    """

    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    @property
    def bits(self) -> int:
        """The 4-bit field: pop_prev is bit 0, pop_next 1, push_prev 2, push_next 3."""
        return (self.pop_prev | self.pop_next << 1 | self.push_prev << 2
                | self.push_next << 3)

    @classmethod
    def from_bits(cls, bits: int) -> Deps:
        """The flags of a 4-bit field."""
        return cls(bool(bits & 1), bool(bits & 2), bool(bits & 4), bool(bits & 8))

    def names(self) -> tuple[str, ...]:
        """The names of the flags that are set, in field order."""
        return tuple(n for n in DEP_NAMES if getattr(self, n))


DEP_NAMES = ("pop_prev", "pop_next", "push_prev", "push_next")
NO_DEPS = Deps()


def _fault(message: str) -> SimulatorFault:
    """A malformed-instruction fault; a caller that knows the index and unit re-raises it."""
    return SimulatorFault(message)


def _check_fields(insn: object, name: str, ranges: tuple[tuple[str, int, int], ...]) -> None:
    """Fault unless every (field, lo, hi) of ``insn`` is an int in [lo, hi]."""
    for field, lo, hi in ranges:
        value = getattr(insn, field)
        # type() is exact: it also turns away bools, which are ints.
        if type(value) is not int or not lo <= value <= hi:
            raise _fault(f"{name} requires {lo} <= {field} <= {hi}, got {value!r}")


def _check_enum(insn: str, name: str, value: Any, kind: type[E]) -> E:
    """The enum member ``value`` names, or a fault listing the members."""
    if type(value) is kind:
        return value
    try:
        return kind(value)
    except ValueError:
        members = ", ".join(f"{m.name.lower()}={m.value}" for m in kind)
        raise _fault(f"{insn} requires {name} in ({members}), got {value!r}") from None


def _check_no_deps(insn: str, deps: Deps) -> None:
    """Fault on any flag: loop and step words run in no queue."""
    if deps.bits:
        raise _fault(f"{insn} runs in no queue, so it takes no dependency flags, got "
                     f"{', '.join(deps.names())}")


def _check_deps(insn: str, deps: Deps, queue: Queue) -> None:
    """Fault on a flag naming a neighbour the queue does not have."""
    if queue is Queue.LOAD and (deps.pop_prev or deps.push_prev):
        raise _fault(f"{insn} runs in the load queue, which has no previous queue: "
                     "pop_prev/push_prev are not allowed")
    if queue is Queue.STORE and (deps.pop_next or deps.push_next):
        raise _fault(f"{insn} runs in the store queue, which has no next queue: "
                     "pop_next/push_next are not allowed")


_ADDR = (0, (1 << ADDRESS_BITS) - 1)
_COUNT = (1, (1 << ADDRESS_BITS) - 1)
_COUNT32 = (1, (1 << 32) - 1)
_DRAM = (0, (1 << DRAM_BITS) - 1)
# The range of each address field a Step may advance.
ADDRESS_RANGES = {"sram": _ADDR, "acc": _ADDR, "inp": _ADDR, "wgt": _ADDR, "dst": _ADDR,
                  "src": _ADDR, "dram": _DRAM}
_IMM = (-(1 << (IMM_BITS - 1)), (1 << (IMM_BITS - 1)) - 1)
LOOP_DEPTH = 8  # loops nest at most this deep (a step's 3-bit level)
# The integer fields of each instruction and their ranges.
_DMA_RANGES = (("sram", *_ADDR), ("dram", *_DRAM), ("rows", *_COUNT), ("cols", *_COUNT),
               ("stride", *_DRAM))
_GEMM_RANGES = (("acc", *_ADDR), ("inp", *_ADDR), ("wgt", *_ADDR), ("rows", *_COUNT),
                ("k", *_COUNT))
_VEC_RANGES = (("dst", *_ADDR), ("rows", *_COUNT), ("src", *_ADDR), ("imm", *_IMM),
               ("imm2", *_IMM))


@dataclass(frozen=True, slots=True)
class Load:
    """DRAM -> ``mem`` rows [sram, sram + rows).

    Reads ``rows`` rows of ``cols`` elements (int8, or int32 for acc) starting at byte
    ``dram``, ``stride`` bytes apart; each on-chip row is written whole, zero past ``cols``.
    With ``widen`` (acc only) the DRAM elements are int8, each sign-extended to an int32 acc
    element: a quantised tensor joins the accumulator tile at a quarter of the DMA bytes.
    """

    mem: Mem
    sram: int
    dram: int
    rows: int
    cols: int
    stride: int
    deps: Deps = NO_DEPS
    widen: bool = False

    queue = Queue.LOAD
    opcode = Opcode.LOAD

    def __post_init__(self) -> None:
        object.__setattr__(self, "mem", _check_enum("load", "mem", self.mem, Mem))
        _check_fields(self, "load", _DMA_RANGES)
        _check_deps("load", self.deps, self.queue)
        if type(self.widen) is not bool:
            raise _fault(f"load requires widen true or false, got {self.widen!r}")
        if self.widen and self.mem is not Mem.ACC:
            raise _fault(f"load with widen requires mem acc (int8 widened to int32), got "
                         f"{self.mem.name.lower()}")

    @property
    def element_bytes(self) -> int:
        """Bytes per DRAM element: 4 for an int32 acc load, else 1 (int8)."""
        return 4 if self.mem is Mem.ACC and not self.widen else 1


@dataclass(frozen=True, slots=True)
class Store:
    """acc rows [sram, sram + rows), first ``cols`` elements -> DRAM at ``dram``.

    Rows land ``stride`` bytes apart, as int32, or as int8 saturated to [-128, 127] when
    ``narrow``.
    """

    sram: int
    dram: int
    rows: int
    cols: int
    stride: int
    narrow: bool = False
    deps: Deps = NO_DEPS

    queue = Queue.STORE
    opcode = Opcode.STORE

    def __post_init__(self) -> None:
        _check_fields(self, "store", _DMA_RANGES)
        _check_deps("store", self.deps, self.queue)


@dataclass(frozen=True, slots=True)
class Gemm:
    """acc[acc + i] (+)= inp[inp + i, :k] @ wgt[wgt : wgt + k] for i < rows.

    int8 x int8 products summed into int32, wrapping; ``reset`` overwrites the accumulator
    rows instead of adding to them.
    """

    acc: int
    inp: int
    wgt: int
    rows: int
    k: int
    reset: bool = False
    deps: Deps = NO_DEPS

    queue = Queue.COMPUTE
    opcode = Opcode.GEMM

    def __post_init__(self) -> None:
        _check_fields(self, "gemm", _GEMM_RANGES)
        _check_deps("gemm", self.deps, self.queue)


@dataclass(frozen=True, slots=True)
class Vec:
    """A vector-unit operation on acc rows [dst, dst + rows), in place.

    ``add``/``min``/``max`` combine with an acc tile at ``src`` (``mode`` tile), one acc row at
    ``src`` broadcast (``mode`` row) or the immediate ``imm`` (``mode`` imm). ``mulshift``
    requantises with multiplier ``imm`` and shift ``imm2``; ``clip`` clamps to [imm, imm2];
    ``relu`` is max with 0; ``fill`` sets every element to ``imm`` (it reads nothing, so it
    starts an accumulator tile). Unused fields are zero, and ``mode`` is imm for ops without a
    second operand, so each operation has exactly one encoding.
    """

    op: VecOp
    dst: int
    rows: int
    src: int = 0
    mode: Operand = Operand.IMM
    imm: int = 0
    imm2: int = 0
    deps: Deps = NO_DEPS

    queue = Queue.COMPUTE
    opcode = Opcode.VEC

    def __post_init__(self) -> None:
        op = _check_enum("vec", "op", self.op, VecOp)
        mode = _check_enum("vec", "mode", self.mode, Operand)
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "mode", mode)
        name = f"vec.{op.name.lower()}"
        _check_fields(self, name, _VEC_RANGES)
        _check_deps(name, self.deps, self.queue)
        uses_src = op in (VecOp.ADD, VecOp.MIN, VecOp.MAX) and mode is not Operand.IMM
        if not uses_src and self.src:
            raise _fault(f"{name} with an immediate operand requires src = 0, got {self.src}")
        if op not in (VecOp.ADD, VecOp.MIN, VecOp.MAX) and mode is not Operand.IMM:
            raise _fault(f"{name} takes no acc operand: requires mode imm, got {mode.name}")
        if uses_src and (self.imm or self.imm2):
            raise _fault(f"{name} with an acc operand requires imm = imm2 = 0")
        if op in (VecOp.ADD, VecOp.MIN, VecOp.MAX, VecOp.RELU, VecOp.FILL) and self.imm2:
            raise _fault(f"{name} requires imm2 = 0, got {self.imm2}")
        if op is VecOp.RELU and self.imm:
            raise _fault(f"vec.relu requires imm = 0, got {self.imm}")
        if op is VecOp.MULSHIFT and not 0 <= self.imm2 <= MAX_SHIFT:
            raise _fault(f"vec.mulshift requires 0 <= shift <= {MAX_SHIFT}, got {self.imm2}")
        if op is VecOp.CLIP and self.imm > self.imm2:
            raise _fault(f"vec.clip requires lo <= hi, got lo={self.imm} hi={self.imm2}")


_REQUANT_BOUND = (-(1 << (REQUANT_BITS - 1)), (1 << (REQUANT_BITS - 1)) - 1)
_REQUANT_RANGES = (("dst", *_ADDR), ("src", *_ADDR), ("rows", *_COUNT), ("scale", *_DRAM),
                   ("zp", *_REQUANT_BOUND), ("lo", *_REQUANT_BOUND), ("hi", *_REQUANT_BOUND))
_F32_EXPONENT = 0x7F800000  # all exponent bits set: an infinity or a NaN


@dataclass(frozen=True, slots=True)
class Requant:
    """Requantise acc rows [dst, dst + rows) in place, as onnxruntime's integer kernels do:
    ``clip(round_half_even(clamp(f32(x) * scale, -2**22, 2**22)) + zp, lo, hi)``.

    The scale is float32: the immediate ``scale`` (its IEEE-754 bits) for the whole tile, or,
    with ``per_channel``, the acc row ``src`` read as float32 bits, one scale per column and
    broadcast over the rows (``scale`` is then 0, as ``src`` is without it). The product is
    one float32 rounding; the clamp to +-2**22 keeps it where float32 holds every integer, and
    changes nothing for bounds within 2**22 of the zero point, which 13-bit fields are.
    """

    dst: int
    rows: int
    zp: int
    lo: int
    hi: int
    scale: int = 0
    src: int = 0
    per_channel: bool = False
    deps: Deps = NO_DEPS

    queue = Queue.COMPUTE
    opcode = Opcode.REQUANT

    def __post_init__(self) -> None:
        _check_fields(self, "vec.requant", _REQUANT_RANGES)
        _check_deps("vec.requant", self.deps, self.queue)
        if type(self.per_channel) is not bool:
            raise _fault(f"vec.requant requires per_channel true or false, got "
                         f"{self.per_channel!r}")
        if self.lo > self.hi:
            raise _fault(f"vec.requant requires lo <= hi, got lo={self.lo} hi={self.hi}")
        if self.per_channel and self.scale:
            raise _fault(f"vec.requant with a scale row requires scale = 0, got "
                         f"{self.scale:#x}")
        if not self.per_channel and self.src:
            raise _fault(f"vec.requant with an immediate scale requires src = 0, got "
                         f"{self.src}")
        if self.scale & _F32_EXPONENT == _F32_EXPONENT:
            raise _fault(f"vec.requant requires a finite float32 scale, got bits "
                         f"{self.scale:#010x}")


_QADD_RANGES = (("dst", *_ADDR), ("src", *_ADDR), ("par", *_ADDR), ("rows", *_COUNT),
                ("lo", *_REQUANT_BOUND), ("hi", *_REQUANT_BOUND))


@dataclass(frozen=True, slots=True)
class QAdd:
    """Add two quantised tiles as onnxruntime's QLinearAdd does, in place on acc rows
    [dst, dst + rows): with ``a`` = acc[dst + r], ``b`` = acc[src + r] (both int8 values held
    as int32) and the float32 rows ``ratio_a`` = acc[par], ``ratio_b`` = acc[par + 1],
    ``offset`` = acc[par + 2] (one value per column, broadcast over the rows),
    ``clip(round_half_even(fma(f32(a), ratio_a, fma(f32(b), ratio_b, offset))), lo, hi)``.

    ``fma`` is one float32 rounding of the exact ``x * y + z``; the inner one is computed
    first. onnxruntime's kernel gets the same value (MLAS's QLinearAdd, its multiplies and
    adds contracted into fused multiply-adds): ``ratio_x = x_scale / y_scale`` and ``offset =
    y_zp - fma(ratio_a, a_zp, ratio_b * b_zp)``, all in float32. Runs on the requantisation
    stage (``machine.requant``).
    """

    dst: int
    src: int
    par: int
    rows: int
    lo: int
    hi: int
    deps: Deps = NO_DEPS

    queue = Queue.COMPUTE
    opcode = Opcode.QADD

    def __post_init__(self) -> None:
        _check_fields(self, "vec.qadd", _QADD_RANGES)
        _check_deps("vec.qadd", self.deps, self.queue)
        if self.lo > self.hi:
            raise _fault(f"vec.qadd requires lo <= hi, got lo={self.lo} hi={self.hi}")


@dataclass(frozen=True, slots=True)
class Nop:
    """Does nothing in ``queue`` but pop and push its tokens: a pure synchronisation."""

    queue: Queue
    deps: Deps = NO_DEPS

    opcode = Opcode.NOP

    def __post_init__(self) -> None:
        queue = _check_enum("nop", "queue", self.queue, Queue)
        object.__setattr__(self, "queue", queue)
        _check_deps("nop", self.deps, queue)


@dataclass(frozen=True, slots=True)
class Finish:
    """Ends the program; must be its last instruction. Runs in the compute queue."""

    deps: Deps = NO_DEPS

    queue = Queue.COMPUTE
    opcode = Opcode.FINISH


@dataclass(frozen=True, slots=True)
class Loop:
    """Repeat the ``body`` words after this one ``count`` times.

    The body holds instructions, their :class:`Step` words and nested loops, and lies inside
    the body of any loop around it. A loop runs in no queue: the fetch unit expands it, handing
    each iteration's instructions to their queues as if the program spelled them out, so it
    carries no dependency flags (each body instruction carries its own, used on every
    iteration).
    """

    count: int
    body: int
    deps: Deps = NO_DEPS

    queue = None
    opcode = Opcode.LOOP

    def __post_init__(self) -> None:
        _check_fields(self, "loop", (("count", *_COUNT32), ("body", *_COUNT)))
        _check_no_deps("loop", self.deps)


@dataclass(frozen=True, slots=True)
class Step:
    """Per iteration of the enclosing loop ``loop`` (0: the innermost), the address fields of
    the instruction this word follows advance by ``d0``, ``d1``, ``d2``, in the order of
    :data:`STEP_FIELDS` (a load's sram and dram, a GEMM's acc, inp and wgt, ...).

    An instruction inside loops i_0 (outermost) .. i_n (innermost) with steps s_l for loop
    level l runs on iteration (i_0, .., i_n) with ``field + sum(s_l * i_(n-l))``. A step
    advances something: not all of its deltas are zero.
    """

    loop: int
    d0: int
    d1: int = 0
    d2: int = 0
    deps: Deps = NO_DEPS

    queue = None
    opcode = Opcode.STEP

    def __post_init__(self) -> None:
        _check_fields(self, "step", (("loop", 0, LOOP_DEPTH - 1), ("d0", *_IMM), ("d1", *_IMM),
                                     ("d2", *_IMM)))
        _check_no_deps("step", self.deps)
        if not (self.d0 or self.d1 or self.d2):
            raise _fault("step requires a nonzero delta, got 0, 0, 0")

    @property
    def deltas(self) -> tuple[int, int, int]:
        """(d0, d1, d2)."""
        return (self.d0, self.d1, self.d2)


Instruction = Load | Store | Gemm | Vec | Requant | QAdd | Nop | Finish | Loop | Step

# The address fields a Step advances, per instruction class, in delta order.
STEP_FIELDS: dict[type, tuple[str, ...]] = {
    Load: ("sram", "dram"), Store: ("sram", "dram"), Gemm: ("acc", "inp", "wgt"),
    Vec: ("dst", "src"), Requant: ("dst", "src"), QAdd: ("dst", "src", "par"),
}

# Per instruction class: (field, bit width, signed), packed from bit 8 upwards in this order.
# A load's widen bit comes last, so the words of loads without it are those of old programs.
LAYOUTS: dict[type, tuple[tuple[str, int, bool], ...]] = {
    Load: (("mem", 2, False), ("sram", 16, False), ("rows", 16, False), ("cols", 16, False),
           ("dram", 32, False), ("stride", 32, False), ("widen", 1, False)),
    Store: (("narrow", 1, False), ("sram", 16, False), ("rows", 16, False),
            ("cols", 16, False), ("dram", 32, False), ("stride", 32, False)),
    Gemm: (("reset", 1, False), ("acc", 16, False), ("inp", 16, False), ("wgt", 16, False),
           ("rows", 16, False), ("k", 16, False)),
    Vec: (("op", 3, False), ("mode", 2, False), ("dst", 16, False), ("src", 16, False),
          ("rows", 16, False), ("imm", 32, True), ("imm2", 32, True)),
    Requant: (("per_channel", 1, False), ("dst", 16, False), ("src", 16, False),
              ("rows", 16, False), ("scale", 32, False), ("zp", REQUANT_BITS, True),
              ("lo", REQUANT_BITS, True), ("hi", REQUANT_BITS, True)),
    QAdd: (("dst", 16, False), ("src", 16, False), ("par", 16, False), ("rows", 16, False),
           ("lo", REQUANT_BITS, True), ("hi", REQUANT_BITS, True)),
    Nop: (("queue", 2, False),),
    Finish: (),
    Loop: (("count", 32, False), ("body", 16, False)),
    Step: (("loop", 3, False), ("d0", 32, True), ("d1", 32, True), ("d2", 32, True)),
}
_CLASSES = {cls.opcode: cls for cls in LAYOUTS}
_BOOL_FIELDS = {"narrow", "reset", "per_channel", "widen"}


def encode_word(insn: Instruction) -> int:
    """The 128-bit word of one instruction."""
    word = int(insn.opcode) | insn.deps.bits << 4
    pos = 8
    for name, width, _signed in LAYOUTS[type(insn)]:
        word |= (int(getattr(insn, name)) & ((1 << width) - 1)) << pos
        pos += width
    return word


def decode_word(word: int, index: int | None = None) -> Instruction:
    """The instruction a 128-bit word encodes; a malformed word raises SimulatorFault."""
    try:
        return _decode(word)
    except SimulatorFault as err:
        raise SimulatorFault(err.message, index=index, unit="decode") from None


def _decode(word: int) -> Instruction:
    """Decode without an index (see :func:`decode_word`)."""
    if not 0 <= word < 1 << (8 * WORD_BYTES):
        raise _fault(f"an instruction word has {8 * WORD_BYTES} bits, got {word:#x}")
    opcode = word & 0xF
    cls = _CLASSES.get(opcode)  # type: ignore[call-overload]
    if cls is None:
        raise _fault(f"unknown opcode {opcode} (opcodes: "
                     + ", ".join(f"{o.name.lower()}={o.value}" for o in Opcode) + ")")
    args: dict[str, object] = {"deps": Deps.from_bits(word >> 4 & 0xF)}
    pos = 8
    for name, width, signed in LAYOUTS[cls]:
        value = word >> pos & ((1 << width) - 1)
        if signed and value >> (width - 1):
            value -= 1 << width
        args[name] = bool(value) if name in _BOOL_FIELDS else value
        pos += width
    if word >> pos:
        raise _fault(f"{cls.__name__.lower()} has reserved bits {pos}-127 set: {word:#034x}")
    return cls(**args)


def encode(program: Iterable[Instruction]) -> bytes:
    """The binary form of a program: 16 little-endian bytes per instruction."""
    return b"".join(encode_word(insn).to_bytes(WORD_BYTES, "little") for insn in program)


def decode(data: bytes) -> tuple[Instruction, ...]:
    """The program a binary form encodes; a malformed word faults with its index."""
    if len(data) % WORD_BYTES:
        raise SimulatorFault(f"a program is a whole number of {WORD_BYTES}-byte words, got "
                             f"{len(data)} bytes", unit="decode")
    return tuple(decode_word(int.from_bytes(data[i:i + WORD_BYTES], "little"), i // WORD_BYTES)
                 for i in range(0, len(data), WORD_BYTES))
