"""Small kernels for the host backend's tests, and the example kernels by name."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

import ir
from ir import te

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
EXAMPLE_NAMES = ("matmul_relu", "gemm_int8", "batch_matmul", "conv2d_nhwc", "conv2d_nchw",
                 "dense_bias", "gemm_odd")


@cache
def te_builder(name: str) -> Callable[..., ir.PrimFunc]:
    """The ``build`` function of ``examples/te/<name>.py``."""
    spec = importlib.util.spec_from_file_location(f"te_{name}", EXAMPLES / "te" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build


@cache
def script_kernel(name: str) -> ir.PrimFunc:
    """The kernel of ``examples/script/<name>.py``."""
    from ir import script

    return script.load_file(EXAMPLES / "script" / f"{name}.py")[name]


def elementwise(fn: Callable[..., ir.ExprLike], in_dtypes: Sequence[str], n: int,
                out_dtype: str | None = None) -> ir.PrimFunc:
    """``C[i] = fn(X0[i], X1[i], ...)`` over 1-D inputs of ``n`` elements."""
    inputs = [te.placeholder((n,), dt, f"X{d}") for d, dt in enumerate(in_dtypes)]
    out = te.compute((n,), lambda i: fn(*(x[i] for x in inputs)), "C", out_dtype)
    return te.create_prim_func([*inputs, out], "elementwise")


def loop_nest(loops: Sequence[tuple[ir.Var, int]], body: ir.Stmt,
              kind: ir.ForKind = ir.ForKind.SERIAL) -> ir.Stmt:
    """``body`` under one loop per (variable, extent), outermost first."""
    for var, extent in reversed(loops):
        thread = "threadIdx.x" if kind is ir.ForKind.THREAD_BINDING else None
        body = ir.For(var, extent, body, kind, thread)
    return body


def block(name: str, iters: Sequence[tuple[ir.Var, int, str]], bindings: Sequence[ir.Expr],
          body: ir.Stmt, init: ir.Stmt | None = None, predicate: ir.Expr = ir.TRUE,
          allocs: tuple[ir.Buffer, ...] = ()) -> ir.BlockRealize:
    """A block realize; ``iters`` are (variable, extent, "S" or "R"). Regions are left empty:
    the executor does not read them."""
    kinds = {"S": ir.IterKind.SPATIAL, "R": ir.IterKind.REDUCE}
    iter_vars = tuple(ir.IterVar(var, extent, kinds[kind]) for var, extent, kind in iters)
    return ir.BlockRealize(tuple(bindings),
                           ir.Block(name, iter_vars, (), (), body, init, allocs), predicate)


def function(params: Sequence[ir.Buffer], *stmts: ir.Stmt,
             allocs: tuple[ir.Buffer, ...] = ()) -> ir.PrimFunc:
    """A PrimFunc named ``f`` running ``stmts`` in order."""
    return ir.PrimFunc("f", tuple(params), ir.make_root(ir.seq(*stmts), allocs))
