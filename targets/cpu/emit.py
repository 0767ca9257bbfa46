"""Tensorized IR to LLVM IR for a CPU target: plain statements as the host backend lowers
them, intrinsic calls through their ``emit.llvm`` templates, and register buffers as SSA
values. Everything about the machine comes from its description (:class:`CpuTarget`): the
triple, the register scope, the vector size.

A buffer in the target's register scope (the schedule's accumulator, A and B tiles) is never
given memory. Each of its vector-sized pieces is one LLVM vector value, looked up by the
piece's offset, which every index must fix at emission time (:mod:`.static`): the loops
indexing a register buffer are unrolled here, and a serial loop gets a phi per live piece,
so the accumulators of a register tile stay in vector registers across the k loop. An
intrinsic operand that lives in memory must be one contiguous run of bytes, as a vector load
or store of a whole register moves it; any other tile is refused with :class:`EmitError`
rather than read wrongly. A 4-byte operand of an instruction that takes a whole register is
that 32-bit lane replicated to every lane (a lane of a register: SDOT by element; a word of
memory: a broadcast load, as VPDPBUSD's row of A).

A load or store template's ``align N`` is emitted as written, after checking that the address
has it: each buffer starts at a multiple of the target's ``alignment`` (the runners allocate
them so), and the offset's form (:mod:`.static`) proves the rest, or the call is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from math import gcd

from llvmlite import ir as ll

from intrinsics import (
    CPU_BACKEND,
    CpuTarget,
    Intrinsic,
    Registry,
    default_registry,
    feature_names,
)
from ir.buffer import Buffer
from ir.expr import Expr, IntImm, Var
from ir.function import PrimFunc
from ir.stmt import (
    BlockRealize,
    BufferRegion,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    IntrinsicCall,
)
from ir.visitor import Visitor
from targets.cpu import templates
from targets.cpu.errors import EmitError
from targets.cpu.static import Form, evaluate
from targets.host import numerics as nm
from targets.host.codegen import StmtEmitter
from targets.host.exprs import BoundsSite
from targets.host.numerics import I64
from targets.host.prepare import storage, written_params

__all__ = ["CpuKernel", "emit"]

_I32 = ll.IntType(32)


@dataclass(frozen=True)
class CpuKernel:
    """An emitted kernel: its LLVM IR (``llvm_ir``, unoptimized), the function's ``symbol``,
    the ``buffers`` its pointer arguments address in order (parameters first, then the
    intermediates; a final argument points at three int64s of bounds-check status), the
    parameters it writes (``outputs``), the ``cpu`` target and its ``features``, and the
    bounds-check ``sites``."""

    func: PrimFunc
    llvm_ir: str
    symbol: str
    buffers: tuple[Buffer, ...]
    outputs: tuple[str, ...]
    cpu: CpuTarget
    features: str
    sites: tuple[BoundsSite, ...]


def emit(func: PrimFunc, target: str, features: str | None = None,
         registry: Registry | None = None) -> CpuKernel:
    """Emit ``func`` (tensorized for CPU target ``target``, or plain) as LLVM IR for it,
    with ``features`` (default: the target's own, ``cpu.features`` of its description).

    Raises EmitError when it calls an intrinsic that ``features`` does not provide or that
    has no llvm template, reads an operand tile that is not contiguous or not as aligned as
    its template says, or indexes a register buffer by a value not known at emission time;
    IntrinsicSpecError when no description makes ``target`` a CPU target.
    """
    registry = registry or default_registry()
    cpu = registry.cpu(target)
    features = cpu.default_features if features is None else features
    _check_features(func, features, registry)
    buffers = tuple(b for b in storage(func) if b.scope != cpu.register_scope)
    module = ll.Module(name=_identifier(func.name))
    module.triple = cpu.triple
    symbol = "tensorize_" + _identifier(func.name)
    function = ll.Function(module, ll.FunctionType(ll.VoidType(), [ll.PointerType()] *
                                                   (len(buffers) + 1)), symbol)
    for arg, buffer in zip(function.args, buffers):
        arg.name = _identifier(buffer.name)
        # Every buffer is its own allocation (the runners lay them out apart): telling LLVM
        # lets it combine a packing stage's byte copies into word and vector moves.
        arg.add_attribute("noalias")
    function.args[-1].name = "status"
    builder = ll.IRBuilder(function.append_basic_block("entry"))
    emitter = _CpuEmitter(function, builder, dict(zip(buffers, function.args)),
                          function.args[-1], registry, cpu)
    emitter.stmt(func.body)
    builder.ret_void()
    outputs = _written(func, registry)
    return CpuKernel(func, _no_builtins(str(module), symbol), symbol, buffers, outputs, cpu,
                     features, tuple(emitter.sites))


def _identifier(name: str) -> str:
    """``name`` with every character but ASCII letters, digits and ``_`` replaced by ``_``:
    the module's name stands in a comment (``; ModuleID = "..."``) that a line break would
    end, and plain names keep the IR readable (llvmlite makes clashing names unique)."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in name)


def _no_builtins(text: str, symbol: str) -> str:
    """Mark the function ``no-builtins`` so LLVM does not turn a loop into a call of memset or
    memcpy: the object code must stand alone (it runs under an emulator with no libc)."""
    pattern = re.compile(rf'^(define void @"?{symbol}"?\(.*\))', re.MULTILINE)
    text, count = pattern.subn(r"\1 #0", text, count=1)
    if count != 1:
        raise EmitError(f"the CPU code generator could not find the definition of {symbol} "
                        "in the module it built; please report it")
    return text + '\nattributes #0 = { "no-builtins" }\n'


def _check_features(func: PrimFunc, features: str, registry: Registry) -> None:
    enabled = feature_names(features)
    for call in _calls(func):
        intrinsic = registry.get(call.intrinsic)
        if not intrinsic.available(enabled):
            raise EmitError(f"{intrinsic.name} requires target feature +{intrinsic.feature}, "
                            f"got features {features!r}; pass features="
                            f"'{features},+{intrinsic.feature}'", call.loc)
        if CPU_BACKEND not in intrinsic.emit:
            raise EmitError(f"the CPU code generator requires an emit.{CPU_BACKEND} template, "
                            f"and {intrinsic.name} (target {intrinsic.target}) has none",
                            call.loc)


def _written(func: PrimFunc, registry: Registry) -> tuple[str, ...]:
    """The parameters a store or an intrinsic's output operand writes, in order."""
    written = {id(p) for p in written_params(func)}
    for call in _calls(func):
        intrinsic = registry.get(call.intrinsic)
        for operand, region in zip(intrinsic.operands, call.args):
            if operand.role != "input" and isinstance(region, BufferRegion):
                written.add(id(region.buffer))
    return tuple(p.name for p in func.params if id(p) in written)


def _calls(func: PrimFunc) -> list[IntrinsicCall]:
    found: list[IntrinsicCall] = []

    class _Calls(Visitor):
        def visit_IntrinsicCall(self, call: IntrinsicCall) -> None:
            found.append(call)

    _Calls().visit(func.body)
    return found


@dataclass(frozen=True)
class _Tile:
    """Where an operand's elements are: a register piece (``key``) and the bytes within it,
    or memory (``address``, aligned to ``align`` bytes) holding ``size`` contiguous bytes."""

    size: int
    key: tuple[int, int] | None = None
    offset: int = 0
    address: ll.Value | None = None
    align: int = 1


class _CpuEmitter(StmtEmitter):
    """Register buffers, unrolled loops and intrinsic calls on top of the host's statements
    and expressions."""

    backend = "CPU"
    error = EmitError

    def __init__(self, function: ll.Function, builder: ll.IRBuilder,
                 pointers: dict[Buffer, ll.Value], status: ll.Value, registry: Registry,
                 cpu: CpuTarget) -> None:
        super().__init__(function, builder, pointers, status)
        self.registry = registry
        self.scope = cpu.register_scope
        self.vector_bytes = cpu.vector_bytes
        self.alignment = cpu.alignment
        self.lanes = ll.VectorType(_I32, cpu.vector_bytes // 4)
        self.forms: dict[Var, Form] = {}
        self.registers: dict[tuple[int, int], ll.Value] = {}

    # -- statements -------------------------------------------------------------------------

    def _BufferStore(self, store: BufferStore) -> None:
        value = nm.to_memory(self.b, store.buffer.dtype, self.expr(store.value))
        if store.buffer.scope == self.scope:
            self._set_element(store.buffer, store.indices, value)
            return
        self.b.store(value, self.address(store.buffer, store.indices, "store"))

    def _BufferLoad(self, load) -> ll.Value:  # type: ignore[no-untyped-def]
        if load.buffer.scope != self.scope:
            return super()._BufferLoad(load)
        key, lane, vector = self._element(load.buffer, load.indices)
        raw = self.b.extract_element(self.b.bitcast(self._piece(key, load.buffer), vector),
                                     ll.Constant(ll.IntType(32), lane))
        return nm.from_memory(self.b, load.buffer.dtype, raw)

    def _IfThenElse(self, node: IfThenElse) -> None:
        with self._no_register_writes("a branch"):
            super()._IfThenElse(node)

    def _For(self, loop: For) -> None:
        if loop.kind is ForKind.UNROLLED:
            for value in range(loop.extent):
                with self._bind({loop.var: ll.Constant(nm.value_type(loop.var.dtype), value)},
                                {loop.var: Form(value)}):
                    self.stmt(loop.body)
            return
        super()._For(loop)

    def loop_body(self, loop: For, counter: ll.Value, entry: ll.Block) -> None:
        # Every register piece live into the loop is carried around it: the accumulators.
        carried = {}
        for key, value in self.registers.items():
            phi = self.b.phi(value.type)
            phi.add_incoming(value, entry)
            carried[key] = phi
        self.registers.update(carried)
        with self._bind({loop.var: counter}, {}):
            self.stmt(loop.body)
        for key, phi in carried.items():
            phi.add_incoming(self.registers[key], self.b.block)

    def _BlockRealize(self, realize: BlockRealize) -> None:
        block = realize.block
        values = {iv.var: nm.convert(self.b, binding.dtype, iv.var.dtype, self.expr(binding))
                  for iv, binding in zip(block.iter_vars, realize.bindings)}
        forms = {}
        for iv, binding in zip(block.iter_vars, realize.bindings):
            form = evaluate(binding, self.forms)
            forms[iv.var] = form if form is not None else Form(0, {iv.var: 1})
        outer_name = self.block_name
        self.block_name = block.name
        with self._bind(values, forms):
            if isinstance(realize.predicate, IntImm) and realize.predicate.value == 1:
                self._block_body(realize, values)
            else:
                with self._no_register_writes("a block predicate"), \
                        self.b.if_then(self.expr(realize.predicate)):
                    self._block_body(realize, values)
        self.block_name = outer_name

    def _block_body(self, realize: BlockRealize, values: dict[Var, ll.Value]) -> None:
        block = realize.block
        if block.init is not None:
            with self._no_register_writes("a block init"), \
                    self.b.if_then(self.first_iteration(block, values)):
                self.stmt(block.init)
        self.stmt(block.body)

    # -- intrinsic calls ---------------------------------------------------------------------

    def _IntrinsicCall(self, call: IntrinsicCall) -> None:
        intrinsic = self.registry.get(call.intrinsic)
        template = templates.parse(intrinsic.name, intrinsic.emit[CPU_BACKEND])
        tiles = {op.name: self._tile(intrinsic, op.name, region)
                 for op, region in zip(intrinsic.operands, call.args)
                 if isinstance(region, BufferRegion)}
        regions = {op.name: region for op, region in zip(intrinsic.operands, call.args)}
        if template.kind == "store":
            (ty, source), = template.args
            value = self._operand(intrinsic, source, tiles[source], ty)
            self._write(intrinsic, template.pointer, tiles[template.pointer], value, regions,
                        memory_only=True, align=template.align)
            return
        if template.kind == "load":
            pointer = self._memory(intrinsic, template.pointer, tiles[template.pointer],
                                   template.result_type, template.align)
            value = self.b.load(pointer, typ=template.result_type, align=template.align)
        elif template.kind == "zero":
            value = ll.Constant(template.result_type, None)
        else:
            args = [self._operand(intrinsic, name, tiles[name], ty) for ty, name in template.args]
            function = self.declare(template.function, template.result_type,
                                    tuple(ty for ty, _ in template.args))
            value = self.b.call(function, args)
        self._write(intrinsic, template.result, tiles[template.result], value, regions)

    def _tile(self, intrinsic: Intrinsic, name: str, region: BufferRegion) -> _Tile:
        """Where operand ``name``'s tile is, after checking it is one contiguous run of the
        operand's size (the instruction moves whole registers or 32-bit lanes)."""
        buffer = region.buffer
        extents = []
        for rng in region.ranges:
            if not isinstance(rng.extent, IntImm):
                raise EmitError(f"block {self.block_name}: operand {name} of {intrinsic.name} "
                                f"requires a constant-size tile of {buffer.name}")
            extents.append(rng.extent.value)
        operand = intrinsic.operand(name)
        wanted = 1
        for extent in operand.buffer.shape:
            wanted *= extent
        count = 1
        for extent in extents:
            count *= extent
        strides = buffer.effective_strides
        if count != wanted or not _contiguous(extents, strides):
            raise EmitError(
                f"block {self.block_name}: operand {name} of {intrinsic.name} requires "
                f"{wanted} contiguous {operand.buffer.dtype} elements (one register's "
                f"worth), got a {'x'.join(map(str, extents))} tile of {buffer.name} with "
                f"strides {strides}; pack the operand first (transform_layout)",
                region.loc)
        size = count * buffer.dtype.bits // 8
        if buffer.scope != self.scope:
            address, align = self._tile_address(region)
            return _Tile(size, address=address, align=align)
        starts = [self._static(rng.start, buffer) for rng in region.ranges]
        offset = sum(s * st for s, st in zip(starts, strides)) * buffer.dtype.bits // 8
        piece, within = divmod(offset, self.vector_bytes)
        if within + size > self.vector_bytes or within % 4 or size % 4:
            raise EmitError(f"block {self.block_name}: operand {name} of {intrinsic.name} "
                            f"requires its {size} bytes of register buffer {buffer.name} "
                            f"within one register, 4-byte aligned; they start at byte "
                            f"{offset}")
        return _Tile(size, (id(buffer), piece), within)

    def _operand(self, intrinsic: Intrinsic, name: str, tile: _Tile, ty: ll.Type
                 ) -> ll.Value:
        """Operand ``name`` as a value of vector type ``ty``: a register, a load of contiguous
        memory, or a 32-bit lane replicated to all lanes (of a register: the by-element forms;
        of memory: a broadcast load)."""
        bits = ty.count * ty.element.width
        if tile.key is None and bits == tile.size * 8:
            return self.b.load(self._memory(intrinsic, name, tile, ty, 1), typ=ty,
                               align=tile.align)
        if tile.key is not None and tile.size == self.vector_bytes:
            return self.b.bitcast(self._piece(tile.key, None), ty)
        if tile.size != 4 or bits % 32:
            raise EmitError(f"block {self.block_name}: operand {name} of {intrinsic.name} "
                            f"requires a whole register or one 32-bit lane, got {tile.size} "
                            "bytes")
        count = bits // 32
        if tile.key is None:
            word = self.b.load(tile.address, typ=_I32, align=tile.align)
            lanes = self.b.insert_element(ll.Constant(ll.VectorType(_I32, count), None), word,
                                          ll.Constant(_I32, 0))
            lane = 0
        else:
            lanes = self.b.bitcast(self._piece(tile.key, None), self.lanes)
            lane = tile.offset // 4
        splat = self.b.shuffle_vector(lanes, ll.Constant(lanes.type, None),
                                      ll.Constant(ll.VectorType(_I32, count), [lane] * count))
        return self.b.bitcast(splat, ty)

    def _write(self, intrinsic: Intrinsic, name: str, tile: _Tile, value: ll.Value,
               regions: dict[str, object], memory_only: bool = False, align: int = 1) -> None:
        if tile.key is None:
            self.b.store(value, self._memory(intrinsic, name, tile, value.type, align),
                         align=align)
            return
        if memory_only:
            raise EmitError(f"block {self.block_name}: {intrinsic.name} stores to register "
                            f"buffer {regions[name].buffer.name}; its operand {name} must be "
                            "in memory")
        bits = value.type.count * value.type.element.width
        if tile.size == self.vector_bytes and bits == self.vector_bytes * 8:
            self.registers[tile.key] = value
            return
        if tile.size != 4 or bits != 32:
            raise EmitError(f"block {self.block_name}: {intrinsic.name} writes {bits // 8} "
                            f"bytes into a {tile.size}-byte tile of a register")
        word = self.b.bitcast(value, _I32)
        current = self.registers.get(tile.key, ll.Constant(self.lanes, None))
        self.registers[tile.key] = self.b.insert_element(
            self.b.bitcast(current, self.lanes), word, ll.Constant(_I32, tile.offset // 4))

    def _memory(self, intrinsic: Intrinsic, name: str, tile: _Tile, ty: ll.Type, align: int
                ) -> ll.Value:
        """The address of a memory operand of ``ty``'s size that its template says is
        ``align``-byte aligned; EmitError when the tile is not that size or the address is
        not proven that aligned."""
        bits = ty.count * ty.element.width
        if tile.address is None or bits != tile.size * 8:
            raise EmitError(f"block {self.block_name}: operand {name} of {intrinsic.name} "
                            f"requires {bits // 8} bytes of memory, got a {tile.size}-byte "
                            "tile")
        if tile.align % align:
            raise EmitError(f"block {self.block_name}: operand {name} of {intrinsic.name} "
                            f"requires an address aligned to {align} bytes (its template's "
                            f"'align {align}'), got one aligned to {tile.align}; give the "
                            "family an unaligned variant (a smaller 'align N'), or lay the "
                            "buffer out so each tile starts at a multiple of it")
        return tile.address

    def _tile_address(self, region: BufferRegion) -> tuple[ll.Value, int]:
        """The address of a memory tile's first element (its extent was checked whole by
        the schedule's region analysis; the tile's own bytes need no per-element check),
        and the alignment it is proven to have: the buffer's start is a multiple of the
        target's alignment, and the offset's form a multiple of the gcd of its terms."""
        buffer = region.buffer
        base = self.pointers.get(buffer)
        if base is None:
            raise EmitError(f"block {self.block_name} requires buffer {buffer.name} to be a "
                            "parameter or allocated by an enclosing block")
        size = max(buffer.dtype.bits // 8, 1)
        offset: ll.Value = ll.Constant(I64, 0)
        step = 0  # the gcd of the offset's terms, in elements (0: the offset is 0)
        for rng, stride in zip(region.ranges, buffer.effective_strides):
            term = self._index(rng.start)
            if stride != 1:
                term = self.b.mul(term, ll.Constant(I64, stride))
            offset = self.b.add(offset, term)
            form = evaluate(rng.start, self.forms)
            parts = [1] if form is None else [form.const, *form.terms.values()]
            for part in parts:
                step = gcd(step, part * stride)
        align = gcd(self.alignment, step * size) if step else self.alignment
        return self.b.gep(base, [offset], source_etype=nm.memory_type(buffer.dtype)), align

    # -- register buffers --------------------------------------------------------------------

    def _static(self, index: Expr, buffer: Buffer) -> int:
        form = evaluate(index, self.forms)
        if form is None or form.value is None:
            raise EmitError(f"block {self.block_name}: register buffer {buffer.name} is "
                            f"indexed by {index}, which is not known when the code is emitted; "
                            "unroll the loops that index it")
        return form.value

    def _element(self, buffer: Buffer, indices: tuple[Expr, ...]
                 ) -> tuple[tuple[int, int], int, ll.VectorType]:
        flat = sum(self._static(i, buffer) * s for i, s in zip(indices, buffer.effective_strides))
        size = buffer.dtype.bits // 8
        piece, within = divmod(flat * size, self.vector_bytes)
        vector = ll.VectorType(nm.memory_type(buffer.dtype), self.vector_bytes // size)
        return (id(buffer), piece), within // size, vector

    def _set_element(self, buffer: Buffer, indices: tuple[Expr, ...], value: ll.Value) -> None:
        key, lane, vector = self._element(buffer, indices)
        current = self.registers.get(key, ll.Constant(vector, None))
        self.registers[key] = self.b.insert_element(self.b.bitcast(current, vector), value,
                                                    ll.Constant(ll.IntType(32), lane))

    def _piece(self, key: tuple[int, int], buffer: Buffer | None) -> ll.Value:
        value = self.registers.get(key)
        if value is None:
            name = buffer.name if buffer is not None else "a register buffer"
            raise EmitError(f"block {self.block_name} reads {name} (register piece {key[1]}) "
                            "before anything writes it")
        return value

    # -- scoping -----------------------------------------------------------------------------

    @contextmanager
    def _bind(self, values: dict[Var, ll.Value], forms: dict[Var, Form]) -> Iterator[None]:
        saved = {var: self.env.get(var) for var in values}
        saved_forms = {var: self.forms.get(var) for var in values}
        self.env.update(values)
        for var in values:
            if var in forms:
                self.forms[var] = forms[var]
            else:
                self.forms.pop(var, None)
        try:
            yield
        finally:
            for var, old in saved.items():
                if old is None:
                    self.env.pop(var, None)
                else:
                    self.env[var] = old
            for var, old_form in saved_forms.items():
                if old_form is None:
                    self.forms.pop(var, None)
                else:
                    self.forms[var] = old_form

    @contextmanager
    def _no_register_writes(self, where: str) -> Iterator[None]:
        before = dict(self.registers)
        yield
        if self.registers != before:
            raise EmitError(f"block {self.block_name} writes a register buffer under {where}; "
                            "the CPU code generator keeps registers only in straight-line code "
                            "and loops")


def _contiguous(extents: list[int], strides: tuple[int, ...]) -> bool:
    """True when a tile of ``extents`` at ``strides`` covers consecutive elements."""
    expected = 1
    for extent, stride in zip(reversed(extents), reversed(strides)):
        if extent == 1:
            continue
        if stride != expected:
            return False
        expected *= extent
    return True
