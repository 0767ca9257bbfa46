"""The mma.sync + ldmatrix family (intrinsics/cuda_mma.yaml): GEMMs tensorized with it,
emitted, exact under the emulation of its per-lane registers in both copy modes, and a wrong
lane mapping caught by its numbers."""

from __future__ import annotations

import dataclasses
import re
import shutil
from functools import cache
from pathlib import Path

import numpy as np
import pytest

import ir
from intrinsics import default_registry, load_registry
from intrinsics.registry import BUILTIN_DIR
from ir import te
from targets import cuda, host
from targets.cuda.banks import bank_conflicts
from targets.cuda.compile import nvcc_path, resource_usage
from targets.cuda.emulate import COPY_MODES
from tensorize.engine import auto_tensorize, count_calls
from tensorize.engine.cuda_schedule import mapping_cycles
from tensorize.match import match_block
from tests.default_run import first_by_default
from tests.targets.cuda.helpers import WMMA_INT8, random_inputs, sized
from tests.tensorize.engine.suite import suite

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="no host C++ compiler to build the emulation")

# (kernel, intrinsic): 64^3 GEMMs of every input pair, each with its family's intrinsic.
GEMMS = {
    "fp16": ("gemm_fp16", "mma_m16n8k16_f16f16_f32"),
    "bf16": ("gemm_bf16", "mma_m16n8k16_bf16bf16_f32"),
    "s8s8": ("gemm_int8", "mma_m16n8k32_s8s8_s32"),
    "u8s8": ("gemm_u8s8", "mma_m16n8k32_u8s8_s32"),
    "s8u8": ("gemm_s8u8", "mma_m16n8k32_s8u8_s32"),
    "u8u8": ("gemm_u8u8", "mma_m16n8k32_u8u8_s32"),
}
# Input dtypes of the GEMMs the suite does not build.
_BUILT_HERE = {"gemm_bf16": ("bfloat16", "bfloat16", "float32"),
               "gemm_s8u8": ("int8", "uint8", "int32"),
               "gemm_u8u8": ("uint8", "uint8", "int32")}


def _gemm(name: str, size: int = 64) -> ir.PrimFunc:
    if name not in _BUILT_HERE:
        return sized(name, m=size, n=size, k=size)
    a, b, acc = _BUILT_HERE[name]
    A = te.placeholder((size, size), a, "A")
    B = te.placeholder((size, size), b, "B")
    rk = te.reduce_axis(size, "k")
    C = te.compute((size, size), lambda i, j: te.sum(
        ir.cast(acc, A[i, rk]) * ir.cast(acc, B[rk, j]), axis=rk), "C")
    return te.create_prim_func([A, B, C], name)


@cache
def _tensorized(key: str, registry_dir: str | None = None) -> ir.PrimFunc:
    name, intrinsic = GEMMS[key]
    registry = default_registry() if registry_dir is None else _registry(registry_dir)
    return auto_tensorize(_gemm(name), "cuda", intrinsic=intrinsic, registry=registry).func


@cache
def _registry(directory: str):
    return load_registry([BUILTIN_DIR / "cuda.yaml", Path(directory) / "cuda_mma.yaml"])


def _expect_equal(actual: np.ndarray, expected: np.ndarray) -> None:
    if expected.dtype.kind == "f":
        np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-3)
    else:
        np.testing.assert_array_equal(actual, expected)


def _check(key: str) -> None:
    name, intrinsic = GEMMS[key]
    func = _tensorized(key)
    # 64^3 in tiles of 16 x 8 x k: every tile one call.
    registry = default_registry()
    m, n, k = registry.get(intrinsic).extents
    assert (m, n) == (16, 8)
    assert count_calls(func)[intrinsic] == (64 // m) * (64 // n) * (64 // k)
    kernel = cuda.emit(func, registry)
    body = kernel.source[kernel.source.index('extern "C" __global__'):]
    assert "tz_ldmatrix_x4(" in body and "tz_mma_m16n8k" in body and "wmma::" not in body
    original = _gemm(name)
    for inputs in (random_inputs(original, seed=7), _extreme_inputs(original)):
        expected = host.run(original, inputs)["C"]
        for copies in COPY_MODES:
            _expect_equal(cuda.emulate(kernel, inputs, copies=copies)["C"], expected)


def _extreme_inputs(func: ir.PrimFunc) -> dict[str, np.ndarray]:
    """Integers drawn from the ends of their dtype's range (u8 128-255, where a sign mix-up
    shows; s8 -128 and 127), floats normal: long accumulations of the largest products."""
    rng = np.random.default_rng(12)
    inputs = {}
    for param in func.params[:2]:
        dtype = param.dtype
        if dtype.is_float:
            values = rng.standard_normal(param.shape)
        else:
            ends = [dtype.min, dtype.min + 1, dtype.max - 1, dtype.max]
            values = rng.choice(ends, param.shape)
        inputs[param.name] = values.astype(dtype.numpy)
    return inputs


@pytest.mark.parametrize("key", first_by_default(["fp16", "u8s8"], 1))
def test_gemm_is_exact_under_the_per_lane_emulation(key):
    _check(key)


@pytest.mark.slow
@pytest.mark.parametrize("key", ["bf16", "s8s8", "s8u8", "u8u8"])
def test_every_input_pair_is_exact_under_the_per_lane_emulation(key):
    _check(key)


@pytest.mark.slow
def test_a_wrong_row_address_in_a_template_gives_wrong_numbers(tmp_path):
    # The A load told that A's rows are 0 bytes apart (they are 80: 32 halves, padded): the
    # lanes of each 8 x 16-byte matrix all give its first row, data the block did copy, so
    # nothing but the numbers shows it.
    text = (BUILTIN_DIR / "cuda_mma.yaml").read_text()
    right = "tz_ldmatrix_x4({dst}, {src}, {src.ld_bytes});"
    assert text.count(right) == 1
    (tmp_path / "cuda_mma.yaml").write_text(text.replace(
        right, "tz_ldmatrix_x4({dst}, {src}, 0);"))
    func = _tensorized("fp16", str(tmp_path))
    kernel = cuda.emit(func, _registry(str(tmp_path)))
    assert "tz_ldmatrix_x4(" in kernel.source and "]), 0);" in kernel.source
    original = _gemm("gemm_fp16")
    inputs = random_inputs(original, seed=8)
    expected = host.run(original, inputs)["C"]
    actual = cuda.emulate(kernel, inputs)["C"]
    assert not np.allclose(actual, expected, rtol=1e-2, atol=1e-2)


@pytest.mark.slow
@pytest.mark.parametrize("wrong", ["lane % 8 * ld_bytes + lane / 16 * 16",
                                   "lane / 2 * ld_bytes + lane % 2 * 16"])
def test_a_wrong_lane_mapping_in_a_helper_gives_wrong_numbers(wrong, registry):
    # The x4 helper's lanes giving rows 0-7 twice, or each row's two halves from two
    # neighbouring lanes (the matrices mixed up): every address aligned and inside the
    # tile, so the run completes, with wrong numbers.
    kernel = cuda.emit(_tensorized("u8s8"), registry)
    right = "lane % 16 * ld_bytes + lane / 16 * 16"
    assert kernel.source.count(right) == 1
    broken = dataclasses.replace(kernel, source=kernel.source.replace(right, wrong))
    original = _gemm("gemm_u8s8")
    inputs = random_inputs(original, seed=9)
    expected = host.run(original, inputs)["C"]
    assert not np.array_equal(cuda.emulate(broken, inputs)["C"], expected)


@pytest.mark.slow
def test_a_missing_barrier_is_still_a_race_with_warp_exchanges(registry):
    # The exchanges of mma.sync and ldmatrix order no memory accesses: without the barrier
    # that opens a pipelined step, the lanes' ldmatrix reads race the copies.
    kernel = cuda.emit(_tensorized("fp16"), registry)
    barrier = "__syncthreads();"
    parts = kernel.source.split(barrier)
    nth = next(n for n, part in enumerate(parts) if "tz_cp_async_wait_group<" in
               part.rstrip().splitlines()[-1])
    broken = dataclasses.replace(kernel, source=barrier.join(parts[:nth + 1])
                                 + barrier.join(parts[nth + 1:]))
    inputs = random_inputs(_gemm("gemm_fp16"), seed=10)
    with pytest.raises(cuda.EmulationError, match="race on shared|uninitialised read"):
        cuda.emulate(broken, inputs)


@pytest.mark.slow
def test_a_misaligned_row_address_is_reported(registry):
    kernel = cuda.emit(_tensorized("u8s8"), registry)
    broken = dataclasses.replace(kernel, source=re.sub(
        r"(tz_ldmatrix_x4\([^,]+, \(&A_shared\[)", r"\g<1>4 + ", kernel.source, count=1))
    assert broken.source != kernel.source
    with pytest.raises(cuda.EmulationError, match="ldmatrix.x4: lane 0's row address .* is "
                                                  "not 16-byte aligned"):
        cuda.emulate(broken, random_inputs(_gemm("gemm_u8s8")))


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="no nvcc")
@pytest.mark.parametrize("key", list(GEMMS))
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvcc_compiles_the_family_without_spills(key, arch, registry):
    kernel = cuda.emit(_tensorized(key), registry)
    for resources in resource_usage(kernel, arch):
        assert resources.spill_stores == 0 and resources.spill_loads == 0, resources
        assert resources.registers <= 255


def test_fragments_are_declared_from_the_yaml_as_per_lane_registers(registry):
    source = cuda.emit(_tensorized("u8s8"), registry).source
    # lane_registers and register_dtype of the loads and the fill: 4 words for A and C, 2
    # for B, packed 8-bit values as unsigned words and the accumulator as int.
    # A and B are double-buffered across the pipeline's barrier: two copies of each.
    assert re.search(r"\n +unsigned int A_shared_mma_matrix_a\[2\]\[\d+\]\[1\]\[4\];", source)
    assert re.search(r"\n +unsigned int B_\w+_mma_matrix_b\[2\]\[1\]\[\d+\]\[2\];", source)
    assert re.search(r"\n +int C_mma_accumulator\[\d+\]\[\d+\]\[4\];", source)
    assert "tz_ptx_ldmatrix_x4" in source
    # A WMMA kernel does not carry the family's helpers.
    wmma = cuda.emit(auto_tensorize(_gemm("gemm_int8"), "cuda", intrinsic=WMMA_INT8,
                                    registry=registry).func, registry).source
    assert "wmma::mma_sync" in wmma and "tz_ptx_ldmatrix_x4" not in wmma


def test_the_engine_keeps_wmma_where_cycles_tie_and_takes_mma_for_mixed_signs(registry):
    fp16 = auto_tensorize(_gemm("gemm_fp16"), "cuda", registry=registry)
    assert [b.intrinsic for b in fp16.tensorized] == ["wmma_m16n16k16_f16_f32"]
    mixed = auto_tensorize(_gemm("gemm_u8s8"), "cuda", registry=registry)
    assert [b.intrinsic for b in mixed.tensorized] == ["mma_m16n8k32_u8s8_s32"]
    # 8-bit: the cycles tie and one IMMA.16832 does the work of WMMA's two IMMA.16816.
    int8 = auto_tensorize(_gemm("gemm_int8"), "cuda", registry=registry)
    assert [b.intrinsic for b in int8.tensorized] == ["mma_m16n8k32_s8s8_s32"]


def test_mapping_cycles_rule_out_what_the_oldest_architecture_lacks(tmp_path):
    registry = default_registry()
    cycles = {}
    for key, wmma_name in (("fp16", "wmma_m16n16k16_f16_f32"),
                           ("bf16", "wmma_m16n16k16_bf16_f32")):
        name, intrinsic = GEMMS[key]
        (match, *_) = match_block(_gemm(name), "C", registry.get(intrinsic), registry)
        cycles[key] = mapping_cycles(_gemm(name), match, registry)
        wmma = match_block(_gemm(name), "C", registry.get(wmma_name), registry)[0]
        # The same tensor pipe: 2 m16n8k16 of 8 cycles per 16x16x16 WMMA of 16, and the
        # same one HMMA.16816 per m16n8k16 (the fraction that breaks ties).
        assert cycles[key] == mapping_cycles(_gemm(name), wmma, registry)
        assert cycles[key] == 4 * 4 * 4 * 16 + 1 / 2
    # A cuda family whose oldest architecture is sm_75: no bf16 mma.sync there.
    text = (BUILTIN_DIR / "cuda.yaml").read_text()
    assert text.count("    sm_80:\n") == 1
    (tmp_path / "cuda.yaml").write_text(text.replace("    sm_80:\n", "    sm_75:\n"))
    turing = load_registry([tmp_path / "cuda.yaml", BUILTIN_DIR / "cuda_mma.yaml"])
    for key, finite in (("fp16", True), ("bf16", False)):
        name, intrinsic = GEMMS[key]
        (match, *_) = match_block(_gemm(name), "C", turing.get(intrinsic), turing)
        assert (mapping_cycles(_gemm(name), match, turing) < float("inf")) is finite


SUITE_KERNELS = ("matmul_relu_fp16", "matmul_requant_int8", "conv2d_nhwc_int8",
                 "conv2d_nchw_int8", "gemm_int8_odd", "batch_matmul_int8", "dense_int8",
                 "conv1d_int8", "conv2d_dilated_int8", "conv1x1_int8")


@pytest.mark.slow
@pytest.mark.parametrize("name", SUITE_KERNELS)
def test_suite_kernels_through_the_family_are_exact_in_both_copy_modes(name, registry):
    # Epilogues through the per-warp staging tile, implicit-GEMM gathers, odd sizes, batches.
    func = suite()[name]
    intrinsic = "mma_m16n8k16_f16f16_f32" if "fp16" in name else "mma_m16n8k32_s8s8_s32"
    result = auto_tensorize(func, "cuda", intrinsic=intrinsic, registry=registry)
    assert [b.intrinsic for b in result.tensorized] == [intrinsic]
    kernel = cuda.emit(result.func, registry)
    inputs = random_inputs(func, seed=11)
    expected = host.run(func, inputs)
    for copies in COPY_MODES:
        actual = cuda.emulate(kernel, inputs, copies=copies)
        for key, value in expected.items():
            _expect_equal(actual[key], value)


@pytest.mark.parametrize("key", first_by_default(["fp16", "u8s8"], 1))
def test_ldmatrix_rows_are_free_of_bank_conflicts(key, registry):
    # Each ldmatrix row is traced as a 16-byte access (8 lanes per phase, as the hardware
    # serves one 8 x 16-byte matrix); the padded pitches put 8 rows on 8 bank groups.
    kernel = cuda.emit(_tensorized(key), registry)
    counts = bank_conflicts(kernel, random_inputs(_gemm(GEMMS[key][0]), seed=7))
    tiled = counts[next(launch.kernel for launch in kernel.launches if launch.tensorized)]
    assert tiled["copy"].phases > 0
    assert sum(c.conflicts for c in tiled.values()) == 0


@pytest.mark.parametrize(("key", "right", "wrong", "message"), [
    # An 8-bit B load that forgot its col_major fragment: the backend stores that B column
    # by column, which the row-major helper would misread.
    ("s8s8", "scope: mma.matrix_b,\n         layout: col_major}", "scope: mma.matrix_b}",
     ("intrinsic ldmatrix_b_k32n8_s8 loads a row_major fragment, but the shared buffer it "
      "reads is stored column by column")),
    # The accumulator's fill and store disagreeing on its registers per lane.
    ("fp16", "every lane\n    params: {lane_registers: 4,",
     "every lane\n    params: {lane_registers: 2,",
     ("fragment buffer C_mma_accumulator is 2 registers per lane for one intrinsic and 4 "
      "for mma_store_m16n8_f32")),
    # Registers are 32 bits wide.
    ("u8s8", "register_dtype: u32}\n    variants:\n      - {k: 32, in: s8, ld: 16}",
     "register_dtype: u16}\n    variants:\n      - {k: 32, in: s8, ld: 16}",
     "intrinsic ldmatrix_b_k32n8_s8: register_dtype uint16 is not a 32-bit register type"),
], ids=["layout", "registers", "width"])
def test_fragment_data_the_backend_cannot_declare_is_refused(tmp_path, key, right, wrong,
                                                            message):
    text = (BUILTIN_DIR / "cuda_mma.yaml").read_text()
    assert text.count(right) == 1
    (tmp_path / "cuda_mma.yaml").write_text(text.replace(right, wrong))
    func = _tensorized(key, str(tmp_path))
    with pytest.raises(cuda.EmitError, match=message):
        cuda.emit(func, _registry(str(tmp_path)))
