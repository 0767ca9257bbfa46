"""The Hopper GEMM in thread-block clusters (targets/cuda/hopper.py, HopperTiling.cluster):
blocks along N sharing A's tile, which the first block's tensor copy multicasts to all, each
block's consumers releasing a stage to every block's producer. Exact under the emulation,
which runs a cluster's blocks together with a shared memory each (emulation/mma.h,
wgmma.h); a multicast mask missing a block, a block's transaction count short, and a
missing cluster barrier reported by name; compiled for sm_90a to a multicast UTMALDG and
the cluster barrier, without spills."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from intrinsics import default_registry
from ir import dtypes
from targets import cuda
from targets.cuda.compile import cuobjdump_path, nvcc_path, resource_usage, sass_opcodes
from targets.cuda.emit import Launch
from targets.cuda.emulate import COPY_MODES
from targets.cuda.hopper import HopperTiling
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_hopper import HOPPER_ARCH, hopper_gemm, hopper_view
from tensorize.runners.context import make_context
from tensorize.runners.cuda_hopper import run_hopper
from tensorize.runners.report import RunReport
from tests.targets.cuda.test_hopper import _inputs, _reference
from tests.tensorize.engine.suite import suite

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                               reason="no host C++ compiler to build the emulation")


def _kernel(dtype: str, m: int, n: int, k: int) -> cuda.CudaKernel:
    return hopper_gemm(m, n, k, dtypes.dtype(dtype), default_registry(), cluster=2)


def _gemm_launch(kernel: cuda.CudaKernel) -> Launch:
    (launch,) = [l for l in kernel.launches if l.tensorized]
    return launch


# ---- the kernel ----------------------------------------------------------------------------

def test_a_cluster_multicasts_a_and_releases_each_stage_to_every_block():
    kernel = _kernel("float16", 64, 256, 256)
    launch = _gemm_launch(kernel)
    assert (launch.grid, launch.block, launch.cluster) == ((2, 1, 1), (160, 1, 1), 2)
    body = kernel.source[kernel.source.index("__launch_bounds__(160) __cluster_dims__(2, 1, 1) "
                                             "gemm_hopper_gemm("):]
    # The empty mbarriers count both blocks' consumers; the set-up and the end are cluster
    # barriers (the mbarriers initialised before another block reaches them; no block
    # leaving while another may still arrive on its own).
    assert "tz_mbarrier_init(&tz_empty[s], 256);" in body
    assert body.count("tz_cluster_sync();") == 2 and "__syncthreads();" not in body
    # A's box by the first block, into both (mask 0b11); B's by each block for itself.
    for line in ("const unsigned tz_rank = tz_cluster_rank();",
                 "if (tz_rank == 0) tz_tensor_copy_2d_multicast(tz_tiles + stage * 24576 + "
                 "col * 8192, &tz_map_a, (kt * 1 + col) * 64, blockIdx.y * 64, &tz_full[stage], "
                 "3);",
                 "tz_tensor_copy_2d(tz_tiles + 8192 + stage * 24576 + col * 2048, &tz_map_b, "
                 "blockIdx.x * 128 + col % 2 * 64, (kt * 4 + col / 2) * 16, &tz_full[stage]);",
                 # Each block's full mbarrier still expects A's bytes and its own B's.
                 "tz_mbarrier_arrive_expect_tx(&tz_full[stage], 24576);",
                 "if (kt > 0) for (unsigned r = 0; r < 2; ++r) "
                 "tz_mbarrier_arrive_cluster(&tz_empty[(kt + 3) % 4], r);"):
        assert line in body, line


def test_a_cluster_rounds_n_tiles_up_to_whole_clusters():
    # 300 columns on 64-wide tiles are 5 tiles: 6 blocks, the last writing padding only.
    kernel = _kernel("bfloat16", 65, 300, 256)
    assert _gemm_launch(kernel).grid == (6, 2, 1)
    assert {b.name: b.shape for b in kernel.buffers}["C_padded"] == (128, 384)


def test_a_cluster_the_backend_cannot_launch_is_refused():
    with pytest.raises(cuda.EmitError, match="HopperTiling requires a cluster of 1 to 8 "
                                             "blocks, got 9"):
        HopperTiling(cluster=9)


def test_auto_tensorize_takes_the_cluster_option_for_sm_90a_and_says_so():
    registry = default_registry()
    done = auto_tensorize(suite()["gemm_fp16"], "cuda", registry=registry, arch=HOPPER_ARCH,
                          cluster=2)
    assert done.hopper is not None and done.hopper.gemm is not None
    assert done.hopper.gemm.tiling.cluster == 2
    assert done.hopper.gemm.describe().endswith(
        "; clusters of 2 blocks along N, A's tile multicast to each")
    with pytest.raises(TypeError, match=r"auto_tensorize\(cluster=...\) applies to arch "
                                        r"sm_90a, got arch None"):
        auto_tensorize(suite()["gemm_fp16"], "cuda", registry=registry, cluster=2)


@needs_gxx
@pytest.mark.slow
def test_a_run_of_a_cluster_gemm_reports_its_cluster_and_is_exact():
    registry = default_registry()
    ctx = make_context(registry, "cuda", arch=HOPPER_ARCH)
    gemm = hopper_view(suite()["gemm_fp16"], registry, cluster=2)
    inputs = _inputs("float16", 64, 64, 64)
    reference = {"C": _reference(inputs)}
    report = RunReport()
    outputs = run_hopper(ctx, gemm, "gemm_fp16", reference, inputs, report, [], False)
    np.testing.assert_array_equal(outputs["C"], reference["C"])
    (emit,) = [s for s in report.steps if s.name == "emit"]
    assert "gemm_fp16_gemm grid (2, 1, 1) block (160, 1, 1) cluster (2, 1, 1)" in emit.detail
    # The GEMM (B read in place, no packing launch), then the unpadding of C.
    assert [l["cluster"] for l in report.data["cuda"]["launches"]] == [2, 1]
    # Both copy modes ran, each exact.
    emulated = [s for s in report.steps if s.name == "emulate"]
    assert len(emulated) == 2 and all(s.ok for s in emulated), emulated


# ---- exact under the emulation -------------------------------------------------------------

@needs_gxx
@pytest.mark.slow
def test_a_cluster_gemm_is_exact_under_the_emulation():
    kernel = _kernel("float16", 64, 256, 128)
    inputs = _inputs("float16", 64, 256, 128)
    for copies in COPY_MODES:
        actual = cuda.emulate(kernel, inputs, copies=copies)["C"]
        np.testing.assert_array_equal(actual, _reference(inputs))


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("dtype, m, n, k", [
    ("int8", 100, 200, 200),        # A packed, both blocks' tiles partly past N
    ("bfloat16", 65, 300, 256),     # 5 tiles of 64: the sixth block all padding
    ("float8_e4m3", 128, 256, 96),  # three k steps a stage: the 32-byte swizzle
])
def test_cluster_gemms_are_exact_in_both_copy_modes_and_thread_orders(dtype, m, n, k):
    kernel = _kernel(dtype, m, n, k)
    inputs = _inputs(dtype, m, n, k)
    for copies in COPY_MODES:
        for reverse in (False, True):
            actual = cuda.emulate(kernel, inputs, copies=copies, reverse=reverse)["C"]
            np.testing.assert_array_equal(actual, _reference(inputs))


# ---- injected bugs, each reported by name --------------------------------------------------

@pytest.fixture(scope="module")
def gemm() -> tuple[cuda.CudaKernel, dict[str, np.ndarray]]:
    """A 64 x 256 x 256 f16 GEMM: one cluster of two 64 x 128 blocks, 4 stages."""
    return _kernel("float16", 64, 256, 256), _inputs("float16", 64, 256, 256, seed=5)


def _edited(kernel: cuda.CudaKernel, old: str, new: str) -> cuda.CudaKernel:
    assert kernel.source.count(old) == 1, old
    return dataclasses.replace(kernel, source=kernel.source.replace(old, new))


STUCK = (r"deadlock on mbarrier tz_smem\[98304\] of the cluster's block 1: its phase awaits "
         r"8192 transaction bytes that no tensor copy in flight will bring")


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("copies", COPY_MODES)
@pytest.mark.parametrize("reverse", [False, True])
def test_a_multicast_mask_missing_a_block_is_reported(gemm, copies, reverse):
    # The mask names the first block alone: the second's full mbarrier expects A's 8192
    # bytes, which never come.
    kernel, inputs = gemm
    broken = _edited(kernel, "&tz_full[stage], 3);", "&tz_full[stage], 1);")
    with pytest.raises(cuda.EmulationError, match=STUCK):
        cuda.emulate(broken, inputs, copies=copies, reverse=reverse)


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("copies", COPY_MODES)
@pytest.mark.parametrize("reverse, pattern", [
    # The first block's multicast has landed A's bytes on the second's phase: its own last
    # B box (of 8, 2048 bytes each) finds 16 bytes fewer announced than it brings.
    (False, r"mbarrier transaction count: the tensor copy of 2048 bytes that thread "
            r"\(128, 0, 0\) of the cluster's block 1 issues exceeds the 2032 bytes its "
            r"phase's arrive.expect_tx still announces"),
    # The second block's copy comes first, then the multicast: the phase ends with 16 bytes
    # more than announced, and never completes.
    (True, r"deadlock on mbarrier tz_smem\[98304\] of the cluster's block 1: its phase "
           r"received 16 transaction bytes more than its arrive.expect_tx announced"),
])
def test_a_blocks_transaction_count_short_of_the_multicast_is_reported(
        gemm, copies, reverse, pattern):
    kernel, inputs = gemm
    broken = _edited(kernel, "tz_mbarrier_arrive_expect_tx(&tz_full[stage], 24576);",
                     "tz_mbarrier_arrive_expect_tx(&tz_full[stage], "
                     "tz_rank == 0 ? 24576 : 24560);")
    with pytest.raises(cuda.EmulationError, match=pattern):
        cuda.emulate(broken, inputs, copies=copies, reverse=reverse)


@needs_gxx
@pytest.mark.slow
def test_a_multicast_before_the_cluster_barrier_is_reported(gemm):
    # Without the set-up's cluster barrier the first block's producer multicasts before the
    # second block has its shared memory (its threads run later).
    kernel, inputs = gemm
    init_end = "tz_mbarrier_init(&tz_empty[s], 256);\n    }\n  }\n  tz_cluster_sync();"
    broken = _edited(kernel, init_end, init_end.removesuffix("tz_cluster_sync();"))
    with pytest.raises(cuda.EmulationError, match=r"cp.async.bulk.tensor.multicast::cluster: "
                                                  r"the cluster's block 1 has no shared memory "
                                                  r"yet \(a cluster barrier missing"):
        cuda.emulate(broken, inputs, copies="at_issue")


@needs_gxx
@pytest.mark.slow
def test_a_static_shared_array_in_a_cluster_launch_is_refused():
    # One copy under the emulation, one per block on a GPU: not emulated.
    kernel = _kernel("int8", 64, 256, 64)
    pack = [l for l in kernel.launches if l.kernel.endswith("pack_b")][0]
    assert pack.grid[0] % 2 == 0
    launches = tuple(dataclasses.replace(l, cluster=2) if l is pack else l
                     for l in kernel.launches)
    with pytest.raises(cuda.EmulationError, match=r"shared tz_tile: a static __shared__ array "
                                                  r"in a cluster launch"):
        cuda.emulate(dataclasses.replace(kernel, launches=launches),
                     _inputs("int8", 64, 256, 64))


# ---- compiled for sm_90a -------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found")
@pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump not found (the sass extra)")
@pytest.mark.parametrize("dtype, wgmma, b_boxes", [("float16", "HGMMA", 8), ("int8", "IGMMA", 1)])
def test_a_cluster_gemm_compiles_to_a_multicast_tensor_copy_without_spills(dtype, wgmma,
                                                                           b_boxes):
    kernel = _kernel(dtype, 4096, 4096, 4096)
    (counts,) = [c for name, c in sass_opcodes(kernel, HOPPER_ARCH, modifiers=True).items()
                 if "gemm_hopper_gemm" in name]
    (plain,) = [c for name, c in sass_opcodes(kernel, HOPPER_ARCH).items()
                if "gemm_hopper_gemm" in name]
    # A multicast box of each of A's two 64-row tiles (two consumer warpgroups at 4096^3)
    # and B's plain boxes a stage (int8's packed B one, float16's read in place MN-major 4 k
    # steps x 2 panels); the cluster barrier at the set-up and the end; the remote arrivals
    # (a reduction on another block's mbarrier).
    assert counts.get("UTMALDG.2D.MULTICAST") == 2, counts
    assert counts.get("UTMALDG.2D") == b_boxes, counts
    assert counts.get("UCGABAR_ARV") == counts.get("UCGABAR_WAIT") == 2, counts
    assert counts.get("SYNCS.ARRIVE.TRANS64.RED.A1T0", 0) > 0, counts
    assert plain.get(wgmma, 0) == 16, plain
    for resources in resource_usage(kernel, HOPPER_ARCH):
        assert resources.spill_stores == resources.spill_loads == 0, resources
