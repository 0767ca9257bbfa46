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
memory: a broadcast load, as VPDPBUSD's row of A), and a 2-byte one that 16-bit lane (FMLAL
by element's fp16 of A). An operand of half a register is passed in the low half of one
(FMLAL reads the low 4 fp16 of its register): the register it lies in, its high half
moved down where the operand is there.

A load or store template's ``align N`` is emitted as written, after checking that the address
has it: each buffer starts at a multiple of the target's ``alignment`` (the runners allocate
them so), and the offset's form (:mod:`.static`) proves the rest, or the call is refused.
"""

from __future__ import annotations

import itertools
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
    feature_names,
)
from ir.arith import Interval, bound
from ir.buffer import Buffer
from ir.expr import BinOp, BufferLoad, Expr, IntImm, Select, Var
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
from targets.cpu import interleave, templates
from targets.cpu.chains import LoadChains, opaque_one
from targets.cpu.copies import CopyPlan, Element, plan_copy
from targets.cpu.errors import EmitError
from targets.cpu.ranges import decide, has_conditions, pick, segments
from targets.cpu.static import Form, evaluate
from targets.host import numerics as nm
from targets.host.codegen import StmtEmitter
from targets.host.exprs import BoundsSite
from targets.host.numerics import F64, I64
from targets.host.prepare import storage, written_params
from targets.identifiers import mangle

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


def emit(func: PrimFunc, target: str, features: str | None = None, *, registry: Registry,
         tune_cpu: str | None = None, rolled: bool = False,
         chain_stores: bool = False) -> CpuKernel:
    """Emit ``func`` (tensorized for CPU target ``target``, or plain) as LLVM IR for it,
    with ``features`` (default: the target's own, ``cpu.features`` of its description in
    ``registry``, the descriptions the function was tensorized with).

    Raises EmitError when it calls an intrinsic that ``features`` does not provide or that
    has no llvm template, reads an operand tile that is not contiguous or not as aligned as
    its template says, or indexes a register buffer by a value not known at emission time;
    IntrinsicSpecError when no description makes ``target`` a CPU target. ``tune_cpu`` (one
    of the description's ``tune_cpus``; default the first) is the CPU whose scheduling
    model LLVM tunes the code for. ``rolled`` keeps each counted loop that chains
    multi-register loads (a k loop, :mod:`.chains`) as the schedule unrolled it: LLVM's
    unroller leaves it (``llvm.loop.unroll.disable``), where unrolled further it may hoist
    the loads of several iterations and spill (the one-row GEMV tuned for cortex-a55).
    ``chain_stores`` addresses a packing loop's interleaving stores (``st4``, which has no
    immediate offset) from one pointer that each advances, as the k loop's loads are
    (:mod:`.chains`), where otherwise LLVM spends an ``add`` on each. Either may make
    another kernel longer (LLVM allocates its registers differently); the tuner
    (``tensorize.engine.cpu_tune.choose_tune_cpu``) keeps the form that executes fewest.
    """
    cpu = registry.cpu(target)
    tune_cpu = cpu.tune_cpus[0] if tune_cpu is None else tune_cpu
    if tune_cpu not in cpu.tune_cpus:
        raise EmitError(f"cpu target {target}: tune_cpu {tune_cpu!r} is not one of its "
                        f"tune_cpus ({', '.join(cpu.tune_cpus)})")
    features = cpu.default_features if features is None else features
    _check_features(func, features, registry)
    features = _narrowed(func, features, target, registry)
    buffers = tuple(b for b in storage(func) if b.scope != cpu.register_scope)
    module = ll.Module(name=mangle(func.name))
    # llvmlite writes the triple between quotes as it is: escaped, no description (nor a
    # CpuTarget built in Python) can end the string and add IR.
    module.triple = _ir_string(cpu.triple)
    symbol = "tensorize_" + mangle(func.name)
    function = ll.Function(module, ll.FunctionType(ll.VoidType(), [ll.PointerType()] *
                                                   (len(buffers) + 1)), symbol)
    for arg, buffer in zip(function.args, buffers):
        arg.name = mangle(buffer.name)
        # Every buffer is its own allocation (the runners lay them out apart): telling LLVM
        # lets it combine a packing stage's byte copies into word and vector moves.
        arg.add_attribute("noalias")
    function.args[-1].name = "status"
    builder = ll.IRBuilder(function.append_basic_block("entry"))
    emitter = _CpuEmitter(function, builder, dict(zip(buffers, function.args)),
                          function.args[-1], registry, cpu, rolled, chain_stores)
    emitter.stmt(func.body)
    builder.ret_void()
    outputs = _written(func, registry)
    tune = None if tune_cpu == cpu.cpu else tune_cpu
    return CpuKernel(func, _attributes(_loop_ids(str(module)), symbol, tune), symbol, buffers,
                     outputs, cpu, features, tuple(emitter.sites))


# The placeholder a rolled loop's latch branch carries (``_CpuEmitter._roll``), made a loop
# ID by :func:`_loop_ids`: llvmlite writes no self-referring (distinct) metadata node.
_ROLLED = "tensorize.rolled"


def _loop_ids(text: str) -> str:
    """Each rolled loop's placeholder node (``!N = !{ !"tensorize.rolled", i64 K }``) as the
    loop ID that disables LLVM's unroller: ``!N = distinct !{ !N, !{!"llvm.loop.unroll.
    disable"} }``, distinct so that each loop keeps its own."""
    return re.sub(rf'^(!\d+) = !{{ !"{_ROLLED}", i64 \d+ }}$',
                  r'\1 = distinct !{ \1, !{!"llvm.loop.unroll.disable"} }', text,
                  flags=re.MULTILINE)


def _attributes(text: str, symbol: str, tune_cpu: str | None) -> str:
    """Mark the function ``no-builtins`` so LLVM does not turn a loop into a call of memset or
    memcpy: the object code must stand alone (it runs under an emulator with no libc); with
    ``tune_cpu`` (a name the description's check let through, escaped all the same), also
    tune its scheduling for that CPU (llvmlite's function attributes take no string
    attributes)."""
    pattern = re.compile(rf'^(define void @"?{symbol}"?\(.*\))', re.MULTILINE)
    text, count = pattern.subn(r"\1 #0", text, count=1)
    if count != 1:
        raise EmitError(f"the CPU code generator could not find the definition of {symbol} "
                        "in the module it built; please report it")
    tune = "" if tune_cpu is None else f' "tune-cpu"="{_ir_string(tune_cpu)}"'
    return text + f'\nattributes #0 = {{ "no-builtins"{tune} }}\n'


def _ir_string(text: str) -> str:
    """``text`` as the inside of an LLVM IR string constant: a quote, a backslash and every
    byte outside printable ASCII written as LLVM's ``\\XX`` escape, so the text cannot end
    the string (the load check's grammar admits none of them; this keeps a CpuTarget made
    in Python from writing IR)."""
    return "".join(chr(b) if 0x20 <= b < 0x7F and b not in (0x22, 0x5C) else f"\\{b:02X}"
                   for b in text.encode("utf-8"))


def _narrowed(func: PrimFunc, features: str, target: str, registry: Registry) -> str:
    """``features`` less each that only an instruction ``func`` does not call needs (an
    intrinsic's ``feature``): a GEMM on VPDPBUSD is compiled, and runs, without
    ``avx512bf16``, which only VDPBF16PS needs, so a host without it still runs it. A
    function that calls no intrinsic keeps them all: LLVM's own vectoriser may use any."""
    calls = _calls(func)
    if not calls:
        return features
    called = {registry.get(call.intrinsic).feature for call in calls}
    unused = {i.feature for i in registry.for_target(target) if i.feature} - called
    items = [f.strip() for f in features.split(",") if f.strip()]
    return ",".join(f for f in items if not (f.startswith("+") and f[1:] in unused))


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
                 cpu: CpuTarget, rolled: bool = False, chain_stores: bool = False) -> None:
        super().__init__(function, builder, pointers, status)
        # emit()'s choices of code form.
        self.rolled = rolled
        self.chain_stores = chain_stores
        self._loops = 0
        self.registry = registry
        self.scope = cpu.register_scope
        self.vector_bytes = cpu.vector_bytes
        self.alignment = cpu.alignment
        self.forms: dict[Var, Form] = {}
        # The range of every variable in scope (:mod:`.ranges`): what decides conditions and
        # proves indices in bounds while emitting.
        self.ranges: dict[Var, Interval] = {}
        self.registers: dict[tuple[int, int], ll.Value] = {}
        # The innermost counted loop's chains of multi-register loads (:mod:`.chains`), and
        # the function's opaque 1 they step by, emitted at the first use.
        self.chains: LoadChains | None = None
        self._one: ll.Value | None = None

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
        always = decide(node.cond, self.ranges)
        if always is not None:
            branch = node.then_case if always else node.else_case
            if branch is not None:
                self.stmt(branch)
            return
        with self._no_register_writes("a branch"):
            super()._IfThenElse(node)

    # -- expressions -------------------------------------------------------------------------

    def expr(self, node: Expr) -> ll.Value:
        """As the host emits it, except what the ranges in scope decide: a condition they
        settle is a constant, a select only its chosen value, a min or max of indices the
        operand it always equals (:mod:`.ranges`)."""
        if isinstance(node, Select):
            always = decide(node.cond, self.ranges)
            if always is not None:
                return self.expr(node.true_value if always else node.false_value)
        elif isinstance(node, BinOp):
            if node.dtype.is_bool:
                always = decide(node, self.ranges)
                if always is not None:
                    return ll.Constant(nm.value_type(node.dtype), int(always))
            chosen = pick(node, self.ranges)
            if chosen is not None:
                return self.expr(chosen)
        return super().expr(node)

    def address(self, buffer: Buffer, indices: tuple[Expr, ...], kind: str) -> ll.Value:
        """A pointer to ``buffer[indices]``, checking at run time only the indices that the
        ranges in scope do not prove within their extents."""
        base = self.pointers.get(buffer)
        if base is None:
            raise EmitError(f"block {self.block_name} requires buffer {buffer.name} to be a "
                            "parameter or allocated by an enclosing block")
        site = len(self.sites)
        self.sites.append(BoundsSite(self.block_name, kind, buffer, indices))
        offset: ll.Value = ll.Constant(I64, 0)
        for dim, (index, extent, stride) in enumerate(
                zip(indices, buffer.shape, buffer.effective_strides)):
            value = self._index(index)
            if not bound(index, self.ranges).within(0, extent - 1):
                self._check_bound(value, extent, site, dim)
            term = value if stride == 1 else self.b.mul(value, ll.Constant(I64, stride))
            offset = self.b.add(offset, term)
        return self.b.gep(base, [offset], source_etype=nm.memory_type(buffer.dtype))

    def _index(self, index: Expr) -> ll.Value:
        """An index as a 64-bit value, from its form when it has one (``c + sum(a * v)``
        over the serial loops' variables: the divisions of unrolled tile offsets folded)."""
        form = evaluate(index, self.forms, self.ranges)
        if form is None or not all(v in self.env for v in form.terms):
            return super()._index(index)
        return self._form_value(form)

    def _form_value(self, form: Form) -> ll.Value:
        """``c + sum(a * v)`` as a 64-bit value."""
        value: ll.Value = ll.Constant(I64, form.const)
        for var, coeff in form.terms.items():
            term = self.env[var]
            if term.type.width != 64:
                term = (self.b.sext if nm.is_signed(var.dtype) else self.b.zext)(term, I64)
            if coeff != 1:
                term = self.b.mul(term, ll.Constant(I64, coeff))
            value = self.b.add(value, term)
        return value

    def _For(self, loop: For) -> None:
        if loop.kind is ForKind.UNROLLED:
            plan = self._copy_plan(loop)
            if plan is not None:
                self._vector_copy(plan)
                return
            for value in range(loop.extent):
                self._iteration(loop, value)
            return
        pieces = segments(loop, self.ranges) if has_conditions(loop.body) else None
        for lo, hi in pieces or [(0, loop.extent - 1)]:
            if lo == hi and pieces:
                # An edge iteration on its own: its variable is a constant, so the unrolled
                # loops inside fix every index and decide every condition.
                self._iteration(loop, lo)
            else:
                self._counted(loop, lo, hi)

    def _copy_plan(self, loop: For) -> tuple[Buffer, CopyPlan] | None:
        """The vector plan (:mod:`.copies`) of a nest of unrolled loops around one copy block
        (a store of a load or a constant, every condition decided), with the buffer it
        stores to; None when the nest is anything else, or an index is not proven in
        bounds."""
        nest = [loop]
        while isinstance(nest[-1].body, For) and nest[-1].body.kind is ForKind.UNROLLED:
            nest.append(nest[-1].body)
        realize = nest[-1].body
        if not isinstance(realize, BlockRealize) or realize.block.init is not None or \
                not isinstance(realize.block.body, BufferStore):
            return None
        store = realize.block.body
        if store.buffer.scope == self.scope or store.buffer.dtype.is_bool:
            return None
        elements: list[Element] = []
        for values in itertools.product(*(range(n.extent) for n in nest)):
            element = self._copy_element(nest, values, realize)
            if element is None:
                return None
            elements.append(element)
        plan = plan_copy(elements, max(store.buffer.dtype.bits // 8, 1))
        return None if plan is None else (store.buffer, plan)

    def _copy_element(self, nest: list[For], values: tuple[int, ...], realize: BlockRealize
                      ) -> Element | None:
        """One point of a copy nest: where it stores and what, or None when its predicate
        or a select is not decided there, or an index is not proven in bounds."""
        points = {n.var: Form(v) for n, v in zip(nest, values)}
        spans = {n.var: Interval.point(v) for n, v in zip(nest, values)}
        # Only forms and ranges are read here; nothing is emitted, so the variables' LLVM
        # values are placeholders.
        with self._bind(dict.fromkeys(points, ll.Constant(I64, 0)), points, spans):
            forms, ranges = {}, {}
            for iv, binding in zip(realize.block.iter_vars, realize.bindings):
                forms[iv.var] = evaluate(binding, self.forms, self.ranges)
                ranges[iv.var] = bound(binding, self.ranges)
            if any(f is None for f in forms.values()):
                return None
            with self._bind(dict.fromkeys(forms, ll.Constant(I64, 0)), forms, ranges):
                if decide(realize.predicate, self.ranges) is not True:
                    return None
                store = realize.block.body
                dest = self._flat_form(store.buffer, store.indices)
                value = store.value
                while isinstance(value, Select) and (
                        chosen := decide(value.cond, self.ranges)) is not None:
                    value = value.true_value if chosen else value.false_value
                if dest is None:
                    return None
                if isinstance(value, IntImm):
                    return Element(dest, value.value)
                if not isinstance(value, BufferLoad) or value.buffer.dtype != store.buffer.dtype:
                    return None
                at = self._flat_form(value.buffer, value.indices)
                if at is None or (value.buffer.scope == self.scope and at.value is None):
                    return None
                return Element(dest, source=value.buffer, at=at)

    def _flat_form(self, buffer: Buffer, indices: tuple[Expr, ...]) -> Form | None:
        """The form of ``buffer[indices]``'s flat element offset, when every index has one
        and is proven within its extent."""
        total = Form(0)
        for index, extent, stride in zip(indices, buffer.shape, buffer.effective_strides):
            form = evaluate(index, self.forms, self.ranges)
            if form is None or not bound(index, self.ranges).within(0, extent - 1):
                return None
            total = total.plus(form.times(stride))
        return total

    def _vector_copy(self, planned: tuple[Buffer, CopyPlan]) -> None:
        """Emit a copy plan: each run read as register-sized pieces (a vector load from
        memory, lanes of a register piece), the pieces concatenated into whole registers,
        and each register's worth of a stored run shuffled out of them at most two at a time
        (what AArch64 does in one TBL or ZIP, x86 in one permute), then stored; a stored run
        that interleaves several registers' runs, once transposed, is stored by interleaving
        stores instead (:meth:`_interleaved_store`)."""
        buffer, plan = planned
        element = nm.memory_type(buffer.dtype)
        width = max(self.vector_bytes // max(buffer.dtype.bits // 8, 1), 1)
        pieces: list[tuple[ll.Value, int]] = []
        where: dict[tuple[int, int], tuple[int, int]] = {}  # (run, lane) -> (piece, lane)
        for index, (source, start, length) in enumerate(plan.runs):
            for part, size, value in self._run_pieces(source, start, length, width):
                for lane in range(size):
                    where[(index, part + lane)] = (len(pieces), lane)
                pieces.append((value, size))
        registers, home = self._fill_registers(pieces, width)
        for base, origins in plan.stores:
            if self._interleaved_store(buffer, base, registers, [
                    o if isinstance(o, int) else
                    (home[where[o][0]][0], home[where[o][0]][1] + where[o][1])
                    for o in origins], element, width):
                continue
            for chunk in range(0, len(origins), width):
                lanes: list[tuple[object, int]] = []
                for origin in origins[chunk:chunk + width]:
                    if isinstance(origin, int):
                        lanes.append(("const", origin))
                        continue
                    piece, lane = where[origin]
                    register, offset = home[piece]
                    lanes.append((register, offset + lane))
                value = self._transpose(registers, lanes, element, width) or \
                    self._shuffle_out(registers, lanes, element, width)
                address = self._form_address(buffer, Form(base.const + chunk, base.terms))
                self.b.store(value, address, align=1)

    def _interleaved_store(self, buffer: Buffer, base: Form, registers: list[ll.Value],
                           lanes: list[tuple[int, int] | int], element: ll.Type, width: int
                           ) -> bool:
        """Store a run longer than a register (``lanes``: each element's (register, lane),
        or a constant) by interleaving stores where it interleaves registers' runs, after
        the transposing steps that make it do so (:mod:`.interleave`): each store one
        shuffle of 2 to 4 registers, which LLVM stores with one ``st4`` (``st3``, ``st2``).
        B's 16 columns x 4 k rows take 14 instructions where ``zip``, ``st2`` and stores a
        register at a time took 20, A's 8 rows x 16 k values 23 where they took 34 (the
        64^3 GEMM's packing and the rest, 2,276 to 1,446). With ``chain_stores`` each is
        addressed from its buffer's chain in the counted loop around it (:mod:`.chains`).
        False, having emitted nothing, for any other run."""
        if not isinstance(element, ll.IntType) or len(lanes) <= width or \
                any(isinstance(lane, int) for lane in lanes):
            return False
        planned = interleave.plan(lanes, element.width, width)  # type: ignore[arg-type]
        if planned is None:
            return False
        values = [_widen(self.b, r, width) for r in registers]
        bits, count = element.width, width
        for zips in planned.steps:
            if zips is not None:
                values = self._zips(values, zips, bits, count)
            bits, count = bits * 2, count // 2
            values = [self.b.bitcast(v, ll.VectorType(ll.IntType(bits), count)) for v in values]
        size = max(buffer.dtype.bits // 8, 1)
        for start, firsts, run in planned.segments:
            value = _interleave_runs(self.b, values, firsts, run, count)
            form = Form(base.const + start * bits // 8 // size, base.terms)
            chained = self.chains.store_address(buffer, form) \
                if self.chains is not None and self.chain_stores else None
            address = self._form_address(buffer, form) if chained is None else chained
            self.b.store(value, address, align=1)
        return True

    def _zips(self, values: list[ll.Value], zips: dict[tuple[int, int, int], int], bits: int,
              count: int) -> list[ll.Value]:
        """Each interleave ``(x, y, h)`` of ``zips`` (in its order): half ``h`` of values x and
        y, ``bits``-bit elements, ``count`` a register, element by element."""
        half = count // 2
        ty = ll.VectorType(ll.IntType(bits), count)
        return [self.b.shuffle_vector(
            self.b.bitcast(values[x], ty), self.b.bitcast(values[y], ty),
            ll.Constant(ll.VectorType(_I32, count),
                        [h * half + n // 2 + (count if n % 2 else 0) for n in range(count)]))
            for x, y, h in zips]

    def _run_pieces(self, source: Buffer, start: Form, length: int, width: int
                    ) -> Iterator[tuple[int, int, ll.Value]]:
        """A run of ``source`` as (offset in the run, lanes, vector) pieces of at most
        ``width`` lanes: loads from memory; from a register buffer, lanes of its pieces (a
        run there is split where a register ends)."""
        element = nm.memory_type(source.dtype)
        if source.scope != self.scope:
            for part in range(0, length, width):
                size = min(width, length - part)
                address = self._form_address(source, Form(start.const + part, start.terms))
                yield part, size, self.b.load(address, typ=ll.VectorType(element, size),
                                              align=1)
            return
        part = 0
        while part < length:
            (key_id, piece), lane, vector = self._element_at(source, start.const + part)
            size = min(length - part, width - lane)
            value = self.b.bitcast(self._piece((key_id, piece), source), vector)
            yield part, size, self.b.shuffle_vector(
                value, ll.Constant(vector, None),
                ll.Constant(ll.VectorType(_I32, size), list(range(lane, lane + size))))
            part += size

    def _fill_registers(self, pieces: list[tuple[ll.Value, int]], width: int
                        ) -> tuple[list[ll.Value], dict[int, tuple[int, int]]]:
        """Concatenate loaded pieces into registers of ``width`` lanes, first fit in load
        order; returns the registers and, for each piece, (register, its first lane)."""
        groups: list[list[int]] = []
        used: list[int] = []
        home: dict[int, tuple[int, int]] = {}
        for index, (_, size) in enumerate(pieces):
            slot = next((g for g, u in enumerate(used) if u + size <= width), None)
            if slot is None:
                groups.append([])
                used.append(0)
                slot = len(groups) - 1
            home[index] = (slot, used[slot])
            groups[slot].append(index)
            used[slot] += size
        registers = []
        for group in groups:
            value, size = pieces[group[0]]
            for index in group[1:]:
                value, size = _concat(self.b, value, size, *pieces[index])
            registers.append(value)
        return registers, home

    def _transpose(self, registers: list[ll.Value], lanes: list[tuple[object, int]],
                   element: ll.Type, width: int) -> ll.Value | None:
        """A whole register of ``lanes`` built as a transpose, or None when it is not one:
        lanes that move in aligned groups of one register are taken as wider elements (A's
        rows of 4 k values as words), and while each pair of result elements is element j
        of two registers, one interleave of those registers' halves (``zip1``/``zip2``)
        places the pair side by side as one element of twice the width (B's columns: bytes
        of 4 k rows, paired twice into words). What is left is shuffled as elements of that
        width. Equal interleaves are one instruction after LLVM's CSE, so a 4 x 4 transpose
        is 8 interleaves rather than chains of table lookups and lane inserts. Lanes that
        group into two registers' 64-bit halves are built as such, interleaved or not."""
        if not isinstance(element, ll.IntType) or len(lanes) != width or \
                any(r == "const" for r, _ in lanes):
            return None
        bits, count = element.width, width
        values = [_widen(self.b, r, width) for r in registers]
        interleaved = False
        while count > 1 and bits < 64:
            pairs = [(lanes[n], lanes[n + 1]) for n in range(0, count, 2)]
            if all(x == y and j % 2 == 0 and k == j + 1 for (x, j), (y, k) in pairs):
                lanes = [(x, j // 2) for (x, j), _ in pairs]
            elif all(x != y and j == k for (x, j), (y, k) in pairs):
                lanes, values = self._interleave(values, pairs, bits, count)
                interleaved = True
            else:
                break
            bits, count = bits * 2, count // 2
            values = [self.b.bitcast(v, ll.VectorType(ll.IntType(bits), count))
                      for v in values]
        if not interleaved and (bits, count) != (64, 2):
            return None
        # Two registers' 64-bit halves (SMMLA's packed A: two rows' 8 k values) are
        # shuffled as such, which LLVM selects as zip1/zip2 .2d; as 32-bit lanes it inserts
        # one half into a copy of the other register (256^3: 4 more instructions for each
        # 128 bytes of A packed).
        value = self._shuffle_out(values, lanes, ll.IntType(bits), count)
        return self.b.bitcast(value, ll.VectorType(element, width))

    def _interleave(self, values: list[ll.Value], pairs: list[tuple[tuple[object, int],
                    tuple[object, int]]], bits: int, count: int
                    ) -> tuple[list[tuple[object, int]], list[ll.Value]]:
        """The interleaves (of ``bits``-bit elements, ``count`` a register) that ``pairs``
        draw on, and each pair as (interleave, its element once two are one)."""
        half = count // 2
        zips: dict[tuple[object, object, int], int] = {}
        lanes = [(zips.setdefault((x, y, j // half), len(zips)), j % half)
                 for (x, j), (y, _) in pairs]
        made = []
        for x, y, h in zips:
            mask = [h * half + n // 2 + (count if n % 2 else 0) for n in range(count)]
            made.append(self.b.shuffle_vector(
                self.b.bitcast(_widen(self.b, values[x], count),  # type: ignore[index]
                               ll.VectorType(ll.IntType(bits), count)),
                self.b.bitcast(_widen(self.b, values[y], count),  # type: ignore[index]
                               ll.VectorType(ll.IntType(bits), count)),
                ll.Constant(ll.VectorType(_I32, count), mask)))
        return lanes, made  # type: ignore[return-value]

    def _shuffle_out(self, registers: list[ll.Value], lanes: list[tuple[object, int]],
                     element: ll.Type, width: int) -> ll.Value:
        """The vector of ``lanes`` (each (register index, lane) or ("const", value)), built
        by two-input shuffles: the registers it draws on folded in one at a time, zero
        lanes from a zero vector, other constants inserted."""
        count = len(lanes)
        sources = sorted({r for r, _ in lanes if r != "const"}, key=str)
        zero = any(r == "const" and v == 0 for r, v in lanes)
        result: ll.Value | None = None
        filled = [False] * count
        inputs = [(registers[r], r) for r in sources]  # type: ignore[index]
        if zero:
            inputs.append((ll.Constant(ll.VectorType(element, width), None), "zero"))
        for value, name in inputs:
            value = _widen(self.b, value, width)
            mask = []
            for n, (r, v) in enumerate(lanes):
                mine = r == name or (name == "zero" and r == "const" and v == 0)
                if mine:
                    # Any lane of the zero vector is 0; the input's lanes follow the
                    # result's in a two-input shuffle.
                    lane = v if r != "const" else n % width
                    mask.append(lane if result is None else width + lane)
                    filled[n] = True
                elif result is not None and filled[n]:
                    mask.append(n)
                else:
                    mask.append(None)
            if result is None:
                result = self.b.shuffle_vector(value, ll.Constant(value.type, None),
                                               _mask(mask))
            else:
                result = self.b.shuffle_vector(_widen(self.b, result, width), value,
                                               _mask(mask))
        if result is None:
            result = ll.Constant(ll.VectorType(element, count), None)
        for n, (r, v) in enumerate(lanes):
            if r == "const" and v != 0:
                result = self.b.insert_element(result, ll.Constant(element, v),
                                               ll.Constant(_I32, n))
        return result

    def _form_address(self, buffer: Buffer, form: Form) -> ll.Value:
        """The address of ``buffer``'s element at flat offset ``form``."""
        base = self.pointers.get(buffer)
        if base is None:
            raise EmitError(f"block {self.block_name} requires buffer {buffer.name} to be a "
                            "parameter or allocated by an enclosing block")
        return self._split_gep(base, buffer, form)

    def _split_gep(self, base: ll.Value, buffer: Buffer, form: Form) -> ll.Value:
        """``base`` advanced by flat offset ``form`` (in elements of ``buffer``) as two steps,
        its variable terms and then its constant: the accesses of one tile then share a base
        register and differ by immediates, which the backend pairs (``stp q``) or folds into
        the access; one sum hides that (its additions of disjoint bits become ``or``, each
        address its own register). A register tile's stores at 64^3: 23 instructions to 17;
        the packing copies of SMMLA 8 x 2 at 31x17x15: 2,054 instructions to 1,788."""
        etype = nm.memory_type(buffer.dtype)
        pointer = base
        if form.terms:
            pointer = self.b.gep(base, [self._form_value(Form(0, form.terms))],
                                 source_etype=etype)
        if form.const or not form.terms:
            pointer = self.b.gep(pointer, [ll.Constant(I64, form.const)], source_etype=etype)
        return pointer

    def _iteration(self, loop: For, value: int) -> None:
        """``loop``'s body once, its variable the constant ``value``."""
        with self._bind({loop.var: ll.Constant(nm.value_type(loop.var.dtype), value)},
                        {loop.var: Form(value)}, {loop.var: Interval.point(value)}):
            self.stmt(loop.body)

    def _counted(self, loop: For, lo: int, hi: int) -> None:
        """``loop``'s iterations ``lo`` to ``hi`` as a counted loop (tested at the bottom:
        it runs at least once), every register piece live into it carried around it (the
        accumulators), the variable known to stay in ``[lo, hi]``."""
        b = self.b
        ty = nm.value_type(loop.var.dtype)
        if not loop.var.dtype.is_int or loop.extent > loop.var.dtype.max:
            raise EmitError(f"loop {loop.var.name} requires an integer variable that can "
                            f"count to {loop.extent}, got {loop.var.dtype}", loop.loc)
        entry = b.block
        name = mangle(loop.var.name)
        body = b.append_basic_block(f"{name}.body")
        after = b.append_basic_block(f"{name}.end")
        b.branch(body)
        b.position_at_end(body)
        counter = b.phi(ty, name)
        counter.add_incoming(ll.Constant(ty, lo), entry)
        carried = {}
        for key, value in self.registers.items():
            phi = b.phi(value.type)
            phi.add_incoming(value, entry)
            carried[key] = phi
        self.registers.update(carried)
        outer_chains = self.chains
        self.chains = LoadChains(b, loop.var, lo, entry, body, set(self.env),
                                 self._form_address, self._opaque_one)
        with self._bind({loop.var: counter}, {}, {loop.var: Interval(lo, hi)}):
            self.stmt(loop.body)
        self.chains.close(b.block)
        chained = self.chains.loads
        self.chains = outer_chains
        for key, phi in carried.items():
            phi.add_incoming(self.registers[key], b.block)
        following = b.add(counter, ll.Constant(ty, 1))
        counter.add_incoming(following, b.block)
        latch = b.cbranch(b.icmp_unsigned("<=", following, ll.Constant(ty, hi)), body, after)
        if chained and self.rolled:
            self._roll(latch)
        b.position_at_end(after)

    def _roll(self, latch: ll.Instruction) -> None:
        """Mark the loop whose latch branch is ``latch`` for LLVM's unroller to leave (its
        placeholder node, numbered so that each loop's is its own: :func:`_loop_ids`)."""
        module = self.function.module
        self._loops += 1
        latch.set_metadata("llvm.loop", module.add_metadata(
            [ll.MetaDataString(module, _ROLLED), ll.Constant(I64, self._loops)]))

    def _BlockRealize(self, realize: BlockRealize) -> None:
        block = realize.block
        values = {iv.var: nm.convert(self.b, binding.dtype, iv.var.dtype, self.expr(binding))
                  for iv, binding in zip(block.iter_vars, realize.bindings)}
        forms = {}
        ranges = {}
        for iv, binding in zip(block.iter_vars, realize.bindings):
            form = evaluate(binding, self.forms, self.ranges)
            forms[iv.var] = form if form is not None else Form(0, {iv.var: 1})
            ranges[iv.var] = bound(binding, self.ranges)
        outer_name = self.block_name
        self.block_name = block.name
        with self._bind(values, forms, ranges):
            always = decide(realize.predicate, self.ranges)
            if always:
                self._block_body(realize, values)
            elif always is None:
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
            args = [self._address(intrinsic, name, tiles[name], regions[name],
                                  template.registers > 1)
                    if isinstance(ty, ll.PointerType) else
                    self._operand(intrinsic, name, tiles[name], ty) for ty, name in template.args]
            function = self.declare(template.function, template.result_type,
                                    tuple(ty for ty, _ in template.args))
            value = self.b.call(function, args)
            if template.registers > 1:
                self._write_registers(intrinsic, template.result, tiles[template.result],
                                      value, template.registers)
                return
        self._write(intrinsic, template.result, tiles[template.result], value, regions)

    def _address(self, intrinsic: Intrinsic, name: str, tile: _Tile, region: BufferRegion,
                 chained: bool) -> ll.Value:
        """The address of memory operand ``name`` (a ``ptr`` argument), from its buffer's
        chain in the counted loop around it for a multi-register load (``chained``, see
        :mod:`.chains`); EmitError when the operand's tile is in registers."""
        if tile.address is None:
            raise EmitError(f"block {self.block_name}: operand {name} of {intrinsic.name} is "
                            "passed as an address ('ptr'), so it must be in memory, not in "
                            "registers")
        flat = self._flat_offset(region) if chained and self.chains is not None else None
        address = None if flat is None else self.chains.load_address(region.buffer, flat)
        return tile.address if address is None else address

    def _opaque_one(self) -> ll.Value:
        """The function's opaque 1 (:func:`.chains.opaque_one`), emitted at the first use."""
        if self._one is None:
            self._one = opaque_one(self.b, self.declare("llvm.arithmetic.fence.f64", F64,
                                                        (F64,)))
        return self._one

    def _write_registers(self, intrinsic: Intrinsic, name: str, tile: _Tile,
                         value: ll.Value, count: int) -> None:
        """Each of the ``count`` vectors of a multi-register result into the consecutive
        register pieces of operand ``name``'s tile; EmitError unless the tile is exactly
        those whole registers."""
        if tile.key is None or tile.offset or tile.size != count * self.vector_bytes:
            raise EmitError(f"block {self.block_name}: {intrinsic.name} writes {count} whole "
                            f"registers; its operand {name} must be {count} consecutive "
                            f"registers of a register buffer, got {tile.size} bytes"
                            f"{' in memory' if tile.key is None else ''}")
        buffer_id, first = tile.key
        for n in range(count):
            self.registers[(buffer_id, first + n)] = self.b.extract_value(value, n)

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
        if count != wanted or not contiguous_tile(extents, strides):
            raise EmitError(
                f"block {self.block_name}: operand {name} of {intrinsic.name} requires "
                f"{wanted} contiguous {operand.buffer.dtype} elements (one register's "
                f"worth), got a {'x'.join(map(str, extents))} tile of {buffer.name} with "
                f"strides {strides}; pack the operand first (transform_layout)",
                region.loc)
        size = count * buffer.dtype.bits // 8
        if buffer.scope != self.scope:
            # A store's address split (its tile's stores pair); a load's stays one sum,
            # which x86's loads fold into their addressing (split, the 1024^3 GEMM went
            # from 1.10x MLAS to 1.06x in two interleaved runs of bench/bench_x86.py).
            address, align = self._tile_address(region, intrinsic.kind == "store")
            return _Tile(size, address=address, align=align)
        starts = [self._static(rng.start, buffer) for rng in region.ranges]
        offset = sum(s * st for s, st in zip(starts, strides)) * buffer.dtype.bits // 8
        piece, within = divmod(offset, self.vector_bytes)
        whole = within == 0 and size % self.vector_bytes == 0  # several whole registers
        # A 16-bit lane (an fp16 of A) or half a register (FMLAL's panel of B) aligned to its
        # size, else 32-bit lanes.
        lane = size if size in (2, 8, self.vector_bytes // 2) else 4
        if not whole and (within + size > self.vector_bytes or within % lane or size % lane):
            raise EmitError(f"block {self.block_name}: operand {name} of {intrinsic.name} "
                            f"requires its {size} bytes of register buffer {buffer.name} "
                            f"within one register, {lane}-byte aligned; they start at byte "
                            f"{offset}")
        return _Tile(size, (id(buffer), piece), within)

    def _operand(self, intrinsic: Intrinsic, name: str, tile: _Tile, ty: ll.Type
                 ) -> ll.Value:
        """Operand ``name`` as a value of vector type ``ty``: a register, a load of contiguous
        memory, half a register in the low half of one, or a 32-bit or 16-bit lane replicated
        to all lanes (of a register: the by-element forms; of memory: a broadcast load)."""
        bits = ty.count * templates.lane_bits(ty.element)
        if tile.key is None and bits == tile.size * 8:
            return self.b.load(self._memory(intrinsic, name, tile, ty, 1), typ=ty,
                               align=tile.align)
        if tile.key is not None and tile.size == self.vector_bytes:
            return self.b.bitcast(self._piece(tile.key, None), ty)
        if tile.key is not None and 2 * tile.size == self.vector_bytes == bits // 8:
            return self.b.bitcast(self._low_half(tile), ty)
        if tile.size not in (2, 4) or bits % (8 * tile.size):
            raise EmitError(f"block {self.block_name}: operand {name} of {intrinsic.name} "
                            f"requires a whole register, half of one in a register, or one "
                            f"32-bit or 16-bit lane, got {tile.size} bytes")
        lane_type = ll.IntType(8 * tile.size)
        count = bits // (8 * tile.size)
        if tile.key is None:
            word = self.b.load(tile.address, typ=lane_type, align=tile.align)
            lanes = self.b.insert_element(ll.Constant(ll.VectorType(lane_type, count), None),
                                          word, ll.Constant(_I32, 0))
            lane = 0
        else:
            lanes = self.b.bitcast(self._piece(tile.key, None),
                                   ll.VectorType(lane_type, self.vector_bytes // tile.size))
            lane = tile.offset // tile.size
        splat = self.b.shuffle_vector(lanes, ll.Constant(lanes.type, None),
                                      ll.Constant(ll.VectorType(_I32, count), [lane] * count))
        return self.b.bitcast(splat, ty)

    def _low_half(self, tile: _Tile) -> ll.Value:
        """The register holding half-register ``tile`` in its low half: its own register, or
        that register's high half moved down (in both halves: on AArch64 a ``dup`` of its
        high 64 bits)."""
        count = self.vector_bytes // 8
        words = self.b.bitcast(self._piece(tile.key, None), ll.VectorType(ll.IntType(64), count))
        if tile.offset == 0:
            return words
        high = list(range(count // 2, count))
        return self.b.shuffle_vector(words, ll.Constant(words.type, None),
                                     ll.Constant(ll.VectorType(_I32, count), high + high))

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
        bits = value.type.count * templates.lane_bits(value.type.element)
        if tile.size == self.vector_bytes and bits == self.vector_bytes * 8:
            self.registers[tile.key] = value
            return
        if tile.size not in (2, 4, 8) or bits != 8 * tile.size:
            raise EmitError(f"block {self.block_name}: {intrinsic.name} writes {bits // 8} "
                            f"bytes into a {tile.size}-byte tile of a register")
        # One lane of the tile's width (fp16 loads write 2 or 8 bytes: a row of A, a panel).
        lanes = ll.VectorType(ll.IntType(bits), self.vector_bytes // tile.size)
        word = self.b.bitcast(value, ll.IntType(bits))
        current = self.registers.get(tile.key, ll.Constant(lanes, None))
        self.registers[tile.key] = self.b.insert_element(
            self.b.bitcast(current, lanes), word, ll.Constant(_I32, tile.offset // tile.size))

    def _memory(self, intrinsic: Intrinsic, name: str, tile: _Tile, ty: ll.Type, align: int
                ) -> ll.Value:
        """The address of a memory operand of ``ty``'s size that its template says is
        ``align``-byte aligned; EmitError when the tile is not that size or the address is
        not proven that aligned."""
        bits = ty.count * templates.lane_bits(ty.element)
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

    def _tile_address(self, region: BufferRegion, split: bool) -> tuple[ll.Value, int]:
        """The address of a memory tile's first element (its extent was checked whole by
        the schedule's region analysis; the tile's own bytes need no per-element check),
        and the alignment it is proven to have: the buffer's start is a multiple of the
        target's alignment, and the offset's form a multiple of the gcd of its terms. With
        ``split``, the address is its variable part then its constant (:meth:`_split_gep`)
        where every index has a form."""
        buffer = region.buffer
        base = self.pointers.get(buffer)
        if base is None:
            raise EmitError(f"block {self.block_name} requires buffer {buffer.name} to be a "
                            "parameter or allocated by an enclosing block")
        size = max(buffer.dtype.bits // 8, 1)
        forms = [evaluate(rng.start, self.forms) for rng in region.ranges]
        step = 0  # the gcd of the offset's terms, in elements (0: the offset is 0)
        for form, stride in zip(forms, buffer.effective_strides):
            for part in ([1] if form is None else [form.const, *form.terms.values()]):
                step = gcd(step, part * stride)
        align = gcd(self.alignment, step * size) if step else self.alignment
        # The offset as one form (as _index evaluates each index: min/max decided), split
        # into its variable and constant parts, when every index has one.
        flat = self._flat_offset(region) if split else None
        if flat is not None:
            return self._split_gep(base, buffer, flat), align
        offset: ll.Value = ll.Constant(I64, 0)
        for rng, stride in zip(region.ranges, buffer.effective_strides):
            term = self._index(rng.start)
            if stride != 1:
                term = self.b.mul(term, ll.Constant(I64, stride))
            offset = self.b.add(offset, term)
        return self.b.gep(base, [offset], source_etype=nm.memory_type(buffer.dtype)), align

    def _flat_offset(self, region: BufferRegion) -> Form | None:
        """The flat offset (in elements) of a tile's first element as one form (as
        :meth:`_index` evaluates each index: min/max decided), when every index has one over
        the variables in scope; else None."""
        values = [evaluate(rng.start, self.forms, self.ranges) for rng in region.ranges]
        if not all(f is not None and all(v in self.env for v in f.terms) for f in values):
            return None
        flat = Form(0)
        for form, stride in zip(values, region.buffer.effective_strides):
            flat = flat.plus(form.times(stride))  # type: ignore[union-attr]
        return flat

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
        return self._element_at(buffer, flat)

    def _element_at(self, buffer: Buffer, flat: int
                    ) -> tuple[tuple[int, int], int, ll.VectorType]:
        """The register piece holding element ``flat`` of a register buffer, its lane, and
        the piece's type as vector of the buffer's elements."""
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
    def _bind(self, values: dict[Var, ll.Value], forms: dict[Var, Form],
              ranges: dict[Var, Interval]) -> Iterator[None]:
        saved = {var: self.env.get(var) for var in values}
        saved_forms = {var: self.forms.get(var) for var in values}
        saved_ranges = {var: self.ranges.get(var) for var in values}
        self.env.update(values)
        for var in values:
            if var in ranges:
                self.ranges[var] = ranges[var]
            else:
                self.ranges.pop(var, None)
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
            for var, old_range in saved_ranges.items():
                if old_range is None:
                    self.ranges.pop(var, None)
                else:
                    self.ranges[var] = old_range

    @contextmanager
    def _no_register_writes(self, where: str) -> Iterator[None]:
        before = dict(self.registers)
        yield
        if self.registers != before:
            raise EmitError(f"block {self.block_name} writes a register buffer under {where}; "
                            "the CPU code generator keeps registers only in straight-line code "
                            "and loops")


def _mask(lanes: list[int | None]) -> ll.Constant:
    """A shuffle mask; a lane of None may take any value (llvmlite admits no undef lane):
    it keeps its own position of the first input, the plainest choice for LLVM's permute
    matching."""
    return ll.Constant(ll.VectorType(_I32, len(lanes)),
                       [n if m is None else m for n, m in enumerate(lanes)])


def _interleave_runs(b: ll.IRBuilder, values: list[ll.Value], firsts: list[tuple[int, int]],
                     run: int, count: int) -> ll.Value:
    """One shuffle that takes element ``i`` of each run in turn (``firsts``: each run's
    (value, first lane), ``run`` lanes long, ``count`` lanes a value): three or four values
    are first joined into two of twice the lanes, as a shuffle takes two inputs."""
    used = sorted({x for x, _ in firsts})
    inputs = [values[x] for x in used]
    if len(inputs) > 2:
        inputs += [ll.Constant(inputs[0].type, None)] * (4 - len(inputs))
        inputs = [_concat(b, inputs[0], count, inputs[1], count)[0],
                  _concat(b, inputs[2], count, inputs[3], count)[0]]
    second = inputs[1] if len(inputs) > 1 else ll.Constant(inputs[0].type, None)
    offset = {x: count * n for n, x in enumerate(used)}
    mask = [offset[x] + j + i for i in range(run) for x, j in firsts]
    return b.shuffle_vector(inputs[0], second, ll.Constant(ll.VectorType(_I32, len(mask)), mask))


def _widen(b: ll.IRBuilder, value: ll.Value, width: int) -> ll.Value:
    """``value`` (a vector of at most ``width`` lanes) as exactly ``width`` lanes, the new
    ones undefined."""
    count = value.type.count
    if count == width:
        return value
    mask = [n if n < count else 0 for n in range(width)]
    return b.shuffle_vector(value, ll.Constant(value.type, None),
                            ll.Constant(ll.VectorType(_I32, width), mask))


def _concat(b: ll.IRBuilder, x: ll.Value, nx: int, y: ll.Value, ny: int
            ) -> tuple[ll.Value, int]:
    """The vector of ``x``'s lanes then ``y``'s."""
    width = max(nx, ny)
    x, y = _widen(b, x, width), _widen(b, y, width)
    mask = list(range(nx)) + [width + n for n in range(ny)]
    return b.shuffle_vector(x, y, ll.Constant(ll.VectorType(_I32, nx + ny), mask)), nx + ny


def contiguous_tile(extents: list[int], strides: tuple[int, ...]) -> bool:
    """True when a tile of ``extents`` at ``strides`` covers consecutive elements."""
    expected = 1
    for extent, stride in zip(reversed(extents), reversed(strides)):
        if extent == 1:
            continue
        if stride != expected:
            return False
        expected *= extent
    return True
