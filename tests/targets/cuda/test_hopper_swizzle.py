"""The Hopper GEMM's shared-memory swizzle modes (intrinsics/cuda_wgmma.yaml's descriptor
loads, targets/cuda/hopper.py's choice, emulation/wgmma.h's landing and reading): the widest
mode whose span divides a stage, taken from the YAML alone; tensor copies landing boxes in
the PTX ISA's swizzled layout, checked byte for byte against an independent statement of it;
exact GEMMs in every mode; and a descriptor whose mode is not its map's reported by name."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from intrinsics import default_registry, load_registry
from intrinsics.registry import BUILTIN_DIR
from ir import Buffer, dtypes
from targets import cuda
from targets.cuda.cexpr import PRELUDE
from targets.cuda.emit import SHARED_ACCESS, CudaKernel, Launch, TensorMap
from targets.cuda.emulate import COPY_MODES
from targets.cuda.hopper import choose_loads, emit_gemm, swizzle_of
from targets.cuda.ptx import MMA_PRELUDE
from targets.cuda.wgmma import wgmma_prelude
from tensorize.engine.cuda_hopper import hopper_gemm
from tests.targets.cuda.test_hopper import _inputs, _reference

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                               reason="no host C++ compiler to build the emulation")
F16 = "wgmma_m64n64k16_f16f16_f32"


# ---- the choice, from the YAML ------------------------------------------------------------

@pytest.mark.parametrize("k, span, map_mode, descriptor", [
    (32, 32, 1, "16, 256, 3"),     # one k step a stage: 32 bytes, the 32-byte swizzle
    (64, 64, 2, "16, 512, 2"),     # two: 64 bytes
    (96, 32, 1, "16, 256, 3"),     # three (96 bytes): three boxes of the 32-byte swizzle
    (512, 128, 3, "16, 1024, 1"),  # four: one box of 128 bytes a stage per operand
])
def test_the_widest_swizzle_whose_span_divides_a_stage_is_taken(k, span, map_mode, descriptor):
    # int8: both operands K-major (B packed to N rows of K), of one mode.
    kernel = hopper_gemm(64, 64, k, dtypes.int8, default_registry())
    (gemm,) = [l for l in kernel.launches if l.tensorized]
    # Boxes of the span's int8 elements of k by the tile's rows, in the map's numbering.
    assert [(m.box, m.swizzle) for m in gemm.tensor_maps] == [((span, 64), map_mode)] * 2
    assert f"tz_wgmma_desc(tz_base_a, tz_tiles, {descriptor}, 0);" in kernel.source
    # The stages start at the pattern's repeat (8 spans) within the 128-byte aligned array.
    assert f"(0u - tz_shared_address(tz_smem)) % {8 * span};" in kernel.source


def test_a_yaml_offering_no_swizzle_lands_16_byte_boxes(tmp_path):
    # The backend names no mode: with the swizzled loads dropped from the compute
    # intrinsics' lists, the kernel takes the no-swizzle descriptors of 16-byte boxes.
    text = (BUILTIN_DIR / "cuda_wgmma.yaml").read_text()
    kept = "\n".join(line for line in text.splitlines()
                     if not (line.startswith("        - wgmma_desc_") and "_sw" in line))
    (tmp_path / "cuda_wgmma.yaml").write_text(kept + "\n")
    registry = load_registry([BUILTIN_DIR / "cuda.yaml", tmp_path / "cuda_wgmma.yaml"])
    kernel = emit_gemm(registry.get(F16), registry, 64, 64, 256)
    (gemm,) = [l for l in kernel.launches if l.tensorized]
    # A's boxes of 8 elements of k by 64 rows, 8 a stage; B's (MN-major) of 8 columns by a
    # k step's 16 rows, 8 panels x 4 steps a stage.
    assert [(m.box, m.swizzle) for m in gemm.tensor_maps] == [((8, 64), 0), ((8, 16), 0)]
    assert "tz_wgmma_desc(tz_base_a, tz_tiles, 1024, 128, 0, 0);" in kernel.source
    assert "tz_wgmma_desc(tz_base_b, tz_tiles + 8192, 128, 256, 0, 1);" in kernel.source
    assert "for (int col = 0; col < 8; ++col)" in kernel.source
    assert "for (int col = 0; col < 32; ++col)" in kernel.source


@pytest.mark.parametrize("old, new, span, message", [
    ("swizzle_bytes: 64, swizzle_repeat: 512", "swizzle_bytes: 48, swizzle_repeat: 384", 48,
     r"parameters 'swizzle_bytes' and 'swizzle_repeat' require a power of two of 16 or more "
     r"and 8 times it, got 48 and 384"),
    ("swizzle_bytes: 64, swizzle_repeat: 512", "swizzle_bytes: 64, swizzle_repeat: 256", 64,
     r"parameters .* got 64 and 256"),
    ("descriptor_swizzle: 2, tensor_map_swizzle: 2", "descriptor_swizzle: 2", 64,
     r"parameter 'tensor_map_swizzle' requires a non-negative integer, got None"),
])
def test_a_swizzle_mode_the_backend_cannot_read_is_refused_at_its_yaml_line(
        tmp_path, old, new, span, message):
    text = (BUILTIN_DIR / "cuda_wgmma.yaml").read_text()
    assert text.count(old) == 3  # A's, B's and B's MN-major 64-byte entries
    # A's entry is named by its span: the compute intrinsics' lists follow a new one.
    text = text.replace("- wgmma_desc_a_m64k{k}_{a}_sw64",
                        f"- wgmma_desc_a_m64k{{k}}_{{a}}_sw{span}")
    (tmp_path / "cuda_wgmma.yaml").write_text(text.replace(old, new, 1))
    registry = load_registry([BUILTIN_DIR / "cuda.yaml", tmp_path / "cuda_wgmma.yaml"])
    with pytest.raises(cuda.EmitError, match=r"intrinsic wgmma_desc_a_m64k16_f16_sw\d+ \(\S*"
                                             r"cuda_wgmma\.yaml:\d+\): " + message):
        choose_loads(registry.get(F16), registry, 4)


def test_the_modes_are_the_ptx_isas():
    # Span, repeat, and the mode's number in a descriptor (bits 62-63: 1 is 128 bytes) and in
    # a tensor map (CU_TENSOR_MAP_SWIZZLE_128B is 3): the two number them differently.
    registry = default_registry()
    modes = {}
    for name in registry.get(F16).loads["A"]:
        load = registry.get(name)
        swizzle = swizzle_of(load)
        modes[swizzle.bytes] = (swizzle.repeat, load.params["descriptor_swizzle"],
                                swizzle.tensor_map)
    assert modes == {16: (128, 0, 0), 32: (256, 3, 1), 64: (512, 2, 2), 128: (1024, 1, 3)}


# ---- tensor copies land swizzled ----------------------------------------------------------

def _landing(span: int, rows: int) -> np.ndarray:
    """Where byte (r, b) of a box of ``rows`` rows of ``span`` bytes lands (its offset from
    the box's start), as the PTX ISA draws the swizzle modes: rows one after another, and the
    16-byte chunks of each 128-byte line permuted by the line's index within the pattern
    (8 lines of 128 bytes): chunk c of line l at chunk c XOR (l % (span / 16))."""
    rows_per_line = 128 // span
    chunks = span // 16
    where = np.zeros((rows, span), np.int64)
    for r in range(rows):
        line, first = divmod(r, rows_per_line)
        for b in range(span):
            chunk = first * chunks + b // 16  # the chunk's index within its 128-byte line
            permuted = ((chunk % chunks) ^ (line % chunks)) + chunk - chunk % chunks
            where[r, b] = line * 128 + permuted * 16 + b % 16
    return where


def _probe() -> CudaKernel:
    """One thread copies a 16-row box of X (16 x 128 bytes) through each of three tensor
    maps (swizzle modes 1, 2, 3: spans 32, 64 and 128, boxes of 16 rows of the span) into
    shared memory, waits for them, and copies the shared bytes to Y as they lie."""
    x = Buffer("X", (16, 128), dtypes.dtype("int8"))
    y = Buffer("Y", (3, 2048), dtypes.dtype("int8"))
    body = """
extern "C" __global__ void probe(signed char* __restrict__ X, signed char* __restrict__ Y,
    const __grid_constant__ CUtensorMap tz_map_0, const __grid_constant__ CUtensorMap tz_map_1,
    const __grid_constant__ CUtensorMap tz_map_2) {
  TZ_DYNAMIC_SHARED(tz_smem, 3 * 2048 + 8);
  tz_shared_declare(tz_smem, 3 * 2048 + 8, "tz_smem");
  unsigned long long* bar = reinterpret_cast<unsigned long long*>(tz_smem + 3 * 2048);
  tz_mbarrier_init(bar, 1);
  tz_mbarrier_arrive_expect_tx(bar, 16 * (32 + 64 + 128));
  tz_tensor_copy_2d(tz_smem, &tz_map_0, 0, 0, bar);
  tz_tensor_copy_2d(tz_smem + 2048, &tz_map_1, 0, 0, bar);
  tz_tensor_copy_2d(tz_smem + 4096, &tz_map_2, 0, 0, bar);
  while (!tz_mbarrier_try_wait(bar, 0)) {}
  for (int i = 0; i < 3 * 2048; ++i) Y[i] = tz_smem[i];
}
"""
    intrinsic = default_registry().get(F16)
    source = "\n".join(["#include <mma.h>", "#include <cuda_fp16.h>", PRELUDE, SHARED_ACCESS,
                        MMA_PRELUDE, wgmma_prelude([intrinsic]), body])
    maps = tuple(TensorMap("X", (128, 16), 128, (span, 16), mode)
                 for mode, span in ((1, 32), (2, 64), (3, 128)))
    launch = Launch("probe", (1, 1, 1), (1, 1, 1), tensor_maps=maps)
    return CudaKernel("probe", source, (launch,), ("X", "Y"), (x, y), ("Y",))


@pytest.mark.slow
@needs_gxx
def test_tensor_copies_land_boxes_in_the_swizzled_layout():
    x = np.random.default_rng(7).integers(-128, 128, (16, 128)).astype(np.int8)
    landed = cuda.emulate(_probe(), {"X": x}, copies="at_issue")["Y"]
    for n, span in enumerate((32, 64, 128)):
        expected = np.zeros(2048, np.int8)
        expected[_landing(span, 16)] = x[:, :span]
        np.testing.assert_array_equal(landed[n, :16 * span], expected[:16 * span],
                                      err_msg=f"{span}-byte swizzle")


# ---- exact in every mode, and a mode mismatch reported ------------------------------------

@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("dtype, m, n, k", [
    ("int8", 64, 130, 64),      # 2 k steps a stage: the 64-byte swizzle
    ("float16", 70, 64, 16),    # 1: the 32-byte swizzle, one stage
])
def test_gemm_is_exact_in_the_narrower_modes(dtype, m, n, k):
    kernel = hopper_gemm(m, n, k, dtypes.dtype(dtype), default_registry())
    inputs = _inputs(dtype, m, n, k, seed=9)
    for copies in COPY_MODES:
        actual = cuda.emulate(kernel, inputs, copies=copies)["C"]
        np.testing.assert_array_equal(actual, _reference(inputs))


MISMATCH = (r"swizzle mismatch on shared tz_smem\[\d+\]: the wgmma of thread \(\d+, 0, 0\) "
            r"reads it through a descriptor of the {read}-byte swizzle span, but the tensor "
            r"copy that thread \(128, 0, 0\) issued landed it with a {landed}-byte span")


@pytest.fixture(scope="module")
def gemm() -> tuple[CudaKernel, dict[str, np.ndarray]]:
    """A 64 x 64 x 256 f16 GEMM: 2 stages of 4 k steps, 128-byte swizzle."""
    return (hopper_gemm(64, 64, 256, dtypes.float16, default_registry()),
            _inputs("float16", 64, 64, 256, seed=5))


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("copies", COPY_MODES)
def test_a_descriptor_whose_mode_is_not_its_maps_is_reported(gemm, copies):
    # B's (MN-major) descriptor told the 64-byte swizzle (mode 2) while its map lands
    # 128-byte rows.
    kernel, inputs = gemm
    right = "tz_wgmma_desc(tz_base_b, tz_tiles + 8192, 2048, 1024, 1, 1);"
    assert kernel.source.count(right) == 1
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        right, "tz_wgmma_desc(tz_base_b, tz_tiles + 8192, 2048, 1024, 2, 1);"))
    with pytest.raises(cuda.EmulationError, match=MISMATCH.format(read=64, landed=128)):
        cuda.emulate(broken, inputs, copies=copies)


def _with_a_map(kernel: CudaKernel, **fields: object) -> CudaKernel:
    """``kernel`` with its GEMM launch's map of A changed by ``fields``."""
    launches = list(kernel.launches)
    (index,) = [i for i, l in enumerate(launches) if l.tensor_maps]
    a_map, b_map = launches[index].tensor_maps
    launches[index] = dataclasses.replace(
        launches[index], tensor_maps=(dataclasses.replace(a_map, **fields), b_map))
    return dataclasses.replace(kernel, launches=tuple(launches))


@needs_gxx
@pytest.mark.slow
def test_a_map_without_the_descriptors_swizzle_is_reported(gemm):
    # A's map lands its 128-byte box rows unswizzled (a driver would take it: the rows are
    # in range); its descriptors read them through the 128-byte swizzle.
    kernel, inputs = gemm
    with pytest.raises(cuda.EmulationError, match=MISMATCH.format(read=128, landed=16)):
        cuda.emulate(_with_a_map(kernel, swizzle=0), inputs)


@needs_gxx
@pytest.mark.slow
def test_a_box_row_wider_than_its_swizzle_span_is_refused_by_the_encoder(gemm):
    kernel, inputs = gemm
    with pytest.raises(cuda.EmulationError, match=r"tensor map: a box row of 128 bytes exceeds "
                                                  r"the 64-byte span of swizzle mode 2"):
        cuda.emulate(_with_a_map(kernel, swizzle=2), inputs)


@needs_gxx
@pytest.mark.slow
def test_a_swizzled_box_off_its_patterns_repeat_is_reported(gemm):
    # The stages moved 128 bytes past their 1024-byte alignment: the pattern, computed from
    # the address bits, would start mid-way.
    kernel, inputs = gemm
    right = "(0u - tz_shared_address(tz_smem)) % 1024;"
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        right, "(0u - tz_shared_address(tz_smem)) % 1024 + 128;"))
    with pytest.raises(cuda.EmulationError, match=r"cp.async.bulk.tensor to 0x[0-9a-f]+: a box "
                                                  r"of swizzle mode 3 must land at a multiple "
                                                  r"of 1024 bytes \(its pattern's repeat\), got "
                                                  r"shared address 128"):
        cuda.emulate(broken, inputs, copies="at_issue")
