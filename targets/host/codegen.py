"""A PrimFunc to one LLVM function: ``void name(ptr buffer0, ..., ptr status)``.

Every buffer (the parameters, then each block's ``alloc_buffers``) arrives as a pointer to its
first element; the caller owns all storage. Statements map one to one:

- ``For``: a counted loop, whatever its kind. Parallel, vectorized, unrolled and thread-bound
  loops run serially here: the kind is a hint for other backends, and LLVM vectorizes on its
  own where that keeps results exact.
- ``BlockRealize``: binds the iterators to the bindings' values, skips the instance when the
  predicate is false, and runs ``init`` when every reduce iterator is 0, before the body.
- ``IfThenElse``, ``SeqStmt``, ``BufferStore``: as written.

An ``IntrinsicCall`` must have been lowered to plain IR first (:mod:`.prepare`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir as ll

from ir.buffer import Buffer
from ir.errors import ExecutionError
from ir.expr import IntImm, Var
from ir.function import PrimFunc
from ir.stmt import (
    Block,
    BlockRealize,
    BufferStore,
    For,
    IfThenElse,
    IntrinsicCall,
    IterKind,
    SeqStmt,
    Stmt,
)
from targets.host import numerics as nm
from targets.host.exprs import BoundsSite, ExprEmitter
from targets.host.numerics import I1
from targets.identifiers import mangle


@dataclass(frozen=True)
class Generated:
    """A function's LLVM module, the buffers its arguments point to (in order) and the
    access sites its bounds checks report by number."""

    module: ll.Module
    symbol: str
    buffers: tuple[Buffer, ...]
    sites: tuple[BoundsSite, ...]


def generate(func: PrimFunc, buffers: tuple[Buffer, ...]) -> Generated:
    """Emit ``func`` as an LLVM module whose function takes one pointer per buffer of
    ``buffers`` and then the status pointer (three int64s, see :class:`ExprEmitter`)."""
    # Every name in the module is an identifier of targets.identifiers: ASCII, so the JIT
    # finds the symbol, and no line break ends the "; ModuleID" comment. llvmlite makes
    # repeated local names unique.
    module = ll.Module(name=mangle(func.name))
    symbol = "tensorize_" + mangle(func.name)
    arg_types = [ll.PointerType()] * (len(buffers) + 1)
    function = ll.Function(module, ll.FunctionType(ll.VoidType(), arg_types), symbol)
    for arg, buffer in zip(function.args, buffers):
        arg.name = mangle(buffer.name)
    function.args[-1].name = "status"
    builder = ll.IRBuilder(function.append_basic_block("entry"))
    pointers = dict(zip(buffers, function.args))
    emitter = StmtEmitter(function, builder, pointers, function.args[-1])
    emitter.stmt(func.body)
    builder.ret_void()
    return Generated(module, symbol, buffers, tuple(emitter.sites))


class StmtEmitter(ExprEmitter):
    """Statements on top of the expression emitter; a backend that lowers some statements
    differently (the arm backend's register buffers) subclasses it."""

    # Named in errors, with the error class raised for a statement the backend cannot emit.
    backend = "host"
    error: type[Exception] = ExecutionError

    def stmt(self, node: Stmt) -> None:
        """Emit one statement."""
        handler: Callable[[Stmt], None] | None = getattr(self, "_" + type(node).__name__, None)
        if handler is None:
            raise self.error(f"the {self.backend} backend requires statements it knows, got "
                             f"{type(node).__name__}")
        handler(node)

    def _SeqStmt(self, node: SeqStmt) -> None:
        for item in node.stmts:
            self.stmt(item)

    def _BufferStore(self, store: BufferStore) -> None:
        value = nm.to_memory(self.b, store.buffer.dtype, self.expr(store.value))
        address = self.address(store.buffer, store.indices, "store")
        self.b.store(value, address)

    def _IfThenElse(self, node: IfThenElse) -> None:
        cond = self.expr(node.cond)
        if node.else_case is None:
            with self.b.if_then(cond):
                self.stmt(node.then_case)
            return
        with self.b.if_else(cond) as (then, otherwise):
            with then:
                self.stmt(node.then_case)
            with otherwise:
                self.stmt(node.else_case)

    def _For(self, loop: For) -> None:
        b = self.b
        ty = nm.value_type(loop.var.dtype)
        if not loop.var.dtype.is_int or loop.extent > loop.var.dtype.max:
            raise self.error(f"loop {loop.var.name} requires an integer variable that can "
                                 f"count to {loop.extent}, got {loop.var.dtype}", loop.loc)
        # Extents are positive constants, so the body runs at least once: test at the bottom.
        before = b.block
        name = mangle(loop.var.name)
        body = b.append_basic_block(f"{name}.body")
        after = b.append_basic_block(f"{name}.end")
        b.branch(body)
        b.position_at_end(body)
        counter = b.phi(ty, name)
        counter.add_incoming(ll.Constant(ty, 0), before)
        self.loop_body(loop, counter, before)
        following = b.add(counter, ll.Constant(ty, 1))
        counter.add_incoming(following, b.block)
        b.cbranch(b.icmp_unsigned("<", following, ll.Constant(ty, loop.extent)), body, after)
        b.position_at_end(after)

    def loop_body(self, loop: For, counter: ll.Value, entry: ll.Block) -> None:
        """Emit ``loop``'s body once, its variable bound to ``counter`` (the phi that the
        block ``entry`` enters with 0); a backend carrying other values around the loop
        adds their phis here."""
        with self._bound({loop.var: counter}):
            self.stmt(loop.body)

    def _BlockRealize(self, realize: BlockRealize) -> None:
        block = realize.block
        values = {iv.var: nm.convert(self.b, binding.dtype, iv.var.dtype, self.expr(binding))
                  for iv, binding in zip(block.iter_vars, realize.bindings)}
        outer_name = self.block_name
        if _always(realize.predicate):
            self._block_instance(realize, values)
        else:
            with self.b.if_then(self.expr(realize.predicate)):
                self._block_instance(realize, values)
        self.block_name = outer_name

    def _block_instance(self, realize: BlockRealize, values: dict[Var, ll.Value]) -> None:
        block = realize.block
        self.block_name = block.name
        with self._bound(values):
            if block.init is not None:
                with self.b.if_then(self.first_iteration(block, values)):
                    self.stmt(block.init)
            self.stmt(block.body)

    def first_iteration(self, block: Block, values: dict[Var, ll.Value]) -> ll.Value:
        """True when every reduce iterator of ``block`` is 0: where its init runs."""
        first = ll.Constant(I1, 1)
        for iv in block.iter_vars:
            if iv.kind is IterKind.REDUCE:
                value = values[iv.var]
                first = self.b.and_(first, self.b.icmp_unsigned("==", value,
                                                                ll.Constant(value.type, 0)))
        return first

    def _IntrinsicCall(self, call: IntrinsicCall) -> None:
        raise ExecutionError(f"no lowering for intrinsic {call.intrinsic!r}; pass "
                             "lower_intrinsic= or register the intrinsic", call.loc)

    def _bound(self, values: dict[Var, ll.Value]) -> _Binding:
        return _Binding(self.env, values)


class _Binding:
    """Binds variables for the duration of a ``with``, restoring what they shadowed."""

    def __init__(self, env: dict[Var, ll.Value], values: dict[Var, ll.Value]) -> None:
        self.env = env
        self.values = values
        self.saved: dict[Var, ll.Value | None] = {}

    def __enter__(self) -> None:
        self.saved = {var: self.env.get(var) for var in self.values}
        self.env.update(self.values)

    def __exit__(self, *_exc: object) -> None:
        for var, old in self.saved.items():
            if old is None:
                del self.env[var]
            else:
                self.env[var] = old


def _always(predicate: object) -> bool:
    return isinstance(predicate, IntImm) and predicate.dtype.is_bool and predicate.value == 1

