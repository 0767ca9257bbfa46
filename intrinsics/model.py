"""The Python model of a hardware family: scopes, operands, intrinsics.

These are what the loader builds from YAML and what the rest of tensorize reads. An
:class:`Intrinsic`'s semantics is an IR statement over its operands' buffers and its
iterators; :meth:`Intrinsic.desc_func` wraps it into a function that the matcher compares
blocks against and that an executor can run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import yaml

import ir
from intrinsics.templates import parse
from ir import IterKind

if TYPE_CHECKING:
    from intrinsics.gpu_target import GpuTarget


@dataclass(frozen=True, slots=True)
class Scope:
    """A memory an operand can live in.

    ``capacity`` is in bytes (None: unbounded, as main memory); ``dtypes`` are the element
    types it holds (empty: any); ``alignment`` is in bytes; ``banks`` is None when the memory
    is not banked.
    """

    name: str
    capacity: int | None = None
    dtypes: tuple[ir.DType, ...] = ()
    alignment: int = 1
    banks: int | None = None
    description: str = ""
    loc: ir.SourceLoc | None = field(default=None, compare=False)

    def same_memory(self, other: Scope) -> bool:
        """True when two declarations describe one memory (descriptions may differ)."""
        return (self.capacity, self.dtypes, self.alignment, self.banks) == (
            other.capacity, other.dtypes, other.alignment, other.banks)


@dataclass(frozen=True, slots=True)
class StrideRule:
    """How an operand's tile may be laid out in its memory.

    ``dense``: the tile is one contiguous block (registers, packed panels).
    ``leading_multiple_of``: the leading dimension (the stride, in elements, of the dimension
    that is not contiguous) must be a multiple of this.
    """

    dense: bool = False
    leading_multiple_of: int = 1


@dataclass(frozen=True, slots=True)
class Accepted:
    """A kernel input of ``dtype`` runs through an operand of another dtype as ``x + bias``
    (int8 + 128 is uint8). Where the semantics sums products ``C += acc(X) * acc(Y)``, the
    engine then subtracts ``bias * sum Y`` from the output (``shift_operand``): with a
    wrapping integer accumulator that is exact."""

    dtype: ir.DType
    bias: int


@dataclass(frozen=True, slots=True)
class Accumulation:
    """How a float product-sum ``C += f(X) * f(Y)`` over one reduce iterator accumulates, as
    the vendor's manual states it: each product, exact, is added to the accumulator on its
    own, in the reduce iterator's ``order`` (``ascending`` or ``descending``), the sum
    rounded once (``rounding``: ``nearest_even`` or ``odd``); or, ``order`` ``pairwise``
    (a reduce iterator of even extent), its values two at a time in ascending order, each
    product rounded, the pair summed and rounded, that sum added and rounded. ``denormals``
    is ``flush`` (denormal inputs read and denormal results written as zero: DAZ and FTZ)
    or ``keep``."""

    order: str
    rounding: str
    denormals: str


@dataclass(frozen=True, slots=True)
class Operand:
    """One tensor an intrinsic reads or writes.

    ``buffer`` carries the shape, dtype and (first) scope; ``scopes`` lists every scope the
    operand may live in. A scalar operand has shape ``()``. ``role`` is ``input``, ``output``
    or ``accumulator`` (read and written). ``layout`` is ``row_major`` (last dimension
    contiguous) or ``col_major`` (first dimension contiguous); ``alignment`` is in bytes.
    ``value_range`` bounds the values it may hold (None: any value of its dtype).
    ``accepts`` is the :class:`Accepted` dtype a kernel input may have and still run through
    this operand, shifted; None: only the operand's own dtype.
    """

    name: str
    role: str
    buffer: ir.Buffer
    layout: str = "row_major"
    strides: StrideRule | None = None
    alignment: int = 1
    scopes: tuple[str, ...] = ()
    value_range: tuple[float, float] | None = None
    description: str = ""
    loc: ir.SourceLoc | None = field(default=None, compare=False)
    accepts: Accepted | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.buffer.shape

    @property
    def dtype(self) -> ir.DType:
        return self.buffer.dtype

    @property
    def scope(self) -> str:
        return self.buffer.scope

    @property
    def is_scalar(self) -> bool:
        return not self.buffer.shape

    @property
    def nbytes(self) -> int:
        """Bytes of one tile of this operand."""
        return self.buffer.size * max(self.dtype.bits // 8, 1)


@dataclass(frozen=True, slots=True)
class Cost:
    """Cycles from issue to result (``latency``) and between two issues (``interval``)."""

    latency: int
    interval: int


def frozen_mapping(items: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only view of a copy of ``items``."""
    return MappingProxyType(dict(items))


def _empty() -> Mapping[str, Any]:
    return frozen_mapping({})


@dataclass(frozen=True, slots=True, eq=False)
class Intrinsic:
    """One hardware instruction (or library call), as data.

    ``kind`` is ``compute``, ``load``, ``store`` or ``fill``. ``semantics`` is one store over
    the operands' buffers, indexed by ``iter_vars``; ``semantics_text`` is how the YAML wrote
    it. ``emit`` maps a backend to a template whose ``{name}`` placeholders are operand names
    (``{name.ld}`` is the operand's leading dimension). ``loads``/``stores``/``fill`` map an
    operand to the intrinsics that move it into or out of its scope, or zero it. ``resets``:
    the instruction overwrites its accumulator instead of adding to it. ``params`` are the
    variant parameters it was expanded with. ``accumulation`` is how a float product-sum
    adds its products (None: not stated). Like a Buffer, an intrinsic is an identity.
    """

    name: str
    family: str
    target: str
    kind: str
    iter_vars: tuple[ir.IterVar, ...]
    operands: tuple[Operand, ...]
    semantics: ir.BufferStore
    semantics_text: str
    emit: Mapping[str, str]
    cost: Cost
    reference: str
    loads: Mapping[str, tuple[str, ...]] = field(default_factory=_empty)
    stores: Mapping[str, tuple[str, ...]] = field(default_factory=_empty)
    fill: Mapping[str, tuple[str, ...]] = field(default_factory=_empty)
    resets: bool = False
    params: Mapping[str, Any] = field(default_factory=_empty)
    description: str = ""
    loc: ir.SourceLoc | None = None
    accumulation: Accumulation | None = None

    def __repr__(self) -> str:
        return f"Intrinsic({self.name}, {self.kind}, {self.target})"

    def operand(self, name: str) -> Operand:
        """The operand called ``name``."""
        for operand in self.operands:
            if operand.name == name:
                return operand
        raise KeyError(f"intrinsic {self.name} has no operand {name!r}; its operands are "
                       f"{', '.join(o.name for o in self.operands)}")

    @property
    def output(self) -> Operand:
        """The operand the semantics stores to."""
        for operand in self.operands:
            if operand.buffer is self.semantics.buffer:
                return operand
        raise KeyError(f"intrinsic {self.name} stores to no operand")

    @property
    def inputs(self) -> tuple[Operand, ...]:
        """The operands it only reads, in declared order."""
        return tuple(o for o in self.operands if o.role == "input")

    @property
    def extents(self) -> tuple[int, ...]:
        """The extent of each iterator, in declared order."""
        return tuple(iv.extent for iv in self.iter_vars)

    @property
    def shape_text(self) -> str:
        """The iteration space as ``16x16x16``."""
        return "x".join(str(e) for e in self.extents)

    @property
    def feature(self) -> str | None:
        """The target feature the instruction needs (``dotprod``, ``i8mm``), from the reserved
        variant parameter ``feature``; None when it needs nothing beyond the base target."""
        value = self.params.get("feature")
        return None if value is None else str(value)

    def available(self, features: frozenset[str] | None) -> bool:
        """True when ``features`` (target feature names without '+'; None: any) provide
        what the instruction needs."""
        return features is None or self.feature is None or self.feature in features

    @property
    def accumulates(self) -> bool:
        """True when the semantics adds into its output (``C[...] += ...``)."""
        return self.output.role == "accumulator"

    def desc_func(self) -> ir.PrimFunc:
        """The semantics as a function: loops over the iterators around one block.

        Parameters are the operand buffers in declared order. When the intrinsic ``resets``
        its accumulator, the block's ``init`` zeroes the output; otherwise it accumulates
        into what the output holds.
        """
        store = self.semantics
        init = None
        if self.resets:
            zero = ir.const(0, store.buffer.dtype)
            init = ir.BufferStore(store.buffer, zero, store.indices, store.loc)
        reads = tuple(ir.BufferRegion.full(o.buffer) for o in self.operands
                      if o.role in ("input", "accumulator"))
        writes = (ir.BufferRegion.full(self.output.buffer),)
        block = ir.Block(self.name, self.iter_vars, reads, writes, store, init, loc=self.loc)
        loop_vars = tuple(ir.Var(iv.var.name) for iv in self.iter_vars)
        body: ir.Stmt = ir.BlockRealize(loop_vars, block)
        for var, iv in reversed(list(zip(loop_vars, self.iter_vars))):
            body = ir.For(var, iv.extent, body)
        params = tuple(o.buffer for o in self.operands)
        return ir.PrimFunc(self.name, params, ir.make_root(body), self.loc)

    def reduce_vars(self) -> tuple[ir.Var, ...]:
        """The reduce iterators' variables."""
        return tuple(iv.var for iv in self.iter_vars if iv.kind is IterKind.REDUCE)

    def render(self, backend: str, values: Mapping[str, object]) -> str:
        """The ``backend`` template with placeholders filled from ``values``.

        ``values`` maps an operand name (and ``name.ld`` for a leading dimension) to the text
        standing for it in the generated code. The template is read by the backend's grammar
        (:mod:`intrinsics.grammars`), and each value must be one the grammar admits.
        """
        if backend not in self.emit:
            raise KeyError(f"intrinsic {self.name} has no template for backend {backend!r}; "
                           f"it has {', '.join(self.emit)}")
        return parse(backend, self.emit[backend]).render(values)


@dataclass(frozen=True, slots=True)
class CpuTarget:
    """A CPU target, from a family's ``cpu:`` section: everything the one CPU code generator
    (``targets.cpu``), its schedule and its runners need to know about the machine.

    ``triple``, ``cpu`` and ``features`` (names without '+', on by default) are what LLVM
    compiles for. ``detect`` says how the host's features are found: ``llvm`` (LLVM's list for
    the host CPU) or ``cpuinfo`` (the flags of ``/proc/cpuinfo``, named through ``cpuinfo``
    where they differ from LLVM's). A vector register holds ``vector_bytes``; the registers
    are scope ``register_scope``, ``registers`` of them (its capacity over the vector size),
    of which the micro-kernel leaves ``reserved_registers`` to LLVM. The runners align every
    buffer to ``alignment`` bytes. ``tile_rows`` and ``tile_vectors`` are the register tiles
    tried (rows by vectors of accumulators), ``k_unroll`` the k steps per micro-kernel
    iteration, ``tune_cpus`` the CPUs whose scheduling models a kernel may be tuned for
    (LLVM's ``tune-cpu``; the ISA stays ``cpu``'s). ``engines`` are the ways to run the code here, in order of preference
    (``native``, ``unicorn``), and ``emulated`` the features each emulator executes.
    ``macs`` maps an assembly mnemonic to the multiply-accumulates one instruction does (what
    a run counts). ``epilogue`` is where a GEMM's elementwise epilogue runs: ``pass``, one
    pass over the whole result after the GEMM, or ``tile``, each accumulator tile finished
    right after its store (``tensorize.engine.cpu_epilogue``).
    """

    target: str
    triple: str
    cpu: str
    features: tuple[str, ...]
    detect: str
    cpuinfo: Mapping[str, str]
    vector_bytes: int
    register_scope: str
    registers: int
    reserved_registers: int
    alignment: int
    tile_rows: tuple[int, ...]
    tile_vectors: tuple[int, ...]
    k_unroll: int
    engines: tuple[str, ...]
    tune_cpus: tuple[str, ...]
    emulated: Mapping[str, frozenset[str]]
    macs: Mapping[str, int]
    epilogue: str = "pass"
    loc: ir.SourceLoc | None = field(default=None, compare=False)

    @property
    def default_features(self) -> str:
        """The features as LLVM writes them: ``+neon,+dotprod``."""
        return ",".join(f"+{f}" for f in self.features)

    @property
    def usable_registers(self) -> int:
        """Vector registers a micro-kernel may keep live at once."""
        return self.registers - self.reserved_registers

    @property
    def arch(self) -> str:
        """The triple's architecture (``aarch64``, ``x86_64``)."""
        return self.triple.split("-", 1)[0]


@dataclass(frozen=True, slots=True, eq=False)
class Family:
    """One YAML file: a target's memory scopes and intrinsics.

    ``name`` is the file's stem (``cuda`` for ``cuda.yaml``). ``machine`` is the file's raw
    top-level ``machine:`` mapping node, with its PyYAML marks, when it has one (the simulator
    validates it); :meth:`machine_values` gives it as plain data. ``cpu`` is the target's CPU
    description when the file has a ``cpu:`` section; ``gpu``, the architectures and SM limits
    of its ``gpu:`` section.
    """

    name: str
    target: str
    scopes: Mapping[str, Scope]
    intrinsics: tuple[Intrinsic, ...]
    path: Path
    description: str = ""
    machine: yaml.MappingNode | None = None
    cpu: CpuTarget | None = None
    gpu: GpuTarget | None = None

    def __repr__(self) -> str:
        return f"Family({self.name}, {self.target}, {len(self.intrinsics)} intrinsics)"

    def machine_values(self) -> dict[str, Any] | None:
        """The ``machine:`` section as plain Python data (None when absent)."""
        if self.machine is None:
            return None
        loader = yaml.SafeLoader("")
        try:
            return loader.construct_object(self.machine, deep=True)
        finally:
            loader.dispose()


def feature_names(features: str) -> frozenset[str]:
    """The feature names a target-feature string such as ``+neon,+dotprod,-i8mm`` turns on
    (what :meth:`Intrinsic.available` takes)."""
    items = (f.strip() for f in features.split(","))
    return frozenset(f[1:] for f in items if f.startswith("+"))
