"""Batched GEMMs on Hopper (targets/cuda/hopper.py, taken by tensorize/engine/cuda_hopper.py):
a batch per blockIdx.z, each operand's batches stacked under one 2-d tensor map, the tiles
that overhang into the next batch's rows feeding only sums the bounded store drops; exact
under the host emulation against the host reference executor, with and without an epilogue,
for each operand layout, both copy modes and thread orders, in clusters too."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

import ir
from intrinsics import default_registry, lowerer
from ir import te
from targets import cuda, host
from targets.cuda.compile import cuobjdump_path, nvcc_path, resource_usage, sass_opcodes
from targets.cuda.emulate import COPY_MODES
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_hopper import HOPPER_ARCH, hopper_kernel

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                               reason="no host C++ compiler to build the emulation")


def _batched(batch: int, m: int, n: int, k: int, dtype: str = "int8", a_t: bool = False,
             b_t: bool = False, epilogue: bool = False, b_batched: bool = True
             ) -> ir.PrimFunc:
    """``batch`` GEMMs of ``dtype`` operands: A ``batch x m x k`` (``a_t``: ``batch x k x
    m``), B ``batch x k x n`` (``b_t``: ``batch x n x k``; not ``b_batched``: one B for all),
    the sums in int32 or float32; with ``epilogue``, plus a bias per batch and column,
    narrowed to int8 with saturation (float16 for floats)."""
    acc_type = "int32" if dtype == "int8" else "float32"
    A = te.placeholder((batch, k, m) if a_t else (batch, m, k), dtype, "A")
    b_shape = (n, k) if b_t else (k, n)
    B = te.placeholder((batch, *b_shape) if b_batched else b_shape, dtype, "B")
    r = te.reduce_axis(k, "k")

    def a(b, i):
        return A[b, r, i] if a_t else A[b, i, r]

    def w(b, j):
        index = (j, r) if b_t else (r, j)
        return B[(b, *index)] if b_batched else B[index]

    acc = te.compute((batch, m, n), lambda b, i, j: te.sum(
        ir.cast(acc_type, a(b, i)) * ir.cast(acc_type, w(b, j)), axis=r), "acc")
    if not epilogue:
        return te.create_prim_func([A, B, acc], "batched")
    bias = te.placeholder((batch, n), acc_type, "Bias")
    if dtype == "int8":
        out = te.compute((batch, m, n), lambda b, i, j: ir.cast(
            "int8", ir.min_(ir.max_(acc[b, i, j] + bias[b, j], -128), 127)), "out")
    else:
        out = te.compute((batch, m, n), lambda b, i, j: ir.cast(
            "float16", acc[b, i, j] + bias[b, j]), "out")
    return te.create_prim_func([A, B, bias, out], "batched")


def _inputs(func: ir.PrimFunc, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inputs = {}
    for param in func.params[:-1]:
        if param.dtype.is_int:
            inputs[param.name] = rng.integers(-128, 128, param.shape).astype(param.dtype.numpy)
        else:
            inputs[param.name] = rng.standard_normal(param.shape).astype(param.dtype.numpy)
    return inputs


def test_a_batched_gemm_takes_a_third_grid_dimension_over_stacked_tensor_maps():
    registry = default_registry()
    func = _batched(3, 70, 130, 64)
    result = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH)
    gemm = result.hopper.gemm
    assert gemm is not None, result.hopper.reason
    assert gemm.describe().startswith("block acc: 3 batches (blockIdx.z) of 70 x 130 x 64 on "
                                      "64 x 64 tiles")
    kernel = hopper_kernel(gemm, registry, func.name)
    (launch,) = [l for l in kernel.launches if l.tensorized]
    assert launch.grid == (3, 2, 3)
    # A read in place, B packed transposed per batch: each map's rows are the 3 batches'.
    assert [(t.buffer, t.dims) for t in launch.tensor_maps] == [("A", (64, 210)),
                                                               ("B_t", (64, 390))]
    # The bounded store writes C itself: no padded copy, no unpadding launch.
    assert [b.name for b in kernel.buffers] == ["A", "B", "acc", "B_t"]
    assert [l.kernel for l in kernel.launches] == ["batched_pack_b", "batched_gemm"]
    inputs = _inputs(func, seed=1)
    np.testing.assert_array_equal(host.run(result.func, inputs, lowerer(registry.get))["acc"],
                                  host.run(func, inputs)["acc"])


@pytest.mark.parametrize("kernel", [
    # One B for every batch (a broadcast): not every operand's first dimension the batch.
    lambda: _batched(2, 64, 64, 64, b_batched=False),
])
def test_a_batch_not_indexing_every_operand_is_refused_by_name(kernel):
    result = auto_tensorize(kernel(), "cuda", registry=default_registry(), arch=HOPPER_ARCH)
    assert result.hopper.gemm is None
    assert ("block acc requires each operand indexed by its two GEMM iterators, one per "
            "dimension (C as M rows of N), after one batch iterator indexing every operand's "
            "first dimension where there is one") in result.hopper.reason


SLOW_CASES = [
    ("int8, A packed to 16-byte rows", lambda: _batched(3, 70, 130, 40)),
    ("int8, B as N rows of K in place", lambda: _batched(2, 65, 72, 64, b_t=True)),
    ("int8, A as K rows of M", lambda: _batched(3, 100, 64, 48, a_t=True)),
    ("int8, epilogue per batch", lambda: _batched(3, 70, 130, 64, epilogue=True)),
    ("float16, epilogue per batch", lambda: _batched(2, 65, 200, 48, "float16",
                                                     epilogue=True)),
]


@pytest.mark.slow
@needs_gxx
@pytest.mark.parametrize("copies", COPY_MODES)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("name, build", SLOW_CASES, ids=[c[0] for c in SLOW_CASES])
def test_a_batched_gemm_agrees_with_the_reference_executor(name, build, copies, reverse):
    registry = default_registry()
    func = build()
    gemm = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH).hopper.gemm
    kernel = hopper_kernel(gemm, registry, func.name)
    inputs = _inputs(func, seed=5)
    output = func.params[-1]
    want = host.run(func, inputs)[output.name]
    got = cuda.emulate(kernel, inputs, copies=copies, reverse=reverse)[output.name]
    if output.dtype.is_int:
        np.testing.assert_array_equal(got, want)
    else:
        # float16 output: within one unit of its last place (the sums' orders may differ).
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   rtol=2.0 ** -10, atol=1e-6)


@pytest.mark.slow
@needs_gxx
def test_a_batched_gemm_runs_in_clusters_exactly():
    registry = default_registry()
    func = _batched(2, 70, 300, 64)
    gemm = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH,
                          cluster=2).hopper.gemm
    kernel = hopper_kernel(gemm, registry, func.name)
    (launch,) = [l for l in kernel.launches if l.tensorized]
    assert launch.grid == (6, 2, 2) and launch.cluster == 2
    inputs = _inputs(func, seed=6)
    for copies in COPY_MODES:
        got = cuda.emulate(kernel, inputs, copies=copies)["acc"]
        np.testing.assert_array_equal(got, host.run(func, inputs)["acc"])


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found")
@pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump not found (the sass extra)")
def test_a_batched_gemm_compiles_to_wgmma_fed_by_tensor_copies_without_spills():
    registry = default_registry()
    func = _batched(8, 1024, 1024, 1024, epilogue=True)
    gemm = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH).hopper.gemm
    kernel = hopper_kernel(gemm, registry, func.name)
    (counts,) = [c for name, c in sass_opcodes(kernel, HOPPER_ARCH).items()
                 if name.endswith("_gemm")]
    assert counts.get("IGMMA", 0) > 0 and counts.get("UTMALDG", 0) > 0, counts
    for resources in resource_usage(kernel, HOPPER_ARCH):
        assert resources.spill_stores == resources.spill_loads == 0, resources


@pytest.mark.slow
@needs_gxx
@pytest.mark.parametrize("offset", ["blockIdx.z * 70 + ", "blockIdx.z * 130 + ",
                                    "static_cast<long long>(tz_batch) * 9100 + "])
def test_a_batch_offset_removed_gives_wrong_numbers(offset):
    # A's copy, B's copy and the store each find their batch by blockIdx.z.
    registry = default_registry()
    func = _batched(3, 70, 130, 64, epilogue=True)
    gemm = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH).hopper.gemm
    kernel = hopper_kernel(gemm, registry, func.name)
    assert offset in kernel.source
    broken = dataclasses.replace(kernel, source=kernel.source.replace(offset, "", 1))
    inputs = _inputs(func, seed=7)
    got = cuda.emulate(broken, inputs, copies="at_issue")["out"]
    assert not np.array_equal(got, host.run(func, inputs)["out"])
