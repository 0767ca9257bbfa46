"""The shape of an intrinsic description: which fields each record has, and their types.

The tables here are the single statement of the YAML format (``docs/intrinsics.md`` explains
each field). :func:`check` walks a :class:`~intrinsics.source.YNode` tree against a type and
records every problem it finds (unknown field, with a "did you mean"; missing field; wrong
type) at the line it concerns. It does not stop at the first problem.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from intrinsics import limits
from intrinsics.gpu_target import check_gpu_section
from intrinsics.source import Findings, YNode
from ir import dtypes

ROLES = ("input", "output", "accumulator")
# How code of a CPU target can run here: in this process through LLVM's JIT on a host of its
# architecture, under the in-process AArch64 emulator, or as a static AArch64 executable under
# qemu-user in a child process.
ENGINES = ("native", "unicorn", "qemu-user")
DETECTORS = ("llvm", "cpuinfo")
# Where a CPU target's GEMM epilogue runs (tensorize.engine.cpu_epilogue).
EPILOGUES = ("pass", "tile")
KINDS = ("compute", "load", "store", "fill")
ITER_KINDS = ("spatial", "reduce")
LAYOUTS = ("row_major", "col_major")
# How a float instruction accumulates (``accumulation``): the order its reduce iterator's
# products are added in, the rounding of each addition, and what it does with denormals.
# ``pairwise``: the values two at a time, ascending, each pair's products rounded, their sum
# rounded, then added to the accumulator (Arm's BFDOT and BFMMLA with FPCR.EBF 0); ``odd``:
# round to odd, an overflow to infinity (the same).
ORDERS = ("ascending", "descending", "pairwise")
ROUNDINGS = ("nearest_even", "odd")
DENORMALS = ("flush", "keep")

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SCOPE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# What a CPU description hands LLVM, in closed grammars: the triple and the tune CPU are
# written into the IR's text as quoted strings, the features joined by commas (+a,+b), so
# no quote, backslash, comma, space or line break may pass. LLVM itself then vouches for
# each name (intrinsics.llvm_check). A CPU name is lower-case (LLVM's names outside this
# grammar are x86 aliases such as skylake_avx512 of names inside it); cpu_target checks it.
_LLVM_PART = rf"[A-Za-z0-9_.]{{1,{limits.MAX_LLVM_NAME}}}"
TRIPLE = re.compile(rf"{_LLVM_PART}(-{_LLVM_PART}){{2,3}}", re.ASCII)
CPU_NAME = re.compile(r"[a-z0-9][a-z0-9.-]*", re.ASCII)
FEATURE_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{limits.MAX_LLVM_NAME - 1}}}",
                          re.ASCII)


def describe(node: YNode) -> str:
    """How a value reads in a "got ..." clause."""
    if node.is_mapping:
        return "a mapping"
    if node.is_sequence:
        return "a list"
    if node.value is None:
        return "nothing"
    return f"{type(node.value).__name__} {node.value!r}"


class Type:
    """A field type: ``wants`` says in words what it accepts, ``check`` records problems."""

    wants = "a value"

    def check(self, node: YNode, findings: Findings, where: str) -> None:
        """Record a finding for every way ``node`` breaks this type."""
        raise NotImplementedError


class Scalar(Type):
    """A scalar accepted by ``accepts``; ``wants`` describes it."""

    def __init__(self, wants: str) -> None:
        self.wants = wants

    def accepts(self, value: object) -> bool:
        """True when ``value`` is of this type."""
        raise NotImplementedError

    def check(self, node: YNode, findings: Findings, where: str) -> None:
        if node.is_scalar and self.accepts(node.value):
            return
        findings.add(node.loc, f"{where} requires {self.wants}, got {describe(node)}"
                     f"{_hint(node)}")


class Text(Scalar):
    """A non-empty string."""

    def __init__(self) -> None:
        super().__init__("a non-empty string")

    def accepts(self, value: object) -> bool:
        return isinstance(value, str) and bool(value.strip())


class Name(Scalar):
    """An identifier (letters, digits, underscore); scope names may also hold dots."""

    def __init__(self, dotted: bool = False) -> None:
        super().__init__("a name of letters, digits and '_'" + (" (dots allowed)" if dotted
                                                                 else ""))
        self.pattern = _SCOPE_NAME if dotted else _NAME

    def accepts(self, value: object) -> bool:
        return isinstance(value, str) and self.pattern.match(value) is not None


class Int(Scalar):
    """An integer (not a bool) no smaller than ``low`` and, when ``high`` is given, no
    larger than it."""

    def __init__(self, low: int, high: int | None = None) -> None:
        super().__init__(f"an integer >= {low}" if high is None else
                         f"an integer in [{low}, {high}]")
        self.low = low
        self.high = high

    def accepts(self, value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and \
            value >= self.low and (self.high is None or value <= self.high)


class Word(Scalar):
    """A string matching ``pattern`` in full; ``wants`` says what it is in words."""

    def __init__(self, wants: str, pattern: re.Pattern[str]) -> None:
        super().__init__(wants)
        self.pattern = pattern

    def accepts(self, value: object) -> bool:
        return isinstance(value, str) and self.pattern.fullmatch(value) is not None


class Bool(Scalar):
    """true or false."""

    def __init__(self) -> None:
        super().__init__("true or false")

    def accepts(self, value: object) -> bool:
        return isinstance(value, bool)


class ParamValue(Scalar):
    """A variant parameter's value: a string, number or bool."""

    def __init__(self) -> None:
        super().__init__("a string, number or true/false")

    def accepts(self, value: object) -> bool:
        return isinstance(value, (str, int, float, bool))


class Number(Scalar):
    """An integer or a float (not a bool)."""

    def __init__(self) -> None:
        super().__init__("a number")

    def accepts(self, value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)


class Interval(Type):
    """``[low, high]``: two numbers, low <= high."""

    wants = "a list [low, high] of two finite numbers"

    def check(self, node: YNode, findings: Findings, where: str) -> None:
        number = Number()
        if not node.is_sequence or len(node.value) != 2 or \
                not all(c.is_scalar and number.accepts(c.value) for c in node.value):
            findings.add(node.loc, f"{where} requires {self.wants}, got {describe(node)}"
                         f"{_hint(node)}")
            return
        low, high = (c.value for c in node.value)
        if not (_finite(low) and _finite(high)):
            findings.add(node.loc, f"{where} requires finite numbers (validation draws inputs "
                         f"between them), got [{low}, {high}]")
        elif low > high:
            findings.add(node.loc, f"{where} requires low <= high, got [{low}, {high}]")


def _finite(value: float) -> bool:
    """Not NaN nor infinite (an int of any size is finite)."""
    return isinstance(value, int) or math.isfinite(value)


class Choice(Scalar):
    """One of a fixed set of words."""

    def __init__(self, options: tuple[str, ...]) -> None:
        super().__init__("one of " + ", ".join(options))
        self.options = options

    def accepts(self, value: object) -> bool:
        return value in self.options

    def check(self, node: YNode, findings: Findings, where: str) -> None:
        if node.is_scalar and self.accepts(node.value):
            return
        close = difflib.get_close_matches(str(node.value), self.options, n=1) \
            if node.is_scalar else []
        hint = f"; did you mean '{close[0]}'?" if close else _hint(node)
        findings.add(node.loc, f"{where} requires {self.wants}, got {describe(node)}{hint}")


class DTypeName(Scalar):
    """A dtype name or alias (``int8``, ``f16``, ``s32``...)."""

    def __init__(self) -> None:
        super().__init__("a dtype name such as int8, f16, bf16, f32, s32")

    def accepts(self, value: object) -> bool:
        return isinstance(value, str) and dtypes.is_dtype_name(value)

    def check(self, node: YNode, findings: Findings, where: str) -> None:
        if node.is_scalar and self.accepts(node.value):
            return
        names = [d.name for d in dtypes.ALL_DTYPES]
        close = difflib.get_close_matches(str(node.value), names, n=1) \
            if isinstance(node.value, str) else []
        hint = f"; did you mean '{close[0]}'?" if close else _hint(node)
        findings.add(node.loc, f"{where} requires {self.wants}, got {describe(node)}{hint}")


class ListOf(Type):
    """A list whose items all have one type; ``min_items`` and ``max_items`` bound its
    length, and ``distinct`` refuses an item written twice."""

    def __init__(self, item: Type, min_items: int = 0, max_items: int | None = None,
                 distinct: bool = False) -> None:
        self.item = item
        self.min_items = min_items
        self.max_items = max_items
        self.distinct = distinct
        self.wants = f"a list, each item {item.wants}"

    def check(self, node: YNode, findings: Findings, where: str) -> None:
        if not node.is_sequence:
            findings.add(node.loc, f"{where} requires {self.wants}, got {describe(node)}"
                         f"{_hint(node)}")
            return
        if len(node.value) < self.min_items:
            findings.add(node.loc, f"{where} requires at least {self.min_items} item(s), "
                         f"got {len(node.value)}")
        if self.max_items is not None and len(node.value) > self.max_items:
            # One finding for the list, not one per item of a list that may be huge.
            findings.add(node.loc, f"{where} requires at most {self.max_items} items, got "
                         f"{len(node.value)}")
            return
        seen: set[object] = set()
        for index, child in enumerate(node.value):
            self.item.check(child, findings, child_where(where, f"[{index}]"))
            if not (self.distinct and child.is_scalar):
                continue
            if child.value in seen:
                findings.add(child.loc, f"{where} requires distinct items, got "
                             f"{child.value!r} twice")
            seen.add(child.value)


class OneOrList(Type):
    """A single value of a type, or a non-empty list of them."""

    def __init__(self, item: Type) -> None:
        self.item = item
        self.wants = f"{item.wants}, or a list of them"

    def check(self, node: YNode, findings: Findings, where: str) -> None:
        if node.is_sequence:
            ListOf(self.item, 1).check(node, findings, where)
        else:
            self.item.check(node, findings, where)


class MapOf(Type):
    """A mapping from names (checked by ``key``) to values of one type."""

    def __init__(self, value: Type, key: Scalar | None = None, what: str = "entry",
                 max_items: int | None = None) -> None:
        self.value = value
        self.key = key or Name()
        self.what = what
        self.max_items = max_items
        self.wants = f"a mapping from {what} names, each value {value.wants}"

    def check(self, node: YNode, findings: Findings, where: str) -> None:
        if not node.is_mapping:
            findings.add(node.loc, f"{where} requires {self.wants}, got {describe(node)}"
                         f"{_hint(node)}")
            return
        if self.max_items is not None and len(node.value) > self.max_items:
            findings.add(node.loc, f"{where} requires at most {self.max_items} {self.what}s, "
                         f"got {len(node.value)}")
            return
        for key, child in node.value.items():
            if not self.key.accepts(key):
                findings.add(child.key_loc or child.loc,
                             f"{where}: {self.what} name requires {self.key.wants}, "
                             f"got {key!r}")
            self.value.check(child, findings, child_where(where, f".{key}"))


class AnyMapping(Type):
    """A mapping whose contents another component validates (the NPU's ``machine:``)."""

    wants = "a mapping"

    def check(self, node: YNode, findings: Findings, where: str) -> None:
        if not node.is_mapping:
            findings.add(node.loc, f"{where} requires a mapping, got {describe(node)}")


class Either(Type):
    """A scalar of one type or a mapping of another (``strides: dense`` or a rule)."""

    def __init__(self, scalar: Scalar, mapping: Type) -> None:
        self.scalar = scalar
        self.mapping = mapping
        self.wants = f"{scalar.wants}, or {mapping.wants}"

    def check(self, node: YNode, findings: Findings, where: str) -> None:
        if node.is_mapping:
            self.mapping.check(node, findings, where)
        elif node.is_scalar and self.scalar.accepts(node.value):
            return
        else:
            findings.add(node.loc, f"{where} requires {self.wants}, got {describe(node)}")


@dataclass(frozen=True)
class Field:
    """One field of a record: its type, whether it must be present, and what it means."""

    name: str
    type: Type
    required: bool
    doc: str


class Record(Type):
    """A mapping with a fixed set of fields."""

    def __init__(self, what: str, fields: tuple[Field, ...]) -> None:
        self.what = what
        self.fields = {f.name: f for f in fields}
        self.wants = f"a mapping ({what})"

    def check(self, node: YNode, findings: Findings, where: str) -> None:
        if not node.is_mapping:
            findings.add(node.loc, f"{where} requires {self.wants}, got {describe(node)}"
                         f"{_hint(node)}")
            return
        meant: set[str] = set()
        for key, child in node.value.items():
            spec = self.fields.get(key)
            if spec is None:
                close = difflib.get_close_matches(key, list(self.fields), n=1)
                meant.update(close)
                findings.add(child.key_loc or child.loc, self.unknown(key, close, where))
                continue
            spec.type.check(child, findings, child_where(where, f".{key}"))
        for spec in self.fields.values():
            # A misspelt field is reported once, as unknown, not also as missing.
            if spec.required and spec.name not in node.value and spec.name not in meant:
                findings.add(node.loc, f"{where} requires field '{spec.name}' ({spec.doc})")

    def unknown(self, key: str, close: list[str], where: str) -> str:
        """The message for a field this record does not have."""
        hint = f"; did you mean '{close[0]}'?" if close else \
            f"; the fields of {self.what} are {', '.join(self.fields)}"
        return f"{where} has an unknown field '{key}'{hint}"


def child_where(where: str, suffix: str) -> str:
    """The path of a field or item below ``where`` (``intrinsic x: operands[0].shape``)."""
    if ": " in where:
        return where + suffix
    return f"{where}: {suffix.lstrip('.')}"


def _hint(node: YNode) -> str:
    """Advice for two common slips: an unquoted ``{param}`` and an unknown parameter."""
    if node.is_mapping and len(node.value) == 1:
        (key, child), = node.value.items()
        if child.value is None and _NAME.match(key):
            return (f"; an unquoted {{{key}}} is a YAML mapping: write \"{{{key}}}\" in quotes "
                    "to use the parameter")
    if isinstance(node.value, str):
        names = PLACEHOLDER.findall(node.value)
        if names:
            return (f"; {{{names[0]}}} is not a parameter of this entry (declare it in "
                    "'variants' or 'params')")
    return ""


# ---- the records ------------------------------------------------------------------------

STRIDE_RULE = Record("a stride rule", (
    Field("leading_multiple_of", Int(1), True,
          "the leading dimension (stride of the non-contiguous dimension, in elements) must "
          "be a multiple of this"),
))

SCOPE = Record("a scope", (
    Field("capacity", Int(1), False, "size in bytes; absent means unbounded"),
    Field("dtype", OneOrList(DTypeName()), False, "the element dtype(s) it holds"),
    Field("alignment", Int(1), False, "address alignment in bytes (default 1)"),
    Field("banks", Int(1), False, "number of banks"),
    Field("description", Text(), False, "what this memory is"),
))

ITERATOR = Record("an iterator", (
    Field("name", Name(), True, "the name the semantics uses"),
    Field("extent", Int(1), True, "the number of values it takes"),
    Field("kind", Choice(ITER_KINDS), False, "spatial (default) or reduce"),
))

ACCEPTS = Record("an accepted dtype", (
    Field("dtype", DTypeName(), True, "the kernel input's dtype"),
    Field("bias", Int(-(2 ** 31), 2 ** 31 - 1), True, "added to each of its values to give "
          "one of the operand's dtype (int8 + 128 is uint8)"),
))

OPERAND = Record("an operand", (
    Field("name", Name(), True, "the name the semantics and the templates use"),
    Field("role", Choice(ROLES), True, "input, output or accumulator"),
    Field("shape", ListOf(Int(1)), True, "extent of each dimension; [] for a scalar"),
    Field("dtype", DTypeName(), True, "element dtype"),
    Field("scope", OneOrList(Name(dotted=True)), True, "the memory scope(s) it lives in"),
    Field("layout", Choice(LAYOUTS), False, "row_major (default) or col_major"),
    Field("strides", Either(Choice(("dense",)), STRIDE_RULE), False,
          "'dense', or {leading_multiple_of: N}"),
    Field("alignment", Int(1), False, "required address alignment in bytes"),
    Field("range", Interval(), False, "[low, high]: the values it may hold (the self-check "
          "draws its random inputs from them)"),
    Field("accepts", ACCEPTS, False, "{dtype, bias}: a kernel input of that dtype runs "
          "through this operand shifted by bias, the sum compensated"),
    Field("description", Text(), False, "what it holds"),
))

ACCUMULATION = Record("an accumulation", (
    Field("order", Choice(ORDERS), True, "the reduce iterator's values in the order their "
          "products are added to the accumulator, one at a time; pairwise: two at a time in "
          "ascending order, each pair's products (each rounded) summed first, the sum "
          "rounded and then added"),
    Field("rounding", Choice(ROUNDINGS), True, "the rounding of each addition (the product "
          "is exact: a fused multiply-add): nearest_even, or odd (an inexact result's last "
          "bit forced to 1, an overflow to infinity)"),
    Field("denormals", Choice(DENORMALS), True, "flush: denormal inputs read and denormal "
          "results written as zero (DAZ, FTZ); keep: IEEE gradual underflow"),
))

COST = Record("a cost", (
    Field("latency", Int(0), True, "cycles from issue to result"),
    Field("interval", Int(1), True, "cycles between two issues on one unit"),
))

COMPANIONS = MapOf(OneOrList(Name()), what="operand")

INTRINSIC = Record("an intrinsic", (
    Field("name", Name(), True, "its unique name; a pattern like wmma_m{m}n{n}k{k} in a "
          "variant entry"),
    Field("kind", Choice(KINDS), True, "compute, load, store or fill"),
    Field("description", Text(), False, "one line on what it does"),
    Field("params", MapOf(ParamValue(), what="parameter"), False,
          "parameter values shared by every variant"),
    Field("variants", ListOf(MapOf(ParamValue(), what="parameter"), 1), False,
          "one parameter set per variant"),
    Field("iterators", ListOf(ITERATOR, 1), True, "the iteration space"),
    Field("operands", ListOf(OPERAND, 1), True, "the tensors it reads and writes, in "
          "call order"),
    Field("semantics", Text(), True, "one statement, e.g. C[i, j] += f32(A[i, k]) * "
          "f32(B[k, j])"),
    Field("resets", Bool(), False, "true when the instruction overwrites its accumulator "
          "instead of adding to it"),
    Field("accumulation", ACCUMULATION, False, "{order, rounding, denormals}: how a float "
          "product-sum adds its products, as the hardware does"),
    Field("loads", COMPANIONS, False, "operand -> load intrinsic(s) that fill its scope"),
    Field("stores", COMPANIONS, False, "operand -> store intrinsic(s) that drain its scope"),
    Field("fill", COMPANIONS, False, "operand -> fill intrinsic(s) that zero it"),
    Field("emit", MapOf(Text(), what="backend"), True, "backend -> code template with "
          "{operand} placeholders"),
    Field("cost", COST, True, "latency and issue interval in cycles"),
    Field("reference", Text(), True, "a link to the vendor manual section"),
))

_TILE_CHOICES = ListOf(Int(1, limits.MAX_CPU_REGISTERS), 1, limits.MAX_TILE_CHOICES,
                       distinct=True)

REGISTER_TILE = Record("a register tile", (
    Field("rows", _TILE_CHOICES, True, "the accumulator rows a tile may have, tried in "
          "this order"),
    Field("vectors", _TILE_CHOICES, True, "the vectors of accumulators per row a tile "
          "may have"),
))

TRIPLE_TYPE = Word("an LLVM target triple arch-vendor-os[-environment] (letters, digits, "
                   "'_' and '.' in each part)", TRIPLE)
FEATURE_TYPE = Word(f"an LLVM feature name without '+' (letters, digits, '_', '.', '-'; at "
                    f"most {limits.MAX_LLVM_NAME})", FEATURE_NAME)
_FEATURES = ListOf(FEATURE_TYPE, 0, limits.MAX_CPU_FEATURES, distinct=True)

EMULATOR = Record("an emulator", (
    Field("executes", ListOf(FEATURE_TYPE, 1, limits.MAX_CPU_FEATURES, distinct=True), True,
          "the target features whose instructions it executes"),
))

CPU = Record("a CPU target", (
    Field("triple", TRIPLE_TYPE, True, "the LLVM target triple, e.g. "
          "x86_64-unknown-linux-gnu"),
    Field("cpu", Text(), True, "the LLVM CPU name code is selected and tuned for "
          "(generic, x86-64, neoverse-n1, ...)"),
    Field("features", _FEATURES, True, "the target features on by default (LLVM's "
          "names without '+')"),
    Field("detect", Choice(DETECTORS), False, "how the host's features are found: llvm "
          "(default; LLVM's list for the host CPU) or cpuinfo (/proc/cpuinfo flags)"),
    Field("cpuinfo", MapOf(Name(), key=FEATURE_TYPE, what="feature",
                           max_items=limits.MAX_CPU_FEATURES), False,
          "feature -> its /proc/cpuinfo flag, where the names differ"),
    Field("vector_bytes", Int(1, limits.MAX_VECTOR_BYTES), True, "bytes in one vector "
          "register"),
    Field("register_scope", Name(dotted=True), True, "the family's scope that is the vector "
          "register file; its capacity over vector_bytes is the register count"),
    Field("reserved_registers", Int(0, limits.MAX_CPU_REGISTERS), False, "vector registers "
          "the micro-kernel leaves to the compiler (default 0)"),
    Field("alignment", Int(1, limits.MAX_CPU_ALIGNMENT), True, "bytes every buffer the "
          "runners allocate is aligned to: at least every template's 'align N'"),
    Field("register_tile", REGISTER_TILE, True, "the register tiles the schedule may use"),
    Field("k_unroll", Int(1, limits.MAX_K_UNROLL), False, "k steps per micro-kernel "
          "iteration (default 1)"),
    Field("epilogue", Choice(EPILOGUES), False, "where a GEMM's elementwise epilogue runs: "
          "pass (one pass over the whole result after the GEMM; default) or tile (each "
          "accumulator tile finished right after its store, the result held a tile at a "
          "time)"),
    Field("tune_cpus", ListOf(Text(), 1, limits.MAX_TUNE_CPUS, distinct=True), False,
          "LLVM CPU names whose scheduling models a kernel may be tuned for (its "
          "'tune-cpu'); the tuner keeps the one that runs fewest instructions (default: cpu "
          "alone)"),
    Field("run", ListOf(Choice(ENGINES), 1, len(ENGINES), distinct=True), True, "how its "
          "code runs here, in order of preference: native, unicorn, qemu-user"),
    Field("emulators", MapOf(EMULATOR, key=Choice(ENGINES), what="engine"), False,
          "emulator -> what it executes"),
    Field("macs", MapOf(Int(1, limits.MAX_MACS), what="mnemonic",
                        max_items=limits.MAX_MACS_ENTRIES), False, "assembly mnemonic -> "
          "multiply-accumulates per instruction, for the counts a run reports"),
))

class Checked(Type):
    """A type whose values, once they have it, must also pass ``rule``: the checks that read
    several fields of a section together (``rule(node, findings, where)``)."""

    def __init__(self, inner: Type, rule: Callable[[YNode, Findings, str], None]) -> None:
        self.inner = inner
        self.rule = rule
        self.wants = inner.wants

    def check(self, node: YNode, findings: Findings, where: str) -> None:
        before = len(findings)
        self.inner.check(node, findings, where)
        if len(findings) == before:
            self.rule(node, findings, where)


GPU_ARCHITECTURE = Record("a GPU architecture", (
    Field("part", Text(), True, "the reference part its SM count is of, e.g. A100 SXM4"),
    Field("sm_count", Int(1), True, "SMs of the reference part, for waves of blocks"),
    Field("registers_per_sm", Int(1), True, "32-bit registers in one SM's register file"),
    Field("max_registers_per_thread", Int(1), True, "registers one thread may have"),
    Field("register_granularity", Int(1), True, "registers are allocated per warp in units "
          "of this many"),
    Field("shared_per_sm", Int(1), True, "bytes of shared memory the blocks of one SM may "
          "share (the configurable L1/shared maximum)"),
    Field("max_shared_per_block", Int(1), True, "bytes of shared memory one block may opt "
          "in to (dynamic shared memory above 48 KB)"),
    Field("shared_reserved_per_block", Int(0), True, "bytes the system reserves for each "
          "resident block"),
    Field("shared_granularity", Int(1), True, "bytes; a block's shared memory is allocated "
          "in units of this many"),
    Field("max_warps_per_sm", Int(1), True, "warps resident on one SM at most"),
    Field("max_blocks_per_sm", Int(1), True, "blocks resident on one SM at most"),
))

GPU = Checked(Record("a GPU target", (
    Field("architectures", MapOf(GPU_ARCHITECTURE, what="architecture"), True,
          "nvcc architecture (sm_80, ...) -> its SM limits; kernels compile for each"),
)), check_gpu_section)

FAMILY = Record("a family", (
    Field("target", Name(), True, "the backend it belongs to: cuda, arm, npu, ..."),
    Field("description", Text(), False, "what hardware this is"),
    Field("scopes", MapOf(SCOPE, key=Name(dotted=True), what="scope"), True,
          "the memory scopes its operands live in"),
    Field("intrinsics", ListOf(AnyMapping(), 1), True, "its intrinsics"),
    Field("machine", AnyMapping(), False, "machine parameters for a simulator"),
    Field("cpu", CPU, False, "the target's CPU description, for a CPU target"),
    Field("gpu", GPU, False, "the architectures a GPU target compiles for and their SM "
          "limits"),
))


def check(node: YNode, record: Type, findings: Findings, where: str) -> None:
    """Record every way ``node`` breaks ``record`` (see the module docstring)."""
    record.check(node, findings, where)
