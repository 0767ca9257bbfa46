"""The elementwise blocks after a Hopper GEMM, computed where the sums lie: on the consumer
warpgroup's accumulator registers, before anything is stored (``targets/cuda/hopper.py``).

An :class:`Epilogue` is the kernel's own expression of one output element (the engine inlines
the blocks after the GEMM into one, as the sm_80 path does: ``cuda_schedule.
fuse_epilogue_chain``), over the accumulator's element at (``row``, ``col``) and the loads of
other buffers (a bias or scale per column, per row, or per element) indexed by those two. The
emitter prints it (``cexpr.ExprPrinter``) and names no operation: a bias add, a ReLU, a
requantisation, a narrowing to float16 are whatever the kernel's blocks say. Each thread
evaluates it once per accumulator register, at the register's place in the tile (the store
intrinsic's ``row`` and ``col`` helpers, :data:`.wgmma.FRAGMENT`), and stores the result
straight into the output where it lies inside M x N: no C in global memory, no padded copy,
no unpadding launch. Where N is even (so that every row starts at an even element) and the
output's elements are of 1, 2 or 4 bytes, each register pair (r, r + 1: one row, adjacent
columns, the store intrinsic's ``pair`` helper) is stored by one instruction of twice the
element's width; a pair starting inside N then ends inside it too, so the bound is checked
once a pair. Otherwise each element is stored alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from intrinsics import Intrinsic
from ir import Buffer, BufferLoad, Expr, Var, post_order_visit
from ir.arith import Interval
from targets.cuda.cexpr import ExprPrinter, ctype
from targets.cuda.errors import EmitError
from targets.cuda.wgmma import FRAGMENT
from targets.cuda.writer import CppWriter

__all__ = ["Epilogue", "emit_epilogue"]

# The element sizes whose pairs one store writes (2, 4 or 8 bytes).
PAIRED_BYTES = (1, 2, 4)


@dataclass(frozen=True, slots=True)
class Epilogue:
    """The output element at (``row``, ``col``) of the M x N result as ``value``, an
    expression of loads of ``acc`` (the GEMM's sums, never stored) at (``row``, ``col``)
    and of ``inputs`` (dense buffers) at indices in ``row`` and ``col``; ``output`` (M x N
    elements, unit dimensions aside, dense; batches of them, the first dimension, in a
    batched GEMM) receives it. ``blocks``: the kernel's blocks it computes, in order (for
    the report). ``batch``: the batch's index, which ``value`` may use too."""

    row: Var
    col: Var
    value: Expr
    acc: Buffer
    output: Buffer
    inputs: tuple[Buffer, ...]
    blocks: tuple[str, ...]
    batch: Var

    @staticmethod
    def store_of(c: Buffer, m: int, n: int) -> Epilogue:
        """The epilogue storing the sums as they are into ``c`` (a batched GEMM's store,
        bounded by M x N as every epilogue's)."""
        row, col = Var("row"), Var("col")
        acc = Buffer(c.name, (m, n), c.dtype)
        return Epilogue(row, col, BufferLoad(acc, (row, col)), acc, c, (), (), Var("batch"))

    def check(self, m: int, n: int, batches: int = 1) -> None:
        """EmitError naming what makes the epilogue one this backend cannot emit (of M x N
        sums, ``batches`` of them): a value not of the output's type, an output that is not
        (batches x) M x N elements or not dense, an input not dense, a load of ``acc`` off
        (``row``, ``col``), a load of a buffer it does not list, or a variable other than
        ``row``, ``col`` and ``batch``."""
        if self.value.dtype != self.output.dtype:
            raise EmitError(f"emit_gemm requires the epilogue's value of {self.output.name}'s "
                            f"type {self.output.dtype}, got {self.value.dtype}")
        for buffer in (self.output, *self.inputs):
            if buffer.strides is not None:
                raise EmitError(f"emit_gemm requires {buffer.name} dense in row-major order, "
                                f"got strides {buffer.strides}")
        if [d for d in self.output.shape if d != 1] != [d for d in (batches, m, n) if d != 1]:
            size = f"{batches} x {m} x {n}" if batches > 1 else f"{m} x {n}"
            raise EmitError(f"emit_gemm requires the epilogue's output {self.output.name} of "
                            f"{size} elements (unit dimensions aside), got shape "
                            f"{self.output.shape}")
        listed = {x.name for x in self.inputs}
        loads: list[BufferLoad] = []
        post_order_visit(self.value, lambda x: loads.append(x) if isinstance(
            x, BufferLoad) else None)
        for load in loads:
            if load.buffer.name == self.acc.name:
                if tuple(load.indices) != (self.row, self.col):
                    raise EmitError(f"emit_gemm requires the epilogue to read {self.acc.name} "
                                    f"at its own element (row, col), got "
                                    f"{', '.join(map(str, load.indices))}")
            elif load.buffer.name not in listed:
                raise EmitError(f"emit_gemm requires the epilogue's inputs to list "
                                f"{load.buffer.name}, got {', '.join(sorted(listed))}")
        free: list[Var] = []
        post_order_visit(self.value, lambda x: free.append(x) if isinstance(x, Var) else None)
        strange = sorted({v.name for v in free
                          if v is not self.row and v is not self.col and v is not self.batch})
        if strange:
            raise EmitError(f"emit_gemm requires the epilogue's value in row, col and batch "
                            f"alone, got {', '.join(strange)}")


def _fragment_helpers(store: Intrinsic) -> tuple[str, str, str]:
    """The store intrinsic's ``row``, ``col`` and ``pair`` helpers, each checked against the
    one :mod:`.wgmma` defines."""
    names = []
    for param, helper in FRAGMENT.items():
        given = store.params.get(param)
        if given != helper:
            raise EmitError(f"intrinsic {store.name} ({store.loc.file}:{store.loc.line}): "
                            f"parameter '{param}' requires the helper {helper}, got {given!r}")
        names.append(helper)
    return names[0], names[1], names[2]


def emit_epilogue(out: CppWriter, epilogue: Epilogue, store: Intrinsic,
                  extents: tuple[int, int, int], tile_n: int, row0: str) -> None:
    """The consumers' store with ``epilogue`` fused: each thread's accumulator registers
    (``tz_acc``, ``store``'s layout) of the warpgroup's 64 x ``tile_n`` tile, its first row
    ``row0`` (a C++ expression), become output elements where they lie inside M x N
    (``extents``: M, N and the batches, the batch ``blockIdx.z``)."""
    m, n, batches = extents
    row_of, col_of, pair_of = _fragment_helpers(store)
    registers = int(store.params["lane_registers"])
    names = {epilogue.row: "tz_row", epilogue.col: "tz_col", epilogue.batch: "tz_batch"}
    printer = ExprPrinter(names, lambda load: _address(load, epilogue, printer),
                          {epilogue.row: Interval(0, m - 1), epilogue.col: Interval(0, n - 1),
                           epilogue.batch: Interval(0, batches - 1)})
    value = printer(epilogue.value)
    output = epilogue.output
    first = f"static_cast<long long>(tz_batch) * {m * n} + " if batches > 1 else ""
    if batches > 1:
        out.line("const int tz_batch = blockIdx.z;")
    row_start = f"{output.name}[{first}static_cast<long long>(tz_row) * {n} + "
    out.line("#pragma unroll")
    if n % 2 or output.dtype.numpy.itemsize not in PAIRED_BYTES:
        with out.block(f"for (int tz_r = 0; tz_r < {registers}; ++tz_r)"):
            out.line(f"const int tz_row = {row0} + {row_of}(tz_r);")
            out.line(f"const int tz_col = blockIdx.x * {tile_n} + {col_of}(tz_r);")
            with out.block(f"if (tz_row < {m} && tz_col < {n})"):
                out.line(f"{row_start}tz_col] = {value};")
        return
    with out.block(f"for (int tz_p = 0; tz_p < {registers}; tz_p += 2)"):
        out.line(f"const int tz_row = {row0} + {row_of}(tz_p);")
        out.line(f"const int tz_first = blockIdx.x * {tile_n} + {col_of}(tz_p);")
        with out.block(f"if (tz_row < {m} && tz_first < {n})"):
            out.line(f"{ctype(output.dtype)} tz_pair[2];")
            out.line("#pragma unroll")
            with out.block("for (int tz_e = 0; tz_e < 2; ++tz_e)"):
                out.line("const int tz_r = tz_p + tz_e, tz_col = tz_first + tz_e;")
                out.line(f"tz_pair[tz_e] = {value};")
            out.line(f"{pair_of}(&{row_start}tz_first], tz_pair[0], tz_pair[1]);")


def _address(load: BufferLoad, epilogue: Epilogue, printer: ExprPrinter) -> str:
    """``load`` as C++: the accumulator's register, or the input's element at its row-major
    offset (64-bit, so that no product of an index and a stride wraps), its indices printed
    by ``printer``."""
    if load.buffer.name == epilogue.acc.name:
        return "tz_acc[tz_r]"
    terms, stride = [], 1
    for index, dim in reversed(list(zip(load.indices, load.buffer.shape))):
        if dim != 1:
            offset = f"static_cast<long long>({printer(index)})"
            terms.append(offset if stride == 1 else f"{offset} * {stride}")
        stride *= dim
    return f"{load.buffer.name}[{' + '.join(reversed(terms)) or '0'}]"
