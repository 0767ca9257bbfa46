"""What an emit template may say, per backend: a small grammar each, checked at load time.

A template is data, not code: a backend builds its output from it, so whatever a template may
contain ends up in C++ that g++ compiles and loads, in LLVM IR, or in an NPU program. Each
grammar admits one instruction of the forms its backend needs, made of literal tokens and
``{operand}`` placeholders, and nothing else: no second statement, no comment, no
preprocessor line, no call of a name outside an allowlist. The values a backend fills in at
render time are checked too (:attr:`Grammar.value`), so even a backend bug cannot add text.

- ``cuda``: ``NAME(arg, ...);`` with NAME in :data:`CUDA_FUNCTIONS`, each argument a
  placeholder, a number or one of :data:`CUDA_ENUMERATORS`.
- ``llvm`` (LLVM IR, every CPU target's): ``[{r} =] call TYPE @llvm.ARCH.name(TYPE value,
  ...)`` with ARCH in :data:`LLVM_ARCHES`; ``{r} = load TYPE, ptr {p}[, align N]``; ``store
  TYPE value, ptr {p}[, align N]``; ``{r} = bitcast TYPE value to TYPE``. A type is ``iN``,
  ``<N x T>`` (at most 8192 bits: one register of the widest a CPU target may describe),
  ``half``, ``bfloat``, ``float``, ``double``, ``ptr`` or a placeholder; N in ``align N`` a
  power of two, at most 4096. A call's result may also be ``[N x <M x T>]``, N (2 to 4)
  registers, for an intrinsic that returns that many vectors as a literal struct (AArch64's
  ``ld1x4``), which a template cannot spell since braces are placeholders.
- ``npu``: one instruction of the NPU assembler (:mod:`simulator.assembler`), read by the
  assembler itself, without dependency flags or comment.
- any other backend (one tensorize does not emit): ``mnemonic operand, ...``, each operand a
  placeholder, number or word, ``[operand]`` or ``key=operand``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from intrinsics import limits
from ir.errors import SimulatorFault
from simulator.assembler import assemble

# The device functions a cuda template may call, and the enumerators it may pass. A family
# that needs another API (mma.sync, ldmatrix wrappers) adds its names here.
CUDA_FUNCTIONS = (
    "nvcuda::wmma::mma_sync",
    "nvcuda::wmma::load_matrix_sync",
    "nvcuda::wmma::store_matrix_sync",
    "nvcuda::wmma::fill_fragment",
    # The mma.sync family's device helpers (targets/cuda/ptx.py), one inline PTX instruction
    # each.
    "tz_ldmatrix_x4", "tz_ldmatrix_x2", "tz_ldmatrix_x2_trans",
    "tz_mma_m16n8k16_f16_f16_f32", "tz_mma_m16n8k16_bf16_bf16_f32",
    "tz_mma_m16n8k32_s8_s8_s32", "tz_mma_m16n8k32_u8_u8_s32",
    "tz_mma_m16n8k32_u8_s8_s32", "tz_mma_m16n8k32_s8_u8_s32",
    "tz_mma_m16n8k32_e4m3_e4m3_f32", "tz_mma_m16n8k32_e5m2_e5m2_f32",
    "tz_mma_m16n8k32_e4m3_e5m2_f32", "tz_mma_m16n8k32_e5m2_e4m3_f32",
    "tz_mma_m16n8k64_s4_s4_s32", "tz_mma_m16n8k64_u4_u4_s32",
    "tz_mma_m16n8k64_s4_u4_s32", "tz_mma_m16n8k64_u4_s4_s32",
    "tz_lds_a_m16k64_4bit", "tz_lds_b_k64n8_4bit",
    "tz_mma_store_m16n8", "tz_mma_fill_m16n8",
    # The Hopper family's (targets/cuda/wgmma.py): wgmma, its descriptors and accumulators.
    *(f"tz_wgmma_m64n{n}k{k}_{t}_{t}_{acc}" for n in (64, 128)
      for k, t, acc in ((16, "f16", "f32"), (16, "bf16", "f32"), (32, "s8", "s32"),
                        (32, "e4m3", "f32"), (32, "e5m2", "f32"))),
    "tz_wgmma_desc", "tz_wgmma_store_m64n64", "tz_wgmma_store_m64n128",
    "tz_wgmma_fill_m64n64", "tz_wgmma_fill_m64n128",
)
CUDA_ENUMERATORS = ("nvcuda::wmma::mem_row_major", "nvcuda::wmma::mem_col_major")
# Functions the CUDA backend's own index and value expressions call (its prelude's helpers
# and the math library), the only calls a value filled into a cuda template may hold.
CUDA_VALUE_CALLS = ("tz_floordiv", "tz_floormod", "tz_min", "tz_max", "expf", "logf",
                    "sqrtf", "tanhf", "erff", "fabsf", "rintf")

# The architectures whose LLVM intrinsics (``@llvm.<arch>.*``) an LLVM IR template may call.
LLVM_ARCHES = ("aarch64", "arm", "x86")
LLVM_FLOAT_TYPES = ("half", "bfloat", "float", "double")


class TemplateError(ValueError):
    """A template outside its backend's grammar; ``offset`` is where, in the template text
    (None: the whole template), and ``length`` how many characters the problem spans."""

    def __init__(self, message: str, offset: int | None = None, length: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.length = length


@dataclass(frozen=True, slots=True)
class Piece:
    """A stretch of a template: literal text, or a placeholder (``text`` is its name, as in
    ``A`` or ``A.ld``); it spans ``[offset, end)`` of the template."""

    text: str
    offset: int
    end: int
    placeholder: bool


@dataclass(frozen=True, slots=True)
class Grammar:
    """One backend's template grammar: ``check`` raises TemplateError for a template outside
    it; ``value`` says whether a filled-in value is admitted, ``values`` says which are."""

    check: Callable[[Sequence[Piece]], None]
    value: Callable[[str], bool]
    values: str


# ---- tokens ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Token:
    """A lexed token: ``kind`` is name, number, global (``@llvm...``), punct or placeholder."""

    kind: str
    text: str
    offset: int


_TOKEN = re.compile(r"""
    (?P<space>[ ]+)
  | (?P<number>0[xX][0-9a-fA-F]+[uUlL]*|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?[fFuUlL]*)
  | (?P<global>@[A-Za-z0-9_.$-]+)
  | (?P<name>[A-Za-z_]\w*)
  | (?P<punct>::|[!-~])
""", re.VERBOSE | re.ASCII)


def _lex(pieces: Sequence[Piece]) -> list[Token]:
    """The tokens of a template, spaces dropped; a line break or control character fails."""
    tokens = []
    for piece in pieces:
        if piece.placeholder:
            tokens.append(Token("placeholder", f"{{{piece.text}}}", piece.offset))
            continue
        at = 0
        while at < len(piece.text):
            match = _TOKEN.match(piece.text, at)
            if match is None:
                char = piece.text[at]
                raise TemplateError(f"a template requires one line of printable ASCII "
                                    f"text, got {char!r}", piece.offset + at)
            if match.lastgroup != "space":
                tokens.append(Token(match.lastgroup or "", match.group(), piece.offset + at))
            at = match.end()
    return tokens


def _shown(token: Token | None) -> str:
    if token is None:
        return "the end of the template"
    if token.kind == "placeholder":
        return f"placeholder {token.text}"
    return f"'{token.text}'"


class _Cursor:
    """Walks a token list for a recursive-descent grammar; failures name what was wanted."""

    def __init__(self, who: str, tokens: list[Token], length: int) -> None:
        self.who = who
        self.tokens = tokens
        self.length = length
        self.at = 0

    def peek(self, ahead: int = 0) -> Token | None:
        index = self.at + ahead
        return self.tokens[index] if index < len(self.tokens) else None

    def fail(self, wanted: str) -> TemplateError:
        """The error for finding the next token where ``wanted`` goes."""
        token = self.peek()
        offset = token.offset if token is not None else self.length
        length = len(token.text) if token is not None else 1
        return TemplateError(f"{self.who} requires {wanted}, got {_shown(token)}", offset,
                             length)

    def take(self, wanted: str, *texts: str, kind: str | None = None) -> Token:
        """The next token, which must have one of ``texts`` (or be of ``kind``)."""
        token = self.peek()
        if token is None or (texts and token.text not in texts) or \
                (kind is not None and token.kind != kind):
            raise self.fail(wanted)
        self.at += 1
        return token

    def accept(self, text: str) -> bool:
        """Take the next token if it is ``text``."""
        token = self.peek()
        if token is not None and token.text == text and token.kind == "punct":
            self.at += 1
            return True
        return False

    def accept_name(self, text: str) -> bool:
        """Take the next token if it is the word ``text``."""
        token = self.peek()
        if token is not None and token.text == text and token.kind == "name":
            self.at += 1
            return True
        return False

    def end(self, wanted: str) -> None:
        if self.peek() is not None:
            raise self.fail(wanted)


# ---- cuda: one call of an allowlisted device function ----------------------------------------

def _qualified(cursor: _Cursor, wanted: str) -> tuple[str, Token]:
    """``a::b::c`` and its first token."""
    first = cursor.take(wanted, kind="name")
    parts = [first.text]
    while cursor.accept("::"):
        parts.append(cursor.take(wanted, kind="name").text)
    return "::".join(parts), first


def _check_cuda(pieces: Sequence[Piece]) -> None:
    cursor = _Cursor("a cuda template", _lex(pieces), _length(pieces))
    functions = f"a call of {', '.join(CUDA_FUNCTIONS)}"
    name, first = _qualified(cursor, functions)
    if name not in CUDA_FUNCTIONS:
        raise TemplateError(f"a cuda template requires {functions}, got '{name}'",
                            first.offset, len(name))
    cursor.take("'(' after the function name", "(")
    wanted = f"an argument: a placeholder, a number or one of {', '.join(CUDA_ENUMERATORS)}"
    if not cursor.accept(")"):
        while True:
            _cuda_argument(cursor, wanted)
            if cursor.accept(")"):
                break
            cursor.take("',' or ')' after an argument", ",")
    cursor.take("';' ending the call", ";")
    cursor.end("one statement, ending at its ';'")


def _cuda_argument(cursor: _Cursor, wanted: str) -> None:
    token = cursor.peek()
    if token is not None and token.kind == "placeholder":
        cursor.at += 1
    elif token is not None and (token.kind == "number" or token.text == "-"):
        _number(cursor, wanted)
    elif token is not None and token.kind == "name":
        name, first = _qualified(cursor, wanted)
        if name not in CUDA_ENUMERATORS:
            raise TemplateError(f"a cuda template requires {wanted}, got '{name}'",
                                first.offset, len(name))
    else:
        raise cursor.fail(wanted)


def _number(cursor: _Cursor, wanted: str) -> None:
    cursor.accept("-")
    cursor.take(wanted, kind="number")


_CUDA_VALUE = re.compile(r"""
    [ ]+
  | 0[xX][0-9a-fA-F]*\.?[0-9a-fA-F]*(?:[pP][+-]?\d+)?[fFuUlL]*
  | \d+(?:\.\d*)?(?:[eE][+-]?\d+)?[fFuUlL]*
  | [A-Za-z_]\w*
  | &&|\|\||<=|>=|==|!=|[-+*/%&|!~^<>?:()\[\],]
""", re.VERBOSE | re.ASCII)
_CALL = re.compile(r"([A-Za-z_]\w*) *(?:<[A-Za-z_ ]*> *)?\(", re.ASCII)
_CLOSING = {"(": ")", "[": "]"}


def _cuda_value(text: str) -> bool:
    """One C++ expression of the backend's making: names, numbers, operators and balanced
    brackets; no statement, block, comment, string or preprocessor character, no top-level
    comma, and calls only of :data:`CUDA_VALUE_CALLS`."""
    if not text.strip() or "//" in text or "/*" in text:
        return False
    at = 0
    stack: list[str] = []
    while at < len(text):
        match = _CUDA_VALUE.match(text, at)
        if match is None:
            return False
        token = match.group()
        if token in _CLOSING:
            stack.append(_CLOSING[token])
        elif token in (")", "]"):
            if not stack or stack.pop() != token:
                return False
        elif token == "," and not stack:
            return False
        at = match.end()
    return not stack and all(m.group(1) in CUDA_VALUE_CALLS for m in _CALL.finditer(text))


# ---- arm: one LLVM IR instruction ------------------------------------------------------------

_INT_TYPE = re.compile(r"i([1-9]\d{0,3})\Z", re.ASCII)
_LLVM_FUNCTION = re.compile(rf"@llvm\.({'|'.join(LLVM_ARCHES)})(\.[A-Za-z0-9_]+)+\Z",
                            re.ASCII)
_TYPES = "a type (iN, <N x T>, half, bfloat, float, double, ptr or a placeholder)"


def _check_llvm(pieces: Sequence[Piece]) -> None:
    cursor = _Cursor("an LLVM IR template", _lex(pieces), _length(pieces))
    first, second = cursor.peek(), cursor.peek(1)
    has_result = first is not None and first.kind == "placeholder" and \
        second is not None and second.text == "="
    if has_result:
        cursor.at += 2
    opcode = cursor.take("an instruction: call, load, store or bitcast", "call", "load",
                         "store", "bitcast", kind="name")
    if opcode.text in ("load", "bitcast") and not has_result:
        raise TemplateError(f"an LLVM IR {opcode.text} requires a result ('{{dst}} = "
                            f"{opcode.text} ...'), got none", opcode.offset, len(opcode.text))
    if opcode.text == "store" and has_result:
        raise TemplateError("an LLVM IR store requires no result, got '... = store'",
                            opcode.offset, len(opcode.text))
    if opcode.text == "call":
        _llvm_call(cursor, has_result)
    elif opcode.text == "load":
        _llvm_type(cursor)
        cursor.take("',' after the loaded type", ",")
        _llvm_pointer(cursor)
    elif opcode.text == "store":
        _llvm_type(cursor)
        _llvm_value(cursor)
        cursor.take("',' after the stored value", ",")
        _llvm_pointer(cursor)
    else:
        _llvm_type(cursor)
        _llvm_value(cursor)
        cursor.take("'to' and the result type", "to", kind="name")
        _llvm_type(cursor)
    cursor.end("one instruction, ending after its last operand")


def _llvm_call(cursor: _Cursor, has_result: bool) -> None:
    if has_result and cursor.accept("["):
        _llvm_registers(cursor)
    elif has_result or not cursor.accept_name("void"):
        _llvm_type(cursor)
    wanted = f"an LLVM intrinsic @llvm.<arch>.<name> (arch one of {', '.join(LLVM_ARCHES)})"
    function = cursor.peek()
    if function is None or function.kind != "global" or \
            not _LLVM_FUNCTION.match(function.text):
        raise cursor.fail(wanted)
    cursor.at += 1
    cursor.take("'(' after the intrinsic's name", "(")
    if cursor.accept(")"):
        return
    while True:
        _llvm_type(cursor)
        _llvm_value(cursor)
        if cursor.accept(")"):
            return
        cursor.take("',' or ')' after an argument", ",")


def _llvm_registers(cursor: _Cursor) -> None:
    """The rest of ``[N x <M x T>]`` after its ``[``: a call's result of N registers (a
    multi-register load, whose intrinsic returns the literal struct of N vectors that
    braces, reserved for placeholders, cannot spell); N from 2 to 4."""
    count = cursor.take("a register count in [N x <M x T>]", kind="number")
    if count.text not in ("2", "3", "4"):
        raise TemplateError(f"[N x <M x T>] requires N of 2, 3 or 4 registers, got "
                            f"{count.text}", count.offset, len(count.text))
    cursor.take("'x' in [N x <M x T>]", "x", kind="name")
    token = cursor.peek()
    if token is None or token.text != "<":
        raise cursor.fail("a vector type <M x T> in [N x <M x T>]")
    _llvm_type(cursor)
    cursor.take("']' closing [N x <M x T>]", "]")


def _llvm_type(cursor: _Cursor) -> None:
    token = cursor.peek()
    if token is not None and token.kind == "placeholder":
        cursor.at += 1
    elif token is not None and token.text == "<":
        cursor.at += 1
        count = cursor.take("a lane count in <N x T>", kind="number")
        cursor.take("'x' in <N x T>", "x", kind="name")
        lane = cursor.peek()
        if lane is None or not (_INT_TYPE.match(lane.text) or lane.text in LLVM_FLOAT_TYPES):
            raise cursor.fail("a lane type (iN, half, bfloat, float, double) in <N x T>")
        cursor.at += 1
        closing = cursor.take("'>' closing <N x T>", ">")
        _check_vector_size(token, count, lane, closing)
    elif token is not None and token.kind == "name" and (
            _INT_TYPE.match(token.text) or token.text in (*LLVM_FLOAT_TYPES, "ptr")):
        cursor.at += 1
    else:
        raise cursor.fail(_TYPES)


_LANE_BITS = {"half": 16, "bfloat": 16, "float": 32, "double": 64}
# A vector in a template is one register's value: at most the widest register a CPU target
# may describe (its vector_bytes), so the code generator never builds a larger one.
_MAX_VECTOR_BITS = limits.MAX_VECTOR_BYTES * 8


def _check_vector_size(start: Token, count: Token, lane: Token, end: Token) -> None:
    """``<N x T>``: N a decimal count of lanes, all of them at most :data:`_MAX_VECTOR_BITS`."""
    lanes = int(count.text) if count.text.isdigit() else 0
    bits = _LANE_BITS.get(lane.text) or int(lane.text[1:])
    if lanes < 1 or lanes * bits > _MAX_VECTOR_BITS:
        raise TemplateError(f"<N x T> requires N lanes, 1 to {_MAX_VECTOR_BITS} bits in "
                            f"all (the widest register a CPU target describes), got "
                            f"<{count.text} x {lane.text}>", start.offset,
                            end.offset + len(end.text) - start.offset)


def _llvm_value(cursor: _Cursor) -> None:
    wanted = "a value: a placeholder, a number or zeroinitializer"
    token = cursor.peek()
    if token is not None and (token.kind == "placeholder" or token.text == "zeroinitializer"):
        cursor.at += 1
    elif token is not None and (token.kind == "number" or token.text == "-"):
        _number(cursor, wanted)
    else:
        raise cursor.fail(wanted)


def _llvm_pointer(cursor: _Cursor) -> None:
    cursor.take("'ptr' and a placeholder pointer", "ptr", kind="name")
    cursor.take("a placeholder standing for the address", kind="placeholder")
    if not cursor.accept(","):
        return
    cursor.take("'align N'", "align", kind="name")
    amount = cursor.take("a power of two after 'align'", kind="number")
    value = int(amount.text) if amount.text.isdigit() else 0
    if value < 1 or value & (value - 1):
        raise TemplateError(f"align requires a power of two, got {amount.text}",
                            amount.offset, len(amount.text))
    if value > limits.MAX_CPU_ALIGNMENT:
        raise TemplateError(f"align requires at most {limits.MAX_CPU_ALIGNMENT} (a page), "
                            f"got {amount.text}", amount.offset, len(amount.text))


_LLVM_VALUE = re.compile(
    rf"%?[A-Za-z_][\w.]*|-?\d+|<\d+ x (i\d+|{'|'.join(LLVM_FLOAT_TYPES)})>", re.ASCII)


# ---- npu: one instruction, read by the NPU's own assembler -----------------------------------

_NPU_TEXT = re.compile(r"[A-Za-z0-9_.,\[\]= -]*")
_NPU_PROBE = "1"  # what each placeholder becomes while the assembler reads the template


def _check_npu(pieces: Sequence[Piece]) -> None:
    rendered = ""
    starts: list[tuple[int, Piece]] = []  # (offset in the rendered line, piece)
    for piece in pieces:
        starts.append((len(rendered), piece))
        if piece.placeholder:
            rendered += _NPU_PROBE
            continue
        admitted = _NPU_TEXT.match(piece.text)
        end = admitted.end() if admitted is not None else 0
        if end < len(piece.text):
            raise TemplateError("an npu template requires one instruction of letters, digits, "
                                "spaces and , [ ] = - . _ (no comment, dependency flags or "
                                f"second line), got {piece.text[end]!r}", piece.offset + end)
        rendered += piece.text
    try:
        program = assemble(rendered)
    except SimulatorFault as err:
        column = err.loc.col if err.loc is not None else 1
        # The fault names the program position; a template is one instruction, so drop it.
        reason = err.message.removeprefix(f"instruction {err.index}, unit {err.unit}: ")
        raise TemplateError(f"the NPU assembler cannot read it: {reason}",
                            _template_offset(starts, column - 1)) from None
    if len(program) != 1:
        raise TemplateError(f"an npu template requires one instruction, got {len(program)}")


def _template_offset(starts: list[tuple[int, Piece]], position: int) -> int:
    """Where a position of the rendered line comes from in the template."""
    for start, piece in reversed(starts):
        if start <= position:
            return piece.offset if piece.placeholder else piece.offset + position - start
    return 0


_NPU_VALUE = re.compile(r"-?(0[xX][0-9a-fA-F]+|\d+)", re.ASCII)


# ---- any other backend: an assembly-style instruction ----------------------------------------

def _check_generic(pieces: Sequence[Piece]) -> None:
    cursor = _Cursor("a template", _lex(pieces), _length(pieces))
    mnemonic = "a mnemonic (words joined by '.')"
    cursor.take(mnemonic, kind="name")
    while cursor.accept("."):
        cursor.take(mnemonic, kind="name")
    if cursor.peek() is None:
        return
    while True:
        _generic_operand(cursor)
        if cursor.peek() is None:
            return
        cursor.take("',' between operands", ",")


def _generic_operand(cursor: _Cursor) -> None:
    if cursor.accept("["):
        _generic_atom(cursor)
        cursor.take("']'", "]")
        return
    after = cursor.peek(1)
    if after is not None and after.text == "=":
        cursor.take("a field name before '='", kind="name")
        cursor.at += 1
    _generic_atom(cursor)


def _generic_atom(cursor: _Cursor) -> None:
    wanted = "an operand: a placeholder, a number, a word, [operand] or key=operand"
    token = cursor.peek()
    if token is not None and token.kind in ("placeholder", "name"):
        cursor.at += 1
    elif token is not None and (token.kind == "number" or token.text == "-"):
        _number(cursor, wanted)
    else:
        raise cursor.fail(wanted)


_WORD_VALUE = re.compile(r"%?[A-Za-z_][\w.]*|-?\d+", re.ASCII)


def _length(pieces: Sequence[Piece]) -> int:
    return pieces[-1].end if pieces else 0


CUDA = Grammar(_check_cuda, _cuda_value,
               "a C++ expression of names, numbers, operators and brackets")
LLVM_IR = Grammar(_check_llvm, lambda v: _LLVM_VALUE.fullmatch(v) is not None,
                  "an LLVM value name, a number or a type")
NPU = Grammar(_check_npu, lambda v: _NPU_VALUE.fullmatch(v) is not None,
              "an integer")
GENERIC = Grammar(_check_generic, lambda v: _WORD_VALUE.fullmatch(v) is not None,
                  "a word or an integer")

# Code generator -> grammar. ``llvm`` is the one CPU code generator's: every CPU target's
# templates (AArch64, x86, any a vendor describes) are LLVM IR. A backend not listed gets
# GENERIC.
GRAMMARS = {"cuda": CUDA, "llvm": LLVM_IR, "npu": NPU}


def grammar_for(backend: str) -> Grammar:
    """The grammar of ``backend``'s templates."""
    return GRAMMARS.get(backend, GENERIC)
