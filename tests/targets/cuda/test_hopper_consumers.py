"""Two consumer warpgroups per Hopper block (targets/cuda/hopper.py, ``HopperTiling.consumers``,
chosen by tensorize/engine/cuda_hopper.py): a 128 x n tile, each warpgroup its 64 rows on the
stage's shared tile of B, and a producer warpgroup that gives registers back by setmaxnreg
(the counts from intrinsics/cuda_wgmma.yaml). Exact under the host emulation against numpy
for f16, bf16 and int8 (with its requantising epilogue) on sizes off the tile; each protocol
bug injected into the emitted source reported by name (a warpgroup's release forgotten, an
empty mbarrier expecting one warpgroup, setmaxnreg counts the PTX ISA refuses); compiled for
sm_90a to USETMAXREG with no spills."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from intrinsics import default_registry, load_registry
from intrinsics.registry import BUILTIN_DIR
from ir import dtypes
from ir.errors import ScheduleError
from ir.onnx.kernels import Requantisation, matmul_requantised
from targets import cuda, host
from targets.cuda.compile import cuobjdump_path, nvcc_path, resource_usage, sass_mix, sass_opcodes
from targets.cuda.emulate import COPY_MODES
from targets.cuda.errors import EmitError
from targets.cuda.hopper import HopperTiling, emit_gemm, registers_of
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_hopper import HOPPER_ARCH, hopper_kernel, hopper_schedule
from tests.targets.cuda.test_hopper import _inputs, _reference

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                               reason="no host C++ compiler to build the emulation")
F16_N64 = "wgmma_m64n64k16_f16f16_f32"


def _two(name: str, m: int, n: int, k: int, steps: int = 2, stages: int = 2,
         cluster: int = 1, registry=None) -> cuda.CudaKernel:
    registry = registry or default_registry()
    return emit_gemm(registry.get(name), registry, m, n, k,
                     HopperTiling(steps=steps, stages=stages, cluster=cluster, consumers=2))


def _edited(kernel: cuda.CudaKernel, old: str, new: str) -> cuda.CudaKernel:
    assert kernel.source.count(old) == 1, old
    return dataclasses.replace(kernel, source=kernel.source.replace(old, new))


# ---- the kernel, as emitted ---------------------------------------------------------------

def test_two_warpgroups_share_b_and_move_registers_by_the_yamls_counts():
    kernel = _two("wgmma_m64n128k16_f16f16_f32", 200, 128, 136)
    (gemm, unpad) = kernel.launches
    # Two consumer warpgroups and a producer warpgroup per 128 x 128 tile: 2 row tiles.
    assert gemm.block == (384, 1, 1) and gemm.grid == (1, 2, 1)
    assert unpad.kernel == "gemm_hopper_unpad"
    body = kernel.source[kernel.source.index("__launch_bounds__(384, 1) gemm_hopper_gemm"):]
    producer = body[body.index("if (threadIdx.x >= 256)"):body.index("if (threadIdx.x < 256)")]
    consumers = body[body.index("if (threadIdx.x < 256)"):]
    # Both warpgroups release each stage: 256 arrivals a phase.
    assert "tz_mbarrier_init(&tz_empty[s], 256);" in body
    registers = registers_of(default_registry().get("wgmma_m64n128k16_f16f16_f32"))
    assert (registers.producer, registers.consumer) == (40, 232)
    assert f"tz_setmaxnreg_dec<{registers.producer}>();" in producer
    assert f"tz_setmaxnreg_inc<{registers.consumer}>();" in consumers
    # A stage: A's two 64-row tiles (2 steps of 32 bytes: the 64-byte swizzle, 4096 bytes
    # each), one after another, then B's; the producer's copies land both tiles of A.
    for call in ("tz_mbarrier_arrive_expect_tx(&tz_full[stage], 16384);",
                 "for (int col = 0; col < 2; ++col)",
                 "tz_tensor_copy_2d(tz_tiles + stage * 16384 + col * 4096, &tz_map_a, kt * 32, "
                 "(blockIdx.y * 2 + col) * 64, &tz_full[stage]);"):
        assert call in producer and call not in consumers, call
    # Each warpgroup's descriptor of A starts at its own tile; B's is the same for both.
    for call in ("const int tz_group = tz_warpgroup_index();",
                 "tz_wgmma_desc(tz_base_a, tz_tiles + tz_group * 4096, 16, 512, 2, 0);",
                 "tz_wgmma_desc(tz_base_b, tz_tiles + 8192, ",
                 "tz_c = C_padded + (blockIdx.y * 2 + tz_group) * 8192LL + blockIdx.x * 128;"):
        assert call in consumers and call not in producer, call


def test_a_tiling_of_three_consumer_warpgroups_is_refused():
    with pytest.raises(EmitError, match="HopperTiling requires 1 to 2 consumer warpgroups, "
                                        "got 3"):
        HopperTiling(consumers=3)


def _registry_with(tmp_path, old: str, new: str):
    text = (BUILTIN_DIR / "cuda_wgmma.yaml").read_text()
    assert text.count(old) == 1, old
    (tmp_path / "cuda_wgmma.yaml").write_text(text.replace(old, new))
    return load_registry([BUILTIN_DIR / "cuda.yaml", tmp_path / "cuda_wgmma.yaml"])


@pytest.mark.parametrize("old, new, message", [
    ("consumer_registers: 232", "consumer_registers: 236",
     r"parameter 'consumer_registers' requires a multiple of 8 in \[24, 256\] \(setmaxnreg's "
     r"count\), got 236"),
    ("producer_registers: 40", "producer_registers: 16",
     r"parameter 'producer_registers' requires a multiple of 8 in \[24, 256\] \(setmaxnreg's "
     r"count\), got 16"),
    ("producer_registers: 40", "producer_registers: 240",
     "parameters 'producer_registers' and 'consumer_registers' require the producer's "
     r"below the consumers' \(it gives registers back to them\), got 240 and 232"),
])
def test_setmaxnreg_counts_the_ptx_isa_refuses_are_named_at_their_yaml_line(tmp_path, old, new,
                                                                            message):
    registry = _registry_with(tmp_path, old, new)
    where = rf"intrinsic wgmma_m64n128k16_f16f16_f32 \({tmp_path}/cuda_wgmma.yaml:\d+\): "
    with pytest.raises(EmitError, match=where + message):
        _two("wgmma_m64n128k16_f16f16_f32", 128, 128, 64, registry=registry)
    # The schedule, weighing two warpgroups for a GEMM that fills the SMs, says the same.
    with pytest.raises(ScheduleError, match=message):
        hopper_schedule(4096, 4096, 4096, dtypes.float16, registry)


# ---- exact under the emulation ------------------------------------------------------------

# (intrinsic, input dtype, M, N, K): M off the 128-row tile, N and K off theirs (f16's 130
# columns make B's rows 260 bytes: packed), bf16 with one row of the second warpgroup.
SIZES = [("wgmma_m64n128k16_f16f16_f32", "float16", 200, 130, 136),
         ("wgmma_m64n128k16_bf16bf16_f32", "bfloat16", 129, 128, 256),
         ("wgmma_m64n64k32_s8s8_s32", "int8", 130, 72, 200)]


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("name, dtype, m, n, k", SIZES)
def test_two_consumer_warpgroups_are_exact_under_the_emulation(name, dtype, m, n, k):
    kernel = _two(name, m, n, k)
    inputs = _inputs(dtype, m, n, k, seed=11)
    expected = _reference(inputs)
    for copies in COPY_MODES:
        for reverse in (False, True):
            actual = cuda.emulate(kernel, inputs, copies=copies, reverse=reverse)["C"]
            np.testing.assert_array_equal(actual, expected)


@needs_gxx
@pytest.mark.slow
def test_two_consumer_warpgroups_in_clusters_are_exact_under_the_emulation():
    # Clusters of 2 along N: the first block multicasts both of A's tiles, and each of the
    # 256 consumer threads of a block releases a stage in both blocks.
    kernel = _two("wgmma_m64n64k16_f16f16_f32", 130, 200, 96, cluster=2)
    assert "tz_mbarrier_init(&tz_empty[s], 512);" in kernel.source
    inputs = _inputs("float16", 130, 200, 96, seed=12)
    actual = cuda.emulate(kernel, inputs, copies="at_wait", reverse=True)["C"]
    np.testing.assert_array_equal(actual, _reference(inputs))


@needs_gxx
@pytest.mark.slow
def test_the_requantising_epilogue_of_two_warpgroups_is_exact_under_the_emulation():
    # Each warpgroup computes the epilogue of its own 64 rows, bounded by M = 130.
    func = matmul_requantised(130, 64, 70, Requantisation(zero_point=3, low=-100, high=120))
    registry = default_registry()
    gemm = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH).hopper.gemm
    assert gemm is not None and gemm.tiling.consumers == 1
    gemm = dataclasses.replace(gemm, tiling=dataclasses.replace(gemm.tiling, consumers=2))
    kernel = hopper_kernel(gemm, registry, func.name)
    rng = np.random.default_rng(13)
    inputs = {"A": rng.integers(-128, 128, (130, 64)).astype(np.int8),
              "B": rng.integers(-128, 128, (64, 70)).astype(np.int8),
              "Bias": rng.integers(-(1 << 16), 1 << 16, 70).astype(np.int32),
              "Scale": (rng.random(70) * 4e-3).astype(np.float32)}
    want = host.run(func, inputs)["narrowed"]
    # Saturated both ways, and in between: the epilogue's every branch is compared.
    assert want.min() == -100 and want.max() == 120 and len(np.unique(want)) > 100
    got = cuda.emulate(kernel, inputs, copies="at_issue", reverse=True)["narrowed"]
    np.testing.assert_array_equal(got, want)


# ---- injected protocol bugs, each reported by name ------------------------------------------

RELEASE = "if (kt > 0) tz_mbarrier_arrive(&tz_empty[(kt + 1) % 2]);"
# The producer (thread 256) and both warpgroups' 256 threads poll; the producer warpgroup's
# other 127 threads have finished.
DEADLOCK = (r"deadlock: 257 of 384 threads poll an mbarrier phase that never completes, 0 wait "
            r"at __syncthreads\(\), 127 finished")
# The reader: a thread of the second warpgroup (128-255).
SECOND = r"(12[89]|1[3-9]\d|2[0-4]\d|25[0-5])"
OVERWRITE = (r"race on shared tz_smem\[\d+\]: the bulk copy that thread \(256, 0, 0\) issues "
             rf"overwrites a stage still being read \(by a wgmma of thread \({SECOND}, 0, 0\) "
             r"not yet retired by wgmma.wait_group\)")


@pytest.fixture(scope="module")
def gemm() -> tuple[cuda.CudaKernel, dict[str, np.ndarray]]:
    """A 128 x 64 x 128 f16 GEMM of 8 k stages through 2 shared stages (one k step a stage),
    two consumer warpgroups, a single launch."""
    return _two(F16_N64, 128, 64, 128, steps=1), _inputs("float16", 128, 64, 128, seed=5)


def _caught(kernel: cuda.CudaKernel, inputs: dict, pattern: str, copies: str,
            reverse: bool = False) -> None:
    with pytest.raises(cuda.EmulationError, match=pattern):
        cuda.emulate(kernel, inputs, copies=copies, reverse=reverse)


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("copies", COPY_MODES)
def test_a_warpgroup_that_forgets_its_release_hangs_the_producer(gemm, copies):
    # The second warpgroup never arrives on the empty mbarriers: no phase of theirs
    # completes, the producer waits for the third k stage forever.
    kernel, inputs = gemm
    broken = _edited(kernel, RELEASE, RELEASE.replace("kt > 0", "kt > 0 && tz_group == 0"))
    _caught(broken, inputs, DEADLOCK, copies)


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("copies", COPY_MODES)
def test_a_warpgroup_releasing_before_its_wgmma_retires_is_overwritten(gemm, copies):
    # The second warpgroup arrives before its wait_group 1: once the first has released the
    # stage too, the producer refills it while the second's wgmma group still reads it.
    kernel, inputs = gemm
    broken = _edited(kernel, "tz_wgmma_wait_group<1>();\n      " + RELEASE,
                     RELEASE.replace("kt > 0", "kt > 0 && tz_group == 1")
                     + "\n      tz_wgmma_wait_group<1>();\n      "
                     + RELEASE.replace("kt > 0", "kt > 0 && tz_group == 0"))
    for reverse in (False, True):
        _caught(broken, inputs, OVERWRITE, copies, reverse)


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("copies", COPY_MODES)
def test_an_empty_mbarrier_expecting_one_warpgroup_is_reported(gemm, copies):
    # 128 arrivals a phase: the two warpgroups' release of a stage completes two phases, so
    # the producer's parity falls out of step and it waits for a phase only its own next
    # copies would let the consumers complete.
    kernel, inputs = gemm
    broken = _edited(kernel, "tz_mbarrier_init(&tz_empty[s], 256);",
                     "tz_mbarrier_init(&tz_empty[s], 128);")
    for reverse in (False, True):
        _caught(broken, inputs, DEADLOCK, copies, reverse)


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("old, new, pattern", [
    ("tz_setmaxnreg_inc<232>();", "tz_setmaxnreg_inc<236>();",
     r"setmaxnreg.inc.sync.aligned.u32 236: the register count must be a multiple of 8 in "
     r"\[24, 256\]"),
    ("tz_setmaxnreg_dec<40>();", "tz_setmaxnreg_dec<16>();",
     r"setmaxnreg.dec.sync.aligned.u32 16: the register count must be a multiple of 8"),
    ("tz_setmaxnreg_inc<232>();",
     "if (threadIdx.x % 128 < 32) tz_setmaxnreg_inc<232>(); else tz_setmaxnreg_inc<224>();",
     r"setmaxnreg.inc.sync.aligned.u32 224: the threads of warpgroup 0 disagree at its "
     r"setmaxnreg #0, which another thread executed as setmaxnreg.inc 232"),
    ("tz_setmaxnreg_dec<40>();", "if (threadIdx.x != 300) tz_setmaxnreg_dec<40>();",
     r"setmaxnreg: thread \(300, 0, 0\) executed 0 of the 1 setmaxnreg of its warpgroup 2 "
     r"\(.sync.aligned: the whole warpgroup executes each\)"),
])
def test_a_bad_setmaxnreg_is_reported_by_name(gemm, old, new, pattern):
    kernel, inputs = gemm
    _caught(_edited(kernel, old, new), inputs, pattern, "at_issue")


# ---- compiled for sm_90a ------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found")
@pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump not found (the sass extra)")
@pytest.mark.parametrize("dtype, opcode", [("float16", "HGMMA"), ("int8", "IGMMA")])
def test_two_warpgroups_compile_to_usetmaxreg_without_spills(dtype, opcode):
    intrinsic, tiling = hopper_schedule(4096, 4096, 4096, dtypes.dtype(dtype),
                                        default_registry())
    assert tiling.consumers == 2
    kernel = emit_gemm(intrinsic, default_registry(), 4096, 4096, 4096, tiling)
    (counts,) = [c for name, c in sass_opcodes(kernel, HOPPER_ARCH).items()
                 if "gemm_hopper_gemm" in name]
    # One USETMAXREG a warpgroup role (the producer's dealloc, the consumers' alloc).
    assert counts.get("USETMAXREG") == 2, counts
    (mix,) = [m for m in sass_mix(kernel, HOPPER_ARCH) if "gemm_hopper_gemm" in m.kernel]
    # The k loop, unrolled by the 4 stages: 4 wgmma steps each.
    assert (mix.scope, mix.mma) == ("k loop", 16)
    (usage,) = [r for r in resource_usage(kernel, HOPPER_ARCH) if "gemm_hopper_gemm" in r.kernel]
    # 384 threads, one block an SM: 65536 / 384 registers, in steps of 8.
    assert usage.registers == 168 and usage.spill_stores == usage.spill_loads == 0, usage
