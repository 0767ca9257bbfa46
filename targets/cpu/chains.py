"""Multi-register loads of a counted loop chained through one pointer per buffer, and the
interleaving stores of a packing loop (``st4``, which has no immediate offset) likewise.

LLVM folds a pointer's advance into a load (AArch64's post-indexed ``ld1 {v0-v3}, [x0],
#64``) only where the next address is that load's address plus a step. Given each load's
address as base + offset, it folds the first of an iteration and spends an ``add`` or a
``mov`` on each other (LSR and InstCombine merge hand-written chains of constant steps back
into base + offset). So inside a counted loop each such load of a buffer is addressed from the
one before it, advanced by a step that LLVM cannot see as a constant (the step times an
opaque 1, :func:`opaque_one`): the chain survives, and each load advances its pointer by a
register (``ld1 {v0-v3}, [x0], x8``). The loop carries the pointer in a phi. 8x8 SDOT with
four k steps an iteration: 74 instructions per 64 sdot become 70 (the 64^3 GEMM 23,013 to
22,436 executed, 256^3 1,258,086 to 1,224,273). Chained, the one-row GEMV's packing of B
(1 x 1024 x 1024, tuned for cortex-a55) executes 85,509 instructions where it executed
101,890; the emitter chains stores only when asked (``emit(..., chain_stores=True)``), since
other kernels' packing got longer (64^3: 21,427 to 21,659 executed).

Inline asm returning the advanced pointer would say the same directly, but llvmlite's library
has no AArch64 assembly parser, so it cannot put inline asm in an AArch64 object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir as ll

from ir.buffer import Buffer
from ir.expr import Var
from targets.cpu.static import Form
from targets.host.numerics import I64
from targets.identifiers import mangle

__all__ = ["LoadChains", "opaque_one"]


def opaque_one(builder: ll.IRBuilder, fence: ll.Function) -> ll.Value:
    """The integer 1 as ``fptosi(llvm.arithmetic.fence(1.0))`` (``fence`` that intrinsic's
    declaration), emitted in the function's entry block. No pass folds through the fence, so
    LLVM cannot see the value (2 instructions a call: ``fmov``, ``fcvtzs``); llvmlite can
    mark no load volatile, and a stack slot's atomic store and load are folded. The caller
    emits it once a function."""
    with builder.goto_block(builder.function.entry_basic_block):
        one = builder.call(fence, [ll.Constant(ll.DoubleType(), 1.0)])
        return builder.fptosi(one, I64, name="one")


@dataclass
class _Chain:
    """One buffer's chain: the phi the loop carries, the form (in elements, over the loop's
    variable) of the iteration's first load, the last load's form and address, and whether
    it feeds loads (else interleaving stores)."""

    phi: ll.PhiInstr
    first: Form
    last: Form
    pointer: ll.Value
    loads: bool


class LoadChains:
    """The chains of one counted loop over ``var`` from ``lo``, whose body starts in block
    ``header`` (entered from ``entry``), ``outer`` the variables whose values are defined
    before the loop. ``address(buffer, form)`` is the emitter's address of an element form
    at the current position, ``one()`` its function's :func:`opaque_one`."""

    def __init__(self, builder: ll.IRBuilder, var: Var, lo: int, entry: ll.Block,
                 header: ll.Block, outer: set[Var],
                 address: Callable[[Buffer, Form], ll.Value],
                 one: Callable[[], ll.Value]) -> None:
        self.b = builder
        self.var = var
        self.outer = outer
        self.lo = lo
        self.entry = entry
        self.header = header
        self.address = address
        self.one = one
        self.chains: dict[Buffer, _Chain] = {}

    @property
    def loads(self) -> bool:
        """True when some chain of the loop feeds loads (a k loop's, not a packing's)."""
        return any(chain.loads for chain in self.chains.values())

    def load_address(self, buffer: Buffer, form: Form) -> ll.Value | None:
        """The address of a multi-register load of ``buffer`` at element ``form``, from the
        buffer's chain; None where it cannot chain (outside the loop's straight-line start,
        a form not in the loop's variable or in one defined inside the loop, or one that
        differs from the chain's last by more than a constant), and the caller addresses it
        as usual."""
        return self._chained(buffer, form, True)

    def store_address(self, buffer: Buffer, form: Form) -> ll.Value | None:
        """The address of an interleaving store (``st4``, which has no immediate offset) of
        ``buffer`` at element ``form``, from the buffer's chain, as :meth:`load_address`."""
        return self._chained(buffer, form, False)

    def _chained(self, buffer: Buffer, form: Form, loads: bool) -> ll.Value | None:
        if self.b.block is not self.header or self.var not in form.terms or any(
                v is not self.var and v not in self.outer for v in form.terms):
            return None
        chain = self.chains.get(buffer)
        if chain is None:
            self.chains[buffer] = self._start(buffer, form, loads)
            return self.chains[buffer].phi
        if form.terms != chain.last.terms:
            return None
        chain.pointer = self._advance(buffer, chain.pointer, form.const - chain.last.const)
        chain.last = form
        return chain.pointer

    def close(self, latch: ll.Block) -> None:
        """Carry each chain into the next iteration: its last address advanced to the next
        iteration's first load, added to its phi from ``latch`` (the builder is there)."""
        for buffer, chain in self.chains.items():
            step = chain.first.terms[self.var] + chain.first.const - chain.last.const
            chain.phi.add_incoming(self._advance(buffer, chain.pointer, step), latch)

    def _start(self, buffer: Buffer, form: Form, loads: bool) -> _Chain:
        """A chain whose phi enters with the address of ``form`` at the loop's first value."""
        start = Form(form.const + form.terms[self.var] * self.lo,
                     {v: c for v, c in form.terms.items() if v is not self.var})
        with self.b.goto_block(self.entry):
            initial = self.address(buffer, start)
        current = self.b.block
        self.b.position_at_start(self.header)
        phi = self.b.phi(ll.PointerType(), name=f"{mangle(buffer.name)}.chain")
        self.b.position_at_end(current)
        phi.add_incoming(initial, self.entry)
        return _Chain(phi, form, form, phi, loads)

    def _advance(self, buffer: Buffer, pointer: ll.Value, elements: int) -> ll.Value:
        """``pointer`` advanced by ``elements`` of ``buffer``, as bytes times the opaque 1."""
        size = max(buffer.dtype.bits // 8, 1)
        step = self.b.mul(self.one(), ll.Constant(I64, elements * size))
        return self.b.gep(pointer, [step], source_etype=ll.IntType(8))
