"""The tensor program IR: dtypes, expressions, statements, blocks, buffers and functions.

Nodes are immutable values. Build them directly, with the TE-like builder (:mod:`ir.te`), or
by parsing the script syntax (:mod:`ir.script`); print them with :func:`print_node`.
"""

from ir import dtypes
from ir.buffer import Buffer
from ir.dtypes import DType, dtype
from ir.errors import (
    ExecutionError,
    IntrinsicSpecError,
    IRError,
    KernelError,
    ScheduleError,
    SimulatorFault,
    SourceLoc,
    TensorizeError,
)
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
    and_,
    as_expr,
    cast,
    const,
    eq,
    max_,
    min_,
    ne,
    or_,
    select,
)
from ir.function import IRModule, PrimFunc, make_root
from ir.node import Node
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
    SeqStmt,
    Stmt,
    seq,
)
from ir.structural import assert_structural_equal, structural_equal
from ir.visitor import Mutator, Visitor, post_order_visit, replace_buffers, substitute

__all__ = [
    "TRUE", "BinOp", "Block", "BlockRealize", "Buffer", "BufferLoad", "BufferRegion",
    "BufferStore", "Call", "Cast", "DType", "ExecutionError", "Expr", "FloatImm", "For",
    "ForKind", "IRError", "IRModule", "IfThenElse", "IntImm", "IntrinsicCall",
    "IntrinsicSpecError", "IterKind", "IterVar", "KernelError", "Mutator", "Node", "Not",
    "PrimFunc", "Range", "ScheduleError", "Select", "SeqStmt", "SimulatorFault", "SourceLoc",
    "Stmt", "TensorizeError", "Var", "Visitor", "and_", "as_expr", "assert_structural_equal",
    "cast", "const", "dtype", "dtypes", "eq", "make_root", "max_", "min_", "ne", "or_",
    "post_order_visit", "replace_buffers", "select", "seq", "structural_equal", "substitute",
]
