"""The Hopper family (intrinsics/cuda_wgmma.yaml): GEMMs through wgmma fed by TMA tensor
copies against mbarriers (targets/cuda/hopper.py, scheduled by tensorize/engine/cuda_hopper.py),
exact under the host emulation for every input type at sizes around the tile; each protocol
bug injected into the emitted source reported by name; compiled for sm_90a to HGMMA and
UTMALDG with no spills, as docs/cuda_backend.md's table (bench/bench_cuda_hopper.py) says."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

from intrinsics import default_registry, load_registry
from intrinsics.registry import BUILTIN_DIR
from ir import Buffer, dtypes
from ir.errors import ScheduleError
from targets import cuda
from targets.cuda.compile import (cuobjdump_path, nvcc_path, parse_sass, resource_usage,
                                  sass_opcodes)
from targets.cuda.emit import TensorMap
from targets.cuda.emulate import COPY_MODES
from targets.cuda.hopper import GemmOperands, HopperTiling, emit_gemm
from targets.cuda.wgmma import ptx_type
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_hopper import HOPPER_ARCH, hopper_gemm, hopper_schedule
from tensorize.engine.cuda_schedule import mapping_cycles
from tensorize.match import match_block
from tensorize.schedule import tree
from tests.default_run import first_by_default
from tests.tensorize.engine.suite import suite

ROOT = Path(__file__).resolve().parents[3]
BENCH, DOC = ROOT / "bench" / "bench_cuda_hopper.py", ROOT / "docs" / "cuda_backend.md"
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                               reason="no host C++ compiler to build the emulation")

# (input dtype, M, N, K): sizes on and off the 64 x n tile and the stages' k.
SIZES = [("float16", 65, 130, 40), ("bfloat16", 128, 128, 256), ("int8", 100, 72, 200),
         ("float8_e4m3", 64, 200, 96), ("float8_e5m2", 70, 64, 160), ("float16", 128, 256, 512)]


def _inputs(dtype: str, m: int, n: int, k: int, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    dt = dtypes.dtype(dtype)
    if dt.is_int:
        return {"A": rng.integers(-128, 128, (m, k)).astype(np.int8),
                "B": rng.integers(-128, 128, (k, n)).astype(np.int8)}
    return {"A": rng.standard_normal((m, k)).astype(dt.numpy),
            "B": rng.standard_normal((k, n)).astype(dt.numpy)}


def _reference(inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Integers exactly (wrapping in 32 bits); floats as the emulation adds: every product
    exact in float32, summed into a float32 accumulator in increasing k."""
    a, b = inputs["A"], inputs["B"]
    if a.dtype == np.int8:
        return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    fa, fb = a.astype(np.float32), b.astype(np.float32)
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(a.shape[1]):
        c += fa[:, k:k + 1] * fb[k:k + 1, :]
    return c


def _kernel(dtype: str, m: int, n: int, k: int) -> cuda.CudaKernel:
    return hopper_gemm(m, n, k, dtypes.dtype(dtype), default_registry())


# ---- the family as data -------------------------------------------------------------------

def test_every_wgmma_intrinsic_needs_sm_90a_and_names_its_protocol():
    registry = default_registry()
    wgmma = [i for i in registry.compute_intrinsics("cuda") if "warpgroup" in i.params]
    assert {i.operands[0].buffer.dtype.name for i in wgmma} == {
        "float16", "bfloat16", "int8", "float8_e4m3", "float8_e5m2"}
    for intrinsic in wgmma:
        assert intrinsic.feature == HOPPER_ARCH
        assert intrinsic.params["copy"] == "tz_tensor_copy_2d"
        assert registry.get(intrinsic.loads["A"][0]).params["lane_registers"] == 2


def test_the_engine_never_takes_wgmma_for_the_gpu_sections_architectures():
    # sm_90a is not an architecture of cuda.yaml's gpu: section, so the estimate rules the
    # family out for auto_tensorize, as it does fp8 on sm_80.
    registry = default_registry()
    func = suite()["gemm_fp16"]
    block, = tree.block_names(func)
    wgmma = registry.get("wgmma_m64n64k16_f16f16_f32")
    found = match_block(func, block, wgmma, registry)
    assert isinstance(found, list) and found
    assert all(mapping_cycles(func, m, registry) == float("inf") for m in found)


def test_the_warp_schedule_refuses_a_wgmma_intrinsic_named_to_it():
    done = auto_tensorize(suite()["gemm_fp16"], "cuda", registry=default_registry(),
                          intrinsic="wgmma_m64n64k16_f16f16_f32")
    (outcome,) = done.blocks
    assert outcome.intrinsic is None
    assert outcome.reason.endswith("cuda schedule: wgmma_m64n64k16_f16f16_f32 is issued by a "
                                   "warpgroup, not a warp: the Hopper schedule takes it for "
                                   "sm_90a (--arch sm_90a)")


def test_a_protocol_parameter_naming_another_helper_is_refused(tmp_path):
    text = (BUILTIN_DIR / "cuda_wgmma.yaml").read_text()
    assert text.count("copy: tz_tensor_copy_2d") == 1
    (tmp_path / "cuda_wgmma.yaml").write_text(text.replace("copy: tz_tensor_copy_2d",
                                                           "copy: tz_copy16"))
    registry = load_registry([BUILTIN_DIR / "cuda.yaml", tmp_path / "cuda_wgmma.yaml"])
    intrinsic = registry.get("wgmma_m64n64k16_f16f16_f32")
    with pytest.raises(cuda.EmitError, match=r"cuda_wgmma\.yaml:\d+\): parameter 'copy' "
                                             r"requires the helper tz_tensor_copy_2d, "
                                             r"got 'tz_copy16'"):
        emit_gemm(intrinsic, registry, 64, 64, 64)


def test_a_warpgroup_of_another_size_is_refused(tmp_path):
    text = (BUILTIN_DIR / "cuda_wgmma.yaml").read_text()
    assert text.count("warpgroup: 128") == 1
    (tmp_path / "cuda_wgmma.yaml").write_text(text.replace("warpgroup: 128", "warpgroup: 64"))
    registry = load_registry([BUILTIN_DIR / "cuda.yaml", tmp_path / "cuda_wgmma.yaml"])
    with pytest.raises(cuda.EmitError, match="intrinsic wgmma_m64n64k16_f16f16_f32: parameter "
                                             "'warpgroup' requires 128, got 64"):
        emit_gemm(registry.get("wgmma_m64n64k16_f16f16_f32"), registry, 64, 64, 64)


def test_an_input_type_wgmma_lacks_has_no_ptx_type():
    assert ptx_type("float8_e5m2") == "e5m2"
    with pytest.raises(cuda.EmitError, match="wgmma has no PTX type for float64"):
        ptx_type("float64")


@pytest.mark.parametrize("steps, stages, message", [
    (2, 1, "HopperTiling requires stages >= 2, got 1"),
    (0, 4, "HopperTiling requires steps >= 1, got 0"),
])
def test_a_bad_tiling_is_refused(steps, stages, message):
    with pytest.raises(cuda.EmitError, match=message):
        HopperTiling(steps=steps, stages=stages)


@pytest.mark.parametrize("intrinsic, m, message", [
    ("mma_m16n8k16_f16f16_f32", 64,
     "emit_gemm requires a wgmma compute intrinsic, got mma_m16n8k16_f16f16_f32"),
    ("wgmma_m64n64k16_f16f16_f32", 0, r"emit_gemm requires positive extents, got 0 x 64 x 64"),
    ("wgmma_m64n64k16_f16f16_f32", 65536 * 64,
     r"emit_gemm requires at most 65535 row tiles of 64 \(gridDim.y\), got m = 4194304"),
])
def test_a_gemm_the_kernel_cannot_express_is_refused(intrinsic, m, message):
    registry = default_registry()
    with pytest.raises(cuda.EmitError, match=message):
        emit_gemm(registry.get(intrinsic), registry, m, 64, 64)


def test_an_input_type_without_wgmma_is_refused_by_the_schedule():
    with pytest.raises(ScheduleError, match="hopper_schedule: requires a wgmma intrinsic "
                                            r"\(feature sm_90a\) for float32 inputs"):
        hopper_schedule(64, 64, 64, dtypes.float32, default_registry())


@pytest.mark.parametrize("m, n, k, width, steps, stages, consumers", [
    (4096, 4096, 4096, 128, 4, 4, 2),  # wide tiles, 4 stages of 4 k steps, 2 warpgroups
    (100, 72, 100, 128, 4, 2, 1),      # 72 pads to 128 either way: the wider; 2 k stages
    (128, 64, 16, 64, 1, 2, 1),        # one k step: still 2 stages
])
def test_the_schedule_pads_least_and_stages_what_k_allows(m, n, k, width, steps, stages,
                                                          consumers):
    intrinsic, tiling = hopper_schedule(m, n, k, dtypes.float16, default_registry())
    assert intrinsic.operands[2].buffer.shape[1] == width
    assert tiling == HopperTiling(steps=steps, stages=stages, consumers=consumers)


def test_the_kernel_calls_the_yaml_templates_in_its_pipeline():
    kernel = _kernel("float16", 100, 72, 200)
    # A's rows (400 bytes) and B's (144) are a tensor map's stride as they are: nothing is
    # packed, B (K x N) being read MN-major.
    assert [l.kernel for l in kernel.launches] == ["gemm_hopper_gemm", "gemm_hopper_unpad"]
    gemm = kernel.launches[0]
    # One consumer warpgroup and one producer warp per 64 x 128 tile.
    assert gemm.block == (160, 1, 1) and gemm.grid == (1, 2, 1)
    # A stage's 128 bytes of k are one box of A by its 64 rows, landed with the 128-byte
    # swizzle (the map's mode 3); B's are a box per k step (16 rows of k) and panel of 64
    # columns, in the same mode; zero-filled past 100 x 200 and 200 x 72.
    assert gemm.tensor_maps == (TensorMap("A", (200, 100), 400, (64, 64), 3),
                                TensorMap("B", (72, 200), 144, (64, 16), 3))
    body = kernel.source[kernel.source.index("void __launch_bounds__(160) gemm_hopper_gemm"):]
    producer = body[body.index("if (threadIdx.x == 128)"):body.index("if (threadIdx.x < 128)")]
    consumers = body[body.index("if (threadIdx.x < 128)"):]
    assert "tz_mbarrier_init(&tz_full[s], 1);" in body
    assert "tz_mbarrier_init(&tz_empty[s], 128);" in body
    # A stage of A (64 x 64 halves) and of B (128 x 64) per transaction count: 24576 bytes.
    for call in ("tz_mbarrier_try_wait(&tz_empty[stage], ",
                 "tz_mbarrier_arrive_expect_tx(&tz_full[stage], 24576);",
                 "for (int col = 0; col < 1; ++col)",
                 "tz_tensor_copy_2d(tz_tiles + stage * 24576 + col * 8192, &tz_map_a, "
                 "(kt * 1 + col) * 64, blockIdx.y * 64, &tz_full[stage]);",
                 "for (int col = 0; col < 8; ++col)",
                 "tz_tensor_copy_2d(tz_tiles + 8192 + stage * 24576 + col * 2048, &tz_map_b, "
                 "blockIdx.x * 128 + col % 2 * 64, (kt * 4 + col / 2) * 16, &tz_full[stage]);"):
        assert call in producer and call not in consumers, call
    # The descriptors (128-byte swizzle: mode 1, 8-row groups 1024 bytes apart; B's panels
    # 2048 apart, its imm-trans flag 1) built once and advanced to each step's tile: A's
    # 32 bytes of the box's rows, B's 16 rows of k (4096 bytes: both panels).
    for call in ("tz_wgmma_fill_m64n128(tz_acc);", "tz_mbarrier_try_wait(&tz_full[stage], ",
                 "tz_wgmma_desc(tz_base_a, tz_tiles, 16, 1024, 1, 0);",
                 "tz_wgmma_desc(tz_base_b, tz_tiles + 8192, 2048, 1024, 1, 1);",
                 "tz_wgmma_desc_advance(tz_desc_a, tz_base_a, stage * 24576 + s / 4 * 8192 + "
                 "s % 4 * 32);",
                 "tz_wgmma_desc_advance(tz_desc_b, tz_base_b, stage * 24576 + s * 4096);",
                 "tz_wgmma_m64n128k16_f16_f16_f32(tz_acc, tz_desc_a, tz_desc_b);",
                 "tz_wgmma_wait_group<1>();", "tz_mbarrier_arrive(&tz_empty[",
                 "tz_wgmma_store_m64n128(tz_c, tz_acc, 128);"):
        assert call in consumers and call not in producer, call


# ---- exact under the emulation ----------------------------------------------------------

@needs_gxx
@pytest.mark.parametrize("dtype, m, n, k", first_by_default(SIZES, 0))
def test_gemm_is_exact_under_the_emulation(dtype, m, n, k):
    kernel = _kernel(dtype, m, n, k)
    inputs = _inputs(dtype, m, n, k)
    expected = _reference(inputs)
    for copies in COPY_MODES:
        for reverse in (False, True):
            actual = cuda.emulate(kernel, inputs, copies=copies, reverse=reverse)["C"]
            np.testing.assert_array_equal(actual, expected)


@needs_gxx
@pytest.mark.slow
def test_a_wrong_stride_byte_offset_in_the_yaml_gives_wrong_numbers(tmp_path):
    # A's 128-byte swizzled descriptors told its 8-row groups are 512 bytes apart (they are
    # 1024, 8 rows of 128 bytes): every read stays in A's box, so only the numbers show it.
    text = (BUILTIN_DIR / "cuda_wgmma.yaml").read_text()
    right = 'cuda: "tz_wgmma_desc({dst}, {src}, 16, 1024, {descriptor_swizzle}, {transpose});"'
    assert text.count(right) == 2  # A's entry, then B's
    (tmp_path / "cuda_wgmma.yaml").write_text(text.replace(
        right, 'cuda: "tz_wgmma_desc({dst}, {src}, 16, 512, {descriptor_swizzle}, '
        '{transpose});"', 1))
    registry = load_registry([BUILTIN_DIR / "cuda.yaml", tmp_path / "cuda_wgmma.yaml"])
    kernel = hopper_gemm(128, 64, 256, dtypes.float16, registry)
    assert "tz_wgmma_desc(tz_base_a, tz_tiles, 16, 512, 1, 0);" in kernel.source
    inputs = _inputs("float16", 128, 64, 256)
    actual = cuda.emulate(kernel, inputs)["C"]
    assert not np.array_equal(actual, _reference(inputs))


# ---- injected protocol bugs, each reported by name ------------------------------------------

WAIT = "while (!tz_mbarrier_try_wait(&tz_full[stage], kt / 2 % 2)) {}"
RELEASE = ("tz_wgmma_wait_group<1>();\n"
           "      if (kt > 0) tz_mbarrier_arrive(&tz_empty[(kt + 1) % 2]);")
PRODUCER_WAIT = ("if (kt >= 2) while (!tz_mbarrier_try_wait(&tz_empty[stage], (kt / 2 - 1) % 2)) "
                 "{}")
EARLY_READ = (r"race on shared tz_smem\[\d+\]: the wgmma of thread \(\d+, 0, 0\) reads a stage "
              r"before its mbarrier phase completes \(a bulk copy that thread \(128, 0, 0\) "
              r"issued into it {how}\)")
IN_FLIGHT = EARLY_READ.format(how="is in flight")
UNSEEN_PHASE = EARLY_READ.format(how="completes a phase this thread has not waited for")
OVERWRITE = (r"race on shared tz_smem\[\d+\]: the bulk copy that thread \(128, 0, 0\) issues "
             r"overwrites a stage still being read \(by a wgmma of thread \(\d+, 0, 0\) not "
             r"yet retired by wgmma.wait_group\)")
DOUBLE_COPY = r"race on shared tz_smem\[0\]: two bulk copies in flight into it"
UNANNOUNCED = (r"mbarrier transaction count: the tensor copy of {bytes} bytes that thread "
               r"\(128, 0, 0\) issues exceeds the {left} bytes its phase's arrive.expect_tx "
               r"still announces")
DEADLOCK = r"deadlock: \d+ of 160 threads poll an mbarrier phase that never completes"


@pytest.fixture(scope="module")
def gemm() -> tuple[cuda.CudaKernel, dict[str, np.ndarray]]:
    """A 64 x 64 x 128 f16 GEMM of 8 k stages through 2 shared stages (one k step a stage:
    one box of A, 64 rows x 32 bytes in the 32-byte swizzle, and one of B read in place,
    16 rows of k x 64 columns in the 128-byte one), a single launch."""
    kernel = emit_gemm(default_registry().get("wgmma_m64n64k16_f16f16_f32"), default_registry(),
                       64, 64, 128, HopperTiling(steps=1, stages=2))
    return kernel, _inputs("float16", 64, 64, 128, seed=5)


def _edited(kernel: cuda.CudaKernel, old: str, new: str) -> cuda.CudaKernel:
    assert kernel.source.count(old) == 1, old
    return dataclasses.replace(kernel, source=kernel.source.replace(old, new))


def _caught(kernel: cuda.CudaKernel, inputs: dict, pattern: str, copies: str,
            reverse: bool = False) -> None:
    with pytest.raises(cuda.EmulationError, match=pattern):
        cuda.emulate(kernel, inputs, copies=copies, reverse=reverse)


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("copies, pattern", [("at_wait", IN_FLIGHT),
                                             ("at_issue", UNSEEN_PHASE)])
def test_a_consumer_that_never_waits_reads_a_stage_before_its_phase(gemm, copies, pattern):
    # In reverse order the producer (thread 128) issues its copies before the consumers run:
    # they read them in flight, or landed in a phase they never waited for.
    kernel, inputs = gemm
    _caught(_edited(kernel, WAIT, ""), inputs, pattern, copies, reverse=True)


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("copies, pattern", [("at_wait", IN_FLIGHT), ("at_issue", DEADLOCK)])
def test_a_wait_on_the_wrong_parity_is_reported(gemm, copies, pattern):
    # Parity 1 at the first step passes at once (phase 0 is the current one): with copies
    # landing late the wgmma reads them in flight; landed at issue, phase 0 has completed
    # before the poll, and the phase it then waits for never comes.
    kernel, inputs = gemm
    broken = _edited(kernel, WAIT, WAIT.replace("kt / 2 % 2", "kt / 2 % 2 + 1"))
    _caught(broken, inputs, pattern, copies, reverse=True)


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("copies", COPY_MODES)
def test_a_stage_released_before_its_wgmma_retires_is_overwritten(gemm, copies):
    # The consumers arrive on the stage's empty mbarrier before wait_group 1: the producer,
    # released, refills it while their wgmma group still reads it.
    kernel, inputs = gemm
    broken = _edited(kernel, RELEASE, "if (kt > 0) tz_mbarrier_arrive(&tz_empty[(kt + 1) % 2]);"
                                      "\n      tz_wgmma_wait_group<1>();")
    for reverse in (False, True):
        _caught(broken, inputs, OVERWRITE, copies, reverse)


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("copies, pattern", [("at_wait", DOUBLE_COPY), ("at_issue", DEADLOCK)])
def test_a_producer_that_never_waits_for_the_release_is_reported(gemm, copies, pattern):
    # The third k stage's copies go into stage 0 at once: on top of the first's, in flight;
    # landed at issue, the first stage's phase is overtaken and the consumers wait forever.
    kernel, inputs = gemm
    _caught(_edited(kernel, PRODUCER_WAIT, ""), inputs, pattern, copies)


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("copies", COPY_MODES)
def test_a_transaction_count_short_of_the_boxes_is_reported_at_the_copy(gemm, copies):
    # 16 bytes short: the stage's last box (B's, 2048 bytes) finds 2032 announced.
    kernel, inputs = gemm
    broken = _edited(kernel, "tz_mbarrier_arrive_expect_tx(&tz_full[stage], 4096);",
                     "tz_mbarrier_arrive_expect_tx(&tz_full[stage], 4080);")
    _caught(broken, inputs, UNANNOUNCED.format(bytes=2048, left=2032), copies)


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("copies, pattern", [
    ("at_wait", r"race on shared tz_smem\[2048\]: two bulk copies in flight into it"),
    ("at_issue", UNANNOUNCED.format(bytes=2048, left=0))])
def test_a_box_larger_than_its_stage_slot_is_reported(gemm, copies, pattern):
    # A's map told boxes of 128 rows, twice its slot of 64: its box (4096 bytes) runs over
    # B's, in flight into the same bytes; landed at issue, it takes the whole stage's count
    # and B's box (2048 bytes) finds none announced.
    kernel, inputs = gemm
    (gemm_launch,) = kernel.launches
    a_map, b_map = gemm_launch.tensor_maps
    wide = dataclasses.replace(a_map, box=(a_map.box[0], 2 * a_map.box[1]))
    launches = [dataclasses.replace(gemm_launch, tensor_maps=(wide, b_map))]
    broken = dataclasses.replace(kernel, launches=tuple(launches))
    _caught(broken, inputs, pattern, copies)


@needs_gxx
@pytest.mark.slow
def test_the_tensor_copy_zero_fills_past_the_extents_with_no_padding_launch():
    # 8-bit inputs of 72 x 40 x 24: A's 24-byte rows are packed to 32 (a map's row stride is
    # a multiple of 16 bytes), but nothing is padded to the tile: the boxes past m = 72,
    # n = 40 and k = 24 come back as zeros, or the sums would take whatever lay beyond.
    kernel = _kernel("int8", 72, 40, 24)
    assert [l.kernel for l in kernel.launches] == [
        "gemm_hopper_pack_b", "gemm_hopper_pack_a", "gemm_hopper_gemm", "gemm_hopper_unpad"]
    assert {b.name: b.shape for b in kernel.buffers}["A_k"] == (72, 32)
    inputs = _inputs("int8", 72, 40, 24, seed=11)
    actual = cuda.emulate(kernel, inputs, copies="at_issue")["C"]
    np.testing.assert_array_equal(actual, _reference(inputs))


def test_a_gpu_run_refuses_tensor_maps_it_cannot_encode():
    kernel = _kernel("float16", 64, 64, 64)
    with pytest.raises(cuda.CompileError, match=r"gemm_hopper: launches taking TMA tensor maps "
                                                r"run under the emulation only"):
        cuda.run(kernel, _inputs("float16", 64, 64, 64))


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("field, value, message", [
    ("stride", 136, r"tensor map: the global address 0x[0-9a-f]+ and the row stride 136 must "
                    r"be multiples of 16 bytes"),
    ("box", (8, 257), r"tensor map: box 8 x 257 of 2-byte elements: extents must be 1 to 256"),
    ("swizzle", 4, r"tensor map: swizzle mode 4 is none of 0 \(none\), 1, 2, 3 \(32, 64, 128 "
                   r"bytes\)")])
def test_a_tensor_map_the_driver_would_refuse_is_reported(gemm, field, value, message):
    kernel, inputs = gemm
    (gemm_launch,) = kernel.launches
    a_map, b_map = gemm_launch.tensor_maps
    launches = [dataclasses.replace(
        gemm_launch, tensor_maps=(dataclasses.replace(a_map, **{field: value}), b_map))]
    _caught(dataclasses.replace(kernel, launches=tuple(launches)), inputs, message, "at_issue")


@needs_gxx
@pytest.mark.slow
def test_a_tensor_copy_through_a_map_never_encoded_is_reported(gemm):
    kernel, inputs = gemm
    copy = "tz_tensor_copy_2d(tz_tiles + stage * 4096 + col * 2048, &tz_map_a, "
    broken = _edited(kernel, copy, "const CUtensorMap tz_blank{};\n        " +
                     copy.replace("&tz_map_a", "&tz_blank"))
    _caught(broken, inputs, r"cp.async.bulk.tensor at 0x[0-9a-f]+: the tensor map was never "
                            r"encoded", "at_issue")


@needs_gxx
@pytest.mark.slow
def test_a_tensor_copy_to_a_misaligned_stage_is_reported(gemm):
    kernel, inputs = gemm
    broken = _edited(kernel, "col * 2048, &tz_map_a", "col * 2048 + 16, &tz_map_a")
    _caught(broken, inputs, r"cp.async.bulk.tensor to 0x[0-9a-f]+: the shared destination "
                            r"must be 128-byte aligned", "at_issue")


@needs_gxx
@pytest.mark.slow
def test_wgmma_groups_never_waited_for_are_reported(gemm):
    kernel, inputs = gemm
    broken = _edited(kernel, "tz_wgmma_wait_group<0>();", "")
    _caught(broken, inputs, "wgmma operations never retired by wgmma.wait_group at the "
                            "thread's end", "at_wait")


# ---- compiled for sm_90a -----------------------------------------------------------------

# A k loop of two wgmmas, each after an mbarrier poll whose retry nvcc puts after the EXIT,
# branching back into the loop: that branch closes no loop.
POLLING_SASS = """
        Function : polling
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R3+URZ+0x18000], R0 ;
        /*0020*/              @!P0 BRA 0x90 ;
        /*0030*/                   HGMMA.64x128x16.F32 R24, gdesc[UR8], R24 ;
        /*0040*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R3+URZ+0x18008], R0 ;
        /*0050*/                   HGMMA.64x128x16.F32 R24, gdesc[UR8], R24, gsb0 ;
        /*0060*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0070*/               @P1 BRA 0x10 ;
        /*0080*/                   EXIT ;
        /*0090*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R3+URZ+0x18000], R0 ;
        /*00a0*/                   BRA 0x50 ;
"""


def test_the_sass_mix_ignores_branches_back_from_out_of_line_polls():
    (mix,) = parse_sass(POLLING_SASS)
    assert (mix.mma, mix.other, mix.scope) == (2, 5, "k loop")


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found")
@pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump not found (the sass extra)")
@pytest.mark.parametrize("dtype, opcode", [("float16", "HGMMA"), ("bfloat16", "HGMMA"),
                                           ("int8", "IGMMA"), ("float8_e4m3", "QGMMA")])
def test_sm_90a_kernels_use_wgmma_fed_by_tensor_copies_without_spills(dtype, opcode):
    kernel = _kernel(dtype, 4096, 4096, 4096)
    (counts,) = [c for name, c in sass_opcodes(kernel, HOPPER_ARCH).items()
                 if "gemm_hopper_gemm" in name]
    assert counts.get(opcode, 0) > 0 and counts.get("UTMALDG", 0) > 0, counts
    for resources in resource_usage(kernel, HOPPER_ARCH):
        assert resources.spill_stores == resources.spill_loads == 0, resources


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found")
@pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump not found (the sass extra)")
def test_the_documented_sass_table_is_what_the_bench_prints():
    spec = importlib.util.spec_from_file_location("bench_cuda_hopper", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    page = DOC.read_text()
    for name, cluster in bench.ROWS:
        assert bench.row(name, cluster) in page, (name, cluster)
    for name in bench.EPILOGUES:
        assert bench.epilogue_row(name) in page, name
    for name, consumers in bench.CONSUMER_ROWS:
        assert bench.consumers_row(name, consumers) in page, (name, consumers)


# ---- a kernel's own operands --------------------------------------------------------------

def _operands(m: int, n: int, k: int, a_t: bool, b_t: bool) -> GemmOperands:
    """int8 operands named X, W, Y, A stored K x M when ``a_t``, B N x K when ``b_t``; W
    before X in the parameters."""
    i8, i32 = dtypes.dtype("int8"), dtypes.dtype("int32")
    return GemmOperands(Buffer("X", (k, m) if a_t else (m, k), i8),
                        Buffer("W", (n, k) if b_t else (k, n), i8), Buffer("Y", (m, n), i32),
                        a_t, b_t, ("W", "X", "Y"))


def test_an_operand_stored_k_major_is_read_in_place_and_another_packed():
    registry = default_registry()
    intrinsic = registry.get("wgmma_m64n64k32_s8s8_s32")
    dense = emit_gemm(intrinsic, registry, 64, 64, 64, operands=_operands(64, 64, 64, False,
                                                                          True))
    # A dense layer's weight is N rows of K already: nothing to pack, the maps read X and W.
    assert [l.kernel for l in dense.launches] == ["gemm_hopper_gemm"]
    assert dense.params == ("W", "X", "Y")
    assert [m.buffer for m in dense.launches[0].tensor_maps] == ["X", "W"]
    transposed = emit_gemm(intrinsic, registry, 64, 64, 64,
                           operands=_operands(64, 64, 64, True, False))
    assert [l.kernel for l in transposed.launches] == ["gemm_hopper_pack_b", "gemm_hopper_pack_a",
                                                       "gemm_hopper_gemm"]
    assert [m.buffer for m in transposed.launches[-1].tensor_maps] == ["X_k", "W_t"]


@pytest.mark.parametrize("field, value, message", [
    ("c", Buffer("Y", (64, 65), dtypes.dtype("int32")),
     r"emit_gemm requires Y of 64 x 64 elements \(unit dimensions aside\), got shape \(64, 65\)"),
    ("b", Buffer("W", (64, 64), dtypes.dtype("int8"), strides=(128, 1)),
     r"emit_gemm requires W dense in row-major order, got strides \(128, 1\)"),
    ("params", ("W", "X", "Z"),
     r"emit_gemm requires the parameters X, W and Y in some order, got W, X, Z"),
    ("a", Buffer("W_t", (64, 64), dtypes.dtype("int8")),
     r"emit_gemm requires parameter names other than its intermediates'"),
])
def test_operands_that_are_not_the_gemms_are_refused(field, value, message):
    registry = default_registry()
    operands = dataclasses.replace(_operands(64, 64, 64, False, False), **{field: value})
    if field == "a":
        operands = dataclasses.replace(operands, params=("W_t", "W", "Y"))
    with pytest.raises(cuda.EmitError, match=message):
        emit_gemm(registry.get("wgmma_m64n64k32_s8s8_s32"), registry, 64, 64, 64,
                  operands=operands)


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("a_t, b_t, m, n, k", [
    (False, True, 72, 70, 64), (True, False, 65, 64, 40), (True, True, 64, 130, 24),
    # One row: A's box of 64 rows holds one, the rest zero-filled.
    (False, True, 1, 200, 256)])
def test_a_kernels_own_layouts_are_exact_under_the_emulation(a_t, b_t, m, n, k):
    registry = default_registry()
    kernel = emit_gemm(registry.get("wgmma_m64n64k32_s8s8_s32"), registry, m, n, k,
                       operands=_operands(m, n, k, a_t, b_t))
    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    inputs = {"X": np.ascontiguousarray(a.T) if a_t else a,
              "W": np.ascontiguousarray(b.T) if b_t else b}
    for copies in COPY_MODES:
        actual = cuda.emulate(kernel, inputs, copies=copies)["Y"]
        np.testing.assert_array_equal(actual, _reference({"A": a, "B": b}))


# ---- B transposed through shared tiles ----------------------------------------------------

def test_b_is_transposed_a_tile_at_a_time_with_consecutive_reads_and_writes():
    # int8's wgmma reads B K-major alone: a B stored K x N is packed transposed.
    kernel = _kernel("int8", 100, 72, 192)
    pack = kernel.launches[0]
    # 32 x 32 tiles of B_t (72 rows of 192): 3 x 6 blocks of one warp per tile row of 8.
    assert (pack.kernel, pack.grid, pack.block) == ("gemm_hopper_pack_b", (3, 6, 1), (32, 8, 1))
    body = kernel.source[kernel.source.index("void gemm_hopper_pack_b"):
                         kernel.source.index("void __launch_bounds__(160)")]
    # Lanes (threadIdx.x) read along B's rows and write along B_t's: both consecutive.
    for line in ("const long long kk = k0 + y, r = r0 + threadIdx.x;", "src[kk * 72 + r]",
                 "const long long r = r0 + y, kk = k0 + threadIdx.x;",
                 "reinterpret_cast<tz_word*>(B_t)[r * 192 + kk] = tz_shared_load(tz_tile, "
                 "threadIdx.x * 33 + y);", "__syncthreads();"):
        assert line in body, line


@needs_gxx
@pytest.mark.slow
def test_a_transpose_without_its_barrier_is_a_race():
    kernel = _kernel("int8", 64, 64, 64)
    pack = kernel.source[kernel.source.index("void gemm_hopper_pack_b"):]
    tile_barrier = pack[:pack.index("__syncthreads();") + len("__syncthreads();")]
    broken = _edited(kernel, tile_barrier, tile_barrier.replace("__syncthreads();", ""))
    _caught(broken, _inputs("int8", 64, 64, 64), r"race on shared tz_tile\[", "at_wait")
