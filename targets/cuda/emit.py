"""Tensorized IR to CUDA C++: one ``__global__`` function per statement of the root block.

A statement with thread-bound loops is a **tiled kernel**: ``blockIdx``/``threadIdx`` loops
become the launch's grid and block (``blockDim.x`` is 32, the lanes of a warp, implicit in the
IR because WMMA calls are warp-collective; ``threadIdx.y/z`` loops select the warp). Any other
statement is a **data-parallel kernel**: its loop nest is spread over a grid of 256-thread
blocks (one thread block of one thread when it is not a single nest).

Inside a tiled kernel, code runs in one of two contexts. Outside the warp loops every thread of
the block runs it; inside them, every lane of the warp. A loop nest ending in a block that
computes with plain stores (a copy into shared memory, an epilogue) is **cooperative**: its
loops that bind no reduce iterator are fused and their iterations dealt out to the threads of
the context (the whole block, or the warp's 32 lanes, followed by ``__syncwarp()``). Intrinsic
calls run in warp context as their ``emit.cuda`` template; at block level they are refused.

``__syncthreads()`` goes, at block level, before a statement that touches a shared or global
buffer that an earlier statement since the last barrier wrote (or writes one it touched), and
at the end of a loop body whose last accesses conflict with its first ones in the next
iteration; ``__syncwarp()`` likewise within a warp, for shared buffers. Reduction loops
that stage tiles in shared memory are double-buffered first (:mod:`.pipeline`), their
warps' fragments double-buffered across each step's barrier, and their copies issued as
``cp.async``; 16-byte copy loops become vector moves (:mod:`.vector`).
Memory layouts and the per-warp fragment arrays are :mod:`.memory`'s.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

from intrinsics import Intrinsic, Registry
from ir import (BinOp, Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, Expr,
                For, ForKind, IfThenElse, IntImm, IntrinsicCall, IterKind, PrimFunc, SeqStmt, Stmt,
                Var, dtypes, substitute)
from ir.arith import Interval, simplify, to_expr
from ir.visitor import post_order_visit
from targets.cuda.cexpr import PRELUDE, ExprPrinter, ctype, string_literal
from targets.cuda.deal import deal
from targets.cuda.errors import EmitError
from targets.cuda.memory import (FragmentLayout, SharedLayout, dense_offset, shared_layout,
                                 warp_split)
from targets.cuda.pipeline import STAGES, Pipelined, software_pipeline
from targets.cuda.ptx import MMA_PRELUDE
from targets.cuda.vector import vector_copy, vector_store, without_clamps, zero_filled
from targets.cuda.writer import CppWriter
from targets.identifiers import Namer, mangle

__all__ = ["CudaKernel", "Launch", "TensorMap", "emit"]

# The scopes that are not memory: fragments, held in the warp's registers.
MEMORY_SCOPES = ("global", "shared")
# Plain shared-memory accesses go through these, so that the host emulation (which defines
# its own) can record every access and report races and reads of elements nothing wrote;
# on the GPU they are the plain accesses, inlined.
SHARED_ACCESS = """\
#ifndef TZ_EMULATION
template <class T, size_t N> __device__ inline void tz_shared_declare(T (&)[N], const char*) {}
template <class T> __device__ inline void tz_shared_declare(T*, size_t, const char*) {}
#define TZ_DYNAMIC_SHARED(name, bytes) extern __shared__ __align__(128) unsigned char name[]
template <class T> __device__ inline T tz_shared_load(const T* a, int i) { return a[i]; }
template <class T> __device__ inline T& tz_shared_store(T* a, int i) { return a[i]; }
#endif
"""
# The barrier ordering memory accesses among the threads of a context.
_BARRIERS = {"block": "__syncthreads();", "warp": "__syncwarp();"}
DATA_PARALLEL_THREADS = 256
# Static shared memory per block is capped at 48 KB; a block needing more takes it as
# dynamic shared memory, which the launch requests (up to the architecture's limit).
STATIC_SHARED_LIMIT = 48 * 1024
# Block rasterisation: a 2-D grid runs in groups of this many block rows, column by column
# within a group, so the blocks resident at once share rows of A and columns of B in L2.
RASTER_ROWS = 8
MAX_GRID = 65535


@dataclass(frozen=True, slots=True)
class TensorMap:
    """A 2-d TMA tensor map over the row-major buffer ``buffer`` (a parameter of the kernel):
    ``dims`` its extents (inner first, in elements), ``stride`` the bytes between its rows,
    ``box`` the extents a copy moves (inner first), ``swizzle`` the shared-memory swizzle
    mode (0: none). A launch taking maps receives each, encoded on the host, as a
    ``const __grid_constant__ CUtensorMap`` argument after the buffers, in order."""

    buffer: str
    dims: tuple[int, int]
    stride: int
    box: tuple[int, int]
    swizzle: int = 0


@dataclass(frozen=True, slots=True)
class Launch:
    """One ``__global__`` function and its launch: ``grid`` and ``block`` as (x, y, z);
    ``tiled`` for a kernel with thread-bound loops (the tensorized ones, and a tiled copy
    such as the int8 B transpose); ``tensorized`` for one that calls intrinsics (the
    GEMM's); ``dynamic_shared`` the bytes of dynamic shared memory it needs (0: its shared
    arrays are static). Above 48 KB a launch must first raise the function's
    ``cudaFuncAttributeMaxDynamicSharedMemorySize`` to that figure. ``stages``: the
    cp.async stages of its pipelined loop (1 without one). ``tensor_maps``: the TMA tensor
    maps it takes after the buffers. ``cluster``: the blocks of a thread-block cluster,
    along x (the kernel's ``__cluster_dims__``; 1: no cluster)."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    tiled: bool = False
    dynamic_shared: int = 0
    stages: int = 1
    tensor_maps: tuple[TensorMap, ...] = ()
    tensorized: bool = False
    cluster: int = 1


@dataclass(frozen=True, slots=True)
class CudaKernel:
    """A function as CUDA C++: ``name`` is the function's name as a C++ identifier (its
    launches' prefix, safe as a file name); ``source`` holds every ``__global__`` function of
    ``launches`` (run in order); each takes the buffers ``params`` names, in that order, as
    device pointers. ``buffers`` are those buffers (the function's parameters, then its
    global intermediates, which the runner allocates zero-filled); ``outputs`` the
    parameters the function writes."""

    name: str
    source: str
    launches: tuple[Launch, ...]
    params: tuple[str, ...]
    buffers: tuple[Buffer, ...]
    outputs: tuple[str, ...]

    @property
    def grid(self) -> tuple[int, int, int]:
        """The grid of the first tensorized launch (the GEMM), else of the first."""
        return self._main().grid

    @property
    def block(self) -> tuple[int, int, int]:
        """The thread block of the first tensorized launch, else of the first."""
        return self._main().block

    def _main(self) -> Launch:
        tensorized = [l for l in self.launches if l.tensorized]
        return (tensorized or list(self.launches))[0]


def emit(func: PrimFunc, registry: Registry, *, pipeline: bool = True, stages: int = STAGES,
         double_fragments: bool = True) -> CudaKernel:
    """Emit ``func`` (tensorized for cuda, or not tensorized at all) as CUDA C++.

    ``registry`` holds the descriptions of the intrinsics ``func`` calls (the run context's,
    made at the edge; ``intrinsics.default_registry()`` there for the built-in ones).
    With ``pipeline``, the shared-memory stages of each reduction loop are buffered
    ``stages`` deep and filled with ``cp.async`` ``stages - 1`` steps ahead
    (:mod:`.pipeline`); without, each step copies its tiles and then computes. With
    ``double_fragments`` (and the pipeline), the warps' fragments are double-buffered
    across each step's barrier where the loop allows; without, each step opens with its
    wait and barrier and then loads its fragments (the simple form).

    Raises EmitError naming the statement or buffer the backend cannot express (a
    warp-collective call outside any warp loop, a fragment read element by element, loops
    bound to one thread axis with different extents).
    """
    pipelined = (software_pipeline(func, stages, double_fragments) if pipeline
                 else Pipelined(func, frozenset(), {}))
    func = pipelined.func
    globals_ = [b for b in func.allocs if b.scope == "global"]
    fragments = fragment_scopes(registry)
    for buffer in func.allocs:
        if buffer.scope not in MEMORY_SCOPES + fragments:
            raise EmitError(f"buffer {buffer.name} is in scope {buffer.scope!r}, which the "
                            "CUDA backend does not place")
    buffers = tuple(func.params) + tuple(globals_)
    # Kernel parameters, by buffer: the user's names as identifiers (targets.identifiers).
    params = Namer()
    names = {b: params.user(b.name) for b in buffers}
    body = func.body.block.body
    stmts = body.stmts if isinstance(body, SeqStmt) else (body,)
    kernels, launches = [], []
    lane_fragments = False
    for n, stmt in enumerate(stmts):
        name = f"{mangle(func.name)}_k{n}"
        emitter = _KernelEmitter(name, buffers, names, registry, pipelined, fragments)
        kernels.append(emitter.emit(stmt))
        launches.append(emitter.launch)
        lane_fragments = lane_fragments or bool(emitter.lane_words)
    written: set[str] = set()
    for stmt in stmts:
        for buffer, mode in _accesses(stmt, registry):
            if mode == "w":
                written.add(buffer.name)
    headers = ["#include <mma.h>", "#include <cuda_fp16.h>"]
    used = {b.dtype for b in func.allocs + tuple(func.params)}
    if dtypes.bfloat16 in used:
        headers.append("#include <cuda_bf16.h>")
    if used & {dtypes.float8_e4m3, dtypes.float8_e5m2}:
        headers.append("#include <cuda_fp8.h>")
    source = "\n".join([f"// {comment_text(func.name)}: generated by tensorize's CUDA backend.",
                        *headers, "", "using namespace nvcuda;", "", PRELUDE, SHARED_ACCESS,
                        *([MMA_PRELUDE] if lane_fragments else []), *kernels])
    return CudaKernel(mangle(func.name), source, tuple(launches),
                      tuple(names[b] for b in buffers),
                      buffers, tuple(p.name for p in func.params if p.name in written))


def fragment_scopes(registry: Registry) -> tuple[str, ...]:
    """The fragment scopes of the cuda families (every scope they declare but global and
    shared memory), sorted: ``wmma.*`` for WMMA, ``mma.*`` for mma.sync."""
    found = {name for family in registry.families if family.target == "cuda"
             for name in family.scopes if name not in MEMORY_SCOPES}
    return tuple(sorted(found))


# What a comment cannot hold as it is: a character outside printable ASCII (a line break
# ends a // comment), a backslash (one at the end of a line continues the comment onto the
# next), the first '?' of "??" (the "??/" trigraph is a backslash), and the '*' of "*/" and
# '/' of "/*" (which end or open a block comment).
_COMMENT_UNSAFE = re.compile(r"[^ -~]|\\|\?(?=\?)|\*(?=/)|/(?=\*)")


def comment_text(text: str) -> str:
    """``text`` as it may stand in a C++ comment, on one line: each character a comment
    cannot hold (:data:`_COMMENT_UNSAFE`) written as its escape (``\\x0a`` for a line break,
    ``\\x2a/`` for ``*/``)."""
    return _COMMENT_UNSAFE.sub(lambda m: _escape(m.group()), text)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _region_buffers(call: IntrinsicCall, intrinsic: Intrinsic
                    ) -> list[tuple[BufferRegion, str]]:
    """(region, mode) of each tensor operand of a call: mode 'r', 'w' or 'rw'."""
    found = []
    for operand, arg in zip(intrinsic.operands, call.args):
        if isinstance(arg, BufferRegion):
            mode = {"input": "r", "output": "w"}.get(operand.role, "rw")
            found.append((arg, mode))
    return found


def _accesses(stmt: Stmt, registry: Registry) -> set[tuple[Buffer, str]]:
    """Every (buffer, 'r' or 'w') that ``stmt`` touches."""
    found: set[tuple[Buffer, str]] = set()

    def visit(node: object) -> None:
        if isinstance(node, BufferLoad):
            found.add((node.buffer, "r"))
        elif isinstance(node, BufferStore):
            found.add((node.buffer, "w"))
        elif isinstance(node, IntrinsicCall):
            for region, mode in _region_buffers(node, registry.get(node.intrinsic)):
                for m in mode:
                    found.add((region.buffer, m))

    post_order_visit(stmt, visit)
    return found


def _conjuncts(cond: Expr) -> list[Expr]:
    """The operands of a conjunction (``a and (b and c)``: a, b, c), or ``[cond]``."""
    if isinstance(cond, BinOp) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _memory_accesses(stmt: Stmt, registry: Registry) -> set[tuple[Buffer, str]]:
    return {(b, m) for b, m in _accesses(stmt, registry) if b.scope in ("shared", "global")}


def _conflict(before: set[tuple[Buffer, str]], after: set[tuple[Buffer, str]],
              ctx: str) -> bool:
    """Whether ``after`` touches what ``before`` wrote or writes what it touched. Within a
    warp only shared memory counts: its warp-collective stores to global memory write
    disjoint tiles, and the backend never reads global data a warp wrote."""
    if ctx == "warp":
        before = {(b, m) for b, m in before if b.scope == "shared"}
        after = {(b, m) for b, m in after if b.scope == "shared"}
    written_before = {b for b, m in before if m == "w"}
    written_after = {b for b, m in after if m == "w"}
    return bool(written_before & {b for b, _ in after}) or bool(
        written_after & {b for b, _ in before})


def _thread_loops(stmt: Stmt) -> list[For]:
    found: list[For] = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, For)
                     and n.kind is ForKind.THREAD_BINDING else None)
    return found


def _outside_warps(stmt: Stmt, registry: Registry) -> set[Buffer]:
    """The buffers ``stmt`` touches outside every threadIdx-bound (warp) loop."""
    if isinstance(stmt, For):
        if stmt.thread is not None and stmt.thread.startswith("threadIdx"):
            return set()
        return _outside_warps(stmt.body, registry)
    if isinstance(stmt, SeqStmt):
        return set().union(*(_outside_warps(s, registry) for s in stmt.stmts))
    if isinstance(stmt, IfThenElse):
        parts = [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
        return set().union(*(_outside_warps(s, registry) for s in parts))
    return {b for b, _ in _accesses(stmt, registry)}


def _column_copies(stmt: Stmt) -> set[Buffer]:
    """The shared buffers that a vectorized copy writes down a column: its lanes step along
    the second-last index (the CUDA schedule copies an 8-bit B operand, k rows of n, from a
    buffer of n rows of k this way). The backend stores them transposed, so those lanes are
    16 consecutive bytes (:func:`.memory.shared_layout`)."""
    found: set[Buffer] = set()

    def visit(node: object) -> None:
        if not isinstance(node, For) or node.kind is not ForKind.VECTORIZED:
            return
        inner = node.body
        while isinstance(inner, For):
            inner = inner.body
        if not isinstance(inner, BlockRealize) or not isinstance(inner.block.body, BufferStore):
            return
        store = inner.block.body
        if store.buffer.scope != "shared" or store.buffer.ndim < 2:
            return
        env = {iv.var: b for iv, b in zip(inner.block.iter_vars, inner.bindings)}
        row, col = (substitute(i, env) for i in store.indices[-2:])
        if _uses_var(row, node.var) and not _uses_var(col, node.var):
            found.add(store.buffer)

    post_order_visit(stmt, visit)
    return found


def _uses_var(expr: Expr, var: Var) -> bool:
    used: list[bool] = []
    post_order_visit(expr, lambda n: used.append(True) if n is var else None)
    return bool(used)


def _perfect_nest(stmt: Stmt) -> tuple[list[For], BlockRealize] | None:
    """The loops of a perfect nest ending in one block, or None."""
    loops = []
    while isinstance(stmt, For):
        loops.append(stmt)
        stmt = stmt.body
    if isinstance(stmt, BlockRealize):
        return loops, stmt
    return None


def _dealt_loops(loops: list[For], realize: BlockRealize) -> list[For]:
    """The leading ``loops`` of a nest around ``realize`` that bind no reduce iterator: those
    whose iterations go to different threads."""
    reduce_vars: set[Var] = set()
    for iv, binding in zip(realize.block.iter_vars, realize.bindings):
        if iv.kind is IterKind.REDUCE:
            post_order_visit(binding, lambda n: reduce_vars.add(n) if isinstance(n, Var)
                             else None)
    spread = []
    for loop in loops:
        if loop.var in reduce_vars:
            break
        spread.append(loop)
    return spread


def _calls_intrinsic(stmt: Stmt) -> bool:
    found: list[bool] = []
    post_order_visit(stmt, lambda n: found.append(True) if isinstance(n, IntrinsicCall)
                     else None)
    return bool(found)


@dataclass
class _Scope:
    """What is known at a point of the walk: C++ names, loop ranges, each block iterator as
    an expression of loop variables, and the thread-bound loop variables with their tags."""

    names: dict[Var, str] = field(default_factory=dict)
    ranges: dict[Var, Interval] = field(default_factory=dict)
    env: dict[Var, Expr] = field(default_factory=dict)
    threads: dict[Var, str] = field(default_factory=dict)

    def child(self) -> _Scope:
        return _Scope(dict(self.names), dict(self.ranges), dict(self.env), dict(self.threads))


class _KernelEmitter:
    """Emits one root statement as one ``__global__`` function (module docs)."""

    def __init__(self, name: str, buffers: tuple[Buffer, ...], names: dict[Buffer, str],
                 registry: Registry, pipelined: Pipelined, fragment_scopes: tuple[str, ...]):
        self.name = name
        self.fragment_scopes = fragment_scopes
        # Fragment buffers held as per-lane registers (the mma.sync family): 32-bit words
        # per tile, from the YAML's ``lane_registers``.
        self.lane_words: dict[Buffer, int] = {}
        self.pipelined = pipelined
        self.buffers = buffers
        self.buffer_names = dict(names)
        self.registry = registry
        self.out = CppWriter()
        self.namer = Namer(names.values())
        self.shared: dict[Buffer, SharedLayout] = {}
        self.transposed: set[Buffer] = set()
        self.frags: dict[Buffer, FragmentLayout] = {}
        self.per_warp: dict[Buffer, int] = {}
        self.dims: dict[str, int] = {}
        self.group: dict[str, tuple[str, str]] = {}
        self.stages = 1
        self.block_index: dict[str, str] = {}
        # A store redirected to a thread's register array (a computed 16-byte store).
        self.redirect: tuple[Buffer, str] | None = None
        self.launch = Launch(name, (1, 1, 1), (1, 1, 1))

    # ---- planning ------------------------------------------------------------------------

    def _plan(self, stmt: Stmt) -> None:
        """Launch dimensions, shared layouts and fragment arrays, from one walk."""
        for loop in _thread_loops(stmt):
            known = self.dims.setdefault(loop.thread, loop.extent)
            if known != loop.extent:
                raise EmitError(f"loops bound to {loop.thread} have extents {known} and "
                                f"{loop.extent} (loop {loop.var.name}); one launch needs one")
        if "threadIdx.x" in self.dims:
            raise EmitError("a loop is bound to threadIdx.x; the CUDA backend keeps threadIdx.x "
                            "for the 32 lanes of each warp")
        tile_widths: dict[Buffer, tuple[int, int]] = {}
        frag_info: dict[Buffer, dict] = {}
        self.transposed = _column_copies(stmt)
        self._walk_plan(stmt, _Scope(), tile_widths, frag_info)
        block_level = _outside_warps(stmt, self.registry)
        # Sorted by name: a set of buffers iterates in hash order, which changes from one
        # process to the next, and the declarations' order changes nvcc's register allocation.
        shared = {b for b, _ in _accesses(stmt, self.registry) if b.scope == "shared"}
        for buffer in sorted(shared, key=lambda b: b.name):
            tile = tile_widths.get(buffer)
            self.shared[buffer] = shared_layout(buffer, tile,
                                                tile is not None and buffer in self.transposed)
            if buffer not in block_level and self.dims:
                # Only warps touch it (an epilogue's staging tile): one copy per warp, each
                # 128-byte aligned so fragment stores into it stay 32-byte aligned.
                elem = max(buffer.dtype.bits // 8, 1)
                self.per_warp[buffer] = -(-self.shared[buffer].size * elem // 128) * 128 // elem
        for buffer, info in frag_info.items():
            if info["type"] is None:
                raise EmitError(f"fragment buffer {buffer.name} is touched only by compute "
                                "intrinsics; a load, fill or store intrinsic declares its type")
            # A double-buffered fragment is planned as its original: its copy is a leading
            # index, its warp dimensions are the warp's own registers.
            original = self.pipelined.fragments.get(buffer, buffer)
            self.frags[buffer] = FragmentLayout.plan(original, info["tile"], info["type"],
                                                     info["accesses"])

    def _walk_plan(self, stmt: Stmt, scope: _Scope, widths: dict, frags: dict) -> None:
        if isinstance(stmt, For):
            inner = scope.child()
            inner.ranges[stmt.var] = Interval(0, stmt.extent - 1)
            if stmt.thread is not None:
                inner.threads[stmt.var] = stmt.thread
            self._walk_plan(stmt.body, inner, widths, frags)
        elif isinstance(stmt, SeqStmt):
            for s in stmt.stmts:
                self._walk_plan(s, scope, widths, frags)
        elif isinstance(stmt, IfThenElse):
            self._walk_plan(stmt.then_case, scope, widths, frags)
            if stmt.else_case is not None:
                self._walk_plan(stmt.else_case, scope, widths, frags)
        elif isinstance(stmt, BlockRealize):
            inner = scope.child()
            for iv, binding in zip(stmt.block.iter_vars, stmt.bindings):
                inner.env[iv.var] = substitute(binding, scope.env)
            for part in (stmt.block.init, stmt.block.body):
                if part is not None:
                    self._walk_plan(part, inner, widths, frags)
        elif isinstance(stmt, IntrinsicCall):
            self._plan_call(stmt, scope, widths, frags)
        elif isinstance(stmt, BufferStore):
            self._check_not_fragment(stmt)

    def _check_not_fragment(self, store: BufferStore) -> None:
        touched = [store.buffer]
        post_order_visit(store.value, lambda n: touched.append(n.buffer)
                         if isinstance(n, BufferLoad) else None)
        for buffer in touched:
            if buffer.scope in self.fragment_scopes:
                raise EmitError(f"buffer {buffer.name} is a {buffer.scope} fragment, opaque "
                                "to plain loads and stores; only its family's load, store, "
                                "fill and compute intrinsics touch it")

    def _plan_call(self, call: IntrinsicCall, scope: _Scope, widths: dict, frags: dict) -> None:
        intrinsic = self.registry.get(call.intrinsic)
        if "cuda" not in intrinsic.emit:
            raise EmitError(f"intrinsic {intrinsic.name} has no cuda template")
        # A tile loaded from a transposed shared buffer is stored column-major there.
        transposed = intrinsic.kind == "load" and any(
            isinstance(a, BufferRegion) and a.buffer in self.transposed for a in call.args)
        if intrinsic.kind == "load" and "lane_registers" in intrinsic.params:
            # Its helper computes addresses for one storage: col_major (an 8-bit B, column
            # by column) needs the transposed buffer, row_major the plain one.
            wanted = intrinsic.operands[0].layout == "col_major"
            if wanted != transposed:
                raise EmitError(f"intrinsic {intrinsic.name} loads a "
                                f"{intrinsic.operands[0].layout} fragment, but the shared "
                                f"buffer it reads is stored "
                                f"{'column by column' if transposed else 'row by row'}")
        for operand, arg in zip(intrinsic.operands, call.args):
            if not isinstance(arg, BufferRegion):
                continue
            buffer = arg.buffer
            if buffer.scope == "shared" and intrinsic.kind == "load":
                widths[buffer] = tuple(operand.shape[-2:])
            if buffer.scope not in self.fragment_scopes:
                continue
            starts = tuple(substitute(r.start, scope.env) for r in arg.ranges[-2:])
            info = frags.setdefault(buffer, {"accesses": [], "tile": tuple(operand.shape),
                                             "type": None})
            info["accesses"].append((starts, dict(scope.threads), dict(scope.ranges)))
            # The data movers declare a fragment's type (and must agree on its registers):
            # a load's, else the first fill's or store's; a compute intrinsic only uses it.
            if intrinsic.kind == "compute":
                continue
            declared = self._fragment_type(buffer, intrinsic,
                                           "col_major" if transposed else operand.layout)
            if intrinsic.kind == "load" or info["type"] is None:
                info["type"] = declared

    # ---- emission ------------------------------------------------------------------------

    def emit(self, stmt: Stmt) -> str:
        """The ``__global__`` function for ``stmt``; sets :attr:`launch`."""
        self._plan(stmt)
        tiled = bool(self.dims)
        if tiled:
            grid = tuple(self.dims.get(f"blockIdx.{a}", 1) for a in "xyz")
            block = (32, self.dims.get("threadIdx.y", 1), self.dims.get("threadIdx.z", 1))
            # Thread counts as constants: the copies unroll and their divisions are shifts.
            self.group = {"block": ("tz_tid", str(block[0] * block[1] * block[2])),
                          "warp": ("threadIdx.x", "32"), "thread": ("0", "1")}
        else:
            nest = _perfect_nest(stmt)
            total = 1
            # Only the leading loops that bind no reduce iterator are dealt to threads.
            for loop in (_dealt_loops(*nest) if nest else []):
                total *= loop.extent
            threads = min(DATA_PARALLEL_THREADS, total) if nest else 1
            blocks = min(-(-total // threads), MAX_GRID) if nest else 1
            grid, block = (blocks, 1, 1), (threads, 1, 1)
            self.group = {"grid": ("(blockIdx.x * blockDim.x + threadIdx.x)",
                                   "(gridDim.x * blockDim.x)"), "thread": ("0", "1")}
        params = ", ".join(f"{ctype(b.dtype)}* __restrict__ {self.buffer_names[b]}"
                           for b in self.buffers)
        threads = block[0] * block[1] * block[2]
        dynamic = 0
        with self.out.block(f'extern "C" __global__ void __launch_bounds__({threads}) '
                            f"{self.name}({params})"):
            if tiled:
                dynamic = self._tiled_prologue(grid, block)
                self._stmt(stmt, _Scope(), "block")
            else:
                self._stmt(stmt, _Scope(), "grid")
        self.launch = Launch(self.name, grid, block, tiled, dynamic, self.stages,
                             tensorized=_calls_intrinsic(stmt))
        return self.out.text() + "\n"

    def _tiled_prologue(self, grid: tuple[int, int, int], block: tuple[int, int, int]) -> int:
        """The declarations a tiled kernel starts with: the thread and warp indices, the
        rasterised block indices, the shared arrays and the fragment arrays. Returns the
        bytes of dynamic shared memory (0 when the shared arrays are static)."""
        self.out.line("const unsigned tz_tid = threadIdx.x + blockDim.x * (threadIdx.y + "
                      "blockDim.y * threadIdx.z);")
        self.out.line("const int tz_warp = threadIdx.y + blockDim.y * threadIdx.z;")
        self._rasterise(grid)
        dynamic = self._declare_shared(block[1] * block[2])
        for buffer, frag in self.frags.items():
            words = f"[{self.lane_words[buffer]}]" if buffer in self.lane_words else ""
            copies = "[2]" if buffer in self.pipelined.fragments else ""
            self.out.line(f"{frag.type_text} {self._buffer_name(buffer)}{copies}"
                          f"[{frag.counts[0]}][{frag.counts[1]}]{words};")
        return dynamic

    def _rasterise(self, grid: tuple[int, int, int]) -> None:
        """With blocks along x and y, declare the swizzled block coordinates the blockIdx.x/y
        loops take (RASTER_ROWS); a bijection of the grid, so every tile is still computed
        once."""
        gx, gy = grid[0], grid[1]
        if gx == 1 or gy == 1:
            return
        group = RASTER_ROWS * gx
        self.out.line("// Rasterised: groups of block rows, column by column within each.")
        self.out.line("const unsigned tz_block = blockIdx.x + gridDim.x * blockIdx.y;")
        self.out.line(f"const unsigned tz_first = tz_block / {group}u * {RASTER_ROWS}u;")
        self.out.line(f"const unsigned tz_rows = tz_min({gy}u - tz_first, {RASTER_ROWS}u);")
        self.out.line(f"const int tz_block_y = tz_first + tz_block % {group}u % tz_rows;")
        self.out.line(f"const int tz_block_x = tz_block % {group}u / tz_rows;")
        self.block_index = {"blockIdx.x": "tz_block_x", "blockIdx.y": "tz_block_y"}

    def _declare_shared(self, warps: int) -> int:
        """Declare the shared arrays, each 128-byte aligned: static arrays when they fit
        STATIC_SHARED_LIMIT together, else pointers into one dynamic array. Returns the
        dynamic bytes (0 when static)."""
        placed = []
        offset = 0
        for buffer, layout in self.shared.items():
            size = warps * self.per_warp[buffer] if buffer in self.per_warp else layout.size
            placed.append((buffer, size, offset))
            offset += -(-size * max(buffer.dtype.bits // 8, 1) // 128) * 128
        dynamic = offset if offset > STATIC_SHARED_LIMIT else 0
        if dynamic:
            self.out.line(f"TZ_DYNAMIC_SHARED(tz_dynamic_shared, {dynamic});")
        for buffer, size, start in placed:
            name = self._buffer_name(buffer)
            if dynamic:
                self.out.line(f"{ctype(buffer.dtype)}* const {name} = reinterpret_cast<"
                              f"{ctype(buffer.dtype)}*>(tz_dynamic_shared + {start});")
                self.out.line(f"tz_shared_declare({name}, {size}, "
                              f"{string_literal(buffer.name)});")
            else:
                self.out.line(f"__shared__ __align__(128) {ctype(buffer.dtype)} {name}[{size}];")
                self.out.line(f"tz_shared_declare({name}, {string_literal(buffer.name)});")
        return dynamic

    def _buffer_name(self, buffer: Buffer) -> str:
        if buffer not in self.buffer_names:
            self.buffer_names[buffer] = self.namer.user(buffer.name)
        return self.buffer_names[buffer]

    def _printer(self, scope: _Scope) -> ExprPrinter:
        return ExprPrinter(scope.names, lambda load: self._element(load.buffer, load.indices,
                                                                   scope), scope.ranges)

    def _element(self, buffer: Buffer, indices: tuple[Expr, ...], scope: _Scope,
                 access: str = "load") -> str:
        """The element as C++: ``X[offset]``, or for a ``load`` or ``store`` of shared
        memory ``tz_shared_load(X, offset)`` / ``tz_shared_store(X, offset)``
        (:data:`SHARED_ACCESS`); ``access`` is ``load``, ``store`` or ``address`` (the
        element whose address is taken)."""
        if buffer.scope in self.fragment_scopes:
            raise EmitError(f"buffer {buffer.name} is a fragment; it has no elements to index")
        printer = self._printer(scope)
        texts = [printer(i) for i in indices]
        name, offset = self._buffer_name(buffer), self._offset(buffer, texts)
        if buffer.scope == "shared" and access != "address":
            return f"tz_shared_{access}({name}, {offset})"
        return f"{name}[{offset}]"

    def _offset(self, buffer: Buffer, indices: list[str]) -> str:
        if buffer.scope == "shared":
            offset = self.shared[buffer].offset(indices)
            if buffer in self.per_warp:
                return f"tz_warp * {self.per_warp[buffer]} + {offset}"
            return offset
        return dense_offset(buffer.effective_strides, indices)

    # ---- statements ----------------------------------------------------------------------

    def _stmt(self, stmt: Stmt, scope: _Scope, ctx: str) -> set:
        """Emit ``stmt`` in context ``ctx`` (grid, block or warp); returns the memory
        accesses left unsynchronised at its end (block context)."""
        if isinstance(stmt, SeqStmt):
            return self._seq(stmt.stmts, scope, ctx)[1]
        if isinstance(stmt, For):
            return self._for(stmt, scope, ctx)
        if isinstance(stmt, IfThenElse):
            printer = self._printer(scope)
            with self.out.block(f"if ({printer(stmt.cond)})"):
                pending = self._stmt(stmt.then_case, scope, ctx)
            if stmt.else_case is not None:
                with self.out.else_block():
                    pending |= self._stmt(stmt.else_case, scope, ctx)
            return pending
        if isinstance(stmt, BlockRealize):
            if ctx != "warp" and not _calls_intrinsic(stmt):
                return self._cooperative([], stmt, scope, ctx)
            self._realize(stmt, scope, ctx)
            return _memory_accesses(stmt, self.registry)
        if isinstance(stmt, BufferStore):
            printer = self._printer(scope)
            target = (self.redirect[1] if self.redirect and self.redirect[0] is stmt.buffer
                      else self._element(stmt.buffer, stmt.indices, scope, 'store'))
            self.out.line(f"{target} = {printer(stmt.value)};")
            return _memory_accesses(stmt, self.registry)
        if isinstance(stmt, IntrinsicCall):
            if ctx != "warp" and self.dims:
                raise EmitError(f"call of {stmt.intrinsic} outside any warp loop: WMMA calls "
                                "are warp-collective; bind a loop around it to threadIdx.y/z")
            self._call(stmt, scope)
            return _memory_accesses(stmt, self.registry)
        raise EmitError(f"statement {type(stmt).__name__} has no CUDA form")

    def _seq(self, stmts: tuple[Stmt, ...], scope: _Scope, ctx: str) -> tuple[set, set]:
        """Emit statements in order with barriers between conflicting ones (block context);
        returns (accesses before the first barrier, accesses after the last)."""
        pending: set = set()
        head: set | None = None
        previous = None
        for stmt in stmts:
            if self.pipelined.is_deferred(stmt):
                continue
            touched = _memory_accesses(stmt, self.registry)
            # A pipelined loop opens every step with its own wait and barrier; prologue copies
            # fill distinct stages.
            opens_synced = isinstance(stmt, For) and stmt.var in self.pipelined.loops or (
                previous is not None and self.pipelined.in_prologue(previous)
                and self.pipelined.in_prologue(stmt))
            previous = stmt
            # A double-buffered pipeline's wait opens a slice inside the warp loops, and its
            # barrier is the block's (pipeline.py).
            wait = self.pipelined.wait_before(stmt)
            if wait is not None:
                self.out.line(f"tz_cp_async_wait_group<{wait}>();")
            if wait is not None or (ctx in _BARRIERS and _conflict(pending, touched, ctx)
                                    and not opens_synced):
                self.out.line("__syncthreads();" if wait is not None else _BARRIERS[ctx])
                head = pending if head is None else head
                pending = set()
            pending |= self._stmt(stmt, scope, ctx)
            if self.pipelined.commits_after(stmt):
                self.out.line("tz_cp_async_commit();")
            prefetch = self.pipelined.prefetch_after(stmt)
            if prefetch is not None:
                # The next stage's copies, issued among the warps' MMAs (pipeline.py).
                self._stmt(prefetch, scope, "block")
                self.out.line("tz_cp_async_commit();")
        return (pending if head is None else head), pending

    def _for(self, loop: For, scope: _Scope, ctx: str) -> set:
        inner = scope.child()
        inner.ranges[loop.var] = Interval(0, loop.extent - 1)
        name = self.namer.user(loop.var.name)
        inner.names[loop.var] = name
        if loop.kind is ForKind.THREAD_BINDING:
            inner.threads[loop.var] = loop.thread
            entered = "warp" if loop.thread.startswith("threadIdx") else ctx
            with self.out.scope(f"const int {name} = "
                                f"{self.block_index.get(loop.thread, loop.thread)};"):
                pending = self._stmt(loop.body, inner, entered)
            return pending if entered == ctx else _memory_accesses(loop, self.registry)
        if loop.var in self.pipelined.loops and ctx == "block":
            return self._pipelined_for(loop, inner, name)
        nest = _perfect_nest(loop)
        if nest is not None and not _calls_intrinsic(loop) and not _thread_loops(loop):
            return self._cooperative(nest[0], nest[1], scope, ctx)
        if loop.kind is ForKind.UNROLLED:
            self.out.line("#pragma unroll")
        with self.out.block(f"for (int {name} = 0; {name} < {loop.extent}; ++{name})"):
            body = loop.body.stmts if isinstance(loop.body, SeqStmt) else (loop.body,)
            head, pending = self._seq(body, inner, ctx)
            if ctx in _BARRIERS and _conflict(pending, head, ctx):
                self.out.line(_BARRIERS[ctx])
                pending = set()
        return pending

    def _pipelined_for(self, loop: For, inner: _Scope, name: str) -> set:
        """A multi-stage loop (:mod:`.pipeline`): its body is the guarded prefetch of a later
        step, then the compute. In the simple form each step waits until at most ``N - 2``
        of the committed groups are in flight (its own tiles have landed) and passes a
        barrier, after which every thread's copies are visible and every warp has finished
        reading the stage the prefetch overwrites; it then commits its prefetch as one
        group. With double-buffered fragments the wait and barrier open the last slice, and
        the prefetch follows the first slice's fragment loads (:class:`.Pipelined`)."""
        prefetch, *rest = loop.body.stmts
        stages = self.pipelined.stages[loop.var]
        self.stages = max(self.stages, stages)
        # Unrolled by the stage count (an even multiple of it where the fragments' copy
        # alternates with the step), each copy's stage and fragment copy indices are
        # constants.
        self.out.line(f"#pragma unroll {self.pipelined.unroll.get(loop.var, stages)}")
        with self.out.block(f"for (int {name} = 0; {name} < {loop.extent}; ++{name})"):
            if loop.var in self.pipelined.registers:
                # The waits and barriers are inside the warps' slices (pipeline.py).
                if not self.pipelined.is_deferred(prefetch):
                    self._stmt(prefetch, inner, "block")
                    self.out.line("tz_cp_async_commit();")
                for stmt in rest:
                    self._stmt(stmt, inner, "block")
                return _memory_accesses(loop, self.registry)
            self.out.line(f"tz_cp_async_wait_group<{stages - 2}>();")
            self.out.line("__syncthreads();")
            self._stmt(prefetch, inner, "block")
            self.out.line("tz_cp_async_commit();")
            self._seq(tuple(rest), inner, "block")
        return _memory_accesses(loop, self.registry)

    def _cooperative(self, loops: list[For], realize: BlockRealize, scope: _Scope,
                     ctx: str) -> set:
        """Deal the iterations of the nest's leading loops that bind no reduce iterator out
        to the threads of ``ctx``; the other loops run in each thread. Returns the memory
        accesses left unsynchronised (none in a warp, which synchronises after the nest)."""
        lane, computed = self._vector_lane(loops, realize, scope)
        if lane is not None:
            loops = loops[:-1]
        spread = _dealt_loops(loops, realize)
        inner = scope.child()
        interleave = lane is not None and self._interleaved_rows(spread, realize)
        with self._dealt(spread, ctx, interleave) as values:
            for loop, value in zip(spread, values):
                name = self.namer.user(loop.var.name)
                inner.names[loop.var] = name
                inner.ranges[loop.var] = Interval(0, loop.extent - 1)
                self.out.line(f"const int {name} = {value};")
            if lane is not None and computed:
                self._vector_compute(lane, realize, inner)
            elif lane is not None:
                self._vector_move(lane, realize, inner)
            else:
                stmt: Stmt = realize
                for loop in reversed(loops[len(spread):]):
                    stmt = For(loop.var, loop.extent, stmt, ForKind.SERIAL)
                self._serial(stmt, inner)
        if ctx == "warp":
            self.out.line("__syncwarp();")
            return set()
        return _memory_accesses(realize, self.registry)

    @contextmanager
    def _dealt(self, spread: list[For], ctx: str, interleave: bool) -> Iterator[list[str]]:
        """The loop by which the threads of ``ctx`` take the iterations of the ``spread``
        loops, open for its body; yields each spread loop's value as C text. In a block or
        a warp the loop is unrolled, each thread taking its known share (:mod:`.deal`,
        guarded where the threads do not divide the iterations); over the grid it is a
        grid-stride loop."""
        tid, count = self.group[ctx]
        total = 1
        for loop in spread:
            total *= loop.extent
        if ctx not in ("block", "warp"):
            flat = self.namer.internal("tz_i")
            values, stride = [], total
            for loop in spread:
                stride //= loop.extent
                values.append(f"({flat} / {stride}) % {loop.extent}")
            with self.out.block(f"for (int {flat} = {tid}; {flat} < {total}; "
                                f"{flat} += {count})"):
                yield values
            return
        threads = int(count)
        step = self.namer.internal("tz_s")
        dealt = deal([loop.extent for loop in spread], threads, tid, step, interleave)
        if dealt.steps > 1:
            self.out.line("#pragma unroll")
        with self.out.block(f"for (unsigned {step} = 0; {step} < {dealt.steps}u; ++{step})"):
            if dealt.guarded:
                self.out.line(f"if ({tid} + {step} * {threads}u >= {total}u) break;")
            yield [f"int({value})" for value in dealt.values]

    def _interleaved_rows(self, spread: list[For], realize: BlockRealize) -> bool:
        """Whether a 16-byte copy into a buffer that fragment loads read, or out of a
        row-major shared buffer whose rows are an odd number of 16-byte units apart (an
        epilogue's staging tile, copied to a transposed output), deals its pieces row first:
        8 consecutive threads take the same piece of 8 consecutive rows, which an odd row
        pitch puts on 8 different bank groups (:mod:`.memory`); a warp still moves whole
        rows of global memory. Needs the rows (the second-last spread loop) in eights."""
        if len(spread) < 2 or spread[-2].extent % 8 or spread[-1].extent == 1:
            return False
        layout = self.shared.get(realize.block.writes[0].buffer)
        if layout is not None:
            return layout.panel is not None
        filled = zero_filled(realize.block.body.value)
        load = realize.block.body.value if filled is None else filled[0]
        source = self.shared.get(load.buffer) if isinstance(load, BufferLoad) else None
        if source is None or source.panel is not None or len(source.strides) < 2:
            return False
        units, rest = divmod(source.strides[-2] * max(load.buffer.dtype.bits // 8, 1), 16)
        return rest == 0 and units % 2 == 1

    def _vector_lane(self, loops: list[For], realize: BlockRealize, scope: _Scope
                     ) -> tuple[For | None, bool]:
        """(the nest's innermost loop, whether its values are computed) when it is vectorized
        and moves one aligned 16-byte piece per iteration of the others (:mod:`.vector`): a
        plain copy, or a computed store whose lanes a thread computes into registers; else
        (None, False), and a comment in the source says why a vectorized loop stays
        scalar."""
        if not loops or loops[-1].kind is not ForKind.VECTORIZED:
            if loops and realize.block.writes[0].buffer.scope == "shared":
                self.out.line(f"// scalar copy: loop {comment_text(loops[-1].var.name)} is not "
                              "vectorized (the schedule vectorizes rows of a multiple of 16 bytes)")
            return None, False
        lane = loops[-1]
        ranges = dict(scope.ranges)
        for loop in loops:
            ranges[loop.var] = Interval(0, loop.extent - 1)
        _, reason = vector_copy(realize, lane.var, lane.extent, scope.env, ranges, self.shared)
        if reason is None:
            return lane, False
        computed = vector_store(realize, lane.var, lane.extent, scope.env, ranges, self.shared)
        if computed is None:
            return lane, True
        self.out.line(f"// scalar copy: {comment_text(reason)}; as a computed store: "
                      f"{comment_text(computed)}")
        return None, False

    def _vector_move(self, lane: For, realize: BlockRealize, scope: _Scope) -> None:
        """One 16-byte move: the copy's store and load at the first lane."""
        first = {lane.var: IntImm(0, lane.var.dtype)}
        values = {iv.var: substitute(b, first) for iv, b in zip(realize.block.iter_vars,
                                                                  realize.bindings)}
        store = realize.block.body

        def at_first_lane(indices: tuple[Expr, ...]) -> tuple[Expr, ...]:
            return tuple(simplify(substitute(i, values), scope.ranges) for i in indices)

        dst = self._element(store.buffer, at_first_lane(store.indices), scope, "address")
        filled = zero_filled(store.value)
        move = "tz_cp_async16" if store.buffer in self.pipelined.staged else "tz_copy16"
        if filled is None:
            src = self._element(store.value.buffer, at_first_lane(store.value.indices), scope,
                                "address")
            self.out.line(f"{move}(&{dst}, &{src});")
            return
        # The halo: 16 zeros and nothing read (the address, outside the buffer there, is not
        # dereferenced: src-size 0); inside it, the load's clamps are identities.
        load, condition = filled[0], simplify(substitute(filled[1], values), scope.ranges)
        indices = without_clamps(at_first_lane(load.indices), condition)
        src = self._element(load.buffer, indices, scope, "address")
        inside = self.namer.internal("tz_inside")
        # Conjuncts joined by `&`: with `&&` nvcc branches around each one.
        printer = self._printer(scope)
        self.out.line(f"const bool {inside} = "
                      f"{' & '.join(f'({printer(c)})' for c in _conjuncts(condition))};")
        self.out.line(f"{move}_zfill(&{dst}, &{src}, {inside});")

    def _vector_compute(self, lane: For, realize: BlockRealize, scope: _Scope) -> None:
        """A computed 16-byte store: the thread's lanes into a register array, then one
        16-byte store at the first lane's element."""
        store = realize.block.body
        values = self.namer.internal("tz_v")
        self.out.line(f"alignas(16) {ctype(store.buffer.dtype)} {values}[{lane.extent}];")
        inner = scope.child()
        name = self.namer.user(lane.var.name)
        inner.names[lane.var] = name
        inner.ranges[lane.var] = Interval(0, lane.extent - 1)
        self.out.line("#pragma unroll")
        with self.out.block(f"for (int {name} = 0; {name} < {lane.extent}; ++{name})"):
            self.redirect = (store.buffer, f"{values}[{name}]")
            self._realize(realize, inner, "thread")
            self.redirect = None
        first = {lane.var: IntImm(0, lane.var.dtype)}
        bound = {iv.var: substitute(b, first) for iv, b in zip(realize.block.iter_vars,
                                                                 realize.bindings)}
        indices = tuple(simplify(substitute(i, bound), scope.ranges) for i in store.indices)
        self.out.line(f"tz_store16(&{self._element(store.buffer, indices, scope, 'address')}, "
                      f"{values});")

    def _serial(self, stmt: Stmt, scope: _Scope) -> None:
        """Emit ``stmt`` as run by one thread."""
        if isinstance(stmt, For):
            inner = scope.child()
            name = self.namer.user(stmt.var.name)
            inner.names[stmt.var] = name
            inner.ranges[stmt.var] = Interval(0, stmt.extent - 1)
            with self.out.block(f"for (int {name} = 0; {name} < {stmt.extent}; ++{name})"):
                self._serial(stmt.body, inner)
        elif isinstance(stmt, BlockRealize):
            self._realize(stmt, scope, "thread")
        else:
            self._stmt(stmt, scope, "thread")

    def _realize(self, realize: BlockRealize, scope: _Scope, ctx: str) -> None:
        block: Block = realize.block
        if block.alloc_buffers:
            raise EmitError(f"block {block.name} allocates buffers; only the root block may")
        printer = self._printer(scope)
        inner = scope.child()
        with self.out.block(comment=f"block {comment_text(block.name)}"):
            for iv, binding in zip(block.iter_vars, realize.bindings):
                name = self.namer.user(iv.var.name)
                self.out.line(f"const {ctype(iv.var.dtype)} {name} = {printer(binding)};")
                inner.names[iv.var] = name
                inner.ranges[iv.var] = Interval(0, iv.extent - 1)
                inner.env[iv.var] = substitute(binding, scope.env)
            guarded = not (realize.predicate.dtype.is_bool
                           and getattr(realize.predicate, "value", 0) == 1)
            guard = (self.out.block(f"if ({self._printer(inner)(realize.predicate)})")
                     if guarded else nullcontext())
            with guard:
                if block.init is not None:
                    reduce_names = [inner.names[iv.var] for iv in block.iter_vars
                                    if iv.kind is IterKind.REDUCE]
                    with self.out.block(f"if ({' && '.join(f'{n} == 0' for n in reduce_names)})"):
                        self._stmt(block.init, inner, ctx)
                self._stmt(block.body, inner, ctx)

    def _call(self, call: IntrinsicCall, scope: _Scope) -> None:
        intrinsic = self.registry.get(call.intrinsic)
        printer = self._printer(scope)
        values: dict[str, str] = {}
        for operand, arg in zip(intrinsic.operands, call.args):
            if not isinstance(arg, BufferRegion):
                values[operand.name] = printer(arg)
                continue
            buffer = arg.buffer
            if buffer.scope in self.fragment_scopes:
                values[operand.name] = self._fragment(buffer, arg, scope)
                continue
            starts = [printer(r.start) for r in arg.ranges]
            values[operand.name] = f"(&{self._buffer_name(buffer)}[{self._offset(buffer, starts)}])"
            ld = self._leading(buffer, operand.layout)
            values[f"{operand.name}.ld"] = str(ld)
            values[f"{operand.name}.ld_bytes"] = str(ld * max(buffer.dtype.bits // 8, 1))
        self.out.line(intrinsic.render("cuda", values))

    def _leading(self, buffer: Buffer, layout: str) -> int:
        if buffer.scope == "shared":
            return self.shared[buffer].leading(layout)
        strides = buffer.effective_strides
        return strides[-2] if layout == "row_major" else strides[-1]

    def _fragment(self, buffer: Buffer, region: BufferRegion, scope: _Scope) -> str:
        frag = self.frags[buffer]
        printer = self._printer(scope)
        indices = []
        for d, r in enumerate(region.ranges[-2:]):
            split = warp_split(substitute(r.start, scope.env), scope.threads, scope.ranges)
            if frag.per_warp and split is not None:
                local = split[1]
                form = type(local)(tuple((a, c // frag.tile[d]) for a, c in local.terms),
                                   local.const // frag.tile[d])
                indices.append(printer(to_expr(form)))
            else:
                indices.append(f"({printer(r.start)}) / {frag.tile[d]}")
        # A double-buffered fragment's first index is its copy; the warp indices after it
        # are this warp's own (pipeline.py binds them to the warp loops).
        copy = (f"[{printer(region.ranges[0].start)}]" if buffer in self.pipelined.fragments
                else "")
        return f"{self._buffer_name(buffer)}{copy}[{indices[0]}][{indices[1]}]"


    def _fragment_type(self, buffer: Buffer, intrinsic: Intrinsic, layout: str) -> str:
        """The C++ type of one of ``buffer``'s fragments, from the intrinsic moving it: with
        a ``lane_registers`` parameter, that many 32-bit words of ``register_dtype`` per
        lane (recorded in :attr:`lane_words`; the type returned is the word's); else the
        WMMA fragment."""
        words = intrinsic.params.get("lane_registers")
        if words is None:
            return _wmma_fragment_type(buffer, intrinsic, layout)
        word = dtypes.dtype(str(intrinsic.params.get("register_dtype", "u32")))
        if word.bits != 32:
            raise EmitError(f"intrinsic {intrinsic.name}: register_dtype {word} is not a "
                            "32-bit register type")
        known = self.lane_words.setdefault(buffer, int(words))
        if known != int(words):
            raise EmitError(f"fragment buffer {buffer.name} is {known} registers per lane "
                            f"for one intrinsic and {words} for {intrinsic.name}")
        return ctype(word)


def _wmma_fragment_type(buffer: Buffer, intrinsic: Intrinsic, layout: str) -> str:
    """``nvcuda::wmma::fragment<use, m, n, k, type[, layout]>`` for ``buffer``."""
    params = intrinsic.params
    use = buffer.scope.split(".", 1)[1]
    shape = f"{params['m']}, {params['n']}, {params['k']}"
    if use == "accumulator":
        return f"nvcuda::wmma::fragment<nvcuda::wmma::accumulator, {shape}, {ctype(buffer.dtype)}>"
    elem = ("nvcuda::wmma::precision::tf32" if params.get("in") == "tf32"
            else ctype(buffer.dtype))
    return (f"nvcuda::wmma::fragment<nvcuda::wmma::{use}, {shape}, {elem}, "
            f"nvcuda::wmma::{layout}>")
