"""Kernels of the script syntax: the AST of a ``@T.prim_func`` function -> PrimFunc.

Names are scoped the way the loops nest: a loop variable is visible in its loop body, a block
iterator and a block's buffers in the block. Checks that need the whole function (isolation
of blocks, affine bindings, reduce iterators in outputs) are :func:`ir.verify.verify`'s, which
runs on every parsed function.
"""

from __future__ import annotations

import ast
import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ir import dtypes
from ir.buffer import Buffer
from ir.errors import IRError, KernelError, SourceLoc
from ir.expr import BufferLoad, Expr, IntImm, Var
from ir.function import IRModule, PrimFunc
from ir.regions import infer_block_regions
from ir.script.exprs import ExprParser, Value, subscript_items
from ir.script.source import SourceText
from ir.stmt import (
    TRUE,
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
    Stmt,
    seq,
)

_LOOP_KINDS = {"serial": ForKind.SERIAL, "parallel": ForKind.PARALLEL,
               "vectorized": ForKind.VECTORIZED, "unroll": ForKind.UNROLLED}
_AXIS_KINDS = {"axis.spatial": IterKind.SPATIAL, "axis.reduce": IterKind.REDUCE,
               "axis.S": IterKind.SPATIAL, "axis.R": IterKind.REDUCE}
_REMAP_KINDS = {"S": IterKind.SPATIAL, "R": IterKind.REDUCE}
_AUG_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
            ast.FloorDiv: "floordiv", ast.Mod: "floormod"}
# Script functions that are statements or declarations, never values.
STATEMENT_FUNCTIONS = (
    "Buffer", "alloc_buffer", "grid", "serial", "parallel", "vectorized", "unroll",
    "thread_binding", "block", "init", "where", "reads", "writes", "block_attr",
    "call_intrinsic", "axis.spatial", "axis.reduce", "axis.remap", "axis.S", "axis.R",
)
# Header statements of a block: they describe the block rather than compute.
_BLOCK_HEADER = ("where", "reads", "writes", "block_attr")
AnnotationValue = str | int | float


@dataclass
class _BlockParts:
    """What a block's header statements declared, gathered while reading its body."""

    name: str
    iter_vars: list[IterVar] = field(default_factory=list)
    bindings: list[Expr] = field(default_factory=list)
    predicate: Expr | None = None
    reads: tuple[BufferRegion, ...] | None = None
    writes: tuple[BufferRegion, ...] | None = None
    annotations: list[tuple[str, AnnotationValue]] = field(default_factory=list)
    allocs: list[Buffer] = field(default_factory=list)
    init: Stmt | None = None


class FuncParser(ExprParser):
    """Translate one kernel (or a module of kernels) from its AST.

    ``alias`` is the name the script module is imported as (``T``); ``constants`` are the
    Python numbers a kernel may name (module globals, closure variables).
    """

    def __init__(self, source: SourceText, alias: str = "T",
                 constants: Mapping[str, object] | None = None) -> None:
        super().__init__(source)
        self.alias = alias
        self.call_prefix = alias + "."
        self.constants = constants if constants is not None else {}
        self.scopes: list[dict[str, Var | Buffer]] = []
        self.extents: dict[Var, int] = {}
        self.blocks: list[_BlockParts] = []

    # -- names -----------------------------------------------------------------------------

    def resolve_name(self, node: ast.Name) -> Value | Buffer:
        """A loop variable, iterator or buffer in scope, else a Python number constant."""
        for scope in reversed(self.scopes):
            if node.id in scope:
                return scope[node.id]
        value = self.constants.get(node.id)
        if isinstance(value, (bool, int, float)):
            return value
        visible = sorted({name for scope in self.scopes for name in scope})
        close = difflib.get_close_matches(node.id, visible, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise self.error(node, f"unknown name {node.id}{hint}")

    def buffer(self, node: ast.expr) -> Buffer:
        """The buffer a name denotes, with the buffers in scope listed when it is unknown."""
        if isinstance(node, ast.Name) and not any(node.id in s for s in self.scopes):
            known = sorted({name for scope in self.scopes for name, value in scope.items()
                            if isinstance(value, Buffer)})
            close = difflib.get_close_matches(node.id, known, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise self.error(node, f"unknown buffer {node.id}; {hint}the buffers here are "
                                   f"{', '.join(known) or 'none'}: declare it as a parameter "
                                   "(A: T.Buffer(shape, dtype)) or with T.alloc_buffer")
        return super().buffer(node)

    def function_name(self, node: ast.expr) -> str | None:
        """``"axis.remap"`` for ``T.axis.remap``; the builtins ``min``/``max``/``range``."""
        dotted = _dotted(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if not rest:
            return dotted if dotted in ("min", "max", "range") else None
        return rest if head == self.alias else None

    def known_functions(self) -> list[str]:
        """Every script function, for suggestions."""
        return [*super().known_functions(), *STATEMENT_FUNCTIONS]

    def _visit_Call(self, node: ast.Call) -> Value:
        name = self.function_name(node.func)
        if name in STATEMENT_FUNCTIONS or name == "range":
            raise self.error(node, f"{self.spelled(node.func)} is not a value, so it cannot be "
                                   "used inside an expression")
        return super()._visit_Call(node)

    def declare(self, name: str, value: Var | Buffer) -> None:
        """Bind ``name`` in the innermost scope."""
        self.scopes[-1][name] = value

    # -- functions and modules -------------------------------------------------------------

    def module(self, node: ast.ClassDef) -> IRModule:
        """An ``@T.ir_module`` class: each ``@T.prim_func`` method is a function."""
        functions = []
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and self._is_decorated(item, "prim_func"):
                functions.append(self.function(item))
            elif not _is_docstring(item) and not isinstance(item, ast.Pass):
                raise self.error(item, f"an {self.call_prefix}ir_module class holds only "
                                       f"@{self.call_prefix}prim_func functions")
        loc = self.source.loc(node)
        return self.build(node, lambda: IRModule(tuple(functions), loc))

    def function(self, node: ast.FunctionDef) -> PrimFunc:
        """A ``@T.prim_func`` function."""
        loc = self.source.loc(node)
        params = self._params(node)
        if node.returns is not None:
            raise self.error(node.returns, "a kernel returns nothing; write results into an "
                                           "output buffer parameter instead")
        self.scopes = [{param.name: param for param in params}]
        self.extents = {}
        root = _BlockParts("root")
        self.blocks = [root]
        stmts = [item for item in node.body if not _is_docstring(item)]
        body_nodes = []
        for item in stmts:
            call = self._called(item)
            if call is not None and call[0] == "block_attr":
                root.annotations.extend(self._annotations(call[1]))
            else:
                body_nodes.append(item)
        try:
            body = self.statements(body_nodes, node, f"function {node.name}")
            block = Block("root", (), (), (), body, None, tuple(root.allocs),
                          tuple(root.annotations), loc)
            return PrimFunc(node.name, params, BlockRealize((), block, TRUE, loc), loc)
        except IRError as err:
            # Constructors locate their errors at the node being built; keep that place.
            raise KernelError(err.message, err.loc or loc) from None

    def _is_decorated(self, node: ast.FunctionDef | ast.ClassDef, name: str) -> bool:
        return any(_decorator_name(d) == name for d in node.decorator_list)

    def _params(self, node: ast.FunctionDef) -> tuple[Buffer, ...]:
        args = node.args
        extra = [*args.posonlyargs, *args.kwonlyargs]
        if args.vararg or args.kwarg or extra or args.defaults:
            raise self.error(node, f"kernel {node.name} requires plain parameters "
                                   f"(A: {self.call_prefix}Buffer(shape, dtype)), without "
                                   "defaults, *args or keyword-only parameters")
        params = []
        for arg in args.args:
            call = arg.annotation
            if not (isinstance(call, ast.Call) and self.function_name(call.func) == "Buffer"):
                raise self.error(arg, f"parameter {arg.arg} requires a buffer annotation, as in "
                                      f"{arg.arg}: {self.call_prefix}Buffer((128, 128), "
                                      "\"float32\")")
            params.append(self._buffer_decl(call, arg.arg, arg))
        return tuple(params)

    # -- statements ------------------------------------------------------------------------

    def statements(self, nodes: list[ast.stmt], owner: ast.AST, what: str) -> Stmt:
        """The statements of a body, in order; ``what`` names the body in errors."""
        stmts = [stmt for stmt in (self.statement(node) for node in nodes) if stmt is not None]
        if not stmts:
            raise self.error(owner, f"{what} requires at least one statement that computes")
        return seq(*stmts)

    def statement(self, node: ast.stmt) -> Stmt | None:
        """One statement; None for declarations (buffers) and no-ops.

        Whatever goes wrong inside becomes a KernelError at the innermost statement, a bug of
        the front end included (unless ``TENSORIZE_DEBUG`` is set, to debug it).
        """
        try:
            return self._statement(node)
        except KernelError:
            raise
        except IRError as err:
            raise KernelError(err.message, err.loc or self.source.loc(node)) from None
        except Exception as err:
            if os.environ.get("TENSORIZE_DEBUG"):
                raise
            raise self.error(node, f"the script front end failed on this statement "
                                   f"({type(err).__name__}: {err}); please report it") from None

    def _statement(self, node: ast.stmt) -> Stmt | None:
        if _is_docstring(node) or isinstance(node, ast.Pass):
            return None
        if isinstance(node, ast.Assign):
            return self._assign(node)
        if isinstance(node, ast.AugAssign):
            return self._aug_assign(node)
        if isinstance(node, ast.For):
            return self._loop(node)
        if isinstance(node, ast.With):
            return self._with(node)
        if isinstance(node, ast.If):
            return self._if(node)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            return self._call_statement(node.value)
        if isinstance(node, ast.Return):
            raise self.error(node, "a kernel returns nothing; write results into an output "
                                   "buffer parameter instead")
        raise self.error(node, f"kernels cannot use a Python {type(node).__name__} statement "
                               "here; use loops, blocks, if/else and buffer stores")

    def _called(self, node: ast.stmt) -> tuple[str | None, ast.Call] | None:
        """The function name and call of a statement that is a bare call."""
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            return self.function_name(node.value.func), node.value
        return None

    def _assign(self, node: ast.Assign) -> Stmt | None:
        if len(node.targets) != 1:
            raise self.error(node, "a kernel assigns one target at a time")
        target, value = node.targets[0], node.value
        called = self.function_name(value.func) if isinstance(value, ast.Call) else None
        if isinstance(value, ast.Call) and called == "alloc_buffer" and isinstance(
                target, ast.Name):
            buffer = self._buffer_decl(value, target.id, target)
            self.blocks[-1].allocs.append(buffer)
            self.declare(target.id, buffer)
            return None
        if called is not None and called.startswith("axis."):
            raise self.error(node, f"{self.call_prefix}{called} declares a block iterator, so "
                                   f"it goes directly inside a with {self.call_prefix}block(...)")
        if isinstance(target, ast.Subscript):
            return self._store(node, target, node.value, None)
        raise self.error(target, "a kernel assigns only to buffer elements (X[i, j] = value); "
                                 f"declare buffers with {self.call_prefix}alloc_buffer and block "
                                 f"iterators with {self.call_prefix}axis")

    def _aug_assign(self, node: ast.AugAssign) -> Stmt:
        op = _AUG_OPS.get(type(node.op))
        if op is None or not isinstance(node.target, ast.Subscript):
            raise self.error(node, "a kernel updates buffer elements with += -= *= /= //= %=")
        return self._store(node, node.target, node.value, op)

    def _store(self, node: ast.stmt, target: ast.Subscript, value_node: ast.expr,
               op: str | None) -> Stmt:
        buffer = self.buffer(target.value)
        items = subscript_items(target)
        if any(isinstance(item, ast.Slice) for item in items):
            raise self.error(target, f"a store writes one element of {buffer.name}; index it "
                                     "without slices")
        if len(items) != buffer.ndim:
            raise self.error(target, f"buffer {buffer.name} has {buffer.ndim} dimensions but is "
                                     f"indexed with {len(items)}")
        indices = tuple(self.index(item) for item in items)
        value = self.value(value_node)
        if op is not None:
            load = BufferLoad(buffer, indices, self.source.loc(target))
            value = self.binary(op, load, value, node)
        result = self.to_expr(value, buffer.dtype, value_node)
        if result.dtype != buffer.dtype:
            raise self.error(value_node, f"store to {buffer.name} requires a {buffer.dtype} "
                                         f"value, got {result.dtype}; convert it with "
                                         f"{self.call_prefix}cast(value, \"{buffer.dtype}\")")
        return BufferStore(buffer, result, indices, self.source.loc(node))

    def _if(self, node: ast.If) -> Stmt:
        cond = self.condition(node.test)
        if not cond.dtype.is_bool:
            raise self.error(node.test, f"if requires a bool condition, got {cond.dtype}; "
                                        "compare it, as in x != 0")
        self.scopes.append({})
        then_case = self.statements(node.body, node, "an if branch")
        self.scopes[-1] = {}
        else_case = self.statements(node.orelse, node, "an else branch") if node.orelse else None
        self.scopes.pop()
        return IfThenElse(cond, then_case, else_case, self.source.loc(node))

    def _call_statement(self, call: ast.Call) -> Stmt:
        name = self.function_name(call.func)
        if name == "call_intrinsic":
            return self._intrinsic_call(call)
        if name in _BLOCK_HEADER:
            raise self.error(call, f"{self.spelled(call.func)} describes a block, so it goes "
                                   f"directly inside a with {self.call_prefix}block(...)")
        if name is None or (name not in STATEMENT_FUNCTIONS and name not in self._functions
                            and not dtypes.is_dtype_name(name)):
            raise self.unknown_function(call)
        raise self.error(call, f"{self.spelled(call.func)}(...) computes a value that nothing "
                               "uses; store it into a buffer")

    def _intrinsic_call(self, call: ast.Call) -> Stmt:
        if not call.args or call.keywords:
            raise self.error(call, f"{self.call_prefix}call_intrinsic requires the intrinsic's "
                                   "name then its operands, all positional")
        name = self.string(call.args[0], f"{self.call_prefix}call_intrinsic")
        args: list[BufferRegion | Expr] = []
        for arg in call.args[1:]:
            if isinstance(arg, (ast.Subscript, ast.Name)) and isinstance(
                    self._lookup(arg), Buffer):
                args.append(self.region(arg))
            else:
                args.append(self.expr(arg))
        return IntrinsicCall(name, tuple(args), self.source.loc(call))

    def _lookup(self, node: ast.Subscript | ast.Name) -> object:
        name = node.value if isinstance(node, ast.Subscript) else node
        if not isinstance(name, ast.Name):
            return None
        return next((s[name.id] for s in reversed(self.scopes) if name.id in s), None)

    # -- loops -----------------------------------------------------------------------------

    def _loop(self, node: ast.For) -> Stmt:
        if node.orelse:
            raise self.error(node, "a kernel loop cannot have an else branch")
        extents, kind, thread = self._loop_header(node.iter)
        targets = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
        if len(targets) != len(extents):
            raise self.error(node.target, f"{self.spelled(node.iter)} defines {len(extents)} "
                                          f"loop variables but the loop names {len(targets)}")
        loop_vars = []
        self.scopes.append({})
        for target, extent in zip(targets, extents):
            if not isinstance(target, ast.Name):
                raise self.error(target, "a loop variable must be a plain name")
            var = Var(target.id, dtypes.int32, self.source.loc(target))
            self.declare(target.id, var)
            self.extents[var] = extent
            loop_vars.append(var)
        body = self.statements(node.body, node, "a loop body")
        self.scopes.pop()
        loc = self.source.loc(node)
        for var, extent in reversed(list(zip(loop_vars, extents, strict=True))):
            body = self._for(node, var, extent, body, kind, thread, loc)
        return body

    def _for(self, node: ast.For, var: Var, extent: int, body: Stmt, kind: ForKind,
             thread: str | None, loc: SourceLoc) -> Stmt:
        return self.build(node, lambda: For(var, extent, body, kind, thread, loc))

    def _loop_header(self, node: ast.expr) -> tuple[list[int], ForKind, str | None]:
        name = self.function_name(node.func) if isinstance(node, ast.Call) else None
        if not isinstance(node, ast.Call) or name is None:
            raise self.error(node, "a kernel loop iterates over range(n), "
                                   f"{self.call_prefix}grid(...) "
                                   f"or a loop kind ({self.call_prefix}serial(n), "
                                   f"{self.call_prefix}parallel(n), ...), got {self.spelled(node)}")
        call = node
        spelled = self.spelled(call.func)
        if name == "grid":
            if call.keywords or not call.args:
                raise self.error(call, f"{spelled} requires one or more extents")
            return [self.constant(arg, spelled) for arg in call.args], ForKind.SERIAL, None
        if name == "thread_binding":
            if len(call.args) + len(call.keywords) == 3:
                args = self.arguments(call, ("start", "stop", "thread"))
                extent = self._extent(args["start"], args["stop"], spelled)
            else:
                args = self.arguments(call, ("extent", "thread"))
                extent = self.constant(args["extent"], spelled)
            tag = self.string(args["thread"], f"{spelled}'s thread")
            return [extent], ForKind.THREAD_BINDING, tag
        if name == "range" or name in _LOOP_KINDS:
            args = self.arguments(call, ("start", "stop"), required=1)
            kind = _LOOP_KINDS.get(name, ForKind.SERIAL)
            return [self._extent(args["start"], args.get("stop"), spelled)], kind, None
        if name in self._functions or name in STATEMENT_FUNCTIONS or dtypes.is_dtype_name(name):
            raise self.error(call, f"{spelled} is not a loop; iterate over range(n) or "
                                   f"{self.call_prefix}grid(...)")
        raise self.unknown_function(call)

    def _extent(self, start: ast.expr, stop: ast.expr | None, what: str) -> int:
        """A loop's extent from ``(n)`` (``start`` is n) or ``(0, n)``."""
        if stop is None:
            return self.constant(start, what)
        if self.constant(start, what) != 0:
            raise self.error(start, f"{what} requires loops that start at 0, got "
                                    f"{self.spelled(start)}; loop over {what}(n) and offset "
                                    "the index instead")
        return self.constant(stop, what)

    def constant(self, node: ast.expr, what: str) -> int:
        """A compile-time integer: literals, named constants and + - * // % of them."""
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            value = self.constants.get(node.id)
            if type(value) is int:
                return value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self.constant(node.operand, what)
        if isinstance(node, ast.BinOp) and type(node.op) in _CONST_OPS:
            # A chain down the left operands (1 + 2 + 3 + ...) folds in a loop, not recursion.
            chain = [node]
            while isinstance(chain[-1].left, ast.BinOp) and type(chain[-1].left.op) in _CONST_OPS:
                chain.append(chain[-1].left)
            value = self.constant(chain[-1].left, what)
            for link in reversed(chain):
                b = self.constant(link.right, what)
                if b == 0 and isinstance(link.op, (ast.FloorDiv, ast.Mod)):
                    raise self.error(link, f"{what} requires a nonzero divisor, got 0")
                value = _CONST_OPS[type(link.op)](value, b)
            return value
        raise self.error(node, f"{what} requires a constant integer, got {self.spelled(node)}")

    # -- blocks ----------------------------------------------------------------------------

    def _with(self, node: ast.With) -> Stmt:
        if len(node.items) != 1 or not isinstance(node.items[0].context_expr, ast.Call):
            raise self.error(node, "a kernel's with statement opens "
                                   f"{self.call_prefix}block(\"name\")")
        call = node.items[0].context_expr
        name = self.function_name(call.func)
        if name == "block":
            return self._block(node, call)
        if name == "init":
            raise self.error(node, f"with {self.call_prefix}init() goes directly inside a with "
                                   f"{self.call_prefix}block(...) that has a reduce iterator")
        if name is None or name not in STATEMENT_FUNCTIONS:
            raise self.unknown_function(call)
        raise self.error(call, f"with statements take {self.call_prefix}block(\"name\"), got "
                               f"{self.spelled(call.func)}")

    def _block(self, node: ast.With, call: ast.Call) -> Stmt:
        (name_node,) = self.required_arguments(call, ("name",))
        parts = _BlockParts(self.string(name_node, f"{self.call_prefix}block"))
        self.blocks.append(parts)
        self.scopes.append({})
        stmts = []
        for item in node.body:
            if not self._block_header(item, parts):
                stmt = self.statement(item)
                if stmt is not None:
                    stmts.append(stmt)
        self.scopes.pop()
        self.blocks.pop()
        if not stmts:
            raise self.error(node, f"block {parts.name!r} requires at least one statement that "
                                   "computes")
        loc = self.source.loc(node)
        block = self.build(node, lambda: Block(
            parts.name, tuple(parts.iter_vars), parts.reads or (), parts.writes or (),
            seq(*stmts), parts.init, tuple(parts.allocs), tuple(parts.annotations), loc))
        if parts.reads is None or parts.writes is None:
            block = self._with_inferred_regions(block, parts)
        predicate = parts.predicate if parts.predicate is not None else TRUE
        return self.build(node, lambda: BlockRealize(
            tuple(parts.bindings), block, predicate, loc))

    def _with_inferred_regions(self, block: Block, parts: _BlockParts) -> Block:
        reads, writes = infer_block_regions(block)
        return Block(block.name, block.iter_vars,
                     parts.reads if parts.reads is not None else tuple(reads),
                     parts.writes if parts.writes is not None else tuple(writes),
                     block.body, block.init, block.alloc_buffers, block.annotations, block.loc)

    def _block_header(self, node: ast.stmt, parts: _BlockParts) -> bool:
        """Handle a statement that describes the block; False when it is a body statement."""
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            name = self.function_name(node.value.func)
            if name in _AXIS_KINDS or name == "axis.remap":
                self._axis(node, node.value, name, parts)
                return True
            return False
        if isinstance(node, ast.With) and len(node.items) == 1:
            call = node.items[0].context_expr
            if isinstance(call, ast.Call) and self.function_name(call.func) == "init":
                self._init(node, call, parts)
                return True
            return False
        called = self._called(node)
        if called is None or called[0] not in _BLOCK_HEADER:
            return False
        name, call = called
        spelled = self.spelled(call.func)
        if name == "where":
            if parts.predicate is not None:
                raise self.error(call, f"block {parts.name!r} has two {spelled}; join the "
                                       "conditions with 'and'")
            (cond_node,) = self.required_arguments(call, ("predicate",))
            parts.predicate = self.condition(cond_node)
            if not parts.predicate.dtype.is_bool:
                raise self.error(cond_node, f"{spelled} requires a bool condition, got "
                                            f"{parts.predicate.dtype}")
        elif name == "block_attr":
            parts.annotations.extend(self._annotations(call))
        else:
            regions = self._regions(call)
            if (parts.reads if name == "reads" else parts.writes) is not None:
                raise self.error(call, f"block {parts.name!r} has two {spelled}; list every "
                                       "region in one")
            if name == "reads":
                parts.reads = regions
            else:
                parts.writes = regions
        return True

    def _init(self, node: ast.With, call: ast.Call, parts: _BlockParts) -> None:
        if call.args or call.keywords:
            raise self.error(call, f"{self.call_prefix}init() takes no arguments")
        if parts.init is not None:
            raise self.error(node, f"block {parts.name!r} has two {self.call_prefix}init(); "
                                   "merge them")
        self.scopes.append({})
        parts.init = self.statements(node.body, node, f"{self.call_prefix}init()")
        self.scopes.pop()

    def _axis(self, node: ast.Assign, call: ast.Call, name: str, parts: _BlockParts) -> None:
        if len(node.targets) != 1:
            raise self.error(node, "a block iterator is declared one assignment at a time")
        target = node.targets[0]
        spelled = self.spelled(call.func)
        if name == "axis.remap":
            kinds, binding_nodes = self._remap(call, spelled)
            targets = target.elts if isinstance(target, ast.Tuple) else [target]
            if len(targets) != len(kinds):
                raise self.error(node, f"{spelled} declares {len(kinds)} iterators "
                                       f"({kinds!r}) but assigns {len(targets)} names")
            for kind_char, target_node, binding_node in zip(kinds, targets, binding_nodes,
                                                            strict=True):
                binding = self.index(binding_node)
                extent = self.extents.get(binding) if isinstance(binding, Var) else None
                if extent is None:
                    raise self.error(binding_node, f"{spelled} requires loop variables or "
                                                   f"iterators, got {self.spelled(binding_node)}; "
                                                   f"use {self.call_prefix}axis.spatial(extent, "
                                                   "binding) for an expression")
                self._iterator(target_node, _REMAP_KINDS[kind_char], extent, binding,
                               binding_node, parts)
            return
        extent_node, binding_node = self.required_arguments(call, ("extent", "binding"))
        extent = self.constant(extent_node, spelled)
        binding = self.index(binding_node)
        self._iterator(target, _AXIS_KINDS[name], extent, binding, call, parts)

    def _remap(self, call: ast.Call, spelled: str) -> tuple[str, list[ast.expr]]:
        kinds_node, bindings_node = self.required_arguments(call, ("kinds", "bindings"))
        kinds = self.string(kinds_node, spelled)
        bad = [k for k in kinds if k not in _REMAP_KINDS]
        if bad or not kinds:
            raise self.error(kinds_node, f"{spelled} requires a string of 'S' (spatial) and "
                                         f"'R' (reduce), got {kinds!r}")
        if not isinstance(bindings_node, (ast.List, ast.Tuple)):
            raise self.error(bindings_node, f"{spelled} requires a list of loop variables, "
                                            f"as in {spelled}(\"SR\", [i, k])")
        if len(kinds) != len(bindings_node.elts):
            raise self.error(kinds_node, f"{spelled} requires one kind letter per binding: "
                                         f"{kinds!r} has {len(kinds)} but "
                                         f"{len(bindings_node.elts)} bindings are given")
        return kinds, list(bindings_node.elts)

    def _iterator(self, target: ast.expr, kind: IterKind, extent: int, binding: Expr,
                  where: ast.AST, parts: _BlockParts) -> None:
        if not isinstance(target, ast.Name):
            raise self.error(target, "a block iterator must be a plain name")
        var = Var(target.id, dtypes.int32, self.source.loc(target))
        loc = self.source.loc(where)
        iter_var = self.build(where, lambda: IterVar(var, extent, kind, loc))
        parts.iter_vars.append(iter_var)
        parts.bindings.append(binding)
        self.declare(target.id, var)
        self.extents[var] = extent

    def _annotations(self, call: ast.Call) -> list[tuple[str, AnnotationValue]]:
        (dict_node,) = self.required_arguments(call, ("attrs",))
        spelled = self.spelled(call.func)
        if not isinstance(dict_node, ast.Dict):
            raise self.error(dict_node, f"{spelled} requires a dict literal, as in "
                                        f"{spelled}({{\"key\": 1}})")
        items = []
        for key, value in zip(dict_node.keys, dict_node.values):
            try:
                literal = ast.literal_eval(value)
            except (ValueError, TypeError):  # TypeError: an unhashable key in a set or dict
                literal = None
            if not isinstance(key, ast.Constant) or not isinstance(key.value, str):
                raise self.error(key or dict_node, f"{spelled} requires string keys")
            if not isinstance(literal, (str, int, float)):
                raise self.error(value, f"{spelled} requires string or number values, got "
                                        f"{self.spelled(value)}")
            items.append((key.value, literal))
        return items

    # -- regions and buffers ---------------------------------------------------------------

    def _regions(self, call: ast.Call) -> tuple[BufferRegion, ...]:
        if call.keywords:
            raise self.error(call, f"{self.spelled(call.func)} takes regions as positional "
                                   "arguments")
        nodes: list[ast.expr] = []
        for arg in call.args:
            nodes.extend(arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg])
        return tuple(self.region(node) for node in nodes)

    def region(self, node: ast.expr) -> BufferRegion:
        """``A[vi, 0:16]`` (a point or slice per dimension), or ``A`` for all of it."""
        if isinstance(node, ast.Name):
            buffer = self.buffer(node)
            return BufferRegion(buffer, BufferRegion.full(buffer).ranges, self.source.loc(node))
        if not isinstance(node, ast.Subscript):
            raise self.error(node, f"a region is a buffer or a slice of one, as in A[vi, 0:16], "
                                   f"got {self.spelled(node)}")
        buffer = self.buffer(node.value)
        items = subscript_items(node)
        if len(items) != buffer.ndim:
            raise self.error(node, f"buffer {buffer.name} has {buffer.ndim} dimensions but the "
                                   f"region gives {len(items)}")
        ranges = tuple(self._range(item, extent) for item, extent in zip(items, buffer.shape))
        for item, rng in zip(items, ranges):
            if isinstance(rng.extent, IntImm) and rng.extent.value <= 0:
                raise self.error(item, f"a region slice requires at least one element, got "
                                       f"{self.spelled(item)} ({rng.extent.value} elements)")
        return BufferRegion(buffer, ranges, self.source.loc(node))

    def _range(self, node: ast.expr, dim: int) -> Range:
        loc = self.source.loc(node)
        if not isinstance(node, ast.Slice):
            return Range(self.index(node), IntImm(1, dtypes.int32, loc), loc)
        if node.step is not None:
            raise self.error(node.step, "a region slice cannot have a step")
        lower = node.lower
        start = self.index(lower) if lower is not None else IntImm(0, dtypes.int32, loc)
        if node.upper is None:
            stop: Expr = IntImm(dim, dtypes.int32, loc)
            return Range(start, self.binary("sub", stop, start, node)
                         if lower is not None else stop, loc)
        if lower is None or (isinstance(lower, ast.Constant) and lower.value == 0):
            return Range(start, self.index(node.upper), loc)
        upper = node.upper
        # start:start + extent is how the printer writes a range; read the extent back as is.
        if (isinstance(upper, ast.BinOp) and isinstance(upper.op, ast.Add)
                and self.index(upper.left) == start):
            return Range(start, self.index(upper.right), loc)
        if isinstance(start, IntImm) and _is_int_literal(upper):
            return Range(start, IntImm(self.constant(upper, "a region bound") - start.value,
                                       dtypes.int32, loc), loc)
        return Range(start, self.binary("sub", self.value(upper), start, node), loc)

    def _buffer_decl(self, call: ast.Call, name: str, where: ast.AST) -> Buffer:
        spelled = self.spelled(call.func)
        args = self.arguments(call, ("shape", "dtype", "scope", "strides"), required=1)
        shape = self._int_tuple(args["shape"], f"{spelled}'s shape")
        dtype = dtypes.float32
        if "dtype" in args:
            dtype = self.dtype_argument(args["dtype"], f"{spelled}'s dtype")
        scope = self.string(args["scope"], f"{spelled}'s scope") if "scope" in args else "global"
        strides_node = args.get("strides")
        strides = None
        if strides_node is not None and not (isinstance(strides_node, ast.Constant)
                                             and strides_node.value is None):
            strides = self._int_tuple(strides_node, f"{spelled}'s strides")
        loc = self.source.loc(where)
        return self.build(call, lambda: Buffer(name, shape, dtype, scope, strides, loc))

    def _int_tuple(self, node: ast.expr, what: str) -> tuple[int, ...]:
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.constant(item, what) for item in node.elts)
        return (self.constant(node, what),)


_CONST_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
              ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b,
              ast.Mod: lambda a, b: a % b}


def _is_int_literal(node: ast.expr) -> bool:
    """``3`` or ``-3``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def _dotted(node: ast.expr) -> str | None:
    """``"T.axis.remap"`` for the attribute chain ``T.axis.remap``; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _decorator_name(node: ast.expr) -> str | None:
    """The last component of a decorator (``prim_func`` for ``@T.prim_func``)."""
    target = node.func if isinstance(node, ast.Call) else node
    dotted = _dotted(target)
    return dotted.rpartition(".")[2] if dotted else None


def decorator_alias(node: ast.FunctionDef | ast.ClassDef, name: str) -> str | None:
    """The module alias used by the ``@<alias>.<name>`` decorator, "" when bare; None if absent."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        dotted = _dotted(target)
        if dotted and dotted.rpartition(".")[2] == name:
            return dotted.rpartition(".")[0].partition(".")[0]
    return None


def _is_docstring(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))
