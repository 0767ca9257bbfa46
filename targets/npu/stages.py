"""Splitting a tensorized function into the stages that run on the NPU and on the host.

The root block's statements run in order. A statement that calls an ``npu`` intrinsic is an
NPU stage: it becomes one program for the simulator. Any other statement (packing an
operand into the layout the NPU wants, padding, an epilogue the vector unit cannot do) is a
host stage, run by the host backend. Buffers live in one pool of numpy arrays between stages:
the parameters, then the root block's global intermediates.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from ir.buffer import Buffer
from ir.function import PrimFunc, make_root
from ir.printer import print_node
from ir.stmt import Block, IntrinsicCall, SeqStmt, Stmt, seq
from ir.visitor import Visitor
from targets.npu.memory import SCOPE_MEMORY


@dataclass(frozen=True, slots=True)
class Stage:
    """One root statement, where it runs, and the buffers it touches."""

    stmt: Stmt
    on_npu: bool
    buffers: tuple[Buffer, ...]

    @property
    def label(self) -> str:
        """A short name: the stage's first block, or its kind."""
        names = _block_names(self.stmt)
        return names[0] if names else ("npu" if self.on_npu else "host")


def split_stages(func: PrimFunc, lookup) -> list[Stage]:
    """The stages of ``func`` in order; consecutive NPU statements form one stage, since
    on-chip data lives only as long as one program. ``lookup(name)`` gives an intrinsic."""
    body = func.body.block.body
    stmts = body.stmts if isinstance(body, SeqStmt) else (body,)
    runs: list[tuple[bool, list[Stmt]]] = []
    for stmt in stmts:
        on_npu = any(lookup(c.intrinsic).target == "npu" for c in _calls(stmt))
        if runs and runs[-1][0] and on_npu:
            runs[-1][1].append(stmt)
        else:
            runs.append((on_npu, [stmt]))
    stages = []
    for on_npu, group in runs:
        stmt = seq(*group)
        stages.append(Stage(stmt, on_npu, tuple(_buffers(stmt))))
    return stages


def stage_calls(stage: Stage) -> list[IntrinsicCall]:
    """The intrinsic calls of a stage, in program text order (each once, however often it
    runs)."""
    return _calls(stage.stmt)


def host_function(func: PrimFunc, stage: Stage) -> PrimFunc:
    """A function running one host stage, its global buffers as parameters."""
    params = tuple(b for b in stage.buffers if b.scope not in SCOPE_MEMORY)
    return PrimFunc(f"{func.name}_{stage.label}", params, make_root(stage.stmt))


# Host functions by their printed text. Plans of one kernel for many machines (a sweep's
# points) or of layers of one shape build equal packing functions; the host backend caches
# machine code by function object, so running the first equal one built compiles each with
# LLVM once per process instead of once per plan.
_TWINS: OrderedDict[str, PrimFunc] = OrderedDict()
_TWINS_SIZE = 256
_TWINS_LOCK = threading.Lock()  # a Dask cluster's worker may run points on several threads


def host_twin(func: PrimFunc) -> PrimFunc:
    """The first function planned in this process that prints as ``func`` does (and so is
    equal to it: print then parse gives back an equal function), else ``func``."""
    text = print_node(func)
    with _TWINS_LOCK:
        twin = _TWINS.setdefault(text, func)
        _TWINS.move_to_end(text)
        if len(_TWINS) > _TWINS_SIZE:
            _TWINS.popitem(last=False)
    return twin


class _Collect(Visitor):
    def __init__(self) -> None:
        self.calls: list[IntrinsicCall] = []
        self.buffers: dict[int, Buffer] = {}
        self.blocks: list[str] = []
        self.local: set[int] = set()

    def visit_IntrinsicCall(self, call: IntrinsicCall) -> None:
        self.calls.append(call)
        self.generic_visit(call)

    def visit_Buffer(self, buffer: Buffer) -> None:
        if id(buffer) not in self.local:
            self.buffers.setdefault(id(buffer), buffer)

    def visit_Block(self, block: Block) -> None:
        self.blocks.append(block.name)
        self.local.update(id(b) for b in block.alloc_buffers)
        self.generic_visit(block)


def _walk(stmt: Stmt) -> _Collect:
    collector = _Collect()
    collector.visit(stmt)
    return collector


def _calls(stmt: Stmt) -> list[IntrinsicCall]:
    return _walk(stmt).calls


def _buffers(stmt: Stmt) -> Iterator[Buffer]:
    collector = _walk(stmt)
    return (b for key, b in collector.buffers.items() if key not in collector.local)


def _block_names(stmt: Stmt) -> list[str]:
    return _walk(stmt).blocks
