"""Shared helpers: suite kernels tensorized for x86, inputs over each dtype's range, and a
native run that skips, with the reason, on a host that cannot run the code."""

from __future__ import annotations

import importlib.util
from functools import cache

import numpy as np
import pytest

from intrinsics import default_registry
import ir
from ir import te
from targets import cpu
from tensorize.engine import auto_tensorize
from tests.tensorize.engine.suite import SUITE, suite

__all__ = ["builders", "gemm_inputs", "kernel", "run_here", "s8u8_gemm", "tensorized",
           "u8s8_gemm"]


@cache
def builders() -> dict:
    """The suite's kernel builders (``gemm_u8s8(m, n, k)``, ...) by name."""
    spec = importlib.util.spec_from_file_location("tensorize_suite_builders", SUITE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {b.__name__: b for b in module.BUILDERS}


def u8s8_gemm(m: int, n: int, k: int) -> ir.PrimFunc:
    """C = A @ B, A uint8 and B int8, accumulated in int32."""
    return builders()["gemm_u8s8"](m, n, k)


def s8u8_gemm(m: int, n: int, k: int) -> ir.PrimFunc:
    """C = A @ B, A int8 and B uint8 (the operands' types swapped), accumulated in int32."""
    a = te.placeholder((m, k), "int8", "A")
    b = te.placeholder((k, n), "uint8", "B")
    rk = te.reduce_axis(k, "k")
    c = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("int32", a[i, rk]) * ir.cast("int32", b[rk, j]), axis=rk), "C")
    return te.create_prim_func([a, b, c], "gemm_s8u8")


@cache
def tensorized(name: str):
    """Suite kernel ``name`` tensorized for x86."""
    return auto_tensorize(suite()[name], "x86", registry=default_registry())


@cache
def kernel(name: str) -> cpu.CpuKernel:
    """The x86 kernel of suite kernel ``name``."""
    return cpu.emit(tensorized(name).func, "x86", registry=default_registry())


def run_here(k: cpu.CpuKernel, inputs, runs: int = 1) -> cpu.CpuRun:
    """Run ``k``, or skip the test with the reason no engine here can."""
    engine, reason = cpu.engine_for(k)
    if engine is None:
        pytest.skip(reason)
    return cpu.run(k, inputs, runs)


def gemm_inputs(m: int, n: int, k: int, seed: int = 0) -> dict[str, np.ndarray]:
    """u8 A and s8 B over their whole ranges, both ends included."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    a.flat[:2] = (0, 255)
    b.flat[:2] = (-128, 127)
    return {"A": a, "B": b}
