"""Print IR as script source: the text ``ir.script.parse`` reads back to an equal function.

Variables and buffers are identities with name hints; the printer gives each one a name, made
unique among the names in scope where it is bound (``i``, ``i_1``), so parse(print(f)) is
structurally equal to ``f`` and printing is a fixpoint. Number literals are written plainly
where the parser infers the same dtype from context (an operand's, a stored buffer's, int32
for indices), and as ``T.int8(3)`` elsewhere.
"""

from __future__ import annotations

import keyword
import math
import re
from typing import Any

from ir import dtypes
from ir.buffer import Buffer
from ir.dtypes import DType
from ir.expr import (
    BinOp,
    BufferLoad,
    Call,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Select,
    Var,
)
from ir.function import IRModule, PrimFunc
from ir.regions import infer_block_regions
from ir.stmt import (
    Block,
    BlockRealize,
    BufferRegion,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    IntrinsicCall,
    IterKind,
    IterVar,
    Range,
    SeqStmt,
    Stmt,
)


def print_node(node: Any, show_regions: bool = True) -> str:
    """Script text for any IR node; a PrimFunc or IRModule prints as parsable source.

    ``show_regions=False`` leaves out a block's ``T.reads``/``T.writes`` where they equal the
    regions the parser would infer, for a shorter read; the default prints them always.
    """
    return _Printer(show_regions).node(node)


# Binding strength of each printed form, as Python parses it: higher binds tighter.
_OR, _AND, _NOT, _COMPARE, _SUM, _PRODUCT, _UNARY, _ATOM = 1, 2, 3, 4, 5, 6, 7, 9
_OPS = {
    "add": ("+", _SUM), "sub": ("-", _SUM), "mul": ("*", _PRODUCT), "div": ("/", _PRODUCT),
    "floordiv": ("//", _PRODUCT), "floormod": ("%", _PRODUCT),
    "eq": ("==", _COMPARE), "ne": ("!=", _COMPARE), "lt": ("<", _COMPARE),
    "le": ("<=", _COMPARE), "gt": (">", _COMPARE), "ge": (">=", _COMPARE),
    "and": ("and", _AND), "or": ("or", _OR),
}
# Stores printed with an augmented assignment: the parser reads ``X[i] += v`` back exactly.
_AUG = {"add": "+=", "sub": "-=", "mul": "*="}
_LOOP_FUNCS = {ForKind.PARALLEL: "T.parallel", ForKind.VECTORIZED: "T.vectorized",
               ForKind.UNROLLED: "T.unroll"}
_RESERVED = {"T", "range", "min", "max", *keyword.kwlist}
_DEFAULT = {"int": dtypes.int32, "float": dtypes.float32, "bool": dtypes.bool_}


class _Printer:
    def __init__(self, show_regions: bool) -> None:
        self.show_regions = show_regions
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.extents: dict[int, int] = {}
        self.lines: list[str] = []
        self.depth = 0

    # -- entry -----------------------------------------------------------------------------

    def node(self, node: Any) -> str:
        if isinstance(node, (PrimFunc, IRModule, Stmt)):
            if isinstance(node, PrimFunc):
                self.func(node)
            elif isinstance(node, IRModule):
                self.module(node)
            else:
                self.stmt(node)
            return "\n".join(self.lines)
        if isinstance(node, Expr):
            return self.expr(node)[0]
        if isinstance(node, Buffer):
            return f"{self.name(node)}: {self.buffer_decl(node, 'T.Buffer')}"
        if isinstance(node, IterVar):
            return f"{self.name(node.var)}: {node.kind.value}({node.extent})"
        if isinstance(node, Range):
            return self.range(node)
        if isinstance(node, BufferRegion):
            return self.region(node)
        return repr(node)

    def emit(self, text: str) -> None:
        self.lines.extend(_wrap("    " * self.depth + text))

    def name(self, obj: Var | Buffer) -> str:
        """The unique printed name of a variable or buffer, given at first sight."""
        found = self.names.get(id(obj))
        if found is not None:
            return found
        base = re.sub(r"\W", "_", obj.name) or "v"
        if base[0].isdigit():
            base = "v" + base
        if base in _RESERVED:
            base += "_"
        candidate, suffix = base, 0
        while candidate in self.used:
            suffix += 1
            candidate = f"{base}_{suffix}"
        self.used.add(candidate)
        self.names[id(obj)] = candidate
        return candidate

    def release(self, obj: Var | Buffer) -> None:
        """Free the name of a variable or buffer whose scope has ended, for later siblings."""
        self.used.discard(self.names.get(id(obj), ""))

    # -- functions -------------------------------------------------------------------------

    def module(self, module: IRModule) -> None:
        self.emit("@T.ir_module")
        self.emit("class Module:")
        self.depth += 1
        for index, func in enumerate(module.functions):
            if index:
                self.lines.append("")
            saved, self.names, self.used = (self.names, self.used), {}, set()
            self.func(func)
            self.names, self.used = saved
        self.depth -= 1

    def func(self, func: PrimFunc) -> None:
        params = [f"{self.name(p)}: {self.buffer_decl(p, 'T.Buffer')}" for p in func.params]
        self.emit("@T.prim_func")
        header = f"def {func.name}({', '.join(params)}):"
        if len("    " * self.depth + header) <= 100:
            self.emit(header)
        else:
            self.emit(f"def {func.name}(")
            for param in params:
                self.emit(f"    {param},")
            self.emit("):")
        self.depth += 1
        root = func.root
        if root.annotations:
            self.emit(f"T.block_attr({self.annotations(root)})")
        for buffer in root.alloc_buffers:
            self.emit(f"{self.name(buffer)} = {self.buffer_decl(buffer, 'T.alloc_buffer')}")
        self.stmt(root.body)
        self.depth -= 1

    def buffer_decl(self, buffer: Buffer, call: str) -> str:
        shape = ", ".join(str(n) for n in buffer.shape)
        shape = f"({shape},)" if buffer.ndim == 1 else f"({shape})"
        text = f"{call}({shape}, \"{buffer.dtype.name}\""
        if buffer.scope != "global":
            text += f", scope={_quote(buffer.scope)}"
        if buffer.strides is not None:
            strides = ", ".join(str(s) for s in buffer.strides)
            text += f", strides=({strides}{',' if len(buffer.strides) == 1 else ''})"
        return text + ")"

    def annotations(self, block: Block) -> str:
        items = ", ".join(f"{_quote(key)}: {_literal(value)}" for key, value in block.annotations)
        return "{" + items + "}"

    # -- statements ------------------------------------------------------------------------

    def stmt(self, stmt: Stmt) -> None:
        if isinstance(stmt, SeqStmt):
            for item in stmt.stmts:
                self.stmt(item)
        elif isinstance(stmt, BufferStore):
            self.store(stmt)
        elif isinstance(stmt, For):
            self.loop(stmt)
        elif isinstance(stmt, IfThenElse):
            self.if_(stmt, "if")
        elif isinstance(stmt, IntrinsicCall):
            args = [_quote(stmt.intrinsic)]
            for arg in stmt.args:
                args.append(self.region(arg) if isinstance(arg, BufferRegion)
                            else self.expr(arg)[0])
            self.emit(f"T.call_intrinsic({', '.join(args)})")
        elif isinstance(stmt, BlockRealize):
            self.realize(stmt)
        elif isinstance(stmt, Block):
            self.block(stmt, None)
        else:
            self.emit(f"# unprintable statement {type(stmt).__name__}")

    def store(self, stmt: BufferStore) -> None:
        target = f"{self.name(stmt.buffer)}[{self.indices(stmt.indices)}]"
        value = stmt.value
        if (isinstance(value, BinOp) and value.op in _AUG and isinstance(value.a, BufferLoad)
                and value.a.buffer is stmt.buffer and value.a.indices == stmt.indices):
            self.emit(f"{target} {_AUG[value.op]} {self.expr(value.b, value.a.dtype)[0]}")
            return
        self.emit(f"{target} = {self.expr(value, stmt.buffer.dtype)[0]}")

    def loop(self, loop: For) -> None:
        if loop.kind is ForKind.SERIAL:
            chain = [loop]
            while isinstance(chain[-1].body, For) and chain[-1].body.kind is ForKind.SERIAL:
                chain.append(chain[-1].body)
            names = ", ".join(self.name(item.var) for item in chain)
            extents = ", ".join(str(item.extent) for item in chain)
            head = f"range({extents})" if len(chain) == 1 else f"T.grid({extents})"
            self.emit(f"for {names} in {head}:")
        else:
            chain = [loop]
            if loop.kind is ForKind.THREAD_BINDING:
                head = f"T.thread_binding({loop.extent}, thread={_quote(loop.thread or '')})"
            else:
                head = f"{_LOOP_FUNCS[loop.kind]}({loop.extent})"
            self.emit(f"for {self.name(loop.var)} in {head}:")
        for item in chain:
            self.extents[id(item.var)] = item.extent
        self.depth += 1
        self.stmt(chain[-1].body)
        self.depth -= 1
        for item in chain:
            del self.extents[id(item.var)]
            self.release(item.var)

    def if_(self, stmt: IfThenElse, keyword_: str) -> None:
        self.emit(f"{keyword_} {self.expr(stmt.cond)[0]}:")
        self.depth += 1
        self.stmt(stmt.then_case)
        self.depth -= 1
        if stmt.else_case is None:
            return
        if isinstance(stmt.else_case, IfThenElse):
            self.if_(stmt.else_case, "elif")
            return
        self.emit("else:")
        self.depth += 1
        self.stmt(stmt.else_case)
        self.depth -= 1

    def realize(self, realize: BlockRealize) -> None:
        self.block(realize.block, realize)

    def block(self, block: Block, realize: BlockRealize | None) -> None:
        self.emit(f"with T.block({_quote(block.name)}):")
        self.depth += 1
        self.iterators(block, realize)
        # Allocations come before the regions, which may name them.
        for buffer in block.alloc_buffers:
            self.emit(f"{self.name(buffer)} = {self.buffer_decl(buffer, 'T.alloc_buffer')}")
        if realize is not None and not _is_true(realize.predicate):
            self.emit(f"T.where({self.expr(realize.predicate)[0]})")
        if self.show_regions or not _regions_inferred(block):
            self.emit(f"T.reads({', '.join(self.region(r) for r in block.reads)})")
            self.emit(f"T.writes({', '.join(self.region(r) for r in block.writes)})")
        if block.annotations:
            self.emit(f"T.block_attr({self.annotations(block)})")
        if block.init is not None:
            self.emit("with T.init():")
            self.depth += 1
            self.stmt(block.init)
            self.depth -= 1
        self.stmt(block.body)
        self.depth -= 1
        for iter_var in block.iter_vars:
            self.extents.pop(id(iter_var.var), None)
            self.release(iter_var.var)
        for buffer in block.alloc_buffers:
            self.release(buffer)

    def iterators(self, block: Block, realize: BlockRealize | None) -> None:
        if realize is None:
            for iv in block.iter_vars:
                self.emit(f"{self.name(iv.var)} = T.axis.{iv.kind.value}({iv.extent})")
            return
        pairs = list(zip(block.iter_vars, realize.bindings, strict=True))
        # T.axis.remap reads each iterator's extent off the variable it binds.
        bound_vars = [b for iv, b in pairs
                      if isinstance(b, Var) and self.extents.get(id(b)) == iv.extent]
        if pairs and len(bound_vars) == len(pairs):
            kinds = "".join("S" if iv.kind is IterKind.SPATIAL else "R" for iv, _ in pairs)
            bound = ", ".join(self.name(b) for b in bound_vars)
            names = ", ".join(self.name(iv.var) for iv, _ in pairs)
            self.emit(f"{names} = T.axis.remap(\"{kinds}\", [{bound}])")
        else:
            for iv, binding in pairs:
                text = self.expr(binding, dtypes.int32)[0]
                self.emit(f"{self.name(iv.var)} = T.axis.{iv.kind.value}({iv.extent}, {text})")
        for iv, _ in pairs:
            self.extents[id(iv.var)] = iv.extent

    # -- regions ---------------------------------------------------------------------------

    def region(self, region: BufferRegion) -> str:
        ranges = ", ".join(self.range(r) for r in region.ranges) or "()"
        return f"{self.name(region.buffer)}[{ranges}]"

    def range(self, rng: Range) -> str:
        start, extent = rng.start, rng.extent
        if _is_int32(extent, 1):
            return self.expr(start, dtypes.int32)[0]
        extent_text = self.expr(extent, dtypes.int32)
        if _is_int32(start, 0):
            return f"0:{extent_text[0]}"
        if isinstance(start, IntImm) and isinstance(extent, IntImm) and _is_int32(start) \
                and _is_int32(extent):
            return f"{start.value}:{start.value + extent.value}"
        # The parser reads ``start:start + extent`` back as Range(start, extent).
        start_text = self.operand(self.expr(start, dtypes.int32), _SUM, right=False)
        return f"{start_text}:{start_text} + {self.operand(extent_text, _SUM, right=True)}"

    def indices(self, indices: tuple[Expr, ...]) -> str:
        if not indices:
            return "()"  # a 0-d buffer's only element, as Python spells it
        return ", ".join(self.expr(index, dtypes.int32)[0] for index in indices)

    # -- expressions -----------------------------------------------------------------------

    def expr(self, expr: Expr, like: DType | None = None) -> tuple[str, int]:
        """Text and binding strength of ``expr``; ``like`` is the dtype a literal would take."""
        if isinstance(expr, (IntImm, FloatImm)):
            return self.immediate(expr, like)
        if isinstance(expr, Var):
            return self.name(expr), _ATOM
        if isinstance(expr, BinOp):
            return self.binop(expr)
        if isinstance(expr, BufferLoad):
            return f"{self.name(expr.buffer)}[{self.indices(expr.indices)}]", _ATOM
        if isinstance(expr, Cast):
            return f"T.cast({self.expr(expr.value)[0]}, \"{expr.type.name}\")", _ATOM
        if isinstance(expr, Not):
            return f"not {self.operand(self.expr(expr.a), _NOT, right=False)}", _NOT
        if isinstance(expr, Select):
            true_text, false_text = self.pair(expr.true_value, expr.false_value)
            return (f"T.if_then_else({self.expr(expr.cond)[0]}, {true_text[0]}, "
                    f"{false_text[0]})"), _ATOM
        if isinstance(expr, Call):
            args = ", ".join(self.expr(arg)[0] for arg in expr.args)
            if len(expr.args) == 1 and expr.args[0].dtype != expr.type:
                args += f", dtype=\"{expr.type.name}\""
            return f"T.{expr.name}({args})", _ATOM
        return f"<{type(expr).__name__}>", _ATOM

    def pair(self, a: Expr, b: Expr) -> tuple[tuple[str, int], tuple[str, int]]:
        """Two operands whose literals take each other's dtype, as the parser reads them."""
        a_like = b.dtype if not _is_immediate(b) else None
        return self.expr(a, a_like), self.expr(b, a.dtype)

    def binop(self, expr: BinOp) -> tuple[str, int]:
        # A chain down the left operands (a + b + c + ...) may be thousands long: print it in
        # a loop, recursing only into the right operands.
        chain = [expr]
        while isinstance(chain[-1].a, BinOp):
            chain.append(chain[-1].a)
        bottom = chain[-1]
        # As in pair(): a literal takes the dtype of the other operand.
        printed = self.expr(bottom.a, None if _is_immediate(bottom.b) else bottom.b.dtype)
        for link in reversed(chain):
            printed = self.combine(link, printed, self.expr(link.b, link.a.dtype))
        return printed

    def combine(self, expr: BinOp, left: tuple[str, int], right: tuple[str, int]
                ) -> tuple[str, int]:
        """``expr`` printed from its printed operands."""
        if expr.op in ("min", "max"):
            return f"T.{expr.op}({left[0]}, {right[0]})", _ATOM
        symbol, strength = _OPS[expr.op]
        left_text = self.operand(left, strength, right=strength == _COMPARE)
        right_text = self.operand(right, strength, right=True)
        return f"{left_text} {symbol} {right_text}", strength

    @staticmethod
    def operand(printed: tuple[str, int], strength: int, right: bool) -> str:
        """Parenthesize an operand that would otherwise bind looser than its operator.

        Operators associate to the left, so a right operand of equal strength needs
        parentheses too (``a - (b - c)``); comparisons do not chain, so both sides do.
        """
        text, inner = printed
        if inner < strength or (right and inner == strength):
            return f"({text})"
        return text

    def immediate(self, imm: IntImm | FloatImm, like: DType | None) -> tuple[str, int]:
        dtype = imm.dtype
        if dtype.is_bool:
            return ("True" if imm.value else "False"), _ATOM
        if isinstance(imm, FloatImm):
            value = float(imm.value)
            if not math.isfinite(value):
                return f"T.{dtype.name}(\"{value}\")", _ATOM
            text = repr(value)
        else:
            text = str(int(imm.value))
        plain = dtype == like or (like is None and dtype == _DEFAULT[
            "float" if isinstance(imm, FloatImm) else "int"])
        if plain:
            return text, (_UNARY if text.startswith("-") else _ATOM)
        return f"T.{dtype.name}({text})", _ATOM


def _wrap(line: str, limit: int = 100) -> list[str]:
    """Break a long line after commas inside brackets, continuing under the open bracket.

    Python joins lines inside brackets, so the pieces parse as the one line did. Each break
    takes the shallowest comma that keeps the piece within ``limit`` (the latest among equals).
    """
    commas = _bracketed_commas(line)
    pieces: list[str] = []
    starts: list[tuple[int, int]] = [(0, 0)]  # (position in line, indent) of each piece
    start, indent = 0, 0
    while indent + len(line) - start > limit:
        later = [c for c in commas if c[0] > start]
        fitting = [c for c in later if indent + c[0] + 1 - start <= limit]
        if not later:
            break
        position, _, bracket = (min(fitting, key=lambda c: (c[1], -c[0])) if fitting
                                else later[0])
        bracket_start, bracket_indent = max(s for s in starts if s[0] <= bracket)
        pieces.append(" " * indent + line[start:position + 1])
        start = position + 1
        while start < len(line) and line[start] == " ":
            start += 1
        indent = bracket_indent + bracket - bracket_start + 1
        starts.append((start, indent))
    pieces.append(" " * indent + line[start:])
    return pieces


def _bracketed_commas(line: str) -> list[tuple[int, int, int]]:
    """(position, bracket depth, position of the innermost open bracket) of each comma inside
    brackets and outside string literals."""
    opens: list[int] = []
    commas = []
    quote = ""
    position = 0
    while position < len(line):
        char = line[position]
        if quote:
            if char == "\\":
                position += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "([{":
            opens.append(position)
        elif char in ")]}" and opens:
            opens.pop()
        elif char == "," and opens:
            commas.append((position, len(opens), opens[-1]))
        position += 1
    return commas


def _is_immediate(expr: Expr) -> bool:
    return isinstance(expr, (IntImm, FloatImm))


def _is_int32(expr: Expr, value: int | None = None) -> bool:
    return (isinstance(expr, IntImm) and expr.dtype == dtypes.int32
            and (value is None or expr.value == value))


def _is_true(expr: Expr) -> bool:
    return isinstance(expr, IntImm) and expr.dtype.is_bool and expr.value == 1


def _regions_inferred(block: Block) -> bool:
    """True when the block's declared regions are the ones the parser infers from its body."""
    reads, writes = infer_block_regions(block)
    return tuple(reads) == block.reads and tuple(writes) == block.writes


def _literal(value: str | float) -> str:
    """An annotation value as Python source."""
    return _quote(value) if isinstance(value, str) else repr(value)


def _quote(text: str) -> str:
    """A Python string literal, in double quotes where the text allows it."""
    if '"' not in text and "\\" not in text and text.isprintable():
        return f'"{text}"'
    return repr(text)

