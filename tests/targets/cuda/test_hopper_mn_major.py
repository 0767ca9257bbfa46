"""A 16-bit B stored K x N row-major read in place by the Hopper GEMM: MN-major descriptors
with the instruction's imm-trans-b flag (intrinsics/cuda_wgmma.yaml's `transpose: 1` loads),
a box per k step and panel of n (targets/cuda/hopper.py), no packing launch; the 8-bit types,
whose wgmma reads K-major tiles alone, keep theirs. Exact under the emulation against numpy
on sizes off the tile; a transpose flag that is not the landed layout's reported by name;
compiled for sm_90a to HGMMA fed by UTMALDG without spills or a packing kernel."""

from __future__ import annotations

import dataclasses
import re
import shutil

import numpy as np
import pytest

from intrinsics import default_registry, load_registry
from intrinsics.registry import BUILTIN_DIR
from ir import Buffer, dtypes
from targets import cuda
from targets.cuda.compile import cuobjdump_path, nvcc_path, resource_usage, sass_opcodes
from targets.cuda.emit import TensorMap
from targets.cuda.emulate import COPY_MODES
from targets.cuda.hopper import GemmOperands, choose_loads, emit_gemm
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_hopper import HOPPER_ARCH, hopper_gemm, hopper_kernel
from tests.targets.cuda.test_hopper import _inputs, _reference
from tests.targets.cuda.test_hopper_batch import _batched
from tests.targets.cuda.test_hopper_batch import _inputs as _batch_inputs

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                               reason="no host C++ compiler to build the emulation")
F16 = "wgmma_m64n128k16_f16f16_f32"
MISMATCH = (r"wgmma layout mismatch on shared tz_smem\[\d+\]: the wgmma of thread \(\d+, 0, 0\) "
            r"multiplies A's element of k = \d+ by B's of k = \d+, B's operand reading its "
            r"tile {how} \(imm-trans-b {flag}\): the tensor copy that thread \(128, 0, 0\) "
            r"issued landed it in another layout")


def _launches(kernel: cuda.CudaKernel) -> list[str]:
    return [launch.kernel for launch in kernel.launches]


def _gemm_launch(kernel: cuda.CudaKernel):
    (launch,) = [launch for launch in kernel.launches if launch.tensorized]
    return launch


# ---- which B is read in place, and how --------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_16_bit_b_is_read_in_place_mn_major(dtype):
    kernel = hopper_gemm(100, 200, 72, dtypes.dtype(dtype), default_registry())
    # No packing launch: B's map is over B itself, n inner, a box of a panel of 64 columns
    # (128 bytes: the 128-byte swizzle, mode 3) by a k step's 16 rows.
    assert _launches(kernel) == ["gemm_hopper_gemm", "gemm_hopper_unpad"]
    assert _gemm_launch(kernel).tensor_maps[1] == TensorMap("B", (200, 72), 400, (64, 16), 3)
    # The descriptor's panels 2048 bytes apart, 8-row groups of k 1024 apart, flag 1.
    assert "tz_wgmma_desc(tz_base_b, tz_tiles + 8192, 2048, 1024, 1, 1);" in kernel.source


@pytest.mark.parametrize("dtype", ["int8", "float8_e4m3", "float8_e5m2"])
def test_an_8_bit_b_keeps_its_k_major_pack(dtype):
    kernel = hopper_gemm(64, 128, 128, dtypes.dtype(dtype), default_registry())
    assert _launches(kernel) == ["gemm_hopper_pack_b", "gemm_hopper_gemm"]
    assert _gemm_launch(kernel).tensor_maps[1].buffer == "B_t"
    assert "tz_wgmma_desc(tz_base_b, tz_tiles + 8192, 16, 1024, 1, 0);" in kernel.source


def test_the_8_bit_compute_intrinsics_list_no_mn_major_descriptor():
    registry = default_registry()
    for intrinsic in registry.compute_intrinsics("cuda"):
        if intrinsic.feature != HOPPER_ARCH:
            continue
        flags = {registry.get(name).params["transpose"] for name in intrinsic.loads["B"]}
        wide = intrinsic.operands[1].buffer.dtype.bits == 16
        assert flags == ({0, 1} if wide else {0}), intrinsic.name


def test_a_b_whose_rows_a_map_cannot_stride_is_packed():
    # 130 half columns are 260 bytes a row: not a multiple of 16, so no map over B.
    kernel = hopper_gemm(64, 130, 64, dtypes.float16, default_registry())
    assert _launches(kernel)[0] == "gemm_hopper_pack_b"
    assert _gemm_launch(kernel).tensor_maps[1].buffer == "B_t"


@pytest.mark.parametrize("k, in_place", [(64, True), (80, False)])
def test_a_batched_b_is_read_in_place_where_k_is_whole_stages(k, in_place):
    # A stage's 64 rows of k past K would be the next batch's rows of the stacked map.
    registry = default_registry()
    func = _batched(2, 65, 72, k, "float16")
    gemm = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH).hopper.gemm
    kernel = hopper_kernel(gemm, registry, func.name)
    assert ("batched_pack_b" not in _launches(kernel)) == in_place
    if in_place:
        assert _gemm_launch(kernel).tensor_maps[1] == TensorMap("B", (72, 128), 144,
                                                                (64, 16), 3)
        assert "blockIdx.z * 64 + (kt * 4 + col / 2) * 16" in kernel.source


def test_a_b_stored_n_by_k_stays_k_major():
    registry = default_registry()
    operands = GemmOperands(Buffer("A", (64, 128), "float16"), Buffer("B", (128, 128), "float16"),
                            Buffer("C", (64, 128), "float32"), b_transposed=True)
    kernel = emit_gemm(registry.get(F16), registry, 64, 128, 128, operands=operands)
    assert _launches(kernel) == ["gemm_hopper_gemm"]
    assert _gemm_launch(kernel).tensor_maps[1] == TensorMap("B", (128, 128), 256, (64, 128), 3)
    assert "tz_wgmma_desc(tz_base_b, tz_tiles + 8192, 16, 1024, 1, 0);" in kernel.source


@pytest.mark.parametrize("steps, span", [(1, 32), (2, 64), (4, 128)])
def test_a_and_b_take_their_own_widest_modes(steps, span):
    # A's span divides a stage's bytes of k; B's MN-major one the tile's 256 bytes of n.
    registry = default_registry()
    loads = choose_loads(registry.get(F16), registry, steps, b_mn=True)
    assert (loads.swizzle_a.bytes, loads.swizzle_b.bytes, loads.b_mn) == (span, 128, True)
    assert loads.repeat == 1024


@pytest.mark.parametrize("old, new, message", [
    ("descriptor_swizzle: 1, tensor_map_swizzle: 3,\n             transpose: 0}",
     "descriptor_swizzle: 1, tensor_map_swizzle: 3,\n             transpose: 2}",
     r"intrinsic wgmma_desc_a_m64k16_f16_sw128 \(\S*cuda_wgmma\.yaml:\d+\): parameter "
     r"'transpose' requires 0 \(K-major\) or 1 \(MN-major\), got 2"),
    ("descriptor_swizzle: 1, tensor_map_swizzle: 3,\n             transpose: 0}",
     "descriptor_swizzle: 1, tensor_map_swizzle: 3,\n             transpose: 1}",
     r"intrinsic wgmma_desc_a_m64k16_f16_sw128 \(\S*cuda_wgmma\.yaml:\d+\): parameter "
     r"'transpose' requires 0 for A of float16 \(wgmma reads it K-major alone\), got 1"),
])
def test_a_transpose_flag_the_instruction_cannot_take_is_refused_at_its_yaml_line(
        tmp_path, old, new, message):
    text = (BUILTIN_DIR / "cuda_wgmma.yaml").read_text()
    assert text.count(old) == 2  # A's 128-byte entry first, then B's K-major one
    (tmp_path / "cuda_wgmma.yaml").write_text(text.replace(old, new, 1))
    registry = load_registry([BUILTIN_DIR / "cuda.yaml", tmp_path / "cuda_wgmma.yaml"])
    with pytest.raises(cuda.EmitError, match=message):
        emit_gemm(registry.get(F16), registry, 64, 128, 128)


# ---- exact under the emulation, and a flag that is not the landed layout's --------------------

# (dtype, M, N, K): off the 64 x n tile in every dimension, one and many k stages, 64 and
# 128 wide tiles, a single k step (the 32-byte swizzle for A).
SIZES = [("float16", 65, 136, 40), ("bfloat16", 100, 200, 200), ("float16", 70, 64, 16),
         ("bfloat16", 33, 72, 96)]


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("dtype, m, n, k", SIZES)
def test_b_read_in_place_is_exact_under_the_emulation(dtype, m, n, k):
    kernel = hopper_gemm(m, n, k, dtypes.dtype(dtype), default_registry())
    assert "gemm_hopper_pack_b" not in _launches(kernel)
    inputs = _inputs(dtype, m, n, k, seed=11)
    for copies in COPY_MODES:
        actual = cuda.emulate(kernel, inputs, copies=copies)["C"]
        np.testing.assert_array_equal(actual, _reference(inputs))


@needs_gxx
@pytest.mark.slow
def test_a_batched_b_read_in_place_is_exact_under_the_emulation():
    registry = default_registry()
    func = _batched(3, 65, 72, 128, "float16")
    gemm = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH).hopper.gemm
    kernel = hopper_kernel(gemm, registry, func.name)
    assert "batched_pack_b" not in _launches(kernel)
    inputs = _batch_inputs(func, seed=2)
    want = np.stack([_reference({"A": inputs["A"][b], "B": inputs["B"][b]}) for b in range(3)])
    for copies in COPY_MODES:
        np.testing.assert_array_equal(cuda.emulate(kernel, inputs, copies=copies)["acc"], want)


def _flipped(kernel: cuda.CudaKernel, flag: int) -> cuda.CudaKernel:
    """``kernel`` with B's descriptor built with the other imm-trans flag than ``flag``."""
    (line,) = re.findall(rf"tz_wgmma_desc\(tz_base_b, [^;]*, {flag}\);", kernel.source)
    return dataclasses.replace(kernel, source=kernel.source.replace(
        line, f"{line[:-3]}{1 - flag});"))


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("copies", COPY_MODES)
def test_an_mn_major_tile_read_k_major_is_a_layout_mismatch(copies):
    kernel = hopper_gemm(64, 128, 128, dtypes.float16, default_registry())
    inputs = _inputs("float16", 64, 128, 128)
    with pytest.raises(cuda.EmulationError, match=MISMATCH.format(how="K-major", flag=0)):
        cuda.emulate(_flipped(kernel, 1), inputs, copies=copies)


@needs_gxx
@pytest.mark.slow
def test_a_k_major_tile_read_mn_major_is_a_layout_mismatch():
    registry = default_registry()
    operands = GemmOperands(Buffer("A", (64, 128), "float16"), Buffer("B", (128, 128), "float16"),
                            Buffer("C", (64, 128), "float32"), b_transposed=True)
    kernel = emit_gemm(registry.get(F16), registry, 64, 128, 128, operands=operands)
    inputs = _inputs("float16", 64, 128, 128)
    inputs["B"] = np.ascontiguousarray(inputs["B"].T)
    with pytest.raises(cuda.EmulationError, match=MISMATCH.format(how="MN-major", flag=1)):
        cuda.emulate(_flipped(kernel, 0), inputs)


# ---- compiled for sm_90a ---------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found")
@pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump not found (the sass extra)")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_b_read_in_place_compiles_to_one_launch_of_hgmma_without_spills(dtype):
    kernel = hopper_gemm(4096, 4096, 4096, dtypes.dtype(dtype), default_registry())
    assert _launches(kernel) == ["gemm_hopper_gemm"]
    (counts,) = sass_opcodes(kernel, HOPPER_ARCH).values()
    # 4 k steps x 4 stages unrolled; a box of each of A's two 64-row tiles (two consumer
    # warpgroups at 4096^3) and 8 of B (4 steps x 2 panels) a stage.
    assert (counts.get("HGMMA"), counts.get("UTMALDG")) == (16, 10), counts
    (resources,) = resource_usage(kernel, HOPPER_ARCH)
    assert resources.spill_stores == resources.spill_loads == 0, resources
